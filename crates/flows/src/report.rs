//! What a meter run tells its user at the end: the summary of every [`MeterStats`] counter in
//! words (the lines `weir flows` and `weir record --flows` print on stderr) and the same counters
//! as the JSON object of `--stats`. Where the records went (each output's own counters) is the
//! exporters' part (`weir_export::RunReport`), which puts its lines and its `"exports"` array in
//! the places left for them here.

use serde_json::{json, Map, Value};

use crate::meter::MeterStats;

impl MeterStats {
    /// The summary in words, one line each, every line ending in `\n`. `read` is the packets
    /// read before the filter (the difference to [`packets`](Self::packets) is what the filter
    /// left out); `outputs` are the lines about the outputs (each ending in `\n`, or empty),
    /// which come after the records line and before the memory line.
    pub fn summary(&self, read: u64, outputs: &str) -> String {
        self.summary_with_loss(read, outputs, "lost to a failed exporter")
    }

    /// [`summary`](Self::summary) with `lost` as the words after the count of records the
    /// exporter did not take ([`sink_failed`](Self::sink_failed)): `lost to a failed exporter`
    /// there; the exporters' report says what happened when it knows better (a reader that
    /// closed the output).
    pub fn summary_with_loss(&self, read: u64, outputs: &str, lost: &str) -> String {
        let s = self;
        let tags = if s.tagged_packets > 0 || s.tags_lost > 0 {
            format!(
                "  tags: {} packets tagged, {} records with a tag, {} tags lost (65535 distinct \
                 tags per shard)\n",
                s.tagged_packets, s.tagged_records, s.tags_lost
            )
        } else {
            String::new()
        };
        let filtered = read.saturating_sub(s.packets);
        let shards = if s.workers > 1 {
            format!(" (sum of {} shards' peaks)", s.workers)
        } else {
            String::new()
        };
        format!(
            "weir flows: {read} packets read, {filtered} not matching the filter, {} metered; \
             dropped: {} non-IP, {} decode errors\n  fragments: {} attributed to their flow, {} \
             unattributed (ports 0), {} forgotten early (table full); {} packets without a \
             transport header (ports 0)\n  flows: {} created, peak {} active{shards}; ended: {} \
             idle, {} active timeout, {} FIN/RST, {} evicted (table full), {} at end of input\n  \
             records: {} exported, {} below --min-tcp-bytes, {} {lost}\n\
             {tags}{outputs}  memory: {:.1} bytes per flow ({} flows of capacity over {} shard(s))\n",
            s.metered,
            s.non_ip,
            s.decode_errors,
            s.frag_attributed,
            s.frag_unattributed,
            s.frag_table_full,
            s.no_transport,
            s.flows,
            s.peak_flows,
            s.idle_ended,
            s.active_ended,
            s.tcp_ended,
            s.evicted,
            s.forced_ended,
            s.records,
            s.below_min_bytes,
            s.sink_failed,
            s.bytes_per_flow,
            s.capacity,
            s.workers,
        )
    }

