//! The Prometheus text exposition format, version 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>).
//!
//! An [`Exposition`] is written family by family: [`Exposition::family`] writes the family's
//! `# HELP` and `# TYPE` lines and returns a [`Family`] whose [`sample`](Family::sample)s follow
//! them, so a family's samples are always together and each family appears once (a family
//! started again adds samples to the first one; [`Exposition::set_labels`] puts a label such
//! as the job on every sample, so several jobs' series share one family). Label values
//! are escaped (`\\`, `\"`, `\n`), help text too (`\\`, `\n`); values are integers as they are
//! (a `u64` counter keeps every digit) and floats in Go's spelling (`NaN`, `+Inf`, `-Inf`).
//!
//! Names follow Prometheus' conventions, which the callers' tests check with `promtool check
//! metrics`: a counter's name ends in `_total`, units are spelled out in base units
//! (`_bytes`, `_seconds`), a gauge carries no `_total`. A name or label name that is not
//! `[a-zA-Z_:][a-zA-Z0-9_:]*` is a bug in the caller: it is caught by a debug assertion, and in
//! a release build the family is written under a sanitized name rather than break the scrape.

use std::collections::BTreeMap;
use std::fmt::Write;

/// The media type of the text format, for the `Content-Type` header.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The type of a metric family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (restarts from 0 when the process does); named `..._total`.
    Counter,
    /// Goes up and down.
    Gauge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// A sample's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// An exact count.
    Int(u64),
    /// A measurement.
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v)
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::Int(v as u64)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(u64::from(v))
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Int(u64::from(v))
    }
}

/// A whole scrape being written (see the module documentation).
#[derive(Debug, Default)]
pub struct Exposition {
    /// Each family's header and samples, in the order the families were started.
    families: Vec<(String, String)>,
    /// A family's name → its index in `families`.
    names: BTreeMap<String, usize>,
    /// Labels put first on every sample from now on (see [`Exposition::set_labels`]).
    labels: Vec<(String, String)>,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts the family `name` of `kind`, described by `help` (one line, escaped here).
    /// Returns the family to write its samples with. A family started again (by the next
    /// job of a process, say) gets its new samples after its earlier ones, under its first
    /// header: each family appears once, its samples together.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> Family<'_> {
        debug_assert!(valid_name(name), "bad metric name {name:?}");
        debug_assert!(
            (kind == Kind::Counter) == name.ends_with("_total"),
            "{name}: counters, and only counters, end in _total"
        );
        let name = sanitize(name);
        let index = match self.names.get(&name) {
            Some(&i) => i,
            None => {
                let mut head = String::new();
                let _ = writeln!(head, "# HELP {name} {}", escape_help(help));
                let _ = writeln!(head, "# TYPE {name} {}", kind.name());
                self.families.push((head, String::new()));
                self.names.insert(name.clone(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        Family {
            e: self,
            index,
            name,
        }
    }

    /// A family of one sample with no label (but those of [`set_labels`](Self::set_labels)).
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Into<Value>) {
        self.family(name, kind, help).sample(&[], value);
    }

    /// Puts `labels` first on every sample written from now on (the job a process's series
    /// belong to); an empty slice stops it.
    pub fn set_labels(&mut self, labels: &[(&str, &str)]) {
        debug_assert!(labels.iter().all(|(k, _)| valid_label(k)));
        self.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    }

    /// The text so far.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (head, samples) in &self.families {
            out.push_str(head);
            out.push_str(samples);
        }
        out
    }

    /// The finished text.
    pub fn finish(self) -> String {
        self.text()
    }
}

/// One family's samples (from [`Exposition::family`]).
#[derive(Debug)]
pub struct Family<'a> {
    e: &'a mut Exposition,
    index: usize,
    name: String,
}

impl Family<'_> {
    /// Writes one sample with `labels` (name, value pairs; values escaped here), after the
    /// exposition's own labels ([`Exposition::set_labels`]).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<Value>) -> &mut Self {
        let Exposition {
            families,
            labels: common,
            ..
        } = &mut *self.e;
        let out = &mut families[self.index].1;
        out.push_str(&self.name);
        let all = common
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(labels.iter().copied());
        let mut first = true;
        for (k, v) in all {
            debug_assert!(valid_label(k), "bad label name {k:?}");
            out.push(if first { '{' } else { ',' });
            first = false;
            out.push_str(&sanitize(k));
            out.push_str("=\"");
            escape_label_into(out, v);
            out.push('"');
        }
        if !first {
            out.push('}');
        }
        out.push(' ');
        match value.into() {
            Value::Int(v) => {
                let _ = write!(out, "{v}");
            }
            Value::Float(v) => out.push_str(&float(v)),
        }
        out.push('\n');
        self
    }
}

