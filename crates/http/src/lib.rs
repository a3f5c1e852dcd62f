//! weir-http: HTTP transaction logs and TLS handshake logs from packets, the way Zeek's http.log
//! and ssl.log report them.
//!
//! An [`Analyzer`] takes frames in capture order ([`Analyzer::packet`]), decodes them with
//! weir-decode, keeps a table of TCP connections, reassembles each direction within bounds
//! ([`reassembly`]), recognises HTTP/1.x and TLS by content on any port, and hands out one
//! [`HttpRecord`] per transaction and one [`TlsRecord`] per TLS connection through
//! [`Event`]s. [`Analyzer::finish`] ends every connection still open (the end of a capture).
//!
//! Memory is bounded: bytes held out of order per direction ([`Config::max_pending`]) and in
//! total ([`Config::max_total_pending`]), header blocks per message ([`http::MAX_HEADER`]), TLS
//! hello bytes ([`tls::MAX_HANDSHAKE`]), and connections ([`Config::max_flows`]); what the
//! bounds cost (bytes turned into gaps, connections ended early) is counted in [`Stats`].
//!
//! The `uid` of every record is the connection's Community ID (v1, seed 0), the flow hash
//! Zeek, Suricata and Wireshark compute from the same 5-tuple, so records join with other
//! tools' logs and with weir's flow records by their addresses and ports.

#![forbid(unsafe_code)]

pub mod http;
pub mod ja4;
pub mod live;
pub mod log;
pub mod reassembly;
pub mod tls;

use std::net::IpAddr;

use hashbrown::HashMap;
use weir_decode::{decode_into, tcp, Decoded, LinkType, Transport};

use crate::http::{End, Http, HttpStats, Tx};
use crate::reassembly::{Chunk, Stream, StreamStats};
use crate::tls::{Tls, TlsStats};

/// Bounds of the analyzer; with the `clap` feature, the analyzer's options of `weir http` (the
/// doc comments are their help: durations are given in seconds and held in ns, memory given in
/// MiB and held in bytes).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct Config {
    /// Most bytes held out of order in one direction of one connection; beyond it the hole
    /// before them is declared a gap.
    #[cfg_attr(feature = "clap", arg(skip = 1usize << 20))]
    pub max_pending: usize,
    /// Most TCP connections tracked at once (at least 1); beyond it the least recently seen
    /// eighth is ended early and counted.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = 500_000,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000_000),
          allow_negative_numbers = true))]
    pub max_flows: usize,
    /// Most MiB held out of order over all connections (1 to 65536); beyond it holes become
    /// gaps early, counted.
    #[cfg_attr(feature = "clap", arg(long = "max-memory-mib", value_name = "MIB",
          default_value = "256", value_parser = mib_bytes(), allow_negative_numbers = true))]
    pub max_total_pending: usize,
    /// Seconds without a packet after which a connection ends.
    #[cfg_attr(feature = "clap", arg(long = "idle-timeout", value_name = "S",
          default_value = "300", value_parser = weir_packet::value::seconds_ns, allow_negative_numbers = true))]
    pub idle_timeout_ns: u64,
}

/// `--max-memory-mib`: 1 to 65536 MiB, in bytes.
#[cfg(feature = "clap")]
fn mib_bytes() -> impl clap::builder::TypedValueParser<Value = usize> {
    use clap::builder::TypedValueParser;
    clap::value_parser!(u64)
        .range(1..=65536)
        .map(|mib| (mib as usize) << 20)
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_pending: 1 << 20,
            max_total_pending: 256 << 20,
            max_flows: 500_000,
            idle_timeout_ns: 300_000_000_000,
        }
    }
}

/// Counters of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Frames given to the analyzer.
    pub packets: u64,
    /// TCP segments among them.
    pub tcp_packets: u64,
    /// Connections created.
    pub flows: u64,
    /// Connections recognised as HTTP.
    pub http_flows: u64,
    /// Connections recognised as TLS.
    pub tls_flows: u64,
    /// Connections ended early because the table was full.
    pub flows_evicted: u64,
    /// Connections ended by the idle timeout.
    pub flows_timed_out: u64,
    /// Times the total bound on held bytes released a connection's holdings.
    pub pending_evictions: u64,
    /// Most bytes held out of order at once, over all connections.
    pub max_pending_seen: u64,
    /// HTTP transaction records written.
    pub http_records: u64,
    /// TLS records written.
    pub tls_records: u64,
    /// Reassembly counters, both directions of every connection.
    pub stream: StreamStats,
    /// HTTP parser counters.
    pub http: HttpStats,
    /// TLS parser counters.
    pub tls: TlsStats,
}

