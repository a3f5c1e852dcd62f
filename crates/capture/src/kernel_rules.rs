//! The rules' share of the kernel socket filter: the drop rules a classic BPF program can run
//! ([`weir_rules::kernel_drops_snap`]) are rejected in the kernel, so their packets are never
//! copied into a ring, woken for, decoded or decided in user space.
//!
//! # The programs
//!
//! Every ring of a pipeline with rules gets
//!
//! ```text
//!     ld  vlan_tag_present          (the kernel's ancillary load SKF_AD_VLAN_TAG_PRESENT)
//!     jeq #0, next, user            (a tag in metadata: the user filter alone)
//!     ja  rules
//! user:  USER                       (the user's filter, or `ret #snaplen`)
//! rules: USER, its accepting returns turned into jumps to
//!        not (DROPS)                (each libpcap-compiled alone; `not (DROPS)` alone without
//!                                    a user filter)
//! ```
//!
//! The two are chained programs, not one expression `(USER) and not (DROPS)`: libpcap's `vlan`
//! (`mpls`, `pppoes`, `geneve`) shifts the offsets of everything after it in an expression,
//! so with such a user filter the drop test would read the bytes behind a would-be tag.
//!
//! Linux moves the outer VLAN tag of every received frame into metadata before a packet socket
//! sees it, so a tagged frame looks untagged to the filter; the engine (which puts the tag back)
//! matches exact rules on untagged packets only. Tagged packets therefore skip the drop test
//! and are decided in user space. A user filter the kernel refuses (backward jumps:
//! `protochain`) stays in user space, and then `USER` here is `ret #snaplen`: the drop test
//! still runs in the kernel. When the drop rules' own program has backward jumps (a `bpf` term
//! with `protochain`) or the whole program is longer than the kernel takes (4096
//! instructions: fewer rules are tried, in proportion, until it fits; or larger, once
//! translated, than the socket option memory, `net.core.optmem_max`: each program is tried on
//! a socket that receives nothing first, and half the rules tried again), fewer or no rules
//! go.
//!
//! # Counting what the kernel dropped
//!
//! The kernel counts nothing per filter, and the ring's PACKET_STATISTICS only see packets the
//! filter accepted. Each interface therefore gets one more AF_PACKET socket, without a ring,
//! whose filter is the complement's match, `[no tag] USER then (DROPS)`, and whose receive
//! buffer is the smallest the kernel allows: after the first packet or two everything it
//! accepts is dropped at once (no copy), and its PACKET_STATISTICS count (accepted + dropped)
//! is exactly the number of packets the rings' filter rejected because of the rules. It costs
//! one more filter run per packet in the kernel. The count is exact except for packets that
//! arrive in the microseconds between replacing the rings' filter and this socket's during a
//! swap, and those arriving while the rings drain at stop (which the rings no longer take).
//!
//! Why the swap window cannot be closed with these means: a classic BPF program has no side
//! effect (it can only return a length), the kernel keeps no per-filter count, and
//! `SO_ATTACH_FILTER` replaces the filter of one socket at a time. With drop sets `OLD` and
//! `NEW`, whichever socket is swapped first, between the two calls the rings drop one set and
//! the counter counts the other: a packet in `NEW` but not `OLD` is dropped uncounted (rings
//! first, as here) or counted and also delivered (counter first), and the reverse for one in
//! `OLD` but not `NEW`. No order of single swaps (nor a middle step through `OLD ∩ NEW` or
//! `OLD ∪ NEW`) keeps "dropped by the rings" equal to "counted" at every instant, and a counting
//! error in the other direction (a packet counted twice) breaks `packets in = sum over the
//! actions` as surely as one lost. Only packets of the two sets' difference that arrive in
//! that window are affected (a few microseconds: two `setsockopt` calls per interface). What is
//! done: a version whose programs are the ones attached (a reload or an edit that leaves the
//! kernel's drops as they were, the usual case) attaches nothing, so it opens no window at
//! all, and does not count as a swap. The exact fix is one program that drops and counts: an
//! eBPF socket filter (`SO_ATTACH_BPF`) incrementing a per-CPU map on the drop path, which
//! needs `CAP_BPF` (or `CAP_SYS_ADMIN`) besides `CAP_NET_RAW` and a translation of libpcap's
//! classic programs to eBPF; not built.
//!
//! # Live changes
//!
//! A watcher thread of the pipeline reads the engine's version every [`WATCH_PERIOD`] (one
//! atomic load; nothing on the packet path), and on a new version builds the programs again
//! and attaches them with `SO_ATTACH_FILTER`, which replaces a socket's filter atomically:
//! every packet meets either the old program or the new one. Packets the kernel already
//! queued to a ring are decided by the engine as they are read, under whatever version is
//! current then; the kernel filter only ever rejects packets that some version of the rules
//! (the one it was built from) drops. A drop rule removed stays in the kernel until the next
//! attach, at most one period plus the build time later (see `swap_us`); a drop rule added is
//! dropped by the engine at once and by the kernel from the next attach.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir_filter::{op, Filter, Insn};
use weir_packet::LinkType;
use weir_rules::{Engine, RuleId};

