//! Metering capture files (`weir flows -r`): [`FileMeter`] takes the packets of one input after
//! another from the caller's reading loop, restarting the meter's clock when an input starts
//! before it ([`Meter::new_input`]) and counting the packets read; [`meter_parallel`] meters one
//! large classic pcap file on every core instead, the reading threads running the shards
//! themselves (each shard a lane of [`Plan::run_lanes`], which owns it and lends it to one
//! thread at a time: the meter's `FileShards`), with exactly the records of the sequential
//! path.

use weir_decode::LinkType;
use weir_pcap::parallel::Plan;
use weir_pcap::{Packet, ReadError};

use crate::live::Metered;
use crate::meter::{Config, FileShards, Meter, RecordSink, RANGE_BYTES};
use crate::record::Tag;
use crate::route::Router;

/// Ranges read ahead of the slowest shard: what bounds the batches in flight.
const LOOKAHEAD: usize = 4;
/// Packets of the sequential tail metered at a time, after a wrong split guess.
const FALLBACK_BATCH: usize = 4096;

/// A [`Meter`] fed the inputs of a run one after the other, on the caller's thread (its shards
/// on threads of their own when `cfg.workers > 1`): call [`start_input`](Self::start_input)
/// when an input opens, [`packet`](Self::packet) for each packet that passed the filter,
/// [`end_input`](Self::end_input) with the packets the input held, then
/// [`finish`](Self::finish).
pub struct FileMeter<S: RecordSink> {
    meter: Meter<S>,
    read: u64,
    /// The next packet is the first of an input.
    starting: bool,
}

impl<S: RecordSink> FileMeter<S> {
    /// A meter for `cfg` writing to `sink` ([`Meter::new`]).
    pub fn new(cfg: &Config, sink: S) -> FileMeter<S> {
        FileMeter {
            meter: Meter::new(cfg, sink),
            read: 0,
            starting: false,
        }
    }

    /// An input opens: its first packet tells whether it starts before the clock, in which
    /// case every flow ends and the clock restarts ([`Meter::new_input`]).
    pub fn start_input(&mut self) {
        self.starting = true;
    }

    /// Meters one packet of the current input (in the input's order).
    #[inline]
    pub fn packet(&mut self, link: LinkType, ts_ns: u64, frame: &[u8]) {
        self.packet_tagged(link, ts_ns, frame, None);
    }

    /// [`packet`](Self::packet) with the tag the rules gave the packet, if any: its flow takes
    /// it ([`Meter::packet_tagged`]).
    #[inline]
    pub fn packet_tagged(&mut self, link: LinkType, ts_ns: u64, frame: &[u8], tag: Option<&Tag>) {
        if self.starting {
            self.meter.new_input(ts_ns);
            self.starting = false;
        }
        self.meter.packet_tagged(link, ts_ns, frame, tag);
    }

    /// The current input ended after `read` packets (read, matching the filter or not).
    pub fn end_input(&mut self, read: u64) {
        self.read += read;
    }

    /// Ends every flow, stops the meter's threads and returns the packets read and the meter's
    /// counters and sink ([`Meter::finish`]).
    pub fn finish(self) -> Metered<S> {
        Metered {
            packets: self.read,
            meter: self.meter.finish(),
        }
    }
}

/// What [`meter_parallel`] hands back.
pub struct ParallelRun<S: RecordSink> {
    /// Packets read (matching the filter or not), the meter's counters and its sink.
    pub metered: Metered<S>,
    /// Damage that ended the file early (every packet before it was metered).
    pub damage: Option<ReadError>,
}

