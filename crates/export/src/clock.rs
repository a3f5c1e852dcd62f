//! The exporter's clock: NetFlow's "boot" and "now", both taken from packet time; and the time
//! base of one NetFlow v5 / v9 datagram ([`Base`]).

use weir_flows::{Direction, FlowRecord};

const NS_PER_MS: u64 = 1_000_000;
/// The largest sys_uptime / First / Last a NetFlow v5 or v9 datagram can carry (49.7 days).
const SPAN_MS: u64 = u32::MAX as u64;
/// How far before its first record's start a datagram's own base is put, so that records that
/// started up to this much earlier still share the datagram.
const MARGIN_MS: u64 = 1 << 31;

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

    /// NetFlow sys_uptime of an instant: ms since boot, 0 for instants before boot, `u32::MAX`
    /// for instants 49.7 days or more after it. [`Base`] chooses each datagram's boot so that
    /// neither happens to a record it admits.
    pub(crate) fn uptime_ms(&self, t_ns: u64) -> u32 {
        (t_ns / NS_PER_MS)
            .saturating_sub(self.boot_ms())
            .min(SPAN_MS) as u32
    }

    /// This clock with its boot moved to `boot_ms` and its now to `now_ms`.
    fn rebased(&self, boot_ms: u64, now_ms: u64) -> Clock {
        Clock {
            boot_ns: Some(boot_ms * NS_PER_MS),
            now_ns: now_ms * NS_PER_MS,
        }
    }
}

/// `ms` rounded up to a whole second (v9 headers carry whole seconds only).
fn ceil_s(ms: u64) -> u64 {
    ms.div_ceil(1000) * 1000
}

/// The time base of one NetFlow v5 / v9 datagram. A collector rebuilds every time of a record
/// as `header time - sys_uptime + First`, so all the uptimes of a datagram count from one boot
/// and must be in `0..2^32` ms; input whose clock jumps backwards (concatenated captures) or
/// spans more than 49.7 days cannot share the run's boot. The datagram uses the clock's boot
/// when every record fits it (the usual case: one base for the whole run), else a boot of its
/// own; a record that does not fit the open datagram's base starts a new datagram.
///
/// The header time is the clock's now when it fits the base, else (the clock has gone on
/// beyond 49.7 days from the base) the latest time of the datagram's records: always at or
/// after every record's Last, so collectors never see a Last after sys_uptime.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Base {
    boot_ms: u64,
    /// Latest record time in the datagram, rounded up to a second.
    latest_ms: u64,
}

/// A direction's first and last packet times in ms, if it has packets.
pub(crate) fn span_ms(d: &Direction) -> Option<(u64, u64)> {
    (d.packets > 0).then(|| {
        let (a, b) = (d.first_ns / NS_PER_MS, d.last_ns / NS_PER_MS);
        (a.min(b), a.max(b))
    })
}

impl Base {
    /// Whether a record spanning `span` (from [`span_ms`]) can be expressed from `boot_ms`.
    fn fits(boot_ms: u64, span: Option<(u64, u64)>) -> bool {
        span.is_none_or(|(first, last)| first >= boot_ms && ceil_s(last) - boot_ms <= SPAN_MS)
    }

    /// The base of a new datagram whose first record spans `span`. The second value is false
    /// when the record itself lasts too long to be expressed (more than 49.7 days): its Last
    /// is then clamped.
    pub(crate) fn open(clock: &Clock, span: Option<(u64, u64)>) -> (Base, bool) {
        let boot = clock.boot_ms();
        if Base::fits(boot, span) {
            let latest_ms = span.map_or(boot, |(_, last)| ceil_s(last));
            return (
                Base {
                    boot_ms: boot,
                    latest_ms,
                },
                true,
            );
        }
        let (first, last) = span.expect("a record without times fits any base");
        let boot_ms = first
            .saturating_sub(MARGIN_MS)
            .max(ceil_s(last).saturating_sub(SPAN_MS))
            .min(first);
        let base = Base {
            boot_ms,
            latest_ms: ceil_s(last),
        };
        (base, Base::fits(boot_ms, span))
    }

    /// Whether a record spanning `span` can join this datagram; if so it is noted.
    pub(crate) fn admit(&mut self, span: Option<(u64, u64)>) -> bool {
        if !Base::fits(self.boot_ms, span) {
            return false;
        }
        if let Some((_, last)) = span {
            self.latest_ms = self.latest_ms.max(ceil_s(last));
        }
        true
    }

    /// The clock to encode the datagram's records with (their uptimes count from this base).
    pub(crate) fn records(&self, clock: &Clock) -> Clock {
        clock.rebased(self.boot_ms, clock.now_ms())
    }

    /// The clock to stamp the datagram's header with: its boot is this base, its now the
    /// header time (a whole second when `whole_seconds`).
    pub(crate) fn header(&self, clock: &Clock, whole_seconds: bool) -> Clock {
        let now = if whole_seconds {
            ceil_s(clock.now_ms())
        } else {
            clock.now_ms()
        };
        let now = if now >= self.boot_ms && now - self.boot_ms <= SPAN_MS {
            now
        } else {
            // (only a record that cannot be expressed reaches past the span: the header's
            // uptime must not, or collectors would misplace every record)
            let top = self.boot_ms + SPAN_MS;
            let top = if whole_seconds {
                top / 1000 * 1000
            } else {
                top
            };
            self.latest_ms.clamp(self.boot_ms, top)
        };
        clock.rebased(self.boot_ms, now)
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
            tag: None,
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

    #[test]
    fn base_of_a_datagram() {
        let mut c = Clock::new(None);
        c.tick(1_000_000_000_000); // boot 1e6 ms
                                   // fits the run's boot: that is the base, the header is now
        let (mut b, fits) = Base::open(&c, Some((1_000_500, 1_000_900)));
        assert!(fits && b.boot_ms == 1_000_000);
        assert!(b.admit(None), "a record without times fits anywhere");
        assert!(!b.admit(Some((999_999, 1_000_000))), "before the base");
        // before boot: a base of its own, a margin before the record
        let (mut b, fits) = Base::open(&c, Some((500_000, 600_000)));
        assert!(fits && b.boot_ms == 0);
        assert!(b.admit(Some((0, 1))));
        assert_eq!(b.header(&c, true).uptime_ms(c.now_ns()), 1_000_000);
        // 60 days after the base: its own datagram, and the header falls back to the records'
        // latest time when now is out of reach
        let day = 86_400_000;
        assert!(!b.admit(Some((60 * day, 60 * day + 1))));
        let (b, fits) = Base::open(&c, Some((1_000_000 + 60 * day, 1_000_000 + 60 * day)));
        assert!(fits);
        let mut late = c;
        late.tick((200 * day) * NS_PER_MS);
        let h = b.header(&late, true);
        assert_eq!(h.now_ms(), 1_000_000 + 60 * day);
        // a record lasting more than 49.7 days cannot be expressed
        let (_, fits) = Base::open(&c, Some((2_000_000, 2_000_000 + 50 * day)));
        assert!(!fits);
    }
}
