//! `weir capture`: live capture to a file or the terminal, like `tcpdump -i IFACE -w OUT EXPR`,
//! with several threads per interface joined in a fanout group and several interfaces at once.
//!
//! Each (interface, thread) pair owns a TPACKET_V3 ring and copies each block's packets into one
//! batch (one allocation per block, VLAN tags stripped by the NIC put back) for the writer thread.
//! When the writer falls behind, whole batches are dropped and counted ("writer" drops), so capture
//! threads never block. Batches from different threads are written in the order they arrive, so
//! timestamps can step back between batches of different threads. `weir record` (with the shared
//! packet buffer and disk-speed writer) is the tool for sustained high rates.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use weir_capture::{FanoutMode, RingConfig, RxRing, TimestampSource};
use weir_filter::Filter;
use weir_packet::{LinkType, PacketMeta};
use weir_source::{Interface, Packet};
use weir_store::{InterfaceSpec, OutputFormat, PacketWriter};

use super::decode::LinePrinter;
use super::input::Visitor;
use super::read::Format;
use crate::output::{self, Status};

/// Fanout mode on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fanout {
    /// By flow hash (both directions of a flow on one thread).
    Hash,
    /// Round robin.
    Lb,
    /// By receiving CPU.
    Cpu,
}

/// Arguments of `weir capture`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Interfaces to capture on, comma-separated (`-i eth0,eth1`).
    #[arg(
        short = 'i',
        long = "interface",
        value_delimiter = ',',
        required = true
    )]
    interfaces: Vec<String>,
    /// Write packets to this file (`-` for stdout) instead of printing them.
    #[arg(short = 'w', long = "write", value_name = "OUT")]
    output: Option<PathBuf>,
    /// Output format (pcapng records which interface each packet came from).
    #[arg(long, value_enum, default_value_t = Format::Pcapng)]
    format: Format,
    /// Classic pcap with microsecond timestamps.
    #[arg(long)]
    micro: bool,
    /// Stop after this many packets.
    #[arg(short = 'c', long = "count", value_name = "N")]
    count: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Capture threads per interface (joined in one fanout group).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// How the fanout group spreads packets over threads.
    #[arg(long, value_enum, default_value_t = Fanout::Hash)]
    fanout: Fanout,
    /// Do not put the interfaces in promiscuous mode.
    #[arg(long)]
    no_promisc: bool,
    /// Keep at most this many bytes of each packet (the original length is recorded).
    #[arg(short = 's', long, default_value_t = 262_144)]
    snaplen: u32,
    /// Do not ask the NIC for hardware timestamps.
    #[arg(long)]
    no_hw_timestamps: bool,
    /// Ring block size in bytes (a power of two).
    #[arg(long, default_value_t = 1 << 20)]
    block_size: u32,
    /// Ring blocks per thread.
    #[arg(long, default_value_t = 64)]
    block_count: u32,
    /// BPF filter expression in tcpdump syntax, run in the kernel.
    #[arg(
        value_name = "EXPR",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    expr: Vec<String>,
}

/// The link type of a Linux interface, from its ARPHRD type in sysfs.
pub fn link_type(iface: &str) -> Result<LinkType> {
    let path = format!("/sys/class/net/{iface}/type");
    let t: u32 = std::fs::read_to_string(&path)
        .with_context(|| format!("no such interface: {iface}"))?
        .trim()
        .parse()
        .with_context(|| format!("cannot parse {path}"))?;
    Ok(match t {
        1 | 772 => LinkType::ETHERNET, // ARPHRD_ETHER, ARPHRD_LOOPBACK
        65534 => LinkType::RAW,        // ARPHRD_NONE (tun, wireguard)
        other => bail!("{iface}: ARPHRD type {other} is not supported for capture yet"),
    })
}

/// Packets copied out of one ring block.
struct Batch {
    iface: u32,
    /// (ts_ns, orig_len, start, len) into `bytes`.
    packets: Vec<(u64, u32, u32, u32)>,
    bytes: Vec<u8>,
}

/// Counters shared by the capture threads.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    writer_drops: AtomicU64,
}

