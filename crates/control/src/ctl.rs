//! The client side of the service commands, as `weir ctl` speaks them: a request to a running
//! `weir run` whose failure is said in words ([`ask`]: a socket that is missing, left by a
//! process that is gone, not a socket, or not ours to open), and each reply as the table a
//! person reads ([`status_table`], [`counters_table`], [`commands_text`]). [`CtlRequest`] is
//! one command: its request object and its reply as text ([`CtlRequest::answer`]).

use std::io::ErrorKind;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::client::{call, CallError, Request};
use crate::ControlError;

/// Why a `weir ctl` request got no reply.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Nothing at the path.
    #[error("{0}: no such control socket (is `weir run` running, with this `[control] socket`?)")]
    Missing(PathBuf),
    /// Something that is not a socket.
    #[error("{0}: not a socket (give the `[control] socket` path)")]
    NotSocket(PathBuf),
    /// A socket nobody listens on.
    #[error("{0}: stale control socket: the weir process that made it is gone")]
    Stale(PathBuf),
    /// A socket we may not open.
    #[error("{0}: permission denied (the socket is mode 0660: join its group, `[control] group`)")]
    Permission(PathBuf),
    /// Any other failure, or the process's refusal.
    #[error(transparent)]
    Call(#[from] CallError),
}

/// The socket's reply to `req`, or why there is none, in words.
pub fn ask(socket: &Path, req: &Value) -> Result<Map<String, Value>, CtlError> {
    let path = socket.to_path_buf();
    match std::fs::symlink_metadata(socket) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(CtlError::Missing(path)),
        Ok(m) if !m.file_type().is_socket() => return Err(CtlError::NotSocket(path)),
        _ => {}
    }
    call(socket, req).map_err(|e| match e {
        CallError::Control(ControlError::NotListening { source, .. })
            if source.kind() == ErrorKind::ConnectionRefused =>
        {
            CtlError::Stale(path)
        }
        CallError::Control(ControlError::NotListening { source, .. })
            if source.kind() == ErrorKind::PermissionDenied =>
        {
            CtlError::Permission(path)
        }
        e => CtlError::Call(e),
    })
}

/// One command of `weir ctl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CtlRequest {
    /// The jobs: interface, store, state, uptime.
    Status,
    /// Each job's live counters.
    Counters,
    /// The commands the socket answers.
    Commands,
    /// Read the config file again.
    Reload,
    /// Close the segment being written: every job's, or `job`'s.
    Rotate {
        /// Only this job.
        job: Option<String>,
    },
    /// Stop recording a job.
    Pause(String),
    /// Record a paused job again.
    Resume(String),
    /// Each job's (or `job`'s) `n` biggest open flows, by `by` (`bytes` or `packets`), and
    /// rules with most hits.
    Top {
        /// How many flows and rules per job.
        n: u64,
        /// `bytes` or `packets`.
        by: String,
        /// Only this job.
        job: Option<String>,
    },
    /// A rule command ([`Request`]), for `job`'s rules (needed when several jobs have rules).
    Rules {
        /// The job whose rules.
        job: Option<String>,
        /// The rule command.
        request: Request,
    },
}

impl CtlRequest {
    /// The request object.
    pub fn json(&self) -> Value {
        let (mut req, job) = match self {
            CtlRequest::Status => (json!({"cmd": "status"}), None),
            CtlRequest::Counters => (json!({"cmd": "counters"}), None),
            CtlRequest::Reload => (json!({"cmd": "config.reload"}), None),
            CtlRequest::Commands => (json!({"cmd": "help"}), None),
            CtlRequest::Rotate { job } => (json!({"cmd": "rotate"}), job.as_ref()),
            CtlRequest::Top { n, by, job } => {
                (json!({"cmd": "top", "n": n, "by": by}), job.as_ref())
            }
            CtlRequest::Pause(job) => (json!({"cmd": "pause", "job": job}), None),
            CtlRequest::Resume(job) => (json!({"cmd": "resume", "job": job}), None),
            CtlRequest::Rules { job, request } => (request.json(), job.as_ref()),
        };
        if let Some(j) = job {
            req["job"] = json!(j);
        }
        req
    }

    /// The reply `r` to this request as text: a table, lines, or (for the rule commands) the
    /// reply object as indented JSON.
    pub fn text(&self, r: &Map<String, Value>) -> String {
        match self {
            CtlRequest::Status => status_table(r),
            CtlRequest::Counters => counters_table(r),
            CtlRequest::Reload => reload_text(r),
            CtlRequest::Commands => commands_text(r),
            CtlRequest::Rotate { .. } => rotate_text(r),
            CtlRequest::Top { .. } => crate::top::top_text(&Value::Object(r.clone()))
                .trim_start()
                .to_string(),
            CtlRequest::Pause(_) | CtlRequest::Resume(_) => pause_text(r),
            CtlRequest::Rules { .. } => format!("{:#}\n", Value::Object(r.clone())),
        }
    }

