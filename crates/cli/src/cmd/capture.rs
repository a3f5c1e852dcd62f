//! `weir capture`: live capture to a file or the terminal, like `tcpdump -i IFACE -w OUT EXPR`,
//! with several threads per interface joined in a fanout group and several interfaces at once.
//!
//! The capture threads are the live pipeline's ([`weir_capture::Pipeline`]): rings → the shared
//! packet buffer; this thread is the buffer's one consumer and writes (or prints) its records in
//! buffer order. When it falls behind, the buffer drops new packets and counts them, so capture
//! threads never block. `weir record` is the tool for sustained high rates (segments written
//! straight from the buffer with O_DIRECT).
//!
//! With `--rules FILE` the capture threads decide each packet after the filter (see `weir
//! record`); SIGHUP reloads the file. Tags are counted but not written by `capture` (its
//! writer has no packet comments); `weir record` stores them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use weir_capture::Pipeline;
use weir_packet::{LinkType, PacketMeta};
use weir_pcap::{FileFormat, PacketWriter};
use weir_pcap::{Interface, Packet};

use crate::args::{self, Format, LiveArgs, RulesArgs};
use crate::input::Visitor;
use crate::lines::LinePrinter;
use crate::output::{self, on_signal, Status};

/// How often an idle capture flushes what it wrote and, writing to stdout, checks that its
/// reader is still there.
const IDLE_CHECK: Duration = Duration::from_millis(50);

/// Arguments of `weir capture`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    live: LiveArgs,
    #[command(flatten)]
    out: args::Output,
    /// Stop after this many packets.
    #[arg(short = 'c', long = "count", value_name = "N", value_parser = args::count,
          allow_negative_numbers = true)]
    count: Option<u64>,
    #[command(flatten)]
    rules: RulesArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express.
    pub(crate) fn check(&self) -> Result<(), String> {
        self.live.check()?;
        if self.live.interfaces.is_empty() {
            return Err("give at least one interface with -i".into());
        }
        self.out.check(true)
    }
}

/// Runs `weir capture`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let stop = Arc::new(AtomicBool::new(false));
    on_signal(stop.clone())?;
    let rules_file = args.rules.rules.as_deref();
    let rule_set = rules_file.map(output::load_rules).transpose()?;
    let set_tags = rule_set.as_ref().is_some_and(output::LiveRules::set_tags);
    let engine = output::live_engine(&args.live, rule_set, rules_file)?;
    let _control = output::serve_control(&args.rules, engine.as_ref())?;
    let mut rules = match (&engine, rules_file) {
        (Some(e), Some(p)) => Some(output::LiveRules::new(
            p,
            e.clone(),
            false,
            set_tags,
            "`weir capture` (use `weir record`)",
        )?),
        _ => None,
    };
    let pipeline_rules = engine.map(|engine| weir_capture::Rules {
        engine,
        store_tags: false,
    });
    let mut live = output::start_live_quietly_with_rules(
        &args.live,
        &args.expr.joined(),
        1,
        0,
        64,
        pipeline_rules,
    )?;
    output::announce_live(&args.live, &live, "capturing");
    let interfaces = live.interfaces().to_vec();
    let mut out = Output::open(&args, &live)?;
    let mut reader = live.buffer().reader(0)?;
    let started = Instant::now();
    let deadline = args
        .live
        .duration
        .map(|s| started + Duration::from_secs_f64(s));
    let limit = args.count.unwrap_or(u64::MAX);
    let mut written = 0u64;
    let mut stopping = false;
    let mut checked = Instant::now();
    let mut unflushed = false;
    let to_stdout = args.out.path.as_ref().is_none_or(|p| p.as_os_str() == "-");
    'run: loop {
        if let Some(r) = rules.as_mut() {
            r.poll();
        }
        match reader.next_batch() {
            Some(batch) => {
                for r in batch.records() {
                    out.packet(&interfaces, r.iface(), r.ts_ns(), r.orig_len(), r.data())?;
                    written += 1;
                    if written >= limit {
                        batch.release();
                        break 'run;
                    }
                }
                batch.release();
                unflushed = true;
            }
            // After the capture threads stopped, one empty look means everything is written.
            None if stopping => break,
            None => {
                // Nothing to write: the reader gets the packets so far, and a closed pipe is
                // seen now rather than at the next packet.
                if checked.elapsed() >= IDLE_CHECK {
                    checked = Instant::now();
                    if unflushed {
                        out.flush()?;
                        unflushed = false;
                    }
                    if to_stdout && output::stdout_gone() {
                        live.stop()?;
                        return Ok(Status::Clean);
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if !stopping
            && (stop.load(Ordering::Relaxed)
                || live.failed()
                || deadline.is_some_and(|d| Instant::now() >= d))
        {
            live.stop()?;
            stopping = true;
        }
    }
    live.stop()?;
    out.finish()?;
    let t = live.counters().totals();
    let b = live.buffer().stats();
    eprintln!(
        "weir: {written} packets written in {:.1} s\n{}",
        started.elapsed().as_secs_f64(),
        output::live_summary(&t, &b)
    );
    if let Some(r) = &rules {
        eprintln!(
            "  rules: {} dropped after the filter\n{}",
            t.feed.rules_dropped,
            r.summary(&t.feed)
        );
    }
    Ok(Status::Clean)
}

/// Where captured packets go: a capture file, or lines on stdout.
enum Output {
    File(PacketWriter<output::Output>, bool),
    Lines(LinePrinter),
}

impl Output {
    fn open(args: &Args, live: &Pipeline) -> Result<Output> {
        let Some(path) = &args.out.path else {
            return Ok(Output::Lines(LinePrinter::stdout(None)));
        };
        let format = args.out.format(Format::Pcapng);
        let pcap = matches!(format, FileFormat::Pcap(_));
        let interfaces = live.interfaces();
        if pcap && interfaces.iter().any(|i| i.link != interfaces[0].link) {
            bail!("classic pcap holds one link type; use --format pcapng");
        }
        let w = PacketWriter::new(output::create_in_place(path)?, format, interfaces)?;
        Ok(Output::File(w, pcap))
    }

    fn packet(
        &mut self,
        interfaces: &[Interface],
        iface: u32,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
    ) -> Result<()> {
        match self {
            Output::File(w, pcap) => {
                let interface = if *pcap { 0 } else { iface };
                w.write(
                    &PacketMeta {
                        ts_ns,
                        orig_len,
                        interface,
                    },
                    data,
                )?;
            }
            Output::Lines(p) => {
                let link = interfaces
                    .get(iface as usize)
                    .map_or(LinkType::ETHERNET, |i| i.link);
                let packet = Packet {
                    meta: PacketMeta {
                        ts_ns,
                        orig_len,
                        interface: iface,
                    },
                    link,
                    data,
                    record_offset: 0,
                    pcap_ts: None,
                };
                p.packet(interfaces, &packet)?;
            }
        }
        Ok(())
    }

    /// Hands what is buffered to the output.
    fn flush(&mut self) -> Result<()> {
        match self {
            Output::File(w, _) => w.flush()?,
            Output::Lines(p) => p.flush()?,
        }
        Ok(())
    }

    fn finish(self) -> Result<()> {
        match self {
            Output::File(w, _) => w.finish()?.commit()?,
            Output::Lines(p) => p.finish()?,
        }
        Ok(())
    }
}
