//! [`TxRing`]: an AF_PACKET socket with a TPACKET_V2 transmit ring. Frames are written straight
//! into memory shared with the kernel, marked ready, and a whole batch goes out with one `send()`
//! (instead of one system call per packet). The qdisc is kept in the path unless
//! `qdisc_bypass` is set (PACKET_QDISC_BYPASS), since queueing is often what is measured.
//!
//! The socket, its options and the ring's mapping are weir-capture's AF_PACKET layer
//! ([`PacketSocket`]); the frames' memory protocol is here. Every `unsafe` block of the
//! generator lives here, each with a `// SAFETY:` comment.
//!
//! [`Transmit`] is what the drivers need of a sender; it is implemented by [`TxRing`] and by
//! weir-capture's AF_XDP transmit socket ([`XskTx`], `weir gen --backend xdp`), whose counters
//! map onto [`TxStats`]: frames the device dropped (`EBUSY`) and frames the kernel never handed
//! back are `unsent`, invalid descriptors `rejected`.

use std::mem::size_of;
use std::sync::atomic::{AtomicU32, Ordering};

use weir_capture::xdp::tx::XskTx;
use weir_capture::{PacketSocket, RingMap};

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
    /// Frames written into the ring for the kernel.
    pub queued: u64,
    /// Their bytes.
    pub queued_bytes: u64,
    /// Frames the kernel refused as malformed (TP_STATUS_WRONG_FORMAT).
    pub rejected: u64,
    /// Their bytes.
    pub rejected_bytes: u64,
    /// `send()` calls that failed (e.g. ENOBUFS when a qdisc is full: the packet it was
    /// sending is lost).
    pub send_errors: u64,
    /// `send()` calls.
    pub sends: u64,
    /// Frames the kernel still had not taken when [`TxRing::drain`] gave up (a send error such
    /// as ENETDOWN leaves them in the ring): never sent.
    pub unsent: u64,
    /// Their bytes.
    pub unsent_bytes: u64,
}

