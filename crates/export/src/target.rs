//! Where exported flows go: UDP collectors, a file, or stdout; parsed from the command line.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;

use crate::ExportError;

/// The default NetFlow/IPFIX collector (nfcapd's and most collectors' usual port).
pub const DEFAULT_COLLECTOR: &str = "127.0.0.1:2055";

/// An export destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// UDP to each of these collectors (every datagram goes to all of them).
    Udp(Vec<SocketAddr>),
    /// A file, created or truncated.
    File(PathBuf),
    /// Standard output.
    Stdout,
}

impl FromStr for Target {
    type Err = ExportError;

    /// Parses `udp://HOST:PORT[,HOST:PORT...]`, each further collector with or without its own
    /// `udp://` (`udp://A:1,udp://B:2` as the help shows, or `udp://A:1,B:2`; IPv6 literals in
    /// brackets, host names resolved to their first address), a bare `HOST:PORT` socket address (also UDP, so
    /// [`DEFAULT_COLLECTOR`] parses), `file:PATH` or `file://PATH`, `-` for stdout, and any other
    /// string as a file path.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| ExportError::BadTarget {
            target: s.to_string(),
            reason: reason.to_string(),
        };
        if s == "-" {
            return Ok(Target::Stdout);
        }
        if let Some(list) = s.strip_prefix("udp://") {
            let mut addrs = Vec::new();
            for part in list.split(',') {
                let part = part.trim();
                let part = part
                    .strip_prefix("udp://")
                    .unwrap_or(part)
                    .trim_end_matches('/');
                if part.is_empty() {
                    return Err(bad("empty collector address"));
                }
                let addr = match part.parse::<SocketAddr>() {
                    Ok(a) => a,
                    Err(_) => part
                        .to_socket_addrs()
                        .map_err(|e| bad(&format!("{part}: cannot resolve: {e}")))?
                        .next()
                        .ok_or_else(|| bad(&format!("{part}: no address")))?,
                };
                if addr.port() == 0 {
                    return Err(bad(&format!("{part}: port 0 (a collector needs a port)")));
                }
                addrs.push(addr);
            }
            return Ok(Target::Udp(addrs));
        }
        if let Some(path) = s
            .strip_prefix("file://")
            .or_else(|| s.strip_prefix("file:"))
        {
            if path.is_empty() {
                return Err(bad("empty path"));
            }
            return Ok(Target::File(PathBuf::from(path)));
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(bad(&format!("unknown scheme {scheme:?} (udp:// or file:)")));
        }
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(Target::Udp(vec![addr]));
        }
        if s.is_empty() {
            return Err(bad("empty"));
        }
        Ok(Target::File(PathBuf::from(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp(list: &[&str]) -> Target {
        Target::Udp(list.iter().map(|a| a.parse().unwrap()).collect())
    }

    #[test]
    fn parses_every_form() {
        let t = |s: &str| s.parse::<Target>().unwrap();
        assert_eq!(t("udp://127.0.0.1:2055"), udp(&["127.0.0.1:2055"]));
        assert_eq!(t("udp://[::1]:9995"), udp(&["[::1]:9995"]));
        assert_eq!(
            t("udp://127.0.0.1:2055,[::1]:4739"),
            udp(&["127.0.0.1:2055", "[::1]:4739"])
        );
        assert_eq!(
            t("udp://127.0.0.1:2788,udp://127.0.0.1:3788"),
            udp(&["127.0.0.1:2788", "127.0.0.1:3788"]),
            "the form the help and README show"
        );
        assert_eq!(
            t("udp://127.0.0.1:2788, udp://[::1]:3788/,127.0.0.2:9"),
            udp(&["127.0.0.1:2788", "[::1]:3788", "127.0.0.2:9"])
        );
        assert_eq!(t(DEFAULT_COLLECTOR), udp(&["127.0.0.1:2055"]));
        assert_eq!(t("file:/tmp/x.nf"), Target::File("/tmp/x.nf".into()));
        assert_eq!(t("file:///tmp/x.nf"), Target::File("/tmp/x.nf".into()));
        assert_eq!(t("out.json"), Target::File("out.json".into()));
        assert_eq!(t("-"), Target::Stdout);
    }

    #[test]
    fn rejects_nonsense() {
        for s in [
            "",
            "udp://",
            "udp://1.2.3.4",
            "udp://1.2.3.4:0",
            "udp://1.2.3.4:5,",
            "udp://1.2.3.4:5,udp://",
            "udp://1.2.3.4:5,udp://1.2.3.4:0",
            "udp://1.2.3.4:5,tcp://1.2.3.4:6",
            "udp://no-such-host.invalid:2055",
            "tcp://1.2.3.4:5",
            "file:",
        ] {
            assert!(s.parse::<Target>().is_err(), "{s:?}");
        }
    }
}
