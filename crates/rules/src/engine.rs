//! The engine: a compiled rule-set version behind an [`ArcSwap`], per-thread [`Evaluator`]s
//! that decide packets, and live changes.
//!
//! # Versions
//!
//! A compiled rule set is immutable; every change (a reload, an exact rule added or removed)
//! builds a new version and swaps the pointer. An evaluator loads the pointer once per packet
//! (arc-swap's `Cache`: one atomic load when nothing changed), so each packet is decided under
//! exactly one version, whole. Versions share what did not change: an exact-rule change copies
//! one of the exact table's 256 shards, nothing else.
//!
//! # Order of evaluation
//!
//! 1. the exact table (a hit decides the packet: exact rules always stop);
//! 2. the flow's learnt action, if a `learn` action recorded one in this thread's flow table;
//! 3. the wildcard rules, by priority then position, through the tuple-space search: every
//!    matching rule is applied in turn until one that stops (the default). A rule's verdict
//!    replaces the verdict of the rules before it, its tag replaces theirs;
//! 4. when no rule set a verdict, the default (`default pass|drop`).
//!
//! Every rule reached and matching counts the packet and the packet's *final* outcome, so for
//! each rule `packets = passed + dropped + sliced + sampled_out`, and over the engine
//! `packets_in = passed + dropped + sliced + sampled_out`.
//!
//! # Per-thread state
//!
//! `sample N` counts per rule and thread; per-flow cutoff, pattern streams and learnt rules
//! live in the thread's bounded flow table. The capture path fans packets out by flow
//! (PACKET_FANOUT hashes both directions of a flow alike), so a flow's packets meet one
//! thread's state. When the table is full, the least recently seen eighth of it is evicted
//! (counted in `flow_evictions`); an evicted flow starts again from nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, Cache};
use hashbrown::HashMap;
use weir_filter::{Filter, FilterError};
use weir_packet::LinkType;

use crate::counters::{self, bump, LocalChunks, RuleStats, ThreadCounters, Totals};
use crate::exact::ExactTable;
use crate::fields::PacketFields;
use crate::parse::Prepared;
use crate::patterns::{Patterns, Stream};
use crate::rule::{Action, ExactKey, Match, Options, Rule, RuleId, RuleSet, Verdict, WildMatch};
use crate::wild::Tss;
use crate::Tag;

/// A rule set that could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A `bpf` expression libpcap refused.
    #[error("line {line}: bpf: {error}")]
    Bpf {
        /// Line of the rule.
        line: u32,
        /// libpcap's complaint.
        error: FilterError,
    },
    /// Two exact rules for the same conversation.
    #[error("line {line}: an exact rule for this conversation already exists (line {first})")]
    DuplicateExact {
        /// Line of the second rule (0 for a rule added at run time).
        line: u32,
        /// Line of the first (0 for a rule added at run time).
        first: u32,
    },
    /// Two rules with the same id.
    #[error("line {line}: rule id {id} is already used on line {first}")]
    DuplicateId {
        /// The id.
        id: RuleId,
        /// Line of the second rule.
        line: u32,
        /// Line of the first.
        first: u32,
    },
    /// More distinct exact-rule actions than the table can index.
    #[error("more than 65536 distinct actions among exact rules")]
    TooManyActions,
    /// The patterns could not be compiled.
    #[error("payload patterns: {0}")]
    Patterns(#[from] aho_corasick::BuildError),
    /// A live addition with an id some rule already has.
    #[error("rule id {0} is already used")]
    IdInUse(RuleId),
    /// A live removal of an id no rule has.
    #[error("no rule has id {0}")]
    NoSuchId(RuleId),
    /// A live removal of a conversation no exact rule holds.
    #[error("no exact rule for this conversation")]
    NoSuchKey,
}

/// What to do with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Keep it whole.
    Passed,
    /// Discard it.
    Dropped,
    /// Keep its first [`Decision::keep`] bytes.
    Sliced,
    /// Discard it: a `sample` action left it out.
    SampledOut,
}

/// The engine's answer for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// What to do.
    pub outcome: Outcome,
    /// Bytes to keep: the captured length when passed, less when sliced, 0 when discarded.
    pub keep: u32,
    /// The tag to store with the packet and its flow, if a rule set one.
    pub tag: Option<Tag>,
    /// The rule-set version that decided.
    pub version: u64,
}

impl Decision {
    /// True when the packet (or part of it) is kept.
    pub fn kept(&self) -> bool {
        matches!(self.outcome, Outcome::Passed | Outcome::Sliced)
    }
}

/// A wildcard rule, compiled.
pub(crate) struct WildRule {
    pub id: RuleId,
    /// Its priority (live additions are ranked by it).
    pub prio: i32,
    pub line: u32,
    pub slot: u32,
    pub m: WildMatch,
    pub bpf: Option<Filter>,
    pub action: Action,
    /// True when the rule has payload patterns (its hits are in the evaluator's stamps).
    pub has_payload: bool,
}

/// One immutable version of the rules.
pub(crate) struct Compiled {
    pub id: u64,
    pub options: Options,
    pub exact: ExactTable,
    /// Actions of exact rules, indexed by `Entry::action`; shared until an add brings a new one.
    pub exact_actions: Arc<Vec<Action>>,
    /// Wildcard rules by rank, their index and their patterns; shared by exact-only changes.
    pub wild: Arc<WildPart>,
    /// Any cutoff, learn or payload match: the flow table is needed.
    pub needs_flows: bool,
    /// Ids of the exact rules (by counter slot), for live edits and listings.
    pub exact_ids: Arc<ExactIds>,
}

pub(crate) struct WildPart {
    pub rules: Vec<WildRule>,
    pub tss: Tss,
    pub patterns: Option<Patterns>,
    /// The version that compiled this part: learnt flows and pattern streams belong to it and
    /// survive exact-rule changes.
    pub generation: u64,
}

struct Shared {
    current: Arc<ArcSwap<Compiled>>,
    /// Reloads of the rule file, whoever asked for them.
    reloads: Mutex<ReloadStats>,
    /// Serialises writers; holds the next free counter slot and the next version id.
    writer: Mutex<(u32, u64)>,
    link: LinkType,
    snaplen: u32,
    threads: Mutex<Vec<Arc<ThreadCounters>>>,
}

