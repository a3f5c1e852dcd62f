//! Raw eBPF without libbpf or a BPF toolchain: the instruction encoding ([`Insn`] and its
//! constructors), the `bpf()` system calls weir uses (maps, program load with the verifier's log
//! on failure, links, `BPF_PROG_TEST_RUN`), the rtnetlink way of attaching an XDP program, and
//! [`classic_to_xdp`], which translates a classic BPF program (libpcap's) into the packet test of
//! an XDP program.
//!
//! Both of weir's XDP users build on it: the AF_XDP backend's program ([`crate::xdp`]) and the
//! lab's forwarder (`weir_lab::xdp`).
//!
//! # The classic-to-eBPF translation
//!
//! Registers: `r6` = the XDP context, `r7` = `ctx->data`, `r8` = `ctx->data_end`, `r4` = A,
//! `r9` = X, `r1`–`r3` scratch; the sixteen scratch words `M[]` live on the stack (zeroed
//! first) and the packet's length (`bpf_xdp_get_buff_len`, for `ld len`) below them. A and X
//! are 32-bit as in classic BPF: every ALU operation is a 32-bit one (`BPF_ALU`, which clears
//! the upper half) and every comparison a 32-bit one (`BPF_JMP32`, unsigned against the
//! instruction's 32-bit constant).
//!
//! Every packet load is checked against `data_end` before it is made (the verifier demands it):
//! an absolute load at `k` becomes `r2 = data + k + size; if r2 > data_end goto NOMATCH; A =
//! *(data + k)`, then a byte swap from network order. An indirect load at `X + k` first bounds
//! the offset (`if X + k > 0x3fff goto NOMATCH`: the verifier wants a bounded variable offset,
//! and no XDP frame's linear part is that long). A failed check is what an out-of-bounds load
//! is in classic BPF, the program returning 0: no match. Division or modulo by an X of 0 is
//! also classic BPF's return 0. `ret #k` / `ret a` jump to the MATCH tail when the value is
//! not 0, else to the NOMATCH tail: the caller gives both tails (e.g. count and `XDP_DROP`, and
//! redirect to a socket). Ancillary loads (`SKF_AD_*`), which libpcap emits only for live
//! handles (weir compiles on a file handle), and shifts by a constant of 32 or more are
//! refused ([`TranslateError`]).
//!
//! Every `unsafe` block here is a system call, each with a `// SAFETY:` comment.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// Destination register (low nibble) and source register (high nibble).
    pub regs: u8,
    /// Signed offset (jumps, memory).
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

/// The size of a memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// 8 bits.
    B,
    /// 16 bits.
    H,
    /// 32 bits.
    W,
    /// 64 bits.
    Dw,
}

impl Size {
    /// Bytes.
    pub fn bytes(self) -> i32 {
        match self {
            Size::B => 1,
            Size::H => 2,
            Size::W => 4,
            Size::Dw => 8,
        }
    }
}

/// ALU operations (the same numbers as classic BPF's).
pub mod alu {
    /// dst += src.
    pub const ADD: u8 = 0x00;
    /// dst -= src.
    pub const SUB: u8 = 0x10;
    /// dst *= src.
    pub const MUL: u8 = 0x20;
    /// dst /= src (unsigned).
    pub const DIV: u8 = 0x30;
    /// dst |= src.
    pub const OR: u8 = 0x40;
    /// dst &= src.
    pub const AND: u8 = 0x50;
    /// dst <<= src.
    pub const LSH: u8 = 0x60;
    /// dst >>= src (logical).
    pub const RSH: u8 = 0x70;
    /// dst = -dst.
    pub const NEG: u8 = 0x80;
    /// dst %= src (unsigned).
    pub const MOD: u8 = 0x90;
    /// dst ^= src.
    pub const XOR: u8 = 0xa0;
    /// dst = src.
    pub const MOV: u8 = 0xb0;
}

/// Jump conditions (the first five have classic BPF's numbers).
pub mod jmp {
    /// dst == src.
    pub const JEQ: u8 = 0x10;
    /// dst > src (unsigned).
    pub const JGT: u8 = 0x20;
    /// dst >= src (unsigned).
    pub const JGE: u8 = 0x30;
    /// dst & src != 0.
    pub const JSET: u8 = 0x40;
    /// dst != src.
    pub const JNE: u8 = 0x50;
}

