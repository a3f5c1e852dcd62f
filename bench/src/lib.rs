//! Shared helpers of weir's benchmarks: locating the corpus and building the large trace that
//! benchmarks compare weir and its peers on.

use std::path::PathBuf;

/// The corpus of real captures, `../shared/corpus/pcaps` from the repository root, or
/// `$WEIR_CORPUS` when set.
pub fn corpus_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WEIR_CORPUS") {
        return dir.into();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    root.join("../shared/corpus/pcaps")
}
