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
//! The instruction encoding and the system calls are weir-capture's raw eBPF layer
//! (`weir_capture::ebpf`); this file holds no `unsafe`.

use std::os::fd::{AsRawFd, OwnedFd};

use weir_capture::ebpf::{self, helper, jmp, xdp_action, Insn, Size};

use crate::bench::{Bench, Role, State};
use crate::netns::{run_in, Enter};
use crate::LabError;

/// `r0 = XDP_PASS; exit`.
fn pass_program() -> Vec<Insn> {
    vec![Insn::mov64_imm(0, xdp_action::PASS), Insn::exit()]
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
        Insn::load(Size::W, 2, 1, 0),                  // 0: r2 = ctx->data
        Insn::load(Size::W, 3, 1, 4),                  // 1: r3 = ctx->data_end
        Insn::mov64_reg(4, 2),                         // 2: r4 = r2
        Insn::alu64_imm(ebpf::alu::ADD, 4, 14),        // 3: r4 += 14
        Insn::jmp_reg(jmp::JGT, 4, 3, 10),             // 4: if r4 > r3 goto 15 (pass)
        Insn::load(Size::H, 5, 2, 12),                 // 5: r5 = ethertype (little-endian)
        Insn::jmp_imm(jmp::JNE, 5, 0x0008, 8),         // 6: if r5 != 0x0800 goto 15
        Insn::store_imm(Size::W, 2, 0, w(&dst)),       // 7: dst MAC[0..4]
        Insn::store_imm(Size::H, 2, 4, h(&dst[4..])),  // 8: dst MAC[4..6]
        Insn::store_imm(Size::W, 2, 6, w(&src)),       // 9: src MAC[0..4]
        Insn::store_imm(Size::H, 2, 10, h(&src[4..])), // 10: src MAC[4..6]
        Insn::mov64_imm(1, ifindex as i32),            // 11: r1 = ifindex
        Insn::mov64_imm(2, 0),                         // 12: r2 = 0
        Insn::call(helper::REDIRECT),                  // 13: r0 = bpf_redirect(r1, r2)
        Insn::exit(),                                  // 14: exit
        Insn::mov64_imm(0, xdp_action::PASS),          // 15: r0 = XDP_PASS
        Insn::exit(),                                  // 16: exit
    ]
}

/// Loads an XDP program; the verifier's log comes back in the error.
fn load(prog: &[Insn], name: &str) -> Result<OwnedFd, LabError> {
    ebpf::prog_load(ebpf::PROG_TYPE_XDP, prog, name)
        .map_err(|e| LabError::Unsupported(e.to_string()))
}

/// Attaches program `fd` (or detaches with -1) to `iface` in native mode, through rtnetlink in
/// the calling thread's namespace.
fn attach(iface: &str, fd: i32) -> Result<(), LabError> {
    let ifindex = weir_capture::interface_index(iface)
        .map_err(|_| LabError::Config(format!("no interface {iface}")))?;
    ebpf::xdp_attach_netlink(ifindex, fd, ebpf::XDP_FLAGS_DRV_MODE)
        .map_err(|e| LabError::Unsupported(format!("attaching XDP to {iface} in native mode: {e}")))
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
