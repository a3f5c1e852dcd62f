//! RTP and RTCP headers (RFC 3550 §5.1, §6.4) and the per-stream arithmetic of RFC 3550
//! Appendix A: extended sequence numbers across wraps (A.1), expected and lost packets (A.3),
//! interarrival jitter (A.8), plus duplicates, reordering, largest gap, SSRC changes and
//! marker bits. Clock rates of static payload types come from RFC 3551 Tables 4 and 5.

/// A decoded RTP fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtpHeader {
    /// Marker bit.
    pub marker: bool,
    /// Payload type (0–127).
    pub pt: u8,
    /// Sequence number.
    pub seq: u16,
    /// RTP timestamp.
    pub ts: u32,
    /// Synchronisation source.
    pub ssrc: u32,
    /// Payload bytes after the header, CSRCs, extension and padding.
    pub payload_len: usize,
}

/// Decodes an RTP header: version 2, the CSRC list, the extension and the padding must fit.
/// Payload types 72–76 (RTCP's 200–204 with the marker bit) are refused (RFC 5761 §4).
pub fn parse_rtp(p: &[u8]) -> Option<RtpHeader> {
    if p.len() < 12 || p[0] >> 6 != 2 {
        return None;
    }
    let pt = p[1] & 0x7f;
    if (72..=76).contains(&pt) {
        return None;
    }
    let cc = usize::from(p[0] & 0x0f);
    let mut hdr = 12 + 4 * cc;
    if p[0] & 0x10 != 0 {
        let ext = p.get(hdr..hdr + 4)?;
        hdr += 4 + 4 * usize::from(u16::from_be_bytes([ext[2], ext[3]]));
    }
    if hdr > p.len() {
        return None;
    }
    let mut end = p.len();
    if p[0] & 0x20 != 0 {
        let pad = usize::from(*p.last()?);
        if pad == 0 || hdr + pad > p.len() {
            return None;
        }
        end -= pad;
    }
    Some(RtpHeader {
        marker: p[1] & 0x80 != 0,
        pt,
        seq: u16::from_be_bytes([p[2], p[3]]),
        ts: u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
        ssrc: u32::from_be_bytes([p[8], p[9], p[10], p[11]]),
        payload_len: end - hdr,
    })
}

/// True when a datagram starts like RTCP: version 2 and packet type SR, RR, SDES, BYE or APP.
pub fn looks_like_rtcp(p: &[u8]) -> bool {
    p.len() >= 8 && p[0] >> 6 == 2 && (200..=204).contains(&p[1])
}

/// One report block of an RTCP SR or RR (RFC 3550 §6.4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportBlock {
    /// The source the block reports on.
    pub ssrc: u32,
    /// Fraction lost since the previous report, in 1/256.
    pub fraction_lost: u8,
    /// Cumulative packets lost (24-bit signed).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub highest_seq: u32,
    /// Interarrival jitter in timestamp units.
    pub jitter: u32,
}

/// The report blocks of every SR and RR in a compound RTCP packet; stops at the first
/// packet whose length does not fit.
pub fn rtcp_reports(mut p: &[u8]) -> Vec<ReportBlock> {
    let mut out = Vec::new();
    while p.len() >= 8 && p[0] >> 6 == 2 {
        let len = (usize::from(u16::from_be_bytes([p[2], p[3]])) + 1) * 4;
        let Some(pkt) = p.get(..len) else { break };
        let rc = usize::from(p[0] & 0x1f);
        let blocks_at = match p[1] {
            200 => 28,
            201 => 8,
            _ => usize::MAX,
        };
        if blocks_at != usize::MAX {
            for i in 0..rc {
                let Some(b) = pkt.get(blocks_at + 24 * i..blocks_at + 24 * (i + 1)) else {
                    break;
                };
                let cum = i32::from_be_bytes([b[5], b[6], b[7], 0]) >> 8;
                out.push(ReportBlock {
                    ssrc: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                    fraction_lost: b[4],
                    cumulative_lost: cum,
                    highest_seq: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
                    jitter: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
                });
            }
        }
        p = &p[len..];
    }
    out
}

