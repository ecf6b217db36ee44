#!/usr/bin/env bash
# End-to-end latency and failover of Kafka workers, open loop.
#
# `spillway kafka produce --rate R` stamps every event with the time it was due on the
# schedule; workers keep that timestamp on their results; `spillway kafka consume
# --latency` takes read time minus the stamp: produce-time (as scheduled, so coordinated
# omission is corrected) to reply-consumed-time. One run, phases by wall time:
#   0 .. K1        steady state (the first 5 s are dropped as warm-up)
#   K1             worker w1 is SIGKILLed and restarted at once under the same --worker-id
#                  (a supervisor's restart: static membership, no rebalance wait)
#   K2             worker w2 is SIGKILLed and stays down: the group hands its partitions
#                  to w1 after the session timeout (6 s)
# For each kill it prints the latency spike (max after the kill) and the recovery time
# (from the kill until the last result over max(50 ms, 2x the steady p99.9)), and the
# broker's CPU. Writes the per-message log and an SVG timeline into OUTDIR.
#
#   scripts/bench-kafka-latency.sh [RATE] [SECONDS] [MODE] [OUTDIR]
#     RATE     events/s (default 20000)       SECONDS  run length (default 60)
#     MODE     inplace: Q1 per card over 4 partitions keyed by card (default)
#              routed:  per card and per merchant from a 1-partition topic, joined
#     OUTDIR   default docs/bench/kafka-latency-MODE
#   COMMIT_EVERY (default 20ms) and CHECKPOINT_EVERY (default 1s) set the workers'
#   --commit-every and --checkpoint-interval.
#
# Builds the release binary with --features kafka; starts and stops its own broker.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-20000}
SECS=${2:-60}
MODE=${3:-inplace}
OUT=${4:-docs/bench/kafka-latency-$MODE}
COMMIT=${COMMIT_EVERY:-20ms}
CKPT=${CHECKPOINT_EVERY:-1s}
case "$MODE" in inplace|routed) ;; *) echo "MODE must be inplace or routed, not $MODE" >&2; exit 2;; esac
cargo build -q --release -p spillway-cli --features kafka
S=${CARGO_TARGET_DIR:-target}/release/spillway
W=$(mktemp -d /tmp/spillway-klat.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  scripts/kafka.sh stop "$W/broker" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
B=$(scripts/kafka.sh start "$W/broker")
BPID=$(cat "$W/broker/broker.pid")
cpu() { awk '{print ($14+$15)/100}' "/proc/$BPID/stat"; }
mkdir -p "$OUT"
rm -f "$OUT"/w*.log

N=$((RATE * SECS))
scripts/gen-payments.py "$N" 100000 5000 "$W/pay.csv"
W5="RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW"
if [ "$MODE" = inplace ]; then
  Q="SELECT card, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n FROM payments WINDOW w AS (PARTITION BY card ORDER BY ts $W5)"
  PARTS=(--key card --partitions 4)
else
  Q="SELECT card, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, COUNT(*) OVER m AS mn FROM payments WINDOW w AS (PARTITION BY card ORDER BY ts $W5), m AS (PARTITION BY merchant ORDER BY ts $W5)"
  PARTS=(--partitions 1)
fi
# The topic and its schema exist before the workers start.
head -1 "$W/pay.csv" > "$W/none.csv"
TYPES=(--schema ts:int,card:int,merchant:int,amount:float)
$S kafka produce --brokers "$B" --topic pay --input "$W/none.csv" "${TYPES[@]}" "${PARTS[@]}" -q

worker() { # $1 = id
  $S run --query "$Q" --input "kafka://$B/pay" --table payments --output "kafka://$B/out" --group g \
    --checkpoint-dir "$W/ckpt" --checkpoint-interval "$CKPT" --commit-every "$COMMIT" \
    --worker-id "$1" 2>>"$OUT/$1.log" &
  PIDS+=($!)
  eval "PID_$1=$!"
}
worker w1
worker w2
sleep 8 # both joined and assigned

$S kafka consume --brokers "$B" --topic out --output "$W/out.csv" --count "$N" --timeout "$((SECS + 60))s" \
  --latency --latency-log "$OUT/latency.csv" --json "$OUT/consume.json" -q 2>"$W/consume.log" &
CONSUMER=$!
PIDS+=($CONSUMER)
sleep 1
c0=$(cpu)
T0=$(date +%s%3N)
# The producer commits its transactions as often as the workers do: readers see an
# event once its chunk is committed, which is part of the end-to-end latency.
$S kafka produce --brokers "$B" --topic pay --input "$W/pay.csv" "${TYPES[@]}" "${PARTS[@]}" --rate "$RATE" \
  --commit-every "$COMMIT" -q 2>"$W/produce.log" &
PRODUCER=$!
PIDS+=($PRODUCER)

K1=$((SECS / 3))
K2=$((2 * SECS / 3))
sleep "$K1"
T1=$(date +%s%3N)
kill -9 "$PID_w1"
worker w1
sleep "$((K2 - K1))"
T2=$(date +%s%3N)
kill -9 "$PID_w2"
wait "$PRODUCER"
c1=$(cpu)
wait "$CONSUMER" || { cat "$W/consume.log" >&2; exit 1; }
cat "$W/produce.log" "$W/consume.log" >&2
# The surviving worker's summary (rebuild times, replays) goes to its log.
kill -TERM "$PID_w1" 2>/dev/null && wait "$PID_w1" 2>/dev/null || true
tail -2 "$OUT/w1.log" >&2

python3 - "$OUT" "$T0" "$T1" "$T2" "$RATE" "$MODE" "$COMMIT" "$(python3 -c "print(round($c1 - $c0, 1))")" "$SECS" <<'EOF'
import csv, json, sys
out, t0, t1, t2 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
rate, mode, commit, bcpu, secs = sys.argv[5], sys.argv[6], sys.argv[7], float(sys.argv[8]), float(sys.argv[9])
rows = [(float(r["consumed_unix_ms"]), float(r["latency_ms"])) for r in csv.DictReader(open(f"{out}/latency.csv"))]
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")
steady = [l for (c, l) in rows if t0 + 5000 <= c < t1]
p50, p99, p999 = pct(steady, 0.5), pct(steady, 0.99), pct(steady, 0.999)
thr = max(50.0, 2 * p999)
def after(k, end):
    xs = [(c, l) for (c, l) in rows if k <= c < end]
    spike = max((l for _, l in xs), default=0.0)
    over = [c for (c, l) in xs if l > thr]
    return spike, ((max(over) - k) if over else 0.0)
s1, r1 = after(t1, t2)
s2, r2 = after(t2, float("inf"))
res = {
    "mode": mode, "rate": float(rate), "commit_every": commit, "results": len(rows),
    "steady": {"count": len(steady), "p50_ms": p50, "p99_ms": p99, "p999_ms": p999},
    "restart_kill": {"spike_ms": s1, "recovery_ms": r1},
    "kill_no_restart": {"spike_ms": s2, "recovery_ms": r2},
    "threshold_ms": thr, "broker_cpu_s": bcpu, "seconds": secs,
}
json.dump(res, open(f"{out}/summary.json", "w"), indent=2)
print(f"{mode}, {rate} events/s open loop, commit every {commit}: {len(rows)} results")
print(f"steady state: p50 {p50:.1f} ms, p99 {p99:.1f} ms, p99.9 {p999:.1f} ms ({len(steady)} results)")
print(f"SIGKILL + immediate restart: spike {s1:.0f} ms, recovered {r1:.0f} ms after the kill (threshold {thr:.0f} ms)")
print(f"SIGKILL, no restart:         spike {s2:.0f} ms, recovered {r2:.0f} ms after the kill")
print(f"broker CPU during the run: {bcpu} s over {secs:.0f} s")
# Timeline: max latency per 100 ms bucket.
buckets = {}
for c, l in rows:
    b = int((c - t0) // 100)
    buckets[b] = max(buckets.get(b, 0.0), l)
if buckets:
    xs = sorted(buckets)
    w, h, pad = 900, 300, 40
    xmax = max(xs) / 10 or 1
    ymax = max(buckets.values()) * 1.1 or 1
    pts = " ".join(f"{pad + (b / 10) / xmax * (w - 2 * pad):.1f},{h - pad - buckets[b] / ymax * (h - 2 * pad):.1f}" for b in xs)
    def vline(t, label):
        x = pad + ((t - t0) / 1000) / xmax * (w - 2 * pad)
        return f'<line x1="{x:.1f}" y1="{pad}" x2="{x:.1f}" y2="{h - pad}" stroke="red" stroke-dasharray="4"/><text x="{x + 3:.1f}" y="{pad + 12}" font-size="11">{label}</text>'
    svg = f'''<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif">
<text x="{pad}" y="20" font-size="13">End-to-end latency ({mode}, {rate} ev/s, commit {commit}): max per 100 ms, ms (y up to {ymax:.0f}) over s (x up to {xmax:.0f})</text>
<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/><line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>
<polyline fill="none" stroke="steelblue" points="{pts}"/>
{vline(t1, "kill w1 + restart")}{vline(t2, "kill w2")}
</svg>'''
    open(f"{out}/timeline.svg", "w").write(svg)
EOF
