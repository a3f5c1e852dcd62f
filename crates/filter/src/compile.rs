//! Compiling tcpdump expressions with libpcap, exactly as `tcpdump -r FILE EXPR` does.
//!
//! tcpdump 4.99 opens the file with `pcap_open_offline()`, then calls
//! `pcap_compile(pd, &fcode, expr, Oflag = 1, netmask = 0)`: optimised, and with a netmask of 0
//! because `-r` never looks an interface up (so `ip broadcast` tests for 255.255.255.255 and
//! 0.0.0.0 only). The code libpcap generates depends on that `pcap_t`:
//!
//! * its link type, `linktype_to_dlt(header link type & 0x03FFFFFF)` (so LINKTYPE_RAW 101 becomes
//!   DLT_RAW 12, the Linux value);
//! * its snapshot length (the header's, or 262144 when that is 0 or too large), which is the
//!   value an accepting program returns;
//! * that it reads a file: for DLT_NULL, `ip6` then tests the three BSD AF_INET6 values (24, 28,
//!   30) instead of Linux's 10, and `inbound`/`outbound` are refused;
//! * whether the file's byte order is the opposite of this machine's: for DLT_NULL the address
//!   family word is in the *writer's* byte order, and libpcap swaps the constants it compares.
//!
//! A `pcap_open_dead()` handle knows none of the last two, so weir does not use one: it builds
//! the 24-byte header of a classic pcap file with the wanted link type, snapshot length and byte
//! order in memory, opens it with `pcap_fopen_offline()` over `fmemopen()`, and compiles on that
//! handle. libpcap itself then applies its own link type mapping and snapshot rules, so they are
//! exactly tcpdump's.
//!
//! One deliberate difference: LINKTYPE 14 (OpenBSD's DLT_RAW number) has no DLT on Linux, so
//! libpcap refuses any filter on such a file ("unknown data link type 14"); weir compiles for
//! LINKTYPE_RAW (101 → DLT_RAW) instead, which is what those packets are.

use std::ffi::CString;
use std::os::raw::{c_char, c_void};
use std::ptr;

use weir_packet::LinkType;

use crate::ffi;
use crate::program::Insn;
use crate::FilterError;

/// The netmask `tcpdump -r` passes to `pcap_compile` (it only looks one up for live captures).
pub const TCPDUMP_NETMASK: u32 = 0;
/// tcpdump optimises unless given `-O`.
pub const TCPDUMP_OPTIMIZE: bool = true;

/// The link type written in the pcap header libpcap compiles for. Only LINKTYPE 14 changes
/// (see the module documentation).
pub fn header_link_type(link: LinkType) -> u32 {
    if link == LinkType::RAW_14 {
        LinkType::RAW.0
    } else {
        link.0
    }
}

/// The 24-byte classic pcap file header for `link`/`snaplen`, in this machine's byte order or,
/// when `swapped`, in the opposite one.
fn file_header(link: LinkType, snaplen: u32, swapped: bool) -> [u8; 24] {
    let w32 = |v: u32| if swapped { v.swap_bytes() } else { v }.to_ne_bytes();
    let w16 = |v: u16| if swapped { v.swap_bytes() } else { v }.to_ne_bytes();
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&w32(0xa1b2_c3d4));
    h[4..6].copy_from_slice(&w16(2));
    h[6..8].copy_from_slice(&w16(4));
    // thiszone and sigfigs stay 0.
    h[16..20].copy_from_slice(&w32(snaplen));
    h[20..24].copy_from_slice(&w32(header_link_type(link)));
    h
}

/// An open libpcap handle, closed on drop.
struct Handle(*mut ffi::PcapT);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the pointer came from a successful pcap_*open* call and is closed only here.
        unsafe { ffi::pcap_close(self.0) };
    }
}

/// Compiles `expr` for a pcap file with this link type, snapshot length and byte order, the way
/// `tcpdump -r` would; returns libpcap's instructions or its error message verbatim.
pub(crate) fn compile_for_file(
    expr: &str,
    link: LinkType,
    snaplen: u32,
    swapped: bool,
) -> Result<Vec<Insn>, FilterError> {
    let cexpr = CString::new(expr).map_err(|_| FilterError::NulInExpression)?;
    let mut header = file_header(link, snaplen, swapped);

    let _lock = ffi::compile_lock();
    // SAFETY: `header` outlives the stream: the stream is closed by pcap_close (Handle's drop) or
    // by the fclose below, both before `header` goes out of scope. Mode "r" never writes.
    let fp = unsafe {
        libc::fmemopen(
            header.as_mut_ptr() as *mut c_void,
            header.len(),
            c"r".as_ptr(),
        )
    };
    if fp.is_null() {
        return Err(FilterError::Libpcap(format!(
            "fmemopen: {}",
            std::io::Error::last_os_error()
        )));
    }
    let mut errbuf: [c_char; ffi::ERRBUF_SIZE] = [0; ffi::ERRBUF_SIZE];
    // SAFETY: `fp` is a valid stream and `errbuf` has PCAP_ERRBUF_SIZE bytes. On success libpcap
    // owns `fp` (pcap_close closes it); on failure it is still ours.
    let p = unsafe {
        ffi::pcap_fopen_offline_with_tstamp_precision(
            fp,
            ffi::TSTAMP_PRECISION_MICRO,
            errbuf.as_mut_ptr(),
        )
    };
    if p.is_null() {
        // SAFETY: libpcap did not take the stream, so we close it, once.
        unsafe { libc::fclose(fp) };
        return Err(FilterError::UnsupportedLinkType(
            link,
            ffi::errbuf_string(&errbuf),
        ));
    }
    let handle = Handle(p);
    compile_on(&handle, &cexpr).map_err(|msg| classify(link, msg))
}

