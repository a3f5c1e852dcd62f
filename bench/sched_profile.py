"""Who waits on whom during one command: the command run under `perf sched record -a` (every
context switch on every core), then `perf sched timehist` read back into, per thread of the
command, its CPU time, the time it was runnable but waited for a core ("sch delay") and when it
last ran; and, over the command's life, the CPU time of the other processes (a Kafka broker on
the same machine, other engineers' builds) and of idle cores.

Used by bench/flows_kafka.py and bench/pipelines.py with --profile.
"""

import collections
import os
import re
import subprocess
import tempfile
import time

LINE = re.compile(r"^\s*(\d+\.\d+)\s+\[(\d+)\]\s+(.+?)\[(\d+)(?:/(\d+))?\]\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s*$")


def profile(cmd, watch_pids=(), env=None):
    """Runs cmd under perf sched; returns a dict: wall (s), threads [(comm, tid, run_ms,
    delay_ms, first_ms, last_ms)] of the command, others {comm: run_ms} of other processes
    during the command's life, watched {pid: run_ms} for the given pids (and their threads),
    idle_ms (summed over cores)."""
    with tempfile.TemporaryDirectory(prefix="weir-sched-") as d:
        data = os.path.join(d, "sched.data")
        start = time.perf_counter()
        r = subprocess.run(["perf", "sched", "record", "-a", "-o", data, "--"] + cmd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        wall = time.perf_counter() - start
        if r.returncode != 0:
            raise SystemExit(f"perf sched record failed: {r.stderr.decode()[-2000:]}")
        out = subprocess.run(["perf", "sched", "timehist", "-i", data], capture_output=True,
                             text=True).stdout
    events = []
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            t, cpu, comm, tid, pid, _wait, delay, run = m.groups()
            events.append((float(t), int(cpu), comm.strip(), int(tid), int(pid or tid), float(delay),
                           float(run)))
    if not events:
        return {"wall": wall, "threads": [], "others": {}, "watched": {}, "idle_ms": 0.0}
    # the command's pid: the first process whose comm is the command's base name
    base = os.path.basename(cmd[0])[:15]
    pids = {e[4] for e in events if e[2] == base}
    mine = [e for e in events if e[4] in pids]
    t0 = min(e[0] - e[6] / 1e3 for e in mine)
    t1 = max(e[0] for e in mine)
    threads = {}
    for t, _, comm, tid, _, delay, run in mine:
        th = threads.setdefault(tid, [comm, tid, 0.0, 0.0, (t - t0) * 1e3 - run, 0.0])
        th[0] = comm
        th[2] += run
        th[3] += delay
        th[5] = (t - t0) * 1e3
    others, watched, idle = collections.Counter(), collections.Counter(), 0.0
    watch = set(watch_pids)
    for t, _, comm, tid, pid, _, run in events:
        if pid in pids or not t0 <= t <= t1 + 1e-3:
            continue
        if tid == 0 or comm.startswith("<idle>") or comm.startswith("swapper"):
            idle += run
        elif pid in watch:
            watched[pid] += run
        else:
            others[comm] += run
    return {"wall": wall, "threads": sorted(threads.values(), key=lambda x: x[4]),
            "others": dict(others), "watched": dict(watched), "idle_ms": idle,
            "span_ms": (t1 - t0) * 1e3}


def print_profile(label, p, watched_names=None):
    """Prints a profile of `profile` in words."""
    print(f"\n{label}: wall {p['wall']:.3f} s (perf's view of the command: {p.get('span_ms', 0):.0f} ms)")
    print(f"  {'thread':<18} {'tid':>7} {'cpu ms':>8} {'waited for a core ms':>21} {'first ms':>9} {'last ms':>8}")
    groups = collections.OrderedDict()
    for comm, tid, run, delay, first, last in p["threads"]:
        print(f"  {comm:<18} {tid:>7} {run:8.1f} {delay:21.1f} {first:9.1f} {last:8.1f}")
        g = groups.setdefault(comm, [0.0, 0.0])
        g[0] += run
        g[1] += delay
    total = sum(g[0] for g in groups.values())
    print(f"  command total cpu {total:.1f} ms; " + ", ".join(f"{k} {v[0]:.0f}/{v[1]:.0f}" for k, v in groups.items())
          + " (cpu/waited ms)")
    for pid, run in p["watched"].items():
        name = (watched_names or {}).get(pid, str(pid))
        print(f"  {name} (pid {pid}) cpu during the command: {run:.1f} ms")
    busy = sorted(p["others"].items(), key=lambda kv: -kv[1])[:5]
    print(f"  idle cores during the command: {p['idle_ms']:.1f} ms (summed over cores); other processes: "
          + ", ".join(f"{k} {v:.1f}" for k, v in busy))
