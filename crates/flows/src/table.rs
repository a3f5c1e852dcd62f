//! The flow table of one shard: a preallocated slab of `Entry`s addressed by `u32` indices, an
//! [`Index`] from hashes to those indices, and intrusive doubly linked lists that make every
//! expiry O(1):
//!
//! * the **idle list**, ordered by last touch: its head is the least recently seen open flow, so
//!   the idle timeout and the LRU eviction only ever look at the head;
//! * the **closing list**, flows that saw a TCP FIN or RST, ordered by last touch: they end
//!   [`Config::fin_grace_ns`](crate::Config::fin_grace_ns) after their last packet (the grace lets
//!   the other side's FIN and the last ACKs land in the same flow);
//! * the **age list**, every flow in creation order (so by first packet): its head is the next
//!   flow to reach the active timeout.
//!
//! A flow is on exactly one of the first two lists and always on the age list. Expiry pops heads
//! while they are due; a lookup that finds a flow already due (between two sweeps) ends it first,
//! so which packets go into which flow never depends on when sweeps run (results are the same
//! for any batching or worker count, except for LRU eviction, which is per shard).
//!
//! Both directions share one entry; `[0]` of each counter array is side A → side B of the
//! canonical key, `[1]` is B → A, and a state bit says which side started the flow.
//!
//! **Tags** (the rules' `tag` action) live beside the slab, not in it, so a run without rules
//! pays nothing: a `u16` per slot indexes the shard's table of the distinct tags seen (0: no
//! tag), allocated at the first tagged packet (2 bytes per flow at full capacity). A flow keeps
//! the **last** tag seen (an untagged packet does not clear it); a slot's tag is cleared when the
//! slot starts a new flow, so a record carries only tags of its own packets.

use std::collections::HashMap;

use weir_rules::Tag;

use crate::index::{Index, MAX_CAPACITY};
use crate::key::{Key, KeyHasher};
use crate::prepare::Prepared;
use crate::record::{Direction, EndReason, FlowRecord};

const NIL: u32 = u32::MAX;

/// True when the TCP flags end a connection (FIN or RST).
#[inline]
pub(crate) fn ends_tcp(flags: u8) -> bool {
    flags & (weir_decode::tcp::FIN | weir_decode::tcp::RST) != 0
}

/// The initiator is side B of the canonical key.
const INIT_B: u8 = 1;
/// FIN or RST seen: the flow is on the closing list.
const CLOSING: u8 = 2;

/// Index of the idle / closing lists (they share `links[0..2]`).
const IDLE: usize = 0;
const CLOSE: usize = 1;

/// One flow, both directions: 120 bytes (asserted in the tests).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    key: Key,
    bytes: [u64; 2],
    first: [u64; 2],
    last: [u64; 2],
    packets: [u32; 2],
    /// `[prev, next]` on the idle or closing list (`next` links the free list), then `[prev,
    /// next]` on the age list.
    links: [u32; 4],
    flags: [u8; 2],
    min_ttl: [u8; 2],
    max_ttl: [u8; 2],
    state: u8,
    /// TOS of the first packet.
    tos: u8,
}

impl Entry {
    const EMPTY: Entry = Entry {
        key: Key::ZERO,
        bytes: [0; 2],
        first: [0; 2],
        last: [0; 2],
        packets: [0; 2],
        links: [NIL; 4],
        flags: [0; 2],
        min_ttl: [u8::MAX; 2],
        max_ttl: [0; 2],
        state: 0,
        tos: 0,
    };

    #[inline]
    fn last_any(&self) -> u64 {
        self.last[0].max(self.last[1])
    }

    /// Time of the flow's first packet (the initiator's direction saw it).
    #[inline]
    fn start(&self) -> u64 {
        self.first[usize::from(self.state & INIT_B)]
    }
}

#[derive(Clone, Copy, Debug)]
struct List {
    head: u32,
    tail: u32,
}

impl List {
    const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };
}

