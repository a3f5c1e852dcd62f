//! BPF filters in tcpdump syntax: compiled by libpcap, the reference compiler, and run by weir's
//! own classic BPF engine, with the results of `tcpdump -r`.
//!
//! ```no_run
//! use weir_filter::Filter;
//! use weir_packet::LinkType;
//!
//! let f = Filter::compile("tcp port 80", LinkType::ETHERNET, 262144).unwrap();
//! # let (bytes, wire_len): (&[u8], u32) = (&[], 0);
//! if f.matches(bytes, wire_len) { /* keep the packet */ }
//! ```
//!
//! * [`compile`](mod@compile): libpcap's `pcap_compile` on a handle that looks like the file's
//!   (link type, snapshot length, byte order), with tcpdump's flags.
//! * [`program`]: the [`Insn`] type, opcodes, validation and `tcpdump -d` listings.
//! * [`engine`](mod@engine): the interpreter, bug-for-bug with libpcap 1.10's `bpf_filter()`.
//! * [`libpcap_oracle`]: libpcap reading files and filtering, for tests and benchmarks.
//! * [`FilterSet`]: one expression compiled for each interface of the files read.
//! * [`testing`]: the shared list of expressions the oracle tests use.
#![deny(missing_docs)]

pub mod compile;
pub mod engine;
mod ffi;
pub mod libpcap_oracle;
pub mod program;
mod set;
pub mod testing;

use std::fmt;
use std::sync::Arc;

use weir_packet::LinkType;

use crate::engine::{Op, Program};
pub use crate::program::{op, Insn, Listing, ProgramError, Validation};
pub use crate::set::{FilterSet, FilterSetError};

/// Why a filter could not be built.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum FilterError {
    /// libpcap refused the expression; the message is libpcap's, verbatim (tcpdump prints it
    /// after `tcpdump: `).
    #[error("{0}")]
    Compile(String),
    /// The program failed validation.
    #[error("invalid BPF program: {0}")]
    InvalidProgram(#[from] ProgramError),
    /// libpcap has no code generator for this link type; the message is libpcap's (tcpdump would
    /// refuse the file whatever the expression).
    #[error("{1}")]
    UnsupportedLinkType(LinkType, String),
    /// The expression holds a NUL byte, which no C string (and no tcpdump argument) can.
    #[error("filter expression contains a NUL byte")]
    NulInExpression,
    /// libpcap could not be set up (out of memory and the like).
    #[error("libpcap: {0}")]
    Libpcap(String),
}

/// A validated BPF program, ready to run on packets. Cheap to clone (the program is shared);
/// `Send + Sync`, so capture threads can each hold one.
#[derive(Clone)]
pub struct Filter {
    insns: Arc<[Insn]>,
    program: Arc<Program>,
    match_all: bool,
    backward_jumps: bool,
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("match_all", &self.match_all)
            .field("instructions", &self.insns.len())
            .finish()
    }
}

/// The snapshot length libpcap uses for a file header's value: the maximum (262144) when it is 0
/// or larger (`pcap_adjust_snapshot` in libpcap 1.10, for every link type weir reads).
pub fn effective_snaplen(snaplen: u32) -> u32 {
    const MAXIMUM_SNAPLEN: u32 = 262_144;
    if snaplen == 0 || snaplen > MAXIMUM_SNAPLEN {
        MAXIMUM_SNAPLEN
    } else {
        snaplen
    }
}

