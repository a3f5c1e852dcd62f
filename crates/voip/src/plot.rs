//! `weir voip --plot DIR`: for each call (and each RTP stream found without one) a CSV of its
//! streams' [timelines](crate::timeline) and an SVG chart drawn from the same numbers: jitter
//! (ms) over time on top, packets lost per interval below, one line per stream.
//!
//! The SVG is written by hand (polylines and text, no font file needed: the viewer draws the
//! text). Time is seconds since the group's first interval. File names: `call-N-ID` (N the
//! call's order of writing, ID its Call-ID with every character other than letters, digits,
//! `.`, `-`, `_` turned into `_`, at most 64 of them) or `stream-N-SSRC`, then `.csv`/`.svg`.
//! Calls without an RTP stream (OPTIONS, REGISTER, failed calls) get no chart.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::{Event, StreamRecord};

/// Charts the analyzer's records as they come ([`Plotter::event`] on each, in order: a call's
/// streams come just before it).
#[derive(Debug)]
pub struct Plotter {
    dir: PathBuf,
    written: u64,
    pending: Vec<StreamRecord>,
}

impl Plotter {
    /// Charts into `dir` (which must exist).
    pub fn new(dir: &Path) -> Plotter {
        Plotter {
            dir: dir.to_path_buf(),
            written: 0,
            pending: Vec::new(),
        }
    }

    /// Groups written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Takes one record: a call's streams wait for the call; a call, or a stream without
    /// one, is charted.
    pub fn event(&mut self, e: &Event) -> Result<(), PlotError> {
        match e {
            Event::Stream(s) if s.call_id.is_some() => {
                self.pending.push((**s).clone());
                Ok(())
            }
            Event::Stream(s) => {
                self.written += 1;
                let stem = stem(self.written, None, Some(s));
                let title = format!("RTP stream {} (no SIP call seen)", legend(s));
                write(&self.dir, &stem, &title, std::slice::from_ref(s)).map(|_| ())
            }
            Event::Call(c) => {
                let streams = std::mem::take(&mut self.pending);
                if streams.is_empty() {
                    return Ok(());
                }
                self.written += 1;
                let stem = stem(self.written, Some(&c.call_id), None);
                let title = format!("call {}", c.call_id);
                write(&self.dir, &stem, &title, &streams).map(|_| ())
            }
        }
    }
}

