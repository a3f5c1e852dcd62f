//! The rules' share of the AF_XDP backend's XDP program: the drop rules a classic BPF program
//! can run ([`weir_rules`]' kernel view, as for AF_PACKET in [`kernel_rules`]) are compiled by
//! libpcap into one classic program, `DROPS`, translated to eBPF
//! ([`ebpf::classic_to_xdp`]) and run by the XDP program in front of the redirect: a packet it
//! matches is counted in a per-CPU array map and dropped (`XDP_DROP`); it reaches no socket
//! and is in no other counter. The map's sum is the `dropped` of [`KernelRules`], the same
//! status the AF_PACKET backend reports.
//!
//! Unlike the socket filter, the one program both drops and counts, so the count is exact,
//! including across a rule change: a new version's program replaces the old one on the link
//! with `BPF_LINK_UPDATE` (atomic: every packet meets one program or the other) over the same
//! maps, so no packet is dropped uncounted or counted undropped.
//!
//! The user's filter is not part of the program (it runs in user space, as without rules):
//! the count is of every packet the drop rules match, where AF_PACKET counts those its filter
//! also keeps (its socket filter is `(USER) and not (DROPS)`). Not concatenating the two
//! expressions is deliberate: libpcap's `vlan` (and `mpls`, `pppoes`, `geneve`) shift the
//! offsets of everything after them in an expression, so `(vlan and udp) and (DROPS)` would
//! test the drop rules on the headers behind a tag, i.e. drop tagged packets that exact rules
//! (untagged only) leave to the engine.
//!
//! # VLAN tags
//!
//! AF_PACKET sees the outer tag in metadata, so its socket filter leaves tagged packets to
//! user space. XDP sees the frame as it came, tag in place, as libpcap lays it out (weir
//! compiles for a file, where tags are in the frame), and so does user space (AF_XDP hands
//! the frame over as it is). The drops expression requires an untagged `ip`/`ip6` frame (see
//! `weir_rules::kernel`), so a tagged frame never matches it: the program runs on every frame,
//! and tagged ones go on to the socket, where the engine decides (its exact rules match
//! untagged packets only; its wildcard rules drop tagged packets too, in user space). A tag
//! the sending side left in metadata (a VLAN device with offload on the peer) is invisible to
//! XDP and to the socket alike: both see the same untagged frame.
//!
//! # Live changes
//!
//! As for AF_PACKET: a watcher thread reads the engine's version every
//! [`WATCH_PERIOD`](kernel_rules::WATCH_PERIOD) and, on a new one, builds the program again
//! and replaces it on every interface's link. A version whose classic program is the one
//! attached replaces nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use weir_filter::{Filter, Insn};
use weir_packet::LinkType;
use weir_rules::Engine;

use crate::kernel_rules::{fewer_until_taken, KernelRules, Try, WATCH_PERIOD};
use crate::xdp::Attachment;
use crate::CaptureError;

/// What the drop program is built from besides the rules.
#[derive(Clone, Debug)]
pub(crate) struct Base {
    /// The interfaces' link type.
    pub link: LinkType,
    /// The snap length.
    pub snaplen: u32,
}

/// Builds the drop program of the engine's current version (none when no rule fits) and its
/// status (`dropped` and `swaps` at 0). Each candidate is loaded once over maps of its own
/// (the verifier decides), and half the rules tried again when refused.
pub(crate) fn build(engine: &Engine, base: &Base) -> (Option<Vec<Insn>>, KernelRules) {
    let view = engine.kernel_view();
    let version = view.version();
    fewer_until_taken(|limit| {
        let kd = view.drops(limit, base.snaplen);
        let mut st = KernelRules {
            version,
            xdp: true,
            left_out: kd.left_out(),
            ..KernelRules::default()
        };
        let Some(drops) = kd.expr else {
            if let Some((_, why)) = kd.skipped.first() {
                st.note = Some(format!("the first drop rule left out: {why}"));
            }
            return Try::Done(None, st);
        };
        let prog = match Filter::compile(&drops, base.link, base.snaplen) {
            Ok(p) => p,
            Err(e) => {
                st.note = Some(format!("libpcap refused the drop rules' expression: {e}"));
                st.left_out += kd.covered.len();
                return Try::Done(None, st);
            }
        };
        if prog.has_backward_jumps() {
            st.note = Some("the drop rules need a program XDP cannot run (protochain)".into());
            st.left_out += kd.covered.len();
            return Try::Done(None, st);
        }
        if let Err(e) = crate::xdp::try_program(prog.instructions()) {
            let n = kd.covered.len();
            return Try::Fewer {
                st,
                covered: n,
                note: format!("the kernel refused the XDP drop program: {e}"),
                next: n / 2,
            };
        }
        st.rules = kd.covered;
        st.exact = kd.exact;
        st.wild = kd.wild;
        st.insns = prog.instructions().len();
        Try::Done(Some(prog.instructions().to_vec()), st)
    })
}

