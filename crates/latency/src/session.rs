//! What one `weir latency` session analyses and what it tells about it: the labelled runs
//! ([`RunSpec`], from two files or `LABEL=A,B`), the matcher's [`Config`] from a window in
//! seconds, the check that the chart folder is writable before any work, the CSV rows of the
//! matched packets, the notices a run deserves ([`Notice`]) and the chart series of several runs.

use std::path::{Path, PathBuf};

use crate::analyze::{Config, Match, Run, Unstamped};
use crate::plot::Series;
use crate::report::Labelled;
use crate::LatencyError;

/// One pair of captures to match, with its label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSpec {
    /// Label in tables, charts and CSV rows.
    pub label: String,
    /// Capture at the first point.
    pub a: PathBuf,
    /// Capture at the second point.
    pub b: PathBuf,
}

impl RunSpec {
    /// Parses `LABEL=A,B` (the text of a `--run` option).
    pub fn parse(s: &str) -> Result<RunSpec, LatencyError> {
        let bad = || LatencyError::Config(format!("--run {s}: expected LABEL=A,B"));
        let (label, files) = s.split_once('=').ok_or_else(bad)?;
        let (a, b) = files.split_once(',').ok_or_else(bad)?;
        Ok(RunSpec {
            label: label.to_string(),
            a: a.into(),
            b: b.into(),
        })
    }

    /// The runs of a session: the pair `files` (labelled `run`) when given, then every
    /// `LABEL=A,B` of `runs`; at least one.
    pub fn all(files: &[PathBuf], runs: &[String]) -> Result<Vec<RunSpec>, LatencyError> {
        let mut v = Vec::new();
        if let [a, b] = files {
            v.push(RunSpec {
                label: "run".into(),
                a: a.clone(),
                b: b.clone(),
            });
        }
        for r in runs {
            v.push(RunSpec::parse(r)?);
        }
        if v.is_empty() {
            return Err(LatencyError::Config(
                "give two capture files A B, or --run LABEL=A,B".into(),
            ));
        }
        Ok(v)
    }
}

impl Config {
    /// The matcher's settings from a window in seconds (positive).
    pub fn new(
        window_s: f64,
        offset_ns: i64,
        stamps: bool,
        unstamped: Unstamped,
    ) -> Result<Config, LatencyError> {
        if window_s.is_nan() || window_s <= 0.0 {
            return Err(LatencyError::Config("--window must be positive".into()));
        }
        Ok(Config {
            window_ns: (window_s * 1e9) as u64,
            offset_ns,
            stamps,
            unstamped,
        })
    }
}

/// Makes sure the charts can be written into `dir` (creating it), before any work is done.
pub fn check_plot_dir(dir: &Path) -> Result<(), LatencyError> {
    let fail = |e: std::io::Error| {
        LatencyError::Config(format!(
            "cannot write the charts into {}: {e}",
            dir.display()
        ))
    };
    weir_packet::output::create_dir(dir).map_err(fail)?;
    let probe = dir.join(format!(".weir-probe-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// The header of the CSV of matched packets.
pub const CSV_HEADER: &str = "run,stream,seq,a_ns,b_ns,latency_ns,len";

/// The CSV row (no line end) of a matched packet of run `label`.
pub fn csv_row(label: &str, m: &Match<'_>) -> String {
    format!(
        "{label},{},{},{},{},{},{}",
        m.stream, m.seq, m.a_ns, m.b_ns, m.latency_ns, m.len
    )
}

/// How much a [`Notice`] matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// An input is damaged: the run used every packet before the damage.
    Damage,
    /// The figures are suspect.
    Warning,
    /// Good to know.
    Info,
}

/// Something to tell about a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// How much it matters.
    pub level: Level,
    /// The text.
    pub text: String,
}

impl Run {
    /// What to tell about run `label`: damage in its inputs, negative latencies (clocks not in
    /// step), hash matches refused on the bytes.
    pub fn notices(&self, label: &str) -> Vec<Notice> {
        let mut v: Vec<Notice> = self
            .damage
            .iter()
            .map(|d| Notice {
                level: Level::Damage,
                text: d.clone(),
            })
            .collect();
        let negative: u64 = self.streams.iter().map(|(_, s)| s.negative).sum();
        if negative > 0 {
            v.push(Notice {
                level: Level::Warning,
                text: format!(
                    "{label}: {negative} packets have a negative latency: the two clocks are not in step (correct a constant offset with --offset NS)"
                ),
            });
        }
        if self.collisions > 0 {
            v.push(Notice {
                level: Level::Info,
                text: format!(
                    "{label}: {} hash matches refused on the bytes (collisions)",
                    self.collisions
                ),
            });
        }
        v
    }
}

/// The runs with their labels, for [`crate::report`].
pub fn labelled(results: &[(String, Run)]) -> Vec<Labelled<'_>> {
    results
        .iter()
        .map(|(l, r)| Labelled { label: l, run: r })
        .collect()
}

