//! Rule-engine benchmark: packets per second per core of weir-rules on the ≥ 3 M-packet trace
//! (`bench/out/trace-3000000.pcap`, built by `mktrace`), for 1, 100, 10 000 and 1 000 000 exact
//! rules, 1 000 wildcard rules, 100 and 10 000 payload patterns, and 10 000 `host` rules against
//! the BPF program of the same 10 000 hosts (libpcap's compile time, and weir-filter running
//! libpcap's program).
//!
//! Each round reads the trace (page cache warm), extracts every packet's fields with
//! weir-decode and evaluates it; the "decode only" row is the same loop without the engine, so
//! the engine's own cost is the difference. Rounds of all sets alternate; medians of wall and of
//! the thread's CPU time (`/proc/thread-self/schedstat`) are printed, with the rules' build
//! times and table sizes. Rules are drawn from the trace's own conversations and addresses, so
//! they hit.
//!
//! `cargo run --release -p weir-bench --bin bench_rules -- [FILE] [--rounds N] [--bpf-packets N]`

use std::collections::HashSet;
use std::fmt::Write as _;
use std::hint::black_box;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use weir_decode::{Decoded, LinkType};
use weir_pcap::FileReader;
use weir_rules::{fields_from_frame, Engine, RuleSet};

/// Time the rule engine on a trace.
#[derive(Parser)]
struct Args {
    /// The trace (default: bench/out/trace-3000000.pcap).
    file: Option<PathBuf>,
    /// Rounds per rule set (medians are printed).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Packets the 10 000-term BPF program runs on (it is slow: the rate is extrapolated).
    #[arg(long, default_value_t = 20_000)]
    bpf_packets: usize,
    /// Seconds to wait for libpcap to compile the 10 000-host program; past it, the compile time
    /// is reported as "more than" this, and the run rate is measured on a program of
    /// `--bpf-fallback-hosts` hosts and scaled up (a chain of `host` terms runs in time linear in
    /// their number; libpcap's optimiser compiles it in worse than linear time).
    #[arg(long, default_value_t = 120)]
    bpf_timeout: u64,
    /// Hosts in the program timed when the full one does not compile in time.
    #[arg(long, default_value_t = 200)]
    bpf_fallback_hosts: usize,
}

/// CPU time of this thread so far.
fn thread_cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns = s
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// What the trace holds: conversations and addresses, to draw rules from.
struct Seen {
    convs: Vec<String>,
    hosts: Vec<IpAddr>,
    packets: u64,
}

fn survey(path: &PathBuf) -> Result<Seen> {
    let mut r = FileReader::open(path)?;
    let (mut convs, mut seen_conv, mut hosts, mut seen_host) =
        (Vec::new(), HashSet::new(), Vec::new(), HashSet::new());
    let mut packets = 0;
    while let Some(p) = r.next_packet()? {
        packets += 1;
        let mut scratch = Decoded::new();
        let f = fields_from_frame(&mut scratch, p.link, p.data, p.meta.orig_len);
        let Some(ip) = scratch.ip() else { continue };
        if seen_host.len() < 20_000 && seen_host.insert(ip.src) {
            hosts.push(ip.src);
        }
        if matches!(f.proto, 6 | 17) && convs.len() < 1_000_000 {
            let k = weir_rules::ExactKey::of(&f).unwrap();
            if seen_conv.insert(k) {
                let ep = |a: IpAddr, p: u16| match a {
                    IpAddr::V6(a) => format!("[{a}]:{p}"),
                    a => format!("{a}:{p}"),
                };
                let vlan = if f.vlan == weir_rules::NO_VLAN {
                    String::new()
                } else {
                    format!(" vlan {}", f.vlan)
                };
                let proto = if f.proto == 6 { "tcp" } else { "udp" };
                convs.push(format!(
                    "exact {proto} {} {}{vlan}",
                    ep(ip.src, f.sport),
                    ep(ip.dst, f.dport)
                ));
            }
        }
    }
    Ok(Seen {
        convs,
        hosts,
        packets,
    })
}

