//! What to read of one segment for a query: the candidate chunks of its index plus the part the
//! index does not cover yet (the tail of a segment being written), as file ranges.

use crate::{Index, Query};

/// A part of a segment to read: the records starting in `[start, end)`, those starting before
/// `skip_below` skipped (read only to reach the next record boundary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRange {
    /// Offset of the first record to read.
    pub start: u64,
    /// Records starting at or after this are not part of the range.
    pub end: u64,
    /// Records starting before this are read past, not used.
    pub skip_below: u64,
}

impl ReadRange {
    /// The whole segment (no index to narrow it).
    pub const WHOLE: ReadRange = ReadRange {
        start: 0,
        end: u64::MAX,
        skip_below: 0,
    };

    /// True for [`ReadRange::WHOLE`].
    pub fn is_whole(&self) -> bool {
        *self == ReadRange::WHOLE
    }
}

impl Index {
    /// The ranges of a segment of `segment_len` bytes that may hold a packet matching `q` with a
    /// timestamp in `[from, to]`, in file order: the [candidate](Index::candidates) chunks, then
    /// the records starting at or after [`covered_len`](Index::covered_len) when the segment is
    /// longer than what the index covers.
    pub fn plan(&self, q: &Query, from: u64, to: u64, segment_len: u64) -> Vec<ReadRange> {
        let mut r: Vec<ReadRange> = self
            .candidates(q, from, to)
            .into_iter()
            .map(|(start, end)| ReadRange {
                start,
                end,
                skip_below: 0,
            })
            .collect();
        if self.covered_len < segment_len {
            // Not indexed yet: the records starting at or after `covered_len`.
            r.push(ReadRange {
                start: self.tail_start(),
                end: u64::MAX,
                skip_below: self.covered_len,
            });
        }
        r
    }
}
