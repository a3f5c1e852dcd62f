//! NetFlow v9 (RFC 3954): the 20-byte packet header and the encoder built on the shared set
//! builder.
//!
//! Header (big-endian): version = 9 (0), count = template + data records in the packet (2),
//! sys_uptime ms (4), unix_secs (8), sequence = packets sent before this one (12), source id
//! (16). Template flowsets have id 0; data flowsets carry the template id (256 = IPv4,
//! 257 = IPv6) and are padded to 4 bytes. Templates are refreshed every 20 packets and every
//! 30 minutes of packet time by default.
//!
//! v9 has no sub-second field in its header, so collectors compute the flow times as
//! `unix_secs * 1000 - sys_uptime + FIRST_SWITCHED`. The header therefore describes the export
//! instant rounded up to a whole second (unix_secs) with sys_uptime at that same instant, which
//! makes every reconstructed time exact to the millisecond and keeps sys_uptime ≥ LAST_SWITCHED.

use crate::clock::Clock;
use crate::sets::{Counts, Refresh, SetFormat, SetPacker};
use crate::template::v9_templates;
use crate::ExportError;

/// Default template refresh: every 20 packets and every 30 minutes.
pub(crate) const DEFAULT_REFRESH: Refresh = Refresh {
    packets: 20,
    ns: 30 * 60 * 1_000_000_000,
};

/// The v9 header writer and its packet sequence counter.
#[derive(Debug)]
pub(crate) struct V9Format {
    source_id: u32,
    sequence: u32,
}

impl SetFormat for V9Format {
    const HEADER_LEN: usize = 20;
    const TEMPLATE_SET_ID: u16 = 0;
    const UPTIME: bool = true;
    const PAD: usize = 4;

    fn write_header(&mut self, buf: &mut [u8], counts: Counts, clock: &Clock) {
        let secs = clock.now_ms().div_ceil(1000);
        let uptime = (secs * 1000).saturating_sub(clock.boot_ms()) as u32;
        buf[0..2].copy_from_slice(&9u16.to_be_bytes());
        buf[2..4].copy_from_slice(&(counts.templates + counts.data).to_be_bytes());
        buf[4..8].copy_from_slice(&uptime.to_be_bytes());
        buf[8..12].copy_from_slice(&(secs as u32).to_be_bytes());
        buf[12..16].copy_from_slice(&self.sequence.to_be_bytes());
        buf[16..20].copy_from_slice(&self.source_id.to_be_bytes());
        self.sequence = self.sequence.wrapping_add(1);
    }
}

/// A NetFlow v9 encoder. Bidirectional flows become two one-way records (v9 has no reverse
/// elements).
pub(crate) fn packer_tags(
    source_id: u32,
    tags: bool,
    mtu: usize,
    refresh: Refresh,
) -> Result<SetPacker<V9Format>, ExportError> {
    let format = V9Format {
        source_id,
        sequence: 0,
    };
    SetPacker::new(format, v9_templates(tags), false, mtu, refresh)
}

