//! The end of a meter run: [`RunReport::finish`] finishes every output of a finished meter
//! (its [`Fanout`]) and gathers what the run counted (the meter's counters, each output's
//! totals) with the run's first export error; [`RunReport::summary`] says it in words and
//! [`RunReport::to_json`] as the JSON of `--stats`, which a [`StatsFile`] writes.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use weir_flows::{MeterStats, Metered};

use crate::{ExportError, ExportStats, Fanout, SinkError};

/// What a finished meter run counted.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// Packets read, before the filter.
    pub read: u64,
    /// The meter's counters.
    pub meter: MeterStats,
    /// Each output's totals, by name, in the order they were opened.
    pub exports: Vec<(String, ExportStats)>,
    /// The output whose reader closed it (a closed pipe stopped the export: `weir flows
    /// --csv - | head -c1`), by name; the run ends quietly and the summary says so instead of
    /// "lost to a failed exporter".
    pub reader_closed: Option<String>,
}

/// Why a meter run's export failed (the run itself went on to its end).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// An output failed while records were written, or when it was finished.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// An output could not send some datagrams (a collector unreachable, say).
    #[error(
        "export to {name}: {records} records could not be sent (send errors; counted per \
         collector)"
    )]
    Dropped {
        /// The output.
        name: String,
        /// Records in the datagrams not sent.
        records: u64,
    },
    /// A Kafka output could not deliver some messages.
    #[error(
        "export to {name}: {messages} messages not delivered (failed, or lost to a full queue: \
         see the summary)"
    )]
    KafkaLost {
        /// The output.
        name: String,
        /// Messages failed or lost to overflow.
        messages: u64,
    },
}

impl RunReport {
    /// Finishes every output of `run` (sends what is pending, flushes) and returns the report
    /// with the run's first export error: the error that stopped the export while metering
    /// (named by the output it came from, "a sink" if none is known), else the first output
    /// that could not finish, else the first that dropped records.
    pub fn finish(run: Metered<Fanout>) -> (RunReport, Option<RunError>) {
        let done = run.meter;
        let name = done.sink.failed().unwrap_or("a sink").to_owned();
        let mut first = done
            .error
            .map(|error| RunError::Sink(SinkError { name, error }));
        let totals = done.sink.finish();
        if first.is_none() {
            first = totals.error.map(RunError::Sink);
        }
        if first.is_none() {
            first = totals
                .exports
                .iter()
                .find(|(_, e)| e.dropped > 0)
                .map(|(name, e)| match e.kafka {
                    Some(_) => RunError::KafkaLost {
                        name: name.clone(),
                        messages: e.dropped,
                    },
                    None => RunError::Dropped {
                        name: name.clone(),
                        records: e.dropped,
                    },
                });
        }
        let reader_closed = match &first {
            Some(RunError::Sink(e)) if is_broken_pipe(&e.error) => Some(e.name.clone()),
            _ => None,
        };
        let report = RunReport {
            read: run.packets,
            meter: done.stats,
            exports: totals.exports,
            reader_closed,
        };
        (report, first)
    }

    /// Every counter in words, one line each (each ending in `\n`): the meter's
    /// ([`MeterStats::summary`]) with a line per output, and a warning line after an output
    /// whose NetFlow times had to be clamped.
    pub fn summary(&self) -> String {
        let mut outputs = String::new();
        for (name, e) in &self.exports {
            if let Some(k) = &e.kafka {
                outputs += &format!(
                    "  {name}: {} records, {} messages ({} bytes): {} delivered, {} failed, {} \
                     lost to a full queue (of {})\n",
                    e.records, k.messages, e.bytes, k.delivered, k.failed, k.overflow, k.queue
                );
                if k.records_lost > k.failed + k.overflow {
                    outputs += &format!(
                        "weir: warning: {name}: {} records were in the failed or lost messages\n",
                        k.records_lost
                    );
                }
                if let Some(err) = k.last_error().filter(|_| k.failed > 0) {
                    outputs += &format!("weir: warning: {name}: last delivery error: {err}\n");
                }
                continue;
            }
            if e.temp_removed > 0 {
                outputs += &format!(
                    "weir: warning: {name}: removed {} hidden temporary files a killed earlier run \
                     left\n",
                    e.temp_removed
                );
            }
            if e.files > 0 || name.starts_with("parquet ") {
                outputs += &format!(
                    "  {name}: {} records in {} files, {} bytes, {} dropped\n",
                    e.records, e.files, e.bytes, e.dropped
                );
                continue;
            }
            outputs += &format!(
                "  {name}: {} records, {} datagrams, {} bytes, {} dropped, {} IPv6 flows not \
                 exportable as v5\n",
                e.records, e.datagrams, e.bytes, e.dropped, e.dropped_v5_ipv6
            );
            if e.times_clamped > 0 {
                outputs += &format!(
                    "weir: warning: {name}: {} records last longer than the 49.7 days NetFlow's \
                     32-bit uptime spans: their end time was clamped\n",
                    e.times_clamped
                );
            }
            if e.tags_not_exported > 0 {
                outputs += &format!(
                    "weir: warning: {name}: {} tagged records exported without their tag (this \
                     output has no field for tags{})\n",
                    e.tags_not_exported,
                    if name.starts_with("v5") {
                        ": NetFlow v5's record is fixed; use --format v9 or ipfix"
                    } else {
                        ""
                    }
                );
            }
        }
        match &self.reader_closed {
            Some(name) => self.meter.summary_with_loss(
                self.read,
                &outputs,
                &format!("not written: the reader closed {name}"),
            ),
            None => self.meter.summary(self.read, &outputs),
        }
    }

