//! `weir ctl`: the client of a running `weir run`'s control socket: `status` (the jobs, their
//! interfaces, states and uptimes), `counters` (each job's live counters), `top` (biggest flows,
//! busiest rules), `reload` (the config
//! file read again), `rotate` (close the segments being written), `pause JOB` / `resume JOB`
//! and `rules` (the rule commands, passed to one job's rules), as tables
//! ([`weir_control::ctl::CtlRequest`]) or as the socket's JSON (`--json`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Result};
use weir_control::client::Request;
use weir_control::ctl::CtlRequest;

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
    /// Each job's biggest open flows (over the last interval and since they started) and its
    /// rules with most hits over the last interval.
    Top {
        /// How many flows and rules per job.
        #[arg(short = 'n', default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
        n: u64,
        /// Rank flows by bytes or by packets.
        #[arg(long, default_value = "bytes", value_parser = ["bytes", "packets"])]
        by: String,
        /// Only this job.
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
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

/// Runs `weir ctl ...`: the request ([`CtlRequest`]), its reply as a table or JSON.
pub(crate) fn run(args: Args) -> Result<Status> {
    let Some(socket) = args.socket.as_deref() else {
        bail!("give the control socket with --socket PATH (the config's `[control] socket`)");
    };
    let req = match args.what {
        What::Status => CtlRequest::Status,
        What::Counters => CtlRequest::Counters,
        What::Reload => CtlRequest::Reload,
        What::Commands => CtlRequest::Commands,
        What::Rotate { job } => CtlRequest::Rotate { job },
        What::Top { n, by, job } => CtlRequest::Top { n, by, job },
        What::Pause { job } => CtlRequest::Pause(job),
        What::Resume { job } => CtlRequest::Resume(job),
        What::Rules { job, what } => CtlRequest::Rules {
            job,
            request: match what {
                RulesWhat::List { limit } => Request::List { limit },
                RulesWhat::Stats => Request::Stats,
                RulesWhat::Add { rule } => Request::Add(rule),
                RulesWhat::Del { id } => Request::DelId(id),
                RulesWhat::Reload => Request::Reload,
                RulesWhat::Kernel => Request::Kernel,
            },
        },
    };
    let text = req.answer(socket, args.json)?;
    let mut out = output::stdout();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(Status::Clean)
}
