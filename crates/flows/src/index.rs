//! The hash index of a shard: open addressing with linear probing over `u32` buckets, each
//! holding a slab index (24 bits, plus one so that 0 means empty) and an 8-bit tag taken from the
//! hash, so most probes reject a bucket without touching the slab.
//!
//! Why not hashbrown's `HashTable<u32>`: its bucket count is a power of two (up to 2× the flows
//! asked for, 10.5 bytes per flow instead of 5.3), and in a table kept full by eviction its
//! tombstones make an insertion *grow* the table, which breaks the "preallocated, at most 128
//! bytes per flow" promise. Here the size is exactly `capacity × 4/3` buckets (load ≤ 0.75), the
//! position comes from a multiply-shift of the hash (any size works), and deletion shifts the
//! following run back (Knuth's Algorithm R), so there are no tombstones and the table never grows.

/// Largest slab index a bucket can hold (24 bits, with 0 reserved for "empty").
pub const MAX_CAPACITY: u32 = (1 << 24) - 2;

const IDX_MASK: u32 = 0x00ff_ffff;
const TAG_MASK: u32 = 0xff00_0000;

/// An index from flow hashes to slab indices.
pub struct Index {
    buckets: Box<[u32]>,
}

impl Index {
    /// An index for at most `capacity` entries (at most [`MAX_CAPACITY`]).
    pub fn with_capacity(capacity: u32) -> Index {
        assert!(capacity <= MAX_CAPACITY, "capacity above {MAX_CAPACITY}");
        let n = (capacity as usize * 4).div_ceil(3).max(8);
        let mut buckets = vec![0u32; n].into_boxed_slice();
        // lookups read buckets before inserts write them: make them writable now
        weir_buffer::advise_huge_pages(buckets.as_ptr(), n * std::mem::size_of::<u32>());
        weir_buffer::populate_for_writes(&mut buckets);
        Index { buckets }
    }

    /// Bytes allocated.
    pub fn allocation_size(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<u32>()
    }

    /// The bucket a hash wants (its home).
    #[inline]
    pub fn home(&self, hash: u64) -> usize {
        (((hash >> 32) * self.buckets.len() as u64) >> 32) as usize
    }

    /// Starts loading the home bucket of `hash` into the cache (see [`weir_packet::prefetch`]).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        weir_packet::prefetch(&self.buckets[self.home(hash)]);
    }

    #[inline]
    fn tag(hash: u64) -> u32 {
        (hash as u32) << 24
    }

    /// The slab index stored for `hash` for which `eq` holds.
    #[inline]
    pub fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let n = self.buckets.len();
        let tag = Self::tag(hash);
        let mut p = self.home(hash);
        loop {
            let b = self.buckets[p];
            if b == 0 {
                return None;
            }
            if b & TAG_MASK == tag && eq((b & IDX_MASK) - 1) {
                return Some((b & IDX_MASK) - 1);
            }
            p += 1;
            if p == n {
                p = 0;
            }
        }
    }

    /// Adds `idx` under `hash`. The caller keeps the count of entries at or below the capacity
    /// (so an empty bucket always exists) and never inserts the same index twice.
    #[inline]
    pub fn insert(&mut self, hash: u64, idx: u32) {
        debug_assert!(idx <= MAX_CAPACITY);
        let n = self.buckets.len();
        let mut p = self.home(hash);
        while self.buckets[p] != 0 {
            p += 1;
            if p == n {
                p = 0;
            }
        }
        self.buckets[p] = Self::tag(hash) | (idx + 1);
    }

    /// Removes `idx` (stored under `hash`); `hash_of` gives the hash of any other stored index
    /// (by rehashing its key), for the backward shift. Returns false when absent.
    pub fn remove(&mut self, hash: u64, idx: u32, hash_of: impl Fn(u32) -> u64) -> bool {
        let n = self.buckets.len();
        let want = Self::tag(hash) | (idx + 1);
        let mut p = self.home(hash);
        loop {
            let b = self.buckets[p];
            if b == 0 {
                return false;
            }
            if b == want {
                break;
            }
            p += 1;
            if p == n {
                p = 0;
            }
        }
        // Algorithm R: move back every later member of the run that may live in the hole.
        let mut hole = p;
        let mut j = p;
        loop {
            j += 1;
            if j == n {
                j = 0;
            }
            let b = self.buckets[j];
            if b == 0 {
                break;
            }
            let h = self.home(hash_of((b & IDX_MASK) - 1));
            // b may move to the hole unless its home lies cyclically in (hole, j]
            let dist_home = (j + n - h) % n;
            let dist_hole = (j + n - hole) % n;
            if dist_home >= dist_hole {
                self.buckets[hole] = b;
                hole = j;
            }
        }
        self.buckets[hole] = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A deliberately bad hash with many collisions, to exercise long runs and wrap-around.
    fn h(k: u32) -> u64 {
        let x = u64::from(k % 7);
        (x << 61) | (x << 32) | u64::from(k)
    }

    #[test]
    fn insert_find_remove_against_a_model() {
        let mut ix = Index::with_capacity(64);
        let mut model: HashMap<u32, u64> = HashMap::new();
        let mut rng = 0x1234_5678u64;
        for _ in 0..20_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let k = (rng % 96) as u32;
            if let Some(&hash) = model.get(&k) {
                assert!(ix.remove(hash, k, |i| model[&i]));
                model.remove(&k);
            } else if model.len() < 64 {
                ix.insert(h(k), k);
                model.insert(k, h(k));
            }
            for (&k, &hash) in &model {
                assert_eq!(ix.find(hash, |i| i == k), Some(k));
            }
            assert_eq!(ix.find(h(1000), |i| i == 1000), None);
        }
    }

    #[test]
    fn size_is_four_thirds() {
        let ix = Index::with_capacity(300_000);
        assert_eq!(ix.allocation_size(), 400_000 * 4);
    }
}
