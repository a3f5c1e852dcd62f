#!/usr/bin/env bash
# Installs what weir's build, demo and tests need on a fresh Debian machine (run as root).
# Idempotent: packages already present are skipped by apt.
set -euo pipefail

PACKAGES=(
  build-essential pkg-config libpcap-dev   # build: libpcap is weir's BPF compiler
  tcpdump tshark                           # peers: packets and filters (tshark brings capinfos)
  softflowd nfdump                         # peers: flow metering and NetFlow collection
  netsniff-ng tcpreplay iproute2           # traffic generation and lab benches
  iperf3 stress-ng                         # lab scenarios: bulk TCP traffic, CPU stress
  fonts-dejavu-core                        # the font weir latency's charts are drawn with
  python3 time hyperfine                   # benchmark runners
  prometheus                               # peers: promtool and a real server scraping --metrics
  chromium chromium-driver                 # the web page of `weir run` ([web]) tested in a real headless browser
  librdkafka-dev                           # build: the Kafka flow sink (rdkafka, linked dynamically)
  kcat protobuf-compiler                   # peers: consume weir's Kafka records, protoc --decode them
  maven default-jre-headless               # the real Kafka broker of the tests (jars from Maven Central)
  sip-tester                               # peers: sipp calls (with RTP from a pcap) for weir voip
  sngrep tmux                              # peers: sngrep's dialog list (its screen, read in a tmux pane)
  openssl curl                             # TLS certificates for weir serve's tests; an independent HTTP(S) client
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Readers of `weir flows --parquet` files in the tests (and the README's DuckDB query), from PyPI.
if ! python3 -c 'import duckdb, pyarrow' 2>/dev/null; then
  echo "setup: installing duckdb and pyarrow (PyPI)"
  python3 -m pip install -q --break-system-packages duckdb pyarrow 2>/dev/null ||
    python3 -m pip install -q duckdb pyarrow
fi

# The JA4 oracle of crates/cli/tests/http_ja4.rs (an independent JA4+ implementation), from PyPI.
if ! command -v ja4plus >/dev/null; then
  echo "setup: installing ja4plus (PyPI)"
  python3 -m pip install -q --break-system-packages ja4plus 2>/dev/null ||
    python3 -m pip install -q ja4plus
fi

if ! command -v cargo >/dev/null; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: no Rust toolchain found; install stable Rust (https://rustup.rs) and re-run" >&2
    exit 1
  fi
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
# Apache Kafka 3.9.1's jars for crates/cli/tests/kafka.rs (cached in ~/.m2; the classpath goes to
# target/kafka/classpath.txt)
"$(dirname "$0")/kafka/jars.sh"
echo "setup: ok ($(cargo --version))"