    /// Every counter as JSON: the meter's ([`MeterStats::to_json`]) and `"exports"`, one
    /// object per output.
    pub fn to_json(&self) -> Value {
        let mut m = self.meter.to_json(self.read);
        let exports = self.exports.iter().map(|(n, e)| {
            let mut o = json!({
                "sink": n,
                "records": e.records,
                "datagrams": e.datagrams,
                "bytes": e.bytes,
                "dropped": e.dropped,
                "dropped_v5_ipv6": e.dropped_v5_ipv6,
                "times_clamped": e.times_clamped,
            });
            if e.tags_not_exported > 0 {
                o["tags_not_exported"] = e.tags_not_exported.into();
            }
            if e.files > 0 || n.starts_with("parquet ") {
                o["files"] = e.files.into();
                o["temp_removed"] = e.temp_removed.into();
            }
            if let Some(k) = &e.kafka {
                o["kafka"] = json!({
                    "messages": k.messages,
                    "delivered": k.delivered,
                    "failed": k.failed,
                    "overflow": k.overflow,
                    "records_lost": k.records_lost,
                    "unacknowledged": k.unacknowledged,
                    "records_unacknowledged": k.records_unacknowledged,
                    "queue": k.queue,
                    "last_error": k.last_error(),
                });
            }
            o
        });
        m.insert("exports".into(), Value::Array(exports.collect()));
        if let Some(name) = &self.reader_closed {
            m.insert("output_closed_by_reader".into(), name.as_str().into());
        }
        Value::Object(m)
    }
}

