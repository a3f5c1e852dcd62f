//! `weir run CONFIG` (the service), `weir run --check` and `weir ctl`.
//!
//! * Bad config files, each refused by `--check` with the file, line, column and key, and the
//!   offending line (no panic, exit status 1); a closed stdout and /dev/full for `--check`.
//! * The example config of `packaging/` checks (its paths moved to a temporary directory), and
//!   the systemd unit passes `systemd-analyze verify`.
//! * Live, on two veth pairs in network namespaces made by the test: one process records both
//!   interfaces with a flow meter on each and rules on one; `weir ctl counters` during the run
//!   shows what was sent; SIGTERM ends it within 2 s with each job's summary; each store holds
//!   exactly what was sent (capinfos and tcpdump count), the rules dropped exactly the packets
//!   of their rule, the flows files hold one flow of each. Then kill -9: `weir ctl` says the
//!   socket is stale, and a new `weir run` replaces the socket and reopens the stores.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{run, segments, weir};
use serde_json::Value;

/// Writes `text` as a config file `name` in `dir`.
fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `weir run --check FILE`: (exit code, stdout, stderr).
fn check(file: &Path) -> (i32, String, String) {
    let out = run(weir().args(["run", "--check"]).arg(file));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_configs_are_named_by_line_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().display().to_string();
    let rules = write(
        tmp.path(),
        "bad.rules",
        "proto udp -> drop\nthis is no rule\n",
    );
    let base = format!("[[record]]\ninterface = \"lo\"\nstore = \"{d}/s\"\n");
    // (the config's text, "LINE:COL: KEY", a word of the message)
    let mut cases: Vec<(String, &str, &str)> = vec![
        (
            format!("{base}segment_mib = -5\n"),
            "4:15: record[0].segment_mib",
            "between 1 and",
        ),
        (
            format!("{base}segment_mib = 0\n"),
            "4:15: record[0].segment_mib",
            "between 1 and",
        ),
        (
            format!("{base}segment_mib = 99999999999999999999\n"),
            "4:15:",
            "",
        ),
        (
            format!("{base}max_mib = 1099511627777\n"),
            "4:11: record[0].max_mib",
            "between",
        ),
        (
            format!("{base}max_age_s = nan\n"),
            "4:13: record[0].max_age_s",
            "got NaN",
        ),
        (
            format!("{base}max_age_s = -inf\n"),
            "4:13: record[0].max_age_s",
            "seconds",
        ),
        (
            format!("{base}buffer_mib = 3\n"),
            "4:14: record[0].buffer_mib",
            "power of two",
        ),
        (
            format!("{base}threads = 0\n"),
            "4:11: record[0].threads",
            "between 1 and 256",
        ),
        (
            format!("{base}segment_mib = 2\nwrite_mib = 4\n"),
            "5:13: record[0].write_mib",
            "larger than a segment",
        ),
        (
            format!("{base}segmnt_mib = 5\n"),
            "4:1:",
            "unknown field `segmnt_mib`",
        ),
        (
            format!("{base}segment_mib = \"big\"\n"),
            "4:15:",
            "invalid type",
        ),
        (
            format!("{base}format = \"pcapx\"\n"),
            "4:10: record[0].format",
            "pcapng or pcap",
        ),
        (
            format!("{base}filter = \"port nonsense\"\n"),
            "4:10: record[0].filter",
            "",
        ),
        (
            format!("{base}rules = \"{}\"\n", rules.display()),
            "4:9: record[0].rules",
            "bad.rules: line 2, column 1: unknown word `this`",
        ),
        (
            format!("{base}[record.flows]\nidle_timeout_s = 0\n"),
            "5:18: record[0].flows.idle_timeout_s",
            "seconds",
        ),
        (
            format!("{base}[record.flows]\nexport = \"udp://\"\n"),
            "5:10: record[0].flows.export",
            "",
        ),
        (
            format!("{base}[record.flows]\nexport_format = \"v7\"\n"),
            "5:17: record[0].flows.export_format",
            "give `export`",
        ),
        (
            "[[record]]\ninterface = \"nosuchif0\"\nstore = \"/tmp/x\"\n".into(),
            "2:13: record[0].interface",
            "no interface `nosuchif0`",
        ),
        (
            "[[record]]\ninterface = \"lo\"\nstore = \"/nonexistent/dir/s\"\n".into(),
            "3:9: record[0].store",
            "/nonexistent/dir does not exist",
        ),
        (
            format!("{base}[[record]]\nname = \"two\"\ninterface = \"lo\"\nstore = \"{d}/s\"\n"),
            "7:9: record[1].store",
            "each job needs its own store",
        ),
        (
            format!("{base}[[record]]\nname = \"two\"\ninterface = \"lo\"\nstore = \"{d}/t\"\n"),
            "6:13: record[1].interface",
            "one record job per interface",
        ),
        (
            format!("{base}stats_json = \"{d}/c.sock\"\n[control]\nsocket = \"{d}/c.sock\"\n"),
            "4:14: record[0].stats_json",
            "also control.socket",
        ),
        (
            format!("[control]\nsocket = \"{d}/c.sock\"\ngroup = \"no-such-group-x\"\n{base}"),
            "3:9: control.group",
            "no group",
        ),
        (
            format!("{base}store = \"{d}/u\"\n"),
            "4:1:",
            "duplicate key",
        ),
        (format!("{base}[record\n"), "4:", ""),
        (
            format!(
                "[[record]]\ninterface = \"lo\"\nstore = \"{}\"\n",
                rules.display()
            ),
            "3:9: record[0].store",
            "exists and is not a directory",
        ),
    ];
    // the store is the config file itself
    let own = format!("c{}.toml", cases.len());
    cases.push((
        format!("[[record]]\ninterface = \"lo\"\nstore = \"{own}\"\n"),
        "3:9: record[0].store",
        "exists and is not a directory",
    ));
    for (i, (text, at, word)) in cases.iter().enumerate() {
        let file = write(tmp.path(), &format!("c{i}.toml"), text);
        let (code, out, err) = check(&file);
        assert_eq!(code, 1, "{text}: {err}");
        assert!(out.is_empty(), "{text}: {out}");
        let want = format!("weir: error: {}:{at}", file.display());
        assert!(err.starts_with(&want), "{text}\nwant {want}\ngot {err}");
        assert!(err.contains(word), "{text}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        let line: usize = at.split(':').next().unwrap().parse().unwrap();
        assert!(
            err.contains(&format!("\n  {line} | ")),
            "the line is quoted: {err}"
        );
    }
    // no job at all, a missing file, a directory
    let empty = write(tmp.path(), "empty.toml", "# nothing\n");
    let (code, _, err) = check(&empty);
    assert_eq!(code, 1);
    assert!(err.contains("no job: add a [[record]] table"), "{err}");
    let (code, _, err) = check(&tmp.path().join("missing.toml"));
    assert_eq!(code, 1);
    assert!(err.contains("cannot read the config file"), "{err}");
    let (code, _, err) = check(tmp.path());
    assert_eq!(code, 1);
    assert!(err.contains("cannot read the config file"), "{err}");
}

/// The example config, its paths moved under `dir`.
fn example(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/weir.example.toml"),
    )
    .unwrap();
    let d = dir.display().to_string();
    write(
        dir,
        "weir.toml",
        &text.replace("/var/lib/weir", &d).replace("/run/weir", &d),
    )
}

