//! The exact-rule table: one conversation (VLAN, protocol, two endpoints, both directions) to
//! one rule, O(1) lookup, insertion and removal.
//!
//! Layout, chosen for memory (1 M rules in well under 64 MiB): the entries live in a dense slab
//! (`Vec<Entry>`, 48 bytes each: addresses as `[u32; 4]` so nothing is 16-byte aligned), and a
//! `hashbrown::HashTable<u32>` maps a key's hash to a slab index (4 bytes + 1 control byte per
//! bucket). Removal swaps the last slab entry into the hole and re-points its one table slot.
//!
//! The table is split into [`SHARDS`] shards by hash bits that hashbrown itself does not use
//! (bits 32..40; it takes the low bits for the bucket and the top 7 for the control byte), so a
//! live change copies only one shard (about n/256 entries) when it makes a new rule-set
//! version: the versions share every other shard through `Arc`.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::rule::ExactKey;

/// Number of shards of the exact table.
pub const SHARDS: usize = 256;

/// The hasher: foldhash with a fixed seed, so hashes are stable within a process.
#[inline]
pub(crate) fn hash_key(k: &ExactKey) -> u64 {
    foldhash::fast::FixedState::with_seed(0x5745_4952_5255_4c45).hash_one(k)
}

#[inline]
fn shard_of(hash: u64) -> usize {
    ((hash >> 32) as usize) & (SHARDS - 1)
}

/// One exact rule as stored: its key, packed to 4-byte alignment, its counter slot and the
/// index of its action in the rule set's action table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    a: [u32; 4],
    b: [u32; 4],
    pa: u16,
    pb: u16,
    vlan: u16,
    proto: u8,
    family: u8,
    /// Counter slot of the rule.
    pub slot: u32,
    /// Index of its action in the rule set's table of exact-rule actions.
    pub action: u16,
}

fn split(x: u128) -> [u32; 4] {
    [
        x as u32,
        (x >> 32) as u32,
        (x >> 64) as u32,
        (x >> 96) as u32,
    ]
}

fn join(x: [u32; 4]) -> u128 {
    u128::from(x[0]) | u128::from(x[1]) << 32 | u128::from(x[2]) << 64 | u128::from(x[3]) << 96
}

impl Entry {
    fn new(k: &ExactKey, slot: u32, action: u16) -> Entry {
        Entry {
            a: split(k.a),
            b: split(k.b),
            pa: k.pa,
            pb: k.pb,
            vlan: k.vlan,
            proto: k.proto,
            family: k.family,
            slot,
            action,
        }
    }

    /// The key back.
    pub(crate) fn key(&self) -> ExactKey {
        ExactKey {
            a: join(self.a),
            b: join(self.b),
            pa: self.pa,
            pb: self.pb,
            vlan: self.vlan,
            proto: self.proto,
            family: self.family,
        }
    }

    #[inline]
    fn is(&self, k: &ExactKey) -> bool {
        self.pa == k.pa
            && self.pb == k.pb
            && self.vlan == k.vlan
            && self.proto == k.proto
            && self.family == k.family
            && self.a == split(k.a)
            && self.b == split(k.b)
    }
}

/// One shard: slab plus index.
#[derive(Clone, Default)]
pub(crate) struct Shard {
    table: HashTable<u32>,
    slab: Vec<Entry>,
}

impl Shard {
    fn find(&self, k: &ExactKey, h: u64) -> Option<&Entry> {
        let slab = &self.slab;
        self.table
            .find(h, |&i| slab[i as usize].is(k))
            .map(|&i| &slab[i as usize])
    }

    fn insert(&mut self, k: &ExactKey, h: u64, slot: u32, action: u16) -> Result<(), u32> {
        if let Some(e) = self.find(k, h) {
            return Err(e.slot);
        }
        let idx = self.slab.len() as u32;
        self.slab.push(Entry::new(k, slot, action));
        let slab = &self.slab;
        self.table
            .insert_unique(h, idx, |&i| hash_key(&slab[i as usize].key()));
        Ok(())
    }

