//! [`TxRing`]: an AF_PACKET socket with a TPACKET_V2 transmit ring. Frames are written straight
//! into memory shared with the kernel, marked ready, and a whole batch goes out with one `send()`
//! (instead of one system call per packet). The qdisc is kept in the path unless
//! `qdisc_bypass` is set (PACKET_QDISC_BYPASS), since queueing is often what is measured.
//!
//! Every `unsafe` block of the generator lives here, each with a `// SAFETY:` comment.

use std::ffi::CString;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::GenError;

/// Shape of the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxConfig {
    /// Bytes per frame slot (a power of two ≥ 128, ≤ the block size); the largest frame is this
    /// minus 32 bytes of header.
    pub frame_size: u32,
    /// Number of frame slots.
    pub frame_count: u32,
    /// Skip the qdisc (PACKET_QDISC_BYPASS).
    pub qdisc_bypass: bool,
}

impl Default for TxConfig {
    fn default() -> Self {
        TxConfig {
            frame_size: 2048,
            frame_count: 4096,
            qdisc_bypass: false,
        }
    }
}

/// The kernel's `struct tpacket2_hdr` (linux/if_packet.h).
#[repr(C)]
struct Tpacket2Hdr {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_sec: u32,
    tp_nsec: u32,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
    tp_padding: [u8; 4],
}

/// Where frame data starts in a slot: TPACKET2_HDRLEN - sizeof(sockaddr_ll) = 32 (the kernel
/// reads it there when PACKET_TX_HAS_OFF is not set).
const DATA_OFFSET: usize = 32;
const _: () = assert!(size_of::<Tpacket2Hdr>() == DATA_OFFSET);

const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_WRONG_FORMAT: u32 = 4;

/// Counters of a ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Frames handed to the kernel.
    pub queued: u64,
    /// Frames the kernel refused as malformed (TP_STATUS_WRONG_FORMAT).
    pub rejected: u64,
    /// `send()` calls that failed (e.g. ENOBUFS when a qdisc is full: the packet it was
    /// sending is lost).
    pub send_errors: u64,
    /// `send()` calls.
    pub sends: u64,
    /// Frames the kernel still had not taken when [`TxRing::drain`] gave up (a send error such
    /// as ENETDOWN leaves them in the ring): never sent.
    pub unsent: u64,
}

/// An AF_PACKET socket with a TPACKET_V2 TX ring, bound to one interface.
pub struct TxRing {
    fd: OwnedFd,
    map: NonNull<u8>,
    map_len: usize,
    frame_size: usize,
    frame_count: usize,
    next: usize,
    pending: usize,
    iface: String,
    mtu: usize,
    stats: TxStats,
    last_error: Option<std::io::Error>,
}

// SAFETY: the ring memory is owned by this value alone; moving it to another thread moves the
// only handle to the mapping and the socket.
unsafe impl Send for TxRing {}

fn set<T>(
    fd: &OwnedFd,
    iface: &str,
    name: i32,
    value: &T,
    what: &'static str,
) -> Result<(), GenError> {
    // SAFETY: `value` points to a live `T` of the size passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            name,
            value as *const T as *const libc::c_void,
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(GenError::os(iface, what));
    }
    Ok(())
}

/// The MTU of an interface, from sysfs.
fn mtu(iface: &str) -> Option<usize> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether `iface` is administratively up (IFF_UP in `/sys/class/net/IFACE/flags`); true when
/// the flags cannot be read (the send calls will say what is wrong).
fn is_up(iface: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/flags"))
        .ok()
        .and_then(|f| u32::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok())
        .is_none_or(|flags| flags & libc::IFF_UP as u32 != 0)
}