    /// Every counter as the fields of a JSON object (`read` as in [`summary`](Self::summary)),
    /// named as `--stats` writes them.
    pub fn to_json(&self, read: u64) -> Map<String, Value> {
        let s = self;
        let v = json!({
            "packets_read": read,
            "packets_filtered_out": read.saturating_sub(s.packets),
            "packets_to_meter": s.packets,
            "packets_metered": s.metered,
            "dropped_non_ip": s.non_ip,
            "dropped_decode_error": s.decode_errors,
            "frag_attributed": s.frag_attributed,
            "frag_unattributed": s.frag_unattributed,
            "frag_table_full": s.frag_table_full,
            "no_transport": s.no_transport,
            "flows": s.flows,
            "peak_flows": s.peak_flows,
            "ended_idle": s.idle_ended,
            "ended_active": s.active_ended,
            "ended_tcp": s.tcp_ended,
            "ended_forced": s.forced_ended,
            "evicted": s.evicted,
            "records": s.records,
            "records_below_min_tcp_bytes": s.below_min_bytes,
            "records_lost_exporter_failed": s.sink_failed,
            "bytes_per_flow": s.bytes_per_flow,
            "capacity": s.capacity,
            "workers": s.workers,
        });
        match v {
            Value::Object(mut m) => {
                if s.tagged_packets > 0 || s.tags_lost > 0 {
                    m.insert("packets_tagged".into(), s.tagged_packets.into());
                    m.insert("records_tagged".into(), s.tagged_records.into());
                    m.insert("tags_lost".into(), s.tags_lost.into());
                }
                m
            }
            _ => Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every counter a different value, so a field printed in the wrong place shows.
    fn stats(workers: usize) -> MeterStats {
        MeterStats {
            packets: 100,
            metered: 90,
            non_ip: 7,
            decode_errors: 3,
            frag_attributed: 4,
            frag_unattributed: 5,
            frag_table_full: 6,
            no_transport: 8,
            flows: 20,
            peak_flows: 11,
            idle_ended: 12,
            active_ended: 13,
            tcp_ended: 14,
            forced_ended: 15,
            evicted: 16,
            records: 17,
            below_min_bytes: 18,
            sink_failed: 19,
            bytes_per_flow: 125.34,
            capacity: 1000,
            workers,
            ..MeterStats::default()
        }
    }

    /// The tag counters appear only in a run that saw tags: every other run's summary and
    /// JSON are what they were before rules existed.
    #[test]
    fn tag_counters_only_when_tags_were_seen() {
        let plain = stats(1);
        assert!(!plain.summary(120, "").contains("tags"));
        assert!(!plain.to_json(120).contains_key("packets_tagged"));
        let tagged = MeterStats {
            tagged_packets: 21,
            tagged_records: 22,
            tags_lost: 23,
            ..stats(1)
        };
        let s = tagged.summary(120, "");
        assert!(
            s.contains("  tags: 21 packets tagged, 22 records with a tag, 23 tags lost (65535 distinct tags per shard)\n"),
            "{s}"
        );
        let j = tagged.to_json(120);
        assert_eq!(
            (&j["packets_tagged"], &j["records_tagged"], &j["tags_lost"]),
            (&json!(21), &json!(22), &json!(23))
        );
    }

    #[test]
    fn summary_names_every_counter_in_its_place() {
        let want = "weir flows: 120 packets read, 20 not matching the filter, 90 metered; \
                    dropped: 7 non-IP, 3 decode errors\n\
                    \x20 fragments: 4 attributed to their flow, 5 unattributed (ports 0), 6 \
                    forgotten early (table full); 8 packets without a transport header (ports 0)\n\
                    \x20 flows: 20 created, peak 11 active (sum of 2 shards' peaks); ended: 12 \
                    idle, 13 active timeout, 14 FIN/RST, 16 evicted (table full), 15 at end of \
                    input\n\
                    \x20 records: 17 exported, 18 below --min-tcp-bytes, 19 lost to a failed \
                    exporter\n\
                    \x20 json -: 17 records\n\
                    \x20 memory: 125.3 bytes per flow (1000 flows of capacity over 2 shard(s))\n";
        assert_eq!(stats(2).summary(120, "  json -: 17 records\n"), want);
        // one shard: no "sum of peaks"; fewer packets read than metered (live) is no underflow
        let one = stats(1).summary(50, "");
        assert!(one.starts_with("weir flows: 50 packets read, 0 not matching the filter"));
        assert!(one.contains("peak 11 active; ended"), "{one}");
        assert!(one.contains(
            "exporter\n  memory: 125.3 bytes per flow (1000 flows of capacity over 1 shard(s))\n"
        ));
    }

    #[test]
    fn json_has_every_counter_by_name() {
        let m = stats(2).to_json(120);
        assert_eq!(m.len(), 23);
        let n = |k: &str| m[k].as_u64().unwrap();
        assert_eq!(n("packets_read"), 120);
        assert_eq!(n("packets_filtered_out"), 20);
        assert_eq!(n("packets_to_meter"), 100);
        assert_eq!(n("packets_metered"), 90);
        assert_eq!((n("dropped_non_ip"), n("dropped_decode_error")), (7, 3));
        assert_eq!(
            (
                n("frag_attributed"),
                n("frag_unattributed"),
                n("frag_table_full")
            ),
            (4, 5, 6)
        );
        assert_eq!(
            (n("no_transport"), n("flows"), n("peak_flows")),
            (8, 20, 11)
        );
        assert_eq!(
            (
                n("ended_idle"),
                n("ended_active"),
                n("ended_tcp"),
                n("ended_forced"),
                n("evicted")
            ),
            (12, 13, 14, 15, 16)
        );
        assert_eq!(
            (
                n("records"),
                n("records_below_min_tcp_bytes"),
                n("records_lost_exporter_failed")
            ),
            (17, 18, 19)
        );
        assert_eq!(m["bytes_per_flow"].as_f64(), Some(125.34));
        assert_eq!((n("capacity"), n("workers")), (1000, 2));
    }
}
