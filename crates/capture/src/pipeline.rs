//! The live pipeline: capture threads (one per ring, pinned, several per interface in a fanout
//! group) copy packets into one shared packet buffer ([`weir_buffer`]); consumers (a file
//! writer, the recorder, the flow meter) read it through their own cursors. [`Pipeline::start`]
//! sizes the buffer, splits the filter between the kernel and user space, opens every ring
//! (filter attached before any packet is queued) and starts the threads; [`Pipeline::stop`]
//! stops the rings' intake, drains what they hold into the buffer and joins the threads.
//!
//! Every stage's counters (interface, backlog, kernel, capture threads) are read together as
//! one [`Totals`], through a [`Counters`] handle other threads can keep.

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use weir_buffer::{PacketBuffer, PageKind, Prefault};
use weir_decode::SliceLevel;
use weir_filter::Filter;
use weir_packet::LinkType;
use weir_pcap::Interface;

use crate::feed::{self, Feed, FeedCounters, FeedTotals};
use crate::kernel_rules::{self, Base, KernelRules, Watcher};
use crate::netstats::PreRing;
use crate::xdp::XdpStats;
use crate::{link_type, CaptureError, FanoutMode, RingConfig, RxRing, TimestampSource};

/// What to capture and how.
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// Interfaces, in interface-id order (at least one, each once).
    pub interfaces: Vec<String>,
    /// Capture threads (rings) per interface; more than one join a fanout group.
    pub threads: usize,
    /// How a fanout group spreads packets over its threads.
    pub fanout: FanoutMode,
    /// Put the interfaces in promiscuous mode.
    pub promiscuous: bool,
    /// Bytes kept of each packet (the original length is recorded).
    pub snaplen: u32,
    /// Keep only the headers up to this layer.
    pub slice: Option<SliceLevel>,
    /// Ask the NICs for hardware timestamps.
    pub hw_timestamps: bool,
    /// Size of each ring.
    pub ring: RingConfig,
    /// The filter expression (libpcap syntax; empty: every packet).
    pub filter: String,
    /// Size of the shared packet buffer in bytes, a power of two.
    pub buffer_bytes: usize,
    /// Registered readers of the buffer (capture drops rather than overwrite what they have not
    /// read).
    pub readers: usize,
    /// Best-effort readers of the buffer (skipped forward when they fall behind).
    pub best_effort_readers: usize,
    /// The rule engine, applied after the filter by every capture thread (its own evaluator).
    pub rules: Option<Rules>,
    /// With rules: also reject the drop rules that fit a socket filter in the kernel (see
    /// [`kernel_rules`](crate::kernel_rules)), kept up to date as the rules change.
    pub kernel_rules: bool,
    /// How packets come from the kernel: AF_PACKET rings (default) or AF_XDP sockets.
    pub backend: Backend,
}

/// The receive backend of a live pipeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// AF_PACKET TPACKET_V3 rings ([`RxRing`]), with the kernel filter and fanout.
    #[default]
    Packet,
    /// AF_XDP sockets, one per RX queue, fed by weir's XDP program ([`xdp`](crate::xdp)): the
    /// filter runs in user space, timestamps are taken at receive, `threads` and `fanout` do
    /// not apply (one thread per RX queue).
    Xdp,
}

/// The rule engine of a pipeline, and what to do with tags.
#[derive(Clone)]
pub struct Rules {
    /// The engine, compiled for the interfaces' link type (all interfaces must share it).
    pub engine: weir_rules::Engine,
    /// Store each tag as its record's pcapng comment (`weir-tag=TAG`); when false (the
    /// consumer writes classic pcap, which has no place for them) tags are only counted.
    pub store_tags: bool,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("version", &self.engine.version())
            .field("store_tags", &self.store_tags)
            .finish()
    }
}