/// Encoding name and clock rate of a static payload type (RFC 3551 Tables 4 and 5).
pub fn static_pt(pt: u8) -> Option<(&'static str, u32)> {
    Some(match pt {
        0 => ("PCMU", 8000),
        3 => ("GSM", 8000),
        4 => ("G723", 8000),
        5 => ("DVI4", 8000),
        6 => ("DVI4", 16000),
        7 => ("LPC", 8000),
        8 => ("PCMA", 8000),
        9 => ("G722", 8000),
        10 | 11 => ("L16", 44100),
        12 => ("QCELP", 8000),
        13 => ("CN", 8000),
        14 => ("MPA", 90000),
        15 => ("G728", 8000),
        16 => ("DVI4", 11025),
        17 => ("DVI4", 22050),
        18 => ("G729", 8000),
        25 => ("CelB", 90000),
        26 => ("JPEG", 90000),
        28 => ("nv", 90000),
        31 => ("H261", 90000),
        32 => ("MPV", 90000),
        33 => ("MP2T", 90000),
        34 => ("H263", 90000),
        _ => return None,
    })
}

/// Comfort noise payload types (RFC 3389's 13, and the old 19): packets carrying them, and the
/// one after them, start a talkspurt and are left out of the gap and jitter maxima.
fn is_cn(pt: u8) -> bool {
    pt == 13 || pt == 19
}

/// Sequence numbers remembered behind the highest one, to tell duplicates from late packets.
const WINDOW: u64 = 1024;

/// `seen` shifted toward older positions by `shift` (< [`WINDOW`]) bits: bit i becomes bit
/// i + shift, bits beyond the window fall off. A word at a time (a bit at a time cost 86 % of
/// `weir voip -r`'s CPU on the bench trace).
fn shifted(seen: &[u64; (WINDOW / 64) as usize], shift: u64) -> [u64; (WINDOW / 64) as usize] {
    let words = (shift / 64) as usize;
    let bits = (shift % 64) as u32;
    let mut n = [0u64; (WINDOW / 64) as usize];
    for (k, w) in n.iter_mut().enumerate().skip(words) {
        let src = k - words;
        let mut v = seen[src] << bits;
        if bits > 0 && src > 0 {
            v |= seen[src - 1] >> (64 - bits);
        }
        *w = v;
    }
    n
}

/// The running arithmetic of one RTP stream (one SSRC on one 5-tuple).
#[derive(Clone, Debug, Default)]
pub struct StreamStats {
    /// Packets received (duplicates included, as RFC 3550 counts them).
    pub packets: u64,
    /// Packets whose sequence number was already received (within the last 1024).
    pub duplicates: u64,
    /// Packets that arrived after a higher sequence number (late, not duplicates).
    pub reordered: u64,
    /// Packets with the marker bit.
    pub markers: u64,
    /// Payload bytes.
    pub payload_bytes: u64,
    /// Times the sequence number did not follow the previous packet's (tshark's "wrong
    /// sequence" count).
    pub seq_errors: u64,
    /// Consecutive packets whose sequence numbers differ by exactly one.
    pub steps_of_one: u64,
    /// Payload type changes between consecutive packets.
    pub pt_changes: u64,
    /// Arrival of the first and the last packet (ns).
    pub first_ns: u64,
    /// Arrival of the last packet (ns).
    pub last_ns: u64,
    /// First payload type seen.
    pub first_pt: u8,
    /// Extended sequence number of the first packet.
    base: u64,
    /// Highest extended sequence number.
    max: u64,
    /// Lowest extended sequence number.
    min: u64,
    /// Extended sequence number of the previous packet.
    prev: u64,
    /// Received sequence numbers in (max − WINDOW, max], bit i = max − i.
    seen: [u64; (WINDOW / 64) as usize],
    prev_pt: u8,
    prev_marker_or_cn: bool,
    prev_arrival_ms: f64,
    /// Transit time (arrival − timestamp/clock, ms) of the previous packet with a clock.
    prev_transit_ms: Option<f64>,
    prev_ts_ext: i64,
    first_ts_ext: i64,
    ts_at_max: i64,
    /// RFC 3550 A.8 jitter estimate, ms.
    pub jitter_ms: f64,
    /// Largest jitter estimate after a regular packet, ms.
    pub max_jitter_ms: f64,
    /// Wireshark's running mean of the jitter estimate (see [`StreamStats::mean_jitter_ms`]).
    mean_jitter_ms: f64,
    /// Largest gap between a regular packet and the one before it, ms.
    pub max_delta_ms: f64,
    /// Packets that were the first of a talkspurt (marker) or around comfort noise.
    irregular: u64,
}

