//! `weir rules`: talk to a running weir's rules over its control socket (`list`, `stats`,
//! `add`, `del`, `reload`, `kernel`), and `check` a rule file offline.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};
use weir_packet::LinkType;
use weir_rules::{Engine, Match, RuleSet, Verdict};

use crate::output::{self, Status};

/// Arguments of `weir rules`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

/// The control socket, and the output format.
#[derive(clap::Args, Debug)]
struct Conn {
    /// The control socket of the running weir (its `--control PATH`).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Print the reply as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// The rules in force, with their counters.
    List {
        #[command(flatten)]
        conn: Conn,
        /// Exact rules to list at most (a table may hold millions).
        #[arg(long, default_value_t = 1000)]
        limit: u64,
    },
    /// The engine's counters and each rule's.
    Stats {
        #[command(flatten)]
        conn: Conn,
    },
    /// Add one rule, in the rule-file syntax (`'proto tcp dport 23 -> drop'`).
    Add {
        #[command(flatten)]
        conn: Conn,
        /// The rule line, quoted as one argument.
        #[arg(value_name = "RULE")]
        rule: String,
    },
    /// Remove a rule by id, or an exact rule by its conversation (`--exact 'tcp A:P B:P'`).
    Del {
        #[command(flatten)]
        conn: Conn,
        /// The rule's id.
        #[arg(
            value_name = "ID",
            required_unless_present = "exact",
            conflicts_with = "exact"
        )]
        id: Option<u32>,
        /// The conversation of an exact rule: `PROTO A[:PORT] B[:PORT] [vlan N]`.
        #[arg(long, value_name = "CONVERSATION")]
        exact: Option<String>,
    },
    /// Read the process's rule file again and swap it in whole.
    Reload {
        #[command(flatten)]
        conn: Conn,
    },
    /// The drop rules the kernel socket filter could run, as a libpcap expression.
    Kernel {
        #[command(flatten)]
        conn: Conn,
    },
    /// Parse a rule file and report: rules by kind and action, memory of the exact table,
    /// errors with their line and column.
    Check {
        /// The rule file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn ask(conn: &Conn, req: Value) -> Result<Map<String, Value>> {
    let reply = weir_control::request(&conn.socket, &req)?;
    if reply.get("ok") != Some(&Value::Bool(true)) {
        let msg = reply
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("the process refused the request");
        bail!("{msg}");
    }
    Ok(reply)
}

