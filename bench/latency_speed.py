#!/usr/bin/env python3
"""weir latency on 10 M packets per side: how long matching takes, by stamp and by invariant-byte
hash, with a 1 s and a 0.1 s window, and how much memory (bounded by the window: at 1 Mpps a 1 s
window holds up to 2 M waiting packets). There is no peer that matches two captures (the usual
tool is a hand-written script), so the figures are absolute; each run's output is checked (every
packet matched, every latency exactly the 50 µs the inputs were built with).

A: `weir gen -w` at 1 Mpps, 4 flows, 60-byte frames; B (stamped): the same command 50 µs later;
B (hash): A shifted 50 µs by editcap (a peer builds it, same bytes).

usage: bench/latency_speed.py [--runs N] [--packets N]
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--packets", type=int, default=10_000_000)
args = ap.parse_args()

root = runner.repo_root()
target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir"], cwd=root, check=True)
weir = os.path.join(target, "release", "weir")
out = os.path.join(root, "bench", "out")
os.makedirs(out, exist_ok=True)
n = args.packets
a, b, bh = (os.path.join(out, f"lat-{x}-{n}.pcap") for x in ("a", "b", "bh"))
start = 1_700_000_000_000_000_000
gen = [weir, "gen", "--pps", "1000000", "-c", str(n), "--flows", "4", "--size", "60"]
if not os.path.exists(bh):
    subprocess.run(gen + ["--start", str(start), "-w", a], check=True, stderr=subprocess.DEVNULL)
    subprocess.run(gen + ["--start", str(start + 50_000), "-w", b], check=True, stderr=subprocess.DEVNULL)
    subprocess.run(["editcap", "-t", "0.00005", a, bh], check=True)
for f in (a, b, bh):  # page cache warm, as after reading the files from disk
    runner.warm(f)

cmds = [
    ("stamps, window 1 s", [weir, "latency", a, b]),
    ("stamps, window 0.1 s", [weir, "latency", "--window", "0.1", a, b]),
    ("hash, window 0.1 s", [weir, "latency", "--window", "0.1", "--no-stamps", a, bh]),
]
for name, cmd in cmds:
    doc = json.loads(subprocess.run(cmd + ["--json", "-"], capture_output=True, check=True).stdout)
    streams = doc["runs"][0]["streams"]
    recv = sum(s["received"] for s in streams)
    ok = recv == n and all(s["min_ns"] == 50_000 and s["max_ns"] == 50_000 for s in streams)
    print(f"check: {name}: {recv} of {n} matched, all at 50 µs: {ok}")
    if not ok:
        sys.exit(1)
med = runner.compare(cmds, runs=args.runs, warmup=0)
runner.report(f"weir latency, {n} packets per side, median of {args.runs}", med, cmds[0][0], 2 * n)
print()
for name, (wall, _, _) in med.items():
    print(f"{name:<24} {2 * n / wall / 1e6:6.2f} M packets/s (both sides)")
