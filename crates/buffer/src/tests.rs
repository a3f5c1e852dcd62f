//! Unit tests of the buffer on one thread: layout, wrap-around padding, alignment, drops,
//! readers at different speeds, best-effort readers. Concurrency is in `tests/stress.rs` and
//! `tests/loom.rs`.

use super::*;
use crate::pcapng::{pad_piece, record_len, ISB_TYPE};

/// A small buffer on normal pages: `size` bytes, packets up to 256 bytes, 2 writers.
fn small(size: usize, readers: usize, best_effort: usize) -> PacketBuffer {
    Config::new(size)
        .readers(readers)
        .best_effort_readers(best_effort)
        .max_writers(2)
        .max_caplen(256)
        .huge_pages(false)
        .prefault(false)
        .build()
        .unwrap()
}

/// Payload `n` of length `len`: every byte derived from `n`, first 8 bytes `n` itself.
fn payload(n: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|i| (n as usize * 31 + i) as u8).collect();
    let k = len.min(8);
    v[..k].copy_from_slice(&n.to_le_bytes()[..k]);
    v
}

/// Reads everything available and releases it; returns the (ts, data) of each record.
fn drain(reader: &mut Reader) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(batch) = reader.next_batch() {
        for r in batch.records() {
            assert_eq!(r.offset() % 8, 0);
            assert_eq!(r.block().len() % 8, 0);
            assert_eq!(r.block().len(), record_len(r.data().len()));
            out.push((r.ts_ns(), r.data().to_vec()));
        }
        batch.release();
    }
    out
}

/// Walks a byte run as pcapng blocks, checking each block's leading and trailing lengths.
/// Returns (packet blocks, padding blocks).
fn walk_blocks(bytes: &[u8]) -> (usize, usize) {
    let (mut at, mut epb, mut isb) = (0, 0, 0);
    while at < bytes.len() {
        let kind = u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap());
        let len = u32::from_ne_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        assert!(len >= 32 && len % 8 == 0, "block at {at}: length {len}");
        let tail = u32::from_ne_bytes(bytes[at + len - 4..at + len].try_into().unwrap());
        assert_eq!(tail as usize, len, "trailing length of block at {at}");
        match kind {
            pcapng::EPB_TYPE => epb += 1,
            ISB_TYPE => isb += 1,
            k => panic!("unexpected block type {k} at {at}"),
        }
        at += len;
    }
    assert_eq!(at, bytes.len());
    (epb, isb)
}

#[test]
fn push_and_read_back_one_batch() {
    let buf = small(1 << 16, 1, 0);
    let mut w = buf.writer().unwrap();
    let mut r = buf.reader(0).unwrap();
    assert!(r.next_batch().is_none());
    let mut expect = 0;
    for n in 0..20u64 {
        let len = (n as usize * 13) % 200;
        w.push(
            n as u32 % 3,
            1_000_000_000 * n + 7,
            len as u32 + 4,
            &payload(n, len),
        )
        .unwrap();
        expect += record_len(len);
    }
    let batch = r.next_batch().unwrap();
    assert_eq!(batch.len(), expect);
    let (a, b) = batch.bytes();
    assert!(b.is_empty());
    assert_eq!(walk_blocks(a), (20, 0));
    for (n, rec) in batch.records().enumerate() {
        let n = n as u64;
        let len = (n as usize * 13) % 200;
        assert_eq!(rec.iface(), n as u32 % 3);
        assert_eq!(rec.ts_ns(), 1_000_000_000 * n + 7);
        assert_eq!(rec.orig_len(), len as u32 + 4);
        assert_eq!(rec.data(), &payload(n, len)[..]);
    }
    batch.release();
    assert!(r.next_batch().is_none());
    let s = buf.stats();
    assert_eq!((s.pushed, s.dropped(), s.readers[0].lag), (20, 0, 0));
}

#[test]
fn batch_not_released_is_read_again() {
    let buf = small(1 << 12, 1, 0);
    let mut w = buf.writer().unwrap();
    let mut r = buf.reader(0).unwrap();
    w.push(0, 1, 10, &payload(1, 10)).unwrap();
    let first = r.next_batch().map(|b| (b.start(), b.end())).unwrap();
    w.push(0, 2, 10, &payload(2, 10)).unwrap();
    let b = r.next_batch().unwrap();
    assert_eq!(b.start(), first.0);
    assert_eq!(b.records().count(), 2);
}

