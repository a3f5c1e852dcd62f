//! Human output: a one-line, tcpdump-like summary of a decoded frame (as `tcpdump -n` prints it,
//! with VLAN, MPLS, PPPoE and tunnel headers as prefixes), and the protocol name used in
//! protocol-mix tables.

use core::fmt;

use crate::{
    arp, ethertype, icmp, ip_proto, ppp, tcp, vxlan, ArpPacket, Decoded, IcmpPacket, Layer,
    TcpPacket,
};

/// A frame's one-line summary; build it with [`summary`] and print it with `{}`.
#[derive(Clone, Copy, Debug)]
pub struct Summary<'a> {
    d: &'a Decoded<'a>,
}

/// A tcpdump-like one-line summary of a decoded frame, e.g.
/// `IP 10.0.0.1.1234 > 10.0.0.2.80: Flags [S], seq 1, win 65535, length 0`. When decoding
/// stopped early, a tcpdump-style marker and the error end the line:
/// `IP 10.0.0.1 > 10.0.0.2: [|tcp] (truncated TCP header at byte 34)`.
pub fn summary<'a>(d: &'a Decoded<'a>) -> Summary<'a> {
    Summary { d }
}

impl fmt::Display for Decoded<'_> {
    /// Same as [`summary`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        summary(self).fmt(f)
    }
}

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.d;
        let layers = d.layers();
        // what goes before the next piece of text; "" until something is written
        let mut sep = "";
        let mut wrote = false;
        for (i, l) in layers.iter().enumerate() {
            let prev = i.checked_sub(1).map(|j| &layers[j]);
            let next = layers.get(i + 1);
            // silent layers, as tcpdump -n without -e
            match l {
                Layer::Ethernet(_)
                | Layer::Loopback { .. }
                | Layer::LinuxSll(_)
                | Layer::LinuxSll2(_)
                | Layer::Ipv6Ext { .. } => continue,
                Layer::Ppp(p)
                    if matches!(
                        p.protocol(),
                        ppp::protocol::IPV4
                            | ppp::protocol::IPV6
                            | ppp::protocol::MPLS
                            | ppp::protocol::MPLS_MC
                    ) =>
                {
                    continue
                }
                Layer::Chdlc(h) if matches!(h.protocol(), ethertype::IPV4 | ethertype::IPV6) => {
                    continue
                }
                Layer::Udp(_) if matches!(next, Some(Layer::Vxlan(_))) => continue,
                Layer::Mpls(_) if matches!(prev, Some(Layer::Mpls(_))) => f.write_str(" ")?,
                _ => f.write_str(sep)?,
            }
            wrote = true;
            sep = match l {
                Layer::Llc(h) => {
                    write!(
                        f,
                        "LLC dsap 0x{:02x} ssap 0x{:02x} ctrl 0x{:02x}",
                        h.dsap(),
                        h.ssap(),
                        h.control()
                    )?;
                    ", "
                }
                Layer::Snap(s) => {
                    write!(f, "SNAP oui 0x{:06x} pid 0x{:04x}", s.oui(), s.protocol())?;
                    ", "
                }
                Layer::Vlan { tpid, tag } => {
                    let name = match *tpid {
                        ethertype::VLAN => "802.1Q",
                        ethertype::QINQ_8021AD => "802.1ad",
                        _ => "QinQ",
                    };
                    write!(f, "{name} vlan {}, p {}", tag.vid(), tag.pcp())?;
                    ", "
                }
                Layer::Mpls(m) => {
                    if !matches!(prev, Some(Layer::Mpls(_))) {
                        f.write_str("MPLS ")?;
                    }
                    let s = if m.bottom() { ", [S]" } else { "" };
                    write!(
                        f,
                        "(label {}, tc {}{s}, ttl {})",
                        m.label(),
                        m.tc(),
                        m.ttl()
                    )?;
                    " "
                }
                Layer::Pppoe(h) if h.code() == ppp::PPPOE_CODE_SESSION => {
                    write!(f, "PPPoE [ses 0x{:x}]", h.session_id())?;
                    " "
                }
                Layer::Pppoe(h) => {
                    let code = match h.code() {
                        0x09 => "PADI",
                        0x07 => "PADO",
                        0x19 => "PADR",
                        0x65 => "PADS",
                        0xa7 => "PADT",
                        _ => "code",
                    };
                    write!(
                        f,
                        "PPPoE {code} 0x{:02x} [ses 0x{:x}]",
                        h.code(),
                        h.session_id()
                    )?;
                    ", "
                }
                Layer::Ppp(p) => {
                    write!(f, "PPP proto 0x{:04x}", p.protocol())?;
                    ", "
                }
                Layer::Chdlc(h) => {
                    write!(f, "CHDLC proto 0x{:04x}", h.protocol())?;
                    ", "
                }
                Layer::Arp(a) => {
                    write_arp(f, a)?;
                    ""
                }
                Layer::Ipv4(p) => {
                    let (sp, dp) = ports_after(layers, i);
                    write!(f, "IP {}{sp} > {}{dp}", p.src_addr(), p.dst_addr())?;
                    ": "
                }
                Layer::Ipv6(p) => {
                    let (sp, dp) = ports_after(layers, i);
                    write!(f, "IP6 {}{sp} > {}{dp}", p.src_addr(), p.dst_addr())?;
                    ": "
                }
                Layer::Tcp(t) => {
                    write_tcp(f, t)?;
                    ""
                }
                Layer::Udp(u) => {
                    let n = if u.len() >= 8 {
                        usize::from(u.len() - 8)
                    } else {
                        u.payload().len()
                    };
                    write!(f, "UDP, length {n}")?;
                    ""
                }
                Layer::Icmp(c) => {
                    write_icmp(f, c, false)?;
                    ""
                }
                Layer::Icmpv6(c) => {
                    write_icmp(f, c, true)?;
                    ""
                }
                Layer::Sctp(s) => {
                    write!(
                        f,
                        "SCTP, vtag 0x{:x}, length {}",
                        s.verification_tag(),
                        s.payload().len()
                    )?;
                    ""
                }
                Layer::Gre(g) => {
                    write!(f, "GREv{}", g.version())?;
                    if let Some(k) = g.key() {
                        write!(f, ", key=0x{k:x}")?;
                    }
                    if let Some(s) = g.seq_number() {
                        write!(f, ", seq {s}")?;
                    }
                    if let Some(a) = g.ack_number() {
                        write!(f, ", ack {a}")?;
                    }
                    write!(
                        f,
                        ", proto 0x{:04x}, length {}",
                        g.protocol(),
                        g.as_bytes().len()
                    )?;
                    ": "
                }
                Layer::Erspan(e) => {
                    write!(
                        f,
                        "ERSPAN type {}, session {}, vlan {}",
                        e.erspan_type(),
                        e.session_id(),
                        e.vlan()
                    )?;
                    ": "
                }
                Layer::Vxlan(v) => {
                    let i = if v.flags() & vxlan::FLAG_I != 0 {
                        "I"
                    } else {
                        "."
                    };
                    write!(
                        f,
                        "VXLAN, flags [{i}] (0x{:02x}), vni {}",
                        v.flags(),
                        v.vni()
                    )?;
                    ": "
                }
                Layer::Payload(p) => {
                    write_payload(f, d, prev, p)?;
                    ""
                }
                // silent ones were skipped above
                Layer::Ethernet(_)
                | Layer::Loopback { .. }
                | Layer::LinuxSll(_)
                | Layer::LinuxSll2(_)
                | Layer::Ipv6Ext { .. } => sep,
            };
        }
        if let Some(e) = d.error() {
            if wrote {
                f.write_str(if sep.is_empty() { " " } else { sep })?;
            }
            write!(f, "[|{}] ({e})", e.layer.marker())?;
        }
        Ok(())
    }
}