/// The fields Zeek's logs start with: the record's time and its connection.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ConnId {
    /// Time of the record's first message, seconds since the epoch.
    pub ts: f64,
    /// The connection's Community ID.
    pub uid: String,
    /// Originator address.
    #[serde(rename = "id.orig_h")]
    pub orig_h: IpAddr,
    /// Originator port.
    #[serde(rename = "id.orig_p")]
    pub orig_p: u16,
    /// Responder address.
    #[serde(rename = "id.resp_h")]
    pub resp_h: IpAddr,
    /// Responder port.
    #[serde(rename = "id.resp_p")]
    pub resp_p: u16,
}

impl ConnId {
    fn of(flow: &Flow, ts_ns: u64) -> ConnId {
        let ((oh, op), (rh, rp)) = endpoints(flow);
        ConnId {
            ts: secs(ts_ns),
            uid: community_id(oh, op, rh, rp),
            orig_h: oh,
            orig_p: op,
            resp_h: rh,
            resp_p: rp,
        }
    }
}

/// One HTTP transaction, with Zeek http.log's field names.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HttpRecord {
    /// When and on which connection: time of the request's first byte (of the response's,
    /// without a request).
    #[serde(flatten)]
    pub id: ConnId,
    /// Position of the transaction in its connection, from 1.
    pub trans_depth: u32,
    /// Request method.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Host header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Request target as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Referer header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub referrer: Option<String>,
    /// HTTP version of the request (of the response, without a request): `1.0`, `1.1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// User-Agent header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// Request body bytes (after de-chunking; gaps included).
    pub request_body_len: u64,
    /// Response body bytes (after de-chunking; gaps included).
    pub response_body_len: u64,
    /// Final status code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// Final status reason phrase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_msg: Option<String>,
    /// Last informational (1xx) status before the final one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub info_code: Option<u16>,
    /// Its reason phrase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub info_msg: Option<String>,
    /// Request Content-Type (media type, lower case, no parameters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_content_type: Option<String>,
    /// Response Content-Type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_content_type: Option<String>,
    /// Seconds from the request's first byte to the response's first byte.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttfb: Option<f64>,
    /// Seconds from the request's first byte to the response's last byte (to the last byte
    /// seen when the response is missing or cut).
    pub duration: f64,
    /// Bytes of the transaction the capture missed (reported, never invented).
    pub gap_bytes: u64,
    /// How the transaction ended.
    pub end: End,
}

/// One TLS connection's handshake, with Zeek ssl.log's field names.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TlsRecord {
    /// When and on which connection: time of the ClientHello (of the ServerHello, without
    /// one); the originator is the client.
    #[serde(flatten)]
    pub id: ConnId,
    /// Negotiated version (`TLSv12`, `TLSv13`...): the ServerHello's supported_versions choice,
    /// else its version field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The cipher suite the server chose (IANA name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cipher: Option<String>,
    /// The ClientHello's server name (SNI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// The protocols the client offered (ALPN).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub client_alpn: Vec<String>,
    /// The protocol the server chose (ALPN).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_protocol: Option<String>,
    /// The ClientHello's legacy version field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
    /// A ServerHello was seen.
    pub established: bool,
    /// The ClientHello's JA4 fingerprint ([`ja4`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ja4: Option<String>,
}

/// What the analyzer hands out.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// An HTTP transaction ended.
    Http(HttpRecord),
    /// A TLS handshake was seen (at the ServerHello, or when the connection ended).
    Tls(TlsRecord),
}

/// The canonical key of a connection: the endpoint that sorts first is side A.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    a: (IpAddr, u16),
    b: (IpAddr, u16),
}

#[derive(Debug)]
enum Proto {
    /// Not known yet: the first bytes of each side wait in `sniff`.
    Unknown,
    Http(Box<Http>),
    Tls(Box<Tls>),
    /// Neither, or finished: packets are dropped at the lookup.
    Ignored,
}

#[derive(Debug)]
struct Flow {
    key: Key,
    /// Side A is the originator (None: not known yet).
    a_orig: Option<bool>,
    /// Streams by sender: 0 = from A, 1 = from B.
    streams: [Stream; 2],
    sniff: [Vec<u8>; 2],
    proto: Proto,
    last_ns: u64,
    fin: [bool; 2],
    tls_logged: bool,
}

/// Bytes kept per side while the protocol is not known.
const SNIFF: usize = 16;

