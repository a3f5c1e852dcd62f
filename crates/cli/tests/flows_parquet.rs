//! `weir flows --parquet` against independent readers: the files of a run over real captures,
//! read back by pyarrow and by DuckDB (from PyPI, see scripts/setup.sh), hold exactly the
//! records `weir flows --json` writes, field by field; the README's DuckDB top-talkers query runs
//! verbatim and equals the same sums computed from pyarrow's rows; a run killed with SIGKILL in
//! the middle of an interval leaves no file under a final name, only the hidden temporary one;
//! bad options are refused with a message.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{corpus, run, weir};

/// A 26-minute SIP capture (several 5-minute files, the README query's hour), two short ones
/// and an IPv6 one; given out of time order on purpose.
const FILES: [&str; 5] = [
    "smb2-ntlmssp-negotiateflags__input.pcap",
    "sip-method__sip.pcap",
    "mime__mime-stream-depth__input.pcap",
    "rule-hooks__http-body-hook-01__input.pcap",
    "ipv6-evasion__ipv6-dos-with-ext-headers-6__denial6-6.pcap",
];

fn input(name: &str) -> PathBuf {
    corpus()
        .into_iter()
        .find(|p| p.ends_with(name))
        .unwrap_or_else(|| panic!("{name} not in the corpus"))
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-flows-parquet-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Every file under `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

fn flows(args: &[&str], extra: &[&Path]) -> std::process::Output {
    let mut cmd = weir();
    cmd.args(["flows", "--workers", "1", "--seed", "7"]);
    for f in FILES {
        cmd.arg("-r").arg(input(f));
    }
    cmd.args(args);
    cmd.args(extra);
    run(&mut cmd)
}

#[test]
fn parquet_files_read_back_by_pyarrow_and_duckdb_equal_the_json_lines() {
    let d = tmpdir("equal");
    let json = d.join("flows.json");
    let top = d.join("flows");
    let o = flows(&["--json"], &[&json]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = flows(&["--parquet-sensor", "s1", "--parquet"], &[&top]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stdout.is_empty(),
        "--parquet alone writes nothing on stdout"
    );
    let files = tree(&top);
    // the SIP capture (09:32:20 to 09:58:27) spans six 5-minute intervals of hour 09; every
    // file is complete (no temporary file left)
    let sip: Vec<_> = files
        .iter()
        .filter(|f| f.starts_with("date=2005-07-04/hour=09/s1-20050704T09"))
        .collect();
    assert_eq!(sip.len(), 6, "{files:?}");
    assert!(
        files
            .iter()
            .all(|f| f.ends_with(".parquet") && !f.contains("/.")),
        "{files:?}"
    );
    let check = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/parquet_check.py");
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let o = run(Command::new("python3")
        .arg(check)
        .arg(&json)
        .arg(&top)
        .arg(readme)
        .arg(&d)
        .arg("s1"));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && said.starts_with("ok "),
        "{said}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("{said}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_run_killed_mid_interval_leaves_no_file_under_a_final_name() {
    let d = tmpdir("kill");
    let top = d.join("flows");
    // stdin stays open: the run waits for more packets with its file half written
    let (mut child, stdin) = common::fed_and_held(
        weir()
            .args(["flows", "-r", "-", "--workers", "1", "--idle-timeout", "1"])
            .args([
                "--parquet-interval",
                "3600",
                "--parquet-sensor",
                "k",
                "--parquet",
            ])
            .arg(&top),
        &std::fs::read(input("sip-method__sip.pcap")).unwrap(),
    );
    let tmp = "date=2005-07-04/hour=09/.k-20050704T090000Z.parquet.tmp";
    let t = Instant::now();
    while !top.join(tmp).exists() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "no file started: {:?}",
            tree(&d)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    drop(stdin);
    assert_eq!(tree(&top), [tmp], "only the temporary file is there");
    // and a reader of the data set sees no file at all
    let o = run(Command::new("python3").arg("-c").arg(format!(
        "import duckdb; print(duckdb.sql(\"select count(*) from glob('{}/*/*/*.parquet')\").fetchall()[0][0])",
        top.display()
    )));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "0",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_parquet_options_are_refused() {
    let d = tmpdir("bad");
    let f = input("sip-method__sip.pcap");
    let try_ = |args: &[&str]| {
        let o = run(weir().arg("flows").arg("-r").arg(&f).args(args));
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let top = d.join("p");
    let top = top.to_str().unwrap();
    for bad in ["-1", "0", "nan", "inf", "0.5", "86401", "1e300", "x"] {
        let (code, err) = try_(&["--parquet", top, "--parquet-interval", bad]);
        assert_eq!(code, Some(2), "--parquet-interval {bad}: {err}");
        assert!(err.contains("--parquet-interval"), "{err}");
    }
    let (code, err) = try_(&["--parquet-interval", "60"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("give --parquet"), "{err}");
    let (code, err) = try_(&["--parquet", "-"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("not stdout"), "{err}");
    for name in ["", ".hidden", "a/b"] {
        let (code, err) = try_(&["--parquet", top, "--parquet-sensor", name]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("cannot name a file"), "{err}");
    }
    // a directory that cannot be made (its parent is a file)
    let (code, err) = try_(&["--parquet", "/dev/null/x"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot open the Parquet output"), "{err}");
    // an existing file where the directory should be: named as not a directory (it said
    // "File exists")
    let (code, err) = try_(&["--parquet", "/dev/null"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("/dev/null: not a directory"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}
