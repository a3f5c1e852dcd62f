//! The live pipeline shared by `weir record` and `weir flows -i`: capture threads (one per ring,
//! pinned, several per interface in a fanout group) copy packets into the one shared packet
//! buffer; consumers (the recorder, the flow meter) read it through their own cursors. Also the
//! statistics every stage keeps (kernel, capture, buffer), summed for the status line, the
//! `--stats-json` file and the final summary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context, Result};
use weir_buffer::PacketBuffer;
use weir_capture::feed::{self, Feed, FeedCounters};
use weir_capture::netstats::PreRing;
use weir_capture::{FanoutMode, RingConfig, RxRing, TimestampSource};
use weir_decode::SliceLevel;
use weir_filter::Filter;
use weir_packet::LinkType;
use weir_pcap::Interface;

use super::capture::{link_type, Fanout};
use crate::args;

/// Layers `--slice` keeps.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slice {
    /// Link headers only.
    L2,
    /// Up to the IP header.
    L3,
    /// Up to the transport header.
    L4,
}

/// Capture options common to the live commands.
#[derive(clap::Args, Debug, Clone)]
pub struct LiveArgs {
    /// Interfaces to capture on, comma-separated (`-i eth0,eth1`).
    #[arg(short = 'i', long = "interface", value_delimiter = ',')]
    pub interfaces: Vec<String>,
    /// Capture threads per interface (joined in one fanout group), 1 to 256.
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256),
          allow_negative_numbers = true)]
    pub threads: usize,
    /// How the fanout group spreads packets over threads.
    #[arg(long, value_enum, default_value_t = Fanout::Hash)]
    pub fanout: Fanout,
    /// Do not put the interfaces in promiscuous mode.
    #[arg(long)]
    pub no_promisc: bool,
    /// Keep at most this many bytes of each packet (the original length is recorded); 0 is the
    /// whole packet (262144), as in tcpdump.
    #[arg(short = 's', long, default_value_t = args::MAX_SNAPLEN, value_parser = args::snaplen,
          allow_negative_numbers = true)]
    pub snaplen: u32,
    /// Keep only the headers up to this layer (the original length is recorded).
    #[arg(long, value_enum)]
    pub slice: Option<Slice>,
    /// Do not ask the NIC for hardware timestamps.
    #[arg(long)]
    pub no_hw_timestamps: bool,
    /// Ring block size in bytes (a power of two from 4096 to 1 GiB).
    #[arg(long, default_value_t = 1 << 20, value_parser = args::block_size,
          allow_negative_numbers = true)]
    pub block_size: u32,
    /// Ring blocks per thread (1 to 1048576; at most 16 GiB of ring per thread).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1 << 20),
          allow_negative_numbers = true)]
    pub block_count: u32,
    /// Shared packet buffer size in MiB, a power of two up to 65536 (default: 512 for `record`,
    /// 64 for `capture` and `flows`).
    #[arg(long, value_name = "MIB", value_parser = args::buffer_mib,
          allow_negative_numbers = true)]
    pub buffer_mib: Option<usize>,
    /// Stop after this many seconds (up to 10⁹).
    #[arg(long, value_name = "SECONDS", value_parser = args::seconds,
          allow_negative_numbers = true)]
    pub duration: Option<f64>,
}

impl LiveArgs {
    /// Usage checks clap cannot express: each interface once, a ring that the kernel can map.
    pub fn check(&self) -> Result<(), String> {
        for (k, i) in self.interfaces.iter().enumerate() {
            if i.is_empty() {
                return Err("-i: empty interface name".into());
            }
            if self.interfaces[..k].contains(i) {
                return Err(format!(
                    "interface {i} given twice: every packet would be captured twice"
                ));
            }
        }
        let ring = u64::from(self.block_size) * u64::from(self.block_count);
        if ring > args::MAX_RING_BYTES {
            return Err(format!(
                "--block-size {} × --block-count {} is {ring} bytes of ring per thread; the \
                 most is {} (16 GiB)",
                self.block_size,
                self.block_count,
                args::MAX_RING_BYTES
            ));
        }
        Ok(())
    }
}

