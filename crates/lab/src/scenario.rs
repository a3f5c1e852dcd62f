//! Scenarios: a TOML file naming the traffic (an interactive stamped stream, bulk traffic, CPU
//! stress) and the setups to compare; [`run`] measures each setup on a [`Bench`] and writes the
//! table, the JSON results and the overlaid charts.
//!
//! ```toml
//! name = "tbf-vs-pfifo"
//! duration = 5.0          # seconds of interactive traffic per setup
//! warmup = 1.0            # seconds of bulk traffic alone first
//!
//! [interactive]           # weir gen, stamped, captured and matched
//! size = 200              # frame bytes (without FCS)
//! interval_ms = 10.0
//! tos = 0xc0
//!
//! [bulk]
//! tool = "gen"            # "gen" (UDP from weir gen), "iperf3" (TCP) or "none"
//! rate_mbit = 20.0        # weir gen --mbps / iperf3 -b (0 = unlimited TCP)
//! size = 1514             # gen frame size
//! streams = 1             # iperf3 -P
//!
//! [stress]
//! cpu = 0                 # stress-ng --cpu N during each setup (0 = none)
//!
//! [[setup]]
//! label = "pfifo_fast"
//! qdisc = "pfifo_fast"    # tc qdisc replace dev out0 root <this> ("handle 1: htb ..." works)
//!
//! [[setup]]
//! label = "tbf 10mbit 20ms"
//! qdisc = "tbf rate 10mbit burst 5kb latency 20ms"
//! # tc = ["class add dev {dev} parent 1: classid 1:10 htb rate 10mbit"]  # more tc lines
//! # bql = 3000            # byte queue limit on out0
//! # tsq = 16384           # TCP small queues on the sender
//! # xdp = true            # XDP forwarding in the router
//! # bulk = false          # no bulk traffic for this setup
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bench::{Bench, Role, RECEIVER_IP, SENDER_IP};
use crate::caps::{Capabilities, QDISCS};
use crate::knobs;
use crate::traffic;
use crate::xdp::mac_bytes;
use crate::LabError;
use weir_gen::Rate;

/// A scenario file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Its name (used for the output folder).
    pub name: String,
    /// Seconds of interactive traffic per setup.
    #[serde(default = "default_duration")]
    pub duration: f64,
    /// Seconds of bulk traffic before the interactive stream starts.
    #[serde(default = "default_warmup")]
    pub warmup: f64,
    /// The measured stream.
    #[serde(default)]
    pub interactive: Interactive,
    /// The load.
    #[serde(default)]
    pub bulk: Bulk,
    /// CPU stress.
    #[serde(default)]
    pub stress: Stress,
    /// The setups compared.
    #[serde(rename = "setup")]
    pub setups: Vec<Setup>,
}

fn default_duration() -> f64 {
    5.0
}
fn default_warmup() -> f64 {
    1.0
}

/// The interactive stream.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Interactive {
    /// Frame size in bytes (without FCS).
    pub size: u32,
    /// Milliseconds between packets.
    pub interval_ms: f64,
    /// TOS byte.
    #[serde(default)]
    pub tos: u8,
}

impl Default for Interactive {
    fn default() -> Self {
        Interactive {
            size: 200,
            interval_ms: 10.0,
            tos: 0xc0,
        }
    }
}

/// The bulk traffic.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Bulk {
    /// "gen", "iperf3" or "none".
    pub tool: String,
    /// Rate in Mbit/s (iperf3: 0 = as fast as TCP goes).
    #[serde(default)]
    pub rate_mbit: f64,
    /// Frame size for gen.
    #[serde(default = "default_bulk_size")]
    pub size: u32,
    /// Parallel iperf3 streams.
    #[serde(default = "default_streams")]
    pub streams: u32,
}

fn default_bulk_size() -> u32 {
    1514
}
fn default_streams() -> u32 {
    1
}