/// The rule engine: cheap to clone, `Send + Sync`; give each packet thread its own
/// [`Evaluator`].
#[derive(Clone)]
pub struct Engine(Arc<Shared>);

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("version", &self.version())
            .finish_non_exhaustive()
    }
}

/// Reloads of the rule file through [`Engine::reload_file`]: one count whoever asked (SIGHUP,
/// the control socket's `rules.reload`), and how long they took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadStats {
    /// Reloads that took effect.
    pub reloads: u64,
    /// Reloads that failed (the running set stayed).
    pub failed: u64,
    /// Wall time of the last reload that took effect: read, parse, compile and swap.
    pub last: Option<std::time::Duration>,
    /// The longest of them.
    pub longest: Option<std::time::Duration>,
    /// The wall times of the last [`ReloadStats::RECENT`] reloads that took effect, oldest
    /// first, in microseconds.
    pub recent_us: Vec<u64>,
}

impl ReloadStats {
    /// How many reload times [`ReloadStats::recent_us`] keeps.
    pub const RECENT: usize = 64;
}

/// An exact rule as listed by [`Engine::exact_rules`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExactRule {
    /// The conversation.
    pub key: ExactKey,
    /// Its action.
    pub action: Action,
    /// Its counters.
    pub stats: RuleStats,
}

/// A wildcard rule's counters, as listed by [`Engine::stats`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WildStats {
    /// Rule id.
    pub id: RuleId,
    /// Line in the file.
    pub line: u32,
    /// Counters.
    pub stats: RuleStats,
}

/// Counters of the engine and of the current version's rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// The version the rule counters are for.
    pub version: u64,
    /// Engine-wide totals (all versions).
    pub totals: Totals,
    /// Wildcard rules of the current version, in evaluation order.
    pub wild: Vec<WildStats>,
    /// Sum over the current version's exact rules.
    pub exact: RuleStats,
    /// Number of exact rules.
    pub exact_rules: usize,
}

/// Interns `a` in the exact-rule action table (rules in a row usually share their action, so
/// the last one is tried first).
fn intern(
    actions: &mut Vec<Action>,
    index: &mut HashMap<Action, u16>,
    a: &Action,
) -> Result<u16, BuildError> {
    if let Some(last) = actions.last() {
        if last == a {
            return Ok((actions.len() - 1) as u16);
        }
    }
    if let Some(&i) = index.get(a) {
        return Ok(i);
    }
    let i = u16::try_from(actions.len()).map_err(|_| BuildError::TooManyActions)?;
    actions.push(a.clone());
    index.insert(a.clone(), i);
    Ok(i)
}

fn uses_flows(a: &Action) -> bool {
    a.learn.is_some() || matches!(a.verdict, Some(Verdict::Cutoff { .. }))
}

