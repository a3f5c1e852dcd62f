//! Packet buffer benchmark: weir-buffer against a `crossbeam_queue::ArrayQueue<Vec<u8>>`.
//!
//! Both carry the same packets from 1 or 2 writer threads to one reader thread: weir copies each
//! packet into the shared buffer as a pcapng record (one `fetch_add` per packet) and the reader
//! walks the committed records in batches, zero-copy; the baseline copies each packet into a new
//! `Vec<u8>` and pushes it through crossbeam's bounded MPMC queue (Vyukov's algorithm), the
//! reader pops and frees it. The reader touches every packet (first byte and length) in both.
//! Writers retry when the buffer/queue is full (so every packet arrives and throughput is
//! comparable; in weir's real use a full buffer drops and counts instead). The queue holds as
//! many packets as the buffer has room for.
//!
//! Rounds of the two alternate; the median round gives Mpps (packets delivered per second of
//! wall time) and CPU ns per packet (user + system time of the process over packets). On a
//! shared 2-core machine absolute numbers move; the ratio is the result.
//!
//! The first row of each size runs writer and reader on one thread (push 256, read them back):
//! the cost of the operations alone, with no cache-line transfers between cores.
//!
//! `cargo run --release -p weir-bench --bin bench_buffer -- [--rounds 5] [--packets N]`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use crossbeam_queue::ArrayQueue;
use weir_buffer::{pcapng::record_len, Config, Dropped, PacketBuffer};

/// Time weir's packet buffer against crossbeam's ArrayQueue<Vec<u8>>.
#[derive(Parser)]
struct Args {
    /// Rounds per contender and case (the median is reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Packets per round for 64-byte packets (1500-byte rounds carry a quarter as many).
    #[arg(long, default_value_t = 4_000_000)]
    packets: u64,
    /// Buffer size in MiB (a power of two).
    #[arg(long, default_value_t = 64)]
    buffer_mib: usize,
}

/// One measured round.
#[derive(Clone, Copy)]
struct Round {
    secs: f64,
    cpu_secs: f64,
    packets: u64,
    retries: u64,
}

impl Round {
    fn mpps(&self) -> f64 {
        self.packets as f64 / self.secs / 1e6
    }
    fn cpu_ns(&self) -> f64 {
        self.cpu_secs * 1e9 / self.packets as f64
    }
}

