//! `weir rules` (the control-socket client) against a hostile user: a closed stdout ends it
//! quietly with status 0, a full one (/dev/full) is status 1 naming stdout; `--socket`
//! pointing at a regular file, a directory, a missing path, or a socket left behind by a weir
//! killed with SIGKILL is status 1 with an error that says which, never a panic. The server is
//! weir-control's `Server` over a rule engine in this process, except for the stale socket,
//! which a real `weir capture --control` on the loopback leaves when killed.

mod common;

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::weir;
use weir_control::Server;
use weir_decode::LinkType;
use weir_rules::{Engine, RuleSet};

/// The write end of a pipe whose read end is already closed: every write gets EPIPE.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe() fills two fds we then own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both fds are fresh and owned here.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(r);
    Stdio::from(w)
}

const RULES: &str = "exact tcp 10.0.0.9:5000 10.0.0.1:873 -> drop\n\
                     id 7 proto udp dport 53 -> tag dns pass\n\
                     src 10.1.0.0/16 -> drop\n";

/// A server over an engine of [`RULES`] (file `rules`), on `sock`.
fn serve(dir: &Path) -> (Server, std::path::PathBuf) {
    let file = dir.join("rules.txt");
    std::fs::write(&file, RULES).unwrap();
    let engine = Engine::new(RuleSet::parse(RULES).unwrap(), LinkType::ETHERNET, 65535).unwrap();
    let sock = dir.join("ctl.sock");
    let server = Server::start(&sock, engine, Some(file.clone())).unwrap();
    (server, file)
}

/// Every `weir rules` call that prints something, with its socket or file.
fn printing(sock: &Path, file: &Path) -> Vec<Vec<String>> {
    let s = sock.display().to_string();
    let f = file.display().to_string();
    let v: Vec<Vec<&str>> = vec![
        vec!["list", "--socket", &s],
        vec!["list", "--json", "--socket", &s],
        vec!["stats", "--socket", &s],
        vec!["stats", "--json", "--socket", &s],
        vec!["kernel", "--socket", &s],
        vec!["check", &f],
        vec!["check", "--json", &f],
    ];
    v.into_iter()
        .map(|a| a.into_iter().map(String::from).collect())
        .collect()
}

fn rules(args: &[String], stdout: Stdio) -> Output {
    weir()
        .arg("rules")
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn closed_stdout_is_a_quiet_exit_0() {
    let tmp = tempfile::tempdir().unwrap();
    let (_server, file) = serve(tmp.path());
    let mut failures = Vec::new();
    for args in printing(&tmp.path().join("ctl.sock"), &file) {
        let out = rules(&args, closed_pipe());
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(0) || err.contains("panicked") || err.contains("error") {
            failures.push(format!(
                "weir rules {}: {:?}: {err}",
                args.join(" "),
                out.status
            ));
        }
        // and the same command to a pipe that reads prints something (the case is not empty)
        let out = rules(&args, Stdio::piped());
        if !out.status.success() || out.stdout.is_empty() {
            failures.push(format!(
                "weir rules {} printed nothing: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn full_stdout_is_exit_1_naming_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let (_server, file) = serve(tmp.path());
    let mut failures = Vec::new();
    for args in printing(&tmp.path().join("ctl.sock"), &file) {
        let full = std::fs::File::options()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = rules(&args, Stdio::from(full));
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(1)
            || err.contains("panicked")
            || !err.contains("cannot write to stdout: No space left on device")
        {
            failures.push(format!(
                "weir rules {}: {:?}: {err}",
                args.join(" "),
                out.status
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `weir rules list --socket PATH`: status 1 and an error naming PATH with `why`.
fn refused(path: &Path, why: &str) {
    for sub in ["list", "stats", "reload", "kernel"] {
        let args: Vec<String> = vec![sub.into(), "--socket".into(), path.display().to_string()];
        let out = rules(&args, Stdio::piped());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{sub} {}: {err}",
            path.display()
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            err.contains(&format!("{}: {why}", path.display())),
            "{sub} {}: {err}",
            path.display()
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn a_socket_path_that_is_no_socket_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("plain.txt");
    std::fs::write(&file, "not a socket\n").unwrap();
    refused(&file, "not a control socket");
    // the file is left as it was
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a socket\n");
    refused(tmp.path(), "a directory, not a control socket");
    refused(
        &tmp.path().join("missing.sock"),
        "no such control socket (is weir running with --control at this path?)",
    );
    assert!(!tmp.path().join("missing.sock").exists());
}

#[test]
fn a_socket_left_by_a_killed_weir_is_named_stale() {
    let tmp = tempfile::tempdir().unwrap();
    let rules_file = tmp.path().join("rules.txt");
    std::fs::write(&rules_file, RULES).unwrap();
    let sock = tmp.path().join("ctl.sock");
    let mut child = weir()
        .args(["capture", "-i", "lo", "-w", "/dev/null", "--rules"])
        .arg(&rules_file)
        .arg("--control")
        .arg(&sock)
        .arg("udp port 9")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // wait until it answers
    let t = Instant::now();
    let list: Vec<String> = vec!["list".into(), "--socket".into(), sock.display().to_string()];
    loop {
        let out = rules(&list, Stdio::piped());
        if out.status.success() {
            assert!(String::from_utf8_lossy(&out.stdout).contains("10.1.0.0/16"));
            break;
        }
        if let Some(s) = child.try_wait().unwrap() {
            panic!("weir capture exited ({s}) before serving its socket");
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no control socket");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL: no chance to remove the socket
    child.wait().unwrap();
    assert!(sock.exists(), "the killed process's socket is left behind");
    refused(
        &sock,
        "no weir process listens on this control socket (a stale socket left by a process that \
         ended without removing it?)",
    );
}
