//! The AF_XDP receive backend (`--backend xdp`): one XSK socket per RX queue of an interface,
//! fed by an XDP program weir loads and attaches itself, with no libbpf.
//!
//! The program ends in `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)`: a packet
//! goes to the socket bound to its RX queue, or on up the stack when there is none. With rules,
//! the drop rules a classic BPF program can run come first, translated to eBPF
//! ([`ebpf::classic_to_xdp`]; see [`crate::xdp_rules`]): a packet they match is counted in a
//! per-CPU array and dropped (`XDP_DROP`) before any socket sees it. It is loaded with the
//! `bpf()` system call through [`crate::ebpf`] (`BPF_MAP_CREATE` of the XSKMAP and the counter,
//! `BPF_PROG_LOAD`) and attached with `BPF_LINK_CREATE` (native/driver mode first, generic/SKB
//! mode as the fallback); a new rule version replaces it on the link with `BPF_LINK_UPDATE`. A link belongs to its file descriptor: when the pipeline ends, or the
//! process dies (`kill -9` included), the descriptor closes and the kernel detaches the program.
//!
//! Each socket owns its UMEM (frames of [`FRAME_SIZE`] bytes, on explicit huge pages when the
//! system has them reserved, else on normal pages), a fill ring and an RX ring of as many entries
//! as frames (so the fill ring always has room for every frame handed back), and the completion
//! ring the kernel requires. It binds with `XDP_USE_NEED_WAKEUP`, asking for zero-copy first and
//! falling back to copy mode (veth has no zero-copy). Ownership of ring entries passes through
//! the rings' producer/consumer words: we read the kernel's producer with `Acquire` (the
//! descriptors and packet bytes written before it are visible) and publish our consumer and the
//! fill ring's producer with `Release` (our reads of a frame are done before the kernel may
//! reuse it).
//!
//! AF_XDP has no per-packet kernel timestamp: every packet of a batch gets `CLOCK_REALTIME` read
//! when the batch is taken. It has no socket filter either: the whole BPF filter runs in user
//! space (the capture thread's user filter), and the snap length is applied here. The kernel's counters come from
//! `XDP_STATISTICS` ([`XdpStats`]).
//!
//! [`tx`] is the generator's AF_XDP transmit socket (`weir gen --backend xdp`), built on the same
//! UMEM, ring and bind code (`umem_socket`, `bind`, `Mapping`, `Ring`).
//!
//! Every `unsafe` block of the backend is in this file, in `xdp/tx.rs` and in `ebpf.rs`, each
//! with a `// SAFETY:` comment.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::ebpf::{self, alu, helper, jmp, xdp_action, Insn, Size, TranslateError};
use crate::error::CaptureError;
use crate::ring::LivePacket;

pub mod tx;

/// Bytes per UMEM frame (one packet each; the kernel keeps `XDP_PACKET_HEADROOM`, 256 bytes, in
/// front of the data in copy mode, so the longest packet is 3 840 bytes).
pub const FRAME_SIZE: usize = 4096;

/// Size of explicit huge pages on x86-64 and arm64.
const HUGE_PAGE: usize = 2 << 20;

/// Entries of the completion ring (nothing is sent; the kernel requires the ring).
const COMPLETION_ENTRIES: u32 = 64;

/// Most packets taken from the RX ring in one batch.
const BATCH: u32 = 1024;

/// How many packets ahead of the one being read [`XdpBatch::packets`] prefetches.
const PREFETCH_AHEAD: u32 = 8;

/// The kernel's receive counters of one or more AF_XDP sockets (`XDP_STATISTICS`), since they
/// were opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct XdpStats {
    /// Packets the socket dropped for other reasons than a full ring (no free frame in copy
    /// mode, a packet longer than a frame).
    pub rx_dropped: u64,
    /// Invalid descriptors the kernel met (in the fill ring, on receive).
    pub rx_invalid_descs: u64,
    /// Packets dropped because the RX ring was full (the capture thread fell behind).
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty when it needed a frame (events, not packets:
    /// the packets lost then are in `rx_dropped`).
    pub rx_fill_ring_empty_descs: u64,
}

