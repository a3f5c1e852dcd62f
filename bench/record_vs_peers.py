#!/usr/bin/env python3
"""weir record vs tcpdump -w vs netsniff-ng: CPU time per captured packet on a veth pair, with
the same generator (trafgen, one process pinned to CPU 1, top speed) sending the same number of
frames to each capture tool in turn (interleaved rounds, median reported). Three traffics
(issue 20: the index's cost depends on how many distinct keys the packets carry):

- diverse: 64-byte UDP frames with a random source port per packet (trafgen `drnd(2)`) and
  4 096 source addresses (10.215.0-15.random, `dinc`/`drnd`, IP checksum by `csumip`),
- trace: the first N packets of the corpus trace (bench/out/trace-3000000.pcap, `mktrace`)
  replayed with tcpreplay --topspeed,
- one flow: 64-byte and 1500-byte frames that all carry the same keys (the bench before).

`weir record --no-index` is measured too: the difference is what the index costs.

For each run: the capture tool starts on the host side of a veth pair whose other side lives in
a namespace made here; trafgen sends N frames from the namespace; the tool is stopped with
SIGINT; its CPU time (user + system, from /proc, the whole process with all its threads) is
divided by the packets it captured. Because tcpdump and netsniff-ng write through the page cache
(kernel threads write their files back later, on nobody's account) while weir writes with
O_DIRECT (on its own account), the busy time of the whole machine from the generator's start to
the tool's exit plus a `sync` is printed too. Drops are each tool's own count (kernel drops for tcpdump and
netsniff-ng; kernel + buffer + writer drops for weir). Everything it creates is removed at the
end (namespace, veth, files).

Then, for each tool, where the CPU went inside the same window: each thread's user and system
time (/proc/PID/task/*/stat), the process's exact run time (/proc/PID/task/*/schedstat: on a
kernel without IRQ_TIME_ACCOUNTING both include the softirq work the tick or the scheduler
finds on the tool's threads), and the whole machine's busy time split into user, system,
irq+softirq and steal and per CPU — the fair measure when softirq may be charged to either
side, readable only on a quiet machine.

usage: sudo bench/record_vs_peers.py [--runs N] [--packets N] [--traffic diverse,trace,one-flow]
"""

import argparse
import datetime
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
import veth  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--packets", type=int, default=1_000_000)
ap.add_argument("--traffic", default="diverse,trace,one-flow")
ap.add_argument("--trace", default=None, help="pcap to replay (default bench/out/trace-3000000.pcap)")
ap.add_argument("--tools", default="weir record,weir record --no-index,tcpdump -w,netsniff-ng",
                help="comma-separated tools to measure (tcpdump -w always runs: the ratios need it)")
ap.add_argument("--weir", default=None, help="weir binary to run (default: target/release/weir, built here)")
ap.add_argument("--perf", default=None, metavar="FILE",
                help="perf record -g one extra run of the first weir tool of --tools per traffic into FILE.N (not measured)")
ap.add_argument("--tag", default="", help="suffix of the namespace and veth names (at most 8 characters), so "
                "that two runs on one machine do not tear down each other's pair")
args = ap.parse_args()
if len(args.tag) > 8:
    sys.exit("--tag: at most 8 characters (interface names are at most 15)")

root = runner.repo_root()
if args.weir:
    weir = os.path.abspath(args.weir)
else:
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir"], cwd=root, check=True)
    weir = os.path.join(root, "target", "release", "weir")
for tool in ("tcpdump", "netsniff-ng", "trafgen", "tcpreplay", "editcap"):
    if not shutil.which(tool):
        sys.exit(f"{tool} is not installed (scripts/setup.sh)")

NS, A, B = f"weirbench{args.tag}", f"wbench{args.tag}0", f"wbench{args.tag}1"


PAIR = veth.Pair(NS, A, B)
sh, setup, teardown = veth.sh, PAIR.setup, PAIR.teardown
thread_ticks, sched_ns, machine_split = veth.thread_ticks, veth.sched_ns, veth.machine_split
wait_populated = veth.wait_populated