/// Helper function numbers (`enum bpf_func_id`).
pub mod helper {
    /// `bpf_map_lookup_elem(map, key)`.
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    /// `bpf_redirect(ifindex, flags)`.
    pub const REDIRECT: i32 = 23;
    /// `bpf_redirect_map(map, key, flags)`.
    pub const REDIRECT_MAP: i32 = 51;
    /// `bpf_xdp_get_buff_len(ctx)`.
    pub const XDP_GET_BUFF_LEN: i32 = 188;
}

/// XDP actions (`enum xdp_action`).
pub mod xdp_action {
    /// Drop the frame.
    pub const DROP: i32 = 1;
    /// Pass it on up the stack.
    pub const PASS: i32 = 2;
}

const BPF_K: u8 = 0x00;
const BPF_X: u8 = 0x08;

impl Insn {
    /// An instruction from its fields.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (src << 4) | (dst & 0xf),
            off,
            imm,
        }
    }

    /// `dst = imm` (64-bit, sign-extended).
    pub const fn mov64_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(0x07 | alu::MOV | BPF_K, dst, 0, 0, imm)
    }

    /// `dst = src` (64-bit).
    pub const fn mov64_reg(dst: u8, src: u8) -> Insn {
        Insn::new(0x07 | alu::MOV | BPF_X, dst, src, 0, 0)
    }

    /// 64-bit `dst OP= imm`.
    pub const fn alu64_imm(op: u8, dst: u8, imm: i32) -> Insn {
        Insn::new(0x07 | op | BPF_K, dst, 0, 0, imm)
    }

    /// 64-bit `dst OP= src`.
    pub const fn alu64_reg(op: u8, dst: u8, src: u8) -> Insn {
        Insn::new(0x07 | op | BPF_X, dst, src, 0, 0)
    }

    /// 32-bit `dst OP= imm` (the upper half cleared).
    pub const fn alu32_imm(op: u8, dst: u8, imm: i32) -> Insn {
        Insn::new(0x04 | op | BPF_K, dst, 0, 0, imm)
    }

    /// 32-bit `dst OP= src` (the upper half cleared).
    pub const fn alu32_reg(op: u8, dst: u8, src: u8) -> Insn {
        Insn::new(0x04 | op | BPF_X, dst, src, 0, 0)
    }

    /// `dst = be16(dst)` / `be32` (`bits` 16 or 32): network to host order on little-endian
    /// machines, the upper bits cleared.
    pub const fn to_be(dst: u8, bits: i32) -> Insn {
        Insn::new(0xdc, dst, 0, 0, bits)
    }

    /// `dst = *(size *)(src + off)`.
    pub const fn load(size: Size, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x61 | size_bits(size), dst, src, off, 0)
    }

    /// `*(size *)(dst + off) = imm`.
    pub const fn store_imm(size: Size, dst: u8, off: i16, imm: i32) -> Insn {
        Insn::new(0x62 | size_bits(size), dst, 0, off, imm)
    }

    /// `*(size *)(dst + off) = src`.
    pub const fn store(size: Size, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x63 | size_bits(size), dst, src, off, 0)
    }

    /// `dst = the map of descriptor fd` (two instructions: `ld_imm64` with `BPF_PSEUDO_MAP_FD`).
    pub const fn load_map_fd(dst: u8, fd: RawFd) -> [Insn; 2] {
        [Insn::new(0x18, dst, 1, 0, fd), Insn::new(0, 0, 0, 0, 0)]
    }

    /// `if dst COND imm goto +off` (64-bit comparison, `imm` sign-extended).
    pub const fn jmp_imm(cond: u8, dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(0x05 | cond | BPF_K, dst, 0, off, imm)
    }

    /// `if dst COND src goto +off` (64-bit comparison).
    pub const fn jmp_reg(cond: u8, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x05 | cond | BPF_X, dst, src, off, 0)
    }

    /// `if (u32)dst COND (u32)imm goto +off`.
    pub const fn jmp32_imm(cond: u8, dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(0x06 | cond | BPF_K, dst, 0, off, imm)
    }

    /// `if (u32)dst COND (u32)src goto +off`.
    pub const fn jmp32_reg(cond: u8, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x06 | cond | BPF_X, dst, src, off, 0)
    }

    /// `goto +off`.
    pub const fn ja(off: i16) -> Insn {
        Insn::new(0x05, 0, 0, off, 0)
    }

    /// `r0 = helper(r1, …, r5)` (clobbers r1–r5).
    pub const fn call(helper: i32) -> Insn {
        Insn::new(0x85, 0, 0, 0, helper)
    }

    /// `return r0`.
    pub const fn exit() -> Insn {
        Insn::new(0x95, 0, 0, 0, 0)
    }
}

