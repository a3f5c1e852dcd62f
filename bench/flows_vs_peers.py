#!/usr/bin/env python3
"""weir flows vs softflowd and nfpcapd: meter a >= 3 M-packet trace built from the corpus into
flows, page cache warm, median of N interleaved runs (wall, CPU, peak RSS, ratios).

Every tool gets the same idle / active timeouts (30 s / 120 s) and exports NetFlow v9 to a UDP
port nobody listens on (softflowd, weir), or writes its own nfcapd files (nfpcapd, which has no
NetFlow export) to a scratch directory. weir runs with 1 and 2 workers. softflowd in -r mode only
expires flows when its table (-m) is full, so it is given weir's table size (-m 1000000) to do
the same metering work without eviction churn.

usage: bench/flows_vs_peers.py [--runs N] [--packets N] [--weir NAME=BIN ...]

With --weir (repeatable), those weir binaries run instead of this tree's (not built then), all
interleaved with the peers in the same run (an A/B of two builds on a loaded machine).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=5)
ap.add_argument("--packets", type=int, default=3_000_000)
ap.add_argument("--port", type=int, default=9, help="UDP port nobody listens on")
def weir_bin(v):
    name, sep, path = v.partition("=")
    if not sep or not name or not os.access(path, os.X_OK):
        raise argparse.ArgumentTypeError(f"{v!r}: want NAME=BIN, BIN an executable weir")
    return name, path


ap.add_argument("--weir", action="append", default=[], metavar="NAME=BIN", type=weir_bin,
                help="a weir binary to run (repeatable, interleaved; default: this tree's, built)")
args = ap.parse_args()

root = runner.repo_root()
out = os.path.join(root, "bench", "out")
os.makedirs(out, exist_ok=True)
if args.weir:
    weirs = [(f" ({n})", b) for n, b in args.weir]
else:
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir", "-p", "weir-bench"], cwd=root, check=True)
    weirs = [("", os.path.join(root, "target", "release", "weir"))]
trace = os.path.join(out, f"trace-{args.packets}.pcap")
if not os.path.exists(trace):
    subprocess.run([os.path.join(root, "target", "release", "mktrace"), "--packets", str(args.packets), "-w", trace], check=True)
runner.warm(trace)  # page cache warm, as after reading the file from disk

for tool in ("softflowd", "nfpcapd"):
    if not shutil.which(tool):
        sys.exit(f"{tool} is not installed (apt-get install softflowd nfdump)")

collector = f"127.0.0.1:{args.port}"
nfdir = tempfile.mkdtemp(prefix="weir-bench-nfpcapd-")
stats = os.path.join(out, "flows-weir-stats.json")
def wcmd(weir):
    return [weir, "flows", "-r", trace, "--export", f"udp://{collector}", "--format", "v9",
            "--idle-timeout", "30", "--active-timeout", "120"]


names = []
cmds = []
for tag, weir in weirs:
    for w in (1, 2):
        name = f"weir flows ({w} worker{'s' if w > 1 else ''}){tag}"
        names.append(name)
        cmds.append((name, wcmd(weir) + ["--workers", str(w)]))
cmds += [
    ("softflowd -r", ["softflowd", "-r", trace, "-v", "9", "-n", collector, "-m", "1000000",
                      "-t", "general=30s", "-t", "maxlife=120s"]),
    ("nfpcapd -r", ["nfpcapd", "-r", trace, "-l", nfdir, "-e", "120,30"]),
]
try:
    med = runner.compare(cmds, runs=args.runs)
finally:
    shutil.rmtree(nfdir, ignore_errors=True)

# one more weir run for the counters (packets, flows, memory per flow)
subprocess.run(wcmd(weirs[-1][1]) + ["--stats", stats], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
with open(stats) as f:
    st = json.load(f)
packets = st["packets_read"]

runner.report(f"flows: {os.path.basename(trace)}, {packets} packets, median of {args.runs}",
              med, "softflowd -r", packets)
print(f"\nweir: {st['flows']} flows, {st['records']} records, peak {st['peak_flows']} active, "
      f"{st['bytes_per_flow']:.1f} bytes per flow")
for name in names:
    for peer in ("softflowd -r", "nfpcapd -r"):
        print(f"{name} vs {peer}: {med[peer][0] / med[name][0]:.2f}x wall, "
              f"{med[peer][1] / med[name][1]:.2f}x cpu")