impl std::ops::AddAssign for XdpStats {
    fn add_assign(&mut self, o: XdpStats) {
        self.rx_dropped += o.rx_dropped;
        self.rx_invalid_descs += o.rx_invalid_descs;
        self.rx_ring_full += o.rx_ring_full;
        self.rx_fill_ring_empty_descs += o.rx_fill_ring_empty_descs;
    }
}

impl XdpStats {
    /// Packets lost at the sockets: `rx_dropped + rx_ring_full`.
    pub fn drops(&self) -> u64 {
        self.rx_dropped + self.rx_ring_full
    }

    /// The counters in words, for summaries.
    pub fn text(&self) -> String {
        format!(
            "AF_XDP: rx_dropped {}, rx_ring_full {}, rx_invalid_descs {}, \
             rx_fill_ring_empty_descs {}",
            self.rx_dropped,
            self.rx_ring_full,
            self.rx_invalid_descs,
            self.rx_fill_ring_empty_descs
        )
    }
}

/// One socket's [`XdpStats`], written by its capture thread and read by others.
#[derive(Debug, Default)]
pub(crate) struct XdpCounters {
    rx_dropped: AtomicU64,
    rx_invalid_descs: AtomicU64,
    rx_ring_full: AtomicU64,
    rx_fill_ring_empty_descs: AtomicU64,
}

impl XdpCounters {
    /// The counters now.
    pub(crate) fn load(&self) -> XdpStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        XdpStats {
            rx_dropped: l(&self.rx_dropped),
            rx_invalid_descs: l(&self.rx_invalid_descs),
            rx_ring_full: l(&self.rx_ring_full),
            rx_fill_ring_empty_descs: l(&self.rx_fill_ring_empty_descs),
        }
    }

    /// Stores the kernel's counters read now.
    pub(crate) fn store(&self, s: &XdpStats) {
        let w = |a: &AtomicU64, v| a.store(v, Ordering::Relaxed);
        w(&self.rx_dropped, s.rx_dropped);
        w(&self.rx_invalid_descs, s.rx_invalid_descs);
        w(&self.rx_ring_full, s.rx_ring_full);
        w(&self.rx_fill_ring_empty_descs, s.rx_fill_ring_empty_descs);
    }
}

/// How the XDP program runs on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// In the generic path after the driver (`XDP_FLAGS_SKB_MODE`): the driver has no XDP.
    Generic,
}

/// How the sockets exchange packets with the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// The NIC writes into the UMEM.
    ZeroCopy,
    /// The kernel copies each packet into the UMEM (the driver offers no zero-copy).
    Copy,
}

/// Where a UMEM lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UmemPages {
    /// Explicit huge pages (`MAP_HUGETLB`).
    Huge,
    /// Normal pages (no huge pages reserved).
    Normal,
}

/// The RX queues of an interface (its `queues/rx-*` in sysfs; at least 1).
pub(crate) fn rx_queues(iface: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(1)
        .max(1)
}

/// Refuses interfaces AF_XDP cannot serve: the loopback interface (its packets never come
/// from a driver's receive path in a way XDP sees reliably; tcpdump-style capture of it is
/// what `--backend packet` does).
pub(crate) fn check_interface(iface: &str) -> Result<(), CaptureError> {
    let flags =
        std::fs::read_to_string(format!("/sys/class/net/{iface}/flags")).unwrap_or_default();
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap_or(0);
    if flags & libc::IFF_LOOPBACK as u32 != 0 {
        return Err(CaptureError::Xdp {
            iface: iface.to_string(),
            what: "the loopback interface has no AF_XDP path (neither capture nor send): use \
                   --backend packet"
                .into(),
            os: None,
        });
    }
    Ok(())
}

fn xdp_err(iface: &str, what: impl Into<String>, source: io::Error) -> CaptureError {
    CaptureError::Xdp {
        iface: iface.to_string(),
        what: what.into(),
        os: Some(source),
    }
}

fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a system call and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// The program's tail that sends a packet on: `r2 = ctx->rx_queue_index; r1 = &xsks; r3 =
/// XDP_PASS; return bpf_redirect_map(r1, r2, r3)` (the context in `r6`).
fn redirect_tail(xsks: RawFd) -> Vec<Insn> {
    let mut t = vec![Insn::load(Size::W, 2, 6, 16)];
    t.extend(Insn::load_map_fd(1, xsks));
    t.extend([
        Insn::mov64_imm(3, xdp_action::PASS),
        Insn::call(helper::REDIRECT_MAP),
        Insn::exit(),
    ]);
    t
}

/// The program's tail for a packet the drop rules match: `counter[0] += 1` (a per-CPU array,
/// so no atomic operation), `return XDP_DROP`.
fn drop_tail(counter: RawFd) -> Vec<Insn> {
    let mut t = vec![
        Insn::store_imm(Size::W, 10, ebpf::SCRATCH_SLOT, 0),
        Insn::mov64_reg(2, 10),
        Insn::alu64_imm(alu::ADD, 2, i32::from(ebpf::SCRATCH_SLOT)),
    ];
    t.extend(Insn::load_map_fd(1, counter));
    t.extend([
        Insn::call(helper::MAP_LOOKUP_ELEM),
        Insn::jmp_imm(jmp::JEQ, 0, 0, 3),
        Insn::load(Size::Dw, 1, 0, 0),
        Insn::alu64_imm(alu::ADD, 1, 1),
        Insn::store(Size::Dw, 0, 1, 0),
        Insn::mov64_imm(0, xdp_action::DROP),
        Insn::exit(),
    ]);
    t
}

/// The XDP program: without drop rules, `return bpf_redirect_map(&xsks, ctx->rx_queue_index,
/// XDP_PASS)`; with them (a classic program whose match means drop), that program translated
/// ([`ebpf::classic_to_xdp`]) in front, its matches counted in `counter` and dropped.
pub fn program(
    xsks: RawFd,
    counter: RawFd,
    drops: Option<&[weir_filter::Insn]>,
) -> Result<Vec<Insn>, TranslateError> {
    match drops {
        Some(d) => ebpf::classic_to_xdp(d, &drop_tail(counter), &redirect_tail(xsks)),
        None => {
            let mut p = vec![Insn::mov64_reg(6, 1)];
            p.extend(redirect_tail(xsks));
            Ok(p)
        }
    }
}

/// The XDP program attached to one interface, with its XSKMAP and its drop counter. Dropping
/// it closes the link and the kernel detaches the program.
#[derive(Debug)]
pub(crate) struct Attachment {
    map: OwnedFd,
    counter: OwnedFd,
    prog: OwnedFd,
    link: Option<OwnedFd>,
    iface: String,
    ifindex: u32,
    mode: Option<AttachMode>,
}

/// Loads the program over maps `xsks` and `counter`.
fn load_program(
    iface: &str,
    xsks: &OwnedFd,
    counter: &OwnedFd,
    drops: Option<&[weir_filter::Insn]>,
) -> Result<OwnedFd, CaptureError> {
    let insns =
        program(xsks.as_raw_fd(), counter.as_raw_fd(), drops).map_err(|e| CaptureError::Xdp {
            iface: iface.to_string(),
            what: format!("the drop rules' program: {e}"),
            os: None,
        })?;
    ebpf::prog_load(ebpf::PROG_TYPE_XDP, &insns, "weir_xsk").map_err(|e| {
        if matches!(e.source.raw_os_error(), Some(libc::EPERM | libc::EACCES)) {
            CaptureError::from_io(iface, "BPF_PROG_LOAD(XDP)", e.source)
        } else {
            xdp_err(
                iface,
                format!(
                    "the kernel refused weir's XDP program (verifier: {})",
                    e.log
                ),
                e.source,
            )
        }
    })
}

fn counter_map(iface: &str) -> Result<OwnedFd, CaptureError> {
    ebpf::map_create(ebpf::map_type::PERCPU_ARRAY, 4, 8, 1)
        .map_err(|e| CaptureError::from_io(iface, "BPF_MAP_CREATE(PERCPU_ARRAY)", e))
}

/// Whether the kernel takes the XDP program with drop program `drops` (loaded over maps of
/// its own, then closed): `Err` says why not.
pub(crate) fn try_program(drops: &[weir_filter::Insn]) -> Result<(), CaptureError> {
    let xsks = ebpf::map_create(ebpf::map_type::XSKMAP, 4, 4, 1)
        .map_err(|e| CaptureError::from_io("-", "BPF_MAP_CREATE(XSKMAP)", e))?;
    let counter = counter_map("-")?;
    load_program("-", &xsks, &counter, Some(drops)).map(drop)
}

