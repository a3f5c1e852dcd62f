//! The analyzer on hand-built TCP connections (raw IPv4 frames): data carried on a SYN (TCP
//! Fast Open), ports reused by a second connection, and the exact JSON of a record (the
//! connection fields flattened from one `ConnId`, in Zeek's order).

use weir_decode::LinkType;
use weir_http::{Analyzer, Config, Event, HttpRecord};

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;

/// A raw IPv4 TCP frame 10.0.0.1:40000 <-> 10.0.0.2:80 (`from_client` picks the direction).
fn frame(from_client: bool, flags: u8, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    let (src, dst, sp, dp) = if from_client {
        ([10, 0, 0, 1], [10, 0, 0, 2], 40000u16, 80u16)
    } else {
        ([10, 0, 0, 2], [10, 0, 0, 1], 80, 40000)
    };
    let total = 20 + 20 + payload.len();
    let mut f = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        1,
        0x40,
        0,
        64,
        6,
        0,
        0,
    ];
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sp.to_be_bytes());
    f.extend_from_slice(&dp.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&ack.to_be_bytes());
    f.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(payload);
    f
}

fn run(frames: &[(u64, Vec<u8>)]) -> (Vec<HttpRecord>, weir_http::Stats) {
    let mut a = Analyzer::new(Config::default());
    let mut recs = Vec::new();
    let mut take = |e: Event| {
        if let Event::Http(r) = e {
            recs.push(r)
        }
    };
    for (ts, f) in frames {
        a.packet(*ts, LinkType::IPV4, f, &mut take);
    }
    let stats = a.finish(&mut take);
    (recs, stats)
}

const REQ: &[u8] = b"GET /tfo HTTP/1.1\r\nHost: h\r\nUser-Agent: t\r\n\r\n";
const RESP: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// One whole connection with client ISN `isn` (the request on the SYN when `tfo`).
fn connection(t0: u64, isn: u32, tfo: bool) -> Vec<(u64, Vec<u8>)> {
    let s = 7_000u32;
    let c = isn.wrapping_add(1);
    let r = REQ.len() as u32;
    let mut v = Vec::new();
    if tfo {
        v.push((t0, frame(true, SYN, isn, 0, REQ)));
        v.push((t0 + 1, frame(false, SYN | ACK, s, c + r, b"")));
    } else {
        v.push((t0, frame(true, SYN, isn, 0, b"")));
        v.push((t0 + 1, frame(false, SYN | ACK, s, c, b"")));
        v.push((t0 + 2, frame(true, ACK | PSH, c, s + 1, REQ)));
    }
    let rl = RESP.len() as u32;
    v.push((t0 + 3, frame(false, ACK | PSH, s + 1, c + r, RESP)));
    v.push((t0 + 4, frame(true, ACK | FIN, c + r, s + 1 + rl, b"")));
    v.push((t0 + 5, frame(false, ACK | FIN, s + 1 + rl, c + r + 1, b"")));
    v
}

/// The request on the SYN starts at ISN + 1 (the SYN's own number is not a byte): the whole
/// request is read, not its first byte lost.
#[test]
fn data_on_the_syn_is_read_whole() {
    let (recs, stats) = run(&connection(1_000, 0xffff_fff0, true));
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].method.as_deref(), Some("GET"));
    assert_eq!(recs[0].uri.as_deref(), Some("/tfo"));
    assert_eq!(recs[0].status_code, Some(200));
    assert_eq!(recs[0].response_body_len, 2);
    assert_eq!(recs[0].gap_bytes, 0);
    assert_eq!(stats.stream.retransmitted_bytes, 0);
    assert_eq!(stats.stream.gap_bytes, 0);
}

/// Two connections on the same ports, the second with another ISN and no FIN seen for the
/// first: two transactions, no gap, nothing read as a retransmission.
#[test]
fn reused_ports_start_a_new_connection() {
    let mut frames = connection(1_000, 100, false);
    frames.truncate(4); // the first connection's FINs are not captured
    frames.extend(connection(2_000, 3_000_000_000, false));
    let (recs, stats) = run(&frames);
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs
        .iter()
        .all(|r| r.status_code == Some(200) && r.gap_bytes == 0));
    assert_eq!((recs[0].trans_depth, recs[1].trans_depth), (1, 1));
    assert_eq!(stats.stream.gap_bytes, 0);
    assert_eq!(stats.stream.retransmitted_bytes, 0);
    assert_eq!(stats.flows, 2);
}

/// The record's JSON, byte for byte: the connection fields first, with Zeek's names, as before
/// they moved into one flattened `ConnId`. uid: Community ID of 10.0.0.1:40000 -> 10.0.0.2:80
/// (computed by the same function the spec's test vector checks).
#[test]
fn record_json_keeps_zeeks_field_order() {
    let (recs, _) = run(&connection(1_700_000_000_000_000_000, 5, false));
    let uid = weir_http::community_id(
        "10.0.0.1".parse().unwrap(),
        40000,
        "10.0.0.2".parse().unwrap(),
        80,
    );
    let want = format!(
        "{{\"ts\":1700000000.0,\"uid\":\"{uid}\",\"id.orig_h\":\"10.0.0.1\",\"id.orig_p\":40000,\
         \"id.resp_h\":\"10.0.0.2\",\"id.resp_p\":80,\"trans_depth\":1,\"method\":\"GET\",\
         \"host\":\"h\",\"uri\":\"/tfo\",\"version\":\"1.1\",\"user_agent\":\"t\",\
         \"request_body_len\":0,\"response_body_len\":2,\"status_code\":200,\
         \"status_msg\":\"OK\",\"ttfb\":1e-9,\"duration\":1e-9,\"gap_bytes\":0,\
         \"end\":\"complete\"}}"
    );
    assert_eq!(serde_json::to_string(&recs[0]).unwrap(), want);
}
