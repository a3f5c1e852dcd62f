//! Reading one large classic pcap file on every core while keeping file order.
//!
//! The file is cut into byte ranges at guessed record boundaries ([`FileReader::split`]). Worker
//! threads take ranges in turn, read and filter them and turn each packet into a `T` (`produce`,
//! stateless: a record offset for `weir read`; [`run_batches`] lets a range collect its packets
//! its own way, e.g. `weir flows` prepares them and sorts them by shard); the calling thread
//! receives the ranges' results and hands them to `consume` strictly in file order. Workers run
//! at most `lookahead` ranges ahead of the consumer, so memory is bounded by the range size, not
//! the file size.
//!
//! Exactness does not depend on the guesses: range `k + 1` is consumed only if range `k` ended
//! cleanly exactly at its end (then the split point was a real record boundary). Otherwise, from
//! the offset where range `k` stopped, the whole-file reader continues sequentially and the later
//! ranges' results are dropped, so a wrong guess or real damage gives exactly the sequential
//! answer. Measured by `bench/read_vs_tcpdump.py` and `bench/flows_vs_peers.py`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use anyhow::Result;
use weir_filter::Filter;
use weir_pcap::{FileReader, Interface, Packet, ReadError};

/// Bytes per range: large enough to amortise a thread hand-off, small enough to bound memory.
const RANGE_BYTES: u64 = 32 << 20;
/// Files smaller than this are read by one thread: splitting costs more than it saves.
const MIN_BYTES: u64 = 64 << 20;

/// Whether `consume` wants more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// Stop reading (a packet count was reached).
    Stop,
}

/// A file ready to be read in parallel.
pub struct Plan {
    /// The whole-file reader (for the exact fallback and for the caller's summaries).
    pub reader: FileReader,
    ranges: Vec<FileReader>,
    /// The file's interfaces (classic pcap: one).
    pub interfaces: Vec<Interface>,
    /// Worker threads to use.
    threads: usize,
    /// Ranges the workers may read ahead of the consumer.
    lookahead: usize,
}

impl Plan {
    /// Lets the workers run at most `ranges` ranges ahead of the consumer (at least one per
    /// thread; the default is two per thread plus one).
    pub fn lookahead(mut self, ranges: usize) -> Plan {
        self.lookahead = ranges.max(self.threads);
        self
    }
}

/// What a parallel read found.
pub struct Outcome {
    /// The whole-file reader, for the caller's end-of-file summary.
    pub reader: FileReader,
    /// Packets read (filtered or not).
    pub packets: u64,
    /// Damage that ended the file early.
    pub damage: Option<ReadError>,
}

/// Prepares a parallel read of `path`, or `None` when it does not qualify (stdin, pcapng, small
/// file, one core, no split point found). `WEIR_PARALLEL_MIN_BYTES` lowers the size threshold,
/// so tests can exercise this path on small files.
pub fn plan(path: &Path) -> Option<Plan> {
    plan_ranges(path, RANGE_BYTES)
}

/// [`plan`] with ranges of about `range_bytes` (smaller ranges: less memory in flight, so
/// buffers are reused sooner; larger: fewer hand-offs).
pub fn plan_ranges(path: &Path, range_bytes: u64) -> Option<Plan> {
    let min = std::env::var("WEIR_PARALLEL_MIN_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MIN_BYTES);
    plan_with(path, range_bytes, min)
}

fn plan_with(path: &Path, range_bytes: u64, min: u64) -> Option<Plan> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let len = std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())?;
    if threads < 2 || len < min || path.as_os_str() == "-" {
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
        interfaces: reader.interfaces().to_vec(),
        reader,
        ranges,
        threads,
        lookahead: 2 * threads + 1,
    })
}

/// Everything the workers share.
struct Shared {
    next: AtomicUsize,
    stop: AtomicBool,
    /// Ranges consumed so far, and the condition workers wait on to stay within the lookahead.
    consumed: Mutex<usize>,
    moved_on: Condvar,
    ranges: Vec<Mutex<Option<FileReader>>>,
}

