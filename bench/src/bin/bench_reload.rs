//! Rule reload, in process: writes a file of N exact rules (every other one dropping, like
//! `rules_vs_bpf.py`'s), then times, over several rounds, reading + parsing it, compiling it
//! into a fresh engine, a reload of it into a running engine (`Engine::reload_file`: read,
//! parse, compile, swap), and what the kernel-rules watcher does on a new version (the drop
//! rules a socket filter can run, `Engine::kernel_drops_snap`). Medians of wall time; the
//! live figure (a reload while `weir capture` runs on a veth pair with traffic) is
//! `bench/rules_reload.py`'s.
//!
//! `cargo run --release -p weir-bench --bin bench_reload -- [--rules N] [--rounds N]`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use weir_packet::LinkType;
use weir_rules::{Engine, RuleSet};

/// Time reloads of many exact rules.
#[derive(Parser)]
struct Args {
    /// Exact rules in the file.
    #[arg(long, default_value_t = 1_000_000)]
    rules: u32,
    /// Rounds (medians are printed).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Where to write the rule file (default: bench/out/rules-reload-N.txt).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Time reloads only (for a profiler: no separate parse and compile rounds).
    #[arg(long)]
    reload_only: bool,
}

/// The rule file: `exact tcp 100.A.B.C:P 100.64.0.1:80 -> drop|pass`.
fn rules_text(n: u32) -> String {
    let mut s = String::with_capacity(n as usize * 48);
    for i in 0..n {
        let action = if i % 2 == 0 { "drop" } else { "pass" };
        s += &format!(
            "exact tcp 100.{}.{}.{}:{} 100.64.0.1:80 -> {action}\n",
            (i >> 16) & 255,
            (i >> 8) & 255,
            i & 255,
            1024 + i % 60000
        );
    }
    s
}

/// CPU time of the whole process (every thread) so far, from /proc/self/stat (clock ticks).
fn cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // fields after the command name's closing parenthesis: utime is the 12th, stime the 13th
    let rest = s.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    // /proc counts in USER_HZ, 100 on Linux whatever the kernel's own tick
    Duration::from_millis(f.iter().sum::<u64>() * 10)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn main() -> Result<()> {
    let a = Args::parse();
    let path = a.file.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("out/rules-reload-{}.txt", a.rules))
    });
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(&path, rules_text(a.rules)).with_context(|| path.display().to_string())?;
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{} exact rules, {} rounds; CPU {model}, {} threads available; load average {}",
        a.rules,
        a.rounds,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let (mut parse, mut compile, mut reload, mut kernel) = (vec![], vec![], vec![], vec![]);
    let mut reload_cpu = vec![];
    let engine = Engine::new(RuleSet::default(), LinkType::ETHERNET, 262_144)?;
    for _ in 0..a.rounds {
        if a.reload_only {
            let (t, c) = (Instant::now(), cpu());
            engine.reload_file(&path)?;
            reload.push(t.elapsed());
            reload_cpu.push(cpu() - c);
            continue;
        }
        let t = Instant::now();
        let text = std::fs::read_to_string(&path)?;
        let set = RuleSet::parse(&text)?;
        parse.push(t.elapsed());
        drop(text);
        let t = Instant::now();
        let e = Engine::new(set, LinkType::ETHERNET, 262_144)?;
        compile.push(t.elapsed());
        drop(e);
        let (t, c) = (Instant::now(), cpu());
        engine.reload_file(&path)?;
        reload.push(t.elapsed());
        reload_cpu.push(cpu() - c);
        let t = Instant::now();
        let kd = engine.kernel_drops_snap(100, 262_144);
        kernel.push(t.elapsed());
        assert_eq!(kd.exact, 100);
    }
    if a.reload_only {
        println!(
            "reload (read, parse, compile, swap) {} wall, {} CPU (medians)",
            ms(median(reload)),
            ms(median(reload_cpu))
        );
        return Ok(());
    }
    let (n, mem) = engine.exact_size();
    println!(
        "read + parse {}; compile {}; reload (read, parse, compile, swap) {} wall, {} CPU; \
         kernel drop rules of the new version {}; {n} rules, table {:.1} MiB; engine's own \
         reload timer (last): {:?}",
        ms(median(parse)),
        ms(median(compile)),
        ms(median(reload)),
        ms(median(reload_cpu)),
        ms(median(kernel)),
        mem as f64 / (1 << 20) as f64,
        engine.reload_stats().last
    );
    Ok(())
}
