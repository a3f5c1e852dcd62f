//! The rule vocabulary: matches ([`ExactKey`], [`WildMatch`], [`ByteMatch`]), actions
//! ([`Action`], [`Verdict`], [`SliceTo`], [`Tag`]) and a parsed [`RuleSet`]. Plain data, so the
//! tests' brute-force oracle can read every field; the engine compiles it into its tables.

use core::fmt;

use crate::fields::{PacketFields, NO_OFFSET, NO_VLAN};

/// A rule's identifier: given with `id N` in the file, else the line number.
pub type RuleId = u32;

/// Where a [`ByteMatch`] offset counts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Base {
    /// The first byte of the frame.
    L2,
    /// The innermost IP header.
    L3,
    /// The transport header.
    L4,
    /// The transport payload.
    Payload,
}

impl Base {
    /// The offset of this base in a packet, or `None` when the packet lacks that layer.
    #[inline]
    pub fn offset(self, f: &PacketFields) -> Option<u32> {
        let o = match self {
            Base::L2 => 0,
            Base::L3 => f.l3,
            Base::L4 => f.l4,
            Base::Payload => f.payload,
        };
        (o != NO_OFFSET).then_some(o)
    }
}

/// HPCAP's byte filter: `value & mask` must equal the packet's bytes at `base + offset` masked
/// the same way; `invert` negates the comparison. A packet too short for the bytes (or without
/// the base layer) does not match, inverted or not.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ByteMatch {
    /// Where `offset` counts from.
    pub base: Base,
    /// Offset from `base`, in bytes.
    pub offset: u32,
    /// Expected bytes (already masked).
    pub value: Vec<u8>,
    /// Mask, as long as `value` (all 0xff when the rule gave none).
    pub mask: Vec<u8>,
    /// Match when the bytes differ instead.
    pub invert: bool,
}

impl ByteMatch {
    /// Whether the packet `bytes` (with its `fields`) satisfies this byte filter.
    #[inline]
    pub fn matches(&self, f: &PacketFields, bytes: &[u8]) -> bool {
        let Some(base) = self.base.offset(f) else {
            return false;
        };
        let start = base as usize + self.offset as usize;
        let Some(got) = bytes.get(start..start + self.value.len()) else {
            return false;
        };
        let equal = got
            .iter()
            .zip(&self.mask)
            .zip(&self.value)
            .all(|((g, m), v)| g & m == *v);
        equal != self.invert
    }
}

/// An address prefix: `family` 4 or 6, `addr` in [`PacketFields`]' encoding, `len` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// 4 or 6.
    pub family: u8,
    /// The address, already masked to `len` bits.
    pub addr: u128,
    /// Prefix length in bits (0–32 or 0–128).
    pub len: u8,
}

impl Prefix {
    /// The mask of `len` leading bits for `family`, in [`PacketFields`]' encoding.
    #[inline]
    pub fn mask(family: u8, len: u8) -> u128 {
        let width = if family == 4 { 32 } else { 128 };
        if len == 0 {
            0
        } else {
            let ones = if width == 32 {
                u128::from(u32::MAX)
            } else {
                u128::MAX
            };
            ones & !ones.checked_shr(u32::from(len)).unwrap_or(0)
        }
    }

    /// Whether `addr` (of `family`) lies inside the prefix.
    #[inline]
    pub fn contains(&self, family: u8, addr: u128) -> bool {
        family == self.family && addr & Prefix::mask(family, self.len) == self.addr
    }
}

/// An inclusive port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

impl PortRange {
    /// Whether `p` is in the range.
    #[inline]
    pub fn contains(&self, p: u16) -> bool {
        self.lo <= p && p <= self.hi
    }

    /// True for a single port.
    #[inline]
    pub fn is_single(&self) -> bool {
        self.lo == self.hi
    }
}

/// One payload pattern: literal bytes, case-sensitive.
pub type Pattern = Vec<u8>;

