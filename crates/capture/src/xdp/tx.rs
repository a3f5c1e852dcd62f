//! [`XskTx`]: an AF_XDP socket that only transmits (the generator's `--backend xdp`), on the same
//! UMEM, ring and bind code as the receive sockets of the parent module.
//!
//! The UMEM's frames start on a free list. A frame to send is written into a free frame, its
//! descriptor (address, length) put in the TX ring at our private producer position; a batch is
//! published with one `Release` store of the producer and the kernel is kicked with `sendto()`
//! (always in copy mode, where the kernel sends only from the system call, at most a few dozen
//! frames per call, so the kick is repeated until the kernel has taken the batch; in zero-copy
//! mode only when the ring's `XDP_RING_NEED_WAKEUP` flag asks for it). The kernel hands each
//! frame back through the completion ring once the driver is done with it; those go back on the
//! free list. No XDP program is needed to transmit.
//!
//! Counting: a frame is *queued* when its descriptor is in the TX ring, *completed* when it came
//! back through the completion ring. A `sendto()` failing with `EBUSY` means the device dropped
//! the frame it was sending (copy mode: `NET_XMIT_DROP`, e.g. no carrier): that frame is
//! completed but was never sent, and is counted in `dropped` with its bytes (its descriptor is the
//! one just behind the kernel's consumer). Descriptors the kernel found invalid
//! (`tx_invalid_descs` of `XDP_STATISTICS`) never complete. What is neither completed nor
//! invalid when [`XskTx::drain`] gives up is `unsent`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use super::{
    bind, getsockopt, setsockopt, umem_socket, xdp_err, BindMode, Mapping, Offsets, Ring,
    UmemPages, WrapStats, FRAME_SIZE,
};
use crate::error::CaptureError;

/// Counters of an [`XskTx`], since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskTxStats {
    /// Frames put in the TX ring.
    pub queued: u64,
    /// Their bytes.
    pub queued_bytes: u64,
    /// Frames the kernel handed back through the completion ring (sent, or dropped: see
    /// `dropped`).
    pub completed: u64,
    /// Their bytes.
    pub completed_bytes: u64,
    /// Frames the device dropped (`sendto()` said `EBUSY`): completed, never sent.
    pub dropped: u64,
    /// Their bytes.
    pub dropped_bytes: u64,
    /// Descriptors the kernel refused as invalid (`tx_invalid_descs`).
    pub invalid: u64,
    /// `sendto()` kicks.
    pub kicks: u64,
    /// Kicks that failed with an error other than "try again" (`EBUSY` included).
    pub kick_errors: u64,
    /// Frames still queued when [`XskTx::drain`] gave up (the kernel never took them, or never
    /// handed them back), and their bytes.
    pub unsent: u64,
    /// Their bytes.
    pub unsent_bytes: u64,
}

impl XskTxStats {
    /// Frames the device took: completed and not dropped.
    pub fn sent(&self) -> u64 {
        self.completed.saturating_sub(self.dropped)
    }

    /// Their bytes.
    pub fn sent_bytes(&self) -> u64 {
        self.completed_bytes.saturating_sub(self.dropped_bytes)
    }
}

/// An AF_XDP socket bound to one queue of an interface, transmitting only.
pub struct XskTx {
    fd: OwnedFd,
    iface: String,
    umem: Mapping,
    pages: UmemPages,
    mode: BindMode,
    frames: u32,
    tx: Ring,
    comp: Ring,
    /// Our copies of the TX ring's producer and the completion ring's consumer (we are their
    /// only writer), and the producer last published.
    tx_prod: u32,
    published: u32,
    comp_cons: u32,
    /// Frames of the UMEM we own (addresses).
    free: Vec<u64>,
    /// Length of the frame last written into each UMEM frame.
    lens: Vec<u32>,
    max_frame: usize,
    stats: XskTxStats,
    last_error: Option<io::Error>,
}

// SAFETY: the raw pointers point into mappings the socket owns; one thread at a time uses it,
// and the kernel's side is synchronised through the rings' atomic words.
unsafe impl Send for XskTx {}

