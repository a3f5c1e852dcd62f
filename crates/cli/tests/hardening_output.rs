//! How commands write their output (issue 14): a closed stdout ends every command quietly with
//! status 0 and no panic, any other write error is status 1 with a message naming the output; a
//! live capture to a pipe ends when its reader does, also while no traffic arrives; outputs are
//! never created before the inputs are checked, never written over an input, and replace an
//! existing file only when the command succeeded; OS errors are printed once; an unwritable chart
//! directory is a clear error; `read --micro` is byte-identical to `tcpdump -w`, out-of-range
//! microsecond fields included.

mod common;

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{corpus, run, weir};

/// A small, clean classic pcap of the corpus.
fn sample() -> PathBuf {
    corpus()
        .into_iter()
        .find(|p| p.file_name().unwrap() == "base64__input.pcap")
        .expect("base64__input.pcap in the corpus")
}

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

/// Every command that prints, with the arguments that make it print to stdout.
fn printing_commands(tmp: &Path) -> Vec<Vec<String>> {
    let f = sample().display().to_string();
    let gen_out = tmp.join("gen.pcap").display().to_string();
    let v: Vec<Vec<&str>> = vec![
        vec!["info", &f],
        vec!["info", "--json", &f],
        vec!["decode", "-r", &f],
        vec!["read", "-r", &f],
        vec!["read", "-r", &f, "-w", "-"],
        vec!["latency", &f, &f],
        vec!["latency", "--json", "-", &f, &f],
        vec!["latency", "--csv", "-", &f, &f],
        vec![
            "gen", "--pps", "10", "--count", "5", "--json", "-w", &gen_out,
        ],
        vec!["gen", "--pps", "10", "--count", "5", "-w", "-"],
        vec!["lab", "status"],
        vec!["flows", "-r", &f],
        vec!["flows", "-r", &f, "--csv", "-"],
        vec!["flows", "-r", &f, "--export", "-"],
        vec!["http", "-r", &f],
    ];
    v.into_iter()
        .map(|a| a.into_iter().map(String::from).collect())
        .collect()
}

