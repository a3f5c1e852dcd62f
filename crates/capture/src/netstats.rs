//! What the interface and the kernel lost before any packet reached a capture ring: the
//! interface's receive drop counters (`/sys/class/net/IF/statistics/rx_dropped`,
//! `rx_missed_errors`, `rx_fifo_errors`) and the per-CPU backlog drops of
//! `/proc/net/softnet_stat` (its second column, summed over CPUs). A ring's own counters
//! (PACKET_STATISTICS) cannot see these packets: they never reached the socket.
//!
//! The counters are cumulative since boot (or since the interface was made); callers keep a
//! [`PreRing`] snapshot from the start and report the difference. The softnet backlog is
//! shared by every interface of the machine, so its drops are the machine's, not only the
//! captured interface's; on kernels that also count a backlog drop in the receiving device's
//! `rx_dropped` (Linux ≥ 5.19), one packet dropped there shows in both.

use std::path::Path;

/// Drop counters of one interface and of the softnet backlog, at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreRing {
    /// The interface's `rx_dropped` (the driver or the stack discarded the packet).
    pub rx_dropped: u64,
    /// The interface's `rx_missed_errors` (the NIC had no room for it).
    pub rx_missed: u64,
    /// The interface's `rx_fifo_errors` (the NIC's receive FIFO overflowed).
    pub rx_fifo: u64,
    /// Backlog drops of `/proc/net/softnet_stat` (all CPUs, all interfaces).
    pub softnet: u64,
}

impl PreRing {
    /// Reads the counters of `iface` and the softnet backlog now. A counter the system does not
    /// offer reads as 0.
    pub fn read(iface: &str) -> PreRing {
        let dir = Path::new("/sys/class/net").join(iface).join("statistics");
        let stat = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        PreRing {
            rx_dropped: stat("rx_dropped"),
            rx_missed: stat("rx_missed_errors"),
            rx_fifo: stat("rx_fifo_errors"),
            softnet: std::fs::read_to_string("/proc/net/softnet_stat")
                .map(|s| softnet_dropped(&s))
                .unwrap_or(0),
        }
    }

    /// `self - earlier`, per counter (0 where a counter went backwards, as when an interface is
    /// re-created).
    pub fn since(&self, earlier: &PreRing) -> PreRing {
        PreRing {
            rx_dropped: self.rx_dropped.saturating_sub(earlier.rx_dropped),
            rx_missed: self.rx_missed.saturating_sub(earlier.rx_missed),
            rx_fifo: self.rx_fifo.saturating_sub(earlier.rx_fifo),
            softnet: self.softnet.saturating_sub(earlier.softnet),
        }
    }

    /// The interface's drops: `rx_dropped + rx_missed + rx_fifo`.
    pub fn interface(&self) -> u64 {
        self.rx_dropped + self.rx_missed + self.rx_fifo
    }

    /// The sum of two interfaces' counters (the softnet counter is machine-wide: kept once).
    pub fn add_interface(&mut self, other: &PreRing) {
        self.rx_dropped += other.rx_dropped;
        self.rx_missed += other.rx_missed;
        self.rx_fifo += other.rx_fifo;
    }
}

/// The sum of the second column (hexadecimal) of `/proc/net/softnet_stat`, one line per CPU:
/// packets dropped because the CPU's backlog queue was full.
pub fn softnet_dropped(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|h| u64::from_str_radix(h, 16).ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softnet_second_column_summed_as_hex() {
        let text = "0000a1b2 0000000a 00000000 00000000 00000000 00000000 00000000 00000000 \
                    00000000 00000000 00000000 00000000 00000000\n\
                    00001000 000000ff 00000003 00000000 00000000 00000000 00000000 00000000 \
                    00000000 00000000 00000000 00000000 00000001\n";
        assert_eq!(softnet_dropped(text), 10 + 255);
        assert_eq!(softnet_dropped(""), 0);
    }

    #[test]
    fn deltas_never_underflow() {
        let a = PreRing {
            rx_dropped: 5,
            rx_missed: 1,
            rx_fifo: 0,
            softnet: 9,
        };
        let b = PreRing {
            rx_dropped: 7,
            rx_missed: 0,
            rx_fifo: 2,
            softnet: 12,
        };
        let d = b.since(&a);
        assert_eq!(
            (d.rx_dropped, d.rx_missed, d.rx_fifo, d.softnet),
            (2, 0, 2, 3)
        );
        assert_eq!(d.interface(), 4);
        // Reading a missing interface gives zeros, not an error.
        let none = PreRing::read("no-such-if-weir");
        assert_eq!(none.interface(), 0);
    }
}
