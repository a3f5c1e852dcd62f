//! The analyzers' logs to Kafka: every JSON line `weir http --json` / `weir voip` writes (HTTP
//! transactions, TLS handshakes, SIP calls, RTP streams) as one Kafka message, through the
//! same producer as the flow records ([`crate::KafkaOutput`]'s settings, bounded queue and
//! counters: see the `kafka` module).
//!
//! * **Payload**: the line exactly as the log writer wrote it, without its newline.
//! * **Topics**: one per record type ([`LogTopics`]): `weir.http`, `weir.tls`, `weir.calls`
//!   (records whose `type` is `call`) and `weir.rtp` (`type` `stream`).
//! * **Keys**: `SENSOR/UID` for HTTP and TLS (Zeek's `uid`, the connection's Community ID: one
//!   connection's records on one partition, in order); `SENSOR/CALL-ID` for calls and for the
//!   streams of a call (a call and its streams get the same partition number when the two
//!   topics have as many partitions); `SENSOR/SSRC/SRC/SPORT/DST/DPORT` for a stream without
//!   a call. A record without those fields is keyed `SENSOR`.
//!
//! [`KafkaLines`] is an [`std::io::Write`]: give it to whatever writes the log lines, it cuts
//! what it is given into lines (a line may come in pieces) and sends each; [`KafkaLog`] is
//! the producer the writers share, with the counters and the end of the run.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use crate::kafka::{KafkaOutput, KafkaStats, Producer};
use crate::ExportError;

/// The topics of the analyzers' records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTopics {
    /// HTTP transactions.
    pub http: String,
    /// TLS handshakes.
    pub tls: String,
    /// SIP calls.
    pub calls: String,
    /// RTP streams.
    pub streams: String,
}

impl Default for LogTopics {
    /// `weir.http`, `weir.tls`, `weir.calls`, `weir.rtp`.
    fn default() -> Self {
        LogTopics {
            http: "weir.http".into(),
            tls: "weir.tls".into(),
            calls: "weir.calls".into(),
            streams: "weir.rtp".into(),
        }
    }
}

/// Which records a [`KafkaLines`] writer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    /// HTTP transactions (JSON): topic [`LogTopics::http`].
    Http,
    /// TLS handshakes: topic [`LogTopics::tls`].
    Tls,
    /// VoIP records: calls to [`LogTopics::calls`], streams to [`LogTopics::streams`], by
    /// their `type`.
    Voip,
}

struct Inner {
    core: Producer,
    topics: LogTopics,
    key: String,
    finished: Option<KafkaStats>,
}

/// The analyzers' logs to Kafka: one producer shared by the [`KafkaLines`] writers (see the
/// module documentation).
#[derive(Clone)]
pub struct KafkaLog {
    inner: Arc<Mutex<Inner>>,
    name: String,
}

impl std::fmt::Debug for KafkaLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl KafkaLog {
    /// Creates the producer for `out` (its `topic`, `format` and `records_per_message` are not
    /// used: the payload is JSON, one record a message, the topics are `topics`) and checks
    /// that a broker answers.
    pub fn open(out: &KafkaOutput, topics: LogTopics) -> Result<KafkaLog, ExportError> {
        for t in [&topics.http, &topics.tls, &topics.calls, &topics.streams] {
            crate::kafka::check_topic(t)?;
        }
        let one_per_message = KafkaOutput {
            records_per_message: 1,
            ..out.clone()
        };
        let core = Producer::open(&one_per_message)?;
        Ok(KafkaLog {
            name: format!("kafka json to {}", out.brokers),
            inner: Arc::new(Mutex::new(Inner {
                core,
                topics,
                key: String::new(),
                finished: None,
            })),
        })
    }

    /// The output's name in messages: `kafka json to BROKERS`.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // a writer that panicked mid-send leaves counts that are still right
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A writer of `kind`'s records.
    pub fn lines(&self, kind: LogKind) -> KafkaLines {
        KafkaLines {
            log: self.clone(),
            kind,
            partial: Vec::new(),
        }
    }

    /// The counts so far (delivered: neither failed, overflowed nor still queued).
    pub fn stats(&self) -> KafkaStats {
        let g = self.lock();
        g.finished.unwrap_or_else(|| g.core.stats())
    }

    /// Waits up to the delivery timeout for every pending message, then counts (the messages
    /// still pending count as failed). Messages written after it are counted as failed.
    pub fn finish(&self) -> KafkaStats {
        let mut g = self.lock();
        let k = g.core.finish();
        g.finished = Some(k);
        k
    }

    /// The summary line of `k`: `kafka json to B: M messages (N bytes): D delivered, F failed,
    /// O lost to a full queue (of Q)`.
    pub fn summary(&self, k: &KafkaStats) -> String {
        let bytes = self.lock().core.bytes;
        let mut s = format!(
            "{}: {} messages ({bytes} bytes): {} delivered, {} failed, {} lost to a full queue \
             (of {})",
            self.name, k.messages, k.delivered, k.failed, k.overflow, k.queue
        );
        if let Some(e) = k.last_error().filter(|_| k.failed > 0) {
            s += &format!("; last delivery error: {e}");
        }
        s
    }

