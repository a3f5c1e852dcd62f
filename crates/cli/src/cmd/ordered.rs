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
use weir_source::{FileReader, Interface, Packet, ReadError};

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
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let min = std::env::var("WEIR_PARALLEL_MIN_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MIN_BYTES);
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
        let mut r = s.ranges[i]
            .lock()
            .expect("lock")
            .take()
            .expect("each range once");
        let (mut batch, mut packets, mut end) = (new(), 0, None);
        loop {
            match r.next_packet() {
                Ok(Some(p)) => {
                    packets += 1;
                    if filter.is_none_or(|f| f.matches(p.data, p.meta.orig_len)) {
                        produce(&mut batch, &p);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    end = Some(e);
                    break;
                }
            }
        }
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
            tracing::debug!("a range stopped at byte {offset}; reading on sequentially from there");
            reader.seek(offset)?;
            let (mut batch, mut held) = (new(), 0);
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
                    if consume(std::mem::replace(&mut batch, new()), &mut reader)? == Flow::Stop {
                        return Ok(Outcome {
                            reader,
                            packets,
                            damage: None,
                        });
                    }
                }
            }
            if held > 0 {
                consume(batch, &mut reader)?;
            }
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
