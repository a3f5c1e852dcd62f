"""A veth pair with one end in a network namespace, the trafgen traffic the live benchmarks
send across it, and the /proc readings they measure a process with. Shared by
record_vs_peers.py and live_flows_vs_peers.py.

- `Pair(ns, a, b)`: `setup()` makes namespace `ns` and the veth pair `a` (host side) / `b`
  (inside `ns`); `teardown()` removes both.
- `trafgen_conf(pair, size, path, diverse)`: one UDP/IPv4 frame from `b` to `a`; with
  `diverse`, a random source port per packet and 4 096 source addresses (issue 20).
- `trafgen(pair, conf, packets)`: the command sending `packets` frames from the namespace on
  CPU 1.
- `thread_ticks`, `sched_ns`, `machine_split`, `ctx_switches`: what a process and the machine
  spent.
"""

import os
import re
import subprocess
import time


def sh(*cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


class Pair:
    """Namespace `ns` holding veth end `b`; `a`, its peer, on the host."""

    def __init__(self, ns, a, b):
        self.ns, self.a, self.b = ns, a, b

    def setup(self):
        self.teardown()
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", self.a, "type", "veth", "peer", "name", self.b)
        sh("ip", "link", "set", self.b, "netns", self.ns)
        sh("ip", "link", "set", self.a, "up")
        sh("ip", "netns", "exec", self.ns, "ip", "link", "set", self.b, "up")

    def teardown(self):
        subprocess.run(["ip", "netns", "del", self.ns], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "link", "del", self.a], stderr=subprocess.DEVNULL)


def mac(dev, ns=None):
    pre = ["ip", "netns", "exec", ns] if ns else []
    return subprocess.run(pre + ["cat", f"/sys/class/net/{dev}/address"], capture_output=True, text=True, check=True).stdout.strip()


def trafgen_conf(pair, size, path, diverse=False):
    """One UDP/IPv4 frame of `size` bytes (FCS excluded) from `pair.b` to `pair.a`; with
    `diverse`, a random source port per packet and 4 096 source addresses (the IP checksum
    recomputed per packet)."""
    dst = [int(x, 16) for x in mac(pair.a).split(":")]
    src = [int(x, 16) for x in mac(pair.b, pair.ns).split(":")]
    ip_len = size - 14
    ip = [0x45, 0, ip_len >> 8, ip_len & 255, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 215, 0, 2, 10, 215, 0, 1]
    s = sum((ip[i] << 8) + ip[i + 1] for i in range(0, 20, 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    ip[10], ip[11] = (~s >> 8) & 255, ~s & 255
    udp_len = ip_len - 20
    udp = [0x30, 0x39, 0x27, 0x0F, udp_len >> 8, udp_len & 255, 0, 0]
    frame = dst + src + [8, 0] + ip + udp + [0] * (udp_len - 8)
    cells = [f"0x{b:02x}" for b in frame]
    if diverse:
        # IP source 10.215.x.y: x counts 0..15 (one per packet), y random; UDP source port
        # random; IP checksum computed per packet over bytes 14..33.
        # Replaced from the end, as multi-byte functions take one cell for several bytes.
        cells[34:36] = ["drnd(2)"]
        cells[29] = "drnd()"
        cells[28] = "dinc(0, 15)"
        cells[24:26] = ["csumip(14, 33)"]
    with open(path, "w") as f:
        f.write("{ " + ", ".join(cells) + " }\n")


def trafgen(pair, conf, packets):
    """trafgen sending `packets` frames of `conf` from `pair.b`, pinned to CPU 1."""
    return ["ip", "netns", "exec", pair.ns, "taskset", "-c", "1", "trafgen", "-o", pair.b, "-i", conf,
            "-n", str(packets), "-P", "1", "--no-sock-mem"]


def thread_ticks(pid):
    """{(tid, name): (utime, stime)} of every thread of `pid` now (/proc/PID/task/*/stat,
    clock ticks)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
            v = rest.split()
            out[(tid, head.split("(", 1)[1])] = (int(v[11]), int(v[12]))
        except (OSError, IndexError):
            pass
    return out


def sched_ns(pid):
    """The run time of every thread of `pid` so far, in ns, summed (/proc/PID/task/*/schedstat,
    first field: the scheduler's exact on-CPU time, not sampled by 10 ms ticks like /proc/PID/stat;
    threads that ended are missing, so read it while the process runs)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            pass
    return total


def ctx_switches(pid):
    """(voluntary, involuntary) context switches of every thread of `pid` so far, summed
    (/proc/PID/task/*/status): a voluntary one is a sleep, so their rate while idle is the
    process's wake-ups per second."""
    vol = invol = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                text = f.read()
            vol += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", text, re.M)[1])
            invol += int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", text, re.M)[1])
        except (OSError, TypeError):
            pass
    return vol, invol


def peak_rss_kib(pid):
    """The peak resident set of `pid` so far in KiB (/proc/PID/status VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmHWM:\s+(\d+)", f.read(), re.M)[1])


def machine_split():
    """The whole machine's CPU ticks so far (/proc/stat, all CPUs): user+nice, system,
    irq+softirq, steal, and the busy ticks of each CPU (every state but idle and iowait)."""
    with open("/proc/stat") as f:
        lines = f.read().splitlines()
    v = [int(x) for x in lines[0].split()[1:]]
    per_cpu = []
    for line in lines[1:]:
        if not re.match(r"cpu\d", line):
            break
        c = [int(x) for x in line.split()[1:]]
        per_cpu.append(sum(c[:8]) - c[3] - c[4])
    return [v[0] + v[1], v[2], v[5] + v[6], v[7]] + per_cpu


def wait_populated(pid, limit=30.0):
    """Waits until weir's thread faulting the packet buffer in ("buffer-populate") is done, so
    that zeroing the buffer's pages (start-up) stays out of the measured window; under load it
    ran into the window (perf: 16 % of weir's samples in clear_page_erms under madvise)."""
    t = time.time()
    while time.time() - t < limit:
        names = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                names.append(open(f"/proc/{pid}/task/{tid}/comm").read().strip())
            except OSError:
                pass
        if "buffer-populate" not in names:
            return
        time.sleep(0.05)
