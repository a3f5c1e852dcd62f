//! Where a job's packets come from: the live pipeline ([`weir_capture::Pipeline`]) or capture
//! files copied into a packet buffer ([`weir_capture::Import`]), behind one [`Source`], with the
//! lines a live job says when it starts ([`announcement`]) and ends ([`live_summary`]).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use weir_buffer::PacketBuffer;
use weir_capture::{CaptureError, Counters, FanoutMode, Import, Pipeline, PipelineConfig, Totals};
use weir_pcap::{FileReader, Interface};
use weir_rules::{Engine, RuleSet};

use crate::{Event, SensorError};

/// Where packets come from, as configured.
#[derive(Clone, Debug)]
pub enum SourceConfig {
    /// Live capture. The job sets the buffer's readers and the rules itself; everything else
    /// (interfaces, threads, filter, buffer size...) is taken as given.
    Live(PipelineConfig),
    /// Capture files imported in turn, losslessly, into a buffer of `buffer_bytes`.
    Files {
        /// The files (`-` is stdin), at least one.
        files: Vec<PathBuf>,
        /// The packet buffer's size in bytes (a power of two).
        buffer_bytes: usize,
    },
}

/// A running source of packets: its buffer, its interfaces and its counters.
pub enum Source {
    /// The live pipeline.
    Live(Pipeline),
    /// The file import feed.
    Files(Import),
}

/// The fanout mode's name as the command line spells it (`hash`, `lb`, `cpu`).
pub fn fanout_name(mode: FanoutMode) -> &'static str {
    match mode {
        FanoutMode::Hash => "hash",
        FanoutMode::LoadBalance => "lb",
        FanoutMode::Cpu => "cpu",
    }
}

/// The files of `files` are opened before anything else is created: the first one now (so
/// stdin is read once and a missing file stops the job before the store is locked).
pub fn open_first(files: &[PathBuf]) -> Result<Option<FileReader>, SensorError> {
    files
        .first()
        .map(|p| {
            FileReader::open(p).map_err(|source| SensorError::Open {
                path: p.clone(),
                source,
            })
        })
        .transpose()
}

impl Source {
    /// Starts the live pipeline of `cfg` with `readers` registered and `best_effort` readers
    /// and, with `rules`, the rule engine in every capture thread.
    pub fn live(
        cfg: &PipelineConfig,
        readers: usize,
        best_effort: usize,
        rules: Option<weir_capture::Rules>,
    ) -> Result<Source, SensorError> {
        let mut cfg = cfg.clone();
        cfg.readers = readers;
        cfg.best_effort_readers = best_effort;
        cfg.rules = rules;
        Ok(Source::Live(Pipeline::start(&cfg)?))
    }

    /// Starts importing `first` (opened by [`open_first`]) and then `rest` into a new buffer;
    /// with `rules`, the set is compiled for the first file's link type (the engine is then
    /// [`engine`](Self::engine)) and, with its flag, tags become pcapng comments.
    #[allow(clippy::too_many_arguments)]
    pub fn files(
        first: FileReader,
        rest: &[PathBuf],
        buffer_bytes: usize,
        readers: usize,
        best_effort: usize,
        stop: &Arc<AtomicBool>,
        rules: Option<(RuleSet, bool)>,
    ) -> Result<Source, SensorError> {
        let import =
            Import::start_with_rules(first, rest, buffer_bytes, readers, best_effort, stop, rules)?;
        Ok(Source::Files(import))
    }

    /// The packet buffer the source fills.
    pub fn buffer(&self) -> &PacketBuffer {
        match self {
            Source::Live(l) => l.buffer(),
            Source::Files(i) => i.buffer(),
        }
    }

    /// The interfaces, in the records' interface-id order.
    pub fn interfaces(&self) -> &[Interface] {
        match self {
            Source::Live(l) => l.interfaces(),
            Source::Files(i) => i.interfaces(),
        }
    }

    /// The live counters (the import's come at its end, from [`stop`](Self::stop)).
    pub fn counters(&self) -> Option<Counters> {
        match self {
            Source::Live(l) => Some(l.counters()),
            Source::Files(_) => None,
        }
    }

    /// The import's rule engine (a live pipeline's is compiled before it starts).
    pub fn engine(&self) -> Option<&Engine> {
        match self {
            Source::Live(_) => None,
            Source::Files(i) => i.engine(),
        }
    }

    /// True once no packet will come: a capture thread failed, or every file was read.
    pub fn done(&self) -> bool {
        match self {
            Source::Live(l) => l.failed(),
            Source::Files(i) => i.is_finished(),
        }
    }

    /// Stops the source (capture first, so the buffer stops growing): the live pipeline's
    /// result (the first capture thread's error) and, for an import, its totals.
    pub fn stop(self) -> Result<(Result<(), CaptureError>, Option<Totals>), SensorError> {
        Ok(match self {
            Source::Live(mut l) => (l.stop(), None),
            Source::Files(i) => (Ok(()), Some(i.finish()?)),
        })
    }
}