#[test]
fn wrap_around_pads_and_keeps_every_record_whole() {
    let size = 4096;
    let buf = small(size, 1, 0);
    let mut w = buf.writer().unwrap();
    let mut r = buf.reader(0).unwrap();
    let mut seen = Vec::new();
    let mut straddled = false;
    let mut n = 0u64;
    while buf.stats().reserved < 5 * size as u64 {
        // Lengths chosen so reservations do not divide the buffer size evenly.
        let len = 40 + (n as usize * 7) % 150;
        w.push(0, n, len as u32, &payload(n, len)).unwrap();
        n += 1;
        if n % 3 == 0 {
            while let Some(batch) = r.next_batch() {
                let (a, b) = batch.bytes();
                straddled |= !b.is_empty();
                let mut joined = a.to_vec();
                joined.extend_from_slice(b);
                walk_blocks(&joined);
                for rec in batch.records() {
                    assert_eq!(rec.offset() % 8, 0);
                    // Packet records are contiguous in memory: never across the end.
                    assert!((rec.offset() as usize % size) + rec.block().len() <= size);
                    seen.push((rec.ts_ns(), rec.data().to_vec()));
                }
                batch.release();
            }
        }
    }
    seen.extend(drain(&mut r));
    let s = buf.stats();
    assert!(
        s.padding >= 4,
        "one padding reservation per lap at least: {s:?}"
    );
    assert!(straddled, "some batch wrapped around the end");
    assert_eq!(s.pushed, n);
    assert_eq!(seen.len() as u64, n);
    for (i, (ts, data)) in seen.iter().enumerate() {
        assert_eq!(*ts, i as u64);
        assert_eq!(data, &payload(i as u64, 40 + (i * 7) % 150));
    }
}

#[test]
fn full_buffer_drops_and_counts_then_recovers() {
    let size = 4096;
    let buf = small(size, 1, 0);
    let mut w = buf.writer().unwrap();
    let mut r = buf.reader(0).unwrap();
    let mut ok = 0u64;
    while w.push(0, ok, 64, &payload(ok, 64)).is_ok() {
        ok += 1;
    }
    // Usable space is size − headroom (2 writers × the largest record: 256 bytes and the
    // longest comment).
    let usable = size - 2 * crate::pcapng::epb_len(256, crate::pcapng::MAX_COMMENT);
    assert_eq!(ok as usize, usable / record_len(64));
    for _ in 0..10 {
        assert_eq!(w.push(0, 0, 64, &payload(0, 64)), Err(Dropped::Full));
    }
    let s = buf.stats();
    assert_eq!((s.pushed, s.dropped_full), (ok, 11));
    assert!(s.reserved <= size as u64);
    assert!(s.fill() > 0.5);
    assert_eq!(drain(&mut r).len() as u64, ok);
    w.push(0, 1, 64, &payload(1, 64)).unwrap();
    assert_eq!(buf.stats().pushed, ok + 1);
}

#[test]
fn commented_records_read_back_between_plain_ones() {
    let buf = small(1 << 12, 1, 0);
    let mut w = buf.writer().unwrap();
    let mut r = buf.reader(0).unwrap();
    w.push(0, 1, 64, &payload(1, 60)).unwrap();
    w.push_commented(0, 2, 64, &payload(2, 61), b"weir-tag=lab")
        .unwrap();
    w.push_commented(0, 3, 99, &payload(3, 62), &[b'x'; 100])
        .unwrap();
    w.push(0, 4, 64, &payload(4, 63)).unwrap();
    let b = r.next_batch().unwrap();
    let got: Vec<_> = b
        .records()
        .map(|x| (x.ts_ns(), x.data().len(), x.comment().map(<[u8]>::to_vec)))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, 60, None),
            (2, 61, Some(b"weir-tag=lab".to_vec())),
            (3, 62, Some(vec![b'x'; crate::pcapng::MAX_COMMENT])),
            (4, 63, None),
        ]
    );
}

#[test]
fn oversize_packets_are_refused_and_counted() {
    let buf = small(1 << 12, 1, 0);
    let mut w = buf.writer().unwrap();
    assert_eq!(w.push(0, 0, 300, &[0; 257]), Err(Dropped::TooLong));
    w.push(0, 0, 256, &[0; 256]).unwrap();
    let s = buf.stats();
    assert_eq!((s.pushed, s.dropped_oversize, s.dropped()), (1, 1, 1));
}

