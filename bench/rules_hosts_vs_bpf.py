#!/usr/bin/env python3
"""N `host` rules in weir against the BPF program of the same N hosts, compile and run measured.

The issue's target: 10 000 host rules ≥ 50× faster than the BPF program of the same hosts
(compile + run). libpcap's optimizer does not finish a chain of 10 000 `host` terms in minutes
(rules_vs_bpf.py gives up after --fit-timeout), so the BPF side is measured two ways:

* `tcpdump -O` (libpcap's optimizer off): compiles in seconds and runs the unoptimised chain over
  the whole trace — compile + run measured end to end, interleaved with weir, medians of --runs;
* `tcpdump -d` with the optimizer (what tcpdump does by default): compile time alone, with
  --opt-timeout (run last; a lower bound when it is stopped).

weir: `weir read -r TRACE -w /dev/null --rules FILE` with `default drop` + one `host H -> pass`
per host (parse + compile + run). Both outputs are written once to files afterwards and counted
(they differ on GRE-tunnelled packets: weir matches the innermost IP header, see bench/README.md).
CPU time (user + system, all threads) is the column to read on a shared machine.

usage: bench/rules_hosts_vs_bpf.py [--hosts 100,1000,10000] [--runs 3] [--opt-timeout 1800]
"""

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--hosts", default="100,1000,10000")
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--opt-timeout", type=float, default=1800.0,
                help="seconds libpcap's optimizer may take to compile the largest set")
ap.add_argument("--compile-only", default="",
                help="host counts (comma-separated) for which tcpdump -O only compiles (its run takes minutes): "
                     "the ratio is then libpcap's compile alone against weir's whole run, a lower bound")
ap.add_argument("--no-build", action="store_true")
args = ap.parse_args()

root = runner.repo_root()
if not args.no_build:
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir", "--bin", "weir"], cwd=root, check=True)
weir = os.path.join(root, "target", "release", "weir")
out = os.path.join(root, "bench", "out")
trace = os.path.join(out, "trace-3000000.pcap")
if not os.path.exists(trace):
    sys.exit(f"{trace} missing: run bench/rules_vs_bpf.py (or mktrace) first")

_, seen = runner.trace_tcp_endpoints(trace)


def host_list(n):
    """The trace's first n IPv4 hosts, padded with addresses the trace does not hold."""
    hs = list(seen[:n])
    i = 0
    while len(hs) < n:
        hs.append(f"100.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}")
        i += 1
    return hs


def count(path):
    r = subprocess.run(["capinfos", "-T", "-r", "-c", path], capture_output=True, text=True, check=True)
    return int(r.stdout.split("\t")[1])


def cpu_of(cmd, timeout=None):
    """(cpu_s, wall_s) of one run under /usr/bin/time, or None past the timeout."""
    try:
        r = subprocess.run(["/usr/bin/time", "-f", "%U %S %e"] + cmd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd[:6])} …\n{r.stderr[-2000:]}")
    u, s, e = r.stderr.split()[-3:]
    return float(u) + float(s), float(e)


runner.warm(trace)
rows = []
ns = [int(x) for x in args.hosts.split(",")]
for n in ns:
    hs = host_list(n)
    rules = os.path.join(out, f"hosts-{n}.rules")
    with open(rules, "w") as f:
        f.write("default drop\n" + "".join(f"host {h} -> pass\n" for h in hs))
    expr = os.path.join(out, f"hosts-{n}.bpf")
    chain = "ip host " + " or ip host ".join(hs)
    with open(expr, "w") as f:
        f.write(f"({chain}) or (vlan and ({chain}))")
    compile_unopt = cpu_of(["tcpdump", "-O", "-d", "-r", trace, "-F", expr])
    w_cmd = [weir, "read", "-r", trace, "-w", "/dev/null", "--rules", rules]
    t_cmd = ["tcpdump", "-O", "-r", trace, "-w", "/dev/null", "-F", expr]
    w, t = [], []
    med = lambda s, i: statistics.median(x[i] for x in s)  # noqa: E731
    if str(n) in args.compile_only.split(","):
        for _ in range(args.runs):
            w.append(runner.measure(w_cmd))
        rows.append((n, med(w, 1), med(w, 0), med(w, 2), None, None, compile_unopt[0], None))
        print(f"{n} hosts: weir {med(w, 1):.2f} s CPU all told; tcpdump -O compile alone "
              f"{compile_unopt[0]:.2f} s CPU ({compile_unopt[0] / med(w, 1):.0f}x, a lower bound: not run)", flush=True)
        continue
    for _ in range(args.runs):  # interleaved
        w.append(runner.measure(w_cmd))
        t.append(runner.measure(t_cmd))
    wo, to = os.path.join(out, "hosts-weir.pcap"), os.path.join(out, "hosts-tcpdump.pcap")
    subprocess.run(w_cmd[:5] + [wo] + w_cmd[6:], check=True, stderr=subprocess.DEVNULL)
    subprocess.run(t_cmd[:5] + [to] + t_cmd[6:], check=True, stderr=subprocess.DEVNULL)
    kept = (count(wo), count(to))
    os.unlink(wo)
    os.unlink(to)
    rows.append((n, med(w, 1), med(w, 0), med(w, 2), med(t, 1), med(t, 0), compile_unopt[0], kept))
    print(f"{n} hosts: weir {med(w, 1):.2f} s CPU, tcpdump -O {med(t, 1):.2f} s CPU "
          f"(unoptimised compile {compile_unopt[0]:.2f} s), kept {kept[0]} / {kept[1]}", flush=True)

big = ns[-1]
opt = cpu_of(["tcpdump", "-d", "-r", trace, "-F", os.path.join(out, f"hosts-{big}.bpf")], timeout=args.opt_timeout)

model = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
              if l.startswith("Model name")), "")
print(f"\n{os.path.basename(trace)}, {count(trace)} packets; {model}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; medians of {args.runs}")
print(f"{'hosts':>6} {'weir CPU s':>10} {'wall s':>7} {'MiB':>5} {'tcpdump -O CPU s':>16} {'wall s':>7} "
      f"{'-O compile s':>12} {'ratio':>7} {'kept weir/tcpdump':>18}")
for n, wc, ww, wr, tc, tw, comp, kept in rows:
    if tc is None:
        print(f"{n:>6} {wc:10.2f} {ww:7.2f} {wr / 1024:5.0f} {'(compile only)':>16} {'':>7} {comp:12.2f} "
              f"{comp / wc:6.0f}x {'':>18}")
        continue
    print(f"{n:>6} {wc:10.2f} {ww:7.2f} {wr / 1024:5.0f} {tc:16.2f} {tw:7.2f} {comp:12.2f} {tc / wc:6.1f}x "
          f"{kept[0]:>9}/{kept[1]}")
if opt is None:
    print(f"libpcap with its optimizer, {big} hosts: compile alone > {args.opt_timeout:.0f} s (stopped): "
          f"> {args.opt_timeout / rows[-1][1]:.0f}x weir's whole run")
else:
    print(f"libpcap with its optimizer, {big} hosts: compile alone {opt[0]:.1f} s CPU "
          f"({opt[0] / rows[-1][1]:.0f}x weir's whole run, before running a packet)")