/// A wildcard match: every field given must hold (AND); a field left `None` (or empty) is "any".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WildMatch {
    /// `ip4` / `ip6`: the IP version (implied by any address prefix).
    pub family: Option<u8>,
    /// `vlan N` (or `vlan none`: [`NO_VLAN`], untagged packets only).
    pub vlan: Option<u16>,
    /// `proto tcp|udp|icmp|N`.
    pub proto: Option<u8>,
    /// `src CIDR`.
    pub src: Option<Prefix>,
    /// `dst CIDR`.
    pub dst: Option<Prefix>,
    /// `host CIDR`: source or destination.
    pub host: Option<Prefix>,
    /// `sport A[-B]`.
    pub sport: Option<PortRange>,
    /// `dport A[-B]`.
    pub dport: Option<PortRange>,
    /// `port A[-B]`: source or destination.
    pub port: Option<PortRange>,
    /// `flags SET/MASK`: `tcp_flags & mask == set` (TCP packets only).
    pub flags: Option<(u8, u8)>,
    /// `len A-B`: length on the wire, inclusive.
    pub len: Option<(u32, u32)>,
    /// `bytes ...` terms, all of which must hold.
    pub bytes: Vec<ByteMatch>,
    /// `payload ...` terms: any one pattern found in the flow's payload, ending in this packet.
    pub payload: Vec<Pattern>,
    /// `bpf "EXPR"`: a libpcap expression.
    pub bpf: Option<String>,
}

impl WildMatch {
    /// The header-field part of the match (everything except bytes, payload and BPF), checked
    /// field by field: the reference the tuple-space search must agree with.
    pub fn header_matches(&self, f: &PacketFields) -> bool {
        let fam_ok = |fam: u8| f.family == fam;
        if let Some(fam) = self.family {
            if !fam_ok(fam) {
                return false;
            }
        }
        if let Some(v) = self.vlan {
            if f.vlan != v {
                return false;
            }
        }
        if let Some(p) = self.proto {
            if f.family == 0 || f.proto != p {
                return false;
            }
        }
        if let Some(p) = self.src {
            if !p.contains(f.family, f.src) {
                return false;
            }
        }
        if let Some(p) = self.dst {
            if !p.contains(f.family, f.dst) {
                return false;
            }
        }
        if let Some(p) = self.host {
            if !p.contains(f.family, f.src) && !p.contains(f.family, f.dst) {
                return false;
            }
        }
        let has_ports = f.family != 0 && matches!(f.proto, 6 | 17 | 132) && f.l4 != NO_OFFSET;
        if let Some(r) = self.sport {
            if !has_ports || !r.contains(f.sport) {
                return false;
            }
        }
        if let Some(r) = self.dport {
            if !has_ports || !r.contains(f.dport) {
                return false;
            }
        }
        if let Some(r) = self.port {
            if !has_ports || (!r.contains(f.sport) && !r.contains(f.dport)) {
                return false;
            }
        }
        if let Some((set, mask)) = self.flags {
            if !f.is_tcp || f.tcp_flags & mask != set {
                return false;
            }
        }
        if let Some((lo, hi)) = self.len {
            if f.wire_len < lo || f.wire_len > hi {
                return false;
            }
        }
        true
    }
}

/// An exact rule's key: both directions of a conversation give the same key (the two endpoints
/// are stored in a canonical order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ExactKey {
    /// Lower endpoint's address (in [`PacketFields`]' encoding).
    pub a: u128,
    /// Higher endpoint's address.
    pub b: u128,
    /// Lower endpoint's port.
    pub pa: u16,
    /// Higher endpoint's port.
    pub pb: u16,
    /// VLAN id, or [`NO_VLAN`].
    pub vlan: u16,
    /// IP protocol.
    pub proto: u8,
    /// 4 or 6.
    pub family: u8,
}

impl ExactKey {
    /// The key of a conversation, from either direction.
    #[inline]
    pub fn new(
        family: u8,
        vlan: u16,
        proto: u8,
        src: u128,
        sport: u16,
        dst: u128,
        dport: u16,
    ) -> ExactKey {
        let (a, pa, b, pb) = if (src, sport) <= (dst, dport) {
            (src, sport, dst, dport)
        } else {
            (dst, dport, src, sport)
        };
        ExactKey {
            a,
            b,
            pa,
            pb,
            vlan,
            proto,
            family,
        }
    }

    /// The key of a packet's conversation, or `None` without an IP header.
    #[inline]
    pub fn of(f: &PacketFields) -> Option<ExactKey> {
        (f.family != 0)
            .then(|| ExactKey::new(f.family, f.vlan, f.proto, f.src, f.sport, f.dst, f.dport))
    }
}

/// What a rule matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// One conversation, both directions (the exact hash table).
    Exact(ExactKey),
    /// Ranges, prefixes, bytes, payload, BPF (the tuple-space search).
    Wild(Box<WildMatch>),
}

/// How much of a packet a slice keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SliceTo {
    /// The first N bytes.
    Bytes(u32),
    /// The link-layer headers (everything before the IP header).
    L2,
    /// Up to the end of the IP headers (everything before the transport header).
    L3,
    /// Up to the end of the transport header (everything before the payload).
    L4,
}

