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
//! Records come out as calls finish, not only at the end: a call is over at its BYE or CANCEL,
//! or at a final error response to its INVITE (at a final response for other methods); it is
//! written, with its streams, once [`Config::linger_ns`] more has passed with none of its
//! packets (late RTP still counts), or once it has been idle for [`Config::call_timeout_ns`].
//! Heuristic streams without a call are written after the same idle time. The clock is the
//! packets' own time ([`Analyzer::packet`]), or the caller's ([`Analyzer::tick`], for a live
//! capture with no traffic); what is ready is taken with [`Analyzer::drain`], the rest comes
//! out of [`Analyzer::finish`]. Memory is bounded by [`Config`]: open calls, streams, TCP
//! connections and bytes per connection; what the bounds drop is counted in [`Stats`].

#![forbid(unsafe_code)]

pub mod emodel;
pub mod plot;
pub mod rtp;
pub mod sdp;
pub mod sip;
pub mod timeline;

use std::net::IpAddr;

use hashbrown::HashMap;
use weir_decode::{decode_into, tcp, Decoded, LinkType, Transport};

use crate::rtp::{RtpHeader, StreamStats};
use crate::sdp::RtpMap;
use crate::sip::{Message, Parsed, Start};

type State = foldhash::fast::FixedState;
/// An address and port.
type Ep = (IpAddr, u16);

/// Bounds of the analyzer; with the `clap` feature, the analyzer's options of `weir voip` (the
/// doc comments are their help; durations are given in seconds and held in ns).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct Config {
    /// Most SIP Call-IDs tracked (at least 1); later ones are counted and ignored.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000_000),
          allow_negative_numbers = true))]
    pub max_calls: usize,
    /// Most RTP streams tracked (at least 1); packets of later ones are counted and ignored.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000_000),
          allow_negative_numbers = true))]
    pub max_streams: usize,
    /// Most TCP connections carrying SIP tracked at once.
    #[cfg_attr(feature = "clap", arg(skip = 100_000usize))]
    pub max_tcp: usize,
    /// A call that is over (BYE, CANCEL, final error) is written once this many seconds pass
    /// with none of its packets (late RTP).
    #[cfg_attr(feature = "clap", arg(long = "call-linger", value_name = "SECONDS",
          default_value = "2", value_parser = weir_packet::value::seconds_ns, allow_negative_numbers = true))]
    pub linger_ns: u64,
    /// A call (or heuristic RTP stream) with no packet for this many seconds is written as it
    /// stands.
    #[cfg_attr(feature = "clap", arg(long = "call-timeout", value_name = "SECONDS",
          default_value = "300", value_parser = weir_packet::value::seconds_ns, allow_negative_numbers = true))]
    pub call_timeout_ns: u64,
    /// Each stream's record carries its loss and jitter over intervals this long
    /// ([`StreamRecord::timeline`]), ns; 0: none (set by `weir voip --plot`).
    #[cfg_attr(feature = "clap", arg(skip))]
    pub timeline_ns: u64,
}

/// How often (in the packets' time) open calls are looked at for [`Config::linger_ns`] and
/// [`Config::call_timeout_ns`], ns.
const SWEEP_NS: u64 = 250_000_000;

impl Default for Config {
    fn default() -> Config {
        Config {
            max_calls: 1_000_000,
            max_streams: 1_000_000,
            max_tcp: 100_000,
            linger_ns: 2_000_000_000,
            call_timeout_ns: 300_000_000_000,
            timeline_ns: 0,
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
    /// RFC 3550 lost packets of the streams written (expected − received; a stream with more
    /// duplicates than losses counts 0, not less).
    pub rtp_lost: u64,
    /// Calls written before the end (over and lingered, or idle).
    pub calls_expired: u64,
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
    /// First final response to the first request's method (non-INVITE transactions).
    request_final_ns: Option<u64>,
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
    timeline: Option<timeline::Timeline>,
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
    /// Loss and jitter over time, with [`Config::timeline_ns`] (not in the JSON line).
    #[serde(skip)]
    pub timeline: Vec<timeline::Point>,
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
    calls: HashMap<usize, Call, State>,
    next_call: usize,
    media: HashMap<Ep, MediaRef, State>,
    stream_ids: HashMap<StreamKey, usize, State>,
    streams: HashMap<usize, Stream, State>,
    next_stream: usize,
    /// Last SSRC, SSRC changes and streams open per (src, dst).
    tuples: HashMap<(Ep, Ep), (u32, u64, u32), State>,
    by_ssrc: HashMap<u32, Vec<usize>, State>,
    tcp: HashMap<(Ep, Ep), TcpBuf, State>,
    /// Latest time seen (packets or [`Analyzer::tick`]), ns.
    now_ns: u64,
    /// When open calls are next looked at.
    next_sweep_ns: u64,
    /// Records of finished calls and idle streams, not yet taken.
    ready: Vec<Event>,
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
            calls: HashMap::default(),
            next_call: 0,
            media: HashMap::default(),
            stream_ids: HashMap::default(),
            streams: HashMap::default(),
            next_stream: 0,
            tuples: HashMap::default(),
            by_ssrc: HashMap::default(),
            tcp: HashMap::default(),
            now_ns: 0,
            next_sweep_ns: 0,
            ready: Vec::new(),
        }
    }

