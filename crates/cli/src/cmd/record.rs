//! `weir record`: capture live traffic (or import capture files) into a store of fixed-size
//! segment files, at the speed of the disk, with a status line, a statistics file and a final
//! summary in which every dropped packet is counted at the stage that dropped it.
//!
//! The options become a [`weir_sensor::record::RecordConfig`] and the job runs there (threads,
//! store, flow meter, rules, statistics file: see [`weir_sensor::record`]); this module prints
//! what it says, its status line (on a terminal) and its report. SIGINT/SIGTERM stop it (capture
//! first, then the recorder writes everything already in the buffer), SIGHUP reloads `--rules`.
//!
//! With `--rules FILE` every capture thread (or the import thread) decides each packet after
//! the filter expression: dropped, kept whole or cut, and tagged; pcapng segments store the tag
//! as the packet's comment (`weir-tag=TAG`, tshark's `frame.comment`), classic pcap ones cannot
//! (said once, counted). The rules' counters close the summary and are in `--stats-json` under
//! `rules`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use weir_sensor::live::SourceConfig;
use weir_sensor::record::RecordConfig;
use weir_sensor::Event;
use weir_store::{Format, Sizes};

use crate::args::{self, FlowArgs, RulesArgs};
use crate::output::{self, Status};

/// Arguments of `weir record`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("files", |a| a.help(
    "Import this capture file instead of capturing live (a lossless copy into the store); \
     repeat to import several",
)))]
pub(crate) struct Args {
    #[command(flatten)]
    source: args::Source,
    /// Store directory (created if needed; reopened after a crash, its segments repaired).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    dir: PathBuf,
    /// Segment file format.
    #[arg(long, value_enum, default_value_t = Format::Pcapng)]
    format: Format,
    /// Segment size in MiB (1 to 1048576).
    #[arg(long, value_name = "MIB", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20),
          allow_negative_numbers = true)]
    segment_mib: u64,
    /// Delete the oldest segments while the store holds more than this many MiB (at least
    /// --segment-mib).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 40),
          allow_negative_numbers = true)]
    max_mib: Option<u64>,
    /// Delete segments whose last packet is older than this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = args::seconds,
          allow_negative_numbers = true)]
    max_age: Option<f64>,
    /// Bytes per disk write, in MiB (1 to 1024; a segment's worth at most).
    #[arg(long, value_name = "MIB", default_value_t = 4,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024),
          allow_negative_numbers = true)]
    write_mib: usize,
    /// Do not index the segments (see `weir extract`).
    #[arg(long)]
    no_index: bool,
    /// Index chunk size in KiB, 4 to 1048576 (smaller: finer extraction, larger index).
    #[arg(long, value_name = "KIB", default_value_t = weir_index::DEFAULT_CHUNK / 1024,
          value_parser = clap::value_parser!(u32).range(4..=1 << 20),
          allow_negative_numbers = true)]
    index_chunk_kib: u32,
    /// Write every counter as JSON to FILE, every second and at the end.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Also meter flows from the same buffer (see `weir flows` for the outputs).
    #[arg(long)]
    flows: bool,
    #[command(flatten)]
    flow: FlowArgs,
    #[command(flatten)]
    http: weir_sensor::args::HttpBesideArgs,
    #[command(flatten)]
    voip: weir_sensor::args::VoipBesideArgs,
    #[command(flatten)]
    rules: RulesArgs,
    #[command(flatten)]
    metrics: weir_sensor::args::MetricsArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// The store's sizes, as given.
    fn sizes(&self) -> Sizes {
        Sizes {
            segment_mib: self.segment_mib,
            write_mib: self.write_mib as u64,
            max_mib: self.max_mib,
            index_chunk_kib: (!self.no_index).then_some(self.index_chunk_kib),
        }
    }

    /// Usage checks clap cannot express, against what was given (`m`).
    pub(crate) fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        self.source.live.check()?;
        let importing = !self.source.inputs.files.is_empty();
        match (importing, !self.source.is_live()) {
            (true, false) => return Err("-i and -r: record live or import files, not both".into()),
            (false, true) => {
                return Err("give interfaces with -i, or files to import with -r".into())
            }
            _ => {}
        }
        if importing {
            if let Some(flag) = args::first_given(m, args::LIVE_ONLY) {
                return Err(format!(
                    "{flag} is for live capture (-i); -r imports files as they are"
                ));
            }
            if !self.expr.words.is_empty() {
                return Err(
                    "a filter expression applies to live capture; filter files with \
                            `weir read` first"
                        .into(),
                );
            }
        }
        if args::given(m, "write_mib") && self.write_mib as u64 > self.segment_mib {
            return Err(format!(
                "--write-mib {} is larger than a segment (--segment-mib {})",
                self.write_mib, self.segment_mib
            ));
        }
        self.sizes().check(&self.dir).map_err(|e| e.in_options())?;
        if !self.flows {
            if let Some(flag) = args::first_given(m, FlowArgs::IDS) {
                return Err(format!("{flag} configures --flows; give --flows too"));
            }
        }
        Ok(())
    }
}