/// Timeouts and export choices of a shard.
#[derive(Clone, Debug)]
pub struct TableConfig {
    /// Idle timeout, ns.
    pub idle_ns: u64,
    /// Active timeout, ns.
    pub active_ns: u64,
    /// Grace after FIN/RST, ns.
    pub grace_ns: u64,
    /// Most flows the shard holds.
    pub capacity: u32,
    /// One record per flow with both directions (RFC 5103) instead of one per direction.
    pub biflow: bool,
    /// TCP records with fewer bytes are not exported.
    pub min_tcp_bytes: u64,
}

/// Counters of one shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Packets metered.
    pub packets: u64,
    /// Flows created.
    pub created: u64,
    /// Flows ended, by [`EndReason`] value (index 1..=5).
    pub ended: [u64; 6],
    /// Most flows active at once.
    pub peak: u64,
    /// Records handed on.
    pub records: u64,
    /// Records not exported because of `min_tcp_bytes`.
    pub below_min_bytes: u64,
    /// Packets metered with a tag.
    pub tagged_packets: u64,
    /// Records handed on with a tag.
    pub tagged_records: u64,
    /// Tagged packets whose tag was not kept: the shard already knew 65 535 distinct tags.
    pub tags_lost: u64,
}

/// One open flow as [`FlowTable::each_open`] shows it: both directions summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFlow {
    /// Its slot in the shard's table: with `start_ns`, names the flow while it is open (a slot
    /// reused by a later flow has another start).
    pub slot: u32,
    /// The flow, the initiator as source.
    pub key: crate::FlowKey,
    /// Packets both ways so far.
    pub packets: u64,
    /// IP bytes both ways so far.
    pub bytes: u64,
    /// Its first packet's time, ns.
    pub start_ns: u64,
}

/// The flow table of one shard (see the module documentation).
pub struct FlowTable {
    cfg: TableConfig,
    hasher: KeyHasher,
    entries: Vec<Entry>,
    table: Index,
    free: u32,
    lists: [List; 2],
    age: List,
    active: u32,
    now: u64,
    stats: TableStats,
    /// Per slot, the flow's tag: an index into `tag_names` plus one, 0 for none; empty until
    /// the first tagged packet.
    tags: Vec<u16>,
    /// The distinct tags seen, and their indices.
    tag_names: Vec<Tag>,
    tag_ids: HashMap<Tag, u16>,
}

