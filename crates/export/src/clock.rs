//! The exporter's clock: NetFlow's "boot" and "now", both taken from packet time.

use weir_flows::FlowRecord;

const NS_PER_MS: u64 = 1_000_000;

/// Packet-time clock. All NetFlow-relative times are computed on whole milliseconds so that a
/// collector reconstructing absolute times (`now - sys_uptime + First`) gets them exactly.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Clock {
    boot_ns: Option<u64>,
    now_ns: u64,
}

impl Clock {
    /// A clock whose boot is fixed in advance (or learnt from the first time seen).
    pub(crate) fn new(boot_ns: Option<u64>) -> Self {
        Clock {
            boot_ns,
            now_ns: boot_ns.unwrap_or(0),
        }
    }

    /// Learns from a record: boot from its first packet if not yet known, now from its end.
    pub(crate) fn observe(&mut self, rec: &FlowRecord) {
        for d in [&rec.forward, &rec.reverse] {
            if d.packets == 0 && d.last_ns == 0 {
                continue;
            }
            if self.boot_ns.is_none() {
                self.boot_ns = Some(d.first_ns.min(d.last_ns));
            }
            self.now_ns = self.now_ns.max(d.last_ns);
        }
        if let Some(b) = self.boot_ns {
            self.now_ns = self.now_ns.max(b);
        }
    }

    /// Learns from a tick: boot if not yet known, now.
    pub(crate) fn tick(&mut self, now_ns: u64) {
        self.boot_ns.get_or_insert(now_ns);
        self.now_ns = self.now_ns.max(now_ns);
    }

    /// The exporter's current time, ns since the epoch.
    pub(crate) fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The current time in whole milliseconds since the epoch.
    pub(crate) fn now_ms(&self) -> u64 {
        self.now_ns / NS_PER_MS
    }

    /// Boot time in whole milliseconds since the epoch.
    pub(crate) fn boot_ms(&self) -> u64 {
        self.boot_ns.unwrap_or(self.now_ns) / NS_PER_MS
    }

    /// NetFlow sys_uptime of an instant: ms since boot, 0 for instants before boot, wrapping
    /// modulo 2^32 like a router's uptime after 49.7 days.
    pub(crate) fn uptime_ms(&self, t_ns: u64) -> u32 {
        (t_ns / NS_PER_MS).saturating_sub(self.boot_ms()) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};
    use weir_flows::{Direction, EndReason, FlowKey};

    fn rec(first: u64, last: u64) -> FlowRecord {
        let a = IpAddr::V4(Ipv4Addr::LOCALHOST);
        FlowRecord {
            key: FlowKey {
                vlan: 0,
                src: a,
                dst: a,
                proto: 17,
                src_port: 1,
                dst_port: 2,
                tos: 0,
            },
            forward: Direction {
                packets: 1,
                bytes: 60,
                first_ns: first,
                last_ns: last,
                ..Direction::default()
            },
            reverse: Direction::default(),
            end_reason: EndReason::IdleTimeout,
        }
    }

    #[test]
    fn boot_from_first_record_now_from_latest_end() {
        let mut c = Clock::new(None);
        c.observe(&rec(5_000_000_000, 7_000_000_000));
        c.observe(&rec(4_000_000_000, 6_000_000_000));
        assert_eq!(c.boot_ms(), 5_000);
        assert_eq!(c.now_ms(), 7_000);
        assert_eq!(c.uptime_ms(6_500_999_999), 1_500);
        assert_eq!(c.uptime_ms(4_000_000_000), 0, "before boot clamps to 0");
    }

    #[test]
    fn tick_sets_boot_first() {
        let mut c = Clock::new(None);
        c.tick(1_000_000_000);
        c.observe(&rec(2_000_000_000, 3_000_000_000));
        assert_eq!(c.boot_ms(), 1_000);
        c.tick(2_500_000_000);
        assert_eq!(c.now_ms(), 3_000, "now never goes back");
    }
}
