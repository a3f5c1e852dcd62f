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
    /// Latency histogram, ns (negative values counted as 0).
    pub hist: Histogram<u64>,
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
    /// Median, ns (histogram, 3 significant digits).
    pub p50_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
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
        self.hist
            .saturating_record((latency.max(0) as u64).min(HIST_MAX_NS));
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
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// The summary.
    pub fn summary(&self) -> Summary {
        let q = |p: f64| {
            if self.received == 0 {
                0
            } else {
                // The middle of the histogram bucket, kept within the exact extremes.
                let v = self.hist.median_equivalent(self.hist.value_at_quantile(p));
                v.clamp(self.min.max(0) as u64, self.max.max(0) as u64)
            }
        };
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
}
