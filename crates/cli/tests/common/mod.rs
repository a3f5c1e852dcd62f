//! Helpers shared by the end-to-end tests: the weir binary, the corpus, peers and temp dirs.
#![allow(dead_code)]

pub(crate) mod netns;
pub(crate) mod prom;
pub(crate) mod sip;
pub(crate) mod web;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `weir` binary under test.
pub(crate) fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

/// The corpus of real captures; the tests need it (it is on every dev and CI machine).
pub(crate) fn corpus() -> Vec<PathBuf> {
    let dir = std::env::var_os("WEIR_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/pcaps")
        });
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {} missing: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty", dir.display());
    files
}

/// Runs a command, panicking if it cannot start (a missing peer is a failed test, not a skip).
pub(crate) fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run scripts/setup.sh)"))
}

/// The filter expressions shared with weir-filter's oracle test, one per line.
pub(crate) fn expressions() -> Vec<String> {
    let text = include_str!("../../../filter/tests/expressions.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// The values of `fields` for every frame of a file, as `tshark -T fields` prints them.
pub(crate) fn tshark_fields(file: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    tshark_fields_with(file, &[], fields)
}

/// Like [`tshark_fields`], with tshark preferences (`-o NAME:VALUE`) set first.
pub(crate) fn tshark_fields_with(file: &Path, prefs: &[&str], fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(file);
    for p in prefs {
        cmd.args(["-o", p]);
    }
    cmd.args(["-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = run(&mut cmd);
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').map(String::from).collect())
        .collect()
}

/// Packet timestamps (ns), wire lengths and captured lengths of a file, as tshark reads them.
pub(crate) fn tshark_frames(file: &Path) -> Vec<(String, u64, u64)> {
    tshark_fields(file, &["frame.time_epoch", "frame.len", "frame.cap_len"])
        .into_iter()
        .map(|f| (f[0].clone(), f[1].parse().unwrap(), f[2].parse().unwrap()))
        .collect()
}

/// Starts a capture and returns once it says it is listening (`banner` on stderr); the rest of
/// its stderr is drained (so the child never blocks on it) and dropped.
pub(crate) fn start(mut cmd: Command, banner: &str) -> Child {
    let mut child = cmd
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "capture exited before its banner"
        );
        if line.contains(banner) {
            break;
        }
    }
    // Keep draining stderr so the child never blocks on it.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    child
}

/// Waits for a child to finish by itself (fails after a minute) and checks it succeeded.
pub(crate) fn wait(mut child: Child) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "capture failed: {status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("capture did not finish");
}

/// The segment files (pcap or pcapng) of a store directory, in name (= time, then sequence)
/// order.
pub(crate) fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcapng" || e == "pcap"))
        .collect();
    v.sort();
    v
}