/// A range's results.
struct Done<B> {
    index: usize,
    batch: B,
    packets: u64,
    end: Option<ReadError>,
}

/// Stops the workers when the consumer leaves, whatever the reason (an error included).
struct StopOnDrop<'a>(&'a Shared);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Relaxed);
        let _guard = self.0.consumed.lock();
        self.0.moved_on.notify_all();
    }
}

/// Reads one range whole: its packets that pass `filter` go into a fresh batch; also returns
/// the packets read and the damage that ended the range early, if any.
fn read_range<B>(
    range: &Mutex<Option<FileReader>>,
    filter: Option<&Filter>,
    new: &impl Fn() -> B,
    produce: &impl Fn(&mut B, &Packet<'_>),
) -> (B, u64, Option<ReadError>) {
    let mut r = range.lock().expect("lock").take().expect("each range once");
    let (mut batch, mut packets) = (new(), 0);
    loop {
        match r.next_packet() {
            Ok(Some(p)) => {
                packets += 1;
                if filter.is_none_or(|f| f.matches(p.data, p.meta.orig_len)) {
                    produce(&mut batch, &p);
                }
            }
            Ok(None) => return (batch, packets, None),
            Err(e) => return (batch, packets, Some(e)),
        }
    }
}

fn worker<B, N, P>(
    s: &Shared,
    tx: crossbeam_channel::Sender<Done<B>>,
    filter: Option<&Filter>,
    (new, produce): (&N, &P),
    lookahead: usize,
) where
    N: Fn() -> B,
    P: Fn(&mut B, &Packet<'_>),
{
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if i >= s.ranges.len() {
            return;
        }
        {
            let mut consumed = s.consumed.lock().expect("lock");
            while i >= *consumed + lookahead && !s.stop.load(Ordering::Relaxed) {
                consumed = s.moved_on.wait(consumed).expect("lock");
            }
        }
        if s.stop.load(Ordering::Relaxed) {
            return;
        }
        let (batch, packets, end) = read_range(&s.ranges[i], filter, new, produce);
        let done = Done {
            index: i,
            batch,
            packets,
            end,
        };
        if tx.send(done).is_err() {
            return;
        }
    }
}

/// Runs the plan: `produce` on the workers, `consume` here in file order (it gets the whole-file
/// reader too, e.g. to re-read a packet by its offset).
pub fn run<T, P, C>(
    plan: Plan,
    filter: Option<&Filter>,
    produce: P,
    mut consume: C,
) -> Result<Outcome>
where
    T: Send,
    P: Fn(&Packet<'_>) -> T + Sync,
    C: FnMut(T, &mut FileReader) -> Result<Flow>,
{
    run_batches(
        plan,
        filter,
        1,
        Vec::new,
        |items: &mut Vec<T>, p| items.push(produce(p)),
        |items, reader| {
            for item in items {
                if consume(item, reader)? == Flow::Stop {
                    return Ok(Flow::Stop);
                }
            }
            Ok(Flow::Continue)
        },
    )
}

/// [`run`] a batch at a time: each worker collects a whole range into a `B` made by `new`
/// (`produce` adds one packet), and `consume` gets the ranges' batches in file order. After a
/// wrong split guess the rest of the file is read here, in batches of `fallback` packets.
pub fn run_batches<B, N, P, C>(
    plan: Plan,
    filter: Option<&Filter>,
    fallback: usize,
    new: N,
    produce: P,
    mut consume: C,
) -> Result<Outcome>
where
    B: Send,
    N: Fn() -> B + Sync,
    P: Fn(&mut B, &Packet<'_>) + Sync,
    C: FnMut(B, &mut FileReader) -> Result<Flow>,
{
    let Plan {
        mut reader,
        ranges,
        threads,
        lookahead,
        ..
    } = plan;
    let n = ranges.len();
    let (tx, rx) = crossbeam_channel::unbounded();
    let shared = Shared {
        next: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        consumed: Mutex::new(0),
        moved_on: Condvar::new(),
        ranges: ranges.into_iter().map(|r| Mutex::new(Some(r))).collect(),
    };
    let mut packets = 0u64;
    let (stopped, early) = std::thread::scope(|scope| -> Result<(Option<ReadError>, bool)> {
        for _ in 0..threads {
            let tx = tx.clone();
            let (shared, steps) = (&shared, (&new, &produce));
            scope.spawn(move || worker(shared, tx, filter, steps, lookahead));
        }
        // The channel closes when every worker is gone (even by a panic), so `recv` cannot hang.
        drop(tx);
        let _stop = StopOnDrop(&shared);
        let mut pending = BTreeMap::new();
        let mut expect = 0;
        while expect < n {
            let Ok(done) = rx.recv() else {
                anyhow::bail!("a reader thread stopped unexpectedly");
            };
            pending.insert(done.index, done);
            while let Some(done) = pending.remove(&expect) {
                packets += done.packets;
                if consume(done.batch, &mut reader)? == Flow::Stop {
                    return Ok((None, true));
                }
                expect += 1;
                *shared.consumed.lock().expect("lock") = expect;
                shared.moved_on.notify_all();
                if done.end.is_some() {
                    return Ok((done.end, false));
                }
            }
        }
        Ok((None, false))
    })?;
    let damage = match stopped {
        _ if early => None,
        None => None,
        // A range stopped early: continue from there with the whole-file reader, which either
        // reads on (the split guess was wrong) or meets the same damage (it was real).
        Some(ReadError::Damaged { offset, .. }) => {
            let (read, damage) = read_on(
                &mut reader,
                (offset, packets),
                filter,
                fallback,
                &new,
                &produce,
                consume,
            )?;
            packets += read;
            damage
        }
        Some(other) => Some(other),
    };
    Ok(Outcome {
        reader,
        packets,
        damage,
    })
}

/// After a range stopped early at `offset`, `before` packets into the file: the whole-file
/// reader continues from there, which either reads on (the split guess was wrong) or meets the
/// same damage (it was real), handing `consume` batches of `fallback` packets. Returns the
/// packets read here and the damage met.
fn read_on<B, C>(
    reader: &mut FileReader,
    (offset, before): (u64, u64),
    filter: Option<&Filter>,
    fallback: usize,
    new: &impl Fn() -> B,
    produce: &impl Fn(&mut B, &Packet<'_>),
    mut consume: C,
) -> Result<(u64, Option<ReadError>)>
where
    C: FnMut(B, &mut FileReader) -> Result<Flow>,
{
    tracing::debug!("a range stopped at byte {offset}; reading on sequentially from there");
    reader.resume_at(offset, before)?;
    let (mut batch, mut held, mut packets) = (new(), 0, 0);
    let mut damage = None;
    loop {
        match reader.next_packet() {
            Ok(Some(p)) => {
                packets += 1;
                if filter.is_none_or(|f| f.matches(p.data, p.meta.orig_len)) {
                    produce(&mut batch, &p);
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
            if consume(std::mem::replace(&mut batch, new()), reader)? == Flow::Stop {
                return Ok((packets, None));
            }
        }
    }
    if held > 0 {
        consume(batch, reader)?;
    }
    Ok((packets, damage))
}

/// One lane's queue in [`run_lanes`]: the parts read but not yet run, by range index.
struct Queue<Part> {
    pending: BTreeMap<usize, Part>,
    /// The range whose part this lane runs next.
    next: usize,
    /// A thread is running one of this lane's parts.
    busy: bool,
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

/// Everything the threads of [`run_lanes`] share.
struct LaneShared<Part> {
    next_range: AtomicUsize,
    ranges: Vec<Mutex<Option<FileReader>>>,
    lanes: Vec<Mutex<Queue<Part>>>,
    /// Per lane, a copy of `Queue::next` for the look-ahead wait (read without the lane lock).
    ran: Vec<AtomicUsize>,
    /// `Ends::usable`, read under a lane's lock (see [`LaneShared::drive`]).
    usable: AtomicUsize,
    ends: Mutex<Ends>,
    stop: AtomicBool,
    /// Readers wait here to stay within the look-ahead; notified when a lane moves on.
    progress: Mutex<()>,
    moved_on: Condvar,
}

impl<Part> LaneShared<Part> {
    /// Runs lane `s`'s parts for as long as the next one is read and usable, unless another
    /// thread is running the lane: that one looks again when it is done.
    ///
    /// No part is forgotten: whoever adds a part or raises `usable` calls this afterwards and
    /// takes the lane's lock, and the running thread re-reads both under that lock after each
    /// part, so one of the two sees the change.
    fn drive(&self, s: usize, run: &impl Fn(usize, Part)) {
        loop {
            let part = {
                let mut q = self.lanes[s].lock().expect("lock");
                if q.busy || q.next >= self.usable.load(Ordering::Acquire) {
                    return;
                }
                let next = q.next;
                let Some(part) = q.pending.remove(&next) else {
                    return;
                };
                q.busy = true;
                part
            };
            run(s, part);
            {
                let mut q = self.lanes[s].lock().expect("lock");
                q.next += 1;
                q.busy = false;
                self.ran[s].store(q.next, Ordering::Release);
            }
            let _guard = self.progress.lock().expect("lock");
            self.moved_on.notify_all();
        }
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
                self.halt();
            }
        }
        self.usable.store(e.usable, Ordering::Release);
    }

    /// Stops the readers (damage, or a thread panicked) and wakes the waiting ones.
    fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _guard = self.progress.lock();
        self.moved_on.notify_all();
    }
}

/// Halts the other threads of [`run_lanes`] if this one panics (so none waits forever).
struct HaltOnPanic<'a, Part>(&'a LaneShared<Part>);

impl<Part> Drop for HaltOnPanic<'_, Part> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.halt();
        }
    }
}

