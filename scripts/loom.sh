#!/usr/bin/env bash
# Model-checks the packet buffer's reserve / commit / read protocol with loom
# (crates/buffer/tests/loom.rs): two writers and a reader on a tiny buffer, the wrap, and the
# best-effort skip. LOOM_MAX_PREEMPTIONS bounds the search (3 by default, as crossbeam's CI does
# 2); raise it for a deeper, slower run. Builds into its own target dir so the normal build's
# cache is not invalidated by the cfg change.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
exec cargo test -p weir-buffer --release --test loom -- --test-threads=1 "$@"
