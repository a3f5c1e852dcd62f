//! weir-voip: call records and RTP stream quality from packets, the way VoIPmonitor and
//! Wireshark's RTP analysis report them.
//!
//! An [`Analyzer`] takes frames in capture order ([`Analyzer::packet`]), decodes them with
//! weir-decode and
//! - parses SIP ([`sip`]) over UDP and over TCP (in-order bytes per direction, framed by
//!   Content-Length) on any port, recognised by content; every Call-ID becomes one
//!   [`CallRecord`] (INVITE dialogs carry call times, final status, post-dial delay, duration);
//! - reads the SDP ([`sdp`]) of offers and answers, re-INVITEs included, and remembers each
//!   announced address and port (RTP, and RTCP on port + 1 or `a=rtcp`) as the call's media;
//! - follows RTP ([`rtp`]) to those endpoints and, without SIP, by a heuristic (version 2,
//!   even destination port ≥ 1024, a steady SSRC, sequence and payload type), each stream
//!   (5-tuple + SSRC, as tshark keys them) with RFC 3550 arithmetic;
//! - reads RTCP sender and receiver reports and puts their loss/jitter beside the measured ones;
//! - rates each stream with the E-model ([`emodel`]), a call by its worst stream.
//!
//! Records come out of [`Analyzer::finish`] (offline: a call's streams can outlive its BYE).
//! Memory is bounded by [`Config`]: calls, streams, TCP connections and bytes per connection;
//! what the bounds drop is counted in [`Stats`].

#![forbid(unsafe_code)]

pub mod emodel;
pub mod rtp;
pub mod sdp;
pub mod sip;

use std::net::IpAddr;

use hashbrown::HashMap;
use weir_decode::{decode_into, tcp, Decoded, LinkType, Transport};

use crate::rtp::{RtpHeader, StreamStats};
use crate::sdp::RtpMap;
use crate::sip::{Message, Parsed, Start};

type State = foldhash::fast::FixedState;
/// An address and port.
type Ep = (IpAddr, u16);

/// Bounds of the analyzer.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Most Call-IDs tracked; later ones are counted and ignored.
    pub max_calls: usize,
    /// Most RTP streams (and candidates) tracked; later ones are counted and ignored.
    pub max_streams: usize,
    /// Most TCP connections carrying SIP tracked at once.
    pub max_tcp: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_calls: 1_000_000,
            max_streams: 1_000_000,
            max_tcp: 100_000,
        }
    }
}

/// Counters of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Frames given to the analyzer.
    pub packets: u64,
    /// SIP messages parsed (UDP and TCP).
    pub sip_messages: u64,
    /// SIP messages parsed from TCP.
    pub sip_tcp_messages: u64,
    /// Payloads that looked like SIP but did not parse.
    pub sip_errors: u64,
    /// SIP messages without a Call-ID.
    pub sip_no_call_id: u64,
    /// Call-IDs seen.
    pub calls: u64,
    /// Call-IDs ignored because [`Config::max_calls`] were tracked.
    pub calls_dropped: u64,
    /// Packets counted in an RTP stream (candidates included).
    pub rtp_packets: u64,
    /// Streams written.
    pub streams: u64,
    /// Streams found through SDP.
    pub sdp_streams: u64,
    /// Streams found by the heuristic and written (steady).
    pub heuristic_streams: u64,
    /// Heuristic candidates not written (not steady: too short or irregular).
    pub candidates_discarded: u64,
    /// Packets ignored because [`Config::max_streams`] were tracked.
    pub streams_dropped_packets: u64,
    /// RTCP packets.
    pub rtcp_packets: u64,
    /// RTCP report blocks matched to a stream.
    pub rtcp_reports: u64,
    /// TCP bytes dropped (gaps, overflow, bound on connections).
    pub tcp_bytes_dropped: u64,
}

/// Where an SDP said media goes.
#[derive(Clone, Debug)]
struct MediaRef {
    call: usize,
    rtpmap: Vec<RtpMap>,
}

/// One SDP media line as a call record shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SdpMedia {
    /// Media type.
    pub kind: String,
    /// Connection address.
    pub addr: IpAddr,
    /// RTP port.
    pub port: u16,
    /// Payload types offered.
    pub payload_types: Vec<u8>,
}