/// A chart or CSV that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct PlotError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// The file stem of a group: `call-N-ID` or `stream-N-SSRC`.
pub fn stem(n: u64, call_id: Option<&str>, first: Option<&StreamRecord>) -> String {
    match call_id {
        Some(id) => {
            let clean: String = id
                .chars()
                .take(64)
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            format!("call-{n}-{clean}")
        }
        None => format!("stream-{n}-{:08x}", first.map_or(0, |s| s.ssrc)),
    }
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// The CSV header.
pub const CSV_HEADER: &str = "stream,src,dst,ssrc,start_s,offset_s,packets,expected,lost,jitter_ms";

/// A stream's legend: `src:port → dst:port ssrc`.
fn legend(s: &StreamRecord) -> String {
    format!(
        "{}:{} -> {}:{} ssrc {:08x}",
        s.src_ip, s.src_port, s.dst_ip, s.dst_port, s.ssrc
    )
}

/// Writes `DIR/STEM.csv` and `DIR/STEM.svg` for `streams` (one group); returns their paths.
/// Each is written to a temporary name and renamed, so a reader never sees half a file.
pub fn write(
    dir: &Path,
    stem: &str,
    title: &str,
    streams: &[StreamRecord],
) -> Result<[PathBuf; 2], PlotError> {
    let t0 = streams
        .iter()
        .filter_map(|s| s.timeline.first())
        .map(|p| p.start_ns)
        .min()
        .unwrap_or(0);
    let off = |ns: u64| ns.saturating_sub(t0) as f64 / 1e9;
    let mut csv = String::from(CSV_HEADER);
    csv.push('\n');
    for (i, s) in streams.iter().enumerate() {
        for p in &s.timeline {
            let _ = writeln!(
                csv,
                "{i},{}:{},{}:{},{:08x},{:.9},{:.9},{},{},{},{:.6}",
                s.src_ip,
                s.src_port,
                s.dst_ip,
                s.dst_port,
                s.ssrc,
                p.start_ns as f64 / 1e9,
                off(p.start_ns),
                p.packets,
                p.expected,
                p.lost,
                p.jitter_ms
            );
        }
    }
    let csv_path = dir.join(format!("{stem}.csv"));
    let svg_path = dir.join(format!("{stem}.svg"));
    put(&csv_path, csv.as_bytes())?;
    put(&svg_path, svg(title, streams, &off).as_bytes())?;
    Ok([csv_path, svg_path])
}

fn put(path: &Path, bytes: &[u8]) -> Result<(), PlotError> {
    let tmp = path.with_extension("tmp");
    let err = |source| PlotError {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_data().map_err(err)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(err)
}

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const W: f64 = 900.0;
const PANEL_H: f64 = 260.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;

/// The chart: two panels sharing the time axis.
fn svg(title: &str, streams: &[StreamRecord], off: &dyn Fn(u64) -> f64) -> String {
    let t_max = streams
        .iter()
        .flat_map(|s| s.timeline.iter())
        .map(|p| off(p.start_ns))
        .fold(0.0f64, f64::max)
        .max(1.0);
    let legend_h = 18.0 * streams.len() as f64;
    let h = 40.0 + 2.0 * (PANEL_H + 40.0) + legend_h + 20.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"{LEFT}\" y=\"24\" font-size=\"15\">{}</text>",
        esc(title)
    );
    type Pick = fn(&crate::timeline::Point) -> f64;
    let panels: [(&str, Pick); 2] = [
        ("jitter (ms)", |p| p.jitter_ms),
        ("lost packets per interval", |p| p.lost as f64),
    ];
    for (k, (label, pick)) in panels.into_iter().enumerate() {
        let top = 40.0 + k as f64 * (PANEL_H + 40.0);
        let vals = streams.iter().flat_map(|s| s.timeline.iter()).map(pick);
        let y_max = vals.clone().fold(0.0f64, f64::max).max(1e-3);
        let y_min = vals.fold(0.0f64, f64::min);
        let x = |t: f64| LEFT + t / t_max * (W - LEFT - RIGHT);
        let y = |v: f64| top + PANEL_H - (v - y_min) / (y_max - y_min) * PANEL_H;
        let _ = writeln!(
            out,
            "<rect x=\"{LEFT}\" y=\"{top}\" width=\"{}\" height=\"{PANEL_H}\" fill=\"none\" \
             stroke=\"#888\"/>\n<text x=\"{LEFT}\" y=\"{}\">{label}</text>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n\
             <text x=\"{LEFT}\" y=\"{}\">0 s</text>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{t_max:.1} s</text>",
            W - LEFT - RIGHT,
            top - 6.0,
            LEFT - 6.0,
            top + 10.0,
            fmt(y_max),
            LEFT - 6.0,
            top + PANEL_H,
            fmt(y_min),
            top + PANEL_H + 16.0,
            W - RIGHT,
            top + PANEL_H + 16.0
        );
        for (i, s) in streams.iter().enumerate() {
            let pts: Vec<String> = s
                .timeline
                .iter()
                .map(|p| format!("{:.1},{:.1}", x(off(p.start_ns)), y(pick(p))))
                .collect();
            let _ = writeln!(
                out,
                "<polyline class=\"stream{i}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" \
                 points=\"{}\"/>",
                COLORS[i % COLORS.len()],
                pts.join(" ")
            );
        }
    }
    let base = 40.0 + 2.0 * (PANEL_H + 40.0);
    for (i, s) in streams.iter().enumerate() {
        let yy = base + 18.0 * i as f64;
        let _ = writeln!(
            out,
            "<rect x=\"{LEFT}\" y=\"{}\" width=\"14\" height=\"4\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{yy}\">{}</text>",
            yy - 6.0,
            COLORS[i % COLORS.len()],
            LEFT + 20.0,
            esc(&legend(s))
        );
    }
    out.push_str("</svg>\n");
    out
}

/// An axis label: integers as they are, others to 3 decimals.
fn fmt(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}