/// Community ID v1 (seed 0) of a TCP 5-tuple.
pub fn community_id(src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> String {
    let bytes = |a: IpAddr| -> Vec<u8> {
        match a {
            IpAddr::V4(v) => v.octets().to_vec(),
            IpAddr::V6(v) => v.octets().to_vec(),
        }
    };
    let (s, d) = (bytes(src), bytes(dst));
    let ((s, sp), (d, dp)) = if (s.as_slice(), sport) <= (d.as_slice(), dport) {
        ((s, sport), (d, dport))
    } else {
        ((d, dport), (s, sport))
    };
    let mut h = sha1_smol::Sha1::new();
    h.update(&0u16.to_be_bytes());
    h.update(&s);
    h.update(&d);
    h.update(&[6, 0]);
    h.update(&sp.to_be_bytes());
    h.update(&dp.to_be_bytes());
    format!("1:{}", base64(&h.digest().bytes()))
}

fn base64(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The HTTP and TLS analyzer.
pub struct Analyzer {
    cfg: Config,
    flows: HashMap<Key, Flow, foldhash::fast::FixedState>,
    total_pending: usize,
    last_sweep_ns: u64,
    now_ns: u64,
    stats: Stats,
    done: Vec<Tx>,
}

impl Analyzer {
    /// An analyzer with these bounds.
    pub fn new(cfg: Config) -> Analyzer {
        Analyzer {
            cfg,
            flows: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0x5eed)),
            total_pending: 0,
            last_sweep_ns: 0,
            now_ns: 0,
            stats: Stats::default(),
            done: Vec::new(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        for f in self.flows.values() {
            add_stream(&mut s.stream, &f.streams[0].stats);
            add_stream(&mut s.stream, &f.streams[1].stats);
            match &f.proto {
                Proto::Http(h) => add_http(&mut s.http, &h.stats),
                Proto::Tls(t) => add_tls(&mut s.tls, &t.stats),
                _ => {}
            }
        }
        s
    }

    /// Connections tracked now.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// One frame of link type `link` captured at `ts_ns`; records that end go to `out`.
    pub fn packet(&mut self, ts_ns: u64, link: LinkType, frame: &[u8], out: &mut dyn FnMut(Event)) {
        self.stats.packets += 1;
        self.now_ns = self.now_ns.max(ts_ns);
        if self.now_ns >= self.last_sweep_ns + 10_000_000_000 {
            self.sweep(out);
        }
        let mut d = Decoded::new();
        decode_into(&mut d, link, frame);
        let Some(ip) = d.ip() else { return };
        let Some(Transport::Tcp {
            src,
            dst,
            flags,
            seq,
            ack,
            payload,
            ..
        }) = d.transport()
        else {
            return;
        };
        self.stats.tcp_packets += 1;
        let from = (ip.src, src);
        let to = (ip.dst, dst);
        let (key, from_a) = if from <= to {
            (Key { a: from, b: to }, true)
        } else {
            (Key { a: to, b: from }, false)
        };
        let syn = flags & tcp::SYN != 0;
        let rst = flags & tcp::RST != 0;
        let fin = flags & tcp::FIN != 0;
        let ackf = flags & tcp::ACK != 0;
        let dir = usize::from(!from_a);
        // A SYN that is not its stream's own (retransmitted) SYN starts a new connection on
        // reused ports: the old one ends here, its bytes are not mixed with the new one's.
        if syn
            && self
                .flows
                .get(&key)
                .is_some_and(|f| f.streams[dir].is_new_connection(seq))
        {
            self.close(key, out);
        }
        if !self.flows.contains_key(&key) {
            if payload.is_empty() && !syn {
                return;
            }
            if self.flows.len() >= self.cfg.max_flows {
                self.evict_oldest(out);
            }
            self.stats.flows += 1;
            self.flows.insert(
                key,
                Flow {
                    key,
                    a_orig: None,
                    streams: [Stream::default(), Stream::default()],
                    sniff: [Vec::new(), Vec::new()],
                    proto: Proto::Unknown,
                    last_ns: ts_ns,
                    fin: [false, false],
                    tls_logged: false,
                },
            );
        }
        let flow = self.flows.get_mut(&key).expect("inserted above");
        flow.last_ns = ts_ns;
        if matches!(flow.proto, Proto::Ignored) {
            if rst || (fin && flow.fin[1 - dir]) {
                self.close(key, out);
            } else if fin {
                flow.fin[dir] = true;
            }
            return;
        }
        if syn {
            if flow.a_orig.is_none() {
                flow.a_orig = Some(from_a != ackf);
            }
            flow.streams[dir].syn(seq);
        }
        let max_pending = self.cfg.max_pending;
        let mut chunks: Vec<(usize, Option<Vec<u8>>, u64)> = Vec::new();
        let mut delta = 0isize;
        // Data of this direction, then what this packet's ACK says of the other direction.
        if !syn || !payload.is_empty() {
            // Data on a SYN (TCP Fast Open) starts after the SYN's own sequence number.
            let data_seq = if syn { seq.wrapping_add(1) } else { seq };
            let mut direct = Vec::new();
            delta += flow.streams[dir].segment(data_seq, payload, fin, max_pending, &mut |c| {
                direct.push(match c {
                    Chunk::Data(b) => (dir, Some(b.to_vec()), 0),
                    Chunk::Gap(n) => (dir, None, n),
                })
            });
            chunks.extend(direct);
        }
        if ackf && !syn {
            delta += flow.streams[1 - dir].acked(ack, &mut |c| {
                chunks.push(match c {
                    Chunk::Data(b) => (1 - dir, Some(b.to_vec()), 0),
                    Chunk::Gap(n) => (1 - dir, None, n),
                })
            });
        }
        if fin {
            flow.fin[dir] = true;
        }
        self.total_pending = (self.total_pending as isize + delta).max(0) as usize;
        self.stats.max_pending_seen = self.stats.max_pending_seen.max(self.total_pending as u64);
        if self.total_pending > self.cfg.max_total_pending {
            self.stats.pending_evictions += 1;
            let flow = self.flows.get_mut(&key).expect("present");
            for d in 0..2 {
                let released = flow.streams[d].evict(&mut |c| {
                    chunks.push(match c {
                        Chunk::Data(b) => (d, Some(b.to_vec()), 0),
                        Chunk::Gap(n) => (d, None, n),
                    })
                });
                self.total_pending = self.total_pending.saturating_sub(released);
            }
        }
        for (d, data, gap) in chunks {
            self.feed(key, d, ts_ns, data.as_deref(), gap, out);
        }
        let flow = self.flows.get_mut(&key).expect("present");
        if rst || (flow.fin[0] && flow.fin[1]) {
            self.close(key, out);
        }
    }

    /// Hands a chunk of direction `dir` to the flow's parser (sniffing the protocol first).
    fn feed(
        &mut self,
        key: Key,
        dir: usize,
        ts: u64,
        data: Option<&[u8]>,
        gap: u64,
        out: &mut dyn FnMut(Event),
    ) {
        let Some(flow) = self.flows.get_mut(&key) else {
            return;
        };
        if let Proto::Unknown = flow.proto {
            let Some(data) = data else {
                if !flow.sniff[dir].is_empty() {
                    flow.proto = Proto::Ignored;
                }
                return;
            };
            let s = &mut flow.sniff[dir];
            let take = data.len().min(SNIFF - s.len());
            s.extend_from_slice(&data[..take]);
            let s = &flow.sniff[dir];
            let from_a = dir == 0;
            let (proto, sender_is_orig) = if http::looks_like_request(s) {
                (Some(true), Some(true))
            } else if http::looks_like_response(s) {
                (Some(true), Some(false))
            } else if tls::looks_like_tls(s) && s.len() >= 6 {
                (Some(false), Some(s[5] != 2))
            } else if s.len() < SNIFF && (http::could_be_http(s) || (s[0] == 22 && s.len() < 6)) {
                // could still be either: wait for more bytes
                return;
            } else {
                (None, None)
            };
            match proto {
                None => {
                    flow.proto = Proto::Ignored;
                    flow.sniff = [Vec::new(), Vec::new()];
                    return;
                }
                Some(is_http) => {
                    if flow.a_orig.is_none() {
                        flow.a_orig = sender_is_orig.map(|o| o == from_a);
                    }
                    if is_http {
                        self.stats.http_flows += 1;
                        flow.proto = Proto::Http(Box::default());
                    } else {
                        self.stats.tls_flows += 1;
                        flow.proto = Proto::Tls(Box::default());
                    }
                    let sniffed = std::mem::take(&mut flow.sniff[dir]);
                    let rest = &data[take..];
                    let (mut whole, data) = (sniffed, rest);
                    whole.extend_from_slice(data);
                    self.deliver(key, dir, ts, Some(&whole), 0, out);
                    return;
                }
            }
        }
        self.deliver(key, dir, ts, data, gap, out);
    }

    fn deliver(
        &mut self,
        key: Key,
        dir: usize,
        ts: u64,
        data: Option<&[u8]>,
        gap: u64,
        out: &mut dyn FnMut(Event),
    ) {
        let Some(flow) = self.flows.get_mut(&key) else {
            return;
        };
        let orig = flow.a_orig.unwrap_or(true) == (dir == 0);
        let mut finished_tls = false;
        match &mut flow.proto {
            Proto::Http(h) => {
                match data {
                    Some(d) if orig => h.request_data(ts, d),
                    Some(d) => h.response_data(ts, d),
                    None => h.gap(orig, gap),
                }
                h.take_done(&mut self.done);
            }
            Proto::Tls(t) => {
                match data {
                    Some(d) => t.data(orig, ts, d),
                    None => t.gap(orig),
                }
                finished_tls = t.finished();
            }
            _ => {}
        }
        self.emit(key, out);
        if finished_tls {
            let flow = self.flows.get_mut(&key).expect("present");
            if let Proto::Tls(t) = std::mem::replace(&mut flow.proto, Proto::Ignored) {
                add_tls(&mut self.stats.tls, &t.stats);
                if !flow.tls_logged && (t.hello.client_hello || t.hello.established) {
                    flow.tls_logged = true;
                    let rec = tls_record(flow, &t.hello);
                    self.stats.tls_records += 1;
                    out(Event::Tls(rec));
                }
            }
            // Nothing more to read: drop the reassembly state.
            let flow = self.flows.get_mut(&key).expect("present");
            let held = flow.streams[0].held() + flow.streams[1].held();
            for s in &mut flow.streams {
                let st = s.stats;
                *s = Stream::default();
                s.stats = st;
            }
            self.total_pending = self.total_pending.saturating_sub(held);
        }
    }

    /// Writes the finished transactions of `key`'s connection.
    fn emit(&mut self, key: Key, out: &mut dyn FnMut(Event)) {
        if self.done.is_empty() {
            return;
        }
        let Some(flow) = self.flows.get(&key) else {
            return;
        };
        for tx in self.done.drain(..) {
            self.stats.http_records += 1;
            out(Event::Http(http_record(flow, tx)));
        }
    }

    /// Ends a connection: held bytes are delivered (holes as gaps), open transactions written.
    fn close(&mut self, key: Key, out: &mut dyn FnMut(Event)) {
        let Some(flow) = self.flows.get_mut(&key) else {
            return;
        };
        let mut chunks = Vec::new();
        for d in 0..2 {
            let released = flow.streams[d].flush(&mut |c| {
                chunks.push(match c {
                    Chunk::Data(b) => (d, Some(b.to_vec()), 0),
                    Chunk::Gap(n) => (d, None, n),
                })
            });
            self.total_pending = self.total_pending.saturating_sub(released);
        }
        let ts = flow.last_ns;
        for (d, data, gap) in chunks {
            self.feed(key, d, ts, data.as_deref(), gap, out);
        }
        let Some(mut flow) = self.flows.remove(&key) else {
            return;
        };
        add_stream(&mut self.stats.stream, &flow.streams[0].stats);
        add_stream(&mut self.stats.stream, &flow.streams[1].stats);
        match std::mem::replace(&mut flow.proto, Proto::Ignored) {
            Proto::Http(mut h) => {
                let mut txs = Vec::new();
                h.end(ts, &mut txs);
                add_http(&mut self.stats.http, &h.stats);
                for tx in txs {
                    self.stats.http_records += 1;
                    out(Event::Http(http_record(&flow, tx)));
                }
            }
            Proto::Tls(t) => {
                add_tls(&mut self.stats.tls, &t.stats);
                if !flow.tls_logged && (t.hello.client_hello || t.hello.established) {
                    self.stats.tls_records += 1;
                    out(Event::Tls(tls_record(&flow, &t.hello)));
                }
            }
            _ => {}
        }
    }

    fn sweep(&mut self, out: &mut dyn FnMut(Event)) {
        self.last_sweep_ns = self.now_ns;
        let limit = self.now_ns.saturating_sub(self.cfg.idle_timeout_ns);
        let idle: Vec<Key> = self
            .flows
            .values()
            .filter(|f| f.last_ns < limit)
            .map(|f| f.key)
            .collect();
        for k in idle {
            self.stats.flows_timed_out += 1;
            self.close(k, out);
        }
    }

    fn evict_oldest(&mut self, out: &mut dyn FnMut(Event)) {
        let mut all: Vec<(u64, Key)> = self.flows.values().map(|f| (f.last_ns, f.key)).collect();
        let n = (all.len() / 8).max(1);
        all.select_nth_unstable_by_key(n - 1, |e| e.0);
        for (_, k) in all.into_iter().take(n) {
            self.stats.flows_evicted += 1;
            self.close(k, out);
        }
    }

    /// The wall clock says `now_ns` while no packet came (live capture): connections idle
    /// longer than the timeout end, their records go to `out`.
    pub fn tick(&mut self, now_ns: u64, out: &mut dyn FnMut(Event)) {
        self.now_ns = self.now_ns.max(now_ns);
        if self.now_ns >= self.last_sweep_ns + 1_000_000_000 {
            self.sweep(out);
        }
    }

    /// Ends every connection (the end of the capture) and returns the final counters.
    pub fn finish(&mut self, out: &mut dyn FnMut(Event)) -> Stats {
        let mut keys: Vec<(u64, Key)> = self.flows.values().map(|f| (f.last_ns, f.key)).collect();
        keys.sort_by_key(|e| e.0);
        for (_, k) in keys {
            self.close(k, out);
        }
        self.stats()
    }
}

impl Default for Analyzer {
    fn default() -> Analyzer {
        Analyzer::new(Config::default())
    }
}

fn endpoints(flow: &Flow) -> ((IpAddr, u16), (IpAddr, u16)) {
    if flow.a_orig.unwrap_or(true) {
        (flow.key.a, flow.key.b)
    } else {
        (flow.key.b, flow.key.a)
    }
}

fn http_record(flow: &Flow, tx: Tx) -> HttpRecord {
    HttpRecord {
        id: ConnId::of(flow, tx.ts_ns),
        trans_depth: tx.depth,
        method: tx.method,
        host: tx.host,
        uri: tx.uri,
        referrer: tx.referrer,
        version: tx.version,
        user_agent: tx.user_agent,
        request_body_len: tx.request_body_len,
        response_body_len: tx.response_body_len,
        status_code: tx.status_code,
        status_msg: tx.status_msg,
        info_code: tx.info_code,
        info_msg: tx.info_msg,
        request_content_type: tx.request_content_type,
        response_content_type: tx.response_content_type,
        ttfb: tx.response_ts_ns.map(|r| secs(r.saturating_sub(tx.ts_ns))),
        duration: secs(tx.last_ts_ns.max(tx.ts_ns) - tx.ts_ns),
        gap_bytes: tx.gap_bytes,
        end: tx.end.unwrap_or(End::NoResponse),
    }
}

fn tls_record(flow: &Flow, h: &tls::Hello) -> TlsRecord {
    TlsRecord {
        id: ConnId::of(flow, h.ts_ns),
        version: h.version.map(tls::version_name),
        cipher: h.cipher.map(tls::cipher_name),
        server_name: h.server_name.clone(),
        client_alpn: h.alpn.clone(),
        next_protocol: h.next_protocol.clone(),
        client_version: h.client_version.map(tls::version_name),
        established: h.established,
        ja4: h.ja4.clone(),
    }
}

fn add_stream(a: &mut StreamStats, b: &StreamStats) {
    a.delivered_bytes += b.delivered_bytes;
    a.gap_bytes += b.gap_bytes;
    a.gaps += b.gaps;
    a.retransmitted_bytes += b.retransmitted_bytes;
    a.overlap_conflicts += b.overlap_conflicts;
    a.out_of_order_segments += b.out_of_order_segments;
    a.evicted_bytes += b.evicted_bytes;
}

fn add_http(a: &mut HttpStats, b: &HttpStats) {
    a.requests += b.requests;
    a.responses += b.responses;
    a.informational += b.informational;
    a.orphan_responses += b.orphan_responses;
    a.parse_errors += b.parse_errors;
    a.desyncs += b.desyncs;
    a.skipped_bytes += b.skipped_bytes;
}

fn add_tls(a: &mut TlsStats, b: &TlsStats) {
    a.client_hellos += b.client_hellos;
    a.server_hellos += b.server_hellos;
    a.errors += b.errors;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Community ID spec's example (community-id-spec, baseline tcp test vector).
    #[test]
    fn community_id_matches_the_spec() {
        let id = community_id(
            "128.232.110.120".parse().unwrap(),
            34855,
            "66.35.250.204".parse().unwrap(),
            80,
        );
        assert_eq!(id, "1:LQU9qZlK+B5F3KDmev6m5PMibrg=");
    }
}