const fn size_bits(size: Size) -> u8 {
    match size {
        Size::W => 0x00,
        Size::H => 0x08,
        Size::B => 0x10,
        Size::Dw => 0x18,
    }
}

/// Map types (`enum bpf_map_type`).
pub mod map_type {
    /// One value per CPU per entry.
    pub const PERCPU_ARRAY: u32 = 6;
    /// AF_XDP sockets by RX queue.
    pub const XSKMAP: u32 = 17;
}

/// `BPF_PROG_TYPE_XDP`.
pub const PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP`, the attach type of an XDP link.
pub const ATTACH_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: generic XDP, after the driver.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, in the driver.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_LINK_UPDATE: libc::c_long = 29;

/// `bpf(cmd, attr, sizeof attr)`.
fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<RawFd> {
    // SAFETY: `attr` is a #[repr(C)] attribute struct of the layout the command reads, alive
    // for the call; the kernel reads at most `size_of::<T>()` bytes of it, and every pointer
    // in it points to memory alive for the call, of the size the struct says.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as RawFd)
    }
}

fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct MapElem {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkUpdate {
    link_fd: u32,
    new_prog_fd: u32,
    flags: u32,
    old_prog_fd: u32,
}

#[repr(C)]
#[derive(Default)]
struct TestRun {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    /// Explicit, so zeroed: the kernel refuses non-zero bytes past the last field.
    _pad: u32,
}

/// Creates a map (`BPF_MAP_CREATE`).
pub fn map_create(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
) -> io::Result<OwnedFd> {
    let mut a = MapCreate {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_flags: 0,
    };
    bpf(BPF_MAP_CREATE, &mut a).map(owned)
}

/// Sets `key` to `value` in a map (`BPF_MAP_UPDATE_ELEM`, `BPF_ANY`); the slices must have the
/// map's key and value sizes.
pub fn map_update(map: &OwnedFd, key: &[u8], value: &[u8]) -> io::Result<()> {
    let mut a = MapElem {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        ..MapElem::default()
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

/// Reads `key` of a map into `value` (`BPF_MAP_LOOKUP_ELEM`); for per-CPU maps `value` holds
/// one 8-byte-aligned value per possible CPU ([`possible_cpus`]).
pub fn map_lookup(map: &OwnedFd, key: &[u8], value: &mut [u8]) -> io::Result<()> {
    let mut a = MapElem {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        ..MapElem::default()
    };
    bpf(BPF_MAP_LOOKUP_ELEM, &mut a).map(|_| ())
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`, e.g. `0-3` → 4): the number
/// of values a per-CPU map returns.
pub fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {text:?}"));
    let mut n = 0;
    for part in text.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        n = n.max(b.checked_add(1).ok_or_else(bad)?).max(a + 1);
    }
    Ok(n)
}

/// The sum over CPUs of a per-CPU array map's `u64` at `index`.
pub fn percpu_sum(map: &OwnedFd, index: u32) -> io::Result<u64> {
    let mut values = vec![0u8; 8 * possible_cpus()?];
    map_lookup(map, &index.to_ne_bytes(), &mut values)?;
    Ok(values
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
        .sum())
}

/// The kernel refused a program.
#[derive(Debug, thiserror::Error)]
#[error("the kernel refused the eBPF program: {source}{}", if log.is_empty() { String::new() } else { format!(" (verifier: {log})") })]
pub struct LoadError {
    /// The system call's error.
    pub source: io::Error,
    /// The verifier's log of a second attempt (empty when the load was refused for want of
    /// privilege, which the log would not explain).
    pub log: String,
}