impl Shared {
    fn compile(&self, set: Prepared, next_slot: &mut u32, id: u64) -> Result<Compiled, BuildError> {
        let Prepared {
            exact: items,
            actions,
            wild,
            options,
            ..
        } = set;
        // unique ids: ids default to line numbers, so they usually rise through the file and
        // are unique without more ado; otherwise a sorted copy finds the first one used twice
        let in_order = || {
            let mut e = items.iter().map(|i| (i.order, i.id, i.line)).peekable();
            let mut w = wild.iter().map(|(o, r)| (*o, r.id, r.line)).peekable();
            std::iter::from_fn(move || match (e.peek(), w.peek()) {
                (Some(a), Some(b)) if a.0 < b.0 => e.next(),
                (Some(_), Some(_)) => w.next(),
                (Some(_), None) => e.next(),
                (None, _) => w.next(),
            })
        };
        let mut prev: Option<RuleId> = None;
        let rising = in_order().all(|(_, id, _)| {
            let up = prev.is_none_or(|p| p < id);
            prev = Some(id);
            up
        });
        if !rising {
            let mut ids: Vec<(RuleId, u32)> = in_order().map(|(_, id, line)| (id, line)).collect();
            ids.sort_unstable();
            if let Some(w) = ids.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(BuildError::DuplicateId {
                    id: w[1].0,
                    line: w[1].1,
                    first: w[0].1,
                });
            }
        }
        if actions.len() > usize::from(u16::MAX) + 1 {
            return Err(BuildError::TooManyActions);
        }
        let first_slot = *next_slot;
        let exact_ids = Arc::new(ExactIds::of_ids(items.iter().map(|i| i.id), first_slot));
        let mut needs_flows = actions.iter().any(uses_flows);
        // exact rules: slots in file order, before the wildcard rules'
        let n_exact = items.len() as u32;
        let table = ExactTable::build(
            &items,
            |i, it| (it.key, first_slot + i as u32, it.action as u16),
            |a| crate::kernel::drops(&actions[a as usize]),
        )
        .map_err(|(first, second)| BuildError::DuplicateExact {
            line: items[(second - first_slot) as usize].line,
            first: items[(first - first_slot) as usize].line,
        })?;
        *next_slot += n_exact;
        drop(items);
        let mut wild: Vec<(i32, u32, RuleId, u32, Box<WildMatch>, Action)> = wild
            .into_iter()
            .filter_map(|(order, r)| match r.matcher {
                Match::Wild(m) => Some((r.prio, order, r.id, r.line, m, r.action)),
                Match::Exact(_) => None,
            })
            .collect();
        wild.sort_by_key(|w| (w.0, w.1));
        let mut rules = Vec::with_capacity(wild.len());
        let mut pats = Vec::new();
        for (rank, (prio, _, id, line, m, action)) in wild.into_iter().enumerate() {
            needs_flows |= uses_flows(&action) || !m.payload.is_empty();
            let bpf = match &m.bpf {
                Some(e) => Some(
                    Filter::compile(e, self.link, self.snaplen)
                        .map_err(|error| BuildError::Bpf { line, error })?,
                ),
                None => None,
            };
            for p in &m.payload {
                pats.push((p.clone(), rank as u32));
            }
            rules.push(WildRule {
                id,
                prio,
                line,
                slot: *next_slot,
                has_payload: !m.payload.is_empty(),
                m: *m,
                bpf,
                action,
            });
            *next_slot += 1;
        }
        let patterns = if pats.is_empty() {
            None
        } else {
            Some(Patterns::new(pats)?)
        };
        let tss = Tss::new(rules.iter().map(|r| &r.m));
        Ok(Compiled {
            id,
            options,
            exact: table,
            exact_actions: Arc::new(actions),
            wild: Arc::new(WildPart {
                rules,
                tss,
                patterns,
                generation: id,
            }),
            needs_flows,
            exact_ids,
        })
    }

    fn blocks(&self) -> Vec<Arc<ThreadCounters>> {
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Lets go of a replaced version. A large one is freed on a thread of its own once the packet
/// threads' cached references are gone (they move to the new version at their next packet;
/// an idle thread may keep it, then it is freed wherever the last reference goes, after
/// [`RELEASE_WAIT`]); a small one, or one whose thread cannot start, is freed here.
fn release(old: Arc<Compiled>) {
    if old.exact.len() < 10_000 {
        return;
    }
    // if the thread cannot start, the closure, and the version with it, is dropped here
    let spawned = std::thread::Builder::new()
        .name("weir-rules-free".into())
        .spawn(move || {
            let t = std::time::Instant::now();
            while Arc::strong_count(&old) > 1 && t.elapsed() < RELEASE_WAIT {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            drop(old);
        });
    drop(spawned);
}

/// How long [`release`] waits for the packet threads to let go of a replaced version.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Engine {
    /// Compiles `set` for packets of link type `link` captured with `snaplen` (both matter to
    /// BPF matches only).
    pub fn new(set: RuleSet, link: LinkType, snaplen: u32) -> Result<Engine, BuildError> {
        let empty = Compiled {
            id: 0,
            options: Options::default(),
            exact: ExactTable::default(),
            exact_actions: Arc::new(Vec::new()),
            wild: Arc::new(WildPart {
                rules: Vec::new(),
                tss: Tss::new(std::iter::empty()),
                patterns: None,
                generation: 0,
            }),
            needs_flows: false,
            exact_ids: Arc::default(),
        };
        let shared = Shared {
            current: Arc::new(ArcSwap::from_pointee(empty)),
            writer: Mutex::new((0, 1)),
            reloads: Mutex::new(ReloadStats::default()),
            link,
            snaplen,
            threads: Mutex::new(Vec::new()),
        };
        let e = Engine(Arc::new(shared));
        e.replace(set)?;
        Ok(e)
    }

    /// Replaces the whole rule set (a reload): compiled aside, then swapped in at once. The new
    /// rules get fresh counters; the engine totals go on. Returns the new version.
    pub fn replace(&self, set: RuleSet) -> Result<u64, BuildError> {
        self.replace_prepared(Prepared::of_set(set))
    }

    /// [`Engine::replace`] from the compact form. The old version is let go on a thread of its
    /// own, so that freeing a million-rule table costs neither the caller nor (when that thread
    /// holds the last reference) a packet thread.
    fn replace_prepared(&self, set: Prepared) -> Result<u64, BuildError> {
        let mut w = self.0.writer.lock().unwrap_or_else(|e| e.into_inner());
        let (mut slot, id) = *w;
        let c = self.0.compile(set, &mut slot, id)?;
        let old = self.0.current.swap(Arc::new(c));
        *w = (slot, id + 1);
        drop(w);
        release(old);
        Ok(id)
    }

    /// Reads the rule file `path` again and swaps the new set in whole (each packet is decided
    /// under one version); returns the new version. On error the running set stays. Either way
    /// the reload is counted once in [`Engine::reload_stats`], with its time when it took
    /// effect. Exact rules go from the file's lines straight into the compact form the table
    /// is built from (no [`Rule`] per line).
    pub fn reload_file(&self, path: &std::path::Path) -> Result<u64, crate::FileError> {
        let t = std::time::Instant::now();
        let swapped = crate::file::load_prepared(path).and_then(|set| {
            self.replace_prepared(set)
                .map_err(|source| crate::FileError::Build {
                    path: path.to_path_buf(),
                    source,
                })
        });
        let took = t.elapsed();
        let mut r = self.0.reloads.lock().unwrap_or_else(|e| e.into_inner());
        match &swapped {
            Ok(_) => {
                r.reloads += 1;
                r.last = Some(took);
                r.longest = r.longest.max(Some(took));
                if r.recent_us.len() == ReloadStats::RECENT {
                    r.recent_us.remove(0);
                }
                r.recent_us
                    .push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
            }
            Err(_) => r.failed += 1,
        }
        swapped
    }

    /// The reloads of the rule file so far ([`Engine::reload_file`]).
    pub fn reload_stats(&self) -> ReloadStats {
        self.0
            .reloads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn edit<T>(
        &self,
        f: impl FnOnce(&mut Compiled, &mut u32) -> Result<T, BuildError>,
    ) -> Result<T, BuildError> {
        let mut w = self.0.writer.lock().unwrap_or_else(|e| e.into_inner());
        let (mut slot, id) = *w;
        let cur = self.0.current.load_full();
        let mut next = Compiled {
            id,
            options: cur.options.clone(),
            exact: cur.exact.clone(),
            exact_actions: Arc::clone(&cur.exact_actions),
            wild: Arc::clone(&cur.wild),
            needs_flows: cur.needs_flows,
            exact_ids: Arc::clone(&cur.exact_ids),
        };
        drop(cur);
        let out = f(&mut next, &mut slot)?;
        self.0.current.store(Arc::new(next));
        *w = (slot, id + 1);
        Ok(out)
    }

    /// Adds exact rules at run time, in one new version. Fails (and changes nothing) if one of
    /// them is already there.
    pub fn add_exact(&self, rules: &[(ExactKey, Action)]) -> Result<u64, BuildError> {
        self.edit(|c, slot| {
            c.needs_flows |= rules.iter().any(|(_, a)| uses_flows(a));
            let mut actions = (*c.exact_actions).clone();
            let mut index: HashMap<Action, u16> = actions
                .iter()
                .enumerate()
                .map(|(i, a)| (a.clone(), i as u16))
                .collect();
            let before = actions.len();
            for (k, a) in rules {
                let ai = intern(&mut actions, &mut index, a)?;
                if c.exact
                    .insert(k, *slot, ai, crate::kernel::drops(a))
                    .is_err()
                {
                    return Err(BuildError::DuplicateExact { line: 0, first: 0 });
                }
                *slot += 1;
            }
            if actions.len() != before {
                c.exact_actions = Arc::new(actions);
            }
            Ok(c.id)
        })
    }

    /// Removes exact rules at run time, in one new version. Returns how many were there.
    pub fn del_exact(&self, keys: &[ExactKey]) -> u64 {
        self.edit(|c, _| {
            let acts = Arc::clone(&c.exact_actions);
            let drops = |a: u16| crate::kernel::drops(&acts[a as usize]);
            Ok(keys
                .iter()
                .filter(|k| c.exact.remove(k, drops).is_some())
                .count() as u64)
        })
        .unwrap_or(0)
    }

    /// The current version.
    pub fn version(&self) -> u64 {
        self.0.current.load().id
    }

    /// Number of exact rules, and the heap bytes of their table.
    pub fn exact_size(&self) -> (usize, usize) {
        let c = self.0.current.load();
        (c.exact.len(), c.exact.memory_bytes())
    }

    /// Heap bytes of the payload-pattern automaton (0 without patterns).
    pub fn pattern_memory_bytes(&self) -> usize {
        let c = self.0.current.load();
        c.wild.patterns.as_ref().map_or(0, |p| p.memory_bytes())
    }

    /// Number of wildcard rules and of tuples in their search structure.
    pub fn wild_size(&self) -> (usize, usize) {
        let c = self.0.current.load();
        (c.wild.rules.len(), c.wild.tss.tuples())
    }

    /// A new evaluator for one packet thread, with its own counter block and flow table.
    pub fn evaluator(&self) -> Evaluator {
        let block = Arc::new(ThreadCounters::default());
        self.0
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::clone(&block));
        Evaluator {
            cache: Cache::new(Arc::clone(&self.0.current)),
            st: State {
                chunks: LocalChunks::new(block),
                version: u64::MAX,
                pkt: 0,
                seen: Vec::new(),
                hit: Vec::new(),
                hit_list: Vec::new(),
                cand: Vec::with_capacity(16),
                applied: Vec::with_capacity(16),
                samples: HashMap::new(),
                flows: HashMap::new(),
            },
        }
    }

    /// Engine totals and the current version's rule counters, summed over threads.
    pub fn stats(&self) -> Stats {
        let blocks = self.0.blocks();
        let c = self.0.current.load_full();
        let wild = c
            .wild
            .rules
            .iter()
            .map(|r| WildStats {
                id: r.id,
                line: r.line,
                stats: counters::rule_stats(&blocks, r.slot),
            })
            .collect();
        let mut exact = RuleStats::default();
        for e in c.exact.iter() {
            let s = counters::rule_stats(&blocks, e.slot);
            exact.packets += s.packets;
            exact.bytes += s.bytes;
            exact.passed += s.passed;
            exact.dropped += s.dropped;
            exact.sliced += s.sliced;
            exact.sampled_out += s.sampled_out;
        }
        Stats {
            version: c.id,
            totals: counters::totals(&blocks),
            wild,
            exact,
            exact_rules: c.exact.len(),
        }
    }

    /// Engine totals only (cheap).
    pub fn totals(&self) -> Totals {
        counters::totals(&self.0.blocks())
    }

    /// The current version's exact rules with their counters.
    pub fn exact_rules(&self) -> Vec<ExactRule> {
        let blocks = self.0.blocks();
        let c = self.0.current.load_full();
        c.exact
            .iter()
            .map(|e| ExactRule {
                key: e.key(),
                action: c.exact_actions[e.action as usize].clone(),
                stats: counters::rule_stats(&blocks, e.slot),
            })
            .collect()
    }
}

/// One flow's state in an evaluator's table.
struct FlowState {
    /// Packet number when last seen (for eviction).
    last: u64,
    /// Wildcard generation the pattern streams belong to.
    version: u64,
    /// Bytes and packets that reached a cutoff action.
    cut_bytes: u64,
    cut_packets: u64,
    /// Pattern streams: [lower endpoint → higher, higher → lower].
    streams: [Option<Stream>; 2],
    /// `learn`t action: (wildcard generation, slot of the learning rule, action).
    learned: Option<(u64, u32, Arc<Action>)>,
}

/// Decides packets for one thread. `Send`, not meant to be shared: one per thread.
pub struct Evaluator {
    cache: Cache<Arc<ArcSwap<Compiled>>, Arc<Compiled>>,
    st: State,
}

/// An evaluator's own state.
struct State {
    chunks: LocalChunks,
    /// Wildcard generation `seen` and `hit` are sized for.
    version: u64,
    pkt: u64,
    /// Per wildcard rank: packet number of the last successful full-match check (so a rule
    /// filed twice in the tuple space is taken once).
    seen: Vec<u64>,
    /// Per wildcard rank: packet number of the last pattern hit.
    hit: Vec<u64>,
    /// Ranks of the rules whose patterns hit in this packet.
    hit_list: Vec<u32>,
    cand: Vec<u32>,
    /// The wildcard rules applied to the current packet: (slot, rank).
    applied: Vec<(u32, u32)>,
    /// Per slot: `sample` counters.
    samples: HashMap<u32, u32>,
    flows: HashMap<ExactKey, FlowState>,
}

/// The verdict being built for one packet.
struct Acc {
    outcome: Option<Outcome>,
    keep: u32,
    tag: Option<Tag>,
    cut: bool,
}

impl Evaluator {
    /// Decides one packet: `f` its fields, `bytes` its captured bytes.
    #[inline]
    pub fn eval(&mut self, f: &PacketFields, bytes: &[u8]) -> Decision {
        let c = self.cache.load();
        self.st.eval(c, f, bytes)
    }

    /// Packets this evaluator has decided.
    pub fn packets(&self) -> u64 {
        self.st.pkt
    }

    /// Flows in this evaluator's flow table.
    pub fn flows(&self) -> usize {
        self.st.flows.len()
    }
}

impl State {
    fn eval(&mut self, c: &Compiled, f: &PacketFields, bytes: &[u8]) -> Decision {
        self.pkt += 1;
        let pkt = self.pkt;
        if c.wild.generation != self.version {
            self.version = c.wild.generation;
            self.seen = vec![0; c.wild.rules.len()];
            self.hit = vec![0; c.wild.rules.len()];
        }
        {
            let t = &self.chunks.block.totals;
            bump(&t.packets_in, 1);
            bump(&t.bytes_in, u64::from(f.cap_len));
        }
        let key = ExactKey::of(f);
        self.hit_list.clear();
        let wild = &*c.wild;
        let opts = &c.options;
        let mut acc = Acc {
            outcome: None,
            keep: f.cap_len,
            tag: None,
            cut: false,
        };

        // flow state: pattern streams advance on every packet of the flow
        if let (true, Some(k)) = (c.needs_flows, key) {
            self.touch_flow(k, opts.flows, pkt);
            if let Some(p) = &wild.patterns {
                let fl = self.flows.get_mut(&k).expect("flow just touched");
                if fl.version != wild.generation {
                    fl.version = wild.generation;
                    fl.streams = [None, None];
                }
                let dir = usize::from((f.src, f.sport) > (f.dst, f.dport));
                let s = fl.streams[dir].get_or_insert_with(|| p.stream());
                let payload = f.payload_bytes(bytes);
                let tcp = f.is_tcp.then_some((f.tcp_seq, f.tcp_flags));
                let (hit, hit_list) = (&mut self.hit, &mut self.hit_list);
                let (n, reset) = p.feed(s, payload, tcp, opts.scan_limit, |i| {
                    let r = p.owner[i as usize];
                    if hit[r as usize] != pkt {
                        hit[r as usize] = pkt;
                        hit_list.push(r);
                    }
                });
                let t = &self.chunks.block.totals;
                bump(&t.scanned_bytes, u64::from(n));
                if reset {
                    bump(&t.stream_resets, 1);
                }
            }
        }

        // 1. exact table
        if let Some(k) = key {
            if let Some(e) = c.exact.get(&k) {
                let a = &c.exact_actions[e.action as usize];
                self.apply(
                    f,
                    key,
                    e.slot,
                    a,
                    &mut acc,
                    opts.flows,
                    pkt,
                    wild.generation,
                );
                return self.finish(f, c, &[e.slot], acc);
            }
        }
        // 2. learnt flows
        if let (true, Some(k)) = (c.needs_flows, key) {
            let learned = self.flows.get(&k).and_then(|fl| fl.learned.clone());
            if let Some((v, slot, a)) = learned {
                if v == wild.generation {
                    self.apply(f, key, slot, &a, &mut acc, opts.flows, pkt, v);
                    return self.finish(f, c, &[slot], acc);
                }
            }
        }
        // 3. wildcard rules
        let mut applied = std::mem::take(&mut self.applied);
        applied.clear();
        if !wild.rules.is_empty() {
            let seen = &mut self.seen;
            let hit = &self.hit;
            let mut cand = std::mem::take(&mut self.cand);
            wild.tss.lookup(
                f,
                &self.hit_list,
                |r| {
                    let i = r as usize;
                    if seen[i] == pkt {
                        return true;
                    }
                    let w = &wild.rules[i];
                    let ok = w.m.header_matches(f)
                        && w.m.bytes.iter().all(|b| b.matches(f, bytes))
                        && (!w.has_payload || hit[i] == pkt)
                        && w.bpf.as_ref().is_none_or(|b| b.matches(bytes, f.wire_len));
                    if ok {
                        seen[i] = pkt;
                    }
                    ok
                },
                |r| wild.rules[r as usize].action.stop,
                &mut cand,
            );
            applied.extend(cand.iter().map(|&r| (wild.rules[r as usize].slot, r)));
            self.cand = cand;
        }
        for &(slot, r) in &applied {
            let a = &wild.rules[r as usize].action;
            self.apply(f, key, slot, a, &mut acc, opts.flows, pkt, wild.generation);
        }
        let d = {
            let slots = &mut self.cand;
            slots.clear();
            slots.extend(applied.iter().map(|a| a.0));
            let slots = std::mem::take(slots);
            let d = self.finish(f, c, &slots, acc);
            self.cand = slots;
            d
        };
        self.applied = applied;
        d
    }

    /// Applies one rule's action to the verdict being built.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        f: &PacketFields,
        key: Option<ExactKey>,
        slot: u32,
        a: &Action,
        acc: &mut Acc,
        flows: u32,
        pkt: u64,
        version: u64,
    ) {
        if let Some(t) = a.tag {
            acc.tag = Some(t);
        }
        if let Some(l) = &a.learn {
            acc.outcome = Some(Outcome::Passed);
            acc.keep = f.cap_len;
            acc.cut = false;
            if let Some(k) = key {
                self.touch_flow(k, flows, pkt);
                let fl = self.flows.get_mut(&k).expect("flow just touched");
                if fl.learned.as_ref().is_none_or(|l| l.0 != version) {
                    bump(&self.chunks.block.totals.learned, 1);
                }
                fl.learned = Some((version, slot, Arc::new((**l).clone())));
            }
            return;
        }
        let Some(v) = a.verdict else {
            return;
        };
        acc.cut = false;
        match v {
            Verdict::Pass => {
                acc.outcome = Some(Outcome::Passed);
                acc.keep = f.cap_len;
            }
            Verdict::Drop => {
                acc.outcome = Some(Outcome::Dropped);
                acc.keep = 0;
            }
            Verdict::Slice(s) => {
                let keep = s.keep(f);
                acc.keep = keep;
                acc.outcome = Some(if keep < f.cap_len {
                    Outcome::Sliced
                } else {
                    Outcome::Passed
                });
            }
            Verdict::Sample(n) => {
                let c = self.samples.entry(slot).or_insert(0);
                let keep = *c == 0;
                *c = if *c + 1 >= n { 0 } else { *c + 1 };
                acc.outcome = Some(if keep {
                    Outcome::Passed
                } else {
                    Outcome::SampledOut
                });
                acc.keep = if keep { f.cap_len } else { 0 };
            }
            Verdict::Cutoff { bytes, packets } => {
                let Some(k) = key else {
                    // no flow to count against: keep it
                    acc.outcome = Some(Outcome::Passed);
                    acc.keep = f.cap_len;
                    return;
                };
                self.touch_flow(k, flows, pkt);
                let fl = self.flows.get_mut(&k).expect("flow just touched");
                let (b0, p0) = (fl.cut_bytes, fl.cut_packets);
                fl.cut_bytes += u64::from(f.cap_len);
                fl.cut_packets += 1;
                if p0 >= packets || b0 >= bytes {
                    acc.outcome = Some(Outcome::Dropped);
                    acc.keep = 0;
                    acc.cut = true;
                } else if b0 + u64::from(f.cap_len) > bytes {
                    acc.keep = (bytes - b0) as u32;
                    acc.outcome = Some(Outcome::Sliced);
                    acc.cut = true;
                } else {
                    acc.outcome = Some(Outcome::Passed);
                    acc.keep = f.cap_len;
                }
            }
        }
    }

    /// Makes sure `k` has a flow entry, evicting the least recently seen eighth of a full table.
    fn touch_flow(&mut self, k: ExactKey, cap: u32, pkt: u64) {
        if let Some(fl) = self.flows.get_mut(&k) {
            fl.last = pkt;
            return;
        }
        if self.flows.len() >= cap as usize {
            let mut ages: Vec<u64> = self.flows.values().map(|f| f.last).collect();
            let n = (ages.len() / 8).max(1);
            let (_, &mut cut, _) = ages.select_nth_unstable(n - 1);
            let before = self.flows.len();
            self.flows.retain(|_, f| f.last > cut);
            bump(
                &self.chunks.block.totals.flow_evictions,
                (before - self.flows.len()) as u64,
            );
        }
        self.flows.insert(
            k,
            FlowState {
                last: pkt,
                version: self.version,
                cut_bytes: 0,
                cut_packets: 0,
                streams: [None, None],
                learned: None,
            },
        );
    }

    /// Settles the verdict and counts it for every rule applied.
    fn finish(&mut self, f: &PacketFields, c: &Compiled, slots: &[u32], acc: Acc) -> Decision {
        let (outcome, keep) = match acc.outcome {
            Some(o) => (o, acc.keep),
            None if c.options.default_drop => (Outcome::Dropped, 0),
            None => (Outcome::Passed, f.cap_len),
        };
        let t = &self.chunks.block.totals;
        if slots.is_empty() {
            bump(&t.unmatched, 1);
        }
        match outcome {
            Outcome::Passed => bump(&t.passed, 1),
            Outcome::Dropped => bump(&t.dropped, 1),
            Outcome::Sliced => bump(&t.sliced, 1),
            Outcome::SampledOut => bump(&t.sampled_out, 1),
        }
        if acc.cut && acc.outcome.is_some() {
            if outcome == Outcome::Dropped {
                bump(&t.cut, 1);
            }
            bump(&t.cut_bytes, u64::from(f.cap_len - keep));
        }
        for &s in slots {
            let cell = self.chunks.cell(s);
            bump(&cell.packets, 1);
            bump(&cell.bytes, u64::from(f.cap_len));
            bump(
                match outcome {
                    Outcome::Passed => &cell.passed,
                    Outcome::Dropped => &cell.dropped,
                    Outcome::Sliced => &cell.sliced,
                    Outcome::SampledOut => &cell.sampled_out,
                },
                1,
            );
        }
        Decision {
            outcome,
            keep,
            tag: acc.tag,
            version: c.id,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Live edits of single rules and listings (the control socket, weir-control): every edit builds
// a new version, like `replace`, but keeps the counter slots of the rules that stay.

/// Ids of a version's exact rules, kept as runs of consecutive ids on consecutive counter slots:
/// a file's exact rules get consecutive slots, and their ids (the line numbers by default)
/// mostly run on too, so a million ids cost a few runs. An id whose rule left the table through
/// [`Engine::del_exact`] stays here; lookups check the table.
#[derive(Clone, Debug, Default)]
pub(crate) struct ExactIds {
    /// First id of a run → (its first slot, its length).
    runs: BTreeMap<RuleId, (u32, u32)>,
}

impl ExactIds {
    /// The ids of a version's exact rules, whose slots start at `first_slot` in file order.
    fn of_ids(exact: impl Iterator<Item = RuleId>, first_slot: u32) -> ExactIds {
        let mut ids = ExactIds::default();
        let mut last: Option<(RuleId, u32, u32)> = None; // run being built
        for (slot, id) in (first_slot..).zip(exact) {
            last = match last {
                Some((id0, s0, n)) if id.checked_sub(n) == Some(id0) => Some((id0, s0, n + 1)),
                Some((id0, s0, n)) => {
                    ids.runs.insert(id0, (s0, n));
                    Some((id, slot, 1))
                }
                None => Some((id, slot, 1)),
            };
        }
        if let Some((id0, s0, n)) = last {
            ids.runs.insert(id0, (s0, n));
        }
        ids
    }

    /// The slot of id `id`.
    fn slot(&self, id: RuleId) -> Option<u32> {
        let (&id0, &(s0, n)) = self.runs.range(..=id).next_back()?;
        (id - id0 < n).then_some(s0 + (id - id0))
    }

    /// The id of slot `slot`.
    fn id_of(&self, slot: u32) -> Option<RuleId> {
        self.runs
            .iter()
            .find(|(_, &(s0, n))| slot >= s0 && slot - s0 < n)
            .map(|(&id0, &(s0, _))| id0 + (slot - s0))
    }

    fn insert(&mut self, id: RuleId, slot: u32) {
        self.runs.insert(id, (slot, 1));
    }

    /// Forgets `id` (splitting its run).
    fn remove(&mut self, id: RuleId) {
        let Some((&id0, &(s0, n))) = self.runs.range(..=id).next_back() else {
            return;
        };
        let k = id - id0;
        if k >= n {
            return;
        }
        self.runs.remove(&id0);
        if k > 0 {
            self.runs.insert(id0, (s0, k));
        }
        if k + 1 < n {
            self.runs.insert(id + 1, (s0 + k + 1, n - k - 1));
        }
    }

    fn max(&self) -> Option<RuleId> {
        self.runs
            .iter()
            .next_back()
            .map(|(&id0, &(_, n))| id0 + (n - 1))
    }

    /// Runs sorted by slot: (first slot, length, first id).
    fn by_slot(&self) -> Vec<(u32, u32, RuleId)> {
        let mut v: Vec<_> = self.runs.iter().map(|(&i, &(s, n))| (s, n, i)).collect();
        v.sort_unstable();
        v
    }
}

/// One version's rules as the kernel socket filter sees them ([`Engine::kernel_view`]).
pub struct KernelView {
    c: Arc<Compiled>,
    part: Arc<crate::exact::KernelPart>,
}

impl std::fmt::Debug for KernelView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelView")
            .field("version", &self.c.id)
            .field("exact_drops", &self.part.drops)
            .finish_non_exhaustive()
    }
}

impl KernelView {
    /// The version.
    pub fn version(&self) -> u64 {
        self.c.id
    }

    /// Exact rules that drop, all of them.
    pub fn exact_drop_rules(&self) -> usize {
        self.part.drops
    }

    /// The drop rules the kernel can run, at most `limit` of them, for a capture with snap
    /// length `snaplen`: [`kernel_drops_snap`](crate::kernel_drops_snap) of this version,
    /// except that past the first 1024 exact drop rules (in the order they came in) none is
    /// examined (they are counted in `unlisted`).
    pub fn drops(&self, limit: usize, snaplen: u32) -> crate::KernelDrops {
        let c = &self.c;
        let p = &self.part;
        let runs = c.exact_ids.by_slot();
        let id_of = |slot: u32| -> RuleId {
            runs.partition_point(|r| r.0 <= slot)
                .checked_sub(1)
                .map(|i| runs[i])
                .filter(|&(s0, n, _)| slot - s0 < n)
                .map_or(0, |(s0, _, id0)| id0 + (slot - s0))
        };
        let exact_drops: Vec<(RuleId, ExactKey)> =
            p.first_drops.iter().map(|&(s, k)| (id_of(s), k)).collect();
        let any_learn = p
            .per_action
            .iter()
            .zip(c.exact_actions.iter())
            .any(|(&n, a)| n > 0 && a.learn.is_some())
            || c.wild.rules.iter().any(|r| r.action.learn.is_some());
        let wild: Vec<crate::kernel::WildIn<'_>> = c
            .wild
            .rules
            .iter()
            .map(|r| crate::kernel::WildIn {
                id: r.id,
                m: &r.m,
                action: &r.action,
            })
            .collect();
        crate::kernel::drops_of(&crate::kernel::Input {
            exact_drops: &exact_drops,
            exact_drop_total: p.drops,
            keeping: p.keeping_keys.as_deref(),
            keeping_total: p.keeping,
            any_learn,
            default_drop: c.options.default_drop,
            wild: &wild,
            limit,
            snaplen,
        })
    }
}

/// A rule of the current version, as listed by [`Engine::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedRule {
    /// The rule (`line` 0 for a rule added at run time). An exact rule added through
    /// [`Engine::add_exact`] has no id: its `id` is 0 and `has_id` false.
    pub rule: Rule,
    /// False for an exact rule added without an id.
    pub has_id: bool,
    /// Its counters.
    pub stats: RuleStats,
}

