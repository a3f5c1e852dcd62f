//! Classic BPF programs as data: the [`Insn`] instruction, the opcode constants, and validation.
//!
//! Validation happens once, when a [`crate::Filter`] is built; it also decodes every instruction
//! into the engine's compact operation form, so that the interpreter's hot loop
//! checks nothing but packet bounds.
//!
//! Two rule sets exist ([`Validation`]):
//!
//! * [`Validation::Strict`] — what [`crate::Filter::from_instructions`] applies to programs from
//!   outside: libpcap's `bpf_validate()` (jumps in range, ends in `ret`, scratch memory index
//!   below 16, no division or modulo by the constant 0), plus what the Linux kernel and current
//!   libpcap also demand: jumps only go forward, constant shifts are below 32, and every opcode is
//!   one that the interpreter knows (libpcap 1.10's `bpf_filter()` calls `abort()` on unknown
//!   opcodes that its `bpf_validate()` lets through, e.g. `0x1f` or `neg x`).
//! * [`Validation::Libpcap`] — what libpcap 1.10 accepts from its own compiler: the same, except
//!   that backward unconditional jumps (emitted by `ip6 protochain` / `ip protochain`) and
//!   constant shifts of 32 or more are allowed, as in libpcap 1.10.3's `bpf_validate()`. A `ja`
//!   to itself (a certain infinite loop) is still rejected.

use std::fmt;
use std::num::NonZeroU32;

use crate::engine::Op;

/// One classic BPF instruction, laid out exactly like libpcap's `struct bpf_insn` and the Linux
/// kernel's `struct sock_filter` (8 bytes: `code`, `jt`, `jf`, `k`), so a slice of them can be
/// handed to `SO_ATTACH_FILTER` as it is.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Insn {
    /// Opcode: class | size/operation | mode/source (see [`op`]).
    pub code: u16,
    /// Offset (in instructions, from the next one) taken when a conditional jump is true.
    pub jt: u8,
    /// Offset taken when a conditional jump is false.
    pub jf: u8,
    /// The generic operand: constant, packet offset, memory index or jump offset.
    pub k: u32,
}

impl Insn {
    /// An instruction that is not a conditional jump (`BPF_STMT` in C).
    pub const fn stmt(code: u16, k: u32) -> Insn {
        Insn {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    /// A conditional jump (`BPF_JUMP` in C).
    pub const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
        Insn { code, jt, jf, k }
    }
}

/// Opcode constants, with libpcap's names (`BPF_LD`, `BPF_ABS`...), to build programs by hand.
pub mod op {
    /// Load into the accumulator A.
    pub const BPF_LD: u16 = 0x00;
    /// Load into the index register X.
    pub const BPF_LDX: u16 = 0x01;
    /// Store A into scratch memory.
    pub const BPF_ST: u16 = 0x02;
    /// Store X into scratch memory.
    pub const BPF_STX: u16 = 0x03;
    /// Arithmetic and logic on A.
    pub const BPF_ALU: u16 = 0x04;
    /// Jumps.
    pub const BPF_JMP: u16 = 0x05;
    /// Return (accept that many bytes; 0 rejects).
    pub const BPF_RET: u16 = 0x06;
    /// Register transfers.
    pub const BPF_MISC: u16 = 0x07;

    /// 32-bit load.
    pub const BPF_W: u16 = 0x00;
    /// 16-bit load.
    pub const BPF_H: u16 = 0x08;
    /// 8-bit load.
    pub const BPF_B: u16 = 0x10;

    /// Immediate operand.
    pub const BPF_IMM: u16 = 0x00;
    /// Packet data at absolute offset k.
    pub const BPF_ABS: u16 = 0x20;
    /// Packet data at offset X + k.
    pub const BPF_IND: u16 = 0x40;
    /// Scratch memory word k.
    pub const BPF_MEM: u16 = 0x60;
    /// The packet's length on the wire.
    pub const BPF_LEN: u16 = 0x80;
    /// `X = 4 * (pkt[k] & 0xf)` (the IPv4 header length idiom).
    pub const BPF_MSH: u16 = 0xa0;

    /// A + operand.
    pub const BPF_ADD: u16 = 0x00;
    /// A - operand.
    pub const BPF_SUB: u16 = 0x10;
    /// A * operand.
    pub const BPF_MUL: u16 = 0x20;
    /// A / operand.
    pub const BPF_DIV: u16 = 0x30;
    /// A | operand.
    pub const BPF_OR: u16 = 0x40;
    /// A & operand.
    pub const BPF_AND: u16 = 0x50;
    /// A << operand.
    pub const BPF_LSH: u16 = 0x60;
    /// A >> operand.
    pub const BPF_RSH: u16 = 0x70;
    /// -A.
    pub const BPF_NEG: u16 = 0x80;
    /// A % operand.
    pub const BPF_MOD: u16 = 0x90;
    /// A ^ operand.
    pub const BPF_XOR: u16 = 0xa0;