impl TxRing {
    /// Opens the socket, sets up and maps the ring, and binds to `iface`.
    pub fn open(iface: &str, cfg: TxConfig) -> Result<TxRing, GenError> {
        let fs = cfg.frame_size as usize;
        if !fs.is_power_of_two() || !(128..=65_536).contains(&fs) || cfg.frame_count == 0 {
            return Err(GenError::Config(format!(
                "TX ring: frame size {fs} must be a power of two in 128..=65536, frame count > 0"
            )));
        }
        let c = CString::new(iface).map_err(|_| GenError::NoInterface(iface.into()))?;
        // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
        let ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) };
        if ifindex == 0 {
            return Err(GenError::NoInterface(iface.into()));
        }
        if !is_up(iface) {
            return Err(GenError::NotUp(iface.into()));
        }
        // Protocol 0: this socket sends only and receives nothing.
        // SAFETY: plain system call with constant arguments; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(GenError::os(iface, "socket(AF_PACKET)"));
        }
        // SAFETY: `raw` was just returned by socket() and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let v2: libc::c_int = 1; // TPACKET_V2 (enum tpacket_versions)
        set(&fd, iface, libc::PACKET_VERSION, &v2, "PACKET_VERSION")?;
        if cfg.qdisc_bypass {
            let one: libc::c_int = 1;
            set(
                &fd,
                iface,
                20, /* PACKET_QDISC_BYPASS */
                &one,
                "PACKET_QDISC_BYPASS",
            )?;
        }
        let block_size = fs.max(1 << 16);
        let per_block = block_size / fs;
        let blocks = (cfg.frame_count as usize).div_ceil(per_block);
        let frame_count = blocks * per_block;
        let req = libc::tpacket_req {
            tp_block_size: block_size as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: fs as u32,
            tp_frame_nr: frame_count as u32,
        };
        set(&fd, iface, libc::PACKET_TX_RING, &req, "PACKET_TX_RING")?;
        let map_len = block_size * blocks;
        // SAFETY: maps the ring the kernel just allocated for this socket, shared, at a place
        // of the kernel's choosing; the result is checked and unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        let ptr = if ptr == libc::MAP_FAILED {
            // MAP_LOCKED fails under a low RLIMIT_MEMLOCK; an unlocked mapping works as well.
            // SAFETY: as above, without MAP_LOCKED.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(GenError::os(iface, "mmap(TX ring)"));
            }
            p
        } else {
            ptr
        };
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid starting value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as i32;
        let ring = TxRing {
            fd,
            map: NonNull::new(ptr as *mut u8).expect("mmap returned a non-null address"),
            map_len,
            frame_size: fs,
            frame_count,
            next: 0,
            pending: 0,
            iface: iface.to_string(),
            mtu: mtu(iface).unwrap_or(1500),
            stats: TxStats::default(),
            last_error: None,
        };
        // SAFETY: `sll` is a valid sockaddr_ll and its exact size is passed.
        let r = unsafe {
            libc::bind(
                ring.fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(GenError::os(iface, "bind"));
        }
        Ok(ring)
    }

    /// The largest frame a slot holds, and the interface takes (MTU + Ethernet and VLAN headers).
    pub fn max_frame(&self) -> usize {
        (self.frame_size - DATA_OFFSET).min(self.mtu + 18)
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.frame_count
    }

    /// Counters so far.
    pub fn stats(&self) -> TxStats {
        self.stats
    }

    /// The last error `send()` returned, if any.
    pub fn last_error(&self) -> Option<&std::io::Error> {
        self.last_error.as_ref()
    }

    /// Frames filled but not yet sent.
    pub fn pending(&self) -> usize {
        self.pending
    }

    fn status(&self, slot: usize) -> &AtomicU32 {
        // SAFETY: `slot < frame_count`, so the header lies inside the mapping; tp_status is a
        // 4-byte-aligned u32 the kernel reads and writes concurrently, so it is only accessed
        // atomically (the kernel pairs its accesses with barriers, as libpcap's ring code does).
        unsafe { &*(self.map.as_ptr().add(slot * self.frame_size) as *const AtomicU32) }
    }

    /// Tries to fill the next slot with `fill` (which writes at most [`max_frame`](Self::max_frame)
    /// bytes and returns how many). Returns `Ok(None)` when the kernel still owns the next slot
    /// (call [`flush`](Self::flush) or [`wait`](Self::wait)), `Ok(Some(len))` once queued.
    #[inline]
    pub fn push<E>(
        &mut self,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<Option<usize>, E> {
        let slot = self.next;
        let st = self.status(slot).load(Ordering::Acquire);
        if st == TP_STATUS_WRONG_FORMAT {
            self.stats.rejected += 1;
        } else if st != TP_STATUS_AVAILABLE {
            return Ok(None);
        }
        let max = self.max_frame();
        // SAFETY: the slot is ours (status AVAILABLE or WRONG_FORMAT: the kernel does not touch
        // it until we set SEND_REQUEST); its data area starts DATA_OFFSET bytes in and holds
        // frame_size - DATA_OFFSET ≥ max bytes, inside the mapping.
        let data = unsafe {
            std::slice::from_raw_parts_mut(
                self.map.as_ptr().add(slot * self.frame_size + DATA_OFFSET),
                max,
            )
        };
        let len = fill(data)?;
        debug_assert!(len <= max);
        // SAFETY: same slot, its header is ours until the status store below.
        unsafe {
            let hdr = self.map.as_ptr().add(slot * self.frame_size) as *mut Tpacket2Hdr;
            (*hdr).tp_len = len as u32;
        }
        self.status(slot)
            .store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.next = if slot + 1 == self.frame_count {
            0
        } else {
            slot + 1
        };
        self.pending += 1;
        self.stats.queued += 1;
        Ok(Some(len))
    }

    /// Sends every filled frame with one `send()`; blocks until the kernel has taken them.
    pub fn flush(&mut self) {
        if self.pending == 0 {
            return;
        }
        self.stats.sends += 1;
        // SAFETY: a zero-length send on a socket with a TX ring tells the kernel to transmit
        // every frame marked SEND_REQUEST; no user buffer is passed.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                self.stats.send_errors += 1;
                tracing::debug!("{}: send: {e}", self.iface);
                self.last_error = Some(e);
            }
        }
        self.pending = 0;
    }

    /// Waits (up to `timeout_ms`) until the next slot is free again.
    pub fn wait(&mut self, timeout_ms: i32) {
        self.flush();
        if self.status(self.next).load(Ordering::Acquire) == TP_STATUS_AVAILABLE {
            return;
        }
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    }

    /// Sends what is pending and waits until the kernel has released every slot (or a second
    /// passed), so the counters are final.
    pub fn drain(&mut self) {
        self.flush();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_secs(1) {
            let busy = (0..self.frame_count).any(|s| {
                let st = self.status(s).load(Ordering::Acquire);
                st != TP_STATUS_AVAILABLE && st != TP_STATUS_WRONG_FORMAT
            });
            if !busy {
                break;
            }
            self.flush();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.stats.unsent = (0..self.frame_count)
            .filter(|&s| self.status(s).load(Ordering::Acquire) == TP_STATUS_SEND_REQUEST)
            .count() as u64;
        for s in 0..self.frame_count {
            if self.status(s).load(Ordering::Acquire) == TP_STATUS_WRONG_FORMAT {
                self.stats.rejected += 1;
                self.status(s).store(TP_STATUS_AVAILABLE, Ordering::Release);
            }
        }
    }
}

impl Drop for TxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region mapped in `open`, which nothing borrows any more
        // (every slice handed out by `push` lived only during its closure).
        unsafe { libc::munmap(self.map.as_ptr() as *mut libc::c_void, self.map_len) };
    }
}