#[derive(Debug, Default)]
struct Call {
    call_id: String,
    first_ns: u64,
    last_ns: u64,
    kind: Option<String>,
    methods: Vec<String>,
    codes: Vec<u16>,
    from: Option<String>,
    to: Option<String>,
    caller: Option<Ep>,
    callee: Option<Ep>,
    user_agent: Option<String>,
    callee_user_agent: Option<String>,
    transport: &'static str,
    invite_ns: Option<u64>,
    ringing_ns: Option<u64>,
    first_final_ns: Option<u64>,
    answer_ns: Option<u64>,
    end_ns: Option<u64>,
    end_method: Option<&'static str>,
    ended_by: Option<&'static str>,
    final_status: Option<u16>,
    reinvites: u32,
    messages: u64,
    sdp: Vec<SdpMedia>,
    streams: Vec<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct StreamKey {
    src: Ep,
    dst: Ep,
    ssrc: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct RtcpSeen {
    reports: u64,
    fraction_lost: u8,
    cumulative_lost: i32,
    jitter: u32,
}

#[derive(Debug)]
struct Stream {
    key: StreamKey,
    call: Option<usize>,
    rtpmap: Vec<RtpMap>,
    stats: StreamStats,
    rtcp: Option<RtcpSeen>,
}

impl Stream {
    fn codec(&self, pt: u8) -> (Option<String>, u32) {
        if let Some(m) = self.rtpmap.iter().find(|m| m.pt == pt) {
            let clock = if m.name.eq_ignore_ascii_case("telephone-event") {
                0
            } else if m.rate != 0 {
                m.rate
            } else {
                rtp::static_pt(pt).map_or(0, |s| s.1)
            };
            return (Some(m.name.clone()), clock);
        }
        match rtp::static_pt(pt) {
            Some((n, c)) => (Some(n.to_string()), c),
            None => (None, 0),
        }
    }
}

#[derive(Debug, Default)]
struct TcpBuf {
    next: Option<u32>,
    buf: Vec<u8>,
}

/// How a stream was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FoundBy {
    /// Its destination (or source) was announced in a call's SDP.
    Sdp,
    /// By the RTP heuristic, without SIP.
    Heuristic,
}

/// What RTCP receiver/sender reports said about a stream (the last report block on its SSRC).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RtcpRecord {
    /// Report blocks seen on this SSRC.
    pub reports: u64,
    /// Last fraction lost, percent (RFC 3550's 1/256 units × 100/256).
    pub fraction_lost_pct: f64,
    /// Last cumulative number of packets lost.
    pub cumulative_lost: i32,
    /// Last interarrival jitter, ms (timestamp units / clock rate); absent without a clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<f64>,
}

/// One RTP stream: one SSRC from one address/port to another.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StreamRecord {
    /// Always `stream`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The call it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// How it was found.
    pub found_by: FoundBy,
    /// Source address.
    pub src_ip: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination address.
    pub dst_ip: IpAddr,
    /// Destination port.
    pub dst_port: u16,
    /// Synchronisation source.
    pub ssrc: u32,
    /// Payload type of the first packet.
    pub payload_type: u8,
    /// Encoding name (rtpmap, or RFC 3551 for static types).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codec: Option<String>,
    /// Clock rate used for jitter, Hz (0: none, no jitter).
    pub clock_rate: u32,
    /// First packet, seconds since the epoch.
    pub first_ts: f64,
    /// Last packet, seconds since the epoch.
    pub last_ts: f64,
    /// Packets received (duplicates included).
    pub packets: u64,
    /// Packets expected from the sequence numbers (wraps counted).
    pub expected: u64,
    /// RFC 3550 lost: expected − received (negative with duplicates).
    pub lost: i64,
    /// Sequence numbers never received.
    pub missing: u64,
    /// Duplicated packets.
    pub duplicates: u64,
    /// Packets arriving after a higher sequence number.
    pub reordered: u64,
    /// Times the sequence did not follow the previous packet.
    pub seq_errors: u64,
    /// Packets with the marker bit.
    pub markers: u64,
    /// Times the SSRC on this 5-tuple changed between consecutive packets.
    pub ssrc_changes: u64,
    /// Payload type changes between consecutive packets.
    pub payload_type_changes: u64,
    /// Payload bytes.
    pub payload_bytes: u64,
    /// RFC 3550 A.8 interarrival jitter at the end, ms.
    pub jitter_ms: f64,
    /// Largest jitter estimate, ms.
    pub max_jitter_ms: f64,
    /// Mean jitter estimate, ms.
    pub mean_jitter_ms: f64,
    /// Largest gap between consecutive packets (talkspurt starts excluded), ms.
    pub max_delta_ms: f64,
    /// Packetisation time from the RTP timestamps, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ptime_ms: Option<f64>,
    /// E-model R-factor (codecs with known impairment only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r_factor: Option<f64>,
    /// MOS from R.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mos: Option<f64>,
    /// What RTCP reports said about this SSRC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtcp: Option<RtcpRecord>,
}

