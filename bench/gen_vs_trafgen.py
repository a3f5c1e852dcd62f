#!/usr/bin/env python3
"""weir gen vs trafgen (netsniff-ng): top rate of 64-byte frames (60 bytes without FCS) from one
core on the same veth pair, the far end in a namespace made (and removed) here. Both send the same
frame bytes (trafgen's config is the first frame weir gen writes to a file), interleaved runs,
medians of wall time, CPU time and peak RSS; rate = packets / wall time (start-up included for
both). Checked: the far end's rx_packets grows by exactly the count for each tool.

trafgen bypasses the qdisc by default (PACKET_QDISC_BYPASS) and runs one process per CPU unless
told: it runs with --cpus 1, weir with --qdisc-bypass, and weir also through the qdisc (its
default; veth's default qdisc is noqueue, so the difference is the qdisc layer's fixed cost).
A fourth row sends through AF_XDP (`weir gen --backend xdp`: UMEM, TX and completion rings; on
veth the socket binds in copy mode, the kernel copies each frame into an skb, and the qdisc is
never in the path). The table gives CPU per packet (user + system of the process); the load
average before and after and the CPU model (`lscpu`) are printed with it.

usage: bench/gen_vs_trafgen.py [--runs N] [--packets N]
"""

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=5)
ap.add_argument("--packets", type=int, default=3_000_000)
args = ap.parse_args()

root = runner.repo_root()
target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir"], cwd=root, check=True)
weir = os.path.join(target, "release", "weir")

NS, A, B = f"weirbench{os.getpid()}", f"wgA{os.getpid() % 100000}", f"wgB{os.getpid() % 100000}"


def sh(*cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def rx_packets():
    out = subprocess.run(["ip", "netns", "exec", NS, "cat", f"/sys/class/net/{B}/statistics/rx_packets"],
                         capture_output=True, text=True, check=True).stdout
    return int(out)


sh("ip", "netns", "add", NS)
try:
    sh("ip", "link", "add", A, "type", "veth", "peer", "name", B, "netns", NS)
    # No IPv6 chatter (router solicitations, MLD) to count as received frames.
    sh("sysctl", "-qw", f"net.ipv6.conf.{A}.disable_ipv6=1")
    sh("ip", "link", "set", A, "up")
    sh("ip", "netns", "exec", NS, "ip", "link", "set", B, "up")
    with tempfile.TemporaryDirectory() as tmp:
        # The frame: weir gen's first packet, as trafgen's byte-list config. Its destination MAC is
        # not the far end's, so both tools' frames are dropped on arrival at the same early point.
        frame_file = os.path.join(tmp, "one.pcap")
        subprocess.run([weir, "gen", "--pps", "1", "-c", "1", "--size", "60", "-w", frame_file],
                       check=True, stderr=subprocess.DEVNULL)
        data = open(frame_file, "rb").read()[24 + 16:]
        assert len(data) == 60
        cfg = os.path.join(tmp, "frame.cfg")
        with open(cfg, "w") as f:
            f.write("{ " + ", ".join(f"0x{b:02x}" for b in data) + " }\n")
        n = str(args.packets)
        cmds = [
            ("trafgen --cpus 1", ["trafgen", "--dev", A, "--conf", cfg, "--num", n, "--cpus", "1",
                                  "--no-sock-mem", "--notouch-irq", "--no-cpu-stats"]),
            ("weir gen --qdisc-bypass", [weir, "gen", "-i", A, "--top", "--size", "60", "-c", n,
                                         "--src-mac", "02:00:00:00:00:01", "--dst-mac", "02:00:00:00:00:02",
                                         "--qdisc-bypass"]),
            ("weir gen (qdisc path)", [weir, "gen", "-i", A, "--top", "--size", "60", "-c", n,
                                       "--src-mac", "02:00:00:00:00:01", "--dst-mac", "02:00:00:00:00:02"]),
            ("weir gen --backend xdp", [weir, "gen", "-i", A, "--top", "--size", "60", "-c", n,
                                        "--src-mac", "02:00:00:00:00:01", "--dst-mac", "02:00:00:00:00:02",
                                        "--backend", "xdp"]),
        ]
        # Every packet reaches the far end, for each tool.
        for name, cmd in cmds:
            before = rx_packets()
            runner.measure(cmd)
            got = rx_packets() - before
            print(f"check: {name}: far end received {got} of {n}")
            if got != args.packets:
                sys.exit(f"{name} lost packets")
        model = next((l.split(":", 1)[1].strip() for l in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines()
            if l.startswith("Model name")), "?")
        load0 = open("/proc/loadavg").read().split()[:3]
        med = runner.compare(cmds, runs=args.runs)
        load1 = open("/proc/loadavg").read().split()[:3]
        print(f"CPU: {model}, {os.cpu_count()} CPUs; load average before {' '.join(load0)}, "
              f"after {' '.join(load1)}")
        runner.report(f"{args.packets} frames of 60 bytes on a veth pair, one core, median of {args.runs}",
                      med, "trafgen --cpus 1", args.packets)
        print()
        for name, (wall, cpu, _) in med.items():
            print(f"{name:<24} {args.packets / wall / 1e6:6.3f} Mpps")
        t = med["trafgen --cpus 1"][0]
        print(f"ratio weir --qdisc-bypass / trafgen (pps): {t / med['weir gen --qdisc-bypass'][0]:.2f}x")
        print(f"ratio weir qdisc path / trafgen (pps): {t / med['weir gen (qdisc path)'][0]:.2f}x")
        print(f"ratio weir AF_XDP / trafgen (pps): {t / med['weir gen --backend xdp'][0]:.2f}x")
finally:
    subprocess.run(["ip", "netns", "del", NS])
    subprocess.run(["ip", "link", "del", A], stderr=subprocess.DEVNULL)
