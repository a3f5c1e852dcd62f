//! NetFlow v5 / v9 and IPFIX output: the sink that batches records into datagrams (ffProbe
//! style) through a format's encoder ([`Packer`]) and sends them over a transport, and its
//! tunables ([`ExportOptions`]).

use weir_flows::FlowRecord;

use crate::clock::Clock;
use crate::packer::{Added, Datagram, Packer};
use crate::sets::Refresh;
use crate::sink::{ExportStats, FlowSink};
use crate::transport::{Framing, Transport};
use crate::v5::V5Packer;
use crate::{ipfix, v9, ExportError, Target};

/// Which NetFlow-family format. The variants' doc comments are the help of `weir flows
/// --format` (feature `clap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum NetflowFormat {
    /// NetFlow v5 (IPv4 only: IPv6 flows are counted and skipped).
    V5,
    /// NetFlow v9 (RFC 3954), IPv4 and IPv6 templates.
    V9,
    /// IPFIX (RFC 7011); with --biflow, RFC 5103 bidirectional records.
    Ipfix,
}

/// Tunables of NetFlow / IPFIX export; [`Default`] gives the documented defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportOptions {
    /// Largest datagram (UDP payload) for v9 and IPFIX; default 1400. v5 datagrams are at most
    /// 1464 bytes (30 records) whatever this says.
    pub mtu: usize,
    /// A partly filled datagram goes out once its first record has waited this long in packet
    /// time; default 1 s.
    pub queue_timeout_ns: u64,
    /// Resend templates every this many datagrams (0 = never by count); `None` = 20.
    pub template_refresh_packets: Option<u32>,
    /// Resend templates after this much packet time (0 = never by time); `None` = 30 min for
    /// v9, 10 min for IPFIX.
    pub template_refresh_ns: Option<u64>,
    /// v9 source id / IPFIX observation domain id; default 0.
    pub domain_id: u32,
    /// v5 engine type; default 0.
    pub engine_type: u8,
    /// v5 engine id; default 0.
    pub engine_id: u8,
    /// NetFlow "boot" time (ns since the epoch); `None` = the first tick or packet seen.
    pub boot_ns: Option<u64>,
    /// Export each record's tag (the rules' `tag`, [`FlowRecord::tag`]): v9 and IPFIX
    /// templates end with applicationName (IE 96, 16 bytes, the tag's UTF-8 text zero-padded,
    /// all zero when the flow has none); CSV gets a last `tag` column. NetFlow v5 has no room:
    /// its tagged records are counted ([`ExportStats::tags_not_exported`]). JSON lines carry
    /// a `tag` key on tagged records whatever this says. Default false (no rules: every
    /// output as without this option).
    pub tags: bool,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            mtu: 1400,
            queue_timeout_ns: 1_000_000_000,
            template_refresh_packets: None,
            template_refresh_ns: None,
            domain_id: 0,
            engine_type: 0,
            engine_id: 0,
            boot_ns: None,
            tags: false,
        }
    }
}

impl ExportOptions {
    fn refresh(&self, default: Refresh) -> Refresh {
        Refresh {
            packets: self.template_refresh_packets.unwrap_or(default.packets),
            ns: self.template_refresh_ns.unwrap_or(default.ns),
        }
    }
}

/// Batches records into datagrams (ffProbe style) and sends them.
pub(crate) struct NetflowSink {
    packer: Box<dyn Packer>,
    transport: Transport,
    clock: Clock,
    queue_timeout_ns: u64,
    /// Packet time at which the open datagram got its first record.
    pending_since: Option<u64>,
    ready: Vec<Datagram>,
    stats: ExportStats,
}

impl NetflowSink {
    /// A sink encoding `format` (`biflow`, `ts_nanos`: IPFIX only) to `target`.
    pub(crate) fn open(
        target: &Target,
        format: NetflowFormat,
        biflow: bool,
        ts_nanos: bool,
        opts: &ExportOptions,
    ) -> Result<NetflowSink, ExportError> {
        let (packer, framing): (Box<dyn Packer>, Framing) = match format {
            NetflowFormat::V5 => (
                Box::new(V5Packer::new(opts.engine_type, opts.engine_id)),
                Framing::LengthPrefixed,
            ),
            NetflowFormat::V9 => (
                Box::new(v9::packer_tags(
                    opts.domain_id,
                    opts.tags,
                    opts.mtu,
                    opts.refresh(v9::DEFAULT_REFRESH),
                )?),
                Framing::LengthPrefixed,
            ),
            NetflowFormat::Ipfix => (
                Box::new(ipfix::packer(
                    opts.domain_id,
                    biflow,
                    ts_nanos,
                    opts.tags,
                    opts.mtu,
                    opts.refresh(ipfix::DEFAULT_REFRESH),
                )?),
                Framing::Raw,
            ),
        };
        Ok(NetflowSink {
            packer,
            transport: Transport::open(target, framing)?,
            clock: Clock::new(opts.boot_ns),
            queue_timeout_ns: opts.queue_timeout_ns,
            pending_since: None,
            ready: Vec::new(),
            stats: ExportStats::default(),
        })
    }

    fn send_ready(&mut self) -> Result<(), ExportError> {
        for d in self.ready.drain(..) {
            self.transport.send(&d, &mut self.stats)?;
        }
        Ok(())
    }

    fn flush_pending(&mut self) -> Result<(), ExportError> {
        self.ready.extend(self.packer.flush(&self.clock));
        self.pending_since = None;
        self.send_ready()
    }
}

impl FlowSink for NetflowSink {
    fn export(&mut self, rec: &FlowRecord) -> Result<(), ExportError> {
        self.clock.observe(rec);
        match self.packer.add(rec, &self.clock, &mut self.ready) {
            Added::SkippedIpv6 => self.stats.dropped_v5_ipv6 += 1,
            Added::Encoded if rec.tag.is_some() && !self.packer.carries_tags() => {
                self.stats.tags_not_exported += 1
            }
            Added::Encoded => {}
        }
        let filled = !self.ready.is_empty();
        if !self.packer.is_pending() {
            self.pending_since = None;
        } else if filled || self.pending_since.is_none() {
            self.pending_since = Some(self.clock.now_ns());
        }
        self.send_ready()
    }

    fn tick(&mut self, now_ns: u64) -> Result<(), ExportError> {
        self.clock.tick(now_ns);
        if let Some(since) = self.pending_since {
            if self.clock.now_ns().saturating_sub(since) >= self.queue_timeout_ns {
                self.flush_pending()?;
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ExportStats, ExportError> {
        self.flush_pending()?;
        self.transport.commit()?;
        self.stats.times_clamped = self.packer.clamped();
        Ok(self.stats)
    }

    fn stats(&self) -> ExportStats {
        let mut s = self.stats;
        s.times_clamped = self.packer.clamped();
        s
    }
}