/// `(".sport", ".dport")` when the transport header after the IP layer at `i` has ports.
fn ports_after(layers: &[Layer<'_>], i: usize) -> (PortFmt, PortFmt) {
    let t = layers[i + 1..]
        .iter()
        .find(|l| !matches!(l, Layer::Ipv6Ext { .. }));
    match t {
        Some(Layer::Tcp(t)) => (PortFmt(Some(t.src_port())), PortFmt(Some(t.dst_port()))),
        Some(Layer::Udp(u)) => (PortFmt(Some(u.src_port())), PortFmt(Some(u.dst_port()))),
        Some(Layer::Sctp(s)) => (PortFmt(Some(s.src_port())), PortFmt(Some(s.dst_port()))),
        _ => (PortFmt(None), PortFmt(None)),
    }
}

struct PortFmt(Option<u16>);

impl fmt::Display for PortFmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(p) => write!(f, ".{p}"),
            None => Ok(()),
        }
    }
}

fn write_tcp(f: &mut fmt::Formatter<'_>, t: &TcpPacket<&[u8]>) -> fmt::Result {
    f.write_str("Flags [")?;
    let flags = t.flags();
    if flags == 0 {
        f.write_str("none")?;
    }
    for (bit, c) in [
        (tcp::FIN, 'F'),
        (tcp::SYN, 'S'),
        (tcp::RST, 'R'),
        (tcp::PSH, 'P'),
        (tcp::ACK, '.'),
        (tcp::URG, 'U'),
        (tcp::ECE, 'E'),
        (tcp::CWR, 'W'),
    ] {
        if flags & bit != 0 {
            fmt::Write::write_char(f, c)?;
        }
    }
    let len = t.payload().len();
    let seq = t.seq_number();
    if len > 0 {
        write!(f, "], seq {seq}:{}", seq.wrapping_add(len as u32))?;
    } else {
        write!(f, "], seq {seq}")?;
    }
    if t.ack() {
        write!(f, ", ack {}", t.ack_number())?;
    }
    write!(f, ", win {}", t.window())?;
    if t.urg() {
        write!(f, ", urg {}", t.urgent())?;
    }
    write!(f, ", length {len}")
}

