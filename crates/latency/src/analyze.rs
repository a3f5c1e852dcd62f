//! The matcher: reads the two captures side by side in time order and pairs each packet of the
//! first point (A) with its copy at the second (B).
//!
//! For each packet of B (at time `tb`, corrected by the clock offset), A is read ahead up to
//! `tb + window`; every A packet waits in a table keyed by its [`Key`] until it is matched or
//! falls more than `window` behind `tb`, when it is counted lost. So memory holds the packets of
//! two windows, whatever the size of the files. A B packet takes the oldest unmatched A packet
//! with its key (hash matches are confirmed on the masked bytes, read again from A); when all of
//! them are already matched it is a duplicate; with none it is unmatched.

use std::collections::VecDeque;
use std::path::Path;

use hashbrown::HashMap;
use weir_pcap::{FileReader, ReadError};

use crate::classify::{classify, same_invariant_bytes, FlowKey, Key};
use crate::stats::StreamStats;
use crate::LatencyError;

/// How packets without a stamp are grouped into streams (`weir latency --unstamped`: `skip`,
/// `one`, `flow`, feature `clap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Unstamped {
    /// Not matched at all (only stamped streams are measured).
    Skip,
    /// All in one stream named `unstamped`.
    #[default]
    One,
    /// One stream per 5-tuple.
    #[cfg_attr(feature = "clap", value(name = "flow"))]
    ByFlow,
}

/// Settings of a run.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Longest latency (either sign) a match may have, ns; also how long an unmatched packet
    /// waits before it is counted lost.
    pub window_ns: u64,
    /// Clock offset of B relative to A, ns, subtracted from B's timestamps.
    pub offset_ns: i64,
    /// Match by weir gen stamps when packets carry them.
    pub stamps: bool,
    /// What to do with packets without a stamp.
    pub unstamped: Unstamped,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            window_ns: 1_000_000_000,
            offset_ns: 0,
            stamps: true,
            unstamped: Unstamped::One,
        }
    }
}

/// One matched packet, handed to the caller's callback.
#[derive(Clone, Copy, Debug)]
pub struct Match<'a> {
    /// The stream's name.
    pub stream: &'a str,
    /// Sequence number in the stream (the stamp's, unwrapped; for unstamped packets, the order
    /// in A within the stream, from 0).
    pub seq: u64,
    /// Time at A, ns.
    pub a_ns: u64,
    /// Time at B, ns, offset-corrected.
    pub b_ns: i64,
    /// Latency, ns.
    pub latency_ns: i64,
    /// Captured length at B.
    pub len: u32,
}