/// True when `err` is a write to a reader that went away (a closed pipe), anywhere in its
/// chain of causes.
fn is_broken_pipe(err: &ExportError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// A file the report of a run goes to, created before the run (so that a bad path fails
/// before the run rather than after it) and written at its end.
#[derive(Debug)]
pub struct StatsFile {
    path: PathBuf,
    file: std::fs::File,
}

/// A stats file that could not be created or written.
#[derive(Debug, thiserror::Error)]
pub enum StatsFileError {
    /// Creating it failed.
    #[error("cannot create {}", path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing it failed.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl StatsFile {
    /// Creates (or truncates) `path` now.
    pub fn create(path: &Path) -> Result<StatsFile, StatsFileError> {
        let file = std::fs::File::create(path).map_err(|source| StatsFileError::Create {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(StatsFile {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Writes `report` ([`RunReport::to_json`], pretty-printed, with a final newline).
    pub fn write(self, report: &RunReport) -> Result<(), StatsFileError> {
        self.write_with(report, Map::new())
    }

    /// [`write`](Self::write) with more top-level keys (`weir flows --rules` adds `rules`).
    pub fn write_with(
        mut self,
        report: &RunReport,
        extra: Map<String, Value>,
    ) -> Result<(), StatsFileError> {
        let mut v = report.to_json();
        if let Value::Object(m) = &mut v {
            m.extend(extra);
        }
        self.file
            .write_all(format!("{v:#}\n").as_bytes())
            .map_err(|source| StatsFileError::Write {
                path: self.path,
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use weir_flows::{Direction, EndReason, FlowKey, FlowRecord, Meter, RecordSink};

    use super::*;
    use crate::{ExportError, FlowSink};

    /// A sink that counts records, fails its `fail_at`th, and reports `dropped` at the end.
    struct Counting {
        records: u64,
        fail_at: Option<u64>,
        dropped: u64,
        clamped: u64,
    }

    fn counting(fail_at: Option<u64>, dropped: u64, clamped: u64) -> Box<dyn FlowSink> {
        Box::new(Counting {
            records: 0,
            fail_at,
            dropped,
            clamped,
        })
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
                datagrams: 2,
                bytes: 300,
                dropped: self.dropped,
                times_clamped: self.clamped,
                ..ExportStats::default()
            })
        }
    }

    fn rec(port: u16) -> FlowRecord {
        FlowRecord {
            key: FlowKey {
                vlan: 0,
                src: std::net::Ipv4Addr::LOCALHOST.into(),
                dst: std::net::Ipv4Addr::LOCALHOST.into(),
                proto: 17,
                src_port: port,
                dst_port: 2,
                tos: 0,
            },
            forward: Direction::default(),
            reverse: Direction::default(),
            end_reason: EndReason::IdleTimeout,
            tag: None,
        }
    }

    /// A run of `records` records into `sinks`, as a meter hands it over.
    fn run(sinks: Vec<(&str, Box<dyn FlowSink>)>, records: u16) -> Metered<Fanout> {
        let mut f = Fanout::new();
        for (n, s) in sinks {
            f.push(n, s);
        }
        let mut meter = Meter::new(&weir_flows::Config::default(), f).finish();
        for p in 0..records {
            if let Err(e) = meter.sink.record(&rec(p)) {
                meter.error.get_or_insert(e);
            }
        }
        Metered { packets: 10, meter }
    }

    #[test]
    fn summary_and_json_carry_every_output() {
        let (r, err) = RunReport::finish(run(
            vec![
                ("json -", counting(None, 0, 0)),
                ("v9 x", counting(None, 0, 4)),
            ],
            3,
        ));
        assert!(err.is_none());
        assert_eq!(r.read, 10);
        let s = r.summary();
        assert!(s.starts_with("weir flows: 10 packets read, 10 not matching the filter, 0 metered"));
        assert!(
            s.contains(
                "lost to a failed exporter\n  json -: 3 records, 2 datagrams, 300 bytes, 0 \
                 dropped, 0 IPv6 flows not exportable as v5\n  v9 x: 3 records, 2 datagrams, \
                 300 bytes, 0 dropped, 0 IPv6 flows not exportable as v5\nweir: warning: v9 x: \
                 4 records last longer than the 49.7 days NetFlow's 32-bit uptime spans: their \
                 end time was clamped\n  memory: "
            ),
            "{s}"
        );
        let j = r.to_json();
        assert_eq!(j["packets_read"], 10);
        assert_eq!(j["exports"].as_array().unwrap().len(), 2);
        assert_eq!(
            j["exports"][1],
            json!({"sink": "v9 x", "records": 3, "datagrams": 2, "bytes": 300, "dropped": 0,
                   "dropped_v5_ipv6": 0, "times_clamped": 4})
        );
    }

    /// Fails its first record with a write to a closed pipe (`--csv - | head -c1`).
    struct ClosedPipe;

    impl FlowSink for ClosedPipe {
        fn export(&mut self, _: &FlowRecord) -> Result<(), ExportError> {
            Err(ExportError::Write(std::io::ErrorKind::BrokenPipe.into()))
        }
        fn tick(&mut self, _: u64) -> Result<(), ExportError> {
            Ok(())
        }
        fn finish(&mut self) -> Result<ExportStats, ExportError> {
            Ok(ExportStats::default())
        }
    }

    /// A reader that closed the output is said so, not "a failed exporter"; any other error
    /// keeps the words.
    #[test]
    fn a_reader_that_closed_the_output_is_said_so() {
        let (r, err) = RunReport::finish(run(vec![("csv -", Box::new(ClosedPipe))], 3));
        assert_eq!(err.unwrap().to_string(), "export to csv -");
        assert_eq!(r.reader_closed.as_deref(), Some("csv -"));
        let s = r.summary();
        assert!(
            s.contains(" not written: the reader closed csv -\n") && !s.contains("failed exporter"),
            "{s}"
        );
        assert_eq!(r.to_json()["output_closed_by_reader"], "csv -");
        let (r, _) = RunReport::finish(run(vec![("b", counting(Some(2), 0, 0))], 3));
        assert_eq!(r.reader_closed, None);
        assert!(r.summary().contains(" lost to a failed exporter\n"));
        assert!(r.to_json().get("output_closed_by_reader").is_none());
    }

    #[test]
    fn the_first_export_error_is_the_result() {
        // a sink failing while records are written comes first, named
        let (r, err) = RunReport::finish(run(
            vec![("a", counting(None, 5, 0)), ("b", counting(Some(2), 0, 0))],
            3,
        ));
        let err = err.unwrap();
        assert_eq!(err.to_string(), "export to b");
        let cause = std::error::Error::source(&err).unwrap().to_string();
        assert_eq!(cause, "unsupported export: test");
        assert_eq!(r.exports.len(), 2, "every output is finished all the same");
        // else an output that dropped records
        let (_, err) = RunReport::finish(run(
            vec![
                ("a", counting(None, 0, 0)),
                ("v5 udp://c", counting(None, 7, 0)),
            ],
            3,
        ));
        assert_eq!(
            err.unwrap().to_string(),
            "export to v5 udp://c: 7 records could not be sent (send errors; counted per \
             collector)"
        );
    }

    #[test]
    fn the_stats_file_holds_the_json() {
        let dir = std::env::temp_dir().join(format!("weir-export-stats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.json");
        let f = StatsFile::create(&p).unwrap();
        let (r, _) = RunReport::finish(run(vec![("json -", counting(None, 0, 0))], 1));
        f.write(&r).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.ends_with("}\n"));
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r.to_json());
        let bad = dir.join("no/such/dir/s.json");
        let e = StatsFile::create(&bad).unwrap_err();
        assert_eq!(e.to_string(), format!("cannot create {}", bad.display()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