    /// Unconditional jump by k.
    pub const BPF_JA: u16 = 0x00;
    /// Jump if A == operand.
    pub const BPF_JEQ: u16 = 0x10;
    /// Jump if A > operand.
    pub const BPF_JGT: u16 = 0x20;
    /// Jump if A >= operand.
    pub const BPF_JGE: u16 = 0x30;
    /// Jump if A & operand != 0.
    pub const BPF_JSET: u16 = 0x40;

    /// The operand is the constant k.
    pub const BPF_K: u16 = 0x00;
    /// The operand is X.
    pub const BPF_X: u16 = 0x08;
    /// `ret` returns A.
    pub const BPF_A: u16 = 0x10;

    /// Copy A to X.
    pub const BPF_TAX: u16 = 0x00;
    /// Copy X to A.
    pub const BPF_TXA: u16 = 0x80;

    /// Number of 32-bit scratch memory words.
    pub const BPF_MEMWORDS: u32 = 16;

    /// The class bits of an opcode.
    pub const fn class(code: u16) -> u16 {
        code & 0x07
    }
}

use op::*;

/// Which rules a program must follow to be accepted (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Validation {
    /// Forward jumps only, constant shifts below 32: for programs from outside.
    Strict,
    /// libpcap 1.10's own rules: also backward `ja` and constant shifts ≥ 32 (programs that
    /// libpcap's compiler produced).
    Libpcap,
}

/// Why a program was refused. `at` is the index of the offending instruction.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum ProgramError {
    /// A program needs at least one instruction.
    #[error("empty program")]
    Empty,
    /// The program is longer than weir accepts.
    #[error("program has {0} instructions, more than the {max} allowed", max = MAX_INSNS)]
    TooLong(usize),
    /// An opcode that the interpreter does not know.
    #[error("instruction {at}: unknown opcode {code:#06x}")]
    BadOpcode {
        /// Instruction index.
        at: usize,
        /// The opcode.
        code: u16,
    },
    /// A jump whose target lies past the last instruction.
    #[error("instruction {at}: jump past the end of the program")]
    JumpOutOfRange {
        /// Instruction index.
        at: usize,
    },
    /// A backward jump, refused by [`Validation::Strict`].
    #[error("instruction {at}: backward jump")]
    BackwardJump {
        /// Instruction index.
        at: usize,
    },
    /// A jump to itself: a certain infinite loop.
    #[error("instruction {at}: jump to itself")]
    SelfJump {
        /// Instruction index.
        at: usize,
    },
    /// A scratch memory index of 16 or more.
    #[error("instruction {at}: scratch memory index {k} out of range (0..16)")]
    MemIndex {
        /// Instruction index.
        at: usize,
        /// The index.
        k: u32,
    },
    /// Division or modulo by the constant 0.
    #[error("instruction {at}: division by constant zero")]
    DivByZero {
        /// Instruction index.
        at: usize,
    },
    /// A constant shift by 32 or more, refused by [`Validation::Strict`].
    #[error("instruction {at}: shift by {k} bits (more than 31)")]
    ShiftTooLarge {
        /// Instruction index.
        at: usize,
        /// The shift count.
        k: u32,
    },
    /// The last instruction is not a `ret`.
    #[error("the last instruction is not a return")]
    NoFinalReturn,
}

/// The longest program accepted: libpcap's own interpreter limit (`BPF_MAXINSNS` in current
/// libpcap's bpf_filter.c), far more than any real filter and far less than `u32::MAX`.
pub const MAX_INSNS: usize = 3_060_000;

/// Validates `insns` under `rules` and decodes them into engine operations, with jump targets
/// turned into absolute instruction indices.
pub(crate) fn decode(insns: &[Insn], rules: Validation) -> Result<Vec<Op>, ProgramError> {
    if insns.is_empty() {
        return Err(ProgramError::Empty);
    }
    if insns.len() > MAX_INSNS {
        return Err(ProgramError::TooLong(insns.len()));
    }
    let len = insns.len() as u32;
    let mut ops = Vec::with_capacity(insns.len());
    for (at, insn) in insns.iter().enumerate() {
        ops.push(decode_one(at, *insn, len, rules)?);
    }
    if op::class(insns[insns.len() - 1].code) != BPF_RET {
        return Err(ProgramError::NoFinalReturn);
    }
    Ok(ops)
}

