//! Opening an output: [`SinkSpec`] says what, [`open_sink`] / [`open_sink_with`] open it.

use crate::kafka::{KafkaOutput, KafkaSink};
use crate::netflow::{ExportOptions, NetflowFormat, NetflowSink};
use crate::sink::FlowSink;
use crate::text::{TextFormat, TextSink};
use crate::threaded::Threaded;
use crate::transport::open_writer;
use crate::{ExportError, Target};

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
    /// Messages to a Kafka topic.
    Kafka(KafkaOutput),
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
            opts.tags,
        )?)),
        SinkSpec::Csv(t) => Ok(Box::new(TextSink::new(
            open_writer(t, "CSV")?,
            TextFormat::Csv,
            opts.tags,
        )?)),
        // serialised and produced on a thread of its own, off the meter's
        SinkSpec::Kafka(k) => Ok(Box::new(Threaded::spawn(
            "weir-kafka",
            KafkaSink::open(k)?,
        )?)),
        SinkSpec::Netflow {
            target,
            format,
            biflow,
            ts_nanos,
        } => Ok(Box::new(NetflowSink::open(
            target, *format, *biflow, *ts_nanos, opts,
        )?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ExportStats;
    use std::net::{IpAddr, Ipv4Addr, UdpSocket};
    use std::time::Duration;
    use weir_flows::{Direction, EndReason, FlowKey, FlowRecord};

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
            tag: None,
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
                tags_not_exported: 0,
                kafka: None,
                ..ExportStats::default()
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
