//! IPFIX (RFC 7011): the 16-byte message header and the encoder built on the shared set builder.
//!
//! Header (big-endian): version = 10 (0), length of the whole message (2), export time in Unix
//! seconds (4), sequence number = data records sent in this observation domain before this
//! message, modulo 2^32 (8), observation domain id (12). Template sets have id 2 and are sent
//! again, for UDP (RFC 7011 section 8.4), every 20 messages and every 10 minutes of packet time
//! by default (the `templateRefreshTimeout` default of RFC 6728); both are configurable. Sets are
//! not padded (RFC 7011 makes padding optional).
//!
//! Data records carry octet/packet delta counts (8 bytes), flowStart/End Milliseconds (152/153)
//! or Nanoseconds (156/157, NTP format), addresses, ports, vlanId, tcpControlBits,
//! protocolIdentifier, ipClassOfService, minimum/maximumTTL and flowEndReason. In biflow mode
//! (RFC 5103) one record holds both directions: the reverse counters, times, TCP flags and TTLs
//! use the same element ids with the enterprise bit set and PEN 29305.

use crate::clock::Clock;
use crate::sets::{Counts, Refresh, SetFormat, SetPacker};
use crate::template::ipfix_templates;
use crate::ExportError;

/// Default template refresh: every 20 messages and every 10 minutes.
pub(crate) const DEFAULT_REFRESH: Refresh = Refresh {
    packets: 20,
    ns: 10 * 60 * 1_000_000_000,
};

/// The IPFIX header writer and its data record sequence counter.
#[derive(Debug)]
pub(crate) struct IpfixFormat {
    domain_id: u32,
    sequence: u32,
}

impl SetFormat for IpfixFormat {
    const HEADER_LEN: usize = 16;
    const TEMPLATE_SET_ID: u16 = 2;
    const UPTIME: bool = false;
    const PAD: usize = 1;

    fn write_header(&mut self, buf: &mut [u8], counts: Counts, clock: &Clock) {
        let len = buf.len() as u16;
        buf[0..2].copy_from_slice(&10u16.to_be_bytes());
        buf[2..4].copy_from_slice(&len.to_be_bytes());
        buf[4..8].copy_from_slice(&((clock.now_ns() / 1_000_000_000) as u32).to_be_bytes());
        buf[8..12].copy_from_slice(&self.sequence.to_be_bytes());
        buf[12..16].copy_from_slice(&self.domain_id.to_be_bytes());
        self.sequence = self.sequence.wrapping_add(u32::from(counts.data));
    }
}

