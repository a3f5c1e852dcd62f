//! Tags (`--rules`) in NetFlow v9 and IPFIX, checked by real decoders: records tagged by the
//! rules are exported with `ExportOptions::tags`, which ends every template with
//! applicationName (IE 96, 16 bytes); tshark (`-d udp.port==P,cflow`) must decode every frame
//! cleanly and show exactly the tags sent (`cflow.appl_name`), and nfcapd/nfdump must still
//! read every record with its counters (nfdump 1.7.1 does not show applicationName). Records
//! without a tag carry an all-zero field, which tshark shows as an empty name.

mod common;

use std::collections::BTreeMap;

use common::*;
use weir_export::{open_sink_with, ExportOptions, ExportStats, NetflowFormat, SinkSpec, Target};
use weir_flows::{FlowRecord, Tag};

/// `records(extra)` with tags on some: text, a number, and one with a comma and a quote.
fn tagged(extra: u32) -> Vec<FlowRecord> {
    let tags = [
        Some(Tag::text("lab").unwrap()),
        None,
        Some(Tag::Num(42)),
        Some(Tag::text("alert").unwrap()),
        None,
        Some(Tag::text("a,b\"c").unwrap()),
    ];
    records(extra)
        .into_iter()
        .enumerate()
        .map(|(i, r)| FlowRecord {
            tag: tags[i % tags.len()],
            ..r
        })
        .collect()
}

fn export_tagged(spec: &SinkSpec, recs: &[FlowRecord]) -> ExportStats {
    let opts = ExportOptions {
        tags: true,
        ..ExportOptions::default()
    };
    let mut sink = open_sink_with(spec, &opts).unwrap();
    sink.tick(T0).unwrap();
    for (i, r) in recs.iter().enumerate() {
        sink.export(r).unwrap();
        if i % 50 == 49 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    sink.finish().unwrap()
}

/// The tags of the wire records, as a multiset: one per direction with packets (uniflow), or
/// one per record (biflow).
fn expected_tags(recs: &[FlowRecord], biflow: bool) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in recs {
        let n = if biflow {
            1
        } else {
            usize::from(r.forward.packets > 0 || r.reverse.packets == 0)
                + usize::from(r.reverse.packets > 0)
        };
        if let Some(t) = r.tag {
            *m.entry(t.to_string()).or_insert(0) += n;
        }
    }
    m
}

fn to_tshark(format: NetflowFormat, biflow: bool, name: &str) {
    if !have("tshark") {
        return;
    }
    let dir = TempDir::new(name);
    let raw = dir.0.join("raw");
    let recs = tagged(200);
    let stats = export_tagged(
        &netflow(Target::File(raw.clone()), format, biflow, false),
        &recs,
    );
    assert_eq!(stats.tags_not_exported, 0);
    let dgs = read_datagrams(&raw, format);
    assert_eq!(dgs.len() as u64, stats.datagrams);
    assert!(dgs.len() > 3, "several datagrams: {}", dgs.len());
    let pcap = dir.0.join("x.pcap");
    std::fs::write(&pcap, pcap_of(&dgs, 2055)).unwrap();
    // every frame decodes, nothing malformed, no expert info, no unknown field
    assert_eq!(tshark(&pcap, &["-Y", "cflow"]).lines().count(), dgs.len());
    assert_eq!(tshark(&pcap, &["-Y", "_ws.malformed || _ws.expert"]), "");
    let text = tshark(&pcap, &["-V"]);
    for bad in ["Malformed", "Unknown", "unknown", "no template", "Data ("] {
        assert!(!text.contains(bad), "tshark -V shows {bad:?}");
    }
    // the counters are still right (tshark decodes RFC 5103 reverse counters under the same
    // field names)
    let sum = |f: &str| -> u64 {
        values(&pcap, f)
            .iter()
            .map(|v| v.parse::<u64>().unwrap())
            .sum()
    };
    let want = expected_uniflows(&recs, false);
    let (packets, bytes) = want.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
    assert_eq!(sum("cflow.packets"), packets);
    assert_eq!(sum("cflow.octets"), bytes);
    // exactly the tags sent, on as many records
    let mut got = BTreeMap::new();
    for v in values(&pcap, "cflow.appl_name") {
        *got.entry(v).or_insert(0) += 1;
    }
    let want_tags = expected_tags(&recs, biflow);
    assert_eq!(got, want_tags);
    assert!(want_tags.contains_key("42") && want_tags.contains_key("a,b\"c"));
}

#[test]
fn v9_tags_decode_in_tshark() {
    to_tshark(NetflowFormat::V9, false, "tags-v9-tshark");
}

#[test]
fn ipfix_tags_decode_in_tshark() {
    to_tshark(NetflowFormat::Ipfix, false, "tags-ipfix-tshark");
}

#[test]
fn ipfix_biflow_tags_decode_in_tshark() {
    to_tshark(NetflowFormat::Ipfix, true, "tags-ipfix-bi-tshark");
}

/// nfcapd takes the tagged templates and stores every record with its counters.
fn to_nfcapd(format: NetflowFormat, name: &str) {
    if !have("nfcapd") || !have("nfdump") {
        return;
    }
    let recs = tagged(200);
    let cap = Nfcapd::start(name);
    let stats = export_tagged(&netflow(cap.target(), format, false, false), &recs);
    let rows = cap.stop_and_read();
    assert_eq!(stats.dropped, 0);
    assert_eq!(
        rows.len() as u64,
        stats.records,
        "every record reached nfdump"
    );
    let mut got: BTreeMap<Uniflow, (u64, u64)> = BTreeMap::new();
    let num = |row: &serde_json::Value, k: &str| row.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    for row in &rows {
        let e = got.entry(nfdump_key(row)).or_default();
        e.0 += num(row, "in_packets");
        e.1 += num(row, "in_bytes");
    }
    assert_eq!(got, expected_uniflows(&recs, false));
}

#[test]
fn v9_tags_reach_nfcapd() {
    to_nfcapd(NetflowFormat::V9, "tags-v9-nfcapd");
}

#[test]
fn ipfix_tags_reach_nfcapd() {
    to_nfcapd(NetflowFormat::Ipfix, "tags-ipfix-nfcapd");
}

/// NetFlow v5 has no room: the records go out, their tags are counted.
#[test]
fn v5_counts_the_tags_it_cannot_carry() {
    let dir = TempDir::new("tags-v5");
    let recs = tagged(0);
    let stats = export_tagged(
        &netflow(
            Target::File(dir.0.join("raw")),
            NetflowFormat::V5,
            false,
            false,
        ),
        &recs,
    );
    let v4_tagged = recs
        .iter()
        .filter(|r| r.tag.is_some() && r.key.src.is_ipv4())
        .count() as u64;
    assert!(v4_tagged > 0);
    assert_eq!(stats.tags_not_exported, v4_tagged);
}
