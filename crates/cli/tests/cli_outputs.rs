//! Issue 15's small gaps of the command line: `weir flows --json/--csv FILE` completes its files
//! under their names only at the end (a killed run leaves an existing file as it was and no half
//! file), `weir capture` prints its summary when its stdout reader goes away, and `weir capture
//! -r` points at `weir read -r`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{names_in, run, temp_output};

/// A capture file of `n` synthetic UDP packets, written by `weir gen`.
fn trace(dir: &Path, n: u32) -> Vec<u8> {
    let p = dir.join("in.pcap");
    let out = run(common::weir()
        .args(["gen", "-w", p.to_str().unwrap(), "--count", &n.to_string()])
        .args(["--flows", "4", "--pps", "1000"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(p).unwrap()
}

/// Waits (up to a minute) until `f` holds.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn flows_files_killed_mid_run_are_left_as_they_were() {
    let d = tempfile::tempdir().unwrap();
    let bytes = trace(d.path(), 200);
    let (json, csv) = (d.path().join("f.json"), d.path().join("f.csv"));
    std::fs::write(&json, "old json\n").unwrap();
    // stdin stays open: the run is mid-way, its outputs open, when it is killed
    let (mut child, _stdin) = common::fed_and_held(
        common::weir()
            .args(["flows", "-r", "-", "--workers", "1", "--json"])
            .arg(&json)
            .arg("--csv")
            .arg(&csv),
        &bytes,
    );
    let (tmp_json, tmp_csv) = (
        temp_output(&json, child.id()),
        temp_output(&csv, child.id()),
    );
    until("the outputs are open", || {
        tmp_json.exists() && tmp_csv.exists()
    });
    run(Command::new("kill").args(["-KILL", &child.id().to_string()]));
    child.wait().unwrap();
    assert_eq!(std::fs::read_to_string(&json).unwrap(), "old json\n");
    assert!(!csv.exists(), "no half CSV under its name");

    // the same run to its end replaces the file whole: one record per flow (4 flows)
    let out = run(common::weir()
        .args([
            "flows",
            "-r",
            d.path().join("in.pcap").to_str().unwrap(),
            "--json",
        ])
        .arg(&json)
        .arg("--csv")
        .arg(&csv));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json).unwrap();
    assert_eq!(text.lines().count(), 4, "{text}");
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv_text.lines().count(), 1 + 4, "{csv_text}");
    let leftovers = names_in(d.path(), |n| {
        n.contains(".weir-tmp-") && !n.ends_with(&format!("-{}", child.id()))
    });
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// SIGTERM, SIGINT and SIGHUP of a file-writing run mid-way (stdin still open): exit 143 / 130
/// / 129, as shells report a command a signal ended, no `OUT.weir-tmp-PID` left, an old output as it was,
/// no half output under a new name.
#[test]
fn signals_mid_run_remove_the_temporary_outputs() {
    let d = tempfile::tempdir().unwrap();
    let bytes = trace(d.path(), 200);
    for (sig, code) in [("TERM", 143), ("INT", 130), ("HUP", 129)] {
        let (json, csv, pcap) = (
            d.path().join("f.json"),
            d.path().join("f.csv"),
            d.path().join("o.pcap"),
        );
        std::fs::write(&json, "old json\n").unwrap();
        std::fs::write(&pcap, "old pcap\n").unwrap();
        let flows = ["flows", "-r", "-", "--workers", "1", "--json"];
        let read = ["read", "-r", "-", "-w"];
        for (args, outs) in [
            (&flows[..], vec![json.clone(), csv.clone()]),
            (&read[..], vec![pcap.clone()]),
        ] {
            let mut cmd = common::weir();
            cmd.args(args).arg(&outs[0]);
            if outs.len() > 1 {
                cmd.arg("--csv").arg(&outs[1]);
            }
            let (mut child, stdin) = common::fed_and_held(&mut cmd, &bytes);
            let tmps: Vec<_> = outs.iter().map(|p| temp_output(p, child.id())).collect();
            until("the outputs are open", || tmps.iter().all(|t| t.exists()));
            run(Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]));
            let status = child.wait().unwrap();
            assert_eq!(status.code(), Some(code), "{args:?} SIG{sig}");
            let left = names_in(d.path(), |n| n.contains(".weir-tmp-"));
            assert!(left.is_empty(), "{args:?} SIG{sig}: {left:?}");
            drop(stdin);
        }
        assert_eq!(std::fs::read_to_string(&json).unwrap(), "old json\n");
        assert_eq!(std::fs::read_to_string(&pcap).unwrap(), "old pcap\n");
        assert!(!csv.exists(), "no half CSV under its name");
    }
}

