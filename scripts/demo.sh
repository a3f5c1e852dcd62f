#!/usr/bin/env bash
# weir's demo on a default input: builds weir, builds a trace from the corpus of real captures
# (or uses the file given as $1), summarises it, filters it like tcpdump, and decodes a few packets.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release -q -p weir -p weir-bench
WEIR=target/release/weir
OUT=bench/out
mkdir -p "$OUT"

TRACE="${1:-$OUT/demo.pcap}"
if [ -z "${1:-}" ]; then
  echo "== building a 200 000-packet trace from ../shared/corpus/pcaps"
  target/release/mktrace --packets 200000 -w "$TRACE"
fi

echo; echo "== weir info $TRACE"
$WEIR info "$TRACE"

echo; echo "== weir read -r $TRACE -w $OUT/web.pcapng --format pcapng 'tcp port 80'"
$WEIR read -r "$TRACE" -w "$OUT/web.pcapng" --format pcapng 'tcp port 80'
echo "weir kept $($WEIR info --json "$OUT/web.pcapng" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["packets"])') packets;" \
     "tcpdump finds $(tcpdump -r "$TRACE" 'tcp port 80' 2>/dev/null | wc -l) with the same filter"

echo; echo "== weir decode -r $OUT/web.pcapng -c 10"
$WEIR decode -r "$OUT/web.pcapng" -c 10