fn mem_index(at: usize, k: u32) -> Result<u8, ProgramError> {
    if k < BPF_MEMWORDS {
        Ok(k as u8)
    } else {
        Err(ProgramError::MemIndex { at, k })
    }
}

fn non_zero(at: usize, k: u32) -> Result<NonZeroU32, ProgramError> {
    NonZeroU32::new(k).ok_or(ProgramError::DivByZero { at })
}

fn shift(at: usize, k: u32, rules: Validation) -> Result<u32, ProgramError> {
    if k >= 32 && rules == Validation::Strict {
        Err(ProgramError::ShiftTooLarge { at, k })
    } else {
        Ok(k)
    }
}

fn decode_one(at: usize, insn: Insn, len: u32, rules: Validation) -> Result<Op, ProgramError> {
    let k = insn.k;
    // The instruction after this one; at < len <= MAX_INSNS, so no overflow.
    let next = at as u32 + 1;
    let cond = |jt: u8, jf: u8| -> Result<(u32, u32), ProgramError> {
        let (t, f) = (next + u32::from(jt), next + u32::from(jf));
        if t >= len || f >= len {
            Err(ProgramError::JumpOutOfRange { at })
        } else {
            Ok((t, f))
        }
    };
    let op = match insn.code {
        c if c == BPF_RET | BPF_K => Op::RetK(k),
        c if c == BPF_RET | BPF_A => Op::RetA,

        c if c == BPF_LD | BPF_W | BPF_ABS => Op::LdAbsW(k),
        c if c == BPF_LD | BPF_H | BPF_ABS => Op::LdAbsH(k),
        c if c == BPF_LD | BPF_B | BPF_ABS => Op::LdAbsB(k),
        c if c == BPF_LD | BPF_W | BPF_IND => Op::LdIndW(k),
        c if c == BPF_LD | BPF_H | BPF_IND => Op::LdIndH(k),
        c if c == BPF_LD | BPF_B | BPF_IND => Op::LdIndB(k),
        c if c == BPF_LD | BPF_W | BPF_LEN => Op::LdLen,
        c if c == BPF_LDX | BPF_W | BPF_LEN => Op::LdxLen,
        c if c == BPF_LD | BPF_IMM => Op::LdImm(k),
        c if c == BPF_LDX | BPF_IMM => Op::LdxImm(k),
        c if c == BPF_LD | BPF_MEM => Op::LdMem(mem_index(at, k)?),
        c if c == BPF_LDX | BPF_MEM => Op::LdxMem(mem_index(at, k)?),
        c if c == BPF_LDX | BPF_MSH | BPF_B => Op::LdxMsh(k),
        c if c == BPF_ST => Op::St(mem_index(at, k)?),
        c if c == BPF_STX => Op::Stx(mem_index(at, k)?),

        c if c == BPF_JMP | BPF_JA => {
            // As libpcap: the target is computed modulo 2^32, so a "negative" k is a backward
            // jump, and any target outside the program is refused whichever way it points.
            let target = next.wrapping_add(k);
            if target >= len {
                return Err(ProgramError::JumpOutOfRange { at });
            }
            if target as usize == at {
                return Err(ProgramError::SelfJump { at });
            }
            if target < next {
                if rules == Validation::Strict {
                    return Err(ProgramError::BackwardJump { at });
                }
                Op::JaBack(target)
            } else {
                Op::Ja(target)
            }
        }
        c if c == BPF_JMP | BPF_JEQ | BPF_K => {
            let (jt, jf) = cond(insn.jt, insn.jf)?;
            Op::JeqK { k, jt, jf }
        }
        c if c == BPF_JMP | BPF_JGT | BPF_K => {
            let (jt, jf) = cond(insn.jt, insn.jf)?;
            Op::JgtK { k, jt, jf }
        }
        c if c == BPF_JMP | BPF_JGE | BPF_K => {
            let (jt, jf) = cond(insn.jt, insn.jf)?;
            Op::JgeK { k, jt, jf }
        }
        c if c == BPF_JMP | BPF_JSET | BPF_K => {
            let (jt, jf) = cond(insn.jt, insn.jf)?;
            Op::JsetK { k, jt, jf }
        }
        c if c == BPF_JMP | BPF_JEQ | BPF_X => {
            let (jt, jf) = cond(insn.jt, insn.jf)?;
            Op::JeqX { jt, jf }
        }
        c if c == BPF_JMP | BPF_JGT | BPF_X => {
            let (jt, jf) = cond(insn.jt, insn.jf)?;
            Op::JgtX { jt, jf }
        }
        c if c == BPF_JMP | BPF_JGE | BPF_X => {
            let (jt, jf) = cond(insn.jt, insn.jf)?;
            Op::JgeX { jt, jf }
        }
        c if c == BPF_JMP | BPF_JSET | BPF_X => {
            let (jt, jf) = cond(insn.jt, insn.jf)?;
            Op::JsetX { jt, jf }
        }

        c if c == BPF_ALU | BPF_ADD | BPF_K => Op::AddK(k),
        c if c == BPF_ALU | BPF_SUB | BPF_K => Op::SubK(k),
        c if c == BPF_ALU | BPF_MUL | BPF_K => Op::MulK(k),
        c if c == BPF_ALU | BPF_DIV | BPF_K => Op::DivK(non_zero(at, k)?),
        c if c == BPF_ALU | BPF_MOD | BPF_K => Op::ModK(non_zero(at, k)?),
        c if c == BPF_ALU | BPF_AND | BPF_K => Op::AndK(k),
        c if c == BPF_ALU | BPF_OR | BPF_K => Op::OrK(k),
        c if c == BPF_ALU | BPF_XOR | BPF_K => Op::XorK(k),
        c if c == BPF_ALU | BPF_LSH | BPF_K => Op::LshK(shift(at, k, rules)?),
        c if c == BPF_ALU | BPF_RSH | BPF_K => Op::RshK(shift(at, k, rules)?),
        c if c == BPF_ALU | BPF_ADD | BPF_X => Op::AddX,
        c if c == BPF_ALU | BPF_SUB | BPF_X => Op::SubX,
        c if c == BPF_ALU | BPF_MUL | BPF_X => Op::MulX,
        c if c == BPF_ALU | BPF_DIV | BPF_X => Op::DivX,
        c if c == BPF_ALU | BPF_MOD | BPF_X => Op::ModX,
        c if c == BPF_ALU | BPF_AND | BPF_X => Op::AndX,
        c if c == BPF_ALU | BPF_OR | BPF_X => Op::OrX,
        c if c == BPF_ALU | BPF_XOR | BPF_X => Op::XorX,
        c if c == BPF_ALU | BPF_LSH | BPF_X => Op::LshX,
        c if c == BPF_ALU | BPF_RSH | BPF_X => Op::RshX,
        c if c == BPF_ALU | BPF_NEG => Op::Neg,

        c if c == BPF_MISC | BPF_TAX => Op::Tax,
        c if c == BPF_MISC | BPF_TXA => Op::Txa,

        code => return Err(ProgramError::BadOpcode { at, code }),
    };
    Ok(op)
}

