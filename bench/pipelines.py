#!/usr/bin/env python3
"""Pipelines: the Parquet sink's cost and the merged extract over two sensors.

1. `weir flows -r TRACE` (the >= 3 M-packet bench trace) with JSON lines to /dev/null, with
   Parquet files only, and with both; target: --parquet adds at most 10 % to the run.
2. Two stores (the trace recorded twice, each once), each served by `weir serve` on loopback;
   `weir extract --sensor A,B` merged against the sum of `weir extract A` + `weir extract B`
   (for a port filter and for everything), medians of --runs, wall, CPU, peak RSS.

With --profile, the three flows commands run once more under `perf sched record -a`
(bench/sched_profile.py): per thread of weir (the Parquet sink's is `weir-parquet`) its CPU, the
time it waited for a core and when it last ran. --interval S adds `--parquet-interval S` to the
Parquet runs (default: the 5-minute default).

usage: bench/pipelines.py [--runs 5] [--port 53] [--weir BINARY] [--skip-extract] [--profile]
                          [--interval S]
"""

import argparse
import os
import re
import shutil
import statistics
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
ap.add_argument("--profile", action="store_true", help="one more run of each flows command under perf sched")
ap.add_argument("--interval", help="--parquet-interval for the Parquet runs (seconds)")
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
    pqopts = ["--parquet", "{PQ}"] + (["--parquet-interval", args.interval] if args.interval else [])
    flows_cmds = [
        ("flows --json", base + ["--json", "/dev/null"]),
        ("flows --parquet", base + pqopts),
        ("flows --json --parquet", base + ["--json", "/dev/null"] + pqopts),
    ]
    # every Parquet run writes into a directory of its own, all removed at the end: removing
    # the previous run's files inside the timed command (as before session 18) timed `sh` and
    # `rm -rf` with it, and ext4 then spent a third of the sink's time skipping the inodes
    # just freed (`recently_deleted` under `ext4_create`), which a sensor writing a file every
    # few minutes does not meet
    fresh = iter(range(1 << 30))

    def argv(cmd):
        return [os.path.join(tmp, f"pq-{next(fresh)}") if a == "{PQ}" else a for a in cmd]

    samples = {name: [] for name, _ in flows_cmds}
    for r in range(args.runs + 1):  # the first round warms up
        for name, cmd in flows_cmds:
            m = runner.measure(argv(cmd))
            if r:
                samples[name].append(m)
    med = {n: tuple(statistics.median(x[i] for x in s) for i in range(3)) for n, s in samples.items()}
    pq = os.path.join(tmp, f"pq-{next(fresh) - 1}")
    runner.report("flows: Parquet sink (3 M packets)", med, "flows --json")
    j, p, jp = med["flows --json"], med["flows --parquet"], med["flows --json --parquet"]
    print(f"--parquet added to --json: {100 * (jp[0] / j[0] - 1):+.1f} % wall, "
          f"{100 * (jp[1] / j[1] - 1):+.1f} % CPU (target <= +10 % wall)")
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(pq) for f in fs)
    files = sum(1 for _, _, fs in os.walk(pq) for f in fs if f.endswith(".parquet"))
    print(f"parquet files: {files} files, {size / 1e6:.2f} MB")
    print("load average (1, 5, 15 min) at the end: %.2f %.2f %.2f" % os.getloadavg())
    if args.profile:
        import sched_profile
        for name, cmd in flows_cmds:
            sched_profile.print_profile(name, sched_profile.profile(argv(cmd)))

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