/// An AF_PACKET socket with a TPACKET_V2 TX ring, bound to one interface.
pub struct TxRing {
    map: RingMap,
    sock: PacketSocket,
    frame_size: usize,
    frame_count: usize,
    next: usize,
    pending: usize,
    /// Length of the frame last written into each slot.
    lens: Vec<u32>,
    mtu: usize,
    stats: TxStats,
    last_error: Option<std::io::Error>,
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
        weir_capture::check_up(iface)?;
        // Protocol 0: this socket sends only and receives nothing.
        let sock = PacketSocket::open(iface)?;
        let v2: libc::c_int = 1; // TPACKET_V2 (enum tpacket_versions)
        sock.set(
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &v2,
            "PACKET_VERSION",
        )?;
        if cfg.qdisc_bypass {
            let one: libc::c_int = 1;
            sock.set(
                libc::SOL_PACKET,
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
        sock.set(
            libc::SOL_PACKET,
            libc::PACKET_TX_RING,
            &req,
            "PACKET_TX_RING",
        )?;
        let map = sock.map_ring(block_size * blocks, true, "mmap(TX ring)")?;
        sock.bind(0)?;
        Ok(TxRing {
            map,
            sock,
            frame_size: fs,
            frame_count,
            next: 0,
            pending: 0,
            lens: vec![0; frame_count],
            mtu: weir_capture::interface_value(iface, "mtu").unwrap_or(1500),
            stats: TxStats::default(),
            last_error: None,
        })
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
            self.stats.rejected_bytes += u64::from(self.lens[slot]);
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
        self.lens[slot] = len as u32;
        self.status(slot)
            .store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.next = if slot + 1 == self.frame_count {
            0
        } else {
            slot + 1
        };
        self.pending += 1;
        self.stats.queued += 1;
        self.stats.queued_bytes += len as u64;
        Ok(Some(len))
    }

    /// Sends every filled frame with one `send()`; blocks until the kernel has taken them.
    pub fn flush(&mut self) {
        if self.pending == 0 {
            return;
        }
        self.stats.sends += 1;
        if let Err(e) = self.sock.send_ring() {
            if e.kind() != std::io::ErrorKind::Interrupted {
                self.stats.send_errors += 1;
                tracing::debug!("{}: send: {e}", self.sock.interface());
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
        let _ = self.sock.poll(libc::POLLOUT, timeout_ms);
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
        self.stats.unsent = 0;
        self.stats.unsent_bytes = 0;
        for s in 0..self.frame_count {
            match self.status(s).load(Ordering::Acquire) {
                TP_STATUS_SEND_REQUEST => {
                    self.stats.unsent += 1;
                    self.stats.unsent_bytes += u64::from(self.lens[s]);
                }
                TP_STATUS_WRONG_FORMAT => {
                    self.stats.rejected += 1;
                    self.stats.rejected_bytes += u64::from(self.lens[s]);
                    self.status(s).store(TP_STATUS_AVAILABLE, Ordering::Release);
                }
                _ => {}
            }
        }
    }
}

/// A sender the drivers ([`crate::drive::to_ring`]) push frames into.
pub trait Transmit {
    /// The largest frame it takes.
    fn max_frame(&self) -> usize;
    /// Frames it holds at once (the most per batch).
    fn slots(&self) -> usize;
    /// Tries to write one frame with `fill`; `Ok(None)` when full (flush or wait first).
    fn push<E>(
        &mut self,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<Option<usize>, E>;
    /// Sends what was pushed.
    fn flush(&mut self);
    /// Flushes and waits (up to `timeout_ms`) for room.
    fn wait(&mut self, timeout_ms: i32);
    /// Sends what is pending and waits until the counters are final.
    fn drain(&mut self);
    /// Counters so far.
    fn stats(&self) -> TxStats;
    /// The last send error, if any.
    fn last_error(&self) -> Option<&std::io::Error>;
}

impl Transmit for TxRing {
    fn max_frame(&self) -> usize {
        TxRing::max_frame(self)
    }
    fn slots(&self) -> usize {
        TxRing::slots(self)
    }
    #[inline]
    fn push<E>(
        &mut self,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<Option<usize>, E> {
        TxRing::push(self, fill)
    }
    fn flush(&mut self) {
        TxRing::flush(self)
    }
    fn wait(&mut self, timeout_ms: i32) {
        TxRing::wait(self, timeout_ms)
    }
    fn drain(&mut self) {
        TxRing::drain(self)
    }
    fn stats(&self) -> TxStats {
        TxRing::stats(self)
    }
    fn last_error(&self) -> Option<&std::io::Error> {
        TxRing::last_error(self)
    }
}

impl Transmit for XskTx {
    fn max_frame(&self) -> usize {
        XskTx::max_frame(self)
    }
    fn slots(&self) -> usize {
        self.frames()
    }
    #[inline]
    fn push<E>(
        &mut self,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<Option<usize>, E> {
        XskTx::push(self, fill)
    }
    fn flush(&mut self) {
        XskTx::flush(self)
    }
    fn wait(&mut self, timeout_ms: i32) {
        XskTx::wait(self, timeout_ms)
    }
    fn drain(&mut self) {
        XskTx::drain(self)
    }
    fn stats(&self) -> TxStats {
        let s = XskTx::stats(self);
        TxStats {
            queued: s.queued,
            queued_bytes: s.queued_bytes,
            rejected: s.invalid,
            // The bytes of invalid descriptors are not known apart; they are in `unsent_bytes`.
            rejected_bytes: 0,
            send_errors: s.kick_errors,
            sends: s.kicks,
            unsent: s.unsent + s.dropped,
            unsent_bytes: s.unsent_bytes + s.dropped_bytes,
        }
    }
    fn last_error(&self) -> Option<&std::io::Error> {
        XskTx::last_error(self)
    }
}
