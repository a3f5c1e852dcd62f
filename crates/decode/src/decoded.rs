//! [`Decoded`], the result of decoding one frame, and the flow meter's fast accessors over it
//! ([`IpInfo`], [`Transport`]).

use core::net::IpAddr;

use crate::{ip_proto, DecodeError, Ipv6FragmentHeader, Layer};

/// Most layers one frame may yield; a frame with more ends with [`ErrorKind::TooDeep`].
///
/// [`ErrorKind::TooDeep`]: crate::ErrorKind::TooDeep
pub const MAX_LAYERS: usize = 16;

/// Most tunnels (GRE, VXLAN, IP in IP) one frame may nest; the next one ends decoding with
/// [`ErrorKind::TooDeep`](crate::ErrorKind::TooDeep).
pub const MAX_TUNNELS: usize = 4;

/// Marks "no IP layer" in the index fields.
pub(crate) const NONE: u8 = u8::MAX;

/// The layers decoded from one frame, outermost first, with the error that stopped decoding, if
/// any. Fixed capacity (no heap), `Copy`, borrowing the frame.
#[derive(Clone, Copy)]
pub struct Decoded<'a> {
    pub(crate) layers: [Layer<'a>; MAX_LAYERS],
    pub(crate) len: u8,
    /// Index of the innermost IPv4/IPv6 layer, or `NONE`.
    pub(crate) inner_ip: u8,
    pub(crate) clipped: bool,
    pub(crate) error: Option<DecodeError>,
}

/// Fragmentation fields of an IPv4 fragment, or of an IPv6 packet with a fragment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fragment {
    /// Identification (16 bits for IPv4, 32 for IPv6).
    pub id: u32,
    /// Offset of this fragment's data in the original payload, in bytes.
    pub offset: u16,
    /// More fragments follow.
    pub more: bool,
}

/// The fields of one IP header the flow meter needs, from IPv4 or IPv6 alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpInfo {
    /// 4 or 6.
    pub version: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Upper-layer protocol: for IPv6, the next header after the extension headers that were
    /// decoded (so TCP behind a hop-by-hop header reads 6).
    pub proto: u8,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// IPv4 type of service or IPv6 traffic class.
    pub tos: u8,
    /// The packet's length as its header states it: IPv4 total length, IPv6 payload length + 40.
    /// May exceed the captured bytes.
    pub len: u32,
    /// IPv6 flow label (0 for IPv4).
    pub flow_label: u32,
    /// IPv4 don't-fragment flag (false for IPv6).
    pub dont_fragment: bool,
    /// Set for IPv4 fragments (MF or offset ≠ 0) and IPv6 packets with a fragment header.
    pub fragment: Option<Fragment>,
}

impl IpInfo {
    /// True for a fragment that is not the first (its transport header is elsewhere).
    #[inline]
    pub fn is_later_fragment(&self) -> bool {
        matches!(self.fragment, Some(f) if f.offset != 0)
    }
}

/// The transport header of the innermost IP packet, in the shape the flow meter wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport<'a> {
    /// TCP.
    Tcp {
        /// Source port.
        src: u16,
        /// Destination port.
        dst: u16,
        /// The eight classic flag bits (see [`tcp::SYN`](crate::tcp::SYN)...).
        flags: u8,
        /// Sequence number.
        seq: u32,
        /// Acknowledgement number.
        ack: u32,
        /// Window (unscaled).
        window: u16,
        /// Header length in bytes.
        hdr_len: u8,
        /// Payload.
        payload: &'a [u8],
    },
    /// UDP.
    Udp {
        /// Source port.
        src: u16,
        /// Destination port.
        dst: u16,
        /// The UDP length field.
        len: u16,
        /// Payload (clamped to the length field and the capture).
        payload: &'a [u8],
    },
    /// ICMP for IPv4.
    Icmp {
        /// Message type.
        icmp_type: u8,
        /// Message code.
        code: u8,
    },
    /// ICMPv6.
    Icmpv6 {
        /// Message type.
        icmp_type: u8,
        /// Message code.
        code: u8,
    },
    /// SCTP.
    Sctp {
        /// Source port.
        src: u16,
        /// Destination port.
        dst: u16,
        /// Verification tag.
        vtag: u32,
    },
    /// Any other protocol, by number (GRE whose inner packet is not IP, ESP, OSPF...).
    Other(u8),
}

