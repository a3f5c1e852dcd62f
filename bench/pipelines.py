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

--ab BINARY runs the flows commands of a second binary too, interleaved with the first's in one
sitting (A/B: main against a branch). Each binary also runs `--json --parquet` with one file a
day (`--parquet-interval 86400`: the trace's 16 h in one file): the CPU difference against the
5-minute files, divided by the difference in files, is the cost of one file (writer, footer,
column writers, zstd contexts, create/link/remove), printed per binary.

--thread-cpu N: N more rounds of `--json --parquet` (5-minute files and one file a day) per
binary under `perf sched` (bench/sched_profile.py), printing the `weir-parquet` thread's own CPU
(ms, each run and the median) and the per-file part: firmer than the process's CPU in 10 ms
ticks.

usage: bench/pipelines.py [--runs 5] [--port 53] [--weir BINARY] [--skip-extract] [--profile]
                          [--interval S] [--ab BINARY] [--thread-cpu N]
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
ap.add_argument("--ab", help="a second weir binary whose flows commands run interleaved with the first's")
ap.add_argument("--thread-cpu", type=int, default=0, metavar="N",
                help="N rounds of the weir-parquet thread's CPU under perf sched, per binary")
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
    pqopts = ["--parquet", "{PQ}"] + (["--parquet-interval", args.interval] if args.interval else [])
    binaries = [("", weir)] + ([(" [B]", args.ab)] if args.ab else [])
    flows_cmds = []
    for tag, binary in binaries:
        base = [binary, "flows", "-r", trace]
        flows_cmds += [
            ("flows --json" + tag, base + ["--json", "/dev/null"]),
            ("flows --parquet" + tag, base + pqopts),
            ("flows --json --parquet" + tag, base + ["--json", "/dev/null"] + pqopts),
            ("flows --json --parquet 1 file" + tag,
             base + ["--json", "/dev/null", "--parquet", "{PQ}", "--parquet-interval", "86400"]),
        ]
    # every Parquet run writes into a directory of its own, all removed at the end: removing
    # the previous run's files inside the timed command (as before session 18) timed `sh` and
    # `rm -rf` with it, and ext4 then spent a third of the sink's time skipping the inodes
    # just freed (`recently_deleted` under `ext4_create`), which a sensor writing a file every
    # few minutes does not meet
    fresh = iter(range(1 << 30))

    def argv(cmd):
        """The command with a fresh Parquet directory, and that directory."""
        d = os.path.join(tmp, f"pq-{next(fresh)}")
        return [d if a == "{PQ}" else a for a in cmd], d

    samples = {name: [] for name, _ in flows_cmds}
    last_dir = {}
    for r in range(args.runs + 1):  # the first round warms up
        for name, cmd in flows_cmds:
            a, last_dir[name] = argv(cmd)
            m = runner.measure(a)
            if r:
                samples[name].append(m)
    med = {n: tuple(statistics.median(x[i] for x in s) for i in range(3)) for n, s in samples.items()}
    runner.report("flows: Parquet sink (3 M packets)", med, "flows --json")

    def files_of(name):
        """(files, bytes) of the Parquet directory of command `name`'s last run."""
        d = last_dir[name]
        size = sum(os.path.getsize(os.path.join(a, f)) for a, _, fs in os.walk(d) for f in fs)
        return sum(1 for _, _, fs in os.walk(d) for f in fs if f.endswith(".parquet")), size

    for tag, binary in binaries:
        j, jp, one = (med["flows --json" + tag], med["flows --json --parquet" + tag],
                      med["flows --json --parquet 1 file" + tag])
        files, size = files_of("flows --json --parquet" + tag)
        files1, _ = files_of("flows --json --parquet 1 file" + tag)
        print(f"{binary}: --parquet added to --json: {100 * (jp[0] / j[0] - 1):+.1f} % wall, "
              f"{100 * (jp[1] / j[1] - 1):+.1f} % CPU (target <= +10 % wall); one file a day: "
              f"{100 * (one[0] / j[0] - 1):+.1f} % wall, {100 * (one[1] / j[1] - 1):+.1f} % CPU")
        print(f"  parquet files: {files} files, {size / 1e6:.2f} MB; per file (CPU of {files} files "
              f"- CPU of {files1}) / {files - files1}: {1e3 * (jp[1] - one[1]) / max(1, files - files1):.3f} ms")
    print("load average (1, 5, 15 min) at the end: %.2f %.2f %.2f" % os.getloadavg())
    if args.thread_cpu:
        import sched_profile
        thread_ms = {}
        for _ in range(args.thread_cpu):
            for tag, binary in binaries:
                for one, extra in (("5 min", []), ("1 file", ["--parquet-interval", "86400"])):
                    cmd, d = argv([binary, "flows", "-r", trace, "--json", "/dev/null", "--parquet", "{PQ}"] + extra)
                    p = sched_profile.profile(cmd)
                    ms = sum(t[2] for t in p["threads"] if t[0].startswith("weir-parquet"))
                    files = sum(1 for _, _, fs in os.walk(d) for f in fs if f.endswith(".parquet"))
                    thread_ms.setdefault((binary, one), []).append((ms, files))
        print("\nweir-parquet thread CPU (perf sched), ms per run:")
        for tag, binary in binaries:
            m5, m1 = thread_ms[(binary, "5 min")], thread_ms[(binary, "1 file")]
            a, b = statistics.median(x[0] for x in m5), statistics.median(x[0] for x in m1)
            nf = m5[0][1] - m1[0][1]
            print(f"  {binary}: 5-minute files {[round(x[0]) for x in m5]} median {a:.0f}; one file a day "
                  f"{[round(x[0]) for x in m1]} median {b:.0f}; per file ({a:.0f} - {b:.0f}) / {nf} = "
                  f"{1e3 * (a - b) / max(1, nf):.0f} us")
        print("load average (1, 5, 15 min) at the end: %.2f %.2f %.2f" % os.getloadavg())
    if args.profile:
        import sched_profile
        for name, cmd in flows_cmds:
            sched_profile.print_profile(name, sched_profile.profile(argv(cmd)[0]))

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
