#!/usr/bin/env bash
# weir's whole test suite, as CI runs it: set-up, formatting, lints, then every test (unit,
# property, corpus sweep, and the end-to-end comparisons with tcpdump, tshark and capinfos).
# Prints a one-line summary of all test binaries at the end; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh || exit 1

status=0
step() { echo "== $*"; "$@" || { echo "FAILED: $*"; status=1; }; }

# Peer tests (tcpdump, tshark, nfcapd...) fail rather than skip when a peer is missing.
export WEIR_REQUIRE_PEERS=1

step cargo fmt --all -- --check
step cargo clippy --workspace --all-targets --release -- -D warnings
log=$(mktemp)
# --no-fail-fast: every test binary runs even after one fails (cargo then exits non-zero and
# lists the failed targets, which the summary below repeats).
cargo test --workspace --release --no-fail-fast 2>&1 | tee "$log"
test_status=${PIPESTATUS[0]}
[ "$test_status" -eq 0 ] || status=1

# The packet buffer's lock-free protocol under loom's model checker (its own build, cfg(loom)).
./scripts/loom.sh 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

python3 scripts/test_summary.py "$log" || status=1
rm -f "$log"
[ "$status" -eq 0 ] && echo "== all green" || echo "== FAILURES (see above)"
exit "$status"