impl PipelineConfig {
    /// A configuration with weir's defaults (one thread per interface, hash fanout,
    /// promiscuous, whole packets, hardware timestamps when offered, 64 × 1 MiB rings, 64 MiB
    /// of buffer with one registered reader), capturing everything on `interfaces`.
    pub fn new(interfaces: Vec<String>) -> PipelineConfig {
        PipelineConfig {
            interfaces,
            threads: 1,
            fanout: FanoutMode::Hash,
            promiscuous: true,
            snaplen: 262_144,
            slice: None,
            hw_timestamps: true,
            ring: RingConfig::default(),
            filter: String::new(),
            buffer_bytes: 64 << 20,
            readers: 1,
            best_effort_readers: 0,
            rules: None,
            kernel_rules: true,
            backend: Backend::Packet,
        }
    }
}

/// Fanout group ids handed out in this process so far: two pipelines of one process must not
/// join each other's groups.
static GROUPS_TAKEN: AtomicU16 = AtomicU16::new(0);

/// A running capture into a packet buffer.
pub struct Pipeline {
    buffer: PacketBuffer,
    interfaces: Vec<Interface>,
    timestamps: Vec<TimestampSource>,
    counters: Counters,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<(), CaptureError>>>,
    watcher: Option<Watcher>,
    xdp: Box<XdpHeld>,
}

/// What an AF_XDP pipeline holds while it runs (empty for AF_PACKET).
#[derive(Default)]
struct XdpHeld {
    /// The programs attached (detached at stop or when dropped), with the drop rules' status.
    state: Option<Arc<Mutex<crate::xdp_rules::State>>>,
    /// With kernel rules: the thread that replaces the program when they change.
    watcher: Option<crate::xdp_rules::Watcher>,
    /// The sockets that keep the interfaces promiscuous.
    promisc: Vec<crate::PacketSocket>,
    /// The start-up lines ([`Pipeline::backend_notes`]).
    notes: Vec<String>,
}

/// One capture thread's source of packets.
enum Source {
    Ring(RxRing),
    Xdp(crate::xdp::XskSocket, Arc<crate::xdp::XdpCounters>),
}

