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
    let secs = ts_ns / 1_000_000_000;
    let nanos = ts_ns % 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    (
        format!("{y:04}-{m:02}-{d:02}"),
        format!(
            "{:02}:{:02}:{:02}.{nanos:09}",
            rem / 3600,
            rem / 60 % 60,
            rem % 60
        ),
    )
}

/// Days since 1970-01-01 to (year, month, day); Howard Hinnant's `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
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
