//! Packet decoder benchmark: weir-decode against etherparse's lax slicer
//! (`etherparse::LaxSlicedPacket::from_ethernet`, etherparse 0.18), on the Ethernet packets of
//! one or more classic pcap files held in memory.
//!
//! weir runs twice: through `decode_into`, which reuses one `Decoded` (the hot-loop API), and
//! through `decode`, which returns a new one by value (a 400-byte copy more per packet).
//! Both decoders extract the same fields from every packet (IP source and destination, the
//! upper protocol, the transport ports), which is what the flow meter needs, and fold them into a
//! checksum so nothing is optimised away. Rounds of the two alternate; the median round gives
//! ns/packet. The run also counts the packets on which the two disagree: weir follows tunnels,
//! MPLS, PPPoE and 802.3/SNAP and reports the innermost IP header, etherparse does not, so those
//! packets are expected to differ and are reported, not failed.
//!
//! `cargo run --release -p weir-bench --bin bench_decode -- FILE... [--rounds N]`

use std::hint::black_box;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};
use weir_decode::{decode, decode_into, Decoded, Layer, LinkType};

/// Time weir-decode against etherparse on the Ethernet packets of classic pcap files.
#[derive(Parser)]
struct Args {
    /// Classic pcap files (link type Ethernet; others are skipped with a note).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Rounds per decoder (each round decodes every packet once); 0 picks enough rounds for
    /// about 5 million packets.
    #[arg(long, default_value_t = 0)]
    rounds: usize,
}

/// The packets back to back in one buffer, with (start, length) of each.
#[derive(Default)]
struct Packets {
    bytes: Vec<u8>,
    spans: Vec<(usize, usize)>,
}

impl Packets {
    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.spans.iter().map(|&(s, n)| &self.bytes[s..s + n])
    }
}

