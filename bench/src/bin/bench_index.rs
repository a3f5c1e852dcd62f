//! Indexing cost: how much CPU `weir-index` spends per packet and per GB of the corpus trace,
//! and what share of one core that is when the recorder writes at the disk's 2 GB/s (the
//! issue's budget: 10 %). The trace is read into memory first (untimed); each round builds the
//! index of all of it in 1 GiB segments (128 KiB chunks), with the hand-written fast path
//! (`keys_of`) and with the full decoder only (`keys_of_decoded`), and serializes it.
//!
//! `cargo run --release -p weir-bench --bin bench_index -- [--rounds 5]`

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use weir_index::{IndexBuilder, Key, DEFAULT_CHUNK};
use weir_packet::LinkType;
use weir_pcap::FileReader;

/// Time the indexer on the corpus trace.
#[derive(Parser)]
struct Args {
    /// Rounds (the median is reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Trace (built by `mktrace`).
    #[arg(long, default_value = "bench/out/trace-3000000.pcap")]
    trace: PathBuf,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut r = FileReader::open(&args.trace)
        .with_context(|| format!("{} (run mktrace first)", args.trace.display()))?;
    // Packets back to back in one allocation, as in the packet buffer the recorder reads.
    let mut packets: Vec<(u64, u64, LinkType, usize, usize)> = Vec::new();
    let mut all = Vec::new();
    let mut bytes = 0u64;
    while let Some(p) = r.next_packet()? {
        // File offsets as a pcapng segment would have them (EPB of 32 bytes + data).
        packets.push((bytes, p.meta.ts_ns, p.link, all.len(), p.data.len()));
        all.extend_from_slice(p.data);
        bytes += 32 + (p.data.len() as u64).div_ceil(8) * 8;
    }
    let gb = bytes as f64 / 1e9;
    let run = |fast: bool| -> (f64, usize) {
        let t = Instant::now();
        let mut size = 0;
        let mut b = IndexBuilder::new(DEFAULT_CHUNK);
        let mut keys: Vec<Key> = Vec::new();
        for &(off, ts, link, at, len) in &packets {
            let (off, ts, link, data) = (&off, &ts, &link, &all[at..at + len]);
            if fast {
                b.add(off % (1 << 30), *ts, *link, data);
            } else {
                // The decoder-only path, for comparison: the same work minus the fast path.
                keys.clear();
                std::hint::black_box(weir_index::keys_of_decoded(*link, data, &mut keys));
            }
            if off % (1 << 30) + 2048 > (1 << 30) {
                size += b.serialize(1 << 30, 0).len();
                b = IndexBuilder::new(DEFAULT_CHUNK);
            }
        }
        size += b.serialize(bytes % (1 << 30), 0).len();
        (t.elapsed().as_secs_f64(), size)
    };
    let mut fast = Vec::new();
    let mut slow = Vec::new();
    let mut size = 0;
    for _ in 0..args.rounds {
        let (s, n) = run(true);
        fast.push(s);
        size = n;
        slow.push(run(false).0);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (f, s) = (med(&mut fast), med(&mut slow));
    let n = packets.len() as f64;
    println!(
        "indexing {} packets, {:.2} GB of pcapng records (median of {} rounds)",
        packets.len(),
        gb,
        args.rounds
    );
    println!(
        "weir-index (fast path + decoder fallback): {:.1} ns/packet, {:.3} s CPU per GB = {:.1} % of one core at 2 GB/s; index {:.3} % of the data",
        f / n * 1e9,
        f / gb,
        f / gb * 2.0 * 100.0,
        size as f64 * 100.0 / bytes as f64
    );
    println!(
        "key extraction with the full decoder only (no postings): {:.1} ns/packet, {:.1} % of one core at 2 GB/s",
        s / n * 1e9,
        s / gb * 2.0 * 100.0
    );
    Ok(())
}
