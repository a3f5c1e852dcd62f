//! Reading one large classic pcap file on every core while keeping file order.
//!
//! The file is cut into byte ranges at guessed record boundaries ([`FileReader::split`]).
//! Reading threads take the ranges in turn, read them, keep the packets the caller's `keep`
//! predicate accepts (the caller filters: this crate knows no filter language) and collect them
//! into one batch per range. The batches are then consumed strictly in file order, in one of two
//! ways, by the same engine:
//!
//! - [`Plan::for_each`]: on the calling thread, one item per kept packet, through a callback
//!   that returns [`ControlFlow::Break`] to stop early (`weir read -c N`);
//! - [`Plan::run_lanes`]: in several independent lanes (a flow meter's shards), each range's
//!   batch split into one part per lane, and each lane's parts run in file order by whichever
//!   reading thread finds the lane free, so the threads that read also consume. The scheduler
//!   owns each lane's state (the caller hands it in and gets it back) and lends it to one
//!   thread at a time as `&mut`: the lane's state needs no lock of its own.
//!
//! The reading threads run at most a look-ahead of ranges ahead of the slowest consumer, so
//! memory is bounded by the range size, not the file size.
//!
//! Exactness does not depend on the guesses: range `k + 1` is consumed only if range `k` ended
//! cleanly exactly at its end (then the split point was a real record boundary). Otherwise, from
//! the offset where range `k` stopped, the whole-file reader continues sequentially on the
//! calling thread and the later ranges' batches are dropped, so a wrong guess or real damage
//! gives exactly the sequential answer. Measured by `bench/read_vs_tcpdump.py` and
//! `bench/flows_vs_peers.py`.
//!
//! ```no_run
//! use std::ops::ControlFlow;
//! use weir_pcap::parallel::Plan;
//!
//! let plan = Plan::new("trace.pcap".as_ref(), Plan::RANGE_BYTES, Plan::MIN_BYTES)
//!     .expect("a large classic pcap file");
//! // the offsets of the packets longer than 1000 bytes, in file order
//! let mut offsets = Vec::new();
//! let outcome = plan.for_each(
//!     |p| p.data.len() > 1000,
//!     |p| p.record_offset,
//!     |offset, _reader| {
//!         offsets.push(offset);
//!         ControlFlow::<()>::Continue(())
//!     },
//! )?;
//! assert!(outcome.damage.is_none());
//! # Ok::<(), weir_pcap::ReadError>(())
//! ```

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::read::{FileReader, Interface, Packet, ReadError};

/// A file ready to be read in parallel: the whole-file reader and its ranges.
pub struct Plan {
    reader: FileReader,
    ranges: Vec<FileReader>,
    threads: usize,
    lookahead: usize,
}

/// What a parallel read found.
pub struct Outcome<X = ()> {
    /// The whole-file reader, for the caller's end-of-file summary.
    pub reader: FileReader,
    /// Packets read (kept or not) in the ranges consumed and in the sequential tail.
    pub packets: u64,
    /// Damage that ended the file early.
    pub damage: Option<ReadError>,
    /// The value the consumer stopped with ([`ControlFlow::Break`]), if it stopped early.
    pub stopped: Option<X>,
}

impl Plan {
    /// Default bytes per range: large enough to amortise a thread hand-off, small enough to
    /// bound memory.
    pub const RANGE_BYTES: u64 = 32 << 20;
    /// Default size below which a file is not split: splitting costs more than it saves.
    pub const MIN_BYTES: u64 = 64 << 20;