impl StreamStats {
    /// Extended sequence number of `seq`: the value with those low 16 bits nearest the highest
    /// seen so far (RFC 3550 A.1's wrap counting, symmetric around the current maximum).
    fn extend(&self, seq: u16) -> u64 {
        let base = self.max & !0xffff;
        let cand = base | u64::from(seq);
        let mut best = cand;
        for c in [cand.wrapping_sub(0x10000), cand + 0x10000] {
            if c < (1 << 62) && c.abs_diff(self.max) < best.abs_diff(self.max) {
                best = c;
            }
        }
        best
    }

    fn mark(&mut self, ext: u64) -> bool {
        if ext > self.max {
            let shift = ext - self.max;
            if shift >= WINDOW {
                self.seen = [0; (WINDOW / 64) as usize];
            } else {
                self.seen = shifted(&self.seen, shift);
            }
            self.max = ext;
        }
        let back = self.max - ext;
        if back >= WINDOW {
            return false;
        }
        let was = self.bit(back);
        self.seen[(back / 64) as usize] |= 1 << (back % 64);
        was
    }

    fn bit(&self, i: u64) -> bool {
        self.seen[(i / 64) as usize] >> (i % 64) & 1 == 1
    }

    /// Adds one packet arriving at `ts_ns`; `clock` is the payload's clock rate in Hz (0 when
    /// unknown or not meaningful, as for telephone events: no jitter then).
    pub fn add(&mut self, ts_ns: u64, h: &RtpHeader, clock: u32) {
        // times are taken from the stream's first packet: nanoseconds since the epoch in an f64
        // are only exact to 256 ns, enough to move a delta or a jitter by 0.0005 ms (tshark
        // works from the capture's start)
        let arrival_ms = if self.packets == 0 {
            0.0
        } else {
            (ts_ns as i64).wrapping_sub(self.first_ns as i64) as f64 / 1e6
        };
        if self.packets == 0 {
            let ext = (1u64 << 32) + u64::from(h.seq);
            self.base = ext;
            self.max = ext;
            self.min = ext;
            self.prev = ext;
            self.mark(ext);
            self.first_ns = ts_ns;
            self.last_ns = ts_ns;
            self.first_pt = h.pt;
            self.prev_pt = h.pt;
            self.packets = 1;
            self.markers = u64::from(h.marker);
            self.payload_bytes = h.payload_len as u64;
            self.prev_arrival_ms = arrival_ms;
            // the packet after the first one is regular, as in Wireshark (the first is never)
            self.prev_marker_or_cn = is_cn(h.pt);
            self.prev_ts_ext = (1i64 << 40) + i64::from(h.ts);
            self.first_ts_ext = self.prev_ts_ext;
            self.ts_at_max = self.prev_ts_ext;
            if clock != 0 {
                self.prev_transit_ms = Some(arrival_ms);
            }
            return;
        }
        self.packets += 1;
        self.last_ns = self.last_ns.max(ts_ns);
        self.payload_bytes += h.payload_len as u64;
        self.markers += u64::from(h.marker);
        let ext = self.extend(h.seq);
        let was_max = self.max;
        if self.mark(ext) {
            self.duplicates += 1;
        } else if ext < was_max {
            self.reordered += 1;
        }
        self.min = self.min.min(ext);
        if ext == self.prev + 1 {
            self.steps_of_one += 1;
        } else {
            self.seq_errors += 1;
        }
        self.prev = ext;
        if h.pt != self.prev_pt {
            self.pt_changes += 1;
        }
        // RTP timestamp, extended the same way (nearest to the previous one)
        let low = i64::from(h.ts);
        let prev = self.prev_ts_ext;
        let mut ts_ext = (prev & !0xffff_ffff) | low;
        for c in [ts_ext - (1 << 32), ts_ext + (1 << 32)] {
            if (c - prev).abs() < (ts_ext - prev).abs() {
                ts_ext = c;
            }
        }
        let backwards = ts_ext < prev;
        if ext > was_max {
            self.ts_at_max = ts_ext;
        }
        // RFC 3550 A.8: D = (Rj − Ri) − (Sj − Si), J += (|D| − J)/16, in ms. Like Wireshark's
        // RTP analysis, the reference i is the last packet whose timestamp did not go backwards:
        // a reordered packet is measured but does not become the reference (so one late packet
        // does not count twice), and the gap is measured from the last in-order arrival.
        if clock != 0 {
            let transit =
                arrival_ms - (ts_ext - self.first_ts_ext) as f64 * 1000.0 / f64::from(clock);
            if let Some(p) = self.prev_transit_ms {
                let d = (transit - p).abs();
                self.jitter_ms += (d - self.jitter_ms) / 16.0;
            }
            if !backwards {
                self.prev_transit_ms = Some(transit);
            }
        }
        let delta = arrival_ms - self.prev_arrival_ms;
        let regular = !h.marker && !is_cn(h.pt) && !self.prev_marker_or_cn && !backwards;
        if regular {
            self.max_delta_ms = self.max_delta_ms.max(delta);
            if clock != 0 {
                self.max_jitter_ms = self.max_jitter_ms.max(self.jitter_ms);
                // Wireshark's running mean (tap-rtp-analysis.c, 4.0): over the diffs, N − 1
                // for N packets; irregular packets are not added but count
                let diffs = (self.packets - 1) as f64;
                self.mean_jitter_ms =
                    (self.mean_jitter_ms * (diffs - 1.0) + self.jitter_ms) / diffs;
            }
        } else {
            self.irregular += 1;
        }
        self.prev_marker_or_cn = is_cn(h.pt);
        self.prev_pt = h.pt;
        if !backwards {
            self.prev_arrival_ms = arrival_ms;
            self.prev_ts_ext = ts_ext;
        }
    }