#[test]
fn readers_at_different_speeds_see_the_same_records() {
    let size = 4096;
    let buf = small(size, 2, 0);
    let mut w = buf.writer().unwrap();
    let mut fast = buf.reader(0).unwrap();
    let mut slow = buf.reader(1).unwrap();
    let (mut fast_seen, mut slow_seen) = (Vec::new(), Vec::new());
    let (mut ok, mut dropped) = (0u64, 0u64);
    for n in 0..400u64 {
        let len = 50 + (n as usize % 100);
        match w.push(0, ok, len as u32, &payload(ok, len)) {
            Ok(()) => ok += 1,
            Err(Dropped::Full) => dropped += 1,
            Err(e) => panic!("{e}"),
        }
        fast_seen.extend(drain(&mut fast));
        if n % 50 == 49 {
            slow_seen.extend(drain(&mut slow));
        }
        // The slow reader holds the space: never more than the size behind.
        assert!(buf.stats().readers[1].lag <= size as u64);
    }
    slow_seen.extend(drain(&mut slow));
    assert!(dropped > 0, "the slow reader made the buffer fill");
    let s = buf.stats();
    assert_eq!((s.pushed, s.dropped_full), (ok, dropped));
    assert_eq!(fast_seen.len() as u64, ok);
    assert_eq!(fast_seen, slow_seen);
}

#[test]
fn best_effort_reader_is_skipped_instead_of_waited_for() {
    let size = 4096;
    let buf = small(size, 1, 1);
    let mut w = buf.writer().unwrap();
    let mut main = buf.reader(0).unwrap();
    let mut live = buf.reader(1).unwrap();
    assert!(live.is_best_effort());
    for n in 0..500u64 {
        w.push(0, n, 100, &payload(n, 100)).unwrap(); // never dropped
        assert_eq!(drain(&mut main).len(), 1);
    }
    let got = drain(&mut live);
    let s = buf.stats();
    assert_eq!((s.pushed, s.dropped()), (500, 0));
    assert!(
        s.readers[1].skips >= 1 && s.readers[1].skipped_bytes > 0,
        "{s:?}"
    );
    assert!(!got.is_empty() && got.len() < 500);
    for pair in got.windows(2) {
        assert_eq!(pair[1].0, pair[0].0 + 1, "contiguous after the last skip");
    }
    for (ts, data) in &got {
        assert_eq!(data, &payload(*ts, 100));
    }
    assert_eq!(got.last().unwrap().0, 499);
}

#[test]
fn best_effort_reader_holding_a_batch_is_respected() {
    let size = 4096;
    let buf = small(size, 1, 1);
    let mut w = buf.writer().unwrap();
    let mut main = buf.reader(0).unwrap();
    let mut live = buf.reader(1).unwrap();
    for n in 0..5u64 {
        w.push(0, n, 100, &payload(n, 100)).unwrap();
    }
    let batch = live.next_batch().unwrap();
    let mut dropped = 0;
    for n in 5..200u64 {
        if w.push(0, n, 100, &payload(n, 100)).is_err() {
            dropped += 1;
        }
        drain(&mut main);
    }
    assert!(dropped > 0, "writers waited for the held batch");
    let held: Vec<u64> = batch.records().map(|r| r.ts_ns()).collect();
    assert_eq!(held, vec![0, 1, 2, 3, 4]);
    for r in batch.records() {
        assert_eq!(r.data(), &payload(r.ts_ns(), 100)[..]);
    }
    batch.release();
    // Once released (idle), the reader no longer holds writers back.
    for n in 0..100u64 {
        w.push(0, n, 100, &payload(n, 100)).unwrap();
        drain(&mut main);
    }
}

#[test]
fn dropped_reader_no_longer_holds_space() {
    let buf = small(4096, 2, 0);
    let mut w = buf.writer().unwrap();
    let mut a = buf.reader(0).unwrap();
    let b = buf.reader(1).unwrap();
    assert!(buf.reader(1).is_err(), "handed out once");
    drop(b);
    for n in 0..200u64 {
        w.push(0, n, 100, &payload(n, 100)).unwrap();
        drain(&mut a);
    }
    assert!(buf.stats().readers[1].detached);
}

