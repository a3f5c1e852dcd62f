//! `weir voip (-r FILE | -i IF) [-w CALLS.jsonl] [--streams STREAMS.jsonl] [EXPR]`: one JSON
//! line per SIP Call-ID (call times, final status, post-dial delay, duration, MOS of its worst
//! stream) and one per RTP stream (RFC 3550 loss and jitter, RTCP reports, E-model MOS),
//! through weir-voip's analyzer. From files the packets come from the shared offline loop (BPF
//! filter, damage handling); live, from the capture pipeline ([`weir_sensor::voip::run_live`]:
//! SIGINT/SIGTERM end it and every call and stream is written then). Without `--streams` the
//! stream records go to the calls' output, so nothing found is left out; each record says its
//! `type`. A summary ends the run on stderr. `--plot DIR` charts each call's streams' jitter
//! and loss over time ([`weir_voip::plot`]).

use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use weir_export::KafkaLines;
use weir_filter::FilterSet;
use weir_pcap::{Interface, Packet};
use weir_sensor::read::Visitor;
use weir_sensor::voip::{line, VoipLiveConfig, VoipOutputs};
use weir_voip::{Analyzer, Config, Event, Stats};

use crate::args;
use crate::input::read_filtered;
use crate::output::{self, Status};

/// Arguments of `weir voip`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    source: args::Source,
    /// Write the call records as JSON lines to OUT (`-` for stdout, the default).
    #[arg(short = 'w', long = "write", value_name = "OUT")]
    out: Option<PathBuf>,
    /// Write the RTP stream records to FILE (`-` for stdout when -w names a file) instead of
    /// beside the calls.
    #[arg(long, value_name = "FILE")]
    streams: Option<PathBuf>,
    /// Most SIP Call-IDs tracked (at least 1); later ones are counted and ignored.
    #[arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000),
          allow_negative_numbers = true)]
    max_calls: u64,
    /// Most RTP streams tracked (at least 1); packets of later ones are counted and ignored.
    #[arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000),
          allow_negative_numbers = true)]
    max_streams: u64,
    /// A call that is over (BYE, CANCEL, final error) is written once this many seconds pass
    /// with none of its packets (late RTP).
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = args::seconds,
          allow_negative_numbers = true)]
    call_linger: f64,
    /// A call (or heuristic RTP stream) with no packet for this many seconds is written as it
    /// stands.
    #[arg(long, value_name = "SECONDS", default_value_t = 300.0, value_parser = args::seconds,
          allow_negative_numbers = true)]
    call_timeout: f64,
    /// Draw each call's jitter and loss over time (SVG, with the numbers as CSV) into this
    /// directory (created if missing); live, each call's chart when it is written.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// The charts' interval: loss and jitter are sampled every this many seconds of the
    /// packets' time.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, value_parser = args::seconds,
          allow_negative_numbers = true, requires = "plot")]
    plot_interval: f64,
    #[command(flatten)]
    kafka: weir_export::KafkaLogArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express, against what was given (`m`).
    pub(crate) fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        self.source.check(m, "analyze")?;
        self.kafka.check(m)
    }

    fn analyzer(&self) -> Config {
        Config {
            max_calls: self.max_calls as usize,
            max_streams: self.max_streams as usize,
            linger_ns: (self.call_linger * 1e9) as u64,
            call_timeout_ns: (self.call_timeout * 1e9) as u64,
            timeline_ns: if self.plot.is_some() {
                ((self.plot_interval * 1e9) as u64).max(1)
            } else {
                0
            },
            ..Config::default()
        }
    }
}

/// Runs `weir voip`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let no_w = if args.kafka.kafka.is_some() {
        "/dev/null"
    } else {
        "-"
    };
    let calls_path = args.out.clone().unwrap_or_else(|| PathBuf::from(no_w));
    if let Some(s) = &args.streams {
        if output::same_output(s, &calls_path) {
            bail!(
                "--streams and -w both name {}: leave --streams out to write both to one place",
                s.display()
            );
        }
    }
    if args.source.is_live() {
        return run_live(args, calls_path);
    }
    // the expression and the inputs are checked before any output is created
    FilterSet::new(&args.expr.joined())?;
    output::check_inputs(&args.source.inputs.files, Some(&calls_path))?;
    if let Some(s) = &args.streams {
        output::check_inputs(&args.source.inputs.files, Some(s))?;
    }
    let plot = match &args.plot {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("--plot: cannot create {}", dir.display()))?;
            Some(weir_voip::plot::Plotter::new(dir))
        }
        None => None,
    };
    let cfg = args.analyzer();
    let kafka = args.kafka.open()?;
    let mut feed = Feed {
        kafka: kafka.as_ref().map(|k| k.lines(weir_export::LogKind::Voip)),
        plot,
        analyzer: Analyzer::new(cfg),
        calls: BufWriter::with_capacity(1 << 16, output::create(&calls_path)?),
        streams: match &args.streams {
            Some(p) => Some(BufWriter::with_capacity(1 << 16, output::create(p)?)),
            None => None,
        },
    };
    let status = read_filtered(&args.source.inputs.files, args.expr.joined(), &mut feed)?;
    let Feed {
        analyzer,
        mut calls,
        mut streams,
        mut plot,
        kafka: mut lines,
    } = feed;
    let mut error: Option<anyhow::Error> = None;
    let stats = analyzer.finish(&mut |e| {
        if error.is_none() {
            let outs = (streams.as_mut(), plot.as_mut(), lines.as_mut());
            error = write(&mut calls, outs, &e).err();
        }
    });
    if let Some(e) = error {
        return Err(e);
    }
    calls.into_inner().map_err(|e| e.into_error())?.commit()?;
    if let Some(s) = streams {
        s.into_inner().map_err(|e| e.into_error())?.commit()?;
    }
    summary(&stats);
    if let (Some(p), Some(dir)) = (&plot, &args.plot) {
        eprintln!("weir: {} charts in {}", p.written(), dir.display());
    }
    if let Some(k) = kafka {
        let (line, lost) = k.end();
        eprintln!("weir: {line}");
        lost?;
    }
    Ok(status)
}

