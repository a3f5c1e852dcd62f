//! Per-thread counter blocks, summed on read.
//!
//! Every [`Evaluator`](crate::Evaluator) owns one [`ThreadCounters`]: engine-wide totals and
//! per-rule counters indexed by the rule's *slot* (a number the engine gives each rule when it
//! enters a rule set, never reused, so the counters of a rule outlive rule-set swaps and a new
//! rule never inherits an old one's counts). Only the owning thread writes a block, with plain
//! `load` + `store` (no read-modify-write, no shared cache line); readers sum every block with
//! relaxed loads. A reader may see one packet's counters half-updated (say `packets` already
//! bumped and `passed` not yet), so the invariants hold exactly once the evaluators are idle,
//! and within the in-flight packets while they run.
//!
//! Rule counters come in chunks of [`CHUNK`] slots allocated on first use, so a million rules of
//! which a thousand ever match cost a thousand rules' counters per thread.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Slots per counter chunk.
pub const CHUNK: usize = 1024;

/// Bumps a single-writer counter.
#[inline]
pub(crate) fn bump(c: &AtomicU64, v: u64) {
    c.store(c.load(Relaxed).wrapping_add(v), Relaxed);
}

/// One rule's counters in one thread.
#[derive(Default, Debug)]
pub(crate) struct RuleCell {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub passed: AtomicU64,
    pub dropped: AtomicU64,
    pub sliced: AtomicU64,
    pub sampled_out: AtomicU64,
}

pub(crate) type Chunk = [RuleCell; CHUNK];

/// What one rule did, summed over threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleStats {
    /// Packets the rule matched (and was reached: rules after a `stop` are not evaluated).
    pub packets: u64,
    /// Their captured bytes.
    pub bytes: u64,
    /// Of those, packets whose final verdict kept them whole.
    pub passed: u64,
    /// ... that were dropped (including per-flow cutoff).
    pub dropped: u64,
    /// ... that were kept in part.
    pub sliced: u64,
    /// ... that a `sample` left out.
    pub sampled_out: u64,
}

impl RuleStats {
    /// `packets == passed + dropped + sliced + sampled_out`.
    pub fn reconciles(&self) -> bool {
        self.packets == self.passed + self.dropped + self.sliced + self.sampled_out
    }

    fn add(&mut self, c: &RuleCell) {
        self.packets += c.packets.load(Relaxed);
        self.bytes += c.bytes.load(Relaxed);
        self.passed += c.passed.load(Relaxed);
        self.dropped += c.dropped.load(Relaxed);
        self.sliced += c.sliced.load(Relaxed);
        self.sampled_out += c.sampled_out.load(Relaxed);
    }
}

macro_rules! totals {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Engine-wide counters, summed over threads.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Totals {
            $($(#[$doc])* pub $name: u64,)*
        }

        #[derive(Default, Debug)]
        pub(crate) struct TotalCells {
            $(pub $name: AtomicU64,)*
        }

        impl Totals {
            fn add(&mut self, c: &TotalCells) {
                $(self.$name += c.$name.load(Relaxed);)*
            }
        }
    };
}

totals! {
    /// Packets evaluated.
    packets_in,
    /// Their captured bytes.
    bytes_in,
    /// Packets kept whole.
    passed,
    /// Packets dropped.
    dropped,
    /// Packets kept in part.
    sliced,
    /// Packets a `sample` left out.
    sampled_out,
    /// Of the dropped, packets cut by a per-flow cutoff.
    cut,
    /// Captured bytes removed by cutoffs (dropped packets and the sliced-off tails).
    cut_bytes,
    /// Packets no rule matched (the default verdict applied).
    unmatched,
    /// Flows learnt by `learn` actions.
    learned,
    /// Flows evicted from full flow tables.
    flow_evictions,
    /// Payload bytes scanned for patterns.
    scanned_bytes,
    /// Pattern streams reset by a sequence gap.
    stream_resets,
}

impl Totals {
    /// `packets_in == passed + dropped + sliced + sampled_out`.
    pub fn reconciles(&self) -> bool {
        self.packets_in == self.passed + self.dropped + self.sliced + self.sampled_out
    }
}

/// One thread's block.
#[derive(Default)]
pub(crate) struct ThreadCounters {
    pub totals: TotalCells,
    /// Chunks by slot / CHUNK; the owner appends under the lock, readers sum under it.
    pub chunks: Mutex<Vec<Option<Arc<Chunk>>>>,
}

/// The owner's lock-free view of its chunks.
pub(crate) struct LocalChunks {
    pub block: Arc<ThreadCounters>,
    local: Vec<Option<Arc<Chunk>>>,
}

impl LocalChunks {
    pub(crate) fn new(block: Arc<ThreadCounters>) -> Self {
        LocalChunks {
            block,
            local: Vec::new(),
        }
    }

    /// The cell of `slot`, allocating its chunk on first use.
    #[inline]
    pub(crate) fn cell(&mut self, slot: u32) -> &RuleCell {
        let (c, i) = (slot as usize / CHUNK, slot as usize % CHUNK);
        if self.local.get(c).is_none_or(|x| x.is_none()) {
            self.grow(c);
        }
        &self.local[c].as_ref().expect("chunk allocated")[i]
    }

    #[cold]
    fn grow(&mut self, c: usize) {
        let chunk: Arc<Chunk> = Arc::new(core::array::from_fn(|_| RuleCell::default()));
        let mut shared = self.block.chunks.lock().unwrap_or_else(|e| e.into_inner());
        if shared.len() <= c {
            shared.resize(c + 1, None);
        }
        shared[c] = Some(chunk);
        self.local = shared.clone();
    }
}

/// Sums the counters of `slot` over `blocks`.
pub(crate) fn rule_stats(blocks: &[Arc<ThreadCounters>], slot: u32) -> RuleStats {
    let (c, i) = (slot as usize / CHUNK, slot as usize % CHUNK);
    let mut s = RuleStats::default();
    for b in blocks {
        let chunks = b.chunks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Some(ch)) = chunks.get(c) {
            s.add(&ch[i]);
        }
    }
    s
}

/// Sums the totals over `blocks`.
pub(crate) fn totals(blocks: &[Arc<ThreadCounters>]) -> Totals {
    let mut t = Totals::default();
    for b in blocks {
        t.add(&b.totals);
    }
    t
}