    /// Asks `socket` ([`ask`]) and renders the reply: as indented JSON with `json`, else as
    /// [`CtlRequest::text`].
    pub fn answer(&self, socket: &Path, json: bool) -> Result<String, CtlError> {
        let reply = ask(socket, &self.json())?;
        Ok(if json {
            format!("{:#}\n", Value::Object(reply))
        } else {
            self.text(&reply)
        })
    }
}

/// The number at `path` in `v`, 0 when absent.
pub fn num(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The reply to `help`: one command a line.
pub fn commands_text(r: &Map<String, Value>) -> String {
    let commands = r.get("commands").and_then(Value::as_array);
    let names = commands
        .into_iter()
        .flatten()
        .map(|c| c.as_str().unwrap_or_default());
    names.map(|c| format!("{c}\n")).collect()
}

/// The reply to `rotate`: one line per job whose segment was closed.
pub fn rotate_text(r: &Map<String, Value>) -> String {
    let jobs = r.get("rotated").and_then(Value::as_array);
    jobs.into_iter()
        .flatten()
        .map(|j| {
            format!(
                "{}: segment closed ({} segment(s) started so far; the next packet starts a new \
                 one)\n",
                j.get("job").and_then(Value::as_str).unwrap_or("?"),
                num(j, &["segments_started"])
            )
        })
        .collect()
}

/// The reply to `config.reload`: what the reload said, one line each, and how it ended.
pub fn reload_text(r: &Map<String, Value>) -> String {
    if r.get("done") != Some(&Value::Bool(true)) {
        return "config reload queued; not done yet (the process says how it went on its \
                stderr)\n"
            .into();
    }
    let mut s = String::new();
    for m in r
        .get("said")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let job = m
            .get("job")
            .and_then(Value::as_str)
            .map(|j| format!("{j}: "))
            .unwrap_or_default();
        if let Some(w) = m.get("warning").and_then(Value::as_str) {
            s += &format!("warning: {job}{w}\n");
        } else if let Some(n) = m.get("notice").and_then(Value::as_str) {
            s += &format!("{job}{n}\n");
        }
    }
    let warnings = num(&Value::Object(r.clone()), &["warnings"]);
    s += &if warnings == 0 {
        "config reloaded\n".to_string()
    } else {
        format!(
            "config reloaded with {warnings} warning(s): what they name kept its old settings\n"
        )
    };
    s
}

/// The reply to `pause` and `resume`: the job's state and what pausing has not recorded.
pub fn pause_text(r: &Map<String, Value>) -> String {
    let paused = r.get("paused") == Some(&Value::Bool(true));
    format!(
        "{}: {}{} ({} packet(s) not recorded while paused so far)\n",
        r.get("job").and_then(Value::as_str).unwrap_or("?"),
        if paused { "paused" } else { "recording" },
        if r.get("changed") == Some(&Value::Bool(false)) {
            " already"
        } else {
            ""
        },
        r.get("paused_packets").and_then(Value::as_u64).unwrap_or(0)
    )
}

/// The reply to `status`: the process, then one line per job.
pub fn status_table(r: &Map<String, Value>) -> String {
    let mut s = format!(
        "weir pid {}, config {}, up {:.1} s\n{:<12} {:<12} {:<9} {:>10} {:>9}  {}\n",
        r.get("pid").and_then(Value::as_u64).unwrap_or(0),
        r.get("config").and_then(Value::as_str).unwrap_or("?"),
        r.get("uptime_s").and_then(Value::as_f64).unwrap_or(0.0),
        "JOB",
        "INTERFACE",
        "STATE",
        "UPTIME_S",
        "INDEX_LAG",
        "STORE"
    );
    let jobs = r.get("jobs").and_then(Value::as_array);
    for j in jobs.into_iter().flatten() {
        let str_of = |k: &str| j.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
        s += &format!(
            "{:<12} {:<12} {:<9} {:>10.1} {:>9}  {}{}\n",
            str_of("name"),
            str_of("interface"),
            if j.get("paused") == Some(&Value::Bool(true)) {
                "paused".to_string()
            } else {
                str_of("state")
            },
            j.get("uptime_s").and_then(Value::as_f64).unwrap_or(0.0),
            j.get("index_lag_s")
                .and_then(Value::as_f64)
                .map_or("-".to_string(), |l| format!("{l:.1} s")),
            str_of("store"),
            j.get("error")
                .and_then(Value::as_str)
                .map(|e| format!("  (error: {e})"))
                .unwrap_or_default()
        );
    }
    s
}