/// The result of a run.
#[derive(Debug)]
pub struct Run {
    /// The streams, by name, in order of first appearance.
    pub streams: Vec<(String, StreamStats)>,
    /// Packets read from A and B.
    pub packets: (u64, u64),
    /// Packets of A and B that could not take part (no IP header, or unstamped when skipped).
    pub skipped: (u64, u64),
    /// Hash matches rejected on the bytes (collisions).
    pub collisions: u64,
    /// Most A packets waiting at once (the memory bound in action).
    pub peak_pending: usize,
    /// Time of A's first packet, ns.
    pub start_ns: u64,
    /// Damage found in the inputs (every packet before it was used).
    pub damage: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum StreamKey {
    Stamp(u16),
    Flow(FlowKey),
    Other,
}

fn stream_name(k: &StreamKey) -> String {
    match k {
        StreamKey::Stamp(s) => format!("stream {s}"),
        StreamKey::Other => "unstamped".into(),
        StreamKey::Flow(f) => {
            let p = match f.proto {
                6 => "tcp".to_string(),
                17 => "udp".to_string(),
                1 => "icmp".to_string(),
                58 => "icmp6".to_string(),
                n => format!("proto {n}"),
            };
            let ep = |ip: std::net::IpAddr, port: u16| match ip {
                std::net::IpAddr::V6(_) => format!("[{ip}]:{port}"),
                _ => format!("{ip}:{port}"),
            };
            format!("{p} {} > {}", ep(f.src, f.sport), ep(f.dst, f.dport))
        }
    }
}

const NONE: u64 = u64::MAX;

struct Entry {
    a_ns: u64,
    key: Key,
    stream: u32,
    seq: u64,
    matched: u32,
    /// Global index of the next older entry with the same key, or NONE.
    prev: u64,
    /// Where the packet is in A (hash matches are confirmed from there).
    record: u64,
}

/// An A packet read ahead, classified.
struct Ahead {
    ts: u64,
    key: Key,
    stream: u32,
    seq: u64,
    record: u64,
}

type FixedState = foldhash::fast::FixedState;

struct Engine {
    names: Vec<String>,
    stats: Vec<StreamStats>,
    stream_of: HashMap<StreamKey, u32, FixedState>,
    /// Stream index of each stamp stream id (u32::MAX: not seen yet).
    stamped: Vec<u32>,
    /// Per stream: the last unwrapped stamp sequence number seen in A, or the count of A packets.
    a_seq: Vec<Option<u64>>,
    table: HashMap<Key, u64, FixedState>,
    queue: VecDeque<Entry>,
    base: u64,
    peak: usize,
}

impl Engine {
    fn stream(&mut self, k: StreamKey) -> u32 {
        // Stamped streams (the common case) by a direct table, others by the map.
        if let StreamKey::Stamp(id) = k {
            let i = self.stamped[id as usize];
            if i != u32::MAX {
                return i;
            }
        } else if let Some(&i) = self.stream_of.get(&k) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(stream_name(&k));
        self.stats.push(StreamStats::new());
        self.a_seq.push(None);
        match k {
            StreamKey::Stamp(id) => self.stamped[id as usize] = i,
            _ => {
                self.stream_of.insert(k, i);
            }
        }
        i
    }

    /// The A-side sequence number of a new packet of stream `s`.
    fn next_seq(&mut self, s: u32, key: Key) -> u64 {
        let slot = &mut self.a_seq[s as usize];
        let v = match (key, *slot) {
            (Key::Stamp { seq, .. }, None) => seq as u64,
            (Key::Stamp { seq, .. }, Some(last)) => {
                // Serial-number arithmetic: the closest value with these low 32 bits.
                let d = seq.wrapping_sub(last as u32) as i32 as i64;
                (last as i64 + d).max(0) as u64
            }
            (Key::Hash(_), None) => 0,
            (Key::Hash(_), Some(last)) => last + 1,
        };
        *slot = Some(v);
        v
    }

    fn insert(&mut self, a: Ahead) {
        self.stats[a.stream as usize].sent += 1;
        let idx = self.base + self.queue.len() as u64;
        let prev = self.table.insert(a.key, idx).unwrap_or(NONE);
        self.queue.push_back(Entry {
            a_ns: a.ts,
            key: a.key,
            stream: a.stream,
            seq: a.seq,
            matched: 0,
            prev,
            record: a.record,
        });
        self.peak = self.peak.max(self.queue.len());
    }

    /// Drops entries sent before `limit`, counting the unmatched ones lost.
    fn expire(&mut self, limit: u64) {
        while let Some(e) = self.queue.front() {
            if e.a_ns >= limit {
                break;
            }
            let e = self.queue.pop_front().expect("front exists");
            if e.matched == 0 {
                self.stats[e.stream as usize].lost += 1;
            }
            if let hashbrown::hash_map::Entry::Occupied(o) = self.table.entry(e.key) {
                if *o.get() == self.base {
                    o.remove();
                }
            }
            self.base += 1;
        }
    }