    /// Advances the analyzer's clock to `now_ns` (seconds since the epoch, in ns, the capture's
    /// clock) without a packet: a live capture with no traffic calls it so that calls still
    /// finish. Records that are due go to the ready list ([`Analyzer::drain`]).
    pub fn tick(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
        if self.now_ns >= self.next_sweep_ns {
            self.next_sweep_ns = self.now_ns.saturating_add(SWEEP_NS);
            self.sweep();
        }
    }

    /// Hands every record ready so far (finished calls with their streams, idle heuristic
    /// streams) to `out`, in the order they finished.
    pub fn drain(&mut self, out: &mut dyn FnMut(Event)) {
        for e in self.ready.drain(..) {
            out(e);
        }
    }

    /// Whether records are waiting for [`Analyzer::drain`].
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Last packet time of a call: its SIP and its streams' RTP.
    fn call_last_ns(&self, c: &Call) -> u64 {
        c.streams
            .iter()
            .filter_map(|i| self.streams.get(i))
            .map(|s| s.stats.last_ns)
            .fold(c.last_ns, u64::max)
    }

    /// Writes calls that are over and have lingered, and calls and heuristic streams that have
    /// been idle, to the ready list.
    fn sweep(&mut self) {
        let now = self.now_ns;
        let (linger, timeout) = (self.cfg.linger_ns, self.cfg.call_timeout_ns);
        let mut due: Vec<(u64, usize)> = Vec::new();
        for (&ci, c) in &self.calls {
            let last = self.call_last_ns(c);
            let over = c.end_ns.is_some()
                || (c.answer_ns.is_none() && c.final_status.is_some_and(|s| s >= 300))
                || (c.kind.as_deref() != Some("INVITE") && c.request_final_ns.is_some());
            let idle = now.saturating_sub(last);
            if (over && idle >= linger) || idle >= timeout {
                due.push((c.first_ns, ci));
            }
        }
        due.sort_unstable();
        for (_, ci) in due {
            self.stats.calls_expired += 1;
            self.emit_call(ci);
        }
        let mut idle: Vec<(u64, usize)> = self
            .streams
            .iter()
            .filter(|(_, s)| s.call.is_none() && now.saturating_sub(s.stats.last_ns) >= timeout)
            .map(|(&i, s)| (s.stats.first_ns, i))
            .collect();
        idle.sort_unstable();
        for (_, si) in idle {
            if let Some(r) = self.take_stream(si) {
                self.ready.push(Event::Stream(Box::new(r)));
            }
        }
    }

    /// Removes stream `si`; its record if it is to be written (SDP streams, steady heuristic
    /// ones), counted.
    fn take_stream(&mut self, si: usize) -> Option<StreamRecord> {
        let s = self.streams.get(&si)?;
        let keep = s.call.is_some() || s.stats.steady();
        let r = keep.then(|| self.stream_record(s));
        let s = self.streams.remove(&si)?;
        self.stream_ids.remove(&s.key);
        if let Some(list) = self.by_ssrc.get_mut(&s.key.ssrc) {
            list.retain(|&i| i != si);
            if list.is_empty() {
                self.by_ssrc.remove(&s.key.ssrc);
            }
        }
        let pair = (s.key.src, s.key.dst);
        if let Some(t) = self.tuples.get_mut(&pair) {
            t.2 = t.2.saturating_sub(1);
            if t.2 == 0 {
                self.tuples.remove(&pair);
            }
        }
        match (&r, s.call) {
            (None, _) => self.stats.candidates_discarded += 1,
            (Some(rec), call) => {
                if call.is_some() {
                    self.stats.sdp_streams += 1;
                } else {
                    self.stats.heuristic_streams += 1;
                }
                self.stats.streams += 1;
                self.stats.rtp_lost += u64::try_from(rec.lost).unwrap_or(0);
            }
        }
        r
    }

