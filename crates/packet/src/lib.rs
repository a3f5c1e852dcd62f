//! The shared vocabulary of weir's data path.
//!
//! Every stage (file or live source, filter, decoder, writer, flow meter) talks about packets with
//! the types defined here: [`LinkType`], the framing of the first byte of a packet,
//! [`Interface`], what is known of the interface a packet came from, and [`PacketMeta`], what a
//! capture record says about a packet besides its bytes.
#![deny(missing_docs)]

use std::fmt;

pub mod bytes;
pub mod output;
pub mod time;
pub mod value;

/// Asks the CPU to bring the cache line holding `r` into its caches, ahead of a use a few
/// packets later. A hint only: no effect on any result, and a no-op off x86-64. Used where a
/// benchmark shows the miss it hides (the file reader's look-ahead, the flow table's buckets;
/// `bench/flows_vs_peers.py`).
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and writes nothing; `r` is a valid reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (r as *const T).cast(),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// A link-layer header type, as numbered by the tcpdump.org `LINKTYPE_` registry (the value stored
/// in pcap and pcapng files). The numbers are kept as they are so unknown types round-trip.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct LinkType(pub u32);

impl LinkType {
    /// BSD loopback: a 4-byte address family in the byte order of the capturing host.
    pub const NULL: LinkType = LinkType(0);
    /// Ethernet II / 802.3.
    pub const ETHERNET: LinkType = LinkType(1);
    /// PPP in HDLC-like framing without the flag bytes (RFC 1662, address/control optional).
    pub const PPP: LinkType = LinkType(9);
    /// Raw IP, the number BSD and Linux use (DLT_RAW 12).
    pub const RAW_12: LinkType = LinkType(12);
    /// Raw IP, the number OpenBSD uses (DLT_RAW 14).
    pub const RAW_14: LinkType = LinkType(14);
    /// PPP in HDLC-like framing (RFC 1662), with address and control bytes.
    pub const PPP_HDLC: LinkType = LinkType(50);
    /// PPPoE-less PPP over Ethernet framing used by some captures (DLT_PPP_ETHER).
    pub const PPP_ETHER: LinkType = LinkType(51);
    /// Cisco HDLC.
    pub const C_HDLC: LinkType = LinkType(104);
    /// Raw IP, the registry's own number (LINKTYPE_RAW 101).
    pub const RAW: LinkType = LinkType(101);
    /// OpenBSD loopback: a 4-byte address family in network byte order.
    pub const LOOP: LinkType = LinkType(108);
    /// Linux "cooked" capture, version 1 (16-byte header).
    pub const LINUX_SLL: LinkType = LinkType(113);
    /// Raw IPv4 (no link header).
    pub const IPV4: LinkType = LinkType(228);
    /// Raw IPv6 (no link header).
    pub const IPV6: LinkType = LinkType(229);
    /// Linux "cooked" capture, version 2 (20-byte header).
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// The registry name of the link type (`"EN10MB"`, `"LINUX_SLL2"`...), or `None` when weir
    /// does not know it.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            LinkType::NULL => "NULL",
            LinkType::ETHERNET => "EN10MB",
            LinkType::PPP => "PPP",
            LinkType::RAW_12 | LinkType::RAW_14 | LinkType::RAW => "RAW",
            LinkType::PPP_HDLC => "PPP_HDLC",
            LinkType::PPP_ETHER => "PPP_ETHER",
            LinkType::C_HDLC => "C_HDLC",
            LinkType::LOOP => "LOOP",
            LinkType::LINUX_SLL => "LINUX_SLL",
            LinkType::IPV4 => "IPV4",
            LinkType::IPV6 => "IPV6",
            LinkType::LINUX_SLL2 => "LINUX_SLL2",
            _ => return None,
        })
    }

    /// True when weir can decode frames of this link type.
    pub fn is_supported(self) -> bool {
        self.name().is_some()
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "unknown link type {}", self.0),
        }
    }
}

/// An interface packets were captured on: what a file's header or interface block declares, what
/// a live capture knows of its interfaces, and what a writer declares in its output. Index `i` of
/// a list of these is the interface of [`PacketMeta::interface`] `i`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Interface {
    /// How its frames start.
    pub link: LinkType,
    /// Snap length as declared (0 = none declared; a pcap writer writes 262144 for it, a pcapng
    /// writer 0).
    pub snaplen: u32,
    /// Its name (`if_name` in pcapng, `eth0` for a live capture), when known.
    pub name: Option<String>,
    /// `if_description` (pcapng), when given.
    pub description: Option<String>,
    /// Timestamp resolution in the file it was read from, as a human string ("ns", "µs",
    /// "2^-30 s"...); empty when it was not read from a file.
    pub ts_resolution: String,
    /// Bytes of frame check sequence at the end of each frame, when the file says so.
    pub fcs_len: u32,
    /// The file (or pcapng section) was written in the other byte order than this machine's.
    /// It matters for BSD loopback headers, whose family is in the writer's host order.
    pub swapped: bool,
}