#[test]
fn closed_stdout_is_a_quiet_exit_0_for_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for args in printing_commands(tmp.path()) {
        let out = weir()
            .args(&args)
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // flows' summary counts "0 decode errors": look for an error message's prefix
        if out.status.code() != Some(0) || err.contains("panicked") || err.contains("error:") {
            failures.push(format!("weir {}: {:?}: {err}", args.join(" "), out.status));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The counts of `weir flows`' records line: exported, below --min-tcp-bytes, and the rest
/// (the number before `tail`).
fn records_line(summary: &str, tail: &str) -> Option<(u64, u64, u64)> {
    let line = summary
        .lines()
        .find(|l| l.trim_start().starts_with("records: "))?;
    let rest = line.trim_start().strip_prefix("records: ")?;
    let (exported, rest) = rest.split_once(" exported, ")?;
    let (below, rest) = rest.split_once(" below --min-tcp-bytes, ")?;
    let lost = rest.strip_suffix(tail)?;
    Some((
        exported.parse().ok()?,
        below.parse().ok()?,
        lost.parse().ok()?,
    ))
}

/// `weir flows -r F --csv -` whose reader went away (`| head -c1`): exit 0, and the summary
/// says the reader closed the output, not "lost to a failed exporter"; exported + not written
/// = the records of the same file written to /dev/null (the oracle).
#[test]
fn flows_to_a_closed_stdout_says_the_reader_closed_it() {
    let f = sample();
    let all = run(weir()
        .args(["flows", "-r"])
        .arg(&f)
        .args(["--csv", "/dev/null"]));
    let all_err = String::from_utf8_lossy(&all.stderr);
    assert!(all.status.success(), "{all_err}");
    let (records, _, none) =
        records_line(&all_err, " lost to a failed exporter").expect("a records line");
    assert!(records > 1 && none == 0, "{all_err}");
    let out = weir()
        .args(["flows", "-r"])
        .arg(&f)
        .args(["--csv", "-"])
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        !err.contains("failed exporter") && !err.contains("error:"),
        "{err}"
    );
    let (exported, _, not_written) =
        records_line(&err, " not written: the reader closed csv -").expect("the records line");
    assert!(not_written > 0, "{err}");
    assert_eq!(exported + not_written, records, "{err}");
}

#[test]
fn full_stdout_is_exit_1_naming_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for args in printing_commands(tmp.path()) {
        let full = std::fs::File::options()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = weir()
            .args(&args)
            .stdout(full)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(1)
            || err.contains("panicked")
            || !err.contains("weir: error: cannot write to stdout: No space left on device")
        {
            failures.push(format!("weir {}: {:?}: {err}", args.join(" "), out.status));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn full_file_output_is_exit_1_naming_the_path() {
    let f = sample();
    let out = run(weir()
        .arg("read")
        .arg("-r")
        .arg(&f)
        .args(["-w", "/dev/full"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write /dev/full"), "{err}");
    assert_eq!(err.matches("(os error 28)").count(), 1, "{err}");
}

/// `weir capture -w - | head -c 100` with traffic that stops: the capture must end once its
/// reader is gone, without waiting for a packet to write.
#[test]
fn capture_to_a_pipe_ends_when_the_reader_closes_while_idle() {
    let bench = VethBench::new();
    let mut child = weir()
        .args(["capture", "-i", &bench.host_if, "-w", "-", "udp"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the banner, then keep draining stderr.
    let mut err = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("capturing on") {
        assert_eq!(err.read(&mut byte).unwrap(), 1, "capture exited early");
        seen.push(byte[0]);
    }
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        rest
    });
    // A few packets, far less than the writer's buffer: they must still reach the reader (old
    // weir held them until 1 MiB had arrived), and all of them fit in the pipe, so the reader
    // closing leaves no write pending that would fail: only an idle check can notice it.
    bench.send_udp(9999, 20, 100);
    // Like `head -c 100`: read 100 bytes, then close the pipe. No more traffic is sent.
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut head = [0u8; 100];
        let r = stdout.read_exact(&mut head);
        drop(stdout);
        let _ = tx.send(r.is_ok());
    });
    let got = rx.recv_timeout(Duration::from_secs(30));
    if got != Ok(true) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the first 100 bytes never reached the pipe ({got:?})");
    }
    let closed = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        // A hang check with a generous bound, not a benchmark.
        if closed.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let rest = drain.join().unwrap();
    let status =
        status.unwrap_or_else(|| panic!("capture still running 5 s after its reader closed"));
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(!rest.contains("panicked"), "{rest}");
}

#[test]
fn a_missing_input_leaves_an_existing_output_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("existing.pcap");
    std::fs::write(&out, b"precious").unwrap();
    let r = run(weir()
        .args(["read", "-r"])
        .arg(tmp.path().join("missing.pcap"))
        .arg("-w")
        .arg(&out));
    assert_eq!(r.status.code(), Some(1));
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    // Also when a good input comes first.
    let r = run(weir()
        .arg("read")
        .arg("-r")
        .arg(sample())
        .arg("-r")
        .arg(tmp.path().join("missing.pcap"))
        .arg("-w")
        .arg(&out));
    assert_eq!(r.status.code(), Some(1));
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// Files of `dir` that look like a temporary output.
fn leftovers(dir: &Path) -> Vec<String> {
    common::names_in(dir, |n| n.contains("weir-tmp"))
}

/// A copy of the sample in `dir` (`f.pcap`), its bytes, and a symbolic link to it.
fn input_and_link(dir: &Path) -> (PathBuf, Vec<u8>, PathBuf) {
    let f = dir.join("f.pcap");
    std::fs::copy(sample(), &f).unwrap();
    let original = std::fs::read(&f).unwrap();
    let link = dir.join("link.pcap");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    (f, original, link)
}

#[test]
fn an_output_that_is_an_input_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (f, original, link) = input_and_link(tmp.path());
    let hard = tmp.path().join("hard.pcap");
    std::fs::hard_link(&f, &hard).unwrap();
    let check = |args: &[&std::ffi::OsStr]| {
        let r = run(weir().args(args));
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("over the input"), "{args:?}: {err}");
        assert_eq!(
            std::fs::read(&f).unwrap(),
            original,
            "{args:?} damaged the input"
        );
    };
    for out in [&f, &link, &hard] {
        check(&[
            "read".as_ref(),
            "-r".as_ref(),
            f.as_os_str(),
            "-w".as_ref(),
            out.as_os_str(),
        ]);
        check(&[
            "read".as_ref(),
            "-r".as_ref(),
            link.as_os_str(),
            "-w".as_ref(),
            out.as_os_str(),
        ]);
        check(&[
            "gen".as_ref(),
            "--replay".as_ref(),
            f.as_os_str(),
            "-w".as_ref(),
            out.as_os_str(),
        ]);
        check(&[
            "latency".as_ref(),
            f.as_os_str(),
            f.as_os_str(),
            "--json".as_ref(),
            out.as_os_str(),
        ]);
        check(&[
            "latency".as_ref(),
            f.as_os_str(),
            f.as_os_str(),
            "--csv".as_ref(),
            out.as_os_str(),
        ]);
        // session 18: extract replaced the input with its selection (here none), flows wrote
        // its records or counters over it, all with exit 0 (--stats: 1, the input gone)
        let o = out.to_str().unwrap();
        let file_out = format!("file:{o}");
        for rest in [
            &["extract", o, "-w", o, "udp port 1"][..],
            &["flows", "-r", o, "--json", o],
            &["flows", "-r", o, "--stats", o],
            &["flows", "-r", o, "--export", &file_out],
        ] {
            let args: Vec<&std::ffi::OsStr> = rest.iter().map(|a| a.as_ref()).collect();
            check(&args);
        }
    }
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// `weir extract` does not write into what it reads: a file of the store it searches (the
/// manifest was replaced by the selection, the store then unreadable) or an input file's index;
/// `weir flows` refuses two outputs in one place (`--json X --stats X`: the counters replaced
/// the records). Also through a symbolic or hard link into the store (or the store reached
/// through one), and `weir index F` with `F.idx` a link to F. Each is exit 1 before anything is
/// written; the store still lists its packets.
#[test]
fn extract_and_flows_do_not_write_over_what_they_use() {
    let tmp = tempfile::tempdir().unwrap();
    let t = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let (f, store) = (t("f.pcap"), t("store"));
    std::fs::copy(sample(), &f).unwrap();
    assert!(run(weir().args(["record", "-r", &f, "-o", &store]))
        .status
        .success());
    assert!(run(weir().args(["index", &f])).status.success());
    let ls = || run(weir().args(["ls", &store, "--json"])).stdout;
    let (listed, idx) = (ls(), std::fs::read(format!("{f}.idx")).unwrap());
    let manifest = format!("{store}/manifest.json");
    let (idx_path, json) = (format!("{f}.idx"), t("x.json"));
    // links into the store: the output would replace what they point to (the manifest, the
    // index) or be written inside the store through a linked directory
    std::os::unix::fs::symlink(&manifest, t("to-manifest")).unwrap();
    std::fs::hard_link(&manifest, t("hard-manifest")).unwrap();
    std::os::unix::fs::symlink(&store, t("to-store")).unwrap();
    let seg_idx = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "idx"))
        .expect("the store's index");
    std::os::unix::fs::symlink(&seg_idx, t("to-index")).unwrap();
    // `weir index F` where F.idx is a link to F: the index would replace the capture
    let g = t("g.pcap");
    std::fs::copy(sample(), &g).unwrap();
    std::os::unix::fs::symlink(&g, format!("{g}.idx")).unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["extract", &store, "-w", &t("to-manifest")],
            "into the store",
        ),
        (
            &["extract", &store, "-w", &t("hard-manifest")],
            "into the store",
        ),
        (&["extract", &store, "-w", &t("to-index")], "into the store"),
        (
            &["extract", &store, "-w", &t("to-store/new.pcap")],
            "into the store",
        ),
        (
            &["extract", &t("to-store"), "-w", &t("store/new.pcap")],
            "into the store",
        ),
        (&["index", &g], "over the input"),
        (&["extract", &store, "-w", &manifest], "into the store"),
        (
            &["extract", &store, "-w", &t("store/new.pcap")],
            "into the store",
        ),
        (&["extract", &f, "-w", &idx_path], "over the index"),
        (
            &["flows", "-r", &f, "--json", &json, "--stats", &json],
            "--json and --stats both name",
        ),
        (&["flows", "-r", &f, "--csv", &store], "is a directory"),
    ];
    for (args, msg) in cases {
        let r = run(weir().args(*args));
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(msg), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    assert_eq!(ls(), listed, "the store changed");
    assert_eq!(std::fs::read(&idx_path).unwrap(), idx, "the index changed");
    assert_eq!(std::fs::read(&g).unwrap(), std::fs::read(sample()).unwrap());
    assert!(!Path::new(&json).exists() && !Path::new(&t("store/new.pcap")).exists());
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

#[test]
fn outputs_replace_a_file_only_when_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.pcap");
    // Through a symbolic link, the link's target is replaced and the link stays.
    let target = tmp.path().join("target.pcap");
    std::fs::write(&target, b"old").unwrap();
    std::os::unix::fs::symlink(&target, &out).unwrap();
    let r = run(weir()
        .arg("read")
        .arg("-r")
        .arg(sample())
        .arg("--micro")
        .arg("-w")
        .arg(&out));
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(std::fs::symlink_metadata(&out)
        .unwrap()
        .file_type()
        .is_symlink());
    let t = run(Command::new("tcpdump")
        .arg("-r")
        .arg(&target)
        .args(["-w", "-"]));
    assert!(t.status.success(), "tcpdump reads the output");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        std::fs::read(sample()).unwrap()
    );
    // A filter that cannot be compiled fails before anything is written.
    std::fs::write(&target, b"old").unwrap();
    let r = run(weir()
        .arg("read")
        .arg("-r")
        .arg(sample())
        .arg("-w")
        .arg(&out)
        .arg("tcp and and"));
    assert_eq!(r.status.code(), Some(1));
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

