//! Time encodings: ISO-8601 text (for JSON/CSV) and the NTP timestamp format that IPFIX uses for
//! `dateTimeNanoseconds` (RFC 7011 section 6.1.10).

use std::fmt::Write as _;

const NS_PER_S: u64 = 1_000_000_000;
/// Seconds from the NTP era 0 epoch (1900-01-01) to the Unix epoch (1970-01-01).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` for ns since the Unix epoch.
pub(crate) fn iso8601_ns(ns: u64) -> String {
    let u = weir_packet::Utc::from_ns(ns);
    let mut s = String::with_capacity(30);
    let _ = write!(
        s,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
        u.year, u.month, u.day, u.hour, u.minute, u.second, u.nanos
    );
    s
}

/// NTP 64-bit timestamp (seconds since 1900 in the high 32 bits, binary fraction in the low 32)
/// of ns since the Unix epoch. The fraction is rounded up so that a reader computing
/// `floor(fraction * 10^9 / 2^32)` gets the nanoseconds back exactly.
pub(crate) fn ntp_timestamp(ns: u64) -> u64 {
    let secs = (ns / NS_PER_S + NTP_UNIX_OFFSET) & 0xffff_ffff;
    let frac = ((ns % NS_PER_S) << 32).div_ceil(NS_PER_S);
    (secs << 32) | frac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601() {
        assert_eq!(iso8601_ns(0), "1970-01-01T00:00:00.000000000Z");
        // 2026-11-21T10:20:30.123456789Z, checked with `date -u -d @1795256430`.
        assert_eq!(
            iso8601_ns(1_795_256_430_123_456_789),
            "2026-11-21T10:20:30.123456789Z"
        );
        assert_eq!(
            iso8601_ns(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000000Z"
        );
    }

    #[test]
    fn ntp_round_trips_every_nanosecond_digit() {
        for nsec in [
            0u64,
            1,
            2,
            499_999_999,
            500_000_000,
            999_999_999,
            123_456_789,
        ] {
            let t = ntp_timestamp(1_700_000_000 * NS_PER_S + nsec);
            assert_eq!(t >> 32, 1_700_000_000 + NTP_UNIX_OFFSET);
            let back = ((t & 0xffff_ffff) * NS_PER_S) >> 32;
            assert_eq!(back, nsec);
        }
        assert_eq!(ntp_timestamp(500_000_000) & 0xffff_ffff, 0x8000_0000);
    }
}
