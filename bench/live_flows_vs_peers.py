#!/usr/bin/env python3
"""weir flows -i vs softflowd -i: live flow metering of a veth pair, side by side (session 21,
s21-wake). The same generator (trafgen, pinned to CPU 1, top speed, bench/veth.py's frames)
sends the same frames to each meter in turn (interleaved rounds, medians):

- diverse: 64-byte UDP frames with a random source port per packet and 4 096 source addresses
  (nearly every packet a new flow: the flow table's insert, eviction and export paths),
- one-flow: 64-byte frames that all carry the same keys.

Both meters export NetFlow v9 over UDP to a socket this script binds on 127.0.0.1 and never
reads (the kernel drops what overflows it, silently: no ICMP error for either exporter), with
the same table size (-m / --max-flows) and their default timeouts (a run is shorter than any of
them: flows end by eviction when the table is full, and at the stop). For each run: the CPU time
of the meter's process (ticks from /proc/PID/stat and the exact schedstat run time) between a
reading after start-up and one after the traffic, per packet received; its peak RSS; the whole
machine's busy CPU over the same window per packet; counters reconciled: frames sent on the
generator's side = received on the meter's side = metered + every drop (kernel, buffer, for weir
also filtered and damaged); and the flows exported (weir's --stats JSON; softflowd's
`softflowctl statistics` after `expire-all`).

Then the idle row: each of `weir flows -i`, `weir run` (a sensor config: record + flows + a
stream + http + voip on the interface) and `softflowd -i` on an idle interface for --idle seconds: CPU time and voluntary
context switches (wake-ups) per second, summed over every thread.

usage: sudo bench/live_flows_vs_peers.py [--runs N] [--packets N] [--traffic diverse,one-flow]
       [--weir NAME=BIN ...] [--idle S] [--tag T]
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402
import veth  # noqa: E402


def weir_bin(v):
    name, sep, path = v.partition("=")
    if not sep or not name or not os.access(path, os.X_OK):
        raise argparse.ArgumentTypeError(f"{v!r}: want NAME=BIN, BIN an executable weir")
    return name, os.path.abspath(path)


ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--packets", type=int, default=2_000_000)
ap.add_argument("--traffic", default="diverse,one-flow")
ap.add_argument("--max-flows", type=int, default=1_000_000, help="both meters' table size")
ap.add_argument("--weir", action="append", default=[], metavar="NAME=BIN", type=weir_bin,
                help="a weir binary to run (repeatable, interleaved; default: this tree's, built)")
ap.add_argument("--idle", type=float, default=10.0, help="seconds of the idle row (0: none)")
ap.add_argument("--no-traffic", action="store_true", help="the idle row only")
ap.add_argument("--tag", default="", help="suffix of the namespace and veth names (at most 6 characters)")
args = ap.parse_args()
if len(args.tag) > 6:
    sys.exit("--tag: at most 6 characters (interface names are at most 15)")
for tool in ("softflowd", "softflowctl", "trafgen"):
    if not shutil.which(tool):
        sys.exit(f"{tool} is not installed (scripts/setup.sh)")
root = runner.repo_root()
if not args.weir:
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir"], cwd=root, check=True)
    args.weir = [("weir", os.path.join(root, "target", "release", "weir"))]

PAIR = veth.Pair(f"s21w{args.tag}", f"s21w{args.tag}a", f"s21w{args.tag}b")
IF = PAIR.a

# The collector nobody reads: bound, so that exports are not refused.
sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sink.bind(("127.0.0.1", 0))
PORT = sink.getsockname()[1]


def start(tool, tmp):
    """Starts meter `tool` = (name, kind, bin) on IF; returns (process, log path, wait for
    readiness)."""
    name, kind, binary = tool
    log = os.path.join(tmp, f"log-{name}")
    if kind == "weir flows":
        cmd = [binary, "flows", "-i", IF, "--export", f"udp://127.0.0.1:{PORT}", "--format", "v9",
               "--max-flows", str(args.max_flows), "--stats", os.path.join(tmp, "stats.json")]
        ready = "metering flows on"
    elif kind == "weir run":
        store = os.path.join(tmp, "store")
        shutil.rmtree(store, ignore_errors=True)
        conf = os.path.join(tmp, "sensor.toml")
        with open(conf, "w") as f:
            fifo = os.path.join(tmp, "stream.fifo")
            if not os.path.exists(fifo):
                os.mkfifo(fifo)
            f.write(SENSOR_CONF.format(iface=IF, store=store, port=PORT, fifo=fifo, tmp=tmp))
        cmd = [binary, "run", conf]
        ready = None
    else:
        cmd = ["softflowd", "-d", "-i", IF, "-n", f"127.0.0.1:{PORT}", "-v", "9", "-m", str(args.max_flows),
               "-c", os.path.join(tmp, "softflowd.ctl"), "-p", os.path.join(tmp, "softflowd.pid")]
        ready = None
    out = open(log, "w+")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    t = time.time()
    while ready and ready not in open(log).read():
        if time.time() - t > 20 or p.poll() is not None:
            sys.exit(f"{name} did not start: {open(log).read()}")
        time.sleep(0.05)
    time.sleep(1.0 if ready else 2.0)
    if p.poll() is not None:
        sys.exit(f"{name} ended at start: {open(log).read()}")
    if kind.startswith("weir"):
        veth.wait_populated(p.pid)
    return p, log


# `weir run`'s config of the idle row: a recorder with its index, a flow meter, a stream to a
# FIFO nobody opens, the HTTP and the VoIP analyzers on IF (packaging/weir.example.toml).
SENSOR_CONF = """
[[record]]
interface = "{iface}"
store = "{store}"
buffer_mib = 64
[record.flows]
export = "udp://127.0.0.1:{port}"
export_format = "v9"
[[stream]]
to = "{fifo}"
[[http]]
log = "{tmp}/http.jsonl"
[[voip]]
calls = "{tmp}/calls.jsonl"
"""


def softflowctl(tmp, *cmd):
    return subprocess.run(["softflowctl", "-c", os.path.join(tmp, "softflowd.ctl")] + list(cmd),
                          capture_output=True, text=True, timeout=30).stdout


def stop(p, kind, tmp):
    """Stops the meter; returns (flows exported, metered, drops) from its own counters and its
    log text."""
    flows = None
    if kind == "softflowd":
        softflowctl(tmp, "expire-all")
        time.sleep(0.5)
        text = softflowctl(tmp, "statistics")
        p.send_signal(signal.SIGTERM)
    else:
        p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    return text if kind == "softflowd" else None


def one(tool, tmp, send):
    name, kind, _ = tool
    p, log = start(tool, tmp)
    la0, lb0 = runner.link_stats(PAIR.a), runner.link_stats(PAIR.b, PAIR.ns)
    c0, r0, m0 = runner.cpu_s(p.pid), veth.sched_ns(p.pid), runner.machine_busy_s()
    w0 = time.time()
    veth.sh(*send)
    time.sleep(0.5)
    c1, r1, m1 = runner.cpu_s(p.pid), veth.sched_ns(p.pid), runner.machine_busy_s()
    wall = time.time() - w0
    rss = veth.peak_rss_kib(p.pid)
    ctl = stop(p, kind, tmp)
    la1, lb1 = runner.link_stats(PAIR.a), runner.link_stats(PAIR.b, PAIR.ns)
    text = open(log).read()
    sent = lb1["tx_packets"] - lb0["tx_packets"]
    rx = la1["rx_packets"] - la0["rx_packets"]
    if kind == "weir flows":
        st = json.load(open(os.path.join(tmp, "stats.json")))
        got, metered, flows, drops = weir_counters(st, text)
    else:
        got, metered, flows, drops = softflowd_counters(ctl, text)
    return dict(cpu=c1 - c0, run=(r1 - r0) / 1e9, machine=m1 - m0, wall=wall, rss=rss, sent=sent, rx=rx,
                got=got, metered=metered, flows=flows, drops=drops, text=text if kind != "softflowd" else ctl)


def find(d, *path):
    for k in path:
        d = d[k]
    return d


def weir_counters(st, text):
    """(packets received by capture, metered, flows exported, drops) from weir's --stats JSON and
    its summary."""
    m = re.search(r"kernel: (\d+) received, (\d+) dropped; capture: (\d+) read, (\d+) filtered out; "
                  r"buffer: (\d+) dropped \(full\), (\d+) dropped \(too long\)", text)
    if not m:
        sys.exit(f"cannot parse weir's summary:\n{text}")
    kernel, kdrop, read, filtered, bfull, blong = (int(x) for x in m.groups())
    drops = kdrop + bfull + blong + filtered + st["dropped_non_ip"] + st["dropped_decode_error"]
    return kernel, st["packets_metered"], st["records"], drops


def softflowd_counters(ctl, text):
    """(packets received, metered, flows exported, drops) from `softflowctl statistics`."""
    num = lambda pat: int(m[1]) if (m := re.search(pat, ctl)) else 0
    if "Packets received by libpcap" not in ctl:
        sys.exit(f"cannot parse softflowctl statistics:\n{ctl}")
    got = num(r"Packets received by libpcap: (\d+)")
    metered = num(r"Packets processed: (\d+)")
    drops = num(r"Packets dropped by libpcap: (\d+)") + num(r"Packets dropped by interface: (\d+)") \
        + num(r"Ignored packets: (\d+)")
    flows = num(r"Flows exported: (\d+)")
    return got, metered, flows, drops


def idle_row(tool, tmp):
    """CPU seconds and voluntary context switches per second of `tool` on the idle IF."""
    name, kind, _ = tool
    p, log = start(tool, tmp)
    time.sleep(1.0)
    c0, r0, (v0, n0) = runner.cpu_s(p.pid), veth.sched_ns(p.pid), veth.ctx_switches(p.pid)
    t0 = time.time()
    time.sleep(args.idle)
    c1, r1, (v1, n1) = runner.cpu_s(p.pid), veth.sched_ns(p.pid), veth.ctx_switches(p.pid)
    dt = time.time() - t0
    rss = veth.peak_rss_kib(p.pid)
    stop(p, kind, tmp)
    return dict(cpu_ms_s=(c1 - c0) / dt * 1e3, run_ms_s=(r1 - r0) / 1e6 / dt, wakeups_s=(v1 - v0) / dt,
                invol_s=(n1 - n0) / dt, rss=rss, threads=None)


def workloads(tmp):
    for kind in args.traffic.split(","):
        if kind == "diverse":
            conf = os.path.join(tmp, "diverse64.cfg")
            veth.trafgen_conf(PAIR, 64, conf, diverse=True)
            yield (f"{args.packets} frames of 64 bytes, random source port, 4096 source addresses, from trafgen",
                   veth.trafgen(PAIR, conf, args.packets))
        elif kind == "one-flow":
            conf = os.path.join(tmp, "frame64.cfg")
            veth.trafgen_conf(PAIR, 64, conf)
            yield (f"{args.packets} frames of 64 bytes, one flow, from trafgen", veth.trafgen(PAIR, conf, args.packets))
        else:
            sys.exit(f"unknown traffic {kind} (diverse, one-flow)")


tools = [(n, "weir flows", b) for n, b in args.weir] + [("softflowd", "softflowd", None)]
print(f"load average {os.getloadavg()}; " + (subprocess.run(["lscpu"], capture_output=True, text=True).stdout
      .split("Model name:")[1].splitlines()[0].strip() if "Model name:" in subprocess.run(["lscpu"], capture_output=True, text=True).stdout else ""))
PAIR.setup()
# No IPv6 on the pair: its neighbour discovery would add packets outside the measured window.
for pre, dev in (([], PAIR.a), (["ip", "netns", "exec", PAIR.ns], PAIR.b)):
    veth.sh(*pre, "sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1")
tmp = tempfile.mkdtemp(prefix="weir-bench-liveflows-")
try:
    if not args.no_traffic:
        for title, send in workloads(tmp):
            samples = {t[0]: [] for t in tools}
            for _ in range(args.runs):
                for t in tools:
                    samples[t[0]].append(one(t, tmp, send))
            print(f"\n{title} (median of {args.runs} runs; load average now {os.getloadavg()[0]:.1f})")
            print(f"{'meter':<12} {'received':>9} {'drops':>8} {'flows':>9} {'cpu s':>6} {'ns/pkt':>7} "
                  f"{'sched ns/pkt':>12} {'vs softflowd':>12} {'machine ns/pkt':>14} {'peak MiB':>8}")
            med = lambda t, k: statistics.median(s[k] for s in samples[t])
            per = {t: med(t, "cpu") / max(med(t, "got") or 1, 1) * 1e9 for t in samples}
            for t in samples:
                got = med(t, "got") or 0
                print(f"{t:<12} {got:>9.0f} {med(t, 'drops') or 0:>8.0f} {med(t, 'flows') or 0:>9.0f} {med(t, 'cpu'):>6.2f} "
                      f"{per[t]:>7.0f} {med(t, 'run') / max(got, 1) * 1e9:>12.0f} {per['softflowd'] / max(per[t], 1e-9):>11.2f}x "
                      f"{med(t, 'machine') / max(got, 1) * 1e9:>14.0f} {med(t, 'rss') / 1024:>8.1f}")
            print("counters of every run (sent on the generator's side = received on the meter's = metered + drops):")
            for t in samples:
                for s in samples[t]:
                    ok = s["sent"] == s["rx"] == s["got"] == s["metered"] + s["drops"]
                    print(f"  {t}: sent {s['sent']}, rx {s['rx']}, received {s['got']}, metered {s['metered']}, "
                          f"drops {s['drops']}, flows {s['flows']}: "
                          + ("reconciled" if ok else f"NOT RECONCILED (received - metered - drops = {s['got'] - s['metered'] - s['drops']})"))
            print("(ratio: softflowd's CPU per packet / the meter's; machine: busy CPU of the whole machine "
                  "over the window, generator and softirq included)")
    if args.idle > 0:
        idle_tools = [(n, "weir flows", b) for n, b in args.weir] + [(f"{n} run", "weir run", b) for n, b in args.weir] \
            + [("softflowd", "softflowd", None)]
        rows = {t[0]: [] for t in idle_tools}
        for _ in range(max(1, args.runs)):
            for t in idle_tools:
                rows[t[0]].append(idle_row(t, tmp))
        print(f"\nidle: {args.idle:.0f} s with no traffic (median of {max(1, args.runs)}; load average now {os.getloadavg()[0]:.1f})")
        print(f"{'process':<14} {'cpu ms/s':>9} {'sched ms/s':>10} {'wake-ups/s':>10} {'invol/s':>8} {'peak MiB':>8}")
        for t, rs in rows.items():
            m = lambda k: statistics.median(r[k] for r in rs)
            print(f"{t:<14} {m('cpu_ms_s'):>9.2f} {m('run_ms_s'):>10.2f} {m('wake-ups/s' if False else 'wakeups_s'):>10.0f} "
                  f"{m('invol_s'):>8.1f} {m('rss') / 1024:>8.1f}")
        print("(wake-ups: voluntary context switches of every thread, per second)")
finally:
    PAIR.teardown()
    shutil.rmtree(tmp, ignore_errors=True)