    fn remove(&mut self, k: &ExactKey, h: u64) -> Option<Entry> {
        let slab = &self.slab;
        let entry = self.table.find_entry(h, |&i| slab[i as usize].is(k)).ok()?;
        let (idx, _) = entry.remove();
        let idx = idx as usize;
        let last = self.slab.len() - 1;
        let removed = self.slab[idx];
        if idx != last {
            let moved = self.slab[last];
            let mh = hash_key(&moved.key());
            if let Some(p) = self.table.find_mut(mh, |&i| i as usize == last) {
                *p = idx as u32;
            }
        }
        self.slab.swap_remove(idx);
        Some(removed)
    }
}

/// Exact drop rules kept for the kernel's socket filter without a walk of the table: the
/// first [`KERNEL_SAMPLE`] drop rules (lowest counter slots, the order they came in).
pub(crate) const KERNEL_SAMPLE: usize = 1024;

/// What the kernel's share of the rules needs of the exact table, kept up to date on every
/// change so that a new version's kernel filter costs no walk of a million rules
/// ([`ExactTable::kernel_part`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct KernelPart {
    /// Rules per action index.
    pub per_action: Vec<u32>,
    /// Drop rules (by the action's `drops`) and the others.
    pub drops: usize,
    pub keeping: usize,
    /// The drop rules of lowest slot, ascending: all of them, or the first [`KERNEL_SAMPLE`].
    /// After removals it may hold fewer than it should; then [`ExactTable::kernel_part`] walks.
    pub first_drops: Vec<(u32, ExactKey)>,
    /// Every keeping rule, while there are at most `MAX_KEEPING_EXACT`.
    pub keeping_keys: Option<Vec<ExactKey>>,
}

impl KernelPart {
    fn add(&mut self, k: &ExactKey, slot: u32, action: u16, drops: bool) {
        let a = action as usize;
        if self.per_action.len() <= a {
            self.per_action.resize(a + 1, 0);
        }
        self.per_action[a] += 1;
        if drops {
            // slots only grow: a new rule goes last, if the list is whole and has room
            if self.first_drops.len() == self.drops && self.drops < KERNEL_SAMPLE {
                self.first_drops.push((slot, *k));
            }
            self.drops += 1;
        } else {
            match &mut self.keeping_keys {
                Some(v) if self.keeping < crate::kernel::MAX_KEEPING_EXACT => v.push(*k),
                _ => self.keeping_keys = None,
            }
            self.keeping += 1;
        }
    }

    fn remove(&mut self, e: &Entry, drops: bool) {
        if let Some(n) = self.per_action.get_mut(e.action as usize) {
            *n = n.saturating_sub(1);
        }
        if drops {
            self.drops -= 1;
            if let Ok(i) = self.first_drops.binary_search_by_key(&e.slot, |d| d.0) {
                self.first_drops.remove(i);
            }
        } else {
            self.keeping -= 1;
            let k = e.key();
            if let Some(v) = &mut self.keeping_keys {
                if let Some(i) = v.iter().position(|x| *x == k) {
                    v.swap_remove(i);
                }
            }
        }
    }
}

/// The exact table: [`SHARDS`] shards, each shared between rule-set versions until changed.
#[derive(Clone)]
pub(crate) struct ExactTable {
    shards: Vec<Arc<Shard>>,
    len: usize,
    kernel: Arc<KernelPart>,
}

impl Default for ExactTable {
    fn default() -> Self {
        ExactTable {
            shards: (0..SHARDS).map(|_| Arc::new(Shard::default())).collect(),
            len: 0,
            kernel: Arc::new(KernelPart {
                keeping_keys: Some(Vec::new()),
                ..KernelPart::default()
            }),
        }
    }
}