#[test]
fn os_errors_are_printed_once() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.pcap");
    let m = missing.as_os_str();
    let (st, o) = (tmp.path().join("st"), tmp.path().join("o"));
    let cases: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["latency".as_ref(), m, m],
        vec![
            "gen".as_ref(),
            "--replay".as_ref(),
            m,
            "-w".as_ref(),
            "-".as_ref(),
        ],
        vec!["index".as_ref(), m],
        vec![
            "record".as_ref(),
            "-r".as_ref(),
            m,
            "-o".as_ref(),
            st.as_os_str(),
        ],
        vec![
            "read".as_ref(),
            "-r".as_ref(),
            m,
            "-w".as_ref(),
            o.as_os_str(),
        ],
        vec!["info".as_ref(), m],
    ];
    for args in cases {
        let r = run(weir().args(&args));
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.matches("(os error 2)").count(), 1, "{args:?}: {err}");
        assert!(err.contains(&*missing.to_string_lossy()), "{args:?}: {err}");
    }
}

#[test]
fn unwritable_chart_directory_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let f = sample();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let mut dirs = vec![file.join("charts")];
    // A read-only file system (root ignores permission bits, not a read-only mount).
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
        .arg(&ro)
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        dirs.push(ro.clone());
    }
    for dir in &dirs {
        let r = run(weir().arg("latency").arg(&f).arg(&f).arg("--plot").arg(dir));
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{err}");
        assert!(err.contains(&*dir.to_string_lossy()), "{err}");
        assert!(
            !err.contains("Os {") && !err.contains("kind:"),
            "debug text: {err}"
        );
        assert_eq!(
            err.lines().count(),
            1,
            "one error line, before any work: {err}"
        );
    }
    if mounted {
        let _ = Command::new("umount").arg(&ro).status();
    }
}