impl core::fmt::Debug for Decoded<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // only the live layers: a reused `Decoded` keeps stale ones past `len`
        f.debug_struct("Decoded")
            .field("layers", &self.layers())
            .field("error", &self.error)
            .field("clipped", &self.clipped)
            .finish()
    }
}

impl Default for Decoded<'_> {
    fn default() -> Self {
        Decoded::new()
    }
}

impl Transport<'_> {
    /// Source and destination ports for TCP, UDP and SCTP.
    #[inline]
    pub fn ports(&self) -> Option<(u16, u16)> {
        match *self {
            Transport::Tcp { src, dst, .. }
            | Transport::Udp { src, dst, .. }
            | Transport::Sctp { src, dst, .. } => Some((src, dst)),
            _ => None,
        }
    }

    /// The IP protocol number.
    #[inline]
    pub fn proto(&self) -> u8 {
        match *self {
            Transport::Tcp { .. } => ip_proto::TCP,
            Transport::Udp { .. } => ip_proto::UDP,
            Transport::Icmp { .. } => ip_proto::ICMP,
            Transport::Icmpv6 { .. } => ip_proto::ICMPV6,
            Transport::Sctp { .. } => ip_proto::SCTP,
            Transport::Other(p) => p,
        }
    }
}

impl<'a> Decoded<'a> {
    /// An empty result (no layers, no error), to fill with [`decode_into`](crate::decode_into).
    #[inline]
    pub const fn new() -> Self {
        Decoded {
            layers: [Layer::Payload(&[]); MAX_LAYERS],
            len: 0,
            inner_ip: NONE,
            clipped: false,
            error: None,
        }
    }

    /// Forgets the layers and the error. The stale layers past `len` stay in the array, out of
    /// reach of every accessor, so nothing needs clearing.
    #[inline]
    pub(crate) fn reset(&mut self) {
        self.len = 0;
        self.inner_ip = NONE;
        self.clipped = false;
        self.error = None;
    }

    /// The layers found, outermost first.
    #[inline]
    pub fn layers(&self) -> &[Layer<'a>] {
        &self.layers[..self.len as usize]
    }

    /// What stopped decoding early, if anything. The layer it names is not in
    /// [`layers`](Self::layers); every layer before it is.
    #[inline]
    pub fn error(&self) -> Option<DecodeError> {
        self.error
    }

    /// True when a length field (IPv4 total length, IPv6 payload length, UDP, PPPoE or 802.3
    /// length) claimed more bytes than were captured, and the data was clamped. Not an error:
    /// with the capture record, `caplen < orig_len` says the snap length did it; otherwise the
    /// packet lies about its length.
    #[inline]
    pub fn clipped(&self) -> bool {
        self.clipped
    }

    /// The innermost IP header: after tunnels (GRE, VXLAN, IP in IP), the inner packet's, since
    /// that is the conversation a flow meter accounts; [`outer_ip`](Self::outer_ip) gives the
    /// tunnel endpoints. `None` when no IP header was decoded.
    #[inline]
    pub fn ip(&self) -> Option<IpInfo> {
        self.ip_at(self.inner_ip as usize)
    }

    /// The outermost IP header (the tunnel endpoints when there is a tunnel).
    pub fn outer_ip(&self) -> Option<IpInfo> {
        let i = self
            .layers()
            .iter()
            .position(|l| matches!(l, Layer::Ipv4(_) | Layer::Ipv6(_)))?;
        self.ip_at(i)
    }

    /// Index in [`layers`](Self::layers) of the innermost IP header.
    #[inline]
    pub fn ip_index(&self) -> Option<usize> {
        (self.inner_ip != NONE).then_some(self.inner_ip as usize)
    }