use crate::socket::PacketSocket;
use crate::CaptureError;

/// How often the watcher looks at the engine's version.
pub const WATCH_PERIOD: Duration = Duration::from_millis(50);

/// At most this many drop rules go to the kernel (fewer when their program would not fit).
pub const KERNEL_RULE_LIMIT: usize = 100;

/// The longest classic BPF program Linux accepts (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

/// `SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT`: the ancillary load that reads 1 when the packet
/// carries a VLAN tag in metadata.
const VLAN_TAG_PRESENT: u32 = 0xffff_f000 + 48;

/// What the rules' socket filter holds and what it dropped, for summaries and `--stats-json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KernelRules {
    /// Ids of the drop rules in the kernel filter now (exact rules first).
    pub rules: Vec<RuleId>,
    /// Exact rules among them.
    pub exact: usize,
    /// Wildcard rules among them.
    pub wild: usize,
    /// Packets the filter rejected because of the rules (see the module documentation for
    /// how exact this is); they reached no ring and are in no other counter of the capture.
    pub dropped: u64,
    /// The engine version the filter was built from.
    pub version: u64,
    /// Times the filter was replaced after the first (new rule versions whose kernel programs
    /// differ from the ones attached).
    pub swaps: u64,
    /// Longest time from noticing a new version to the new filter attached on every socket,
    /// in microseconds.
    pub swap_us: u64,
    /// Instructions of the rings' program.
    pub insns: usize,
    /// Drop rules left to user space (they do not fit a socket filter, or over the limit).
    pub left_out: usize,
    /// Why no rule (or fewer) went to the kernel, when something refused.
    pub note: Option<String>,
    /// The rules run in the AF_XDP backend's XDP program (see `xdp_rules`), not in a socket
    /// filter.
    #[serde(skip)]
    pub xdp: bool,
}

impl KernelRules {
    /// The summary's words, e.g. `dropped in the kernel by 2 rules (socket filter of version
    /// 1: 1 exact, 1 wildcard; ids 1, 8): 900`.
    pub fn text(&self) -> String {
        let mut ids: Vec<String> = self.rules.iter().take(20).map(|i| i.to_string()).collect();
        if self.rules.len() > 20 {
            ids.push(format!("… {} more", self.rules.len() - 20));
        }
        let place = if self.xdp {
            "XDP program"
        } else {
            "socket filter"
        };
        let mut s = if self.rules.is_empty() {
            format!(
                "dropped in the kernel by 0 rules ({place} of version {}: no drop rule fits): {}",
                self.version, self.dropped
            )
        } else {
            format!(
                "dropped in the kernel by {} rules ({place} of version {}: {} exact, {} \
                 wildcard; ids {}): {}",
                self.rules.len(),
                self.version,
                self.exact,
                self.wild,
                ids.join(", "),
                self.dropped
            )
        };
        if self.left_out > 0 {
            s += &format!(", {} drop rules left to user space", self.left_out);
        }
        if self.swaps > 0 {
            let what = if self.xdp { "program" } else { "filter" };
            s += &format!(", {what} replaced {} times", self.swaps);
        }
        if let Some(n) = &self.note {
            s += &format!(" ({n})");
        }
        s
    }
}

