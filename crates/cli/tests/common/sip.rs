//! A hand-built SIP call over UDP and its RTP across a veth bench (`weir voip -i`, `weir record
//! --voip`, `weir run`'s `[[voip]]` tests): INVITE with SDP, 100, 180, 200 with SDP, ACK, BYE,
//! 200; the caller's stream with one packet never sent and one sent twice. Also what the VoIP
//! tests share around it: tcpdump on the bench, a record file's JSON lines, `weir voip -r`.

use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use super::netns::VethBench;

/// The call's Call-ID.
pub(crate) const CALL_ID: &str = "live-call-1@weir.test";
/// Caller's RTP: 20 sequence numbers from 1000, 1005 never sent, 1010 sent twice.
pub(crate) const FIRST_SEQ: u16 = 1000;
pub(crate) const LOST_SEQ: u16 = 1005;
pub(crate) const DUP_SEQ: u16 = 1010;

pub(crate) fn sip(start: &str, cseq: &str, extra: &str, sdp: Option<&str>) -> Vec<u8> {
    let body = sdp.unwrap_or("");
    let ct = if sdp.is_some() {
        "Content-Type: application/sdp\r\n"
    } else {
        ""
    };
    format!(
        "{start}\r\nVia: SIP/2.0/UDP caller:5060;branch=z9hG4bK{n}\r\n\
         From: <sip:alice@weir.test>;tag=a1\r\nTo: <sip:bob@weir.test>{to_tag}\r\n\
         Call-ID: {CALL_ID}\r\nCSeq: {cseq}\r\n{extra}{ct}Content-Length: {}\r\n\r\n{body}",
        body.len(),
        n = cseq.split(' ').next().unwrap(),
        to_tag = if start.starts_with("INVITE") {
            ""
        } else {
            ";tag=b1"
        },
    )
    .into_bytes()
}

pub(crate) fn sdp(addr: &str, port: u16) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 {addr}\r\ns=-\r\nc=IN IP4 {addr}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
    )
}

pub(crate) fn rtp(seq: u16, ts: u32, ssrc: u32) -> Vec<u8> {
    let mut p = vec![0x80, 0];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&[0xff; 160]);
    p
}

