#!/usr/bin/env python3
"""Pipelines: the Parquet sink's cost and the merged extract over two sensors.

1. `weir flows -r TRACE` (the >= 3 M-packet bench trace) with JSON lines to /dev/null, with
   Parquet files only, and with both; target: --parquet adds at most 10 % to the run.
2. Two stores (the trace recorded twice, each once), each served by `weir serve` on loopback;
   `weir extract --sensor A,B` merged against the sum of `weir extract A` + `weir extract B`
   (for a port filter and for everything), medians of --runs, wall, CPU, peak RSS.

usage: bench/pipelines.py [--runs 5] [--port 53] [--weir BINARY] [--skip-extract]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=5)
ap.add_argument("--port", default="53")
ap.add_argument("--weir", help="a weir binary to measure instead of target/release/weir")
ap.add_argument("--skip-extract", action="store_true", help="only the Parquet part")
args = ap.parse_args()

root = runner.repo_root()
out = os.path.join(root, "bench", "out")
weir = args.weir or os.path.join(root, "target", "release", "weir")
trace = os.path.join(out, "trace-3000000.pcap")
if not os.path.exists(weir):
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir"], cwd=root, check=True)
runner.warm(trace)
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = re.search(r"Model name:\s*(.*)", cpu).group(1)
print(f"cpu: {model}, {os.cpu_count()} cores")

tmp = tempfile.mkdtemp(prefix="weir-bench-pipelines-")
try:
    pq = os.path.join(tmp, "pq")
    base = [weir, "flows", "-r", trace]
    med = runner.compare(
        [
            ("flows --json", base + ["--json", "/dev/null"]),
            ("flows --parquet", ["sh", "-c", f'rm -rf {pq}; exec "$@"', "-"] + base + ["--parquet", pq]),
            ("flows --json --parquet", ["sh", "-c", f'rm -rf {pq}; exec "$@"', "-"] + base
             + ["--json", "/dev/null", "--parquet", pq]),
        ],
        runs=args.runs,
    )
    runner.report("flows: Parquet sink (3 M packets)", med, "flows --json")
    j, p, jp = med["flows --json"], med["flows --parquet"], med["flows --json --parquet"]
    print(f"--parquet added to --json: {100 * (jp[0] / j[0] - 1):+.1f} % wall, "
          f"{100 * (jp[1] / j[1] - 1):+.1f} % CPU (target <= +10 % wall)")
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(pq) for f in fs)
    print(f"parquet files: {size / 1e6:.1f} MB")

    if args.skip_extract:
        sys.exit(0)
    stores = []
    for name in ("a", "b"):
        s = os.path.join(tmp, name)
        subprocess.run([weir, "record", "-o", s, "--segment-mib", "256", "-r", trace],
                       check=True, stderr=subprocess.DEVNULL)
        stores.append(s)
    servers, urls = [], []
    for s in stores:
        p = subprocess.Popen([weir, "serve", "--listen", "127.0.0.1:0", "--store", s],
                             stderr=subprocess.PIPE, text=True)
        line = p.stderr.readline()
        urls.append(line.strip().rsplit(" ", 1)[-1])
        servers.append(p)
    try:
        o = os.path.join(tmp, "out.pcap")
        for expr in ([f"port {args.port}"], []):
            cmds = [
                ("merged --sensor A,B", [weir, "extract", "--sensor", ",".join(urls), "-w", o] + expr),
                ("local extract A", [weir, "extract", stores[0], "-w", o] + expr),
                ("local extract B", [weir, "extract", stores[1], "-w", o] + expr),
            ]
            med = runner.compare(cmds, runs=args.runs)
            runner.report(f"extract `{' '.join(expr)}` over two sensors", med, "merged --sensor A,B")
            m, a, b = med["merged --sensor A,B"], med["local extract A"], med["local extract B"]
            print(f"merged / (A + B): wall {m[0] / (a[0] + b[0]):.2f}, "
                  f"client CPU {m[1] / (a[1] + b[1]):.2f} (servers' CPU not counted)")
    finally:
        for p in servers:
            p.kill()
            p.wait()
finally:
    shutil.rmtree(tmp, ignore_errors=True)