/// What the rings' filter is besides the rules: the user's expression when the kernel runs
/// it, else nothing (no expression, or one that runs in user space).
#[derive(Clone, Debug)]
pub(crate) struct Base {
    /// The user's expression, when the kernel runs it.
    pub expr: Option<String>,
    /// The rings' program without rules (the user filter, or `ret #snaplen`).
    pub program: Filter,
    /// The interfaces' link type.
    pub link: LinkType,
    /// The snap length.
    pub snaplen: u32,
}

/// The programs of one rule-set version.
#[derive(Debug)]
pub(crate) struct Programs {
    /// The rings' program.
    pub ring: Vec<Insn>,
    /// The counting socket's program.
    pub count: Vec<Insn>,
}

/// The last programs libpcap compiled, by expression: a reload that leaves the kernel's drop
/// rules as they were (a million exact rules reloaded, the first hundred unchanged) reuses
/// them instead of compiling again (libpcap takes about a second for 100 exact rules on a
/// loaded machine).
type Compiled = (String, String, LinkType, u32, (Filter, Filter));
static MEMO: Mutex<Vec<Compiled>> = Mutex::new(Vec::new());
const MEMO_LEN: usize = 8;

/// libpcap's programs for the rings' and the counting socket's expressions, from [`MEMO`]
/// when they were compiled before.
fn compile_pair(
    ring: &str,
    count: &str,
    link: LinkType,
    snaplen: u32,
) -> Result<(Filter, Filter), weir_filter::FilterError> {
    let memo = |m: &std::sync::MutexGuard<'_, Vec<Compiled>>| {
        m.iter()
            .find(|e| e.0 == ring && e.1 == count && e.2 == link && e.3 == snaplen)
            .map(|e| e.4.clone())
    };
    if let Some(p) = memo(&MEMO.lock().unwrap_or_else(|e| e.into_inner())) {
        return Ok(p);
    }
    let pair = Filter::compile(ring, link, snaplen)
        .and_then(|r| Filter::compile(count, link, snaplen).map(|c| (r, c)))?;
    let mut m = MEMO.lock().unwrap_or_else(|e| e.into_inner());
    if m.len() >= MEMO_LEN {
        m.remove(0);
    }
    m.push((ring.into(), count.into(), link, snaplen, pair.clone()));
    Ok(pair)
}

/// `first` then `second`: each of `first`'s `ret #k` with k ≠ 0 (it accepts) becomes a jump
/// to `second`'s first instruction, its `ret #0` stays (it rejects). None when `first` returns
/// a computed length (`ret a`/`ret x`: libpcap does not emit them for an expression).
fn chain(first: &[Insn], second: &[Insn]) -> Option<Vec<Insn>> {
    let mut out = Vec::with_capacity(first.len() + second.len());
    for (i, insn) in first.iter().enumerate() {
        if insn.code & 0x07 != op::BPF_RET {
            out.push(*insn);
        } else if insn.code != op::BPF_RET | op::BPF_K {
            return None;
        } else if insn.k == 0 {
            out.push(*insn);
        } else {
            let to_second = (first.len() - i - 1) as u32;
            out.push(Insn::stmt(op::BPF_JMP | op::BPF_JA, to_second));
        }
    }
    out.extend_from_slice(second);
    Some(out)
}

/// One try of [`fewer_until_taken`] with at most `limit` drop rules.
pub(crate) enum Try<T> {
    /// The programs (none when no rule goes to the kernel) and their status: done.
    Done(Option<T>, KernelRules),
    /// The program of the `covered` rules `st` describes is not taken (`note` says why):
    /// try `next` rules, or with one rule left give up.
    Fewer {
        /// The status of this try.
        st: KernelRules,
        /// The rules this try covered.
        covered: usize,
        /// Why the program was not taken.
        note: String,
        /// The limit of the next try (fewer than `covered`).
        next: usize,
    },
}

