#!/usr/bin/env bash
# Differential check of Spillway against Apache Flink 1.20: the same
# seeded, time-sorted input with ties and window-boundary events through TUMBLE, HOP,
# CUMULATE (each also with a window offset, Flink's last argument, compared with Flink in
# batch mode: see FlinkParity.java), SESSION, COUNT(DISTINCT) in a window aggregation, OVER ROWS and OVER RANGE,
# once on Flink (a local environment, parallelism 1, `WATERMARK FOR ts AS ts -
# INTERVAL '0.001' SECOND`) and once with `spillway run`; the results are compared row
# for row after sorting (normalisation: see scripts/flink-parity/compare.py).
#
# OVER RANGE is checked on a copy of the input without ties within a card (`paynt`),
# and on the input with ties (`range_ties`) with `spillway run --ties peers`, SQL's peer
# rows: Flink's RANGE frame holds a row's peers (rows with the same time, also those
# that arrive after it). Spillway's default per-event result holds the rows that arrived
# no later; that run (`range_ties_per_event`) is compared too, and its difference is
# reported as expected, not failed.
#
# Usage: scripts/flink-parity.sh [EVENTS [SEED]]    (defaults 3000, 29)
# Needs a JDK 17 (javac; installed with apt when missing) and Maven: the Flink jars are
# resolved once into ~/.m2 and copied to $CARGO_TARGET_DIR/flink-parity/lib (default
# target/); reruns reuse them. Set SPILLWAY_BIN to use a built `spillway` binary
# instead of `cargo build -p spillway-cli`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/scripts/flink-parity
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
W=$TARGET/flink-parity
N=${1:-3000}
SEED=${2:-29}
start=$(date +%s)
mkdir -p "$W/classes" "$W/data" "$W/q" "$W/flink" "$W/spillway"

apt_install() {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
command -v javac >/dev/null || apt_install openjdk-17-jdk-headless
command -v mvn >/dev/null || apt_install maven

# Flink's jars (cached: ~/.m2, then lib/ until the pom changes).
if [ ! -f "$W/lib/.resolved" ] || [ "$SRC/pom.xml" -nt "$W/lib/.resolved" ]; then
    rm -rf "$W/lib"
    mvn -q -B -Dstyle.color=never -f "$SRC/pom.xml" dependency:copy-dependencies \
        -DoutputDirectory="$W/lib" >"$W/mvn.log" 2>&1 || { cat "$W/mvn.log" >&2; exit 1; }
    touch "$W/lib/.resolved"
fi
CP="$W/lib/*"
if [ ! -f "$W/classes/FlinkParity.class" ] || [ "$SRC/FlinkParity.java" -nt "$W/classes/FlinkParity.class" ]; then
    javac -d "$W/classes" -cp "$CP" "$SRC/FlinkParity.java"
fi

if [ -z "${SPILLWAY_BIN:-}" ]; then
    (cd "$ROOT" && cargo build -q -p spillway-cli)
    SPILLWAY_BIN=$TARGET/debug/spillway
fi

python3 "$SRC/gen.py" "$W/data" "$N" "$SEED"

# name|table|query: the same text for both (Flink's `ts` is the rowtime over `ts_ms`,
# Spillway's the epoch-ms column).
AGG="COUNT(*) AS n, SUM(amount) AS s"
QUERIES=(
  "tumble|pay|SELECT card, window_start, window_end, $AGG, MIN(amount) AS lo, MAX(amount) AS hi FROM TABLE(TUMBLE(TABLE pay, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY card, window_start, window_end"
  "hop|pay|SELECT card, window_start, window_end, $AGG, AVG(amount) AS a FROM TABLE(HOP(TABLE pay, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '3' SECOND)) GROUP BY card, window_start, window_end"
  "cumulate|pay|SELECT card, window_start, window_end, $AGG FROM TABLE(CUMULATE(TABLE pay, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '4' SECOND)) GROUP BY card, window_start, window_end"
  "tumble_offset|pay|SELECT card, window_start, window_end, $AGG FROM TABLE(TUMBLE(TABLE pay, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '0.3' SECOND)) GROUP BY card, window_start, window_end"
  "hop_offset|pay|SELECT card, window_start, window_end, $AGG FROM TABLE(HOP(TABLE pay, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '3' SECOND, INTERVAL '-0.25' SECOND)) GROUP BY card, window_start, window_end"
  "cumulate_offset|pay|SELECT card, window_start, window_end, $AGG FROM TABLE(CUMULATE(TABLE pay, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '4' SECOND, INTERVAL '2.5' SECOND)) GROUP BY card, window_start, window_end"
  "session|pay|SELECT card, window_start, window_end, $AGG, MAX(amount) AS hi FROM TABLE(SESSION(TABLE pay PARTITION BY card, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY card, window_start, window_end"
  "distinct|pay|SELECT card, window_start, window_end, COUNT(*) AS n, COUNT(DISTINCT merchant) AS m FROM TABLE(TUMBLE(TABLE pay, DESCRIPTOR(ts), INTERVAL '2' SECOND)) GROUP BY card, window_start, window_end"
  "distinct_all|pay|SELECT window_start, window_end, COUNT(DISTINCT card) AS c, COUNT(DISTINCT merchant) AS m FROM TABLE(HOP(TABLE pay, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '2' SECOND)) GROUP BY window_start, window_end"
  "rows|pay|SELECT id, card, COUNT(*) OVER w AS n, SUM(amount) OVER w AS s, MIN(amount) OVER w AS lo FROM pay WINDOW w AS (PARTITION BY card ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW)"
  "range|paynt|SELECT id, card, COUNT(*) OVER w AS n, SUM(amount) OVER w AS s, MAX(amount) OVER w AS hi FROM paynt WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW)"
  "range_ties|pay|SELECT id, card, COUNT(*) OVER w AS n, SUM(amount) OVER w AS s, MAX(amount) OVER w AS hi FROM pay WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW)"
)

flink_args=("pay=$W/data/flink-pay.csv" "paynt=$W/data/flink-paynt.csv" --)
for q in "${QUERIES[@]}"; do
    IFS='|' read -r name table sql <<<"$q"
    printf '%s\n' "$sql" >"$W/q/$name.sql"
    # Window offsets: Flink in batch mode (see FlinkParity.java: its streaming window
    # operator loses rows with an offset, FLINK-36664).
    case $name in *_offset) flink_args+=("batch:$name=$W/q/$name.sql") ;;
                  *) flink_args+=("$name=$W/q/$name.sql") ;; esac