/// `weir voip -i`: the live job, then its summary.
fn run_live(args: Args, calls_path: PathBuf) -> Result<Status> {
    let cfg = VoipLiveConfig {
        pipeline: args.source.live.pipeline(&args.expr.joined(), 1, 0, 64)?,
        analyzer: args.analyzer(),
        outputs: VoipOutputs {
            calls: calls_path,
            streams: args.streams.clone(),
            kafka: args.kafka.output().map_err(anyhow::Error::msg)?,
            plot: args.plot.clone(),
        },
        duration: args.source.live.duration.map(Duration::from_secs_f64),
    };
    let controls = output::controls(false)?;
    let report = weir_sensor::voip::run_live(&cfg, &controls, &mut output::event)?;
    summary(&report.end.stats);
    if let Some(dir) = &args.plot {
        eprintln!("weir: {} charts in {}", report.end.charts, dir.display());
    }
    eprintln!(
        "{}",
        output::live_summary(&report.live.totals, &report.live.buffer)
    );
    if let Some((k, s)) = &report.kafka {
        eprintln!("weir: {}", k.summary(s));
        k.check(s)?;
    }
    if let Some(e) = report.end.error {
        return Err(e.into());
    }
    if let Some(e) = report.capture_error {
        return Err(e.into());
    }
    Ok(Status::Clean)
}

/// The analyzer's counters on stderr (and the bounds reached, when they were).
pub(crate) fn summary(s: &Stats) {
    eprintln!(
        "weir: {} sip call-ids ({} messages, {} over tcp, {} unparsable); {} rtp streams \
         ({} from sdp, {} by heuristic; {} candidates not steady); {} rtp packets, {} rtcp \
         packets ({} report blocks matched); {} packets",
        s.calls,
        s.sip_messages,
        s.sip_tcp_messages,
        s.sip_errors,
        s.streams,
        s.sdp_streams,
        s.heuristic_streams,
        s.candidates_discarded,
        s.rtp_packets,
        s.rtcp_packets,
        s.rtcp_reports,
        s.packets
    );
    if s.calls_dropped + s.streams_dropped_packets + s.tcp_bytes_dropped > 0 {
        eprintln!(
            "weir: bounds: {} call-ids ignored (--max-calls), {} rtp packets of untracked \
             streams (--max-streams), {} sip tcp bytes dropped (gaps or overflow)",
            s.calls_dropped, s.streams_dropped_packets, s.tcp_bytes_dropped
        );
    }
}

type Out = BufWriter<output::Output>;

/// The other outputs of a record: the streams' file, the charts, Kafka.
type Others<'a> = (
    Option<&'a mut Out>,
    Option<&'a mut weir_voip::plot::Plotter>,
    Option<&'a mut KafkaLines>,
);

/// Writes one record: streams to `streams` when given, else beside the calls; charts it;
/// sends it to Kafka.
fn write(calls: &mut Out, (streams, plot, kafka): Others<'_>, e: &Event) -> Result<()> {
    if let Some(p) = plot {
        p.event(e)?;
    }
    if let Some(k) = kafka {
        weir_sensor::voip::event_line(k, e)?;
    }
    match e {
        Event::Stream(r) => line(streams.unwrap_or(calls), r)?,
        Event::Call(r) => line(calls, r)?,
    }
    Ok(())
}

/// The analyzer and its outputs: finished calls are written as the file is read.
struct Feed {
    analyzer: Analyzer,
    calls: Out,
    streams: Option<Out>,
    plot: Option<weir_voip::plot::Plotter>,
    kafka: Option<KafkaLines>,
}

impl Visitor for Feed {
    type Error = anyhow::Error;

    fn packet(&mut self, _interfaces: &[Interface], packet: &Packet<'_>) -> Result<()> {
        self.analyzer
            .packet(packet.meta.ts_ns, packet.link, packet.data);
        if self.analyzer.has_ready() {
            let mut error: Option<anyhow::Error> = None;
            let (calls, mut streams) = (&mut self.calls, self.streams.as_mut());
            let (mut plot, mut kafka) = (self.plot.as_mut(), self.kafka.as_mut());
            self.analyzer.drain(&mut |e| {
                if error.is_none() {
                    let outs = (
                        streams.as_deref_mut(),
                        plot.as_deref_mut(),
                        kafka.as_deref_mut(),
                    );
                    error = write(calls, outs, &e).err();
                }
            });
            if let Some(e) = error {
                return Err(e);
            }
        }
        Ok(())
    }

    fn parallel_read(&self) -> bool {
        false
    }
}
