//! The part of SDP (RFC 8866, RFC 3264 offer/answer) that says where a call's media goes:
//! connection addresses (`c=`, session and media level), media lines (`m=` port, protocol,
//! payload types), `a=rtpmap` (codec name and clock rate of dynamic payload types) and
//! `a=rtcp` (RFC 3605 RTCP port). Lines that do not parse are skipped; nothing panics.

use std::net::IpAddr;

/// A codec mapping from `a=rtpmap:PT NAME/RATE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RtpMap {
    /// Payload type.
    pub pt: u8,
    /// Encoding name as written (`PCMU`, `telephone-event`, `opus`...).
    pub name: String,
    /// Clock rate in Hz.
    pub rate: u32,
}

/// One `m=` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Media {
    /// Media type (`audio`, `video`...).
    pub kind: String,
    /// Address RTP is to be sent to (media-level `c=`, else session-level).
    pub addr: Option<IpAddr>,
    /// RTP port (0: the stream is refused or disabled).
    pub port: u16,
    /// RTCP port: `a=rtcp` or port + 1.
    pub rtcp_port: u16,
    /// Transport protocol (`RTP/AVP`, `RTP/SAVP`...).
    pub proto: String,
    /// Payload types offered, in preference order.
    pub pts: Vec<u8>,
    /// rtpmap lines of this section.
    pub rtpmap: Vec<RtpMap>,
}

/// A parsed session description.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sdp {
    /// The media sections.
    pub media: Vec<Media>,
}

fn conn_addr(v: &str) -> Option<IpAddr> {
    // c=IN IP4 192.0.2.1[/ttl[/n]]
    let mut it = v.split_ascii_whitespace();
    let _net = it.next()?;
    let _ty = it.next()?;
    let a = it.next()?;
    a.split('/').next()?.parse().ok()
}

/// Parses a session description; sections without a usable port are kept (port 0).
pub fn parse(body: &[u8]) -> Sdp {
    let text = String::from_utf8_lossy(body);
    let mut session_addr = None;
    let mut sdp = Sdp::default();
    for raw in text.lines() {
        let line = raw.trim_end_matches('\r');
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        match k.trim() {
            "c" => {
                let a = conn_addr(v);
                match sdp.media.last_mut() {
                    Some(m) => m.addr = a.or(m.addr),
                    None => session_addr = a,
                }
            }
            "m" => {
                let mut it = v.split_ascii_whitespace();
                let kind = it.next().unwrap_or("").to_string();
                let port: u16 = it
                    .next()
                    .and_then(|p| p.split('/').next())
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
                let proto = it.next().unwrap_or("").to_string();
                let pts = it
                    .filter_map(|p| p.parse().ok())
                    .filter(|&p| p < 128)
                    .collect();
                sdp.media.push(Media {
                    kind,
                    addr: session_addr,
                    port,
                    rtcp_port: port.wrapping_add(1),
                    proto,
                    pts,
                    rtpmap: Vec::new(),
                });
            }
            "a" => {
                let Some(m) = sdp.media.last_mut() else {
                    continue;
                };
                if let Some(r) = v.strip_prefix("rtpmap:") {
                    let mut it = r.split_ascii_whitespace();
                    let pt = it.next().and_then(|p| p.parse::<u8>().ok());
                    let enc = it.next();
                    if let (Some(pt), Some(enc)) = (pt, enc) {
                        let mut e = enc.split('/');
                        let name = e.next().unwrap_or("").to_string();
                        let rate = e.next().and_then(|r| r.parse().ok()).unwrap_or(0);
                        if pt < 128 {
                            m.rtpmap.push(RtpMap { pt, name, rate });
                        }
                    }
                } else if let Some(r) = v.strip_prefix("rtcp:") {
                    if let Some(p) = r
                        .split_ascii_whitespace()
                        .next()
                        .and_then(|p| p.parse().ok())
                    {
                        m.rtcp_port = p;
                    }
                }
            }
            _ => {}
        }
    }
    sdp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offer_with_session_and_media_addresses() {
        let s = parse(
            b"v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n\
m=audio 49170 RTP/AVP 0 8 101\r\na=rtpmap:101 telephone-event/8000\r\na=rtcp:49200\r\n\
m=video 0 RTP/AVP 31\r\nc=IN IP6 2001:db8::1\r\n",
        );
        assert_eq!(s.media.len(), 2);
        let a = &s.media[0];
        assert_eq!(a.addr, Some("10.0.0.1".parse().unwrap()));
        assert_eq!((a.port, a.rtcp_port), (49170, 49200));
        assert_eq!(a.pts, vec![0, 8, 101]);
        assert_eq!(a.rtpmap[0].name, "telephone-event");
        assert_eq!(a.rtpmap[0].rate, 8000);
        assert_eq!(s.media[1].port, 0);
        assert_eq!(s.media[1].addr, Some("2001:db8::1".parse().unwrap()));
    }

    #[test]
    fn garbage_is_empty() {
        assert_eq!(
            parse(b"\xff\xfe=m=\nm=\nm=audio 99999999 x\n").media[0].port,
            0
        );
        assert_eq!(parse(b"").media.len(), 0);
    }
}
