//! The outputs of a meter run, opened together: [`Outputs`] names them (a NetFlow/IPFIX
//! exporter, CSV, JSON lines; JSON lines on stdout when none is named) and [`Outputs::open`]
//! opens them as one [`Fanout`], each under the name its messages and counters carry.

use std::path::{Path, PathBuf};

use crate::open::{open_sink_with, SinkSpec};
use crate::parquet_sink::ParquetSink;
use crate::threaded::Threaded;
use crate::{
    ExportError, ExportOptions, Fanout, KafkaOutput, NetflowFormat, ParquetOutput, Target,
};

/// Every output of a run (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// NetFlow v5 / v9 / IPFIX datagrams.
    pub netflow: Option<NetflowOutput>,
    /// CSV rows to this file (`-`: stdout).
    pub csv: Option<PathBuf>,
    /// Parquet files under a directory (see [`ParquetOutput`]).
    pub parquet: Option<ParquetOutput>,
    /// JSON lines to this file (`-`: stdout). With no output at all, JSON lines go to stdout.
    pub json: Option<PathBuf>,
    /// Flow records to Kafka.
    pub kafka: Option<KafkaOutput>,
    /// Export each record's tag (a run with rules): see
    /// [`ExportOptions::tags`](crate::ExportOptions::tags).
    pub tags: bool,
}

/// The NetFlow-family output of a run.
#[derive(Debug, Clone)]
pub struct NetflowOutput {
    /// Where the datagrams go.
    pub target: Target,
    /// The target as the user wrote it, for the output's name (`ipfix udp://127.0.0.1:2055`).
    pub label: String,
    /// The format.
    pub format: NetflowFormat,
    /// IPFIX: one RFC 5103 bidirectional record per flow.
    pub biflow: bool,
    /// IPFIX: nanosecond flow start and end.
    pub ts_nanos: bool,
}

/// An output that could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open {what}")]
pub struct OpenError {
    /// Which: `the exporter`, `the CSV output`, `the JSON output`.
    pub what: &'static str,
    /// Why.
    #[source]
    pub error: ExportError,
}

impl Target {
    /// A text output's target: `-` is stdout, anything else a file.
    pub fn from_path(path: &Path) -> Target {
        if path.as_os_str() == "-" {
            Target::Stdout
        } else {
            Target::File(path.to_path_buf())
        }
    }
}

impl Outputs {
    /// Opens every output, in the order NetFlow, CSV, Kafka, Parquet, JSON; each is named for messages and
    /// counters by its format and where it goes, in lower case (`v9 udp://127.0.0.1:2055`,
    /// `csv out.csv`, `json -`).
    pub fn open(&self) -> Result<Fanout, OpenError> {
        let mut sinks = Fanout::new();
        let opts = ExportOptions {
            tags: self.tags,
            ..ExportOptions::default()
        };
        let open = |spec: &SinkSpec, what| {
            open_sink_with(spec, &opts).map_err(|error| OpenError { what, error })
        };
        if let Some(n) = &self.netflow {
            let spec = SinkSpec::Netflow {
                target: n.target.clone(),
                format: n.format,
                biflow: n.biflow,
                ts_nanos: n.ts_nanos,
            };
            let name = format!("{:?} {}", n.format, n.label).to_lowercase();
            sinks.push(name, open(&spec, "the exporter")?);
        }
        if let Some(p) = &self.csv {
            let s = open(&SinkSpec::Csv(Target::from_path(p)), "the CSV output")?;
            sinks.push(format!("csv {}", p.display()), s);
        }
        if let Some(k) = &self.kafka {
            let s = open(&SinkSpec::Kafka(k.clone()), "the Kafka output")?;
            sinks.push(k.name(), s);
        }
        if let Some(p) = &self.parquet {
            // files written on a thread of their own, off the meter's
            let s = ParquetSink::open(p)
                .and_then(|s| Threaded::spawn("weir-parquet", s))
                .map_err(|error| OpenError {
                    what: "the Parquet output",
                    error,
                })?;
            sinks.push(format!("parquet {}", p.dir.display()), Box::new(s));
        }
        if self.json.is_some() || sinks.is_empty() {
            let p = self.json.clone().unwrap_or_else(|| PathBuf::from("-"));
            let s = open(&SinkSpec::Json(Target::from_path(&p)), "the JSON output")?;
            sinks.push(format!("json {}", p.display()), s);
        }
        Ok(sinks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(f: Fanout) -> Vec<String> {
        let t = f.finish();
        assert!(t.error.is_none());
        t.exports.into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn every_output_opens_under_its_name() {
        let dir = std::env::temp_dir().join(format!("weir-export-outputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (nf, csv, json) = (dir.join("F.ipfix"), dir.join("f.csv"), dir.join("f.json"));
        let label = format!("file:{}", nf.display());
        let outputs = Outputs {
            netflow: Some(NetflowOutput {
                target: label.parse().unwrap(),
                label: label.clone(),
                format: NetflowFormat::Ipfix,
                biflow: true,
                ts_nanos: false,
            }),
            csv: Some(csv.clone()),
            json: Some(json.clone()),
            kafka: None,
            parquet: None,
            tags: false,
        };
        let f = outputs.open().unwrap();
        assert_eq!(
            names(f),
            [
                format!("ipfix {label}").to_lowercase(),
                format!("csv {}", csv.display()),
                format!("json {}", json.display())
            ]
        );
        // every one was created; the CSV has its header row already
        assert!(nf.exists() && json.exists());
        assert!(std::fs::read_to_string(&csv)
            .unwrap()
            .starts_with("flowStartNanoseconds,"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn json_on_stdout_when_nothing_is_named() {
        assert_eq!(names(Outputs::default().open().unwrap()), ["json -"]);
        assert_eq!(Target::from_path(Path::new("-")), Target::Stdout);
        assert_eq!(
            Target::from_path(Path::new("a.json")),
            Target::File("a.json".into())
        );
    }

    #[test]
    fn an_output_that_cannot_open_is_named() {
        let outputs = Outputs {
            csv: Some("/nonexistent-dir/f.csv".into()),
            ..Outputs::default()
        };
        let Err(e) = outputs.open() else {
            panic!("a CSV file in a directory that does not exist opened")
        };
        assert_eq!(e.to_string(), "cannot open the CSV output");
        assert!(
            matches!(e.error, ExportError::Create { .. }),
            "{:?}",
            e.error
        );
    }
}