/// The current version's rules, as listed by [`Engine::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    /// The version listed.
    pub version: u64,
    /// Set-wide options.
    pub options: Options,
    /// Wildcard rules in evaluation order.
    pub wild: Vec<ListedRule>,
    /// Exact rules (at most the limit asked for), by counter slot (the order they came in).
    pub exact: Vec<ListedRule>,
    /// Number of exact rules in the version.
    pub exact_total: usize,
}

impl Engine {
    /// Adds one rule at run time, in one new version; the other rules keep their counters.
    /// An exact rule goes into the exact table (sharing every untouched shard); a wildcard rule
    /// rebuilds the wildcard part (tuple space, patterns) with the rule ranked by its `prio`,
    /// after the rules of the same priority, as a new last line would be: as with
    /// [`replace`](Self::replace), flows learnt and pattern streams start again. With `auto_id`
    /// the rule gets the highest id in use plus one, else its own id, which must be free.
    /// Returns the new version and the rule's id.
    pub fn add_rule(&self, rule: Rule, auto_id: bool) -> Result<(u64, RuleId), BuildError> {
        self.edit(|c, slot| {
            let id = if auto_id {
                let wild_max = c.wild.rules.iter().map(|r| r.id).max();
                wild_max
                    .max(c.exact_ids.max())
                    .map_or(1, |m| m.saturating_add(1))
            } else {
                rule.id
            };
            if id_in_use(c, id) {
                return Err(BuildError::IdInUse(id));
            }
            match rule.matcher {
                Match::Exact(k) => {
                    c.needs_flows |= uses_flows(&rule.action);
                    let mut actions = (*c.exact_actions).clone();
                    let mut index: HashMap<Action, u16> = actions
                        .iter()
                        .enumerate()
                        .map(|(i, a)| (a.clone(), i as u16))
                        .collect();
                    let before = actions.len();
                    let ai = intern(&mut actions, &mut index, &rule.action)?;
                    let drops = crate::kernel::drops(&rule.action);
                    if c.exact.insert(&k, *slot, ai, drops).is_err() {
                        return Err(BuildError::DuplicateExact { line: 0, first: 0 });
                    }
                    if actions.len() != before {
                        c.exact_actions = Arc::new(actions);
                    }
                    let mut ids = (*c.exact_ids).clone();
                    ids.remove(id); // a stale id left by del_exact
                    ids.insert(id, *slot);
                    c.exact_ids = Arc::new(ids);
                    *slot += 1;
                }
                Match::Wild(m) => {
                    let at = c.wild.rules.partition_point(|r| r.prio <= rule.prio);
                    let bpf = match &m.bpf {
                        Some(e) => Some(Filter::compile(e, self.0.link, self.0.snaplen).map_err(
                            |error| BuildError::Bpf {
                                line: rule.line,
                                error,
                            },
                        )?),
                        None => None,
                    };
                    let new = WildRule {
                        id,
                        prio: rule.prio,
                        line: rule.line,
                        slot: *slot,
                        has_payload: !m.payload.is_empty(),
                        m: *m,
                        bpf,
                        action: rule.action,
                    };
                    *slot += 1;
                    let mut rules: Vec<WildRule> = Vec::with_capacity(c.wild.rules.len() + 1);
                    rules.extend(c.wild.rules[..at].iter().map(clone_wild));
                    rules.push(new);
                    rules.extend(c.wild.rules[at..].iter().map(clone_wild));
                    rebuild_wild(c, rules)?;
                }
            }
            Ok((c.id, id))
        })
    }

