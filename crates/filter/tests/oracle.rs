//! The oracle test: on every capture of the shared corpus, for every expression of
//! `tests/expressions.txt`, weir must do what tcpdump does.
//!
//! For each file libpcap opens it (`pcap_open_offline`, as `tcpdump -r`) and reads its packets;
//! the expression is compiled twice: by libpcap on that very handle, as tcpdump does, and by
//! weir from the file header's link type, snapshot length and byte order alone. Then:
//!
//! * both compile, to the same instructions; and on every packet weir's engine returns the same
//!   value as libpcap's `pcap_offline_filter()` (so the same packets match); or
//! * both refuse, with the same message.
//!
//! A few files are also run end to end through the real `tcpdump -r FILE -w - EXPR`, and the
//! number of packets it writes must be the number weir matches.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{count_pcap_records, file_info, have_tcpdump, FileInfo};
use weir_filter::libpcap_oracle::{OfflineFile, OwnedPacket};
use weir_filter::{testing, Filter, FilterError};
use weir_packet::LinkType;

type Compiled = Vec<Result<Filter, FilterError>>;

/// Disagreements: all counted, the first few kept for the report.
#[derive(Default)]
struct Failures {
    count: u64,
    examples: Vec<String>,
}

impl Failures {
    fn add(&mut self, what: String) {
        self.count += 1;
        if self.examples.len() < 30 {
            self.examples.push(what);
        }
    }
}

#[derive(Default)]
struct Totals {
    /// Files handed to the checker.
    given: usize,
    files: usize,
    skipped_libpcap: usize,
    skipped_unknown_format: usize,
    truncated: usize,
    pairs_compiled: usize,
    pairs_refused: usize,
    packets: usize,
    comparisons: u64,
    matches: u64,
}

/// Compares weir with libpcap file by file, keeping weir's compiled filters per header.
struct Checker {
    exprs: Vec<&'static str>,
    cache: HashMap<FileInfo, Compiled>,
    t: Totals,
    failures: Failures,
}

impl Checker {
    fn new() -> Checker {
        Checker {
            exprs: testing::expressions(),
            cache: HashMap::new(),
            t: Totals::default(),
            failures: Failures::default(),
        }
    }

    fn check_file(&mut self, path: &Path) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        self.t.given += 1;
        let Some(info) = std::fs::read(path).ok().and_then(|b| file_info(&b)) else {
            self.t.skipped_unknown_format += 1;
            return;
        };
        let mut file = match OfflineFile::open(path) {
            Ok(f) => f,
            Err(e) => {
                println!("libpcap refuses {name}: {e}");
                self.t.skipped_libpcap += 1;
                return;
            }
        };
        let (t, failures) = (&mut self.t, &mut self.failures);
        t.files += 1;
        let (packets, err) = file.read_all();
        if err.is_some() {
            t.truncated += 1;
        }
        t.packets += packets.len();
        let exprs = &self.exprs;
        let ours = self.cache.entry(info).or_insert_with(|| {
            exprs
                .iter()
                .map(|e| {
                    Filter::compile_for_file(e, LinkType(info.linktype), info.snaplen, info.swapped)
                })
                .collect()
        });
        for (expr, ours) in exprs.iter().zip(ours.iter()) {
            let theirs = file.compile(expr);
            match (ours, theirs) {
                (Ok(f), Ok(p)) => {
                    t.pairs_compiled += 1;
                    if f.instructions() != p.instructions() {
                        failures.add(format!("{name} {expr:?}: programs differ"));
                        continue;
                    }
                    for (i, pkt) in packets.iter().enumerate() {
                        // The packet as captured, then cut short as a smaller snapshot length
                        // would have captured it (same wire length): that walks the
                        // out-of-bounds paths of every load.
                        let len = pkt.data.len();
                        for cut in [len, len * 2 / 3, len.min(40), len.min(20), len.min(13)] {
                            let data = &pkt.data[..cut];
                            let a = f.run(data, pkt.wirelen);
                            let b = p.offline_filter(data, pkt.wirelen);
                            t.comparisons += 1;
                            t.matches += u64::from(a != 0);
                            if a != b {
                                failures.add(format!(
                                    "{name} {expr:?} packet {i} cut to {cut}: weir {a}, libpcap {b}"
                                ));
                            }
                        }
                    }
                }
                (Err(e), Err(msg)) => {
                    t.pairs_refused += 1;
                    if e.to_string() != msg {
                        failures.add(format!("{name} {expr:?}: weir says {e:?}, libpcap {msg:?}"));
                    }
                }
                (Ok(_), Err(msg)) => failures.add(format!(
                    "{name} {expr:?}: libpcap refuses ({msg}), weir compiles"
                )),
                (Err(e), Ok(_)) => failures.add(format!(
                    "{name} {expr:?}: weir refuses ({e}), libpcap compiles"
                )),
            }
        }
    }

    fn report(&self, what: &str) {
        let t = &self.t;
        println!(
            "{what}: {} files ({} refused by libpcap, {} not pcap/pcapng, {} with a damaged tail), \
             {} expressions, {} packets; {} (file, expression) pairs compiled, {} refused alike; \
             {} packet comparisons (each packet whole and cut to 4 shorter lengths), {} matches",
            t.files,
            t.skipped_libpcap,
            t.skipped_unknown_format,
            t.truncated,
            self.exprs.len(),
            t.packets,
            t.pairs_compiled,
            t.pairs_refused,
            t.comparisons,
            t.matches
        );
        for f in &self.failures.examples {
            println!("FAIL {f}");
        }
        assert_eq!(self.failures.count, 0, "disagreements with libpcap");
        // A corpus that libpcap mostly refuses, or that holds no packets, tests nothing.
        assert!(
            t.files > 0 && t.files * 10 >= t.given * 9,
            "{what}: only {} of {} files compared",
            t.files,
            t.given
        );
        assert!(
            t.packets >= t.files && t.comparisons > 0 && t.matches > 0,
            "{what}: {} packets, {} comparisons, {} matches",
            t.packets,
            t.comparisons,
            t.matches
        );
    }
}