/// libpcap refuses link types it has no code generator for with this message, even for an empty
/// expression: that is the link type's fault, not the expression's.
fn classify(link: LinkType, msg: String) -> FilterError {
    if msg.starts_with("unknown data link type") {
        FilterError::UnsupportedLinkType(link, msg)
    } else {
        FilterError::Compile(msg)
    }
}

/// Runs `pcap_compile` on an open handle (tcpdump's optimise flag and netmask) and copies the
/// program out. The caller holds [`ffi::compile_lock`].
fn compile_on(handle: &Handle, cexpr: &CString) -> Result<Vec<Insn>, String> {
    let mut prog = ffi::BpfProgram {
        bf_len: 0,
        bf_insns: ptr::null_mut(),
    };
    // SAFETY: the handle is open, `prog` is a valid out-parameter, `cexpr` is NUL-terminated.
    let rc = unsafe {
        ffi::pcap_compile(
            handle.0,
            &mut prog,
            cexpr.as_ptr(),
            i32::from(TCPDUMP_OPTIMIZE),
            TCPDUMP_NETMASK,
        )
    };
    if rc < 0 {
        // SAFETY: pcap_geterr returns the handle's NUL-terminated error buffer, valid while the
        // handle is open; it is copied at once.
        return Err(unsafe { ffi::c_string(ffi::pcap_geterr(handle.0)) });
    }
    let insns = program_insns(&prog).to_vec();
    // SAFETY: `prog` was filled by a successful pcap_compile and is freed once.
    unsafe { ffi::pcap_freecode(&mut prog) };
    Ok(insns)
}

/// The instructions of a libpcap program, borrowed.
pub(crate) fn program_insns(prog: &ffi::BpfProgram) -> &[Insn] {
    if prog.bf_insns.is_null() || prog.bf_len == 0 {
        return &[];
    }
    // SAFETY: libpcap allocated `bf_len` instructions at `bf_insns`; `Insn` has the layout of
    // `struct bpf_insn`; the slice borrows `prog`, which owns them until pcap_freecode.
    unsafe { std::slice::from_raw_parts(prog.bf_insns, prog.bf_len as usize) }
}

/// Compiles on a caller's open handle (used by the libpcap oracle, which compiles on the real
/// file's handle).
pub(crate) fn compile_on_raw(p: *mut ffi::PcapT, expr: &str) -> Result<ffi::BpfProgram, String> {
    let cexpr =
        CString::new(expr).map_err(|_| "filter expression contains a NUL byte".to_string())?;
    let mut prog = ffi::BpfProgram {
        bf_len: 0,
        bf_insns: ptr::null_mut(),
    };
    let _lock = ffi::compile_lock();
    // SAFETY: the caller passes an open handle; `prog` is a valid out-parameter; `cexpr` is
    // NUL-terminated.
    let rc = unsafe {
        ffi::pcap_compile(
            p,
            &mut prog,
            cexpr.as_ptr(),
            i32::from(TCPDUMP_OPTIMIZE),
            TCPDUMP_NETMASK,
        )
    };
    if rc < 0 {
        // SAFETY: as in `compile_on`.
        return Err(unsafe { ffi::c_string(ffi::pcap_geterr(p)) });
    }
    Ok(prog)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let h = file_header(LinkType::ETHERNET, 65535, false);
        assert_eq!(u32::from_ne_bytes(h[0..4].try_into().unwrap()), 0xa1b2_c3d4);
        assert_eq!(u32::from_ne_bytes(h[16..20].try_into().unwrap()), 65535);
        assert_eq!(u32::from_ne_bytes(h[20..24].try_into().unwrap()), 1);
        let s = file_header(LinkType::NULL, 65535, true);
        assert_eq!(u32::from_ne_bytes(s[0..4].try_into().unwrap()), 0xd4c3_b2a1);
        assert_eq!(
            u32::from_ne_bytes(s[16..20].try_into().unwrap()),
            0xffff_0000
        );
        assert_eq!(header_link_type(LinkType::RAW_14), 101);
        assert_eq!(header_link_type(LinkType::RAW_12), 12);
    }
}