impl XskTx {
    /// Opens a socket on queue 0 of `iface` with a UMEM of `frames` frames (rounded up to a
    /// power of two, at least 64) and binds it (zero-copy, else copy mode). Refused with a clear
    /// error: a missing or down interface, one that is not Ethernet (the generator's frames are),
    /// the loopback interface.
    pub fn open(iface: &str, frames: u32) -> Result<XskTx, CaptureError> {
        crate::socket::check_up(iface)?;
        let ifindex = crate::socket::interface_index(iface)?;
        super::check_interface(iface)?;
        if crate::socket::interface_value(iface, "type") != Some(libc::ARPHRD_ETHER as u32) {
            return Err(CaptureError::Xdp {
                iface: iface.to_string(),
                what: "not an Ethernet interface: AF_XDP sends whole Ethernet frames".into(),
                os: None,
            });
        }
        let frames = frames.clamp(64, 1 << 20).next_power_of_two();
        let (fd, umem, pages) = umem_socket(iface, frames)?;
        let raw = fd.as_raw_fd();
        // The kernel wants a fill ring with every UMEM; nothing is received, so a small one.
        setsockopt(raw, libc::XDP_UMEM_FILL_RING, &(64 as libc::c_int))
            .map_err(|e| xdp_err(iface, "XDP_UMEM_FILL_RING", e))?;
        setsockopt(
            raw,
            libc::XDP_UMEM_COMPLETION_RING,
            &(frames as libc::c_int),
        )
        .map_err(|e| xdp_err(iface, "XDP_UMEM_COMPLETION_RING", e))?;
        setsockopt(raw, libc::XDP_TX_RING, &(frames as libc::c_int))
            .map_err(|e| xdp_err(iface, "XDP_TX_RING", e))?;
        let off = getsockopt::<Offsets>(raw, libc::XDP_MMAP_OFFSETS)
            .map_err(|e| xdp_err(iface, "XDP_MMAP_OFFSETS", e))?
            .0;
        let comp_len = off.cr.desc as usize + frames as usize * 8;
        let comp = Mapping::ring(raw, comp_len, libc::XDP_UMEM_PGOFF_COMPLETION_RING)
            .map_err(|e| xdp_err(iface, "completion ring mmap", e))?;
        let tx_len = off.tx.desc as usize + frames as usize * std::mem::size_of::<libc::xdp_desc>();
        let tx = Mapping::ring(raw, tx_len, libc::XDP_PGOFF_TX_RING as u64)
            .map_err(|e| xdp_err(iface, "TX ring mmap", e))?;
        let tx = Ring::new(tx, &off.tx, frames);
        let comp = Ring::new(comp, &off.cr, frames);
        let mode = bind(raw, iface, ifindex, 0)?;
        let tx_prod = tx.producer().load(Ordering::Relaxed);
        let comp_cons = comp.consumer().load(Ordering::Relaxed);
        Ok(XskTx {
            fd,
            iface: iface.to_string(),
            umem,
            pages,
            mode,
            frames,
            tx,
            comp,
            tx_prod,
            published: tx_prod,
            comp_cons,
            free: (0..frames as u64)
                .rev()
                .map(|i| i * FRAME_SIZE as u64)
                .collect(),
            lens: vec![0; frames as usize],
            max_frame: FRAME_SIZE
                .min(crate::socket::interface_value(iface, "mtu").unwrap_or(1500) + 18),
            stats: XskTxStats::default(),
            last_error: None,
        })
    }

    /// The interface.
    pub fn interface(&self) -> &str {
        &self.iface
    }

    /// Zero-copy or copy mode.
    pub fn bind_mode(&self) -> BindMode {
        self.mode
    }

    /// Where the UMEM lives.
    pub fn pages(&self) -> UmemPages {
        self.pages
    }

    /// UMEM frames (= TX and completion ring entries).
    pub fn frames(&self) -> usize {
        self.frames as usize
    }

    /// The largest frame it sends: the interface's MTU + Ethernet and VLAN headers, at most a
    /// UMEM frame.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Counters so far.
    pub fn stats(&self) -> XskTxStats {
        self.stats
    }

