#!/usr/bin/env bash
# The Kafka exactly-once soak: ROUNDS seeded kill schedules (exactly N kills, a worker
# paused past the session timeout, kills shortly after restarts, kills in the middle of a
# checkpoint, in turn), each with two jobs of three workers against one broker, each
# ending with read_committed output byte-identical to `spillway run`. Outside CI (CI runs
# one seed of each kind); about 30 s per round on 2 cores.
#
#   scripts/kafka-soak.sh [ROUNDS] [FIRST_SEED]      (defaults: 20, 1000)
#
# Installs what it needs (idempotent), builds the Kafka test binary, and prints one line
# per round; the last line is the count of rounds that were exactly once. Exits non-zero
# if any round failed. A round's kind is its seed modulo 4, so
# `scripts/kafka-soak.sh 1 SEED` reruns one round.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-20}
seed=${2:-1000}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "kafka-soak.sh: ROUNDS must be a positive number, not $rounds" >&2; exit 2; }
[[ $seed =~ ^[0-9]+$ ]] || { echo "kafka-soak.sh: FIRST_SEED must be a number, not $seed" >&2; exit 2; }

missing=()
for p in librdkafka-dev librocksdb-dev libclang-dev clang pkg-config openjdk-17-jre-headless maven; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
./scripts/kafka.sh fetch

# The whole output (with each failed round's worker logs) stays in target/ for a look.
mkdir -p target
log=target/kafka-soak.log
set +e
SPILLWAY_SOAK_ROUNDS=$rounds SPILLWAY_SOAK_SEED=$seed \
  cargo test -p spillway-cli --features spillway-cli/rocksdb,spillway-cli/kafka --test kafka soak \
  -- --ignored --exact exactly_once::soak --nocapture --test-threads 1 2>&1 | tee "$log" | grep --line-buffered -oE '(round [0-9]+/[0-9]+: .*|^kafka soak: .*|^error.*)'
rc=${PIPESTATUS[0]}
set -e
summary=$(grep '^kafka soak:' "$log" | tail -n 1)
if [ -z "$summary" ]; then
  tail -n 30 "$log"
  echo "kafka soak: did not run (exit $rc)"
  exit 1
fi
[ "$rc" -eq 0 ] || echo "kafka-soak.sh: the failed rounds' worker logs are in $log" >&2
echo "$summary"
exit "$rc"