/// One chart line per stream of every run: named by the stream alone for one run, else
/// `LABEL: STREAM`.
pub fn series(results: &[(String, Run)]) -> Vec<Series<'_>> {
    let one = results.len() == 1;
    results
        .iter()
        .flat_map(|(label, run)| {
            run.streams.iter().map(move |(name, st)| Series {
                label: if one {
                    name.clone()
                } else {
                    format!("{label}: {name}")
                },
                stats: st,
                start_ns: run.start_ns,
            })
        })
        .collect()
}

/// What a whole `weir latency` session writes: the JSON document, the CSV rows (one per matched
/// packet) and the charts; `-` is stdout. The table goes to stdout unless JSON or CSV does.
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct Outputs {
    /// Write the results as JSON to this file (`-` for stdout).
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub json: Option<PathBuf>,
    /// Write one CSV row per matched packet to this file (`-` for stdout).
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub csv: Option<PathBuf>,
    /// Draw CDF, box-plot and latency-over-time charts (SVG and PNG) into this directory.
    #[cfg_attr(feature = "clap", arg(long, value_name = "DIR"))]
    pub plot: Option<PathBuf>,
}

/// A whole session as a user gives it (with the `clap` feature, the options of `weir
/// latency`): two captures or labelled runs, the matching settings and the outputs.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct Session {
    /// Capture at the first point (sender side) and at the second point (receiver side).
    #[cfg_attr(feature = "clap", arg(value_names = ["A", "B"], num_args = 2))]
    pub files: Vec<PathBuf>,
    /// A labelled run, LABEL=A,B (repeat to overlay several runs in the table and charts).
    #[cfg_attr(feature = "clap", arg(long = "run", value_name = "LABEL=A,B"))]
    pub runs: Vec<String>,
    /// Longest latency a match may have, in seconds (memory holds two windows of packets).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1.0, value_name = "SECONDS",
          value_parser = weir_packet::value::seconds, allow_negative_numbers = true))]
    pub window: f64,
    /// Clock offset of B relative to A in ns, subtracted from B's timestamps.
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            default_value_t = 0,
            allow_hyphen_values = true,
            value_name = "NS"
        )
    )]
    pub offset: i64,
    /// Ignore weir gen stamps: match every packet by its invariant bytes.
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_stamps: bool,
    /// How packets without a stamp are grouped into streams.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = Unstamped::One))]
    pub unstamped: Unstamped,
    /// What the session writes.
    #[cfg_attr(feature = "clap", command(flatten))]
    pub outputs: Outputs,
}

