//! `weir ctl`: the client of a running `weir run`'s control socket: `status` (the jobs, their
//! interfaces, states and uptimes), `counters` (each job's live counters), `reload` (the config
//! file read again), `rotate` (close the segments being written), `pause JOB` / `resume JOB`
//! and `rules` (the rule commands, passed to one job's rules), as tables or as the socket's JSON (`--json`).
//!
//! A socket that is missing, left by a process that is gone, not a socket, or not ours to open
//! is each said as such.

use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};
use weir_control::ControlError;

use crate::output::{self, Status};

/// Arguments of `weir ctl`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The control socket of the running `weir run` (its `[control] socket`).
    #[arg(long, value_name = "PATH", global = true)]
    socket: Option<PathBuf>,
    /// Print the reply as JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// The jobs: interface, store, state, uptime.
    Status,
    /// Each job's live counters (refreshed every second).
    Counters,
    /// The commands the process's socket answers.
    Commands,
    /// Read the config file again: jobs whose settings changed restart, the others go on.
    Reload,
    /// Close the segment being written (every job's, or one job's) at a block boundary; the
    /// next packet starts a new segment.
    Rotate {
        /// Only this job.
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
    },
    /// Stop recording a job (its segment is closed; capture, flows and rules go on, and every
    /// packet not recorded is counted as paused).
    Pause {
        /// The job.
        #[arg(value_name = "JOB")]
        job: String,
    },
    /// Record a paused job again.
    Resume {
        /// The job.
        #[arg(value_name = "JOB")]
        job: String,
    },
    /// The rules of a job: list, stats, add, del, reload, kernel (see `weir rules`).
    Rules {
        /// The job whose rules (needed when several jobs have rules).
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
        #[command(subcommand)]
        what: RulesWhat,
    },
}

#[derive(clap::Subcommand, Debug)]
enum RulesWhat {
    /// The rules in force, with their counters.
    List {
        /// Exact rules to list at most.
        #[arg(long, default_value_t = 1000)]
        limit: u64,
    },
    /// The engine's counters and each rule's.
    Stats,
    /// Add one rule, in the rule-file syntax (`'proto tcp dport 23 -> drop'`).
    Add {
        /// The rule line, quoted as one argument.
        #[arg(value_name = "RULE")]
        rule: String,
    },
    /// Remove a rule by id.
    Del {
        /// The rule's id.
        #[arg(value_name = "ID")]
        id: u32,
    },
    /// Read the job's rule file again and swap it in whole.
    Reload,
    /// The drop rules the kernel socket filter could run.
    Kernel,
}

/// The socket's reply to `req`, or why there is none, in words.
pub(crate) fn ask(socket: &Path, req: Value) -> Result<Map<String, Value>> {
    match std::fs::symlink_metadata(socket) {
        Err(e) if e.kind() == ErrorKind::NotFound => bail!(
            "{}: no such control socket (is `weir run` running, with this `[control] socket`?)",
            socket.display()
        ),
        Ok(m) if !m.file_type().is_socket() => {
            bail!(
                "{}: not a socket (give the `[control] socket` path)",
                socket.display()
            )
        }
        _ => {}
    }
    let reply = match weir_control::request(socket, &req) {
        Ok(r) => r,
        Err(ControlError::NotListening { source, .. })
            if source.kind() == ErrorKind::ConnectionRefused =>
        {
            bail!(
                "{}: stale control socket: the weir process that made it is gone",
                socket.display()
            )
        }
        Err(ControlError::NotListening { source, .. })
            if source.kind() == ErrorKind::PermissionDenied =>
        {
            bail!(
                "{}: permission denied (the socket is mode 0660: join its group, `[control] \
                 group`)",
                socket.display()
            )
        }
        Err(e) => return Err(e.into()),
    };
    if reply.get("ok") != Some(&Value::Bool(true)) {
        let msg = reply
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("the process refused the request");
        bail!("{msg}");
    }
    Ok(reply)
}

