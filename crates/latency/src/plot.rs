//! Charts of one or several runs, overlaid the way queueing studies draw them: latency CDF, box
//! plot, and latency over time, each as SVG and PNG (plotters).
//!
//! Text is drawn with a TrueType font found at run time (DejaVu Sans from Debian's
//! fonts-dejavu-core, or the file named by `WEIR_FONT`), through plotters' `ab_glyph` backend,
//! so no fontconfig is needed. Latency axes are logarithmic, so an idle path (µs) and a loaded
//! one (ms) fit one chart. Box plots: the box spans p25–p75 with a line at the median, whiskers
//! reach p1 and p99, dots mark min and max.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::stats::StreamStats;
use crate::LatencyError;

/// One line of a chart: a stream of a run.
pub struct Series<'a> {
    /// Legend text (run label and stream).
    pub label: String,
    /// The stream's figures.
    pub stats: &'a StreamStats,
    /// Start of the run, ns (scatter x axis origin).
    pub start_ns: u64,
}

const FONT_CANDIDATES: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Registers a font for "sans-serif" once; the error says where fonts were looked for.
fn font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let env = std::env::var("WEIR_FONT").ok();
        let paths: Vec<&str> = env
            .iter()
            .map(String::as_str)
            .chain(FONT_CANDIDATES)
            .collect();
        for p in &paths {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "no TrueType font found (looked at {}); install fonts-dejavu-core or set WEIR_FONT",
            paths.join(", ")
        ))
    })
    .clone()
}

fn err(path: &Path, e: impl std::fmt::Debug) -> LatencyError {
    LatencyError::Plot {
        path: path.display().to_string(),
        message: format!("{e:?}"),
    }
}

const W: u32 = 1000;
const H: u32 = 620;

/// Latency in ms, clamped to a positive floor for log axes.
fn ms(ns: f64) -> f64 {
    (ns / 1e6).max(1e-4)
}

fn range(series: &[Series<'_>]) -> (f64, f64) {
    let mut lo = f64::MAX;
    let mut hi = f64::MIN;
    for s in series.iter().filter(|s| s.stats.received > 0) {
        let sm = s.stats.summary();
        lo = lo.min(ms(sm.min_ns as f64));
        hi = hi.max(ms(sm.max_ns as f64));
    }
    if lo > hi {
        return (1e-3, 1.0);
    }
    (lo / 1.5, hi * 1.5)
}

fn color(i: usize) -> RGBColor {
    let c = Palette99::pick(i).to_rgba();
    RGBColor(c.0, c.1, c.2)
}

fn cdf<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    series: &[Series<'_>],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| format!("{e:?}"))?;
    let (lo, hi) = range(series);
    let mut chart = ChartBuilder::on(&root)
        .caption("One-way latency CDF", ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
        .map_err(|e| format!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("latency (ms)")
        .y_desc("fraction of packets")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| format!("{e:?}"))?;
    for (i, s) in series.iter().enumerate() {
        let total = s.stats.hist.len() as f64;
        if total == 0.0 {
            continue;
        }
        let mut acc = 0u64;
        let mut pts = vec![];
        for v in s.stats.hist.iter_recorded() {
            let x = ms(s.stats.hist.highest_equivalent(v.value_iterated_to()) as f64);
            pts.push((x, acc as f64 / total));
            acc += v.count_since_last_iteration();
            pts.push((x, acc as f64 / total));
        }
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(|e| format!("{e:?}"))?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| format!("{e:?}"))?;
    root.present().map_err(|e| format!("{e:?}"))
}

fn boxes<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    series: &[Series<'_>],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| format!("{e:?}"))?;
    let (lo, hi) = range(series);
    let n = series.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "One-way latency (box: p25-p75, whiskers: p1-p99, dots: min/max)",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(20)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5..n - 0.5, (lo..hi).log_scale())
        .map_err(|e| format!("{e:?}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("latency (ms)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| format!("{e:?}"))?;
    for (i, s) in series.iter().enumerate() {
        if s.stats.received == 0 {
            continue;
        }
        let q = |p: f64| ms(s.stats.quantile_ns(p) as f64);
        let sm = s.stats.summary();
        let x = i as f64;
        let c = color(i);
        let (q1, q2, q3) = (q(0.25), q(0.5), q(0.75));
        let shapes: Vec<DynElement<'static, DB, (f64, f64)>> = vec![
            Rectangle::new([(x - 0.3, q1), (x + 0.3, q3)], c.mix(0.35).filled()).into_dyn(),
            Rectangle::new([(x - 0.3, q1), (x + 0.3, q3)], c.stroke_width(2)).into_dyn(),
            PathElement::new(vec![(x - 0.3, q2), (x + 0.3, q2)], BLACK.stroke_width(3)).into_dyn(),
            PathElement::new(vec![(x, q(0.01)), (x, q1)], c.stroke_width(2)).into_dyn(),
            PathElement::new(vec![(x, q3), (x, q(0.99))], c.stroke_width(2)).into_dyn(),
            PathElement::new(
                vec![(x - 0.15, q(0.01)), (x + 0.15, q(0.01))],
                c.stroke_width(2),
            )
            .into_dyn(),
            PathElement::new(
                vec![(x - 0.15, q(0.99)), (x + 0.15, q(0.99))],
                c.stroke_width(2),
            )
            .into_dyn(),
            Circle::new((x, ms(sm.min_ns as f64)), 3, c.filled()).into_dyn(),
            Circle::new((x, ms(sm.max_ns as f64)), 3, c.filled()).into_dyn(),
        ];
        chart
            .draw_series(shapes)
            .map_err(|e| format!("{e:?}"))?
            .label(s.label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 20, y + 6)], c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| format!("{e:?}"))?;
    root.present().map_err(|e| format!("{e:?}"))
}