    fn ip_at(&self, i: usize) -> Option<IpInfo> {
        match self.layers().get(i)? {
            Layer::Ipv4(p) => Some(IpInfo {
                version: 4,
                src: IpAddr::V4(p.src_addr()),
                dst: IpAddr::V4(p.dst_addr()),
                proto: p.protocol(),
                ttl: p.ttl(),
                tos: p.tos(),
                len: u32::from(p.total_len()),
                flow_label: 0,
                dont_fragment: p.dont_frag(),
                fragment: p.is_fragment().then(|| Fragment {
                    id: u32::from(p.ident()),
                    offset: p.frag_offset(),
                    more: p.more_frags(),
                }),
            }),
            Layer::Ipv6(p) => {
                let mut proto = p.next_header();
                let mut fragment = None;
                for l in &self.layers()[i + 1..] {
                    let Layer::Ipv6Ext { kind, header } = l else {
                        break;
                    };
                    proto = header.next_header();
                    if *kind == ip_proto::FRAGMENT {
                        let f = Ipv6FragmentHeader::new_unchecked(header.as_bytes());
                        fragment = Some(Fragment {
                            id: f.ident(),
                            offset: f.frag_offset(),
                            more: f.more_frags(),
                        });
                    }
                }
                Some(IpInfo {
                    version: 6,
                    src: IpAddr::V6(p.src_addr()),
                    dst: IpAddr::V6(p.dst_addr()),
                    proto,
                    ttl: p.hop_limit(),
                    tos: p.traffic_class(),
                    len: u32::from(p.payload_len()) + crate::ip6::HEADER_LEN as u32,
                    flow_label: p.flow_label(),
                    dont_fragment: false,
                    fragment,
                })
            }
            _ => None,
        }
    }

    /// The transport header of the innermost IP packet. `None` when there is no IP header, when
    /// the packet is a non-first fragment or a first fragment too short for the header, or when
    /// the transport header could not be decoded (see [`error`](Self::error));
    /// [`Transport::Other`] for a protocol this crate does not decode (GRE whose inner packet is
    /// not IP, ESP, OSPF...).
    #[inline]
    pub fn transport(&self) -> Option<Transport<'a>> {
        let i = self.ip_index()?;
        let layers = self.layers();
        let mut j = i + 1;
        while let Some(Layer::Ipv6Ext { .. }) = layers.get(j) {
            j += 1;
        }
        Some(match layers.get(j)? {
            Layer::Tcp(t) => Transport::Tcp {
                src: t.src_port(),
                dst: t.dst_port(),
                flags: t.flags(),
                seq: t.seq_number(),
                ack: t.ack_number(),
                window: t.window(),
                hdr_len: t.header_len() as u8,
                payload: t.payload(),
            },
            Layer::Udp(u) => Transport::Udp {
                src: u.src_port(),
                dst: u.dst_port(),
                len: u.len(),
                payload: u.payload(),
            },
            Layer::Icmp(c) => Transport::Icmp {
                icmp_type: c.msg_type(),
                code: c.code(),
            },
            Layer::Icmpv6(c) => Transport::Icmpv6 {
                icmp_type: c.msg_type(),
                code: c.code(),
            },
            Layer::Sctp(s) => Transport::Sctp {
                src: s.src_port(),
                dst: s.dst_port(),
                vtag: s.verification_tag(),
            },
            _ => {
                let ip = self.ip_at(i)?;
                let ours = matches!(
                    ip.proto,
                    ip_proto::TCP
                        | ip_proto::UDP
                        | ip_proto::ICMP
                        | ip_proto::ICMPV6
                        | ip_proto::SCTP
                );
                // a later fragment, or a first fragment too short for the header
                if ip.is_later_fragment() || ours {
                    return None;
                }
                Transport::Other(ip.proto)
            }
        })
    }

    /// The outermost VLAN id, if the frame is tagged.
    #[inline]
    pub fn vlan(&self) -> Option<u16> {
        self.layers().iter().find_map(|l| match l {
            Layer::Vlan { tag, .. } => Some(tag.vid()),
            _ => None,
        })
    }

    /// The bytes left undecoded at the end, when the last layer is [`Layer::Payload`].
    #[inline]
    pub fn payload(&self) -> Option<&'a [u8]> {
        match self.layers().last()? {
            Layer::Payload(p) => Some(p),
            _ => None,
        }
    }
}
