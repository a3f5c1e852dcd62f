//! Formatting nanosecond Unix timestamps as UTC dates, without a calendar crate.

/// Formats `ts_ns` as `YYYY-MM-DD HH:MM:SS.nnnnnnnnn` (UTC).
pub fn datetime(ts_ns: u64) -> String {
    let (date, time) = split(ts_ns);
    format!("{date} {time}")
}

/// Formats `ts_ns` as `HH:MM:SS.nnnnnnnnn` (UTC), the way tcpdump prints a packet's time.
pub fn time_of_day(ts_ns: u64) -> String {
    split(ts_ns).1
}

fn split(ts_ns: u64) -> (String, String) {
    let u = weir_packet::Utc::from_ns(ts_ns);
    (
        format!("{:04}-{:02}-{:02}", u.year, u.month, u.day),
        format!(
            "{:02}:{:02}:{:02}.{:09}",
            u.hour, u.minute, u.second, u.nanos
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        // `date -u -d @0` and `date -u -d @1700000000` computed by hand with GNU date.
        assert_eq!(datetime(0), "1970-01-01 00:00:00.000000000");
        assert_eq!(
            datetime(1_700_000_000_000_000_123),
            "2023-11-14 22:13:20.000000123"
        );
        assert_eq!(
            datetime(951_782_400_000_000_000),
            "2000-02-29 00:00:00.000000000"
        );
    }
}