/// Meters the file of `plan` (one classic pcap file split into ranges, from
/// `Plan::new(path, RANGE_BYTES, ...)`) on every core: each thread reads a range, keeps the
/// packets `keep` accepts (the filter), prepares and routes them, then meters each shard's
/// batch itself when that shard is free and the batch is next in file order (each of `cfg`'s
/// shards a lane of [`Plan::run_lanes`]), so the records are exactly those of [`FileMeter`] on
/// the same packets. The meter is finished before this returns.
pub fn meter_parallel<S, K>(
    cfg: &Config,
    sink: S,
    plan: Plan,
    keep: K,
) -> Result<ParallelRun<S>, ReadError>
where
    S: RecordSink,
    K: Fn(&Packet<'_>) -> bool + Sync,
{
    let (file, shards) = FileShards::new(cfg, sink, RANGE_BYTES);
    let (outcome, shards) = plan.lookahead(LOOKAHEAD).run_lanes(
        (FALLBACK_BATCH, shards),
        keep,
        (
            || file.new_range(),
            |r: &mut Router, p: &Packet<'_>| file.push(r, p.link, p.meta.ts_ns, p.data),
        ),
        (FileShards::<S>::split, |shard, batch| {
            file.run(shard, batch)
        }),
    )?;
    Ok(ParallelRun {
        metered: Metered {
            packets: outcome.packets,
            meter: file.finish(shards),
        },
        damage: outcome.damage,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;
    use crate::FlowRecord;

    const S: u64 = 1_000_000_000;

    /// An Ethernet/IPv4/UDP frame from 10.0.0.`host`:`sport` to 10.0.0.1:53 with `payload`
    /// bytes (the records can be counted by hand).
    fn udp(host: u8, sport: u16, payload: usize) -> Vec<u8> {
        let mut f = vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend([0x45, 0]);
        f.extend(((28 + payload) as u16).to_be_bytes());
        f.extend([0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, host, 10, 0, 0, 1]);
        f.extend(sport.to_be_bytes());
        f.extend(53u16.to_be_bytes());
        f.extend(((8 + payload) as u16).to_be_bytes());
        f.extend([0, 0]);
        f.extend(std::iter::repeat_n(0xaa, payload));
        f
    }

    fn sorted(recs: Vec<FlowRecord>) -> Vec<String> {
        let mut v: Vec<String> = recs.iter().map(|r| format!("{r:?}")).collect();
        v.sort();
        v
    }

    #[test]
    fn an_input_that_starts_before_the_clock_is_metered_alone() {
        let cfg = Config {
            seed: Some(7),
            ..Config::default()
        };
        let mut m = FileMeter::new(&cfg, Vec::new());
        // input 1: one packet of one flow at 100 s; input 2 starts earlier, at 10 s, with a
        // packet of the same flow: without the restart it would join the flow of input 1
        m.start_input();
        m.packet(LinkType::ETHERNET, 100 * S, &udp(2, 1000, 10));
        m.end_input(3);
        m.start_input();
        m.packet(LinkType::ETHERNET, 10 * S, &udp(2, 1000, 20));
        m.packet(LinkType::ETHERNET, 11 * S, &udp(2, 1000, 20));
        m.end_input(2);
        let done = m.finish();
        assert_eq!(done.packets, 5, "packets read over both inputs");
        let recs = done.meter.sink;
        assert_eq!(recs.len(), 2);
        let counts: Vec<(u64, u64, u64)> = recs
            .iter()
            .map(|r| (r.forward.first_ns / S, r.forward.packets, r.forward.bytes))
            .collect();
        assert_eq!(counts, [(100, 1, 38), (10, 2, 96)]);
        assert_eq!(done.meter.stats.packets, 3);
        assert_eq!(done.meter.stats.forced_ended, 2);
    }

    #[test]
    fn a_file_metered_on_every_core_gives_the_sequential_records() {
        // a classic pcap (µs, little-endian, Ethernet) of 40 000 packets over 400 flows,
        // 5 ms apart so that idle timeouts fire in the middle of ranges
        let dir = std::env::temp_dir().join(format!("weir-flows-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.pcap");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        f.write_all(&[
            0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0,
            0,
        ])
        .unwrap();
        let mut frames = Vec::new();
        for i in 0..40_000u64 {
            let ts_us = 1_700_000_000_000_000 + i * 5_000;
            let frame = udp(
                (i % 200) as u8,
                1000 + (i % 400) as u16 / 200,
                (i % 50) as usize,
            );
            f.write_all(&((ts_us / 1_000_000) as u32).to_le_bytes())
                .unwrap();
            f.write_all(&((ts_us % 1_000_000) as u32).to_le_bytes())
                .unwrap();
            f.write_all(&(frame.len() as u32).to_le_bytes()).unwrap();
            f.write_all(&(frame.len() as u32).to_le_bytes()).unwrap();
            f.write_all(&frame).unwrap();
            frames.push((ts_us * 1000, frame));
        }
        drop(f);
        // ranges of 64 KiB: about 14 of them, so the shards change hands between threads
        let plan = || Plan::new(&path, 64 << 10, 0);
        if plan().is_none() {
            // one core: nothing to split
            std::fs::remove_dir_all(&dir).unwrap();
            return;
        }
        for workers in [1, 2] {
            let cfg = Config {
                seed: Some(3),
                idle_timeout_ns: S,
                workers,
                ..Config::default()
            };
            let mut seq = FileMeter::new(&cfg, Vec::new());
            seq.start_input();
            for (ts, frame) in &frames {
                // the filter: leave out host 10.0.0.7
                if frame[29] != 7 {
                    seq.packet(LinkType::ETHERNET, *ts, frame);
                }
            }
            seq.end_input(frames.len() as u64);
            let want = seq.finish();
            let got =
                meter_parallel(&cfg, Vec::new(), plan().unwrap(), |p| p.data[29] != 7).unwrap();
            assert!(got.damage.is_none());
            assert_eq!(got.metered.packets, 40_000);
            let mut st = got.metered.meter.stats.clone();
            assert_eq!(st.packets, 40_000 - 200);
            assert!(st.idle_ended > 0, "flows ended inside the file");
            // each shard's peak depends on where its batches end
            st.peak_flows = want.meter.stats.peak_flows;
            assert_eq!(st, want.meter.stats, "{workers} shard(s)");
            if workers == 1 {
                assert!(
                    got.metered.meter.sink == want.meter.sink,
                    "one shard: the same order"
                );
            }
            assert_eq!(sorted(got.metered.meter.sink), sorted(want.meter.sink));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
