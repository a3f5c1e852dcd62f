//! A TPACKET_V3 receive ring: blocks of packets the kernel fills in memory shared with us.
//!
//! Ownership of each block passes between the kernel and us through its `block_status` word:
//! the kernel sets `TP_STATUS_USER` once the block is full or its retire timeout fired, and from
//! then on never touches the block until we store `TP_STATUS_KERNEL` back. We read the status with
//! `Acquire` (so the packet bytes the kernel wrote before publishing are visible) and hand the
//! block back with `Release` (so our reads are done before the kernel may overwrite it). Blocks
//! are consumed strictly in ring order, as the kernel fills them.

use std::sync::atomic::{AtomicU32, Ordering};

use weir_filter::{Filter, Insn};

use crate::error::CaptureError;
use crate::socket::{FanoutMode, KernelStats, PacketSocket, RingMap};

/// Sizes of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Bytes per block; a power of two, a multiple of the page size. Default 1 MiB.
    pub block_size: u32,
    /// Number of blocks. Default 64 (64 MiB per ring).
    pub block_count: u32,
    /// Milliseconds after which the kernel hands over a partly filled block. Default 50: each
    /// block handed over wakes the capture thread, and on a VM a wake-up is dear (issue 20); at
    /// 0.4 Mpps of 64-byte frames a 1 MiB block (≈ 6 500 of them) fills in ≈ 16 ms, so with 10
    /// ms every block went over a third empty.
    pub retire_ms: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            block_size: 1 << 20,
            block_count: 64,
            retire_ms: 50,
        }
    }
}

/// Where a ring's timestamps come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampSource {
    /// The NIC's clock, as requested and granted.
    Hardware,
    /// The kernel's clock when the packet reached the socket (the NIC offers no timestamps, or
    /// refused to enable them).
    Software,
    /// User space's clock when the batch of packets was taken (AF_XDP has no per-packet kernel
    /// timestamp).
    Receive,
}

/// One packet read in place from a block.
#[derive(Clone, Copy, Debug)]
pub struct LivePacket<'a> {
    /// Receive time, ns since the epoch.
    pub ts_ns: u64,
    /// Length on the wire (before any snap length), not counting a VLAN tag the NIC stripped.
    pub orig_len: u32,
    /// The captured bytes as the kernel delivered them.
    pub data: &'a [u8],
    /// A VLAN tag the NIC or kernel removed from the frame (TPID, TCI); writers must put it back
    /// after the MAC addresses, as libpcap does, to record the frame as it was on the wire.
    pub vlan: Option<(u16, u16)>,
    /// The timestamp came from the NIC.
    pub hw_timestamp: bool,
}

/// An AF_PACKET socket with its TPACKET_V3 receive ring.
pub struct RxRing {
    map: RingMap,
    sock: PacketSocket,
    block_size: usize,
    block_count: usize,
    /// The next block to read.
    next: usize,
    retire_ms: u32,
    ts_source: TimestampSource,
    stats: KernelStats,
}

impl RxRing {
    /// Opens a ring on `iface`: kernel filter first, then the ring, then bind (so no unfiltered
    /// packet is ever queued), then promiscuous mode and the fanout group. The filter's return
    /// value is the snap length the kernel cuts packets to, so a match-all filter
    /// (`Filter::match_all(snaplen)`) is how a snap length is applied.
    pub fn open(
        iface: &str,
        cfg: RingConfig,
        filter: Option<&Filter>,
        promiscuous: bool,
        fanout: Option<(u16, FanoutMode)>,
        hw_timestamps: bool,
    ) -> Result<RxRing, CaptureError> {
        RxRing::open_program(
            iface,
            cfg,
            filter.map(Filter::instructions),
            promiscuous,
            fanout,
            hw_timestamps,
        )
    }

