//! The interpreter, one instruction class at a time, on hand-built programs whose results are
//! worked out by hand; then validation; then a differential run against libpcap's own
//! `bpf_filter()` on many random programs and packets.

use weir_filter::op::*;
use weir_filter::{libpcap_oracle, Filter, FilterError, Insn, ProgramError, Validation};

fn s(code: u16, k: u32) -> Insn {
    Insn::stmt(code, k)
}
fn j(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn::jump(code, k, jt, jf)
}
const RET_A: Insn = Insn::stmt(BPF_RET | BPF_A, 0);

fn run(prog: &[Insn], data: &[u8], wire: u32) -> u32 {
    Filter::from_instructions(prog).unwrap().run(data, wire)
}

fn run_libpcap_rules(prog: &[Insn], data: &[u8], wire: u32) -> u32 {
    Filter::from_instructions_with(prog, Validation::Libpcap)
        .unwrap()
        .run(data, wire)
}

const PKT: [u8; 8] = [0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0];

#[test]
fn ret() {
    assert_eq!(run(&[s(BPF_RET | BPF_K, 96)], &[], 0), 96);
    assert_eq!(run(&[s(BPF_RET | BPF_K, 0)], &PKT, 8), 0);
    assert_eq!(run(&[s(BPF_LD | BPF_IMM, 7), RET_A], &[], 0), 7);
    let f = Filter::from_instructions(&[s(BPF_RET | BPF_K, 1)]).unwrap();
    assert!(f.matches(&[], 0));
    assert!(!f.is_match_all());
}

#[test]
fn ld_abs_big_endian_and_bounds() {
    let ld =
        |size: u16, k: u32, data: &[u8]| run(&[s(BPF_LD | size | BPF_ABS, k), RET_A], data, 100);
    assert_eq!(ld(BPF_W, 0, &PKT), 0x1234_5678);
    assert_eq!(ld(BPF_W, 4, &PKT), 0x9abc_def0);
    assert_eq!(ld(BPF_H, 1, &PKT), 0x3456);
    assert_eq!(ld(BPF_H, 6, &PKT), 0xdef0);
    assert_eq!(ld(BPF_B, 7, &PKT), 0xf0);
    // One byte past the captured data rejects, whatever the wire length says.
    assert_eq!(ld(BPF_W, 5, &PKT), 0);
    assert_eq!(ld(BPF_H, 7, &PKT), 0);
    assert_eq!(ld(BPF_B, 8, &PKT), 0);
    assert_eq!(ld(BPF_W, u32::MAX, &PKT), 0);
    assert_eq!(ld(BPF_W, u32::MAX - 2, &PKT), 0);
    assert_eq!(ld(BPF_B, 0, &[]), 0);
    // Linux ancillary data (SKF_AD_OFF + SKF_AD_PROTOCOL, VLAN tag...) does not exist in userland.
    assert_eq!(ld(BPF_H, 0xffff_f000, &PKT), 0);
    assert_eq!(ld(BPF_B, 0xffff_f000 + 44, &PKT), 0);
    // A rejecting load stops the program even when a later `ret` would accept.
    assert_eq!(
        run(
            &[s(BPF_LD | BPF_B | BPF_ABS, 9), s(BPF_RET | BPF_K, 5)],
            &PKT,
            8
        ),
        0
    );
}

#[test]
fn ld_ind_and_bounds() {
    let ld = |size: u16, x: u32, k: u32| {
        run(
            &[
                s(BPF_LDX | BPF_IMM, x),
                s(BPF_LD | size | BPF_IND, k),
                RET_A,
            ],
            &PKT,
            8,
        )
    };
    assert_eq!(ld(BPF_W, 2, 2), 0x9abc_def0);
    assert_eq!(ld(BPF_H, 1, 0), 0x3456);
    assert_eq!(ld(BPF_B, 3, 4), 0xf0);
    assert_eq!(ld(BPF_B, 4, 4), 0);
    assert_eq!(ld(BPF_H, 7, 0), 0);
    assert_eq!(ld(BPF_W, 0, 5), 0);
    // X + k wrapping around 2^32 to a small offset must not read: libpcap checks before adding.
    assert_eq!(ld(BPF_B, 0xffff_ffff, 1), 0);
    assert_eq!(ld(BPF_W, 2, 0xffff_fffe), 0);
    assert_eq!(ld(BPF_H, 0x8000_0000, 0x8000_0001), 0);
}