    fn entry(&mut self, idx: u64) -> Option<&mut Entry> {
        if idx == NONE || idx < self.base {
            return None;
        }
        self.queue.get_mut((idx - self.base) as usize)
    }
}

fn stream_key(cfg: &Config, c: &crate::classify::Classified) -> Option<StreamKey> {
    match c.key {
        Key::Stamp { stream, .. } => Some(StreamKey::Stamp(stream)),
        Key::Hash(_) => match cfg.unstamped {
            Unstamped::Skip => None,
            Unstamped::One => Some(StreamKey::Other),
            Unstamped::ByFlow => c.flow.map(StreamKey::Flow),
        },
    }
}

/// An A packet as the reading thread classified it.
struct RawA {
    ts: u64,
    key: Key,
    stream: StreamKey,
    record: u64,
}

/// What the thread reading A sends.
enum FromA {
    Batch(Vec<RawA>),
    End {
        count: u64,
        skipped: u64,
        damage: Option<String>,
    },
}

const A_BATCH: usize = 4096;

/// Reads and classifies A in its own thread (the other half of the work runs in parallel with
/// B's), in batches through a bounded channel, so at most a few batches are buffered.
fn spawn_a_reader(mut r: FileReader, cfg: Config) -> crossbeam_channel::Receiver<FromA> {
    let (tx, rx) = crossbeam_channel::bounded(4);
    std::thread::spawn(move || {
        let (mut count, mut skipped) = (0u64, 0u64);
        let mut batch = Vec::with_capacity(A_BATCH);
        let damage = loop {
            let p = match r.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) => break None,
                Err(e) => break Some(e.to_string()),
            };
            count += 1;
            let Some(c) = classify(p.link, p.data, cfg.stamps) else {
                skipped += 1;
                continue;
            };
            let Some(sk) = stream_key(&cfg, &c) else {
                skipped += 1;
                continue;
            };
            batch.push(RawA {
                ts: p.meta.ts_ns,
                key: c.key,
                stream: sk,
                record: p.record_offset,
            });
            if batch.len() == A_BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(A_BATCH));
                if tx.send(FromA::Batch(full)).is_err() {
                    return; // the analysis stopped
                }
            }
        };
        if !batch.is_empty() {
            let _ = tx.send(FromA::Batch(batch));
        }
        let _ = tx.send(FromA::End {
            count,
            skipped,
            damage,
        });
    });
    rx
}

/// The A side as the matcher sees it: classified packets in order, with their streams and
/// sequence numbers assigned.
struct ASide {
    rx: crossbeam_channel::Receiver<FromA>,
    batch: std::vec::IntoIter<RawA>,
    count: u64,
    skipped: u64,
    damage: Option<String>,
}

impl ASide {
    fn next(&mut self, eng: &mut Engine) -> Option<Ahead> {
        loop {
            if let Some(a) = self.batch.next() {
                let s = eng.stream(a.stream);
                let seq = eng.next_seq(s, a.key);
                return Some(Ahead {
                    ts: a.ts,
                    key: a.key,
                    stream: s,
                    seq,
                    record: a.record,
                });
            }
            match self.rx.recv() {
                Ok(FromA::Batch(b)) => self.batch = b.into_iter(),
                Ok(FromA::End {
                    count,
                    skipped,
                    damage,
                }) => {
                    self.count = count;
                    self.skipped = skipped;
                    self.damage = damage;
                    return None;
                }
                Err(_) => return None,
            }
        }
    }
}

/// The masked-comparable IP bytes of the packet at `record` in A.
fn confirm(a2: &mut Option<FileReader>, record: u64, b_ip: &[u8]) -> Result<bool, ReadError> {
    let Some(r) = a2 else {
        return Ok(true); // A is not seekable (a pipe): trust the 64-bit hash.
    };
    r.seek(record)?;
    let Some(p) = r.next_packet()? else {
        return Ok(false);
    };
    let Some(c) = classify(p.link, p.data, false) else {
        return Ok(false);
    };
    let Some((off, len)) = c.ip else {
        return Ok(false);
    };
    Ok(same_invariant_bytes(&p.data[off..off + len], b_ip))
}

