//! A rule set backed by its file, as the live commands run it (`--rules FILE`): loaded with
//! errors that name the file, the line and the column; reloaded whole (a file that does not
//! parse or compile keeps the running set and is counted); its counters as the closing summary
//! lines and as the `rules` object of `--stats-json`.

use std::path::{Path, PathBuf};

use crate::{Action, BuildError, Engine, ParseError, RuleSet, RuleStats};

/// A rule file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("cannot read the rule file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line does not parse.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and why.
        source: ParseError,
    },
    /// The set parses but does not compile (a `bpf` term libpcap refuses, an id used twice).
    #[error("{}: {source}", path.display())]
    Build {
        /// The file.
        path: PathBuf,
        /// Why.
        source: BuildError,
    },
}

/// Reads and parses a rule file.
pub fn load(path: &Path) -> Result<RuleSet, FileError> {
    let text = std::fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    RuleSet::parse(&text).map_err(|source| FileError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads and parses a rule file into the compact form a reload compiles.
pub(crate) fn load_prepared(path: &Path) -> Result<crate::parse::Prepared, FileError> {
    let text = std::fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    crate::parse::parse_prepared(&text).map_err(|source| FileError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Whether a rule set tags packets (any rule, learnt actions included).
pub fn tags_anything(set: &RuleSet) -> bool {
    fn tags(a: &Action) -> bool {
        a.tag.is_some() || a.learn.as_deref().is_some_and(tags)
    }
    set.rules.iter().any(|r| tags(&r.action))
}

/// An engine compiled from a file; its reloads are counted by the engine
/// ([`Engine::reload_stats`]), so a reload through the control socket counts as one too.
#[derive(Debug)]
pub struct RulesFile {
    path: PathBuf,
    engine: Engine,
}

/// How many wildcard rules a summary lists by name; the rest are counted (all are in the JSON).
pub const SUMMARY_RULES: usize = 50;

impl RulesFile {
    /// `engine`, compiled from `path`.
    pub fn new(path: &Path, engine: Engine) -> RulesFile {
        RulesFile {
            path: path.to_path_buf(),
            engine,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The engine (a handle: clones share the rules and counters).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Reads the file again and swaps the new set in whole (each packet is decided under one
    /// version); returns the new version. On error the running set stays and the failure is
    /// counted. The same path as the control socket's `rules.reload`
    /// ([`Engine::reload_file`]).
    pub fn reload(&mut self) -> Result<u64, FileError> {
        self.engine.reload_file(&self.path)
    }

    /// Reloads that took effect, and those that failed, whoever asked for them.
    pub fn reloads(&self) -> (u64, u64) {
        let r = self.engine.reload_stats();
        (r.reloads, r.failed)
    }

    /// The closing summary: the engine's totals (packets in are passed, dropped, sliced or
    /// sampled out), the `tagged` packets (and whether their tags were stored), then every
    /// wildcard rule that matched (at most [`SUMMARY_RULES`]) and the exact rules together.
    pub fn summary(&self, tagged: u64, tags_stored: bool) -> String {
        let s = self.engine.stats();
        let t = &s.totals;
        let r = self.engine.reload_stats();
        let mut out = format!(
            "  rules (version {}, {} reload(s), {} failed): {} in, {} passed, {} dropped ({} cut \
             off per flow), {} sliced, {} sampled out, {} matched no rule; {} tagged{}",
            s.version,
            r.reloads,
            r.failed,
            t.packets_in,
            t.passed,
            t.dropped,
            t.cut,
            t.sliced,
            t.sampled_out,
            t.unmatched,
            tagged,
            if tags_stored || tagged == 0 {
                ""
            } else {
                " (tags not stored)"
            }
        );
        if let (Some(last), Some(longest)) = (r.last, r.longest) {
            out += &format!(
                "; reload took {} ms (last), {} ms (longest)",
                last.as_millis(),
                longest.as_millis()
            );
        }
        let line = |what: String, r: &RuleStats| {
            format!(
                "\n    {what}: {} packets, {} bytes: {} passed, {} dropped, {} sliced, {} sampled \
                 out",
                r.packets, r.bytes, r.passed, r.dropped, r.sliced, r.sampled_out
            )
        };
        let matched: Vec<_> = s.wild.iter().filter(|w| w.stats.packets > 0).collect();
        for w in matched.iter().take(SUMMARY_RULES) {
            out += &line(format!("rule {} (line {})", w.id, w.line), &w.stats);
        }
        if matched.len() > SUMMARY_RULES {
            out += &format!(
                "\n    ... {} more rules matched (see --stats-json)",
                matched.len() - SUMMARY_RULES
            );
        }
        if s.exact_rules > 0 {
            out += &line(format!("{} exact rules", s.exact_rules), &s.exact);
        }
        out
    }

    /// Every counter as JSON (`--stats-json`'s `rules`).
    pub fn json(&self, tagged: u64, tags_stored: bool) -> serde_json::Value {
        let s = self.engine.stats();
        let t = &s.totals;
        let r = self.engine.reload_stats();
        let us = |d: Option<std::time::Duration>| d.map(|d| d.as_micros() as u64);
        serde_json::json!({
            "file": self.path.display().to_string(),
            "version": s.version,
            "reloads": r.reloads,
            "failed_reloads": r.failed,
            "reload_us": {"last": us(r.last), "longest": us(r.longest), "recent": r.recent_us},
            "tags_stored": tags_stored,
            "tagged": tagged,
            "totals": {
                "packets_in": t.packets_in, "bytes_in": t.bytes_in, "passed": t.passed,
                "dropped": t.dropped, "sliced": t.sliced, "sampled_out": t.sampled_out,
                "cut": t.cut, "cut_bytes": t.cut_bytes, "unmatched": t.unmatched,
                "learned": t.learned, "flow_evictions": t.flow_evictions,
                "scanned_bytes": t.scanned_bytes, "stream_resets": t.stream_resets,
            },
            "rules": s.wild.iter().map(|w| {
                let mut v = stats_json(&w.stats);
                v["id"] = w.id.into();
                v["line"] = w.line.into();
                v
            }).collect::<Vec<_>>(),
            "exact_rules": s.exact_rules,
            "exact": stats_json(&s.exact),
        })
    }
}

/// One rule's counters as a JSON object.
pub fn stats_json(r: &RuleStats) -> serde_json::Value {
    serde_json::json!({
        "packets": r.packets, "bytes": r.bytes, "passed": r.passed,
        "dropped": r.dropped, "sliced": r.sliced, "sampled_out": r.sampled_out,
    })
}

#[cfg(test)]
mod test {
    use super::*;
    use weir_packet::LinkType;

    #[test]
    fn a_bad_reload_keeps_the_running_set_and_is_counted() {
        let dir = std::env::temp_dir().join(format!("weir-rules-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.txt");
        std::fs::write(&path, "dport 80 -> drop\n").unwrap();
        let set = load(&path).unwrap();
        assert!(!tags_anything(&set));
        let engine = Engine::new(set, LinkType::ETHERNET, 65535).unwrap();
        let mut f = RulesFile::new(&path, engine);
        std::fs::write(&path, "dport 80 -> tag web pass\n").unwrap();
        assert_eq!(f.reload().unwrap(), 2);
        assert!(tags_anything(&load(&path).unwrap()));
        std::fs::write(&path, "dport 8o -> drop\n").unwrap();
        let e = f.reload().unwrap_err().to_string();
        assert!(e.contains("r.txt: line 1, column"), "{e}");
        assert_eq!((f.engine().version(), f.reloads()), (2, (1, 1)));
        let j = f.json(0, true);
        assert_eq!(
            (j["version"].as_u64(), j["failed_reloads"].as_u64()),
            (Some(2), Some(1))
        );
        assert!(f
            .summary(0, true)
            .starts_with("  rules (version 2, 1 reload(s), 1 failed): 0 in"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