impl Pipeline {
    /// Makes the buffer, opens every ring and starts the capture threads.
    pub fn start(cfg: &PipelineConfig) -> Result<Pipeline, CaptureError> {
        if cfg.interfaces.is_empty() || cfg.threads == 0 {
            return Err(CaptureError::BadRing(
                "a pipeline needs at least one interface and one thread per interface".into(),
            ));
        }
        let links: Vec<LinkType> = cfg
            .interfaces
            .iter()
            .map(|i| link_type(i))
            .collect::<Result<_, _>>()?;
        if cfg.rules.is_some() && links.iter().any(|l| *l != links[0]) {
            return Err(CaptureError::BadRing(
                "rules need interfaces of one link type (run one capture per link type)".into(),
            ));
        }
        for iface in &cfg.interfaces {
            crate::check_up(iface)?;
        }
        let xdp = cfg.backend == Backend::Xdp;
        let queues: Vec<usize> = if xdp {
            if cfg.threads > 1 {
                return Err(CaptureError::BadRing(
                    "--threads does not apply to the AF_XDP backend: it runs one thread per RX \
                     queue of each interface"
                        .into(),
                ));
            }
            for iface in &cfg.interfaces {
                crate::xdp::check_interface(iface)?;
            }
            cfg.interfaces
                .iter()
                .map(|i| crate::xdp::rx_queues(i) as usize)
                .collect()
        } else {
            vec![cfg.threads; cfg.interfaces.len()]
        };
        let rings_total: usize = queues.iter().sum();
        let buffer = weir_buffer::Config::new(cfg.buffer_bytes)
            .readers(cfg.readers)
            .best_effort_readers(cfg.best_effort_readers)
            .max_writers(rings_total)
            .max_caplen(cfg.snaplen.clamp(64, 262_144) as usize + 4)
            .prefault_mode(Prefault::Background)
            .build()
            .map_err(CaptureError::Buffer)?;
        let baseline = Arc::new(
            cfg.interfaces
                .iter()
                .map(|i| (i.clone(), PreRing::read(i)))
                .collect::<Vec<_>>(),
        );
        let first_group = GROUPS_TAKEN.fetch_add(cfg.interfaces.len() as u16, Ordering::Relaxed);
        let mut rings = Vec::with_capacity(rings_total);
        let mut timestamps = Vec::with_capacity(cfg.interfaces.len());
        let mut kernel = None;
        let mut attached = Vec::new();
        let mut xdp_drops: Option<(
            crate::xdp_rules::Base,
            Option<Vec<weir_filter::Insn>>,
            KernelRules,
        )> = None;
        let mut promisc = Vec::new();
        let mut notes = Vec::new();
        for (n, (iface, link)) in cfg.interfaces.iter().zip(&links).enumerate() {
            let filter = Filter::compile(&cfg.filter, *link, cfg.snaplen).map_err(|source| {
                CaptureError::Expression {
                    iface: iface.clone(),
                    source,
                }
            })?;
            if xdp {
                // AF_XDP has no socket filter: the whole filter runs in user space.
                let user_filter = (!filter.is_match_all()).then(|| filter.clone());
                let feed = Feed {
                    iface: n as u32,
                    link: *link,
                    user_filter: user_filter.clone(),
                    slice: cfg.slice,
                    max_caplen: buffer.max_caplen(),
                    store_tags: cfg.rules.as_ref().is_some_and(|r| r.store_tags),
                };
                let ifindex = crate::interface_index(iface)?;
                let nq = queues[n] as u32;
                // Attached before the sockets: until a queue's socket is in the map, its packets
                // pass on up the stack as before; a program someone else attached is refused
                // here, by name.
                // The rules' share of the XDP program: built once (the interfaces share a link
                // type when there are rules).
                if let (Some(r), true, None) = (&cfg.rules, cfg.kernel_rules, &xdp_drops) {
                    let base = crate::xdp_rules::Base {
                        link: *link,
                        snaplen: cfg.snaplen,
                    };
                    let (program, status) = crate::xdp_rules::build(&r.engine, &base);
                    xdp_drops = Some((base, program, status));
                }
                let drops = xdp_drops.as_ref().and_then(|d| d.1.as_deref());
                let mut att = crate::xdp::Attachment::load(iface, ifindex, nq, drops)?;
                let mode = att.attach()?;
                let frames = (u64::from(cfg.ring.block_size) * u64::from(cfg.ring.block_count)
                    / crate::xdp::FRAME_SIZE as u64)
                    .clamp(1024, 1 << 18)
                    .next_power_of_two() as u32;
                let first = rings.len();
                for q in 0..nq {
                    let sock = crate::xdp::XskSocket::open(iface, ifindex, q, frames, cfg.snaplen)?;
                    att.insert(q, &sock)?;
                    let evaluator = cfg.rules.as_ref().map(|r| r.engine.evaluator());
                    rings.push((Source::Xdp(sock, Arc::default()), feed.clone(), evaluator));
                }
                if cfg.promiscuous {
                    let p = crate::PacketSocket::open(iface)?;
                    p.promiscuous()?;
                    promisc.push(p);
                }
                let socks: Vec<&crate::xdp::XskSocket> = rings[first..]
                    .iter()
                    .filter_map(|r| match &r.0 {
                        Source::Xdp(s, _) => Some(s),
                        Source::Ring(_) => None,
                    })
                    .collect();
                notes.push(crate::xdp::describe(
                    iface,
                    &socks,
                    mode,
                    user_filter.is_some(),
                ));
                attached.push(att);
                timestamps.push(TimestampSource::Receive);
                continue;
            }
            // Programs that jump backwards (protochain) are refused by the kernel: run them here.
            let user_filter = filter.has_backward_jumps().then(|| filter.clone());
            let kernel_filter = if user_filter.is_some() {
                Filter::match_all(cfg.snaplen)
            } else {
                filter
            };
            // The rules' share of the kernel filter: built once (the interfaces share a link
            // type when there are rules), before any ring is bound.
            if let (Some(r), true, None) = (&cfg.rules, cfg.kernel_rules, &kernel) {
                let base = Base {
                    expr: (user_filter.is_none() && !kernel_filter.is_match_all())
                        .then(|| cfg.filter.clone()),
                    program: kernel_filter.clone(),
                    link: *link,
                    snaplen: cfg.snaplen,
                };
                // A socket that receives nothing, to try the program on before any ring.
                let probe = crate::PacketSocket::open(iface)?;
                let (programs, status) = kernel_rules::build(&r.engine, &base, Some(&probe));
                kernel = Some((base, programs, status));
            }
            let program = match &kernel {
                Some((_, Some(p), _)) => &p.ring[..],
                _ => kernel_filter.instructions(),
            };
            let group = ((std::process::id() as u16) ^ 0x5a5a)
                .wrapping_add(first_group)
                .wrapping_add(n as u16);
            for _ in 0..cfg.threads {
                let ring = RxRing::open_program(
                    iface,
                    cfg.ring,
                    Some(program),
                    cfg.promiscuous,
                    (cfg.threads > 1).then_some((group, cfg.fanout)),
                    cfg.hw_timestamps,
                )?;
                let feed = Feed {
                    iface: n as u32,
                    link: *link,
                    user_filter: user_filter.clone(),
                    slice: cfg.slice,
                    max_caplen: buffer.max_caplen(),
                    store_tags: cfg.rules.as_ref().is_some_and(|r| r.store_tags),
                };
                let evaluator = cfg.rules.as_ref().map(|r| r.engine.evaluator());
                timestamps.push(ring.timestamp_source());
                rings.push((Source::Ring(ring), feed, evaluator));
            }
            timestamps.truncate(n + 1);
        }
        let watcher = match (kernel, &cfg.rules) {
            (Some((base, programs, status)), Some(r)) => {
                let socks = rings
                    .iter()
                    .filter_map(|r| match &r.0 {
                        Source::Ring(ring) => Some(ring.socket_clone()),
                        Source::Xdp(..) => None,
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some(Watcher::start(
                    r.engine.clone(),
                    base,
                    socks,
                    cfg.interfaces.clone(),
                    programs.as_ref(),
                    status,
                )?)
            }
            _ => None,
        };
        let xdp_state = xdp.then(|| {
            let (program, status) = match &xdp_drops {
                Some((_, p, st)) => (p.clone(), Some(st.clone())),
                None => (None, None),
            };
            Arc::new(Mutex::new(crate::xdp_rules::State::new(
                attached, program, status,
            )))
        });
        let xdp_watcher = match (&xdp_drops, &cfg.rules, &xdp_state) {
            (Some((base, _, _)), Some(r), Some(state)) => Some(crate::xdp_rules::Watcher::start(
                r.engine.clone(),
                base.clone(),
                state.clone(),
            )?),
            _ => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut feeds = Vec::with_capacity(rings.len());
        let mut xdp_counters = Vec::new();
        let mut threads = Vec::with_capacity(rings.len());
        for (k, (mut source, feed, mut evaluator)) in rings.into_iter().enumerate() {
            let c = Arc::new(FeedCounters::default());
            feeds.push(c.clone());
            if let Source::Xdp(_, x) = &source {
                xdp_counters.push(x.clone());
            }
            let mut writer = buffer.writer().map_err(CaptureError::BufferHandle)?;
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                feed::pin_to_cpu(k % cpus);
                match &mut source {
                    Source::Ring(ring) => {
                        feed::run(ring, &mut writer, &feed, &c, &stop, &mut evaluator).map_err(
                            |e| CaptureError::Thread {
                                iface: ring.interface().to_string(),
                                source: Box::new(e),
                            },
                        )
                    }
                    Source::Xdp(sock, x) => {
                        feed::run_xdp(sock, &mut writer, &feed, &c, x, &stop, &mut evaluator)
                            .map_err(|e| CaptureError::Thread {
                                iface: sock.interface().to_string(),
                                source: Box::new(e),
                            })
                    }
                }
            }));
        }
        let interfaces = cfg
            .interfaces
            .iter()
            .zip(&links)
            .map(|(name, link)| Interface {
                name: Some(name.clone()),
                ..Interface::new(*link, cfg.snaplen)
            })
            .collect();
        Ok(Pipeline {
            buffer,
            interfaces,
            timestamps,
            counters: Counters {
                feeds,
                per_iface: queues,
                baseline,
                kernel: match (&watcher, &xdp_state) {
                    (Some(w), _) => Some(Arc::new(KernelShare::Packet(w.state()))),
                    (None, Some(x)) if xdp_drops.is_some() => {
                        Some(Arc::new(KernelShare::Xdp(x.clone())))
                    }
                    _ => None,
                },
                xdp: xdp_counters,
            },
            stop,
            threads,
            watcher,
            xdp: Box::new(XdpHeld {
                state: xdp_state,
                watcher: xdp_watcher,
                promisc,
                notes,
            }),
        })
    }

