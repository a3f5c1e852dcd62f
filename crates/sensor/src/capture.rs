//! The capture job: the live pipeline's buffer, in buffer order, to one sink (a capture file,
//! `weir capture`'s terminal lines, later a stream), like `tcpdump -i IFACE -w OUT EXPR`.
//!
//! The capture threads are the pipeline's; the caller's thread is the buffer's one consumer.
//! When it falls behind, the buffer drops new packets and counts them, so capture threads never
//! block. The job ends after `count` packets, after `duration`, when the stop flag is set, when
//! capture fails, or when the sink says its reader went away ([`PacketSink::closed`]); after
//! capture stops, everything already in the buffer is written.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_buffer::{Reader, Record};
use weir_capture::{Pipeline, PipelineConfig, Totals};
use weir_packet::PacketMeta;
use weir_pcap::{FileFormat, Interface, PacketWriter, WriteError};

use crate::live::{announcement, Source};
use crate::rules::{self, LiveRules};
pub use crate::sink::PacketSink;
use crate::{metrics, Controls, Event, SensorError};

/// How often an idle capture flushes what it wrote and asks its sink whether its reader is
/// still there.
pub const IDLE_CHECK: Duration = Duration::from_millis(50);

/// What the capture job does.
#[derive(Clone, Debug)]
pub struct CaptureConfig {
    /// The live pipeline (its readers and rules are the job's to set).
    pub live: PipelineConfig,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// The rule file and its control socket.
    pub rules: Option<rules::RulesConfig>,
    /// The sink stores packet comments (a pcapng file): tagged packets' records carry their
    /// tag as the comment `weir-tag=TAG`, which [`FileSink`] writes as the EPB's `opt_comment`
    /// (tshark's `frame.comment`), as `weir record` does. Else tags are only counted.
    pub store_tags: bool,
}

/// A capture file: classic pcap (one link type; every packet on interface 0) or pcapng (one
/// interface block per interface).
pub struct FileSink<W: Write> {
    writer: PacketWriter<W>,
    pcap: bool,
}

impl<W: Write> FileSink<W> {
    /// Writes the file header of `format` for `interfaces` to `out`. Classic pcap refuses
    /// interfaces of different link types.
    pub fn new(out: W, format: FileFormat, interfaces: &[Interface]) -> Result<Self, SensorError> {
        let pcap = matches!(format, FileFormat::Pcap(_));
        if pcap && interfaces.iter().any(|i| i.link != interfaces[0].link) {
            return Err(SensorError::MixedLinks);
        }
        Ok(FileSink {
            writer: PacketWriter::new(out, format, interfaces)?,
            pcap,
        })
    }

    /// Writes one record, with its comment (a rule's tag) in pcapng.
    pub fn write(&mut self, record: &Record<'_>) -> Result<(), WriteError> {
        let interface = if self.pcap { 0 } else { record.iface() };
        let meta = PacketMeta {
            ts_ns: record.ts_ns(),
            orig_len: record.orig_len(),
            interface,
        };
        match record.comment() {
            Some(c) if !self.pcap => self
                .writer
                .write_commented(&meta, record.data(), c)
                .map(drop),
            _ => self.writer.write(&meta, record.data()),
        }
    }

    /// Flushes the writer.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        self.writer.flush()
    }

    /// Flushes and hands the output back.
    pub fn finish(self) -> Result<W, WriteError> {
        self.writer.finish()
    }
}

impl<W: Write> PacketSink for FileSink<W> {
    type Error = SensorError;

    fn packet(&mut self, _: &[Interface], record: &Record<'_>) -> Result<(), SensorError> {
        Ok(self.write(record)?)
    }

    fn flush(&mut self) -> Result<(), SensorError> {
        Ok(FileSink::flush(self)?)
    }
}

/// `weir capture`'s two sinks: a capture file, or lines.
pub enum Sink<W: Write> {
    /// A capture file.
    File(FileSink<W>),
    /// One line per packet.
    Lines(crate::lines::LinePrinter<W>),
}

