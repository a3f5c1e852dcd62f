//! `weir rules`: talk to a running weir's rules over its control socket (`list`, `stats`,
//! `add`, `del`, `reload`, `kernel`), and `check` a rule file offline.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use weir_control::client::{self, Request};
use weir_rules::check::Check;
use weir_rules::RuleSet;

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

fn print(text: &str) -> Result<Status> {
    let mut out = output::stdout();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(Status::Clean)
}

fn print_json(v: &Value) -> Result<Status> {
    print(&format!("{}\n", serde_json::to_string_pretty(v)?))
}

/// Runs `weir rules ...`: the request ([`weir_control::client`]), its reply as a table or JSON.
pub(crate) fn run(args: Args) -> Result<Status> {
    let (conn, req) = match args.what {
        What::Check { file, json } => return check(&file, json),
        What::List { conn, limit } => (conn, Request::List { limit }),
        What::Stats { conn } => (conn, Request::Stats),
        What::Add { conn, rule } => (conn, Request::Add(rule)),
        What::Del { conn, id, exact } => match (id, exact) {
            (Some(id), _) => (conn, Request::DelId(id)),
            (None, Some(k)) => (conn, Request::DelExact(k)),
            (None, None) => bail!("give a rule id or --exact CONVERSATION"),
        },
        What::Reload { conn } => (conn, Request::Reload),
        What::Kernel { conn } => (conn, Request::Kernel),
    };
    let reply = client::call(&conn.socket, &req.json());
    let reply = match &req {
        Request::Add(line) => reply.with_context(|| format!("rule `{line}`"))?,
        _ => reply?,
    };
    if conn.json {
        return print_json(&Value::Object(reply));
    }
    print(&req.text(&reply))
}

/// `weir rules check FILE` ([`weir_rules::check::Check`]).
fn check(file: &PathBuf, as_json: bool) -> Result<Status> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let set = RuleSet::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let c = Check::new(&set).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    if as_json {
        return print_json(&c.json(&file.display().to_string()));
    }
    print(&c.text(&file.display().to_string()))
}