    /// Packets expected: highest extended sequence number − lowest + 1 (RFC 3550 A.3, with the
    /// lowest rather than the first so a reordered first packet does not count as lost).
    pub fn expected(&self) -> u64 {
        if self.packets == 0 {
            0
        } else {
            self.max - self.min + 1
        }
    }

    /// Packets lost as RFC 3550 §6.4.1 counts them: expected − received, duplicates counted
    /// as received (so it can be negative).
    pub fn lost(&self) -> i64 {
        self.expected() as i64 - self.packets as i64
    }

    /// Sequence numbers never received: expected − distinct packets (never negative).
    pub fn missing(&self) -> u64 {
        self.expected()
            .saturating_sub(self.packets - self.duplicates.min(self.packets))
    }

    /// Mean jitter, ms, as Wireshark's RTP analysis (tshark 4.0 `-z rtp,streams`) computes it:
    /// at each regular packet `mean = (mean·(n − 1) + J)/n` with `n` the packets after the first
    /// so far (irregular ones included). On a stream whose only irregular packet is the first
    /// this is the sum of the N − 1 estimates divided by N − 1.
    pub fn mean_jitter_ms(&self) -> f64 {
        self.mean_jitter_ms
    }

    /// Mean step of the sequence: 1.0 for a clean stream (used to tell RTP from noise).
    pub fn steady(&self) -> bool {
        self.packets >= 4
            && self.steps_of_one * 10 >= (self.packets - 1) * 7
            && self.pt_changes * 10 <= self.packets
    }

    /// Packetisation time: RTP time per sequence step from the first packet to the highest
    /// one, in ms at `clock` Hz; `None` without a clock or a step.
    pub fn ptime_ms(&self, clock: u32) -> Option<f64> {
        let steps = self.max.checked_sub(self.base).filter(|&s| s > 0)?;
        let span = self.ts_at_max - self.first_ts_ext;
        (clock != 0 && span > 0).then(|| span as f64 * 1000.0 / f64::from(clock) / steps as f64)
    }

    /// Wrap of the first sequence number in the extended space (for tests).
    pub fn first_ext(&self) -> u64 {
        self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(marker: bool, pt: u8, seq: u16, ts: u32) -> Vec<u8> {
        let mut p = vec![0x80, pt | if marker { 0x80 } else { 0 }];
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&ts.to_be_bytes());
        p.extend_from_slice(&0x1234_5678u32.to_be_bytes());
        p.extend_from_slice(&[0; 160]);
        p
    }