impl Attachment {
    /// Creates the XSKMAP (one entry per RX queue) and the drop counter and loads the program
    /// (with the drop rules' classic program `drops`, when given); nothing is attached.
    pub(crate) fn load(
        iface: &str,
        ifindex: u32,
        queues: u32,
        drops: Option<&[weir_filter::Insn]>,
    ) -> Result<Attachment, CaptureError> {
        let map = ebpf::map_create(ebpf::map_type::XSKMAP, 4, 4, queues)
            .map_err(|e| CaptureError::from_io(iface, "BPF_MAP_CREATE(XSKMAP)", e))?;
        let counter = counter_map(iface)?;
        let prog = load_program(iface, &map, &counter, drops)?;
        Ok(Attachment {
            map,
            counter,
            prog,
            link: None,
            iface: iface.to_string(),
            ifindex,
            mode: None,
        })
    }

    /// Replaces the program on the link (`BPF_LINK_UPDATE`, atomic: every packet meets the old
    /// program or the new one) with one built from `drops`, over the same maps (the sockets
    /// stay, the drop count goes on).
    pub(crate) fn replace(
        &mut self,
        drops: Option<&[weir_filter::Insn]>,
    ) -> Result<(), CaptureError> {
        let prog = load_program(&self.iface, &self.map, &self.counter, drops)?;
        if let Some(link) = &self.link {
            ebpf::link_update(link, &prog)
                .map_err(|e| xdp_err(&self.iface, "BPF_LINK_UPDATE", e))?;
        }
        self.prog = prog;
        Ok(())
    }

    /// Packets the drop rules dropped since the program was first loaded.
    pub(crate) fn dropped(&self) -> Result<u64, CaptureError> {
        ebpf::percpu_sum(&self.counter, 0)
            .map_err(|e| xdp_err(&self.iface, "reading the drop counter", e))
    }

    /// Puts socket `fd` in the map for `queue`.
    pub(crate) fn insert(&self, queue: u32, sock: &XskSocket) -> Result<(), CaptureError> {
        let value = sock.fd.as_raw_fd() as u32;
        ebpf::map_update(&self.map, &queue.to_ne_bytes(), &value.to_ne_bytes())
            .map_err(|e| xdp_err(&self.iface, format!("XSKMAP entry of RX queue {queue}"), e))
    }