done

# Flink 1.20 on Java 17 needs its modules opened (Flink's env.java.opts.all).
OPENS=()
for p in java.lang java.net java.io java.nio sun.nio.ch java.lang.reflect java.text java.time \
         java.util java.util.concurrent java.util.concurrent.atomic java.util.concurrent.locks; do
    OPENS+=("--add-opens=java.base/$p=ALL-UNNAMED")
done
t0=$(date +%s)
java "${OPENS[@]}" -cp "$W/classes:$CP" FlinkParity "$W/flink" "${flink_args[@]}" \
    2> >(grep -E '^flink:|Exception|Error' >&2)
t1=$(date +%s)

for q in "${QUERIES[@]}"; do
    IFS='|' read -r name table _ <<<"$q"
    ties=per-event
    [ "$name" = range_ties ] && ties=peers
    "$SPILLWAY_BIN" run --query "$W/q/$name.sql" --input "$W/data/$table.csv" \
        --output "$W/spillway/$name.csv" --ties "$ties" --quiet 2>/dev/null
done
"$SPILLWAY_BIN" run --query "$W/q/range_ties.sql" --input "$W/data/pay.csv" \
    --output "$W/spillway/range_ties_per_event.csv" --quiet 2>/dev/null
cp "$W/flink/range_ties.csv" "$W/flink/range_ties_per_event.csv"
t2=$(date +%s)

fail=0
for q in "${QUERIES[@]}" "range_ties_per_event||"; do
    IFS='|' read -r name _ _ <<<"$q"
    expected=()
    [ "$name" = range_ties_per_event ] && expected=(expected-diff)
    python3 "$SRC/compare.py" "$name" "$W/spillway/$name.csv" "$W/flink/$name.csv" "${expected[@]}" || fail=1
done
for name in tumble hop cumulate tumble_offset hop_offset cumulate_offset session distinct; do
    if [ -e "$W/spillway/$name.late.csv" ]; then
        echo "$name: spillway wrote late events for time-sorted input" >&2
        fail=1
    fi
done
echo "flink-parity: Flink $((t1 - t0)) s, spillway $((t2 - t1)) s, total $(($(date +%s) - start)) s; results in $W" >&2
if [ "$fail" != 0 ]; then
    echo "flink-parity: FAILED" >&2
    exit 1
fi
echo "flink-parity: every query matched Flink (range_ties with --ties peers; its per-event run differs as expected)" >&2