/// `weir record -o` naming an existing file (the input itself, a link to it, /dev/null) is
/// `not a directory` (was "File exists"), exit 1, the file untouched; `weir record -r
/// STORE/SEGMENT -o STORE` is refused (was exit 0, the packets twice in the store).
#[test]
fn a_store_directory_that_is_a_file_is_not_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let (f, original, link) = input_and_link(tmp.path());
    for out in [f.as_path(), link.as_path(), Path::new("/dev/null")] {
        let r = run(weir().args(["record", "-r"]).arg(&f).arg("-o").arg(out));
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("{}: not a directory", out.display())),
            "{err}"
        );
        assert_eq!(std::fs::read(&f).unwrap(), original);
    }
    // a store's own segment imported into it (its packets would be there twice): refused,
    // the store's listing unchanged
    let store = tmp.path().join("st");
    let r = run(weir().args(["record", "-r"]).arg(&f).arg("-o").arg(&store));
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let listing = || run(weir().args(["ls", "--json"]).arg(&store)).stdout;
    let before = listing();
    let segment = common::segments(&store).remove(0);
    let r = run(weir()
        .args(["record", "-r"])
        .arg(&segment)
        .arg("-o")
        .arg(&store));
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("into the store"), "{err}");
    assert_eq!(listing(), before);
}

/// A chart directory that is an existing file (`--plot FILE`): said as `not a directory`
/// (was "File exists"), exit 1, the file untouched, for latency and voip.
#[test]
fn a_chart_directory_that_is_a_file_is_not_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let f = sample();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"keep").unwrap();
    let latency = run(weir()
        .arg("latency")
        .arg(&f)
        .arg(&f)
        .arg("--plot")
        .arg(&file));
    let voip = run(weir()
        .args(["voip", "-w", "/dev/null", "-r"])
        .arg(&f)
        .arg("--plot")
        .arg(&file));
    for r in [latency, voip] {
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("{}: not a directory", file.display())),
            "{err}"
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
}

