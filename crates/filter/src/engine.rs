//! weir's classic BPF interpreter: runs a validated, pre-decoded program on one packet.
//!
//! The semantics are those of libpcap 1.10's `bpf_filter()` (bpf_filter.c), the function
//! `pcap_offline_filter()` and so `tcpdump -r` use:
//!
//! * a packet load that does not fit in the captured bytes ends the program with 0 (reject),
//!   including Linux's ancillary `SKF_AD_*` offsets (≥ 0xfffff000), which userland cannot serve;
//! * `len` loads the length on the wire, not the captured length;
//! * division or modulo by X == 0 ends the program with 0;
//! * shifts by X ≥ 32 give 0; constant shifts by k ≥ 32 (only reachable with
//!   [`Validation::Libpcap`](crate::Validation::Libpcap)) shift by `k & 31`, which is what
//!   libpcap 1.10's `A <<= pc->k` does on x86-64;
//! * arithmetic wraps modulo 2^32; the scratch memory starts zeroed (libpcap leaves it
//!   uninitialised, and its compiler never reads a word before writing it).
//!
//! Validation ([`crate::program`]) has already checked every opcode, memory index and jump target
//! and that the program ends in `ret`, so the loop below only checks packet bounds. Jump targets
//! are absolute indices, and indexing the operation slice keeps even a logic error here from
//! reading outside it (no `unsafe`).
//!
//! Speed comes from doing less per packet than libpcap's `switch`, measured with
//! `bench/src/bin/bench_bpf.rs`: the idioms libpcap's compiler emits most (`load; jeq`, `ld; and;
//! jeq` for networks, `ldxb 4*([14]&0xf); ldh [x+14]; jeq` for ports) run as single fused
//! operations (`fuse`), conditional jumps are real branches, and programs without scratch
//! memory do not clear it. Typical filters run 1.3–2× faster than libpcap's interpreter.

use std::num::NonZeroU32;

