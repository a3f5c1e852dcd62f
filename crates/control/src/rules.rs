//! The rule commands, for one [`Engine`]:
//!
//! | request | reply (besides `"ok": true`) |
//! |---|---|
//! | `{"cmd":"rules.list", "limit":N}` | `version`, `default`, `wild` and `exact` (each `{id, prio, line, rule, packets, bytes, passed, dropped, sliced, sampled_out}`, `rule` in the file syntax; at most `limit` exact rules, default 1000), `exact_total` |
//! | `{"cmd":"rules.stats"}` | `version`, `totals` (the engine's counters and `reconciles`), `exact` (`rules`, `memory_bytes` and their summed counters), `wild` (per rule counters) |
//! | `{"cmd":"rules.add", "rule":"LINE"}` | `id`, `version`: LINE is one rule in the rule-file syntax; without `id N` it gets the highest id plus one |
//! | `{"cmd":"rules.del", "id":N}` or `{"cmd":"rules.del", "exact":"tcp A:P B:P"}` | `id` (when the rule had one), `version` |
//! | `{"cmd":"rules.reload"}` | `version`, `rules`, `reloads`, `took_us`: the rule file read again and swapped in whole ([`Engine::reload_file`], the path SIGHUP takes: counted once in the engine's reloads) |
//! | `{"cmd":"rules.kernel", "limit":N}` | `expr`, `covered`, `exact`, `wild`, `skipped`, `unlisted`: the drop rules a socket filter could run ([`weir_rules::kernel_drops`]) |
//!
//! Every change makes one new rule-set version: a packet is decided under the old rules or
//! the new ones, never a mix.

use std::path::PathBuf;

use serde_json::{json, Map, Value};
use weir_rules::file::stats_json;
use weir_rules::{Engine, ListedRule, Match, Rule, RuleSet, Totals};

use crate::Commands;

type Reply = Result<Map<String, Value>, String>;

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The engine's totals as a JSON object, with `reconciles`.
pub fn totals_json(t: &Totals) -> Value {
    json!({
        "packets_in": t.packets_in, "bytes_in": t.bytes_in, "passed": t.passed,
        "dropped": t.dropped, "sliced": t.sliced, "sampled_out": t.sampled_out, "cut": t.cut,
        "cut_bytes": t.cut_bytes, "unmatched": t.unmatched, "learned": t.learned,
        "flow_evictions": t.flow_evictions, "scanned_bytes": t.scanned_bytes,
        "stream_resets": t.stream_resets, "reconciles": t.reconciles(),
    })
}

/// A listed rule as JSON: its counters, `id`, `prio`, `line`, `kind` and `rule` (its text).
pub fn listed_json(r: &ListedRule) -> Value {
    let mut m = obj(stats_json(&r.stats));
    m.insert(
        "id".into(),
        if r.has_id {
            json!(r.rule.id)
        } else {
            Value::Null
        },
    );
    m.insert("prio".into(), json!(r.rule.prio));
    m.insert("line".into(), json!(r.rule.line));
    m.insert(
        "kind".into(),
        json!(match r.rule.matcher {
            Match::Exact(_) => "exact",
            Match::Wild(_) => "wild",
        }),
    );
    // the line without its `id N` (the id has its own field and may be absent)
    let text = if r.has_id {
        let s = r.rule.to_string();
        s.split_once(' ')
            .and_then(|(_, rest)| rest.split_once(' '))
            .map_or(s.clone(), |(_, rest)| rest.to_string())
    } else {
        let mut rule = r.rule.clone();
        rule.id = 0;
        let s = rule.to_string();
        s.strip_prefix("id 0 ").unwrap_or(&s).to_string()
    };
    m.insert("rule".into(), json!(text));
    Value::Object(m)
}

fn limit(req: &Map<String, Value>, default: usize) -> Result<usize, String> {
    match req.get("limit") {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| "\"limit\" must be a non-negative number".into()),
    }
}

/// Parses one rule line; true when it gave no `id` (the engine picks one).
pub fn parse_rule_line(line: &str) -> Result<(Rule, bool), String> {
    if line.contains('\n') || line.contains('\r') {
        return Err("one rule line, without a line break".into());
    }
    let set = RuleSet::parse(line).map_err(|e| format!("column {}: {}", e.column, e.message))?;
    let defaults = RuleSet::default();
    if set.rules.len() != 1 || set.options != defaults.options {
        return Err(
            "expected one rule line (`MATCH... -> ACTION...`); `default` and `set` belong in the \
             rule file"
                .into(),
        );
    }
    // the id defaults to the line number: parsed as line 2, a rule without `id` changes id
    let second = RuleSet::parse(&format!("\n{line}"))
        .ok()
        .and_then(|s| s.rules.first().map(|r| r.id));
    let mut rule = set.rules.into_iter().next().ok_or("no rule")?;
    let auto = rule.id == 1 && second == Some(2);
    rule.line = 0;
    Ok((rule, auto))
}

