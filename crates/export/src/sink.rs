//! The exporter API the CLI uses: [`FlowSink`], [`SinkSpec`], [`open_sink`], and the batching
//! sink that drives a NetFlow / IPFIX encoder and a transport.

use weir_flows::FlowRecord;

use crate::clock::Clock;
use crate::packer::{Added, Datagram, Packer};
use crate::sets::Refresh;
use crate::text::{TextFormat, TextSink};
use crate::transport::{open_writer, Framing, Transport};
use crate::v5::V5Packer;
use crate::{ipfix, v9, ExportError, Target};

/// A destination for finished flow records.
pub trait FlowSink: Send {
    /// Exports one flow record (it may wait in a partly filled datagram).
    fn export(&mut self, rec: &FlowRecord) -> Result<(), ExportError>;
    /// Advances packet time to `now_ns`: a partly filled datagram whose first record has waited
    /// longer than the queue timeout goes out; text sinks flush their buffers.
    fn tick(&mut self, now_ns: u64) -> Result<(), ExportError>;
    /// Sends what is pending, flushes, and returns the totals. Call it once, at the end.
    fn finish(&mut self) -> Result<ExportStats, ExportError>;
}

/// Which NetFlow-family format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetflowFormat {
    /// NetFlow v5 (IPv4 only, 32-bit counters).
    V5,
    /// NetFlow v9 (RFC 3954).
    V9,
    /// IPFIX (RFC 7011).
    Ipfix,
}

/// What to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkSpec {
    /// NetFlow v5 / v9 / IPFIX datagrams.
    Netflow {
        /// UDP collectors, a file or stdout.
        target: Target,
        /// The format.
        format: NetflowFormat,
        /// IPFIX: one RFC 5103 bidirectional record per flow. v5 / v9 always send one record per
        /// direction that has packets.
        biflow: bool,
        /// IPFIX: flowStart/EndNanoseconds instead of Milliseconds.
        ts_nanos: bool,
    },
    /// JSON lines to a file or stdout.
    Json(Target),
    /// CSV (with a header row) to a file or stdout.
    Csv(Target),
}

/// Totals of one sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Records written: NetFlow/IPFIX data records (after v5 counter splitting and one-way
    /// splitting of both directions), or text rows.
    pub records: u64,
    /// Datagrams produced (each goes to every collector).
    pub datagrams: u64,
    /// Bytes produced (datagram payloads, or text).
    pub bytes: u64,
    /// Records in datagrams that could not be sent to a collector (counted per collector).
    pub dropped: u64,
    /// Flow records not exported because NetFlow v5 cannot carry IPv6.
    pub dropped_v5_ipv6: u64,
    /// NetFlow v5 / v9 records whose Last could not be expressed (a flow lasting more than the
    /// 49.7 days a 32-bit ms uptime spans): sent with Last clamped to First + 49.7 days.
    pub times_clamped: u64,
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

/// Opens a sink with the default [`ExportOptions`].
pub fn open_sink(spec: &SinkSpec) -> Result<Box<dyn FlowSink>, ExportError> {
    open_sink_with(spec, &ExportOptions::default())
}

/// Opens a sink with explicit options.
pub fn open_sink_with(
    spec: &SinkSpec,
    opts: &ExportOptions,
) -> Result<Box<dyn FlowSink>, ExportError> {
    match spec {
        SinkSpec::Json(t) => Ok(Box::new(TextSink::new(
            open_writer(t, "JSON")?,
            TextFormat::Json,
        )?)),
        SinkSpec::Csv(t) => Ok(Box::new(TextSink::new(
            open_writer(t, "CSV")?,
            TextFormat::Csv,
        )?)),
        SinkSpec::Netflow {
            target,
            format,
            biflow,
            ts_nanos,
        } => {
            let (packer, framing): (Box<dyn Packer>, Framing) = match format {
                NetflowFormat::V5 => (
                    Box::new(V5Packer::new(opts.engine_type, opts.engine_id)),
                    Framing::LengthPrefixed,
                ),
                NetflowFormat::V9 => (
                    Box::new(v9::packer(
                        opts.domain_id,
                        opts.mtu,
                        opts.refresh(v9::DEFAULT_REFRESH),
                    )?),
                    Framing::LengthPrefixed,
                ),
                NetflowFormat::Ipfix => (
                    Box::new(ipfix::packer(
                        opts.domain_id,
                        *biflow,
                        *ts_nanos,
                        opts.mtu,
                        opts.refresh(ipfix::DEFAULT_REFRESH),
                    )?),
                    Framing::Raw,
                ),
            };
            Ok(Box::new(NetflowSink {
                packer,
                transport: Transport::open(target, framing)?,
                clock: Clock::new(opts.boot_ns),
                queue_timeout_ns: opts.queue_timeout_ns,
                pending_since: None,
                ready: Vec::new(),
                stats: ExportStats::default(),
            }))
        }
    }
}