impl FlowTable {
    /// A shard holding at most `cfg.capacity` flows. The slab's address space is reserved at once
    /// (pages are only touched as flows fill it) and the hash table is allocated at full size,
    /// so the packet path never reallocates.
    pub fn new(cfg: TableConfig, hasher: KeyHasher) -> FlowTable {
        let cap = cfg.capacity.clamp(1, MAX_CAPACITY) as usize;
        FlowTable {
            entries: Vec::with_capacity(cap),
            table: Index::with_capacity(cap as u32),
            free: NIL,
            lists: [List::EMPTY; 2],
            age: List::EMPTY,
            active: 0,
            now: 0,
            stats: TableStats::default(),
            tags: Vec::new(),
            tag_names: Vec::new(),
            tag_ids: HashMap::new(),
            cfg: TableConfig {
                capacity: cap as u32,
                ..cfg
            },
            hasher,
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> TableStats {
        self.stats
    }

    /// Most flows the shard holds.
    pub fn capacity(&self) -> u32 {
        self.cfg.capacity
    }

    /// Flows active now.
    pub fn active(&self) -> u32 {
        self.active
    }

    /// The shard's clock: the latest packet or tick time seen.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Bytes of memory per flow at full capacity: slab entry plus hash-table share, plus the
    /// tag side table once a packet carried a tag.
    pub fn bytes_per_flow(&self) -> f64 {
        let slab = self.entries.capacity() * std::mem::size_of::<Entry>();
        let tags = self.tags.capacity() * std::mem::size_of::<u16>();
        (slab + self.table.allocation_size() + tags) as f64 / f64::from(self.cfg.capacity)
    }

    /// Every open flow, oldest first (the age list), read only: for live rankings
    /// ([`Meter::each_open`](crate::Meter::each_open)); O(flows held), nothing on the packet path.
    pub fn each_open(&self, f: &mut dyn FnMut(OpenFlow)) {
        let mut i = self.age.head;
        while i != NIL {
            let e = &self.entries[i as usize];
            let init = usize::from(e.state & INIT_B);
            f(OpenFlow {
                slot: i,
                key: e.key.flow_key(init == 1, e.tos),
                packets: u64::from(e.packets[0]) + u64::from(e.packets[1]),
                bytes: e.bytes[0] + e.bytes[1],
                start_ns: e.start(),
            });
            i = e.links[3];
        }
    }

    /// The index of `tag` in the tag table (plus one), 0 when the table is full.
    fn intern(&mut self, tag: Tag) -> u16 {
        if let Some(&id) = self.tag_ids.get(&tag) {
            return id;
        }
        if self.tag_names.len() >= usize::from(u16::MAX) {
            self.stats.tags_lost += 1;
            return 0;
        }
        self.tag_names.push(tag);
        let id = self.tag_names.len() as u16;
        self.tag_ids.insert(tag, id);
        id
    }

    /// Gives flow `i` tag `id` (from [`intern`](Self::intern)).
    fn set_tag(&mut self, i: u32, id: u16) {
        if self.tags.is_empty() {
            self.tags.reserve_exact(self.cfg.capacity as usize);
        }
        let i = i as usize;
        if self.tags.len() <= i {
            self.tags.resize(self.entries.len(), 0);
        }
        self.tags[i] = id;
    }

    /// The tag of flow `i`.
    #[inline]
    fn tag_of(&self, i: u32) -> Option<Tag> {
        match self.tags.get(i as usize) {
            None | Some(0) => None,
            Some(&id) => self.tag_names.get(usize::from(id) - 1).copied(),
        }
    }

    // ---- intrusive lists ----

    fn unlink(&mut self, i: u32, which: usize) {
        let (lp, ln) = if which == 2 { (2, 3) } else { (0, 1) };
        let [prev, next] = [
            self.entries[i as usize].links[lp],
            self.entries[i as usize].links[ln],
        ];
        let list = if which == 2 {
            &mut self.age
        } else {
            &mut self.lists[which]
        };
        if prev == NIL {
            list.head = next;
        } else {
            self.entries[prev as usize].links[ln] = next;
        }
        if next == NIL {
            list.tail = prev;
        } else {
            self.entries[next as usize].links[lp] = prev;
        }
    }

    fn push_back(&mut self, i: u32, which: usize) {
        let (lp, ln) = if which == 2 { (2, 3) } else { (0, 1) };
        let list = if which == 2 {
            &mut self.age
        } else {
            &mut self.lists[which]
        };
        let tail = list.tail;
        list.tail = i;
        if tail == NIL {
            list.head = i;
        } else {
            self.entries[tail as usize].links[ln] = i;
        }
        let e = &mut self.entries[i as usize];
        e.links[lp] = tail;
        e.links[ln] = NIL;
    }

    #[inline]
    fn list_of(e: &Entry) -> usize {
        if e.state & CLOSING != 0 {
            CLOSE
        } else {
            IDLE
        }
    }

    // ---- packet path ----

    /// Why a flow is due at `t`, if it is: the reason whose deadline came first (ties: FIN/RST,
    /// then idle, then active), so the reason never depends on when a sweep happened to run.
    #[inline]
    fn due(&self, e: &Entry, t: u64) -> Option<EndReason> {
        let last = e.last_any();
        let mut best = (
            e.start().saturating_add(self.cfg.active_ns),
            EndReason::ActiveTimeout,
        );
        let idle = last.saturating_add(self.cfg.idle_ns);
        if idle <= best.0 {
            best = (idle, EndReason::IdleTimeout);
        }
        if e.state & CLOSING != 0 {
            let fin = last.saturating_add(self.cfg.grace_ns);
            if fin <= best.0 {
                best = (fin, EndReason::EndOfFlow);
            }
        }
        (best.0 <= t).then_some(best.1)
    }

    /// Starts loading the index bucket a packet with flow hash `hash` will look at.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        self.table.prefetch(hash);
    }

    /// Accounts one packet; records of flows that end go to `out`.
    #[inline]
    pub fn packet(&mut self, p: &Prepared, out: &mut Vec<FlowRecord>) {
        self.packet_with(p, 0, out);
    }

    /// [`packet`](Self::packet) for a packet that carries `tag`: its flow takes the tag (the
    /// last one seen wins).
    #[inline(never)]
    pub fn packet_tagged(&mut self, p: &Prepared, tag: Tag, out: &mut Vec<FlowRecord>) {
        self.stats.tagged_packets += 1;
        let id = self.intern(tag);
        self.packet_with(p, id, out);
    }

    #[inline(always)]
    fn packet_with(&mut self, p: &Prepared, tag: u16, out: &mut Vec<FlowRecord>) {
        let t = p.ts_ns;
        if t > self.now {
            self.now = t;
        }
        let entries = &self.entries;
        let mut found = self
            .table
            .find(p.hash, |i| entries[i as usize].key == p.key);
        if let Some(i) = found {
            if let Some(reason) = self.due(&self.entries[i as usize], t) {
                self.end(i, reason, out);
                found = None;
            }
        }
        let i = match found {
            Some(i) => i,
            None => self.create(p, out),
        };
        let d = usize::from(p.from_b());
        let e = &mut self.entries[i as usize];
        if e.packets[d] == 0 {
            e.first[d] = t;
        }
        e.packets[d] += 1;
        e.bytes[d] += u64::from(p.bytes);
        e.last[d] = e.last[d].max(t);
        e.flags[d] |= p.tcp_flags;
        e.min_ttl[d] = e.min_ttl[d].min(p.ttl);
        e.max_ttl[d] = e.max_ttl[d].max(p.ttl);
        let was = Self::list_of(e);
        if ends_tcp(p.tcp_flags) {
            e.state |= CLOSING;
        }
        let now_in = Self::list_of(e);
        // 32-bit packet counters (and NetFlow v5's 32-bit fields) must never wrap: end the
        // record early, as an active timeout would, well before they could.
        let full = e.packets[d] >= u32::MAX - 1 || e.bytes[d] >= u64::from(u32::MAX) << 16;
        // move to the tail of its list (the most recently seen), unless it is there already
        // (a burst of one flow: no list work at all)
        if was != now_in || self.lists[was].tail != i {
            self.unlink(i, was);
            self.push_back(i, now_in);
        }
        self.stats.packets += 1;
        if tag != 0 {
            self.set_tag(i, tag);
        }
        if full {
            self.end(i, EndReason::ActiveTimeout, out);
        }
    }

    fn create(&mut self, p: &Prepared, out: &mut Vec<FlowRecord>) -> u32 {
        if self.active >= self.cfg.capacity {
            self.expire(self.now, out);
        }
        if self.active >= self.cfg.capacity {
            // evict the least recently seen flow of either list
            let a = self.lists[IDLE].head;
            let b = self.lists[CLOSE].head;
            let victim = match (a, b) {
                (NIL, v) | (v, NIL) => v,
                (a, b) => {
                    if self.entries[a as usize].last_any() <= self.entries[b as usize].last_any() {
                        a
                    } else {
                        b
                    }
                }
            };
            self.end(victim, EndReason::LackOfResources, out);
        }
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.entries[i as usize].links[1];
            i
        } else {
            self.entries.push(Entry::EMPTY);
            (self.entries.len() - 1) as u32
        };
        if let Some(t) = self.tags.get_mut(i as usize) {
            *t = 0;
        }
        let e = &mut self.entries[i as usize];
        *e = Entry::EMPTY;
        e.key = p.key;
        e.tos = p.tos;
        e.state = if p.from_b() { INIT_B } else { 0 };
        // on the idle list for now (the packet path moves it where it belongs); the age list
        // is creation order
        self.push_back(i, IDLE);
        self.push_back(i, 2);
        self.table.insert(p.hash, i);
        self.active += 1;
        self.stats.created += 1;
        self.stats.peak = self.stats.peak.max(u64::from(self.active));
        i
    }