fn cpu_time() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc_rusage::Rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let ru = unsafe {
        libc_rusage::getrusage(0, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc_rusage::Timeval| t.sec as f64 + t.usec as f64 * 1e-6;
    tv(ru.utime) + tv(ru.stime)
}

/// The two fields of `struct rusage` we need, declared here to keep the bench crate's
/// dependencies as they are (Linux x86-64/arm64 layout: two timevals first).
mod libc_rusage {
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub(crate) struct Timeval {
        pub sec: i64,
        pub usec: i64,
    }
    #[repr(C)]
    pub(crate) struct Rusage {
        pub utime: Timeval,
        pub stime: Timeval,
        pub rest: [i64; 14],
    }
    extern "C" {
        pub(crate) fn getrusage(who: i32, usage: *mut Rusage) -> i32;
    }
}

/// A 64/1500-byte packet whose bytes differ per writer.
fn packet(size: usize, id: usize) -> Vec<u8> {
    (0..size).map(|i| (i + id) as u8).collect()
}

fn run_weir(buf: &PacketBuffer, size: usize, writers: usize, total: u64) -> Round {
    let mut reader = buf.reader(0).expect("one reader");
    let per = total / writers as u64;
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|id| {
            let mut w = buf.writer().expect("writer slot");
            std::thread::spawn(move || {
                let data = packet(size, id);
                let mut retries = 0u64;
                for n in 0..per {
                    loop {
                        match w.push(id as u32, n, size as u32, &data) {
                            Ok(()) => break,
                            Err(Dropped::Full) => {
                                retries += 1;
                                std::hint::spin_loop();
                                if retries % 64 == 0 {
                                    std::thread::yield_now();
                                }
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                retries
            })
        })
        .collect();
    let want = per * writers as u64;
    let (mut got, mut sum, mut idle) = (0u64, 0u64, 0u64);
    while got < want {
        match reader.next_batch() {
            Some(batch) => {
                for r in batch.records() {
                    sum = sum.wrapping_add(u64::from(r.data()[0]) + r.data().len() as u64);
                    got += 1;
                }
                batch.release();
            }
            None => {
                idle += 1;
                if idle % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        }
    }
    black_box(sum);
    let retries = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let secs = t0.elapsed().as_secs_f64();
    drop(reader);
    Round {
        secs,
        cpu_secs: cpu_time() - cpu0,
        packets: got,
        retries,
    }
}

fn run_queue(capacity: usize, size: usize, writers: usize, total: u64) -> Round {
    let q = Arc::new(ArrayQueue::<Vec<u8>>::new(capacity));
    let per = total / writers as u64;
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|id| {
            let q = q.clone();
            std::thread::spawn(move || {
                let data = packet(size, id);
                let mut retries = 0u64;
                for _ in 0..per {
                    let mut v = data.to_vec();
                    while let Err(back) = q.push(v) {
                        v = back;
                        retries += 1;
                        std::hint::spin_loop();
                        if retries % 64 == 0 {
                            std::thread::yield_now();
                        }
                    }
                }
                retries
            })
        })
        .collect();
    let want = per * writers as u64;
    let (mut got, mut sum, mut idle) = (0u64, 0u64, 0u64);
    while got < want {
        match q.pop() {
            Some(v) => {
                sum = sum.wrapping_add(u64::from(v[0]) + v.len() as u64);
                got += 1;
            }
            None => {
                idle += 1;
                if idle % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        }
    }
    black_box(sum);
    let retries = handles.into_iter().map(|h| h.join().unwrap()).sum();
    Round {
        secs: t0.elapsed().as_secs_f64(),
        cpu_secs: cpu_time() - cpu0,
        packets: got,
        retries,
    }
}

/// One thread pushes 256 packets, then reads them back: the cost of the operations themselves,
/// without cache-line transfers between cores or scheduling.
fn run_weir_one_thread(buf: &PacketBuffer, size: usize, total: u64) -> Round {
    let mut reader = buf.reader(0).expect("one reader");
    let mut w = buf.writer().expect("writer slot");
    let data = packet(size, 0);
    let (cpu0, t0) = (cpu_time(), Instant::now());
    let (mut got, mut sum) = (0u64, 0u64);
    while got < total {
        for n in 0..256 {
            w.push(0, n, size as u32, &data)
                .expect("room for 256 packets");
        }
        let batch = reader.next_batch().expect("256 packets");
        for r in batch.records() {
            sum = sum.wrapping_add(u64::from(r.data()[0]) + r.data().len() as u64);
            got += 1;
        }
        batch.release();
    }
    black_box(sum);
    Round {
        secs: t0.elapsed().as_secs_f64(),
        cpu_secs: cpu_time() - cpu0,
        packets: got,
        retries: 0,
    }
}

/// The same with the queue.
fn run_queue_one_thread(capacity: usize, size: usize, total: u64) -> Round {
    let q = ArrayQueue::<Vec<u8>>::new(capacity);
    let data = packet(size, 0);
    let (cpu0, t0) = (cpu_time(), Instant::now());
    let (mut got, mut sum) = (0u64, 0u64);
    while got < total {
        for _ in 0..256 {
            q.push(data.to_vec()).expect("room for 256 packets");
        }
        while let Some(v) = q.pop() {
            sum = sum.wrapping_add(u64::from(v[0]) + v.len() as u64);
            got += 1;
        }
    }
    black_box(sum);
    Round {
        secs: t0.elapsed().as_secs_f64(),
        cpu_secs: cpu_time() - cpu0,
        packets: got,
        retries: 0,
    }
}

fn median(mut v: Vec<Round>) -> Round {
    v.sort_by(|a, b| a.secs.total_cmp(&b.secs));
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bytes = args.buffer_mib << 20;
    println!(
        "# weir-buffer vs crossbeam ArrayQueue<Vec<u8>>, {} rounds, median; {} MiB buffer",
        args.rounds, args.buffer_mib
    );
    println!(
        "{:>5} {:>7} | {:>9} {:>9} {:>8} | {:>9} {:>9} {:>8} | {:>8}",
        "bytes",
        "writers",
        "weir Mpps",
        "ns CPU/p",
        "retries",
        "queue Mpps",
        "ns CPU/p",
        "retries",
        "weir/q"
    );
    let mut pages = None;
    for size in [64usize, 1500] {
        let total = if size == 64 {
            args.packets
        } else {
            args.packets / 4
        };
        for writers in [0usize, 1, 2] {
            // The queue holds as many packets as the buffer has room for.
            let capacity = bytes / record_len(size);
            let (mut weir, mut queue) = (Vec::new(), Vec::new());
            for _ in 0..args.rounds {
                // A fresh buffer per round (its one registered reader is used up by the round).
                let buf = Config::new(bytes).max_writers(2).max_caplen(1514).build()?;
                pages.get_or_insert(buf.page_kind());
                if writers == 0 {
                    weir.push(run_weir_one_thread(&buf, size, total));
                    drop(buf);
                    queue.push(run_queue_one_thread(capacity, size, total));
                } else {
                    weir.push(run_weir(&buf, size, writers, total));
                    drop(buf);
                    queue.push(run_queue(capacity, size, writers, total));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let (w, q) = (median(weir), median(queue));
            println!(
                "{size:>5} {:>7} | {:>9.2} {:>9.1} {:>8} | {:>9.2} {:>9.1} {:>8} | {:>7.2}x",
                if writers == 0 {
                    "1 (same)".to_string()
                } else {
                    writers.to_string()
                },
                w.mpps(),
                w.cpu_ns(),
                w.retries,
                q.mpps(),
                q.cpu_ns(),
                q.retries,
                w.mpps() / q.mpps()
            );
        }
    }
    if let Some(p) = pages {
        println!("# buffer memory: {}", p.name());
    }
    Ok(())
}