fn icmp_name(t: u8) -> Option<&'static str> {
    Some(match t {
        icmp::ECHO_REPLY => "echo reply",
        3 => "destination unreachable",
        4 => "source quench",
        5 => "redirect",
        icmp::ECHO_REQUEST => "echo request",
        9 => "router advertisement",
        10 => "router solicitation",
        11 => "time exceeded",
        12 => "parameter problem",
        13 => "time stamp request",
        14 => "time stamp reply",
        _ => return None,
    })
}

fn icmpv6_name(t: u8) -> Option<&'static str> {
    Some(match t {
        1 => "destination unreachable",
        2 => "packet too big",
        3 => "time exceeded",
        4 => "parameter problem",
        icmp::ECHO_REQUEST_V6 => "echo request",
        icmp::ECHO_REPLY_V6 => "echo reply",
        130 => "multicast listener query",
        131 => "multicast listener report",
        132 => "multicast listener done",
        133 => "router solicitation",
        134 => "router advertisement",
        135 => "neighbor solicitation",
        136 => "neighbor advertisement",
        137 => "redirect",
        143 => "multicast listener report v2",
        _ => return None,
    })
}

fn write_icmp(f: &mut fmt::Formatter<'_>, c: &IcmpPacket<&[u8]>, v6: bool) -> fmt::Result {
    let (t, code) = (c.msg_type(), c.code());
    let name = if v6 { icmpv6_name(t) } else { icmp_name(t) };
    f.write_str(if v6 { "ICMP6, " } else { "ICMP " })?;
    match name {
        Some(n) => f.write_str(n)?,
        None => write!(f, "type {t}")?,
    }
    if code != 0 || name.is_none() {
        write!(f, ", code {code}")?;
    }
    let echo = if v6 {
        matches!(t, icmp::ECHO_REQUEST_V6 | icmp::ECHO_REPLY_V6)
    } else {
        matches!(t, icmp::ECHO_REQUEST | icmp::ECHO_REPLY)
    };
    if echo {
        if let Some((id, seq)) = c.echo_ident_seq() {
            write!(f, ", id {id}, seq {seq}")?;
        }
    }
    write!(f, ", length {}", c.as_bytes().len())
}

fn write_arp(f: &mut fmt::Formatter<'_>, a: &ArpPacket<&[u8]>) -> fmt::Result {
    let len = a.as_bytes().len();
    let op = a.operation();
    match (a.sender_ethernet_ipv4(), a.target_ethernet_ipv4()) {
        (Some((sha, spa)), Some((tha, tpa))) => match op {
            arp::OP_REQUEST => write!(f, "ARP, Request who-has {tpa} tell {spa}, length {len}"),
            arp::OP_REPLY => write!(f, "ARP, Reply {spa} is-at {sha}, length {len}"),
            3 => write!(f, "RARP, Request who-is {tha} tell {sha}, length {len}"),
            4 => write!(f, "RARP, Reply {tha} at {tpa}, length {len}"),
            _ => write!(f, "ARP, opcode {op}, length {len}"),
        },
        _ => write!(
            f,
            "ARP, hardware type {}, protocol 0x{:04x}, opcode {op}, length {len}",
            a.hardware_type(),
            a.protocol_type()
        ),
    }
}

