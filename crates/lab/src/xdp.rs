//! XDP for the lab, with no BPF toolchain: two tiny programs written as raw eBPF instructions,
//! loaded with the `bpf()` system call and attached in native (driver) mode through rtnetlink,
//! in a thread moved into the bench's namespace with `setns()` (network namespaces are
//! per-thread, so the rest of the process stays where it is).
//!
//! * the forwarder, on the router's `in0`: IPv4 frames get the receiver's MAC as destination and
//!   `out0`'s as source and go straight out of `out0` (`bpf_redirect`), past the kernel's
//!   forwarding path *and out0's qdisc* — which is what a study of XDP forwarding compares; the
//!   TTL is not decremented. Other frames go up the stack (XDP_PASS).
//! * a pass-through program on the receiver's `eth0`: a veth accepts frames redirected into it
//!   only when its peer runs an XDP program (or GRO), so it gets one that passes everything.
//!
//! Every `unsafe` block here is a system call, each with a `// SAFETY:` comment.

use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::bench::{Bench, Role, State};
use crate::netns::{run_in, Enter};
use crate::LabError;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | dst,
        off,
        imm,
    }
}

const XDP_PASS: i32 = 2;
const BPF_FUNC_REDIRECT: i32 = 23;

/// `r0 = XDP_PASS; exit`.
fn pass_program() -> Vec<Insn> {
    vec![insn(0xb7, 0, 0, 0, XDP_PASS), insn(0x95, 0, 0, 0, 0)]
}

pub(crate) fn mac_bytes(mac: &str) -> Result<[u8; 6], LabError> {
    let v: Vec<u8> = mac
        .split(':')
        .map(|p| u8::from_str_radix(p, 16))
        .collect::<Result<_, _>>()
        .map_err(|_| LabError::Config(format!("bad MAC {mac}")))?;
    v.try_into()
        .map_err(|_| LabError::Config(format!("bad MAC {mac}")))
}

/// The forwarder: rewrite the MACs of IPv4 frames and redirect them to `ifindex`.
fn forward_program(dst: [u8; 6], src: [u8; 6], ifindex: u32) -> Vec<Insn> {
    let w = |b: &[u8]| i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let h = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]) as i32;
    vec![
        insn(0x61, 2, 1, 0, 0),                 // 0: r2 = ctx->data
        insn(0x61, 3, 1, 4, 0),                 // 1: r3 = ctx->data_end
        insn(0xbf, 4, 2, 0, 0),                 // 2: r4 = r2
        insn(0x07, 4, 0, 0, 14),                // 3: r4 += 14
        insn(0x2d, 4, 3, 10, 0),                // 4: if r4 > r3 goto 15 (pass)
        insn(0x69, 5, 2, 12, 0),                // 5: r5 = ethertype (as little-endian u16)
        insn(0x55, 5, 0, 8, 0x0008),            // 6: if r5 != 0x0800 goto 15 (pass)
        insn(0x62, 2, 0, 0, w(&dst)),           // 7: dst MAC[0..4]
        insn(0x6a, 2, 0, 4, h(&dst[4..])),      // 8: dst MAC[4..6]
        insn(0x62, 2, 0, 6, w(&src)),           // 9: src MAC[0..4]
        insn(0x6a, 2, 0, 10, h(&src[4..])),     // 10: src MAC[4..6]
        insn(0xb7, 1, 0, 0, ifindex as i32),    // 11: r1 = ifindex
        insn(0xb7, 2, 0, 0, 0),                 // 12: r2 = 0
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT), // 13: r0 = bpf_redirect(r1, r2)
        insn(0x95, 0, 0, 0, 0),                 // 14: exit
        insn(0xb7, 0, 0, 0, XDP_PASS),          // 15: r0 = XDP_PASS
        insn(0x95, 0, 0, 0, 0),                 // 16: exit
    ]
}

/// The part of `union bpf_attr` that BPF_PROG_LOAD reads.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
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

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_XDP: u32 = 6;

