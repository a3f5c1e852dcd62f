//! Nanosecond Unix timestamps as UTC text, without a calendar crate ([`Utc`]): a date and time
//! (`weir info`, `weir ls`), a time of day (packet lines, as tcpdump), and back from what a user
//! types (`weir extract --from`).

use crate::Utc;

/// Formats `ts_ns` as `YYYY-MM-DD HH:MM:SS.nnnnnnnnn` (UTC).
pub fn datetime(ts_ns: u64) -> String {
    let (date, time) = split(ts_ns);
    format!("{date} {time}")
}

/// Formats `ts_ns` as `HH:MM:SS.nnnnnnnnn` (UTC), the way tcpdump prints a packet's time.
pub fn time_of_day(ts_ns: u64) -> String {
    split(ts_ns).1
}

/// Parses a point in time as a person gives it: seconds since the epoch (`1700000000.5`)
/// or a UTC date and time (`2023-11-14T22:13:20Z`, `2023-11-14 22:13:20.25`, `2023-11-14`).
pub fn parse(text: &str) -> Option<u64> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| (secs * 1e9).round() as u64);
    }
    let t = t.strip_suffix('Z').unwrap_or(t);
    let (date, time) = t.split_once(['T', ' ']).unwrap_or((t, "00:00:00"));
    let mut d = date.splitn(3, '-');
    let (year, month, day) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut h = hms.splitn(3, ':');
    let (hour, minute) = (h.next()?.parse().ok()?, h.next()?.parse().ok()?);
    let second = h.next().map_or(Some(0), |s| s.parse().ok())?;
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    Utc {
        year,
        month,
        day,
        hour,
        minute,
        second,
        nanos,
    }
    .to_ns()
}

fn split(ts_ns: u64) -> (String, String) {
    let u = Utc::from_ns(ts_ns);
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
    fn parses_what_it_prints() {
        for ns in [0, 1_700_000_000_000_000_123, 951_782_400_000_000_000] {
            let text = datetime(ns).replace(' ', "T") + "Z";
            assert_eq!(parse(&text), Some(ns), "{text}");
        }
        assert_eq!(parse("1700000000.5"), Some(1_700_000_000_500_000_000));
        assert_eq!(parse("2023-11-14"), Some(1_699_920_000_000_000_000));
        assert_eq!(
            parse("2023-11-14 22:13:20.25"),
            Some(1_700_000_000_250_000_000)
        );
        for bad in ["", "yesterday", "2023-13-01", "2023-11-14T25:00:00", "-5"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

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
