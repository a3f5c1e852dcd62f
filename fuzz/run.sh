#!/usr/bin/env bash
# Runs the AFL++ harnesses for a chosen time each: fuzz/run.sh [SECONDS] [TARGET...]
# Seeds come from a few small corpus files and from files weir writes itself; findings go to
# fuzz/out/TARGET/ (ignored by git). Exits 1 if any harness found a crash.
set -euo pipefail
cd "$(dirname "$0")"
SECS="${1:-60}"; shift || true
TARGETS=("${@:-fuzz_reader fuzz_decode fuzz_quick fuzz_index}")
command -v cargo-afl >/dev/null || cargo install cargo-afl
cargo afl config --build >/dev/null 2>&1 || true
cargo afl build --release
# The index seeds are made by `weir index`.
(cd .. && cargo build --release -q --bin weir)
CORPUS="${WEIR_CORPUS:-../../shared/corpus/pcaps}"
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1
crashes=0
for t in ${TARGETS[@]}; do
  seeds="out/$t/seeds"; mkdir -p "$seeds"
  # Seeds: the smallest corpus files (for the decoder, the same bytes prefixed by a link byte pair).
  for f in $(ls -S "$CORPUS" | tail -n 24); do
    if [ "$t" = fuzz_decode ]; then
      { printf '\x01\xff'; tail -c +41 "$CORPUS/$f" | head -c 1500; } > "$seeds/$f"
    elif [ "$t" = fuzz_quick ]; then
      { printf '\x01'; tail -c +41 "$CORPUS/$f" | head -c 1500; } > "$seeds/$f"
    elif [ "$t" = fuzz_index ]; then
      # Mode 0 (a frame for the key differential) and mode 1 (an index, CRC stripped).
      { printf '\x00'; tail -c +41 "$CORPUS/$f" | head -c 1500; } > "$seeds/frame-$f"
      cp "$CORPUS/$f" "$seeds/tmp.pcap"
      ../target/release/weir index --chunk-kib 4 "$seeds/tmp.pcap" >/dev/null 2>&1 || true
      if [ -f "$seeds/tmp.pcap.idx" ]; then
        { printf '\x01'; head -c -4 "$seeds/tmp.pcap.idx"; } > "$seeds/index-$f"
      fi
      rm -f "$seeds/tmp.pcap" "$seeds/tmp.pcap.idx"
      printf '\x02host 10.0.0.1 and (port 80 or not net 10.0.0.0/8)' > "$seeds/expr"
    else
      cp "$CORPUS/$f" "$seeds/$f"
    fi
  done
  echo "== $t for ${SECS}s"
  cargo afl fuzz -V "$SECS" -i "$seeds" -o "out/$t/findings" "target/release/$t" || true
  n=$(find "out/$t/findings" -path '*crashes/id*' 2>/dev/null | wc -l)
  echo "== $t: $n crashes"
  crashes=$((crashes + n))
done
[ "$crashes" -eq 0 ]
