//! Indexing cost: how much CPU `weir-index` spends per packet and per GB, and what share of one
//! core (CPU time of the indexing thread) that is when the recorder writes at the disk's 2 GB/s (the budget: 10 %), on
//! three kinds of traffic (issue 20: the cost must not depend on key diversity):
//!
//! - **diverse**: 64-byte UDP frames with a random source port per packet, 4 096 client and
//!   256 server addresses and 8 server ports (what many clients look like; trafgen's `drnd()`),
//! - **trace**: the corpus trace (built by `mktrace`), replayed,
//! - **one flow**: 64-byte frames that all carry the same keys (the old bench's traffic).
//!
//! The packets are laid out in memory first (untimed); each round builds the index of all of
//! them in 1 GiB segments (128 KiB chunks) and serializes it. For the trace it also times key
//! extraction with the full decoder only, for comparison.
//!
//! `cargo run --release -p weir-bench --bin bench_index -- [--rounds 5] [--packets 3000000]
//! [--traffic diverse,trace,one-flow]`

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use weir_index::{IndexBuilder, Key, PortGrain, DEFAULT_CHUNK};
use weir_packet::LinkType;
use weir_pcap::FileReader;

/// Time the indexer on diverse, corpus and one-flow traffic.
#[derive(Parser)]
struct Args {
    /// Rounds (the median is reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Trace (built by `mktrace`).
    #[arg(long, default_value = "bench/out/trace-3000000.pcap")]
    trace: PathBuf,
    /// Packets of synthetic traffic (diverse and one flow).
    #[arg(long, default_value_t = 3_000_000)]
    packets: usize,
    /// Traffic to run, comma-separated: diverse, trace, one-flow.
    #[arg(long, default_value = "diverse,trace,one-flow")]
    traffic: String,
    /// Ports below this are keys of their own (65536: every port, as index format 3).
    #[arg(long, default_value_t = PortGrain::DEFAULT.exact_below)]
    port_exact_below: u32,
    /// log2 of the ports per key from --port-exact-below on.
    #[arg(long, default_value_t = PortGrain::DEFAULT.bucket_shift)]
    port_bucket_shift: u32,
    /// A chunk with at most this many distinct ports from --port-exact-below on lists them
    /// exactly (0: always per bucket, as index format 4).
    #[arg(long, default_value_t = PortGrain::DEFAULT.chunk_exact_ports)]
    port_chunk_exact: u32,
    /// Write an index part every this many MiB of segment, as the recorder does at its
    /// refreshes, before the final index (0: none; timed with the serializing).
    #[arg(long, default_value_t = 0)]
    part_mib: u64,
}

/// Packets back to back in one allocation, as in the packet buffer the recorder reads, with
/// the file offsets a pcapng segment would give them (an EPB of 32 bytes + data, padded).
#[derive(Default)]
struct Traffic {
    packets: Vec<(u64, u64, LinkType, usize, usize)>,
    all: Vec<u8>,
    bytes: u64,
}

impl Traffic {
    fn push(&mut self, ts: u64, link: LinkType, data: &[u8]) {
        self.packets
            .push((self.bytes, ts, link, self.all.len(), data.len()));
        self.all.extend_from_slice(data);
        self.bytes += 32 + (data.len() as u64).div_ceil(8) * 8;
    }
}

/// A 64-byte Ethernet/IPv4/UDP frame.
fn frame(src: u32, dst: u32, sport: u16, dport: u16) -> [u8; 64] {
    let mut f = [0u8; 64];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..24].copy_from_slice(&[0x45, 0, 0, 50, 0, 1, 0x40, 0, 64, 17]);
    f[26..30].copy_from_slice(&src.to_be_bytes());
    f[30..34].copy_from_slice(&dst.to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f
}

fn synthetic(n: usize, diverse: bool) -> Traffic {
    let mut t = Traffic::default();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..n {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let f = if diverse {
            frame(
                0x0a00_0000 | (r & 0xfff) as u32,
                0xc0a8_0000 | ((r >> 12) & 0xff) as u32,
                (r >> 20) as u16,
                [53, 80, 123, 443, 5060, 8080, 161, 514][(r >> 36) as usize & 7],
            )
        } else {
            frame(0x0a00_0001, 0x0a00_0002, 40000, 53)
        };
        t.push(i as u64 * 1000, LinkType::ETHERNET, &f);
    }
    t
}

fn trace(path: &PathBuf) -> Result<Traffic> {
    let mut r = FileReader::open(path)
        .with_context(|| format!("{} (run mktrace first)", path.display()))?;
    let mut t = Traffic::default();
    while let Some(p) = r.next_packet()? {
        t.push(p.meta.ts_ns, p.link, p.data);
    }
    Ok(t)
}

