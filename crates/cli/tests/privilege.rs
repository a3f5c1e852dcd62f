//! Least privilege: `weir capture -i` and `weir record -i` run as `nobody` under `setpriv` with
//! CAP_NET_RAW (plus CAP_NET_ADMIN and CAP_IPC_LOCK, as the README's service setup grants) and
//! capture every packet sent on a veth pair the test makes; CAP_NET_RAW alone is enough for
//! promiscuous mode and a fanout group of two threads; without capabilities both commands fail
//! at once with a message naming CAP_NET_RAW, a non-zero exit and no panic. `weir run --user
//! nobody`, started as root, drops to nobody keeping those three capabilities and still captures
//! after a reload restarts its job.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{run, segments, tshark_fields};

/// The capabilities a service gets: raw sockets, interface administration, locked memory.
const ALL_CAPS: &str = "+net_raw,+net_admin,+ipc_lock";

/// Whether setpriv and the user `nobody` are there (else skip, or fail under
/// WEIR_REQUIRE_PEERS).
fn have_setpriv() -> bool {
    if !weir_testkit::have("setpriv") {
        return false;
    }
    let ok = Command::new("id")
        .arg("nobody")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok || weir_testkit::missing("no user `nobody` to run weir as")
}

/// A temp dir `nobody` can write, holding a copy of the weir binary it can run (the build tree
/// may sit under directories it cannot traverse).
struct Sandbox {
    dir: tempfile::TempDir,
    weir: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let weir = dir.path().join("weir");
        // Copied by `cp`, not by this process: a file this process held open for writing would
        // be inherited by a child another test forks at that moment, and exec'ing the copy
        // would then fail with ETXTBSY ("Text file busy"; seen in CI).
        let copied = Command::new("cp")
            .arg(env!("CARGO_BIN_EXE_weir"))
            .arg(&weir)
            .status()
            .unwrap();
        assert!(copied.success());
        std::fs::set_permissions(&weir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Sandbox { dir, weir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `setpriv` running the copy as nobody:nogroup with no supplementary groups and `caps`
    /// (`+net_raw,...`) inheritable and ambient, or none at all when `caps` is empty.
    fn as_nobody(&self, caps: &str, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]);
        if !caps.is_empty() {
            c.arg(format!("--inh-caps={caps}"));
            c.arg(format!("--ambient-caps={caps}"));
        }
        c.arg(&self.weir).args(args);
        c
    }
}

/// A weir run as nobody with its stderr in a file, killed (by its pid) if the test ends first.
struct Unprivileged {
    child: Child,
    log: PathBuf,
}