    /// Prepares a parallel read of `path` in ranges of about `range_bytes` (smaller ranges: less
    /// memory in flight; larger: fewer hand-offs), or `None` when it does not qualify: stdin, not
    /// a regular file, pcapng, smaller than `min_bytes`, one core, no split point found.
    pub fn new(path: &Path, range_bytes: u64, min_bytes: u64) -> Option<Plan> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let len = std::fs::metadata(path)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())?;
        if threads < 2 || len < min_bytes || path.as_os_str() == "-" {
            return None;
        }
        let reader = FileReader::open(path).ok()?;
        let n = (len / range_bytes.max(1)).max(threads as u64) as usize;
        let ranges = reader.split(n)?;
        tracing::debug!(
            "reading {} in {} ranges with {threads} threads",
            path.display(),
            ranges.len()
        );
        Some(Plan {
            reader,
            ranges,
            threads,
            lookahead: 2 * threads + 1,
        })
    }

    /// Lets the reading threads run at most `ranges` ranges ahead of the consumer (at least one
    /// per thread; the default is two per thread plus one).
    pub fn lookahead(mut self, ranges: usize) -> Plan {
        self.lookahead = ranges.max(self.threads);
        self
    }

    /// The whole-file reader (its format, path, interfaces), before anything is read.
    pub fn reader(&self) -> &FileReader {
        &self.reader
    }

    /// The file's interfaces (classic pcap: one).
    pub fn interfaces(&self) -> &[Interface] {
        self.reader.interfaces()
    }

    /// Reads the file on every core and hands `consume`, on this thread and in file order, the
    /// item `map` made of each packet that `keep` accepts (`keep` and `map` run on the reading
    /// threads). `consume` also gets the whole-file reader, e.g. to read a packet again by its
    /// [`Packet::record_offset`] ([`FileReader::seek`], then one `next_packet`); it must leave
    /// the reader where such a re-read does, just after the item's packet, because after a
    /// wrong split guess the sequential tail hands each kept packet over as soon as it is read
    /// and reads on from there. It stops the read by returning [`ControlFlow::Break`], whose
    /// value ends up in [`Outcome::stopped`].
    pub fn for_each<T, X, K, M, C>(
        self,
        keep: K,
        map: M,
        mut consume: C,
    ) -> Result<Outcome<X>, ReadError>
    where
        T: Send,
        K: Fn(&Packet<'_>) -> bool + Sync,
        M: Fn(&Packet<'_>) -> T + Sync,
        C: FnMut(T, &mut FileReader) -> ControlFlow<X>,
    {
        let each = |items: Vec<T>, reader: &mut FileReader| {
            for item in items {
                consume(item, reader)?;
            }
            ControlFlow::Continue(())
        };
        let (outcome, _) = self.run(
            (1, vec![()]),
            keep,
            (Vec::new, |items: &mut Vec<T>, p: &Packet<'_>| {
                items.push(map(p))
            }),
            &|items| vec![items],
            Consumer::<fn(&mut (), Vec<T>), _>::Here(each),
        )?;
        Ok(outcome)
    }

    /// Reads the file on every core like [`Plan::for_each`], but consumes in independent
    /// lanes instead of one, one per state in `lanes` (a flow meter's shards): each thread
    /// collects a range's kept packets into a `B` made by `new` (`add` adds one packet),
    /// `split`s it into one part per lane, and each lane's parts are `run` with the lane's
    /// state, in file order, by whichever reading thread finds the lane free (a part is usually
    /// run by the thread that just made it, while it is in that core's cache), two lanes at once
    /// on two threads. A lane's state is held by the scheduler and lent as `&mut` to the one
    /// thread running the lane; the states are handed back with the outcome, in lane order.
    ///
    /// A lane's part runs only once every earlier range has been read and ended cleanly at its
    /// end. After a range that stopped early, the later ranges' parts are dropped unrun and the
    /// rest of the file is read on this thread, in batches of `fallback` kept packets, each
    /// split and run lane by lane. `split` must give one part per lane.
    pub fn run_lanes<L, B, Part, K, N, A, S, R>(
        self,
        (fallback, lanes): (usize, Vec<L>),
        keep: K,
        (new, add): (N, A),
        (split, run): (S, R),
    ) -> Result<(Outcome, Vec<L>), ReadError>
    where
        L: Send,
        Part: Send,
        K: Fn(&Packet<'_>) -> bool + Sync,
        N: Fn() -> B + Sync,
        A: Fn(&mut B, &Packet<'_>) + Sync,
        S: Fn(B) -> Vec<Part> + Sync,
        R: Fn(&mut L, Part) + Sync,
    {
        self.run(
            (fallback, lanes),
            keep,
            (new, add),
            &split,
            Consumer::<_, fn(Part, &mut FileReader) -> ControlFlow<()>>::Readers(&run),
        )
    }

    /// The one engine behind [`Plan::for_each`] and [`Plan::run_lanes`].
    fn run<L, B, Part, X, K, N, A, S, R, C>(
        self,
        (fallback, lanes): (usize, Vec<L>),
        keep: K,
        (new, add): (N, A),
        split: &S,
        mut consumer: Consumer<'_, R, C>,
    ) -> Result<(Outcome<X>, Vec<L>), ReadError>
    where
        L: Send,
        Part: Send,
        K: Fn(&Packet<'_>) -> bool + Sync,
        N: Fn() -> B + Sync,
        A: Fn(&mut B, &Packet<'_>) + Sync,
        S: Fn(B) -> Vec<Part> + Sync,
        R: Fn(&mut L, Part) + Sync,
        C: FnMut(Part, &mut FileReader) -> ControlFlow<X>,
    {
        let Plan {
            mut reader,
            ranges,
            threads,
            lookahead,
        } = self;
        let n = ranges.len();
        let sh = Shared::new(ranges, lanes);
        let collect = Collect {
            keep: &keep,
            new: &new,
            add: &add,
        };
        let readers_run = match &consumer {
            Consumer::Readers(run) => Some(*run),
            Consumer::Here(_) => None,
        };
        let stopped = std::thread::scope(|scope| {
            for _ in 0..threads {
                let (sh, collect) = (&sh, &collect);
                scope.spawn(move || reading_thread(sh, lookahead, collect, split, readers_run));
            }
            match &mut consumer {
                Consumer::Here(consume) => {
                    // However this thread leaves (a break, a panic), the reading threads must
                    // not wait for it any more.
                    let _halt = HaltOnDrop(&sh);
                    sh.consume_here(n, &mut reader, consume)
                }
                Consumer::Readers(_) => None,
            }
        });
        let Shared { lanes, ends, .. } = sh;
        let ends = ends.into_inner().expect("lock");
        let mut states = Vec::with_capacity(lanes.len());
        for q in lanes {
            let q = q.into_inner().expect("lock");
            debug_assert!(
                stopped.is_some() || q.next == ends.usable,
                "every usable part ran"
            );
            // a thread gives a lane's state back before it leaves (or the scope panicked)
            states.push(q.state.expect("every lane's state handed back"));
        }
        let mut packets = ends.packets;
        if stopped.is_some() {
            let outcome = Outcome {
                reader,
                packets,
                damage: None,
                stopped,
            };
            return Ok((outcome, states));
        }
        let (damage, stopped) = match ends.damage {
            // A range stopped early: continue from there with the whole-file reader, which
            // either reads on (the split guess was wrong) or meets the same damage (it was real).
            Some(ReadError::Damaged { offset, .. }) => {
                let consume = |batch: B, reader: &mut FileReader| {
                    for (s, part) in split(batch).into_iter().enumerate() {
                        match &mut consumer {
                            Consumer::Here(consume) => consume(part, reader)?,
                            Consumer::Readers(run) => run(&mut states[s], part),
                        }
                    }
                    ControlFlow::Continue(())
                };
                let (read, damage, stopped) =
                    read_on(&mut reader, (offset, packets), fallback, &collect, consume)?;
                packets += read;
                (damage, stopped)
            }
            other => (other, None),
        };
        let outcome = Outcome {
            reader,
            packets,
            damage,
            stopped,
        };
        Ok((outcome, states))
    }
}

/// How a range's packets become a batch: the caller's predicate and collector.
struct Collect<'a, K, N, A> {
    keep: &'a K,
    new: &'a N,
    add: &'a A,
}

impl<B, K, N, A> Collect<'_, K, N, A>
where
    K: Fn(&Packet<'_>) -> bool,
    N: Fn() -> B,
    A: Fn(&mut B, &Packet<'_>),
{
    /// Reads one range whole: its kept packets go into a fresh batch; also returns the packets
    /// read and the damage that ended the range early, if any.
    fn range(&self, r: &mut FileReader) -> (B, u64, Option<ReadError>) {
        let (mut batch, mut packets) = ((self.new)(), 0);
        loop {
            match r.next_packet() {
                Ok(Some(p)) => {
                    packets += 1;
                    if (self.keep)(&p) {
                        (self.add)(&mut batch, &p);
                    }
                }
                Ok(None) => return (batch, packets, None),
                Err(e) => return (batch, packets, Some(e)),
            }
        }
    }
}

/// Who runs the lanes' parts.
enum Consumer<'a, R, C> {
    /// The calling thread, one lane.
    Here(C),
    /// The reading threads, every lane.
    Readers(&'a R),
}

/// One lane's queue: the parts read but not yet run, by range index, and the lane's state.
struct Queue<L, Part> {
    pending: BTreeMap<usize, Part>,
    /// The range whose part this lane runs next.
    next: usize,
    /// The lane's state while no thread runs the lane (`None`: a thread has it).
    state: Option<L>,
}

/// How the ranges ended, in file order.
struct Ends {
    /// Per range, once read: packets read and the damage that stopped it early.
    ends: Vec<Option<(u64, Option<ReadError>)>>,
    /// Leading ranges whose parts may run: all read, all clean but maybe the last.
    usable: usize,
    /// Packets of the usable ranges.
    packets: u64,
    /// The damage that ended the last usable range early (the later ranges are dropped).
    damage: Option<ReadError>,
}

/// Everything the threads share.
struct Shared<L, Part> {
    next_range: AtomicUsize,
    ranges: Vec<Mutex<Option<FileReader>>>,
    lanes: Vec<Mutex<Queue<L, Part>>>,
    /// Per lane, a copy of `Queue::next` for the look-ahead wait (read without the lane lock).
    ran: Vec<AtomicUsize>,
    /// `Ends::usable`, read under a lane's lock (see [`Shared::drive`]).
    usable: AtomicUsize,
    ends: Mutex<Ends>,
    stop: AtomicBool,
    /// Readers wait here to stay within the look-ahead, and the calling thread for its next
    /// part; notified when a lane moves on and when a range becomes usable.
    progress: Mutex<()>,
    moved_on: Condvar,
}

impl<L, Part> Shared<L, Part> {
    fn new(ranges: Vec<FileReader>, states: Vec<L>) -> Shared<L, Part> {
        let (n, lanes) = (ranges.len(), states.len());
        Shared {
            next_range: AtomicUsize::new(0),
            ranges: ranges.into_iter().map(|r| Mutex::new(Some(r))).collect(),
            lanes: states
                .into_iter()
                .map(|state| {
                    Mutex::new(Queue {
                        pending: BTreeMap::new(),
                        next: 0,
                        state: Some(state),
                    })
                })
                .collect(),
            ran: (0..lanes).map(|_| AtomicUsize::new(0)).collect(),
            usable: AtomicUsize::new(0),
            ends: Mutex::new(Ends {
                ends: (0..n).map(|_| None).collect(),
                usable: 0,
                packets: 0,
                damage: None,
            }),
            stop: AtomicBool::new(false),
            progress: Mutex::new(()),
            moved_on: Condvar::new(),
        }
    }

    /// Runs lane `s`'s parts for as long as the next one is read and usable, unless another
    /// thread is running the lane: that one looks again when it is done.
    ///
    /// No part is forgotten: whoever adds a part or raises `usable` calls this afterwards and
    /// takes the lane's lock, and the running thread re-reads both under that lock after each
    /// part, so one of the two sees the change.
    fn drive(&self, s: usize, run: &impl Fn(&mut L, Part)) {
        loop {
            let (mut state, part) = {
                let mut q = self.lanes[s].lock().expect("lock");
                if q.next >= self.usable.load(Ordering::Acquire) {
                    return;
                }
                // `None`: another thread runs the lane
                let Some(state) = q.state.take() else {
                    return;
                };
                let next = q.next;
                let Some(part) = q.pending.remove(&next) else {
                    q.state = Some(state);
                    return;
                };
                (state, part)
            };
            run(&mut state, part);
            {
                let mut q = self.lanes[s].lock().expect("lock");
                q.state = Some(state);
                self.moved_on_to(s, &mut q);
            }
            self.notify();
        }
    }

    /// Runs the one lane's parts on the calling thread as they become usable, until the usable
    /// ranges are all consumed or `consume` breaks.
    fn consume_here<X>(
        &self,
        n: usize,
        reader: &mut FileReader,
        consume: &mut impl FnMut(Part, &mut FileReader) -> ControlFlow<X>,
    ) -> Option<X> {
        loop {
            let part = {
                let mut g = self.progress.lock().expect("lock");
                loop {
                    let mut q = self.lanes[0].lock().expect("lock");
                    let next = q.next;
                    if next < self.usable.load(Ordering::Acquire) {
                        if let Some(part) = q.pending.remove(&next) {
                            break part;
                        }
                    }
                    // `usable` no longer grows once `stop` is set (damage, or a reading
                    // thread panicked)
                    if next >= n || self.stop.load(Ordering::Relaxed) {
                        return None;
                    }
                    drop(q);
                    g = self.moved_on.wait(g).expect("lock");
                }
            };
            if let ControlFlow::Break(x) = consume(part, reader) {
                return Some(x);
            }
            self.moved_on_to(0, &mut self.lanes[0].lock().expect("lock"));
            self.notify();
        }
    }

    /// Lane `s` has run its next part.
    fn moved_on_to(&self, s: usize, q: &mut MutexGuard<'_, Queue<L, Part>>) {
        q.next += 1;
        self.ran[s].store(q.next, Ordering::Release);
    }

    /// Wakes the threads waiting for progress.
    fn notify(&self) {
        let _guard = self.progress.lock().expect("lock");
        self.moved_on.notify_all();
    }

    /// Ranges every lane has run.
    fn retired(&self) -> usize {
        self.ran
            .iter()
            .map(|r| r.load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
    }

    /// Records how range `i` ended and extends the usable prefix.
    fn ended(&self, i: usize, packets: u64, end: Option<ReadError>) {
        {
            let mut e = self.ends.lock().expect("lock");
            e.ends[i] = Some((packets, end));
            while e.damage.is_none() && e.usable < e.ends.len() {
                let k = e.usable;
                let Some((packets, end)) = e.ends[k].take() else {
                    break;
                };
                e.packets += packets;
                e.usable += 1;
                if end.is_some() {
                    // the later ranges may start at a wrong guess: they are not used
                    e.damage = end;
                    self.stop.store(true, Ordering::Relaxed);
                }
            }
            self.usable.store(e.usable, Ordering::Release);
        }
        self.notify();
    }

    /// Stops the readers (the consumer left, damage, or a thread panicked) and wakes the
    /// waiting threads.
    fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _guard = self.progress.lock();
        self.moved_on.notify_all();
    }
}

/// Halts the reading threads when the calling thread leaves the scope, however it leaves.
struct HaltOnDrop<'a, L, Part>(&'a Shared<L, Part>);

impl<L, Part> Drop for HaltOnDrop<'_, L, Part> {
    fn drop(&mut self) {
        self.0.halt();
    }
}

/// Halts the other threads if this reading thread panics (so none waits forever).
struct HaltOnPanic<'a, L, Part>(&'a Shared<L, Part>);

impl<L, Part> Drop for HaltOnPanic<'_, L, Part> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.halt();
        }
    }
}

