#!/usr/bin/env python3
"""weir read --rules vs tcpdump -r with the equivalent BPF expression, on the >= 3 M-packet trace.

Rule sets: 1, 100, 10 000 and 1 000 000 exact rules (the trace's own TCP conversations first,
so they hit, every other one dropping; then synthetic ones that never hit), 1 000 wildcard
rules (prefixes, ports, ranges, flags, mixed actions), 100 and 10 000 payload patterns, and 100
and 10 000 `host` rules. The sets BPF can express (exact conversations dropped, hosts kept) run
side by side with `tcpdump -r T -w O EXPR`, and libpcap's compile time of EXPR is measured alone
(`tcpdump -d`, with a timeout: a chain of 10 000 `host` terms does not compile in minutes).

Every command reads the same trace (page cache warm) and writes its output to bench/out; medians
of --runs interleaved runs of wall time, CPU time and peak RSS (/usr/bin/time), packets per
second per core of CPU, and the ratios printed at the end. Also: the same 1 M exact rules read
sequentially (one thread) instead of through the parallel reader, and how many packets each
side kept (the equivalent sets keep the same packets; the count is compared).

The "after loading" columns subtract, for each set, the CPU time of the same command on a
one-packet file (reading, parsing and compiling the rules, then exiting), run alongside the
others; the empty set's is subtracted likewise from the reference.

10 000 `host` terms: libpcap's compile time grows faster than linearly with the number of
terms, and 10 000 do not compile within any timeout this machine affords; its compile time is
measured for 100, 500, 1 000 and 2 000 hosts (and 10 000 is tried with --fit-timeout), fitted as
t = a * n^b on a log-log scale and extrapolated to 10 000 (printed as extrapolated); the run
time of the 10 000-term program is the 1 000-host run (tcpdump's time less its compile) times
10 (a chain of `host` terms runs in time linear in their number).

usage: bench/rules_vs_bpf.py [--runs N] [--packets N] [--compile-timeout S] [--fit-timeout S] [--quick]
"""

import math

import argparse
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=5)
ap.add_argument("--packets", type=int, default=3_000_000)
ap.add_argument("--compile-timeout", type=float, default=30.0,
                help="seconds libpcap may take to compile one of the equivalent expressions")
ap.add_argument("--fit-timeout", type=float, default=120.0,
                help="seconds libpcap may take for each host count of the compile-time fit")
ap.add_argument("--quick", action="store_true", help="fewer sets (smoke test of the script)")
args = ap.parse_args()

root = runner.repo_root()
out = os.path.join(root, "bench", "out")
os.makedirs(out, exist_ok=True)
subprocess.run(["cargo", "build", "--release", "-q", "-p", "weir", "-p", "weir-bench", "--bin", "weir", "--bin", "mktrace"],
               cwd=root, check=True)
weir = os.path.join(root, "target", "release", "weir")
trace = os.path.join(out, f"trace-{args.packets}.pcap")
if not os.path.exists(trace):
    subprocess.run([os.path.join(root, "target", "release", "mktrace"), "--packets", str(args.packets), "-w", trace], check=True)


def count(path):
    r = subprocess.run(["capinfos", "-T", "-r", "-c", path], capture_output=True, text=True, check=True)
    return int(r.stdout.split("\t")[1])


packets = count(trace)
size = os.path.getsize(trace)

convs, hosts = runner.trace_tcp_endpoints(trace)


def exact_rules(n):
    lines = []
    for i in range(n):
        action = "drop" if i % 2 == 0 else "pass"
        if i < len(convs):
            a, p, b, q = convs[i]
            lines.append(f"exact tcp {a}:{p} {b}:{q} -> {action}")
        else:
            lines.append(f"exact tcp 100.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}:{1024 + i % 60000} 100.64.0.1:80 -> {action}")
    return "\n".join(lines) + "\n"