    /// Removes call `ci`, its streams and its media endpoints; its streams' records, then its
    /// own, go to the ready list.
    fn emit_call(&mut self, ci: usize) {
        let Some(c) = self.calls.remove(&ci) else {
            return;
        };
        if self.call_ids.get(&c.call_id) == Some(&ci) {
            self.call_ids.remove(&c.call_id);
        }
        self.media.retain(|_, m| m.call != ci);
        let mut order: Vec<(u64, usize)> = c
            .streams
            .iter()
            .filter_map(|&i| self.streams.get(&i).map(|s| (s.stats.first_ns, i)))
            .collect();
        order.sort_unstable();
        let mut rs: Vec<StreamRecord> = Vec::with_capacity(order.len());
        for (_, si) in order {
            // the record names the call: look it up before the call is gone from the map
            let r = self.streams.get(&si).map(|s| {
                let mut r = self.stream_record_with(s, Some(&c.call_id));
                r.found_by = FoundBy::Sdp;
                r
            });
            let _ = self.take_stream(si);
            if let Some(r) = r {
                self.ready.push(Event::Stream(Box::new(r.clone())));
                rs.push(r);
            }
        }
        let rec = call_record(&c, &rs);
        self.ready.push(Event::Call(Box::new(rec)));
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
        let Some(ip) = d.ip() else {
            self.tick(ts_ns);
            return;
        };
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
        self.tick(ts_ns);
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
        let i = self.next_call;
        self.next_call += 1;
        self.calls.insert(
            i,
            Call {
                call_id: id.to_string(),
                first_ns: ts_ns,
                last_ns: ts_ns,
                transport,
                ..Call::default()
            },
        );
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
        let Some(c) = self.calls.get_mut(&ci) else {
            return;
        };
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
                if code >= 200
                    && c.request_final_ns.is_none()
                    && m.cseq.map(|(_, meth)| meth) == c.kind.as_deref()
                {
                    c.request_final_ns = Some(ts_ns);
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
                if let Some(c) = self.calls.get_mut(&ci) {
                    if !c.sdp.contains(&out) {
                        c.sdp.push(out);
                    }
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
        let t = self.tuples.entry((src, dst)).or_insert((h.ssrc, 0, 0));
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
                let i = self.next_stream;
                self.next_stream += 1;
                let (call, rtpmap) = match media {
                    Some(m) => (Some(m.call), m.rtpmap),
                    None => (None, Vec::new()),
                };
                if let Some(c) = call.and_then(|c| self.calls.get_mut(&c)) {
                    c.streams.push(i);
                }
                if let Some(t) = self.tuples.get_mut(&(src, dst)) {
                    t.2 += 1;
                }
                self.streams.insert(
                    i,
                    Stream {
                        key,
                        call,
                        rtpmap,
                        stats: StreamStats::default(),
                        rtcp: None,
                        timeline: (self.cfg.timeline_ns > 0)
                            .then(|| timeline::Timeline::new(self.cfg.timeline_ns)),
                    },
                );
                self.stream_ids.insert(key, i);
                self.by_ssrc.entry(h.ssrc).or_default().push(i);
                i
            }
        };
        let Some(s) = self.streams.get_mut(&si) else {
            return;
        };
        let (_, clock) = s.codec(h.pt);
        if let Some(t) = &mut s.timeline {
            t.before(ts_ns, &s.stats);
        }
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
            let Some(si) = list
                .iter()
                .copied()
                .filter(|i| self.streams.contains_key(i))
                .max_by_key(|i| self.streams[i].stats.packets)
            else {
                continue;
            };
            let Some(s) = self.streams.get_mut(&si) else {
                continue;
            };
            let r = s.rtcp.get_or_insert_with(RtcpSeen::default);
            r.reports += 1;
            r.fraction_lost = b.fraction_lost;
            r.cumulative_lost = b.cumulative_lost;
            r.jitter = b.jitter;
            self.stats.rtcp_reports += 1;
        }
    }

    fn stream_record(&self, s: &Stream) -> StreamRecord {
        let call_id = s
            .call
            .and_then(|c| self.calls.get(&c))
            .map(|c| c.call_id.as_str());
        self.stream_record_with(s, call_id)
    }

    fn stream_record_with(&self, s: &Stream, call_id: Option<&str>) -> StreamRecord {
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
            call_id: call_id.map(str::to_string),
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
            timeline: s.timeline.clone().map(|t| t.finish(st)).unwrap_or_default(),
        }
    }

    /// Ends the run: what is ready, then every open call with its streams (calls in order of
    /// first packet), then the heuristic streams without a call that are steady, go to `out`.
    pub fn finish(mut self, out: &mut dyn FnMut(Event)) -> Stats {
        let mut calls: Vec<(u64, usize)> =
            self.calls.iter().map(|(&i, c)| (c.first_ns, i)).collect();
        calls.sort_unstable();
        for (_, ci) in calls {
            self.emit_call(ci);
        }
        let mut rest: Vec<(u64, usize)> = self
            .streams
            .iter()
            .map(|(&i, s)| (s.stats.first_ns, i))
            .collect();
        rest.sort_unstable();
        for (_, si) in rest {
            if let Some(r) = self.take_stream(si) {
                self.ready.push(Event::Stream(Box::new(r)));
            }
        }
        self.drain(out);
        self.stats
    }
}

