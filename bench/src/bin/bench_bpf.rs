//! BPF engine benchmark: weir's interpreter against libpcap's `pcap_offline_filter()` (what
//! `tcpdump -r` runs per packet), on the packets of one capture file, for a handful of typical
//! tcpdump expressions. Both run the very same program (compiled once by libpcap the way tcpdump
//! compiles it) over the same packets, held back to back in memory; rounds of the two alternate,
//! and the median round gives ns/packet. The match counts must agree, or the benchmark fails.
//!
//! Two tables: the whole file, and its first `--hot-bytes` of packets (2 MiB by default), which
//! stay in the CPU cache the way a packet just captured or parsed does. On a file much larger
//! than the cache both engines mostly wait for memory, and the first table shows that cost.
//!
//! `cargo run --release -p weir-bench --bin bench_bpf -- FILE [--rounds N] [-e EXPR]...`

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use weir_filter::libpcap_oracle::{LibpcapProgram, OfflineFile};
use weir_filter::Filter;
use weir_packet::LinkType;

/// Time weir's BPF engine against libpcap's on one capture file.
#[derive(Parser)]
struct Args {
    /// Capture file (pcap or pcapng).
    file: PathBuf,
    /// Rounds per engine and filter (each round filters every packet once); 0 picks enough
    /// rounds for about 3 million packets.
    #[arg(long, default_value_t = 0)]
    rounds: usize,
    /// Filter expressions (default: six typical ones).
    #[arg(short = 'e', long = "expr")]
    exprs: Vec<String>,
    /// Size of the in-cache working set, in bytes of packet data.
    #[arg(long, default_value_t = 2 << 20)]
    hot_bytes: usize,
}

const DEFAULT_EXPRS: &[&str] = &[
    "tcp port 80",
    "udp port 53 or tcp port 443",
    "ip and not tcp",
    "tcp[tcpflags] & (tcp-syn|tcp-fin) != 0",
    "net 10.0.0.0/8 and portrange 1-1024",
    "vlan and tcp",
];

