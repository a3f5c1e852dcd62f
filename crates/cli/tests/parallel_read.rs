//! The parallel reading path of `weir read` (one large classic pcap split across threads) must give
//! exactly tcpdump's output, also when the split guesses land inside packets (payloads full of fake
//! record headers) and when the file is damaged. `WEIR_PARALLEL_MIN_BYTES=0` forces the path on
//! small files.

mod common;

use std::path::Path;
use std::process::Command;

use common::{run, weir};

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

/// Runs both tools and compares; returns weir's stderr (debug log included).
fn compare(input: &Path, expr: &str, dir: &Path) -> String {
    let (a, b) = (dir.join("weir.pcap"), dir.join("tcpdump.pcap"));
    let w = run(weir()
        .env("WEIR_PARALLEL_MIN_BYTES", "0")
        .env("WEIR_LOG", "debug")
        .args(["read", "--micro", "-r"])
        .arg(input)
        .arg("-w")
        .arg(&a)
        .arg(expr));
    let t = run(Command::new("tcpdump")
        .arg("-r")
        .arg(input)
        .arg("-w")
        .arg(&b)
        .arg(expr));
    assert_eq!(
        w.status.success(),
        t.status.success(),
        "{}",
        String::from_utf8_lossy(&w.stderr)
    );
    let (wa, tb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(tb.len() > 24, "tcpdump wrote packets");
    assert!(
        wa == tb,
        "{} [{expr}]: {} vs {} bytes",
        input.display(),
        wa.len(),
        tb.len()
    );
    String::from_utf8_lossy(&w.stderr).into_owned()
}

#[test]
fn parallel_read_is_exact_for_clean_misleading_and_damaged_files() {
    let tmp = tempfile::tempdir().unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (name, fakes) in [("clean.pcap", false), ("fakes.pcap", true)] {
        let f = tmp.path().join(name);
        build(&f, 20_011, fakes);
        for expr in ["", "udp port 53", "dst host 10.0.7.2", "greater 300"] {
            let log = compare(&f, expr, tmp.path());
            if cores >= 2 {
                assert!(log.contains("ranges"), "the parallel path ran: {log}");
                // Fake headers fool the split guess; the exact fallback must have been taken.
                let fell_back = log.contains("reading on sequentially");
                assert_eq!(fell_back, fakes, "{name}: {log}");
            }
        }
        // Damaged: cut in the middle of the last quarter.
        let bytes = std::fs::read(&f).unwrap();
        let cut = tmp.path().join(format!("cut-{name}"));
        std::fs::write(&cut, &bytes[..bytes.len() * 7 / 8]).unwrap();
        compare(&cut, "udp", tmp.path());
    }
}