/// Renders a reply as text.
type Table = fn(&Map<String, Value>) -> String;

fn print(text: &str) -> Result<Status> {
    let mut out = output::stdout();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(Status::Clean)
}

fn num(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// Runs `weir ctl ...`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let Some(socket) = args.socket.as_deref() else {
        bail!("give the control socket with --socket PATH (the config's `[control] socket`)");
    };
    let (req, table): (Value, Table) = match &args.what {
        What::Status => (json!({"cmd": "status"}), status_table),
        What::Counters => (json!({"cmd": "counters"}), counters_table),
        What::Reload => (json!({"cmd": "config.reload"}), |_| {
            "config reload queued (the process says how it went on its stderr)\n".to_string()
        }),
        What::Commands => (json!({"cmd": "help"}), |r| {
            let mut s = String::new();
            for c in r
                .get("commands")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                s += &format!("{}\n", c.as_str().unwrap_or_default());
            }
            s
        }),
        What::Rotate { job } => {
            let mut req = json!({"cmd": "rotate"});
            if let Some(j) = job {
                req["job"] = json!(j);
            }
            (req, |r| {
                let mut s = String::new();
                for j in r
                    .get("rotated")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    s += &format!(
                        "{}: segment closed ({} segment(s) started so far; the next packet starts a new one)\n",
                        j.get("job").and_then(Value::as_str).unwrap_or("?"),
                        num(j, &["segments_started"])
                    );
                }
                s
            })
        }
        What::Pause { job } => (json!({"cmd": "pause", "job": job}), pause_text),
        What::Resume { job } => (json!({"cmd": "resume", "job": job}), pause_text),
        What::Rules { job, what } => {
            let mut req = match what {
                RulesWhat::List { limit } => json!({"cmd": "rules.list", "limit": limit}),
                RulesWhat::Stats => json!({"cmd": "rules.stats"}),
                RulesWhat::Add { rule } => json!({"cmd": "rules.add", "rule": rule}),
                RulesWhat::Del { id } => json!({"cmd": "rules.del", "id": id}),
                RulesWhat::Reload => json!({"cmd": "rules.reload"}),
                RulesWhat::Kernel => json!({"cmd": "rules.kernel"}),
            };
            if let Some(j) = job {
                req["job"] = json!(j);
            }
            (req, |r| format!("{:#}\n", Value::Object(r.clone())))
        }
    };
    let reply = ask(socket, req)?;
    if args.json {
        return print(&format!("{:#}\n", Value::Object(reply)));
    }
    print(&table(&reply))
}

fn pause_text(r: &Map<String, Value>) -> String {
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

fn status_table(r: &Map<String, Value>) -> String {
    let mut s = format!(
        "weir pid {}, config {}, up {:.1} s\n{:<12} {:<12} {:<9} {:>10}  {}\n",
        r.get("pid").and_then(Value::as_u64).unwrap_or(0),
        r.get("config").and_then(Value::as_str).unwrap_or("?"),
        r.get("uptime_s").and_then(Value::as_f64).unwrap_or(0.0),
        "JOB",
        "INTERFACE",
        "STATE",
        "UPTIME_S",
        "STORE"
    );
    for j in r
        .get("jobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let str_of = |k: &str| j.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
        s += &format!(
            "{:<12} {:<12} {:<9} {:>10.1}  {}{}\n",
            str_of("name"),
            str_of("interface"),
            if j.get("paused") == Some(&Value::Bool(true)) {
                "paused".to_string()
            } else {
                str_of("state")
            },
            j.get("uptime_s").and_then(Value::as_f64).unwrap_or(0.0),
            str_of("store"),
            j.get("error")
                .and_then(Value::as_str)
                .map(|e| format!("  (error: {e})"))
                .unwrap_or_default()
        );
    }
    s
}

fn counters_table(r: &Map<String, Value>) -> String {
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
        }
    }
    s
}