#[test]
fn the_example_config_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let file = example(tmp.path());
    let (code, out, err) = check(&file);
    assert_eq!(code, 0, "{err}");
    let d = tmp.path().display();
    assert_eq!(
        out,
        format!(
            "control socket {d}/control.sock (mode 0660)\n\
             job lo: record lo into {d}/lo (pcapng, segments of 1024 MiB, writes of 4 MiB, at \
             most 102400 MiB, at most 604800 s old, index on (128 KiB chunks)), buffer 512 MiB, \
             1 thread(s), snaplen 262144, filter `not port 22`\n  \
             flows: idle timeout 30 s, active timeout 120 s, ipfix to udp://127.0.0.1:2055\n\
             {}: valid, 1 job(s)\n",
            file.display()
        )
    );
    // nothing was created
    assert!(!tmp.path().join("lo").exists() && !tmp.path().join("control.sock").exists());
    // a closed stdout is a quiet success; a full disk an error
    let out = run(Command::new("sh").arg("-c").arg(format!(
        "{} run --check {} | head -c0",
        env!("CARGO_BIN_EXE_weir"),
        file.display()
    )));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(weir()
        .args(["run", "--check"])
        .arg(&file)
        .stdout(std::fs::File::create("/dev/full").unwrap()));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("No space left"));
}

