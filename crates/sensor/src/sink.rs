//! Where a capture job's packets go ([`PacketSink`]): a file ([`crate::capture::FileSink`]),
//! lines ([`crate::lines::LinePrinter`]), a live stream ([`crate::stream`]); its own module so
//! that the sinks and the job ([`crate::capture`]) each depend on it, not on one another.

use weir_buffer::Record;
use weir_pcap::Interface;

use crate::SensorError;

/// Where a capture job's packets go.
pub trait PacketSink {
    /// The sink's errors; a job's own errors convert into them.
    type Error: From<SensorError>;
    /// Takes one packet; `interfaces` are the pipeline's, in the records' interface-id order.
    fn packet(&mut self, interfaces: &[Interface], record: &Record<'_>) -> Result<(), Self::Error>;
    /// Hands what is buffered to its reader (called when the buffer is idle).
    fn flush(&mut self) -> Result<(), Self::Error>;
    /// True when the sink's reader went away (a closed pipe): the job ends quietly.
    fn closed(&self) -> bool {
        false
    }
    /// True when a write already found the reader gone: asked after every batch (cheap), the
    /// job then ends as for [`closed`](PacketSink::closed).
    fn gone(&self) -> bool {
        false
    }
}