/// Sends `msgs` (source port, destination port, payload) from the namespace's address to ours,
/// 20 ms apart, and waits for it.
pub(crate) fn from_peer(bench: &VethBench, msgs: &[(u16, u16, Vec<u8>)]) {
    let script = "import socket,sys,time\n\
                  peer,host=sys.argv[1],sys.argv[2]\n\
                  socks={}\n\
                  for a in sys.argv[3:]:\n    \
                  sp,dp,h=a.split(':')\n    \
                  if sp not in socks:\n        \
                  s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n        \
                  s.bind((peer,int(sp)))\n        \
                  socks[sp]=s\n    \
                  socks[sp].sendto(bytes.fromhex(h),(host,int(dp)))\n    \
                  time.sleep(0.02)\n";
    let args: Vec<String> = msgs
        .iter()
        .map(|(s, d, p)| {
            let hex: String = p.iter().map(|b| format!("{b:02x}")).collect();
            format!("{s}:{d}:{hex}")
        })
        .collect();
    let out = Command::new("ip")
        .args(["netns", "exec", &bench.ns, "python3", "-c", script])
        .arg(&bench.peer_ip)
        .arg(&bench.host_ip)
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The call: SIP both ways, the caller's RTP (one lost, one duplicate) and the callee's
/// (10 packets, none lost).
pub(crate) fn call(bench: &VethBench) {
    let (host, peer) = (bench.host_ip.as_str(), bench.peer_ip.as_str());
    let sip_sock = UdpSocket::bind((host, 5060)).unwrap();
    let rtp_sock = UdpSocket::bind((host, 40000)).unwrap();
    let to_peer = |s: &UdpSocket, port: u16, p: &[u8]| {
        s.send_to(p, (peer, port)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    };
    let offer = sdp(host, 40000);
    to_peer(
        &sip_sock,
        5060,
        &sip(
            "INVITE sip:bob@weir.test SIP/2.0",
            "1 INVITE",
            "User-Agent: weir-test-caller\r\n",
            Some(&offer),
        ),
    );
    let answer = sdp(peer, 50000);
    from_peer(
        bench,
        &[
            (5060, 5060, sip("SIP/2.0 100 Trying", "1 INVITE", "", None)),
            (5060, 5060, sip("SIP/2.0 180 Ringing", "1 INVITE", "", None)),
            (
                5060,
                5060,
                sip(
                    "SIP/2.0 200 OK",
                    "1 INVITE",
                    "Server: weir-test-callee\r\n",
                    Some(&answer),
                ),
            ),
        ],
    );
    to_peer(
        &sip_sock,
        5060,
        &sip("ACK sip:bob@weir.test SIP/2.0", "1 ACK", "", None),
    );
    for i in 0..20u16 {
        let seq = FIRST_SEQ + i;
        if seq == LOST_SEQ {
            continue;
        }
        let p = rtp(seq, 160 * u32::from(i), 0x1234_5678);
        to_peer(&rtp_sock, 50000, &p);
        if seq == DUP_SEQ {
            to_peer(&rtp_sock, 50000, &p);
        }
    }
    let back: Vec<(u16, u16, Vec<u8>)> = (0..10u16)
        .map(|i| {
            (
                50000,
                40000,
                rtp(7000 + i, 8000 + 160 * u32::from(i), 0x0bad_cafe),
            )
        })
        .collect();
    // The callee's RTP, then its 200 OK to the BYE sent the moment the BYE arrives: from a
    // process already running (starting Python in the namespace can take seconds on a loaded
    // machine, longer than the 2 s a call lingers after its BYE: the 200 OK would start a
    // second call record).
    let ok = sip("SIP/2.0 200 OK", "2 BYE", "", None);
    let hex = |p: &[u8]| -> String { p.iter().map(|b| format!("{b:02x}")).collect() };
    let script = "import socket,sys,time\n\
                  peer,host,ok=sys.argv[1],sys.argv[2],bytes.fromhex(sys.argv[3])\n\
                  sip=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
                  sip.bind((peer,5060))\n\
                  rtp=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
                  rtp.bind((peer,50000))\n\
                  for h in sys.argv[4:]:\n    \
                  rtp.sendto(bytes.fromhex(h),(host,40000))\n    \
                  time.sleep(0.02)\n\
                  print('ready',flush=True)\n\
                  sip.settimeout(120)\n\
                  sip.recvfrom(65535)\n\
                  sip.sendto(ok,(host,5060))\n";
    let mut child = Command::new("ip")
        .args(["netns", "exec", &bench.ns, "python3", "-c", script])
        .arg(peer)
        .arg(host)
        .arg(hex(&ok))
        .args(back.iter().map(|(_, _, p)| hex(p)))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    to_peer(
        &sip_sock,
        5060,
        &sip("BYE sip:bob@weir.test SIP/2.0", "2 BYE", "", None),
    );
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// tcpdump on our side of the pair, nanosecond timestamps, writing `out` (started: it said
/// "listening on").
pub(crate) fn tcpdump(bench: &VethBench, out: &Path) -> Child {
    let mut c = Command::new("tcpdump");
    c.args([
        "-i",
        &bench.host_if,
        "-n",
        "-U",
        "--immediate-mode",
        "--time-stamp-precision=nano",
        "-w",
    ])
    .arg(out);
    super::start(c, "listening on")
}

/// Stops a tcpdump (SIGINT, so it writes what it holds) and waits for it.
pub(crate) fn stop(mut c: Child) {
    assert!(
        super::run(Command::new("kill").args(["-INT", &c.id().to_string()]))
            .status
            .success()
    );
    let _ = c.wait();
}

/// The JSON lines of `path`, sorted by their text (every line whole JSON).
pub(crate) fn lines(path: &Path) -> Vec<serde_json::Value> {
    let mut v: Vec<serde_json::Value> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("whole JSON lines"))
        .collect();
    v.sort_by_key(|r| r.to_string());
    v
}

/// `weir voip -r PCAP -w OUT EXTRA...` (it must succeed): its records, sorted.
pub(crate) fn offline(pcap: &Path, out: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let o = super::run(
        super::weir()
            .args(["voip", "-r"])
            .arg(pcap)
            .arg("-w")
            .arg(out)
            .args(extra),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    lines(out)
}