    /// The end of a run: [`KafkaLog::finish`], then the summary line and an error if
    /// messages were lost ([`KafkaLog::check`]).
    pub fn end(&self) -> (String, Result<(), ExportError>) {
        let k = self.finish();
        (self.summary(&k), self.check(&k))
    }

    /// An error when messages were lost (failed or overflowed), for the end of the run.
    pub fn check(&self, k: &KafkaStats) -> Result<(), ExportError> {
        match k.failed + k.overflow {
            0 => Ok(()),
            n => Err(ExportError::Kafka(format!(
                "{}: {n} of {} messages not delivered (failed, or lost to a full queue: see \
                 the summary)",
                self.name, k.messages
            ))),
        }
    }
}

/// An [`io::Write`] sending each JSON line it is given as a message (see the module
/// documentation). Its `flush` serves the producer's delivery reports.
pub struct KafkaLines {
    log: KafkaLog,
    kind: LogKind,
    /// The start of a line whose end has not come yet.
    partial: Vec<u8>,
}

impl KafkaLines {
    fn send(&self, g: &mut Inner, line: &[u8]) -> io::Result<()> {
        if g.finished.is_some() {
            // after the end: nothing can send it any more
            return Err(io::Error::other(format!(
                "{}: a record came after the end",
                self.log.name
            )));
        }
        let v: Value = serde_json::from_slice(line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a JSON record ({e})", self.log.name),
            )
        })?;
        let Inner {
            core, topics, key, ..
        } = g;
        key.clear();
        key.push_str(&core.output().sensor);
        let topic: &str = match self.kind {
            LogKind::Http | LogKind::Tls => {
                push_fields(key, &v, &["uid"]);
                if self.kind == LogKind::Http {
                    &topics.http
                } else {
                    &topics.tls
                }
            }
            LogKind::Voip => {
                if v.get("call_id").is_some_and(Value::is_string) {
                    push_fields(key, &v, &["call_id"]);
                } else {
                    push_fields(
                        key,
                        &v,
                        &["ssrc", "src_ip", "src_port", "dst_ip", "dst_port"],
                    );
                }
                match v.get("type").and_then(Value::as_str) {
                    Some("stream") => &topics.streams,
                    _ => &topics.calls,
                }
            }
        };
        core.send(topic, key.as_bytes(), line, 1);
        Ok(())
    }
}

/// Appends `/VALUE` for each of `fields` that `v` has (strings bare, numbers in decimal).
fn push_fields(key: &mut String, v: &Value, fields: &[&str]) {
    for f in fields {
        match v.get(*f) {
            Some(Value::String(s)) => {
                key.push('/');
                key.push_str(s);
            }
            Some(n @ Value::Number(_)) => {
                key.push('/');
                key.push_str(&n.to_string());
            }
            _ => {}
        }
    }
}

impl io::Write for KafkaLines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let log = self.log.clone();
        let mut g = log.lock();
        let mut rest = buf;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (piece, after) = (&rest[..nl], &rest[nl + 1..]);
            if self.partial.is_empty() {
                if !piece.is_empty() {
                    self.send(&mut g, piece)?;
                }
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(piece);
                let r = self.send(&mut g, &line);
                line.clear();
                self.partial = line;
                r?;
            }
            rest = after;
        }
        self.partial.extend_from_slice(rest);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.log.lock().core.poll();
        Ok(())
    }
}

/// A writer that also sends every line to Kafka: `out` (if any) gets the bytes first, then
/// `kafka` (if any).
pub struct Teed<W: io::Write> {
    out: Option<W>,
    kafka: Option<KafkaLines>,
}

impl<W: io::Write> Teed<W> {
    /// The lines to `out` and `kafka`.
    pub fn new(out: Option<W>, kafka: Option<KafkaLines>) -> Self {
        Teed { out, kafka }
    }

    /// The writer (the Kafka writer is dropped: [`KafkaLog::finish`] ends the producer).
    pub fn into_inner(self) -> Option<W> {
        self.out
    }
}

impl<W: io::Write> io::Write for Teed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(o) = &mut self.out {
            o.write_all(buf)?;
        }
        if let Some(k) = &mut self.kafka {
            k.write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(o) = &mut self.out {
            o.flush()?;
        }
        if let Some(k) = &mut self.kafka {
            k.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_as_documented() {
        let mut k = String::from("s1");
        let v: Value = serde_json::from_str(
            r#"{"type":"stream","ssrc":3735928559,"src_ip":"10.0.0.1","src_port":4000,
            "dst_ip":"2001:db8::1","dst_port":5004}"#,
        )
        .unwrap();
        push_fields(
            &mut k,
            &v,
            &["ssrc", "src_ip", "src_port", "dst_ip", "dst_port"],
        );
        assert_eq!(k, "s1/3735928559/10.0.0.1/4000/2001:db8::1/5004");
        let mut k = String::from("s1");
        push_fields(&mut k, &serde_json::json!({"ts": 1.5}), &["uid"]);
        assert_eq!(k, "s1", "no uid: the sensor alone");
    }
}
