//! The recorder against weir's own reader: packets pushed into a packet buffer by a capture-like
//! thread come back from the segments exactly (time, lengths, bytes, order, interface), every
//! full pcapng segment has exactly the configured size, a crash (a recorder dropped without
//! finishing) leaves a store that reopens with every segment readable, and retention keeps the
//! store under its byte limit.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use weir_buffer::{Config, Dropped};
use weir_packet::LinkType;
use weir_pcap::FileReader;
use weir_pcap::Interface;
use weir_store::{Format, Options, Recorder, SegmentState, Store};

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-rec-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Deterministic packet `i`: its length varies from 0 to 1600 bytes and its bytes encode `i`.
fn packet(i: u64) -> (u64, u32, Vec<u8>) {
    let len = ((i * 7919) % 1601) as usize;
    let data: Vec<u8> = (0..len).map(|k| (i as usize * 31 + k) as u8).collect();
    let ts = 1_700_000_000_000_000_000 + i * 1_000_003;
    (ts, len as u32 + (i % 3) as u32, data)
}

fn interfaces() -> Vec<Interface> {
    ["a", "b"]
        .iter()
        .map(|n| Interface {
            name: Some(n.to_string()),
            ..Interface::new(LinkType::ETHERNET, 262_144)
        })
        .collect()
}