/// The record of call `c` whose streams' records are `rs`.
fn call_record(c: &Call, rs: &[StreamRecord]) -> CallRecord {
    let mut codes = c.codes.clone();
    codes.sort_unstable();
    let worst = rs.iter().filter(|r| r.mos.is_some()).min_by(|a, b| {
        a.mos
            .partial_cmp(&b.mos)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let pdd_end = match (c.ringing_ns, c.first_final_ns) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    CallRecord {
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
    }
}

#[cfg(test)]
mod tests {
    //! When calls come out: after a BYE and the linger (late RTP holding it back), after an
    //! error final response, after the idle timeout; and what the end writes.
    use super::*;

    const S: u64 = 1_000_000_000;

    /// An IPv4/UDP datagram (checksums left zero) from `src` to `dst`.
    fn udp(src: ([u8; 4], u16), dst: ([u8; 4], u16), payload: &[u8]) -> Vec<u8> {
        let len = 28 + payload.len();
        let mut p = vec![
            0x45,
            0,
            (len >> 8) as u8,
            len as u8,
            0,
            0,
            0,
            0,
            64,
            17,
            0,
            0,
        ];
        p.extend_from_slice(&src.0);
        p.extend_from_slice(&dst.0);
        p.extend_from_slice(&src.1.to_be_bytes());
        p.extend_from_slice(&dst.1.to_be_bytes());
        p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        p
    }

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];

    fn sip(start: &str, id: &str, cseq: &str, sdp_port: Option<u16>, ip: &str) -> Vec<u8> {
        let body = sdp_port.map_or(String::new(), |p| {
            format!("v=0\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {p} RTP/AVP 0\r\n")
        });
        let ct = if body.is_empty() {
            ""
        } else {
            "Content-Type: application/sdp\r\n"
        };
        format!(
            "{start}\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:b@x>;tag=2\r\nCall-ID: {id}\r\n\
             CSeq: {cseq}\r\n{ct}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    fn rtp(seq: u16) -> Vec<u8> {
        let mut p = vec![0x80, 0];
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&(u32::from(seq) * 160).to_be_bytes());
        p.extend_from_slice(&7u32.to_be_bytes());
        p.extend_from_slice(&[0xd5; 160]);
        p
    }

    fn kinds(a: &mut Analyzer) -> Vec<String> {
        let mut v = Vec::new();
        a.drain(&mut |e| {
            v.push(match e {
                Event::Call(c) => format!("call {}", c.call_id),
                Event::Stream(s) => format!("stream {}", s.packets),
            })
        });
        v
    }

    fn cfg() -> Config {
        Config {
            linger_ns: 2 * S,
            call_timeout_ns: 10 * S,
            ..Config::default()
        }
    }

    /// A call offered at `t0` (RTP to A:4000) and answered 1 µs later (RTP to B:5000).
    fn answered(a: &mut Analyzer, id: &str, t0: u64) {
        let l = LinkType::IPV4;
        let inv = sip(
            "INVITE sip:b@x SIP/2.0",
            id,
            "1 INVITE",
            Some(4000),
            "10.0.0.1",
        );
        a.packet(t0, l, &udp((A, 5060), (B, 5060), &inv));
        let ok = sip("SIP/2.0 200 OK", id, "1 INVITE", Some(5000), "10.0.0.2");
        a.packet(t0 + 1000, l, &udp((B, 5060), (A, 5060), &ok));
    }

    #[test]
    fn bye_then_linger_with_late_rtp() {
        let mut a = Analyzer::new(cfg());
        let l = LinkType::IPV4;
        answered(&mut a, "c1", 100 * S);
        for i in 0..5u16 {
            a.packet(
                100 * S + u64::from(i) * S / 50,
                l,
                &udp((A, 4000), (B, 5000), &rtp(i)),
            );
        }
        let bye = sip("BYE sip:b@x SIP/2.0", "c1", "2 BYE", None, "");
        a.packet(101 * S, l, &udp((A, 5060), (B, 5060), &bye));
        a.tick(102 * S + S / 2);
        assert!(kinds(&mut a).is_empty(), "1.5 s after the BYE: lingering");
        // late RTP at 102.5 s holds the call until 104.5 s
        a.packet(102 * S + S / 2, l, &udp((A, 4000), (B, 5000), &rtp(5)));
        a.tick(104 * S);
        assert!(kinds(&mut a).is_empty(), "1.5 s after the late RTP");
        a.tick(104 * S + S / 2);
        assert_eq!(kinds(&mut a), ["stream 6", "call c1"]);
        // gone: RTP now is a heuristic candidate, the end writes nothing for c1
        let st = a.finish(&mut |e| panic!("nothing left: {e:?}"));
        assert_eq!(st.calls_expired, 1);
        assert_eq!(st.sdp_streams, 1);
    }

    #[test]
    fn error_response_and_idle_timeout() {
        let mut a = Analyzer::new(cfg());
        let l = LinkType::IPV4;
        let inv = sip("INVITE sip:b@x SIP/2.0", "busy", "1 INVITE", None, "");
        a.packet(S, l, &udp((A, 5060), (B, 5060), &inv));
        let busy = sip("SIP/2.0 486 Busy Here", "busy", "1 INVITE", None, "");
        a.packet(S + 1000, l, &udp((B, 5060), (A, 5060), &busy));
        // an answered call that never ends: written after 10 s without a packet
        answered(&mut a, "open", 2 * S);
        a.tick(3 * S);
        assert!(kinds(&mut a).is_empty());
        // (the analyzer looks at open calls every 250 ms of its clock)
        a.tick(3 * S + S / 2);
        assert_eq!(kinds(&mut a), ["call busy"]);
        a.tick(12 * S);
        assert!(kinds(&mut a).is_empty(), "idle for 10 s less 1 µs");
        a.tick(12 * S + S / 2);
        assert_eq!(kinds(&mut a), ["call open"]);
        let mut rest = 0;
        let st = a.finish(&mut |_| rest += 1);
        assert_eq!((rest, st.calls_expired, st.calls), (0, 2, 2));
    }

    /// `Stats::rtp_lost` sums the written streams' RFC 3550 losses: the call's stream to B
    /// has 0 1 3 4 4 7 (expected 8, received 6: lost 2), the one to A 0 0 0 1 (expected 2,
    /// received 4: lost −2, counted 0).
    #[test]
    fn rtp_lost_sums_the_streams_losses() {
        let mut a = Analyzer::new(cfg());
        let l = LinkType::IPV4;
        answered(&mut a, "lossy", S);
        for (i, seq) in [0u16, 1, 3, 4, 4, 7].into_iter().enumerate() {
            let t = 2 * S + i as u64 * S / 50;
            a.packet(t, l, &udp((A, 4000), (B, 5000), &rtp(seq)));
        }
        for (i, seq) in [0u16, 0, 0, 1].into_iter().enumerate() {
            let t = 2 * S + i as u64 * S / 50;
            a.packet(t, l, &udp((B, 5000), (A, 4000), &rtp(seq)));
        }
        let mut lost = Vec::new();
        let st = a.finish(&mut |e| {
            if let Event::Stream(s) = e {
                lost.push(s.lost);
            }
        });
        lost.sort_unstable();
        assert_eq!(lost, [-2, 2]);
        assert_eq!((st.streams, st.rtp_lost), (2, 2));
    }

    #[test]
    fn open_calls_come_out_at_the_end() {
        let mut a = Analyzer::new(cfg());
        answered(&mut a, "c", S);
        a.packet(S + 5, LinkType::IPV4, &udp((A, 4000), (B, 5000), &rtp(1)));
        let mut v = Vec::new();
        a.finish(&mut |e| {
            v.push(match e {
                Event::Call(c) => c.call_id,
                Event::Stream(s) => format!("stream {}", s.packets),
            })
        });
        assert_eq!(v, ["stream 1", "c"]);
    }
}