/// Reads a classic pcap file (magic a1b2c3d4 or a1b23c4d, either byte order): its link type and
/// its packets appended to `out`. Returns the link type and the number of packets.
fn read_pcap(data: &[u8], out: &mut Packets, keep: impl Fn(u32) -> bool) -> Result<(u32, usize)> {
    let magic: [u8; 4] = data.get(..4).context("short file")?.try_into()?;
    let le = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => bail!("not a classic pcap file"),
    };
    let rd = |at: usize| -> Result<u32> {
        let b: [u8; 4] = data.get(at..at + 4).context("short file")?.try_into()?;
        Ok(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let link = rd(20)? & 0xffff;
    if !keep(link) {
        return Ok((link, 0));
    }
    let mut at = 24;
    let mut n = 0;
    while at + 16 <= data.len() {
        let caplen = rd(at + 8)? as usize;
        let start = at + 16;
        let Some(frame) = data.get(start..start + caplen) else {
            break; // a record cut by the end of the file
        };
        out.spans.push((out.bytes.len(), caplen));
        out.bytes.extend_from_slice(frame);
        at = start + caplen;
        n += 1;
    }
    Ok((link, n))
}

/// The fields both decoders extract: addresses (IPv4 in the first 4 bytes), protocol, ports.
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
struct Key {
    src: [u8; 16],
    dst: [u8; 16],
    proto: u8,
    sport: u16,
    dport: u16,
    ip: bool,
}

impl Key {
    #[inline]
    fn fold(&self) -> u64 {
        let a = u128::from_le_bytes(self.src) as u64 ^ (u128::from_le_bytes(self.src) >> 64) as u64;
        let b = u128::from_le_bytes(self.dst) as u64 ^ (u128::from_le_bytes(self.dst) >> 64) as u64;
        a.rotate_left(7)
            ^ b
            ^ (u64::from(self.proto) << 32)
            ^ (u64::from(self.sport) << 16)
            ^ u64::from(self.dport)
    }
}

#[inline]
fn addr16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => {
            let mut b = [0; 16];
            b[..4].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// weir's fields through `decode`, which returns a fresh `Decoded` by value.
#[inline]
fn weir_key(frame: &[u8]) -> Key {
    weir_fields(&decode(LinkType::ETHERNET, frame))
}

#[inline]
fn weir_fields(d: &Decoded<'_>) -> Key {
    let mut k = Key::default();
    if let Some(ip) = d.ip() {
        k.ip = true;
        k.src = addr16(ip.src);
        k.dst = addr16(ip.dst);
        k.proto = ip.proto;
        if let Some((s, p)) = d.transport().and_then(|t| t.ports()) {
            k.sport = s;
            k.dport = p;
        }
    }
    k
}

/// weir's outermost IP header and the ports right after it: what etherparse, which does not
/// follow tunnels, should agree with.
fn weir_outer_key(frame: &[u8]) -> Key {
    let d = decode(LinkType::ETHERNET, frame);
    let mut k = Key::default();
    let Some(ip) = d.outer_ip() else {
        return k;
    };
    k.ip = true;
    k.src = addr16(ip.src);
    k.dst = addr16(ip.dst);
    k.proto = ip.proto;
    let layers = d.layers();
    let at = layers
        .iter()
        .position(|l| matches!(l, Layer::Ipv4(_) | Layer::Ipv6(_)))
        .unwrap_or(0);
    let next = layers[at + 1..]
        .iter()
        .find(|l| !matches!(l, Layer::Ipv6Ext { .. }));
    match next {
        Some(Layer::Tcp(t)) => (k.sport, k.dport) = (t.src_port(), t.dst_port()),
        Some(Layer::Udp(u)) => (k.sport, k.dport) = (u.src_port(), u.dst_port()),
        _ => {}
    }
    k
}

#[inline]
fn etherparse_key(frame: &[u8]) -> Key {
    let mut k = Key::default();
    let Ok(p) = LaxSlicedPacket::from_ethernet(frame) else {
        return k;
    };
    match &p.net {
        Some(LaxNetSlice::Ipv4(s)) => {
            let h = s.header();
            k.ip = true;
            k.src[..4].copy_from_slice(&h.source());
            k.dst[..4].copy_from_slice(&h.destination());
            k.proto = s.payload().ip_number.0;
        }
        Some(LaxNetSlice::Ipv6(s)) => {
            let h = s.header();
            k.ip = true;
            k.src = h.source();
            k.dst = h.destination();
            k.proto = s.payload().ip_number.0;
        }
        _ => return k,
    }
    match &p.transport {
        Some(TransportSlice::Tcp(t)) => {
            k.sport = t.source_port();
            k.dport = t.destination_port();
        }
        Some(TransportSlice::Udp(u)) => {
            k.sport = u.source_port();
            k.dport = u.destination_port();
        }
        _ => {}
    }
    k
}

/// Decodes every packet once with `f`; returns the checksum and the elapsed nanoseconds.
fn round(packets: &Packets, f: impl Fn(&[u8]) -> Key) -> (u64, u128) {
    let t = Instant::now();
    let mut sum = 0u64;
    for frame in packets.iter() {
        sum = sum.wrapping_add(f(black_box(frame)).fold());
    }
    (black_box(sum), t.elapsed().as_nanos())
}

/// Decodes every packet once with `decode_into`, reusing one `Decoded` as a hot loop does.
fn round_into(packets: &Packets) -> (u64, u128) {
    let t = Instant::now();
    let mut sum = 0u64;
    let mut d = Decoded::new();
    for frame in packets.iter() {
        decode_into(&mut d, LinkType::ETHERNET, black_box(frame));
        sum = sum.wrapping_add(weir_fields(&d).fold());
    }
    (black_box(sum), t.elapsed().as_nanos())
}

fn median(v: &mut [u128]) -> u128 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut packets = Packets::default();
    for f in &args.files {
        let data = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let (link, n) = read_pcap(&data, &mut packets, |l| l == LinkType::ETHERNET.0)
            .with_context(|| format!("parsing {}", f.display()))?;
        if link == LinkType::ETHERNET.0 {
            println!("{}: {n} Ethernet packets", f.display());
        } else {
            println!("{}: link type {link}, not Ethernet: skipped", f.display());
        }
    }
    let n = packets.spans.len();
    if n == 0 {
        bail!("no Ethernet packets to decode");
    }
    let bytes: usize = packets.spans.iter().map(|s| s.1).sum();
    let rounds = if args.rounds > 0 {
        args.rounds
    } else {
        (5_000_000 / n).clamp(5, 2001)
    };

    // correctness first: where do the two disagree?
    let (mut same, mut weir_only_ip, mut tunnels, mut differ) = (0usize, 0usize, 0usize, 0usize);
    let mut example = None;
    for frame in packets.iter() {
        let (w, e) = (weir_key(frame), etherparse_key(frame));
        if w == e {
            same += 1;
        } else if w.ip && !e.ip {
            weir_only_ip += 1;
        } else if weir_outer_key(frame) == e {
            tunnels += 1;
        } else {
            differ += 1;
            example.get_or_insert((w, e));
        }
    }

    let mut tw = Vec::with_capacity(rounds);
    let mut tv = Vec::with_capacity(rounds);
    let mut te = Vec::with_capacity(rounds);
    let (mut sum_w, mut sum_v, mut sum_e) = (0, 0, 0);
    for _ in 0..rounds {
        let (s, t) = round_into(&packets);
        sum_w = s;
        tw.push(t);
        let (s, t) = round(&packets, weir_key);
        sum_v = s;
        tv.push(t);
        let (s, t) = round(&packets, etherparse_key);
        sum_e = s;
        te.push(t);
    }
    if sum_w != sum_v {
        bail!("decode and decode_into disagree");
    }
    let ns_w = median(&mut tw) as f64 / n as f64;
    let ns_v = median(&mut tv) as f64 / n as f64;
    let ns_e = median(&mut te) as f64 / n as f64;
    println!(
        "{n} packets, {:.1} MB, {rounds} rounds per decoder (median round shown)",
        bytes as f64 / 1e6
    );
    println!(
        "  weir-decode (decode_into)    {ns_w:8.1} ns/packet  {:7.2} Mpps",
        1e3 / ns_w
    );
    println!(
        "  weir-decode (decode)         {ns_v:8.1} ns/packet  {:7.2} Mpps",
        1e3 / ns_v
    );
    println!(
        "  etherparse LaxSlicedPacket   {ns_e:8.1} ns/packet  {:7.2} Mpps",
        1e3 / ns_e
    );
    println!(
        "  ratio etherparse / weir      {:8.2}x (decode_into), {:.2}x (decode)",
        ns_e / ns_w,
        ns_e / ns_v
    );
    println!(
        "  same fields on {same} packets ({:.2} %); IP found by weir only on {weir_only_ip} \
         (MPLS, PPPoE, SNAP... that etherparse does not follow); tunnels on {tunnels} (weir \
         reports the inner header, its outer one agrees); real differences on {differ}",
        100.0 * same as f64 / n as f64
    );
    if let Some((w, e)) = example {
        println!("  first real difference: weir {w:?}\n                         etherparse {e:?}");
    }
    if sum_w == sum_e && same != n {
        println!("  (checksums equal by chance)");
    }
    Ok(())
}
