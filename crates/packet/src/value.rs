//! The value parsers every number of the command line and of the config file goes through
//! (durations, rates, sizes, counts): finite and in range, or an error naming the limit. Each is
//! a `fn(&str) -> Result<T, String>`, the shape clap's `value_parser` takes, so a bad value is a
//! usage error before anything is opened, created or allocated.

/// The largest snap length, and what `-s 0` means (as in tcpdump).
pub const MAX_SNAPLEN: u32 = 262_144;

fn float_in(s: &str, what: &str, lo: f64, hi: f64) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number ({what})"))?;
    if !(v.is_finite() && (lo..=hi).contains(&v)) {
        return Err(format!("{s} is out of range: {what} from {lo} to {hi}"));
    }
    Ok(v)
}

/// A duration in seconds: from 1 ns to 10⁹ s (31 years), finite.
pub fn seconds(s: &str) -> Result<f64, String> {
    float_in(s, "seconds", 1e-9, 1e9)
}

/// A packet rate: 0.001 to 10⁹ packets per second.
pub fn pps(s: &str) -> Result<f64, String> {
    float_in(s, "packets per second", 1e-3, 1e9)
}

/// A bit rate: 0.001 to 10⁷ megabits per second.
pub fn mbps(s: &str) -> Result<f64, String> {
    float_in(s, "megabits per second", 1e-3, 1e7)
}

/// A speed factor: 10⁻⁶ to 10⁶.
pub fn multiplier(s: &str) -> Result<f64, String> {
    float_in(s, "speed factor", 1e-6, 1e6)
}

/// A point in time: seconds since the epoch or a UTC date ([`crate::time::parse`]), as ns.
pub fn time(s: &str) -> Result<u64, String> {
    let too_late = s
        .trim()
        .parse::<f64>()
        .is_ok_and(|v| v >= u64::MAX as f64 / 1e9);
    crate::time::parse(s).filter(|_| !too_late).ok_or_else(|| {
        format!(
            "cannot read the time {s:?}: seconds since the epoch or YYYY-MM-DD[THH:MM:SS[.frac]][Z], \
             UTC, from 1970 to 2554"
        )
    })
}

/// A packet count (`-c`): at least 1, as tcpdump ("invalid packet count 0").
pub fn count(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) | Err(_) => Err(format!(
            "invalid packet count {s} (must be from 1 to {})",
            u64::MAX
        )),
        Ok(n) => Ok(n),
    }
}

/// A snap length: 1 to 262144 bytes, and 0 for the whole packet (262144), as tcpdump.
pub fn snaplen(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Ok(MAX_SNAPLEN),
        Ok(n) if n <= MAX_SNAPLEN => Ok(n),
        _ => Err(format!(
            "invalid snaplen {s} (must be from 0 to {MAX_SNAPLEN}; 0 is the whole packet)"
        )),
    }
}

fn power_of_two(s: &str, what: &str, lo: u64, hi: u64) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n.is_power_of_two() && (lo..=hi).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s} is not a valid {what}: a power of two from {lo} to {hi}"
        )),
    }
}

/// The shared packet buffer in MiB: a power of two from 1 to 65536 (64 GiB).
pub fn buffer_mib(s: &str) -> Result<usize, String> {
    power_of_two(s, "buffer size in MiB", 1, 1 << 16).map(|n| n as usize)
}

/// A ring block in bytes: a power of two from 4096 (a page) to 1 GiB.
pub fn block_size(s: &str) -> Result<u32, String> {
    power_of_two(s, "ring block size in bytes", 4096, 1 << 30).map(|n| n as u32)
}

/// Nanoseconds of a duration in seconds (already in range: [`seconds`]), rounded to the
/// nearest (0.0000000015 s is 2 ns, not 1).
pub fn ns(seconds: f64) -> u64 {
    (seconds * 1e9).round() as u64
}

/// A duration in seconds ([`seconds`]: finite, 1 ns to 10⁹ s) as nanoseconds ([`ns`]): the one
/// parser of every option given in seconds and held in ns.
pub fn seconds_ns(s: &str) -> Result<u64, String> {
    seconds(s).map(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_finite_and_in_range() {
        for bad in [
            "-1", "nan", "NaN", "inf", "-inf", "1e30", "0", "", "x", "1e-10",
        ] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds("0.5"), Ok(0.5));
        assert_eq!(seconds("1e9"), Ok(1e9));
        assert!(pps("0").is_err() && pps("inf").is_err() && pps("2e9").is_err());
        assert_eq!(count("1"), Ok(1));
        assert!(count("0").is_err() && count("-1").is_err());
        assert_eq!(snaplen("0"), Ok(MAX_SNAPLEN));
        assert_eq!(snaplen("96"), Ok(96));
        assert!(snaplen("262145").is_err() && snaplen("-1").is_err());
        assert_eq!(buffer_mib("64"), Ok(64));
        assert!(buffer_mib("0").is_err() && buffer_mib("3").is_err());
        assert!(buffer_mib("131072").is_err());
        assert!(block_size("2048").is_err() && block_size("4096").is_ok());
        assert_eq!(ns(1.5), 1_500_000_000);
    }

    /// Seconds become ns rounded, not truncated: by hand, 0.0000000015 s = 1.5 ns → 2 (1.5e-9
    /// × 1e9 is exactly 1.5 in f64, which rounds away from zero); 0.0000000019 s = 1.9 ns → 2;
    /// 2.9999999999 s = 2 999 999 999.9 ns → 3 000 000 000; 1e-9 s → 1 ns; 10⁹ s → 10¹⁸ ns.
    /// Truncation gave 1, 1 and 2 999 999 999.
    #[test]
    fn seconds_become_rounded_nanoseconds() {
        assert_eq!(seconds_ns("0.0000000015"), Ok(2));
        assert_eq!(seconds_ns("0.0000000019"), Ok(2));
        assert_eq!(seconds_ns("2.9999999999"), Ok(3_000_000_000));
        assert_eq!(seconds_ns("1e-9"), Ok(1));
        assert_eq!(seconds_ns("1e9"), Ok(1_000_000_000_000_000_000));
        assert!(seconds_ns("nan").is_err() && seconds_ns("-3").is_err());
    }
}