impl<W: Write> Sink<W> {
    /// Flushes what is left and returns the output.
    pub fn finish(self) -> Result<W, SensorError> {
        Ok(match self {
            Sink::File(w) => w.finish()?,
            Sink::Lines(p) => p.finish()?,
        })
    }
}

impl<W: Write> PacketSink for Sink<W> {
    type Error = SensorError;

    fn packet(&mut self, interfaces: &[Interface], r: &Record<'_>) -> Result<(), SensorError> {
        match self {
            Sink::File(w) => PacketSink::packet(w, interfaces, r),
            Sink::Lines(p) => PacketSink::packet(p, interfaces, r),
        }
    }

    fn flush(&mut self) -> Result<(), SensorError> {
        match self {
            Sink::File(w) => PacketSink::flush(w),
            Sink::Lines(p) => PacketSink::flush(p),
        }
    }
}

/// A sink whose reader may go away (`weir capture | head`): a broken pipe is not an error but
/// the end of the job ([`PacketSink::gone`]), and a sink on stdout also ends when its reader is
/// seen gone while idle ([`stdout_gone`](crate::output::stdout_gone)).
pub struct Watched<S> {
    sink: S,
    to_stdout: bool,
    gone: bool,
}

impl<S> Watched<S> {
    /// Watches `sink`; `to_stdout`: it writes to this process's stdout.
    pub fn new(sink: S, to_stdout: bool) -> Self {
        Watched {
            sink,
            to_stdout,
            gone: false,
        }
    }

    /// The sink, to finish it (not when the reader went away: nobody would read the end).
    pub fn into_inner(self) -> S {
        self.sink
    }

    /// `r`, or nothing once the reader is gone (a broken pipe).
    fn check(&mut self, r: Result<(), SensorError>) -> Result<(), SensorError> {
        match r {
            Err(e) if e.is_broken_pipe() => {
                self.gone = true;
                Ok(())
            }
            r => r,
        }
    }
}

impl<S: PacketSink<Error = SensorError>> PacketSink for Watched<S> {
    type Error = SensorError;

    fn packet(&mut self, interfaces: &[Interface], r: &Record<'_>) -> Result<(), SensorError> {
        if self.gone {
            return Ok(());
        }
        let r = self.sink.packet(interfaces, r);
        self.check(r)
    }

    fn flush(&mut self) -> Result<(), SensorError> {
        let r = self.sink.flush();
        self.check(r)
    }

    fn closed(&self) -> bool {
        self.gone || self.sink.closed() || (self.to_stdout && crate::output::stdout_gone())
    }

    fn gone(&self) -> bool {
        self.gone
    }
}

/// What a capture job did.
#[derive(Debug)]
pub struct CaptureReport {
    /// Packets handed to the sink.
    pub written: u64,
    /// Seconds from the start of writing to the end.
    pub elapsed_s: f64,
    /// The pipeline's counters.
    pub totals: Totals,
    /// The buffer's counters.
    pub buffer: weir_buffer::Stats,
    /// The rules' summary lines, when there are rules.
    pub rules: Option<String>,
    /// The sink's reader went away: the job ended there, the sink was not finished.
    pub reader_gone: bool,
}

impl CaptureReport {
    /// `weir capture`'s closing text (after `weir: `): the packets written and how long it
    /// took, capture's counters ([`live_summary`](crate::live::live_summary)), then the rules'
    /// drops and summary when there are rules.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} packets written in {:.1} s\n{}",
            self.written,
            self.elapsed_s,
            crate::live::live_summary(&self.totals, &self.buffer)
        );
        if let Some(r) = &self.rules {
            let dropped = self.totals.feed.rules_dropped;
            s += &format!("\n  rules: {dropped} dropped after the filter\n{r}");
        }
        s
    }
}