/// `n` exact rules: the trace's conversations (every other one drops, the rest pass), then
/// synthetic ones that never hit.
fn exact_rules(seen: &Seen, n: usize) -> String {
    let mut s = String::with_capacity(n * 60);
    for i in 0..n {
        let action = if i % 2 == 0 { "drop" } else { "pass tag 1" };
        match seen.convs.get(i) {
            Some(c) => {
                let _ = writeln!(s, "{c} -> {action}");
            }
            None => {
                let _ = writeln!(
                    s,
                    "exact tcp 100.{}.{}.{}:{} 100.64.0.1:80 -> {action}",
                    (i >> 16) & 255,
                    (i >> 8) & 255,
                    i & 255,
                    1024 + i % 60_000
                );
            }
        }
    }
    s
}

/// xorshift for the synthetic sets.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// `n` wildcard rules over the trace's addresses: prefixes of several lengths, ports, ranges,
/// protocols, flags, a few with `continue`.
fn wildcard_rules(seen: &Seen, n: usize) -> String {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut s = String::new();
    for i in 0..n {
        let h = seen.hosts[r.below(seen.hosts.len() as u64) as usize];
        let len = match h {
            IpAddr::V4(_) => [16, 24, 28, 32][r.below(4) as usize],
            IpAddr::V6(_) => [48, 64, 128][r.below(3) as usize],
        };
        let dir = ["src", "dst", "host"][r.below(3) as usize];
        let mut line = format!("prio {} {dir} {h}/{len}", r.below(4));
        match r.below(4) {
            0 => {
                line += &format!(
                    " proto tcp dport {}",
                    [80, 443, 22, 25][r.below(4) as usize]
                )
            }
            1 => {
                line += &format!(
                    " proto udp port {}-{}",
                    1000 + r.below(100),
                    2000 + r.below(1000)
                )
            }
            2 => line += " proto tcp flags S/SA",
            _ => {}
        }
        let action = ["drop", "pass", "slice l4", "sample 4", "tag 5 continue"][i % 5];
        let _ = writeln!(s, "{line} -> {action}");
    }
    s
}

/// `n` payload patterns: common protocol words, then random 5–8 letter strings.
fn pattern_rules(n: usize) -> String {
    let words = [
        "GET ",
        "POST ",
        "HTTP/1.1 200",
        "User-Agent: ",
        "Host: ",
        "Content-Type: ",
        "SSH-2.0",
        "\\x16\\x03\\x01",
        "INVITE sip:",
        "passwd",
        "cmd.exe",
        "/admin",
    ];
    let mut r = Rng(0x1234_5678_9abc_def1);
    let mut s = String::from("set scan-limit 16k\n");
    for i in 0..n {
        let p = match words.get(i) {
            Some(w) => w.to_string(),
            None => (0..5 + r.below(4))
                .map(|_| (b'a' + r.below(26) as u8) as char)
                .collect(),
        };
        let _ = writeln!(s, "payload \"{p}\" -> tag {i} continue");
    }
    s
}

/// One rule set under test.
struct Case {
    name: String,
    engine: Option<Engine>,
    build: String,
    wall: Vec<f64>,
    cpu: Vec<f64>,
    kept: u64,
}

fn build(name: &str, text: &str, link: LinkType) -> Result<Case> {
    eprintln!("building {name}");
    let t = Instant::now();
    let set = RuleSet::parse(text)?;
    let parse = t.elapsed();
    let t = Instant::now();
    let engine = Engine::new(set, link, 262_144)?;
    let compile = t.elapsed();
    let (exact, mem) = engine.exact_size();
    let (wild, tuples) = engine.wild_size();
    let mut build = format!(
        "parse {:.0} ms, compile {:.0} ms",
        parse.as_secs_f64() * 1e3,
        compile.as_secs_f64() * 1e3
    );
    if exact > 0 {
        let _ = write!(
            build,
            ", exact table {:.1} MiB",
            mem as f64 / (1 << 20) as f64
        );
    }
    if wild > 0 {
        let _ = write!(build, ", {tuples} tuples");
    }
    let pm = engine.pattern_memory_bytes();
    if pm > 0 {
        let _ = write!(build, ", automaton {:.1} MiB", pm as f64 / (1 << 20) as f64);
    }
    Ok(Case {
        name: name.into(),
        engine: Some(engine),
        build,
        wall: Vec::new(),
        cpu: Vec::new(),
        kept: 0,
    })
}

