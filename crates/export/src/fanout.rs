//! Several outputs fed the same records ([`Fanout`]): the flow meter's one sink when a run
//! writes, say, IPFIX to a collector and JSON lines to a file at once.

use weir_flows::{FlowRecord, RecordSink};

use crate::sink::{ExportStats, FlowSink};
use crate::ExportError;

/// Every output of a run, each under a name for messages ("ipfix udp://…", "json -"), fed the
/// same records in order. It is the meter's [`RecordSink`]: the first error stops the export
/// (the meter counts the records it could not take) and [`failed`](Self::failed) names the
/// output it came from.
#[derive(Default)]
pub struct Fanout {
    sinks: Vec<(String, Box<dyn FlowSink>)>,
    /// The sink whose error stopped the export.
    failed: Option<usize>,
    /// Where each output's totals so far are published at every tick, when asked.
    live: Option<LiveExports>,
}

/// Each output's totals so far, by name, as of the meter's last tick ([`Fanout::live`]).
pub type LiveExports = std::sync::Arc<std::sync::Mutex<Vec<(String, ExportStats)>>>;

/// One output that could not finish (flush, send what was pending).
#[derive(Debug, thiserror::Error)]
#[error("export to {name}")]
pub struct SinkError {
    /// The output's name.
    pub name: String,
    /// What went wrong.
    #[source]
    pub error: ExportError,
}

/// What [`Fanout::finish`] hands back.
#[derive(Debug)]
pub struct FanoutTotals {
    /// Each output that finished, by name, with its totals, in the order they were added.
    pub exports: Vec<(String, ExportStats)>,
    /// The first output that could not finish (the others are finished all the same).
    pub error: Option<SinkError>,
}

impl Fanout {
    /// No outputs yet.
    pub fn new() -> Fanout {
        Fanout::default()
    }

    /// Adds an output named `name`.
    pub fn push(&mut self, name: impl Into<String>, sink: Box<dyn FlowSink>) {
        self.sinks.push((name.into(), sink));
    }

    /// From now on, each output's totals so far are published in the returned cell at every
    /// tick of the meter (a fraction of a second apart while it runs), for live metrics.
    pub fn live(&mut self) -> LiveExports {
        let cell = self.live.get_or_insert_with(LiveExports::default).clone();
        self.publish();
        cell
    }

    fn publish(&self) {
        if let Some(cell) = &self.live {
            let now = self
                .sinks
                .iter()
                .map(|(n, s)| (n.clone(), s.stats()))
                .collect();
            *cell.lock().unwrap_or_else(|e| e.into_inner()) = now;
        }
    }

    /// Outputs.
    pub fn len(&self) -> usize {
        self.sinks.len()
    }

    /// True when there is no output.
    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }

    /// The name of the output whose error stopped the export, if one did.
    pub fn failed(&self) -> Option<&str> {
        self.failed
            .and_then(|i| self.sinks.get(i))
            .map(|(n, _)| n.as_str())
    }

    /// Finishes every output (sends what is pending, flushes) and returns their totals.
    pub fn finish(self) -> FanoutTotals {
        let mut exports = Vec::new();
        let mut error = None;
        for (name, mut s) in self.sinks {
            match s.finish() {
                Ok(st) => exports.push((name, st)),
                Err(e) => {
                    if error.is_none() {
                        error = Some(SinkError { name, error: e });
                    }
                }
            }
        }
        FanoutTotals { exports, error }
    }
}

impl RecordSink for Fanout {
    type Error = ExportError;

    #[inline]
    fn record(&mut self, rec: &FlowRecord) -> Result<(), ExportError> {
        for (i, (_, s)) in self.sinks.iter_mut().enumerate() {
            s.export(rec).inspect_err(|_| self.failed = Some(i))?;
        }
        Ok(())
    }

    fn tick(&mut self, now_ns: u64) -> Result<(), ExportError> {
        for (i, (_, s)) in self.sinks.iter_mut().enumerate() {
            s.tick(now_ns).inspect_err(|_| self.failed = Some(i))?;
        }
        self.publish();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that counts, and fails its `n`th record.
    struct Counting {
        records: u64,
        fail_at: Option<u64>,
    }

    impl FlowSink for Counting {
        fn export(&mut self, _: &FlowRecord) -> Result<(), ExportError> {
            self.records += 1;
            if Some(self.records) == self.fail_at {
                return Err(ExportError::Unsupported("test".into()));
            }
            Ok(())
        }
        fn tick(&mut self, _: u64) -> Result<(), ExportError> {
            Ok(())
        }
        fn finish(&mut self) -> Result<ExportStats, ExportError> {
            Ok(ExportStats {
                records: self.records,
                ..ExportStats::default()
            })
        }
    }

    fn rec() -> FlowRecord {
        FlowRecord {
            key: weir_flows::FlowKey {
                vlan: 0,
                src: std::net::Ipv4Addr::LOCALHOST.into(),
                dst: std::net::Ipv4Addr::LOCALHOST.into(),
                proto: 17,
                src_port: 1,
                dst_port: 2,
                tos: 0,
            },
            forward: weir_flows::Direction::default(),
            reverse: weir_flows::Direction::default(),
            end_reason: weir_flows::EndReason::IdleTimeout,
            tag: None,
        }
    }

    #[test]
    fn every_output_gets_every_record_and_a_failure_is_named() {
        let mut f = Fanout::new();
        f.push(
            "a",
            Box::new(Counting {
                records: 0,
                fail_at: None,
            }),
        );
        f.push(
            "b",
            Box::new(Counting {
                records: 0,
                fail_at: Some(3),
            }),
        );
        assert_eq!(f.len(), 2);
        for _ in 0..2 {
            f.record(&rec()).unwrap();
        }
        assert_eq!(f.failed(), None);
        assert!(f.record(&rec()).is_err());
        assert_eq!(f.failed(), Some("b"));
        let t = f.finish();
        assert!(t.error.is_none());
        let counts: Vec<(&str, u64)> = t
            .exports
            .iter()
            .map(|(n, s)| (n.as_str(), s.records))
            .collect();
        assert_eq!(counts, [("a", 3), ("b", 3)]);
    }
}