/// The interfaces' attachments, the status and the program attached, shared by the pipeline,
/// its watcher and its counters.
#[derive(Debug)]
pub(crate) struct State {
    attachments: Vec<Attachment>,
    /// With kernel rules: their status.
    status: Option<KernelRules>,
    /// The classic drop program on the links now.
    attached: Option<Vec<Insn>>,
    stopped: bool,
}

impl State {
    /// The state of a pipeline whose `attachments` run `attached`, with `status` when there
    /// are kernel rules.
    pub(crate) fn new(
        attachments: Vec<Attachment>,
        attached: Option<Vec<Insn>>,
        status: Option<KernelRules>,
    ) -> State {
        State {
            attachments,
            status,
            attached,
            stopped: false,
        }
    }

    fn read(&mut self) {
        if self.stopped {
            return;
        }
        if let Some(st) = &mut self.status {
            st.dropped = self
                .attachments
                .iter()
                .map(|a| a.dropped().unwrap_or(0))
                .sum();
        }
    }

    /// The status now (None without kernel rules).
    pub(crate) fn snapshot(&mut self) -> Option<KernelRules> {
        self.read();
        self.status.clone()
    }

    /// Reads the last counts and detaches the programs (their links close).
    pub(crate) fn finish(&mut self) {
        self.read();
        self.stopped = true;
        self.attachments.clear();
    }
}

/// The state, even if a thread panicked while holding it.
pub(crate) fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The watcher of an AF_XDP pipeline with kernel rules.
pub(crate) struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `engine`; `state`'s program was built from its current version.
    pub(crate) fn start(
        engine: Engine,
        base: Base,
        state: Arc<Mutex<State>>,
    ) -> Result<Watcher, CaptureError> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xdp-rules".into())
            .spawn(move || watch(&engine, &base, &state, &s))
            .map_err(|e| CaptureError::BadRing(format!("cannot start a thread: {e}")))?;
        Ok(Watcher {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread: no program is replaced after this returns.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn watch(engine: &Engine, base: &Base, state: &Mutex<State>, stop: &AtomicBool) {
    let mut built = lock(state).status.as_ref().map_or(0, |s| s.version);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(WATCH_PERIOD);
        let v = engine.version();
        if v == built || stop.load(Ordering::Relaxed) {
            continue;
        }
        let t0 = Instant::now();
        let (program, st) = build(engine, base);
        let mut s = lock(state);
        if s.stopped {
            return;
        }
        let mut result = Ok(false);
        if s.attached != program {
            result = Ok(true);
            for a in &mut s.attachments {
                if let Err(e) = a.replace(program.as_deref()) {
                    result = Err(e);
                    break;
                }
            }
            if result.is_ok() {
                s.attached = program;
            }
        }
        s.read();
        let old = s.status.take().unwrap_or_default();
        let us = t0.elapsed().as_micros() as u64;
        let mut new = KernelRules {
            dropped: old.dropped,
            swaps: old.swaps + u64::from(!matches!(result, Ok(false))),
            swap_us: old.swap_us.max(us),
            ..st
        };
        if let Err(e) = &result {
            // some links may have the new program and others the old: each drops what some
            // version drops, and the engine decides every packet that reaches it
            new.note = Some(format!("cannot replace the XDP program: {e}"));
            s.attached = None;
        }
        built = new.version;
        s.status = Some(new);
    }
}