/// One round: read, decode, evaluate (when there is an engine) every packet.
fn round(path: &PathBuf, case: &mut Case) -> Result<()> {
    let mut r = FileReader::open(path)?;
    let mut ev = case.engine.as_ref().map(|e| e.evaluator());
    let mut kept = 0u64;
    let (t, c) = (Instant::now(), thread_cpu());
    while let Some(p) = r.next_packet()? {
        // a fresh `Decoded` per packet (it borrows the packet); the same cost in every row
        let mut scratch = Decoded::new();
        let f = fields_from_frame(&mut scratch, p.link, p.data, p.meta.orig_len);
        match ev.as_mut() {
            Some(ev) => kept += u64::from(ev.eval(black_box(&f), p.data).kept()),
            None => kept += u64::from(black_box(&f).family != 0),
        }
    }
    case.wall.push(t.elapsed().as_secs_f64());
    case.cpu.push((thread_cpu() - c).as_secs_f64());
    case.kept = kept;
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let path = args.file.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("out/trace-3000000.pcap")
    });
    let link = FileReader::open(&path)
        .with_context(|| {
            format!(
                "{} (build it with mktrace, see bench/README.md)",
                path.display()
            )
        })?
        .interfaces()
        .first()
        .map_or(LinkType::ETHERNET, |i| i.link);
    let model = std::process::Command::new("lscpu")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.starts_with("Model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let t = Instant::now();
    let seen = survey(&path)?;
    eprintln!(
        "{}: {} packets, {} conversations, {} addresses (survey {:.1} s)",
        path.display(),
        seen.packets,
        seen.convs.len(),
        seen.hosts.len(),
        t.elapsed().as_secs_f64()
    );

    let mut cases = vec![Case {
        name: "decode only (no engine)".into(),
        engine: None,
        build: String::new(),
        wall: Vec::new(),
        cpu: Vec::new(),
        kept: 0,
    }];
    cases.push(build("no rules", "", link)?);
    for n in [1, 100, 10_000, 1_000_000] {
        cases.push(build(&format!("{n} exact"), &exact_rules(&seen, n), link)?);
    }
    cases.push(build("1000 wildcard", &wildcard_rules(&seen, 1000), link)?);
    cases.push(build("100 patterns", &pattern_rules(100), link)?);
    cases.push(build("10000 patterns", &pattern_rules(10_000), link)?);
    let hosts: Vec<IpAddr> = seen
        .hosts
        .iter()
        .copied()
        .filter(IpAddr::is_ipv4)
        .take(10_000)
        .collect();
    let host_rules: String = hosts
        .iter()
        .map(|h| format!("host {h} -> pass\n"))
        .collect();
    cases.push(build(
        &format!("{} host rules", hosts.len()),
        &format!("default drop\n{host_rules}"),
        link,
    )?);

    for i in 0..args.rounds {
        for c in cases.iter_mut() {
            round(&path, c)?;
            eprintln!(
                "round {i}: {} {:.2} s CPU",
                c.name,
                c.cpu.last().unwrap_or(&0.0)
            );
        }
    }
    eprintln!(
        "compiling the BPF program of {} hosts with libpcap",
        hosts.len()
    );

    // the BPF program of the same hosts: libpcap's compile time, then weir-filter running it
    let expr = hosts
        .iter()
        .map(|h| format!("host {h}"))
        .collect::<Vec<_>>()
        .join(" or ");
    // the small program first: libpcap compiles under one process-wide lock, which an
    // unfinished 10 000-host compile would hold for good
    let part = hosts.len().min(args.bpf_fallback_hosts);
    let small_expr = hosts[..part]
        .iter()
        .map(|h| format!("host {h}"))
        .collect::<Vec<_>>()
        .join(" or ");
    let t1 = Instant::now();
    let small_filter = weir_filter::Filter::compile(&small_expr, link, 262_144)?;
    let small = t1.elapsed().as_secs_f64();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = Instant::now();
    // libpcap's parser and optimiser recurse deeply on 10 000 terms: a large stack
    std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(move || {
            let _ = tx.send(weir_filter::Filter::compile(&expr, link, 262_144));
        })?;
    let (filter, bpf_compile, scale, compile_note) = match rx
        .recv_timeout(Duration::from_secs(args.bpf_timeout))
    {
        Ok(f) => {
            let secs = t.elapsed().as_secs_f64();
            (f?, secs, 1.0, format!("{secs:.2} s"))
        }
        Err(_) => {
            eprintln!(
                "libpcap still compiling after {} s; timing the {part}-host program",
                args.bpf_timeout
            );
            (
                    small_filter,
                    args.bpf_timeout as f64,
                    hosts.len() as f64 / part as f64,
                    format!(
                        "> {} s (unfinished; {part} hosts: {small:.2} s); run rate of the {part}-host program x {:.0}",
                        args.bpf_timeout,
                        hosts.len() as f64 / part as f64
                    ),
                )
        }
    };
    let mut r = FileReader::open(&path)?;
    let mut bpf_pkts: Vec<(Vec<u8>, u32)> = Vec::new();
    while bpf_pkts.len() < args.bpf_packets {
        let Some(p) = r.next_packet()? else { break };
        bpf_pkts.push((p.data.to_vec(), p.meta.orig_len));
    }
    let (t, c) = (Instant::now(), thread_cpu());
    let bpf_kept = bpf_pkts
        .iter()
        .filter(|(d, w)| filter.matches(black_box(d), *w))
        .count();
    let bpf_wall = t.elapsed().as_secs_f64();
    let bpf_cpu = (thread_cpu() - c).as_secs_f64();
    // wall time: the run is too short for the scheduler's CPU accounting
    let _ = bpf_cpu;
    let bpf_ns = bpf_wall * 1e9 / bpf_pkts.len() as f64 * scale;

    let n = seen.packets as f64;
    println!(
        "\nweir-rules on {} ({} packets), {model}, median of {} rounds",
        path.display(),
        seen.packets,
        args.rounds
    );
    println!(
        "{:<26} {:>9} {:>9} {:>12} {:>10} {:>11} {:>9}  build",
        "rule set", "wall s", "CPU s", "Mpkt/s/core", "ns/pkt", "engine ns", "kept %"
    );
    let base_cpu = median(&mut cases[0].cpu.clone());
    let none_cpu = median(&mut cases[1].cpu.clone());
    let mut rows = Vec::new();
    for c in cases.iter_mut() {
        let (w, cpu) = (median(&mut c.wall), median(&mut c.cpu));
        println!(
            "{:<26} {:>9.3} {:>9.3} {:>12.2} {:>10.1} {:>11.1} {:>8.1}%  {}",
            c.name,
            w,
            cpu,
            n / cpu / 1e6,
            cpu * 1e9 / n,
            (cpu - base_cpu) * 1e9 / n,
            c.kept as f64 * 100.0 / n,
            c.build
        );
        rows.push((c.name.clone(), cpu));
    }
    println!(
        "{:<26} {:>9} {:>9.3} {:>12.3} {:>10.1} {:>11.1} {:>8.1}%  libpcap compile {}, {} insns; run on the first {} packets only ({:.3} s wall), rate extrapolated",
        format!("BPF, {} hosts", hosts.len()),
        "-",
        bpf_ns * n / 1e9,
        1e3 / bpf_ns,
        bpf_ns,
        bpf_ns,
        bpf_kept as f64 * 100.0 / bpf_pkts.len() as f64,
        compile_note,
        filter.instructions().len(),
        bpf_pkts.len(),
        bpf_wall,
    );
    let host_cpu = rows.last().map_or(0.0, |r| r.1);
    let engine_host = (host_cpu - base_cpu).max(1e-9);
    println!(
        "\n1 M exact rules: {:.0} % of the no-rule throughput (whole loop incl. reading and decoding)",
        none_cpu / rows[5].1 * 100.0
    );
    println!(
        "10 000 host rules vs the BPF program, whole trace, compile + run: BPF {:.1} s vs rules {:.2} s + build → {:.0}x; per packet, engine only: {:.0}x",
        bpf_compile + bpf_ns * n / 1e9,
        host_cpu,
        (bpf_compile + bpf_ns * n / 1e9) / host_cpu,
        bpf_ns / (engine_host * 1e9 / n)
    );
    // a libpcap compile that timed out may still be running in its thread: do not wait for it
    std::process::exit(0)
}