/// Batches records into datagrams (ffProbe style) and sends them.
struct NetflowSink {
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
        if self.packer.add(rec, &self.clock, &mut self.ready) == Added::SkippedIpv6 {
            self.stats.dropped_v5_ipv6 += 1;
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
        self.transport.flush()?;
        self.stats.times_clamped = self.packer.clamped();
        Ok(self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, UdpSocket};
    use std::time::Duration;
    use weir_flows::{Direction, EndReason, FlowKey};

    const T0: u64 = 1_795_256_430_000_000_000;

    fn rec(at: u64, v6: bool) -> FlowRecord {
        let a = if v6 {
            "2001:db8::1".parse().unwrap()
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        };
        FlowRecord {
            key: FlowKey {
                vlan: 0,
                src: a,
                dst: a,
                proto: 17,
                src_port: 1,
                dst_port: 2,
                tos: 0,
            },
            forward: Direction {
                packets: 1,
                bytes: 100,
                first_ns: at,
                last_ns: at,
                ..Direction::default()
            },
            reverse: Direction::default(),
            end_reason: EndReason::IdleTimeout,
        }
    }

    #[test]
    fn queue_timeout_flushes_partial_datagram_over_udp() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let spec = SinkSpec::Netflow {
            target: Target::Udp(vec![rx.local_addr().unwrap()]),
            format: NetflowFormat::V5,
            biflow: false,
            ts_nanos: false,
        };
        let mut s = open_sink(&spec).unwrap();
        s.tick(T0).unwrap();
        s.export(&rec(T0 + 100_000_000, false)).unwrap();
        s.export(&rec(T0 + 200_000_000, true)).unwrap();
        s.tick(T0 + 1_000_000_000).unwrap(); // waited 0.9 s: stays
        s.tick(T0 + 1_100_000_000).unwrap(); // waited 1.0 s: goes
        let mut buf = [0u8; 2000];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(n, 24 + 48);
        assert_eq!(&buf[0..4], &[0, 5, 0, 1]);
        assert_eq!(&buf[4..8], &1100u32.to_be_bytes(), "uptime at the tick");
        let st = s.finish().unwrap();
        assert_eq!(
            st,
            ExportStats {
                records: 1,
                datagrams: 1,
                bytes: 72,
                dropped: 0,
                dropped_v5_ipv6: 1,
                times_clamped: 0,
            }
        );
    }

    #[test]
    fn file_framing() {
        let dir = std::env::temp_dir().join(format!("weir-export-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (format, prefixed) in [(NetflowFormat::V9, true), (NetflowFormat::Ipfix, false)] {
            let path = dir.join(format!("{format:?}"));
            let spec = SinkSpec::Netflow {
                target: Target::File(path.clone()),
                format,
                biflow: false,
                ts_nanos: false,
            };
            let mut s = open_sink(&spec).unwrap();
            for i in 0..100 {
                s.export(&rec(T0 + i, i % 2 == 0)).unwrap();
            }
            let st = s.finish().unwrap();
            let data = std::fs::read(&path).unwrap();
            assert_eq!(
                data.len() as u64,
                st.bytes + if prefixed { 2 * st.datagrams } else { 0 }
            );
            // Walk the framing back.
            let (mut at, mut n) = (0, 0);
            while at < data.len() {
                let len = if prefixed {
                    at += 2;
                    usize::from(u16::from_be_bytes([data[at - 2], data[at - 1]]))
                } else {
                    usize::from(u16::from_be_bytes([data[at + 2], data[at + 3]]))
                };
                at += len;
                n += 1;
            }
            assert_eq!((at, n), (data.len(), st.datagrams));
            assert_eq!(st.records, 100);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn json_and_csv_files() {
        let dir = std::env::temp_dir().join(format!("weir-export-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (j, c) = (dir.join("f.json"), dir.join("f.csv"));
        for spec in [
            SinkSpec::Json(Target::File(j.clone())),
            SinkSpec::Csv(Target::File(c.clone())),
        ] {
            let mut s = open_sink(&spec).unwrap();
            for i in 0..3 {
                s.export(&rec(T0 + i, i == 1)).unwrap();
            }
            assert_eq!(s.finish().unwrap().records, 3);
        }
        let json = std::fs::read_to_string(&j).unwrap();
        let rows: Vec<serde_json::Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1]["sourceIPAddress"], "2001:db8::1");
        assert_eq!(
            rows[2]["flowStartNanoseconds"],
            "2026-11-21T10:20:30.000000002Z"
        );
        assert_eq!(
            rows[0]["reverseFlowStartNanoseconds"],
            serde_json::Value::Null
        );
        let csv = std::fs::read_to_string(&c).unwrap();
        let lines: Vec<_> = csv.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("flowStartNanoseconds,flowEndNanoseconds,vlanId,"));
        assert!(lines.iter().all(|l| l.split(',').count() == 22));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn text_to_udp_is_refused() {
        let t: Target = "udp://127.0.0.1:2055".parse().unwrap();
        assert!(matches!(
            open_sink(&SinkSpec::Json(t)),
            Err(ExportError::Unsupported(_))
        ));
    }
}