/// `v` as the text format spells floats.
pub fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        // Rust's shortest round-trip form (`0.25`, `1e-7`, `12345`) parses with Go's ParseFloat.
        format!("{v}")
    }
}

/// Whether `name` is a valid metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn valid_name(name: &str) -> bool {
    let mut c = name.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

/// Whether `name` is a valid label name: `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__`.
pub fn valid_label(name: &str) -> bool {
    let mut c = name.chars();
    !name.starts_with("__")
        && c.next()
            .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// `name` with every character a name may not hold replaced by `_` (and `_` before a leading
/// digit, or for an empty name).
fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// Help text escaped: `\` → `\\`, newline → `\n`.
pub fn escape_help(help: &str) -> String {
    let mut s = String::with_capacity(help.len());
    for c in help.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A label value escaped: `\` → `\\`, `"` → `\"`, newline → `\n`.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    escape_label_into(&mut s, v);
    s
}

fn escape_label_into(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact text of a small exposition, written by hand from the format's specification.
    #[test]
    fn families_samples_and_escapes() {
        let mut e = Exposition::new();
        e.family(
            "weir_kernel_received_packets_total",
            Kind::Counter,
            "Packets the kernel queued.\nSecond \\ line.",
        )
        .sample(&[("interface", "eth0")], 18446744073709551615u64)
        .sample(&[("interface", "we\"ird\\if\n")], 0u64);
        e.single("weir_buffer_fill_ratio", Kind::Gauge, "Fill.", 0.25);
        e.family("weir_x_ratio", Kind::Gauge, "Odd values.")
            .sample(&[("v", "nan")], f64::NAN)
            .sample(&[("v", "inf")], f64::INFINITY)
            .sample(&[("v", "-inf")], f64::NEG_INFINITY)
            .sample(&[("v", "tiny"), ("w", "")], 1e-7);
        assert_eq!(
            e.finish(),
            "# HELP weir_kernel_received_packets_total Packets the kernel queued.\\nSecond \\\\ line.\n\
             # TYPE weir_kernel_received_packets_total counter\n\
             weir_kernel_received_packets_total{interface=\"eth0\"} 18446744073709551615\n\
             weir_kernel_received_packets_total{interface=\"we\\\"ird\\\\if\\n\"} 0\n\
             # HELP weir_buffer_fill_ratio Fill.\n\
             # TYPE weir_buffer_fill_ratio gauge\n\
             weir_buffer_fill_ratio 0.25\n\
             # HELP weir_x_ratio Odd values.\n\
             # TYPE weir_x_ratio gauge\n\
             weir_x_ratio{v=\"nan\"} NaN\n\
             weir_x_ratio{v=\"inf\"} +Inf\n\
             weir_x_ratio{v=\"-inf\"} -Inf\n\
             weir_x_ratio{v=\"tiny\",w=\"\"} 0.0000001\n"
        );
    }

    /// Two jobs writing the same families: each family once, its samples together, each
    /// sample with its job's label first.
    #[test]
    fn families_started_again_keep_one_header() {
        let mut e = Exposition::new();
        e.single("process_x_bytes", Kind::Gauge, "P.", 7u64);
        for job in ["a", "b\"c"] {
            e.set_labels(&[("weir_job", job)]);
            e.family("weir_y_total", Kind::Counter, "Y.")
                .sample(&[("interface", "eth0")], 1u64);
            e.single("weir_z", Kind::Gauge, "Z.", 2u64);
        }
        assert_eq!(
            e.finish(),
            "# HELP process_x_bytes P.\n# TYPE process_x_bytes gauge\nprocess_x_bytes 7\n\
             # HELP weir_y_total Y.\n# TYPE weir_y_total counter\n\
             weir_y_total{weir_job=\"a\",interface=\"eth0\"} 1\n\
             weir_y_total{weir_job=\"b\\\"c\",interface=\"eth0\"} 1\n\
             # HELP weir_z Z.\n# TYPE weir_z gauge\n\
             weir_z{weir_job=\"a\"} 2\nweir_z{weir_job=\"b\\\"c\"} 2\n"
        );
    }

    #[test]
    fn names() {
        assert!(valid_name("weir_a:b_total"));
        assert!(valid_name("_x"));
        assert!(!valid_name("1x"));
        assert!(!valid_name(""));
        assert!(!valid_name("a-b"));
        assert!(valid_label("interface"));
        assert!(!valid_label("__name"));
        assert!(!valid_label("a:b"));
        assert_eq!(sanitize("a-b.c"), "a_b_c");
        assert_eq!(sanitize("9x"), "_9x");
        assert_eq!(sanitize(""), "_");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape_help("a\"b\\c\nd"), "a\"b\\\\c\\nd");
    }
}
