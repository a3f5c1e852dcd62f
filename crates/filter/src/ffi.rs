//! The few libpcap C functions weir calls, declared by hand (no bindings crate), and the global
//! lock that serialises every call into libpcap's compiler.
//!
//! Linked against the system libpcap (`-lpcap`; Debian package `libpcap-dev` to build, `libpcap0.8`
//! to run). Signatures follow `<pcap/pcap.h>` of libpcap 1.10.

use std::os::raw::{c_char, c_int, c_uint};
use std::sync::{Mutex, MutexGuard};

use crate::program::Insn;

/// `PCAP_ERRBUF_SIZE`.
pub(crate) const ERRBUF_SIZE: usize = 256;
/// `PCAP_TSTAMP_PRECISION_MICRO`.
pub(crate) const TSTAMP_PRECISION_MICRO: c_uint = 0;

/// Opaque `pcap_t`.
#[repr(C)]
pub(crate) struct PcapT {
    _private: [u8; 0],
}

/// `struct bpf_program`.
#[repr(C)]
pub(crate) struct BpfProgram {
    pub(crate) bf_len: c_uint,
    pub(crate) bf_insns: *mut Insn,
}

/// `struct pcap_pkthdr`.
#[repr(C)]
pub(crate) struct PcapPkthdr {
    pub(crate) ts: libc::timeval,
    pub(crate) caplen: u32,
    pub(crate) len: u32,
}

#[link(name = "pcap")]
extern "C" {
    pub(crate) fn pcap_fopen_offline_with_tstamp_precision(
        fp: *mut libc::FILE,
        precision: c_uint,
        errbuf: *mut c_char,
    ) -> *mut PcapT;
    pub(crate) fn pcap_open_offline(fname: *const c_char, errbuf: *mut c_char) -> *mut PcapT;
    pub(crate) fn pcap_close(p: *mut PcapT);
    pub(crate) fn pcap_compile(
        p: *mut PcapT,
        fp: *mut BpfProgram,
        s: *const c_char,
        optimize: c_int,
        netmask: u32,
    ) -> c_int;
    pub(crate) fn pcap_freecode(fp: *mut BpfProgram);
    pub(crate) fn pcap_geterr(p: *mut PcapT) -> *mut c_char;
    pub(crate) fn pcap_datalink(p: *mut PcapT) -> c_int;
    pub(crate) fn pcap_snapshot(p: *mut PcapT) -> c_int;
    pub(crate) fn pcap_is_swapped(p: *mut PcapT) -> c_int;
    pub(crate) fn pcap_next_ex(
        p: *mut PcapT,
        header: *mut *mut PcapPkthdr,
        data: *mut *const u8,
    ) -> c_int;
    pub(crate) fn pcap_offline_filter(
        fp: *const BpfProgram,
        h: *const PcapPkthdr,
        pkt: *const u8,
    ) -> c_int;
    pub(crate) fn bpf_filter(
        pc: *const Insn,
        pkt: *const u8,
        wirelen: c_uint,
        buflen: c_uint,
    ) -> c_uint;
    pub(crate) fn bpf_validate(f: *const Insn, len: c_int) -> c_int;
}

static LIBPCAP: Mutex<()> = Mutex::new(());

/// Takes the lock every caller of `pcap_compile` holds. libpcap 1.10's compiler is meant to be
/// reentrant, but older ones were not (global parser state), so weir never runs two at once.
pub(crate) fn compile_lock() -> MutexGuard<'static, ()> {
    // A panic while holding the lock leaves no libpcap state behind: go on.
    LIBPCAP.lock().unwrap_or_else(|e| e.into_inner())
}

/// Copies a NUL-terminated C string from libpcap into a `String`.
///
/// # Safety
/// `s` must be null or point to a NUL-terminated string that stays valid during the call.
pub(crate) unsafe fn c_string(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: the caller guarantees `s` is a valid NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(s) }
        .to_string_lossy()
        .into_owned()
}

/// Reads libpcap's error buffer.
pub(crate) fn errbuf_string(buf: &[c_char; ERRBUF_SIZE]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