/// The reply to `counters`: one line per job.
pub fn counters_table(r: &Map<String, Value>) -> String {
    let mut s = format!(
        "{:<12} {:>12} {:>10} {:>12} {:>10} {:>12} {:>10} {:>12}\n",
        "JOB", "RECEIVED", "K_DROPS", "PUSHED", "BUF_DROPS", "WRITTEN", "WR_DROPS", "FLOW_PKTS"
    );
    if let Some(Value::Object(jobs)) = r.get("jobs") {
        for (name, c) in jobs {
            if c.is_null() {
                s += &format!("{name:<12} (no counters yet: the job has run less than a second)\n");
                continue;
            }
            s += &format!(
                "{:<12} {:>12} {:>10} {:>12} {:>10} {:>12} {:>10} {:>12}\n",
                name,
                num(c, &["capture", "received"]),
                num(c, &["capture", "kernel_drops"]),
                num(c, &["buffer", "pushed"]),
                num(c, &["buffer", "dropped_full"]) + num(c, &["buffer", "dropped_too_long"]),
                num(c, &["writer", "packets"]),
                num(c, &["writer", "dropped"]),
                c.get("flows")
                    .and_then(|f| f.get("packets"))
                    .and_then(Value::as_u64)
                    .map_or("-".to_string(), |p| p.to_string()),
            );
            s += &analyzer_lines(name, c);
        }
    }
    s
}

/// The `counters` lines of a job's HTTP and VoIP analyzers (none without them).
fn analyzer_lines(name: &str, c: &Value) -> String {
    let mut s = String::new();
    if let Some(h) = c.get("http").filter(|h| !h.is_null()) {
        s += &format!(
            "{name} http: {} transactions, {} TLS handshakes; gaps {} ({} bytes); evictions {}\n",
            num(h, &["http_records"]),
            num(h, &["tls_records"]),
            num(h, &["stream", "gaps"]),
            num(h, &["stream", "gap_bytes"]),
            num(h, &["flows_evicted"]) + num(h, &["pending_evictions"]),
        );
    }
    if let Some(v) = c.get("voip").filter(|v| !v.is_null()) {
        s += &format!(
            "{name} voip: {} SIP messages, {} calls, {} RTP streams; beyond the limits {} calls, \
             {} packets\n",
            num(v, &["sip_messages"]),
            num(v, &["calls"]),
            num(v, &["streams"]),
            num(v, &["calls_dropped"]),
            num(v, &["streams_dropped_packets"]),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each command's request object, as the socket's commands are named (`weir ctl`'s).
    #[test]
    fn requests() {
        let job = || Some("j".to_string());
        let cases = [
            (CtlRequest::Status, json!({"cmd": "status"})),
            (CtlRequest::Counters, json!({"cmd": "counters"})),
            (CtlRequest::Commands, json!({"cmd": "help"})),
            (CtlRequest::Reload, json!({"cmd": "config.reload"})),
            (CtlRequest::Rotate { job: None }, json!({"cmd": "rotate"})),
            (
                CtlRequest::Rotate { job: job() },
                json!({"cmd": "rotate", "job": "j"}),
            ),
            (
                CtlRequest::Pause("j".into()),
                json!({"cmd": "pause", "job": "j"}),
            ),
            (
                CtlRequest::Resume("j".into()),
                json!({"cmd": "resume", "job": "j"}),
            ),
            (
                CtlRequest::Top {
                    n: 5,
                    by: "packets".into(),
                    job: job(),
                },
                json!({"cmd": "top", "n": 5, "by": "packets", "job": "j"}),
            ),
            (
                CtlRequest::Rules {
                    job: None,
                    request: Request::List { limit: 7 },
                },
                json!({"cmd": "rules.list", "limit": 7}),
            ),
            (
                CtlRequest::Rules {
                    job: job(),
                    request: Request::DelId(3),
                },
                json!({"cmd": "rules.del", "id": 3, "job": "j"}),
            ),
        ];
        for (req, want) in cases {
            assert_eq!(req.json(), want, "{req:?}");
        }
    }

    /// Replies as text: the rule commands' as indented JSON, `rotate`'s and `help`'s as lines.
    #[test]
    fn replies() {
        let r = |v: Value| v.as_object().unwrap().clone();
        let rules = CtlRequest::Rules {
            job: None,
            request: Request::Stats,
        };
        assert_eq!(
            rules.text(&r(json!({"ok": true, "version": 2}))),
            "{\n  \"ok\": true,\n  \"version\": 2\n}\n"
        );
        assert_eq!(
            CtlRequest::Commands.text(&r(json!({"commands": ["status", "top"]}))),
            "status\ntop\n"
        );
        let missing = Path::new("/nonexistent/weir-ctl.sock");
        let e = CtlRequest::Status.answer(missing, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/nonexistent/weir-ctl.sock: no such control socket (is `weir run` running, with \
             this `[control] socket`?)"
        );
    }
}