/// Parses `PROTO A[:P] B[:P] [vlan N]` (with or without a leading `exact`).
pub fn parse_exact_key(text: &str) -> Result<weir_rules::ExactKey, String> {
    let text = text.trim();
    let text = text.strip_prefix("exact ").unwrap_or(text);
    let line = format!("exact {text} -> drop");
    let set = RuleSet::parse(&line).map_err(|e| {
        // columns of `text`, not of the line made around it
        format!(
            "column {}: {}",
            e.column.saturating_sub(6).max(1),
            e.message
        )
    })?;
    match set.rules.first().map(|r| &r.matcher) {
        Some(Match::Exact(k)) => Ok(*k),
        _ => Err("expected PROTO A[:PORT] B[:PORT] [vlan N]".into()),
    }
}

/// Registers the `rules.*` commands for `engine`; `rules.reload` reads `rules_file`.
pub fn register(c: &mut Commands, engine: Engine, rules_file: Option<PathBuf>) {
    let e = engine.clone();
    c.add("rules.list", move |req| -> Reply {
        let l = e.list(limit(req, 1000)?);
        Ok(obj(json!({
            "version": l.version,
            "default": if l.options.default_drop { "drop" } else { "pass" },
            "wild": l.wild.iter().map(listed_json).collect::<Vec<_>>(),
            "exact": l.exact.iter().map(listed_json).collect::<Vec<_>>(),
            "exact_total": l.exact_total,
        })))
    });
    let e = engine.clone();
    c.add("rules.stats", move |_| -> Reply {
        let s = e.stats();
        let (n, mem) = e.exact_size();
        let mut exact = obj(stats_json(&s.exact));
        exact.insert("rules".into(), json!(n));
        exact.insert("memory_bytes".into(), json!(mem));
        let wild: Vec<Value> = s
            .wild
            .iter()
            .map(|w| {
                let mut m = obj(stats_json(&w.stats));
                m.insert("id".into(), json!(w.id));
                m.insert("line".into(), json!(w.line));
                Value::Object(m)
            })
            .collect();
        Ok(obj(json!({
            "version": s.version,
            "totals": totals_json(&s.totals),
            "exact": exact,
            "wild": wild,
        })))
    });
    let e = engine.clone();
    c.add("rules.add", move |req| -> Reply {
        let line = req
            .get("rule")
            .and_then(Value::as_str)
            .ok_or("rules.add needs \"rule\": a rule line")?;
        let (rule, auto) = parse_rule_line(line)?;
        let (version, id) = e.add_rule(rule, auto).map_err(|e| e.to_string())?;
        Ok(obj(json!({"id": id, "version": version})))
    });
    let e = engine.clone();
    c.add("rules.del", move |req| -> Reply {
        match (req.get("id"), req.get("exact")) {
            (Some(id), None) => {
                let id = id
                    .as_u64()
                    .and_then(|i| u32::try_from(i).ok())
                    .ok_or("\"id\" must be a rule id (0-4294967295)")?;
                let version = e.del_rule(id).map_err(|e| e.to_string())?;
                Ok(obj(json!({"id": id, "version": version})))
            }
            (None, Some(k)) => {
                let k = k
                    .as_str()
                    .ok_or("\"exact\" must be a string: PROTO A[:PORT] B[:PORT] [vlan N]")?;
                let key = parse_exact_key(k)?;
                let (version, id) = e.del_key(&key).map_err(|e| e.to_string())?;
                Ok(obj(json!({"id": id, "version": version})))
            }
            _ => Err("rules.del needs \"id\" or \"exact\" (one of them)".into()),
        }
    });
    let e = engine.clone();
    c.add("rules.reload", move |_| -> Reply {
        let path = rules_file
            .as_ref()
            .ok_or("this process has no rule file to reload")?;
        // the path SIGHUP takes: counted once among the engine's reloads, with its time
        let version = e.reload_file(path).map_err(|err| err.to_string())?;
        let (wild, _) = e.wild_size();
        let (exact, _) = e.exact_size();
        let r = e.reload_stats();
        Ok(obj(json!({
            "version": version,
            "rules": wild + exact,
            "reloads": r.reloads,
            "took_us": r.last.map(|d| d.as_micros() as u64),
        })))
    });
    let e = engine;
    c.add("rules.kernel", move |req| -> Reply {
        let k = e.kernel_drops(limit(req, 64)?);
        Ok(obj(json!({
            "expr": k.expr,
            "covered": k.covered,
            "exact": k.exact,
            "wild": k.wild,
            "skipped": k.skipped.iter().map(|(id, why)| json!({"id": id, "why": why})).collect::<Vec<_>>(),
            "unlisted": k.unlisted,
        })))
    });
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn rule_lines_and_keys() {
        let (r, auto) = parse_rule_line("proto tcp dport 80 -> drop").unwrap();
        assert!(auto);
        assert_eq!(r.line, 0);
        let (r, auto) = parse_rule_line("id 1 proto tcp -> drop").unwrap();
        assert!(!auto);
        assert_eq!(r.id, 1);
        let (r, auto) =
            parse_rule_line("id 77 exact udp 10.0.0.1:53 10.0.0.2:999 -> pass").unwrap();
        assert!(!auto && r.id == 77);
        assert_eq!(
            parse_rule_line("proto tcp dport 8o -> drop").unwrap_err(),
            "column 17: expected a port or a range A-B, found `8o`"
        );
        assert!(parse_rule_line("default drop").is_err());
        assert!(parse_rule_line("a -> drop\nb -> drop").is_err());
        let k = parse_exact_key("tcp 10.0.0.2:80 10.0.0.1:1000").unwrap();
        assert_eq!(
            k,
            parse_exact_key("exact tcp 10.0.0.1:1000 10.0.0.2:80").unwrap()
        );
        assert_eq!(
            parse_exact_key("tcp 10.0.0.2:80 10.0.0.x:1").unwrap_err(),
            "column 17: expected an IP address, found `10.0.0.x`"
        );
    }

    /// SIGHUP's reload (`RulesFile::reload`) and the socket's `rules.reload` are one path:
    /// each reload, good or bad, is counted once in the one summary, whichever asked.
    #[test]
    fn both_reload_paths_count_once() {
        use weir_decode::LinkType;
        let dir = std::env::temp_dir().join(format!("weir-ctl-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.txt");
        std::fs::write(&path, "dport 80 -> drop\n").unwrap();
        let set = weir_rules::file::load(&path).unwrap();
        let engine = Engine::new(set, LinkType::ETHERNET, 65535).unwrap();
        let mut file = weir_rules::RulesFile::new(&path, engine.clone());
        let mut c = Commands::new();
        register(&mut c, engine.clone(), Some(path.clone()));
        let reload = |c: &mut Commands| c.answer(br#"{"cmd":"rules.reload"}"#);
        // the socket: version 2, one reload
        std::fs::write(&path, "dport 80 -> drop\ndport 81 -> drop\n").unwrap();
        let r = reload(&mut c);
        assert_eq!(
            (
                r["ok"].as_bool(),
                r["version"].as_u64(),
                r["rules"].as_u64()
            ),
            (Some(true), Some(2), Some(2)),
            "{r}"
        );
        assert_eq!(r["reloads"].as_u64(), Some(1));
        // SIGHUP's path: version 3, two reloads
        assert_eq!(file.reload().unwrap(), 3);
        assert_eq!(file.reloads(), (2, 0));
        // a bad file through the socket: refused, counted as failed, version stays
        std::fs::write(&path, "dport 8o -> drop\n").unwrap();
        let r = reload(&mut c);
        assert_eq!(r["ok"].as_bool(), Some(false), "{r}");
        assert!(
            r["error"]
                .as_str()
                .is_some_and(|e| e.contains("r.txt: line 1, column")),
            "{r}"
        );
        assert!(file.reload().is_err());
        assert_eq!(file.reloads(), (2, 2));
        assert_eq!(engine.version(), 3);
        let s = file.summary(0, true);
        assert!(
            s.starts_with("  rules (version 3, 2 reload(s), 2 failed): 0 in"),
            "{s}"
        );
        assert!(s.contains("; reload took "), "{s}");
        let j = file.json(0, true);
        assert_eq!(
            (j["reloads"].as_u64(), j["failed_reloads"].as_u64()),
            (Some(2), Some(2))
        );
        assert_eq!(j["reload_us"]["recent"].as_array().map(Vec::len), Some(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn malformed_requests_get_error_replies() {
        let mut c = Commands::new();
        c.add("x", |_| Ok(Map::new()));
        for bad in [
            &b"not json"[..],
            b"[1,2]",
            b"{}",
            b"{\"cmd\": 3}",
            b"{\"cmd\": \"nope\"}",
            b"\xff\xfe",
        ] {
            let r = c.answer(bad);
            assert_eq!(r["ok"], json!(false), "{r}");
            assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()));
        }
        assert_eq!(c.answer(b"{\"cmd\":\"x\"}"), json!({"ok": true}));
        assert_eq!(
            c.answer(b"{\"cmd\":\"help\"}"),
            json!({"ok": true, "commands": ["x"]})
        );
    }
}
