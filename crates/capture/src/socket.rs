//! The AF_PACKET socket under a ring, receive ([`RxRing`](crate::RxRing)) or transmit (weir-gen's
//! TX ring): interface lookup, creation, socket options, binding, the ring's shared mapping,
//! polling, promiscuous mode, kernel BPF, fanout, hardware timestamp requests and kernel
//! statistics. Thin wrappers over `libc`, one system call each, every `unsafe` block argued.

use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

use weir_filter::Insn;

use crate::error::CaptureError;

/// How a fanout group spreads packets over its sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FanoutMode {
    /// By flow hash: both directions of a flow reach the same socket (the default).
    #[default]
    Hash,
    /// Round robin.
    LoadBalance,
    /// By the CPU that received the packet.
    Cpu,
}

impl FanoutMode {
    fn value(self) -> u32 {
        match self {
            FanoutMode::Hash => libc::PACKET_FANOUT_HASH,
            FanoutMode::LoadBalance => libc::PACKET_FANOUT_LB,
            FanoutMode::Cpu => libc::PACKET_FANOUT_CPU,
        }
    }
}

/// Kernel counters of a socket, accumulated over reads (the kernel resets them on each read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Packets the kernel passed the filter and tried to queue (including the dropped ones).
    pub packets: u64,
    /// Packets dropped because the ring was full.
    pub drops: u64,
    /// Times the ring was frozen because it was full.
    pub freezes: u64,
}

/// The index of an interface, or an error naming it.
pub fn interface_index(name: &str) -> Result<u32, CaptureError> {
    let c = CString::new(name).map_err(|_| CaptureError::NoInterface(name.to_string()))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(CaptureError::NoInterface(name.to_string()));
    }
    Ok(idx)
}

/// One number of an interface from sysfs (`/sys/class/net/IFACE/NAME`: `mtu`, `type`...), or
/// `None` when it cannot be read or parsed.
pub fn interface_value<T: std::str::FromStr>(iface: &str, name: &str) -> Option<T> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The link type of a Linux interface, from its ARPHRD type in sysfs: Ethernet (loopback
/// included) or raw IP (tun, wireguard); anything else is refused.
pub fn link_type(iface: &str) -> Result<weir_packet::LinkType, CaptureError> {
    use weir_packet::LinkType;
    let path = format!("/sys/class/net/{iface}/type");
    let t: u32 = std::fs::read_to_string(&path)
        .map_err(|source| CaptureError::LinkUnknown {
            iface: iface.to_string(),
            source,
        })?
        .trim()
        .parse()
        .map_err(|source| CaptureError::LinkUnparsable {
            path: path.clone(),
            source,
        })?;
    Ok(match t {
        1 | 772 => LinkType::ETHERNET, // ARPHRD_ETHER, ARPHRD_LOOPBACK
        65534 => LinkType::RAW,        // ARPHRD_NONE (tun, wireguard)
        arphrd => {
            return Err(CaptureError::LinkUnsupported {
                iface: iface.to_string(),
                arphrd,
            })
        }
    })
}

/// Fails with [`CaptureError::NotUp`] when the interface exists but is administratively down
/// (no IFF_UP: it would deliver nothing, silently), or [`CaptureError::NoInterface`].
pub fn check_up(name: &str) -> Result<(), CaptureError> {
    interface_index(name)?;
    // SAFETY: plain system call with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(CaptureError::os(name, "socket(AF_INET)"));
    }
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all-zero is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS writes the flags into `ifr`, which lives until the call returns.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut ifr) };
    if r < 0 {
        return Err(CaptureError::os(name, "SIOCGIFFLAGS"));
    }
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    let flags = unsafe { ifr.ifr_ifru.ifru_flags };
    if flags & libc::IFF_UP as libc::c_short == 0 {
        return Err(CaptureError::NotUp(name.to_string()));
    }
    Ok(())
}

