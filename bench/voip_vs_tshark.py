#!/usr/bin/env python3
"""weir voip vs tshark: call and RTP stream figures from a large SIP+RTP capture, page cache warm,
median of N interleaved runs (wall, CPU, peak RSS), speed-up.

The capture is synthesized (the corpus has no large SIP/RTP file) into bench/out/voip-N.pcap
(never in git): CALLS calls over UDP (INVITE with SDP, 100, 180, 200 with SDP, ACK, ..., BYE,
200), overlapping (a new call every 40 ms), each with two G.711 RTP streams of 20 ms packets
carrying 1 % random loss (sequence numbers skipped) and arrival jitter (uniform ±3 ms, in order),
until the file holds at least --packets packets. A fixed seed: the same file every time.

weir:          weir voip -r TRACE -w /dev/null
tshark rtp:    tshark -r TRACE -q -z rtp,streams
tshark both:   tshark -r TRACE -z rtp,streams -Y sip -T fields -e sip.Call-ID -e sip.Method
               -e sip.Status-Code      (one pass giving what weir gives: streams and SIP dialogs)

usage: bench/voip_vs_tshark.py [--runs N] [--packets N]
"""

import argparse
import heapq
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--packets", type=int, default=1_000_000)
args = ap.parse_args()

RTP_PER_STREAM = 1500  # 30 s of 20 ms packets
T0 = 1_795_700_000.0


def frame(src, sport, dst, dport, payload):
    """Ethernet/IPv4/UDP around payload (checksums zero: UDP allows it, tools ignore the IP one)."""
    ip_len = 28 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, 0, 0x4000, 64, 17, 0, src, dst)
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0)
    return b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00" + ip + udp + payload


def sip(start, call_id, cseq, to_tag, sdp_ip=None, sdp_port=None):
    body = ""
    if sdp_port:
        body = (f"v=0\r\no=- 1 1 IN IP4 {sdp_ip}\r\ns=-\r\nc=IN IP4 {sdp_ip}\r\nt=0 0\r\n"
                f"m=audio {sdp_port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n")
    ct = "Content-Type: application/sdp\r\n" if body else ""
    tag = ";tag=b" if to_tag else ""
    return (f"{start}\r\nVia: SIP/2.0/UDP x;branch=z9hG4bK{cseq.split()[0]}\r\n"
            f"From: <sip:a@bench>;tag=a\r\nTo: <sip:b@bench>{tag}\r\nCall-ID: {call_id}\r\n"
            f"CSeq: {cseq}\r\n{ct}Content-Length: {len(body)}\r\n\r\n{body}").encode()


def call(i, rng):
    """Packets (ts, frame) of call i, in time order."""
    a = bytes([10, 1 + i // 60000 % 200, i // 250 % 240, 1 + i % 250])
    b = bytes([10, 201, i // 250 % 240, 1 + i % 250])
    a_ip, b_ip = ".".join(map(str, a)), ".".join(map(str, b))
    cid = f"bench-{i}@weir"
    t = T0 + i * 0.04
    pa, pb = 20000 + 2 * (i % 5000), 30000 + 2 * (i % 5000)
    out = []
    sig = [
        (0.0, a, b, sip("INVITE sip:b@bench SIP/2.0", cid, "1 INVITE", False, a_ip, pa)),
        (0.001, b, a, sip("SIP/2.0 100 Trying", cid, "1 INVITE", False)),
        (0.002, b, a, sip("SIP/2.0 180 Ringing", cid, "1 INVITE", True)),
        (0.5, b, a, sip("SIP/2.0 200 OK", cid, "1 INVITE", True, b_ip, pb)),
        (0.501, a, b, sip("ACK sip:b@bench SIP/2.0", cid, "1 ACK", True)),
    ]
    for dt, s, d, p in sig:
        out.append((t + dt, frame(s, 5060, d, 5060, p)))
    for (s, sp, d, dp, ssrc) in ((a, pa, b, pb, 0x1000 + i), (b, pb, a, pa, 0x8000 + i)):
        seq0 = rng.randrange(65536)
        prev = 0.0
        for k in range(RTP_PER_STREAM):
            if rng.random() < 0.01:
                continue
            at = max(prev + 1e-5, 0.52 + k * 0.02 + rng.uniform(-0.003, 0.003))
            prev = at
            rtp = struct.pack("!BBHII", 0x80, 0x80 if k == 0 else 0, (seq0 + k) & 0xFFFF,
                              k * 160, ssrc) + b"\xff" * 160
            out.append((t + at, frame(s, sp, d, dp, rtp)))
    end = 0.6 + RTP_PER_STREAM * 0.02
    out.append((t + end, frame(a, 5060, b, 5060, sip("BYE sip:b@bench SIP/2.0", cid, "2 BYE", True))))
    out.append((t + end + 0.001, frame(b, 5060, a, 5060, sip("SIP/2.0 200 OK", cid, "2 BYE", True))))
    out.sort(key=lambda x: x[0])
    return out


def synthesize(path, packets):
    per_call = 7 + 2 * RTP_PER_STREAM
    calls = -(-packets // int(per_call * 0.99))
    rng = random.Random(18)
    n = 0
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))  # pcap, ns stamps
        for ts, fr in heapq.merge(*(call(i, rng) for i in range(calls)), key=lambda x: x[0]):
            sec = int(ts)
            ns = int(round((ts - sec) * 1e9))
            f.write(struct.pack("<IIII", sec, ns, len(fr), len(fr)) + fr)
            n += 1
    os.rename(tmp, path)
    print(f"synthesized {path}: {calls} calls, {n} packets")


root = runner.repo_root()
out = os.path.join(root, "bench", "out")
os.makedirs(out, exist_ok=True)
subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir"], cwd=root, check=True)
weir = os.path.join(root, "target", "release", "weir")
trace = os.path.join(out, f"voip-{args.packets}.pcap")
if not os.path.exists(trace):
    synthesize(trace, args.packets)
runner.warm(trace)
size = os.path.getsize(trace)
packets = int(subprocess.run(["capinfos", "-c", "-M", trace], capture_output=True, text=True,
                             check=True).stdout.split("Number of packets:")[1].split()[0])

tmp = tempfile.mkdtemp(prefix="weir-bench-voip-")
cmds = [
    ("weir voip", [weir, "voip", "-r", trace, "-w", "/dev/null"]),
    ("tshark rtp,streams", ["tshark", "-r", trace, "-q", "-z", "rtp,streams"]),
    ("tshark rtp+sip", ["tshark", "-r", trace, "-z", "rtp,streams", "-Y", "sip", "-T", "fields",
                        "-e", "sip.Call-ID", "-e", "sip.Method", "-e", "sip.Status-Code"]),
]
med = runner.compare(cmds, runs=args.runs)
runner.report(f"voip: {os.path.basename(trace)} ({packets} packets, {size / 1e9:.3f} GB), "
              f"median of {args.runs}", med, "tshark rtp+sip", packets)
w = med["weir voip"]
for name in ("tshark rtp,streams", "tshark rtp+sip"):
    t = med[name]
    print(f"weir vs {name}: {t[0] / w[0]:.1f}x wall, {t[1] / w[1]:.1f}x cpu, "
          f"{t[2] / w[2]:.1f}x peak RSS")
r = subprocess.run([weir, "voip", "-r", trace, "-w", "/dev/null"], capture_output=True, text=True,
                   check=True)
print(r.stderr.strip())
print(f"cpu: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}; "
      f"load average {os.getloadavg()}")