impl Default for Bulk {
    fn default() -> Self {
        Bulk {
            tool: "none".into(),
            rate_mbit: 0.0,
            size: 1514,
            streams: 1,
        }
    }
}

/// CPU stress.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Stress {
    /// stress-ng CPU workers (0 = none).
    #[serde(default)]
    pub cpu: u32,
}

/// One setup to measure.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Setup {
    /// Its label in tables and charts.
    pub label: String,
    /// Root qdisc of the bottleneck: kind and arguments, as `tc` takes them.
    #[serde(default)]
    pub qdisc: Option<String>,
    /// More `tc` lines (`{dev}` is the bottleneck), run after the qdisc.
    #[serde(default)]
    pub tc: Vec<String>,
    /// Byte queue limit of the bottleneck.
    #[serde(default)]
    pub bql: Option<u64>,
    /// TCP small queues limit on the sender.
    #[serde(default)]
    pub tsq: Option<u64>,
    /// XDP forwarding in the router.
    #[serde(default)]
    pub xdp: bool,
    /// Run the bulk traffic (default true).
    #[serde(default = "yes")]
    pub bulk: bool,
}

fn yes() -> bool {
    true
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, LabError> {
        let text = std::fs::read_to_string(path).map_err(|e| LabError::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        let s: Scenario = toml::from_str(&text)
            .map_err(|e| LabError::Config(format!("{}: {e}", path.display())))?;
        if s.setups.is_empty() {
            return Err(LabError::Config(format!(
                "{}: no [[setup]]",
                path.display()
            )));
        }
        if !(s.duration > 0.0 && s.warmup >= 0.0 && s.interactive.interval_ms > 0.0) {
            return Err(LabError::Config(format!(
                "{}: duration and interval must be positive",
                path.display()
            )));
        }
        if !["gen", "iperf3", "none"].contains(&s.bulk.tool.as_str()) {
            return Err(LabError::Config(format!(
                "{}: bulk.tool must be gen, iperf3 or none",
                path.display()
            )));
        }
        for setup in &s.setups {
            let checked = setup
                .bql
                .map(knobs::check_bql)
                .transpose()
                .and(setup.tsq.map(knobs::check_tsq).transpose());
            if let Err(e) = checked {
                return Err(LabError::Config(format!(
                    "{}: setup '{}': {e}",
                    path.display(),
                    setup.label
                )));
            }
        }
        if s.bulk.tool == "gen" && s.bulk.rate_mbit <= 0.0 {
            return Err(LabError::Config(format!(
                "{}: bulk.tool = \"gen\" needs rate_mbit > 0",
                path.display()
            )));
        }
        Ok(s)
    }
}

/// Why a setup cannot be applied here, or `None`.
pub fn unsupported(setup: &Setup, caps: &Capabilities) -> Option<String> {
    let mut why = Vec::new();
    let mut words: Vec<&str> = setup
        .qdisc
        .iter()
        .flat_map(|q| q.split_whitespace())
        .collect();
    words.extend(setup.tc.iter().flat_map(|l| l.split_whitespace()));
    for (kind, _) in QDISCS {
        if words.contains(&kind) {
            if let Some(m) = caps.qdisc_missing(kind) {
                why.push(format!("qdisc {kind} is not offered by this kernel ({m})"));
            }
        }
    }
    if setup.bql.is_some() {
        if let Some(m) = &caps.bql.missing {
            why.push(format!("BQL: {m}"));
        }
    }
    if setup.tsq.is_some() {
        if let Some(m) = &caps.tsq.missing {
            why.push(format!("TSQ: {m}"));
        }
    }
    if setup.xdp {
        if let Some(m) = &caps.xdp.missing {
            why.push(format!("XDP: {m}"));
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Kills a child we started (by its pid) if it still runs, and reaps it.
struct Guard(Option<Child>);

impl Guard {
    fn interrupt_and_wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.0.take()?;
        // The child is not reaped yet, so its pid is still its own.
        crate::bench::signal(child.id() as i32, libc::SIGINT);
        let t = std::time::Instant::now();
        while t.elapsed() < timeout {
            if let Ok(Some(s)) = child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        child.wait().ok()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `cmd` with stderr piped and waits until a line containing `banner` appears (or the
/// process ends); the rest of stderr is kept in the returned buffer's thread.
fn start(mut cmd: Command, banner: &str, what: &str) -> Result<Guard, LabError> {
    use std::io::{BufRead, BufReader};
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LabError::Command {
            cmd: what.into(),
            stderr: e.to_string(),
        })?;
    let mut err = BufReader::new(child.stderr.take().expect("piped"));
    let mut line = String::new();
    let mut seen = String::new();
    loop {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LabError::Command {
                cmd: what.into(),
                stderr: format!("exited before it was ready: {}", seen.trim()),
            });
        }
        seen.push_str(&line);
        if line.contains(banner) {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    Ok(Guard(Some(child)))
}

/// The capture filter: the interactive stream (UDP 9000) and weir gen's bulk (UDP 9001).
const CAPTURE_FILTER: &str = "udp and (dst port 9000 or dst port 9001)";

/// The result of one setup.
pub struct SetupResult {
    /// Its label.
    pub label: String,
    /// The analysis (None when the setup was skipped).
    pub run: Option<weir_latency::Run>,
    /// Why it was skipped.
    pub skipped: Option<String>,
}

fn secs(s: f64) -> String {
    format!("{s:.3}")
}

/// Measures one setup: apply it, capture, load, send, analyse.
fn measure(
    bench: &Bench,
    sc: &Scenario,
    setup: &Setup,
    out: &Path,
    tag: &str,
) -> Result<weir_latency::Run, LabError> {
    let state = bench.state()?;
    let (Some(sender_mac), Some(router_in_mac)) = (state.macs.first(), state.macs.get(1)) else {
        return Err(LabError::Config(
            "bench state has no MACs: run weir lab up".into(),
        ));
    };
    let (sender_mac, router_in_mac) = (mac_bytes(sender_mac)?, mac_bytes(router_in_mac)?);
    // Apply.
    knobs::reset_qdisc(bench);
    let _ = knobs::xdp(bench, false);
    if let Some(q) = &setup.qdisc {
        let words: Vec<&str> = q.split_whitespace().collect();
        match words.split_first() {
            // `handle 1: htb ...`: tc takes the handle before the kind.
            Some((&"handle", _)) => {
                knobs::tc(bench, &format!("qdisc replace dev {{dev}} root {q}"))?
            }
            Some((kind, args)) => knobs::qdisc(bench, None, kind, args)?,
            None => {}
        }
    }
    for line in &setup.tc {
        knobs::tc(bench, line)?;
    }
    if let Some(l) = setup.bql {
        knobs::bql(bench, l)?;
    }
    if let Some(t) = setup.tsq {
        knobs::tsq(bench, t)?;
    }
    if setup.xdp {
        knobs::xdp(bench, true)?;
    }
    // Capture before the bottleneck (as the sender's eth0 sends: the router's in0 would miss
    // what an XDP forwarder takes before the stack) and after it (as the receiver gets it).
    let a = out.join(format!("{tag}-a.pcap"));
    let b = out.join(format!("{tag}-b.pcap"));
    let mut cap_a = traffic::capture(&bench.ns(Role::Sender), "eth0", &a, CAPTURE_FILTER)?;
    let mut cap_b = traffic::capture(&bench.ns(Role::Receiver), "eth0", &b, CAPTURE_FILTER)?;
    let total = sc.warmup + sc.duration + 0.5;
    // The streams weir gen would send: from the sender's eth0 to the router's in0, stamped.
    let stream = |dport, stream, size: u32, tos, rate, duration: f64| traffic::Stream {
        src_mac: sender_mac,
        dst_mac: router_in_mac,
        src: SENDER_IP.parse().expect("an address"),
        dst: RECEIVER_IP.parse().expect("an address"),
        dport,
        stream,
        size: size as usize,
        tos,
        rate,
        // To the millisecond, as it was given on weir gen's command line.
        duration: secs(duration).parse().expect("a number"),
    };
    // Load.
    let mut bulk_gen = None;
    let mut bulk = Guard(None);
    let mut server = Guard(None);
    if setup.bulk {
        match sc.bulk.tool.as_str() {
            "gen" => {
                let s = stream(
                    9001,
                    1000,
                    sc.bulk.size,
                    0,
                    Rate::Mbps(sc.bulk.rate_mbit),
                    total,
                );
                let ns = bench.ns(Role::Sender);
                bulk_gen = Some(traffic::send("weir gen (bulk)", &ns, "eth0", s)?);
            }
            "iperf3" => {
                let mut s = bench.command(Role::Receiver, "iperf3");
                s.args(["-s", "-1", "-p", "5201", "--forceflush"]);
                // iperf3 prints its banner on stdout: route it to stderr for `start`.
                s.arg("--logfile").arg("/dev/stderr");
                server = start(s, "listening", "iperf3 -s")?;
                let mut c = bench.command(Role::Sender, "iperf3");
                c.args([
                    "-c",
                    RECEIVER_IP,
                    "-p",
                    "5201",
                    "-t",
                    &format!("{}", total.ceil()),
                ])
                .args(["-P", &sc.bulk.streams.to_string()])
                .args(["-b", &format!("{}M", sc.bulk.rate_mbit)])
                .args(["--forceflush", "--logfile", "/dev/stderr"]);
                bulk = start(c, "Connecting", "iperf3 -c")?;
            }
            _ => {}
        }
    }
    let mut stress = Guard(None);
    if sc.stress.cpu > 0 {
        let child = Command::new("stress-ng")
            .args(["--cpu", &sc.stress.cpu.to_string(), "--timeout"])
            .arg(format!("{}s", total.ceil()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| LabError::Command {
                cmd: "stress-ng".into(),
                stderr: e.to_string(),
            })?;
        stress = Guard(Some(child));
    }
    std::thread::sleep(Duration::from_secs_f64(sc.warmup));
    // The measured stream.
    let pps = 1000.0 / sc.interactive.interval_ms;
    let s = stream(
        9000,
        1,
        sc.interactive.size,
        sc.interactive.tos,
        Rate::Pps(pps),
        sc.duration,
    );
    let ns = bench.ns(Role::Sender);
    traffic::send("weir gen (interactive)", &ns, "eth0", s)?.wait()?;
    // Let the queue drain, then stop everything we started (what the bulk load and the
    // captures say as they stop does not matter: the analysis reads what was captured).
    std::thread::sleep(Duration::from_millis(300));
    if let Some(mut g) = bulk_gen {
        let _ = g.stop();
    }
    bulk.interrupt_and_wait(Duration::from_secs(5));
    server.interrupt_and_wait(Duration::from_secs(2));
    stress.interrupt_and_wait(Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(200));
    let _ = cap_a.stop();
    let _ = cap_b.stop();
    if setup.xdp {
        let _ = knobs::xdp(bench, false);
    }
    let cfg = weir_latency::Config {
        window_ns: 5_000_000_000,
        ..Default::default()
    };
    Ok(weir_latency::analyze(&a, &b, &cfg, &mut |_| {})?)
}

/// Runs every setup of `sc` on `bench` (which must be up), writing `table.txt`, `results.json`
/// and the charts into `out`. Setups the kernel cannot apply are skipped with the reason.
/// Captures and weir's traffic run in threads of this process inside the namespaces
/// (the private module `traffic`); iperf3 and stress-ng are processes.
pub fn run(
    bench: &Bench,
    caps: &Capabilities,
    sc: &Scenario,
    out: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<SetupResult>, LabError> {
    std::fs::create_dir_all(out).map_err(|e| LabError::Io {
        path: out.display().to_string(),
        source: e,
    })?;
    if sc.bulk.tool == "iperf3" && Command::new("iperf3").arg("--version").output().is_err() {
        return Err(LabError::Unsupported(
            "bulk.tool = iperf3 but iperf3 is not installed".into(),
        ));
    }
    let tsq_default = knobs::tsq_current(bench);
    let mut results = Vec::new();
    for (i, setup) in sc.setups.iter().enumerate() {
        if let Some(why) = unsupported(setup, caps) {
            progress(&format!("setup '{}': skipped: {why}", setup.label));
            results.push(SetupResult {
                label: setup.label.clone(),
                run: None,
                skipped: Some(why),
            });
            continue;
        }
        progress(&format!("setup '{}': measuring", setup.label));
        let tag = format!("{:02}", i + 1);
        let r = measure(bench, sc, setup, out, &tag);
        knobs::reset_qdisc(bench);
        if let Some(t) = tsq_default {
            let _ = knobs::tsq(bench, t);
        }
        match r {
            Ok(run) => results.push(SetupResult {
                label: setup.label.clone(),
                run: Some(run),
                skipped: None,
            }),
            Err(e @ LabError::Unsupported(_)) => {
                progress(&format!("setup '{}': skipped: {e}", setup.label));
                results.push(SetupResult {
                    label: setup.label.clone(),
                    run: None,
                    skipped: Some(e.to_string()),
                });
            }
            Err(e) => return Err(e),
        }
    }
    write_results(sc, &results, out)?;
    Ok(results)
}

fn write_results(sc: &Scenario, results: &[SetupResult], out: &Path) -> Result<(), LabError> {
    use weir_latency::report::{self, Labelled};
    let io = |p: &Path, e| LabError::Io {
        path: p.display().to_string(),
        source: e,
    };
    let labelled: Vec<Labelled<'_>> = results
        .iter()
        .filter_map(|r| {
            r.run.as_ref().map(|run| Labelled {
                label: &r.label,
                run,
            })
        })
        .collect();
    let mut table = report::table(&labelled);
    for r in results.iter().filter(|r| r.skipped.is_some()) {
        table.push_str(&format!(
            "{}: not measured: {}\n",
            r.label,
            r.skipped.as_deref().unwrap_or_default()
        ));
    }
    let p = out.join("table.txt");
    std::fs::write(&p, &table).map_err(|e| io(&p, e))?;
    let mut doc = report::json(&labelled);
    doc["scenario"] = serde_json::to_value(sc).expect("scenario serialises");
    doc["skipped"] = results
        .iter()
        .filter_map(|r| {
            r.skipped
                .as_ref()
                .map(|w| serde_json::json!({"label": r.label, "why": w}))
        })
        .collect();
    let p = out.join("results.json");
    std::fs::write(&p, serde_json::to_string_pretty(&doc).expect("json")).map_err(|e| io(&p, e))?;
    // Charts: the interactive stream of every setup, overlaid.
    let series: Vec<weir_latency::plot::Series<'_>> = results
        .iter()
        .filter_map(|r| r.run.as_ref().map(|run| (r, run)))
        .flat_map(|(r, run)| {
            run.streams
                .iter()
                .filter(|(n, _)| n == "stream 1")
                .map(move |(_, st)| weir_latency::plot::Series {
                    label: r.label.clone(),
                    stats: st,
                    start_ns: run.start_ns,
                })
        })
        .collect();
    if !series.is_empty() {
        weir_latency::plot::plot_all(out, &series)?;
    }
    Ok(())
}

/// Runs `sc` on `bench` the way `weir lab run` does: probes what the kernel offers, builds the
/// bench when it is not up (and removes it afterwards unless `keep`), and runs every setup,
/// writing into `out` (see [`run`]).
pub fn run_on(
    bench: &Bench,
    sc: &Scenario,
    out: &Path,
    keep: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<SetupResult>, LabError> {
    let caps = crate::caps::probe()?;
    let was_up = bench.exists();
    if !was_up {
        bench
            .up()
            .map_err(|e| LabError::Config(format!("cannot build the bench: {e}")))?;
    }
    let r = run(bench, &caps, sc, out, progress);
    if !keep && !was_up {
        bench.down()?;
    }
    r
}

/// A default output folder for a scenario: `lab-results/NAME-YYYYmmddTHHMMSS` (UTC).
pub fn default_out(sc: &Scenario) -> PathBuf {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("lab-results").join(format!("{}-{t}", sc.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Finding;

    fn caps(missing: &[&str]) -> Capabilities {
        let f = |what: &str| Finding {
            what: what.into(),
            missing: missing.contains(&what).then(|| "not here".to_string()),
        };
        Capabilities {
            qdiscs: QDISCS.iter().map(|(k, _)| f(k)).collect(),
            bql: f("bql"),
            tsq: f("tsq"),
            xdp: f("xdp"),
        }
    }

    #[test]
    fn out_of_range_limits_are_refused_at_load() {
        let p = std::env::temp_dir().join(format!("weir-lab-bql-{}.toml", std::process::id()));
        let text = |knob: &str| {
            format!(
                "name = \"x\"\nduration = 1.0\nwarmup = 0.0\n[interactive]\nsize = 200\n\
                 interval_ms = 10.0\n[bulk]\ntool = \"none\"\n[[setup]]\nlabel = \"big\"\n{knob}\n"
            )
        };
        std::fs::write(&p, text("bql = 3028")).unwrap();
        assert_eq!(Scenario::load(&p).unwrap().setups[0].bql, Some(3028));
        std::fs::write(&p, text("bql = 4294967296")).unwrap();
        let e = Scenario::load(&p).unwrap_err().to_string();
        std::fs::write(&p, text("tsq = 2147483648")).unwrap();
        let t = Scenario::load(&p).unwrap_err().to_string();
        let _ = std::fs::remove_file(&p);
        assert_eq!(
            e,
            format!(
                "{}: setup 'big': byte queue limit 4294967296 is out of range: 0 to 1879048192 bytes",
                p.display()
            )
        );
        assert!(t.ends_with("setup 'big': TCP small queues limit 2147483648 is out of range: 0 to 2147483647 bytes"), "{t}");
    }

    #[test]
    fn shipped_scenarios_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let s = Scenario::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                assert!(!s.setups.is_empty());
                n += 1;
            }
        }
        assert!(n >= 4, "{n} scenarios");
    }

    #[test]
    fn doc_example_parses() {
        let doc = include_str!("scenario.rs");
        let toml_text: String = doc
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| format!("{}\n", l.strip_prefix("//!").unwrap_or(l).trim_start()))
            .collect();
        let s: Scenario = toml::from_str(&toml_text).unwrap();
        assert_eq!(s.setups.len(), 2);
        assert_eq!(s.interactive.tos, 0xc0);
    }

    #[test]
    fn unsupported_names_every_missing_piece() {
        let setup = Setup {
            label: "x".into(),
            qdisc: Some("handle 1: htb default 10".into()),
            tc: vec!["qdisc add dev {dev} parent 1:10 fq_codel".into()],
            bql: Some(3000),
            tsq: None,
            xdp: true,
            bulk: true,
        };
        assert_eq!(unsupported(&setup, &caps(&[])), None);
        let why = unsupported(&setup, &caps(&["fq_codel", "bql", "htb"])).unwrap();
        assert!(why.contains("qdisc htb"), "{why}");
        assert!(why.contains("qdisc fq_codel"), "{why}");
        assert!(why.contains("BQL"), "{why}");
        assert!(!why.contains("XDP"), "{why}");
    }
}