    /// The last error a kick returned, if any.
    pub fn last_error(&self) -> Option<&io::Error> {
        self.last_error.as_ref()
    }

    /// The set-up in words, for the start-up line.
    pub fn describe(&self) -> String {
        format!(
            "AF_XDP on queue 0, {}; UMEM {} KiB on {}",
            match self.mode {
                BindMode::ZeroCopy => "zero-copy",
                BindMode::Copy => "copy mode: the driver offers no zero-copy",
            },
            (self.frames as usize * FRAME_SIZE) >> 10,
            match self.pages {
                UmemPages::Huge => "huge pages",
                UmemPages::Normal => "normal pages",
            }
        )
    }

    /// Takes back the frames the kernel is done with (completion ring).
    fn reap(&mut self) {
        let prod = self.comp.producer().load(Ordering::Acquire);
        let n = prod.wrapping_sub(self.comp_cons);
        if n == 0 {
            return;
        }
        for k in 0..n {
            let i = (self.comp_cons.wrapping_add(k) & self.comp.mask) as usize;
            // SAFETY: entry `i` of the completion ring (u64 addresses) lies inside its mapping;
            // the kernel published it (producer read with Acquire) and does not rewrite it before
            // we move the consumer.
            let addr = unsafe { self.comp.desc.cast::<u64>().add(i).read() };
            let frame = addr & !(FRAME_SIZE as u64 - 1);
            let idx = (frame / FRAME_SIZE as u64) as usize;
            if idx < self.lens.len() {
                self.stats.completed += 1;
                self.stats.completed_bytes += u64::from(self.lens[idx]);
                self.free.push(frame);
            }
        }
        self.comp_cons = prod;
        self.comp.consumer().store(prod, Ordering::Release);
    }