/// Loads a program (`BPF_PROG_LOAD`); on failure loads it once more with the verifier's log
/// and returns the log's last lines in the error.
pub fn prog_load(prog_type: u32, insns: &[Insn], name: &str) -> Result<OwnedFd, LoadError> {
    let license = b"Dual MIT/GPL\0";
    let mut prog_name = [0u8; 16];
    for (d, s) in prog_name.iter_mut().zip(name.bytes().take(15)) {
        *d = s;
    }
    let attempt = |log: Option<&mut Vec<u8>>| {
        let (log_level, log_size, log_buf) = match log {
            Some(l) => (1, l.len() as u32, l.as_mut_ptr() as u64),
            None => (0, 0, 0),
        };
        let mut a = ProgLoad {
            prog_type,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level,
            log_size,
            log_buf,
            prog_name,
            ..ProgLoad::default()
        };
        bpf(BPF_PROG_LOAD, &mut a)
    };
    match attempt(None) {
        Ok(fd) => Ok(owned(fd)),
        Err(source) if matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
            Err(LoadError {
                source,
                log: String::new(),
            })
        }
        Err(source) => {
            let mut log = vec![0u8; 1 << 20];
            let _ = attempt(Some(&mut log));
            let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            // the last lines say why; the whole log of a long program is megabytes
            let lines: Vec<&str> = text.trim().lines().collect();
            let tail = lines[lines.len().saturating_sub(6)..].join(" | ");
            Err(LoadError { source, log: tail })
        }
    }
}

/// Attaches a program to an interface as a link (`BPF_LINK_CREATE`): the program stays
/// attached while the returned descriptor is open.
pub fn link_create(
    prog: &OwnedFd,
    ifindex: u32,
    attach_type: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    let mut a = LinkCreate {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type,
        flags,
    };
    bpf(BPF_LINK_CREATE, &mut a).map(owned)
}

/// Replaces a link's program atomically (`BPF_LINK_UPDATE`): every packet meets the old program
/// or the new one.
pub fn link_update(link: &OwnedFd, prog: &OwnedFd) -> io::Result<()> {
    let mut a = LinkUpdate {
        link_fd: link.as_raw_fd() as u32,
        new_prog_fd: prog.as_raw_fd() as u32,
        ..LinkUpdate::default()
    };
    bpf(BPF_LINK_UPDATE, &mut a).map(|_| ())
}

/// Runs a loaded program once on `data` (`BPF_PROG_TEST_RUN`) and returns its return value
/// (for XDP: the action). XDP needs at least 14 bytes.
pub fn prog_test_run(prog: &OwnedFd, data: &[u8]) -> io::Result<u32> {
    let mut a = TestRun {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: data.len() as u32,
        data_in: data.as_ptr() as u64,
        repeat: 1,
        ..TestRun::default()
    };
    bpf(BPF_PROG_TEST_RUN, &mut a)?;
    Ok(a.retval)
}

/// Attaches XDP program `fd` to interface `ifindex` with `flags` through rtnetlink in the
/// calling thread's network namespace (`RTM_SETLINK` with `IFLA_XDP`); `fd` -1 detaches. Unlike
/// a link, the program stays after the process ends.
pub fn xdp_attach_netlink(ifindex: u32, fd: RawFd, flags: u32) -> io::Result<()> {
    const IFLA_XDP: u16 = 43;
    const IFLA_XDP_FD: u16 = 1;
    const IFLA_XDP_FLAGS: u16 = 3;
    const NLA_F_NESTED: u16 = 1 << 15;
    let mut msg: Vec<u8> = Vec::with_capacity(64);
    msg.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, set below
    msg.extend_from_slice(&(libc::RTM_SETLINK).to_ne_bytes());
    msg.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // pid
    msg.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]); // ifinfomsg: family, pad, type
    msg.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes()); // flags
    msg.extend_from_slice(&0u32.to_ne_bytes()); // change
    msg.extend_from_slice(&20u16.to_ne_bytes()); // nested IFLA_XDP: 4 + 8 + 8
    msg.extend_from_slice(&(IFLA_XDP | NLA_F_NESTED).to_ne_bytes());
    msg.extend_from_slice(&8u16.to_ne_bytes());
    msg.extend_from_slice(&IFLA_XDP_FD.to_ne_bytes());
    msg.extend_from_slice(&fd.to_ne_bytes());
    msg.extend_from_slice(&8u16.to_ne_bytes());
    msg.extend_from_slice(&IFLA_XDP_FLAGS.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    let len = msg.len() as u32;
    msg[0..4].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: plain system call with constant arguments; the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    let sock = owned(raw);
    // SAFETY: sends `msg.len()` bytes from a live buffer; no address (the kernel is the peer).
    let n = unsafe {
        libc::send(
            sock.as_raw_fd(),
            msg.as_ptr() as *const libc::c_void,
            msg.len(),
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 4096];
    // SAFETY: receives at most `buf.len()` bytes into a live buffer.
    let n = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n < 20 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "short netlink answer",
        ));
    }
    let kind = u16::from_ne_bytes([buf[4], buf[5]]);
    let err = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
    if kind == libc::NLMSG_ERROR as u16 && err != 0 {
        return Err(io::Error::from_raw_os_error(-err));
    }
    Ok(())
}

