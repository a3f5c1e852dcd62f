//! NetFlow v5: a 24-byte header and up to 30 fixed 48-byte IPv4 records per datagram.
//!
//! Layout (all big-endian), from Cisco's NetFlow v5 export format:
//!
//! | header offset | field | | record offset | field |
//! |---|---|---|---|---|
//! | 0 | version = 5 | | 0 | srcaddr |
//! | 2 | count | | 4 | dstaddr |
//! | 4 | sys_uptime (ms) | | 8 | nexthop (0) |
//! | 8 | unix_secs | | 12 / 14 | input / output ifIndex (0) |
//! | 12 | unix_nsecs | | 16 | dPkts |
//! | 16 | flow_sequence | | 20 | dOctets |
//! | 20 | engine_type | | 24 / 28 | First / Last (sys_uptime ms) |
//! | 21 | engine_id | | 32 / 34 | srcport / dstport |
//! | 22 | sampling_interval | | 36 / 37 / 38 / 39 | pad1, tcp_flags, prot, tos |
//! | | | | 40..48 | src_as, dst_as, src_mask, dst_mask, pad2 (0) |
//!
//! flow_sequence is the number of records sent before the datagram. The v5 layout is fixed, so the
//! MTU option does not apply (a full datagram is 24 + 30 × 48 = 1464 bytes). Counters are 32-bit:
//! a direction with more than `u32::MAX` packets or bytes is split into several records with the
//! same key and times whose counters add up to the total.

use std::net::IpAddr;

use weir_flows::FlowRecord;

use crate::clock::{span_ms, Base, Clock};
use crate::packer::{uniflows, Added, Datagram, Packer};

/// Header length.
pub(crate) const HEADER_LEN: usize = 24;
/// Record length.
pub(crate) const RECORD_LEN: usize = 48;
/// Records per datagram.
pub(crate) const MAX_RECORDS: usize = 30;

/// The NetFlow v5 encoder.
#[derive(Debug)]
pub(crate) struct V5Packer {
    buf: Vec<u8>,
    count: u16,
    flows_sent: u32,
    engine_type: u8,
    engine_id: u8,
    /// Time base of the open datagram.
    base: Option<Base>,
    /// Records whose times could not be expressed (a flow longer than 49.7 days).
    clamped: u64,
}

impl V5Packer {
    /// An encoder stamping `engine_type` / `engine_id` in its headers.
    pub(crate) fn new(engine_type: u8, engine_id: u8) -> Self {
        V5Packer {
            buf: Vec::with_capacity(HEADER_LEN + MAX_RECORDS * RECORD_LEN),
            count: 0,
            flows_sent: 0,
            engine_type,
            engine_id,
            base: None,
            clamped: 0,
        }
    }

    /// Makes sure the open datagram (opening one if needed) can hold a record spanning `span`,
    /// and returns the clock its times are encoded with.
    fn based(
        &mut self,
        span: Option<(u64, u64)>,
        clock: &Clock,
        ready: &mut Vec<Datagram>,
    ) -> Clock {
        if self.count > 0 && !self.base.as_mut().is_some_and(|b| b.admit(span)) {
            ready.extend(self.flush(clock));
        }
        if self.count == 0 {
            let (base, fits) = Base::open(clock, span);
            self.clamped += u64::from(!fits);
            self.base = Some(base);
        }
        self.base.as_ref().map_or(*clock, |b| b.records(clock))
    }

    fn push_record(&mut self, r: &WireRecord) {
        if self.buf.is_empty() {
            self.buf.resize(HEADER_LEN, 0);
        }
        let b = &mut self.buf;
        b.extend_from_slice(&r.src);
        b.extend_from_slice(&r.dst);
        b.extend_from_slice(&[0; 8]); // nexthop, input, output
        b.extend_from_slice(&r.packets.to_be_bytes());
        b.extend_from_slice(&r.bytes.to_be_bytes());
        b.extend_from_slice(&r.first.to_be_bytes());
        b.extend_from_slice(&r.last.to_be_bytes());
        b.extend_from_slice(&r.src_port.to_be_bytes());
        b.extend_from_slice(&r.dst_port.to_be_bytes());
        b.extend_from_slice(&[0, r.tcp_flags, r.proto, r.tos]);
        b.extend_from_slice(&[0; 8]); // src_as, dst_as, masks, pad2
        self.count += 1;
    }
}