#[test]
fn ld_len_imm_msh() {
    assert_eq!(
        run(&[s(BPF_LD | BPF_W | BPF_LEN, 0), RET_A], &PKT, 1514),
        1514
    );
    assert_eq!(
        run(
            &[
                s(BPF_LDX | BPF_W | BPF_LEN, 0),
                s(BPF_MISC | BPF_TXA, 0),
                RET_A
            ],
            &PKT,
            60
        ),
        60
    );
    assert_eq!(
        run(&[s(BPF_LD | BPF_IMM, 0xdead_beef), RET_A], &[], 0),
        0xdead_beef
    );
    assert_eq!(
        run(
            &[s(BPF_LDX | BPF_IMM, 42), s(BPF_MISC | BPF_TXA, 0), RET_A],
            &[],
            0
        ),
        42
    );
    // 4 * (0x45 & 0xf) = 20, the IPv4 header length idiom.
    let msh = |k: u32, data: &[u8]| {
        run(
            &[
                s(BPF_LDX | BPF_MSH | BPF_B, k),
                s(BPF_MISC | BPF_TXA, 0),
                RET_A,
            ],
            data,
            60,
        )
    };
    assert_eq!(msh(0, &[0x45]), 20);
    assert_eq!(msh(1, &[0x00, 0x4f]), 60);
    assert_eq!(msh(2, &[0x45, 0x00]), 0); // out of bounds rejects
}

#[test]
fn scratch_memory() {
    let prog = [
        s(BPF_LD | BPF_IMM, 11),
        s(BPF_ST, 0),
        s(BPF_LDX | BPF_IMM, 22),
        s(BPF_STX, 15),
        s(BPF_LD | BPF_IMM, 0),
        s(BPF_LDX | BPF_MEM, 0), // X = 11
        s(BPF_LD | BPF_MEM, 15), // A = 22
        s(BPF_ALU | BPF_ADD | BPF_X, 0),
        RET_A,
    ];
    assert_eq!(run(&prog, &[], 0), 33);
    // Memory starts zeroed.
    assert_eq!(
        run(
            &[
                s(BPF_LD | BPF_MEM, 7),
                s(BPF_ALU | BPF_ADD | BPF_K, 1),
                RET_A
            ],
            &[],
            0
        ),
        1
    );
}

#[test]
fn alu_with_constant() {
    let alu = |a: u32, op: u16, k: u32| {
        run(
            &[s(BPF_LD | BPF_IMM, a), s(BPF_ALU | op | BPF_K, k), RET_A],
            &[],
            0,
        )
    };
    assert_eq!(alu(5, BPF_ADD, 7), 12);
    assert_eq!(alu(u32::MAX, BPF_ADD, 2), 1);
    assert_eq!(alu(5, BPF_SUB, 7), 0xffff_fffe);
    assert_eq!(alu(0x1_0001, BPF_MUL, 0x1_0001), 0x0002_0001);
    assert_eq!(alu(100, BPF_DIV, 7), 14);
    assert_eq!(alu(100, BPF_MOD, 7), 2);
    assert_eq!(alu(0xf0f0, BPF_AND, 0x0ff0), 0x00f0);
    assert_eq!(alu(0xf000, BPF_OR, 0x000f), 0xf00f);
    assert_eq!(alu(0xff00, BPF_XOR, 0x0ff0), 0xf0f0);
    assert_eq!(alu(1, BPF_LSH, 31), 0x8000_0000);
    assert_eq!(alu(0x8000_0000, BPF_RSH, 31), 1);
    assert_eq!(alu(0x1234, BPF_LSH, 0), 0x1234);
    assert_eq!(
        run(
            &[s(BPF_LD | BPF_IMM, 1), s(BPF_ALU | BPF_NEG, 0), RET_A],
            &[],
            0
        ),
        u32::MAX
    );
    assert_eq!(
        run(
            &[
                s(BPF_LD | BPF_IMM, 0x8000_0000),
                s(BPF_ALU | BPF_NEG, 0),
                RET_A
            ],
            &[],
            0
        ),
        0x8000_0000
    );
}

