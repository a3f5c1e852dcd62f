//! What to send and when: the [`Source`] trait, the [`Rate`] a source is paced at, and the two
//! sources, [`Synth`] (synthetic stamped streams) and [`Replay`] (a capture file).
//!
//! A source plans: [`Source::next_due`] gives the planned time of its next packet (ns after the
//! start), [`Source::fill`] writes that packet. The drivers in [`crate::drive`] decide when to
//! call them (on an interface: when the time comes; into a file: at once, timestamping each packet
//! with its planned time).

use std::path::Path;

use weir_packet::LinkType;
use weir_pcap::FileReader;

use crate::frame::{FlowSpec, FrameBuilder};
use crate::size::{SizeMix, Sizes};
use crate::stamp::Stamp;
use crate::GenError;

/// The pace of a stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// As fast as the interface takes packets.
    Top,
    /// Packets per second.
    Pps(f64),
    /// Megabits per second of frames as captured (no FCS, preamble or gap).
    Mbps(f64),
}

/// A packet source.
pub trait Source {
    /// Planned time of the next packet, ns after the start (`None` when the source is done).
    /// Unpaced sources return 0 for every packet.
    fn next_due(&mut self) -> Result<Option<u64>, GenError>;
    /// Writes the packet `next_due` announced into `buf`, stamping it with `send_ns` when it
    /// carries a stamp; returns its length. `buf` must hold [`Source::max_len`] bytes.
    fn fill(&mut self, buf: &mut [u8], send_ns: u64) -> Result<usize, GenError>;
    /// True when packets have planned times (not top speed).
    fn paced(&self) -> bool;
    /// The largest frame this source yields.
    fn max_len(&self) -> usize;
    /// The link type of its frames.
    fn link(&self) -> LinkType {
        LinkType::ETHERNET
    }
}

/// Turns a rate into planned times, one packet at a time.
#[derive(Clone, Copy, Debug)]
struct Pacer {
    rate: Rate,
    next: f64,
}

impl Pacer {
    fn new(rate: Rate) -> Result<Pacer, GenError> {
        match rate {
            Rate::Pps(r) | Rate::Mbps(r) if !(r.is_finite() && r > 0.0) => {
                Err(GenError::Config(format!("rate must be positive, got {r}")))
            }
            _ => Ok(Pacer { rate, next: 0.0 }),
        }
    }

    fn due(&self) -> u64 {
        self.next as u64
    }

    /// Moves past a packet of `len` bytes.
    fn advance(&mut self, len: usize) {
        match self.rate {
            Rate::Top => {}
            Rate::Pps(pps) => self.next += 1e9 / pps,
            Rate::Mbps(mbps) => self.next += len as f64 * 8e3 / mbps,
        }
    }
}

/// Settings of a synthetic stream set.
#[derive(Clone, Debug)]
pub struct SynthConfig {
    /// The flows, sent round robin; flow `i` is stream `stream_base + i`.
    pub flows: Vec<FlowSpec>,
    /// Stream id of the first flow.
    pub stream_base: u16,
    /// Frame sizes (mixes are raised to the smallest frame that holds the headers and stamp).
    pub sizes: SizeMix,
    /// Seed of the uniform size draws.
    pub seed: u64,
    /// Total rate over all flows.
    pub rate: Rate,
    /// Stop after this many packets in total.
    pub count: Option<u64>,
    /// Stop when the planned time reaches this (ns after the start).
    pub duration_ns: Option<u64>,
}

/// Synthetic streams of stamped packets.
pub struct Synth {
    builders: Vec<FrameBuilder>,
    seqs: Vec<u32>,
    stream_base: u16,
    sizes: Sizes,
    min_len: usize,
    pacer: Pacer,
    count: Option<u64>,
    duration_ns: Option<u64>,
    sent: u64,
    staged_len: Option<usize>,
}