/// The "fewer rules until the kernel takes them" loop of both backends: `attempt` builds the
/// programs of at most `limit` rules, from [`KERNEL_RULE_LIMIT`]; when it asks for fewer, the
/// next try has `next` rules, unless one rule was refused: then no program, that rule left
/// out and the status noted.
pub(crate) fn fewer_until_taken<T>(
    mut attempt: impl FnMut(usize) -> Try<T>,
) -> (Option<T>, KernelRules) {
    let mut limit = KERNEL_RULE_LIMIT;
    loop {
        match attempt(limit) {
            Try::Done(p, st) => return (p, st),
            Try::Fewer {
                mut st,
                covered,
                note,
                next,
            } => {
                if covered <= 1 {
                    st.note = Some(note);
                    st.left_out += covered;
                    return (None, st);
                }
                limit = next;
            }
        }
    }
}

/// Builds the programs of the engine's current version: the programs (none when no rule
/// goes to the kernel) and the status (its `dropped` and `swaps` left at 0). With `probe` (a
/// socket that receives nothing), each program is first attached there: the kernel also
/// refuses programs whose translation is larger than its socket option memory
/// (`net.core.optmem_max`), and then fewer rules are tried.
pub(crate) fn build(
    engine: &Engine,
    base: &Base,
    probe: Option<&PacketSocket>,
) -> (Option<Programs>, KernelRules) {
    // the version's own view of its drop rules: no walk of (or copy of) every rule, so a new
    // version of a million exact rules costs no more here than one of ten
    let view = engine.kernel_view();
    let version = view.version();
    fewer_until_taken(|limit| {
        let kd = view.drops(limit, base.snaplen);
        let mut st = KernelRules {
            version,
            left_out: kd.left_out(),
            ..KernelRules::default()
        };
        let Some(drops) = kd.expr else {
            if let Some((_, why)) = kd.skipped.first() {
                st.note = Some(format!("the first drop rule left out: {why}"));
            }
            return Try::Done(None, st);
        };
        // The drop rules are compiled alone and run after the user's program (chained), never
        // as one expression `(USER) and not (DROPS)`: libpcap's `vlan`, `mpls`, `pppoes` and
        // `geneve` shift the offsets of everything after them in an expression, so DROPS
        // would read the bytes behind a would-be tag and could drop an untagged packet no
        // rule drops.
        let compiled = compile_pair(
            &format!("not ({drops})"),
            &format!("({drops})"),
            base.link,
            base.snaplen,
        );
        let (ring, count) = match compiled.map(|(r, c)| match &base.expr {
            Some(_) => chain(base.program.instructions(), r.instructions())
                .zip(chain(base.program.instructions(), c.instructions())),
            None => Some((r.instructions().to_vec(), c.instructions().to_vec())),
        }) {
            Ok(Some(rc)) => rc,
            Ok(None) => {
                st.note = Some("the user filter returns a computed length: no kernel rules".into());
                st.left_out += kd.covered.len();
                return Try::Done(None, st);
            }
            Err(e) => {
                st.note = Some(format!("libpcap refused the drop rules' expression: {e}"));
                st.left_out += kd.covered.len();
                return Try::Done(None, st);
            }
        };
        let (ring, count) = match (
            Filter::from_instructions(&ring),
            Filter::from_instructions(&count),
        ) {
            (Ok(r), Ok(c)) => (r, c),
            (Err(e), _) | (_, Err(e)) => {
                st.note = Some(format!("the chained kernel program is invalid: {e}"));
                st.left_out += kd.covered.len();
                return Try::Done(None, st);
            }
        };
        if ring.has_backward_jumps() || count.has_backward_jumps() {
            st.note = Some("the drop rules need a program the kernel refuses (protochain)".into());
            st.left_out += kd.covered.len();
            return Try::Done(None, st);
        }
        let user = base.program.instructions();
        let ring_len = 3 + user.len() + ring.instructions().len();
        if ring_len > MAX_INSNS {
            // Fewer rules, in proportion to the room left (usually one more try).
            let room = MAX_INSNS.saturating_sub(3 + user.len());
            let n = kd.covered.len();
            return Try::Fewer {
                st,
                covered: n,
                note: format!(
                    "one rule's program is longer than the kernel takes ({ring_len} instructions)"
                ),
                next: (n * room / ring.instructions().len()).clamp(1, n.max(2) - 1),
            };
        }
        let mut prog = vec![
            Insn::stmt(op::BPF_LD | op::BPF_W | op::BPF_ABS, VLAN_TAG_PRESENT),
            // No tag: to the `ja`, which skips the user-only program; a tag: to that program.
            Insn::jump(op::BPF_JMP | op::BPF_JEQ | op::BPF_K, 0, 0, 1),
            Insn::stmt(op::BPF_JMP | op::BPF_JA, user.len() as u32),
        ];
        prog.extend_from_slice(user);
        prog.extend_from_slice(ring.instructions());
        let mut cprog = vec![
            Insn::stmt(op::BPF_LD | op::BPF_W | op::BPF_ABS, VLAN_TAG_PRESENT),
            Insn::jump(op::BPF_JMP | op::BPF_JEQ | op::BPF_K, 0, 1, 0),
            Insn::stmt(op::BPF_RET | op::BPF_K, 0),
        ];
        cprog.extend_from_slice(count.instructions());
        if let Some(Err(e)) = probe.map(|s| {
            s.attach_filter(&prog)
                .and_then(|()| s.attach_filter(&cprog))
        }) {
            let n = kd.covered.len();
            return Try::Fewer {
                st,
                covered: n,
                note: format!("the kernel refused the filter: {e}"),
                next: n / 2,
            };
        }
        st.rules = kd.covered;
        st.exact = kd.exact;
        st.wild = kd.wild;
        st.insns = prog.len();
        Try::Done(
            Some(Programs {
                ring: prog,
                count: cprog,
            }),
            st,
        )
    })
}

