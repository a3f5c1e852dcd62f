//! A stream's loss and jitter over time (`weir voip --plot`): the stream's [`StreamStats`]
//! sampled at fixed intervals of its packets' time, each interval closed when a packet of a
//! later one arrives (or at the stream's end).
//!
//! An interval holds the packets received in it, the packets expected in it (how far RFC
//! 3550's expected count, highest − lowest extended sequence number + 1, grew during it), their
//! difference (lost, negative with duplicates) and the A.8 jitter estimate at its last packet.
//! Sums over the intervals are the stream's totals: Σ packets = packets, Σ expected = expected,
//! Σ lost = lost, and the last interval's jitter is the stream's final jitter. Intervals with no
//! packet are not written (the sequence numbers lost in them count in the next interval with
//! packets). A timeline holds at most [`MAX_POINTS`] intervals; later packets extend the last.

use crate::rtp::StreamStats;

/// Most intervals a timeline holds (a day of one-second intervals).
pub const MAX_POINTS: usize = 86_400;

/// One interval of a stream's timeline.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Point {
    /// Start of the interval, ns since the epoch.
    pub start_ns: u64,
    /// Packets received in the interval (duplicates included).
    pub packets: u64,
    /// Packets expected in the interval (what RFC 3550's expected count grew by).
    pub expected: u64,
    /// expected − packets.
    pub lost: i64,
    /// RFC 3550 A.8 jitter estimate at the interval's last packet, ms.
    pub jitter_ms: f64,
}

/// The intervals of one stream (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    interval_ns: u64,
    /// Index of the open interval (since the first packet's interval).
    open: Option<u64>,
    first_ns: u64,
    /// Packets and expected counted in the intervals closed so far.
    closed_packets: u64,
    closed_expected: u64,
    /// Closed intervals.
    points: Vec<Point>,
}

impl Timeline {
    /// An empty timeline of `interval_ns` intervals (at least 1 ns).
    pub fn new(interval_ns: u64) -> Timeline {
        Timeline {
            interval_ns: interval_ns.max(1),
            ..Timeline::default()
        }
    }

    /// Before `st` counts a packet arriving at `ts_ns`: closes the open interval if the packet
    /// belongs to a later one.
    pub fn before(&mut self, ts_ns: u64, st: &StreamStats) {
        let Some(open) = self.open else {
            self.first_ns = ts_ns;
            self.open = Some(0);
            return;
        };
        let idx = ts_ns.saturating_sub(self.first_ns) / self.interval_ns;
        if idx > open && self.points.len() < MAX_POINTS {
            self.close(open, st);
            self.open = Some(idx);
        }
    }

    fn close(&mut self, idx: u64, st: &StreamStats) {
        let expected = st.expected().saturating_sub(self.closed_expected);
        let packets = st.packets.saturating_sub(self.closed_packets);
        self.closed_expected += expected;
        self.closed_packets += packets;
        if packets == 0 && expected == 0 {
            return;
        }
        self.points.push(Point {
            start_ns: self
                .first_ns
                .saturating_add(idx.saturating_mul(self.interval_ns)),
            packets,
            expected,
            lost: expected as i64 - packets as i64,
            jitter_ms: st.jitter_ms,
        });
    }

    /// The intervals, the open one closed with `st` (the stream's final figures).
    pub fn finish(mut self, st: &StreamStats) -> Vec<Point> {
        if let Some(open) = self.open {
            self.close(open, st);
        }
        self.points
    }
}