    /// What the backend says about itself, one line per interface, for the start-up lines
    /// (AF_XDP: sockets, attach and bind modes, UMEM pages; nothing for AF_PACKET).
    pub fn backend_notes(&self) -> &[String] {
        &self.xdp.notes
    }

    /// The shared packet buffer (its readers are the consumers).
    pub fn buffer(&self) -> &PacketBuffer {
        &self.buffer
    }

    /// The interfaces, in interface-id order (the id each record carries).
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// Where each interface's timestamps come from, in interface-id order.
    pub fn timestamp_sources(&self) -> &[TimestampSource] {
        &self.timestamps
    }

    /// Whether the buffer lives on reserved huge pages (else on transparent or small pages).
    pub fn page_kind(&self) -> PageKind {
        self.buffer.page_kind()
    }

    /// The capture threads' counters, as a handle other threads can keep.
    pub fn counters(&self) -> Counters {
        self.counters.clone()
    }

    /// Whether a capture thread ended (on an error: they run until [`stop`](Self::stop)).
    pub fn failed(&self) -> bool {
        self.threads.iter().any(|t| t.is_finished())
    }

    /// Stops the capture threads (each drains its ring into the buffer first) and waits for
    /// them; after this nothing more enters the buffer. Returns the first thread's error.
    pub fn stop(&mut self) -> Result<(), CaptureError> {
        // No filter is replaced from here on (the capture threads' own last filter refuses
        // everything while they drain).
        if let Some(w) = self.watcher.as_mut() {
            w.stop();
        }
        if let Some(w) = self.xdp.watcher.as_mut() {
            w.stop();
        }
        self.stop.store(true, Ordering::Relaxed);
        let mut first = Ok(());
        for t in self.threads.drain(..) {
            let r = t.join().expect("a capture thread panicked");
            if first.is_ok() {
                first = r;
            }
        }
        if let Some(w) = self.watcher.as_mut() {
            w.finish();
        }
        // Read the XDP drop counts, detach the programs (their links close) and leave
        // promiscuous mode.
        if let Some(x) = &self.xdp.state {
            crate::xdp_rules::lock(x).finish();
        }
        self.xdp.promisc.clear();
        first
    }
}