/// A capture job whose pipeline runs: [`interfaces`](Capture::interfaces) tells the sink what
/// it will get, [`run`](Capture::run) writes to it.
pub struct Capture {
    pipeline: Pipeline,
    count: Option<u64>,
    duration: Option<Duration>,
    rules: Option<LiveRules>,
    _control: Option<weir_control::Server>,
}

impl Capture {
    /// Loads and compiles the rules, serves their control socket, starts the pipeline and says
    /// so (`capturing on IFACE...`).
    pub fn start(
        cfg: &CaptureConfig,
        events: &mut dyn FnMut(Event),
    ) -> Result<Capture, SensorError> {
        let (engine, control, rules) = match &cfg.rules {
            Some(r) => {
                let set = rules::load(&r.path)?;
                let set_tags = LiveRules::set_tags(&set);
                let engine =
                    rules::live_engine(&cfg.live.interfaces, cfg.live.snaplen, set, &r.path)?;
                let control = match &r.control {
                    Some(socket) => {
                        let server = rules::serve_control(socket, &engine, Some(r.path.clone()))?;
                        events(Event::Notice(format!(
                            "rules control socket on {}",
                            socket.display()
                        )));
                        Some(server)
                    }
                    None => None,
                };
                let live_rules = LiveRules::new(
                    &r.path,
                    engine.clone(),
                    cfg.store_tags,
                    set_tags,
                    "`weir capture` to a classic pcap file or to lines (write pcapng)",
                    events,
                );
                (Some(engine), control, Some(live_rules))
            }
            None => (None, None, None),
        };
        let pipeline_rules = engine.map(|engine| weir_capture::Rules {
            engine,
            store_tags: cfg.store_tags,
        });
        let path = cfg.rules.as_ref().map(|r| r.path.as_path());
        let Source::Live(pipeline) = Source::live(&cfg.live, 1, 0, pipeline_rules)
            .map_err(|e| SensorError::about_rules(e, path))?
        else {
            unreachable!("Source::live starts a pipeline")
        };
        for line in announcement(&cfg.live, &pipeline, "capturing") {
            events(line);
        }
        Ok(Capture {
            pipeline,
            count: cfg.count,
            duration: cfg.duration,
            rules,
            _control: control,
        })
    }

    /// The pipeline's interfaces, in the records' interface-id order.
    pub fn interfaces(&self) -> &[Interface] {
        self.pipeline.interfaces()
    }

    /// Writes the buffer to `sink` until the job ends (see the module documentation), then
    /// stops capture. The sink is left to the caller to finish (unless its reader went away).
    pub fn run<S: PacketSink>(
        mut self,
        sink: &mut S,
        controls: &Controls,
        events: &mut dyn FnMut(Event),
    ) -> Result<CaptureReport, S::Error> {
        let interfaces = self.pipeline.interfaces().to_vec();
        let mut reader = self
            .pipeline
            .buffer()
            .reader(0)
            .map_err(SensorError::from)?;
        let written = Arc::new(AtomicU64::new(0));
        if let Some(board) = &controls.metrics {
            board.attach(metrics::Live {
                counters: Some(self.pipeline.counters()),
                buffer: self.pipeline.buffer().clone(),
                readers: vec!["capture".to_string()],
                recorder: None,
                store: None,
                written: Some(written.clone()),
                rules: self.rules.as_ref().map(|r| r.engine().clone()),
                flows_packets: None,
                exports: None,
                streams: Vec::new(),
            });
        }
        let mut sink = Counted {
            sink,
            written: &written,
        };
        let started = Instant::now();
        let deadline = self.duration.map(|d| started + d);
        let pipeline = &mut self.pipeline;
        let rules = &mut self.rules;
        let mut stop_capture = || -> Result<bool, SensorError> {
            if controls.stop.load(Ordering::Relaxed)
                || pipeline.failed()
                || deadline.is_some_and(|d| Instant::now() >= d)
            {
                pipeline.stop()?;
                return Ok(true);
            }
            Ok(false)
        };
        let mut poll_rules = |events: &mut dyn FnMut(Event)| {
            if let Some(r) = rules.as_mut() {
                r.poll(controls.reload, events);
            }
        };
        let pumped = pump(
            &mut reader,
            &interfaces,
            &mut sink,
            self.count.unwrap_or(u64::MAX),
            &mut stop_capture,
            &mut || poll_rules(events),
        )?;
        self.pipeline.stop().map_err(SensorError::from)?;
        let totals = self.pipeline.counters().totals();
        if let Some(board) = &controls.metrics {
            board.finish(&totals, None);
        }
        let rules = self.rules.as_ref().map(|r| r.summary(&totals.feed));
        Ok(CaptureReport {
            written: pumped.written,
            elapsed_s: started.elapsed().as_secs_f64(),
            totals,
            buffer: self.pipeline.buffer().stats(),
            rules,
            reader_gone: pumped.reader_gone,
        })
    }
}