impl ExactTable {
    /// Builds a table from `items` (`get(i, item)` giving the `i`th item's key, counter slot and
    /// action index, in ascending slot order), sizing every shard once; `drops` says which actions drop (for
    /// [`ExactTable::kernel_part`]). A large table is built on several threads (hashes in
    /// stretches of items, then shards in groups). On a duplicate key, returns the slots of
    /// the two rules (the duplicate of lowest slot).
    pub(crate) fn build<T: Sync>(
        items: &[T],
        get: impl Fn(usize, &T) -> (ExactKey, u32, u16) + Sync,
        drops: impl Fn(u16) -> bool,
    ) -> Result<Self, (u32, u32)> {
        let mut kernel = KernelPart {
            keeping_keys: Some(Vec::new()),
            ..KernelPart::default()
        };
        for (i, it) in items.iter().enumerate() {
            let (k, slot, action) = get(i, it);
            kernel.add(&k, slot, action, drops(action));
        }
        let threads = if items.len() >= 100_000 {
            std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 16))
        } else {
            1
        };
        let get = &get;
        // hashes, in stretches
        let mut hashes = vec![0u64; items.len()];
        let per = items.len().div_ceil(threads).max(1);
        std::thread::scope(|s| {
            for (c, (hs, its)) in hashes.chunks_mut(per).zip(items.chunks(per)).enumerate() {
                s.spawn(move || {
                    for (i, (h, it)) in hs.iter_mut().zip(its).enumerate() {
                        *h = hash_key(&get(c * per + i, it).0);
                    }
                });
            }
        });
        let mut counts = vec![0usize; SHARDS];
        for &h in &hashes {
            counts[shard_of(h)] += 1;
        }
        let mut shards: Vec<Shard> = counts
            .iter()
            .map(|&n| Shard {
                table: HashTable::with_capacity(n),
                slab: Vec::with_capacity(n),
            })
            .collect();
        // shards in groups, each thread filling its own (every thread reads every hash)
        let group = SHARDS.div_ceil(threads);
        let hashes = &hashes;
        let dups: Vec<Option<(u32, u32)>> = std::thread::scope(|s| {
            let jobs: Vec<_> = shards
                .chunks_mut(group)
                .enumerate()
                .map(|(g, mine)| {
                    s.spawn(move || {
                        let lo = g * group;
                        let hi = lo + mine.len();
                        for (i, (it, &h)) in items.iter().zip(hashes).enumerate() {
                            let sh = shard_of(h);
                            if sh < lo || sh >= hi {
                                continue;
                            }
                            let (k, slot, action) = get(i, it);
                            let s = &mut mine[sh - lo];
                            let slab = &s.slab;
                            match s.table.entry(
                                h,
                                |&i| slab[i as usize].is(&k),
                                |&i| hash_key(&slab[i as usize].key()),
                            ) {
                                hashbrown::hash_table::Entry::Occupied(o) => {
                                    return Some((slab[*o.get() as usize].slot, slot));
                                }
                                hashbrown::hash_table::Entry::Vacant(v) => {
                                    v.insert(slab.len() as u32);
                                }
                            }
                            s.slab.push(Entry::new(&k, slot, action));
                        }
                        None
                    })
                })
                .collect();
            jobs.into_iter()
                .map(|j| j.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });
        if let Some(d) = dups.into_iter().flatten().min_by_key(|d| d.1) {
            return Err(d);
        }
        let len = shards.iter().map(|s| s.slab.len()).sum();
        Ok(ExactTable {
            shards: shards.into_iter().map(Arc::new).collect(),
            len,
            kernel: Arc::new(kernel),
        })
    }

    /// Number of rules.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The rule for this conversation.
    #[inline]
    pub(crate) fn get(&self, k: &ExactKey) -> Option<&Entry> {
        let h = hash_key(k);
        self.shards[shard_of(h)].find(k, h)
    }

    /// Adds a rule (`drops`: its action drops); on a duplicate key returns the existing rule's
    /// slot. `slot` must be higher than every slot in the table. Copies the shard when another
    /// version still shares it.
    pub(crate) fn insert(
        &mut self,
        k: &ExactKey,
        slot: u32,
        action: u16,
        drops: bool,
    ) -> Result<(), u32> {
        let h = hash_key(k);
        let shard = &mut self.shards[shard_of(h)];
        if let Some(e) = shard.find(k, h) {
            return Err(e.slot);
        }
        Arc::make_mut(shard).insert(k, h, slot, action)?;
        Arc::make_mut(&mut self.kernel).add(k, slot, action, drops);
        self.len += 1;
        Ok(())
    }

    /// Removes the rule for this conversation, returning it; `drops` says which actions drop.
    pub(crate) fn remove(&mut self, k: &ExactKey, drops: impl Fn(u16) -> bool) -> Option<Entry> {
        let h = hash_key(k);
        let shard = &mut self.shards[shard_of(h)];
        shard.find(k, h)?;
        let e = Arc::make_mut(shard).remove(k, h)?;
        Arc::make_mut(&mut self.kernel).remove(&e, drops(e.action));
        self.len -= 1;
        Some(e)
    }

    /// The kernel's view of the table: counts per action, the first drop rules (at least
    /// `want` of them when there are that many, up to [`KERNEL_SAMPLE`]) and the keeping
    /// rules' keys (while few). Kept up to date on every change; walks the table only when
    /// removals ate into the kept lists. `drops` says which actions drop.
    pub(crate) fn kernel_part(&self, drops: impl Fn(u16) -> bool) -> Arc<KernelPart> {
        let k = &self.kernel;
        let short = k.first_drops.len() < k.drops.min(KERNEL_SAMPLE);
        let no_keys = k.keeping_keys.is_none() && k.keeping <= crate::kernel::MAX_KEEPING_EXACT;
        if !short && !no_keys {
            return Arc::clone(k);
        }
        let mut part = (**k).clone();
        if short {
            let mut all: Vec<(u32, ExactKey)> = self
                .iter()
                .filter(|e| drops(e.action))
                .map(|e| (e.slot, e.key()))
                .collect();
            let n = all.len().min(KERNEL_SAMPLE);
            if all.len() > n {
                all.select_nth_unstable_by_key(n, |d| d.0);
                all.truncate(n);
            }
            all.sort_unstable_by_key(|d| d.0);
            part.first_drops = all;
        }
        if no_keys {
            part.keeping_keys = Some(
                self.iter()
                    .filter(|e| !drops(e.action))
                    .map(|e| e.key())
                    .collect(),
            );
        }
        Arc::new(part)
    }

    /// Every rule, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.shards.iter().flat_map(|s| s.slab.iter())
    }

    /// Heap bytes held by the table (slabs, hash tables and the shard list).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.table.allocation_size()
                    + s.slab.capacity() * core::mem::size_of::<Entry>()
                    + core::mem::size_of::<Shard>()
            })
            .sum::<usize>()
            + self.shards.capacity() * core::mem::size_of::<Arc<Shard>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> ExactKey {
        ExactKey::new(4, 0xffff, 6, u128::from(i), 1000, 0x0a00_0001, 80)
    }

    #[test]
    fn entry_is_48_bytes() {
        assert_eq!(core::mem::size_of::<Entry>(), 48);
    }

    #[test]
    fn insert_get_remove_keep_the_table_consistent() {
        let mut t = ExactTable::default();
        for i in 0..5000 {
            t.insert(&key(i), i, 0, false).unwrap();
        }
        assert_eq!(t.insert(&key(7), 99, 0, false), Err(7));
        for i in (0..5000).step_by(3) {
            assert_eq!(t.remove(&key(i), |_| false).map(|e| e.slot), Some(i));
            assert!(t.remove(&key(i), |_| false).is_none());
        }
        for i in 0..5000 {
            let want = (i % 3 != 0).then_some(i);
            assert_eq!(t.get(&key(i)).map(|e| e.slot), want, "key {i}");
        }
        assert_eq!(t.len(), 5000 - 1667);
        // the reverse direction finds the same rule
        let rev = ExactKey::new(4, 0xffff, 6, 0x0a00_0001, 80, 1, 1000);
        assert_eq!(t.get(&rev).map(|e| e.slot), Some(1));
    }

    #[test]
    fn a_copy_does_not_see_later_changes() {
        let mut t = ExactTable::default();
        t.insert(&key(1), 1, 0, false).unwrap();
        let old = t.clone();
        t.insert(&key(2), 2, 0, false).unwrap();
        t.remove(&key(1), |_| false);
        assert_eq!(old.get(&key(1)).map(|e| e.slot), Some(1));
        assert!(old.get(&key(2)).is_none());
        assert_eq!(t.get(&key(2)).map(|e| e.slot), Some(2));
    }
}
