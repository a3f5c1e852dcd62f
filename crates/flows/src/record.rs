//! Flow records: what the flow meter hands to exporters when a flow ends. This is the contract
//! between `weir-flows` (which produces them) and `weir-export` (which encodes them as NetFlow v5,
//! v9, IPFIX, JSON or CSV).

use std::net::IpAddr;

pub use weir_rules::Tag;

/// Why a flow was exported; the values are IPFIX `flowEndReason` (IE 136, RFC 5102).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EndReason {
    /// No packet for the idle timeout.
    IdleTimeout = 1,
    /// The flow lasted longer than the active timeout; it continues in a new record.
    ActiveTimeout = 2,
    /// TCP FIN or RST seen (after a short grace period).
    EndOfFlow = 3,
    /// End of input or shutdown flushed it.
    ForcedEnd = 4,
    /// Evicted because the flow cache was full.
    LackOfResources = 5,
}

/// One direction of a flow: who sent to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Outermost VLAN id, 0 when untagged.
    pub vlan: u16,
    /// Source address (the initiator: the sender of the first packet seen).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol (after IPv6 extension headers).
    pub proto: u8,
    /// Source port; 0 for protocols without ports (and for ICMP).
    pub src_port: u16,
    /// Destination port; for ICMP/ICMPv6, `type << 8 | code` as NetFlow does.
    pub dst_port: u16,
    /// IP TOS / IPv6 traffic class, only when the meter keys on it (otherwise the value of the
    /// first packet).
    pub tos: u8,
}

/// Counters of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Direction {
    /// Packets.
    pub packets: u64,
    /// Bytes, counted as IP length (IPv4 total length, IPv6 payload length + 40).
    pub bytes: u64,
    /// Time of the first packet, ns since the epoch (0 when `packets == 0`).
    pub first_ns: u64,
    /// Time of the last packet, ns since the epoch.
    pub last_ns: u64,
    /// TCP flags OR-ed over the packets.
    pub tcp_flags: u8,
    /// Smallest TTL / hop limit seen.
    pub min_ttl: u8,
    /// Largest TTL / hop limit seen.
    pub max_ttl: u8,
}

/// A finished (or partially exported) flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// The forward direction's key (initiator → responder).
    pub key: FlowKey,
    /// Forward counters (initiator → responder).
    pub forward: Direction,
    /// Reverse counters (responder → initiator). In uniflow mode the meter emits the reverse
    /// direction as its own record with a swapped key and leaves this at zero.
    pub reverse: Direction,
    /// Why it was exported.
    pub end_reason: EndReason,
    /// The rules' tag (`--rules`): the last tag any packet of the flow (either direction)
    /// carried while this record's packets were metered; `None` when none did. In uniflow
    /// mode both directions' records carry it.
    pub tag: Option<Tag>,
}

impl FlowKey {
    /// The same flow seen from the other side.
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            ..*self
        }
    }
}