    /// The word-wise shift of the received-sequence window equals moving each bit on its own
    /// (the former code) for every shift of the window and a pseudo-random bitmap.
    #[test]
    fn window_shift_equals_the_bit_by_bit_shift() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut seen = [0u64; (WINDOW / 64) as usize];
        for w in &mut seen {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *w = x;
        }
        let bit = |s: &[u64; 16], i: u64| s[(i / 64) as usize] >> (i % 64) & 1 == 1;
        for shift in 0..WINDOW {
            let mut want = [0u64; (WINDOW / 64) as usize];
            for i in 0..WINDOW - shift {
                if bit(&seen, i) {
                    let j = i + shift;
                    want[(j / 64) as usize] |= 1 << (j % 64);
                }
            }
            assert_eq!(shifted(&seen, shift), want, "shift {shift}");
        }
    }

    #[test]
    fn header_bounds() {
        let p = pkt(true, 8, 7, 99);
        let h = parse_rtp(&p).unwrap();
        assert!(h.marker);
        assert_eq!(
            (h.pt, h.seq, h.ts, h.ssrc, h.payload_len),
            (8, 7, 99, 0x1234_5678, 160)
        );
        let mut bad = p.clone();
        bad[0] = 0x8f; // 15 CSRCs = 60 bytes: fits in 172
        assert!(parse_rtp(&bad).is_some());
        bad.truncate(40);
        assert!(parse_rtp(&bad).is_none());
        let mut pad = p.clone();
        pad[0] |= 0x20;
        *pad.last_mut().unwrap() = 200;
        assert!(parse_rtp(&pad).is_none());
        assert!(parse_rtp(&[0x80, 200, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]).is_none());
        assert!(looks_like_rtcp(&[0x81, 201, 0, 7, 1, 2, 3, 4]));
    }

    /// 20 ms G.711 packets with sequence numbers 65533, 65534, 65535, 0 (wrap), 2 (1 not yet
    /// here), 1 (late), 2 (duplicate), 3. By hand: extended numbers run 65533..=65539, so
    /// expected = 7; received 8, so RFC 3550's lost = 7 − 8 = −1; distinct 7, so missing 0;
    /// one duplicate (the second 2); one reordered packet (1, after 2).
    #[test]
    fn wrap_loss_late_and_duplicate_by_hand() {
        let mut s = StreamStats::default();
        let seqs: [u16; 8] = [65533, 65534, 65535, 0, 2, 1, 2, 3];
        for (i, &q) in seqs.iter().enumerate() {
            let ts = u32::from(q.wrapping_sub(65533)) * 160;
            s.add(
                i as u64 * 20_000_000,
                &parse_rtp(&pkt(false, 0, q, ts)).unwrap(),
                8000,
            );
        }
        assert_eq!(s.packets, 8);
        assert_eq!(s.expected(), 7);
        assert_eq!(s.lost(), -1);
        assert_eq!(s.missing(), 0);
        assert_eq!(s.duplicates, 1);
        assert_eq!(s.reordered, 1);
    }

    /// Jitter by hand: packets every 20 ms of RTP time (160 samples at 8 kHz) arriving at 0,
    /// 20, 45, 60 ms. Transit differences |D|: 0, 5, 5 → J = 0, 5/16 = 0.3125,
    /// 0.3125 + (5 − 0.3125)/16 = 0.60546875. Gaps 20, 25, 15 → max delta 25.
    #[test]
    fn jitter_by_hand() {
        let mut s = StreamStats::default();
        for (i, at) in [0u64, 20, 45, 60].into_iter().enumerate() {
            let h = parse_rtp(&pkt(false, 0, i as u16, i as u32 * 160)).unwrap();
            s.add(at * 1_000_000, &h, 8000);
        }
        assert!((s.jitter_ms - 0.605_468_75).abs() < 1e-9);
        assert!((s.max_jitter_ms - 0.605_468_75).abs() < 1e-9);
        assert!((s.mean_jitter_ms() - (0.0 + 0.3125 + 0.605_468_75) / 3.0).abs() < 1e-9);
        assert!((s.max_delta_ms - 25.0).abs() < 1e-9);
        assert_eq!(s.lost(), 0);
    }

    #[test]
    fn rtcp_receiver_report_block() {
        // RR, 1 block: ssrc 0x01020304, fraction 64, cumulative −2 (0xfffffe), jitter 80
        let mut p = vec![0x81, 201, 0, 7, 0, 0, 0, 9];
        p.extend_from_slice(&[1, 2, 3, 4, 64, 0xff, 0xff, 0xfe, 0, 0, 1, 0, 0, 0, 0, 80]);
        p.extend_from_slice(&[0; 8]);
        let r = rtcp_reports(&p);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].ssrc, 0x0102_0304);
        assert_eq!(r[0].fraction_lost, 64);
        assert_eq!(r[0].cumulative_lost, -2);
        assert_eq!(r[0].highest_seq, 256);
        assert_eq!(r[0].jitter, 80);
        assert!(rtcp_reports(&p[..20]).is_empty());
    }
}