    /// [`open`](Self::open) with a kernel program given as instructions (one weir built, such
    /// as the rules' program of [`kernel_rules`](crate::kernel_rules), which uses the kernel's
    /// ancillary loads that libpcap's validator does not know).
    pub fn open_program(
        iface: &str,
        cfg: RingConfig,
        program: Option<&[Insn]>,
        promiscuous: bool,
        fanout: Option<(u16, FanoutMode)>,
        hw_timestamps: bool,
    ) -> Result<RxRing, CaptureError> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u32;
        if !cfg.block_size.is_power_of_two() || cfg.block_size < page || cfg.block_count == 0 {
            return Err(CaptureError::BadRing(format!(
                "block size {} must be a power of two ≥ the page size {page}, block count {} ≥ 1",
                cfg.block_size, cfg.block_count
            )));
        }
        crate::socket::check_up(iface)?;
        let sock = PacketSocket::open(iface)?;
        let version = libc::tpacket_versions::TPACKET_V3 as i32;
        sock.set(
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &version,
            "PACKET_VERSION(TPACKET_V3)",
        )?;
        if let Some(p) = program {
            sock.attach_filter(p)?;
        }
        let ts_source = if hw_timestamps && sock.request_hw_timestamps() {
            TimestampSource::Hardware
        } else {
            TimestampSource::Software
        };
        let frame_size = 2048u32;
        let req = libc::tpacket_req3 {
            tp_block_size: cfg.block_size,
            tp_block_nr: cfg.block_count,
            tp_frame_size: frame_size,
            tp_frame_nr: cfg.block_size / frame_size * cfg.block_count,
            tp_retire_blk_tov: cfg.retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        sock.set(
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &req,
            "PACKET_RX_RING",
        )?;
        let map = sock.map_ring(
            cfg.block_size as usize * cfg.block_count as usize,
            false,
            "mmap(PACKET_RX_RING)",
        )?;
        let ring = RxRing {
            map,
            sock,
            block_size: cfg.block_size as usize,
            block_count: cfg.block_count as usize,
            next: 0,
            retire_ms: cfg.retire_ms,
            ts_source,
            stats: KernelStats::default(),
        };
        ring.sock.bind(libc::ETH_P_ALL as u16)?;
        if promiscuous {
            ring.sock.promiscuous()?;
        }
        if let Some((group, mode)) = fanout {
            ring.sock.fanout(group, mode)?;
        }
        Ok(ring)
    }

    /// The interface name.
    pub fn interface(&self) -> &str {
        self.sock.interface()
    }

    /// Where this ring's timestamps come from.
    pub fn timestamp_source(&self) -> TimestampSource {
        self.ts_source
    }

    /// The status word of block `i`.
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: block `i` < block_count lies inside the mapping, which lives as long as `self`;
        // `block_status` is the first u32 of `tpacket_hdr_v1` at offset 8 of the block descriptor
        // (after `version` and `offset_to_priv`), 4-byte aligned because blocks are page aligned.
        // The kernel and we access it only atomically (the kernel with smp_wmb/smp_rmb pairs).
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(i * self.block_size + 8) as *mut u32) }
    }

    /// Waits up to `timeout_ms` for the next block (0 = do not wait, -1 = forever). The block goes
    /// back to the kernel when the returned [`Block`] is dropped.
    pub fn next_block(&mut self, timeout_ms: i32) -> Result<Option<Block<'_>>, CaptureError> {
        let i = self.next;
        if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            self.sock
                .poll(libc::POLLIN | libc::POLLERR, timeout_ms)
                .map_err(|source| CaptureError::Os {
                    iface: self.sock.interface().to_string(),
                    what: "poll",
                    source,
                })?;
            if self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return Ok(None);
            }
        }
        self.next = (i + 1) % self.block_count;
        // SAFETY: the block is ours (TP_STATUS_USER, read with Acquire above) until Block::drop
        // stores TP_STATUS_KERNEL; it lies inside the mapping, which outlives the borrow.
        let bytes = unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(i * self.block_size), self.block_size)
        };
        Ok(Some(Block {
            bytes,
            status: self.status(i),
            hw: self.ts_source == TimestampSource::Hardware,
        }))
    }

    /// Stops the kernel queueing packets to this ring (its filter now refuses everything), so
    /// that [`drain`](crate::feed) can read what is left and the counters stop moving.
    pub fn stop_intake(&self) -> Result<(), CaptureError> {
        self.sock.refuse_all()
    }

    /// A second descriptor of this ring's socket, on which another thread may replace the
    /// kernel filter (`SO_ATTACH_FILTER` swaps it atomically) while this ring is read.
    pub fn socket_clone(&self) -> Result<PacketSocket, CaptureError> {
        self.sock.try_clone()
    }

    /// Milliseconds after which the kernel hands over a partly filled block.
    pub fn retire_ms(&self) -> u32 {
        self.retire_ms
    }

    /// The kernel's counters for this socket so far (received includes dropped).
    pub fn kernel_stats(&mut self) -> KernelStats {
        if let Ok(s) = self.sock.read_stats() {
            self.stats.packets += s.packets;
            self.stats.drops += s.drops;
            self.stats.freezes += s.freezes;
        }
        self.stats
    }
}

