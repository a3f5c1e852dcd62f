//! The process's log on stderr: the tracing events of the library crates and `weir run`'s own
//! lines (notices, warnings, summaries), as human text (ANSI colours only when stderr is a
//! terminal) or, with `weir run --log-format json`, one JSON object per line: `ts` (seconds
//! since the epoch), `level` (`error`, `warn`, `info`, `debug`, `trace`), `message`, and `job`
//! (`weir run`'s lines about one job) or `target` and the event's fields (tracing events).

use std::fmt;
use std::io::{IsTerminal, Write as _};

use serde_json::{json, Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Installs the tracing subscriber (level from `WEIR_LOG`, `warn` by default).
pub fn init(json: bool) {
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

/// One of weir's own lines as a JSON object on stderr (lost, not a panic, when stderr cannot
/// be written).
pub fn json_line(level: &str, job: Option<&str>, message: &str) {
    let line = json!({"ts": ts(), "level": level, "job": job, "message": message});
    let _ = writeln!(std::io::stderr(), "{line}");
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A tracing event becomes one JSON object with its level, target, message and fields.
    #[test]
    fn events_are_json_lines() {
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .event_format(Json)
            .finish();
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(target: "weir_test", packets = 3u64, late = true, "ring full");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["level"], "warn");
        assert_eq!(v["target"], "weir_test");
        assert_eq!(v["message"], "ring full");
        assert_eq!(v["packets"], 3);
        assert_eq!(v["late"], true);
        assert!(v["ts"].as_f64().is_some_and(|t| t > 1.7e9));
    }
}
