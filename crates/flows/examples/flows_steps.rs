//! Times the two steps of metering separately on a capture file:
//! `cargo run --release -p weir-flows --example flows_steps -- FILE`.
//!
//! * read: reading the file only (subtracted from the next two);
//! * prepare: [`Preparer::prepare`] (fast path, decoder fallback) and, for comparison,
//!   [`Preparer::prepare_slow`] (decoder only);
//! * table: [`Meter::packet_prepared`] over the prepared packets held in memory;
//! * whole: [`Meter::packet`] while reading.

use std::time::Instant;

use weir_flows::{Config, FlowRecord, Meter, Prepared, RecordSink};
use weir_pcap::FileReader;

struct Count(u64);

impl RecordSink for Count {
    type Error = std::convert::Infallible;
    fn record(&mut self, _: &FlowRecord) -> Result<(), Self::Error> {
        self.0 += 1;
        Ok(())
    }
}

fn cfg() -> Config {
    Config {
        seed: Some(1),
        ..Config::default()
    }
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: flows_steps FILE");
    let rounds: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(3);
    let preparer = Meter::new(&cfg(), Count(0)).preparer().clone();
    let mut best = [f64::MAX; 5];
    let mut n = 0u64;
    let mut prepared: Vec<Prepared> = Vec::new();
    if std::env::var_os("HOT_ONLY").is_some() {
        let mut r = FileReader::open(&path).unwrap();
        while let Some(p) = r.next_packet().unwrap() {
            prepared.push(preparer.prepare(p.link, p.meta.ts_ns, p.data));
            if prepared.len() == 100_000 {
                break;
            }
        }
        n = prepared.len() as u64;
    }
    for _ in 0..if std::env::var_os("HOT_ONLY").is_some() {
        0
    } else {
        rounds
    } {
        // read only
        let t = Instant::now();
        let mut r = FileReader::open(&path).unwrap();
        let mut sum = 0u64;
        n = 0;
        while let Some(p) = r.next_packet().unwrap() {
            sum = sum.wrapping_add(p.data.len() as u64 ^ p.meta.ts_ns);
            n += 1;
        }
        std::hint::black_box(sum);
        best[0] = best[0].min(t.elapsed().as_secs_f64());

        // read + prepare (fast)
        prepared.clear();
        prepared.reserve(n as usize);
        let t = Instant::now();
        let mut r = FileReader::open(&path).unwrap();
        while let Some(p) = r.next_packet().unwrap() {
            prepared.push(preparer.prepare(p.link, p.meta.ts_ns, p.data));
        }
        best[1] = best[1].min(t.elapsed().as_secs_f64());

        // read + prepare (decoder)
        let t = Instant::now();
        let mut r = FileReader::open(&path).unwrap();
        let mut x = 0u64;
        while let Some(p) = r.next_packet().unwrap() {
            let q = preparer.prepare_slow(p.link, p.meta.ts_ns, p.data);
            x = x.wrapping_add(q.hash().unwrap_or(0));
        }
        std::hint::black_box(x);
        best[2] = best[2].min(t.elapsed().as_secs_f64());

        // table step over the prepared packets
        let mut m = Meter::new(&cfg(), Count(0));
        let t = Instant::now();
        for p in &prepared {
            m.packet_prepared(p);
        }
        let done = m.finish();
        best[3] = best[3].min(t.elapsed().as_secs_f64());
        std::hint::black_box(done.sink.0);

        // whole
        let mut m = Meter::new(&cfg(), Count(0));
        let t = Instant::now();
        let mut r = FileReader::open(&path).unwrap();
        while let Some(p) = r.next_packet().unwrap() {
            m.packet(p.link, p.meta.ts_ns, p.data);
        }
        let done = m.finish();
        best[4] = best[4].min(t.elapsed().as_secs_f64());
        std::hint::black_box(done.sink.0);
    }
    // table step over a cache-resident slice, repeated
    let k = prepared.len().min(100_000);
    let mut hot = f64::MAX;
    let reps = if std::env::var_os("HOT_ONLY").is_some() {
        200
    } else {
        10
    };
    for _ in 0..reps {
        let mut m = Meter::new(&cfg(), Count(0));
        let t = Instant::now();
        for p in &prepared[..k] {
            m.packet_prepared(p);
        }
        hot = hot.min(t.elapsed().as_secs_f64());
        std::hint::black_box(m.finish().sink.0);
    }
    let hot_frags = prepared[..k].iter().filter(|p| p.is_fragment()).count();
    println!(
        "table step, first {k} packets in cache ({hot_frags} fragments): {:.1} ns/packet",
        hot * 1e9 / k as f64
    );
    let ns = |s: f64| s * 1e9 / n as f64;
    let frags = prepared.iter().filter(|p| p.is_fragment()).count();
    let dropped = prepared.iter().filter(|p| !p.is_metered()).count();
    println!("{n} packets ({frags} fragments to attribute, {dropped} dropped); best of {rounds}, ns/packet:");
    println!("  read only                 {:6.1}", ns(best[0]));
    println!(
        "  prepare (fast path)       {:6.1}  (read + prepare {:6.1})",
        ns(best[1] - best[0]),
        ns(best[1])
    );
    println!(
        "  prepare (decoder only)    {:6.1}  (read + prepare {:6.1})",
        ns(best[2] - best[0]),
        ns(best[2])
    );
    println!("  table step (in memory)    {:6.1}", ns(best[3]));
    println!(
        "  whole Meter::packet       {:6.1}  (read + meter   {:6.1})",
        ns(best[4] - best[0]),
        ns(best[4])
    );
}
