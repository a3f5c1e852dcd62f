//! MAC addresses of the frames sent on an interface: parsed from text (`02:00:00:00:00:01`),
//! the interface's own (sysfs), or a destination's from the neighbour table (`/proc/net/arp`).

use std::net::IpAddr;

use crate::GenError;

/// Parses `aa:bb:cc:dd:ee:ff` (hex, surrounding white space ignored).
pub fn parse_mac(s: &str) -> Result<[u8; 6], GenError> {
    let bad = |source| GenError::BadMac {
        text: s.to_string(),
        source,
    };
    let parts: Vec<&str> = s.trim().split(':').collect();
    if parts.len() != 6 {
        return Err(bad(None));
    }
    let mut m = [0u8; 6];
    for (d, p) in m.iter_mut().zip(parts) {
        *d = u8::from_str_radix(p, 16).map_err(|e| bad(Some(e)))?;
    }
    Ok(m)
}

/// The interface's own MAC address (from sysfs, so as seen from this thread's mounts).
pub fn interface_mac(iface: &str) -> Result<[u8; 6], GenError> {
    let s =
        std::fs::read_to_string(format!("/sys/class/net/{iface}/address")).map_err(|source| {
            GenError::NoAddress {
                iface: iface.to_string(),
                source,
            }
        })?;
    parse_mac(&s)
}

/// The neighbour entry of `ip` on `iface` (IPv4, from /proc/net/arp), if there is one.
pub fn neighbour_mac(iface: &str, ip: IpAddr) -> Option<[u8; 6]> {
    let table = std::fs::read_to_string("/proc/net/arp").ok()?;
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 6 && f[5] == iface && f[0].parse::<IpAddr>().ok() == Some(ip))
            .then(|| parse_mac(f[3]).ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_or_say_why_not() {
        assert_eq!(
            parse_mac(" 02:00:0a:ff:00:01\n").unwrap(),
            [2, 0, 10, 255, 0, 1]
        );
        assert_eq!(
            parse_mac("02:00").unwrap_err().to_string(),
            "bad MAC address '02:00'"
        );
        let e = parse_mac("zz:00:00:00:00:00").unwrap_err();
        assert_eq!(e.to_string(), "bad MAC address 'zz:00:00:00:00:00'");
        assert!(std::error::Error::source(&e).is_some());
    }
}