/// One SIP Call-ID: for INVITE dialogs a call.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CallRecord {
    /// Always `call`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// First message, seconds since the epoch.
    pub ts: f64,
    /// Call-ID.
    pub call_id: String,
    /// Method of the first request (`INVITE` for calls; `REGISTER`, `OPTIONS`...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Request methods seen, in order of first appearance.
    pub methods: Vec<String>,
    /// Response codes seen, ascending.
    pub status_codes: Vec<u16>,
    /// From URI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// To URI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// User-Agent of the first request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// Server (or User-Agent) of the first response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callee_user_agent: Option<String>,
    /// Source of the first request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// Destination of the first request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callee: Option<String>,
    /// `udp` or `tcp` (of the first message).
    pub transport: &'static str,
    /// First INVITE, seconds since the epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invite_ts: Option<f64>,
    /// First 180/183 to an INVITE.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ringing_ts: Option<f64>,
    /// First 2xx to an INVITE.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_ts: Option<f64>,
    /// First BYE or CANCEL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_ts: Option<f64>,
    /// `BYE` or `CANCEL`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_method: Option<&'static str>,
    /// `caller` or `callee`: who sent the BYE/CANCEL (by address).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<&'static str>,
    /// Final response to the initial INVITE (the 2xx once answered).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_status: Option<u16>,
    /// INVITE to first 180/183 or final response, ms (RFC 6076 post-dial delay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_dial_delay_ms: Option<f64>,
    /// Answer to BYE, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// INVITEs inside the dialog after the first (with a To tag).
    pub reinvites: u32,
    /// SIP messages seen.
    pub messages: u64,
    /// Media announced in SDP offers and answers.
    pub sdp: Vec<SdpMedia>,
    /// RTP streams of the call.
    pub streams: usize,
    /// RTP packets of the call's streams.
    pub rtp_packets: u64,
    /// RFC 3550 lost packets over the call's streams.
    pub rtp_lost: i64,
    /// Largest jitter of its streams, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_jitter_ms: Option<f64>,
    /// R-factor of its worst stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r_factor: Option<f64>,
    /// MOS of its worst stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mos: Option<f64>,
}

/// A record produced by the analyzer.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A call (Call-ID).
    Call(Box<CallRecord>),
    /// An RTP stream.
    Stream(Box<StreamRecord>),
}