    /// Removes the rule with id `id` (exact or wildcard) at run time, in one new version.
    /// Returns the new version.
    pub fn del_rule(&self, id: RuleId) -> Result<u64, BuildError> {
        self.edit(|c, _| {
            if let Some(at) = c.wild.rules.iter().position(|r| r.id == id) {
                let rules = c
                    .wild
                    .rules
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != at)
                    .map(|(_, r)| clone_wild(r))
                    .collect();
                rebuild_wild(c, rules)?;
                return Ok(c.id);
            }
            let slot = c.exact_ids.slot(id).ok_or(BuildError::NoSuchId(id))?;
            let key = c
                .exact
                .iter()
                .find(|e| e.slot == slot)
                .map(|e| e.key())
                .ok_or(BuildError::NoSuchId(id))?;
            let acts = Arc::clone(&c.exact_actions);
            c.exact
                .remove(&key, |a| crate::kernel::drops(&acts[a as usize]));
            let mut ids = (*c.exact_ids).clone();
            ids.remove(id);
            c.exact_ids = Arc::new(ids);
            Ok(c.id)
        })
    }

    /// Removes the exact rule of conversation `key` at run time, in one new version. Returns
    /// the new version and the rule's id, if it had one.
    pub fn del_key(&self, key: &ExactKey) -> Result<(u64, Option<RuleId>), BuildError> {
        self.edit(|c, _| {
            let acts = Arc::clone(&c.exact_actions);
            let e = c
                .exact
                .remove(key, |a| crate::kernel::drops(&acts[a as usize]))
                .ok_or(BuildError::NoSuchKey)?;
            let id = c.exact_ids.id_of(e.slot);
            if let Some(id) = id {
                let mut ids = (*c.exact_ids).clone();
                ids.remove(id);
                c.exact_ids = Arc::new(ids);
            }
            Ok((c.id, id))
        })
    }

    /// The current version's rules as a rule set: exact rules (in the order they came in; one
    /// added without an id has id 0), then wildcard rules in evaluation order.
    pub fn rule_set(&self) -> RuleSet {
        let l = self.list(usize::MAX);
        RuleSet {
            rules: l.exact.into_iter().chain(l.wild).map(|r| r.rule).collect(),
            options: l.options,
        }
    }

    /// The current version's drop rules that the kernel socket filter can run, at most
    /// `limit` of them: see [`kernel_drops`](crate::kernel_drops).
    pub fn kernel_drops(&self, limit: usize) -> crate::KernelDrops {
        self.kernel_view().drops(limit, crate::WHOLE_PACKET)
    }

    /// [`kernel_drops_snap`](crate::kernel_drops_snap) of the current version.
    pub fn kernel_drops_snap(&self, limit: usize, snaplen: u32) -> crate::KernelDrops {
        self.kernel_view().drops(limit, snaplen)
    }

    /// The current version, as the kernel's share of the rules sees it: its drop rules come
    /// from what the exact table keeps apart (the first drop rules, the keeping rules while
    /// few), so the cost does not grow with the number of exact rules.
    pub fn kernel_view(&self) -> KernelView {
        let c = self.0.current.load_full();
        let acts = Arc::clone(&c.exact_actions);
        let part = c
            .exact
            .kernel_part(|a| crate::kernel::drops(&acts[a as usize]));
        KernelView { c, part }
    }

    /// The current version's set-wide options.
    pub fn options(&self) -> Options {
        self.0.current.load().options.clone()
    }

    /// The current version's rules with their counters: every wildcard rule, and the first
    /// `exact_limit` exact rules (a million exact rules are listed only when asked for).
    pub fn list(&self, exact_limit: usize) -> Listing {
        let blocks = self.0.blocks();
        let c = self.0.current.load_full();
        let wild = c
            .wild
            .rules
            .iter()
            .map(|r| ListedRule {
                rule: Rule {
                    id: r.id,
                    prio: r.prio,
                    matcher: Match::Wild(Box::new(r.m.clone())),
                    action: r.action.clone(),
                    line: r.line,
                },
                has_id: true,
                stats: counters::rule_stats(&blocks, r.slot),
            })
            .collect();
        let runs = c.exact_ids.by_slot();
        let id_of = |slot: u32| -> Option<RuleId> {
            let i = runs.partition_point(|r| r.0 <= slot).checked_sub(1)?;
            let (s0, n, id0) = runs[i];
            (slot - s0 < n).then_some(id0 + (slot - s0))
        };
        let mut exact: Vec<(u32, ExactKey, u16)> = c
            .exact
            .iter()
            .map(|e| (e.slot, e.key(), e.action))
            .collect();
        let exact_total = exact.len();
        if exact.len() > exact_limit {
            exact.select_nth_unstable_by_key(exact_limit, |e| e.0);
            exact.truncate(exact_limit);
        }
        exact.sort_unstable_by_key(|e| e.0);
        let exact = exact
            .into_iter()
            .map(|(slot, key, a)| {
                let id = id_of(slot);
                ListedRule {
                    rule: Rule {
                        id: id.unwrap_or(0),
                        prio: 0,
                        matcher: Match::Exact(key),
                        action: c.exact_actions[a as usize].clone(),
                        line: 0,
                    },
                    has_id: id.is_some(),
                    stats: counters::rule_stats(&blocks, slot),
                }
            })
            .collect();
        Listing {
            version: c.id,
            options: c.options.clone(),
            wild,
            exact,
            exact_total,
        }
    }
}