/// Every stage's counters, summed over threads.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Totals {
    /// Packets the kernel queued to the rings (dropped ones included).
    pub kernel_packets: u64,
    /// Packets the kernel dropped (ring full).
    pub kernel_drops: u64,
    /// Packets read from the rings.
    pub received: u64,
    /// Packets the user-space filter rejected.
    pub filtered: u64,
    /// Packets copied into the buffer.
    pub pushed: u64,
    /// Their captured bytes.
    pub pushed_bytes: u64,
    /// Their bytes on the wire.
    pub wire_bytes: u64,
    /// Packets dropped: buffer full.
    pub buffer_full: u64,
    /// Packets dropped: longer than the buffer accepts.
    pub too_long: u64,
    /// Lost before the rings, since capture started: the interfaces' `rx_dropped`. It includes
    /// the backlog drops of packets bound for the interface (also in `softnet_dropped`) and, on
    /// some kernels and drivers, frames the stack discarded after the ring saw them (VLAN-tagged
    /// frames for which no VLAN device exists).
    pub if_rx_dropped: u64,
    /// The interfaces' `rx_missed_errors` (no room in the NIC).
    pub if_rx_missed: u64,
    /// The interfaces' `rx_fifo_errors` (NIC receive FIFO overflow).
    pub if_rx_fifo: u64,
    /// Packets the kernel dropped because a CPU's backlog queue was full
    /// (`/proc/net/softnet_stat`, all CPUs; machine-wide, not only the captured interfaces).
    pub softnet_dropped: u64,
}

impl Totals {
    /// What the interfaces say they dropped before the rings (rx_dropped + missed + fifo).
    pub fn interface_drops(&self) -> u64 {
        self.if_rx_dropped + self.if_rx_missed + self.if_rx_fifo
    }

    /// The drops before the rings in words, for status lines and summaries.
    pub fn before_ring_text(&self) -> String {
        format!(
            "interface {} (rx_dropped {}, missed {}, fifo {}), backlog (softnet, all \
             interfaces) {}",
            self.interface_drops(),
            self.if_rx_dropped,
            self.if_rx_missed,
            self.if_rx_fifo,
            self.softnet_dropped
        )
    }
}

/// A running capture into a packet buffer.
pub struct Live {
    /// The shared buffer.
    pub buffer: PacketBuffer,
    /// The interfaces, in interface-id order.
    pub interfaces: Vec<Interface>,
    counters: Vec<Arc<FeedCounters>>,
    baseline: Arc<Vec<(String, PreRing)>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<()>>>,
}

/// The counters of a set of capture threads, shareable with other threads, with the
/// interfaces' drop counters as they were when capture started.
#[derive(Clone)]
pub struct Counters(Vec<Arc<FeedCounters>>, Arc<Vec<(String, PreRing)>>);

impl Counters {
    /// The sums (the interfaces' and backlog's drops since capture started read now).
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        let mut pre = PreRing::default();
        for (i, (iface, start)) in self.1.iter().enumerate() {
            let d = PreRing::read(iface).since(start);
            pre.add_interface(&d);
            if i == 0 {
                pre.softnet = d.softnet;
            }
        }
        t.if_rx_dropped = pre.rx_dropped;
        t.if_rx_missed = pre.rx_missed;
        t.if_rx_fifo = pre.rx_fifo;
        t.softnet_dropped = pre.softnet;
        for c in &self.0 {
            let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            t.kernel_packets += l(&c.kernel_packets);
            t.kernel_drops += l(&c.kernel_drops);
            t.received += l(&c.received);
            t.filtered += l(&c.filtered);
            t.pushed += l(&c.pushed);
            t.pushed_bytes += l(&c.pushed_bytes);
            t.wire_bytes += l(&c.wire_bytes);
            t.buffer_full += l(&c.buffer_full);
            t.too_long += l(&c.too_long);
        }
        t
    }
}

