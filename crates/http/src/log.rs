//! `weir http`'s logs: the analyzer's events as JSON lines, HTTP transactions to one writer and
//! TLS handshakes to another (or nowhere), with the first write error kept and returned.

use std::io::{self, BufWriter, Write};

use weir_packet::LinkType;

use crate::{Analyzer, Config, Event, Stats};

/// The analyzer and its two logs.
pub struct Logs<W: Write> {
    analyzer: Analyzer,
    http: BufWriter<W>,
    tls: Option<BufWriter<W>>,
    error: Option<io::Error>,
}

impl<W: Write> Logs<W> {
    /// An analyzer with `cfg` writing transactions to `http` and handshakes to `tls`.
    pub fn new(cfg: Config, http: W, tls: Option<W>) -> Self {
        Logs {
            analyzer: Analyzer::new(cfg),
            http: BufWriter::with_capacity(1 << 20, http),
            tls: tls.map(|t| BufWriter::with_capacity(1 << 16, t)),
            error: None,
        }
    }

    fn write(&mut self, e: Event) {
        if self.error.is_some() {
            return;
        }
        let res = match (e, &mut self.tls) {
            (Event::Http(r), _) => line(&mut self.http, &r),
            (Event::Tls(r), Some(w)) => line(w, &r),
            (Event::Tls(_), None) => Ok(()),
        };
        if let Err(e) = res {
            self.error = Some(e);
        }
    }

    /// Analyzes one frame and writes what it ended; the first write error is returned (and
    /// every one after it).
    pub fn packet(&mut self, ts_ns: u64, link: LinkType, frame: &[u8]) -> io::Result<()> {
        let mut events = Vec::new();
        self.analyzer
            .packet(ts_ns, link, frame, &mut |e| events.push(e));
        events.into_iter().for_each(|e| self.write(e));
        self.error.take().map_or(Ok(()), Err)
    }

    /// Ends every connection, writes what that ended, and returns the counters and both
    /// outputs, flushed.
    pub fn finish(mut self) -> io::Result<(Stats, W, Option<W>)> {
        let mut events = Vec::new();
        let stats = self.analyzer.finish(&mut |e| events.push(e));
        events.into_iter().for_each(|e| self.write(e));
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let http = self.http.into_inner().map_err(|e| e.into_error())?;
        let tls = match self.tls {
            Some(t) => Some(t.into_inner().map_err(|e| e.into_error())?),
            None => None,
        };
        Ok((stats, http, tls))
    }
}

/// Writes `v` as one JSON line.
fn line<W: Write, T: serde::Serialize>(w: &mut BufWriter<W>, v: &T) -> io::Result<()> {
    serde_json::to_writer(&mut *w, v)?;
    w.write_all(b"\n")
}

impl std::fmt::Display for Stats {
    /// The two summary lines of `weir http`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self;
        writeln!(
            f,
            "weir: {} http transactions ({} requests, {} responses, {} orphan responses) in {} \
             connections; {} tls handshakes in {} connections; {} packets, {} tcp",
            s.http_records,
            s.http.requests,
            s.http.responses,
            s.http.orphan_responses,
            s.http_flows,
            s.tls_records,
            s.tls_flows,
            s.packets,
            s.tcp_packets
        )?;
        writeln!(
            f,
            "weir: reassembly: {} gaps ({} bytes), {} retransmitted bytes, {} conflicting overlap \
             bytes, {} out-of-order segments, {} bytes evicted ({} evictions), {} connections \
             evicted, {} timed out; {} http parse errors, {} tls errors",
            s.stream.gaps,
            s.stream.gap_bytes,
            s.stream.retransmitted_bytes,
            s.stream.overlap_conflicts,
            s.stream.out_of_order_segments,
            s.stream.evicted_bytes,
            s.pending_evictions,
            s.flows_evicted,
            s.flows_timed_out,
            s.http.parse_errors,
            s.tls.errors
        )
    }
}