/// The variable fields of one 48-byte record.
struct WireRecord {
    src: [u8; 4],
    dst: [u8; 4],
    packets: u32,
    bytes: u32,
    first: u32,
    last: u32,
    src_port: u16,
    dst_port: u16,
    tcp_flags: u8,
    proto: u8,
    tos: u8,
}

/// Splits `total` into `n` parts that differ by at most one and add up to `total`.
fn share(total: u64, n: u64, i: u64) -> u32 {
    (total / n + u64::from(i < total % n)) as u32
}

impl Packer for V5Packer {
    fn add(&mut self, rec: &FlowRecord, clock: &Clock, ready: &mut Vec<Datagram>) -> Added {
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (rec.key.src, rec.key.dst) else {
            return Added::SkippedIpv6;
        };
        for view in uniflows(rec) {
            let (s, d) = if view.key == rec.key {
                (src, dst)
            } else {
                (dst, src)
            };
            let dir = view.fwd;
            let max = u64::from(u32::MAX);
            let n = dir
                .packets
                .div_ceil(max)
                .max(dir.bytes.div_ceil(max))
                .max(1);
            for i in 0..n {
                // the times of the datagram this record goes into
                let at = self.based(span_ms(dir), clock, ready);
                self.push_record(&WireRecord {
                    src: s.octets(),
                    dst: d.octets(),
                    packets: share(dir.packets, n, i),
                    bytes: share(dir.bytes, n, i),
                    first: at.uptime_ms(dir.first_ns),
                    last: at.uptime_ms(dir.last_ns),
                    src_port: view.key.src_port,
                    dst_port: view.key.dst_port,
                    tcp_flags: dir.tcp_flags,
                    proto: view.key.proto,
                    tos: view.key.tos,
                });
                if usize::from(self.count) == MAX_RECORDS {
                    ready.extend(self.flush(clock));
                }
            }
        }
        Added::Encoded
    }

    fn is_pending(&self) -> bool {
        self.count > 0
    }

    fn clamped(&self) -> u64 {
        self.clamped
    }

