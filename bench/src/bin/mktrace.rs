//! Builds the benchmark trace: every Ethernet capture of the corpus, replicated until the trace
//! holds at least `--packets` packets. Each replica gets timestamps that continue where the last
//! one ended (inter-packet gaps kept, capped at one second) and its IPv4/IPv6 addresses shifted by
//! the replica number (octets 1–2 of every address; IPv4 header checksums recomputed), so replicas
//! form distinct flows the way a longer real capture would.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use weir_packet::{LinkType, PacketMeta};
use weir_pcap::FileReader;
use weir_pcap::{PcapWriter, Precision};

/// Build the benchmark trace from the corpus.
#[derive(Parser)]
struct Args {
    /// Output pcap file (nanosecond timestamps).
    #[arg(short = 'w', long)]
    output: PathBuf,
    /// Minimum number of packets.
    #[arg(long, default_value_t = 3_000_000)]
    packets: u64,
    /// Corpus directory (default: ../shared/corpus/pcaps next to the repository).
    #[arg(long)]
    corpus: Option<PathBuf>,
}

struct Pkt {
    gap_ns: u64,
    orig_len: u32,
    data: Vec<u8>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dir = args.corpus.unwrap_or_else(weir_bench::corpus_dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let mut pkts = Vec::new();
    for f in &files {
        let Ok(mut r) = FileReader::open(f) else {
            continue;
        };
        let mut prev: Option<u64> = None;
        while let Ok(Some(p)) = r.next_packet() {
            if p.link != LinkType::ETHERNET {
                break;
            }
            let gap = prev.map_or(1000, |t| p.meta.ts_ns.saturating_sub(t).min(1_000_000_000));
            prev = Some(p.meta.ts_ns);
            pkts.push(Pkt {
                gap_ns: gap,
                orig_len: p.meta.orig_len,
                data: p.data.to_vec(),
            });
        }
    }
    anyhow::ensure!(!pkts.is_empty(), "no Ethernet packets in {}", dir.display());
    let out = BufWriter::new(File::create(&args.output)?);
    let mut w = PcapWriter::new(out, LinkType::ETHERNET, 262_144, Precision::Nano)?;
    let mut ts: u64 = 1_700_000_000_000_000_000;
    let mut written = 0u64;
    let mut replica = 0u16;
    let mut buf = Vec::new();
    while written < args.packets {
        for p in &pkts {
            ts += p.gap_ns;
            buf.clear();
            buf.extend_from_slice(&p.data);
            shift_addresses(&mut buf, replica);
            w.write(
                &PacketMeta {
                    ts_ns: ts,
                    orig_len: p.orig_len,
                    interface: 0,
                },
                &buf,
            )?;
            written += 1;
        }
        replica = replica.wrapping_add(1);
    }
    w.finish()?;
    eprintln!(
        "{}: {written} packets, {} replicas of {} corpus packets",
        args.output.display(),
        replica,
        pkts.len()
    );
    Ok(())
}

/// Adds `k` to octets 1–2 of the source and destination addresses of an IPv4 or IPv6 packet
/// carried in Ethernet (after any 802.1Q/802.1ad tags).
fn shift_addresses(frame: &mut [u8], k: u16) {
    if k == 0 {
        return;
    }
    let mut at = 12;
    let mut ethertype;
    loop {
        let Some(b) = frame.get(at..at + 2) else {
            return;
        };
        ethertype = u16::from_be_bytes([b[0], b[1]]);
        if matches!(ethertype, 0x8100 | 0x88a8 | 0x9100) {
            at += 4;
        } else {
            break;
        }
    }
    let ip = at + 2;
    let bump = |frame: &mut [u8], at: usize| {
        if let Some(b) = frame.get_mut(at..at + 2) {
            let v = u16::from_be_bytes([b[0], b[1]]).wrapping_add(k);
            b.copy_from_slice(&v.to_be_bytes());
        }
    };
    match ethertype {
        0x0800 => {
            let Some(&vihl) = frame.get(ip) else { return };
            let ihl = (vihl & 0x0f) as usize * 4;
            if vihl >> 4 != 4 || ihl < 20 || frame.len() < ip + ihl {
                return;
            }
            bump(frame, ip + 13);
            bump(frame, ip + 17);
            frame[ip + 10] = 0;
            frame[ip + 11] = 0;
            let sum = checksum(&frame[ip..ip + ihl]);
            frame[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
        }
        0x86dd => {
            bump(frame, ip + 9);
            bump(frame, ip + 25);
        }
        _ => {}
    }
}

/// The Internet checksum (RFC 1071) of `b`.
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in b.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += w as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
