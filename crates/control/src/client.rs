//! The client side of the rule commands, as `weir rules` speaks them: a request whose refusal is
//! an error ([`call`]), the requests themselves ([`Request`]), and each reply as the text table
//! a person reads ([`Request::text`]); `--json` prints the reply object as it came.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::ControlError;

/// A request that did not get an `ok` reply.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The socket could not be reached, or its reply was not an object.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The process refused the request (its `error`).
    #[error("{0}")]
    Refused(String),
}

/// Sends `request` to the socket `path` ([`crate::request`]) and returns the reply object; an
/// `ok: false` reply is [`CallError::Refused`] with the process's message.
pub fn call(path: impl AsRef<Path>, request: &Value) -> Result<Map<String, Value>, CallError> {
    let reply = crate::request(path, request)?;
    if reply.get("ok") != Some(&Value::Bool(true)) {
        let msg = reply
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("the process refused the request");
        return Err(CallError::Refused(msg.to_string()));
    }
    Ok(reply)
}

/// One of the rule commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// The rules in force with their counters, at most `limit` exact rules.
    List {
        /// Exact rules to list at most.
        limit: u64,
    },
    /// The engine's counters and each rule's.
    Stats,
    /// Add one rule line.
    Add(String),
    /// Remove a rule by id.
    DelId(u32),
    /// Remove an exact rule by its conversation (`PROTO A[:PORT] B[:PORT] [vlan N]`).
    DelExact(String),
    /// Read the rule file again.
    Reload,
    /// The drop rules the kernel's socket filter could run.
    Kernel,
}

impl Request {
    /// The request object.
    pub fn json(&self) -> Value {
        match self {
            Request::List { limit } => json!({"cmd": "rules.list", "limit": limit}),
            Request::Stats => json!({"cmd": "rules.stats"}),
            Request::Add(line) => json!({"cmd": "rules.add", "rule": line}),
            Request::DelId(id) => json!({"cmd": "rules.del", "id": id}),
            Request::DelExact(k) => json!({"cmd": "rules.del", "exact": k}),
            Request::Reload => json!({"cmd": "rules.reload"}),
            Request::Kernel => json!({"cmd": "rules.kernel"}),
        }
    }

    /// The reply `r` to this request as text (lines ending in newlines).
    pub fn text(&self, r: &Map<String, Value>) -> String {
        let v = Value::Object(r.clone());
        match self {
            Request::List { .. } => list_text(r),
            Request::Stats => stats_text(r),
            Request::Add(_) => format!(
                "added rule {} (version {})\n",
                num(&v, "id"),
                num(&v, "version")
            ),
            Request::DelId(_) | Request::DelExact(_) => {
                let id = v
                    .get("id")
                    .and_then(Value::as_u64)
                    .map_or(String::new(), |i| format!(" {i}"));
                format!("removed rule{id} (version {})\n", num(&v, "version"))
            }
            Request::Reload => format!(
                "reloaded {} rules (version {})\n",
                num(&v, "rules"),
                num(&v, "version")
            ),
            Request::Kernel => kernel_text(&v),
        }
    }
}