/// The sockets the watcher swaps filters on, and the status; shared with [`Counters`]
/// (crate::Counters), which reads the counting sockets when asked for totals.
#[derive(Debug)]
pub(crate) struct State {
    /// Second descriptors of every ring's socket.
    rings: Vec<PacketSocket>,
    /// One counting socket per interface, once a program exists.
    counters: Vec<PacketSocket>,
    interfaces: Vec<String>,
    status: KernelRules,
    /// After stop: nothing is read or attached any more.
    stopped: bool,
    /// The programs on the sockets now (the rings', the counting sockets' or none: they
    /// refuse everything), when known: a version whose programs are these attaches nothing.
    attached: Option<(Vec<Insn>, Option<Vec<Insn>>)>,
}

impl State {
    /// Folds the counting sockets' counters (reset by each read) into the status.
    fn fold(&mut self) {
        if self.stopped {
            return;
        }
        for c in &self.counters {
            if let Ok(s) = c.read_stats() {
                self.status.dropped += s.packets;
            }
        }
    }

    /// The status now.
    pub(crate) fn snapshot(&mut self) -> KernelRules {
        self.fold();
        self.status.clone()
    }

    /// Attaches `programs` (or, without, `base` alone and a counting filter that accepts
    /// nothing) to every socket; false when they are already there (nothing attached).
    fn attach(&mut self, programs: Option<&Programs>, base: &Base) -> Result<bool, CaptureError> {
        let ring = programs.map_or(base.program.instructions(), |p| &p.ring[..]);
        let want = (ring.to_vec(), programs.map(|p| p.count.clone()));
        if self.attached.as_ref() == Some(&want) {
            // the kernel's share did not change: no swap, so no window (see the module's
            // "Counting what the kernel dropped")
            return Ok(false);
        }
        self.attached = None;
        for s in &self.rings {
            s.attach_filter(ring)?;
        }
        self.fold();
        match programs {
            Some(p) => {
                if self.counters.is_empty() {
                    for iface in &self.interfaces {
                        self.counters.push(counting_socket(iface, &p.count)?);
                    }
                } else {
                    for c in &self.counters {
                        c.attach_filter(&p.count)?;
                    }
                }
            }
            None => {
                for c in &self.counters {
                    c.refuse_all()?;
                }
            }
        }
        self.attached = Some(want);
        Ok(true)
    }