/// An AF_PACKET raw socket for one interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    iface: String,
    ifindex: u32,
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl PacketSocket {
    /// Creates the socket for `iface` (protocol 0: it receives nothing until
    /// [`bind`](Self::bind) names a protocol, so the ring and filter can be set up first).
    pub fn open(iface: &str) -> Result<PacketSocket, CaptureError> {
        let ifindex = interface_index(iface)?;
        // SAFETY: plain system call with constant arguments; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(CaptureError::os(iface, "socket(AF_PACKET)"));
        }
        Ok(PacketSocket {
            // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            iface: iface.to_string(),
            ifindex,
        })
    }

    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A second descriptor of the same socket (`F_DUPFD_CLOEXEC`): another thread can replace
    /// its filter while the ring's owner reads it, and the socket lives until both are closed.
    pub fn try_clone(&self) -> Result<PacketSocket, CaptureError> {
        // SAFETY: plain system call on a descriptor we own; the result is checked.
        let fd = unsafe { libc::fcntl(self.raw(), libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(CaptureError::os(&self.iface, "fcntl(F_DUPFD_CLOEXEC)"));
        }
        Ok(PacketSocket {
            // SAFETY: `fd` was just returned by fcntl() and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            iface: self.iface.clone(),
            ifindex: self.ifindex,
        })
    }

    /// The interface's name.
    pub fn interface(&self) -> &str {
        &self.iface
    }

    /// setsockopt(`level`, `name`, `value`); `what` names the option in the error.
    pub fn set<T>(
        &self,
        level: i32,
        name: i32,
        value: &T,
        what: &'static str,
    ) -> Result<(), CaptureError> {
        // SAFETY: `value` points to a live `T` of the size passed; the kernel only reads it.
        let r = unsafe {
            libc::setsockopt(
                self.raw(),
                level,
                name,
                value as *const T as *const libc::c_void,
                size_of::<T>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(CaptureError::os(&self.iface, what));
        }
        Ok(())
    }

    /// Attaches a classic BPF program in the kernel (`SO_ATTACH_FILTER`).
    pub fn attach_filter(&self, insns: &[Insn]) -> Result<(), CaptureError> {
        let prog = libc::sock_fprog {
            len: insns.len() as u16,
            // `Insn` is `repr(C)` with the layout of `struct sock_filter` (checked by weir-filter's
            // tests); the kernel copies the program during the call.
            filter: insns.as_ptr() as *mut libc::sock_filter,
        };
        self.set(
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &prog,
            "SO_ATTACH_FILTER",
        )
        .map_err(|e| match e {
            CaptureError::Os { iface, source, .. } => CaptureError::Filter { iface, source },
            other => other,
        })
    }

    /// Replaces the socket's filter with one that accepts nothing: from then on no packet is
    /// queued to the ring nor counted in PACKET_STATISTICS, so what is already in the ring can be
    /// drained and the counters read with nothing arriving behind them.
    pub fn refuse_all(&self) -> Result<(), CaptureError> {
        // One instruction: `ret #0` (BPF_RET | BPF_K), keep 0 bytes = drop.
        let mut drop_all = [libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0,
        }];
        let prog = libc::sock_fprog {
            len: 1,
            filter: drop_all.as_mut_ptr(),
        };
        self.set(
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &prog,
            "SO_ATTACH_FILTER(drop all)",
        )
    }

    /// Binds to the interface for the Ethernet `protocol` (host order): `ETH_P_ALL` and every
    /// packet starts arriving; 0 for a socket that only sends.
    pub fn bind(&self, protocol: u16) -> Result<(), CaptureError> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid starting value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = protocol.to_be();
        sll.sll_ifindex = self.ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and its exact size is passed.
        let r = unsafe {
            libc::bind(
                self.raw(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(CaptureError::os(&self.iface, "bind"));
        }
        Ok(())
    }

    /// Puts the interface in promiscuous mode for as long as the socket lives.
    pub fn promiscuous(&self) -> Result<(), CaptureError> {
        // SAFETY: packet_mreq is plain old data; all-zero is valid.
        let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mr.mr_ifindex = self.ifindex as i32;
        mr.mr_type = libc::PACKET_MR_PROMISC as u16;
        self.set(
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            &mr,
            "PACKET_ADD_MEMBERSHIP(promisc)",
        )
    }

    /// Joins fanout group `group` (must be called after `bind`).
    pub fn fanout(&self, group: u16, mode: FanoutMode) -> Result<(), CaptureError> {
        let arg: u32 = group as u32 | (mode.value() << 16);
        self.set(libc::SOL_PACKET, libc::PACKET_FANOUT, &arg, "PACKET_FANOUT")
    }

    /// Asks the NIC for hardware receive timestamps and the socket to report them. Returns false
    /// (and changes nothing) when the driver refuses, as veth and most virtual NICs do.
    pub fn request_hw_timestamps(&self) -> bool {
        #[repr(C)]
        struct HwtstampConfig {
            flags: i32,
            tx_type: i32,
            rx_filter: i32,
        }
        let mut cfg = HwtstampConfig {
            flags: 0,
            tx_type: 0,   // HWTSTAMP_TX_OFF
            rx_filter: 1, // HWTSTAMP_FILTER_ALL
        };
        // SAFETY: ifreq is plain old data; all-zero is valid.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in ifr
            .ifr_name
            .iter_mut()
            .zip(self.iface.bytes().take(libc::IFNAMSIZ - 1))
        {
            *d = s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = &mut cfg as *mut HwtstampConfig as *mut libc::c_char;
        // SAFETY: SIOCSHWTSTAMP reads and writes the hwtstamp_config that `ifr` points to, which
        // lives until the call returns.
        let r = unsafe { libc::ioctl(self.raw(), libc::SIOCSHWTSTAMP as _, &mut ifr) };
        if r < 0 {
            return false;
        }
        let want = libc::SOF_TIMESTAMPING_RAW_HARDWARE as i32;
        self.set(
            libc::SOL_PACKET,
            libc::PACKET_TIMESTAMP,
            &want,
            "PACKET_TIMESTAMP",
        )
        .is_ok()
    }

    /// Maps the ring the kernel allocated for this socket (PACKET_RX_RING or PACKET_TX_RING
    /// set before): `len` bytes, shared, locked in memory when RLIMIT_MEMLOCK allows (else
    /// unlocked), prefaulted when `populate`; `what` names the call in the error.
    pub fn map_ring(
        &self,
        len: usize,
        populate: bool,
        what: &'static str,
    ) -> Result<RingMap, CaptureError> {
        let extra = if populate { libc::MAP_POPULATE } else { 0 };
        let map = |flags| {
            // SAFETY: maps the ring the kernel allocated for this socket, shared, at a place of
            // the kernel's choosing, with the documented length and flags; the result is
            // checked against MAP_FAILED by the caller and unmapped by RingMap's Drop.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    flags,
                    self.raw(),
                    0,
                )
            }
        };
        let mut ptr = map(libc::MAP_SHARED | libc::MAP_LOCKED | extra);
        if ptr == libc::MAP_FAILED {
            // MAP_LOCKED needs RLIMIT_MEMLOCK; an unlocked mapping works as well.
            ptr = map(libc::MAP_SHARED | extra);
            if ptr == libc::MAP_FAILED {
                return Err(CaptureError::os(&self.iface, what));
            }
        }
        Ok(RingMap {
            ptr: NonNull::new(ptr as *mut u8).expect("mmap returned a non-null address"),
            len,
        })
    }

    /// Waits up to `timeout_ms` (0: do not wait, -1: forever) for `events` (`POLLIN`,
    /// `POLLOUT`...) on the socket. An interrupted wait is not an error.
    pub fn poll(&self, events: i16, timeout_ms: i32) -> io::Result<()> {
        let mut pfd = libc::pollfd {
            fd: self.raw(),
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Tells the kernel to transmit every frame of the TX ring marked ready (a zero-length
    /// `send()`); blocks until it has taken them.
    pub fn send_ring(&self) -> io::Result<()> {
        // SAFETY: a zero-length send on a socket with a TX ring tells the kernel to transmit
        // every frame marked SEND_REQUEST; no user buffer is passed.
        let r = unsafe { libc::send(self.raw(), std::ptr::null(), 0, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads (and thereby resets) the kernel's counters.
    pub fn read_stats(&self) -> io::Result<KernelStats> {
        // SAFETY: tpacket_stats_v3 is plain old data; all-zero is valid.
        let mut st: libc::tpacket_stats_v3 = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes of the sizes given.
        let r = unsafe {
            libc::getsockopt(
                self.raw(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut libc::tpacket_stats_v3 as *mut libc::c_void,
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(KernelStats {
            packets: st.tp_packets as u64,
            drops: st.tp_drops as u64,
            freezes: st.tp_freeze_q_cnt as u64,
        })
    }
}

/// A ring's memory, shared with the kernel, unmapped when dropped (see
/// [`PacketSocket::map_ring`]). Who may touch which part of it when is the ring's protocol
/// (status words), kept by its user.
#[derive(Debug)]
pub struct RingMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone; nothing in it is tied to the thread that
// made it, so moving it (with its ring) to another thread is sound.
unsafe impl Send for RingMap {}

impl RingMap {
    /// The first byte of the mapping (page aligned).
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty mapping (never: the kernel refuses empty rings).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map_ring`; whoever borrowed parts of it
        // borrowed them from the ring that owns this value, so no borrow outlives it.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}