#[test]
fn alu_with_x() {
    let alu = |a: u32, op: u16, x: u32| {
        run(
            &[
                s(BPF_LD | BPF_IMM, a),
                s(BPF_LDX | BPF_IMM, x),
                s(BPF_ALU | op | BPF_X, 0),
                RET_A,
            ],
            &[],
            0,
        )
    };
    assert_eq!(alu(5, BPF_ADD, 7), 12);
    assert_eq!(alu(5, BPF_SUB, 7), 0xffff_fffe);
    assert_eq!(alu(6, BPF_MUL, 7), 42);
    assert_eq!(alu(100, BPF_DIV, 7), 14);
    assert_eq!(alu(100, BPF_MOD, 7), 2);
    assert_eq!(alu(0xf0f0, BPF_AND, 0x0ff0), 0x00f0);
    assert_eq!(alu(0xf000, BPF_OR, 0x000f), 0xf00f);
    assert_eq!(alu(0xff00, BPF_XOR, 0x0ff0), 0xf0f0);
    assert_eq!(alu(3, BPF_LSH, 4), 48);
    assert_eq!(alu(48, BPF_RSH, 4), 3);
    // Division or modulo by X == 0 ends the program with 0, even before an accepting `ret`.
    let div0 = |op: u16| {
        run(
            &[
                s(BPF_LD | BPF_IMM, 9),
                s(BPF_LDX | BPF_IMM, 0),
                s(BPF_ALU | op | BPF_X, 0),
                s(BPF_RET | BPF_K, 1),
            ],
            &[],
            0,
        )
    };
    assert_eq!(div0(BPF_DIV), 0);
    assert_eq!(div0(BPF_MOD), 0);
    // Shifts by X >= 32 give 0 (libpcap 1.10 checks X < 32).
    assert_eq!(alu(3, BPF_LSH, 32), 0);
    assert_eq!(alu(3, BPF_LSH, 33), 0);
    assert_eq!(alu(0x8000_0000, BPF_RSH, 32), 0);
    assert_eq!(alu(0x8000_0000, BPF_RSH, u32::MAX), 0);
}

#[test]
fn constant_shifts_of_32_or_more_follow_libpcap_on_x86() {
    // libpcap 1.10 does `A <<= pc->k`, which x86-64 masks to k & 31; its validator lets it pass.
    let prog =
        |op: u16, a: u32, k: u32| [s(BPF_LD | BPF_IMM, a), s(BPF_ALU | op | BPF_K, k), RET_A];
    assert_eq!(run_libpcap_rules(&prog(BPF_LSH, 3, 33), &[], 0), 6);
    assert_eq!(
        run_libpcap_rules(&prog(BPF_RSH, 0x8000_0000, 32), &[], 0),
        0x8000_0000
    );
    assert_eq!(
        run_libpcap_rules(&prog(BPF_RSH, 0x8000_0000, 63), &[], 0),
        1
    );
    // Strict validation refuses them, as the kernel and newer libpcap do.
    assert_eq!(
        Filter::from_instructions(&prog(BPF_LSH, 3, 32)).unwrap_err(),
        FilterError::InvalidProgram(ProgramError::ShiftTooLarge { at: 1, k: 32 })
    );
}

#[test]
fn jumps_with_constant() {
    // A = 10; if (A <op> k) ret 1 else ret 2
    let jmp = |op: u16, k: u32| {
        run(
            &[
                s(BPF_LD | BPF_IMM, 10),
                j(BPF_JMP | op | BPF_K, k, 0, 1),
                s(BPF_RET | BPF_K, 1),
                s(BPF_RET | BPF_K, 2),
            ],
            &[],
            0,
        )
    };
    assert_eq!(jmp(BPF_JEQ, 10), 1);
    assert_eq!(jmp(BPF_JEQ, 11), 2);
    assert_eq!(jmp(BPF_JGT, 9), 1);
    assert_eq!(jmp(BPF_JGT, 10), 2);
    assert_eq!(jmp(BPF_JGE, 10), 1);
    assert_eq!(jmp(BPF_JGE, 11), 2);
    assert_eq!(jmp(BPF_JSET, 2), 1);
    assert_eq!(jmp(BPF_JSET, 5), 2);
    // Comparisons are unsigned.
    assert_eq!(
        run(
            &[
                s(BPF_LD | BPF_IMM, 0xffff_ffff),
                j(BPF_JMP | BPF_JGT | BPF_K, 1, 0, 1),
                s(BPF_RET | BPF_K, 1),
                s(BPF_RET | BPF_K, 2)
            ],
            &[],
            0
        ),
        1
    );
}