#[test]
fn weir_matches_libpcap_on_the_corpus() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    let mut c = Checker::new();
    for path in &files {
        c.check_file(path);
    }
    c.report("oracle");
}

#[test]
fn weir_matches_libpcap_on_pcapng_copies() {
    // The corpus is classic pcap; editcap (Wireshark's) rewrites a few files as pcapng, so the
    // pcapng side of libpcap (and the interface-block header path) is compared too.
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    if !weir_testkit::have("editcap") {
        return;
    }
    let dir = common::TempDir::new("pcapng");
    let mut seen = std::collections::HashSet::new();
    let mut c = Checker::new();
    for path in &files {
        let Some(info) = std::fs::read(path).ok().and_then(|b| file_info(&b)) else {
            continue;
        };
        if !seen.insert((info.linktype, info.swapped)) {
            continue;
        }
        let out = dir.path(&format!("{}-{}.pcapng", info.linktype, info.swapped));
        let st = Command::new("editcap")
            .args(["-F", "pcapng"])
            .arg(path)
            .arg(&out)
            .status()
            .unwrap();
        assert!(st.success(), "editcap failed on {path:?}");
        let ng = file_info(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!(ng.linktype, info.linktype);
        c.check_file(&out);
    }
    c.report("pcapng oracle");
}

/// Packets of a file as libpcap reads them.
fn libpcap_packets(path: &Path) -> Vec<OwnedPacket> {
    OfflineFile::open(path).unwrap().read_all().0
}

#[test]
fn spot_check_against_tcpdump_itself() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    if !have_tcpdump() {
        return;
    }
    // The first file of each link type, plus the big-endian ones.
    let mut chosen: HashMap<(u32, bool), PathBuf> = HashMap::new();
    for p in &files {
        if let Some(info) = std::fs::read(p).ok().and_then(|b| file_info(&b)) {
            chosen
                .entry((info.linktype, info.swapped))
                .or_insert_with(|| p.clone());
        }
    }
    let exprs = [
        "tcp port 80",
        "udp or icmp",
        "ip6",
        "not ip",
        "greater 200",
        "ip[6:2] & 0x1fff != 0",
        "ip broadcast",
        "tcp[tcpflags] & (tcp-syn|tcp-fin) != 0",
    ];
    let (mut checks, mut packets_written) = (0, 0);
    let mut chosen: Vec<_> = chosen.into_iter().collect();
    chosen.sort();
    // And the three largest files, for volume.
    let mut by_size: Vec<(u64, &PathBuf)> = files
        .iter()
        .map(|p| (std::fs::metadata(p).map(|m| m.len()).unwrap_or(0), p))
        .collect();
    by_size.sort();
    for (_, p) in by_size.iter().rev().take(3) {
        if let Some(info) = std::fs::read(p).ok().and_then(|b| file_info(&b)) {
            chosen.push(((info.linktype, info.swapped), (*p).clone()));
        }
    }
    for ((lt, swapped), path) in chosen {
        let bytes = std::fs::read(&path).unwrap();
        let info = file_info(&bytes).unwrap();
        let packets = libpcap_packets(&path);
        for expr in exprs {
            let out = Command::new("tcpdump")
                .arg("-r")
                .arg(&path)
                .arg("-w")
                .arg("-")
                .arg("--")
                .arg(expr)
                .output()
                .unwrap();
            let ours = Filter::compile_for_file(expr, LinkType(lt), info.snaplen, swapped);
            match ours {
                Ok(f) => {
                    assert!(out.status.success(), "tcpdump failed on {path:?} {expr:?}");
                    let theirs = count_pcap_records(&out.stdout);
                    let n = packets
                        .iter()
                        .filter(|p| f.matches(&p.data, p.wirelen))
                        .count();
                    assert_eq!(n, theirs, "{path:?} {expr:?}");
                    packets_written += theirs;
                }
                Err(e) => {
                    assert!(
                        !out.status.success(),
                        "tcpdump accepted {expr:?} on {path:?}: {e}"
                    );
                    assert_eq!(common::tcpdump_error(&out.stderr), e.to_string());
                }
            }
            checks += 1;
        }
    }
    println!("tcpdump spot check: {checks} (file, expression) runs agree, {packets_written} packets written by tcpdump");
    assert!(
        checks >= exprs.len() && packets_written > 0,
        "tcpdump spot check: {checks} runs, {packets_written} packets"
    );
}
