//! The process's log on stderr: the tracing events of the library crates and `weir run`'s own
//! lines (notices, warnings, summaries), as human text (ANSI colours only when stderr is a
//! terminal) or, with `weir run --log-format json`, one JSON object per line: `ts` (seconds
//! since the epoch), `level` (`error`, `warn`, `info`, `debug`, `trace`), `message`, and `job`
//! (`weir run`'s lines about one job) or `target` and the event's fields (tracing events).

use std::fmt;
use std::io::IsTerminal;

use serde_json::{json, Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Installs the tracing subscriber (level from `WEIR_LOG`, `warn` by default).
pub(crate) fn init(json: bool) {
    let filter = EnvFilter::try_from_env("WEIR_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if json {
        b.event_format(Json).init();
    } else {
        b.init();
    }
}

/// Seconds since the epoch, now.
fn ts() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One of weir's own lines as a JSON object on stderr.
pub(crate) fn json_line(level: &str, job: Option<&str>, message: &str) {
    eprintln!(
        "{}",
        json!({"ts": ts(), "level": level, "job": job, "message": message})
    );
}

/// Tracing events as JSON lines.
struct Json;

impl<S, N> FormatEvent<S, N> for Json
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut obj = Map::new();
        obj.insert("ts".into(), json!(ts()));
        obj.insert(
            "level".into(),
            json!(meta.level().as_str().to_ascii_lowercase()),
        );
        obj.insert("target".into(), json!(meta.target()));
        event.record(&mut Fields(&mut obj));
        writeln!(w, "{}", Value::Object(obj))
    }
}

/// Collects an event's fields into a JSON object.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, f: &Field, v: &dyn fmt::Debug) {
        self.0.insert(f.name().into(), json!(format!("{v:?}")));
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        self.0.insert(f.name().into(), json!(v));
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        self.0.insert(f.name().into(), json!(v));
    }
    fn record_i64(&mut self, f: &Field, v: i64) {
        self.0.insert(f.name().into(), json!(v));
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        self.0.insert(f.name().into(), json!(v));
    }
    fn record_f64(&mut self, f: &Field, v: f64) {
        self.0.insert(f.name().into(), json!(v));
    }
}
