//! A sink run on a thread of its own ([`Threaded`]): the meter hands records over in batches
//! through a bounded channel and goes on metering while the sink's thread serialises, compresses
//! and writes (Kafka's producer, Parquet's files). On a machine with a spare core this hides
//! the sink's wall time; its CPU time stays what it was (plus the hand-over, ≈ one copy of each
//! record).
//!
//! * **Order**: records and ticks reach the sink in the order the meter gave them.
//! * **Back-pressure**: at most [`QUEUED_BATCHES`] batches wait; a meter faster than the sink
//!   waits for room (nothing is dropped here: a sink that drops, like Kafka's bounded producer
//!   queue, still counts what it drops).
//! * **Errors**: the first error of the sink stops its thread; the next `export`/`tick` (or
//!   `finish`) returns it, and the records handed over after it are counted as dropped.
//! * **Ticks**: a tick is handed over with the next batch, or when packet time moved by
//!   [`TICK_NS`] since the last one handed over: with the records gathered so far, or, when
//!   there are none, on its own once [`TICK_WALL`] of wall time passed since the last
//!   hand-over; the thread also repeats the last tick when nothing came for 100 ms (Kafka
//!   serves its delivery reports then). Live, packet time is wall time and a tick goes every
//!   100 ms; a file is read hours of packet time a second, and without the wall-time bound
//!   every 100 ms of packet time woke the sink's thread (session 21: 35 000 hand-overs and
//!   70 000 context switches a run with weir on one core, +35 to +83 % of its CPU).
//! * **Parked records**: a due tick that finds records waiting within [`TICK_WALL`] of the
//!   last hand-over does not wake the sink's thread: it parks them (with the tick) where the
//!   thread looks when nothing came for 100 ms, so a run whose input stalls (stdin held open)
//!   still has them exported. The meter's side takes the parked records back, before its own,
//!   into its next hand-over; the thread takes them only when the channel is empty, checked
//!   under the park's lock (everything sent before a park is then seen first): order holds.

use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir_flows::FlowRecord;

use crate::sink::{ExportStats, FlowSink};
use crate::ExportError;

/// Records per batch handed to the sink's thread.
pub(crate) const BATCH: usize = 1024;

/// Batches that may wait for the sink's thread.
pub(crate) const QUEUED_BATCHES: usize = 16;

/// Packet time between two ticks handed over without a full batch, ns.
const TICK_NS: u64 = 100_000_000;

/// Wall time between two hand-overs before a tick is handed over without a full batch.
const TICK_WALL: Duration = Duration::from_millis(10);

/// Records a due tick did not hand over (see the module documentation), and that tick.
#[derive(Default)]
struct Parked {
    recs: Vec<FlowRecord>,
    tick: u64,
}

/// What the meter's side sends.
enum Msg {
    /// Records, then the latest tick (0: none yet).
    Records(Vec<FlowRecord>, u64),
    /// A tick.
    Tick(u64),
}

/// A [`FlowSink`] whose work runs on its own thread (see the module documentation).
pub(crate) struct Threaded {
    tx: Option<SyncSender<Msg>>,
    /// Emptied batch vectors coming back for reuse.
    spare: Receiver<Vec<FlowRecord>>,
    thread: Option<JoinHandle<Result<ExportStats, ExportError>>>,
    batch: Vec<FlowRecord>,
    /// The latest tick given, and the one last handed over.
    tick: u64,
    sent_tick: u64,
    /// When the last batch or tick was handed over.
    handed_at: Instant,
    /// The sink's totals, as of its last batch.
    live: Arc<Mutex<ExportStats>>,
    /// Records parked for the sink's thread.
    parked: Arc<Mutex<Parked>>,
    /// Records handed over after the sink failed, or not handed over because it had.
    lost: u64,
}