impl Session {
    /// Checks the settings and the runs, then [`run`]s them; true when an input was damaged.
    pub fn run(&self, say: &mut dyn FnMut(Say<'_>)) -> Result<bool, SessionError> {
        let cfg = Config::new(self.window, self.offset, !self.no_stamps, self.unstamped)?;
        let runs = RunSpec::all(&self.files, &self.runs)?;
        run(&cfg, runs, &self.outputs, say)
    }
}

/// What [`run`] tells its caller as it goes.
#[derive(Debug)]
pub enum Say<'a> {
    /// A run's notice.
    Notice(&'a Notice),
    /// The table, when stdout carries the JSON or the CSV (for stderr).
    Table(&'a str),
    /// The charts were written: how many, where.
    Charts(usize, &'a Path),
}

/// Errors of a session ([`run`]): each names what it was doing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// Settings, runs or the chart folder.
    #[error(transparent)]
    Latency(#[from] LatencyError),
    /// One run could not be analysed.
    #[error("cannot analyse {} against {}", a.display(), b.display())]
    Analyse {
        /// First capture.
        a: PathBuf,
        /// Second capture.
        b: PathBuf,
        /// Why.
        #[source]
        source: LatencyError,
    },
    /// The charts could not be drawn.
    #[error("cannot draw the charts into {}", dir.display())]
    Plot {
        /// The folder.
        dir: PathBuf,
        /// Why.
        #[source]
        source: LatencyError,
    },
    /// An output could not be created.
    #[error(transparent)]
    Open(#[from] weir_packet::output::OpenError),
    /// An output could not be written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Runs a session: matches every run with `cfg`, writing the CSV rows as it goes, then the JSON,
/// the table and the charts of `out`; tells its notices, the table (when stdout is taken) and
/// the charts through `say`. Returns whether some input was damaged.
pub fn run(
    cfg: &Config,
    runs: Vec<RunSpec>,
    out: &Outputs,
    say: &mut dyn FnMut(Say<'_>),
) -> Result<bool, SessionError> {
    use std::io::{BufWriter, Write};
    use weir_packet::output;
    let inputs: Vec<&PathBuf> = runs.iter().flat_map(|r| [&r.a, &r.b]).collect();
    for o in [&out.json, &out.csv].into_iter().flatten() {
        output::check_inputs(&inputs, Some(o))?;
    }
    if let Some(dir) = &out.plot {
        check_plot_dir(dir)?;
    }
    let mut csv = match &out.csv {
        Some(p) => {
            let mut w = BufWriter::with_capacity(1 << 20, output::create(p)?);
            writeln!(w, "{CSV_HEADER}")?;
            Some(w)
        }
        None => None,
    };
    let mut results: Vec<(String, Run)> = Vec::new();
    let mut damaged = false;
    for RunSpec { label, a, b } in runs {
        let mut csv_err = None;
        let run = crate::analyze(&a, &b, cfg, &mut |m| {
            if let Some(w) = &mut csv {
                if let Err(e) = writeln!(w, "{}", csv_row(&label, m)) {
                    csv_err.get_or_insert(e);
                }
            }
        });
        let run = run.map_err(|source| SessionError::Analyse { a, b, source })?;
        if let Some(e) = csv_err {
            return Err(e.into());
        }
        for n in run.notices(&label) {
            damaged |= n.level == Level::Damage;
            say(Say::Notice(&n));
        }
        results.push((label, run));
    }
    if let Some(w) = csv {
        w.into_inner().map_err(|e| e.into_error())?.commit()?;
    }
    let labelled = labelled(&results);
    if let Some(p) = &out.json {
        let mut o = output::create(p)?;
        let json = serde_json::to_string_pretty(&crate::report::json(&labelled))
            .map_err(std::io::Error::from)?;
        writeln!(o, "{json}")?;
        o.commit()?;
    }
    let to_stdout = |p: &Option<PathBuf>| p.as_ref().is_some_and(|p| p.as_os_str() == "-");
    let table = crate::report::table(&labelled);
    if to_stdout(&out.json) || to_stdout(&out.csv) {
        say(Say::Table(&table));
    } else {
        let mut o = output::stdout();
        write!(o, "{table}")?;
        o.commit()?;
    }
    if let Some(dir) = &out.plot {
        let files =
            crate::plot::plot_all(dir, &series(&results)).map_err(|source| SessionError::Plot {
                dir: dir.clone(),
                source,
            })?;
        say(Say::Charts(files.len(), dir));
    }
    Ok(damaged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::StreamStats;

    #[test]
    fn runs_come_from_two_files_or_labels() {
        let v = RunSpec::all(&["a.pcap".into(), "b.pcap".into()], &["fq=x,y".into()]).unwrap();
        assert_eq!(
            v,
            [
                RunSpec {
                    label: "run".into(),
                    a: "a.pcap".into(),
                    b: "b.pcap".into()
                },
                RunSpec {
                    label: "fq".into(),
                    a: "x".into(),
                    b: "y".into()
                }
            ]
        );
        for bad in ["fq", "fq=x", "x,y"] {
            assert_eq!(
                RunSpec::parse(bad).unwrap_err().to_string(),
                format!("--run {bad}: expected LABEL=A,B")
            );
        }
        assert_eq!(
            RunSpec::all(&[], &[]).unwrap_err().to_string(),
            "give two capture files A B, or --run LABEL=A,B"
        );
    }

    #[test]
    fn window_must_be_positive() {
        let c = Config::new(0.25, -7, false, Unstamped::ByFlow).unwrap();
        assert_eq!(c.window_ns, 250_000_000);
        assert_eq!(c.offset_ns, -7);
        for w in [0.0, -1.0, f64::NAN] {
            assert_eq!(
                Config::new(w, 0, true, Unstamped::One)
                    .unwrap_err()
                    .to_string(),
                "--window must be positive"
            );
        }
    }

    #[test]
    fn csv_rows_and_notices() {
        let m = Match {
            stream: "stream 3",
            seq: 9,
            a_ns: 100,
            b_ns: 150,
            latency_ns: 50,
            len: 60,
        };
        assert_eq!(csv_row("fq", &m), "fq,stream 3,9,100,150,50,60");
        let mut st = StreamStats::default();
        st.negative = 2;
        let run = Run {
            streams: vec![("stream 3".into(), st)],
            packets: (0, 0),
            skipped: (0, 0),
            collisions: 1,
            peak_pending: 0,
            start_ns: 0,
            damage: vec!["b.pcap: damaged at byte 24".into()],
        };
        let n = run.notices("fq");
        assert_eq!(
            n.iter().map(|n| n.level).collect::<Vec<_>>(),
            [Level::Damage, Level::Warning, Level::Info]
        );
        assert_eq!(n[0].text, "b.pcap: damaged at byte 24");
        assert!(n[1]
            .text
            .starts_with("fq: 2 packets have a negative latency"));
        assert_eq!(
            n[2].text,
            "fq: 1 hash matches refused on the bytes (collisions)"
        );
        let results = vec![("fq".to_string(), run)];
        assert_eq!(series(&results)[0].label, "stream 3");
        assert_eq!(labelled(&results)[0].label, "fq");
    }

    #[test]
    fn plot_dir_is_checked_before_work() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("charts/deep");
        check_plot_dir(&sub).unwrap();
        assert!(sub.is_dir());
        assert_eq!(std::fs::read_dir(&sub).unwrap().count(), 0);
        let file = d.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let e = check_plot_dir(&file.join("x")).unwrap_err().to_string();
        assert!(e.starts_with(&format!(
            "cannot write the charts into {}: ",
            file.join("x").display()
        )));
    }
}