/// How far ahead of the packet being read [`Block::packets`] prefetches (bytes): every cache
/// line up to this distance is asked for once. 4 KiB is ≈ 25 64-byte frames (160 bytes each in
/// the ring with their headers) or 2.5 1500-byte ones: the kernel wrote them on the other CPU, so
/// each line takes a few hundred ns to arrive (issue 20, session 21: with two lines asked for 1
/// KiB ahead of each header, one line in five of 64-byte frames was never prefetched and its
/// miss showed in the copy; 1500-byte frames were copied ≈ 1 line ahead).
const PREFETCH_AHEAD: usize = 4096;

/// The cache line size the prefetch steps by.
const LINE: usize = 64;

/// A block of packets owned by user space until dropped.
pub struct Block<'a> {
    bytes: &'a [u8],
    status: &'a AtomicU32,
    hw: bool,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

impl<'a> Block<'a> {
    /// Packets in the block, per its header.
    pub fn len(&self) -> usize {
        u32_at(self.bytes, 12).unwrap_or(0) as usize
    }

    /// True when the block holds no packet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The packets, in arrival order. Offsets come from the kernel and are still checked against
    /// the block, so a bad value ends the iteration instead of reading out of bounds.
    pub fn packets(&self) -> impl Iterator<Item = LivePacket<'a>> + '_ {
        let b = self.bytes;
        let n = self.len();
        let mut at = u32_at(b, 16).unwrap_or(0) as usize; // offset_to_first_pkt
                                                          // The next line (offset in the block, blocks are page aligned) not yet prefetched.
        let mut fetched = at & !(LINE - 1);
        let hw = self.hw;
        (0..n).map_while(move |_| {
            // The kernel wrote the block on another CPU: each packet header is a miss, and
            // its load starts a chain (the next header's offset is in it). Ask for every line
            // up to `PREFETCH_AHEAD` bytes ahead (packets are laid out in order) so that the
            // misses overlap (perf on 64-byte frames: 62 % of the capture thread's loop on that
            // load), headers and data alike.
            let until = (at + PREFETCH_AHEAD).min(b.len());
            while fetched < until {
                weir_packet::prefetch(&b[fetched]);
                fetched += LINE;
            }
            // struct tpacket3_hdr: next_offset, sec, nsec, snaplen, len, status, mac, net,
            // rxhash, vlan_tci, vlan_tpid.
            let next = u32_at(b, at)? as usize;
            let sec = u32_at(b, at + 4)? as u64;
            let nsec = u32_at(b, at + 8)? as u64;
            let snaplen = u32_at(b, at + 12)? as usize;
            let len = u32_at(b, at + 16)?;
            let status = u32_at(b, at + 20)?;
            let mac = u16_at(b, at + 24)? as usize;
            let tci = u32_at(b, at + 32)?;
            let tpid = u16_at(b, at + 36)?;
            let data = b.get(at + mac..at + mac + snaplen)?;
            let vlan = (status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
                let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 && tpid != 0 {
                    tpid
                } else {
                    0x8100
                };
                (tpid, tci as u16)
            });
            let p = LivePacket {
                ts_ns: sec * 1_000_000_000 + nsec,
                orig_len: len,
                data,
                vlan,
                hw_timestamp: hw && status & libc::TP_STATUS_TS_RAW_HARDWARE != 0,
            };
            at = if next == 0 { b.len() } else { at + next };
            Some(p)
        })
    }
}

impl Drop for Block<'_> {
    fn drop(&mut self) {
        // Hand the block back: our reads of it happen before this store (Release).
        self.status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }
}