impl Args {
    /// The job these options describe.
    fn config(&self) -> Result<RecordConfig> {
        weir_sensor::args::check_outputs(&self.http, &self.voip, &self.source.inputs.files)
            .map_err(anyhow::Error::msg)?;
        let source = if self.source.inputs.files.is_empty() {
            SourceConfig::Live(weir_capture::PipelineConfig {
                kernel_rules: !self.rules.no_kernel_rules,
                ..self.source.live.pipeline(&self.expr.joined(), 1, 0, 512)?
            })
        } else {
            SourceConfig::Files {
                files: self.source.inputs.files.clone(),
                buffer_bytes: self.source.live.buffer_mib.unwrap_or(512) << 20,
            }
        };
        // with rules, the flow records carry the packets' tags
        let tags = self.rules.rules.is_some();
        let flows = self.flows.then(|| self.flow.config(tags)).transpose()?;
        Ok(RecordConfig {
            source,
            dir: self.dir.clone(),
            format: self.format,
            sizes: self.sizes(),
            max_age_ns: self.max_age.map(|s| (s * 1e9) as u64),
            duration: self.source.live.duration.map(Duration::from_secs_f64),
            stats_json: self.stats_json.clone(),
            flows,
            http: self.http.beside().map_err(anyhow::Error::msg)?,
            voip: self.voip.beside().map_err(anyhow::Error::msg)?,
            rules: self.rules.config(),
            streams: Vec::new(),
        })
    }
}

/// Runs `weir record` ([`weir_sensor::record::run`]), printing what it says, then its report.
pub(crate) fn run(args: Args) -> Result<Status> {
    let cfg = args.config()?;
    let mut controls = output::controls(cfg.rules.is_some())?;
    let serving = args.metrics.start(&mut |s| eprintln!("weir: {s}"))?;
    controls.metrics = serving.as_ref().map(|s| s.board.clone());
    let tty = std::io::stderr().is_terminal();
    let mut report = weir_sensor::record::run(&cfg, &controls, &mut |e| match e {
        Event::Progress(p) if tty => eprint!("\r\x1b[2K{p}"),
        e => output::event(e),
    })?;
    if tty {
        eprintln!();
    }
    if let Some(f) = report.flows.take() {
        eprint!("{}", f.report.summary());
        if let Some(e) = f.error {
            return Err(e.into());
        }
    }
    eprint!("{}", report.text(&args.dir, None));
    if let Some(e) = report.analyzer_error() {
        anyhow::bail!("{e}");
    }
    if let Some(e) = report.capture_error {
        return Err(e.into());
    }
    Ok(if report.damaged() {
        Status::Damaged
    } else {
        Status::Clean
    })
}