impl Interface {
    /// An interface of link type `link` and snap length `snaplen`, nothing else known.
    pub fn new(link: LinkType, snaplen: u32) -> Interface {
        Interface {
            link,
            snaplen,
            name: None,
            description: None,
            ts_resolution: String::new(),
            fcs_len: 0,
            swapped: false,
        }
    }
}

/// What a capture record says about a packet besides its bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PacketMeta {
    /// Capture time in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length of the packet on the wire; at least the captured length in a sane file, but files
    /// lie, so consumers must not assume it.
    pub orig_len: u32,
    /// Index of the interface the packet came from (0 for classic pcap).
    pub interface: u32,
}

/// Splits nanoseconds since the epoch into whole seconds and the nanosecond remainder.
pub fn split_ns(ts_ns: u64) -> (u64, u32) {
    (ts_ns / 1_000_000_000, (ts_ns % 1_000_000_000) as u32)
}

/// A nanosecond Unix timestamp broken down into its UTC calendar fields, with no calendar crate
/// (Howard Hinnant's `civil_from_days`), for every place weir prints or names by a date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Utc {
    /// Year (e.g. 2026).
    pub year: i64,
    /// Month, 1 to 12.
    pub month: u32,
    /// Day of the month, 1 to 31.
    pub day: u32,
    /// Hour, 0 to 23.
    pub hour: u32,
    /// Minute, 0 to 59.
    pub minute: u32,
    /// Second, 0 to 59.
    pub second: u32,
    /// Nanoseconds, 0 to 999 999 999.
    pub nanos: u32,
}

impl Utc {
    /// Nanoseconds since 1970-01-01 00:00:00 UTC of these fields (Howard Hinnant's
    /// `days_from_civil`), or `None` before 1970 or for out-of-range fields.
    pub fn to_ns(&self) -> Option<u64> {
        if !(1..=12).contains(&self.month)
            || !(1..=31).contains(&self.day)
            || self.hour > 23
            || self.minute > 59
            || self.second > 60
            || self.nanos >= 1_000_000_000
        {
            return None;
        }
        let y = self.year - i64::from(self.month <= 2);
        let era = y.div_euclid(400);
        let yoe = y.rem_euclid(400);
        let m = i64::from(self.month);
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(self.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        let secs = days * 86_400
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second);
        u64::try_from(secs)
            .ok()?
            .checked_mul(1_000_000_000)?
            .checked_add(u64::from(self.nanos))
    }

    /// The UTC fields of `ts_ns` nanoseconds since 1970-01-01 00:00:00 UTC.
    pub fn from_ns(ts_ns: u64) -> Utc {
        let secs = ts_ns / 1_000_000_000;
        let sod = (secs % 86_400) as u32;
        let z = (secs / 86_400) as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Utc {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: sod / 3600,
            minute: sod / 60 % 60,
            second: sod % 60,
            nanos: (ts_ns % 1_000_000_000) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_display() {
        assert_eq!(LinkType::ETHERNET.to_string(), "EN10MB (1)");
        assert_eq!(LinkType(147).to_string(), "unknown link type 147");
        assert!(LinkType::LINUX_SLL2.is_supported());
        assert!(!LinkType(147).is_supported());
    }

    #[test]
    fn split() {
        assert_eq!(
            split_ns(1_700_000_000_123_456_789),
            (1_700_000_000, 123_456_789)
        );
    }

    #[test]
    fn utc_fields_of_known_dates() {
        // Checked by hand with `date -u -d @SECONDS`.
        let u = Utc::from_ns(1_700_000_000_000_000_123);
        assert_eq!(
            (u.year, u.month, u.day, u.hour, u.minute, u.second, u.nanos),
            (2023, 11, 14, 22, 13, 20, 123)
        );
        let leap = Utc::from_ns(951_782_400_000_000_000);
        assert_eq!((leap.year, leap.month, leap.day), (2000, 2, 29));
        assert_eq!(Utc::from_ns(0).year, 1970);
        for ns in [
            0,
            951_782_400_000_000_000,
            1_700_000_000_000_000_123,
            4_102_444_800_999_999_999,
        ] {
            assert_eq!(Utc::from_ns(ns).to_ns(), Some(ns));
        }
    }
}
