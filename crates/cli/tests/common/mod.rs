//! Helpers shared by the end-to-end tests: the weir binary, the corpus, peers and temp dirs.
#![allow(dead_code)]

pub mod netns;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `weir` binary under test.
pub fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

/// The corpus of real captures; the tests need it (it is on every dev and CI machine).
pub fn corpus() -> Vec<PathBuf> {
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
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run scripts/setup.sh)"))
}

/// The filter expressions shared with weir-filter's oracle test, one per line.
pub fn expressions() -> Vec<String> {
    let text = include_str!("../../../filter/tests/expressions.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// The values of `fields` for every frame of a file, as `tshark -T fields` prints them.
pub fn tshark_fields(file: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(file).args(["-T", "fields"]);
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
pub fn tshark_frames(file: &Path) -> Vec<(String, u64, u64)> {
    tshark_fields(file, &["frame.time_epoch", "frame.len", "frame.cap_len"])
        .into_iter()
        .map(|f| (f[0].clone(), f[1].parse().unwrap(), f[2].parse().unwrap()))
        .collect()
}