#[test]
fn the_systemd_unit_verifies() {
    if !weir_testkit::have("systemd-analyze") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/weir.service"),
    )
    .unwrap();
    for cap in ["CAP_NET_RAW", "CAP_NET_ADMIN", "CAP_IPC_LOCK"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("AmbientCapabilities=") && l.contains(cap)),
            "{cap}"
        );
    }
    assert!(text.contains("\nProtectSystem=strict\n"));
    assert!(text.contains("\nReadWritePaths=/var/lib/weir\n"));
    // the unit as installed, its binary where this build put it
    let unit = write(
        tmp.path(),
        "weir.service",
        &text.replace("/usr/bin/weir", env!("CARGO_BIN_EXE_weir")),
    );
    let out = run(Command::new("systemd-analyze").arg("verify").arg(&unit));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("weir.service"), "{err}");
}

/// A `weir run` in the background, stderr in a file; killed (by its pid) if the test ends
/// while it runs.
struct Service {
    child: Child,
    log: PathBuf,
}

impl Service {
    fn start(config: &Path, log: &Path, jobs: usize) -> Service {
        let child = weir()
            .arg("run")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut s = Service {
            child,
            log: log.to_path_buf(),
        };
        let t = Instant::now();
        while s.text().matches(": recording on ").count() < jobs {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "no banner: {}",
                s.text()
            );
            if let Some(st) = s.child.try_wait().unwrap() {
                panic!("exited ({st}) before its banners: {}", s.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.id().to_string();
        assert!(run(Command::new("kill").args([sig, &pid])).status.success());
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `weir ctl --socket S --json ARGS`: the reply.
fn ctl(socket: &Path, args: &[&str]) -> Value {
    let out = run(weir()
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .arg("--json")
        .args(args));
    assert!(
        out.status.success(),
        "ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// capinfos' and tcpdump's packet counts over a store's segments.
fn store_counts(dir: &Path) -> (u64, u64) {
    let (mut ci, mut td) = (0, 0);
    for seg in segments(dir) {
        let out = run(Command::new("capinfos").args(["-c", "-M"]).arg(&seg));
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.contains("Number of packets"))
            .unwrap();
        ci += line
            .rsplit(' ')
            .next()
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap();
        let out = run(Command::new("tcpdump").args(["-nn", "-r"]).arg(&seg));
        assert!(out.status.success());
        td += String::from_utf8_lossy(&out.stdout).lines().count() as u64;
    }
    (ci, td)
}

/// Packets per UDP flow (source port, destination port) in a flows JSON lines file.
fn flows(file: &Path) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| (u(&r["destinationTransportPort"]), u(&r["packetDeltaCount"])))
        .collect();
    v.sort();
    v
}

#[test]
fn two_interfaces_recorded_by_one_service() {
    let (b1, b2) = (VethBench::new(), VethBench::new());
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().display().to_string();
    let sock = tmp.path().join("control.sock");
    write(tmp.path(), "one.rules", "dport 9999 -> drop\n");
    let config = write(
        tmp.path(),
        "weir.toml",
        &format!(
            "[control]\nsocket = \"control.sock\"\ngroup = \"root\"\n\
             [[record]]\nname = \"one\"\ninterface = \"{}\"\nstore = \"s1\"\nsegment_mib = 4\n\
             write_mib = 1\nbuffer_mib = 16\nfilter = \"udp\"\nrules = \"one.rules\"\n\
             kernel_rules = false\nstats_json = \"one.json\"\n\
             [record.flows]\njson = \"f1.json\"\nidle_timeout_s = 600\n\
             [[record]]\nname = \"two\"\ninterface = \"{}\"\nstore = \"s2\"\nsegment_mib = 4\n\
             write_mib = 1\nbuffer_mib = 16\nfilter = \"udp\"\nstats_json = \"two.json\"\n\
             [record.flows]\njson = \"f2.json\"\nidle_timeout_s = 600\n",
            b1.host_if, b2.host_if
        ),
    );
    let (c, out, err) = check(&config);
    assert_eq!(c, 0, "{err}");
    assert!(
        out.contains(&format!("job one: record {} into {d}/s1", b1.host_if)),
        "{out}"
    );

    let svc = Service::start(&config, &tmp.path().join("log"), 2);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&sock).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o660);
    let gid = std::os::unix::fs::MetadataExt::gid(&std::fs::metadata(&sock).unwrap());
    assert_eq!(gid, 0, "the group of [control] group = \"root\"");
    let status = ctl(&sock, &["status"]);
    let jobs = status["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0]["name"], "one");
    assert_eq!(jobs[0]["interface"], b1.host_if.as_str());
    assert_eq!(jobs[1]["store"], format!("{d}/s2").as_str());
    assert!(jobs.iter().all(|j| j["state"] == "running"), "{status}");
    assert_eq!(u(&status["pid"]), u64::from(svc.child.id()));

    b1.send_udp(9000, 200, 50);
    b1.send_udp(9999, 50, 50);
    b2.send_udp(9001, 300, 80);

    // the live counters reach what was sent (refreshed every second)
    let t = Instant::now();
    loop {
        let c = ctl(&sock, &["counters"]);
        let w = |j: &str| c["jobs"][j]["writer"]["packets"].as_u64();
        if w("one") == Some(200) && w("two") == Some(300) {
            assert_eq!(u(&c["jobs"]["one"]["capture"]["rules_dropped"]), 50, "{c}");
            assert_eq!(u(&c["jobs"]["two"]["capture"]["received"]), 300, "{c}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "counters never got there: {c}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // the rules of job one, through the service's socket (the only job with rules)
    let rules = ctl(&sock, &["rules", "stats"]);
    assert_eq!(rules["job"], "one");
    assert_eq!(u(&rules["totals"]["dropped"]), 50, "{rules}");
    let out = run(weir()
        .arg("ctl")
        .arg("--socket")
        .arg(&sock)
        .args(["rules", "--job", "two", "list"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("job `two` has no rules"));

    // SIGTERM: every job stops, within 2 s, with its summary
    svc.signal("-TERM");
    let mut svc = svc;
    let t = Instant::now();
    let st = loop {
        if let Some(s) = svc.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "still running 2 s after SIGTERM: {}",
            svc.text()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let log = svc.text();
    assert!(st.success(), "{st}: {log}");
    assert!(
        log.contains(&format!(
            "weir run: one ({}): 200 packets recorded",
            b1.host_if
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "weir run: two ({}): 300 packets recorded",
            b2.host_if
        )),
        "{log}"
    );
    assert!(log.contains("every job stopped"), "{log}");
    assert!(!sock.exists(), "the socket is removed at the end");

    // the stores hold what was sent, as capinfos and tcpdump count it
    assert_eq!(store_counts(&tmp.path().join("s1")), (200, 200), "{log}");
    assert_eq!(store_counts(&tmp.path().join("s2")), (300, 300), "{log}");
    // the final counters reconcile with the stores and each other
    for (job, sent, dropped) in [("one", 250, 50), ("two", 300, 0)] {
        let s: Value = serde_json::from_str(
            &std::fs::read_to_string(tmp.path().join(format!("{job}.json"))).unwrap(),
        )
        .unwrap();
        let c = &s["capture"];
        assert_eq!(u(&c["received"]) - u(&c["filtered"]), sent, "{job}: {c}");
        assert_eq!(u(&c["rules_dropped"]), dropped, "{job}: {c}");
        assert_eq!(
            u(&c["kernel_packets"]),
            u(&c["received"]) + u(&c["kernel_drops"])
        );
        assert_eq!(u(&s["buffer"]["pushed"]), sent - dropped, "{job}");
        assert_eq!(u(&s["writer"]["packets"]), sent - dropped, "{job}");
        assert_eq!(u(&s["writer"]["dropped"]), 0, "{job}");
        assert!(
            log.contains(&format!(
                "capture: {} read, {} filtered out",
                u(&c["received"]),
                u(&c["filtered"])
            )),
            "{log}"
        );
    }
    // one flow each, all its packets (the dropped port never reached the meter)
    assert_eq!(flows(&tmp.path().join("f1.json")), [(9000, 200)]);
    assert_eq!(flows(&tmp.path().join("f2.json")), [(9001, 300)]);

    // kill -9: the socket is left behind, `weir ctl` says it is stale; a new run replaces it
    // and reopens the stores
    let mut svc = Service::start(&config, &tmp.path().join("log2"), 2);
    svc.signal("-KILL");
    svc.child.wait().unwrap();
    assert!(sock.exists());
    let out = run(weir().arg("ctl").arg("--socket").arg(&sock).arg("status"));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stale control socket"), "{err}");
    let svc = Service::start(&config, &tmp.path().join("log3"), 2);
    b2.send_udp(9001, 10, 80);

    // a config that no longer checks: said, the jobs go on
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, good.replace("segment_mib = 4", "segment_mib = -4")).unwrap();
    let out = run(weir().arg("ctl").arg("--socket").arg(&sock).arg("reload"));
    assert!(out.status.success());
    let wait_for = |svc: &Service, what: &str, n: usize| {
        let t = Instant::now();
        while svc.text().matches(what).count() < n {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{what}: {}",
                svc.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(&svc, "config not reloaded (", 1);
    // job two's statistics file changes: SIGHUP restarts job two only; job one records on
    // through the restart (packets sent while job two restarts). (A change of `[record.flows]`
    // alone restarts only the flow meter: tests/run_flows_reload.rs.)
    let changed = good.replace("stats_json = \"two.json\"", "stats_json = \"two-b.json\"");
    assert_ne!(changed, good);
    std::fs::write(&config, changed).unwrap();
    svc.signal("-HUP");
    b1.send_udp(9000, 20, 50);
    wait_for(&svc, "two: its config changed: restarting the job", 1);
    wait_for(&svc, "two: recording on", 2);
    b1.send_udp(9000, 20, 50);
    b2.send_udp(9001, 20, 80);
    let status = ctl(&sock, &["status"]);
    assert_eq!(u(&status["pid"]), u64::from(svc.child.id()));
    assert!(
        status["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["state"] == "running"),
        "{status}"
    );
    // every packet sent is recorded before the stop (the counters, refreshed every second:
    // this process's job one recorded the 40 sent to it through job two's restart, job two's
    // second run the 20 sent after it; the stores hold the earlier runs' packets too)
    let t = Instant::now();
    loop {
        let c = ctl(&sock, &["counters"]);
        let written = |job: &str| c["jobs"][job]["writer"]["packets"].as_u64();
        if written("one") == Some(40) && written("two") == Some(20) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{c}");
        std::thread::sleep(Duration::from_millis(50));
    }
    svc.signal("-INT");
    let mut svc = svc;
    let st = svc.child.wait().unwrap();
    let log = svc.text();
    assert!(st.success(), "{log}");
    assert_eq!(log.matches("one: recording on").count(), 1, "{log}");
    // job two's first run ended at the restart, with its own summary
    assert_eq!(
        log.matches(&format!(
            "weir run: two ({}): 10 packets recorded",
            b2.host_if
        ))
        .count(),
        1,
        "{log}"
    );
    assert_eq!(store_counts(&tmp.path().join("s1")), (240, 240), "{log}");
    assert_eq!(store_counts(&tmp.path().join("s2")), (330, 330), "{log}");
    std::fs::write(&config, good).unwrap();

    // an interface that is down: refused by the check, before anything starts
    assert!(
        run(Command::new("ip").args(["link", "set", &b2.host_if, "down"]))
            .status
            .success()
    );
    let (c, _, err) = check(&config);
    assert_eq!(c, 1);
    assert!(
        err.contains(&format!(
            "record[1].interface: interface {} is down",
            b2.host_if
        )),
        "{err}"
    );
    let out = run(weir().arg("run").arg(&config));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is down"));
    assert!(!sock.exists());
}

/// `weir ctl` with no process behind the path: missing, stale (a socket nobody listens on), not
/// a socket; then against a `weir run` on the loopback interface: a closed stdout, /dev/full,
/// an unknown job, a bad id; SIGHUP reloads the job's rules.
#[test]
fn ctl_errors_and_sighup() {
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("c.sock");
    let ctl_err = |path: &Path, args: &[&str]| {
        let out = run(weir().arg("ctl").arg("--socket").arg(path).args(args));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = ctl_err(&sock, &["status"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no such control socket"), "{err}");
    {
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    }
    let (code, err) = ctl_err(&sock, &["counters"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("stale control socket"), "{err}");
    std::fs::remove_file(&sock).unwrap();
    let file = write(tmp.path(), "plain", "x");
    let (code, err) = ctl_err(&file, &["status"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("not a socket"), "{err}");
    let out = run(weir().args(["ctl", "status"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--socket PATH"));

    let rules = write(tmp.path(), "lo.rules", "dport 9 -> drop\n");
    let config = write(
        tmp.path(),
        "weir.toml",
        "[control]\nsocket = \"c.sock\"\n[[record]]\ninterface = \"lo\"\nstore = \"s\"\n\
         segment_mib = 4\nwrite_mib = 1\nbuffer_mib = 16\nrules = \"lo.rules\"\n\
         filter = \"udp port 9\"\n",
    );
    let mut svc = Service::start(&config, &tmp.path().join("log"), 1);
    let out = run(Command::new("sh").arg("-c").arg(format!(
        "{} ctl --socket {} status | head -c0",
        env!("CARGO_BIN_EXE_weir"),
        sock.display()
    )));
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(weir()
        .arg("ctl")
        .arg("--socket")
        .arg(&sock)
        .arg("counters")
        .stdout(std::fs::File::create("/dev/full").unwrap()));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("No space left"));
    // a second service on the same socket stops there, before its jobs start
    let out = run(weir().arg("run").arg(&config));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a running process already listens on this control socket"),
        "{err}"
    );
    assert!(!err.contains("recording on"), "{err}");
    assert_eq!(ctl(&sock, &["status"])["jobs"][0]["state"], "running");
    let (code, err) = ctl_err(&sock, &["rules", "--job", "nope", "stats"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no job `nope` (jobs with rules: lo)"), "{err}");
    let out = run(weir().arg("ctl").arg("--socket").arg(&sock).arg("commands"));
    assert!(out.status.success());
    let names = String::from_utf8_lossy(&out.stdout).into_owned();
    for c in [
        "config.reload",
        "counters",
        "rules.add",
        "rules.list",
        "status",
    ] {
        assert!(names.lines().any(|l| l == c), "{c}: {names}");
    }
    let (code, _) = ctl_err(&sock, &["rules", "del", "-1"]);
    assert_eq!(code, Some(2));
    // a rule added through the socket, then SIGHUP: the file comes back whole (version 3)
    let added = ctl(&sock, &["rules", "add", "dport 10 -> drop"]);
    assert_eq!(u(&added["version"]), 2, "{added}");
    std::fs::write(&rules, "dport 9 -> drop\ndport 11 -> drop\n").unwrap();
    svc.signal("-HUP");
    let t = Instant::now();
    while !svc.text().contains("rules reloaded from") {
        assert!(t.elapsed() < Duration::from_secs(10), "{}", svc.text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = svc.text();
    assert!(
        log.contains(&format!("SIGHUP: reading {} again", config.display())),
        "{log}"
    );
    // the config did not change: the job was not restarted
    assert_eq!(log.matches("recording on").count(), 1, "{log}");
    assert!(log.contains("version 3 (2 wildcard, 0 exact)"), "{log}");
    let list = ctl(&sock, &["rules", "list"]);
    let lines: Vec<&str> = list["wild"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(lines.iter().any(|l| l.contains("dport 11")), "{list}");
    svc.signal("-TERM");
    let st = svc.child.wait().unwrap();
    assert!(st.success(), "{}", svc.text());
    assert!(svc.text().contains("weir run: lo (lo): "), "{}", svc.text());
}