/// A decoded instruction. Jump targets are absolute instruction indices, already checked to be
/// inside the program.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Op {
    /// Return the constant.
    RetK(u32),
    /// Return A.
    RetA,
    /// A = 32-bit big-endian word at k.
    LdAbsW(u32),
    /// A = 16-bit big-endian half-word at k.
    LdAbsH(u32),
    /// A = byte at k.
    LdAbsB(u32),
    /// A = 32-bit word at X + k.
    LdIndW(u32),
    /// A = 16-bit half-word at X + k.
    LdIndH(u32),
    /// A = byte at X + k.
    LdIndB(u32),
    /// A = wire length.
    LdLen,
    /// X = wire length.
    LdxLen,
    /// A = k.
    LdImm(u32),
    /// X = k.
    LdxImm(u32),
    /// A = M[k].
    LdMem(u8),
    /// X = M[k].
    LdxMem(u8),
    /// X = 4 * (byte at k & 0xf).
    LdxMsh(u32),
    /// M[k] = A.
    St(u8),
    /// M[k] = X.
    Stx(u8),
    /// Jump forward to the target.
    Ja(u32),
    /// Jump backward to the target (libpcap's protochain loops); counted against a budget.
    JaBack(u32),
    /// Jump if A == k.
    JeqK { k: u32, jt: u32, jf: u32 },
    /// Jump if A > k.
    JgtK { k: u32, jt: u32, jf: u32 },
    /// Jump if A >= k.
    JgeK { k: u32, jt: u32, jf: u32 },
    /// Jump if A & k != 0.
    JsetK { k: u32, jt: u32, jf: u32 },
    /// Jump if A == X.
    JeqX { jt: u32, jf: u32 },
    /// Jump if A > X.
    JgtX { jt: u32, jf: u32 },
    /// Jump if A >= X.
    JgeX { jt: u32, jf: u32 },
    /// Jump if A & X != 0.
    JsetX { jt: u32, jf: u32 },
    /// A += k.
    AddK(u32),
    /// A -= k.
    SubK(u32),
    /// A *= k.
    MulK(u32),
    /// A /= k (k != 0 checked by validation).
    DivK(NonZeroU32),
    /// A %= k (k != 0 checked by validation).
    ModK(NonZeroU32),
    /// A &= k.
    AndK(u32),
    /// A |= k.
    OrK(u32),
    /// A ^= k.
    XorK(u32),
    /// A <<= k (mod 32, as x86 does).
    LshK(u32),
    /// A >>= k (mod 32, as x86 does).
    RshK(u32),
    /// A += X.
    AddX,
    /// A -= X.
    SubX,
    /// A *= X.
    MulX,
    /// A /= X, reject when X == 0.
    DivX,
    /// A %= X, reject when X == 0.
    ModX,
    /// A &= X.
    AndX,
    /// A |= X.
    OrX,
    /// A ^= X.
    XorX,
    /// A <<= X, or 0 when X >= 32.
    LshX,
    /// A >>= X, or 0 when X >= 32.
    RshX,
    /// A = -A.
    Neg,
    /// X = A.
    Tax,
    /// A = X.
    Txa,

    // Fused pairs (see `fuse`): a packet load into A followed by a conditional jump on A,
    // done in one dispatch. A is set as the load would set it.
    /// `ld [off]; jeq #k`.
    JeqAbsW { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldh [off]; jeq #k`.
    JeqAbsH { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldb [off]; jeq #k`.
    JeqAbsB { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ld [off]; jgt #k`.
    JgtAbsW { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldh [off]; jgt #k`.
    JgtAbsH { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldb [off]; jgt #k`.
    JgtAbsB { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ld [off]; jge #k`.
    JgeAbsW { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldh [off]; jge #k`.
    JgeAbsH { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldb [off]; jge #k`.
    JgeAbsB { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ld [off]; jset #k`.
    JsetAbsW { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldh [off]; jset #k`.
    JsetAbsH { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldb [off]; jset #k`.
    JsetAbsB { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldh [x + off]; jeq #k`.
    JeqIndH { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldb [x + off]; jeq #k`.
    JeqIndB { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldh [x + off]; jgt #k`.
    JgtIndH { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldh [x + off]; jge #k`.
    JgeIndH { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldb [x + off]; jset #k`.
    JsetIndB { off: u32, k: u32, jt: u32, jf: u32 },
    /// `ldxb 4*([msh]&0xf); ldh [x + off]`: the TCP/UDP port load idiom.
    MshIndH { msh: u32, off: u32 },
    /// `ldxb 4*([msh]&0xf); ldh [x + off]; jeq #k`: a port test.
    MshJeqIndH {
        msh: u32,
        off: u32,
        k: u32,
        jt: u32,
        jf: u32,
    },
    /// `ldxb 4*([msh]&0xf); ldh [x + off]; jge #k`: a port range test.
    MshJgeIndH {
        msh: u32,
        off: u32,
        k: u32,
        jt: u32,
        jf: u32,
    },
    /// `ld [off]; and #mask; jeq #k`: a network test.
    JeqMaskAbsW {
        off: u32,
        mask: u32,
        k: u32,
        jt: u32,
        jf: u32,
    },
    /// `ldb [off]; and #mask; jeq #k`: e.g. the IP version test on raw IP.
    JeqMaskAbsB {
        off: u32,
        mask: u32,
        k: u32,
        jt: u32,
        jf: u32,
    },
    /// `and #mask; jeq #k`.
    JeqMaskK { mask: u32, k: u32, jt: u32, jf: u32 },
    /// `ldxb 4*([msh]&0xf); ldb [x + off]`.
    MshIndB { msh: u32, off: u32 },
}

impl Op {
    /// True for operations that read or write scratch memory.
    fn uses_memory(self) -> bool {
        matches!(self, Op::LdMem(_) | Op::LdxMem(_) | Op::St(_) | Op::Stx(_))
    }
}

/// An executable program: the decoded operations after fusion, and whether any of them touches
/// scratch memory (when none does, the engine skips clearing it).
#[derive(Clone, Debug)]
pub(crate) struct Program {
    ops: Box<[Op]>,
    uses_memory: bool,
}

impl Program {
    /// Builds the executable form of validated operations.
    pub(crate) fn new(mut ops: Vec<Op>) -> Program {
        fuse(&mut ops);
        let uses_memory = ops.iter().any(|o| o.uses_memory());
        Program {
            ops: ops.into_boxed_slice(),
            uses_memory,
        }
    }

    /// Runs the program on one packet (see [`run`]).
    #[inline]
    pub(crate) fn run(&self, data: &[u8], wirelen: u32) -> u32 {
        if self.uses_memory {
            run::<true>(&self.ops, data, wirelen)
        } else {
            run::<false>(&self.ops, data, wirelen)
        }
    }
}

/// Replaces each "load into A; conditional jump on A" pair (and the port-load idiom) by one
/// fused operation at the first slot. The second slot keeps its own operation, so a jump that
/// lands on it still runs it alone; indices, and so jump targets, do not change.
fn fuse(ops: &mut [Op]) {
    for i in 0..ops.len().saturating_sub(1) {
        // Triples first. Only ops[i] is ever rewritten, so ops[i + 1] and ops[i + 2] are still
        // the decoded instructions here.
        if let Some(&third) = ops.get(i + 2) {
            let fused = match (ops[i], ops[i + 1], third) {
                (Op::LdxMsh(msh), Op::LdIndH(off), Op::JeqK { k, jt, jf }) => {
                    Some(Op::MshJeqIndH {
                        msh,
                        off,
                        k,
                        jt,
                        jf,
                    })
                }
                (Op::LdxMsh(msh), Op::LdIndH(off), Op::JgeK { k, jt, jf }) => {
                    Some(Op::MshJgeIndH {
                        msh,
                        off,
                        k,
                        jt,
                        jf,
                    })
                }
                (Op::LdAbsW(off), Op::AndK(mask), Op::JeqK { k, jt, jf }) => {
                    Some(Op::JeqMaskAbsW {
                        off,
                        mask,
                        k,
                        jt,
                        jf,
                    })
                }
                (Op::LdAbsB(off), Op::AndK(mask), Op::JeqK { k, jt, jf }) => {
                    Some(Op::JeqMaskAbsB {
                        off,
                        mask,
                        k,
                        jt,
                        jf,
                    })
                }
                _ => None,
            };
            if let Some(f) = fused {
                ops[i] = f;
                continue;
            }
        }
        let fused = match (ops[i], ops[i + 1]) {
            (Op::LdAbsW(off), Op::JeqK { k, jt, jf }) => Op::JeqAbsW { off, k, jt, jf },
            (Op::LdAbsH(off), Op::JeqK { k, jt, jf }) => Op::JeqAbsH { off, k, jt, jf },
            (Op::LdAbsB(off), Op::JeqK { k, jt, jf }) => Op::JeqAbsB { off, k, jt, jf },
            (Op::LdAbsW(off), Op::JgtK { k, jt, jf }) => Op::JgtAbsW { off, k, jt, jf },
            (Op::LdAbsH(off), Op::JgtK { k, jt, jf }) => Op::JgtAbsH { off, k, jt, jf },
            (Op::LdAbsB(off), Op::JgtK { k, jt, jf }) => Op::JgtAbsB { off, k, jt, jf },
            (Op::LdAbsW(off), Op::JgeK { k, jt, jf }) => Op::JgeAbsW { off, k, jt, jf },
            (Op::LdAbsH(off), Op::JgeK { k, jt, jf }) => Op::JgeAbsH { off, k, jt, jf },
            (Op::LdAbsB(off), Op::JgeK { k, jt, jf }) => Op::JgeAbsB { off, k, jt, jf },
            (Op::LdAbsW(off), Op::JsetK { k, jt, jf }) => Op::JsetAbsW { off, k, jt, jf },
            (Op::LdAbsH(off), Op::JsetK { k, jt, jf }) => Op::JsetAbsH { off, k, jt, jf },
            (Op::LdAbsB(off), Op::JsetK { k, jt, jf }) => Op::JsetAbsB { off, k, jt, jf },
            (Op::LdIndH(off), Op::JeqK { k, jt, jf }) => Op::JeqIndH { off, k, jt, jf },
            (Op::LdIndB(off), Op::JeqK { k, jt, jf }) => Op::JeqIndB { off, k, jt, jf },
            (Op::LdIndH(off), Op::JgtK { k, jt, jf }) => Op::JgtIndH { off, k, jt, jf },
            (Op::LdIndH(off), Op::JgeK { k, jt, jf }) => Op::JgeIndH { off, k, jt, jf },
            (Op::LdIndB(off), Op::JsetK { k, jt, jf }) => Op::JsetIndB { off, k, jt, jf },
            (Op::LdxMsh(msh), Op::LdIndH(off)) => Op::MshIndH { msh, off },
            (Op::LdxMsh(msh), Op::LdIndB(off)) => Op::MshIndB { msh, off },
            (Op::AndK(mask), Op::JeqK { k, jt, jf }) => Op::JeqMaskK { mask, k, jt, jf },
            _ => continue,
        };
        ops[i] = fused;
    }
}

/// How many backward jumps one run may take before it is cut short with 0 (reject).
///
/// Only libpcap's `protochain` code jumps backward; each turn of its loop (two jumps at most)
/// moves past one extension header of at least 8 bytes, so a packet of 4 MiB cannot need more.
/// libpcap 1.10 has no limit (a looping program hangs it); libpcap 1.11 will stop after 64.
pub const MAX_BACKWARD_JUMPS: u32 = 1 << 20;

#[inline(always)]
fn word(data: &[u8], off: usize) -> Option<u32> {
    data.get(off..)?
        .first_chunk::<4>()
        .map(|b| u32::from_be_bytes(*b))
}

#[inline(always)]
fn half(data: &[u8], off: usize) -> Option<u32> {
    data.get(off..)?
        .first_chunk::<2>()
        .map(|b| u32::from(u16::from_be_bytes(*b)))
}

#[inline(always)]
fn byte(data: &[u8], off: usize) -> Option<u32> {
    data.get(off).map(|&b| u32::from(b))
}

/// X + k without wrapping: libpcap refuses any indexed load whose X + k passes the captured
/// length, so a sum that overflows `usize` can simply fail the load.
#[inline(always)]
fn ind(x: u32, k: u32) -> usize {
    (x as usize).saturating_add(k as usize)
}

/// The false target of a conditional jump. Marking it `#[cold]` makes the compiler emit a real
/// branch instead of a `cmov`: the CPU then predicts the next instruction rather than waiting for
/// the packet load and the comparison (worth ~15 % on port filters). Which side is "cold" does not
/// matter; the hardware predictor learns the actual direction.
#[cold]
fn cold_target(t: u32) -> usize {
    t as usize
}

/// Runs `ops` on a packet whose captured bytes are `data` and whose length on the wire is
/// `wirelen`; returns what the program returns (0 rejects, anything else accepts that many
/// bytes), exactly as libpcap's `bpf_filter(insns, data, wirelen, data.len())` would.
///
/// `MEM` is false only for programs without scratch memory operations: then the memory is
/// never read, and the compiler drops its clearing.
fn run<const MEM: bool>(ops: &[Op], data: &[u8], wirelen: u32) -> u32 {
    let mut a: u32 = 0;
    let mut x: u32 = 0;
    let mut mem = [0u32; 16];
    let mut back: u32 = 0;
    let mut pc: usize = 0;
    macro_rules! load {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return 0,
            }
        };
    }
    macro_rules! branch {
        ($cond:expr, $jt:expr, $jf:expr) => {
            if $cond {
                pc = $jt as usize
            } else {
                pc = cold_target($jf)
            }
        };
    }
    loop {
        let op = ops[pc];
        pc += 1;
        match op {
            Op::RetK(k) => return k,
            Op::RetA => return a,
            Op::LdAbsW(k) => a = load!(word(data, k as usize)),
            Op::LdAbsH(k) => a = load!(half(data, k as usize)),
            Op::LdAbsB(k) => a = load!(byte(data, k as usize)),
            Op::LdIndW(k) => a = load!(word(data, ind(x, k))),
            Op::LdIndH(k) => a = load!(half(data, ind(x, k))),
            Op::LdIndB(k) => a = load!(byte(data, ind(x, k))),
            Op::LdLen => a = wirelen,
            Op::LdxLen => x = wirelen,
            Op::LdImm(k) => a = k,
            Op::LdxImm(k) => x = k,
            // Validation keeps memory indices below 16; the mask only spares a bounds check.
            // Without MEM these operations do not occur in the program.
            Op::LdMem(i) if MEM => a = mem[usize::from(i) & 15],
            Op::LdxMem(i) if MEM => x = mem[usize::from(i) & 15],
            Op::St(i) if MEM => mem[usize::from(i) & 15] = a,
            Op::Stx(i) if MEM => mem[usize::from(i) & 15] = x,
            Op::LdMem(_) | Op::LdxMem(_) | Op::St(_) | Op::Stx(_) => return 0,
            Op::LdxMsh(k) => x = (load!(byte(data, k as usize)) & 0xf) << 2,
            Op::Ja(t) => pc = t as usize,
            Op::JaBack(t) => {
                back += 1;
                if back > MAX_BACKWARD_JUMPS {
                    return 0;
                }
                pc = t as usize;
            }
            Op::JeqK { k, jt, jf } => branch!(a == k, jt, jf),
            Op::JgtK { k, jt, jf } => branch!(a > k, jt, jf),
            Op::JgeK { k, jt, jf } => branch!(a >= k, jt, jf),
            Op::JsetK { k, jt, jf } => branch!(a & k != 0, jt, jf),
            Op::JeqX { jt, jf } => branch!(a == x, jt, jf),
            Op::JgtX { jt, jf } => branch!(a > x, jt, jf),
            Op::JgeX { jt, jf } => branch!(a >= x, jt, jf),
            Op::JsetX { jt, jf } => branch!(a & x != 0, jt, jf),
            Op::AddK(k) => a = a.wrapping_add(k),
            Op::SubK(k) => a = a.wrapping_sub(k),
            Op::MulK(k) => a = a.wrapping_mul(k),
            Op::DivK(k) => a /= k,
            Op::ModK(k) => a %= k,
            Op::AndK(k) => a &= k,
            Op::OrK(k) => a |= k,
            Op::XorK(k) => a ^= k,
            Op::LshK(k) => a = a.wrapping_shl(k),
            Op::RshK(k) => a = a.wrapping_shr(k),
            Op::AddX => a = a.wrapping_add(x),
            Op::SubX => a = a.wrapping_sub(x),
            Op::MulX => a = a.wrapping_mul(x),
            Op::DivX => match a.checked_div(x) {
                Some(v) => a = v,
                None => return 0,
            },
            Op::ModX => match a.checked_rem(x) {
                Some(v) => a = v,
                None => return 0,
            },
            Op::AndX => a &= x,
            Op::OrX => a |= x,
            Op::XorX => a ^= x,
            Op::LshX => a = a.checked_shl(x).unwrap_or(0),
            Op::RshX => a = a.checked_shr(x).unwrap_or(0),
            Op::Neg => a = a.wrapping_neg(),
            Op::Tax => x = a,
            Op::Txa => a = x,

            Op::JeqAbsW { off, k, jt, jf } => {
                a = load!(word(data, off as usize));
                branch!(a == k, jt, jf)
            }
            Op::JeqAbsH { off, k, jt, jf } => {
                a = load!(half(data, off as usize));
                branch!(a == k, jt, jf)
            }
            Op::JeqAbsB { off, k, jt, jf } => {
                a = load!(byte(data, off as usize));
                branch!(a == k, jt, jf)
            }
            Op::JgtAbsW { off, k, jt, jf } => {
                a = load!(word(data, off as usize));
                branch!(a > k, jt, jf)
            }
            Op::JgtAbsH { off, k, jt, jf } => {
                a = load!(half(data, off as usize));
                branch!(a > k, jt, jf)
            }
            Op::JgtAbsB { off, k, jt, jf } => {
                a = load!(byte(data, off as usize));
                branch!(a > k, jt, jf)
            }
            Op::JgeAbsW { off, k, jt, jf } => {
                a = load!(word(data, off as usize));
                branch!(a >= k, jt, jf)
            }
            Op::JgeAbsH { off, k, jt, jf } => {
                a = load!(half(data, off as usize));
                branch!(a >= k, jt, jf)
            }
            Op::JgeAbsB { off, k, jt, jf } => {
                a = load!(byte(data, off as usize));
                branch!(a >= k, jt, jf)
            }
            Op::JsetAbsW { off, k, jt, jf } => {
                a = load!(word(data, off as usize));
                branch!(a & k != 0, jt, jf)
            }
            Op::JsetAbsH { off, k, jt, jf } => {
                a = load!(half(data, off as usize));
                branch!(a & k != 0, jt, jf)
            }
            Op::JsetAbsB { off, k, jt, jf } => {
                a = load!(byte(data, off as usize));
                branch!(a & k != 0, jt, jf)
            }
            Op::JeqIndH { off, k, jt, jf } => {
                a = load!(half(data, ind(x, off)));
                branch!(a == k, jt, jf)
            }
            Op::JeqIndB { off, k, jt, jf } => {
                a = load!(byte(data, ind(x, off)));
                branch!(a == k, jt, jf)
            }
            Op::JgtIndH { off, k, jt, jf } => {
                a = load!(half(data, ind(x, off)));
                branch!(a > k, jt, jf)
            }
            Op::JgeIndH { off, k, jt, jf } => {
                a = load!(half(data, ind(x, off)));
                branch!(a >= k, jt, jf)
            }
            Op::JsetIndB { off, k, jt, jf } => {
                a = load!(byte(data, ind(x, off)));
                branch!(a & k != 0, jt, jf)
            }
            Op::MshIndH { msh, off } => {
                x = (load!(byte(data, msh as usize)) & 0xf) << 2;
                a = load!(half(data, ind(x, off)));
                pc += 1;
            }
            Op::MshJeqIndH {
                msh,
                off,
                k,
                jt,
                jf,
            } => {
                x = (load!(byte(data, msh as usize)) & 0xf) << 2;
                a = load!(half(data, ind(x, off)));
                branch!(a == k, jt, jf)
            }
            Op::MshJgeIndH {
                msh,
                off,
                k,
                jt,
                jf,
            } => {
                x = (load!(byte(data, msh as usize)) & 0xf) << 2;
                a = load!(half(data, ind(x, off)));
                branch!(a >= k, jt, jf)
            }
            Op::JeqMaskAbsW {
                off,
                mask,
                k,
                jt,
                jf,
            } => {
                a = load!(word(data, off as usize)) & mask;
                branch!(a == k, jt, jf)
            }
            Op::JeqMaskAbsB {
                off,
                mask,
                k,
                jt,
                jf,
            } => {
                a = load!(byte(data, off as usize)) & mask;
                branch!(a == k, jt, jf)
            }
            Op::JeqMaskK { mask, k, jt, jf } => {
                a &= mask;
                branch!(a == k, jt, jf)
            }
            Op::MshIndB { msh, off } => {
                x = (load!(byte(data, msh as usize)) & 0xf) << 2;
                a = load!(byte(data, ind(x, off)));
                pc += 1;
            }
        }
    }
}
