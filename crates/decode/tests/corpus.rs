//! Decodes every packet of every classic pcap file in the shared corpus
//! (`../shared/corpus/pcaps`, real captures from suricata-verify): no panic, and every error
//! offset inside its frame. The files stay where they are; nothing is copied into the repo.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use weir_decode::{decode, protocol_name, summary, LinkType};

fn corpus_dir() -> Option<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    // crates/decode -> main -> work root, where shared/ lives beside the repository
    let candidates = [
        here.join("../../../shared/corpus/pcaps"),
        PathBuf::from("/work/shared/corpus/pcaps"),
    ];
    candidates.into_iter().find(|p| p.is_dir())
}

/// Captured bytes and original length of each record.
type Packets<'a> = Vec<(&'a [u8], u32)>;

/// A classic pcap file's link type and packets, or `None` when the bytes are not classic pcap.
/// Minimal on purpose: 24-byte global header, magic a1b2c3d4 (µs) or a1b23c4d (ns) in either
/// byte order, 16-byte record headers. A record running past the end ends the file.
fn parse_pcap(data: &[u8]) -> Option<(u32, Packets<'_>)> {
    let magic = data.get(..4)?;
    let le = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => return None,
    };
    let u32_at = |b: &[u8], at: usize| {
        let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    if data.len() < 24 {
        return None;
    }
    let link = u32_at(data, 20) & 0xffff;
    let mut packets = Vec::new();
    let mut at = 24;
    while at + 16 <= data.len() {
        let caplen = u32_at(data, at + 8) as usize;
        let orig = u32_at(data, at + 12);
        let start = at + 16;
        let Some(bytes) = data.get(start..start.saturating_add(caplen)) else {
            break;
        };
        packets.push((bytes, orig));
        at = start + caplen;
    }
    Some((link, packets))
}

#[test]
fn corpus_decodes_without_panic() {
    let Some(dir) = corpus_dir() else {
        eprintln!("note: corpus directory not found, skipping the corpus walk");
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let (mut n_files, mut skipped, mut n_packets) = (0, 0, 0usize);
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    let mut protocols: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut links: BTreeMap<u32, usize> = BTreeMap::new();
    let mut line = String::new();
    for path in &files {
        let data = std::fs::read(path).unwrap();
        let Some((link, packets)) = parse_pcap(&data) else {
            skipped += 1;
            continue;
        };
        n_files += 1;
        *links.entry(link).or_default() += packets.len();
        for (frame, _orig) in packets {
            n_packets += 1;
            let d = decode(LinkType(link), frame);
            if let Some(e) = d.error() {
                assert!(
                    e.offset as usize <= frame.len(),
                    "{}: {e} beyond a {}-byte frame",
                    path.display(),
                    frame.len()
                );
                *errors
                    .entry(format!("{} {}", e.kind, e.layer.name()))
                    .or_default() += 1;
            }
            *protocols.entry(protocol_name(&d)).or_default() += 1;
            line.clear();
            use std::fmt::Write;
            write!(line, "{}", summary(&d)).unwrap();
            assert!(!line.is_empty() || d.layers().is_empty());
            let _ = (d.ip(), d.outer_ip(), d.transport(), d.vlan());
        }
    }
    eprintln!(
        "corpus: {n_files} pcap files ({skipped} not classic pcap), {n_packets} packets; link types {links:?}"
    );
    eprintln!("protocols: {protocols:?}");
    eprintln!("stopped early: {errors:?}");
    assert!(n_packets > 0 || n_files == 0);
}
