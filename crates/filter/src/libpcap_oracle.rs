//! libpcap itself, as the oracle weir's engine is compared with in tests and benchmarks.
//!
//! [`OfflineFile`] opens a capture with `pcap_open_offline()` and reads it with `pcap_next_ex()`,
//! like tcpdump; [`OfflineFile::compile`] compiles on that very handle (tcpdump's flags); and
//! [`LibpcapProgram::offline_filter`] runs libpcap's `pcap_offline_filter()`. [`bpf_filter`] runs
//! libpcap's interpreter on a program weir validated. None of this is on weir's data path.

use std::ffi::CString;
use std::os::raw::c_char;
use std::path::Path;
use std::ptr;

use crate::compile;
use crate::ffi;
use crate::program::Insn;
use crate::Filter;

/// A capture file opened by libpcap.
pub struct OfflineFile {
    p: *mut ffi::PcapT,
}

/// One packet as libpcap read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedPacket {
    /// Captured bytes (`caplen` of them).
    pub data: Vec<u8>,
    /// Length on the wire (`len`).
    pub wirelen: u32,
}

impl OfflineFile {
    /// Opens `path` with `pcap_open_offline()`; the error is libpcap's message.
    pub fn open(path: &Path) -> Result<OfflineFile, String> {
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| "path contains a NUL byte".to_string())?;
        let mut errbuf: [c_char; ffi::ERRBUF_SIZE] = [0; ffi::ERRBUF_SIZE];
        // SAFETY: `cpath` is NUL-terminated and `errbuf` has PCAP_ERRBUF_SIZE bytes.
        let p = unsafe { ffi::pcap_open_offline(cpath.as_ptr(), errbuf.as_mut_ptr()) };
        if p.is_null() {
            return Err(ffi::errbuf_string(&errbuf));
        }
        Ok(OfflineFile { p })
    }

    /// libpcap's DLT_ value for the file (`pcap_datalink`, after `linktype_to_dlt`).
    pub fn datalink(&self) -> i32 {
        // SAFETY: the handle is open.
        unsafe { ffi::pcap_datalink(self.p) }
    }

    /// The snapshot length libpcap uses for the file (`pcap_snapshot`).
    pub fn snapshot(&self) -> i32 {
        // SAFETY: the handle is open.
        unsafe { ffi::pcap_snapshot(self.p) }
    }

    /// Whether the file's byte order is the opposite of this machine's (`pcap_is_swapped`).
    pub fn is_swapped(&self) -> bool {
        // SAFETY: the handle is open.
        unsafe { ffi::pcap_is_swapped(self.p) != 0 }
    }

    /// Compiles `expr` on this file's handle exactly as `tcpdump -r` does (optimised, netmask
    /// 0); the error is libpcap's message.
    pub fn compile(&self, expr: &str) -> Result<LibpcapProgram, String> {
        compile::compile_on_raw(self.p, expr).map(|prog| LibpcapProgram { prog })
    }

    /// Reads every remaining packet; stops at the first read error, returning the packets read
    /// so far and libpcap's message (files damaged at the end are common).
    pub fn read_all(&mut self) -> (Vec<OwnedPacket>, Option<String>) {
        let mut out = Vec::new();
        loop {
            let mut hdr: *mut ffi::PcapPkthdr = ptr::null_mut();
            let mut data: *const u8 = ptr::null();
            // SAFETY: the handle is open and both out-parameters are valid.
            let rc = unsafe { ffi::pcap_next_ex(self.p, &mut hdr, &mut data) };
            match rc {
                1 => {
                    // SAFETY: on success libpcap points `hdr` at a header and `data` at `caplen`
                    // bytes, both valid until the next call on this handle; we copy them now.
                    let (caplen, wirelen) = unsafe { ((*hdr).caplen, (*hdr).len) };
                    let bytes = if caplen == 0 {
                        Vec::new()
                    } else {
                        // SAFETY: see above.
                        unsafe { std::slice::from_raw_parts(data, caplen as usize) }.to_vec()
                    };
                    out.push(OwnedPacket {
                        data: bytes,
                        wirelen,
                    });
                }
                -2 => return (out, None),
                _ => {
                    // SAFETY: the handle's error buffer is a NUL-terminated string.
                    let msg = unsafe { ffi::c_string(ffi::pcap_geterr(self.p)) };
                    return (out, Some(msg));
                }
            }
        }
    }
}

impl Drop for OfflineFile {
    fn drop(&mut self) {
        // SAFETY: opened by pcap_open_offline, closed once.
        unsafe { ffi::pcap_close(self.p) };
    }
}

/// A program compiled by libpcap, freed on drop.
pub struct LibpcapProgram {
    prog: ffi::BpfProgram,
}

// SAFETY: the program is plain heap memory owned by this value; libpcap keeps no reference to
// it, and `offline_filter` only reads it.
unsafe impl Send for LibpcapProgram {}
// SAFETY: as above; shared use only reads.
unsafe impl Sync for LibpcapProgram {}

impl LibpcapProgram {
    /// The instructions libpcap produced.
    pub fn instructions(&self) -> &[Insn] {
        compile::program_insns(&self.prog)
    }

    /// libpcap's `pcap_offline_filter()` on one packet: the program's return value (0 rejects).
    pub fn offline_filter(&self, data: &[u8], wirelen: u32) -> u32 {
        let hdr = ffi::PcapPkthdr {
            ts: libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            caplen: data.len() as u32,
            len: wirelen,
        };
        // SAFETY: `prog` is a program from pcap_compile; `hdr.caplen` bytes are readable at
        // `data` (libpcap reads no further). The int result is bpf_filter's u_int, cast back.
        unsafe { ffi::pcap_offline_filter(&self.prog, &hdr, data.as_ptr()) as u32 }
    }
}

impl Drop for LibpcapProgram {
    fn drop(&mut self) {
        // SAFETY: filled by a successful pcap_compile, freed once.
        unsafe { ffi::pcap_freecode(&mut self.prog) };
    }
}

/// Runs libpcap 1.10's interpreter, `bpf_filter()`, on `filter`'s program.
///
/// Only programs weir validated reach it, so libpcap never meets an opcode it would `abort()`
/// on. Two caveats, both of libpcap's making: its scratch memory starts uninitialised (a
/// program that reads a word before writing it gets garbage), and a program whose backward
/// jumps loop forever never returns.
pub fn bpf_filter(filter: &Filter, data: &[u8], wirelen: u32) -> u32 {
    let insns = filter.instructions();
    // SAFETY: `insns` passed weir's validation (a superset of libpcap's bpf_validate, with only
    // opcodes bpf_filter handles), and `data.len()` bytes are readable at `data`.
    unsafe { ffi::bpf_filter(insns.as_ptr(), data.as_ptr(), wirelen, data.len() as u32) }
}

/// libpcap's own `bpf_validate()` verdict on `insns`.
pub fn bpf_validate(insns: &[Insn]) -> bool {
    let Ok(len) = i32::try_from(insns.len()) else {
        return false;
    };
    // SAFETY: `len` instructions are readable at `insns`; bpf_validate only reads them.
    unsafe { ffi::bpf_validate(insns.as_ptr(), len) != 0 }
}