    /// Ends flow `i`: removes it from the table and the lists, emits its records.
    fn end(&mut self, i: u32, reason: EndReason, out: &mut Vec<FlowRecord>) {
        let key = self.entries[i as usize].key;
        let hash = self.hasher.hash(&key);
        let (entries, hasher) = (&self.entries, &self.hasher);
        let removed = self
            .table
            .remove(hash, i, |j| hasher.hash(&entries[j as usize].key));
        debug_assert!(removed, "flow {i} is in the index");
        let e = self.entries[i as usize];
        self.unlink(i, Self::list_of(&e));
        self.unlink(i, 2);
        self.entries[i as usize].links[1] = self.free;
        self.free = i;
        self.active -= 1;
        self.stats.ended[reason as usize] += 1;
        let tag = self.tag_of(i);
        self.emit(&e, reason, tag, out);
    }

    fn emit(&mut self, e: &Entry, reason: EndReason, tag: Option<Tag>, out: &mut Vec<FlowRecord>) {
        let init = usize::from(e.state & INIT_B);
        let dir = |d: usize| -> Direction {
            if e.packets[d] == 0 {
                return Direction::default();
            }
            Direction {
                packets: u64::from(e.packets[d]),
                bytes: e.bytes[d],
                first_ns: e.first[d],
                last_ns: e.last[d],
                tcp_flags: e.flags[d],
                min_ttl: e.min_ttl[d],
                max_ttl: e.max_ttl[d],
            }
        };
        let fwd_key = e.key.flow_key(init == 1, e.tos);
        let fwd = dir(init);
        let rev = dir(1 - init);
        let tcp = e.key.proto() == weir_decode::ip_proto::TCP;
        let mut push = |rec: FlowRecord, stats: &mut TableStats| {
            if tcp && rec.forward.bytes + rec.reverse.bytes < self.cfg.min_tcp_bytes {
                stats.below_min_bytes += 1;
            } else {
                stats.records += 1;
                stats.tagged_records += u64::from(rec.tag.is_some());
                out.push(rec);
            }
        };
        if self.cfg.biflow {
            push(
                FlowRecord {
                    key: fwd_key,
                    forward: fwd,
                    reverse: rev,
                    end_reason: reason,
                    tag,
                },
                &mut self.stats,
            );
        } else {
            push(
                FlowRecord {
                    key: fwd_key,
                    forward: fwd,
                    reverse: Direction::default(),
                    end_reason: reason,
                    tag,
                },
                &mut self.stats,
            );
            if rev.packets > 0 {
                push(
                    FlowRecord {
                        key: e.key.flow_key(init == 0, e.tos),
                        forward: rev,
                        reverse: Direction::default(),
                        end_reason: reason,
                        tag,
                    },
                    &mut self.stats,
                );
            }
        }
    }