impl Threaded {
    /// Starts `sink` on a thread named `name`.
    pub(crate) fn spawn<S: FlowSink + 'static>(
        name: &str,
        mut sink: S,
    ) -> Result<Threaded, ExportError> {
        let (tx, rx) = sync_channel::<Msg>(QUEUED_BATCHES);
        let (back, spare) = sync_channel::<Vec<FlowRecord>>(QUEUED_BATCHES + 2);
        let live = Arc::new(Mutex::new(ExportStats::default()));
        let shared = live.clone();
        let parked = Arc::new(Mutex::new(Parked::default()));
        let park = parked.clone();
        let thread = std::thread::Builder::new()
            .name(name.chars().take(15).collect())
            .spawn(move || run(&mut sink, &rx, &back, &shared, &park))?;
        Ok(Threaded {
            tx: Some(tx),
            spare,
            thread: Some(thread),
            batch: Vec::with_capacity(BATCH),
            tick: 0,
            sent_tick: 0,
            // the first tick goes at once
            handed_at: Instant::now()
                .checked_sub(TICK_WALL)
                .unwrap_or_else(Instant::now),
            live,
            parked,
            lost: 0,
        })
    }

    /// Hands `msg` over; when the sink's thread has stopped (an error), joins it and returns
    /// its error.
    fn send(&mut self, msg: Msg) -> Result<(), ExportError> {
        let Some(tx) = &self.tx else {
            return Err(self.stopped());
        };
        match tx.send(msg) {
            Ok(()) => Ok(()),
            Err(std::sync::mpsc::SendError(msg)) => {
                if let Msg::Records(r, _) = msg {
                    self.lost += r.len() as u64;
                }
                self.tx = None;
                Err(self.stopped())
            }
        }
    }

    /// The error that stopped the sink's thread (the first time; afterwards a generic one).
    fn stopped(&mut self) -> ExportError {
        let result = self.thread.take().map(|t| t.join());
        match result {
            Some(Ok(Err(e))) => e,
            Some(Ok(Ok(_))) | None => ExportError::Thread("it had stopped on an error".into()),
            Some(Err(_)) => ExportError::Thread("it panicked".into()),
        }
    }

    /// Hands the gathered records over with the latest tick, the parked ones first.
    fn flush(&mut self) -> Result<(), ExportError> {
        let parked = std::mem::take(&mut lock(&self.parked).recs);
        if !parked.is_empty() {
            let mine = std::mem::replace(&mut self.batch, parked);
            self.batch.extend_from_slice(&mine);
        }
        let next = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let batch = std::mem::replace(&mut self.batch, next);
        self.sent_tick = self.tick;
        self.handed_at = Instant::now();
        self.send(Msg::Records(batch, self.tick))
    }
}

