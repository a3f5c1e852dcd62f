//! What the test suites of several crates share: the peer programs they compare weir with
//! (tcpdump, tshark, editcap, capinfos...) and the shared corpus of real captures.
//!
//! A missing peer or corpus is never a silent pass. Without `WEIR_REQUIRE_PEERS` the test says
//! `SKIPPED: ...` on stderr and returns; with `WEIR_REQUIRE_PEERS` set (CI and
//! `scripts/test.sh` set it) the test fails with a message naming what is missing.
//!
//! The corpus is `$WEIR_CORPUS` when set, else `../shared/corpus/pcaps` beside the repository.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether `WEIR_REQUIRE_PEERS` is set: a missing peer or corpus then fails the test.
pub fn peers_required() -> bool {
    std::env::var_os("WEIR_REQUIRE_PEERS").is_some()
}

/// Reports that `what` is missing: panics when peers are required, else prints a skip note.
/// Always returns `false`, so callers can write `return missing(...)` in a `bool` function.
#[track_caller]
pub fn missing(what: &str) -> bool {
    assert!(
        !peers_required(),
        "{what}; WEIR_REQUIRE_PEERS is set, so a missing peer or corpus fails the test (run scripts/setup.sh)"
    );
    eprintln!("SKIPPED: {what} (set WEIR_REQUIRE_PEERS=1 to make this a failure)");
    false
}

/// Whether `program` can be started here. When it cannot, [`missing`] decides: a skip note, or
/// a panic when peers are required.
#[track_caller]
pub fn have(program: &str) -> bool {
    match Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(_) => true,
        Err(e) => missing(&format!("{program} cannot be run: {e}")),
    }
}

/// The corpus directory: `$WEIR_CORPUS`, else `shared/corpus/pcaps` beside the repository.
pub fn corpus_dir() -> PathBuf {
    std::env::var_os("WEIR_CORPUS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/pcaps"),
        PathBuf::from,
    )
}

/// The corpus files, sorted by name; `None` (after [`missing`]) when the directory cannot be read
/// or holds no file.
#[track_caller]
pub fn corpus() -> Option<Vec<PathBuf>> {
    let dir = corpus_dir();
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) => {
            missing(&format!("corpus {} cannot be read: {e}", dir.display()));
            return None;
        }
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    if files.is_empty() {
        missing(&format!("corpus {} holds no file", dir.display()));
        return None;
    }
    files.sort();
    Some(files)
}

/// A directory for one test's files, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Makes a fresh directory under the system's temporary directory, named after `tag`.
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "weir-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", p.display()));
        TempDir(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `name` inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