/// A sink that counts what it is handed, for the metrics (one writer: load and store).
struct Counted<'a, S> {
    sink: &'a mut S,
    written: &'a AtomicU64,
}

impl<S: PacketSink> PacketSink for Counted<'_, S> {
    type Error = S::Error;

    fn packet(&mut self, interfaces: &[Interface], record: &Record<'_>) -> Result<(), S::Error> {
        self.sink.packet(interfaces, record)?;
        let w = self.written;
        w.store(w.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), S::Error> {
        self.sink.flush()
    }

    fn closed(&self) -> bool {
        self.sink.closed()
    }

    fn gone(&self) -> bool {
        self.sink.gone()
    }
}

/// How [`pump`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pumped {
    written: u64,
    reader_gone: bool,
}

/// Hands `reader`'s records to `sink` until `limit` packets are written, or `stop_source`
/// (asked between batches until it says it stopped the source) stopped it and the buffer is
/// empty, or the idle sink is closed. `poll` runs before each batch (rule reloads).
fn pump<S: PacketSink>(
    reader: &mut Reader,
    interfaces: &[Interface],
    sink: &mut S,
    limit: u64,
    stop_source: &mut dyn FnMut() -> Result<bool, SensorError>,
    poll: &mut dyn FnMut(),
) -> Result<Pumped, S::Error> {
    let mut written = 0u64;
    let mut stopping = false;
    let mut checked = Instant::now();
    let mut unflushed = false;
    'run: loop {
        poll();
        let mut idle = false;
        match reader.next_batch() {
            Some(batch) => {
                for r in batch.records() {
                    sink.packet(interfaces, &r)?;
                    written += 1;
                    if written >= limit {
                        batch.release();
                        break 'run;
                    }
                }
                batch.release();
                unflushed = true;
                if sink.gone() {
                    return Ok(Pumped {
                        written,
                        reader_gone: true,
                    });
                }
            }
            // After the source stopped, one empty look means everything is written.
            None if stopping => break,
            None => {
                // Nothing to write: the reader gets the packets so far, and a closed sink is
                // seen now rather than at the next packet.
                if checked.elapsed() >= IDLE_CHECK {
                    checked = Instant::now();
                    if unflushed {
                        sink.flush()?;
                        unflushed = false;
                    }
                    if sink.closed() {
                        return Ok(Pumped {
                            written,
                            reader_gone: true,
                        });
                    }
                }
                // Until capture hands over the next records (a ring block, at least every 50 ms
                // while packets come), at most IDLE_CHECK: the stop is a flag set by a signal
                // handler, looked at between batches. (Session 21: a 1 ms sleep, ≈ 1 000
                // wake-ups a second with no traffic.)
                idle = true;
            }
        }
        if idle {
            let next = reader.position().wrapping_add(8);
            reader.wait(next, IDLE_CHECK);
        }
        if !stopping && stop_source()? {
            stopping = true;
        }
    }
    Ok(Pumped {
        written,
        reader_gone: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_packet::LinkType;

    /// Records what it is given.
    #[derive(Default)]
    struct Collect {
        packets: Vec<(u32, u64, u32, Vec<u8>)>,
        flushes: usize,
        closed: bool,
    }

    impl PacketSink for Collect {
        type Error = SensorError;
        fn packet(&mut self, _: &[Interface], r: &Record<'_>) -> Result<(), SensorError> {
            self.packets
                .push((r.iface(), r.ts_ns(), r.orig_len(), r.data().to_vec()));
            Ok(())
        }
        fn flush(&mut self) -> Result<(), SensorError> {
            self.flushes += 1;
            Ok(())
        }
        fn closed(&self) -> bool {
            self.closed
        }
    }

    fn buffer_with(n: u32) -> (weir_buffer::PacketBuffer, Reader) {
        let buffer = weir_buffer::Config::new(1 << 20)
            .max_writers(1)
            .max_caplen(2048)
            .huge_pages(false)
            .build()
            .unwrap();
        let mut w = buffer.writer().unwrap();
        for i in 0..n {
            w.push(i % 2, 1_000 + u64::from(i), 60 + i, &[i as u8; 60])
                .unwrap();
        }
        let reader = buffer.reader(0).unwrap();
        (buffer, reader)
    }

    fn iface(link: LinkType) -> Interface {
        Interface::new(link, 0)
    }

    /// Every record reaches the sink in buffer order, with its interface, time, length and
    /// bytes; the source is asked to stop once, and one empty look after that ends the pump.
    #[test]
    fn pump_drains_after_stop() {
        let (_b, mut reader) = buffer_with(5);
        let mut sink = Collect::default();
        let mut asked = 0;
        let p = pump(
            &mut reader,
            &vec![iface(LinkType::ETHERNET); 2],
            &mut sink,
            u64::MAX,
            &mut || {
                asked += 1;
                Ok(true)
            },
            &mut || {},
        )
        .unwrap();
        assert_eq!(
            p,
            Pumped {
                written: 5,
                reader_gone: false
            }
        );
        assert_eq!(asked, 1);
        let want: Vec<_> = (0..5u32)
            .map(|i| (i % 2, 1_000 + u64::from(i), 60 + i, vec![i as u8; 60]))
            .collect();
        assert_eq!(sink.packets, want);
    }

    /// A sink whose reader leaves after two packets: the rest are not offered to it, the
    /// pump ends as "reader gone", without an error; any other error stays an error.
    #[test]
    fn watched_sink_ends_quietly_on_a_broken_pipe() {
        struct Leaves(Collect, std::io::ErrorKind);
        impl PacketSink for Leaves {
            type Error = SensorError;
            fn packet(&mut self, i: &[Interface], r: &Record<'_>) -> Result<(), SensorError> {
                if self.0.packets.len() == 2 {
                    return Err(SensorError::Output(self.1.into()));
                }
                self.0.packet(i, r)
            }
            fn flush(&mut self) -> Result<(), SensorError> {
                self.0.flush()
            }
        }
        let (_b, mut reader) = buffer_with(5);
        let mut sink = Watched::new(
            Leaves(Collect::default(), std::io::ErrorKind::BrokenPipe),
            false,
        );
        let ifaces = vec![iface(LinkType::ETHERNET); 2];
        let p = pump(
            &mut reader,
            &ifaces,
            &mut sink,
            u64::MAX,
            &mut || Ok(true),
            &mut || {},
        );
        assert_eq!(
            p.unwrap(),
            Pumped {
                written: 5,
                reader_gone: true
            }
        );
        assert!(sink.gone() && sink.closed());
        assert_eq!(sink.into_inner().0.packets.len(), 2);

        let (_b, mut reader) = buffer_with(5);
        let mut sink = Watched::new(
            Leaves(Collect::default(), std::io::ErrorKind::StorageFull),
            false,
        );
        let p = pump(
            &mut reader,
            &ifaces,
            &mut sink,
            u64::MAX,
            &mut || Ok(true),
            &mut || {},
        );
        assert!(
            matches!(p, Err(SensorError::Output(e)) if e.kind() == std::io::ErrorKind::StorageFull)
        );
        assert!(!sink.gone());
    }

    /// The closing text: the count and time, capture's lines, then the rules' when given.
    #[test]
    fn summary_ends_with_the_rules_when_there_are_rules() {
        let mut r = CaptureReport {
            written: 12,
            elapsed_s: 1.26,
            totals: Totals::default(),
            buffer: weir_buffer::Stats::default(),
            rules: None,
            reader_gone: false,
        };
        let live = crate::live::live_summary(&r.totals, &r.buffer);
        assert_eq!(r.summary(), format!("12 packets written in 1.3 s\n{live}"));
        r.totals.feed.rules_dropped = 3;
        r.rules = Some("  rule 1: 3 dropped".into());
        assert_eq!(
            r.summary(),
            format!(
                "12 packets written in 1.3 s\n{live}\n  rules: 3 dropped after the filter\n  rule 1: 3 dropped"
            )
        );
    }

    /// `count` stops at exactly that many packets.
    #[test]
    fn pump_stops_at_the_limit() {
        let (_b, mut reader) = buffer_with(5);
        let mut sink = Collect::default();
        let p = pump(
            &mut reader,
            &vec![iface(LinkType::ETHERNET); 2],
            &mut sink,
            3,
            &mut || Ok(false),
            &mut || {},
        )
        .unwrap();
        assert_eq!(p.written, 3);
        assert_eq!(sink.packets.len(), 3);
    }

    /// An idle sink whose reader went away ends the pump, after flushing what it had.
    #[test]
    fn pump_ends_when_the_sink_is_closed() {
        let (_b, mut reader) = buffer_with(2);
        let mut sink = Collect {
            closed: true,
            ..Collect::default()
        };
        let p = pump(
            &mut reader,
            &vec![iface(LinkType::ETHERNET); 2],
            &mut sink,
            u64::MAX,
            &mut || Ok(false),
            &mut || {},
        )
        .unwrap();
        assert_eq!(
            p,
            Pumped {
                written: 2,
                reader_gone: true
            }
        );
        assert_eq!(sink.flushes, 1);
    }

    /// A pcap file sink refuses mixed link types; a pcapng one writes each packet on its
    /// interface, read back by weir's reader.
    #[test]
    fn file_sink_writes_what_the_buffer_holds() {
        let ifaces = [iface(LinkType::ETHERNET), iface(LinkType::RAW)];
        let Err(e) = FileSink::new(
            Vec::new(),
            FileFormat::Pcap(weir_pcap::Precision::Nano),
            &ifaces,
        ) else {
            panic!("classic pcap took two link types");
        };
        assert_eq!(
            e.to_string(),
            "classic pcap holds one link type; use --format pcapng"
        );
        let (_b, mut reader) = buffer_with(4);
        let mut sink = FileSink::new(Vec::new(), FileFormat::Pcapng, &ifaces).unwrap();
        pump(
            &mut reader,
            &ifaces,
            &mut sink,
            u64::MAX,
            &mut || Ok(true),
            &mut || {},
        )
        .unwrap();
        let bytes = sink.finish().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.pcapng");
        std::fs::write(&path, bytes).unwrap();
        let mut r = weir_pcap::FileReader::open(&path).unwrap();
        let mut got = Vec::new();
        while let Some(p) = r.next_packet().unwrap() {
            got.push((
                p.meta.interface,
                p.meta.ts_ns,
                p.meta.orig_len,
                p.data.len(),
            ));
        }
        assert_eq!(
            got,
            [
                (0, 1_000, 60, 60),
                (1, 1_001, 61, 60),
                (0, 1_002, 62, 60),
                (1, 1_003, 63, 60)
            ]
        );
    }
}