impl Synth {
    /// Checks the settings and prepares the flows.
    pub fn new(cfg: SynthConfig) -> Result<Synth, GenError> {
        if cfg.flows.is_empty() {
            return Err(GenError::Config("no flow to send".into()));
        }
        if cfg.flows.len() + cfg.stream_base as usize > 65_536 {
            return Err(GenError::Config("stream ids run past 65535".into()));
        }
        let builders: Vec<FrameBuilder> = cfg
            .flows
            .into_iter()
            .map(FrameBuilder::new)
            .collect::<Result<_, _>>()?;
        let min_len = builders.iter().map(|b| b.min_len()).max().unwrap_or(60);
        let sizes = Sizes::new(cfg.sizes.clone(), cfg.seed);
        if let SizeMix::Fixed(n) = cfg.sizes {
            if n < min_len {
                return Err(GenError::Config(format!(
                    "frames of {n} bytes cannot hold the headers and the 18-byte stamp: at least {min_len}"
                )));
            }
        }
        if sizes.bounds().1 > 65_535 {
            return Err(GenError::Config("frames larger than 65535 bytes".into()));
        }
        Ok(Synth {
            seqs: vec![0; builders.len()],
            builders,
            stream_base: cfg.stream_base,
            sizes,
            min_len,
            pacer: Pacer::new(cfg.rate)?,
            count: cfg.count,
            duration_ns: cfg.duration_ns,
            sent: 0,
            staged_len: None,
        })
    }
}

impl Source for Synth {
    fn next_due(&mut self) -> Result<Option<u64>, GenError> {
        if self.count.is_some_and(|c| self.sent >= c) {
            return Ok(None);
        }
        let due = self.pacer.due();
        if self.duration_ns.is_some_and(|d| due >= d) && self.paced() {
            return Ok(None);
        }
        if self.staged_len.is_none() {
            self.staged_len = Some(self.sizes.next_size().max(self.min_len));
        }
        Ok(Some(due))
    }

    fn fill(&mut self, buf: &mut [u8], send_ns: u64) -> Result<usize, GenError> {
        let len = match self.staged_len.take() {
            Some(l) => l,
            None => self.sizes.next_size().max(self.min_len),
        };
        let i = (self.sent % self.builders.len() as u64) as usize;
        let stamp = Stamp {
            stream: self.stream_base + i as u16,
            seq: self.seqs[i],
            send_ns,
        };
        self.seqs[i] = self.seqs[i].wrapping_add(1);
        self.builders[i].build(buf, len, &stamp);
        self.sent += 1;
        self.pacer.advance(len);
        Ok(len)
    }

    fn paced(&self) -> bool {
        self.pacer.rate != Rate::Top
    }

    fn max_len(&self) -> usize {
        self.sizes.bounds().1.max(self.min_len)
    }
}

/// How a capture file is replayed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReplayPace {
    /// At the recorded pace times `multiplier` (2 = twice as fast).
    Recorded {
        /// Speed-up factor.
        multiplier: f64,
    },
    /// At a fixed rate (or top speed).
    Rate(Rate),
}

/// Replays a pcap or pcapng file, `loops` times over.
pub struct Replay {
    reader: FileReader,
    path: std::path::PathBuf,
    link: LinkType,
    pace: ReplayPace,
    pacer: Pacer,
    loops: u64,
    loop_no: u64,
    /// Time of the first packet of the file, and the planned time where the current loop starts.
    t_first: Option<u64>,
    loop_base: f64,
    last_rel: f64,
    in_loop: u64,
    staged: Option<(u64, Vec<u8>)>,
    buf: Vec<u8>,
    max_len: usize,
}

