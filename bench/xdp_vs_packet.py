#!/usr/bin/env python3
"""weir record --backend packet vs --backend xdp: CPU time per recorded packet on a veth pair.

The same traffic (trafgen in a namespace made here, pinned to CPU 1, top speed: 64-byte UDP
frames with a random source port per packet, `drnd(2)`, and 4 096 source addresses) goes into
`weir record -i A --backend packet` and `--backend xdp` in turn (interleaved rounds, median of
--runs). For each run: weir starts and says it records; after start-up settles its CPU time
(user + system of the whole process, /proc/PID/stat) is read, trafgen sends N frames, the CPU
time is read again once the traffic is handled, then weir gets SIGINT. CPU per packet = the
difference / packets recorded (start-up and the final flush excluded). Drops = kernel (ring or
AF_XDP socket) + buffer + writer drops from weir's own summary; the AF_XDP counters
(rx_dropped, rx_ring_full, rx_invalid_descs, rx_fill_ring_empty_descs) are printed as well,
and the whole machine's busy CPU over the same interval.
Prints the ratio packet / xdp. On veth AF_XDP runs in copy mode with the XDP program in native
mode: the kernel still copies each packet once (into the UMEM instead of the ring block).

With --drop-rules, weir records with `--rules` dropping half the traffic (`src
10.215.0.0/21 -> drop`: third octet 0-7 of the 16 the generator cycles through): AF_PACKET
rejects those packets in its socket filter (kernel_rules), AF_XDP in its XDP program
(xdp_rules, the same libpcap program translated to eBPF). CPU per packet is then per packet
*sent* (recorded + dropped in the kernel), and the kernel's drop count is printed.

With --sender weir-xdp, the traffic comes from `weir gen --backend xdp` instead (an AF_XDP
socket on the namespace's end, copy mode, the fastest sender this machine has): --flows 60000
--hosts 4096 (60 000 source ports, 4 096 source addresses, round robin), 64-byte frames, at top
speed or at --pps. Every counter on the way is printed and reconciled: the generator's sent
count, the sending veth's tx packets / tx dropped and the receiving veth's rx packets / rx
dropped (sysfs of each namespace, the numbers `ip -s link` prints), weir's kernel
received / dropped, the AF_XDP socket's counters, weir's buffer and writer drops, and the
packets recorded. --weir BIN runs another weir binary (for A/B runs).

usage: sudo bench/xdp_vs_packet.py [--runs N] [--packets N] [--drop-rules]
                                   [--sender trafgen|weir-xdp] [--pps N] [--weir BIN] [--gen BIN]
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--packets", type=int, default=1_000_000)
ap.add_argument("--drop-rules", action="store_true", help="record with rules that drop half the traffic in the kernel")
ap.add_argument("--sender", choices=["trafgen", "weir-xdp"], default="trafgen",
                help="trafgen (AF_PACKET TX ring) or weir gen --backend xdp (AF_XDP, copy mode)")
ap.add_argument("--pps", type=float, help="rate of the weir-xdp sender (default: top speed)")
ap.add_argument("--weir", help="weir binary to measure (default: build and use this tree's)")
ap.add_argument("--gen", help="weir binary that sends with --sender weir-xdp (default: the measured one)")
args = ap.parse_args()

root = runner.repo_root()
if args.weir:
    weir = os.path.abspath(args.weir)
else:
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir"], cwd=root, check=True)
    weir = os.path.join(root, "target", "release", "weir")
if args.sender == "trafgen" and not shutil.which("trafgen"):
    sys.exit("trafgen is not installed (scripts/setup.sh)")

NS, A, B = "weirxdpb", "wxdpb0", "wxdpb1"


def sh(*cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def teardown():
    subprocess.run(["ip", "netns", "del", NS], stderr=subprocess.DEVNULL)
    subprocess.run(["ip", "link", "del", A], stderr=subprocess.DEVNULL)


def setup():
    teardown()
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", A, "type", "veth", "peer", "name", B)
    sh("ip", "link", "set", B, "netns", NS)
    sh("ip", "link", "set", A, "up")
    sh("ip", "netns", "exec", NS, "ip", "link", "set", B, "up")


def mac(dev, ns=None):
    pre = ["ip", "netns", "exec", ns] if ns else []
    return subprocess.run(pre + ["cat", f"/sys/class/net/{dev}/address"], capture_output=True, text=True, check=True).stdout.strip()


def trafgen_conf(path):
    """64-byte UDP/IPv4 frames from B to A, random source port, 4 096 source addresses."""
    dst = [int(x, 16) for x in mac(A).split(":")]
    src = [int(x, 16) for x in mac(B, NS).split(":")]
    ip_len = 64 - 14
    ip = [0x45, 0, ip_len >> 8, ip_len & 255, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 215, 0, 2, 10, 215, 0, 1]
    udp_len = ip_len - 20
    udp = [0x30, 0x39, 0x27, 0x0F, udp_len >> 8, udp_len & 255, 0, 0]
    frame = dst + src + [8, 0] + ip + udp + [0] * (udp_len - 8)
    cells = [f"0x{b:02x}" for b in frame]
    # Replaced from the end (multi-byte functions take one cell for several bytes).
    cells[34:36] = ["drnd(2)"]
    cells[29] = "drnd()"
    cells[28] = "dinc(0, 15)"
    cells[24:26] = ["csumip(14, 33)"]
    with open(path, "w") as f:
        f.write("{ " + ", ".join(cells) + " }\n")


def send(conf):
    """Sends args.packets frames from B; returns what the generator says it sent (None for
    trafgen, which only prints it in a form not parsed here: the veth's tx counter says it)."""
    if args.sender == "trafgen":
        sh("ip", "netns", "exec", NS, "taskset", "-c", "1", "trafgen", "-o", B, "-i", conf, "-n", str(args.packets), "-P", "1", "--no-sock-mem")
        return None
    rate = ["--pps", str(args.pps)] if args.pps else ["--top"]
    r = subprocess.run(["ip", "netns", "exec", NS, "taskset", "-c", "1", os.path.abspath(args.gen or weir), "gen", "-i", B, "--backend", "xdp",
                        "--dst-mac", mac(A), "--src", "10.215.0.2", "--dst", "10.215.0.1", "--flows", "60000",
                        "--hosts", "4096", "--size", "64", "-c", str(args.packets), "--json"] + rate,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"weir gen failed: {r.stderr}")
    return json.loads(r.stdout)


def one(backend, tmp, conf):
    out = os.path.join(tmp, "out")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [weir, "record", "-i", A, "-o", out, "--buffer-mib", "256", "--backend", backend]
    if args.drop_rules:
        rules = os.path.join(tmp, "rules.txt")
        with open(rules, "w") as f:
            f.write("id 1 src 10.215.0.0/21 -> drop\n")
        cmd += ["--rules", rules]
    log = open(os.path.join(tmp, "log"), "w+")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    t = time.time()
    while "recording on" not in open(log.name).read():
        if time.time() - t > 30 or p.poll() is not None:
            sys.exit(f"weir --backend {backend} did not start: {open(log.name).read()}")
        time.sleep(0.05)
    time.sleep(0.5)
    c0 = runner.cpu_s(p.pid)
    m0 = runner.machine_busy_s()
    a0, b0 = runner.link_stats(A), runner.link_stats(B, NS)
    t0 = time.time()
    report = send(conf)
    wall = time.time() - t0
    time.sleep(0.5)
    c1 = runner.cpu_s(p.pid)
    m1 = runner.machine_busy_s()
    a1, b1 = runner.link_stats(A), runner.link_stats(B, NS)
    veth = {"A rx": a1["rx_packets"] - a0["rx_packets"], "A rx dropped": a1["rx_dropped"] - a0["rx_dropped"],
            "B tx": b1["tx_packets"] - b0["tx_packets"], "B tx dropped": b1["tx_dropped"] - b0["tx_dropped"]}
    p.send_signal(signal.SIGINT)
    p.wait(timeout=120)
    text = open(log.name).read()
    got = int(re.search(r"(\d+) packets recorded", text)[1])
    m = re.search(r"kernel: \d+ received, (\d+) dropped.*?buffer: (\d+) dropped \(full\), (\d+) dropped \(too long\); writer: (\d+)", text, re.S)
    if not m:
        sys.exit(f"cannot parse weir's summary: {text}")
    drops = sum(int(x) for x in m.groups())
    k = re.search(r"dropped in the kernel by \d+ rules \([^)]*\): (\d+)", text)
    kdrop = int(k[1]) if k else 0
    if args.drop_rules and not k:
        sys.exit(f"no kernel drop count in weir's summary: {text}")
    x = re.search(r"AF_XDP: (rx_dropped \d+, rx_ring_full \d+, rx_invalid_descs \d+, rx_fill_ring_empty_descs \d+)", text)
    kernel = re.search(r"kernel: (\d+) received, (\d+) dropped", text)
    shutil.rmtree(out, ignore_errors=True)
    if args.sender == "weir-xdp":
        pps = report["sent"] / wall if wall > 0 else 0
        print(f"  {backend}: generator sent {report['sent']} (queued {report['queued']}, rejected {report['rejected']}, "
              f"unsent {report['unsent']}, send errors {report['send_errors']}) in {wall:.2f} s wall ({pps:,.0f} pps); "
              f"veth {B} tx {veth['B tx']} / tx dropped {veth['B tx dropped']}; {A} rx {veth['A rx']} / rx dropped "
              f"{veth['A rx dropped']}; weir kernel received {kernel[1]} / dropped {kernel[2]}; {x[1] if x else ''}; "
              f"recorded {got}; drops (kernel + buffer + writer) {drops}", flush=True)
    return c1 - c0, got, drops, x[1] if x else "", m1 - m0, kdrop, veth, report


setup()
tmp = tempfile.mkdtemp(prefix="weir-bench-xdp-")
try:
    conf = os.path.join(tmp, "diverse64.cfg")
    trafgen_conf(conf)
    backends = ["packet", "xdp"]
    samples = {b: [] for b in backends}
    for _ in range(args.runs):
        for b in backends:
            samples[b].append(one(b, tmp, conf))
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    if args.sender == "trafgen":
        what = "random source port, 4096 source addresses, trafgen"
    else:
        what = (f"60000 source ports, 4096 source addresses, weir gen --backend xdp at "
                f"{args.pps if args.pps else 'top speed'}")
    print(f"\n{args.packets} frames of 64 bytes, {what} "
          f"(median of {args.runs} runs, load average {load} at the end)")
    if args.drop_rules:
        print("with rules dropping half the traffic in the kernel; ns cpu/pkt is per packet sent")
    print(f"{'backend':<10} {'recorded':>10} {'kernel rules':>12} {'drops':>9} {'cpu s':>7} {'ns cpu/pkt':>11} {'machine s':>10}  AF_XDP counters (last run)")
    per = {}
    for b in backends:
        cpu = statistics.median(s[0] for s in samples[b])
        got = statistics.median(s[1] for s in samples[b])
        drops = statistics.median(s[2] for s in samples[b])
        machine = statistics.median(s[4] for s in samples[b])
        kdrop = statistics.median(s[5] for s in samples[b])
        per[b] = cpu / max(got + kdrop, 1) * 1e9
        print(f"{b:<10} {got:>10.0f} {kdrop:>12.0f} {drops:>9.0f} {cpu:>7.2f} {per[b]:>11.0f} {machine:>10.2f}  {samples[b][-1][3]}")
    print(f"(packet / xdp CPU per packet of the recording process: {per['packet'] / max(per['xdp'], 1e-9):.2f}x; "
          "machine s: busy CPU of the whole machine during the traffic (generator, softirq, weir; "
          "the machine is shared, so other load is in it too). This kernel has no IRQ_TIME_ACCOUNTING: "
          "interrupt and softirq time is charged to whatever task runs, so each wake-up of the capture "
          "thread costs it more than the work it does, and AF_XDP wakes it ≈ 3x as often as TPACKET_V3 "
          "(bench/README.md, issue 20, session 18))")
finally:
    teardown()
    shutil.rmtree(tmp, ignore_errors=True)