/// An IPFIX encoder: one-way records, or RFC 5103 biflow records when `biflow`.
pub(crate) fn packer(
    domain_id: u32,
    biflow: bool,
    nanos: bool,
    tags: bool,
    mtu: usize,
    refresh: Refresh,
) -> Result<SetPacker<IpfixFormat>, ExportError> {
    let format = IpfixFormat {
        domain_id,
        sequence: 0,
    };
    SetPacker::new(
        format,
        ipfix_templates(biflow, nanos, tags),
        biflow,
        mtu,
        refresh,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packer::{Datagram, Packer};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use weir_flows::{Direction, EndReason, FlowKey, FlowRecord};
    use weir_packet::bytes::{be16, be32, be64};

    const T0: u64 = 1_795_256_430_000_000_000; // 2026-11-21T10:20:30Z

    fn rec() -> FlowRecord {
        FlowRecord {
            key: FlowKey {
                vlan: 0,
                src: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
                dst: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)),
                proto: 6,
                src_port: 51000,
                dst_port: 80,
                tos: 0,
            },
            forward: Direction {
                packets: 5,
                bytes: 420,
                first_ns: T0 + 123_456_789,
                last_ns: T0 + 2_000_000_001,
                tcp_flags: 0x1b,
                min_ttl: 64,
                max_ttl: 64,
            },
            reverse: Direction {
                packets: 4,
                bytes: 3000,
                first_ns: T0 + 200_000_000,
                last_ns: T0 + 1_999_000_000,
                tcp_flags: 0x1a,
                min_ttl: 55,
                max_ttl: 57,
            },
            end_reason: EndReason::EndOfFlow,
            tag: None,
        }
    }

    fn one(biflow: bool, nanos: bool, r: &FlowRecord) -> Datagram {
        let mut p = packer(7, biflow, nanos, false, 1400, DEFAULT_REFRESH).unwrap();
        let mut c = Clock::new(None);
        c.observe(r);
        let mut out = Vec::new();
        p.add(r, &c, &mut out);
        assert!(out.is_empty());
        p.flush(&c).unwrap()
    }

    #[test]
    fn uniflow_millis_byte_by_byte() {
        let d = one(false, false, &rec());
        let b = &d.bytes;
        assert_eq!(d.records, 2, "forward and reverse one-way records");
        // Header: version 10, length, export time = last end (T0 + 2 s), sequence 0, domain 7.
        assert_eq!(be16(b, 0), 10);
        assert_eq!(usize::from(be16(b, 2)), b.len());
        assert_eq!(be32(b, 4), 1_795_256_432);
        assert_eq!((be32(b, 8), be32(b, 12)), (0, 7));
        // Template set: id 2, length 4 + 2 * (4 + 16 * 4) = 140.
        assert_eq!((be16(b, 16), be16(b, 18)), (2, 140));
        assert_eq!((be16(b, 20), be16(b, 22)), (256, 16));
        #[rustfmt::skip]
        let fields: [u16; 32] = [1, 8, 2, 8, 152, 8, 153, 8, 8, 4, 12, 4, 7, 2, 32, 2, 11, 2, 58, 2, 6, 2, 4, 1, 5, 1, 52, 1, 53, 1, 136, 1];
        for (i, v) in fields.iter().enumerate() {
            assert_eq!(be16(b, 24 + 2 * i), *v, "template word {i}");
        }
        // Data set at 156: id 256, length 4 + 2 * 55, no padding.
        assert_eq!((be16(b, 156), be16(b, 158)), (256, 114));
        assert_eq!(b.len(), 156 + 114);
        let r = 160;
        assert_eq!(be64(b, r), 420);
        assert_eq!(be64(b, r + 8), 5);
        assert_eq!(be64(b, r + 16), 1_795_256_430_123);
        assert_eq!(be64(b, r + 24), 1_795_256_432_000);
        assert_eq!(&b[r + 32..r + 40], &[192, 0, 2, 1, 198, 51, 100, 7]);
        assert_eq!(
            &b[r + 40..r + 55],
            // source port, icmpTypeCode 0, destination port, vlan 0, tcpControlBits, proto,
            // tos, TTLs, end reason
            &[0xc7, 0x38, 0, 0, 0, 80, 0, 0, 0, 0x1b, 6, 0, 64, 64, 3]
        );
        // Second record: the reverse direction with the key swapped.
        let r2 = r + 55;
        assert_eq!((be64(b, r2), be64(b, r2 + 8)), (3000, 4));
        assert_eq!(
            &b[r2 + 32..r2 + 46],
            &[198, 51, 100, 7, 192, 0, 2, 1, 0, 80, 0, 0, 0xc7, 0x38]
        );
        assert_eq!(&b[r2 + 48..r2 + 55], &[0, 0x1a, 6, 0, 55, 57, 3]);
    }

    #[test]
    fn biflow_nanos_reverse_elements() {
        let d = one(true, true, &rec());
        let b = &d.bytes;
        assert_eq!(d.records, 1);
        // Templates 256 and 257 (one-way, 68 bytes each), then 258: 16 forward fields and 7
        // reverse ones with PEN 29305, then 259.
        assert_eq!((be16(b, 16), be16(b, 18)), (2, 4 + 2 * 68 + 2 * 124));
        assert_eq!((be16(b, 20), be16(b, 88)), (256, 257));
        let t = 20 + 2 * 68;
        assert_eq!((be16(b, t), be16(b, t + 2)), (258, 23));
        assert_eq!((be16(b, t + 4 + 8), be16(b, t + 4 + 12)), (156, 157));
        assert_eq!(be16(b, t + 124), 259);
        let rev = t + 4 + 16 * 4;
        #[rustfmt::skip]
        let want: [(u16, u16); 7] = [(1, 8), (2, 8), (156, 8), (157, 8), (6, 2), (52, 1), (53, 1)];
        for (i, (id, len)) in want.iter().enumerate() {
            let at = rev + 8 * i;
            assert_eq!(be16(b, at), id | 0x8000);
            assert_eq!(be16(b, at + 2), *len);
            assert_eq!(be32(b, at + 4), 29305);
        }
        let set = 16 + usize::from(be16(b, 18));
        assert_eq!((be16(b, set), be16(b, set + 2)), (258, 4 + 91));
        let r = set + 4;
        let ntp = be64(b, r + 16);
        assert_eq!(ntp >> 32, 1_795_256_430 + 2_208_988_800);
        assert_eq!(((ntp & 0xffff_ffff) * 1_000_000_000) >> 32, 123_456_789);
        // Reverse part starts after the 55-byte forward part.
        let rv = r + 55;
        assert_eq!((be64(b, rv), be64(b, rv + 8)), (3000, 4));
        assert_eq!(be64(b, rv + 16) >> 32, 1_795_256_430 + 2_208_988_800);
        assert_eq!(&b[rv + 32..rv + 36], &[0, 0x1a, 55, 57]);
        assert_eq!(b.len(), r + 91);
    }

    #[test]
    fn biflow_mode_sends_one_way_flows_with_the_one_way_template() {
        let mut r = rec();
        r.reverse = Direction::default();
        let d = one(true, false, &r);
        let set = 16 + usize::from(be16(&d.bytes, 18));
        assert_eq!(
            (be16(&d.bytes, set), be16(&d.bytes, set + 2)),
            (256, 4 + 55)
        );
        assert_eq!(d.records, 1);
    }

    #[test]
    fn sequence_counts_data_records_and_ipv6_uses_257() {
        let mut p = packer(0, false, false, false, 1400, DEFAULT_REFRESH).unwrap();
        let mut c = Clock::new(None);
        let mut r = rec();
        r.reverse = Direction::default();
        r.key.src = IpAddr::V6(Ipv6Addr::LOCALHOST);
        r.key.dst = IpAddr::V6(Ipv6Addr::LOCALHOST);
        c.observe(&r);
        let mut out = Vec::new();
        for _ in 0..100 {
            p.add(&r, &c, &mut out);
        }
        out.extend(p.flush(&c));
        let mut sent = 0u32;
        for (i, d) in out.iter().enumerate() {
            let b = &d.bytes;
            assert!(b.len() <= 1400);
            assert_eq!(be32(b, 8), sent, "message {i}");
            sent += d.records as u32;
            let first_set = be16(b, 16);
            let data_at = if first_set == 2 {
                16 + usize::from(be16(b, 18))
            } else {
                16
            };
            assert_eq!(be16(b, data_at), 257);
        }
        assert_eq!(sent, 100);
        // 79-byte records: (1400 - 16 - 4) / 79 = 17 per message without templates.
        assert_eq!(out[1].records, 17);
    }
}
