//! The analyzer against hostile input: every corpus capture whole, then the packets of the
//! corpus's HTTP and TLS captures truncated and mutated at random (proptest), must never panic,
//! and the bounds must hold (held bytes never above the configured totals).

use proptest::prelude::*;
use weir_http::{Analyzer, Config, Event};
use weir_pcap::FileReader;

fn packets(path: &std::path::Path) -> Packets {
    let Ok(mut r) = FileReader::open(path) else {
        return Vec::new();
    };
    let mut v = Vec::new();
    while let Ok(Some(p)) = r.next_packet() {
        v.push((p.meta.ts_ns, p.link, p.data.to_vec()));
    }
    v
}

fn small() -> Config {
    Config {
        max_pending: 4096,
        max_total_pending: 16 * 1024,
        max_flows: 64,
        idle_timeout_ns: 1_000_000_000,
    }
}

#[test]
fn every_corpus_file_runs_within_bounds() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    let mut records = 0u64;
    for f in files {
        if std::fs::metadata(&f).map_or(true, |m| m.len() > 20 << 20) {
            continue;
        }
        for cfg in [Config::default(), small()] {
            let mut a = Analyzer::new(cfg);
            let mut n = 0u64;
            for (ts, link, data) in packets(&f) {
                a.packet(ts, link, &data, &mut |_| n += 1);
                assert!(a.flows() <= cfg.max_flows, "{}", f.display());
                let s = a.stats();
                assert!(
                    s.max_pending_seen <= (cfg.max_total_pending + cfg.max_pending * 2) as u64,
                    "{}: {s:?}",
                    f.display()
                );
            }
            let s = a.finish(&mut |_| n += 1);
            assert_eq!(s.http_records + s.tls_records, n, "{}", f.display());
            assert_eq!(a.flows(), 0);
            records += n;
        }
    }
    assert!(records > 0);
}

type Packets = Vec<(u64, weir_decode::LinkType, Vec<u8>)>;

fn http_files() -> &'static [Packets] {
    static FILES: std::sync::OnceLock<Vec<Packets>> = std::sync::OnceLock::new();
    FILES.get_or_init(load_http_files)
}

fn load_http_files() -> Vec<Packets> {
    let Some(files) = weir_testkit::corpus() else {
        return Vec::new();
    };
    files
        .iter()
        .filter(|f| {
            let n = f.file_name().unwrap().to_string_lossy().to_string();
            (n.starts_with("http") || n.contains("tls"))
                && std::fs::metadata(f).is_ok_and(|m| m.len() < 1 << 20)
        })
        .take(40)
        .map(|f| packets(f))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn truncated_and_mutated_packets_never_panic(
        file in 0usize..40,
        seed in any::<u64>(),
        cut in 0usize..1600,
        flips in proptest::collection::vec((0usize..1600, any::<u8>()), 0..8),
        every in 1usize..4,
    ) {
        let files = http_files();
        prop_assume!(!files.is_empty());
        let pkts = &files[file % files.len()];
        for cfg in [Config::default(), small()] {
            let mut a = Analyzer::new(cfg);
            let mut n = 0u64;
            for (i, (ts, link, data)) in pkts.iter().enumerate() {
                let mut d = data.clone();
                if (i as u64 ^ seed) as usize % every == 0 {
                    for &(at, x) in &flips {
                        if !d.is_empty() {
                            let j = at % d.len();
                            d[j] ^= x;
                        }
                    }
                    // keep at least the headers most of the time: cut inside the payload
                    let keep = d.len().saturating_sub(cut % (d.len() + 1) / 2);
                    d.truncate(keep);
                }
                a.packet(*ts, *link, &d, &mut |e: Event| { let _ = e; n += 1 });
            }
            let s = a.finish(&mut |_| n += 1);
            prop_assert_eq!(s.http_records + s.tls_records, n);
        }
    }
}
