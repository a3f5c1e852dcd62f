//! Building a segment's index as its packets are written: the distinct keys of the current
//! chunk are gathered in a small set (a packet whose keys are those of the packet before it,
//! the common case within a flow, is not even looked up), and appended to their postings when
//! the chunk ends: one postings lookup per distinct key per chunk, not per packet. Sorting the
//! chunk's keys instead cost 40 % of the indexing time (bench/extract_vs_tcpdump.py, perf).

use hashbrown::{HashMap, HashSet};
use weir_packet::LinkType;

use crate::format::{self, ChunkInfo, NONE};
use crate::keys::{keys_of, Key};

/// Accumulates the index of one segment.
pub struct IndexBuilder {
    chunk_size: u32,
    chunks: Vec<ChunkInfo>,
    postings: HashMap<Key, Vec<u32>, foldhash::fast::FixedState>,
    wildcard: Vec<u32>,
    /// Distinct keys of the current chunk.
    pending: HashSet<Key, foldhash::fast::FixedState>,
    /// Keys of the packet being added, and of the one before it.
    keys: Vec<Key>,
    last_keys: Vec<Key>,
    pending_chunk: Option<u32>,
    pending_wild: bool,
    packets: u64,
    first_ns: Option<u64>,
    last_ns: u64,
}

impl std::fmt::Debug for IndexBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexBuilder")
            .field("chunk_size", &self.chunk_size)
            .field("chunks", &self.chunks.len())
            .field("keys", &self.postings.len())
            .field("packets", &self.packets)
            .finish()
    }
}

impl IndexBuilder {
    /// An empty index with chunks of `chunk_size` bytes of segment file.
    pub fn new(chunk_size: u32) -> IndexBuilder {
        assert!(chunk_size >= 4096, "chunks of at least 4 KiB");
        IndexBuilder {
            chunk_size,
            chunks: Vec::new(),
            postings: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0x5eed)),
            wildcard: Vec::new(),
            pending: HashSet::with_capacity_and_hasher(
                1024,
                foldhash::fast::FixedState::with_seed(0x5eed),
            ),
            keys: Vec::with_capacity(16),
            last_keys: Vec::with_capacity(16),
            pending_chunk: None,
            pending_wild: false,
            packets: 0,
            first_ns: None,
            last_ns: 0,
        }
    }

    /// Packets added so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Adds the packet whose record starts at file offset `offset` (records must come in file
    /// order).
    pub fn add(&mut self, offset: u64, ts_ns: u64, link: LinkType, data: &[u8]) {
        let chunk = (offset / u64::from(self.chunk_size)) as u32;
        if self.pending_chunk != Some(chunk) {
            self.end_chunk();
            self.pending_chunk = Some(chunk);
            while self.chunks.len() <= chunk as usize {
                self.chunks.push(ChunkInfo {
                    first: NONE,
                    min_ns: u64::MAX,
                    max_ns: 0,
                });
            }
        }
        let c = &mut self.chunks[chunk as usize];
        if c.first == NONE {
            c.first = offset;
        }
        c.min_ns = c.min_ns.min(ts_ns);
        c.max_ns = c.max_ns.max(ts_ns);
        self.keys.clear();
        if !keys_of(link, data, &mut self.keys) {
            self.pending_wild = true;
        }
        if self.keys != self.last_keys {
            self.pending.extend(self.keys.iter().copied());
            std::mem::swap(&mut self.keys, &mut self.last_keys);
        }
        self.packets += 1;
        self.first_ns.get_or_insert(ts_ns);
        self.last_ns = self.last_ns.max(ts_ns);
    }

    /// Folds the current chunk's keys into the postings.
    fn end_chunk(&mut self) {
        let Some(chunk) = self.pending_chunk.take() else {
            return;
        };
        // The next chunk starts afresh: its first packet must add its keys.
        self.last_keys.clear();
        for k in self.pending.drain() {
            self.postings.entry(k).or_default().push(chunk);
        }
        if std::mem::take(&mut self.pending_wild) {
            self.wildcard.push(chunk);
        }
    }

    /// The index file's bytes, covering the segment's first `covered_len` bytes, whose first
    /// [`HEAD_LEN`](crate::HEAD_LEN) bytes hash to `head_hash`. The builder keeps going: it can
    /// be serialized again later (the index of a segment still being written).
    pub fn serialize(&mut self, covered_len: u64, head_hash: u64) -> Vec<u8> {
        // Fold the open chunk into a copy, so the builder can go on adding to it.
        let open = self.pending_chunk;
        let saved = (self.pending.clone(), self.pending_wild);
        self.end_chunk();
        let mut keys: Vec<(&Key, &Vec<u32>)> = self.postings.iter().collect();
        keys.sort_unstable_by_key(|(k, _)| **k);
        let out = format::write(
            &format::Header {
                covered_len,
                head_hash,
                packets: self.packets,
                first_ns: self.first_ns.unwrap_or(0),
                last_ns: self.last_ns,
                chunk_size: self.chunk_size,
            },
            &self.chunks,
            &self.wildcard,
            &keys,
        );
        if let Some(chunk) = open {
            // Undo the fold: take the open chunk back out of the postings.
            for list in self.postings.values_mut() {
                if list.last() == Some(&chunk) {
                    list.pop();
                }
            }
            self.postings.retain(|_, v| !v.is_empty());
            if self.wildcard.last() == Some(&chunk) {
                self.wildcard.pop();
            }
            (self.pending, self.pending_wild) = saved;
            self.pending_chunk = Some(chunk);
        }
        out
    }
}