/// The VoIP analyzer. See the crate documentation.
pub struct Analyzer {
    cfg: Config,
    stats: Stats,
    call_ids: HashMap<String, usize, State>,
    calls: Vec<Call>,
    media: HashMap<Ep, MediaRef, State>,
    stream_ids: HashMap<StreamKey, usize, State>,
    streams: Vec<Stream>,
    /// Last SSRC and SSRC changes per (src, dst).
    tuples: HashMap<(Ep, Ep), (u32, u64), State>,
    by_ssrc: HashMap<u32, Vec<usize>, State>,
    tcp: HashMap<(Ep, Ep), TcpBuf, State>,
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn ep_text(e: Ep) -> String {
    match e.0 {
        IpAddr::V4(a) => format!("{a}:{}", e.1),
        IpAddr::V6(a) => format!("[{a}]:{}", e.1),
    }
}

impl Analyzer {
    /// A new analyzer with bounds `cfg`.
    pub fn new(cfg: Config) -> Analyzer {
        Analyzer {
            cfg,
            stats: Stats::default(),
            call_ids: HashMap::default(),
            calls: Vec::new(),
            media: HashMap::default(),
            stream_ids: HashMap::default(),
            streams: Vec::new(),
            tuples: HashMap::default(),
            by_ssrc: HashMap::default(),
            tcp: HashMap::default(),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// One frame of link type `link` captured at `ts_ns`.
    pub fn packet(&mut self, ts_ns: u64, link: LinkType, frame: &[u8]) {
        self.stats.packets += 1;
        let mut d = Decoded::new();
        decode_into(&mut d, link, frame);
        let Some(ip) = d.ip() else { return };
        match d.transport() {
            Some(Transport::Udp {
                src, dst, payload, ..
            }) => self.udp(ts_ns, (ip.src, src), (ip.dst, dst), payload),
            Some(Transport::Tcp {
                src,
                dst,
                flags,
                seq,
                payload,
                ..
            }) => self.tcp(ts_ns, (ip.src, src), (ip.dst, dst), flags, seq, payload),
            _ => {}
        }
    }

    fn udp(&mut self, ts_ns: u64, src: Ep, dst: Ep, p: &[u8]) {
        if sip::looks_like_sip(p) {
            match sip::parse(p, false) {
                Ok(Parsed::Complete(m, _)) => self.sip(ts_ns, src, dst, &m, "udp"),
                _ => self.stats.sip_errors += 1,
            }
            return;
        }
        if rtp::looks_like_rtcp(p) {
            self.rtcp(p);
            return;
        }
        let Some(h) = rtp::parse_rtp(p) else { return };
        self.rtp(ts_ns, src, dst, &h);
    }

    fn tcp(&mut self, ts_ns: u64, src: Ep, dst: Ep, flags: u8, seq: u32, p: &[u8]) {
        let key = (src, dst);
        if flags & (tcp::FIN | tcp::RST) != 0 && p.is_empty() {
            self.tcp.remove(&key);
            return;
        }
        if p.is_empty() {
            return;
        }
        if !self.tcp.contains_key(&key) {
            if !sip::looks_like_sip(p) {
                return;
            }
            if self.tcp.len() >= self.cfg.max_tcp {
                self.stats.tcp_bytes_dropped += p.len() as u64;
                return;
            }
            self.tcp.insert(key, TcpBuf::default());
        }
        let Some(tb) = self.tcp.get_mut(&key) else {
            return;
        };
        let next = *tb.next.get_or_insert(seq);
        let off = next.wrapping_sub(seq);
        let data = if off == 0 {
            p
        } else if (off as i32) > 0 {
            // retransmission or overlap: the bytes before `next` were taken already
            p.get(off as usize..).unwrap_or(&[])
        } else {
            // a gap: what was held cannot be completed; start again at a message start
            self.stats.tcp_bytes_dropped += tb.buf.len() as u64;
            tb.buf.clear();
            tb.next = Some(seq);
            if !sip::looks_like_sip(p) {
                tb.next = Some(seq.wrapping_add(p.len() as u32));
                self.stats.tcp_bytes_dropped += p.len() as u64;
                return;
            }
            p
        };
        if data.is_empty() {
            return;
        }
        tb.next = Some(tb.next.unwrap_or(seq).wrapping_add(data.len() as u32));
        tb.buf.extend_from_slice(data);
        let mut buf = std::mem::take(&mut tb.buf);
        let mut at = 0;
        let mut failed = false;
        while at < buf.len() {
            match sip::parse(&buf[at..], true) {
                Ok(Parsed::Complete(m, n)) => {
                    self.stats.sip_tcp_messages += 1;
                    self.sip(ts_ns, src, dst, &m, "tcp");
                    at += n;
                }
                Ok(Parsed::Incomplete) => break,
                Err(_) => {
                    self.stats.sip_errors += 1;
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            self.stats.tcp_bytes_dropped += (buf.len() - at) as u64;
            buf.clear();
        } else {
            buf.drain(..at);
        }
        if let Some(tb) = self.tcp.get_mut(&key) {
            tb.buf = buf;
        }
    }

    fn call_index(&mut self, id: &str, ts_ns: u64, transport: &'static str) -> Option<usize> {
        if let Some(&i) = self.call_ids.get(id) {
            return Some(i);
        }
        if self.calls.len() >= self.cfg.max_calls {
            self.stats.calls_dropped += 1;
            return None;
        }
        let i = self.calls.len();
        self.calls.push(Call {
            call_id: id.to_string(),
            first_ns: ts_ns,
            last_ns: ts_ns,
            transport,
            ..Call::default()
        });
        self.call_ids.insert(id.to_string(), i);
        self.stats.calls += 1;
        Some(i)
    }

    fn sip(&mut self, ts_ns: u64, src: Ep, dst: Ep, m: &Message<'_>, transport: &'static str) {
        self.stats.sip_messages += 1;
        let Some(id) = m.call_id else {
            self.stats.sip_no_call_id += 1;
            return;
        };
        let Some(ci) = self.call_index(id, ts_ns, transport) else {
            return;
        };
        let c = &mut self.calls[ci];
        c.messages += 1;
        c.first_ns = c.first_ns.min(ts_ns);
        c.last_ns = c.last_ns.max(ts_ns);
        if c.from.is_none() {
            c.from = m.from.map(|v| sip::uri_of(v).to_string());
        }
        if c.to.is_none() {
            c.to = m.to.map(|v| sip::uri_of(v).to_string());
        }
        match m.start {
            Start::Request { method, .. } => {
                if !c.methods.iter().any(|x| x == method) {
                    c.methods.push(method.to_string());
                }
                let first_request = c.kind.is_none();
                if first_request {
                    c.kind = Some(method.to_string());
                    c.caller = Some(src);
                    c.callee = Some(dst);
                    c.user_agent = m.user_agent.map(str::to_string);
                }
                match method {
                    "INVITE" => {
                        let in_dialog = m.to.and_then(sip::tag_of).is_some();
                        if c.invite_ns.is_none() {
                            c.invite_ns = Some(ts_ns);
                            if c.kind.as_deref() != Some("INVITE") && !in_dialog {
                                c.kind = Some("INVITE".into());
                            }
                        } else if in_dialog && c.answer_ns.is_some() {
                            c.reinvites += 1;
                        }
                    }
                    "BYE" | "CANCEL" if c.end_ns.is_none() => {
                        c.end_ns = Some(ts_ns);
                        c.end_method = Some(if method == "BYE" { "BYE" } else { "CANCEL" });
                        c.ended_by = if Some(src) == c.caller {
                            Some("caller")
                        } else if Some(src) == c.callee {
                            Some("callee")
                        } else {
                            None
                        };
                    }
                    _ => {}
                }
            }
            Start::Response { code, .. } => {
                if !c.codes.contains(&code) {
                    c.codes.push(code);
                }
                if c.callee_user_agent.is_none() && code > 100 {
                    c.callee_user_agent = m.server.or(m.user_agent).map(str::to_string);
                }
                if m.cseq.is_some_and(|(_, meth)| meth == "INVITE") {
                    if (code == 180 || code == 183) && c.ringing_ns.is_none() {
                        c.ringing_ns = Some(ts_ns);
                    }
                    if code >= 200 && c.first_final_ns.is_none() {
                        c.first_final_ns = Some(ts_ns);
                    }
                    if c.answer_ns.is_none() && code >= 200 {
                        c.final_status = Some(code);
                        if code < 300 {
                            c.answer_ns = Some(ts_ns);
                        }
                    }
                }
            }
        }
        if m.has_sdp() {
            let s = sdp::parse(m.body);
            for md in s.media {
                let Some(addr) = md.addr else { continue };
                if md.port == 0 {
                    continue;
                }
                let r = MediaRef {
                    call: ci,
                    rtpmap: md.rtpmap.clone(),
                };
                self.media.insert((addr, md.port), r.clone());
                self.media.insert((addr, md.rtcp_port), r);
                let out = SdpMedia {
                    kind: md.kind,
                    addr,
                    port: md.port,
                    payload_types: md.pts,
                };
                let c = &mut self.calls[ci];
                if !c.sdp.contains(&out) {
                    c.sdp.push(out);
                }
            }
        }
    }

    fn rtp(&mut self, ts_ns: u64, src: Ep, dst: Ep, h: &RtpHeader) {
        let key = StreamKey {
            src,
            dst,
            ssrc: h.ssrc,
        };
        let t = self.tuples.entry((src, dst)).or_insert((h.ssrc, 0));
        if t.0 != h.ssrc {
            t.0 = h.ssrc;
            t.1 += 1;
        }
        let si = match self.stream_ids.get(&key) {
            Some(&i) => i,
            None => {
                let media = self
                    .media
                    .get(&dst)
                    .or_else(|| self.media.get(&src))
                    .cloned();
                if media.is_none() && (dst.1 % 2 != 0 || dst.1 < 1024 || src.1 < 1024) {
                    return;
                }
                if self.streams.len() >= self.cfg.max_streams {
                    self.stats.streams_dropped_packets += 1;
                    return;
                }
                let i = self.streams.len();
                let (call, rtpmap) = match media {
                    Some(m) => (Some(m.call), m.rtpmap),
                    None => (None, Vec::new()),
                };
                if let Some(c) = call {
                    self.calls[c].streams.push(i);
                }
                self.streams.push(Stream {
                    key,
                    call,
                    rtpmap,
                    stats: StreamStats::default(),
                    rtcp: None,
                });
                self.stream_ids.insert(key, i);
                self.by_ssrc.entry(h.ssrc).or_default().push(i);
                i
            }
        };
        let s = &mut self.streams[si];
        let (_, clock) = s.codec(h.pt);
        s.stats.add(ts_ns, h, clock);
        self.stats.rtp_packets += 1;
    }

    fn rtcp(&mut self, p: &[u8]) {
        self.stats.rtcp_packets += 1;
        for b in rtp::rtcp_reports(p) {
            let Some(list) = self.by_ssrc.get(&b.ssrc) else {
                continue;
            };
            // the stream with most packets on that SSRC
            let Some(&si) = list.iter().max_by_key(|&&i| self.streams[i].stats.packets) else {
                continue;
            };
            let r = self.streams[si].rtcp.get_or_insert_with(RtcpSeen::default);
            r.reports += 1;
            r.fraction_lost = b.fraction_lost;
            r.cumulative_lost = b.cumulative_lost;
            r.jitter = b.jitter;
            self.stats.rtcp_reports += 1;
        }
    }

    fn stream_record(&self, s: &Stream) -> StreamRecord {
        let st = &s.stats;
        let (codec, clock) = s.codec(st.first_pt);
        let ptime_ms = st.ptime_ms(clock);
        let expected = st.expected();
        let loss_pct = if expected == 0 {
            0.0
        } else {
            st.missing() as f64 * 100.0 / expected as f64
        };
        let q = emodel::codec(st.first_pt, codec.as_deref())
            .map(|c| emodel::quality(c, ptime_ms.unwrap_or(20.0), st.mean_jitter_ms(), loss_pct));
        StreamRecord {
            kind: "stream",
            call_id: s.call.map(|c| self.calls[c].call_id.clone()),
            found_by: if s.call.is_some() {
                FoundBy::Sdp
            } else {
                FoundBy::Heuristic
            },
            src_ip: s.key.src.0,
            src_port: s.key.src.1,
            dst_ip: s.key.dst.0,
            dst_port: s.key.dst.1,
            ssrc: s.key.ssrc,
            payload_type: st.first_pt,
            codec,
            clock_rate: clock,
            first_ts: secs(st.first_ns),
            last_ts: secs(st.last_ns),
            packets: st.packets,
            expected,
            lost: st.lost(),
            missing: st.missing(),
            duplicates: st.duplicates,
            reordered: st.reordered,
            seq_errors: st.seq_errors,
            markers: st.markers,
            ssrc_changes: self.tuples.get(&(s.key.src, s.key.dst)).map_or(0, |t| t.1),
            payload_type_changes: st.pt_changes,
            payload_bytes: st.payload_bytes,
            jitter_ms: st.jitter_ms,
            max_jitter_ms: st.max_jitter_ms,
            mean_jitter_ms: st.mean_jitter_ms(),
            max_delta_ms: st.max_delta_ms,
            ptime_ms,
            r_factor: q.map(|q| q.0),
            mos: q.map(|q| q.1),
            rtcp: s.rtcp.map(|r| RtcpRecord {
                reports: r.reports,
                fraction_lost_pct: f64::from(r.fraction_lost) * 100.0 / 256.0,
                cumulative_lost: r.cumulative_lost,
                jitter_ms: (clock != 0).then(|| f64::from(r.jitter) * 1000.0 / f64::from(clock)),
            }),
        }
    }

    /// Ends the run: every stream (SDP streams, and heuristic ones that are steady) and every
    /// call, each in order of first packet, go to `out`.
    pub fn finish(mut self, out: &mut dyn FnMut(Event)) -> Stats {
        let mut order: Vec<usize> = (0..self.streams.len()).collect();
        order.sort_by_key(|&i| self.streams[i].stats.first_ns);
        let mut records: Vec<Option<StreamRecord>> = vec![None; self.streams.len()];
        for &i in &order {
            let s = &self.streams[i];
            if s.call.is_none() && !s.stats.steady() {
                self.stats.candidates_discarded += 1;
                continue;
            }
            if s.call.is_some() {
                self.stats.sdp_streams += 1;
            } else {
                self.stats.heuristic_streams += 1;
            }
            self.stats.streams += 1;
            let r = self.stream_record(s);
            records[i] = Some(r.clone());
            out(Event::Stream(Box::new(r)));
        }
        let mut calls: Vec<&Call> = self.calls.iter().collect();
        calls.sort_by_key(|c| c.first_ns);
        for c in calls {
            let mut codes = c.codes.clone();
            codes.sort_unstable();
            let rs: Vec<&StreamRecord> = c
                .streams
                .iter()
                .filter_map(|&i| records[i].as_ref())
                .collect();
            let worst = rs.iter().filter(|r| r.mos.is_some()).min_by(|a, b| {
                a.mos
                    .partial_cmp(&b.mos)
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            let pdd_end = match (c.ringing_ns, c.first_final_ns) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            out(Event::Call(Box::new(CallRecord {
                kind: "call",
                ts: secs(c.first_ns),
                call_id: c.call_id.clone(),
                method: c.kind.clone(),
                methods: c.methods.clone(),
                status_codes: codes,
                from: c.from.clone(),
                to: c.to.clone(),
                user_agent: c.user_agent.clone(),
                callee_user_agent: c.callee_user_agent.clone(),
                caller: c.caller.map(ep_text),
                callee: c.callee.map(ep_text),
                transport: c.transport,
                invite_ts: c.invite_ns.map(secs),
                ringing_ts: c.ringing_ns.map(secs),
                answer_ts: c.answer_ns.map(secs),
                end_ts: c.end_ns.map(secs),
                end_method: c.end_method,
                ended_by: c.ended_by,
                final_status: c.final_status,
                post_dial_delay_ms: match (c.invite_ns, pdd_end) {
                    (Some(i), Some(e)) if e >= i => Some((e - i) as f64 / 1e6),
                    _ => None,
                },
                duration_s: match (c.answer_ns, c.end_ns) {
                    (Some(a), Some(e)) if e >= a => Some((e - a) as f64 / 1e9),
                    _ => None,
                },
                reinvites: c.reinvites,
                messages: c.messages,
                sdp: c.sdp.clone(),
                streams: rs.len(),
                rtp_packets: rs.iter().map(|r| r.packets).sum(),
                rtp_lost: rs.iter().map(|r| r.lost).sum(),
                max_jitter_ms: rs.iter().map(|r| r.max_jitter_ms).reduce(f64::max),
                r_factor: worst.and_then(|r| r.r_factor),
                mos: worst.and_then(|r| r.mos),
            })));
        }
        self.stats
    }
}