    fn flush(&mut self, clock: &Clock) -> Option<Datagram> {
        if self.count == 0 {
            return None;
        }
        let clock = &match self.base.take() {
            Some(b) => b.header(clock, false),
            None => *clock,
        };
        let now_ms = clock.now_ms();
        let mut h = [0u8; HEADER_LEN];
        h[0..2].copy_from_slice(&5u16.to_be_bytes());
        h[2..4].copy_from_slice(&self.count.to_be_bytes());
        h[4..8].copy_from_slice(&clock.uptime_ms(clock.now_ns()).to_be_bytes());
        h[8..12].copy_from_slice(&((now_ms / 1000) as u32).to_be_bytes());
        h[12..16].copy_from_slice(&(((now_ms % 1000) * 1_000_000) as u32).to_be_bytes());
        h[16..20].copy_from_slice(&self.flows_sent.to_be_bytes());
        h[20] = self.engine_type;
        h[21] = self.engine_id;
        // h[22..24]: sampling interval 0 = not sampled.
        self.buf[..HEADER_LEN].copy_from_slice(&h);
        self.flows_sent = self.flows_sent.wrapping_add(u32::from(self.count));
        let records = u64::from(self.count);
        self.count = 0;
        Some(Datagram {
            bytes: std::mem::take(&mut self.buf),
            records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use weir_flows::{Direction, EndReason, FlowKey};

    const T0: u64 = 1_795_256_430_000_000_000; // 2026-11-21T10:20:30Z

    fn rec(packets: u64, bytes: u64) -> FlowRecord {
        FlowRecord {
            key: FlowKey {
                vlan: 7,
                src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                dst: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2)),
                proto: 6,
                src_port: 40000,
                dst_port: 443,
                tos: 0x28,
            },
            forward: Direction {
                packets,
                bytes,
                first_ns: T0 + 1_500_000_000,
                last_ns: T0 + 3_250_999_999,
                tcp_flags: 0x1b,
                min_ttl: 60,
                max_ttl: 64,
            },
            reverse: Direction::default(),
            end_reason: EndReason::EndOfFlow,
            tag: None,
        }
    }

    fn clock_at(boot: u64, recs: &[FlowRecord]) -> Clock {
        let mut c = Clock::new(None);
        c.tick(boot);
        for r in recs {
            c.observe(r);
        }
        c
    }

    #[test]
    fn header_and_record_byte_by_byte() {
        let r = rec(10, 5000);
        let c = clock_at(T0, &[r]);
        let mut p = V5Packer::new(1, 2);
        let mut ready = Vec::new();
        assert_eq!(p.add(&r, &c, &mut ready), Added::Encoded);
        assert!(ready.is_empty() && p.is_pending());
        let d = p.flush(&c).unwrap();
        assert_eq!(d.records, 1);
        #[rustfmt::skip]
        let want: Vec<u8> = vec![
            // header
            0, 5, 0, 1,                 // version 5, count 1
            0, 0, 0x0c, 0xb2,           // sys_uptime 3250 ms (now = last packet)
            0x6b, 0x01, 0x70, 0x71,     // unix_secs 1795256433
            0x0e, 0xe6, 0xb2, 0x80,     // unix_nsecs 250 000 000
            0, 0, 0, 0,                 // flow_sequence 0
            1, 2, 0, 0,                 // engine type 1, id 2, sampling 0
            // record
            10, 0, 0, 1, 192, 168, 1, 2, // src, dst
            0, 0, 0, 0, 0, 0, 0, 0,     // nexthop, input, output
            0, 0, 0, 10,                // dPkts
            0, 0, 0x13, 0x88,           // dOctets 5000
            0, 0, 0x05, 0xdc,           // First 1500 ms
            0, 0, 0x0c, 0xb2,           // Last 3250 ms
            0x9c, 0x40, 0x01, 0xbb,     // ports 40000, 443
            0, 0x1b, 6, 0x28,           // pad, flags, proto, tos
            0, 0, 0, 0, 0, 0, 0, 0,     // AS, masks, pad
        ];
        assert_eq!(d.bytes, want);
        assert_eq!(0x6b01_7071u32, 1_795_256_433);
        assert_eq!(0x0ee6_b280u32, 250_000_000);
    }

    #[test]
    fn thirty_records_per_datagram_and_flow_sequence() {
        let r = rec(1, 40);
        let c = clock_at(T0, &[r]);
        let mut p = V5Packer::new(0, 0);
        let mut ready = Vec::new();
        for _ in 0..65 {
            p.add(&r, &c, &mut ready);
        }
        ready.extend(p.flush(&c));
        let counts: Vec<_> = ready.iter().map(|d| d.records).collect();
        assert_eq!(counts, [30, 30, 5]);
        let seqs: Vec<_> = ready
            .iter()
            .map(|d| u32::from_be_bytes(d.bytes[16..20].try_into().unwrap()))
            .collect();
        assert_eq!(seqs, [0, 30, 60]);
        assert_eq!(ready[0].bytes.len(), 24 + 30 * 48);
        assert_eq!(ready[2].bytes.len(), 24 + 5 * 48);
        assert_eq!(&ready[2].bytes[2..4], &[0, 5]);
    }

    #[test]
    fn big_counters_split_without_overflow() {
        let (packets, bytes) = (5_000_000_000u64, 9_000_000_000_000u64);
        let r = rec(packets, bytes);
        let c = clock_at(T0, &[r]);
        let mut p = V5Packer::new(0, 0);
        let mut ready = Vec::new();
        p.add(&r, &c, &mut ready);
        let d = p.flush(&c).unwrap();
        // bytes need ceil(9e12 / (2^32-1)) = 2096 records; 30 per datagram.
        let mut all = ready;
        all.push(d);
        let n: u64 = all.iter().map(|d| d.records).sum();
        assert_eq!(n, 2096);
        let (mut sp, mut sb) = (0u64, 0u64);
        for d in &all {
            for rec in d.bytes[24..].chunks(48) {
                sp += u64::from(u32::from_be_bytes(rec[16..20].try_into().unwrap()));
                sb += u64::from(u32::from_be_bytes(rec[20..24].try_into().unwrap()));
                assert_eq!(&rec[32..36], &[0x9c, 0x40, 0x01, 0xbb]);
            }
        }
        assert_eq!((sp, sb), (packets, bytes));
    }

    #[test]
    fn split_at_exact_boundary() {
        let max = u64::from(u32::MAX);
        for (pk, by, n) in [(1, max, 1), (1, max + 1, 2), (max + 1, max + 1, 2)] {
            let r = rec(pk, by);
            let c = clock_at(T0, &[r]);
            let mut p = V5Packer::new(0, 0);
            let mut ready = Vec::new();
            p.add(&r, &c, &mut ready);
            assert_eq!(p.flush(&c).unwrap().records, n, "{pk} {by}");
        }
    }

    #[test]
    fn ipv6_is_skipped_and_biflow_gives_two_records() {
        let mut r6 = rec(1, 100);
        r6.key.src = IpAddr::V6(Ipv6Addr::LOCALHOST);
        r6.key.dst = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let mut bi = rec(3, 300);
        bi.reverse = Direction {
            packets: 2,
            bytes: 200,
            first_ns: T0 + 2_000_000_000,
            last_ns: T0 + 3_000_000_000,
            tcp_flags: 0x12,
            min_ttl: 50,
            max_ttl: 50,
        };
        let c = clock_at(T0, &[bi]);
        let mut p = V5Packer::new(0, 0);
        let mut ready = Vec::new();
        assert_eq!(p.add(&r6, &c, &mut ready), Added::SkippedIpv6);
        assert!(!p.is_pending());
        p.add(&bi, &c, &mut ready);
        let d = p.flush(&c).unwrap();
        assert_eq!(d.records, 2);
        let r2 = &d.bytes[24 + 48..];
        assert_eq!(
            &r2[0..8],
            &[192, 168, 1, 2, 10, 0, 0, 1],
            "swapped addresses"
        );
        assert_eq!(&r2[16..24], &[0, 0, 0, 2, 0, 0, 0, 200]);
        assert_eq!(&r2[24..28], &2000u32.to_be_bytes());
        assert_eq!(&r2[32..40], &[0x01, 0xbb, 0x9c, 0x40, 0, 0x12, 6, 0x28]);
    }

    /// Times a collector rebuilds from a datagram: `unix time - sys_uptime + First/Last`.
    fn decoded_times(d: &Datagram) -> Vec<(u64, u64)> {
        let be = |at: usize| u64::from(u32::from_be_bytes(d.bytes[at..at + 4].try_into().unwrap()));
        let boot = be(8) * 1000 + be(12) / 1_000_000 - be(4);
        d.bytes[HEADER_LEN..]
            .chunks(RECORD_LEN)
            .map(|r| {
                let f = u64::from(u32::from_be_bytes(r[24..28].try_into().unwrap()));
                let l = u64::from(u32::from_be_bytes(r[28..32].try_into().unwrap()));
                (boot + f, boot + l)
            })
            .collect()
    }

    #[test]
    fn clock_going_backwards_keeps_every_time() {
        // A later capture first (boot at T0 + 100 days), then an earlier one, then the later
        // one again: no record may lose its times (they used to become 0 = boot).
        const DAY: u64 = 86_400_000_000_000;
        let at = |t: u64| {
            let mut r = rec(1, 60);
            r.forward.first_ns = t;
            r.forward.last_ns = t + 1_234_567_890;
            r
        };
        let recs = [
            at(T0 + 100 * DAY),
            at(T0),
            at(T0 + 5 * DAY),
            at(T0 + 100 * DAY + 7),
        ];
        let mut c = Clock::new(None);
        c.tick(T0 + 100 * DAY);
        let mut p = V5Packer::new(0, 0);
        let mut ready = Vec::new();
        for r in &recs {
            c.observe(r);
            p.add(r, &c, &mut ready);
        }
        ready.extend(p.flush(&c));
        let got: Vec<_> = ready.iter().flat_map(decoded_times).collect();
        let want: Vec<_> = recs
            .iter()
            .map(|r| {
                (
                    r.forward.first_ns / 1_000_000,
                    r.forward.last_ns / 1_000_000,
                )
            })
            .collect();
        assert_eq!(got, want);
        // 100 days do not fit one 32-bit uptime: the earlier records go in their own datagram.
        assert_eq!(
            ready.iter().map(|d| d.records).collect::<Vec<_>>(),
            [1, 2, 1]
        );
        assert_eq!(p.clamped(), 0);
    }

    #[test]
    fn a_flow_longer_than_the_uptime_span_is_counted() {
        let mut r = rec(2, 120);
        r.forward.last_ns = r.forward.first_ns + 60 * 86_400_000_000_000; // 60 days
        let c = clock_at(T0, &[r]);
        let mut p = V5Packer::new(0, 0);
        let mut ready = Vec::new();
        p.add(&r, &c, &mut ready);
        let d = p.flush(&c).unwrap();
        assert_eq!(p.clamped(), 1);
        let (first, last) = decoded_times(&d)[0];
        assert_eq!(first, r.forward.first_ns / 1_000_000, "First stays exact");
        assert_eq!(last - first, u64::from(u32::MAX), "Last clamped");
    }
}
