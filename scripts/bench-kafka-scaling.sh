#!/usr/bin/env bash
# Scaling of Kafka workers: Railgun's Q1 (SUM and COUNT per card over
# 5 minutes) over a 4-partition topic, with 1 worker and with 2 workers, against the
# single-process `spillway run` on the same file, in one script run. Prints each rate,
# the ratios and the broker's CPU seconds during each run. One worker reads the topic
# once first, while the broker has just started (its rate is printed as the cold one);
# the ratios use the runs after it.
#
#   scripts/bench-kafka-scaling.sh [EVENTS] [CARDS]     (default 1000000 100000)
#
# Builds the release binary with --features kafka (SPILLWAY_BIN=PATH runs that binary
# instead, for A/B runs of two builds); starts and stops its own broker.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
CARDS=${2:-100000}
if [ -n "${SPILLWAY_BIN:-}" ]; then
  S=$SPILLWAY_BIN
else
  cargo build -q --release -p spillway-cli --features kafka
  S=${CARGO_TARGET_DIR:-target}/release/spillway
fi
W=$(mktemp -d /tmp/spillway-kbench.XXXXXX)
trap 'scripts/kafka.sh stop "$W/broker" >/dev/null 2>&1 || true; rm -rf "$W"' EXIT
B=$(scripts/kafka.sh start "$W/broker")
BPID=$(cat "$W/broker/broker.pid")
cpu() { awk '{print ($14+$15)/100}' "/proc/$BPID/stat"; }

scripts/gen-payments.py "$N" "$CARDS" 0 "$W/pay.csv"
Q="SELECT card, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n FROM payments WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW)"

single=$($S run --query "$Q" --input "$W/pay.csv" --table payments --output "$W/single.csv" 2>&1 | grep -o '[0-9.]*M events/s' | head -1)
$S kafka produce --brokers "$B" --topic pay --input "$W/pay.csv" --key card --partitions 4 -q 2>&1 | tail -1

run_group() { # $1 = run name, $2 = workers (default: the name); prints the combined events/s
  local k=${2:-$1} g="g$1" pids=() first=9e99 last=0 total=0
  for i in $(seq 1 "$k"); do
    $S run --query "$Q" --input "kafka://$B/pay" --table payments --output "kafka://$B/out$1" --group "$g" \
      --checkpoint-dir "$W/ckpt$1" --checkpoint-interval 1s --worker-id "w$i" --idle-exit 3s \
      2>"$W/w$1.$i.log" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for i in $(seq 1 "$k"); do
    read -r f l e < <(grep -h -o 'busy from unix ms [0-9]* to [0-9]*' "$W/w$1.$i.log" | awk '{print $5, $7}' | tr '\n' ' '; \
      grep -h -o '^[0-9]* events in' "$W/w$1.$i.log" | awk '{print $1}')
    [ -n "${e:-}" ] || continue
    total=$((total + e))
    first=$(python3 -c "print(min($first, $f))")
    last=$(python3 -c "print(max($last, $l))")
    echo "  worker $i of $k: $e events, $(grep -h -o '[0-9]* events/s over [0-9.]* s' "$W/w$1.$i.log")" >&2
  done
  python3 -c "print(f'{$total / (($last - $first) / 1000):.0f}')"
}

# The first pass over the topic runs while the broker's JVM is still compiling its hot
# paths (a broker in service has been running for much longer): it is reported as the
# cold figure, and the timed runs that follow read the same topic as new groups.
cw0=$(cpu); cold=$(run_group 0 1); cw1=$(cpu)
c0=$(cpu); one=$(run_group 1); c1=$(cpu); two=$(run_group 2); c2=$(cpu)
echo "single process (spillway run on the file): $single"
echo "1 worker, broker just started: $cold events/s (broker CPU $(python3 -c "print(round($cw1 - $cw0, 1))") s)"
echo "1 worker:  $one events/s (broker CPU $(python3 -c "print(round($c1 - $c0, 1))") s)"
echo "2 workers: $two events/s (broker CPU $(python3 -c "print(round($c2 - $c1, 1))") s)"
python3 -c "print(f'2 workers / 1 worker = {$two / $one:.2f}x')"
python3 -c "s='$single'.split('M')[0]; print(f'1 worker / single process = {$one / (float(s) * 1e6):.2f}x')"
