//! Stress test: many writer threads and several reader threads on a small buffer.
//!
//! Every payload carries its writer's id, a per-writer sequence number (counting successful
//! pushes only) and a checksum. Each registered reader must see every pushed record exactly once,
//! per-writer sequences without gap or repeat, intact contents, and all registered readers the
//! same global order; the best-effort reader sees increasing sequences and intact contents. At the
//! end, pushed = read (per registered reader) and pushed + dropped = attempts, matching the
//! buffer's own counters. No timing is asserted.
//!
//! Runs about 2 seconds; `WEIR_STRESS_SECS=60 cargo test -p weir-buffer --release --test stress`
//! runs longer.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_buffer::{Config, Dropped, PacketBuffer, Pending, Reader};

const WRITERS: usize = 4;
const REGISTERED: usize = 2;

fn seconds() -> f64 {
    std::env::var("WEIR_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0)
}

/// FNV-1a, to check payload contents.
fn fnv(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Payload: writer id (4), sequence (8), filler derived from both, checksum of all before (4).
fn payload(id: u32, seq: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend((12..len - 4).map(|i| (seq as usize ^ (i * 7) ^ id as usize) as u8));
    let sum = fnv(out);
    out.extend_from_slice(&sum.to_le_bytes());
}

/// Checks one record's payload; returns (writer id, sequence).
fn check(iface: u32, ts: u64, orig_len: u32, data: &[u8]) -> (u32, u64) {
    assert!(data.len() >= 16, "short payload");
    let id = u32::from_le_bytes(data[..4].try_into().unwrap());
    let seq = u64::from_le_bytes(data[4..12].try_into().unwrap());
    let n = data.len();
    let sum = u32::from_le_bytes(data[n - 4..].try_into().unwrap());
    assert_eq!(
        fnv(&data[..n - 4]),
        sum,
        "checksum of writer {id} seq {seq}"
    );
    assert_eq!(
        (iface, ts, orig_len as usize),
        (id, seq, n + 100),
        "header of {id}/{seq}"
    );
    (id, seq)
}

struct ReaderResult {
    per_writer: Vec<u64>,
    order_hash: u64,
    records: u64,
}

fn read_all(mut reader: Reader, done: &AtomicBool, slow: bool) -> ReaderResult {
    let best_effort = reader.is_best_effort();
    let mut next = vec![0u64; WRITERS]; // next expected sequence per writer
    let mut order_hash = 0u64;
    let mut records = 0u64;
    loop {
        let finished = done.load(Ordering::Acquire);
        let Some(batch) = reader.next_batch() else {
            if finished {
                break;
            }
            std::thread::yield_now();
            continue;
        };
        for r in batch.records() {
            let (id, seq) = check(r.iface(), r.ts_ns(), r.orig_len(), r.data());
            let want = &mut next[id as usize];
            if best_effort {
                assert!(
                    seq >= *want,
                    "best-effort reader: writer {id} went back to {seq}"
                );
            } else {
                assert_eq!(seq, *want, "writer {id}: expected seq {want}, got {seq}");
            }
            *want = seq + 1;
            order_hash = (order_hash ^ (u64::from(id) << 48 ^ seq)).wrapping_mul(0x100_0000_01b3);
            records += 1;
            if slow {
                // A slower consumer: more work per record, so the buffer fills and drops happen.
                std::hint::black_box(fnv(r.data()).wrapping_add(fnv(r.block())));
            }
        }
        batch.release();
        if slow {
            std::thread::yield_now();
        }
    }
    ReaderResult {
        per_writer: next,
        order_hash,
        records,
    }
}

fn run(buffer: PacketBuffer, secs: f64) {
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..REGISTERED + 1)
        .map(|i| {
            let reader = buffer.reader(i).unwrap();
            let done = done.clone();
            std::thread::spawn(move || read_all(reader, &done, i == 1))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let writers: Vec<_> = (0..WRITERS as u32)
        .map(|id| {
            let mut w = buffer.writer().unwrap();
            let max = buffer.max_caplen();
            std::thread::spawn(move || {
                let (mut seq, mut dropped, mut rng) = (0u64, 0u64, 0x9e37_79b9u64 + u64::from(id));
                let mut buf = Vec::new();
                let mut i = 0u64;
                loop {
                    if i % 256 == 0 && Instant::now() >= deadline {
                        break;
                    }
                    i += 1;
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let len = 16 + (rng as usize % (max - 16 + 1));
                    payload(id, seq, len, &mut buf);
                    if id % 2 == 1 && len % 3 == 0 {
                        // Odd writers sometimes push a batch of 3 (one reservation).
                        let mut parts = Vec::new();
                        let mut bufs = vec![buf.clone()];
                        for k in 1..3u64 {
                            let mut b = Vec::new();
                            payload(id, seq + k, len, &mut b);
                            bufs.push(b);
                        }
                        for (k, b) in bufs.iter().enumerate() {
                            parts.push(Pending {
                                iface: id,
                                ts_ns: seq + k as u64,
                                orig_len: len as u32 + 100,
                                data: b,
                            });
                        }
                        // What is pushed is a prefix: sequences stay gap-free per writer.
                        let n = w.push_batch(&parts) as u64;
                        seq += n;
                        if n < 3 {
                            dropped += 3 - n;
                            std::thread::yield_now();
                        }
                        continue;
                    }
                    match w.push(id, seq, len as u32 + 100, &buf) {
                        Ok(()) => seq += 1,
                        Err(Dropped::Full) => {
                            dropped += 1;
                            // Not what a capture thread does; here it lets the readers (on
                            // the same 2 cores) run, so the test covers many laps.
                            std::thread::yield_now();
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                (seq, dropped)
            })
        })
        .collect();
    let counts: Vec<(u64, u64)> = writers.into_iter().map(|t| t.join().unwrap()).collect();
    done.store(true, Ordering::Release);
    let results: Vec<ReaderResult> = readers.into_iter().map(|t| t.join().unwrap()).collect();

    let pushed: u64 = counts.iter().map(|c| c.0).sum();
    let dropped: u64 = counts.iter().map(|c| c.1).sum();
    let stats = buffer.stats();
    eprintln!(
        "stress: {secs} s, {pushed} pushed, {dropped} dropped, {} padding, {} bytes reserved \
         ({:.1} laps), best-effort read {} (skipped {} times); buffer on {}",
        stats.padding,
        stats.reserved,
        stats.reserved as f64 / stats.size as f64,
        results[REGISTERED].records,
        stats.readers[REGISTERED].skips,
        buffer.page_kind().name()
    );
    assert!(pushed > 0);
    assert_eq!(stats.pushed, pushed);
    assert_eq!(stats.dropped_full, dropped);
    assert_eq!(stats.dropped_oversize, 0);
    for (i, r) in results.iter().take(REGISTERED).enumerate() {
        let want: Vec<u64> = counts.iter().map(|c| c.0).collect();
        assert_eq!(
            r.per_writer, want,
            "registered reader {i}: exactly once per record"
        );
        assert_eq!(r.records, pushed, "registered reader {i}: pushed = read");
        assert_eq!(
            r.order_hash, results[0].order_hash,
            "reader {i}: same order as reader 0"
        );
    }
    assert!(results[REGISTERED].records <= pushed);
}

#[test]
fn many_writers_many_readers_small_buffer() {
    // 64 KiB: many laps, wrap padding and full-buffer drops within the run.
    let buffer = Config::new(1 << 16)
        .readers(REGISTERED)
        .best_effort_readers(1)
        .max_writers(WRITERS)
        .max_caplen(1500)
        .huge_pages(false)
        .build()
        .unwrap();
    run(buffer, seconds());
}

#[test]
fn many_writers_many_readers_tiny_records_tiny_buffer() {
    // 4 KiB with short packets: the most contention on the offset counter and the slots.
    let buffer = Config::new(1 << 12)
        .readers(REGISTERED)
        .best_effort_readers(1)
        .max_writers(WRITERS)
        .max_caplen(64)
        .huge_pages(false)
        .build()
        .unwrap();
    run(buffer, seconds() / 2.0);
}
