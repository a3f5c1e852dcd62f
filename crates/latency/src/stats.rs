//! Per-stream accumulators: counts, an HDR histogram of latencies (3 significant digits), exact
//! min/max/mean/stddev (Welford), RFC 3550 jitter, RFC 4737 reordering, and a bounded sample of
//! (time, latency) points for the scatter chart.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Most points kept per stream for the scatter chart (evenly decimated beyond that).
pub const MAX_POINTS: usize = 20_000;

/// Highest latency the histogram holds exactly (1 hour); larger values are clamped to it.
const HIST_MAX_NS: u64 = 3_600_000_000_000;

/// Everything measured about one stream.
#[derive(Clone, Debug)]
pub struct StreamStats {
    /// Packets seen at the first point.
    pub sent: u64,
    /// Packets matched at the second point (first copies).
    pub received: u64,
    /// Packets of the first point never seen at the second (within the time window).
    pub lost: u64,
    /// Extra copies at the second point.
    pub duplicated: u64,
    /// Packets that arrived with a lower sequence number than one already received (RFC 4737).
    pub reordered: u64,
    /// Packets at the second point with no counterpart at the first (stamped streams only).
    pub unmatched: u64,
    /// Matches with a negative latency (clocks not in step: see `--offset`).
    pub negative: u64,
    /// Latency histogram of the non-negative latencies, ns.
    pub hist: Histogram<u64>,
    /// Histogram of the magnitudes of the negative latencies, ns (an HDR histogram holds
    /// non-negative values only).
    pub neg_hist: Histogram<u64>,
    min: i64,
    max: i64,
    mean: f64,
    m2: f64,
    /// RFC 3550 interarrival jitter, ns.
    jitter: f64,
    last_latency: Option<i64>,
    /// Next expected sequence number (RFC 4737): one past the highest received so far.
    next_expected: Option<u64>,
    /// (send time ns, latency ns) samples, every `stride`-th match.
    pub points: Vec<(u64, i64)>,
    stride: u64,
    seen_for_points: u64,
}

impl Default for StreamStats {
    fn default() -> Self {
        StreamStats::new()
    }
}

/// The summary of a stream, as printed and exported.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// Packets sent (seen at the first point).
    pub sent: u64,
    /// Packets received (first copies matched at the second point).
    pub received: u64,
    /// Packets lost.
    pub lost: u64,
    /// Loss ratio, lost / sent.
    pub loss_ratio: f64,
    /// Duplicate copies received.
    pub duplicated: u64,
    /// Packets received out of order (RFC 4737).
    pub reordered: u64,
    /// Packets at the second point with no counterpart at the first.
    pub unmatched: u64,
    /// Matches with a negative latency.
    pub negative: u64,
    /// Smallest latency, ns.
    pub min_ns: i64,
    /// Median, ns (histogram, 3 significant digits; negative when clocks are not in step).
    pub p50_ns: i64,
    /// 90th percentile, ns.
    pub p90_ns: i64,
    /// 99th percentile, ns.
    pub p99_ns: i64,
    /// 99.9th percentile, ns.
    pub p999_ns: i64,
    /// Largest latency, ns.
    pub max_ns: i64,
    /// Mean, ns.
    pub mean_ns: f64,
    /// Standard deviation (population), ns.
    pub stddev_ns: f64,
    /// RFC 3550 interarrival jitter, ns.
    pub jitter_ns: f64,
}

impl StreamStats {
    /// An empty stream.
    pub fn new() -> StreamStats {
        StreamStats {
            sent: 0,
            received: 0,
            lost: 0,
            duplicated: 0,
            reordered: 0,
            unmatched: 0,
            negative: 0,
            hist: Histogram::new_with_bounds(1, HIST_MAX_NS, 3).expect("valid histogram bounds"),
            neg_hist: Histogram::new_with_bounds(1, HIST_MAX_NS, 3)
                .expect("valid histogram bounds"),
            min: i64::MAX,
            max: i64::MIN,
            mean: 0.0,
            m2: 0.0,
            jitter: 0.0,
            last_latency: None,
            next_expected: None,
            points: Vec::new(),
            stride: 1,
            seen_for_points: 0,
        }
    }

