#!/usr/bin/env python3
"""Rule reload of 1 M exact rules while `weir record` captures traffic (the issue's target:
< 1 s with capture running).

A network namespace with a veth pair (made here, removed at the end); `weir gen` sends UDP
inside it to a MAC address nobody has, at --pps; `weir record -i <our side> --rules FILE` runs
with --threads 2 and its kernel drop rules on (the default). The rule file holds N exact TCP
rules (every other one dropping) plus one exact drop rule for one of the generated UDP flows
(so the kernel filter has work). The script sends SIGHUP --reloads times, each time waiting for
weir's "rules reloaded" notice, then stops weir and reads the reload times weir itself measured
(`--stats-json`: rules.reload_us.recent, read + parse + compile + swap, and the kernel filter's
swap time), its peak RSS (VmHWM, read before stopping), and prints medians, the CPU model and
the load average.

Needs root (namespaces, capture). usage: sudo bench/rules_reload.py [--rules N] [--reloads N] [--pps N]
"""

import argparse
import json
import shutil
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--rules", type=int, default=1_000_000)
ap.add_argument("--reloads", type=int, default=7)
ap.add_argument("--pps", type=int, default=20_000)
ap.add_argument("--no-build", action="store_true")
args = ap.parse_args()

root = runner.repo_root()
if not args.no_build:
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir", "--bin", "weir"], cwd=root, check=True)
weir = os.path.join(root, "target", "release", "weir")
tag = f"rr{os.getpid() % 100000}"
ns, ha, hb = f"weirb{tag}", f"wa{tag}", f"wb{tag}"


def sh(*a):
    subprocess.run(a, check=True, stdout=subprocess.DEVNULL)


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


tmp = tempfile.mkdtemp(prefix="weir-reload-")
rules = os.path.join(tmp, "rules.txt")
with open(rules, "w") as f:
    f.write("exact udp 10.0.0.1:40003 10.50.1.1:9000 -> drop\n")
    for i in range(args.rules - 1):
        action = "drop" if i % 2 == 0 else "pass"
        f.write(f"exact tcp 100.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}:{1024 + i % 60000} 100.64.0.1:80 -> {action}\n")
stats = os.path.join(tmp, "stats.json")
log = os.path.join(tmp, "weir.log")
store = os.path.join(tmp, "store")

gen = rec = None
sh("ip", "netns", "add", ns)
try:
    sh("ip", "link", "add", ha, "type", "veth", "peer", "name", hb)
    sh("ip", "link", "set", hb, "netns", ns)
    sh("ip", "link", "set", ha, "up")
    sh("ip", "netns", "exec", ns, "ip", "link", "set", hb, "up")
    rec = subprocess.Popen([weir, "record", "-i", ha, "-o", store, "--buffer-mib", "64", "--threads", "2",
                            "--rules", rules, "--stats-json", stats],
                           stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    t0 = time.time()
    while "recording on" not in open(log).read():
        if rec.poll() is not None or time.time() - t0 > 120:
            sys.exit(f"weir record did not start:\n{open(log).read()}")
        time.sleep(0.05)
    start_s = time.time() - t0
    gen = subprocess.Popen(["ip", "netns", "exec", ns, weir, "gen", "-i", hb, "--dst-mac", "02:00:00:00:00:99",
                            "--dst", "10.50.1.1", "--flows", "16", "--pps", str(args.pps), "--duration", "3600"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    waits = []
    for k in range(1, args.reloads + 1):
        t = time.time()
        rec.send_signal(1)  # SIGHUP
        while open(log).read().count("rules reloaded from") < k:
            if rec.poll() is not None or time.time() - t > 120:
                sys.exit(f"no reload notice:\n{open(log).read()[-2000:]}")
            time.sleep(0.01)
        waits.append(time.time() - t)
        time.sleep(1)  # traffic between reloads; the kernel filter follows
    hwm = next((line.split()[1] for line in open(f"/proc/{rec.pid}/status") if line.startswith("VmHWM")), "0")
    gen.terminate()
    gen.wait()
    gen = None
    time.sleep(0.5)
    rec.send_signal(2)  # SIGINT
    rec.wait(timeout=120)
    text = open(log).read()
    if rec.returncode != 0:
        sys.exit(f"weir record failed ({rec.returncode}):\n{text[-3000:]}")
    rec = None
    j = json.load(open(stats))
finally:
    for p in (gen, rec):
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
    subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
    subprocess.run(["ip", "link", "del", ha], stderr=subprocess.DEVNULL)
    text = open(log).read() if os.path.exists(log) else ""
    shutil.rmtree(tmp, ignore_errors=True)


def find(d, key):
    """The first value of `key` anywhere in the JSON document."""
    if isinstance(d, dict):
        if key in d:
            return d[key]
        for v in d.values():
            r = find(v, key)
            if r is not None:
                return r
    elif isinstance(d, list):
        for v in d:
            r = find(v, key)
            if r is not None:
                return r
    return None


r = find(j, "reload_us") or {}
recent = r.get("recent") or []
swap = find(j, "swap_us")
load = " ".join(open("/proc/loadavg").read().split()[:3])
print(f"{args.rules} exact rules, {args.reloads} reloads (SIGHUP) while weir record captured {args.pps} pkt/s "
      f"on a veth pair; CPU {cpu_model()}, {os.cpu_count()} CPUs, load average {load}")
print(f"weir's reload times (read + parse + compile + swap, ms): {[round(u / 1e3) for u in recent]}")
if recent:
    print(f"median reload {statistics.median(recent) / 1e3:.0f} ms, fastest {min(recent) / 1e3:.0f} ms, "
          f"longest {max(recent) / 1e3:.0f} ms (target < 1000 ms)")
print(f"SIGHUP to the notice, seen from outside (ms): {[round(w * 1e3) for w in waits]}, "
      f"median {statistics.median(waits) * 1e3:.0f} ms")
print(f"kernel filter: longest swap after a new version {swap} us; startup to 'recording on' {start_s:.1f} s; "
      f"peak RSS {int(hwm) / 1024:.0f} MiB")
for line in text.splitlines():
    if "rules (version" in line or "kernel by" in line:
        print("summary:", line.strip())