/// One reading thread: takes the next range, waits to stay within the look-ahead, reads it,
/// queues its parts and, when the reading threads `run` the lanes, runs the lanes that are free.
fn reading_thread<L, B, Part, K, N, A, S, R>(
    sh: &Shared<L, Part>,
    lookahead: usize,
    collect: &Collect<'_, K, N, A>,
    split: &S,
    run: Option<&R>,
) where
    K: Fn(&Packet<'_>) -> bool,
    N: Fn() -> B,
    A: Fn(&mut B, &Packet<'_>),
    S: Fn(B) -> Vec<Part>,
    R: Fn(&mut L, Part),
{
    let _halt = HaltOnPanic(sh);
    loop {
        let i = sh.next_range.fetch_add(1, Ordering::Relaxed);
        if i >= sh.ranges.len() {
            return;
        }
        {
            let mut g = sh.progress.lock().expect("lock");
            while i >= sh.retired() + lookahead && !sh.stop.load(Ordering::Relaxed) {
                g = sh.moved_on.wait(g).expect("lock");
            }
        }
        if sh.stop.load(Ordering::Relaxed) {
            return;
        }
        let mut range = sh.ranges[i]
            .lock()
            .expect("lock")
            .take()
            .expect("each range once");
        let (batch, packets, end) = collect.range(&mut range);
        drop(range);
        for (s, part) in split(batch).into_iter().enumerate() {
            sh.lanes[s].lock().expect("lock").pending.insert(i, part);
        }
        sh.ended(i, packets, end);
        if let Some(run) = run {
            for s in 0..sh.lanes.len() {
                sh.drive(s, run);
            }
        }
    }
}

/// After a range stopped early at `offset`, `before` packets into the file: the whole-file
/// reader continues from there, which either reads on (the split guess was wrong) or meets the
/// same damage (it was real), handing `consume` batches of `fallback` kept packets. Returns the
/// packets read here, the damage met and the value `consume` stopped with.
fn read_on<B, X, K, N, A>(
    reader: &mut FileReader,
    (offset, before): (u64, u64),
    fallback: usize,
    collect: &Collect<'_, K, N, A>,
    mut consume: impl FnMut(B, &mut FileReader) -> ControlFlow<X>,
) -> Result<(u64, Option<ReadError>, Option<X>), ReadError>
where
    K: Fn(&Packet<'_>) -> bool,
    N: Fn() -> B,
    A: Fn(&mut B, &Packet<'_>),
{
    tracing::debug!("a range stopped at byte {offset}; reading on sequentially from there");
    reader.resume_at(offset, before)?;
    let (mut batch, mut held, mut packets) = ((collect.new)(), 0, 0);
    let mut damage = None;
    loop {
        match reader.next_packet() {
            Ok(Some(p)) => {
                packets += 1;
                if (collect.keep)(&p) {
                    (collect.add)(&mut batch, &p);
                    held += 1;
                }
            }
            Ok(None) => break,
            Err(e) => {
                damage = Some(e);
                break;
            }
        };
        if held >= fallback {
            held = 0;
            let full = std::mem::replace(&mut batch, (collect.new)());
            if let ControlFlow::Break(x) = consume(full, reader) {
                return Ok((packets, None, Some(x)));
            }
        }
    }
    if held > 0 {
        if let ControlFlow::Break(x) = consume(batch, reader) {
            return Ok((packets, damage, Some(x)));
        }
    }
    Ok((packets, damage, None))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// A classic pcap of `n` raw-IPv4 records of varying sizes whose timestamp seconds are their
    /// sequence numbers.
    fn pcap(n: u32) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 228] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        for i in 0..n {
            let len = 20 + (i * 7919) % 300;
            for x in [i, 0, len, len] {
                v.extend_from_slice(&x.to_le_bytes());
            }
            v.extend(std::iter::repeat_n(0x45, len as usize));
        }
        v
    }

    /// `bytes` as a file, planned in 16 KiB ranges with a look-ahead of 3.
    fn plan_of(bytes: &[u8]) -> (tempfile::TempDir, Plan) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pcap");
        std::fs::write(&path, bytes).unwrap();
        let plan = Plan::new(&path, 16 << 10, 0).expect("a plan").lookahead(3);
        (dir, plan)
    }

    /// The sequence number of a packet of [`pcap`].
    fn seq(p: &Packet<'_>) -> u32 {
        (p.meta.ts_ns / 1_000_000_000) as u32
    }

    /// Runs `bytes` through [`Plan::run_lanes`] with `lanes` lanes (packet `i` goes to lane
    /// `i % lanes`), each lane's state its number and the packets it ran; returns each lane's
    /// packets in the order they ran, and the outcome.
    fn lanes_of(bytes: &[u8], lanes: usize) -> (Vec<Vec<u32>>, Outcome) {
        let (_dir, plan) = plan_of(bytes);
        let running: Vec<AtomicBool> = (0..lanes).map(|_| AtomicBool::new(false)).collect();
        let states = (0..lanes).map(|s| (s, Vec::new())).collect();
        let (outcome, states) = plan
            .run_lanes(
                (100, states),
                |_| true,
                (Vec::new, |b: &mut Vec<u32>, p: &Packet<'_>| b.push(seq(p))),
                (
                    |b: Vec<u32>| {
                        let mut parts = vec![Vec::new(); lanes];
                        for i in b {
                            parts[i as usize % lanes].push(i);
                        }
                        parts
                    },
                    |(s, ran): &mut (usize, Vec<u32>), part: Vec<u32>| {
                        assert!(
                            !running[*s].swap(true, Ordering::SeqCst),
                            "lane {s} run twice at once"
                        );
                        ran.extend(part);
                        running[*s].store(false, Ordering::SeqCst);
                    },
                ),
            )
            .unwrap();
        let ran = states
            .into_iter()
            .enumerate()
            .map(|(k, (s, ran))| {
                assert_eq!(k, s, "the states come back in lane order");
                ran
            })
            .collect();
        (ran, outcome)
    }

    /// Every lane runs exactly its packets, in file order, one thread at a time, across many
    /// small ranges read on every core (repeated to shake out orderings of the threads).
    #[test]
    fn lanes_run_every_part_once_in_order() {
        let n = 30_000;
        let bytes = pcap(n);
        for round in 0..20 {
            let lanes = 1 + round % 4;
            let (ran, outcome) = lanes_of(&bytes, lanes);
            assert_eq!(outcome.packets, u64::from(n));
            assert!(outcome.damage.is_none());
            for (s, got) in ran.iter().enumerate() {
                let want: Vec<u32> = (0..n).filter(|i| *i as usize % lanes == s).collect();
                assert!(*got == want, "round {round}, lane {s} of {lanes}");
            }
        }
    }

    /// `bytes` with the record after the first `at_packet` ones claiming 4 GB; returns the bytes
    /// and the damaged record's offset.
    fn damaged(mut bytes: Vec<u8>, at_packet: u32) -> (Vec<u8>, usize) {
        let (mut at, mut i) = (24, 0);
        while i < at_packet {
            let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            at += 16 + len as usize;
            i += 1;
        }
        bytes[at + 8..at + 12].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        (bytes, at)
    }

    /// A record claiming 4 GB in the middle: the lanes get exactly the packets before it (the
    /// later ranges are dropped, the sequential reader meets the same damage), and the damage
    /// report counts them.
    #[test]
    fn lanes_stop_at_damage_like_the_sequential_reader() {
        let (bytes, at) = damaged(pcap(30_000), 12_345);
        for lanes in [1, 2, 3] {
            let (ran, outcome) = lanes_of(&bytes, lanes);
            assert_eq!(outcome.packets, 12_345);
            match outcome.damage {
                Some(ReadError::Damaged {
                    offset, packets, ..
                }) => assert_eq!((offset, packets), (at as u64, 12_345)),
                other => panic!("{other:?}"),
            }
            let all: usize = ran.iter().map(Vec::len).sum();
            assert_eq!(all, 12_345);
            for (s, got) in ran.iter().enumerate() {
                let want: Vec<u32> = (0..12_345).filter(|i| *i as usize % lanes == s).collect();
                assert!(*got == want, "lane {s} of {lanes}");
            }
        }
    }

    /// [`Plan::for_each`] hands the kept packets over in file order, re-readable by their
    /// offsets, up to the damage, and stops at the first break.
    #[test]
    fn for_each_is_in_order_stops_early_and_at_damage() {
        let n = 30_000;
        let odd = |p: &Packet<'_>| seq(p) % 2 == 1;
        for round in 0..10 {
            let (_dir, plan) = plan_of(&pcap(n));
            let mut got = Vec::new();
            let outcome = plan
                .for_each(
                    odd,
                    |p| p.record_offset,
                    |offset, reader| {
                        reader.seek(offset).unwrap();
                        got.push(seq(&reader.next_packet().unwrap().unwrap()));
                        ControlFlow::<()>::Continue(())
                    },
                )
                .unwrap();
            assert_eq!(outcome.packets, u64::from(n), "round {round}");
            assert!(outcome.damage.is_none() && outcome.stopped.is_none());
            assert!(got == (0..n).filter(|i| i % 2 == 1).collect::<Vec<_>>());
        }
        let (_dir, plan) = plan_of(&pcap(n));
        let mut got = Vec::new();
        let outcome = plan
            .for_each(odd, seq, |i, _| {
                got.push(i);
                if got.len() == 7_000 {
                    ControlFlow::Break("enough")
                } else {
                    ControlFlow::Continue(())
                }
            })
            .unwrap();
        assert_eq!(outcome.stopped, Some("enough"));
        assert!(got == (0..14_000).filter(|i| i % 2 == 1).collect::<Vec<_>>());
        let (bytes, at) = damaged(pcap(n), 12_345);
        let (_dir, plan) = plan_of(&bytes);
        let mut got = Vec::new();
        let outcome = plan
            .for_each(odd, seq, |i, _| {
                got.push(i);
                ControlFlow::<()>::Continue(())
            })
            .unwrap();
        assert!(
            matches!(outcome.damage, Some(ReadError::Damaged { offset, .. }) if offset == at as u64)
        );
        assert!(got == (0..12_345).filter(|i| i % 2 == 1).collect::<Vec<_>>());
    }
}
