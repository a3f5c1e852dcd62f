#!/usr/bin/env bash
# weir's main job on a default bench: builds weir, builds a 200 000-packet trace from the corpus
# of real captures (or uses the file given as $1), makes a veth pair with one end in a network
# namespace, replays the trace through it with tcpreplay while `weir record` captures the other
# end into a store of pcapng segments, then shows the store (`weir info`), checks it with
# tcpdump, and meters its flows. Everything it creates is removed at the end.
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

NS=weirdemo A=wdemo0 B=wdemo1 STORE="$OUT/demo-store"
cleanup() { ip netns del "$NS" 2>/dev/null || true; ip link del "$A" 2>/dev/null || true; }
trap cleanup EXIT
cleanup
echo; echo "== test bench: veth $A <-> $B (in namespace $NS)"
ip netns add "$NS"
ip link add "$A" mtu 9000 type veth peer name "$B" mtu 9000
ip link set "$B" netns "$NS"
ip link set "$A" up
ip netns exec "$NS" ip link set "$B" up

rm -rf "$STORE"
echo; echo "== weir record -i $A -o $STORE --segment-mib 16   (while tcpreplay sends $TRACE from $NS)"
$WEIR record -i "$A" -o "$STORE" --segment-mib 16 --stats-json "$OUT/demo-record-stats.json" &
REC=$!
sleep 1
ip netns exec "$NS" tcpreplay -q -i "$B" --mbps 500 "$TRACE" 2>&1 | grep -E "Actual|Failed|Statistics" || true
sleep 1
kill -INT "$REC"
wait "$REC" || true

echo; echo "== the store: manifest and segments"
python3 - "$STORE/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for s in m["segments"]:
    print(f'{s["file"]:<44} {s["state"]:<7} {s["packets"]:>8} packets {s["bytes"]:>10} bytes  drops {s["drops"]}')
PY
LAST=$(ls "$STORE"/*.pcapng | tail -n 1)
echo; echo "== weir info $LAST   (the last segment)"
$WEIR info "$LAST"
for f in "$STORE"/*.pcapng; do tcpdump -r "$f" -w /dev/null 2>/dev/null || echo "tcpdump cannot read $f"; done
echo; echo "== tcpdump reads every segment; capinfos counts" \
  "$(capinfos -c -M -T -r "$STORE"/*.pcapng | awk '{s += $2} END {print s}') packets in them"

echo; echo "== weir flows -r SEGMENT... (top 10 flows by bytes)"
SEGS=()
for f in "$STORE"/*.pcapng; do SEGS+=(-r "$f"); done
$WEIR flows "${SEGS[@]}" --json "$OUT/demo-flows.json" 2>"$OUT/demo-flows.log"
sed -n 1,3p "$OUT/demo-flows.log"
python3 - "$OUT/demo-flows.json" <<'PY'
import json, sys
flows = [json.loads(l) for l in open(sys.argv[1])]
flows.sort(key=lambda f: -f["octetDeltaCount"])
for f in flows[:10]:
    print(f'{f["sourceIPAddress"]:>39}:{f["sourceTransportPort"]:<5} -> {f["destinationIPAddress"]:>39}:{f["destinationTransportPort"]:<5} '
          f'proto {f["protocolIdentifier"]:<3} {f["packetDeltaCount"]:>7} pkts {f["octetDeltaCount"]:>10} bytes')
print(f"{len(flows)} flows in all")
PY
