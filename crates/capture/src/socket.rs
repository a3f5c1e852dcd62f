//! The AF_PACKET socket under a ring: creation, binding, promiscuous mode, kernel BPF, fanout,
//! hardware timestamp requests and kernel statistics. Thin wrappers over `libc`, one system call
//! each, every `unsafe` block argued.

use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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

/// An AF_PACKET raw socket bound to one interface.
pub(crate) struct PacketSocket {
    fd: OwnedFd,
    pub(crate) iface: String,
    ifindex: u32,
}

impl PacketSocket {
    /// Creates the socket. It receives nothing until [`bind`](Self::bind), so the ring and filter
    /// can be set up first.
    pub(crate) fn new(iface: &str) -> Result<PacketSocket, CaptureError> {
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

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// setsockopt(SOL_PACKET or `level`, `name`, `value`).
    pub(crate) fn set<T>(
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
    pub(crate) fn attach_filter(&self, insns: &[Insn]) -> Result<(), CaptureError> {
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
    pub(crate) fn refuse_all(&self) -> Result<(), CaptureError> {
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

    /// Binds to the interface for all protocols; packets start arriving.
    pub(crate) fn bind(&self) -> Result<(), CaptureError> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid starting value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
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
    pub(crate) fn promiscuous(&self) -> Result<(), CaptureError> {
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
    pub(crate) fn fanout(&self, group: u16, mode: FanoutMode) -> Result<(), CaptureError> {
        let arg: u32 = group as u32 | (mode.value() << 16);
        self.set(libc::SOL_PACKET, libc::PACKET_FANOUT, &arg, "PACKET_FANOUT")
    }

    /// Asks the NIC for hardware receive timestamps and the socket to report them. Returns false
    /// (and changes nothing) when the driver refuses, as veth and most virtual NICs do.
    pub(crate) fn request_hw_timestamps(&self) -> bool {
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

    /// Reads (and thereby resets) the kernel's counters.
    pub(crate) fn read_stats(&self) -> io::Result<KernelStats> {
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