/// Why a classic program has no eBPF translation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    /// An instruction the translation does not take (ancillary loads, `ret x`, shifts by 32 or
    /// more, division by the constant 0, unknown opcodes).
    #[error("classic instruction {pc} (code {code:#06x}, k {k:#x}) has no eBPF translation")]
    Unsupported {
        /// Its index.
        pc: usize,
        /// Its opcode.
        code: u16,
        /// Its operand.
        k: u32,
    },
    /// A jump that goes backwards or past the end.
    #[error("classic instruction {0} jumps backwards or out of the program")]
    BadJump(usize),
    /// The translation is longer than an eBPF jump reaches (32 767 instructions).
    #[error("the translation is too long for eBPF's 16-bit jumps")]
    TooLong,
}

// Registers of the translation.
const CTX: u8 = 6;
const DATA: u8 = 7;
const END: u8 = 8;
const A: u8 = 4;
const X: u8 = 9;
/// Stack offset of M[0] (M[k] at MEM + 4k) and of the packet length.
const MEM: i16 = -64;
const LEN: i16 = -72;
/// A free stack slot (4 bytes) for the tails, e.g. a map key.
pub const SCRATCH_SLOT: i16 = -80;
/// Largest packet offset an indirect load may reach.
const IND_MAX: i32 = 0x3fff;
/// Largest absolute offset (the `off` field of a load is 16-bit signed).
const ABS_MAX: u32 = 0x7fff;

#[derive(Clone, Copy)]
enum Target {
    Pc(usize),
    Match,
    NoMatch,
}