/// What a live job says once its pipeline runs (each line after `weir: `): the buffer's pages
/// when no huge pages are reserved, then `VERB on IFACE (LINK), N thread(s)...` for each
/// interface (the line scripts and tests wait for).
pub fn announcement(cfg: &PipelineConfig, pipeline: &Pipeline, verb: &str) -> Vec<Event> {
    let mut lines = Vec::new();
    if pipeline.page_kind() != weir_buffer::PageKind::HugeTlb {
        lines.push(Event::Notice(format!(
            "packet buffer of {} MiB on {} (no huge pages reserved: echo N > \
             /proc/sys/vm/nr_hugepages to use them)",
            pipeline.buffer().size() >> 20,
            pipeline.page_kind().name()
        )));
    }
    lines.extend(pipeline.backend_notes().iter().cloned().map(Event::Notice));
    for (i, ts) in pipeline
        .interfaces()
        .iter()
        .zip(pipeline.timestamp_sources())
    {
        let iface = i.name.as_deref().unwrap_or_default();
        let ts = match ts {
            weir_capture::TimestampSource::Hardware => "hardware timestamps".to_string(),
            weir_capture::TimestampSource::Receive => {
                "software timestamps at receive (AF_XDP)".to_string()
            }
            _ if !cfg.hw_timestamps => "software timestamps".to_string(),
            _ => format!("software timestamps ({iface} offers no hardware timestamps)"),
        };
        lines.push(Event::Notice(format!(
            "{verb} on {iface} ({}), {} thread(s){}, {ts}",
            i.link,
            cfg.threads,
            if cfg.threads > 1 {
                format!(", {} fanout", fanout_name(cfg.fanout))
            } else {
                String::new()
            }
        )));
    }
    lines
}

/// The closing lines every live job prints: what was lost before the rings, then what the
/// kernel queued and dropped at the rings, what the capture threads read (so that kernel
/// received = read + dropped) and what the buffer refused.
pub fn live_summary(t: &Totals, b: &weir_buffer::Stats) -> String {
    format!(
        "  before the ring: {}\n  kernel: {} received, {} dropped; capture: {} read, {} filtered \
         out; buffer: {} dropped (full), {} dropped (too long)",
        t.before_ring_text(),
        t.feed.kernel_packets,
        t.feed.kernel_drops,
        t.feed.received,
        t.feed.filtered,
        b.dropped_full,
        b.dropped_oversize
    )
}

/// How often a one-analyzer live job looks at its flags.
const POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// How live capture ended.
#[derive(Debug)]
pub struct LiveEnd {
    /// Every capture stage's counters.
    pub totals: Totals,
    /// The packet buffer's counters.
    pub buffer: weir_buffer::Stats,
}

/// What a one-analyzer live job ([`run_one_analyzer`]) hands back: the analyzer's end, the
/// capture's counters, and a capture thread's error if capture failed.
pub(crate) type OneAnalyzerEnd<E> = (E, LiveEnd, Option<CaptureError>);

/// The shape of `weir http -i` and `weir voip -i`: starts the pipeline of `cfg` with one
/// reader, then opens the outputs (`open`; after capture, so that a missing interface leaves no
/// empty output behind), says `verb`, starts the analyzer on reader 0 (`spawn`, given the
/// interfaces' link types) and waits until `controls.stop` is set, `duration` has passed or
/// capture fails; then stops capture and ends the analyzer (`finish`: it reads what is left).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_one_analyzer<O, J, E>(
    cfg: &PipelineConfig,
    duration: Option<std::time::Duration>,
    controls: &crate::Controls,
    events: &mut dyn FnMut(Event),
    verb: &str,
    open: impl FnOnce() -> Result<O, SensorError>,
    spawn: impl FnOnce(O, weir_buffer::Reader, Vec<weir_decode::LinkType>) -> Result<J, SensorError>,
    finish: impl FnOnce(J) -> E,
) -> Result<OneAnalyzerEnd<E>, SensorError> {
    use std::sync::atomic::Ordering;
    use std::time::Instant;
    let mut cfg = cfg.clone();
    cfg.readers = 1;
    cfg.best_effort_readers = 0;
    let mut pipeline = Pipeline::start(&cfg)?;
    let started = open().and_then(|out| {
        for line in announcement(&cfg, &pipeline, verb) {
            events(line);
        }
        let links = pipeline.interfaces().iter().map(|i| i.link).collect();
        spawn(out, pipeline.buffer().reader(0)?, links)
    });
    let job = match started {
        Ok(j) => j,
        Err(e) => {
            let _ = pipeline.stop();
            return Err(e);
        }
    };
    let deadline = duration.map(|d| Instant::now() + d);
    while !controls.stop.load(Ordering::Relaxed)
        && !pipeline.failed()
        && deadline.is_none_or(|d| Instant::now() < d)
    {
        std::thread::sleep(POLL);
    }
    let stopped = pipeline.stop();
    let (totals, buffer) = (pipeline.counters().totals(), pipeline.buffer().stats());
    let end = finish(job);
    Ok((end, LiveEnd { totals, buffer }, stopped.err()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fanout_names_are_the_command_lines() {
        assert_eq!(fanout_name(FanoutMode::Hash), "hash");
        assert_eq!(fanout_name(FanoutMode::LoadBalance), "lb");
        assert_eq!(fanout_name(FanoutMode::Cpu), "cpu");
    }

    /// A missing input is named before anything else happens.
    #[test]
    fn a_missing_file_is_named() {
        let Err(e) = open_first(&[PathBuf::from("/nonexistent/x.pcap")]) else {
            panic!("opened a missing file");
        };
        assert_eq!(e.to_string(), "cannot open /nonexistent/x.pcap");
        assert!(matches!(open_first(&[]), Ok(None)));
    }
}