/// Whether some rule of `c` has id `id` (an exact id left by `del_exact` does not count).
fn id_in_use(c: &Compiled, id: RuleId) -> bool {
    if c.wild.rules.iter().any(|r| r.id == id) {
        return true;
    }
    c.exact_ids
        .slot(id)
        .is_some_and(|s| c.exact.iter().any(|e| e.slot == s))
}

fn clone_wild(r: &WildRule) -> WildRule {
    WildRule {
        id: r.id,
        prio: r.prio,
        line: r.line,
        slot: r.slot,
        m: r.m.clone(),
        bpf: r.bpf.clone(),
        action: r.action.clone(),
        has_payload: r.has_payload,
    }
}

/// Gives `c` a new wildcard part made of `rules` (in rank order) and a new generation.
fn rebuild_wild(c: &mut Compiled, rules: Vec<WildRule>) -> Result<(), BuildError> {
    let mut pats = Vec::new();
    for (rank, r) in rules.iter().enumerate() {
        for p in &r.m.payload {
            pats.push((p.clone(), rank as u32));
        }
    }
    let patterns = if pats.is_empty() {
        None
    } else {
        Some(Patterns::new(pats)?)
    };
    let tss = Tss::new(rules.iter().map(|r| &r.m));
    c.needs_flows = c.exact_actions.iter().any(uses_flows)
        || rules.iter().any(|r| uses_flows(&r.action) || r.has_payload);
    c.wild = Arc::new(WildPart {
        rules,
        tss,
        patterns,
        generation: c.id,
    });
    Ok(())
}
