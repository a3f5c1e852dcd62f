//! The HTTP job of a live capture (`weir http -i`) and the HTTP analyzer beside a recorder
//! (`weir record --http`): weir-http's [`LiveAnalyzer`] as one reader of the capture
//! pipeline's packet buffer, its logs written in place (a process killed mid-run leaves whole
//! lines up to the last second), every pending transaction written when the job stops.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weir_capture::PipelineConfig;
use weir_http::live::{LiveAnalyzer, LiveEnd};
use weir_http::log::{Format, LogWriter};
use weir_http::Analyzer;

use crate::live::announcement;
use crate::{Controls, Event, SensorError};

/// Where the analyzer's records go.
#[derive(Clone, Debug)]
pub struct HttpLogs {
    /// Format of the HTTP log.
    pub format: Format,
    /// The HTTP log (`-`: stdout).
    pub http: PathBuf,
    /// The TLS log (JSON lines), if any (`-`: stdout).
    pub tls: Option<PathBuf>,
}

/// An output that names itself in its errors (`cannot write PATH: ...`, the kind kept).
pub struct Named {
    out: Box<dyn Write + Send>,
    name: String,
}

impl Write for Named {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.out.write(b).map_err(|e| named(&self.name, e))
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush().map_err(|e| named(&self.name, e))
    }
}

fn named(name: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("cannot write {name}: {e}"))
}

fn open(path: &Path) -> Result<Named, SensorError> {
    if path.as_os_str() == "-" {
        return Ok(Named {
            out: Box::new(io::stdout()),
            name: "to stdout".into(),
        });
    }
    let file = File::create(path).map_err(|source| SensorError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Named {
        out: Box::new(file),
        name: path.display().to_string(),
    })
}

impl HttpLogs {
    /// Opens (creates or truncates) the logs, in place.
    pub fn open(&self) -> Result<LogWriter<Named>, SensorError> {
        let http = open(&self.http)?;
        let tls = self.tls.as_deref().map(open).transpose()?;
        Ok(LogWriter::new(self.format, http, tls))
    }
}

/// The HTTP analyzer beside a recorder (`weir record --http`): a best-effort reader of the
/// recorder's buffer (when it falls behind it is skipped forward, never costing the recording a
/// packet; the holes become gaps in its records).
#[derive(Clone, Debug)]
pub struct HttpBeside {
    /// The analyzer's bounds.
    pub analyzer: weir_http::Config,
    /// Where records go.
    pub logs: HttpLogs,
}

impl HttpBeside {
    /// Starts the analyzer on `reader`, writing to `writer` (the logs opened before anything
    /// else started, so that a bad path fails first).
    pub(crate) fn spawn(
        &self,
        writer: LogWriter<Named>,
        reader: weir_buffer::Reader,
        interfaces: &[weir_pcap::Interface],
    ) -> Result<LiveAnalyzer, SensorError> {
        let links = interfaces.iter().map(|i| i.link).collect();
        LiveAnalyzer::spawn(Analyzer::new(self.analyzer), reader, links, writer)
            .map_err(SensorError::Thread)
    }
}

/// What `weir http -i` does.
#[derive(Clone, Debug)]
pub struct HttpLiveConfig {
    /// The capture (its readers are set by the job).
    pub pipeline: PipelineConfig,
    /// The analyzer's bounds.
    pub analyzer: weir_http::Config,
    /// Where records go.
    pub logs: HttpLogs,
    /// Stop after this long.
    pub duration: Option<Duration>,
}

/// What `weir http -i` did.
#[derive(Debug)]
pub struct HttpLiveReport {
    /// The analyzer's counters and first write error.
    pub end: LiveEnd,
    /// Capture's counters.
    pub live: crate::flows::LiveEnd,
    /// A capture thread's error, if capture failed.
    pub capture_error: Option<weir_capture::CaptureError>,
}

/// How often the job looks at its flags.
const POLL: Duration = Duration::from_millis(100);

/// Runs `weir http -i` until `controls.stop` is set, the duration has passed or capture fails;
/// then stops capture, analyzes what is left in the buffer and writes every pending
/// transaction.
pub fn run_live(
    cfg: &HttpLiveConfig,
    controls: &Controls,
    events: &mut dyn FnMut(Event),
) -> Result<HttpLiveReport, SensorError> {
    let mut pipeline_cfg = cfg.pipeline.clone();
    pipeline_cfg.readers = 1;
    pipeline_cfg.best_effort_readers = 0;
    // capture first: a missing interface leaves no empty log behind
    let mut pipeline = weir_capture::Pipeline::start(&pipeline_cfg)?;
    let writer = match cfg.logs.open() {
        Ok(w) => w,
        Err(e) => {
            let _ = pipeline.stop();
            return Err(e);
        }
    };
    for line in announcement(&pipeline_cfg, &pipeline, "analyzing HTTP and TLS") {
        events(line);
    }
    let links = pipeline.interfaces().iter().map(|i| i.link).collect();
    let live = LiveAnalyzer::spawn(
        Analyzer::new(cfg.analyzer),
        pipeline.buffer().reader(0)?,
        links,
        writer,
    )
    .map_err(SensorError::Thread)?;
    let deadline = cfg.duration.map(|d| Instant::now() + d);
    while !controls.stop.load(std::sync::atomic::Ordering::Relaxed)
        && !pipeline.failed()
        && deadline.is_none_or(|d| Instant::now() < d)
    {
        std::thread::sleep(POLL);
    }
    let stopped = pipeline.stop();
    let (totals, buffer) = (pipeline.counters().totals(), pipeline.buffer().stats());
    let end = live.finish();
    Ok(HttpLiveReport {
        end,
        live: crate::flows::LiveEnd { totals, buffer },
        capture_error: stopped.err(),
    })
}
