//! The rules of a job (`--rules FILE` on the command line, `rules = FILE` in a config): the
//! file loaded and compiled for the job's link type, reloaded whole when the caller asks (the
//! CLI on SIGHUP), its control socket, and its counters for the summary and the statistics file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use weir_packet::LinkType;
use weir_rules::{Engine, RuleSet, RulesFile};

use crate::{Event, SensorError};

/// The rules a job applies: a rule file and, optionally, the control socket through which
/// `weir rules add|del|list|stats` reach them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RulesConfig {
    /// The rule file (see crates/rules/RULES.md).
    pub path: PathBuf,
    /// The control socket to serve while the job runs (mode 0660, removed at the end).
    pub control: Option<PathBuf>,
}

/// Reads and parses a rule file; errors name the file, the line and the column.
pub fn load(path: &Path) -> Result<RuleSet, SensorError> {
    Ok(weir_rules::file::load(path)?)
}

/// Compiles `set` (read from `path`) for live capture on interfaces of type `link`; an error
/// names the rule file.
pub fn compile(
    set: RuleSet,
    link: LinkType,
    snaplen: u32,
    path: &Path,
) -> Result<Engine, SensorError> {
    Engine::new(set, link, snaplen).map_err(|e| SensorError::Rules {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// The engine for live capture on `interfaces`: compiled for the first one's link type (a
/// pipeline with rules refuses interfaces of mixed link types).
pub fn live_engine(
    interfaces: &[String],
    snaplen: u32,
    set: RuleSet,
    path: &Path,
) -> Result<Engine, SensorError> {
    let first = interfaces.first().ok_or(SensorError::NoInterface)?;
    let link = weir_capture::link_type(first)?;
    compile(set, link, snaplen, path)
}

/// Serves the control socket `path` for `engine` (whose rules come from `rules_file`) while the
/// returned server lives: dropping it stops its thread and removes the socket.
pub fn serve_control(
    path: &Path,
    engine: &Engine,
    rules_file: Option<PathBuf>,
) -> Result<weir_control::Server, SensorError> {
    weir_control::Server::start(path, engine.clone(), rules_file).map_err(|source| {
        SensorError::Control {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// The rules of a running job: the file's engine, reloaded on request, and whether the job's
/// output stores the packets' tags (pcapng) or only counts them.
#[derive(Debug)]
pub struct LiveRules {
    file: RulesFile,
    tags_stored: bool,
}

impl LiveRules {
    /// Takes over `engine` (compiled from `path`). Says once (`events`) when the rules tag
    /// packets (`set_tags`) but the output cannot store tags (`why_not` names the output).
    pub fn new(
        path: &Path,
        engine: Engine,
        tags_stored: bool,
        set_tags: bool,
        why_not: &str,
        events: &mut dyn FnMut(Event),
    ) -> LiveRules {
        if set_tags && !tags_stored {
            events(Event::Warning(format!(
                "{why_not} cannot store tags: tagged packets are kept and counted, their tags \
                 are not stored"
            )));
        }
        LiveRules {
            file: RulesFile::new(path, engine),
            tags_stored,
        }
    }

    /// Whether a set parsed from a file tags anything (for [`LiveRules::new`]).
    pub fn set_tags(set: &RuleSet) -> bool {
        weir_rules::file::tags_anything(set)
    }

    /// The engine (a handle: clones share the rules and counters).
    pub fn engine(&self) -> &Engine {
        self.file.engine()
    }

    /// Reloads the file if `reload` was set since the last call (and clears it): the new set is
    /// swapped in whole, or the running set kept; says which.
    pub fn poll(&mut self, reload: &AtomicBool, events: &mut dyn FnMut(Event)) {
        if reload.swap(false, Ordering::Relaxed) {
            events(self.reload());
        }
    }

    /// Reloads the file now ([`weir_rules::RulesFile::reload`]) and says how it went.
    pub fn reload(&mut self) -> Event {
        match self.file.reload() {
            Ok(v) => {
                let (wild, _) = self.file.engine().wild_size();
                let (exact, _) = self.file.engine().exact_size();
                Event::Notice(format!(
                    "rules reloaded from {}: version {v} ({wild} wildcard, {exact} exact)",
                    self.file.path().display()
                ))
            }
            Err(e) => Event::Warning(format!(
                "rules not reloaded ({e}); keeping version {}",
                self.file.engine().version()
            )),
        }
    }

    /// The summary lines ([`weir_rules::RulesFile::summary`]), given the feed's totals.
    pub fn summary(&self, feed: &weir_capture::FeedTotals) -> String {
        self.file.summary(feed.tagged, self.tags_stored)
    }

    /// Every counter as JSON, for a statistics file.
    pub fn json(&self, feed: &weir_capture::FeedTotals) -> serde_json::Value {
        self.file.json(feed.tagged, self.tags_stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A reload swaps the new file in (version 2, its rule counted), a broken file keeps the
    /// running version and says so; the summary counts one of each.
    #[test]
    fn reload_swaps_or_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "r.rules", "proto udp -> drop\n");
        let set = load(&path).unwrap();
        let engine = compile(set, LinkType::ETHERNET, 65535, &path).unwrap();
        let mut events = Vec::new();
        let mut rules = LiveRules::new(&path, engine, false, false, "x", &mut |e| events.push(e));
        assert!(events.is_empty());
        let flag = AtomicBool::new(false);
        rules.poll(&flag, &mut |e| events.push(e));
        assert!(events.is_empty(), "no reload asked");
        write(
            dir.path(),
            "r.rules",
            "proto udp -> drop\nproto tcp -> drop\n",
        );
        flag.store(true, Ordering::Relaxed);
        rules.poll(&flag, &mut |e| events.push(e));
        assert!(!flag.load(Ordering::Relaxed));
        assert_eq!(
            events.pop(),
            Some(Event::Notice(format!(
                "rules reloaded from {}: version 2 (2 wildcard, 0 exact)",
                path.display()
            )))
        );
        write(dir.path(), "r.rules", "this is no rule\n");
        match rules.reload() {
            Event::Warning(w) => {
                assert!(w.starts_with("rules not reloaded ("), "{w}");
                assert!(w.ends_with("; keeping version 2"), "{w}");
            }
            e => panic!("{e:?}"),
        }
        let s = rules.summary(&weir_capture::FeedTotals::default());
        assert!(s.contains("(version 2, 1 reload(s), 1 failed)"), "{s}");
    }

    /// A tagging rule set on an output that cannot store tags is said once; a compile error
    /// names the file.
    #[test]
    fn tags_warning_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "t.rules", "proto udp -> tag dns pass\n");
        let set = load(&path).unwrap();
        assert!(LiveRules::set_tags(&set));
        let engine = compile(set, LinkType::ETHERNET, 65535, &path).unwrap();
        let mut events = Vec::new();
        LiveRules::new(&path, engine, false, true, "the output", &mut |e| {
            events.push(e)
        });
        assert_eq!(
            events,
            [Event::Warning(
                "the output cannot store tags: tagged packets are kept and counted, their tags \
                 are not stored"
                    .into()
            )]
        );
        let bad = write(dir.path(), "b.rules", "bpf \"not a filter ((\" -> drop\n");
        let e = load(&bad)
            .and_then(|set| compile(set, LinkType::ETHERNET, 65535, &bad))
            .unwrap_err();
        assert!(e.to_string().contains("b.rules"), "{e}");
    }
}
