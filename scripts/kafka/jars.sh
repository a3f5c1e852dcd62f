#!/usr/bin/env bash
# Resolves Apache Kafka 3.9.1's jars from Maven Central (pom.xml beside this script) and writes
# their classpath to target/kafka/classpath.txt, which crates/cli/tests/kafka.rs reads to start a
# real broker. Idempotent: the jars are cached in ~/.m2, and a classpath whose jars all exist is
# kept.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/kafka/classpath.txt"
if [ -s "$out" ] && tr ':' '\n' <"$out" | while read -r j; do [ -f "$j" ] || exit 1; done; then
  echo "kafka jars: ok ($out)"
  exit 0
fi
mkdir -p "$(dirname "$out")"
mvn -q -B -f "$here/pom.xml" dependency:build-classpath -Dmdep.outputFile="$out" >&2
echo "kafka jars: $(tr ':' '\n' <"$out" | wc -l) jars ($out)"