/// CPU seconds of this thread (the machine is shared: wall time would count others' work).
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

thread_local! {
    /// CPU seconds spent writing parts (of the serializing), in the round running.
    static PARTS_S: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
    /// CPU seconds spent writing parts, per round.
    static PART_ROUNDS: std::cell::Cell<Vec<f64>> = const { std::cell::Cell::new(Vec::new()) };
}

/// CPU seconds to index all of `t`, of which serializing, and the index's bytes, with the indexer or, when `decoder`,
/// with key extraction by the full decoder only (no postings).
fn run(t: &Traffic, decoder: bool, b: &mut IndexBuilder, part_bytes: u64) -> (f64, f64, usize) {
    let start = thread_cpu_s();
    let (mut size, mut ser) = (0, 0.0);
    b.clear();
    // The next part's first chunk and the offset it is due at.
    let (mut next_chunk, mut part_at) = (0, part_bytes);
    let mut keys: Vec<Key> = Vec::new();
    for &(off, ts, link, at, len) in &t.packets {
        let data = &t.all[at..at + len];
        if decoder {
            keys.clear();
            std::hint::black_box(weir_index::keys_of_decoded(link, data, &mut keys));
        } else {
            b.add(off % (1 << 30), ts, link, data);
        }
        if part_bytes > 0 && off % (1 << 30) >= part_at {
            let t = thread_cpu_s();
            let p = b.serialize_part(next_chunk, off % (1 << 30), 0);
            std::hint::black_box(&p.bytes);
            next_chunk = p.next_chunk;
            part_at += part_bytes;
            ser += thread_cpu_s() - t;
            PARTS_S.with(|c| c.set(c.get() + thread_cpu_s() - t));
        }
        if off % (1 << 30) + 2048 > (1 << 30) {
            let t = thread_cpu_s();
            size += b.serialize(1 << 30, 0).len();
            ser += thread_cpu_s() - t;
            b.clear();
            (next_chunk, part_at) = (0, part_bytes);
        }
    }
    let t0 = thread_cpu_s();
    size += b.serialize(t.bytes % (1 << 30), 0).len();
    ser += thread_cpu_s() - t0;
    if !decoder {
        let p = PARTS_S.with(|c| c.replace(0.0));
        PART_ROUNDS.with(|c| {
            let mut v = c.take();
            v.push(p);
            c.set(v);
        });
    }
    (thread_cpu_s() - start, ser, size)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn report(
    name: &str,
    t: &Traffic,
    rounds: usize,
    decoder: bool,
    grain: PortGrain,
    part_bytes: u64,
) -> std::io::Result<()> {
    let (mut secs, mut sers) = (Vec::new(), Vec::new());
    let mut size = 0;
    // One builder, cleared for each segment, as the recorder keeps one.
    let mut b = IndexBuilder::with_port_grain(DEFAULT_CHUNK, grain);
    for _ in 0..rounds {
        let (s, ser, n) = run(t, false, &mut b, part_bytes);
        secs.push(s);
        sers.push(ser);
        size = n;
    }
    let (s, ser) = (median(secs), median(sers.clone()));
    // Each round's parts (the first round's included: the median is the same)
    // and the rest of its serializing (the final index at the close).
    let part_rounds = PART_ROUNDS.with(|c| c.take());
    let parts = median(part_rounds.clone());
    let finals = median(sers.iter().zip(&part_rounds).map(|(s, p)| s - p).collect());
    let (n, gb) = (t.packets.len() as f64, t.bytes as f64 / 1e9);
    writeln!(
        std::io::stdout(),
        "{name:<9} {:>9} packets {:>6.2} GB: {:>6.1} ns/packet (serializing {:.1}{}), {:.3} s CPU per GB = {:>5.1} % of one core at 2 GB/s; index {:.3} % of the data",
        t.packets.len(),
        gb,
        s / n * 1e9,
        ser / n * 1e9,
        if part_bytes > 0 {
            format!(
                ", of which parts {:.1} and the final index {:.1}, medians",
                parts / n * 1e9,
                finals / n * 1e9
            )
        } else {
            String::new()
        },
        s / gb,
        s / gb * 2.0 * 100.0,
        size as f64 * 100.0 / t.bytes as f64
    )?;
    if decoder {
        let s = median((0..rounds).map(|_| run(t, true, &mut b, 0).0).collect());
        writeln!(
            std::io::stdout(),
            "{:<9} key extraction with the full decoder only (no postings): {:.1} ns/packet",
            "",
            s / n * 1e9
        )?;
    }
    Ok(())
}

/// What the wildcard list holds: the packets whose keys the decoder could not read all the
/// way, by what stopped it (layer and error), and the share of chunks they make candidates of
/// every query; beside it the list as it was before damaged packets were indexed (every packet
/// the decoder stopped on).
fn wildcard_census(t: &Traffic) -> std::io::Result<()> {
    let mut by: std::collections::BTreeMap<(bool, String), u64> = Default::default();
    // (packets, chunks, last chunk) with any decoding error (before), and still wildcards.
    let mut count = [(0u64, 0u64, u64::MAX); 2];
    let mut keys = Vec::new();
    for &(off, _, link, at, len) in &t.packets {
        let data = &t.all[at..at + len];
        keys.clear();
        let wild = !weir_index::keys_of(link, data, &mut keys);
        let fast = weir_decode::quick::parse(link, data).is_some_and(|h| h.ipv6_extensions == 0);
        let err = if fast {
            None
        } else {
            weir_decode::decode(link, data).error()
        };
        let chunk = off % (1 << 30) / u64::from(DEFAULT_CHUNK);
        for (i, hit) in [err.is_some(), wild].into_iter().enumerate() {
            if hit {
                count[i].0 += 1;
                if count[i].2 != chunk {
                    count[i].1 += 1;
                    count[i].2 = chunk;
                }
            }
        }
        if let Some(e) = err {
            *by.entry((wild, format!("{} {}", e.kind, e.layer.name())))
                .or_default() += 1;
        }
    }
    let total_chunks = t.bytes.div_ceil(u64::from(DEFAULT_CHUNK));
    for (i, what) in [
        "decoding errors (the wildcard list before)",
        "wildcard list now",
    ]
    .iter()
    .enumerate()
    {
        writeln!(
            std::io::stdout(),
            "{:<9} {what}: {} packets ({:.3} %) in {} of {total_chunks} chunks ({:.1} %)",
            "",
            count[i].0,
            count[i].0 as f64 * 100.0 / t.packets.len() as f64,
            count[i].1,
            count[i].1 as f64 * 100.0 / total_chunks as f64
        )?;
    }
    let mut by: Vec<_> = by.into_iter().collect();
    by.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    for ((wild, why), n) in by.iter().take(10) {
        let w = if *wild { "wildcard" } else { "indexed" };
        writeln!(std::io::stdout(), "{:<9}   {n:>8} {why} ({w})", "")?;
    }
    Ok(())
}

fn main() -> Result<()> {
    // SAFETY: sets the default action of SIGPIPE (the process ends when its stdout is closed,
    // as tcpdump does, instead of an error) before any other thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let args = Args::parse();
    anyhow::ensure!(args.rounds >= 1, "--rounds: at least 1");
    anyhow::ensure!(args.packets >= 1, "--packets: at least 1");
    let grain = PortGrain {
        exact_below: args.port_exact_below,
        bucket_shift: args.port_bucket_shift,
        chunk_exact_ports: args.port_chunk_exact,
    };
    anyhow::ensure!(
        grain.is_valid(),
        "--port-exact-below must be at most 65536 and a multiple of 2^--port-bucket-shift (at most 15)"
    );
    writeln!(
        std::io::stdout(),
        "weir-index, median of {} rounds, ports exact below {}, above exact in a chunk of at most {} such ports, else buckets of {}:",
        args.rounds,
        grain.exact_below,
        grain.chunk_exact_ports,
        1u32 << grain.bucket_shift
    )
    .context("writing the results")?;
    if args.part_mib > 0 {
        writeln!(
            std::io::stdout(),
            "a part every {} MiB of segment, then the final index (both in \"serializing\")",
            args.part_mib
        )
    } else {
        Ok(())
    }
    .context("writing the results")?;
    for what in args.traffic.split(',') {
        match what {
            "diverse" => report(
                "diverse",
                &synthetic(args.packets, true),
                args.rounds,
                false,
                grain,
                args.part_mib << 20,
            )
            .context("writing the results")?,
            "trace" => {
                let tr = trace(&args.trace)?;
                report("trace", &tr, args.rounds, true, grain, args.part_mib << 20)
                    .context("writing the results")?;
                wildcard_census(&tr).context("writing the results")?;
            }
            "one-flow" => report(
                "one flow",
                &synthetic(args.packets, false),
                args.rounds,
                false,
                grain,
                args.part_mib << 20,
            )
            .context("writing the results")?,
            other => anyhow::bail!("--traffic: {other:?} is none of diverse, trace, one-flow"),
        }
    }
    Ok(())
}