    /// Advances the clock to `now` (never backwards) and ends every flow due by then.
    pub fn expire(&mut self, now: u64, out: &mut Vec<FlowRecord>) {
        if now > self.now {
            self.now = now;
        }
        let now = self.now;
        for list in [CLOSE, IDLE] {
            loop {
                let h = self.lists[list].head;
                if h == NIL {
                    break;
                }
                let Some(reason) = self.due(&self.entries[h as usize], now) else {
                    break;
                };
                self.end(h, reason, out);
            }
        }
        loop {
            let h = self.age.head;
            if h == NIL {
                break;
            }
            let Some(reason) = self.due(&self.entries[h as usize], now) else {
                break;
            };
            self.end(h, reason, out);
        }
    }

    /// Ends every flow with `reason` (end of input: [`EndReason::ForcedEnd`]), oldest first.
    pub fn flush(&mut self, reason: EndReason, out: &mut Vec<FlowRecord>) {
        while self.age.head != NIL {
            self.end(self.age.head, reason, out);
        }
    }

    /// Sets the clock to `now`, also backwards (a new input that starts earlier). Call it on an
    /// empty table ([`flush`](Self::flush) first): a flow seen after `now` could never be due.
    pub fn restart(&mut self, now: u64) {
        debug_assert_eq!(self.active, 0, "restart an empty table");
        self.now = now;
    }
}

#[cfg(test)]
pub(crate) fn entry_size() -> usize {
    std::mem::size_of::<Entry>()
}