    /// Attaches the program to the interface: native mode, else generic mode. Refused (with a
    /// clear error) when another XDP program is attached.
    pub(crate) fn attach(&mut self) -> Result<AttachMode, CaptureError> {
        let mut first = None;
        for (mode, flags) in [
            (AttachMode::Native, ebpf::XDP_FLAGS_DRV_MODE),
            (AttachMode::Generic, ebpf::XDP_FLAGS_SKB_MODE),
        ] {
            match ebpf::link_create(&self.prog, self.ifindex, ebpf::ATTACH_XDP, flags) {
                Ok(fd) => {
                    self.link = Some(fd);
                    self.mode = Some(mode);
                    return Ok(mode);
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EEXIST)) => {
                    return Err(xdp_err(
                        &self.iface,
                        "another XDP program is already attached to the interface (see `ip \
                         link show`; detach it, or capture with --backend packet)",
                        e,
                    ));
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
                    return Err(CaptureError::from_io(
                        &self.iface,
                        "BPF_LINK_CREATE(XDP)",
                        e,
                    ));
                }
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        Err(xdp_err(
            &self.iface,
            "cannot attach the XDP program (neither native nor generic mode)",
            first.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
        ))
    }
}

/// A region of memory from `mmap`, unmapped when dropped.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// An anonymous mapping of `len` bytes: on explicit huge pages (`MAP_HUGETLB`, populated
    /// now) when `huge`, else on normal pages advised for transparent huge pages
    /// (`MADV_HUGEPAGE`), left to be faulted in by their first user (`XDP_UMEM_REG` pins, and
    /// so faults in, every page of a UMEM).
    fn anonymous(len: usize, huge: bool) -> io::Result<Mapping> {
        let flags = libc::MAP_PRIVATE
            | libc::MAP_ANONYMOUS
            | if huge {
                libc::MAP_HUGETLB | libc::MAP_POPULATE
            } else {
                0
            };
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; the
        // result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        if !huge {
            // One TLB entry per 2 MiB instead of per 4 KiB: every packet lands in a frame of its
            // own, so on 4 KiB pages each packet read would be a TLB miss of its own.
            weir_buffer::advise_huge_pages(p.cast::<u8>(), len);
        }
        Ok(Mapping { ptr: p.cast(), len })
    }

    fn ring(fd: RawFd, len: usize, offset: u64) -> io::Result<Mapping> {
        // SAFETY: maps the ring the kernel made for this socket at its documented page offset;
        // the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing refers to the region any
        // more (its owner is being dropped).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One of a socket's rings: producer and consumer words, flags and descriptors, in a mapping.
struct Ring {
    _map: Mapping,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
}

impl Ring {
    fn new(map: Mapping, off: &libc::xdp_ring_offset, entries: u32) -> Ring {
        // SAFETY: the offsets come from XDP_MMAP_OFFSETS for this ring and lie inside the
        // mapping, which was sized `off.desc + entries * entry size`; the words are 4-byte
        // aligned u32s the kernel updates atomically.
        unsafe {
            Ring {
                producer: map.ptr.add(off.producer as usize).cast(),
                consumer: map.ptr.add(off.consumer as usize).cast(),
                flags: map.ptr.add(off.flags as usize).cast(),
                desc: map.ptr.add(off.desc as usize),
                mask: entries - 1,
                _map: map,
            }
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping `_map` (see `new`).
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as `producer`.
        unsafe { &*self.consumer }
    }

    fn needs_wakeup(&self) -> bool {
        // SAFETY: as `producer`.
        let f = unsafe { &*self.flags };
        f.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

/// One AF_XDP socket bound to one RX queue, with its UMEM and rings.
pub struct XskSocket {
    fd: OwnedFd,
    iface: String,
    queue: u32,
    umem: Mapping,
    pages: UmemPages,
    frames: u32,
    fill: Ring,
    rx: Ring,
    /// Our copy of the RX ring's consumer and the fill ring's producer (we are their only
    /// writer).
    rx_cons: u32,
    fill_prod: u32,
    snaplen: usize,
    mode: BindMode,
}

// SAFETY: the raw pointers point into mappings the socket owns; one thread at a time uses the
// socket (it is moved into its capture thread), and the kernel's side is synchronised through
// the rings' atomic words.
unsafe impl Send for XskSocket {}

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a value of the type the option reads, alive for the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn getsockopt<T: Default>(fd: RawFd, opt: libc::c_int) -> io::Result<T> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`, which lives for the call.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            &mut v as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

#[repr(C)]
struct Offsets(libc::xdp_mmap_offsets);

impl Default for Offsets {
    fn default() -> Self {
        // SAFETY: xdp_mmap_offsets is plain old data; all-zero is valid.
        Offsets(unsafe { std::mem::zeroed() })
    }
}

impl Default for WrapStats {
    fn default() -> Self {
        // SAFETY: xdp_statistics is plain old data; all-zero is valid.
        WrapStats(unsafe { std::mem::zeroed() })
    }
}

#[repr(C)]
struct WrapStats(libc::xdp_statistics);

/// A new AF_XDP socket with a UMEM of `frames` frames of [`FRAME_SIZE`] bytes registered
/// (`XDP_UMEM_REG`): on explicit huge pages when the system has them reserved (and the UMEM is
/// a whole number of them), else on normal pages. Shared by the receive sockets and the
/// generator's transmit socket ([`tx::XskTx`]).
fn umem_socket(iface: &str, frames: u32) -> Result<(OwnedFd, Mapping, UmemPages), CaptureError> {
    // SAFETY: plain system call with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(CaptureError::os(iface, "socket(AF_XDP)"));
    }
    let fd = owned(fd);
    let len = frames as usize * FRAME_SIZE;
    let (umem, pages) = match Mapping::anonymous(len, true) {
        Ok(m) if len % HUGE_PAGE == 0 => (m, UmemPages::Huge),
        _ => (
            Mapping::anonymous(len, false).map_err(|e| xdp_err(iface, "UMEM mmap", e))?,
            UmemPages::Normal,
        ),
    };
    let reg = libc::xdp_umem_reg {
        addr: umem.ptr as u64,
        len: len as u64,
        chunk_size: FRAME_SIZE as u32,
        headroom: 0,
        flags: 0,
        tx_metadata_len: 0,
    };
    setsockopt(fd.as_raw_fd(), libc::XDP_UMEM_REG, &reg)
        .map_err(|e| xdp_err(iface, "XDP_UMEM_REG", e))?;
    Ok((fd, umem, pages))
}

/// Binds socket `raw` (its rings set up) to `queue` of the interface with
/// `XDP_USE_NEED_WAKEUP`: zero-copy first, copy mode when the driver refuses it. `EBUSY` (the
/// queue has a socket) is retried for up to a second: the kernel releases a closed socket's
/// hold on its queue in deferred work, so a socket of a process that just ended (or was
/// killed) can hold it for a moment after its close.
fn bind(raw: RawFd, iface: &str, ifindex: u32, queue: u32) -> Result<BindMode, CaptureError> {
    let t = std::time::Instant::now();
    loop {
        match bind_once(raw, iface, ifindex, queue) {
            Err(CaptureError::Xdp { os: Some(e), .. })
                if e.raw_os_error() == Some(libc::EBUSY)
                    && t.elapsed() < std::time::Duration::from_secs(1) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => return r,
        }
    }
}

/// One attempt of [`bind`].
fn bind_once(raw: RawFd, iface: &str, ifindex: u32, queue: u32) -> Result<BindMode, CaptureError> {
    let mut zero_copy_refusal = None;
    for (mode, flag) in [
        (BindMode::ZeroCopy, libc::XDP_ZEROCOPY),
        (BindMode::Copy, libc::XDP_COPY),
    ] {
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flag | libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `sa` is a sockaddr_xdp of the size given, alive for the call.
        let r = unsafe {
            libc::bind(
                raw,
                &sa as *const libc::sockaddr_xdp as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r == 0 {
            if let Some(e) = zero_copy_refusal {
                tracing::debug!("{iface}: queue {queue}: no zero-copy ({e}), copy mode");
            }
            return Ok(mode);
        }
        let e = io::Error::last_os_error();
        if mode == BindMode::ZeroCopy {
            zero_copy_refusal = Some(e);
            continue;
        }
        let what = if e.raw_os_error() == Some(libc::EBUSY) {
            format!(
                "queue {queue} already has an AF_XDP socket bound (another capture or generator?)"
            )
        } else {
            format!("bind to queue {queue}")
        };
        return Err(xdp_err(iface, what, e));
    }
    unreachable!("the copy-mode bind returns")
}

impl XskSocket {
    /// Opens a socket on `queue` of `iface` with a UMEM of `frames` frames (a power of two),
    /// binds it (zero-copy, else copy mode) and hands every frame to the kernel.
    pub(crate) fn open(
        iface: &str,
        ifindex: u32,
        queue: u32,
        frames: u32,
        snaplen: u32,
    ) -> Result<XskSocket, CaptureError> {
        let (fd, umem, pages) = umem_socket(iface, frames)?;
        let raw = fd.as_raw_fd();
        setsockopt(raw, libc::XDP_UMEM_FILL_RING, &(frames as libc::c_int))
            .map_err(|e| xdp_err(iface, "XDP_UMEM_FILL_RING", e))?;
        setsockopt(
            raw,
            libc::XDP_UMEM_COMPLETION_RING,
            &(COMPLETION_ENTRIES as libc::c_int),
        )
        .map_err(|e| xdp_err(iface, "XDP_UMEM_COMPLETION_RING", e))?;
        setsockopt(raw, libc::XDP_RX_RING, &(frames as libc::c_int))
            .map_err(|e| xdp_err(iface, "XDP_RX_RING", e))?;
        let off = getsockopt::<Offsets>(raw, libc::XDP_MMAP_OFFSETS)
            .map_err(|e| xdp_err(iface, "XDP_MMAP_OFFSETS", e))?
            .0;
        let fill_len = off.fr.desc as usize + frames as usize * 8;
        let fill = Mapping::ring(raw, fill_len, libc::XDP_UMEM_PGOFF_FILL_RING)
            .map_err(|e| xdp_err(iface, "fill ring mmap", e))?;
        let rx_len = off.rx.desc as usize + frames as usize * std::mem::size_of::<libc::xdp_desc>();
        let rx = Mapping::ring(raw, rx_len, libc::XDP_PGOFF_RX_RING as u64)
            .map_err(|e| xdp_err(iface, "RX ring mmap", e))?;
        let mut sock = XskSocket {
            fd,
            iface: iface.to_string(),
            queue,
            umem,
            pages,
            frames,
            fill: Ring::new(fill, &off.fr, frames),
            rx: Ring::new(rx, &off.rx, frames),
            rx_cons: 0,
            fill_prod: 0,
            snaplen: snaplen.max(1) as usize,
            mode: BindMode::Copy,
        };
        sock.rx_cons = sock.rx.consumer().load(Ordering::Relaxed);
        sock.fill_prod = sock.fill.producer().load(Ordering::Relaxed);
        for i in 0..frames {
            sock.put_fill(i as u64 * FRAME_SIZE as u64);
        }
        sock.fill
            .producer()
            .store(sock.fill_prod, Ordering::Release);
        sock.mode = bind(raw, iface, ifindex, queue)?;
        Ok(sock)
    }

    /// Writes one frame address at the fill ring's (private) producer position.
    fn put_fill(&mut self, addr: u64) {
        let i = (self.fill_prod & self.fill.mask) as usize;
        // SAFETY: entry `i` of the fill ring's descriptors (u64 each) lies inside its mapping;
        // the kernel reads it only after we publish the producer.
        unsafe { self.fill.desc.cast::<u64>().add(i).write(addr) };
        self.fill_prod = self.fill_prod.wrapping_add(1);
    }

    /// The interface.
    pub fn interface(&self) -> &str {
        &self.iface
    }

    /// The RX queue.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Zero-copy or copy mode.
    pub fn bind_mode(&self) -> BindMode {
        self.mode
    }

    /// Where the UMEM lives.
    pub fn pages(&self) -> UmemPages {
        self.pages
    }

    /// Bytes of UMEM.
    pub fn umem_bytes(&self) -> usize {
        self.frames as usize * FRAME_SIZE
    }

    /// The kernel's counters since the socket was opened.
    pub fn stats(&self) -> Result<XdpStats, CaptureError> {
        let s = getsockopt::<WrapStats>(self.fd.as_raw_fd(), libc::XDP_STATISTICS)
            .map_err(|e| xdp_err(&self.iface, "XDP_STATISTICS", e))?
            .0;
        Ok(XdpStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
        })
    }

    /// The next batch of received packets, waiting up to `timeout_ms` for one; `None` when none
    /// came.
    pub fn next_batch(&mut self, timeout_ms: i32) -> Result<Option<XdpBatch<'_>>, CaptureError> {
        let mut avail = self
            .rx
            .producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.rx_cons);
        if avail == 0 && timeout_ms > 0 {
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd, alive for the call.
            let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(xdp_err(&self.iface, "poll", e));
                }
            }
            avail = self
                .rx
                .producer()
                .load(Ordering::Acquire)
                .wrapping_sub(self.rx_cons);
        }
        if avail == 0 {
            return Ok(None);
        }
        let n = avail.min(BATCH);
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec, alive for the call.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
        let ts_ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        Ok(Some(XdpBatch {
            start: self.rx_cons,
            n,
            ts_ns,
            sock: self,
        }))
    }

    fn desc(&self, pos: u32) -> libc::xdp_desc {
        let i = (pos & self.rx.mask) as usize;
        // SAFETY: entry `i` of the RX ring lies inside its mapping; the kernel published it
        // (producer read with Acquire) and will not rewrite it before we move the consumer.
        unsafe { self.rx.desc.cast::<libc::xdp_desc>().add(i).read() }
    }
}

/// Packets taken from a socket's RX ring; dropping the batch hands their frames back to the
/// kernel (fill ring) and releases the RX entries.
pub struct XdpBatch<'a> {
    sock: &'a mut XskSocket,
    start: u32,
    n: u32,
    ts_ns: u64,
}

impl<'a> XdpBatch<'a> {
    /// Number of packets.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The packets, cut to the snap length, stamped with the batch's receive time.
    pub fn packets(&self) -> impl Iterator<Item = LivePacket<'_>> + '_ {
        let umem = self.sock.umem.ptr as *const u8;
        let umem_len = self.sock.umem.len;
        (0..self.n).filter_map(move |k| {
            // The kernel copied each packet into its own frame on another CPU: every packet is
            // a cache miss (and, without huge pages, a TLB miss) of its own. Ask for the
            // packet `PREFETCH_AHEAD` places ahead so that the misses overlap with the copies
            // of the packets before it.
            if k + PREFETCH_AHEAD < self.n {
                let d = self.sock.desc(self.start.wrapping_add(k + PREFETCH_AHEAD));
                if (d.addr as usize) < umem_len {
                    // SAFETY: the byte lies inside the UMEM (checked), in a frame of this
                    // batch: ours until the batch is dropped.
                    let first = unsafe { &*umem.add(d.addr as usize) };
                    weir_packet::prefetch(first);
                }
            }
            let d = self.sock.desc(self.start.wrapping_add(k));
            let (addr, len) = (d.addr as usize, d.len as usize);
            if addr.checked_add(len).is_none_or(|end| end > umem_len) {
                return None;
            }
            // SAFETY: `addr..addr+len` lies inside the UMEM (checked above); the frame is ours
            // until the batch is dropped, and the borrow of the batch outlives the slice.
            let data = unsafe { std::slice::from_raw_parts(umem.add(addr), len) };
            Some(LivePacket {
                ts_ns: self.ts_ns,
                orig_len: len as u32,
                data: &data[..len.min(self.sock.snaplen)],
                vlan: None,
                hw_timestamp: false,
            })
        })
    }
}

impl Drop for XdpBatch<'_> {
    fn drop(&mut self) {
        let s = &mut *self.sock;
        for k in 0..self.n {
            let d = s.desc(self.start.wrapping_add(k));
            // Aligned mode: the frame is the address rounded down to a frame.
            s.put_fill(d.addr & !(FRAME_SIZE as u64 - 1));
        }
        s.rx_cons = s.rx_cons.wrapping_add(self.n);
        s.rx.consumer().store(s.rx_cons, Ordering::Release);
        s.fill.producer().store(s.fill_prod, Ordering::Release);
        if s.fill.needs_wakeup() {
            // SAFETY: a zero-length non-blocking receive with no buffer: it only wakes the
            // driver up to take the new fill entries.
            unsafe {
                libc::recvfrom(
                    s.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
    }
}

/// What the sockets of one interface got, in words for the start-up line.
pub(crate) fn describe(
    iface: &str,
    socks: &[&XskSocket],
    mode: AttachMode,
    filtered_in_user_space: bool,
) -> String {
    let copy = socks.iter().any(|s| s.bind_mode() == BindMode::Copy);
    let huge = socks.iter().all(|s| s.pages() == UmemPages::Huge);
    let umem: usize = socks.iter().map(|s| s.umem_bytes()).sum();
    format!(
        "AF_XDP on {iface}: {} socket(s), one per RX queue; XDP program attached in {} mode; {}; \
         UMEM {} MiB on {}; {}",
        socks.len(),
        match mode {
            AttachMode::Native => "native (driver)",
            AttachMode::Generic => "generic (SKB, the driver has no native XDP)",
        },
        if copy {
            "copy mode (the driver refused zero-copy)"
        } else {
            "zero-copy mode"
        },
        umem >> 20,
        if huge {
            "huge pages (hugetlb)"
        } else {
            "normal pages (no huge pages reserved: echo N > /proc/sys/vm/nr_hugepages to use them)"
        },
        if filtered_in_user_space {
            "the filter runs in user space (AF_XDP has no socket filter)"
        } else {
            "no filter"
        }
    )
}
