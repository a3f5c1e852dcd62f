//! How fast one core walks the records of a large classic pcap file, from start to end
//! (`FileReader::open`) and through the ranges of `FileReader::split` (as the parallel readers
//! do), one range after the other on this thread. Each packet's first and last bytes are read,
//! as a consumer would.
//!
//! usage: cargo run --release -p weir-pcap --example scan_speed -- FILE [RUNS]

use std::time::{Duration, Instant};

use weir_pcap::FileReader;

/// Packets seen and a checksum of the bytes read, so the work cannot be optimised away.
fn walk(r: &mut FileReader, n: &mut u64, sum: &mut u64) {
    while let Some(p) = r.next_packet().expect("an undamaged file") {
        *n += 1;
        *sum += u64::from(p.data.first().copied().unwrap_or(0))
            + u64::from(p.data.last().copied().unwrap_or(0));
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: scan_speed FILE [RUNS]");
    let runs: usize = args
        .next()
        .map_or(5, |r| r.parse().expect("RUNS is a number"));
    let (mut mapped, mut ranges) = (Vec::new(), Vec::new());
    let mut checks = Vec::new();
    for _ in 0..runs {
        let (mut n, mut sum) = (0, 0);
        let t = Instant::now();
        walk(
            &mut FileReader::open(&path).expect("open"),
            &mut n,
            &mut sum,
        );
        mapped.push(t.elapsed());
        checks.push((n, sum));

        let (mut n, mut sum) = (0, 0);
        let t = Instant::now();
        let whole = FileReader::open(&path).expect("open");
        let len = std::fs::metadata(&path).expect("stat").len();
        let parts = whole
            .split((len >> 23).max(2) as usize)
            .expect("a classic pcap file");
        for mut r in parts {
            walk(&mut r, &mut n, &mut sum);
        }
        ranges.push(t.elapsed());
        checks.push((n, sum));
    }
    assert!(
        checks.windows(2).all(|w| w[0] == w[1]),
        "both ways read the same packets: {checks:?}"
    );
    let (m, r) = (median(mapped), median(ranges));
    println!(
        "{} packets, median of {runs}: mapped {:.1} ms, in ranges {:.1} ms ({:.2}x)",
        checks[0].0,
        m.as_secs_f64() * 1e3,
        r.as_secs_f64() * 1e3,
        m.as_secs_f64() / r.as_secs_f64()
    );
}
