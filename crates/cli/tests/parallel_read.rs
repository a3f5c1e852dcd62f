//! The parallel reading path of `weir read` (one large classic pcap split across threads) must give
//! exactly tcpdump's output and the sequential path's, also when the split guesses land inside
//! packets (payloads full of fake record headers) and when the file is damaged.
//! `WEIR_PARALLEL_MIN_BYTES=0` forces the path on small files, a huge value keeps it off.
//!
//! Which case a file exercises is checked on `FileReader::split`'s own result (the ranges the
//! parallel path is given), not on log text: the clean file's guesses are all real record
//! boundaries, the misleading file's are not, so the exact fallback must run.

mod common;

use std::path::Path;
use std::process::Command;

use common::{run, weir};
use weir_pcap::FileReader;

/// A µs pcap of UDP/IPv4 frames; with `fakes`, every payload is a run of 16-byte pcap record
/// headers with zero lengths, which look like a plausible chain of records.
fn build(path: &Path, packets: usize, fakes: bool) {
    let mut v = Vec::new();
    v.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    v.extend_from_slice(&2u16.to_le_bytes());
    v.extend_from_slice(&4u16.to_le_bytes());
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(&65535u32.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    for i in 0..packets {
        // With fakes, payloads are made only of fake headers (a multiple of 16 bytes), so from any
        // fake the chain runs on into the real records: whatever the split target, the first
        // plausible offset after it is a fake one, and the exact fallback must be taken.
        let payload_len = if fakes {
            1200 + 16 * ((i * 37) % 25)
        } else {
            64 + (i * 37) % 400
        };
        let mut payload = vec![0u8; payload_len];
        if fakes {
            for (k, chunk) in payload.chunks_mut(16).enumerate() {
                if chunk.len() == 16 {
                    chunk[..4].copy_from_slice(&(1_700_000_000u32 + k as u32).to_le_bytes());
                }
            }
        } else {
            payload
                .iter_mut()
                .enumerate()
                .for_each(|(k, b)| *b = (k * 7 + i) as u8);
        }
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
        let ip_len = 20 + 8 + payload_len;
        f.extend_from_slice(&[
            0x45,
            0,
            (ip_len >> 8) as u8,
            ip_len as u8,
            0,
            1,
            0,
            0,
            64,
            17,
            0,
            0,
        ]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, (i % 200) as u8, 2]);
        let sport = 1000 + (i % 50) as u16;
        let udp_len = 8 + payload_len;
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&53u16.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&payload);
        let ts = 1_700_000_000u64 * 1_000_000 + i as u64 * 10;
        v.extend_from_slice(&((ts / 1_000_000) as u32).to_le_bytes());
        v.extend_from_slice(&((ts % 1_000_000) as u32).to_le_bytes());
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(&f);
    }
    std::fs::write(path, v).unwrap();
}

/// `weir read` of `input` with `expr` into `out`, with the parallel path forced on or kept off.
fn weir_read(input: &Path, expr: &str, out: &Path, parallel: bool) -> std::process::Output {
    let min = if parallel {
        "0"
    } else {
        "18446744073709551615"
    };
    run(weir()
        .env("WEIR_PARALLEL_MIN_BYTES", min)
        .args(["read", "--micro", "-r"])
        .arg(input)
        .arg("-w")
        .arg(out)
        .arg(expr))
}

/// Runs weir (parallel and sequential) and tcpdump; the three files written must be identical.
fn compare(input: &Path, expr: &str, dir: &Path) {
    let (a, s, b) = (
        dir.join("weir.pcap"),
        dir.join("weir-seq.pcap"),
        dir.join("tcpdump.pcap"),
    );
    let w = weir_read(input, expr, &a, true);
    let ws = weir_read(input, expr, &s, false);
    let t = run(Command::new("tcpdump")
        .arg("-r")
        .arg(input)
        .arg("-w")
        .arg(&b)
        .arg(expr));
    for (name, o) in [("parallel", &w), ("sequential", &ws)] {
        assert_eq!(
            o.status.success(),
            t.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let (wa, ws, tb) = (
        std::fs::read(&a).unwrap(),
        std::fs::read(&s).unwrap(),
        std::fs::read(&b).unwrap(),
    );
    assert!(tb.len() > 24, "tcpdump wrote packets");
    for (name, ours) in [("parallel", &wa), ("sequential", &ws)] {
        assert!(
            *ours == tb,
            "{} [{expr}] {name}: {} vs {} bytes",
            input.display(),
            ours.len(),
            tb.len()
        );
    }
}

/// The ranges `FileReader::split` gives the parallel path for `path` (as many as cores, as `weir
/// read` asks for on a file under 32 MiB): how many, the packets read in them up to the first
/// range that ends early, and whether every range but the last ended exactly at the next one's
/// start (every split guess a real record boundary).
fn split_ranges(path: &Path) -> (usize, u64, bool) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let reader = FileReader::open(path).unwrap();
    let ranges = reader
        .split(cores.max(2))
        .expect("the file qualifies for the parallel path");
    let n = ranges.len();
    let mut packets = 0;
    for (k, mut r) in ranges.into_iter().enumerate() {
        loop {
            match r.next_packet() {
                Ok(Some(_)) => packets += 1,
                Ok(None) => break,
                Err(_) if k + 1 < n => return (n, packets, false),
                Err(e) => panic!("last range of {}: {e}", path.display()),
            }
        }
    }
    (n, packets, true)
}

#[test]
fn parallel_read_is_exact_for_clean_misleading_and_damaged_files() {
    const PACKETS: usize = 20_011;
    let tmp = tempfile::tempdir().unwrap();
    for (name, fakes) in [("clean.pcap", false), ("fakes.pcap", true)] {
        let f = tmp.path().join(name);
        build(&f, PACKETS, fakes);
        // The file is split, and fake headers fool the split guess (so the exact fallback
        // runs) exactly when the payloads hold them.
        let (n, packets, exact) = split_ranges(&f);
        assert!(n >= 2, "{name}: {n} ranges");
        assert_eq!(exact, !fakes, "{name}: split guesses on record boundaries");
        if exact {
            assert_eq!(packets, PACKETS as u64, "{name}: packets in the ranges");
        }
        for expr in ["", "udp port 53", "dst host 10.0.7.2", "greater 300"] {
            compare(&f, expr, tmp.path());
        }
        // Damaged: cut in the middle of the last quarter.
        let bytes = std::fs::read(&f).unwrap();
        let cut = tmp.path().join(format!("cut-{name}"));
        std::fs::write(&cut, &bytes[..bytes.len() * 7 / 8]).unwrap();
        compare(&cut, "udp", tmp.path());
    }
}
