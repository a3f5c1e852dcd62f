"""Side-by-side runner shared by weir's benchmarks.

Runs each command of a set in turn (interleaved, so a noisy neighbour hurts all alike), several
times, under /usr/bin/time, and reports the median wall time, CPU time (user + system) and peak
RSS of each, plus ratios against the first (reference) command.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time


def measure(cmd, env=None):
    """Runs cmd once; returns (wall_s, cpu_s, peak_rss_kib).

    Dirty pages left by the previous command (a peer writing its files) are flushed first, so
    their writeback does not run on the next command's time. Wall time is taken here with a
    monotonic clock (/usr/bin/time prints it to 10 ms only); CPU time and peak RSS come from
    /usr/bin/time."""
    os.sync()
    with tempfile.NamedTemporaryFile("r") as t:
        start = time.perf_counter()
        r = subprocess.run(
            ["/usr/bin/time", "-o", t.name, "-f", "%e %U %S %M"] + cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        wall = time.perf_counter() - start
        if r.returncode != 0:
            sys.exit(f"benchmark command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr.decode()}")
        _, user, system, rss = t.read().split()[-4:]
    return wall, float(user) + float(system), int(rss)


def compare(named_cmds, runs=7, warmup=1):
    """named_cmds: list of (name, argv). Returns {name: (wall, cpu, rss)} medians."""
    samples = {name: [] for name, _ in named_cmds}
    for _ in range(warmup):
        for _, cmd in named_cmds:
            measure(cmd)
    for _ in range(runs):
        for name, cmd in named_cmds:
            samples[name].append(measure(cmd))
    med = {}
    for name, s in samples.items():
        med[name] = (
            statistics.median(x[0] for x in s),
            statistics.median(x[1] for x in s),
            statistics.median(x[2] for x in s),
        )
    return med


def report(title, med, reference, packets=None):
    """Prints the medians and each command's speed-up against `reference`."""
    print(f"\n{title}")
    print(f"{'command':<24} {'wall s':>8} {'cpu s':>8} {'peak MiB':>9} {'ns/pkt cpu':>11} {'speed-up':>9}")
    ref_wall = med[reference][0]
    for name, (wall, cpu, rss) in med.items():
        per = f"{cpu / packets * 1e9:11.1f}" if packets else f"{'-':>11}"
        print(f"{name:<24} {wall:8.3f} {cpu:8.3f} {rss / 1024:9.1f} {per} {ref_wall / wall:8.2f}x")


def warm(path):
    """Puts `path` in the page cache the way a capture file read from disk is: dropped from the
    cache (after writing back), then read through once.

    How the pages got into the cache matters: a file cached by its writer's small buffered writes
    (mktrace's) sits in small page-cache folios, and read back from disk, readahead caches it in
    large ones. On the 2026-11-25 VM, `dd bs=1M` read the 0.94 GB bench trace at 5.2 GB/s in
    the first state and 9.1 GB/s in the second, and mapping it cost 40x less, for every tool
    alike; warming this way makes runs comparable whatever wrote the file.
    """
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while os.read(fd, 1 << 24):
            pass
    finally:
        os.close(fd)


def trace_tcp_endpoints(trace, packets=200_000):
    """The TCP conversations (a, port, b, port) and IPv4 hosts of the first `packets` of a trace,
    in order of appearance, found by tshark (untunnelled, untagged IPv4 only: the sets are
    written as BPF too). mktrace repeats the corpus with shifted addresses, so rules built from
    these hit in one replica."""
    t = subprocess.run(["tshark", "-r", trace, "-c", str(packets), "-Y",
                        "tcp and ip and not vlan and not gre and not ip.proto == 4",
                        "-T", "fields", "-e", "ip.src", "-e", "tcp.srcport", "-e", "ip.dst", "-e", "tcp.dstport"],
                       capture_output=True, text=True, check=True).stdout
    convs, hosts = [], []
    seen_c, seen_h = set(), set()
    for line in t.splitlines():
        f = line.split("\t")
        if len(f) != 4 or "," in line or not all(f):
            continue
        a, p, b, q = f
        k = tuple(sorted([(a, p), (b, q)]))
        if k not in seen_c:
            seen_c.add(k)
            convs.append((a, p, b, q))
        for h in (a, b):
            if h not in seen_h:
                seen_h.add(h)
                hosts.append(h)
    return convs, hosts


def repo_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


TICK = os.sysconf("SC_CLK_TCK")


def machine_busy_s():
    """CPU seconds the whole machine spent busy so far (all CPUs, /proc/stat: every state but
    idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / TICK


def cpu_s(pid):
    """CPU seconds (user + system) process `pid` has used so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def link_stats(dev, ns=None):
    """Interface `dev`'s counters (of namespace `ns`) from sysfs, the numbers `ip -s link` and
    /proc/net/dev print: rx_packets, rx_dropped, tx_packets, tx_dropped."""
    pre = ["ip", "netns", "exec", ns] if ns else []
    names = ("rx_packets", "rx_dropped", "tx_packets", "tx_dropped")
    out = subprocess.run(pre + ["cat"] + [f"/sys/class/net/{dev}/statistics/{n}" for n in names],
                         capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(names, (int(x) for x in out)))
