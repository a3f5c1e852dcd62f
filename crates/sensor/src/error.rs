//! The errors of a job: each names what failed the way the command line says it (the file, the
//! socket, the rule file), and keeps its cause as its source.

use std::path::PathBuf;

/// Why a job could not start, or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SensorError {
    /// An input capture file did not open.
    #[error("cannot open {}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: weir_pcap::ReadError,
    },
    /// The rule file did not load (the message names its file, line and column).
    #[error(transparent)]
    RulesFile(#[from] weir_rules::FileError),
    /// The rule set did not compile (a `bpf` term libpcap refused, a duplicate id...): the
    /// message names the rule file.
    #[error("{}: {message}", path.display())]
    Rules {
        /// The rule file.
        path: PathBuf,
        /// The compiler's message.
        message: String,
    },
    /// Live capture or the import feed failed.
    #[error(transparent)]
    Capture(#[from] weir_capture::CaptureError),
    /// The packet buffer refused a reader.
    #[error(transparent)]
    Buffer(#[from] weir_buffer::BufferError),
    /// The store could not be locked, opened or written.
    #[error(transparent)]
    Store(#[from] weir_store::RecordError),
    /// The store's sizes cannot work.
    #[error(transparent)]
    Sizes(#[from] weir_store::SizeError),
    /// The control socket could not be served.
    #[error("control socket {}", path.display())]
    Control {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: weir_control::ControlError,
    },
    /// The metrics server could not be started (the port is in use, say).
    #[error(transparent)]
    Metrics(#[from] weir_metrics::ServeError),
    /// A flow output could not be opened.
    #[error(transparent)]
    FlowOutput(#[from] weir_export::OpenError),
    /// A statistics file could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error(transparent)]
    Thread(std::io::Error),
    /// A capture file could not be written.
    #[error(transparent)]
    PacketWrite(#[from] weir_pcap::WriteError),
    /// Classic pcap asked for interfaces of several link types.
    #[error("classic pcap holds one link type; use --format pcapng")]
    MixedLinks,
    /// A job that imports files was given none.
    #[error("give files to import")]
    NoInput,
    /// Interfaces of a live job were missing.
    #[error("give interfaces with -i")]
    NoInterface,
    /// The filter expression did not compile for an input's link type.
    #[error(transparent)]
    Filter(#[from] weir_filter::FilterSetError),
    /// An input could not be read (a replayed record, a parallel read).
    #[error(transparent)]
    Read(#[from] weir_pcap::ReadError),
    /// The flow meter's settings cannot work (more flows per shard than a shard holds).
    #[error(transparent)]
    MeterConfig(#[from] weir_flows::TooManyFlows),
    /// The live flow meter could not read the buffer, or capture failed under it.
    #[error(transparent)]
    Meter(#[from] weir_flows::LiveError),
    /// A flow statistics file could not be created or written.
    #[error(transparent)]
    Stats(#[from] weir_export::StatsFileError),
    /// A live stream could not be served.
    #[error(transparent)]
    Stream(#[from] crate::stream::StreamError),
    /// The web page could not be served.
    #[error(transparent)]
    Web(#[from] crate::web::WebError),
    /// The service could not become its configured user (`--user`).
    #[error(transparent)]
    Privilege(#[from] crate::privilege::PrivilegeError),
    /// An output (stdout, a file) could not be written.
    #[error(transparent)]
    Output(#[from] std::io::Error),
    /// The analyzers' Kafka output could not be opened, or lost messages.
    #[error(transparent)]
    Kafka(#[from] weir_export::ExportError),
    /// A call's chart could not be written.
    #[error(transparent)]
    Plot(#[from] weir_voip::plot::PlotError),
    /// A job's thread panicked.
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
}

impl SensorError {
    /// True when the error is a write to a reader that went away (a closed pipe).
    pub fn is_broken_pipe(&self) -> bool {
        let pipe = |e: &std::io::Error| e.kind() == std::io::ErrorKind::BrokenPipe;
        match self {
            SensorError::Output(e) => pipe(e),
            SensorError::PacketWrite(weir_pcap::WriteError::Io(e)) => pipe(e),
            _ => false,
        }
    }

    /// `e`, naming the rule file `path` when it is about the rules (a rule set that did not
    /// compile, for live capture or an import).
    pub(crate) fn about_rules(e: SensorError, path: Option<&std::path::Path>) -> SensorError {
        let about = matches!(
            e,
            SensorError::Capture(weir_capture::CaptureError::Rules(_))
        );
        match path {
            Some(p) if about => SensorError::Rules {
                path: p.to_path_buf(),
                message: e.to_string(),
            },
            _ => e,
        }
    }
}