    /// Records the first copy of a packet: its sequence number in the stream (for reordering),
    /// its send time and its latency.
    pub fn record(&mut self, seq: u64, send_ns: u64, latency: i64) {
        self.received += 1;
        match self.next_expected {
            Some(next) if seq < next => self.reordered += 1,
            _ => self.next_expected = Some(seq + 1),
        }
        if latency < 0 {
            self.negative += 1;
        }
        let h = if latency < 0 {
            &mut self.neg_hist
        } else {
            &mut self.hist
        };
        h.saturating_record(latency.unsigned_abs().min(HIST_MAX_NS));
        self.min = self.min.min(latency);
        self.max = self.max.max(latency);
        let n = self.received as f64;
        let x = latency as f64;
        let d = x - self.mean;
        self.mean += d / n;
        self.m2 += d * (x - self.mean);
        if let Some(prev) = self.last_latency {
            let dd = (latency - prev).unsigned_abs() as f64;
            self.jitter += (dd - self.jitter) / 16.0;
        }
        self.last_latency = Some(latency);
        if self.seen_for_points % self.stride == 0 {
            if self.points.len() == MAX_POINTS {
                // Keep every other point and halve the sampling rate from now on.
                let kept: Vec<_> = self.points.iter().step_by(2).copied().collect();
                self.points = kept;
                self.stride *= 2;
            }
            if self.seen_for_points % self.stride == 0 {
                self.points.push((send_ns, latency));
            }
        }
        self.seen_for_points += 1;
    }