/// Runs `weir capture`.
pub fn run(args: Args) -> Result<Status> {
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    let expr = args.expr.join(" ");
    let links: Vec<LinkType> = args
        .interfaces
        .iter()
        .map(|i| link_type(i))
        .collect::<Result<_>>()?;
    let shared = Arc::new(Shared::default());
    {
        let s = shared.clone();
        ctrlc::set_handler(move || s.stop.store(true, Ordering::Relaxed))
            .context("cannot install the SIGINT/SIGTERM handler")?;
    }
    let (tx, rx) = crossbeam_channel::bounded::<Batch>(1024);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut rings = Vec::new();
    for (n, (iface, link)) in args.interfaces.iter().zip(&links).enumerate() {
        let filter = Filter::compile(&expr, *link, args.snaplen)
            .with_context(|| format!("invalid filter expression for {iface}"))?;
        // Programs that jump backwards (protochain) are refused by the kernel: run them here.
        let user_filter = filter.has_backward_jumps().then(|| filter.clone());
        let kernel_filter = if user_filter.is_some() {
            Filter::match_all(args.snaplen)
        } else {
            filter
        };
        let group = ((std::process::id() as u16) ^ 0x5a5a).wrapping_add(n as u16);
        let mode = match args.fanout {
            Fanout::Hash => FanoutMode::Hash,
            Fanout::Lb => FanoutMode::LoadBalance,
            Fanout::Cpu => FanoutMode::Cpu,
        };
        for _ in 0..args.threads {
            let ring = RxRing::open(
                iface,
                RingConfig {
                    block_size: args.block_size,
                    block_count: args.block_count,
                    ..RingConfig::default()
                },
                Some(&kernel_filter),
                !args.no_promisc,
                (args.threads > 1).then_some((group, mode)),
                !args.no_hw_timestamps,
            )?;
            rings.push((n as u32, ring, user_filter.clone()));
        }
        let ts = match rings.last().map(|r| r.1.timestamp_source()) {
            Some(TimestampSource::Hardware) => "hardware timestamps".to_string(),
            _ if args.no_hw_timestamps => "software timestamps".to_string(),
            _ => format!("software timestamps ({iface} offers no hardware timestamps)"),
        };
        eprintln!(
            "weir: capturing on {iface} ({link}), {} thread(s){}, {ts}",
            args.threads,
            if args.threads > 1 {
                format!(", {:?} fanout", args.fanout).to_lowercase()
            } else {
                String::new()
            }
        );
    }
    let started = Instant::now();
    let deadline = args.duration.map(|s| started + Duration::from_secs_f64(s));
    let mut handles = Vec::new();
    for (k, (iface, mut ring, user_filter)) in rings.into_iter().enumerate() {
        let tx = tx.clone();
        let shared = shared.clone();
        handles.push(std::thread::spawn(move || {
            pin_to_cpu(k % cpus);
            capture_loop(
                iface,
                &mut ring,
                user_filter.as_ref(),
                &tx,
                &shared,
                deadline,
            );
            (ring.interface().to_string(), ring.kernel_stats())
        }));
    }
    drop(tx);
    let interfaces: Vec<Interface> = args
        .interfaces
        .iter()
        .zip(&links)
        .map(|(name, link)| Interface {
            link: *link,
            snaplen: args.snaplen,
            name: Some(name.clone()),
            description: None,
            ts_resolution: "ns".into(),
            fcs_len: 0,
            swapped: false,
        })
        .collect();
    let written = write_batches(&args, &interfaces, &rx, &shared)?;
    shared.stop.store(true, Ordering::Relaxed);
    let mut kernel = Vec::new();
    for h in handles {
        kernel.push(h.join().expect("a capture thread panicked"));
    }
    let writer_drops = shared.writer_drops.load(Ordering::Relaxed);
    let (mut seen, mut kdrops) = (0, 0);
    for (iface, s) in &kernel {
        seen += s.packets;
        kdrops += s.drops;
        tracing::debug!("{iface}: {s:?}");
    }
    eprintln!(
        "weir: {written} packets written in {:.1} s; kernel: {seen} received, {kdrops} dropped; writer: {writer_drops} dropped",
        started.elapsed().as_secs_f64()
    );
    Ok(Status::Clean)
}