    /// Ends counting: the counting sockets refuse everything, their last counts are folded.
    fn finish(&mut self) {
        for c in &self.counters {
            let _ = c.refuse_all();
        }
        self.fold();
        self.stopped = true;
    }
}

/// A socket without a ring that counts the packets `program` accepts on `iface`: its receive
/// buffer is the kernel's smallest, so all but the first packet or two are dropped at once,
/// and PACKET_STATISTICS counts them all (accepted = queued + dropped).
fn counting_socket(iface: &str, program: &[Insn]) -> Result<PacketSocket, CaptureError> {
    let s = PacketSocket::open(iface)?;
    s.attach_filter(program)?;
    let one: libc::c_int = 1;
    s.set(libc::SOL_SOCKET, libc::SO_RCVBUF, &one, "SO_RCVBUF")?;
    s.bind(libc::ETH_P_ALL as u16)?;
    Ok(s)
}

/// The watcher of a pipeline with kernel rules: its thread and the shared state.
pub(crate) struct Watcher {
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `engine` with the rings' sockets `rings` (their program was built
    /// from `first`'s version with `programs`), counting on `interfaces`.
    pub(crate) fn start(
        engine: Engine,
        base: Base,
        rings: Vec<PacketSocket>,
        interfaces: Vec<String>,
        programs: Option<&Programs>,
        first: KernelRules,
    ) -> Result<Watcher, CaptureError> {
        let mut state = State {
            rings: Vec::new(),
            counters: Vec::new(),
            interfaces,
            status: first,
            stopped: false,
            attached: None,
        };
        if let Some(p) = programs {
            for iface in &state.interfaces {
                state.counters.push(counting_socket(iface, &p.count)?);
            }
        }
        state.rings = rings;
        state.attached = Some(match programs {
            Some(p) => (p.ring.clone(), Some(p.count.clone())),
            None => (base.program.instructions().to_vec(), None),
        });
        let state = Arc::new(Mutex::new(state));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::Builder::new()
                .name("kernel-rules".into())
                .spawn(move || watch(&engine, &base, &state, &stop))
                .map_err(|e| CaptureError::BadRing(format!("cannot start a thread: {e}")))?
        };
        Ok(Watcher {
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// The shared state (for the pipeline's counters).
    pub(crate) fn state(&self) -> Arc<Mutex<State>> {
        self.state.clone()
    }

    /// Stops the watcher thread: no filter is attached after this returns.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Ends counting (after the rings stopped).
    pub(crate) fn finish(&mut self) {
        self.stop();
        lock(&self.state).finish();
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The state, even if a thread panicked while holding it (its fields stay consistent: each
/// is written whole).
pub(crate) fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn watch(engine: &Engine, base: &Base, state: &Mutex<State>, stop: &AtomicBool) {
    let mut built = lock(state).status.version;
    let probe = lock(state)
        .interfaces
        .first()
        .and_then(|i| PacketSocket::open(i).ok());
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(WATCH_PERIOD);
        let v = engine.version();
        if v == built || stop.load(Ordering::Relaxed) {
            continue;
        }
        let t0 = Instant::now();
        let (programs, st) = build(engine, base, probe.as_ref());
        let mut s = lock(state);
        if s.stopped {
            return;
        }
        let r = s.attach(programs.as_ref(), base);
        let us = t0.elapsed().as_micros() as u64;
        let dropped = s.status.dropped;
        let swaps = s.status.swaps + u64::from(!matches!(r, Ok(false)));
        let swap_us = s.status.swap_us.max(us);
        s.status = KernelRules {
            dropped,
            swaps,
            swap_us,
            ..st
        };
        if let Err(e) = &r {
            // The rings keep whichever program they had; the engine decides every packet
            // that reaches it, so nothing is decided wrongly, only less is saved.
            s.status.note = Some(format!("cannot attach the new filter: {e}"));
        }
        built = s.status.version;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_rules::RuleSet;

    fn engine(text: &str) -> Engine {
        Engine::new(RuleSet::parse(text).unwrap(), LinkType::ETHERNET, 262_144).unwrap()
    }

    fn base(expr: &str) -> Base {
        Base {
            expr: (!expr.is_empty()).then(|| expr.to_string()),
            program: if expr.is_empty() {
                Filter::match_all(262_144)
            } else {
                Filter::compile(expr, LinkType::ETHERNET, 262_144).unwrap()
            },
            link: LinkType::ETHERNET,
            snaplen: 262_144,
        }
    }

    /// Ethernet + IPv4 + UDP or TCP (proto 17 or 6), no payload.
    fn frame(proto: u8, src: [u8; 4], dport: u16) -> Vec<u8> {
        let l4 = if proto == 6 { 20 } else { 8 };
        let mut f = vec![0u8; 34 + l4];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let total = (20 + l4) as u16;
        f[14..24].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto]);
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&[10, 0, 0, 1]);
        f[34..36].copy_from_slice(&40000u16.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        if proto == 6 {
            f[46] = 0x50;
        } else {
            f[38..40].copy_from_slice(&8u16.to_be_bytes());
        }
        f
    }

    /// libpcap's `vlan` shifts the offsets of everything after it in an expression: the drop
    /// rules run as their own program after the user's, so they read the frame's real headers.
    /// The frame (by hand): untagged UDP 10.0.0.7 -> 10.0.0.1, IP length 2048, source port
    /// 2560, destination port 9 — with offsets shifted by a tag's 4 bytes, `host 10.0.0.9`
    /// would read 0x0800 as the EtherType and 10.0.0.9 (ports 2560, 9) as the destination.
    #[test]
    fn a_vlan_in_the_user_filter_does_not_shift_the_drop_rules() {
        let e = engine("id 1 host 10.0.0.9 -> drop\n");
        let b = base("udp or (vlan and udp)");
        let (p, _) = build(&e, &b, None);
        let p = p.expect("rule 1 fits");
        let user = b.program.instructions();
        let ring = Filter::from_instructions(&p.ring[3 + user.len()..]).unwrap();
        let count = Filter::from_instructions(&p.count[3..]).unwrap();
        let m = |f: &Filter, pkt: &[u8]| f.matches(pkt, pkt.len() as u32);
        let mut f = frame(17, [10, 0, 0, 7], 9);
        f[16..18].copy_from_slice(&2048u16.to_be_bytes());
        f[34..36].copy_from_slice(&2560u16.to_be_bytes());
        assert_eq!((m(&ring, &f), m(&count, &f)), (true, false));
        // what the one expression `(USER) and not (DROPS)` does with it: dropped by no rule
        let joined = Filter::compile(
            "(udp or (vlan and udp)) and not (host 10.0.0.9)",
            LinkType::ETHERNET,
            262_144,
        )
        .unwrap();
        assert!(
            !m(&joined, &f),
            "libpcap no longer shifts: the chaining is not needed"
        );
        // the rule still drops its own host's packets
        let mut g = frame(17, [10, 0, 0, 9], 53);
        assert_eq!((m(&ring, &g), m(&count, &g)), (false, true));
        g[30..34].copy_from_slice(&[10, 0, 0, 9]);
        g[26..30].copy_from_slice(&[10, 0, 0, 7]);
        assert_eq!((m(&ring, &g), m(&count, &g)), (false, true));
    }

    #[test]
    fn the_rings_take_what_the_counter_does_not() {
        let e = engine("id 1 host 10.0.0.9 -> drop\nid 2 dport 53 -> pass\n");
        let b = base("udp");
        let (p, st) = build(&e, &b, None);
        let p = p.expect("rule 1 fits");
        assert_eq!((st.rules.clone(), st.exact, st.wild), (vec![1], 0, 1));
        assert_eq!((st.version, st.left_out, st.insns), (1, 0, p.ring.len()));
        // The VLAN guard, then the user filter alone (tagged packets), then the rules' part.
        let guard = Insn::stmt(op::BPF_LD | op::BPF_W | op::BPF_ABS, VLAN_TAG_PRESENT);
        assert_eq!((p.ring[0], p.count[0]), (guard, guard));
        let user = b.program.instructions();
        assert_eq!(p.ring[2].k as usize, user.len());
        assert_eq!(&p.ring[3..3 + user.len()], user);
        assert_eq!(p.count[2], Insn::stmt(op::BPF_RET | op::BPF_K, 0));
        let ring = Filter::from_instructions(&p.ring[3 + user.len()..]).unwrap();
        let count = Filter::from_instructions(&p.count[3..]).unwrap();
        let m = |f: &Filter, pkt: &[u8]| f.matches(pkt, pkt.len() as u32);
        // (packet, the rings take it, the counter counts it)
        let cases = [
            (frame(17, [10, 0, 0, 9], 9000), false, true), // rule 1: the kernel drops it
            (frame(17, [10, 0, 0, 9], 53), false, true),   // rule 1 comes first
            (frame(17, [10, 0, 0, 7], 9000), true, false), // no drop rule
            (frame(6, [10, 0, 0, 9], 9000), false, false), // not udp: the user filter's
        ];
        for (i, (pkt, rings, counted)) in cases.iter().enumerate() {
            assert_eq!(
                (m(&ring, pkt), m(&count, pkt)),
                (*rings, *counted),
                "case {i}"
            );
        }
    }

    #[test]
    fn too_many_rules_are_cut_until_the_program_fits() {
        let text: String = (0..300)
            .map(|i| {
                format!(
                    "exact udp 10.1.{}.{}:1000 10.2.0.1:53 -> drop\n",
                    i / 200,
                    i % 200
                )
            })
            .collect();
        // A user filter of some length, copied twice into the program: 100 exact rules alone
        // take about 4000 instructions.
        let ports: Vec<String> = (1..=20).map(|p| format!("port {p}")).collect();
        let b = base(&format!("udp and not ({})", ports.join(" or ")));
        let (p, st) = build(&engine(&text), &b, None);
        let p = p.expect("some rules fit");
        assert!(p.ring.len() <= MAX_INSNS && st.insns == p.ring.len());
        assert!(
            !st.rules.is_empty() && st.rules.len() < KERNEL_RULE_LIMIT,
            "{} rules, {} insns",
            st.rules.len(),
            st.insns
        );
        assert_eq!(st.exact, st.rules.len());
        assert_eq!(st.left_out, 300 - st.rules.len());
        let user = b.program.instructions().len();
        assert!(Filter::from_instructions(&p.ring[3 + user..]).is_ok());
    }

    #[test]
    fn what_the_probe_keeps_the_kernel_takes() {
        // 100 exact rules: about 4000 instructions, more than the default socket option
        // memory holds once translated (needs CAP_NET_RAW, as every capture test).
        let text: String = (0..100)
            .map(|i| format!("exact udp 10.1.0.{i}:1000 10.2.0.1:53 -> drop\n"))
            .collect();
        let probe = match PacketSocket::open("lo") {
            Ok(s) => s,
            Err(e) if std::env::var("WEIR_REQUIRE_PEERS").as_deref() != Ok("1") => {
                eprintln!("skipped: no AF_PACKET socket ({e}); run as root");
                return;
            }
            Err(e) => panic!("no AF_PACKET socket: {e}"),
        };
        let (p, st) = build(&engine(&text), &base(""), Some(&probe));
        let p = p.expect("some rules fit");
        assert_eq!(st.rules.len() + st.left_out, 100);
        // What it chose attaches on a fresh socket, next to the match-all filter it replaces.
        let fresh = PacketSocket::open("lo").unwrap();
        fresh
            .attach_filter(base("").program.instructions())
            .unwrap();
        fresh.attach_filter(&p.ring).unwrap();
        fresh.attach_filter(&p.count).unwrap();
    }

    #[test]
    fn nothing_goes_when_no_rule_fits() {
        let (p, st) = build(&engine("id 4 payload \"x\" -> drop\n"), &base(""), None);
        assert!(p.is_none() && st.rules.is_empty());
        assert_eq!(st.left_out, 1);
        assert_eq!(
            st.note.as_deref(),
            Some("the first drop rule left out: payload patterns")
        );
        assert!(st.text().starts_with("dropped in the kernel by 0 rules"));
    }
}