impl Drop for Pipeline {
    /// A pipeline dropped without [`stop`](Pipeline::stop) tells its threads to end, without
    /// waiting for them.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The counters of a pipeline's capture threads, shareable with other threads, with the
/// interfaces' drop counters as they were when capture started.
#[derive(Clone, Debug)]
pub struct Counters {
    feeds: Vec<Arc<FeedCounters>>,
    /// How many of `feeds` each interface has, in order.
    per_iface: Vec<usize>,
    baseline: Arc<Vec<(String, PreRing)>>,
    kernel: Option<Arc<KernelShare>>,
    xdp: Vec<Arc<crate::xdp::XdpCounters>>,
}

impl Counters {
    /// The sums now (the interfaces' and backlog's drops since capture started).
    pub fn totals(&self) -> Totals {
        let mut pre = PreRing::default();
        for (i, (iface, start)) in self.baseline.iter().enumerate() {
            let d = PreRing::read(iface).since(start);
            pre.add_interface(&d);
            if i == 0 {
                pre.softnet = d.softnet;
            }
        }
        let mut feed = FeedTotals::default();
        for c in &self.feeds {
            feed += c.load();
        }
        Totals {
            feed,
            if_rx_dropped: pre.rx_dropped,
            if_rx_missed: pre.rx_missed,
            if_rx_fifo: pre.rx_fifo,
            softnet_dropped: pre.softnet,
            kernel_rules: match self.kernel.as_deref() {
                Some(KernelShare::Packet(k)) => Some(kernel_rules::lock(k).snapshot()),
                Some(KernelShare::Xdp(x)) => crate::xdp_rules::lock(x).snapshot(),
                None => None,
            },
            xdp: (!self.xdp.is_empty()).then(|| {
                let mut x = XdpStats::default();
                for c in &self.xdp {
                    x += c.load();
                }
                x
            }),
        }
    }
}

impl Counters {
    /// Each interface's counters, in interface-id order: its capture threads' sums and its
    /// own drops before the ring since capture started (`softnet_dropped` is the machine's,
    /// the same for each; `kernel_rules` is only in [`totals`](Self::totals)).
    pub fn per_interface(&self) -> Vec<(String, Totals)> {
        let mut at = 0;
        self.baseline
            .iter()
            .zip(&self.per_iface)
            .map(|((iface, start), n)| {
                let feeds = &self.feeds[at.min(self.feeds.len())..(at + n).min(self.feeds.len())];
                at += n;
                let d = PreRing::read(iface).since(start);
                let mut feed = FeedTotals::default();
                for c in feeds {
                    feed += c.load();
                }
                let t = Totals {
                    feed,
                    if_rx_dropped: d.rx_dropped,
                    if_rx_missed: d.rx_missed,
                    if_rx_fifo: d.rx_fifo,
                    softnet_dropped: d.softnet,
                    kernel_rules: None,
                    xdp: None,
                };
                (iface.clone(), t)
            })
            .collect()
    }
}

/// Where a pipeline's kernel drop rules run: the AF_PACKET socket filters or the XDP programs.
#[derive(Clone, Debug)]
enum KernelShare {
    Packet(Arc<Mutex<kernel_rules::State>>),
    Xdp(Arc<Mutex<crate::xdp_rules::State>>),
}

/// Every stage's counters, summed over threads and interfaces.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    /// The capture threads' counters (kernel, ring, filter, buffer), summed.
    #[serde(flatten)]
    pub feed: FeedTotals,
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
    /// The drop rules in the kernel socket filter and the packets it rejected for them (with
    /// rules and kernel rules on; see [`kernel_rules`](crate::kernel_rules)). Those packets
    /// reached no ring: they are in none of the other counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_rules: Option<KernelRules>,
    /// With the AF_XDP backend: the sockets' kernel counters (`XDP_STATISTICS`), summed. Their
    /// packet drops (`rx_dropped + rx_ring_full`) are also `feed.kernel_drops`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp: Option<XdpStats>,
}

impl Totals {
    /// What the interfaces say they dropped before the rings (rx_dropped + missed + fifo).
    pub fn interface_drops(&self) -> u64 {
        self.if_rx_dropped + self.if_rx_missed + self.if_rx_fifo
    }

    /// The drops before the rings in words, for status lines and summaries; with kernel
    /// rules, what the rules' socket filter rejected ([`KernelRules::text`]).
    pub fn before_ring_text(&self) -> String {
        let mut s = format!(
            "interface {} (rx_dropped {}, missed {}, fifo {}), backlog (softnet, all \
             interfaces) {}",
            self.interface_drops(),
            self.if_rx_dropped,
            self.if_rx_missed,
            self.if_rx_fifo,
            self.softnet_dropped
        );
        if let Some(k) = &self.kernel_rules {
            s += "; ";
            s += &k.text();
        }
        if let Some(x) = &self.xdp {
            s += "; ";
            s += &x.text();
        }
        s
    }
}