fn scatter<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    series: &[Series<'_>],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| format!("{e:?}"))?;
    let (lo, hi) = range(series);
    let t_max = series
        .iter()
        .flat_map(|s| {
            s.stats
                .points
                .last()
                .map(|p| (p.0.saturating_sub(s.start_ns)) as f64 / 1e9)
        })
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let mut chart = ChartBuilder::on(&root)
        .caption("One-way latency over time", ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max * 1.02, (lo..hi).log_scale())
        .map_err(|e| format!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("time since the run's first packet (s)")
        .y_desc("latency (ms)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| format!("{e:?}"))?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        let start = s.start_ns;
        chart
            .draw_series(s.stats.points.iter().map(|&(t, l)| {
                Circle::new(
                    (t.saturating_sub(start) as f64 / 1e9, ms(l as f64)),
                    2,
                    c.mix(0.6).filled(),
                )
            }))
            .map_err(|e| format!("{e:?}"))?
            .label(s.label.clone())
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| format!("{e:?}"))?;
    root.present().map_err(|e| format!("{e:?}"))
}

/// Draws `cdf`, `box` and `scatter` charts of `series` into `dir`, each as `.svg` and `.png`;
/// returns the files written.
pub fn plot_all(dir: &Path, series: &[Series<'_>]) -> Result<Vec<PathBuf>, LatencyError> {
    std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
    font().map_err(|e| err(dir, e))?;
    let mut written = Vec::new();
    macro_rules! both {
        ($name:literal, $f:ident) => {{
            let p = dir.join(concat!($name, ".svg"));
            $f(SVGBackend::new(&p, (W, H)).into_drawing_area(), series).map_err(|e| err(&p, e))?;
            written.push(p);
            let p = dir.join(concat!($name, ".png"));
            $f(BitMapBackend::new(&p, (W, H)).into_drawing_area(), series)
                .map_err(|e| err(&p, e))?;
            written.push(p);
        }};
    }
    both!("cdf", cdf);
    both!("box", boxes);
    both!("scatter", scatter);
    Ok(written)
}