/// Translates a classic BPF program into eBPF for an XDP program: the prologue (it needs the
/// context in `r1`, as at the program's entry), the body, then `match_tail` (run when the
/// classic program returns non-zero) and `nomatch_tail` (when it returns 0 or a load is out of
/// bounds). On entry to the tails, `r6` holds the context; both must end in `exit`. The tails
/// may use the stack slot [`SCRATCH_SLOT`].
pub fn classic_to_xdp(
    prog: &[weir_filter::Insn],
    match_tail: &[Insn],
    nomatch_tail: &[Insn],
) -> Result<Vec<Insn>, TranslateError> {
    use weir_filter::op;
    let mut out = vec![
        Insn::mov64_reg(CTX, 1),
        Insn::call(helper::XDP_GET_BUFF_LEN),
        Insn::store(Size::W, 10, 0, LEN),
        Insn::load(Size::W, DATA, CTX, 0),
        Insn::load(Size::W, END, CTX, 4),
        Insn::mov64_imm(A, 0),
        Insn::mov64_imm(X, 0),
    ];
    for i in 0..8 {
        out.push(Insn::store_imm(Size::Dw, 10, MEM + 8 * i, 0));
    }
    let mut start = Vec::with_capacity(prog.len());
    let mut fix: Vec<(usize, Target)> = Vec::new();
    let n = prog.len();
    // The verifier refuses unreachable instructions: translate only what classic control flow
    // reaches (libpcap's optimiser leaves little else), and each tail only when jumped to.
    let mut reached = vec![false; n];
    if n > 0 {
        reached[0] = true;
    }
    for (pc, c) in prog.iter().enumerate() {
        if !reached[pc] {
            continue;
        }
        let mut mark = |off: usize| {
            if let Some(r) = reached.get_mut(pc + 1 + off) {
                *r = true;
            }
        };
        match (c.code & 0x07, c.code & 0xf0) {
            (op::BPF_RET, _) => {}
            (op::BPF_JMP, 0) => mark(c.k as usize),
            (op::BPF_JMP, _) => {
                mark(usize::from(c.jt));
                mark(usize::from(c.jf));
            }
            _ => mark(0),
        }
    }
    for (pc, c) in prog.iter().enumerate() {
        start.push(out.len());
        if !reached[pc] {
            continue;
        }
        let unsupported = || TranslateError::Unsupported {
            pc,
            code: c.code,
            k: c.k,
        };
        let class = c.code & 0x07;
        let size = match c.code & 0x18 {
            op::BPF_W => Size::W,
            op::BPF_H => Size::H,
            op::BPF_B => Size::B,
            _ => Size::Dw,
        };
        let pc_target = |off: u32| -> Result<Target, TranslateError> {
            let t = pc + 1 + off as usize;
            if t >= n {
                return Err(TranslateError::BadJump(pc));
            }
            Ok(Target::Pc(t))
        };
        let mem = |k: u32| -> Result<i16, TranslateError> {
            if k >= 16 {
                return Err(unsupported());
            }
            Ok(MEM + 4 * k as i16)
        };
        match class {
            op::BPF_LD | op::BPF_LDX => {
                let dst = if class == op::BPF_LD { A } else { X };
                match (c.code & 0xe0, class) {
                    (op::BPF_IMM, _) => out.push(Insn::alu32_imm(alu::MOV, dst, c.k as i32)),
                    (op::BPF_MEM, _) => out.push(Insn::load(Size::W, dst, 10, mem(c.k)?)),
                    (op::BPF_LEN, _) => out.push(Insn::load(Size::W, dst, 10, LEN)),
                    (op::BPF_ABS, op::BPF_LD) if c.k < 0xffff_f000 => {
                        packet_load(&mut out, &mut fix, c, size, A, false)
                    }
                    (op::BPF_IND, op::BPF_LD) => packet_load(&mut out, &mut fix, c, size, A, true),
                    (op::BPF_MSH, op::BPF_LDX) if size == Size::B => {
                        packet_load(&mut out, &mut fix, c, size, X, false);
                        out.push(Insn::alu32_imm(alu::AND, X, 0xf));
                        out.push(Insn::alu32_imm(alu::LSH, X, 2));
                    }
                    _ => return Err(unsupported()),
                }
            }
            op::BPF_ST => out.push(Insn::store(Size::W, 10, A, mem(c.k)?)),
            op::BPF_STX => out.push(Insn::store(Size::W, 10, X, mem(c.k)?)),
            op::BPF_ALU => {
                let o = (c.code & 0xf0) as u8;
                let from_x = c.code & op::BPF_X != 0;
                match o {
                    alu::NEG => out.push(Insn::alu32_imm(alu::NEG, A, 0)),
                    alu::ADD | alu::SUB | alu::MUL | alu::OR | alu::AND | alu::XOR => {
                        out.push(if from_x {
                            Insn::alu32_reg(o, A, X)
                        } else {
                            Insn::alu32_imm(o, A, c.k as i32)
                        })
                    }
                    alu::LSH | alu::RSH => out.push(if from_x {
                        Insn::alu32_reg(o, A, X)
                    } else if c.k < 32 {
                        Insn::alu32_imm(o, A, c.k as i32)
                    } else {
                        return Err(unsupported());
                    }),
                    alu::DIV | alu::MOD => {
                        if from_x {
                            // classic BPF returns 0 on a division by 0
                            jump(
                                &mut out,
                                &mut fix,
                                Insn::jmp32_imm(jmp::JEQ, X, 0, 0),
                                Target::NoMatch,
                            );
                            out.push(Insn::alu32_reg(o, A, X));
                        } else if c.k == 0 {
                            return Err(unsupported());
                        } else {
                            out.push(Insn::alu32_imm(o, A, c.k as i32));
                        }
                    }
                    _ => return Err(unsupported()),
                }
            }
            op::BPF_JMP => {
                let cond = (c.code & 0xf0) as u8;
                if cond == 0 {
                    let t = pc_target(c.k)?;
                    jump(&mut out, &mut fix, Insn::ja(0), t);
                    continue;
                }
                if !matches!(cond, jmp::JEQ | jmp::JGT | jmp::JGE | jmp::JSET) {
                    return Err(unsupported());
                }
                let (t, f) = (pc_target(u32::from(c.jt))?, pc_target(u32::from(c.jf))?);
                let insn = if c.code & op::BPF_X != 0 {
                    Insn::jmp32_reg(cond, A, X, 0)
                } else {
                    Insn::jmp32_imm(cond, A, c.k as i32, 0)
                };
                if c.jt != 0 {
                    jump(&mut out, &mut fix, insn, t);
                    if c.jf != 0 {
                        jump(&mut out, &mut fix, Insn::ja(0), f);
                    }
                } else if c.jf != 0 {
                    // true falls through to the next instruction: skip the `ja` to false
                    out.push(Insn { off: 1, ..insn });
                    jump(&mut out, &mut fix, Insn::ja(0), f);
                }
            }
            op::BPF_RET => match c.code & 0x18 {
                0x00 => {
                    let t = if c.k != 0 {
                        Target::Match
                    } else {
                        Target::NoMatch
                    };
                    jump(&mut out, &mut fix, Insn::ja(0), t);
                }
                0x10 => {
                    jump(
                        &mut out,
                        &mut fix,
                        Insn::jmp32_imm(jmp::JNE, A, 0, 0),
                        Target::Match,
                    );
                    jump(&mut out, &mut fix, Insn::ja(0), Target::NoMatch);
                }
                _ => return Err(unsupported()),
            },
            op::BPF_MISC => match c.code & 0xf8 {
                0x00 => out.push(Insn::alu32_reg(alu::MOV, X, A)),
                0x80 => out.push(Insn::alu32_reg(alu::MOV, A, X)),
                _ => return Err(unsupported()),
            },
            _ => return Err(unsupported()),
        }
    }
    // a program that runs off its end (the classic checker refuses them): no match
    let falls_off = prog.last().is_none_or(|c| {
        c.code & 0x07 != op::BPF_RET && (c.code & 0x07 != op::BPF_JMP || c.code & 0xf0 != 0)
    });
    if falls_off {
        jump(&mut out, &mut fix, Insn::ja(0), Target::NoMatch);
    }
    let at_match = out.len();
    if fix.iter().any(|f| matches!(f.1, Target::Match)) {
        out.extend_from_slice(match_tail);
    }
    let at_nomatch = out.len();
    if fix.iter().any(|f| matches!(f.1, Target::NoMatch)) {
        out.extend_from_slice(nomatch_tail);
    }
    for (at, t) in fix {
        let to = match t {
            Target::Pc(p) => start[p],
            Target::Match => at_match,
            Target::NoMatch => at_nomatch,
        };
        let off = to as i64 - at as i64 - 1;
        out[at].off = i16::try_from(off).map_err(|_| TranslateError::TooLong)?;
    }
    Ok(out)
}