def exact_drop_bpf(n):
    """The BPF expression of exact_rules(n): not any of the dropped conversations."""
    terms = []
    for i in range(0, n, 2):
        if i < len(convs):
            a, p, b, q = convs[i]
        else:
            a, p, b, q = f"100.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}", str(1024 + i % 60000), "100.64.0.1", "80"
        terms.append(f"(src host {a} and src port {p} and dst host {b} and dst port {q}) or "
                     f"(src host {b} and src port {q} and dst host {a} and dst port {p})")
    t = " or ".join(terms)
    # the engine matches a packet whatever its VLAN tag; BPF needs `vlan` to look past one
    return f"not ((ip and tcp and ({t})) or (vlan and ip and tcp and ({t})))"


def host_rules(n):
    hs = host_list(n)
    return "default drop\n" + "".join(f"host {h} -> pass\n" for h in hs)


def host_list(n):
    hs = list(hosts[:n])
    i = 0
    while len(hs) < n:
        hs.append(f"100.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}")
        i += 1
    return hs


def host_bpf(n):
    t = "ip host " + " or ip host ".join(host_list(n))
    return f"({t}) or (vlan and ({t}))"


def wildcard_rules(n):
    r = random.Random(7)
    lines = []
    pool = hosts or ["10.0.0.1"]
    for i in range(n):
        h = r.choice(pool)
        plen = r.choice([16, 24, 28, 32])
        ip = [int(x) for x in h.split(".")]
        v = (ip[0] << 24 | ip[1] << 16 | ip[2] << 8 | ip[3]) & (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF
        net = f"{v >> 24}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}/{plen}"
        line = f"prio {r.randrange(4)} {r.choice(['src', 'dst', 'host'])} {net}"
        k = r.randrange(4)
        if k == 0:
            line += f" proto tcp dport {r.choice([80, 443, 22, 25])}"
        elif k == 1:
            line += f" proto udp port {1000 + r.randrange(100)}-{2000 + r.randrange(1000)}"
        elif k == 2:
            line += " proto tcp flags S/SA"
        action = ["drop", "pass", "slice l4", "sample 4", "tag 5 continue"][i % 5]
        lines.append(f"{line} -> {action}")
    return "\n".join(lines) + "\n"


def pattern_rules(n):
    words = ["GET ", "POST ", "HTTP/1.1 200", "User-Agent: ", "Host: ", "Content-Type: ", "SSH-2.0",
             "passwd", "cmd.exe", "/admin", "INVITE sip:", "Set-Cookie: "]
    r = random.Random(11)
    lines = ["set scan-limit 16k"]
    for i in range(n):
        p = words[i] if i < len(words) else "".join(chr(97 + r.randrange(26)) for _ in range(5 + r.randrange(4)))
        lines.append(f'payload "{p}" -> tag {i} continue')
    return "\n".join(lines) + "\n"


def write(name, text):
    p = os.path.join(out, f"rules-{name}.txt")
    with open(p, "w") as f:
        f.write(text)
    return p


def compile_time(expr, timeout=None):
    """libpcap's compile time of expr (`tcpdump -d`, which compiles and prints), or None past the timeout."""
    timeout = timeout or args.compile_timeout
    exprfile = os.path.join(out, "rules-bpf-expr.txt")
    with open(exprfile, "w") as f:
        f.write(expr)
    start = time.perf_counter()
    try:
        subprocess.run(["tcpdump", "-d", "-r", trace, "-F", exprfile], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


sets = [("empty", "")]
exact_ns = [1, 100] if args.quick else [1, 100, 10_000, 1_000_000]
for n in exact_ns:
    sets.append((f"{n} exact", exact_rules(n)))
sets.append(("1000 wildcard", wildcard_rules(1000)))
for n in ([100] if args.quick else [100, 10_000]):
    sets.append((f"{n} patterns", pattern_rules(n)))
for n in ([100] if args.quick else [100, 10_000]):
    sets.append((f"{n} hosts", host_rules(n)))

one = os.path.join(out, "trace-1.pcap")
subprocess.run(["tcpdump", "-r", trace, "-c", "1", "-w", one], check=True, stderr=subprocess.DEVNULL)
o_weir = os.path.join(out, "rules-weir.pcap")
o_tcp = os.path.join(out, "rules-tcpdump.pcap")
# timed runs write to /dev/null (writing 0.9 GB of output would time the page cache); the
# outputs are written to files once afterwards, to count and compare them
null = "/dev/null"
cmds = [("weir read (no rules)", [weir, "read", "-r", trace, "-w", null])]
files = {}
for name, text in sets:
    files[name] = write(name.replace(" ", "-"), text)
    cmds.append((f"rules {name}", [weir, "read", "-r", trace, "-w", null, "--rules", files[name]]))
    cmds.append((f"load {name}", [weir, "read", "-r", one, "-w", null, "--rules", files[name]]))
big = "1000000 exact" if not args.quick else "100 exact"
one_thread = ["env", "WEIR_PARALLEL_MIN_BYTES=1000000000000000", weir, "read", "-r", trace, "--rules", files[big], "-w"]
cmds.append((f"rules {big}, 1 thread", one_thread + [null]))

# the sets BPF can express, with libpcap's compile time measured alone
bpf = [("1 exact", exact_drop_bpf(1)), ("100 exact", exact_drop_bpf(100)), ("100 hosts", host_bpf(100))]
if not args.quick:
    bpf += [("1000 hosts", host_bpf(1000)), ("10000 hosts", host_bpf(10_000))]
    sets.append(("1000 hosts", host_rules(1000)))
    files["1000 hosts"] = write("1000-hosts", host_rules(1000))
    cmds.append(("rules 1000 hosts", [weir, "read", "-r", trace, "-w", null, "--rules", files["1000 hosts"]]))
    cmds.append(("load 1000 hosts", [weir, "read", "-r", one, "-w", null, "--rules", files["1000 hosts"]]))
compiled = {}
for name, expr in bpf:
    ct = compile_time(expr, args.fit_timeout if name in ("1000 hosts", "10000 hosts") else None)
    compiled[name] = ct
    limit = args.fit_timeout if name in ("1000 hosts", "10000 hosts") else args.compile_timeout
    print(f"libpcap compile, {name}: " + (f"{ct:.3f} s" if ct is not None else f"> {limit:.0f} s (stopped)"), flush=True)
    if ct is not None:
        exprfile = os.path.join(out, f"rules-bpf-{name.replace(' ', '-')}.txt")
        with open(exprfile, "w") as f:
            f.write(expr)
        cmds.append((f"tcpdump {name}", ["tcpdump", "-r", trace, "-w", null, "-F", exprfile]))

runner.warm(trace)
med = runner.compare(cmds, runs=args.runs)
runner.report(f"weir read --rules vs tcpdump on {packets} packets ({size / 1e9:.2f} GB), median of {args.runs}",
              med, "weir read (no rules)", packets)

print("\nrule set                 Mpkt/s/core  vs empty set  load s CPU  after loading: Mpkt/s/core  vs empty  kept (weir / tcpdump)  rules summary")
base = med["rules empty"][1]
# the load: the same command on a one-packet file (median CPU, run alongside), not the wall
# time weir prints, which under load exceeds the CPU it stands for
load = {name: med[f"load {name}"][1] for name, _ in sets}
for name, _ in sets:
    cpu = med[f"rules {name}"][1]
    r = subprocess.run([weir, "read", "-r", trace, "-w", o_weir, "--rules", files[name]], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = r.stderr.splitlines()[0] if r.stderr else ""
    kept = count(o_weir)
    other = ""
    if f"tcpdump {name}" in med:
        expr = dict(bpf)[name]
        exprfile = os.path.join(out, f"rules-bpf-{name.replace(' ', '-')}.txt")
        subprocess.run(["tcpdump", "-r", trace, "-w", o_tcp, "-F", exprfile], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        other = f" / {count(o_tcp)}"
    run_cpu = max(cpu - load[name], 1e-9)
    base_run = base - load["empty"]
    print(f"{name:<24} {packets / cpu / 1e6:11.2f} {base / cpu * 100:11.0f}%  {load[name]:10.2f}  "
          f"{packets / run_cpu / 1e6:26.2f} {base_run / run_cpu * 100:8.0f}%  {kept}{other}  [{first}]")
    if name == big:
        o_one = os.path.join(out, "rules-weir-1thread.pcap")
        subprocess.run(one_thread + [o_one], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        same = open(o_one, "rb").read() == open(o_weir, "rb").read()
        print(f"{'':<24} parallel reader and one thread wrote identical files: {same}")

print()
for name, _ in bpf:
    w = med[f"rules {name}"][0]
    ct = compiled[name]
    if ct is None:
        print(f"{name}: tcpdump did not compile the expression in time; weir {w:.2f} s all told (parse + compile + run)")
    else:
        tw = med[f"tcpdump {name}"][0]
        print(f"{name}: tcpdump {tw:.2f} s wall (libpcap compile {ct:.2f} s of it) vs weir {w:.2f} s: {tw / w:.1f}x")
if not args.quick:
    # libpcap's compile time of n hosts, fitted as a * n^b (log-log least squares)
    fit = {100: compiled["100 hosts"], 1000: compiled["1000 hosts"]}
    for n in (500, 2000):
        ct = compile_time(host_bpf(n), args.fit_timeout)
        print(f"libpcap compile, {n} hosts: " + (f"{ct:.2f} s" if ct is not None else f"> {args.fit_timeout:.0f} s"), flush=True)
        fit[n] = ct
    pts = [(math.log(n), math.log(t)) for n, t in sorted(fit.items()) if t]
    w10 = med["rules 10000 hosts"][0]
    if compiled["10000 hosts"] is not None:
        c10, how = compiled["10000 hosts"], "measured"
    elif len(pts) >= 2:
        mx = sum(p[0] for p in pts) / len(pts)
        my = sum(p[1] for p in pts) / len(pts)
        bexp = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
        c10 = math.exp(my + bexp * (math.log(10_000) - mx))
        how = (f"EXTRAPOLATED from {', '.join(str(n) for n, t in sorted(fit.items()) if t)} hosts as "
               f"t = a * n^{bexp:.2f} (10 000 did not compile in {args.fit_timeout:.0f} s)")
    else:
        c10, how = None, "not measured"
    if "tcpdump 1000 hosts" in med and compiled["1000 hosts"]:
        run1k = max(med["tcpdump 1000 hosts"][0] - compiled["1000 hosts"], 0.0)
        run10 = run1k * 10
        print(f"10000 hosts, BPF: libpcap compile {c10:.1f} s ({how}) + run {run10:.1f} s "
              f"(the 1000-host program's run, {run1k:.2f} s wall, times 10: the chain is linear in its length)")
        if c10:
            print(f"10000 hosts: BPF compile + run {c10 + run10:.1f} s vs weir {w10:.2f} s wall all told "
                  f"(parse + compile + run): {(c10 + run10) / w10:.0f}x (target 50x)")
b = med[f"rules {big}"]
s = med[f"rules {big}, 1 thread"]
run_b = b[1] - load[big]
print(f"{big}: {(base - load['empty']) / run_b * 100:.0f}% of the empty set's throughput per core once loaded "
      f"(CPU less the {load[big]:.2f} s of reading, parsing and compiling the rules), "
      f"{base / b[1] * 100:.0f}% all told; "
      f"{med['rules empty'][0] / b[0] * 100:.0f}% of its wall; parallel reader {b[0]:.2f} s / {b[1]:.2f} CPU, "
      f"one thread {s[0]:.2f} s / {s[1]:.2f} CPU")