/// Renders one instruction the way libpcap's `bpf_image()` does (what `tcpdump -d` prints), `pc`
/// being its index in the program.
pub fn image(insn: &Insn, pc: usize) -> String {
    let k = insn.k;
    // libpcap prints most operands with `%d`, i.e. as a signed int.
    let d = k as i32;
    let (op, operand): (&str, String) = match insn.code {
        c if c == BPF_RET | BPF_K => ("ret", format!("#{d}")),
        c if c == BPF_RET | BPF_A => ("ret", String::new()),
        c if c == BPF_LD | BPF_W | BPF_ABS => ("ld", format!("[{d}]")),
        c if c == BPF_LD | BPF_H | BPF_ABS => ("ldh", format!("[{d}]")),
        c if c == BPF_LD | BPF_B | BPF_ABS => ("ldb", format!("[{d}]")),
        c if c == BPF_LD | BPF_W | BPF_LEN => ("ld", "#pktlen".to_string()),
        c if c == BPF_LD | BPF_W | BPF_IND => ("ld", format!("[x + {d}]")),
        c if c == BPF_LD | BPF_H | BPF_IND => ("ldh", format!("[x + {d}]")),
        c if c == BPF_LD | BPF_B | BPF_IND => ("ldb", format!("[x + {d}]")),
        c if c == BPF_LD | BPF_IMM => ("ld", format!("#{k:#x}")),
        c if c == BPF_LDX | BPF_IMM => ("ldx", format!("#{k:#x}")),
        c if c == BPF_LDX | BPF_MSH | BPF_B => ("ldxb", format!("4*([{d}]&0xf)")),
        c if c == BPF_LD | BPF_MEM => ("ld", format!("M[{d}]")),
        c if c == BPF_LDX | BPF_MEM => ("ldx", format!("M[{d}]")),
        c if c == BPF_LDX | BPF_W | BPF_LEN => ("ldx", "#pktlen".to_string()),
        c if c == BPF_ST => ("st", format!("M[{d}]")),
        c if c == BPF_STX => ("stx", format!("M[{d}]")),
        c if c == BPF_JMP | BPF_JA => (
            "ja",
            format!("{}", (pc as u32).wrapping_add(1).wrapping_add(k) as i32),
        ),
        c if c == BPF_JMP | BPF_JGT | BPF_K => ("jgt", format!("#{k:#x}")),
        c if c == BPF_JMP | BPF_JGE | BPF_K => ("jge", format!("#{k:#x}")),
        c if c == BPF_JMP | BPF_JEQ | BPF_K => ("jeq", format!("#{k:#x}")),
        c if c == BPF_JMP | BPF_JSET | BPF_K => ("jset", format!("#{k:#x}")),
        c if c == BPF_JMP | BPF_JGT | BPF_X => ("jgt", "x".to_string()),
        c if c == BPF_JMP | BPF_JGE | BPF_X => ("jge", "x".to_string()),
        c if c == BPF_JMP | BPF_JEQ | BPF_X => ("jeq", "x".to_string()),
        c if c == BPF_JMP | BPF_JSET | BPF_X => ("jset", "x".to_string()),
        c if c == BPF_ALU | BPF_ADD | BPF_X => ("add", "x".to_string()),
        c if c == BPF_ALU | BPF_SUB | BPF_X => ("sub", "x".to_string()),
        c if c == BPF_ALU | BPF_MUL | BPF_X => ("mul", "x".to_string()),
        c if c == BPF_ALU | BPF_DIV | BPF_X => ("div", "x".to_string()),
        c if c == BPF_ALU | BPF_MOD | BPF_X => ("mod", "x".to_string()),
        c if c == BPF_ALU | BPF_AND | BPF_X => ("and", "x".to_string()),
        c if c == BPF_ALU | BPF_OR | BPF_X => ("or", "x".to_string()),
        c if c == BPF_ALU | BPF_XOR | BPF_X => ("xor", "x".to_string()),
        c if c == BPF_ALU | BPF_LSH | BPF_X => ("lsh", "x".to_string()),
        c if c == BPF_ALU | BPF_RSH | BPF_X => ("rsh", "x".to_string()),
        c if c == BPF_ALU | BPF_ADD | BPF_K => ("add", format!("#{d}")),
        c if c == BPF_ALU | BPF_SUB | BPF_K => ("sub", format!("#{d}")),
        c if c == BPF_ALU | BPF_MUL | BPF_K => ("mul", format!("#{d}")),
        c if c == BPF_ALU | BPF_DIV | BPF_K => ("div", format!("#{d}")),
        c if c == BPF_ALU | BPF_MOD | BPF_K => ("mod", format!("#{d}")),
        c if c == BPF_ALU | BPF_AND | BPF_K => ("and", format!("#{k:#x}")),
        c if c == BPF_ALU | BPF_OR | BPF_K => ("or", format!("#{k:#x}")),
        c if c == BPF_ALU | BPF_XOR | BPF_K => ("xor", format!("#{k:#x}")),
        c if c == BPF_ALU | BPF_LSH | BPF_K => ("lsh", format!("#{d}")),
        c if c == BPF_ALU | BPF_RSH | BPF_K => ("rsh", format!("#{d}")),
        c if c == BPF_ALU | BPF_NEG => ("neg", String::new()),
        c if c == BPF_MISC | BPF_TAX => ("tax", String::new()),
        c if c == BPF_MISC | BPF_TXA => ("txa", String::new()),
        c => ("unimp", format!("{c:#x}")),
    };
    let is_cond = op::class(insn.code) == BPF_JMP && (insn.code & 0xf0) != BPF_JA;
    if is_cond {
        let t = pc + 1 + insn.jt as usize;
        let f = pc + 1 + insn.jf as usize;
        format!("({pc:03}) {op:<8} {operand:<16} jt {t}\tjf {f}")
    } else {
        format!("({pc:03}) {op:<8} {operand}")
    }
}

/// A program listing in `tcpdump -d` form, one instruction a line.
pub struct Listing<'a>(pub &'a [Insn]);

impl fmt::Display for Listing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (pc, insn) in self.0.iter().enumerate() {
            writeln!(f, "{}", image(insn, pc))?;
        }
        Ok(())
    }
}