fn num(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn counters_header() -> String {
    format!(
        "{:>10} {:>6} {:>12} {:>14} {:>12} {:>12} {:>10} {:>10}  RULE\n",
        "ID", "PRIO", "PACKETS", "BYTES", "PASSED", "DROPPED", "SLICED", "SAMPLED"
    )
}

fn counters_row(r: &Value) -> String {
    let id = r
        .get("id")
        .and_then(Value::as_u64)
        .map_or("-".to_string(), |i| i.to_string());
    format!(
        "{id:>10} {:>6} {:>12} {:>14} {:>12} {:>12} {:>10} {:>10}  {}\n",
        r.get("prio").and_then(Value::as_i64).unwrap_or(0),
        num(r, "packets"),
        num(r, "bytes"),
        num(r, "passed"),
        num(r, "dropped"),
        num(r, "sliced"),
        num(r, "sampled_out"),
        r.get("rule").and_then(Value::as_str).unwrap_or("")
    )
}

/// `rules.list`: the version and default, then one row per rule (exact ones first).
fn list_text(r: &Map<String, Value>) -> String {
    let empty = Vec::new();
    let wild = r.get("wild").and_then(Value::as_array).unwrap_or(&empty);
    let exact = r.get("exact").and_then(Value::as_array).unwrap_or(&empty);
    let total = r.get("exact_total").and_then(Value::as_u64).unwrap_or(0);
    let mut s = format!(
        "version {}, default {}: {} wildcard rules, {} exact rules{}\n",
        r.get("version").and_then(Value::as_u64).unwrap_or(0),
        r.get("default").and_then(Value::as_str).unwrap_or("pass"),
        wild.len(),
        total,
        if (exact.len() as u64) < total {
            format!(" (the first {} listed)", exact.len())
        } else {
            String::new()
        }
    );
    s += &counters_header();
    for x in exact.iter().chain(wild) {
        s += &counters_row(x);
    }
    s
}

/// `rules.stats`: the totals, the exact table's, then one row per wildcard rule.
fn stats_text(r: &Map<String, Value>) -> String {
    let t = r.get("totals").cloned().unwrap_or(Value::Null);
    let e = r.get("exact").cloned().unwrap_or(Value::Null);
    let mut s = format!(
        "version {}\npackets in {} ({} bytes): passed {}, dropped {}, sliced {}, sampled out {}\n\
         unmatched {}, cut by cutoffs {} ({} bytes), flows learnt {}, flow evictions {}, \
         payload bytes scanned {}, stream resets {}\n\
         exact rules {} ({} bytes of table): packets {}, passed {}, dropped {}, sliced {}, sampled out {}\n",
        num(&Value::Object(r.clone()), "version"),
        num(&t, "packets_in"),
        num(&t, "bytes_in"),
        num(&t, "passed"),
        num(&t, "dropped"),
        num(&t, "sliced"),
        num(&t, "sampled_out"),
        num(&t, "unmatched"),
        num(&t, "cut"),
        num(&t, "cut_bytes"),
        num(&t, "learned"),
        num(&t, "flow_evictions"),
        num(&t, "scanned_bytes"),
        num(&t, "stream_resets"),
        num(&e, "rules"),
        num(&e, "memory_bytes"),
        num(&e, "packets"),
        num(&e, "passed"),
        num(&e, "dropped"),
        num(&e, "sliced"),
        num(&e, "sampled_out"),
    );
    s += &counters_header();
    for w in r
        .get("wild")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut w = w.clone();
        let line = num(&w, "line");
        if let Some(m) = w.as_object_mut() {
            m.insert("rule".into(), json!(format!("(line {line})")));
        }
        s += &counters_row(&w);
    }
    s
}

/// `rules.kernel`: how many drop rules the socket filter could run, the others and why, and
/// the expression.
fn kernel_text(r: &Value) -> String {
    let mut s = format!(
        "{} exact and {} wildcard drop rules can run in the kernel\n",
        num(r, "exact"),
        num(r, "wild")
    );
    for k in r
        .get("skipped")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        s += &format!(
            "rule {} stays in the engine: {}\n",
            num(k, "id"),
            k.get("why").and_then(Value::as_str).unwrap_or("")
        );
    }
    if let Some(e) = r.get("expr").and_then(Value::as_str) {
        s += &format!("expression: {e}\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-made replies read as the tables `weir rules` prints.
    #[test]
    fn replies_as_text() {
        let r = json!({"ok": true, "version": 3, "default": "drop", "exact_total": 2,
            "exact": [{"packets": 5, "bytes": 300, "passed": 5, "rule": "exact tcp ..."}],
            "wild": [{"id": 7, "prio": -1, "packets": 1, "dropped": 1, "rule": "any -> drop"}]});
        let text = Request::List { limit: 1 }.text(r.as_object().unwrap());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "version 3, default drop: 1 wildcard rules, 2 exact rules (the first 1 listed)"
        );
        assert_eq!(lines.len(), 4);
        assert!(lines[2].trim_start().starts_with("- "), "{}", lines[2]);
        assert!(
            lines[3].trim_start().starts_with("7     -1 "),
            "{}",
            lines[3]
        );
        assert!(lines[3].ends_with("  any -> drop"), "{}", lines[3]);
        let r = json!({"ok": true, "version": 4});
        let m = r.as_object().unwrap();
        assert_eq!(
            Request::DelExact("tcp a b".into()).text(m),
            "removed rule (version 4)\n"
        );
        assert_eq!(
            Request::DelId(9).json(),
            json!({"cmd": "rules.del", "id": 9})
        );
    }

    /// A socket nobody listens on is an error that names it.
    #[test]
    fn a_missing_socket_is_named() {
        let e = call("/nonexistent/weir.sock", &Request::Stats.json()).unwrap_err();
        assert!(matches!(e, CallError::Control(_)), "{e}");
        assert!(e.to_string().contains("/nonexistent/weir.sock"), "{e}");
    }
}