fn lane_worker<B, Part>(
    sh: &LaneShared<Part>,
    filter: Option<&Filter>,
    lookahead: usize,
    (new, produce): (&impl Fn() -> B, &impl Fn(&mut B, &Packet<'_>)),
    (split, run): (&impl Fn(B) -> Vec<Part>, &impl Fn(usize, Part)),
) {
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
        let (batch, packets, end) = read_range(&sh.ranges[i], filter, new, produce);
        for (s, part) in split(batch).into_iter().enumerate() {
            sh.lanes[s].lock().expect("lock").pending.insert(i, part);
        }
        sh.ended(i, packets, end);
        for s in 0..sh.lanes.len() {
            sh.drive(s, run);
        }
    }
}

/// Reads the plan on every core like [`run_batches`], but consumes in `lanes` independent
/// lanes instead of one: each range's batch is `split` into one part per lane, and each lane's
/// parts are `run` in file order, by whichever reading thread finds the lane free, so the
/// threads that read also consume (a part is usually run by the thread that just made it,
/// while it is in that core's cache), and two lanes run at once on two threads.
///
/// Exactness is that of [`run_batches`]: a range's parts run only once every earlier range has
/// been read and ended cleanly at its end. After a range that stopped early, the later ranges'
/// parts are dropped unrun and the rest of the file is read here, sequentially, in batches of
/// `fallback` packets, each split and run lane by lane.
pub fn run_lanes<B, Part, N, P, S, R>(
    plan: Plan,
    filter: Option<&Filter>,
    (fallback, lanes): (usize, usize),
    (new, produce): (N, P),
    (split, run): (S, R),
) -> Result<Outcome>
where
    Part: Send,
    N: Fn() -> B + Sync,
    P: Fn(&mut B, &Packet<'_>) + Sync,
    S: Fn(B) -> Vec<Part> + Sync,
    R: Fn(usize, Part) + Sync,
{
    let Plan {
        mut reader,
        ranges,
        threads,
        lookahead,
        ..
    } = plan;
    let n = ranges.len();
    let sh = LaneShared {
        next_range: AtomicUsize::new(0),
        ranges: ranges.into_iter().map(|r| Mutex::new(Some(r))).collect(),
        lanes: (0..lanes)
            .map(|_| {
                Mutex::new(Queue {
                    pending: BTreeMap::new(),
                    next: 0,
                    busy: false,
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
    };
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let sh = &sh;
            let steps = (&new, &produce);
            let lanes = (&split, &run);
            scope.spawn(move || lane_worker(sh, filter, lookahead, steps, lanes));
        }
    });
    let ends = sh.ends.into_inner().expect("lock");
    for q in &sh.lanes {
        let q = q.lock().expect("lock");
        debug_assert_eq!(q.next, ends.usable, "every usable part ran");
    }
    let mut packets = ends.packets;
    let damage = match ends.damage {
        Some(ReadError::Damaged { offset, .. }) => {
            let consume = |b: B, _: &mut FileReader| {
                for (s, part) in split(b).into_iter().enumerate() {
                    run(s, part);
                }
                Ok(Flow::Continue)
            };
            let (read, damage) = read_on(
                &mut reader,
                (offset, packets),
                filter,
                fallback,
                &new,
                &produce,
                consume,
            )?;
            packets += read;
            damage
        }
        other => other,
    };
    Ok(Outcome {
        reader,
        packets,
        damage,
    })
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

    /// Runs `bytes` through [`run_lanes`] with `lanes` lanes (packet `i` goes to lane
    /// `i % lanes`); returns each lane's packets in the order they ran, and the outcome.
    fn lanes_of(bytes: &[u8], lanes: usize) -> (Vec<Vec<u32>>, Outcome) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pcap");
        std::fs::write(&path, bytes).unwrap();
        let plan = plan_with(&path, 16 << 10, 0).expect("a plan").lookahead(3);
        let ran: Vec<Mutex<Vec<u32>>> = (0..lanes).map(|_| Mutex::new(Vec::new())).collect();
        let running: Vec<AtomicBool> = (0..lanes).map(|_| AtomicBool::new(false)).collect();
        let outcome = run_lanes(
            plan,
            None,
            (100, lanes),
            (Vec::new, |b: &mut Vec<u32>, p: &Packet<'_>| {
                b.push((p.meta.ts_ns / 1_000_000_000) as u32)
            }),
            (
                |b: Vec<u32>| {
                    let mut parts = vec![Vec::new(); lanes];
                    for i in b {
                        parts[i as usize % lanes].push(i);
                    }
                    parts
                },
                |s: usize, part: Vec<u32>| {
                    assert!(
                        !running[s].swap(true, Ordering::SeqCst),
                        "lane {s} run twice at once"
                    );
                    ran[s].lock().unwrap().extend(part);
                    running[s].store(false, Ordering::SeqCst);
                },
            ),
        )
        .unwrap();
        let ran = ran.into_iter().map(|m| m.into_inner().unwrap()).collect();
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

    /// A record claiming 4 GB in the middle: the lanes get exactly the packets before it (the
    /// later ranges are dropped, the sequential reader meets the same damage), and the damage
    /// report counts them.
    #[test]
    fn lanes_stop_at_damage_like_the_sequential_reader() {
        let n = 30_000;
        let mut bytes = pcap(n);
        let (mut at, mut i) = (24, 0);
        while i < 12_345 {
            let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            at += 16 + len as usize;
            i += 1;
        }
        bytes[at + 8..at + 12].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
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
}