/// A temporary output left by a writer killed outright (a pid no process has) is not taken
/// for anything: the next run of the same output removes it and writes the output whole;
/// another output's temporary file is left alone.
#[test]
fn a_dead_writers_temporary_output_is_removed_by_the_next_run() {
    let d = tempfile::tempdir().unwrap();
    trace(d.path(), 200);
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let json = d.path().join("f.json");
    let stale = temp_output(&json, dead);
    let other = temp_output(&d.path().join("g.json"), dead);
    std::fs::write(&stale, "half\n").unwrap();
    std::fs::write(&other, "half\n").unwrap();
    let out = run(common::weir()
        .args(["flows", "-r"])
        .arg(d.path().join("in.pcap"))
        .arg("--json")
        .arg(&json));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // one record per flow (4 flows, `trace`)
    assert_eq!(std::fs::read_to_string(&json).unwrap().lines().count(), 4);
    assert!(!stale.exists());
    assert!(other.exists());
}

/// `weir capture` on the bench's interface with its stdout a pipe nobody reads; `send`: traffic
/// arrives (the writes find the pipe closed) or not (the idle check does). Returns its stderr.
fn capture_to_closed_stdout(send: bool) -> String {
    let b = VethBench::new();
    let err = tempfile::NamedTempFile::new().unwrap();
    let mut args = vec!["capture", "-i", &b.host_if];
    if send {
        args.extend(["-w", "-"]);
    }
    let mut child = common::weir()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(err.reopen().unwrap())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader goes away, as `| head -c0`
    let peer = b.host_if.replacen("wa", "wb", 1);
    let mut gen = None;
    if send {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &b.ns])
            .arg(env!("CARGO_BIN_EXE_weir"));
        cmd.args(["gen", "-i", &peer, "--pps", "1000", "--duration", "60"])
            .args(["--src", &b.peer_ip, "--dst", &b.host_ip])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        gen = Some(cmd.spawn().unwrap());
    }
    let mut status = None;
    until("capture ends", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if let Some(mut g) = gen {
        let _ = g.kill();
        let _ = g.wait();
    }
    let text = std::fs::read_to_string(err.path()).unwrap();
    assert!(status.unwrap().success(), "{text}");
    text
}

#[test]
fn capture_prints_its_summary_when_its_reader_goes_away_idle() {
    let text = capture_to_closed_stdout(false);
    assert!(text.contains(" packets written in "), "{text}");
    assert!(text.contains("kernel: "), "{text}");
}

#[test]
fn capture_prints_its_summary_when_a_write_finds_its_reader_gone() {
    let text = capture_to_closed_stdout(true);
    assert!(text.contains(" packets written in "), "{text}");
    assert!(!text.contains("error"), "{text}");
}

#[test]
fn capture_read_points_at_weir_read() {
    let out = run(common::weir().args(["capture", "-r", "x.pcap"]));
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("weir capture captures live traffic (-i); to read a capture file use `weir read -r x.pcap`"),
        "{text}"
    );
}

/// scripts/test.sh runs `cargo test --no-fail-fast`; its summary (scripts/test_summary.py) adds
/// up every binary's results and names the binaries that failed, also one that crashed and
/// printed no result line, and exits non-zero.
#[test]
fn test_script_summary_counts_every_binary_and_names_the_failed_ones() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test_summary.py");
    let sh = std::fs::read_to_string(script.with_file_name("test.sh")).unwrap();
    assert!(
        sh.contains("cargo test --workspace --release --no-fail-fast"),
        "{sh}"
    );
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("log");
    let summary = |text: &str| {
        std::fs::write(&log, text).unwrap();
        let out = run(Command::new("python3").arg(&script).arg(&log));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let green = "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured\n\
                 test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured\n";
    assert_eq!(
        summary(green),
        (
            Some(0),
            "== summary: 5 passed, 0 failed, 1 ignored\n".into()
        )
    );
    let red = "test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured\n\
               error: test failed, to rerun pass `-p weir --test cli`\n\
               error: test failed, to rerun pass `-p weir-buffer --lib`\n\
               test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured\n\
               error: 2 targets failed:\n    `-p weir --test cli`\n    `-p weir-buffer --lib`\n";
    assert_eq!(
        summary(red),
        (
            Some(1),
            "== summary: 5 passed, 1 failed, 0 ignored\n\
             == 2 test binaries failed: `-p weir --test cli`, `-p weir-buffer --lib`\n"
                .into()
        )
    );
}