#[test]
fn jumps_with_x() {
    let jmp = |op: u16, x: u32| {
        run(
            &[
                s(BPF_LD | BPF_IMM, 10),
                s(BPF_LDX | BPF_IMM, x),
                j(BPF_JMP | op | BPF_X, 0, 1, 0),
                s(BPF_RET | BPF_K, 2),
                s(BPF_RET | BPF_K, 1),
            ],
            &[],
            0,
        )
    };
    assert_eq!(jmp(BPF_JEQ, 10), 1);
    assert_eq!(jmp(BPF_JEQ, 3), 2);
    assert_eq!(jmp(BPF_JGT, 9), 1);
    assert_eq!(jmp(BPF_JGT, 10), 2);
    assert_eq!(jmp(BPF_JGE, 10), 1);
    assert_eq!(jmp(BPF_JGE, 11), 2);
    assert_eq!(jmp(BPF_JSET, 8), 1);
    assert_eq!(jmp(BPF_JSET, 4), 2);
}

#[test]
fn unconditional_jumps() {
    let prog = [
        s(BPF_JMP | BPF_JA, 2),
        s(BPF_RET | BPF_K, 1),
        s(BPF_RET | BPF_K, 2),
        s(BPF_RET | BPF_K, 3),
    ];
    assert_eq!(run(&prog, &[], 0), 3);
    // A backward jump (what protochain compiles to): count A down from 3 to 0, adding 5 to X
    // each turn.
    let looping = [
        s(BPF_LD | BPF_IMM, 3),                // 0
        j(BPF_JMP | BPF_JEQ | BPF_K, 0, 4, 0), // 1: A == 0 -> 6
        s(BPF_ALU | BPF_SUB | BPF_K, 1),       // 2
        s(BPF_MISC | BPF_TAX, 0),              // 3: keep A in X
        s(BPF_ST, 0),                          // 4
        s(BPF_JMP | BPF_JA, (-5i32) as u32),   // 5: back to 1
        s(BPF_LD | BPF_MEM, 0),                // 6 (A == 0 here)
        s(BPF_ALU | BPF_ADD | BPF_K, 40),      // 7
        RET_A,                                 // 8
    ];
    assert_eq!(run_libpcap_rules(&looping, &[], 0), 40);
    // A loop that never ends is cut short (libpcap 1.10 would spin for ever).
    let forever = [
        s(BPF_LD | BPF_IMM, 1),
        s(BPF_ALU | BPF_ADD | BPF_K, 1),
        s(BPF_JMP | BPF_JA, (-2i32) as u32),
        s(BPF_RET | BPF_K, 1),
    ];
    assert_eq!(run_libpcap_rules(&forever, &[], 0), 0);
}

#[test]
fn tax_txa() {
    assert_eq!(
        run(
            &[
                s(BPF_LD | BPF_IMM, 77),
                s(BPF_MISC | BPF_TAX, 0),
                s(BPF_LD | BPF_IMM, 0),
                s(BPF_MISC | BPF_TXA, 0),
                RET_A
            ],
            &[],
            0
        ),
        77
    );
}

#[test]
fn wire_length_is_not_captured_length() {
    // `greater 100` on 60 captured bytes of a 1500-byte packet.
    let prog = [
        s(BPF_LD | BPF_W | BPF_LEN, 0),
        j(BPF_JMP | BPF_JGE | BPF_K, 100, 0, 1),
        s(BPF_RET | BPF_K, 262_144),
        s(BPF_RET | BPF_K, 0),
    ];
    assert!(Filter::from_instructions(&prog)
        .unwrap()
        .matches(&[0; 60], 1500));
    assert!(!Filter::from_instructions(&prog)
        .unwrap()
        .matches(&[0; 60], 60));
}

// ---------- validation ----------

fn invalid(prog: &[Insn]) -> ProgramError {
    match Filter::from_instructions(prog) {
        Err(FilterError::InvalidProgram(e)) => e,
        other => panic!("accepted: {other:?}"),
    }
}