/// Link type, snapshot length and "swapped" from a pcap or pcapng header (first interface).
fn header(bytes: &[u8]) -> Result<(LinkType, u32, bool)> {
    let rd32 = |o: usize, le: bool| -> Result<u32> {
        let b: [u8; 4] = bytes.get(o..o + 4).context("short file")?.try_into()?;
        Ok(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let native_le = cfg!(target_endian = "little");
    let m = rd32(0, true)?;
    let classic = |m: u32| matches!(m, 0xa1b2_c3d4 | 0xa1b2_3c4d);
    if classic(m) || classic(m.swap_bytes()) {
        let le = classic(m);
        return Ok((LinkType(rd32(20, le)?), rd32(16, le)?, le != native_le));
    }
    if m == 0x0a0d_0d0a {
        let le = match rd32(8, true)? {
            0x1a2b_3c4d => true,
            0x4d3c_2b1a => false,
            _ => bail!("bad pcapng byte-order magic"),
        };
        let mut off = 0;
        loop {
            let (kind, len) = (rd32(off, le)?, rd32(off + 4, le)? as usize);
            if kind == 1 {
                let lt = rd32(off + 8, le)? & 0xffff;
                let lt = if le { lt } else { rd32(off + 8, le)? >> 16 };
                return Ok((LinkType(lt), rd32(off + 12, le)?, le != native_le));
            }
            if len < 12 {
                bail!("bad pcapng block");
            }
            off += len;
        }
    }
    bail!("not a pcap or pcapng file")
}

/// The packets back to back in one buffer, as weir's packet buffer holds them.
struct Packets {
    bytes: Vec<u8>,
    /// (offset, captured length, wire length)
    index: Vec<(usize, usize, u32)>,
}

impl Packets {
    /// The first packets, up to `max` bytes of data (at least one packet).
    fn head(&self, max: usize) -> Packets {
        let n = self
            .index
            .iter()
            .take_while(|&&(off, len, _)| off + len <= max)
            .count()
            .max(1);
        let end = self.index[n - 1].0 + self.index[n - 1].1;
        Packets {
            bytes: self.bytes[..end].to_vec(),
            index: self.index[..n].to_vec(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], u32)> + '_ {
        self.index
            .iter()
            .map(|&(off, len, wire)| (&self.bytes[off..off + len], wire))
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Times every program on `packets` with both engines and prints one table.
fn table(
    title: &str,
    packets: &Packets,
    programs: &[(&str, Filter, LibpcapProgram)],
    rounds: usize,
) -> Result<()> {
    let n = packets.index.len();
    let bytes = packets.bytes.len();
    let rounds = if rounds > 0 {
        rounds
    } else {
        (3_000_000 / n).clamp(5, 2000)
    };
    println!(
        "\n{title}: {n} packets, {:.1} MiB, {rounds} rounds per engine and filter",
        bytes as f64 / (1 << 20) as f64
    );
    println!(
        "{:<42} {:>6} {:>8} {:>12} {:>15} {:>7}",
        "filter", "insns", "matches", "weir ns/pkt", "libpcap ns/pkt", "ratio"
    );
    let (mut sum_w, mut sum_l) = (0.0, 0.0);
    for (expr, weir, libpcap) in programs {
        let run_weir = |pkts: &Packets| {
            pkts.iter()
                .filter(|&(data, wire)| weir.matches(black_box(data), wire))
                .count()
        };
        let run_libpcap = |pkts: &Packets| {
            pkts.iter()
                .filter(|&(data, wire)| libpcap.offline_filter(black_box(data), wire) != 0)
                .count()
        };
        let (mw, ml) = (run_weir(packets), run_libpcap(packets));
        if mw != ml {
            bail!("{expr}: weir matches {mw} packets, libpcap {ml}");
        }
        let (mut tw, mut tl) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            black_box(run_weir(black_box(packets)));
            tw.push(t.elapsed().as_nanos() as f64 / n as f64);
            let t = Instant::now();
            black_box(run_libpcap(black_box(packets)));
            tl.push(t.elapsed().as_nanos() as f64 / n as f64);
        }
        let (w, l) = (median(&mut tw), median(&mut tl));
        sum_w += w;
        sum_l += l;
        println!(
            "{expr:<42} {:>6} {mw:>8} {w:>12.2} {l:>15.2} {:>6.2}x",
            weir.instructions().len(),
            l / w
        );
    }
    if sum_w > 0.0 {
        println!(
            "{title}, all filters: libpcap / weir = {:.2}x",
            sum_l / sum_w
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let bytes = std::fs::read(&args.file).with_context(|| format!("{}", args.file.display()))?;
    let (link, snaplen, swapped) = header(&bytes)?;
    drop(bytes);
    let mut file = OfflineFile::open(&args.file).map_err(anyhow::Error::msg)?;
    let (owned, err) = file.read_all();
    if let Some(e) = err {
        eprintln!("note: reading stopped early: {e}");
    }
    if owned.is_empty() {
        bail!("no packets in {}", args.file.display());
    }
    let mut packets = Packets {
        bytes: Vec::new(),
        index: Vec::new(),
    };
    for p in owned {
        packets
            .index
            .push((packets.bytes.len(), p.data.len(), p.wirelen));
        packets.bytes.extend_from_slice(&p.data);
    }
    let hot = packets.head(args.hot_bytes);
    let exprs: Vec<String> = if args.exprs.is_empty() {
        DEFAULT_EXPRS.iter().map(|s| s.to_string()).collect()
    } else {
        args.exprs.clone()
    };
    let mut programs = Vec::new();
    for expr in &exprs {
        let weir = match Filter::compile_for_file(expr, link, snaplen, swapped) {
            Ok(f) => f,
            Err(e) => {
                println!("{expr}: does not compile: {e}");
                continue;
            }
        };
        let libpcap = file.compile(expr).map_err(anyhow::Error::msg)?;
        if weir.instructions() != libpcap.instructions() {
            bail!("{expr}: weir and libpcap programs differ");
        }
        programs.push((expr.as_str(), weir, libpcap));
    }
    println!("{}: link type {link}", args.file.display());
    table("whole file", &packets, &programs, args.rounds)?;
    table("in cache", &hot, &programs, args.rounds)?;
    Ok(())
}