    /// Folds another stream's counts into this one (for totals; points are not merged).
    pub fn merge(&mut self, o: &StreamStats) {
        let (n1, n2) = (self.received as f64, o.received as f64);
        if n2 > 0.0 {
            let d = o.mean - self.mean;
            let n = n1 + n2;
            self.mean += d * n2 / n;
            self.m2 += o.m2 + d * d * n1 * n2 / n;
            self.jitter = (self.jitter * n1 + o.jitter * n2) / n;
        }
        self.sent += o.sent;
        self.received += o.received;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
        self.unmatched += o.unmatched;
        self.negative += o.negative;
        self.hist.add(&o.hist).expect("same histogram bounds");
        self.neg_hist
            .add(&o.neg_hist)
            .expect("same histogram bounds");
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// The latency at quantile `p` (0..=1), ns: the value of rank `ceil(p * n)` (at least 1)
    /// over the negative and non-negative latencies together, as the middle of its histogram
    /// bucket kept within the exact extremes; 0 for an empty stream.
    pub fn quantile_ns(&self, p: f64) -> i64 {
        let (neg, pos) = (self.neg_hist.len(), self.hist.len());
        let n = neg + pos;
        if n == 0 {
            return 0;
        }
        let rank = ((p.clamp(0.0, 1.0) * n as f64).ceil() as u64).clamp(1, n);
        let v = if rank <= neg {
            // the rank-th smallest overall is the (neg - rank + 1)-th smallest magnitude
            -(at_rank(&self.neg_hist, neg - rank + 1) as i64)
        } else {
            at_rank(&self.hist, rank - neg) as i64
        };
        v.clamp(self.min, self.max)
    }

    /// The summary.
    pub fn summary(&self) -> Summary {
        let q = |p: f64| self.quantile_ns(p);
        let has = self.received > 0;
        Summary {
            sent: self.sent,
            received: self.received,
            lost: self.lost,
            loss_ratio: if self.sent > 0 {
                self.lost as f64 / self.sent as f64
            } else {
                0.0
            },
            duplicated: self.duplicated,
            reordered: self.reordered,
            unmatched: self.unmatched,
            negative: self.negative,
            min_ns: if has { self.min } else { 0 },
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            max_ns: if has { self.max } else { 0 },
            mean_ns: self.mean,
            stddev_ns: if has {
                (self.m2 / self.received as f64).sqrt()
            } else {
                0.0
            },
            jitter_ns: self.jitter,
        }
    }
}

/// The middle of the bucket of the `rank`-th smallest value (1-based) of `h`.
fn at_rank(h: &Histogram<u64>, rank: u64) -> u64 {
    let mut seen = 0;
    for v in h.iter_recorded() {
        seen += v.count_since_last_iteration();
        if seen >= rank {
            return h.median_equivalent(v.value_iterated_to());
        }
    }
    h.median_equivalent(h.max())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reordering_rfc4737_and_moments() {
        let mut s = StreamStats::new();
        // Arrival order 0 1 3 2 4: only 2 is reordered (it arrives after 3).
        let lat = [100i64, 200, 300, 400, 500];
        for (seq, l) in [0u64, 1, 3, 2, 4].iter().zip(lat) {
            s.record(*seq, 0, l);
        }
        let m = s.summary();
        assert_eq!(m.reordered, 1);
        assert_eq!((m.min_ns, m.max_ns), (100, 500));
        assert!((m.mean_ns - 300.0).abs() < 1e-9);
        // Population stddev of 100..500 step 100: sqrt(20000).
        assert!((m.stddev_ns - 20000f64.sqrt()).abs() < 1e-6);
        // Jitter: |D| = 100 four times: J = 100 * (1 - (15/16)^4).
        let j = 100.0 * (1.0 - (15.0f64 / 16.0).powi(4));
        assert!((m.jitter_ns - j).abs() < 1e-9);
    }

    #[test]
    fn points_stay_bounded() {
        let mut s = StreamStats::new();
        for i in 0..(3 * MAX_POINTS as u64) {
            s.record(i, i, 1);
        }
        assert!(s.points.len() <= MAX_POINTS);
        assert!(s.points.len() >= MAX_POINTS / 2);
        assert!(s.points.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn negative_latencies_have_negative_percentiles() {
        // B's clock 1 ms behind A's: every latency is -1 ms.
        let mut s = StreamStats::new();
        for i in 0..1000 {
            s.record(i, i, -1_000_000);
        }
        let m = s.summary();
        assert_eq!(
            (m.min_ns, m.max_ns, m.negative),
            (-1_000_000, -1_000_000, 1000)
        );
        assert_eq!(
            [m.p50_ns, m.p90_ns, m.p99_ns, m.p999_ns],
            [-1_000_000; 4],
            "percentiles of all -1 ms"
        );
    }

    #[test]
    fn mixed_signs_by_hand() {
        // 10 latencies: -500 -400 -300 -200 -100 100 200 300 400 500 µs (in a shuffled order).
        // Rank ceil(p * 10): p50 → 5th = -100 µs, p90 → 9th = 400 µs, p99 and p99.9 → 10th =
        // 500 µs; a quarter → 3rd = -300 µs. Values below 2048 ns are exact in a 3-digit HDR
        // histogram, larger ones within 0.1 %: these are multiples of 100 µs, exact buckets.
        let mut s = StreamStats::new();
        for (i, us) in [300i64, -500, 100, -100, 500, -300, 200, -400, 400, -200]
            .iter()
            .enumerate()
        {
            s.record(i as u64, 0, us * 1000);
        }
        let m = s.summary();
        let near = |got: i64, want_us: i64| (got - want_us * 1000).abs() <= want_us.abs();
        assert!(near(m.p50_ns, -100), "p50 {}", m.p50_ns);
        assert!(near(m.p90_ns, 400), "p90 {}", m.p90_ns);
        assert!(near(m.p99_ns, 500) && near(m.p999_ns, 500));
        assert!(near(s.quantile_ns(0.25), -300));
        assert!(near(s.quantile_ns(0.0), -500), "p0 is the smallest");
        assert_eq!((m.min_ns, m.max_ns, m.negative), (-500_000, 500_000, 5));
        // merged into a total, the same
        let mut t = StreamStats::new();
        t.merge(&s);
        assert_eq!(t.summary().p50_ns, m.p50_ns);
    }
}