/// The sink's thread: serves batches and ticks until the meter's side closes the channel, then
/// finishes the sink.
fn run<S: FlowSink>(
    sink: &mut S,
    rx: &Receiver<Msg>,
    back: &SyncSender<Vec<FlowRecord>>,
    live: &Mutex<ExportStats>,
    parked: &Mutex<Parked>,
) -> Result<ExportStats, ExportError> {
    let mut tick = 0;
    loop {
        let msg = match rx.recv_timeout(Duration::from_millis(100)) {
            Err(RecvTimeoutError::Timeout) => {
                // Parked records are newer than anything sent before they were parked: taken
                // only when the channel is empty under the park's lock.
                let mut p = lock(parked);
                match rx.try_recv() {
                    Ok(msg) => Ok(msg),
                    Err(_) if p.recs.is_empty() => Err(RecvTimeoutError::Timeout),
                    Err(_) => {
                        let recs = std::mem::take(&mut p.recs);
                        Ok(Msg::Records(recs, p.tick))
                    }
                }
            }
            other => other,
        };
        match msg {
            Ok(Msg::Records(mut recs, t)) => {
                for r in &recs {
                    sink.export(r)?;
                }
                if t > 0 {
                    tick = t;
                    sink.tick(t)?;
                }
                recs.clear();
                let _ = back.try_send(recs);
                *lock(live) = sink.stats();
            }
            Ok(Msg::Tick(t)) => {
                tick = t;
                sink.tick(t)?;
                *lock(live) = sink.stats();
            }
            Err(RecvTimeoutError::Timeout) => {
                if tick > 0 {
                    sink.tick(tick)?;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return sink.finish(),
        }
    }
}

impl FlowSink for Threaded {
    fn export(&mut self, rec: &FlowRecord) -> Result<(), ExportError> {
        if self.tx.is_none() {
            self.lost += 1;
            return Err(ExportError::Thread("it had stopped on an error".into()));
        }
        self.batch.push(*rec);
        if self.batch.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn tick(&mut self, now_ns: u64) -> Result<(), ExportError> {
        self.tick = self.tick.max(now_ns);
        if self.tick.saturating_sub(self.sent_tick) >= TICK_NS {
            if self.handed_at.elapsed() < TICK_WALL {
                // too soon to wake the sink's thread: the records wait where it looks when idle
                if !self.batch.is_empty() && self.tx.is_some() {
                    let mut p = lock(&self.parked);
                    if p.recs.is_empty() {
                        std::mem::swap(&mut p.recs, &mut self.batch);
                    } else {
                        p.recs.append(&mut self.batch);
                    }
                    p.tick = self.tick;
                }
                self.sent_tick = self.tick;
            } else if self.batch.is_empty() && lock(&self.parked).recs.is_empty() {
                self.sent_tick = self.tick;
                self.handed_at = Instant::now();
                self.send(Msg::Tick(self.tick))?;
            } else {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ExportStats, ExportError> {
        let parked = lock(&self.parked).recs.len();
        if (!self.batch.is_empty() || parked > 0) && self.tx.is_some() {
            let _ = self.flush();
        }
        self.tx = None; // the thread finishes the sink and returns
        let mut stats = match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r?,
            Some(Err(_)) => return Err(ExportError::Thread("it panicked".into())),
            None => {
                return Err(ExportError::Thread(format!(
                    "it had stopped on an error; {} records were not exported",
                    self.lost
                )))
            }
        };
        stats.dropped += self.lost;
        Ok(stats)
    }

    fn stats(&self) -> ExportStats {
        *lock(&self.live)
    }
}

/// Locks `m`, also when a panicking thread poisoned it (the data stays consistent: every
/// critical section here is a plain move).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_flows::{Direction, EndReason, FlowKey};

    /// Keeps the records' packet counts and the ticks it saw, in order; fails its `fail_at`th
    /// record.
    struct Keeping {
        seen: Arc<Mutex<Vec<(char, u64)>>>,
        fail_at: u64,
        records: u64,
    }

    impl FlowSink for Keeping {
        fn export(&mut self, rec: &FlowRecord) -> Result<(), ExportError> {
            self.records += 1;
            if self.records == self.fail_at {
                return Err(ExportError::Unsupported("record refused".into()));
            }
            self.seen.lock().unwrap().push(('r', rec.forward.packets));
            Ok(())
        }
        fn tick(&mut self, now_ns: u64) -> Result<(), ExportError> {
            self.seen.lock().unwrap().push(('t', now_ns));
            Ok(())
        }
        fn finish(&mut self) -> Result<ExportStats, ExportError> {
            Ok(ExportStats {
                records: self.records,
                ..ExportStats::default()
            })
        }
    }

    /// What a [`Keeping`] sink saw: `('r', packets)` per record, `('t', ns)` per tick.
    type Seen = Arc<Mutex<Vec<(char, u64)>>>;

    /// A [`Threaded`] [`Keeping`] sink failing its `fail_at`th record (0: none), and what it
    /// sees.
    fn keeping(fail_at: u64) -> (Threaded, Seen) {
        let seen = Seen::default();
        let sink = Keeping {
            seen: seen.clone(),
            fail_at,
            records: 0,
        };
        (Threaded::spawn("test", sink).unwrap(), seen)
    }

    /// The records `seen` so far (their packet counts), in the order the sink got them.
    fn records(seen: &Mutex<Vec<(char, u64)>>) -> Vec<u64> {
        let seen = seen.lock().unwrap();
        seen.iter().filter(|e| e.0 == 'r').map(|e| e.1).collect()
    }

    fn rec(n: u64) -> FlowRecord {
        FlowRecord {
            key: FlowKey {
                vlan: 0,
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                proto: 17,
                src_port: 1,
                dst_port: 2,
                tos: 0,
            },
            forward: Direction {
                packets: n,
                ..Direction::default()
            },
            reverse: Direction::default(),
            end_reason: EndReason::IdleTimeout,
            tag: None,
        }
    }

    /// Every record reaches the sink once, in order, and a tick after the records given
    /// before it; the totals are the sink's.
    #[test]
    fn records_and_ticks_arrive_in_order() {
        let (mut t, seen) = keeping(0);
        let n = 3 * BATCH as u64 + 7;
        for i in 1..=n {
            t.export(&rec(i)).unwrap();
            if i == 10 {
                t.tick(TICK_NS).unwrap();
            }
        }
        let st = t.finish().unwrap();
        assert_eq!((st.records, st.dropped), (n, 0));
        assert_eq!(records(&seen), (1..=n).collect::<Vec<_>>());
        let seen = seen.lock().unwrap();
        let first_tick = seen.iter().position(|e| *e == ('t', TICK_NS)).unwrap();
        assert_eq!(
            first_tick, 10,
            "the tick comes right after the 10 records before it"
        );
    }

    /// Ticks given faster than [`TICK_WALL`] (a file read hours of packet time a second) are
    /// handed over at most once per [`TICK_WALL`] of wall time (bound computed from the wall
    /// time the loop took) besides those riding with full batches; records and ticks stay in
    /// order.
    #[test]
    fn ticks_given_fast_are_handed_over_once_per_tick_wall() {
        let (mut t, seen) = keeping(0);
        let started = Instant::now();
        let ticks = 10_000u64;
        for i in 1..=ticks {
            t.tick(i * TICK_NS).unwrap();
            // a record every 100 ticks: most ticks find no record waiting
            if i % 100 == 0 {
                t.export(&rec(i)).unwrap();
            }
        }
        let took = started.elapsed();
        let st = t.finish().unwrap();
        assert_eq!(st.records, ticks / 100);
        assert_eq!(
            records(&seen),
            (1..=ticks / 100).map(|i| i * 100).collect::<Vec<_>>()
        );
        let seen = seen.lock().unwrap();
        let handed: Vec<u64> = seen.iter().filter(|e| e.0 == 't').map(|e| e.1).collect();
        // the first at once, then one per TICK_WALL at most (records wait parked, or ride with
        // the next hand-over), and finish's (10 000 without the bound)
        let most = 2 + (took.as_nanos() / TICK_WALL.as_nanos()) as usize;
        assert!(
            !handed.is_empty() && handed.len() <= most,
            "{} ticks handed over in {took:?} (at most {most})",
            handed.len()
        );
        assert_eq!(handed[0], TICK_NS, "the first tick goes at once");
        assert!(handed.windows(2).all(|w| w[0] < w[1]), "{handed:?}");
        // each handed-over tick comes after every record given before it (record i, a
        // multiple of 100, was given after tick i)
        for (at, e) in seen.iter().enumerate() {
            if e.0 == 't' {
                let before = seen[..at].iter().filter(|x| x.0 == 'r').count() as u64;
                // at least those given before it; at most those given up to its hand-over
                // (the last one rides with finish's batch, after record 10 000)
                let n = e.1 / TICK_NS;
                assert!(
                    ((n - 1) / 100..=n / 100).contains(&before),
                    "tick {n} after {before} records"
                );
            }
        }
    }

    /// Records parked by a tick that came too soon after a hand-over reach the sink while the
    /// meter's side gives nothing more (an input that stalls: stdin held open), before
    /// `finish`; records given later follow them in order.
    #[test]
    fn parked_records_reach_the_sink_when_the_input_stalls() {
        let (mut t, seen) = keeping(0);
        t.tick(TICK_NS).unwrap(); // the first tick goes at once
        for i in 1..=5 {
            t.export(&rec(i)).unwrap();
        }
        t.tick(2 * TICK_NS).unwrap(); // within TICK_WALL of the first: parked
                                      // no more input: the sink's thread takes them when idle (after 100 ms); the bound is
                                      // only there to end a broken run
        let waited = Instant::now();
        while records(&seen).len() < 5 && waited.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            records(&seen),
            vec![1, 2, 3, 4, 5],
            "exported before finish"
        );
        assert!(seen.lock().unwrap().contains(&('t', 2 * TICK_NS)));
        for i in 6..=8 {
            t.export(&rec(i)).unwrap();
        }
        let st = t.finish().unwrap();
        assert_eq!((st.records, st.dropped), (8, 0));
        assert_eq!(records(&seen), (1..=8).collect::<Vec<_>>());
    }

    /// The sink's error comes back from a later export (or finish), and finish counts the
    /// records that could not be handed over.
    #[test]
    fn the_sinks_error_comes_back_and_nothing_is_silently_lost() {
        let (mut t, _) = keeping(5);
        let mut err = None;
        let mut given = 0u64;
        for i in 1..=(40 * BATCH as u64) {
            given += 1;
            if let Err(e) = t.export(&rec(i)) {
                err = Some(e);
                break;
            }
        }
        let e = err.expect("the error came back");
        assert_eq!(e.to_string(), "unsupported export: record refused");
        assert!(
            given > BATCH as u64,
            "the error shows once a batch is handed over"
        );
        assert!(t.export(&rec(0)).is_err(), "a stopped sink takes no more");
        let e = t.finish().unwrap_err().to_string();
        assert!(e.contains("records were not exported"), "{e}");
    }
}