impl SliceTo {
    /// How many bytes of this packet the slice keeps (never more than it has).
    #[inline]
    pub fn keep(self, f: &PacketFields) -> u32 {
        let n = match self {
            SliceTo::Bytes(n) => n,
            SliceTo::L2 => f.l3,
            SliceTo::L3 => f.l4,
            SliceTo::L4 => f.payload,
        };
        // a missing layer keeps everything there is
        n.min(f.cap_len)
    }
}

/// The verdict part of an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Keep the packet whole.
    Pass,
    /// Discard it.
    Drop,
    /// Keep part of it.
    Slice(SliceTo),
    /// Keep one in N matching packets (the 1st, N+1st...), counted per rule and capture thread.
    Sample(u32),
    /// Keep the first `bytes` bytes / `packets` packets of each flow (both directions together),
    /// then cut; the packet that crosses the byte limit is sliced to fit.
    Cutoff {
        /// Byte budget per flow (`u64::MAX` for none).
        bytes: u64,
        /// Packet budget per flow (`u64::MAX` for none).
        packets: u64,
    },
}

/// A tag the pipeline stores with the packet (pcapng comment) and its flow: a number or a short
/// text of at most [`Tag::MAX_TEXT`] bytes. `Copy`, so verdicts never allocate.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tag {
    /// A number.
    Num(u32),
    /// A short text.
    Text {
        /// Bytes used in `bytes`.
        len: u8,
        /// UTF-8 text, zero-padded.
        bytes: [u8; Tag::MAX_TEXT],
    },
}

impl Tag {
    /// Longest text tag, in bytes.
    pub const MAX_TEXT: usize = 15;

    /// A text tag; `None` when longer than [`Tag::MAX_TEXT`] bytes.
    pub fn text(s: &str) -> Option<Tag> {
        if s.len() > Tag::MAX_TEXT {
            return None;
        }
        let mut bytes = [0; Tag::MAX_TEXT];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Some(Tag::Text {
            len: s.len() as u8,
            bytes,
        })
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tag::Num(n) => write!(f, "{n}"),
            Tag::Text { len, bytes } => f.write_str(
                core::str::from_utf8(&bytes[..*len as usize]).unwrap_or("<invalid tag>"),
            ),
        }
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tag::Num(n) => write!(f, "Tag({n})"),
            Tag::Text { .. } => write!(f, "Tag({:?})", self.to_string()),
        }
    }
}

/// What a rule does to the packets it matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Action {
    /// The verdict it sets, if any (a rule may only tag).
    pub verdict: Option<Verdict>,
    /// The tag it sets, if any.
    pub tag: Option<Tag>,
    /// Stop evaluating after this rule (the default) or go on to the next matching rule.
    pub stop: bool,
    /// `learn ...`: pass this packet and remember this flow with the given action, so its later
    /// packets take it without the wildcard rules (PF_RING's way to follow what a wildcard
    /// found).
    pub learn: Option<Box<Action>>,
}

impl Default for Action {
    fn default() -> Self {
        Action {
            verdict: None,
            tag: None,
            stop: true,
            learn: None,
        }
    }
}

/// One rule of a [`RuleSet`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Its id (`id N`, else the line number).
    pub id: RuleId,
    /// Evaluation order: lower first; ties by position in the set. Default 0.
    pub prio: i32,
    /// What it matches.
    pub matcher: Match,
    /// What it does.
    pub action: Action,
    /// The line it came from (0 for rules added at run time).
    pub line: u32,
}

/// Set-wide options (`set ...` and `default ...` lines).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// What happens to a packet no rule decides (`default pass|drop`): pass by default.
    pub default_drop: bool,
    /// Most payload bytes scanned for patterns per flow and direction (`set scan-limit N`).
    pub scan_limit: u32,
    /// Capacity of each capture thread's flow table (`set flows N`), used for per-flow cutoff,
    /// pattern stream state and learnt rules.
    pub flows: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            default_drop: false,
            scan_limit: 16 * 1024,
            flows: 65_536,
        }
    }
}

/// A parsed rule file: rules in file order plus options. Compile it with
/// [`Engine::new`](crate::Engine::new).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSet {
    /// The rules, in file order.
    pub rules: Vec<Rule>,
    /// Set-wide options.
    pub options: Options,
}

/// Whether a packet's VLAN field says "untagged".
#[inline]
pub fn untagged(f: &PacketFields) -> bool {
    f.vlan == NO_VLAN
}
