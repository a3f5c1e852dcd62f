//! Decodes every packet of every file of the shared corpus (`../shared/corpus/pcaps`, real
//! captures from suricata-verify, or `$WEIR_CORPUS`), classic pcap and pcapng alike: no panic,
//! and every error offset inside its frame. Then the same files rewritten as pcapng by editcap
//! (Wireshark's) must decode to exactly the same packets and results.
//!
//! Every packet also goes through the fast header parser, `weir_decode::quick`: whatever it
//! accepts must agree with the full decoder (`common::quick_agrees`), and it must accept most of
//! the corpus (it is the hot path of flows and index).
//!
//! A missing corpus or editcap is a skip with a note, or a failure when `WEIR_REQUIRE_PEERS` is
//! set. The files stay where they are; nothing is copied into the repo.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::process::Command;

mod common;

use weir_decode::{decode, protocol_name, summary};
use weir_pcap::{FileFormat, FileReader};

/// What the walk over a set of files saw.
#[derive(Default)]
struct Tally {
    files: usize,
    packets: u64,
    /// Files whose reading stopped at damage (the packets before it count).
    damaged: usize,
    formats: BTreeMap<&'static str, usize>,
    links: BTreeMap<u32, u64>,
    protocols: BTreeMap<&'static str, u64>,
    errors: BTreeMap<String, u64>,
    /// Packets `weir_decode::quick` accepted (and agreed on with the decoder).
    quick: u64,
}

/// One file's packets: how many, and a digest of every packet's link type, bytes and decoding.
#[derive(Debug, PartialEq, Eq)]
struct FileResult {
    packets: u64,
    digest: u64,
}

/// Reads and decodes every packet of `path` (either format), checking each decoding; `None` when
/// the reader refuses the file.
fn walk(path: &Path, t: &mut Tally) -> Option<FileResult> {
    let mut r = FileReader::open(path).ok()?;
    t.files += 1;
    let format = match r.format() {
        FileFormat::Pcap(_) => "pcap",
        FileFormat::Pcapng => "pcapng",
    };
    *t.formats.entry(format).or_default() += 1;
    let (mut packets, mut h) = (0u64, DefaultHasher::new());
    let mut line = String::new();
    loop {
        let p = match r.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(_) => {
                t.damaged += 1;
                break;
            }
        };
        packets += 1;
        let frame = p.data;
        let d = decode(p.link, frame);
        if let Some(e) = d.error() {
            assert!(
                e.offset as usize <= frame.len(),
                "{}: {e} beyond a {}-byte frame",
                path.display(),
                frame.len()
            );
            *t.errors
                .entry(format!("{} {}", e.kind, e.layer.name()))
                .or_default() += 1;
        }
        *t.protocols.entry(protocol_name(&d)).or_default() += 1;
        *t.links.entry(p.link.0).or_default() += 1;
        line.clear();
        write!(line, "{}", summary(&d)).unwrap();
        assert!(!line.is_empty() || d.layers().is_empty());
        let _ = (d.ip(), d.outer_ip(), d.transport(), d.vlan());
        t.quick += u64::from(common::quick_agrees(p.link, frame));
        (p.link.0, frame, &line).hash(&mut h);
    }
    t.packets += packets;
    Some(FileResult {
        packets,
        digest: h.finish(),
    })
}

#[test]
fn corpus_decodes_without_panic_as_pcap_and_pcapng() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    let mut t = Tally::default();
    let results: Vec<_> = files.iter().map(|p| walk(p, &mut t)).collect();
    eprintln!(
        "corpus: {} of {} files read ({:?}, {} with a damaged tail), {} packets; link types {:?}",
        t.files,
        files.len(),
        t.formats,
        t.damaged,
        t.packets,
        t.links
    );
    eprintln!("protocols: {:?}", t.protocols);
    eprintln!(
        "quick parser: {} of {} packets accepted, each agreeing with the decoder",
        t.quick, t.packets
    );
    // the corpus is mostly plain Ethernet / IP: quick must read most of it, or the fast paths
    // of flows and index would be the decoder's speed
    assert!(
        t.quick * 10 >= t.packets * 8,
        "quick accepted only {} of {} packets",
        t.quick,
        t.packets
    );
    eprintln!("stopped early: {:?}", t.errors);
    // A corpus the reader mostly refuses, or without packets, tests nothing.
    assert!(
        t.files * 10 >= files.len() * 9,
        "only {} of {} corpus files could be read",
        t.files,
        files.len()
    );
    assert!(
        t.packets >= t.files as u64,
        "{} packets in {} files",
        t.packets,
        t.files
    );

    // The same files as pcapng.
    if !weir_testkit::have("editcap") {
        return;
    }
    let dir = weir_testkit::TempDir::new("decode-pcapng");
    let mut ng = Tally::default();
    let mut converted = 0;
    for (i, (path, ours)) in files.iter().zip(&results).enumerate() {
        let Some(ours) = ours else { continue };
        let out = dir.join(&format!("{i}.pcapng"));
        let st = Command::new("editcap")
            .args(["-F", "pcapng"])
            .arg(path)
            .arg(&out)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("editcap runs");
        if !st.success() {
            continue;
        }
        converted += 1;
        let theirs = walk(&out, &mut ng)
            .unwrap_or_else(|| panic!("the pcapng copy of {} is refused", path.display()));
        assert_eq!(
            &theirs,
            ours,
            "{}: the pcapng copy decodes differently",
            path.display()
        );
        std::fs::remove_file(&out).unwrap();
    }
    eprintln!(
        "pcapng copies: {converted} files ({:?}), {} packets, each decoded as its original",
        ng.formats, ng.packets
    );
    assert!(
        converted * 10 >= t.files * 9,
        "editcap converted only {converted} of {} files",
        t.files
    );
    assert_eq!(ng.formats.get("pcapng"), Some(&converted));
    assert!(ng.packets * 10 >= t.packets * 9, "{} packets", ng.packets);
}
