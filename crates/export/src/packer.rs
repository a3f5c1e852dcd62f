//! What every NetFlow-family encoder provides to the batching sink, and the flow "views" (one
//! direction or both) that encoders turn into wire records.

use weir_flows::{Direction, EndReason, FlowKey, FlowRecord, Tag};

use crate::clock::Clock;

/// A finished datagram ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Datagram {
    /// Its bytes, header included.
    pub bytes: Vec<u8>,
    /// Data records in it (templates not counted).
    pub records: u64,
}

/// What an encoder did with a flow record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// Encoded (possibly completing datagrams).
    Encoded,
    /// Not encodable in this format: an IPv6 flow given to NetFlow v5.
    SkippedIpv6,
}

/// A NetFlow v5 / v9 / IPFIX encoder that fills datagrams.
pub(crate) trait Packer: Send {
    /// Encodes `rec` into the open datagram; every datagram that fills up on the way is pushed
    /// onto `ready`. `clock` has already observed `rec`.
    fn add(&mut self, rec: &FlowRecord, clock: &Clock, ready: &mut Vec<Datagram>) -> Added;
    /// Whether a partly filled datagram is open.
    fn is_pending(&self) -> bool;
    /// Closes the open datagram (stamping its header with `clock`'s now), if any.
    fn flush(&mut self, clock: &Clock) -> Option<Datagram>;
    /// Records so far whose times could not be expressed exactly (a NetFlow v5 / v9 record
    /// lasting more than 49.7 days: its Last is clamped).
    fn clamped(&self) -> u64 {
        0
    }
    /// Whether its records carry the flow's tag.
    fn carries_tags(&self) -> bool {
        false
    }
}

/// An all-zero direction, for the absent side of a one-way record.
pub(crate) static EMPTY: Direction = Direction {
    packets: 0,
    bytes: 0,
    first_ns: 0,
    last_ns: 0,
    tcp_flags: 0,
    min_ttl: 0,
    max_ttl: 0,
};

/// One wire record's worth of a flow: a key and the forward / reverse counters seen from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a> {
    /// The key, already swapped for a reverse one-way record.
    pub key: FlowKey,
    /// Counters of `key`'s direction.
    pub fwd: &'a Direction,
    /// Counters of the opposite direction (empty for one-way records).
    pub rev: &'a Direction,
    /// Why the flow ended.
    pub reason: EndReason,
    /// The flow's tag.
    pub tag: Option<Tag>,
}

/// The one-way records of a flow: the forward direction, then the reverse one with the key
/// swapped. A direction without packets is left out (the forward one is kept if both are empty,
/// so no record is ever lost silently).
pub(crate) fn uniflows(rec: &FlowRecord) -> impl Iterator<Item = View<'_>> {
    let fwd = (rec.forward.packets > 0 || rec.reverse.packets == 0).then_some(View {
        key: rec.key,
        fwd: &rec.forward,
        rev: &EMPTY,
        reason: rec.end_reason,
        tag: rec.tag,
    });
    let rev = (rec.reverse.packets > 0).then(|| View {
        key: rec.key.reversed(),
        fwd: &rec.reverse,
        rev: &EMPTY,
        reason: rec.end_reason,
        tag: rec.tag,
    });
    fwd.into_iter().chain(rev)
}

/// The single bidirectional (RFC 5103) record of a flow.
pub(crate) fn biflow(rec: &FlowRecord) -> View<'_> {
    View {
        key: rec.key,
        fwd: &rec.forward,
        rev: &rec.reverse,
        reason: rec.end_reason,
        tag: rec.tag,
    }
}
