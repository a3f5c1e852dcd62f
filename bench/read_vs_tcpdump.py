#!/usr/bin/env python3
"""weir read vs tcpdump -r: filter a >= 3 M-packet trace built from the corpus with 'tcp port 80'
and write the matches, page cache warm, median of N interleaved runs; then check that both wrote
the same packets (weir --micro output is byte-compared with tcpdump's).

usage: bench/read_vs_tcpdump.py [--runs N] [--packets N] [--expr EXPR] [--weir NAME=BIN ...]

With --weir (repeatable), those weir binaries run instead of this tree's (not built then), all
interleaved in the same run (an A/B of two builds on a loaded machine).
"""

import argparse
import filecmp
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=7)
ap.add_argument("--packets", type=int, default=3_000_000)
ap.add_argument("--expr", default="tcp port 80")
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
    weirs = [(f"weir read -w ({n})", b) for n, b in args.weir]
else:
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir", "-p", "weir-bench"], cwd=root, check=True)
    weirs = [("weir read -w", os.path.join(root, "target", "release", "weir"))]
trace = os.path.join(out, f"trace-{args.packets}.pcap")
if not os.path.exists(trace):
    subprocess.run([os.path.join(root, "target", "release", "mktrace"), "--packets", str(args.packets), "-w", trace], check=True)
packets = int(subprocess.run(["capinfos", "-T", "-r", "-c", trace], capture_output=True, text=True, check=True).stdout.split("\t")[1])
size = os.path.getsize(trace)
runner.warm(trace)  # page cache warm, as after reading the file from disk

w_out, t_out, w_micro = (os.path.join(out, n) for n in ("read-weir.pcap", "read-tcpdump.pcap", "read-weir-micro.pcap"))
cmds = [
    ("tcpdump -r -w", ["tcpdump", "-r", trace, "-w", t_out, args.expr]),
] + [(name, [weir, "read", "-r", trace, "-w", w_out, args.expr]) for name, weir in weirs]
med = runner.compare(cmds, runs=args.runs)
runner.report(f"filter '{args.expr}' on {packets} packets ({size / 1e9:.2f} GB), median of {args.runs}", med, "tcpdump -r -w", packets)

matched = int(subprocess.run(["capinfos", "-T", "-r", "-c", t_out], capture_output=True, text=True, check=True).stdout.split("\t")[1])
all_same = True
for name, weir in weirs:
    subprocess.run([weir, "read", "--micro", "-r", trace, "-w", w_micro, args.expr], check=True)
    same = filecmp.cmp(w_micro, t_out, shallow=False)
    all_same &= same
    print(f"\n{name}: output {matched} packets; --micro output byte-identical to tcpdump's: {same}")
    ratio = med["tcpdump -r -w"][0] / med[name][0]
    print(f"ratio (tcpdump wall / {name} wall): {ratio:.2f}x")
sys.exit(0 if all_same else 1)
