#!/usr/bin/env python3
"""weir http vs tshark: HTTP transaction logs from the >= 3 M-packet bench trace, page cache warm,
median of N interleaved runs (wall, CPU, peak RSS), speed-up and GB/s of trace per core of CPU.

weir:   weir http -r TRACE -w /dev/null --tls-log /dev/null
tshark: tshark -r TRACE -Y http -T fields -e tcp.stream -e http.request.method -e http.host
        -e http.request.uri -e http.response.code      (the same facts, its fastest form: no
        tree printed, fields only)

tshark is slow on the full trace (minutes per run), so by default it runs on a prefix of the trace
(--tshark-packets, default 300 000 packets, cut with editcap) and its time is scaled to the full
trace by bytes; the prefix and the scaling are printed. Use --tshark-packets 0 to run it on the
whole trace.

usage: bench/http_vs_tshark.py [--runs N] [--packets N] [--tshark-packets N]
"""

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=5)
ap.add_argument("--packets", type=int, default=3_000_000)
ap.add_argument("--tshark-packets", type=int, default=300_000)
args = ap.parse_args()

root = runner.repo_root()
out = os.path.join(root, "bench", "out")
os.makedirs(out, exist_ok=True)
subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir", "-p", "weir-bench"], cwd=root, check=True)
weir = os.path.join(root, "target", "release", "weir")
trace = os.path.join(out, f"trace-{args.packets}.pcap")
if not os.path.exists(trace):
    subprocess.run([os.path.join(root, "target", "release", "mktrace"), "--packets", str(args.packets), "-w", trace], check=True)
runner.warm(trace)
size = os.path.getsize(trace)

tshark_fields = ["-Y", "http", "-T", "fields", "-e", "tcp.stream", "-e", "http.request.method",
                 "-e", "http.host", "-e", "http.request.uri", "-e", "http.response.code"]
tmp = tempfile.mkdtemp(prefix="weir-bench-http-")
tshark_trace = trace
if args.tshark_packets:
    tshark_trace = os.path.join(tmp, "prefix.pcap")
    subprocess.run(["editcap", "-r", trace, tshark_trace, f"1-{args.tshark_packets}"], check=True)
    runner.warm(tshark_trace)
scale = size / os.path.getsize(tshark_trace)

cmds = [
    ("weir http", [weir, "http", "-r", trace, "-w", "/dev/null", "--tls-log", os.path.join(tmp, "tls.jsonl")]),
    ("tshark -Y http", ["tshark", "-r", tshark_trace] + tshark_fields),
]
med = runner.compare(cmds, runs=args.runs)
wall, cpu, rss = med["tshark -Y http"]
med["tshark (scaled)"] = (wall * scale, cpu * scale, rss)
runner.report(f"http: {os.path.basename(trace)} ({size / 1e9:.3f} GB), median of {args.runs}; "
              f"tshark on {os.path.basename(tshark_trace)} x {scale:.2f}",
              med, "tshark (scaled)", args.packets)
w = med["weir http"]
t = med["tshark (scaled)"]
print(f"\nweir http: {size / w[1] / 1e9:.2f} GB/s of trace per core of CPU, "
      f"{size / w[0] / 1e9:.2f} GB/s wall")
print(f"weir vs tshark: {t[0] / w[0]:.1f}x wall, {t[1] / w[1]:.1f}x cpu")
r = subprocess.run([weir, "http", "-r", trace, "-w", "/dev/null", "--tls-log", os.path.join(tmp, "tls.jsonl")],
                   capture_output=True, text=True, check=True)
print(r.stderr.strip())
print(f"cpu: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}; "
      f"load average {os.getloadavg()}")