/// Matches capture `a` (first point) against `b` (second point), calling `on_match` for each
/// matched packet (first copies) in B's order.
pub fn analyze(
    a: &Path,
    b: &Path,
    cfg: &Config,
    on_match: &mut dyn FnMut(&Match<'_>),
) -> Result<Run, LatencyError> {
    let ra = FileReader::open(a)?;
    let mut rb = FileReader::open(b)?;
    let mut a2 = if a.as_os_str() == "-" {
        None
    } else {
        Some(FileReader::open(a)?)
    };
    let mut eng = Engine {
        names: Vec::new(),
        stats: Vec::new(),
        stream_of: HashMap::with_hasher(FixedState::default()),
        stamped: vec![u32::MAX; 1 << 16],
        a_seq: Vec::new(),
        table: HashMap::with_hasher(FixedState::default()),
        queue: VecDeque::new(),
        base: 0,
        peak: 0,
    };
    let (mut b_count, mut b_skip) = (0u64, 0u64);
    let mut collisions = 0u64;
    let mut damage = Vec::new();
    let mut side_a = ASide {
        rx: spawn_a_reader(ra, *cfg),
        batch: Vec::new().into_iter(),
        count: 0,
        skipped: 0,
        damage: None,
    };
    let mut ahead = side_a.next(&mut eng);
    let start_ns = ahead.as_ref().map_or(0, |x| x.ts);
    let window = cfg.window_ns as i128;
    loop {
        let p = match rb.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(e) => {
                damage.push(e.to_string());
                break;
            }
        };
        b_count += 1;
        let tb = p.meta.ts_ns as i128 - cfg.offset_ns as i128;
        while let Some(x) = ahead.take() {
            if (x.ts as i128) <= tb + window {
                eng.insert(x);
                ahead = side_a.next(&mut eng);
            } else {
                ahead = Some(x);
                break;
            }
        }
        let limit = tb - window;
        if limit > 0 {
            eng.expire(limit.min(u64::MAX as i128) as u64);
        }
        let Some(c) = classify(p.link, p.data, cfg.stamps) else {
            b_skip += 1;
            continue;
        };
        let Some(sk) = stream_key(cfg, &c) else {
            b_skip += 1;
            continue;
        };
        let b_ip = c.ip.map(|(off, len)| &p.data[off..off + len]);
        // Oldest unmatched candidate (confirmed), else the newest matched one (a duplicate).
        let mut idx = eng.table.get(&c.key).copied().unwrap_or(NONE);
        let mut fresh: Option<u64> = None;
        let mut dup_of: Option<u64> = None;
        while let Some(e) = eng.entry(idx) {
            let (matched, prev, record) = (e.matched, e.prev, e.record);
            let ok = match b_ip {
                Some(ip) => confirm(&mut a2, record, ip)?,
                None => true,
            };
            if !ok {
                collisions += 1;
            } else if matched == 0 {
                fresh = Some(idx);
            } else if dup_of.is_none() {
                dup_of = Some(idx);
            }
            idx = prev;
        }
        if let Some(i) = fresh {
            let e = eng.entry(i).expect("candidate is live");
            e.matched = 1;
            let (s, seq, a_ns) = (e.stream, e.seq, e.a_ns);
            let latency = (tb - a_ns as i128) as i64;
            eng.stats[s as usize].record(seq, a_ns, latency);
            on_match(&Match {
                stream: &eng.names[s as usize],
                seq,
                a_ns,
                b_ns: tb as i64,
                latency_ns: latency,
                len: p.data.len() as u32,
            });
        } else if let Some(i) = dup_of {
            let e = eng.entry(i).expect("candidate is live");
            e.matched += 1;
            let s = e.stream;
            eng.stats[s as usize].duplicated += 1;
        } else {
            let s = eng.stream(sk);
            eng.stats[s as usize].unmatched += 1;
        }
    }
    // B is over: the rest of A was never seen there.
    while let Some(x) = ahead.take() {
        eng.insert(x);
        ahead = side_a.next(&mut eng);
        if eng.queue.len() > 1 << 16 {
            let last = eng.queue.back().map_or(0, |e| e.a_ns);
            eng.expire(last);
        }
    }
    eng.expire(u64::MAX);
    damage.extend(side_a.damage.take());
    Ok(Run {
        streams: eng.names.into_iter().zip(eng.stats).collect(),
        packets: (side_a.count, b_count),
        skipped: (side_a.skipped, b_skip),
        collisions,
        peak_pending: eng.peak,
        start_ns,
        damage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_gen::{FlowSpec, FrameBuilder, Proto, Stamp};
    use weir_packet::{LinkType, PacketMeta};
    use weir_pcap::{FileFormat, Interface, PacketWriter, Precision};

    /// Writes frames of stream 0 with the given (sequence number, time) list.
    fn write(path: &Path, packets: &[(u32, u64)]) {
        let mut b = FrameBuilder::new(FlowSpec {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            src_ip: "10.0.0.1".parse().unwrap(),
            dst_ip: "10.0.0.2".parse().unwrap(),
            src_port: 1,
            dst_port: 2,
            tos: 0,
            ttl: 64,
            proto: Proto::Udp,
        })
        .unwrap();
        let spec = Interface::new(LinkType::ETHERNET, 0);
        let f = std::fs::File::create(path).unwrap();
        let mut w = PacketWriter::new(f, FileFormat::Pcap(Precision::Nano), &[spec]).unwrap();
        let mut buf = [0u8; 64];
        for &(seq, t) in packets {
            let st = Stamp {
                stream: 0,
                seq,
                send_ns: 0,
            };
            let n = b.build(&mut buf, 60, &st);
            let meta = PacketMeta {
                ts_ns: t,
                orig_len: n as u32,
                interface: 0,
            };
            w.write(&meta, &buf[..n]).unwrap();
        }
        w.finish().unwrap();
    }

    #[test]
    fn sequence_numbers_unwrap_past_2_pow_32() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.pcap"), dir.path().join("b.pcap"));
        let seqs: Vec<u32> = (0..8u32).map(|k| u32::MAX - 3 + k).collect(); // ..., MAX, 0, 1, ...
        let sent: Vec<(u32, u64)> = seqs
            .iter()
            .enumerate()
            .map(|(k, &s)| (s, 1_000_000 + k as u64 * 1000))
            .collect();
        write(&a, &sent);
        // B: the packet after the wrap (seq 0) overtakes the one before it (seq MAX); one lost.
        let mut recv: Vec<(u32, u64)> = sent.iter().map(|&(s, t)| (s, t + 500)).collect();
        recv.swap(3, 4);
        recv.remove(6);
        write(&b, &recv);
        let run = analyze(&a, &b, &Config::default(), &mut |_| {}).unwrap();
        assert_eq!(run.streams.len(), 1);
        let s = run.streams[0].1.summary();
        assert_eq!((s.sent, s.received, s.lost), (8, 7, 1));
        assert_eq!(s.reordered, 1, "only the packet overtaken at the wrap");
    }

    #[test]
    fn memory_is_bounded_by_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.pcap"), dir.path().join("b.pcap"));
        // 10 000 packets 1 ms apart (10 s), latency 2 ms: a 100 ms window holds ~200 packets.
        let sent: Vec<(u32, u64)> = (0..10_000u32).map(|k| (k, k as u64 * 1_000_000)).collect();
        write(&a, &sent);
        let recv: Vec<(u32, u64)> = sent.iter().map(|&(s, t)| (s, t + 2_000_000)).collect();
        write(&b, &recv);
        let cfg = Config {
            window_ns: 100_000_000,
            ..Config::default()
        };
        let run = analyze(&a, &b, &cfg, &mut |_| {}).unwrap();
        assert_eq!(run.streams[0].1.summary().received, 10_000);
        assert!(run.peak_pending <= 2 * 100 + 2, "peak {}", run.peak_pending);
    }
}