/// Pushes `n` packets (retrying when the buffer is full: this feeder is lossless) while a
/// recorder records them; returns the recorder after `run` or, when `crash`, without finishing.
fn record(dir: &Path, opts: Options, n: u64, crash: bool) -> weir_store::Summary {
    let buffer = Config::new(4 << 20).huge_pages(false).build().unwrap();
    let mut reader = buffer.reader(0).unwrap();
    let mut writer = buffer.writer().unwrap();
    let feeder = std::thread::spawn(move || {
        for i in 0..n {
            let (ts, orig, data) = packet(i);
            loop {
                match writer.push((i % 2) as u32, ts, orig, &data) {
                    Ok(()) => break,
                    Err(Dropped::Full) => std::thread::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            }
        }
    });
    let (store, _) = Store::open(dir, opts.format, opts.segment_size, 262_144).unwrap();
    let mut rec = Recorder::new(store, opts).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    if crash {
        // Run until the feeder is done and a few steps more, then vanish without finishing.
        while !feeder.is_finished() {
            rec.step(&mut reader).unwrap();
        }
        for _ in 0..3 {
            rec.step(&mut reader).unwrap();
        }
        // No Drop impl finishes anything: dropping it is a crash, minus the process exit.
        drop(rec);
        return weir_store::Summary::default();
    }
    let s2 = stop.clone();
    let t = std::thread::spawn(move || {
        feeder.join().unwrap();
        s2.store(true, Ordering::Release);
    });
    let summary = rec.run(&mut reader, &stop).unwrap();
    t.join().unwrap();
    summary
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcapng" || e == "pcap"))
        .collect();
    v.sort();
    v
}

/// Every packet of the store, in segment order, as (interface, ts, orig_len, data).
fn read_store(dir: &Path) -> Vec<(u32, u64, u32, Vec<u8>)> {
    let mut out = Vec::new();
    for seg in segments(dir) {
        let mut r = FileReader::open(&seg).unwrap();
        while let Some(p) = r
            .next_packet()
            .unwrap_or_else(|e| panic!("{}: {e}", seg.display()))
        {
            out.push((
                p.meta.interface,
                p.meta.ts_ns,
                p.meta.orig_len,
                p.data.to_vec(),
            ));
        }
    }
    out
}

#[test]
fn pcapng_segments_hold_every_packet_and_have_the_exact_size() {
    let dir = tempdir("ng");
    let mut opts = Options::new(interfaces());
    opts.segment_size = 1 << 20;
    opts.write_size = 1 << 20;
    let n = 20_000;
    let summary = record(&dir, opts, n, false);
    assert_eq!(summary.packets, n);
    assert_eq!(summary.dropped, 0);
    let segs = segments(&dir);
    assert!(segs.len() > 10, "{} segments", segs.len());
    for s in &segs[..segs.len() - 1] {
        assert_eq!(
            std::fs::metadata(s).unwrap().len(),
            1 << 20,
            "{}",
            s.display()
        );
    }
    let got = read_store(&dir);
    assert_eq!(got.len() as u64, n);
    for (i, (iface, ts, orig, data)) in got.into_iter().enumerate() {
        let (ts0, orig0, data0) = packet(i as u64);
        assert_eq!(
            (iface, ts, orig, &data),
            ((i % 2) as u32, ts0, orig0, &data0),
            "packet {i}"
        );
    }
    let m = weir_store::Manifest::load(&dir).unwrap().unwrap();
    assert_eq!(m.segments.len(), segs.len());
    assert_eq!(m.segments.iter().map(|s| s.packets).sum::<u64>(), n);
    assert!(m.segments.iter().all(|s| s.state == SegmentState::Closed));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pcap_segments_hold_every_packet() {
    let dir = tempdir("pcap");
    let mut opts = Options::new(interfaces());
    opts.format = Format::Pcap;
    opts.segment_size = 1 << 20;
    opts.write_size = 1 << 20;
    let n = 12_000;
    let summary = record(&dir, opts, n, false);
    assert_eq!(summary.packets, n);
    let segs = segments(&dir);
    assert!(segs.len() > 5);
    for s in &segs {
        assert!(std::fs::metadata(s).unwrap().len() <= 1 << 20);
    }
    let got = read_store(&dir);
    assert_eq!(got.len() as u64, n);
    for (i, (_, ts, orig, data)) in got.into_iter().enumerate() {
        let (ts0, orig0, data0) = packet(i as u64);
        assert_eq!((ts, orig, &data), (ts0, orig0, &data0), "packet {i}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_crash_leaves_a_store_that_reopens_readable() {
    for format in [Format::Pcapng, Format::Pcap] {
        let dir = tempdir(&format!("crash-{}", format.name()));
        let mut opts = Options::new(interfaces());
        opts.format = format;
        opts.segment_size = 2 << 20;
        opts.write_size = 1 << 20;
        record(&dir, opts.clone(), 9_000, true);
        // The last segment was left open: reopening repairs it.
        let (store, recovery) = Store::open(&dir, format, opts.segment_size, 262_144).unwrap();
        assert_eq!(recovery.repaired.len(), 1, "{recovery:?}");
        let listed: u64 = store.manifest.segments.iter().map(|s| s.packets).sum();
        drop(store);
        let got = read_store(&dir);
        assert_eq!(got.len() as u64, listed);
        // What survived is a prefix of what was sent, byte for byte.
        assert!(got.len() > 1000, "{} packets survived", got.len());
        for (i, (_, ts, orig, data)) in got.into_iter().enumerate() {
            let (ts0, orig0, data0) = packet(i as u64);
            assert_eq!((ts, orig, &data), (ts0, orig0, &data0), "packet {i}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn retention_keeps_the_store_under_its_size() {
    let dir = tempdir("ret");
    let mut opts = Options::new(interfaces());
    opts.segment_size = 1 << 20;
    opts.write_size = 1 << 20;
    opts.max_bytes = Some(3 << 20);
    let summary = record(&dir, opts, 20_000, false);
    assert!(summary.deleted > 5, "{summary:?}");
    let segs = segments(&dir);
    let total: u64 = segs
        .iter()
        .map(|s| std::fs::metadata(s).unwrap().len())
        .sum();
    assert!(total <= 3 << 20, "{total} bytes kept");
    // The newest packets are the ones kept, in order, ending with the last one sent.
    let got = read_store(&dir);
    let first = (0..20_000u64)
        .find(|&i| packet(i).0 == got[0].1)
        .expect("first kept packet");
    assert_eq!(first + got.len() as u64, 20_000);
    let m = weir_store::Manifest::load(&dir).unwrap().unwrap();
    assert_eq!(m.segments.len(), segs.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every packet matches.
struct All;

impl weir_store::Matcher for All {
    type Error = weir_store::SelectError;

    fn matches_all(&self) -> bool {
        true
    }

    fn set_interfaces(&mut self, _: &[weir_pcap::Interface]) -> Result<(), Self::Error> {
        Ok(())
    }

    fn matches(&self, _: u32, _: &[u8], _: u32) -> Option<bool> {
        Some(true)
    }
}

/// The packets of a time range, through `select`: `(interface, ts, orig_len, data)`.
fn select(dir: &Path, from: u64, to: u64) -> Vec<(u32, u64, u32, Vec<u8>)> {
    let query = weir_index::Query::from_expr("");
    let mut notices = Vec::new();
    let mut sel = weir_store::select(
        &[dir.to_path_buf()],
        &query,
        (from, to),
        &mut All,
        &mut |n| notices.push(n.to_string()),
    )
    .unwrap();
    assert!(notices.is_empty(), "{notices:?}");
    let mut out = Vec::new();
    sel.replay(|m, d, _| -> Result<(), weir_store::SelectError> {
        out.push((m.interface, m.ts_ns, m.orig_len, d.to_vec()));
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn select_gives_a_time_range_in_order_from_closed_and_open_segments() {
    for format in [Format::Pcapng, Format::Pcap] {
        let dir = tempdir(&format!("select-{}", format.name()));
        let mut opts = Options::new(interfaces());
        opts.format = format;
        opts.segment_size = 1 << 20;
        opts.write_size = 1 << 20;
        opts.index_chunk = Some(4096);
        let n = 6_000;
        record(&dir, opts, n, false);
        assert!(segments(&dir).len() > 3);
        let (first, last) = (100, 5_000);
        let want: Vec<_> = (first..=last)
            .map(|i| {
                let (ts, orig, data) = packet(i);
                // Classic pcap has one interface.
                let iface = if format == Format::Pcap {
                    0
                } else {
                    (i % 2) as u32
                };
                (iface, ts, orig, data)
            })
            .collect();
        let range = (packet(first).0, packet(last).0);
        assert_eq!(select(&dir, range.0, range.1), want, "{format:?} closed");
        // The same segments as if a recorder that stopped had left them open: read as streams.
        let mut m = weir_store::Manifest::load(&dir).unwrap().unwrap();
        for s in &mut m.segments {
            s.state = SegmentState::Open;
        }
        m.save(&dir).unwrap();
        assert_eq!(select(&dir, range.0, range.1), want, "{format:?} open");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