#[test]
fn validation_refuses_bad_programs() {
    let ret = s(BPF_RET | BPF_K, 1);
    assert_eq!(invalid(&[]), ProgramError::Empty);
    assert_eq!(
        invalid(&[s(BPF_LD | BPF_IMM, 1)]),
        ProgramError::NoFinalReturn
    );
    // Jump past the end (conditional, either branch; unconditional).
    assert_eq!(
        invalid(&[j(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0), ret]),
        ProgramError::JumpOutOfRange { at: 0 }
    );
    assert_eq!(
        invalid(&[j(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 200), ret]),
        ProgramError::JumpOutOfRange { at: 0 }
    );
    assert_eq!(
        invalid(&[s(BPF_JMP | BPF_JA, 1), ret]),
        ProgramError::JumpOutOfRange { at: 0 }
    );
    assert_eq!(
        invalid(&[s(BPF_JMP | BPF_JA, u32::MAX - 5), ret]),
        ProgramError::JumpOutOfRange { at: 0 }
    );
    // Backward jump (strict) and jump to itself (always).
    assert_eq!(
        invalid(&[ret, s(BPF_JMP | BPF_JA, (-2i32) as u32), ret]),
        ProgramError::BackwardJump { at: 1 }
    );
    assert!(Filter::from_instructions_with(
        &[ret, s(BPF_JMP | BPF_JA, (-2i32) as u32), ret],
        Validation::Libpcap
    )
    .is_ok());
    for rules in [Validation::Strict, Validation::Libpcap] {
        assert_eq!(
            Filter::from_instructions_with(&[s(BPF_JMP | BPF_JA, u32::MAX), ret], rules)
                .unwrap_err(),
            FilterError::InvalidProgram(ProgramError::SelfJump { at: 0 })
        );
    }
    // Scratch memory index 16.
    for code in [BPF_ST, BPF_STX, BPF_LD | BPF_MEM, BPF_LDX | BPF_MEM] {
        assert_eq!(
            invalid(&[s(code, 16), ret]),
            ProgramError::MemIndex { at: 0, k: 16 }
        );
        assert!(Filter::from_instructions(&[s(code, 15), ret]).is_ok());
    }
    // Division and modulo by the constant 0.
    assert_eq!(
        invalid(&[s(BPF_ALU | BPF_DIV | BPF_K, 0), ret]),
        ProgramError::DivByZero { at: 0 }
    );
    assert_eq!(
        invalid(&[s(BPF_ALU | BPF_MOD | BPF_K, 0), ret]),
        ProgramError::DivByZero { at: 0 }
    );
    // Opcodes libpcap 1.10's bpf_validate lets through but its bpf_filter aborts on.
    for code in [
        0x1f,
        BPF_ALU | BPF_NEG | BPF_X,
        BPF_RET | 0x08,
        BPF_LD | BPF_H | BPF_IMM,
        BPF_LDX | BPF_W | BPF_ABS,
        0x38,
        0xffff,
    ] {
        assert_eq!(
            invalid(&[s(code, 0), ret]),
            ProgramError::BadOpcode { at: 0, code }
        );
    }
    // The very last instruction must be a return even when no path reaches it.
    assert_eq!(
        invalid(&[s(BPF_RET | BPF_K, 0), s(BPF_LD | BPF_IMM, 0)]),
        ProgramError::NoFinalReturn
    );
}

#[test]
fn libpcap_validator_agrees_where_it_can() {
    // Programs weir accepts are accepted by libpcap's bpf_validate too.
    let ok: Vec<Vec<Insn>> = vec![
        vec![s(BPF_RET | BPF_K, 1)],
        vec![
            s(BPF_LD | BPF_W | BPF_ABS, 0),
            j(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 1),
            s(BPF_RET | BPF_K, 1),
            s(BPF_RET | BPF_K, 0),
        ],
        vec![s(BPF_ST, 15), s(BPF_RET | BPF_K, 1)],
    ];
    for p in &ok {
        assert!(Filter::from_instructions(p).is_ok());
        assert!(libpcap_oracle::bpf_validate(p));
    }
    // And the structural faults are refused by both.
    let bad: Vec<Vec<Insn>> = vec![
        vec![s(BPF_LD | BPF_IMM, 1)],
        vec![j(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0), s(BPF_RET | BPF_K, 1)],
        vec![s(BPF_ST, 16), s(BPF_RET | BPF_K, 1)],
        vec![s(BPF_ALU | BPF_DIV | BPF_K, 0), s(BPF_RET | BPF_K, 1)],
    ];
    for p in &bad {
        assert!(Filter::from_instructions(p).is_err());
        assert!(!libpcap_oracle::bpf_validate(p));
    }
}