def trafgen_conf(size, path, diverse=False):
    veth.trafgen_conf(PAIR, size, path, diverse)


RECONCILE = {}


def one(name, tmp, send, perf=None):
    out = os.path.join(tmp, "out")
    shutil.rmtree(out, ignore_errors=True)
    if name.startswith("weir record"):
        cmd = [weir, "record", "-i", A, "-o", out, "--buffer-mib", "256"] + name.split()[2:]
        ready = "recording on"
    elif name == "tcpdump -w":
        cmd = ["tcpdump", "-n", "-i", A, "-w", out, "-B", "65536"]
        ready = "listening on"
    else:
        cmd = ["netsniff-ng", "--in", A, "--out", out, "--silent"]
        ready = None
    log = open(os.path.join(tmp, "log"), "w+")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    t = time.time()
    while ready and ready not in open(log.name).read():
        if time.time() - t > 20 or p.poll() is not None:
            sys.exit(f"{name} did not start: {open(log.name).read()}")
        time.sleep(0.05)
    time.sleep(0.5 if ready else 1.5)
    if name.startswith("weir record"):
        wait_populated(p.pid)
    la0, lb0 = runner.link_stats(A), runner.link_stats(B, NS)
    c0 = runner.cpu_s(p.pid)
    t0 = thread_ticks(p.pid)
    r0 = sched_ns(p.pid)
    w0 = time.time()
    m0 = runner.machine_busy_s()
    s0 = machine_split()
    prof = None
    if perf:
        prof = subprocess.Popen(["perf", "record", "-g", "-q", "-o", perf, "-p", str(p.pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    sh(*send)
    time.sleep(0.5)
    # CPU until the traffic is handled; the final flush is outside the measurement for all.
    c1 = runner.cpu_s(p.pid)
    t1 = thread_ticks(p.pid)
    r1 = sched_ns(p.pid)
    s1 = machine_split()
    w1 = time.time()
    if prof:
        prof.send_signal(signal.SIGINT)
        prof.wait(timeout=60)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    # Page-cache writers leave their data to kernel threads: count the flush too.
    os.sync()
    m1 = runner.machine_busy_s()
    text = open(log.name).read()
    la1, lb1 = runner.link_stats(A), runner.link_stats(B, NS)
    if name.startswith("weir record") and not perf and name not in RECONCILE:
        # Sent (the generator's side of the veth) vs what reached the capture side and what
        # weir counts: printed once per tool and traffic.
        RECONCILE[name] = (
            f"  {B} tx {lb1['tx_packets'] - lb0['tx_packets']} (tx_dropped {lb1['tx_dropped'] - lb0['tx_dropped']}); "
            f"{A} rx {la1['rx_packets'] - la0['rx_packets']} (rx_dropped {la1['rx_dropped'] - la0['rx_dropped']}); "
            "weir's summary:\n" + "\n".join("    " + l for l in text.splitlines() if l.strip() and "INFO" not in l))
    if name.startswith("weir record"):
        got = int(re.search(r"(\d+) packets recorded", text)[1])
        m = re.search(r"kernel: \d+ received, (\d+) dropped.*?buffer: (\d+) dropped \(full\), (\d+) dropped \(too long\); writer: (\d+)", text, re.S)
        drops = sum(int(x) for x in m.groups())
    elif name == "tcpdump -w":
        got = int(re.search(r"(\d+) packets captured", text)[1])
        drops = int(re.search(r"(\d+) packets dropped by kernel", text)[1])
    else:
        m = re.search(r"(\d+)\s+packets incoming", text)
        passed = re.search(r"(\d+)\s+packets passed filter", text)
        failed = re.search(r"(\d+)\s+packets failed filter", text)
        got = int(passed[1]) if passed else 0
        drops = int(failed[1]) if failed else 0
        if not m:
            sys.exit(f"cannot parse netsniff-ng's summary: {text}")
    shutil.rmtree(out, ignore_errors=True)
    if os.path.isfile(out):
        os.remove(out)
    if name.startswith("weir record") and not perf:
        n, ms = index_writes(text, w0, w1)
        WINDOW_INDEX.setdefault(name, []).append((n, ms))
    if not perf:
        SPLIT.setdefault(name, []).append((thread_split(t0, t1), [b - a for a, b in zip(s0, s1)], got, r1 - r0))
    return c1 - c0, got, drops, m1 - m0


WINDOW_INDEX = {}
# Per tool: (per-thread user/system ticks, machine-wide split, packets) of every measured run.
SPLIT = {}


def thread_split(t0, t1):
    """{thread name: (user ticks, system ticks)} between two `thread_ticks` readings, threads
    of one name summed (a thread born in between counts from zero)."""
    out = {}
    for k, (u, s) in t1.items():
        u0, s0 = t0.get(k, (0, 0))
        name = re.sub(r"\d+$", "", k[1]) or k[1]
        pu, ps = out.get(name, (0, 0))
        out[name] = (pu + u - u0, ps + s - s0)
    return out


def index_writes(text, w0, w1):
    """The index writes (count, total CPU ms) that the recorder logged inside the measured
    window [w0, w1] (epoch seconds): its debug lines "index written: ... in X ms (Y ms CPU)",
    shown when WEIR_LOG asks for weir_store's debug level; (0, 0.0) otherwise."""
    n, ms = 0, 0.0
    for line in text.splitlines():
        m = re.match(r"\x1b?\S*?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z.*index written:.* ms \(([\d.]+) ms CPU\)", line)
        if not m:
            continue
        ts = datetime.datetime.fromisoformat(m[1]).replace(tzinfo=datetime.timezone.utc).timestamp()
        if w0 <= ts <= w1:
            n, ms = n + 1, ms + float(m[2])
    return n, ms


def trafgen(conf):
    return veth.trafgen(PAIR, conf, args.packets)


def workloads(tmp):
    """(title, command sending the traffic from the namespace) per traffic asked for."""
    for kind in args.traffic.split(","):
        if kind == "diverse":
            conf = os.path.join(tmp, "diverse64.cfg")
            trafgen_conf(64, conf, diverse=True)
            yield (f"{args.packets} frames of 64 bytes, random source port, 4096 source addresses, from trafgen", trafgen(conf))
        elif kind == "trace":
            trace = args.trace or os.path.join(root, "bench", "out", "trace-3000000.pcap")
            if not os.path.exists(trace):
                sys.exit(f"{trace} is missing (cargo run --release -p weir-bench --bin mktrace)")
            cut = os.path.join(tmp, "trace.pcap")
            subprocess.run(["editcap", "-F", "pcap", "-r", trace, cut, f"1-{args.packets}"], check=True)
            yield (f"the corpus trace's first {args.packets} packets, tcpreplay --topspeed", ["ip", "netns", "exec", NS, "taskset", "-c", "1", "tcpreplay", "-q", "--topspeed", "-i", B, cut])
        elif kind == "one-flow":
            for size in (64, 1500):
                conf = os.path.join(tmp, f"frame{size}.cfg")
                trafgen_conf(size, conf)
                yield (f"{args.packets} frames of {size} bytes, one flow, from trafgen", trafgen(conf))
        else:
            sys.exit(f"unknown traffic {kind} (diverse, trace, one-flow)")


tools = [t.strip() for t in args.tools.split(",") if t.strip()]
if "tcpdump -w" not in tools:
    tools.append("tcpdump -w")
setup()
tmp = tempfile.mkdtemp(prefix="weir-bench-record-")
try:
    for title, send in workloads(tmp):
        samples = {t: [] for t in tools}
        RECONCILE.clear()
        if args.perf:
            n = len([f for f in os.listdir(os.path.dirname(os.path.abspath(args.perf))) if f.startswith(os.path.basename(args.perf))])
            one(next((t for t in tools if t.startswith("weir record")), "weir record"), tmp, send, perf=f"{os.path.abspath(args.perf)}.{n}")
        for _ in range(args.runs):
            for t in tools:
                samples[t].append(one(t, tmp, send))
        print(f"\n{title} (median of {args.runs} runs)")
        print(f"{'tool':<24} {'captured':>10} {'drops':>9} {'cpu s':>7} {'ns cpu/pkt':>11} {'vs tcpdump':>11} {'machine s':>10}")
        per, rows = {}, []
        for t in tools:
            cpu = statistics.median(s[0] for s in samples[t])
            got = statistics.median(s[1] for s in samples[t])
            drops = statistics.median(s[2] for s in samples[t])
            machine = statistics.median(s[3] for s in samples[t])
            per[t] = cpu / max(got, 1) * 1e9
            rows.append((t, got, drops, cpu, machine))
        for t, got, drops, cpu, machine in rows:
            print(f"{t:<24} {got:>10.0f} {drops:>9.0f} {cpu:>7.2f} {per[t]:>11.0f} {per['tcpdump -w'] / per[t]:>10.2f}x {machine:>10.2f}")
        if any(n for v in WINDOW_INDEX.values() for n, _ in v) or os.environ.get("WEIR_LOG"):
            for t, v in WINDOW_INDEX.items():
                print(f"index writes inside the measured window, {t}: " + ", ".join(f"{n} ({ms:.0f} ms CPU)" for n, ms in v))
        WINDOW_INDEX.clear()
        # Where the CPU went inside the measured window (the same window as "cpu s"): each
        # thread's user and system time, and the whole machine's busy time split by kind and by
        # CPU (trafgen runs on CPU 1; weir's capture thread is pinned to CPU 0). The machine's
        # busy time per packet is the fair figure on a kernel without IRQ_TIME_ACCOUNTING:
        # softirq work (veth delivery into the ring) is charged to whichever task the tick hits.
        hz = os.sysconf("SC_CLK_TCK")
        print(f"\nwhere the CPU went inside the window (medians; ns per packet; {hz} ticks/s):")
        for t in tools:
            runs = SPLIT.get(t, [])
            if not runs:
                continue
            names = sorted({n for th, _, _, _ in runs for n in th})
            per_pkt = lambda x, got: x / hz / max(got, 1) * 1e9
            threads = []
            for n in names:
                u = statistics.median(per_pkt(th.get(n, (0, 0))[0], got) for th, _, got, _ in runs)
                sy = statistics.median(per_pkt(th.get(n, (0, 0))[1], got) for th, _, got, _ in runs)
                if u + sy > 0:
                    threads.append(f"{n} {u:.0f} user + {sy:.0f} sys")
            m = [statistics.median(per_pkt(ms[i], got) for _, ms, got, _ in runs) for i in range(len(runs[0][1]))]
            busy = statistics.median(per_pkt(sum(ms[4:]), got) for _, ms, got, _ in runs)
            run_ns = statistics.median(r / max(got, 1) for _, _, got, r in runs)
            print(f"  {t}: run time (schedstat) {run_ns:.0f}; " + "; ".join(threads))
            print(f"  {'':<{len(t)}}  machine {busy:.0f} busy = user {m[0]:.0f}, sys {m[1]:.0f}, "
                  f"irq+softirq {m[2]:.0f}, steal {m[3]:.0f}; by CPU " + ", ".join(f"{x:.0f}" for x in m[4:]))
        SPLIT.clear()
        for t, text in RECONCILE.items():
            print(f"counters of the first '{t}' run (sent on the generator's side, received on the capture side):\n{text}")
        print("(machine s: busy CPU of the whole machine from the generator's start to the tool's exit "
              "and a sync: generator, softirq, the tool and its page-cache writeback)")
        if "weir record" in per:
            print(f"(ratio column: tcpdump's CPU per packet / the tool's; weir record is "
                  f"{per['tcpdump -w'] / per['weir record']:.2f}x cheaper than tcpdump -w, "
                  + (f"{per['netsniff-ng'] / per['weir record']:.2f}x cheaper than netsniff-ng)" if "netsniff-ng" in per else ")"))
finally:
    teardown()
    shutil.rmtree(tmp, ignore_errors=True)