fn jump(out: &mut Vec<Insn>, fix: &mut Vec<(usize, Target)>, insn: Insn, t: Target) {
    fix.push((out.len(), t));
    out.push(insn);
}

/// Loads a value of `size` from packet offset `k` (absolute) or `X + k` (indirect) into `dst`,
/// in host byte order, after the bounds checks (a failed one: no match).
fn packet_load(
    out: &mut Vec<Insn>,
    fix: &mut Vec<(usize, Target)>,
    c: &weir_filter::Insn,
    size: Size,
    dst: u8,
    indirect: bool,
) {
    let bytes = size.bytes();
    if indirect {
        if c.k > IND_MAX as u32 {
            jump(out, fix, Insn::ja(0), Target::NoMatch);
            return;
        }
        out.push(Insn::mov64_reg(1, X));
        out.push(Insn::alu64_imm(alu::ADD, 1, c.k as i32));
        jump(
            out,
            fix,
            Insn::jmp_imm(jmp::JGT, 1, IND_MAX, 0),
            Target::NoMatch,
        );
        out.push(Insn::mov64_reg(2, DATA));
        out.push(Insn::alu64_reg(alu::ADD, 2, 1));
        out.push(Insn::mov64_reg(3, 2));
        out.push(Insn::alu64_imm(alu::ADD, 3, bytes));
        jump(
            out,
            fix,
            Insn::jmp_reg(jmp::JGT, 3, END, 0),
            Target::NoMatch,
        );
        out.push(Insn::load(size, dst, 2, 0));
    } else {
        if c.k.saturating_add(bytes as u32) > ABS_MAX {
            jump(out, fix, Insn::ja(0), Target::NoMatch);
            return;
        }
        out.push(Insn::mov64_reg(2, DATA));
        out.push(Insn::alu64_imm(alu::ADD, 2, c.k as i32 + bytes));
        jump(
            out,
            fix,
            Insn::jmp_reg(jmp::JGT, 2, END, 0),
            Target::NoMatch,
        );
        out.push(Insn::load(size, dst, DATA, c.k as i16));
    }
    match size {
        Size::H => out.push(Insn::to_be(dst, 16)),
        Size::W => out.push(Insn::to_be(dst, 32)),
        _ => {}
    }
}