// ---------- differential: random programs against libpcap's bpf_filter ----------

/// xorshift64*: a small deterministic generator, so failures replay.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
    /// Small offsets near the packet's end are the interesting ones.
    fn k(&mut self, pkt_len: usize) -> u32 {
        match self.below(8) {
            0 => self.next() as u32,
            1 => 0xffff_f000 + self.below(64) as u32,
            2 => u32::MAX - self.below(8) as u32,
            3 => self.below(40) as u32,
            _ => (pkt_len as u64 + 4).saturating_sub(self.below(10)) as u32,
        }
    }
}

fn random_program(rng: &mut Rng, pkt_len: usize, wide_shifts: bool) -> Vec<Insn> {
    // Start by writing every scratch word, since libpcap 1.10 leaves them uninitialised.
    let mut p: Vec<Insn> = (0..16).map(|i| s(BPF_STX, i)).collect();
    let body = 1 + rng.below(24) as usize;
    let total = p.len() + body + 2;
    let alu_ops = [
        BPF_ADD, BPF_SUB, BPF_MUL, BPF_DIV, BPF_OR, BPF_AND, BPF_LSH, BPF_RSH, BPF_MOD, BPF_XOR,
    ];
    let jmp_ops = [BPF_JEQ, BPF_JGT, BPF_JGE, BPF_JSET];
    while p.len() < total - 2 {
        let at = p.len();
        let room = (total - 1 - (at + 1)) as u64; // max forward offset staying in range
        let small = |rng: &mut Rng| {
            rng.pick(&[
                0u32,
                1,
                2,
                3,
                4,
                8,
                14,
                20,
                31,
                32,
                33,
                0xff,
                0x800,
                0xffff_ffff,
            ])
        };
        // Now and then emit the idioms libpcap's compiler produces (which weir's engine runs
        // as fused operations): load + conditional jump, the port load, the network mask test.
        if room >= 3 && rng.below(4) == 0 {
            let jt = rng.below(room.min(255) - 1) as u8;
            let jf = rng.below(room.min(255) - 1) as u8;
            let k = if rng.below(2) == 0 {
                small(rng)
            } else {
                rng.k(pkt_len)
            };
            let cond = BPF_JMP | rng.pick(&jmp_ops) | BPF_K;
            match rng.below(4) {
                0 => {
                    p.push(s(
                        BPF_LD | rng.pick(&[BPF_W, BPF_H, BPF_B]) | rng.pick(&[BPF_ABS, BPF_IND]),
                        rng.k(pkt_len),
                    ));
                    p.push(j(cond, k, jt, jf));
                }
                1 => {
                    p.push(s(
                        BPF_LDX | BPF_MSH | BPF_B,
                        rng.below(pkt_len as u64 + 2) as u32,
                    ));
                    p.push(s(
                        BPF_LD | rng.pick(&[BPF_H, BPF_B]) | BPF_IND,
                        rng.below(pkt_len as u64 + 2) as u32,
                    ));
                    p.push(j(cond, k, jt, jf));
                }
                2 => {
                    p.push(s(
                        BPF_LD | rng.pick(&[BPF_W, BPF_B]) | BPF_ABS,
                        rng.k(pkt_len),
                    ));
                    p.push(s(BPF_ALU | BPF_AND | BPF_K, small(rng)));
                    p.push(j(cond, k, jt, jf));
                }
                _ => {
                    p.push(s(BPF_ALU | BPF_AND | BPF_K, small(rng)));
                    p.push(j(cond, k, jt, jf));
                }
            }
            continue;
        }
        let insn = match rng.below(14) {
            0 => s(
                BPF_LD | rng.pick(&[BPF_W, BPF_H, BPF_B]) | BPF_ABS,
                rng.k(pkt_len),
            ),
            1 => s(
                BPF_LD | rng.pick(&[BPF_W, BPF_H, BPF_B]) | BPF_IND,
                rng.k(pkt_len),
            ),
            2 => s(
                rng.pick(&[BPF_LD | BPF_W | BPF_LEN, BPF_LDX | BPF_W | BPF_LEN]),
                0,
            ),
            3 => s(
                rng.pick(&[BPF_LD | BPF_IMM, BPF_LDX | BPF_IMM]),
                if rng.below(2) == 0 {
                    small(rng)
                } else {
                    rng.k(pkt_len)
                },
            ),
            4 => s(BPF_LDX | BPF_MSH | BPF_B, rng.k(pkt_len)),
            5 => s(
                rng.pick(&[BPF_LD | BPF_MEM, BPF_LDX | BPF_MEM, BPF_ST, BPF_STX]),
                rng.below(16) as u32,
            ),
            6 | 7 => {
                let op = rng.pick(&alu_ops);
                let mut k = small(rng);
                if (op == BPF_DIV || op == BPF_MOD) && k == 0 {
                    k = 3;
                }
                if (op == BPF_LSH || op == BPF_RSH) && k >= 32 && !wide_shifts {
                    k &= 31;
                }
                s(BPF_ALU | op | BPF_K, k)
            }
            8 | 9 => s(BPF_ALU | rng.pick(&alu_ops) | BPF_X, 0),
            10 => s(
                rng.pick(&[BPF_ALU | BPF_NEG, BPF_MISC | BPF_TAX, BPF_MISC | BPF_TXA]),
                0,
            ),
            11 | 12 => {
                let src = rng.pick(&[BPF_K, BPF_X]);
                let jt = rng.below(room.min(255) + 1) as u8;
                let jf = rng.below(room.min(255) + 1) as u8;
                j(BPF_JMP | rng.pick(&jmp_ops) | src, small(rng), jt, jf)
            }
            _ => s(BPF_JMP | BPF_JA, rng.below(room + 1) as u32),
        };
        p.push(insn);
    }
    p.push(RET_A);
    p.push(s(BPF_RET | BPF_K, rng.next() as u32));
    p
}