/// Pins the calling thread to one CPU; a failure only costs locality.
fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain old data; CPU_ZERO/CPU_SET only write inside it, and
    // sched_setaffinity reads exactly size_of::<cpu_set_t>() bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn capture_loop(
    iface: u32,
    ring: &mut RxRing,
    user_filter: Option<&Filter>,
    tx: &crossbeam_channel::Sender<Batch>,
    shared: &Shared,
    deadline: Option<Instant>,
) {
    while !shared.stop.load(Ordering::Relaxed) {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            shared.stop.store(true, Ordering::Relaxed);
            break;
        }
        let block = match ring.next_block(100) {
            Ok(Some(b)) => b,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("weir: error: {e}");
                shared.stop.store(true, Ordering::Relaxed);
                break;
            }
        };
        let mut batch = Batch {
            iface,
            packets: Vec::with_capacity(block.len()),
            bytes: Vec::with_capacity(block.len() * 128),
        };
        for p in block.packets() {
            let start = batch.bytes.len();
            let mut orig_len = p.orig_len;
            match p.vlan {
                // Put back the tag the NIC stripped, after the two MAC addresses.
                Some((tpid, tci)) if p.data.len() >= 12 => {
                    batch.bytes.extend_from_slice(&p.data[..12]);
                    batch.bytes.extend_from_slice(&tpid.to_be_bytes());
                    batch.bytes.extend_from_slice(&tci.to_be_bytes());
                    batch.bytes.extend_from_slice(&p.data[12..]);
                    orig_len += 4;
                }
                _ => batch.bytes.extend_from_slice(p.data),
            }
            let data = &batch.bytes[start..];
            if user_filter.is_some_and(|f| !f.matches(data, orig_len)) {
                batch.bytes.truncate(start);
                continue;
            }
            let len = (batch.bytes.len() - start) as u32;
            batch.packets.push((p.ts_ns, orig_len, start as u32, len));
        }
        drop(block);
        if batch.packets.is_empty() {
            continue;
        }
        let n = batch.packets.len() as u64;
        if tx.try_send(batch).is_err() {
            shared.writer_drops.fetch_add(n, Ordering::Relaxed);
        }
    }
}

fn write_batches(
    args: &Args,
    interfaces: &[Interface],
    rx: &crossbeam_channel::Receiver<Batch>,
    shared: &Shared,
) -> Result<u64> {
    let mut written = 0u64;
    let limit = args.count.unwrap_or(u64::MAX);
    let mut printer;
    let mut writer = None;
    if let Some(path) = &args.output {
        let format = args.format.output(args.micro);
        if matches!(format, OutputFormat::Pcap(_))
            && interfaces.iter().any(|i| i.link != interfaces[0].link)
        {
            bail!("classic pcap holds one link type; use --format pcapng");
        }
        let specs: Vec<InterfaceSpec> = interfaces
            .iter()
            .map(|i| InterfaceSpec {
                link: i.link,
                snaplen: i.snaplen,
                name: i.name.clone(),
            })
            .collect();
        writer = Some(PacketWriter::new(output::create(path)?, format, &specs)?);
        printer = None;
    } else {
        printer = Some(LinePrinter::stdout(None));
    }
    'outer: while let Ok(batch) = rx.recv() {
        for &(ts_ns, orig_len, start, len) in &batch.packets {
            let data = &batch.bytes[start as usize..(start + len) as usize];
            let meta = PacketMeta {
                ts_ns,
                orig_len,
                interface: match &writer {
                    Some(PacketWriter::Pcap(_)) => 0,
                    _ => batch.iface,
                },
            };
            if let Some(w) = &mut writer {
                w.write(&meta, data)?;
            } else if let Some(p) = &mut printer {
                let packet = Packet {
                    meta: PacketMeta {
                        interface: batch.iface,
                        ..meta
                    },
                    link: interfaces[batch.iface as usize].link,
                    data,
                    record_offset: 0,
                };
                p.packet(interfaces, &packet)?;
            }
            written += 1;
            if written >= limit {
                shared.stop.store(true, Ordering::Relaxed);
                break 'outer;
            }
        }
    }
    if let Some(w) = writer {
        w.finish()?.flush()?;
    }
    if let Some(p) = printer {
        p.finish()?;
    }
    Ok(written)
}