/// Bytes of the capture files directly in `dir` (what a recorder has put on disk so far).
pub(crate) fn segment_bytes(dir: &Path) -> u64 {
    segments(dir)
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

/// A `weir` command running in the background with its stderr in a file; killed (by its pid)
/// if the test ends while it still runs.
pub(crate) struct Running {
    child: Child,
    log: PathBuf,
}

impl Running {
    /// Starts `weir ARGS` and waits up to 60 s for `banner` on its stderr.
    pub(crate) fn start(args: &[&str], log: &Path, banner: &str) -> Running {
        Running::start_within(args, log, banner, Duration::from_secs(60))
    }

    /// Starts `weir ARGS` and waits up to `limit` for `banner` on its stderr; an exit before
    /// the banner fails the test at once.
    pub(crate) fn start_within(
        args: &[&str],
        log: &Path,
        banner: &str,
        limit: Duration,
    ) -> Running {
        let child = weir()
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut r = Running {
            child,
            log: log.to_path_buf(),
        };
        let t = Instant::now();
        while !r.text().contains(banner) {
            assert!(t.elapsed() < limit, "no banner: {}", r.text());
            if let Some(s) = r.child.try_wait().unwrap() {
                panic!("exited ({s}) before its banner: {}", r.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its stderr so far.
    pub(crate) fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (`-INT`, `-KILL`...) and waits up to 60 s for the exit; returns the exit
    /// status and the stderr.
    pub(crate) fn signal(mut self, signal: &str) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().to_string();
        assert!(run(Command::new("kill").args([signal, &pid]))
            .status
            .success());
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

impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Asks `weir ctl --socket SOCK --json counters` every 100 ms until `done` holds for its JSON
/// (an answer that fails or does not parse is "not yet"), for at most `limit`; returns that
/// JSON, or fails the test with `what`, the last answer and the service's stderr.
pub(crate) fn counters_until(
    sock: &Path,
    svc: &Running,
    limit: Duration,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let t = Instant::now();
    loop {
        let out = run(weir()
            .arg("ctl")
            .arg("--socket")
            .arg(sock)
            .args(["--json", "counters"]));
        let c: serde_json::Value = if out.status.success() {
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
        } else {
            serde_json::Value::Null
        };
        if done(&c) {
            return c;
        }
        assert!(t.elapsed() < limit, "{what} never came: {c} {}", svc.text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `weir record -i IF -o STORE --buffer-mib 16 --http HTTP --http-filter tcp --voip VOIP
/// --voip-filter udp` and `extra`: the live analyzers' record run of the tests.
pub(crate) fn record_analyzers_args(
    interface: &str,
    store: &Path,
    http: &Path,
    voip: &Path,
    extra: &[&str],
) -> Vec<String> {
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let mut args: Vec<String> = ["record", "-i", interface, "-o", &s(store), "--buffer-mib"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.extend(["16", "--http", &s(http), "--http-filter", "tcp"].map(String::from));
    args.extend(["--voip", &s(voip), "--voip-filter", "udp"].map(String::from));
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// `weir rules ARGS --socket SOCK --json` against a running job's control socket: its JSON
/// reply (the command must succeed).
pub(crate) fn rules_control(sock: &Path, args: &[&str]) -> serde_json::Value {
    let out = run(weir()
        .arg("rules")
        .args(args)
        .arg("--socket")
        .arg(sock)
        .arg("--json"));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "rules {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("rules {args:?}: {e}: {text}"))
}

/// `weir SUB -r FILE` writing to /dev/full (as `-w /dev/full` and as stdout) exits 1 naming what
/// it could not write; with stdout closed early (`| head -c0`) it exits 0 with no error.
pub(crate) fn full_and_closed_outputs(sub: &str, file: &Path) {
    let err = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let out = run(weir().args([sub, "-r"]).arg(file).args(["-w", "/dev/full"]));
    assert_eq!(out.status.code(), Some(1), "{}", err(&out));
    assert!(
        err(&out).contains("cannot write /dev/full"),
        "{}",
        err(&out)
    );
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = run(weir().args([sub, "-r"]).arg(file).stdout(full));
    assert_eq!(out.status.code(), Some(1), "{}", err(&out));
    assert!(
        err(&out).contains("cannot write to stdout"),
        "{}",
        err(&out)
    );
    let out = run(Command::new("bash")
        .arg("-c")
        .arg(format!(
            r#""$0" {sub} -r "$1" | head -c0; exit ${{PIPESTATUS[0]}}"#
        ))
        .arg(env!("CARGO_BIN_EXE_weir"))
        .arg(file));
    assert_eq!(out.status.code(), Some(0), "{}", err(&out));
    // no error message (a summary printed after everything was written may count "0 ...
    // errors": look for the message's prefix, not the word)
    assert!(!err(&out).contains("error:"), "{}", err(&out));
}

/// Runs weir with `args` (stdin empty, stdout dropped, stderr kept); kills it (and fails) if
/// it is still running after a minute, so a regression that ignores a bound or waits for ever
/// cannot run away.
pub(crate) fn weir_bounded<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> Output {
    let mut child = weir()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("weir {args:?} was still running after a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Starts `cmd` with `bytes` on its stdin, which is kept open (returned with the child): the
/// run has read them and waits for more, mid-way, its outputs open; stdout and stderr are
/// thrown away. For tests that stop a run mid-way (a signal, `kill -9`).
pub(crate) fn fed_and_held(cmd: &mut Command, bytes: &[u8]) -> (Child, std::process::ChildStdin) {
    fed(cmd.stderr(Stdio::null()), bytes)
}

/// [`fed_and_held`] with stderr kept (piped): the caller reads the run's summary and errors
/// from `wait_with_output` at the end.
pub(crate) fn fed_and_held_with_stderr(
    cmd: &mut Command,
    bytes: &[u8],
) -> (Child, std::process::ChildStdin) {
    fed(cmd.stderr(Stdio::piped()), bytes)
}

/// Starts `cmd` (stderr as set) with `bytes` on its stdin, kept open; stdout thrown away.
fn fed(cmd: &mut Command, bytes: &[u8]) -> (Child, std::process::ChildStdin) {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(bytes).unwrap();
    stdin.flush().unwrap();
    (child, stdin)
}

/// The names in `dir` that `keep` keeps, sorted.
pub(crate) fn names_in(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| keep(n))
        .collect();
    v.sort();
    v
}

/// `OUT.weir-tmp-PID`: the temporary name process `pid` writes the output `out` under.
pub(crate) fn temp_output(out: &Path, pid: u32) -> PathBuf {
    let mut n = out.file_name().unwrap().to_os_string();
    n.push(format!(".weir-tmp-{pid}"));
    out.with_file_name(n)
}

/// The files of `dir`, by name, with their bytes.
pub(crate) fn dir_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

/// Every frame of `file` as tcpdump prints it without times (headers and bytes in hex), in
/// file order.
pub(crate) fn frames_hex(file: &Path) -> Vec<String> {
    let out = run(Command::new("tcpdump")
        .args(["-n", "-t", "-xx", "-r"])
        .arg(file)
        .stderr(Stdio::null()));
    assert!(out.status.success());
    let mut v: Vec<String> = Vec::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        if line.starts_with(char::is_whitespace) {
            v.last_mut().unwrap().push_str(line);
        } else {
            v.push(line.to_string());
        }
    }
    v
}
