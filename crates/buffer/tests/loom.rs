//! Model checks of the reserve / commit / read protocol with `loom`, which runs each scenario
//! under every interleaving (up to `LOOM_MAX_PREEMPTIONS`) and every reordering the memory model
//! allows for the atomics. The packet bytes are shadowed by loom cells (see `src/sync.rs`), so a
//! read of bytes not ordered after their write (or a rewrite not ordered after the last read) is
//! reported as a data race. Run with `scripts/loom.sh`.
#![cfg(loom)]

use loom::thread;
use weir_buffer::{Config, PacketBuffer, Reader};

/// 256 bytes, packets of 8 bytes (40-byte records), 2 writers (80 bytes of headroom).
fn tiny(readers: usize, best_effort: usize) -> PacketBuffer {
    Config::new(256)
        .readers(readers)
        .best_effort_readers(best_effort)
        .max_writers(2)
        .max_caplen(8)
        .max_comment(0)
        .huge_pages(false)
        .prefault(false)
        .build()
        .unwrap()
}

/// Reads one batch if there is one, checking every record; appends writer ids to `seen`.
fn poll(reader: &mut Reader, seen: &mut Vec<u32>) {
    if let Some(batch) = reader.next_batch() {
        for r in batch.records() {
            assert_eq!(
                r.data(),
                &[r.iface() as u8 + 1; 8],
                "record of writer {}",
                r.iface()
            );
            assert_eq!(r.ts_ns(), u64::from(r.iface()) + 100);
            seen.push(r.iface());
        }
        batch.release();
    }
}

fn spawn_writer(buf: &PacketBuffer, id: u32) -> thread::JoinHandle<()> {
    let mut w = buf.writer().unwrap();
    thread::spawn(move || {
        w.push(id, u64::from(id) + 100, 8, &[id as u8 + 1; 8])
            .unwrap();
    })
}

/// Two writers push concurrently while the reader polls: the reader never sees a partial
/// record, and after the writers finish it has seen both exactly once.
#[test]
fn loom_two_writers_one_reader() {
    loom::model(|| {
        let buf = tiny(1, 0);
        let mut reader = buf.reader(0).unwrap();
        let w0 = spawn_writer(&buf, 0);
        let w1 = spawn_writer(&buf, 1);
        let mut seen = Vec::new();
        poll(&mut reader, &mut seen);
        poll(&mut reader, &mut seen);
        w0.join().unwrap();
        w1.join().unwrap();
        poll(&mut reader, &mut seen);
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1]);
        let s = buf.stats();
        assert_eq!((s.pushed, s.dropped()), (2, 0));
    });
}

/// Same, with the counter placed so that the first reservation crosses the end of the buffer:
/// that writer pads and reserves again after the wrap, and the reader skips the padding.
#[test]
fn loom_wrap_padding() {
    loom::model(|| {
        let buf = tiny(1, 0);
        let mut reader = buf.reader(0).unwrap();
        {
            // 6 × 40 = 240 bytes written and consumed: the next 40-byte record would cross 256.
            let mut w = buf.writer().unwrap();
            let mut seen = Vec::new();
            for _ in 0..6 {
                w.push(2, 102, 8, &[3; 8]).unwrap();
                poll(&mut reader, &mut seen);
            }
            assert_eq!(seen.len(), 6);
        }
        let w0 = spawn_writer(&buf, 0);
        let w1 = spawn_writer(&buf, 1);
        let mut seen = Vec::new();
        poll(&mut reader, &mut seen);
        w0.join().unwrap();
        w1.join().unwrap();
        poll(&mut reader, &mut seen);
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1]);
        assert_eq!(buf.stats().padding, 1);
    });
}

/// A writer short of space races a best-effort reader taking a batch: either the reader holds
/// first (the writer drops until it is released) or the writer skips it forward (and the reader
/// never touches the space it lost). The writer pushes enough to wrap over the reader's batch,
/// so any overlap between a held batch and new records is a data race on the shadowed bytes.
#[test]
fn loom_best_effort_skip_vs_hold() {
    loom::model(|| {
        let buf = tiny(0, 1);
        let mut reader = buf.reader(0).unwrap();
        let mut w = buf.writer().unwrap();
        // 4 × 40 = 160 bytes unread of 176 usable: the next push must skip the reader or drop.
        for _ in 0..4 {
            w.push(1, 101, 8, &[2; 8]).unwrap();
        }
        let t = thread::spawn(move || {
            (0..5)
                .filter(|_| w.push(0, 100, 8, &[1; 8]).is_ok())
                .count()
        });
        let mut seen = Vec::new();
        poll(&mut reader, &mut seen);
        let pushed = t.join().unwrap();
        poll(&mut reader, &mut seen);
        let s = buf.stats();
        assert_eq!(
            (s.pushed, s.dropped_full),
            (4 + pushed as u64, 5 - pushed as u64)
        );
        // Whatever the reader got is intact (checked in `poll`) and at most what was pushed.
        assert!(seen.len() <= 4 + pushed);
    });
}

/// The overshoot case: the buffer is full but for one record, and both writers pass their room
/// check at once, so their reservations together go past the limit. The headroom must absorb
/// the second one without touching the records the reader is reading meanwhile.
#[test]
fn loom_concurrent_reservations_past_the_limit() {
    loom::model(|| {
        let buf = tiny(1, 0);
        let mut reader = buf.reader(0).unwrap();
        let mut filled = 0u64;
        {
            let mut w = buf.writer().unwrap();
            while w.push(2, 102, 8, &[3; 8]).is_ok() {
                filled += 1;
            }
        }
        // Release exactly the first record: room for one more push.
        let batch = reader.next_batch().unwrap();
        let second = batch.records().nth(1).unwrap().offset();
        batch.release_before(second);
        let w0 = spawn_writer_may_drop(&buf, 0);
        let w1 = spawn_writer_may_drop(&buf, 1);
        let mut seen = Vec::new();
        poll(&mut reader, &mut seen);
        let ok = u64::from(w0.join().unwrap()) + u64::from(w1.join().unwrap());
        poll(&mut reader, &mut seen);
        let s = buf.stats();
        assert!(ok >= 1, "one record fits");
        assert_eq!(s.pushed, filled + ok);
    });
}

fn spawn_writer_may_drop(buf: &PacketBuffer, id: u32) -> thread::JoinHandle<bool> {
    let mut w = buf.writer().unwrap();
    thread::spawn(move || {
        w.push(id, u64::from(id) + 100, 8, &[id as u8 + 1; 8])
            .is_ok()
    })
}