impl Unprivileged {
    /// Starts `cmd` and waits up to 30 s for `banner` on its stderr; an exit before it fails.
    fn start(mut cmd: Command, log: PathBuf, banner: &str) -> Unprivileged {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut r = Unprivileged { child, log };
        let t = Instant::now();
        while !r.text().contains(banner) {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "no banner: {}",
                r.text()
            );
            if let Some(s) = r.child.try_wait().unwrap() {
                panic!("exited ({s}) before its banner: {}", r.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (none: let it finish by itself) and waits up to 60 s for the exit.
    fn finish(mut self, signal: Option<&str>) -> (ExitStatus, String) {
        if let Some(sig) = signal {
            // The packets had time to reach the ring (as in live_record).
            std::thread::sleep(Duration::from_millis(300));
            let pid = self.child.id().to_string();
            assert!(run(Command::new("kill").args([sig, &pid])).status.success());
        }
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return (s, self.text());
            }
            assert!(t.elapsed() < Duration::from_secs(60), "did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Unprivileged {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The sequence numbers of the weir test payloads (`WEIR` + u32) in the frames of `files`.
fn seqs(files: &[PathBuf]) -> Vec<u32> {
    files
        .iter()
        .flat_map(|f| tshark_fields(f, &["udp.payload"]))
        .map(|f| {
            let hex = &f[0];
            assert!(hex.starts_with("57454952"), "not a weir payload: {hex}");
            u32::from_str_radix(&hex[8..16], 16).unwrap()
        })
        .collect()
}

/// Owner uid of a file.
fn owner(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().uid()
}

/// The uid of `nobody`.
fn nobody_uid() -> u32 {
    let out = run(Command::new("id").args(["-u", "nobody"]));
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `weir capture -i IF -c N -w FILE` as nobody with `caps`: every packet sent is in the file,
/// in order, and the file belongs to nobody.
fn capture_as_nobody(caps: &str, extra: &[&str]) {
    let bench = VethBench::new();
    let sb = Sandbox::new();
    let out = sb.path("cap.pcapng");
    let n = 500u32;
    let mut args = vec!["capture", "-i", &bench.host_if, "-c", "500", "-w"];
    args.push(out.to_str().unwrap());
    args.extend_from_slice(extra);
    args.push("udp port 9999");
    let w = Unprivileged::start(
        sb.as_nobody(caps, &args),
        sb.path("capture.log"),
        "capturing on",
    );
    bench.send_udp(9999, n, 50);
    let (status, log) = w.finish(None);
    assert!(status.success(), "{status}: {log}");
    assert_eq!(
        seqs(std::slice::from_ref(&out)),
        (0..n).collect::<Vec<_>>(),
        "every packet sent, in order: {log}"
    );
    assert_eq!(owner(&out), nobody_uid(), "written as nobody");
}

#[test]
fn capture_runs_as_nobody_with_capabilities() {
    if !have_setpriv() {
        return;
    }
    capture_as_nobody(ALL_CAPS, &[]);
}

#[test]
fn cap_net_raw_alone_covers_promiscuous_mode_and_fanout() {
    if !have_setpriv() {
        return;
    }
    // Promiscuous mode is on by default; two threads join one fanout group.
    capture_as_nobody("+net_raw", &["--threads", "2"]);
}

#[test]
fn record_runs_as_nobody_with_capabilities() {
    if !have_setpriv() {
        return;
    }
    let bench = VethBench::new();
    let sb = Sandbox::new();
    let store = sb.path("store");
    let args = [
        "record",
        "-i",
        &bench.host_if,
        "-o",
        store.to_str().unwrap(),
        "--buffer-mib",
        "64",
        "udp port 9999",
    ];
    let w = Unprivileged::start(
        sb.as_nobody(ALL_CAPS, &args),
        sb.path("record.log"),
        "recording on",
    );
    let n = 800u32;
    bench.send_udp(9999, n, 50);
    let (status, log) = w.finish(Some("-INT"));
    assert!(status.success(), "{status}: {log}");
    let segs = segments(&store);
    assert!(!segs.is_empty(), "no segment: {log}");
    assert_eq!(
        seqs(&segs),
        (0..n).collect::<Vec<_>>(),
        "every packet sent is in the store, in order: {log}"
    );
    assert!(segs.iter().all(|s| owner(s) == nobody_uid()));
}

#[test]
fn without_capabilities_the_message_names_cap_net_raw() {
    if !have_setpriv() {
        return;
    }
    let bench = VethBench::new();
    let sb = Sandbox::new();
    let cap = sb.path("cap.pcapng");
    let store = sb.path("store");
    let want = format!(
        "weir: error: opening a packet socket on {} needs CAP_NET_RAW (or root): \
         Operation not permitted (os error 1)",
        bench.host_if
    );
    for args in [
        vec![
            "capture",
            "-i",
            &bench.host_if,
            "-c",
            "1",
            "-w",
            cap.to_str().unwrap(),
        ],
        vec![
            "record",
            "-i",
            &bench.host_if,
            "-o",
            store.to_str().unwrap(),
        ],
    ] {
        let out = run(sb.as_nobody("", &args).stdin(Stdio::null()));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim_end(), want, "{args:?}");
        assert!(!err.contains("panicked"));
    }
    assert!(!cap.exists(), "no output file is left behind");
    assert!(!store.exists(), "no store directory is left behind");
}

/// `weir ctl --socket S ARGS` (run as root): exit code, stdout, stderr.
fn ctl(socket: &Path, args: &[&str]) -> (i32, String, String) {
    let out = run(common::weir()
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until job `one`'s writer has recorded `n` packets (its live counters).
fn wait_recorded(socket: &Path, n: u64) {
    let t = Instant::now();
    loop {
        let (code, out, err) = ctl(socket, &["--json", "counters"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        if v["jobs"]["one"]["writer"]["packets"].as_u64() == Some(n) {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "never {n}: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One `Key:\tvalue` line of /proc/PID/status.
fn proc_status(pid: u32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// `weir run --user nobody` as root: once its job records it is nobody (every uid of
/// /proc/PID/status) with exactly CAP_NET_ADMIN (12), CAP_NET_RAW (13) and CAP_IPC_LOCK (14)
/// permitted and effective; it records what is sent; a reload that changes the job (its filter)
/// restarts it after the drop and it captures again; the store (every segment, before and after
/// the drop) belongs to nobody and holds every packet sent that the filters let through, in
/// order (tshark).
#[test]
fn run_drops_to_a_user_and_keeps_capturing_after_a_reload() {
    if !have_setpriv() {
        return;
    }
    let bench = VethBench::new();
    let sb = Sandbox::new();
    let sock = sb.path("c.sock");
    let config = sb.path("weir.toml");
    let job = |port: u16| {
        format!(
            "[control]\nsocket = \"c.sock\"\n\
             [[record]]\nname = \"one\"\ninterface = \"{}\"\nstore = \"s\"\nsegment_mib = 4\n\
             write_mib = 1\nbuffer_mib = 16\nfilter = \"udp port {port}\"\n",
            bench.host_if
        )
    };
    std::fs::write(&config, job(9000)).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cmd = Command::new(&sb.weir);
    cmd.args(["run", "--user", "nobody", config.to_str().unwrap()]);
    let w = Unprivileged::start(
        cmd,
        sb.path("run.log"),
        "running as nobody (uid 65534), keeping CAP_NET_RAW, CAP_NET_ADMIN, CAP_IPC_LOCK",
    );
    let pid = w.child.id();
    let uid = nobody_uid().to_string();
    let uids = [uid.as_str(); 4].join("\t");
    assert_eq!(proc_status(pid, "Uid"), uids);
    assert_eq!(proc_status(pid, "CapEff"), "0000000000007000");
    assert_eq!(proc_status(pid, "CapPrm"), "0000000000007000");

    bench.send_udp(9000, 100, 20);
    wait_recorded(&sock, 100);

    // The job's filter changes: it restarts, as nobody, and opens its socket again.
    std::fs::write(&config, job(9001)).unwrap();
    let (code, _, err) = ctl(&sock, &["reload"]);
    assert_eq!(code, 0, "{err}");
    let t = Instant::now();
    while w.text().matches("one: recording on").count() < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no restart: {}",
            w.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(proc_status(pid, "Uid"), uids);
    assert_eq!(proc_status(pid, "CapEff"), "0000000000007000");
    bench.send_udp(9000, 30, 20); // filtered out now
    bench.send_udp(9001, 60, 20);
    wait_recorded(&sock, 60);

    let (status, log) = w.finish(Some("-TERM"));
    assert!(status.success(), "{status}: {log}");
    assert!(!log.contains("panicked"), "{log}");
    let segs = segments(&sb.path("s"));
    assert!(
        segs.len() >= 2,
        "a segment before and after the reload: {log}"
    );
    let mut want: Vec<u32> = (0..100).collect();
    want.extend(0..60);
    assert_eq!(
        seqs(&segs),
        want,
        "every packet let through is in the store: {log}"
    );
    assert!(segs.iter().all(|s| owner(s) == nobody_uid()), "{segs:?}");
    assert_eq!(owner(&sb.path("s")), nobody_uid());
}

/// A user that does not exist is refused before anything starts (from `--user` and from the
/// file's `user`, `--check` too), and so is `--user` when weir does not run as root.
#[test]
fn bad_users_are_refused_before_anything_starts() {
    if !have_setpriv() {
        return;
    }
    let bench = VethBench::new();
    let sb = Sandbox::new();
    let body = format!(
        "[[record]]\nname = \"one\"\ninterface = \"{}\"\nstore = \"s\"\n",
        bench.host_if
    );
    let config = sb.path("weir.toml");
    std::fs::write(&config, &body).unwrap();
    let c = config.to_str().unwrap();
    for args in [
        vec!["run", "--user", "no-such-user-weir", c],
        vec!["run", "--check", "--user", "no-such-user-weir", c],
        vec!["run", "--user", "", c],
    ] {
        let out = run(common::weir().args(&args));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("weir: error: --user: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let bad = sb.path("bad.toml");
    std::fs::write(&bad, format!("user = \"no-such-user-weir\"\n{body}")).unwrap();
    for check in [true, false] {
        let mut cmd = common::weir();
        cmd.arg("run");
        if check {
            cmd.arg("--check");
        }
        let out = run(cmd.arg(&bad));
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(":1:8: user: no user `no-such-user-weir` on this machine"),
            "{err}"
        );
    }
    // Not root: refused before the job starts (no store made).
    let out = run(&mut sb.as_nobody(ALL_CAPS, &["run", "--user", "nobody", c]));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--user nobody: weir must be started as root to switch to another user"),
        "{err}"
    );
    assert!(!sb.path("s").exists());
    assert!(!std::fs::read_to_string(&config).unwrap().is_empty());
}