/// [`packer_tags`] without tags.
#[cfg(test)]
pub(crate) fn packer(
    source_id: u32,
    mtu: usize,
    refresh: Refresh,
) -> Result<SetPacker<V9Format>, ExportError> {
    packer_tags(source_id, false, mtu, refresh)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packer::{Datagram, Packer};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use weir_flows::{Direction, EndReason, FlowKey, FlowRecord};
    use weir_packet::bytes::{be16, be32};

    const T0: u64 = 1_795_256_430_000_000_000; // 2026-11-21T10:20:30Z

    fn rec(v6: bool, i: u64) -> FlowRecord {
        let (src, dst) = if v6 {
            (
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
            )
        } else {
            (
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            )
        };
        FlowRecord {
            key: FlowKey {
                vlan: 100,
                src,
                dst,
                proto: 17,
                src_port: 5353,
                dst_port: 53,
                tos: 0xb8,
            },
            forward: Direction {
                packets: 3 + i,
                bytes: 0x1_0000_0000 + i,
                first_ns: T0 + 250_000_000,
                last_ns: T0 + 1_750_000_000,
                tcp_flags: 0,
                min_ttl: 63,
                max_ttl: 64,
            },
            reverse: Direction::default(),
            end_reason: EndReason::IdleTimeout,
            tag: None,
        }
    }

    fn run(recs: &[FlowRecord], mtu: usize, refresh: Refresh, clock: &mut Clock) -> Vec<Datagram> {
        let mut p = packer(42, mtu, refresh).unwrap();
        let mut out = Vec::new();
        for r in recs {
            clock.observe(r);
            p.add(r, clock, &mut out);
        }
        out.extend(p.flush(clock));
        out
    }

    #[test]
    fn first_packet_byte_by_byte() {
        let mut c = Clock::new(None);
        c.tick(T0);
        let d = &run(&[rec(false, 0)], 1400, DEFAULT_REFRESH, &mut c)[0];
        let b = &d.bytes;
        // Header: version 9, count 3 (2 templates + 1 record), uptime at 10:20:32 = 2000 ms,
        // unix_secs = ceil(now = T0 + 1.75 s) = 1795256432, sequence 0, source id 42.
        assert_eq!(
            &b[0..20],
            &[0, 9, 0, 3, 0, 0, 0x07, 0xd0, 0x6b, 1, 0x70, 0x70, 0, 0, 0, 0, 0, 0, 0, 42]
        );
        // Template flowset: id 0, length 4 + (4 + 15*4) * 2 = 132.
        assert_eq!((be16(b, 20), be16(b, 22)), (0, 132));
        assert_eq!((be16(b, 24), be16(b, 26)), (256, 15));
        #[rustfmt::skip]
        let fields4: [u16; 30] = [1, 8, 2, 8, 22, 4, 21, 4, 8, 4, 12, 4, 7, 2, 11, 2, 32, 2, 58, 2, 4, 1, 5, 1, 6, 1, 52, 1, 53, 1];
        for (i, v) in fields4.iter().enumerate() {
            assert_eq!(be16(b, 28 + 2 * i), *v, "v4 template word {i}");
        }
        assert_eq!((be16(b, 88), be16(b, 90)), (257, 15));
        assert_eq!((be16(b, 92 + 16), be16(b, 92 + 20)), (27, 28));
        assert_eq!(be16(b, 92 + 18), 16);
        assert_eq!((be16(b, 92 + 32), be16(b, 92 + 34)), (32, 2));
        // Data flowset at 152: id 256, length 4 + 45 + 3 pad = 52.
        assert_eq!((be16(b, 152), be16(b, 154)), (256, 52));
        #[rustfmt::skip]
        let want: [u8; 48] = [
            0, 0, 0, 1, 0, 0, 0, 0,   // IN_BYTES 2^32
            0, 0, 0, 0, 0, 0, 0, 3,   // IN_PKTS 3
            0, 0, 0, 250,             // FIRST_SWITCHED 250 ms
            0, 0, 0x06, 0xd6,         // LAST_SWITCHED 1750 ms
            10, 0, 0, 1, 10, 0, 0, 2, // addresses
            0x14, 0xe9, 0, 53,        // ports 5353, 53
            0, 0,                     // ICMP_TYPE (not ICMP)
            0, 100,                   // SRC_VLAN
            17, 0xb8, 0, 63, 64,      // proto, tos, flags, ttl min/max
            0, 0, 0,                  // padding
        ];
        assert_eq!(&b[156..], &want);
        assert_eq!(b.len(), 204);
        assert_eq!(d.records, 1);
    }

    #[test]
    fn mixed_families_make_two_padded_flowsets() {
        let mut c = Clock::new(None);
        let d = &run(
            &[rec(false, 0), rec(false, 1), rec(true, 2)],
            1400,
            DEFAULT_REFRESH,
            &mut c,
        )[0];
        let b = &d.bytes;
        assert_eq!(be16(b, 2), 5);
        // v4 set: 4 + 2*45 = 94 → 96; v6 set: 4 + 69 = 73 → 76.
        assert_eq!((be16(b, 152), be16(b, 154)), (256, 96));
        assert_eq!((be16(b, 248), be16(b, 250)), (257, 76));
        assert_eq!(b.len(), 248 + 76);
        assert_eq!(
            &b[248 + 4 + 24..248 + 4 + 40],
            &rec(true, 0).key.src_v6_octets()
        );
        assert_eq!(b[b.len() - 1], 0, "padding is zero");
    }

    #[test]
    fn mtu_sequence_and_template_refresh_every_20_packets() {
        let recs: Vec<_> = (0..1000).map(|i| rec(i % 3 == 0, i)).collect();
        let mut c = Clock::new(None);
        let ds = run(&recs, 1400, DEFAULT_REFRESH, &mut c);
        let mut total = 0;
        for (i, d) in ds.iter().enumerate() {
            let b = &d.bytes;
            assert!(b.len() <= 1400 && b.len() % 4 == 0);
            assert_eq!(be32(b, 12), i as u32, "sequence = packet number");
            let has_templates = be16(b, 20) == 0;
            assert_eq!(has_templates, i % 20 == 0, "packet {i}");
            let templates = if has_templates { 2 } else { 0 };
            assert_eq!(u64::from(be16(b, 2)), templates + d.records);
            // Walk the flowsets: lengths add up to the datagram.
            let mut at = 20;
            while at < b.len() {
                let len = usize::from(be16(b, at + 2));
                assert!(len % 4 == 0 && len >= 4);
                at += len;
            }
            assert_eq!(at, b.len());
            total += d.records;
        }
        assert_eq!(total, 1000);
        assert!(ds.len() > 40, "{} packets", ds.len());
    }

    #[test]
    fn template_refresh_by_time() {
        let refresh = Refresh {
            packets: 0,
            ns: 30 * 60 * 1_000_000_000,
        };
        let mut p = packer(0, 1400, refresh).unwrap();
        let mut c = Clock::new(None);
        let mut with_templates = Vec::new();
        for minute in 0..100u64 {
            let mut r = rec(false, 0);
            r.forward.first_ns = T0 + minute * 60_000_000_000;
            r.forward.last_ns = r.forward.first_ns;
            c.observe(&r);
            let mut out = Vec::new();
            p.add(&r, &c, &mut out);
            let d = p.flush(&c).unwrap();
            if be16(&d.bytes, 20) == 0 {
                with_templates.push(minute);
            }
        }
        assert_eq!(with_templates, [0, 30, 60, 90]);
    }

    #[test]
    fn tiny_mtu_is_refused() {
        assert!(packer(0, 200, DEFAULT_REFRESH).is_err());
        assert!(packer(0, 20 + 132 + 76 - 1, DEFAULT_REFRESH).is_err());
        assert!(packer(0, 20 + 132 + 76, DEFAULT_REFRESH).is_ok());
    }

    #[test]
    fn clock_going_backwards_keeps_every_time() {
        // Concatenated captures in the wrong order: boot is the later capture's start; records
        // from an hour and from 60 days before it must keep their times (they used to get
        // FIRST/LAST_SWITCHED 0), as a collector rebuilds them from the header.
        const H: u64 = 3_600_000_000_000;
        let at = |t: u64, i: u64| {
            let mut r = rec(false, i);
            r.forward.first_ns = t;
            r.forward.last_ns = t + 2_500_000_123;
            r
        };
        let boot = T0 + 60 * 24 * H;
        let recs: Vec<_> = [boot, T0 + 60 * 24 * H - H, T0 + 3, boot + 1, T0 + H]
            .iter()
            .enumerate()
            .map(|(i, t)| at(*t, i as u64))
            .collect();
        let mut c = Clock::new(None);
        c.tick(boot);
        let ds = run(&recs, 1400, DEFAULT_REFRESH, &mut c);
        let mut got = Vec::new();
        for d in &ds {
            let b = &d.bytes;
            let base = u64::from(be32(b, 8)) * 1000 - u64::from(be32(b, 4));
            let mut at = 20;
            while at < b.len() {
                let (id, len) = (be16(b, at), usize::from(be16(b, at + 2)));
                if id == 256 {
                    for r in b[at + 4..at + len].chunks_exact(45) {
                        let up = |o: usize| u64::from(be32(r, o));
                        assert!(up(20) <= u64::from(be32(b, 4)), "LAST after sys_uptime");
                        got.push((base + up(16), base + up(20)));
                    }
                }
                at += len;
            }
        }
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
        assert_eq!(ds.iter().map(|d| d.records).sum::<u64>(), 5);
    }

    trait V6Octets {
        fn src_v6_octets(&self) -> [u8; 16];
    }
    impl V6Octets for FlowKey {
        fn src_v6_octets(&self) -> [u8; 16] {
            match self.src {
                IpAddr::V6(a) => a.octets(),
                IpAddr::V4(_) => [0; 16],
            }
        }
    }
}