fn is_blank(expr: &str) -> bool {
    // libpcap's scanner skips exactly these.
    expr.bytes()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

impl Filter {
    /// Compiles `expr` the way `tcpdump -r FILE EXPR` would for a classic pcap file with this link
    /// type and snapshot length, written in this machine's byte order. An empty (or blank)
    /// expression gives [`Filter::match_all`] without asking libpcap.
    ///
    /// `link` is the LINKTYPE_ value of the file header (libpcap maps it to its DLT_, e.g. 101 to
    /// 12); `snaplen` is the header's value as written (libpcap turns 0 or an oversized value
    /// into 262144, see [`effective_snaplen`]). For pcapng, pass the first interface's values.
    /// Compiles are serialised by a global lock; each takes some tens of microseconds.
    pub fn compile(expr: &str, link: LinkType, snaplen: u32) -> Result<Filter, FilterError> {
        Filter::compile_for_file(expr, link, snaplen, false)
    }

    /// Like [`Filter::compile`], for a file whose byte order is the opposite of this machine's
    /// when `swapped` (libpcap's `pcap_is_swapped()`; for pcapng, the section's byte order). It
    /// only matters for DLT_NULL, whose address family word is in the writer's byte order.
    pub fn compile_for_file(
        expr: &str,
        link: LinkType,
        snaplen: u32,
        swapped: bool,
    ) -> Result<Filter, FilterError> {
        if is_blank(expr) {
            return Ok(Filter::match_all(snaplen));
        }
        let insns = compile::compile_for_file(expr, link, snaplen, swapped)?;
        Filter::build(&insns, Validation::Libpcap)
    }

    /// A filter that accepts every packet without running anything (what an empty expression
    /// means). Its [`instructions`](Filter::instructions) are the equivalent one-instruction
    /// program, `ret #snaplen` (with libpcap's snapshot rule, [`effective_snaplen`]).
    pub fn match_all(snaplen: u32) -> Filter {
        let insns = [Insn::stmt(
            op::BPF_RET | op::BPF_K,
            effective_snaplen(snaplen),
        )];
        let mut f = Filter::build(&insns, Validation::Strict).expect("ret #k is valid");
        f.match_all = true;
        f
    }

    /// Validates a program from outside (e.g. `tcpdump -ddd` output) with
    /// [`Validation::Strict`]: libpcap's `bpf_validate()` rules plus forward-only jumps, constant
    /// shifts below 32 and known opcodes, as the Linux kernel demands.
    pub fn from_instructions(insns: &[Insn]) -> Result<Filter, FilterError> {
        Filter::build(insns, Validation::Strict)
    }

    /// Validates a program with the chosen rule set.
    pub fn from_instructions_with(
        insns: &[Insn],
        rules: Validation,
    ) -> Result<Filter, FilterError> {
        Filter::build(insns, rules)
    }

    fn build(insns: &[Insn], rules: Validation) -> Result<Filter, FilterError> {
        let ops = program::decode(insns, rules)?;
        let backward_jumps = ops.iter().any(|o| matches!(o, Op::JaBack(_)));
        Ok(Filter {
            insns: insns.into(),
            program: Arc::new(Program::new(ops)),
            match_all: false,
            backward_jumps,
        })
    }

    /// Runs the program on a packet: `data` is the captured bytes, `orig_len` the length on the
    /// wire. Returns the program's result: 0 rejects, anything else accepts (and is the number of
    /// bytes to keep, the snapshot length for libpcap's programs).
    #[inline]
    pub fn run(&self, data: &[u8], orig_len: u32) -> u32 {
        if self.match_all {
            // The program is `ret #k`; no need to interpret it.
            return self.insns[0].k;
        }
        self.program.run(data, orig_len)
    }

    /// True when the packet passes the filter (the program returns non-zero), exactly when
    /// `tcpdump -r` would keep it.
    #[inline]
    pub fn matches(&self, data: &[u8], orig_len: u32) -> bool {
        self.run(data, orig_len) != 0
    }

    /// The raw program, laid out like `struct sock_filter` for `SO_ATTACH_FILTER`.
    pub fn instructions(&self) -> &[Insn] {
        &self.insns
    }

    /// True for the filter of an empty expression, which accepts everything.
    pub fn is_match_all(&self) -> bool {
        self.match_all
    }

    /// True when the program jumps backward (libpcap's `protochain`): the Linux kernel refuses
    /// such programs, so a live capture must filter them in user space.
    pub fn has_backward_jumps(&self) -> bool {
        self.backward_jumps
    }

    /// The program in `tcpdump -d` form.
    pub fn listing(&self) -> Listing<'_> {
        Listing(&self.insns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync_clone<T: Send + Sync + Clone>() {}

    #[test]
    fn filter_is_send_sync_clone() {
        assert_send_sync_clone::<Filter>();
    }

    #[test]
    fn insn_layout_matches_sock_filter() {
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        assert_eq!(std::mem::align_of::<Insn>(), 4);
        let i = Insn::jump(0x1234, 0xdead_beef, 7, 9);
        // SAFETY: Insn is repr(C) plain data of 8 bytes; reading its bytes is fine.
        let bytes: [u8; 8] = unsafe { std::mem::transmute(i) };
        assert_eq!(&bytes[0..2], &0x1234u16.to_ne_bytes());
        assert_eq!(bytes[2], 7);
        assert_eq!(bytes[3], 9);
        assert_eq!(&bytes[4..8], &0xdead_beefu32.to_ne_bytes());
    }

    #[test]
    fn blank_expressions_match_all() {
        for e in ["", "   ", " \t\n\r "] {
            let f = Filter::compile(e, LinkType::ETHERNET, 65535).unwrap();
            assert!(f.is_match_all());
            assert!(f.matches(&[], 0));
            assert_eq!(f.run(&[1, 2, 3], 3), 65535);
        }
        // Even for link types libpcap cannot compile for.
        let f = Filter::compile("", LinkType(300), 0).unwrap();
        assert_eq!(f.instructions(), &[Insn::stmt(0x06, 262_144)]);
    }

    #[test]
    fn snaplen_rule() {
        assert_eq!(effective_snaplen(0), 262_144);
        assert_eq!(effective_snaplen(1), 1);
        assert_eq!(effective_snaplen(262_144), 262_144);
        assert_eq!(effective_snaplen(262_145), 262_144);
    }
}