/// Loads an XDP program; the verifier's log comes back in the error.
fn load(prog: &[Insn], name: &str) -> Result<OwnedFd, LabError> {
    let license = b"GPL\0";
    let mut log = vec![0u8; 1 << 16];
    for level in [0u32, 1] {
        let mut attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: prog.len() as u32,
            insns: prog.as_ptr() as u64,
            license: license.as_ptr() as u64,
            ..Default::default()
        };
        if level == 1 {
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
        }
        for (d, s) in attr.prog_name.iter_mut().zip(name.bytes().take(15)) {
            *d = s;
        }
        // SAFETY: bpf(BPF_PROG_LOAD) reads `attr` (size passed) and, through it, the
        // instructions, the license string and (when set) writes the log buffer; all of them
        // live until the call returns.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_LOAD,
                &mut attr as *mut ProgLoadAttr,
                size_of::<ProgLoadAttr>() as u32,
            )
        };
        if fd >= 0 {
            // SAFETY: a new file descriptor returned by the kernel, owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        }
        if level == 1 {
            let err = std::io::Error::last_os_error();
            let text = String::from_utf8_lossy(&log);
            let text = text.trim_end_matches('\0').trim();
            return Err(LabError::Unsupported(format!(
                "the kernel refused the XDP program: {err}; {text}"
            )));
        }
    }
    unreachable!("the second attempt returns")
}

const IFLA_XDP: u16 = 43;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_FLAGS: u16 = 3;
const NLA_F_NESTED: u16 = 1 << 15;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// Attaches program `fd` (or detaches with -1) to `iface` in native mode, through rtnetlink in
/// the calling thread's namespace.
fn attach(iface: &str, fd: i32) -> Result<(), LabError> {
    let ifindex = weir_capture::interface_index(iface)
        .map_err(|_| LabError::Config(format!("no interface {iface}")))?;
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
    msg.extend_from_slice(&XDP_FLAGS_DRV_MODE.to_ne_bytes());
    let len = msg.len() as u32;
    msg[0..4].copy_from_slice(&len.to_ne_bytes());
    let os =
        |what: &str| LabError::Unsupported(format!("{what}: {}", std::io::Error::last_os_error()));
    // SAFETY: plain system call with constant arguments; the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(os("netlink socket"));
    }
    // SAFETY: `raw` was just returned by socket() and is owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
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
        return Err(os("netlink send"));
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
    if n < 20 {
        return Err(os("netlink recv"));
    }
    let kind = u16::from_ne_bytes([buf[4], buf[5]]);
    let err = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
    if kind == libc::NLMSG_ERROR as u16 && err != 0 {
        return Err(LabError::Unsupported(format!(
            "attaching XDP to {iface} in native mode: {}",
            std::io::Error::from_raw_os_error(-err)
        )));
    }
    Ok(())
}

/// Tries to attach a pass-through XDP program natively to `iface` in namespace `ns`, then
/// removes it.
pub fn probe(ns: &str, iface: &str) -> Result<(), LabError> {
    let iface = iface.to_string();
    run_in(ns, Enter::Network, move || {
        let prog = load(&pass_program(), "weir_pass")?;
        attach(&iface, prog.as_raw_fd())?;
        attach(&iface, -1)
    })
}

/// Forwards IPv4 from the router's in0 straight to out0 with an XDP program.
pub fn forward_on(bench: &Bench, state: &State) -> Result<(), LabError> {
    let (Some(out_mac), Some(rcv_mac)) = (state.macs.get(2), state.macs.get(3)) else {
        return Err(LabError::Config(
            "bench state has no MACs: run weir lab up".into(),
        ));
    };
    let (dst, src) = (mac_bytes(rcv_mac)?, mac_bytes(out_mac)?);
    run_in(&bench.ns(Role::Receiver), Enter::Network, || {
        let prog = load(&pass_program(), "weir_pass")?;
        attach("eth0", prog.as_raw_fd())
    })?;
    run_in(&bench.ns(Role::Router), Enter::Network, move || {
        let out = weir_capture::interface_index("out0").unwrap_or(0);
        let prog = load(&forward_program(dst, src, out), "weir_fwd")?;
        attach("in0", prog.as_raw_fd())
    })
}

/// Removes the XDP programs (the kernel's forwarding path is back).
pub fn forward_off(bench: &Bench) -> Result<(), LabError> {
    run_in(&bench.ns(Role::Router), Enter::Network, || {
        attach("in0", -1)
    })?;
    run_in(&bench.ns(Role::Receiver), Enter::Network, || {
        attach("eth0", -1)
    })
}
