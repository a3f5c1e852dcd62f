//! `weir top --socket PATH`: a running `weir run` seen from its control socket, one frame a
//! second ([`weir_control::top::frame`]): rates per job, drops per stage, buffer fill, disk
//! rate, live streams and rules, then each job's biggest flows and busiest rules
//! ([`weir_control::top::top_text`]). On a terminal the screen is redrawn; `--once` prints one
//! frame (rates over one second) and ends, for scripts and pipes.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::output::{self, Status};
use weir_control::ctl::ask;

/// Arguments of `weir top`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The control socket of the running `weir run` (its `[control] socket`).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print one frame (rates over one second) and stop.
    #[arg(long)]
    once: bool,
    /// Flows and rules shown per job.
    #[arg(short = 'n', default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    n: u64,
}

/// Runs `weir top`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let Some(socket) = args.socket.as_deref() else {
        bail!("give the control socket with --socket PATH (the config's `[control] socket`)");
    };
    let sample = || -> Result<(Value, Value)> {
        Ok((
            Value::Object(ask(socket, &json!({"cmd": "status"}))?),
            Value::Object(ask(socket, &json!({"cmd": "counters"}))?),
        ))
    };
    let top = || -> Result<String> {
        let t = ask(socket, &json!({"cmd": "top", "n": args.n}))?;
        Ok(weir_control::top::top_text(&Value::Object(t)))
    };
    let tty = std::io::stdout().is_terminal();
    if !args.once && !tty {
        bail!("stdout is not a terminal: give --once for one frame");
    }
    let (_, mut prev) = sample()?;
    let stop = output::controls(false)?.stop;
    loop {
        // the counters are refreshed once a second
        std::thread::sleep(Duration::from_millis(1100));
        let (status, now) = sample()?;
        let frame = weir_control::top::frame(&status, &prev, &now) + &top()?;
        let mut out = output::stdout();
        if args.once {
            out.write_all(frame.as_bytes())?;
            out.flush()?;
            return Ok(Status::Clean);
        }
        out.write_all(format!("\x1b[H\x1b[2J{frame}").as_bytes())?;
        out.flush()?;
        prev = now;
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(Status::Clean);
        }
    }
}
