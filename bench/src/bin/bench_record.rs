//! Disk benchmark of the recorder: how fast `weir-store` writes a full packet buffer to disk,
//! next to `dd oflag=direct bs=1M` writing the same number of bytes to the same filesystem.
//!
//! Each round fills a packet buffer (default 4 GiB) with the corpus trace's packets, untimed,
//! then times a recorder draining it into a fresh store (pcapng segments of 1 GiB, O_DIRECT
//! writes straight from the buffer, the final `fdatasync` included), then times `dd
//! if=/dev/zero oflag=direct bs=1M` for the same bytes (its `conv=fdatasync` too). The median
//! round of each is reported with the ratio, and the CPU time of the recorder thread. Each round
//! also drains a second full buffer with the index turned off: the difference in the recorder
//! thread's CPU time is the indexing cost, measured where it is paid.
//!
//! `cargo run --release -p weir-bench --bin bench_record -- [--rounds 5] [--buffer-mib 4096]`

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use weir_buffer::{Config, Dropped};
use weir_pcap::FileReader;
use weir_pcap::Interface;
use weir_store::{Options, Recorder, Store};

/// Time the recorder against dd with O_DIRECT.
#[derive(Parser)]
struct Args {
    /// Rounds (the median is reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Packet buffer size in MiB (a power of two): the bytes written per round.
    #[arg(long, default_value_t = 4096)]
    buffer_mib: usize,
    /// Trace whose packets fill the buffer (built by `mktrace`).
    #[arg(long, default_value = "bench/out/trace-3000000.pcap")]
    trace: PathBuf,
    /// Directory to write in (on the disk to measure).
    #[arg(long, default_value = "bench/out/record-bench")]
    dir: PathBuf,
}

fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn main() -> Result<()> {
    let args = Args::parse();
    let size = args.buffer_mib << 20;
    if !size.is_power_of_two() {
        bail!("--buffer-mib must be a power of two");
    }
    let mut weir = Vec::new();
    let mut dd = Vec::new();
    let mut cpu = Vec::new();
    let mut cpu_plain = Vec::new();
    let mut gbs = 0.0;
    for round in 0..args.rounds {
        let _ = std::fs::remove_dir_all(&args.dir);
        std::fs::create_dir_all(&args.dir)?;
        let mut bytes = 0;
        for indexed in [true, false] {
            // Fill the buffer (untimed) by replaying the trace until it is full.
            let buffer = Config::new(size).readers(1).max_writers(1).build()?;
            let mut reader = buffer.reader(0)?;
            let mut writer = buffer.writer()?;
            let mut links = None;
            'fill: loop {
                let mut r = FileReader::open(&args.trace)
                    .with_context(|| format!("{} (run mktrace first)", args.trace.display()))?;
                links.get_or_insert_with(|| r.interfaces()[0].link);
                while let Some(p) = r.next_packet()? {
                    match writer.push(0, p.meta.ts_ns, p.meta.orig_len, p.data) {
                        Ok(()) => {}
                        Err(Dropped::Full) => break 'fill,
                        Err(e) => bail!("{e}"),
                    }
                }
            }
            bytes = buffer.stats().reserved;
            gbs = bytes as f64 / 1e9;
            let iface = Interface {
                name: Some("bench".into()),
                ..Interface::new(links.expect("a packet"), 262_144)
            };
            let store_dir = args.dir.join("store");
            let mut opts = Options::new(vec![iface]);
            opts.segment_size = 1 << 30;
            if !indexed {
                opts.index_chunk = None;
            }
            let (store, _) = Store::open(&store_dir, opts.format, opts.segment_size, 262_144)?;
            let mut rec = Recorder::new(store, opts)?;
            let stop = AtomicBool::new(true);
            let t = Instant::now();
            let c = thread_cpu_s();
            let summary = rec.run(&mut reader, &stop)?;
            let secs = t.elapsed().as_secs_f64();
            if indexed {
                cpu.push(thread_cpu_s() - c);
            } else {
                cpu_plain.push(thread_cpu_s() - c);
            }
            if !summary.direct || summary.dropped != 0 {
                bail!("recorder: {summary:?}");
            }
            if indexed {
                weir.push(bytes as f64 / secs / 1e9);
            }
            drop(rec);
            drop(buffer);
            std::fs::remove_dir_all(&store_dir)?;
        }
        let out = args.dir.join("dd.out");
        let t = Instant::now();
        let st = Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", out.display()))
            .args(["bs=1M", "oflag=direct", "conv=fdatasync"])
            .arg(format!("count={}", bytes.div_ceil(1 << 20)))
            .stderr(std::process::Stdio::null())
            .status()?;
        let secs = t.elapsed().as_secs_f64();
        if !st.success() {
            bail!("dd failed");
        }
        dd.push(bytes as f64 / secs / 1e9);
        std::fs::remove_file(&out)?;
        eprintln!(
            "round {round}: {:.2} GB written; weir {:.2} GB/s, dd {:.2} GB/s",
            bytes as f64 / 1e9,
            weir[round],
            dd[round]
        );
    }
    let _ = std::fs::remove_dir_all(&args.dir);
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (w, d, c, p) = (
        med(&mut weir),
        med(&mut dd),
        med(&mut cpu),
        med(&mut cpu_plain),
    );
    println!(
        "\nrecorder draining a full {} MiB packet buffer to disk (median of {} rounds)",
        args.buffer_mib, args.rounds
    );
    println!("{:<28} {:>8}", "writer", "GB/s");
    println!("{:<28} {:>8.2}", "dd oflag=direct bs=1M", d);
    println!(
        "{:<28} {:>8.2}   ({:.0}% of dd; recorder thread CPU {:.2} s per round)",
        "weir-store (O_DIRECT)",
        w,
        w / d * 100.0,
        c
    );
    println!(
        "recorder thread CPU per GB: {:.3} s indexed, {:.3} s without the index: indexing costs \
         {:.3} s per GB = {:.1} % of one core at 2 GB/s",
        c / gbs,
        p / gbs,
        (c - p) / gbs,
        (c - p) / gbs * 2.0 * 100.0
    );
    Ok(())
}