#[test]
fn writer_slots_are_bounded_and_reused() {
    let buf = small(4096, 1, 0);
    let w1 = buf.writer().unwrap();
    let _w2 = buf.writer().unwrap();
    assert!(matches!(buf.writer(), Err(BufferError::TooManyWriters(2))));
    drop(w1);
    buf.writer().unwrap();
}

#[test]
fn config_is_validated() {
    assert!(Config::new(3000).build().is_err());
    // Default max_caplen × 8 writers of headroom does not fit 64 KiB.
    assert!(Config::new(1 << 16).build().is_err());
    assert!(Config::new(1 << 16)
        .max_caplen(1500)
        .max_writers(4)
        .prefault(false)
        .build()
        .is_ok());
    assert!(Config::new(1 << 16).max_writers(0).build().is_err());
}

#[test]
fn page_kind_is_reported() {
    let b = small(1 << 12, 1, 0);
    assert_eq!(b.page_kind(), PageKind::Normal);
    let b = Config::new(4 << 20).build().unwrap();
    // No huge pages are reserved on these machines, so hugetlb is not expected, but allowed.
    eprintln!("4 MiB buffer on {}", b.page_kind().name());
    let b = Config::new(4 << 20).huge_pages(false).build().unwrap();
    assert_eq!(b.page_kind(), PageKind::Normal);
}

#[test]
fn padding_pieces_cover_any_gap_with_blocks_of_32_bytes_or_more() {
    for rem in (32..300_000).step_by(8) {
        let (mut left, mut pieces) = (rem, 0);
        while left > 0 {
            let p = pad_piece(left);
            assert!(
                p >= 32 && p % 8 == 0 && p - 32 <= u16::MAX as usize,
                "rem {rem}: {p}"
            );
            left -= p;
            pieces += 1;
        }
        assert!(pieces <= rem / 65_000 + 2);
    }
}

#[test]
fn huge_records_wrap_with_chained_padding() {
    let size = 1 << 20;
    let buf = Config::new(size)
        .max_caplen(100_000)
        .max_writers(2)
        .huge_pages(false)
        .prefault(false)
        .build()
        .unwrap();
    let mut w = buf.writer().unwrap();
    let mut r = buf.reader(0).unwrap();
    let mut seen = 0u64;
    for n in 0..40u64 {
        let len = 90_000 + n as usize * 8;
        w.push(1, n, len as u32, &payload(n, len)).unwrap();
        while let Some(batch) = r.next_batch() {
            let (a, b) = batch.bytes();
            let mut joined = a.to_vec();
            joined.extend_from_slice(b);
            walk_blocks(&joined);
            for rec in batch.records() {
                assert_eq!(rec.ts_ns(), seen);
                assert_eq!(rec.data(), &payload(seen, 90_000 + seen as usize * 8)[..]);
                seen += 1;
            }
            batch.release();
        }
    }
    assert_eq!(seen, 40);
    assert!(buf.stats().padding >= 2);
}

/// Pages faulted in by the background populator while a writer and a reader use the buffer:
/// every record reads back as written (the advice never changes the memory's contents), the
/// parallel `Now` mode leaves a zeroed, usable buffer, and dropping the buffer mid-populate
/// joins the populator before unmapping.
#[test]
fn prefault_modes_keep_contents() {
    for mode in [Prefault::Background, Prefault::Now] {
        let buf = Config::new(64 << 20)
            .max_caplen(2048)
            .huge_pages(true)
            .prefault_mode(mode)
            .build()
            .unwrap();
        let mut w = buf.writer().unwrap();
        let mut r = buf.reader(0).unwrap();
        let mut got = Vec::new();
        for n in 0..20_000u64 {
            let p = payload(n, 1500);
            w.push(0, n, 1500, &p).unwrap();
            if n % 1000 == 999 {
                got.extend(drain(&mut r));
            }
        }
        got.extend(drain(&mut r));
        assert_eq!(got.len(), 20_000, "{mode:?}");
        for (n, (ts, data)) in got.iter().enumerate() {
            assert_eq!(*ts, n as u64);
            assert_eq!(data, &payload(n as u64, 1500), "{mode:?} record {n}");
        }
    }
    // Dropped at once, while the populator is (likely) still at work.
    drop(
        Config::new(256 << 20)
            .prefault_mode(Prefault::Background)
            .build()
            .unwrap(),
    );
}