impl Live {
    /// Opens every ring (filter attached before any packet is queued) and starts the capture
    /// threads. `readers` registered and `best_effort` readers are made in the buffer.
    pub fn start(
        args: &LiveArgs,
        expr: &str,
        readers: usize,
        best_effort: usize,
        banner: &str,
        default_buffer_mib: usize,
    ) -> Result<Live> {
        let buffer_mib = args.buffer_mib.unwrap_or(default_buffer_mib);
        if args.interfaces.is_empty() {
            bail!("give at least one interface with -i");
        }
        if args.threads == 0 {
            bail!("--threads must be at least 1");
        }
        let size = buffer_mib
            .checked_mul(1 << 20)
            .filter(|s| s.is_power_of_two())
            .with_context(|| format!("--buffer-mib {buffer_mib} must be a power of two"))?;
        let links: Vec<LinkType> = args
            .interfaces
            .iter()
            .map(|i| link_type(i))
            .collect::<Result<_>>()?;
        for iface in &args.interfaces {
            weir_capture::check_up(iface)?;
        }
        let rings_total = args.interfaces.len() * args.threads;
        let buffer = weir_buffer::Config::new(size)
            .readers(readers)
            .best_effort_readers(best_effort)
            .max_writers(rings_total)
            .max_caplen(args.snaplen.clamp(64, 262_144) as usize + 4)
            .prefault_mode(weir_buffer::Prefault::Background)
            .build()
            .context("cannot create the packet buffer")?;
        if buffer.page_kind() != weir_buffer::PageKind::HugeTlb {
            eprintln!(
                "weir: packet buffer of {} MiB on {} (no huge pages reserved: \
                 echo N > /proc/sys/vm/nr_hugepages to use them)",
                buffer_mib,
                buffer.page_kind().name()
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let baseline = Arc::new(
            args.interfaces
                .iter()
                .map(|i| (i.clone(), PreRing::read(i)))
                .collect::<Vec<_>>(),
        );
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut rings = Vec::new();
        for (n, (iface, link)) in args.interfaces.iter().zip(&links).enumerate() {
            let filter = Filter::compile(expr, *link, args.snaplen)
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
                let feed = Feed {
                    iface: n as u32,
                    link: *link,
                    user_filter: user_filter.clone(),
                    slice: args.slice.map(|s| match s {
                        Slice::L2 => SliceLevel::L2,
                        Slice::L3 => SliceLevel::L3,
                        Slice::L4 => SliceLevel::L4,
                    }),
                    max_caplen: buffer.max_caplen(),
                };
                rings.push((ring, feed));
            }
            let ts = match rings.last().map(|r| r.0.timestamp_source()) {
                Some(TimestampSource::Hardware) => "hardware timestamps".to_string(),
                _ if args.no_hw_timestamps => "software timestamps".to_string(),
                _ => format!("software timestamps ({iface} offers no hardware timestamps)"),
            };
            eprintln!(
                "weir: {banner} on {iface} ({link}), {} thread(s){}, {ts}",
                args.threads,
                if args.threads > 1 {
                    format!(", {:?} fanout", args.fanout).to_lowercase()
                } else {
                    String::new()
                }
            );
        }
        let mut counters = Vec::new();
        let mut threads = Vec::new();
        for (k, (mut ring, feed)) in rings.into_iter().enumerate() {
            let c = Arc::new(FeedCounters::default());
            counters.push(c.clone());
            let mut writer = buffer.writer()?;
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                feed::pin_to_cpu(k % cpus);
                feed::run(&mut ring, &mut writer, &feed, &c, &stop)
                    .with_context(|| format!("capture on {}", ring.interface()))
            }));
        }
        let interfaces = args
            .interfaces
            .iter()
            .zip(&links)
            .map(|(name, link)| Interface {
                name: Some(name.clone()),
                ..Interface::new(*link, args.snaplen)
            })
            .collect();
        Ok(Live {
            buffer,
            interfaces,
            counters,
            baseline,
            stop,
            threads,
        })
    }

    /// The capture threads' counters.
    pub fn counters(&self) -> Counters {
        Counters(self.counters.clone(), self.baseline.clone())
    }

    /// Whether a capture thread ended on an error.
    pub fn failed(&self) -> bool {
        self.threads.iter().any(|t| t.is_finished())
    }

    /// Stops the capture threads and waits for them; after this nothing more enters the buffer.
    pub fn stop(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let mut first = Ok(());
        for t in self.threads.drain(..) {
            let r = t.join().expect("a capture thread panicked");
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

/// The closing lines every live command prints: what was lost before the rings, then what the
/// kernel queued and dropped at the rings, what the capture threads read (so that kernel
/// received = read + dropped) and what the buffer refused.
pub fn summary_lines(t: &Totals, b: &weir_buffer::Stats) -> String {
    format!(
        "  before the ring: {}\n  kernel: {} received, {} dropped; capture: {} read, {} filtered \
         out; buffer: {} dropped (full), {} dropped (too long)",
        t.before_ring_text(),
        t.kernel_packets,
        t.kernel_drops,
        t.received,
        t.filtered,
        b.dropped_full,
        b.dropped_oversize
    )
}

/// Installs the SIGINT/SIGTERM handler that sets `flag`.
pub fn on_signal(flag: Arc<AtomicBool>) -> Result<()> {
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("cannot install the SIGINT/SIGTERM handler")
}

/// Human bytes: `1.5 GiB`.
pub fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}