impl Replay {
    /// Opens the file; `loops` ≥ 1. `max_len` is the largest frame the sink takes: larger packets
    /// make [`Source::fill`] fail with a config error naming the packet.
    pub fn open(
        path: &Path,
        pace: ReplayPace,
        loops: u64,
        max_len: usize,
    ) -> Result<Replay, GenError> {
        if loops == 0 {
            return Err(GenError::Config("--loops must be at least 1".into()));
        }
        if let ReplayPace::Recorded { multiplier } = pace {
            if !(multiplier.is_finite() && multiplier > 0.0) {
                return Err(GenError::Config(format!(
                    "the speed multiplier must be positive, got {multiplier}"
                )));
            }
        }
        let reader = FileReader::open(path)?;
        let links: Vec<LinkType> = reader.interfaces().iter().map(|i| i.link).collect();
        let link = links.first().copied().unwrap_or(LinkType::ETHERNET);
        if links.iter().any(|l| *l != link) {
            return Err(GenError::Config(format!(
                "{}: interfaces of several link types; replay needs one",
                path.display()
            )));
        }
        let rate = match pace {
            ReplayPace::Rate(r) => r,
            ReplayPace::Recorded { .. } => Rate::Pps(1.0),
        };
        Ok(Replay {
            reader,
            path: path.to_owned(),
            link,
            pace,
            pacer: Pacer::new(rate)?,
            loops,
            loop_no: 0,
            t_first: None,
            loop_base: 0.0,
            last_rel: 0.0,
            in_loop: 0,
            staged: None,
            buf: Vec::new(),
            max_len,
        })
    }

    /// The file replayed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the next packet of the file, starting the next loop at the end.
    fn read(&mut self) -> Result<Option<(u64, usize)>, GenError> {
        loop {
            if let Some(p) = self.reader.next_packet()? {
                self.buf.clear();
                self.buf.extend_from_slice(p.data);
                return Ok(Some((p.meta.ts_ns, p.data.len())));
            }
            self.loop_no += 1;
            if self.loop_no >= self.loops || self.in_loop == 0 {
                return Ok(None);
            }
            // The next loop starts one mean gap after the last packet of this one.
            let gap = if self.in_loop > 1 {
                self.last_rel / (self.in_loop - 1) as f64
            } else {
                1e6
            };
            self.loop_base += self.last_rel + gap;
            self.last_rel = 0.0;
            self.in_loop = 0;
            self.reader = FileReader::open(&self.path)?;
        }
    }
}

impl Source for Replay {
    fn next_due(&mut self) -> Result<Option<u64>, GenError> {
        if let Some((due, _)) = &self.staged {
            return Ok(Some(*due));
        }
        let Some((ts, len)) = self.read()? else {
            return Ok(None);
        };
        if len > self.max_len {
            return Err(GenError::Config(format!(
                "{}: packet {} is {len} bytes, more than the {} the sender takes",
                self.path.display(),
                self.reader.packets(),
                self.max_len
            )));
        }
        let due = match self.pace {
            ReplayPace::Recorded { multiplier } => {
                let first = *self.t_first.get_or_insert(ts);
                // Packets that step back in time are sent at once.
                let rel = (ts.saturating_sub(first) as f64 / multiplier).max(self.last_rel);
                self.last_rel = rel;
                (self.loop_base + rel) as u64
            }
            ReplayPace::Rate(_) => {
                let d = self.pacer.due();
                self.pacer.advance(len);
                d
            }
        };
        self.in_loop += 1;
        self.staged = Some((due, std::mem::take(&mut self.buf)));
        Ok(Some(due))
    }

    fn fill(&mut self, buf: &mut [u8], _send_ns: u64) -> Result<usize, GenError> {
        if self.staged.is_none() {
            self.next_due()?;
        }
        let Some((_, data)) = self.staged.take() else {
            return Err(GenError::Config("replay: nothing left to send".into()));
        };
        buf[..data.len()].copy_from_slice(&data);
        let n = data.len();
        self.buf = data;
        Ok(n)
    }

    fn paced(&self) -> bool {
        !matches!(self.pace, ReplayPace::Rate(Rate::Top))
    }

    fn max_len(&self) -> usize {
        self.max_len
    }

    fn link(&self) -> LinkType {
        self.link
    }
}