    /// Tries to write one frame with `fill` (which writes at most [`max_frame`](Self::max_frame)
    /// bytes and returns how many). `Ok(None)` when no UMEM frame or TX ring entry is free (call
    /// [`flush`](Self::flush) or [`wait`](Self::wait)); `Ok(Some(len))` once queued.
    #[inline]
    pub fn push<E>(
        &mut self,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<Option<usize>, E> {
        if self.free.is_empty() {
            self.reap();
        }
        let in_ring = self
            .tx_prod
            .wrapping_sub(self.tx.consumer().load(Ordering::Acquire));
        if in_ring >= self.frames {
            return Ok(None);
        }
        let Some(addr) = self.free.pop() else {
            return Ok(None);
        };
        // SAFETY: `addr` is the start of a UMEM frame we own (on the free list: the kernel is
        // done with it), `max_frame ≤ FRAME_SIZE` bytes inside the mapping.
        let data = unsafe {
            std::slice::from_raw_parts_mut(self.umem.ptr.add(addr as usize), self.max_frame)
        };
        let len = match fill(data) {
            Ok(len) => len.min(self.max_frame),
            Err(e) => {
                self.free.push(addr);
                return Err(e);
            }
        };
        let i = (self.tx_prod & self.tx.mask) as usize;
        let desc = libc::xdp_desc {
            addr,
            len: len as u32,
            options: 0,
        };
        // SAFETY: entry `i` of the TX ring lies inside its mapping; it is ours (fewer than
        // `frames` entries are in the ring) until we publish the producer.
        unsafe { self.tx.desc.cast::<libc::xdp_desc>().add(i).write(desc) };
        self.lens[(addr / FRAME_SIZE as u64) as usize] = len as u32;
        self.tx_prod = self.tx_prod.wrapping_add(1);
        self.stats.queued += 1;
        self.stats.queued_bytes += len as u64;
        Ok(Some(len))
    }

    /// Descriptors published that the kernel has not taken yet.
    fn untaken(&self) -> u32 {
        self.published
            .wrapping_sub(self.tx.consumer().load(Ordering::Acquire))
    }

    /// One `sendto()` kick; `Ok(true)` when the kernel says to try again later.
    fn kick(&mut self) -> Result<bool, io::Error> {
        self.stats.kicks += 1;
        // SAFETY: a zero-length non-blocking send with no buffer and no address: it only asks
        // the kernel to transmit what the TX ring holds.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r >= 0 {
            return Ok(false);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EINTR | libc::ENOBUFS) => Ok(true),
            Some(libc::EBUSY) => {
                // The device dropped the frame just taken (it is completed, not sent).
                let cons = self.tx.consumer().load(Ordering::Acquire);
                let i = (cons.wrapping_sub(1) & self.tx.mask) as usize;
                // SAFETY: entry `i` of the TX ring lies inside its mapping; the kernel took it
                // and does not write descriptors (we do, only at our producer, ahead of it).
                let d = unsafe { self.tx.desc.cast::<libc::xdp_desc>().add(i).read() };
                self.stats.dropped += 1;
                self.stats.dropped_bytes += u64::from(d.len);
                self.stats.kick_errors += 1;
                self.last_error = Some(e);
                Ok(true)
            }
            _ => Err(e),
        }
    }

    /// Publishes the frames written since the last flush and kicks the kernel until it has
    /// taken them (copy mode), or once when it asks for a wake-up (zero-copy); then takes back
    /// completed frames.
    pub fn flush(&mut self) {
        if self.tx_prod != self.published {
            self.tx.producer().store(self.tx_prod, Ordering::Release);
            self.published = self.tx_prod;
        }
        match self.mode {
            BindMode::Copy => {
                // Each call sends a bounded number of frames; a call that moves nothing (the
                // completion ring full, the device busy) is retried after taking completions
                // back, a bounded number of times.
                let mut stalled = 0;
                while self.untaken() > 0 && stalled < 64 {
                    let before = self.untaken();
                    match self.kick() {
                        Ok(_) => {}
                        Err(e) => {
                            self.stats.kick_errors += 1;
                            tracing::debug!("{}: AF_XDP sendto: {e}", self.iface);
                            self.last_error = Some(e);
                            break;
                        }
                    }
                    self.reap();
                    if self.untaken() == before {
                        stalled += 1;
                    } else {
                        stalled = 0;
                    }
                }
            }
            BindMode::ZeroCopy => {
                if self.untaken() > 0 && self.tx.needs_wakeup() {
                    if let Err(e) = self.kick() {
                        self.stats.kick_errors += 1;
                        self.last_error = Some(e);
                    }
                }
            }
        }
        self.reap();
    }

    /// Flushes, then waits (up to `timeout_ms`) until a frame is free again.
    pub fn wait(&mut self, timeout_ms: i32) {
        self.flush();
        if !self.free.is_empty() {
            return;
        }
        let t = std::time::Instant::now();
        let limit = std::time::Duration::from_millis(timeout_ms.max(0) as u64);
        while self.free.is_empty() && t.elapsed() < limit {
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            };
            // SAFETY: one pollfd, alive for the call.
            unsafe { libc::poll(&mut p, 1, 1) };
            self.flush();
        }
    }

    /// Sends what is pending and waits until the kernel has handed every frame back (or a
    /// second passed), so the counters are final: `invalid` from the kernel, `unsent` what is
    /// left.
    pub fn drain(&mut self) {
        let t = std::time::Instant::now();
        loop {
            self.flush();
            let out = self.stats.queued - self.stats.completed;
            if out == 0 || t.elapsed() > std::time::Duration::from_secs(1) {
                break;
            }
            if self.last_error.is_some() && self.untaken() > 0 {
                // A kick failed for good (the interface went down...): what is in the ring
                // stays there.
                let mut p = libc::pollfd {
                    fd: self.fd.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one pollfd, alive for the call.
                unsafe { libc::poll(&mut p, 1, 10) };
            } else {
                std::thread::yield_now();
            }
        }
        if let Ok(s) = getsockopt::<WrapStats>(self.fd.as_raw_fd(), libc::XDP_STATISTICS) {
            self.stats.invalid = s.0.tx_invalid_descs;
        }
        let out = self.stats.queued - self.stats.completed;
        let out_bytes = self.stats.queued_bytes - self.stats.completed_bytes;
        self.stats.unsent = out.saturating_sub(self.stats.invalid);
        // Bytes of invalid descriptors are not known apart: all outstanding bytes are unsent.
        self.stats.unsent_bytes = out_bytes;
    }
}