fn write_ethertype(f: &mut fmt::Formatter<'_>, t: u16, len: usize) -> fmt::Result {
    match ethertype::name(t) {
        Some(n) => write!(f, "{n} (0x{t:04x}), length {len}"),
        None => write!(f, "ethertype 0x{t:04x}, length {len}"),
    }
}

fn write_payload(
    f: &mut fmt::Formatter<'_>,
    d: &Decoded<'_>,
    prev: Option<&Layer<'_>>,
    p: &[u8],
) -> fmt::Result {
    let len = p.len();
    match prev {
        Some(Layer::Ethernet(e)) => write_ethertype(f, e.ethertype(), len),
        Some(Layer::Vlan { tag, .. }) => write_ethertype(f, tag.ethertype(), len),
        Some(Layer::LinuxSll(h)) => write_ethertype(f, h.protocol(), len),
        Some(Layer::LinuxSll2(h)) => write_ethertype(f, h.protocol(), len),
        Some(Layer::Gre(g)) => write_ethertype(f, g.protocol(), len),
        Some(Layer::Loopback { family }) => write!(f, "family {family}, length {len}"),
        Some(Layer::Ipv4(_) | Layer::Ipv6(_) | Layer::Ipv6Ext { .. }) => {
            let Some(ip) = d.ip() else {
                return write!(f, "length {len}");
            };
            let name = ProtoFmt(ip.proto);
            match ip.fragment {
                Some(fr) => {
                    let more = if fr.more { "+" } else { "" };
                    write!(
                        f,
                        "{name} fragment (id {}, offset {}{more}), length {len}",
                        fr.id, fr.offset
                    )
                }
                _ if ip.proto == ip_proto::ESP && len >= 8 => write!(
                    f,
                    "ESP(spi=0x{:08x},seq=0x{:x}), length {len}",
                    u32::from_be_bytes([p[0], p[1], p[2], p[3]]),
                    u32::from_be_bytes([p[4], p[5], p[6], p[7]])
                ),
                _ => write!(f, "{name}, length {len}"),
            }
        }
        _ => write!(f, "length {len}"),
    }
}

struct ProtoFmt(u8);

impl fmt::Display for ProtoFmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match ip_proto::name(self.0) {
            Some(n) => f.write_str(n),
            None => write!(f, "ip-proto-{}", self.0),
        }
    }
}

/// The innermost protocol of a frame, for a protocol-mix table: `"TCP"`, `"UDP"`, `"ICMP"`,
/// `"ICMPv6"`, `"SCTP"`, `"GRE"`, `"ARP"`, `"IPv4-other"`, `"IPv6-other"` or `"other"`. A
/// fragment or a cut transport header still counts by the IP header's protocol; a GRE tunnel
/// counts by what it carries when that was decoded.
pub fn protocol_name(d: &Decoded<'_>) -> &'static str {
    for l in d.layers().iter().rev() {
        return match l {
            Layer::Tcp(_) => "TCP",
            Layer::Udp(_) => "UDP",
            Layer::Icmp(_) => "ICMP",
            Layer::Icmpv6(_) => "ICMPv6",
            Layer::Sctp(_) => "SCTP",
            Layer::Gre(_) => "GRE",
            Layer::Arp(_) => "ARP",
            Layer::Ipv4(_) | Layer::Ipv6(_) => match d.ip() {
                Some(ip) => match ip.proto {
                    ip_proto::TCP => "TCP",
                    ip_proto::UDP => "UDP",
                    ip_proto::ICMP => "ICMP",
                    ip_proto::ICMPV6 => "ICMPv6",
                    ip_proto::SCTP => "SCTP",
                    ip_proto::GRE => "GRE",
                    _ if ip.version == 4 => "IPv4-other",
                    _ => "IPv6-other",
                },
                None => "other",
            },
            _ => continue,
        };
    }
    "other"
}