fn num(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn print(text: &str) -> Result<Status> {
    let mut out = output::stdout();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(Status::Clean)
}

fn print_json(v: &Value) -> Result<Status> {
    print(&format!("{}\n", serde_json::to_string_pretty(v)?))
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

/// Runs `weir rules ...`.
pub(crate) fn run(args: Args) -> Result<Status> {
    match args.what {
        What::List { conn, limit } => {
            let r = ask(&conn, json!({"cmd": "rules.list", "limit": limit}))?;
            if conn.json {
                return print_json(&Value::Object(r));
            }
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
            print(&s)
        }
        What::Stats { conn } => {
            let r = ask(&conn, json!({"cmd": "rules.stats"}))?;
            if conn.json {
                return print_json(&Value::Object(r));
            }
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
            print(&s)
        }
        What::Add { conn, rule } => {
            let line = rule;
            let r = ask(&conn, json!({"cmd": "rules.add", "rule": line}))
                .with_context(|| format!("rule `{line}`"))?;
            if conn.json {
                return print_json(&Value::Object(r));
            }
            print(&format!(
                "added rule {} (version {})\n",
                num(&Value::Object(r.clone()), "id"),
                num(&Value::Object(r), "version")
            ))
        }
        What::Del { conn, id, exact } => {
            let req = match (id, exact) {
                (Some(id), _) => json!({"cmd": "rules.del", "id": id}),
                (None, Some(k)) => json!({"cmd": "rules.del", "exact": k}),
                (None, None) => bail!("give a rule id or --exact CONVERSATION"),
            };
            let r = Value::Object(ask(&conn, req)?);
            if conn.json {
                return print_json(&r);
            }
            let id = r
                .get("id")
                .and_then(Value::as_u64)
                .map_or(String::new(), |i| format!(" {i}"));
            print(&format!(
                "removed rule{id} (version {})\n",
                num(&r, "version")
            ))
        }
        What::Reload { conn } => {
            let r = Value::Object(ask(&conn, json!({"cmd": "rules.reload"}))?);
            if conn.json {
                return print_json(&r);
            }
            print(&format!(
                "reloaded {} rules (version {})\n",
                num(&r, "rules"),
                num(&r, "version")
            ))
        }
        What::Kernel { conn } => {
            let r = Value::Object(ask(&conn, json!({"cmd": "rules.kernel"}))?);
            if conn.json {
                return print_json(&r);
            }
            let mut s = format!(
                "{} exact and {} wildcard drop rules can run in the kernel\n",
                num(&r, "exact"),
                num(&r, "wild")
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
            print(&s)
        }
        What::Check { file, json } => check(&file, json),
    }
}

/// `weir rules check FILE`.
fn check(file: &PathBuf, as_json: bool) -> Result<Status> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let set = RuleSet::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let (mut exact, mut wild, mut payload, mut bytes, mut bpf) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut actions: std::collections::BTreeMap<&str, u64> = Default::default();
    for r in &set.rules {
        match &r.matcher {
            Match::Exact(_) => exact += 1,
            Match::Wild(m) => {
                wild += 1;
                payload += u64::from(!m.payload.is_empty());
                bytes += u64::from(!m.bytes.is_empty());
                bpf += u64::from(m.bpf.is_some());
            }
        }
        let a = &r.action;
        let verdict = match a.verdict {
            Some(Verdict::Pass) => "pass",
            Some(Verdict::Drop) => "drop",
            Some(Verdict::Slice(_)) => "slice",
            Some(Verdict::Sample(_)) => "sample",
            Some(Verdict::Cutoff { .. }) => "cutoff",
            None if a.learn.is_some() => "learn",
            None => "no verdict",
        };
        *actions.entry(verdict).or_default() += 1;
        if a.tag.is_some() {
            *actions.entry("tag").or_default() += 1;
        }
        if a.learn.is_some() && a.verdict.is_some() {
            *actions.entry("learn").or_default() += 1;
        }
    }
    let engine = Engine::new(set.clone(), LinkType::ETHERNET, 262_144)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let (_, exact_mem) = engine.exact_size();
    let (_, tuples) = engine.wild_size();
    let kernel = engine.kernel_drops(64);
    let report = json!({
        "file": file.display().to_string(),
        "rules": set.rules.len(),
        "exact": exact,
        "wild": wild,
        "wild_with_payload": payload,
        "wild_with_bytes": bytes,
        "wild_with_bpf": bpf,
        "actions": actions,
        "default": if set.options.default_drop { "drop" } else { "pass" },
        "exact_table_bytes": exact_mem,
        "tuples": tuples,
        "pattern_bytes": engine.pattern_memory_bytes(),
        "kernel_exact": kernel.exact,
        "kernel_wild": kernel.wild,
    });
    if as_json {
        return print_json(&report);
    }
    let acts: Vec<String> = actions.iter().map(|(k, v)| format!("{k} {v}")).collect();
    print(&format!(
        "{}: {} rules: {exact} exact, {wild} wildcard ({payload} with payload patterns, {bytes} \
         with byte matches, {bpf} with BPF) in {tuples} tuples; default {}\n\
         actions: {}\n\
         exact table: {} ({exact_mem} bytes); payload automaton: {} bytes\n\
         kernel: {} exact and {} wildcard drop rules could run in the socket filter\n",
        file.display(),
        set.rules.len(),
        if set.options.default_drop {
            "drop"
        } else {
            "pass"
        },
        acts.join(", "),
        output::human_bytes(exact_mem as u64),
        engine.pattern_memory_bytes(),
        kernel.exact,
        kernel.wild,
    ))
}
