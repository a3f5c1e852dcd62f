//! [`Report`]: what a run of the generator did, and its two renderings, the one-line summary
//! (`weir: sent N packets ...`) and the JSON object of `weir gen --json`.
//!
//! On an interface, a frame is *queued* when it is written into the TX ring and *sent* once the
//! kernel took it from the ring: frames the kernel refused as malformed and frames a failed
//! `send()` left in the ring count as queued, never as sent, in packets and in bytes.

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Packets the kernel accepted (or written to the file).
    pub sent: u64,
    /// Their bytes (frames as captured, no FCS).
    pub bytes: u64,
    /// Packets queued in the TX ring (written into it), sent or not; equal to `sent` for a file.
    pub queued: u64,
    /// Their bytes.
    pub queued_bytes: u64,
    /// Frames the kernel refused as malformed; queued, not sent.
    pub rejected: u64,
    /// `send()` calls that failed (each loses at least one packet).
    pub send_errors: u64,
    /// Frames queued but never sent (left in the ring by failed send calls); not in `sent`.
    pub unsent: u64,
    /// The last send error, if any.
    pub last_error: Option<String>,
    /// `send()` calls (batches).
    pub batches: u64,
    /// Time from the first packet to the last, ns.
    pub elapsed_ns: u64,
}

impl Report {
    /// Packets per second achieved.
    pub fn pps(&self) -> f64 {
        if self.elapsed_ns == 0 {
            return 0.0;
        }
        self.sent as f64 * 1e9 / self.elapsed_ns as f64
    }

    /// Megabits per second achieved (frames as captured).
    pub fn mbps(&self) -> f64 {
        if self.elapsed_ns == 0 {
            return 0.0;
        }
        self.bytes as f64 * 8e3 / self.elapsed_ns as f64
    }

    fn last_error_text(&self) -> String {
        self.last_error
            .as_ref()
            .map(|e| format!(" (last: {e})"))
            .unwrap_or_default()
    }

    /// The summary line (without the `weir: ` prefix): for a file (`to_file`), what was written
    /// and the planned time it spans; for an interface, what the kernel accepted, the rates and
    /// the send calls, and, when some queued frames were not sent, how many were queued.
    pub fn summary(&self, file: bool) -> String {
        let secs = self.elapsed_ns as f64 / 1e9;
        if file {
            return format!(
                "wrote {} packets ({} bytes) spanning {secs:.6} s of planned time",
                self.sent, self.bytes
            );
        }
        let mut s = format!(
            "sent {} packets ({} bytes) in {secs:.3} s: {:.0} pps, {:.1} Mbps; {} send() calls, {} send errors{}, {} rejected frames",
            self.sent,
            self.bytes,
            self.pps(),
            self.mbps(),
            self.batches,
            self.send_errors,
            self.last_error_text(),
            self.rejected
        );
        if self.queued != self.sent {
            s.push_str(&format!(
                "; {} packets ({} bytes) queued, {} never sent",
                self.queued,
                self.queued_bytes,
                self.queued - self.sent
            ));
        }
        s
    }

    /// The failure to report when send calls failed (`None` when none did).
    pub fn failure(&self) -> Option<String> {
        (self.send_errors > 0).then(|| {
            format!(
                "{} of the send calls failed, {} packets not sent{}",
                self.send_errors,
                self.unsent,
                self.last_error_text()
            )
        })
    }

    /// The report as one JSON object (keys in alphabetical order).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "sent": self.sent,
            "bytes": self.bytes,
            "queued": self.queued,
            "queued_bytes": self.queued_bytes,
            "elapsed_ns": self.elapsed_ns,
            "pps": self.pps(),
            "mbps": self.mbps(),
            "send_calls": self.batches,
            "send_errors": self.send_errors,
            "last_error": self.last_error,
            "rejected": self.rejected,
            "unsent": self.unsent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        Report {
            sent: 1000,
            bytes: 60_000,
            queued: 1000,
            queued_bytes: 60_000,
            batches: 4,
            elapsed_ns: 500_000_000,
            ..Report::default()
        }
    }

    #[test]
    fn summary_lines_say_what_was_sent() {
        let r = sample();
        // 1000 packets in 0.5 s = 2000 pps; 60 000 bytes * 8 / 0.5 s = 0.96 Mbps.
        assert_eq!(
            r.summary(false),
            "sent 1000 packets (60000 bytes) in 0.500 s: 2000 pps, 1.0 Mbps; 4 send() calls, 0 send errors, 0 rejected frames"
        );
        assert_eq!(
            r.summary(true),
            "wrote 1000 packets (60000 bytes) spanning 0.500000 s of planned time"
        );
        assert_eq!(r.failure(), None);
    }

    #[test]
    fn frames_queued_but_not_sent_are_named_apart() {
        let r = Report {
            sent: 990,
            bytes: 59_400,
            send_errors: 1,
            unsent: 7,
            rejected: 3,
            last_error: Some("Network is down (os error 100)".into()),
            ..sample()
        };
        assert!(r.summary(false).ends_with(
            "1 send errors (last: Network is down (os error 100)), 3 rejected frames; 1000 packets (60000 bytes) queued, 10 never sent"
        ));
        assert_eq!(
            r.failure().unwrap(),
            "1 of the send calls failed, 7 packets not sent (last: Network is down (os error 100))"
        );
        let j = r.to_json();
        assert_eq!(j["sent"], 990);
        assert_eq!(j["bytes"], 59_400);
        assert_eq!(j["queued"], 1000);
        assert_eq!(j["queued_bytes"], 60_000);
        assert_eq!(j["unsent"], 7);
        assert_eq!(j["send_calls"], 4);
        assert_eq!(j["pps"], 1980.0);
    }
}