fn differential(seed: u64, rules: Validation) -> (u64, u64) {
    let mut rng = Rng(seed);
    let (mut runs, mut accepted) = (0u64, 0u64);
    for _ in 0..4000 {
        let pkt_len = rng.below(80) as usize;
        let prog = random_program(&mut rng, pkt_len, rules == Validation::Libpcap);
        let filter = Filter::from_instructions_with(&prog, rules)
            .unwrap_or_else(|e| panic!("generator made an invalid program ({e}): {prog:?}"));
        assert!(libpcap_oracle::bpf_validate(&prog));
        for _ in 0..8 {
            let pkt: Vec<u8> = (0..pkt_len).map(|_| rng.next() as u8).collect();
            let wire = match rng.below(3) {
                0 => pkt_len as u32,
                1 => pkt_len as u32 + rng.below(1500) as u32,
                _ => rng.next() as u32,
            };
            let ours = filter.run(&pkt, wire);
            let theirs = libpcap_oracle::bpf_filter(&filter, &pkt, wire);
            assert_eq!(ours, theirs, "program {prog:?}\npacket {pkt:?} wire {wire}");
            runs += 1;
            accepted += u64::from(ours != 0);
        }
    }
    assert!(
        accepted > runs / 20,
        "too few accepting runs ({accepted}) to mean much"
    );
    (runs, accepted)
}

#[test]
fn random_programs_agree_with_libpcap_bpf_filter() {
    let (runs, accepted) = differential(0x9e37_79b9_7f4a_7c15, Validation::Strict);
    println!("random programs: {runs} runs identical to libpcap, {accepted} accepted");
}

#[test]
fn random_programs_with_wide_constant_shifts_agree_with_libpcap() {
    // Constant shifts by 32 or more: libpcap 1.10's validator accepts them and its interpreter
    // shifts by k & 31 on x86-64; weir must do the same under its libpcap rules.
    let (runs, accepted) = differential(0x0123_4567_89ab_cdef, Validation::Libpcap);
    println!(
        "random programs (libpcap rules): {runs} runs identical to libpcap, {accepted} accepted"
    );
}
