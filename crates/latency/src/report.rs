//! The readable table and the JSON document of one or several labelled runs.

use serde::Serialize;

use crate::analyze::Run;
use crate::stats::Summary;

/// A run and its label (e.g. the queueing setup it measured).
pub struct Labelled<'a> {
    /// The label.
    pub label: &'a str,
    /// The run.
    pub run: &'a Run,
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

/// The table: one line per stream of each run, latencies in µs.
pub fn table(runs: &[Labelled<'_>]) -> String {
    let header = [
        "run", "stream", "sent", "recv", "lost", "dup", "reord", "min", "p50", "p90", "p99",
        "p99.9", "max", "mean", "stddev", "jitter",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in runs {
        for (name, st) in &r.run.streams {
            let s = st.summary();
            rows.push(vec![
                r.label.to_string(),
                name.clone(),
                s.sent.to_string(),
                s.received.to_string(),
                s.lost.to_string(),
                s.duplicated.to_string(),
                s.reordered.to_string(),
                us(s.min_ns as f64),
                us(s.p50_ns as f64),
                us(s.p90_ns as f64),
                us(s.p99_ns as f64),
                us(s.p999_ns as f64),
                us(s.max_ns as f64),
                us(s.mean_ns),
                us(s.stddev_ns),
                us(s.jitter_ns),
            ]);
        }
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out =
        String::from("latencies in µs (p50..p99.9 from an HDR histogram, 3 significant digits)\n");
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c < 2 {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// One stream in the JSON document.
#[derive(Serialize)]
pub struct StreamDoc<'a> {
    /// Stream name.
    pub stream: &'a str,
    /// Its figures.
    #[serde(flatten)]
    pub summary: Summary,
}

/// One run in the JSON document.
#[derive(Serialize)]
pub struct RunDoc<'a> {
    /// Label.
    pub label: &'a str,
    /// Packets read at A and B.
    pub packets_a: u64,
    /// Packets read at B.
    pub packets_b: u64,
    /// Packets of A that took no part (no IP header, or unstamped and skipped).
    pub skipped_a: u64,
    /// Same for B.
    pub skipped_b: u64,
    /// Hash matches refused on the bytes.
    pub collisions: u64,
    /// Most packets waiting for a match at once.
    pub peak_pending: usize,
    /// Damage found in the inputs.
    pub damage: &'a [String],
    /// The streams.
    pub streams: Vec<StreamDoc<'a>>,
}

/// The JSON document of the runs.
pub fn json(runs: &[Labelled<'_>]) -> serde_json::Value {
    let docs: Vec<RunDoc<'_>> = runs
        .iter()
        .map(|r| RunDoc {
            label: r.label,
            packets_a: r.run.packets.0,
            packets_b: r.run.packets.1,
            skipped_a: r.run.skipped.0,
            skipped_b: r.run.skipped.1,
            collisions: r.run.collisions,
            peak_pending: r.run.peak_pending,
            damage: &r.run.damage,
            streams: r
                .run
                .streams
                .iter()
                .map(|(n, s)| StreamDoc {
                    stream: n,
                    summary: s.summary(),
                })
                .collect(),
        })
        .collect();
    serde_json::json!({ "runs": docs })
}