/// Classic µs pcap files of the corpus with a record whose µs field is 10^6 or more.
fn out_of_range_micro_files() -> Vec<PathBuf> {
    corpus()
        .into_iter()
        .filter(|p| {
            let b = std::fs::read(p).unwrap();
            if b.len() < 24 || b[0..4] != [0xd4, 0xc3, 0xb2, 0xa1] {
                return false;
            }
            let u = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
            let mut at = 24;
            while at + 16 <= b.len() {
                if u(at + 4) >= 1_000_000 {
                    return true;
                }
                at += 16 + u(at + 8) as usize;
            }
            false
        })
        .collect()
}

#[test]
fn micro_output_is_byte_identical_to_tcpdump_with_out_of_range_microseconds() {
    let files = out_of_range_micro_files();
    assert!(
        !files.is_empty(),
        "the corpus has a file with µs fields ≥ 10^6"
    );
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (
        tmp.path().join("weir.pcap"),
        tmp.path().join("tcpdump.pcap"),
    );
    for f in files {
        let w = run(weir()
            .args(["read", "--micro", "-r"])
            .arg(&f)
            .arg("-w")
            .arg(&a));
        assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
        let t = run(Command::new("tcpdump").arg("-r").arg(&f).arg("-w").arg(&b));
        assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
        assert!(
            std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
            "{}: weir --micro differs from tcpdump -w",
            f.display()
        );
        // Through the parallel reader too (a filter matching everything).
        let w = run(weir()
            .args(["read", "--micro", "-r"])
            .arg(&f)
            .arg("-w")
            .arg(&a)
            .arg("len > 0"));
        assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
        let t = run(Command::new("tcpdump")
            .arg("-r")
            .arg(&f)
            .arg("-w")
            .arg(&b)
            .arg("len > 0"));
        assert!(t.status.success());
        assert!(
            std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
            "{} filtered",
            f.display()
        );
    }
}

#[test]
fn a_capture_killed_with_sigkill_leaves_its_packets_in_the_named_file() {
    // A live capture writes its file in place (as `tcpdump -w`): killed outright, the packets it
    // had written are in OUT itself, not in a temporary file nobody knows about.
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("live.pcap");
    let mut child = weir()
        .args(["capture", "-i", &bench.host_if, "-w"])
        .arg(&out)
        .arg("udp")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("capturing on") {
        assert_eq!(err.read(&mut byte).unwrap(), 1, "capture exited early");
        seen.push(byte[0]);
    }
    bench.send_udp(9999, 20, 100);
    // The idle flush puts them in the file; wait for tcpdump to see all 20 (a hang bound only).
    let count = |p: &std::path::Path| {
        let o = run(Command::new("tcpdump").arg("-r").arg(p));
        String::from_utf8_lossy(&o.stdout).lines().count()
    };
    let t = Instant::now();
    while count(&out) < 20 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap(); // SIGKILL: no clean-up runs
    child.wait().unwrap();
    assert_eq!(
        count(&out),
        20,
        "tcpdump reads every packet from {}",
        out.display()
    );
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "live.pcap")
        .collect();
    assert!(leftovers.is_empty(), "no other files: {leftovers:?}");
}

/// A closed stderr (`2>&1 | head -c0`, `2>&-`) loses weir's messages but never turns a run into
/// a panic (exit 101): the exit status is the one the same run gives with stderr open.
#[test]
fn closed_stderr_keeps_the_exit_status() {
    let tmp = tempfile::tempdir().unwrap();
    let f = sample().display().to_string();
    let out_file = tmp.path().join("o.pcap").display().to_string();
    let cases: Vec<Vec<&str>> = vec![
        vec!["read", "-r", &f, "-w", &out_file],
        vec!["read", "-r", "/nonexistent/in.pcap"],
        vec!["flows", "-r", &f, "--json", "/dev/null"],
        vec!["capture", "-i", "weir-no-such0", "-c", "1", "-w", &out_file],
        vec!["info", "--no-such-flag"],
    ];
    let mut failures = Vec::new();
    for args in cases {
        let open = weir()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let closed = weir()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(closed_pipe())
            .output()
            .unwrap();
        if open.status.code() != closed.status.code() || closed.status.code() == Some(101) {
            failures.push(format!(
                "weir {}: stderr open {:?}, closed {:?}",
                args.join(" "),
                open.status,
                closed.status
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
