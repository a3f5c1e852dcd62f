#!/usr/bin/env python3
"""weir extract vs tcpdump -r over a >= 10 GB store built from the corpus trace.

Builds the store once (`weir record -r` of the trace repeated until >= --gb GB, each copy's
timestamps shifted past the previous copy's last one, fed through a FIFO so the big capture
never lands on disk; 1 GiB pcapng segments, indexed while written), then, page cache warm, for one host's packets, one
port's packets and a one-minute window, times `weir extract` (median of --runs) against tcpdump
reading every segment with the same filter (and editcap -A/-B for the time window, tcpdump
having no time filter), checks that both return the same number of packets, and prints wall
time, CPU time, peak RSS and the ratio. Also prints the index size against the data, and the
indexing cost: CPU of importing one trace copy with and without the index, per GB and as a
share of one core at 2 GB/s (the disk's rate here).

usage: bench/extract_vs_tcpdump.py [--gb 10] [--runs 3] [--rebuild] [--no-build] [--weir BINARY]

`--no-build` skips `cargo build` (target/release/weir as it is); `--weir BINARY` measures that
binary instead (no build either), for A/B runs of two builds in one sitting.
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--gb", type=float, default=10.0)
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--rebuild", action="store_true")
ap.add_argument("--host", default="10.92.67.138")  # 15 packets in the trace: a rare host
ap.add_argument("--port", default="5060")
ap.add_argument("--no-build", action="store_true", help="do not run cargo build first")
ap.add_argument("--weir", help="a weir binary to measure instead of target/release/weir (no build)")
args = ap.parse_args()

root = runner.repo_root()
out = os.path.join(root, "bench", "out")
if not (args.no_build or args.weir):
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir", "-p", "weir-bench"], cwd=root, check=True)
weir = os.path.abspath(args.weir) if args.weir else os.path.join(root, "target", "release", "weir")
if not os.access(weir, os.X_OK):
    sys.exit(f"{weir}: not an executable weir binary")
trace = os.path.join(out, "trace-3000000.pcap")
if not os.path.exists(trace):
    subprocess.run([os.path.join(root, "target", "release", "mktrace"), "-w", trace], check=True)
store = os.path.join(out, "store-extract")
copies = max(1, int(-(-args.gb * 1e9 // os.path.getsize(trace))))



def retimed_copies(path, n, fifo):
    """Writes `n` copies of the classic pcap trace at `path` into `fifo`, one after the other
    as one capture, copy k's record timestamps shifted by k times (the trace's span + 1 s): the
    store holds n distinct stretches of time, as a long capture would."""
    data = open(path, "rb").read()
    magic = data[:4]
    end = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    rec = struct.Struct(end + "IIII")
    offsets, at = [], 24
    while at + 16 <= len(data):
        offsets.append(at)
        at += 16 + rec.unpack_from(data, at)[2]
    span = rec.unpack_from(data, offsets[-1])[0] - rec.unpack_from(data, offsets[0])[0] + 1
    with open(fifo, "wb") as out:
        out.write(data[:24])
        for k in range(n):
            if k == 0:
                out.write(memoryview(data)[24:at])
                continue
            buf = bytearray(data[24:at])
            shift = k * span
            for o in offsets:
                sec = struct.unpack_from(end + "I", buf, o - 24)[0]
                struct.pack_into(end + "I", buf, o - 24, sec + shift)
            out.write(buf)


if args.rebuild or not os.path.exists(os.path.join(store, "manifest.json")):
    shutil.rmtree(store, ignore_errors=True)
    cmd = [weir, "record", "-o", store, "--segment-mib", "1024"]
    t = time.time()
    if copies == 1:
        subprocess.run(cmd + ["-r", trace], check=True, stderr=subprocess.DEVNULL)
    else:
        fifo = os.path.join(out, "retimed.fifo")
        if os.path.exists(fifo):
            os.remove(fifo)
        os.mkfifo(fifo)
        feeder = threading.Thread(target=retimed_copies, args=(trace, copies, fifo))
        feeder.start()
        try:
            subprocess.run(cmd + ["-r", fifo], check=True, stderr=subprocess.DEVNULL)
        finally:
            feeder.join()
            os.remove(fifo)
    print(f"store built: {copies} copies of the trace in {time.time() - t:.1f} s")

ls = json.loads(subprocess.run([weir, "ls", store, "--json"], capture_output=True, check=True).stdout)
segs = sorted(glob.glob(os.path.join(store, "*.pcapng")))
print(f"store: {ls['bytes'] / 1e9:.2f} GB in {len(segs)} segments, {ls['packets']} packets; "
      f"index {ls['index_bytes'] / 1e6:.2f} MB = {ls['index_bytes'] * 100 / ls['bytes']:.3f} % of the data")
for s in segs:  # page cache warm, as after reading the files from disk
    runner.warm(s)

first = min(s["first_ns"] for s in ls["segments"])
last = max(s["last_ns"] for s in ls["segments"])
mid = (first + last) // 2
window = (f"{mid // 10**9}", f"{mid // 10**9 + 60}")
tmp = os.path.join(out, "extract-tmp")
os.makedirs(tmp, exist_ok=True)

script_tcpdump = os.path.join(tmp, "tcpdump_all.sh")
with open(script_tcpdump, "w") as f:
    f.write('#!/bin/sh\nset -e\nexpr="$1"; shift\ni=0\nfor s in "$@"; do i=$((i+1)); tcpdump -r "$s" -w "$(dirname "$0")/t$i.pcap" "$expr" 2>/dev/null; done\n')
script_editcap = os.path.join(tmp, "editcap_all.sh")
with open(script_editcap, "w") as f:
    f.write('#!/bin/sh\nset -e\na="$1"; b="$2"; shift 2\ni=0\nfor s in "$@"; do i=$((i+1)); editcap -A "$a" -B "$b" "$s" "$(dirname "$0")/w$i.pcapng"; done\n')
os.chmod(script_tcpdump, 0o755)
os.chmod(script_editcap, 0o755)


def count(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def packets_of(path):
    r = subprocess.run(["capinfos", "-c", "-M", "-T", "-r", path], capture_output=True, text=True, check=True)
    return int(r.stdout.split()[-1])


results = []
cases = [
    (f"host {args.host}", [f"host {args.host}"], ["tcpdump", f"host {args.host}"]),
    (f"port {args.port}", [f"port {args.port}"], ["tcpdump", f"port {args.port}"]),
    ("udp and port 53", ["udp and port 53"], ["tcpdump", "udp and port 53"]),
    ("1-minute window", ["--from", window[0], "--to", window[1]], ["editcap"]),
]
for name, wargs, peer in cases:
    wout = os.path.join(tmp, "weir.pcap")
    wcmd = [weir, "extract", store, "-w", wout] + wargs
    if peer[0] == "tcpdump":
        pcmd = [script_tcpdump, peer[1]] + segs
    else:
        pcmd = [script_editcap, str(int(window[0])), str(int(window[1]))] + segs
    med = runner.compare([("weir extract", wcmd), (name + ": " + peer[0], pcmd)], runs=args.runs, warmup=0)
    got = packets_of(wout)
    if peer[0] == "tcpdump":
        want = sum(packets_of(p) for p in glob.glob(os.path.join(tmp, "t*.pcap")))
    else:
        want = sum(packets_of(p) for p in glob.glob(os.path.join(tmp, "w*.pcapng")))
    for p in glob.glob(os.path.join(tmp, "[tw]*.pcap*")):
        os.remove(p)
    log = subprocess.run(wcmd + ["-v"], capture_output=True, text=True).stderr.strip().splitlines()
    runner.report(f"{name}: {got} packets (peer: {want}){'' if got == want else '  MISMATCH'}; {log[-1] if log else ''}", med, name + ": " + peer[0])

# Indexing cost: import one copy of the trace with and without the index.
cost = {}
for label, extra in (("indexed", []), ("no index", ["--no-index"])):
    cpus = []
    for _ in range(args.runs):
        d = os.path.join(tmp, "cost-store")
        shutil.rmtree(d, ignore_errors=True)
        wall, cpu, _ = runner.measure([weir, "record", "-r", trace, "-o", d, "--segment-mib", "1024"] + extra)
        cpus.append(cpu)
    cost[label] = statistics.median(cpus)
gb = os.path.getsize(trace) / 1e9
per_gb = (cost["indexed"] - cost["no index"]) / gb
print(f"\nindexing cost: import of {gb:.2f} GB takes {cost['indexed']:.2f} s CPU indexed, {cost['no index']:.2f} s without: "
      f"{per_gb:.3f} s of CPU per GB, i.e. {per_gb * 2.0 * 100:.0f} % of one core at 2 GB/s")
shutil.rmtree(tmp, ignore_errors=True)
