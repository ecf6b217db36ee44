#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft, loopback only) for tests, benchmarks and
# local runs of `spillway run --input kafka://...`.
#
#   scripts/kafka.sh start DIR [--port P] [--owner PID [--temporary]]
#                                           start a broker whose data and log live in DIR;
#                                           prints its bootstrap address (127.0.0.1:P)
#                                           once the broker itself listens there (ports
#                                           it picks are picked again, up to 3 times,
#                                           if another process takes one first; a taken
#                                           --port P fails the start);
#                                           with --owner, a watcher stops the broker once
#                                           process PID is gone (a test binary that was
#                                           killed leaves no broker behind), and with
#                                           --temporary then removes DIR
#   scripts/kafka.sh stop DIR               stop the broker started in DIR (SIGTERM, then
#                                           SIGKILL after 20 s)
#   scripts/kafka.sh status DIR             print the bootstrap address if it runs
#   scripts/kafka.sh fetch                  resolve the jars only
#
# Idempotent: `start` on a DIR whose broker runs prints its address again; `stop` on a
# DIR without one does nothing. The jars (Kafka 4.3.1 from Maven Central) are resolved
# once into ${SPILLWAY_KAFKA_HOME:-~/.cache/spillway/kafka-4.3.1}. Needs a JDK (17+) and
# Maven. Topics default to one replica; the internal topics (offsets, transaction state)
# are set to one replica too, or transactions never initialise on a single node.
set -euo pipefail

KAFKA_VERSION=4.3.1
HOME_DIR=${SPILLWAY_KAFKA_HOME:-$HOME/.cache/spillway/kafka-$KAFKA_VERSION}

die() { echo "kafka.sh: $*" >&2; exit 1; }

fetch() {
  [ -f "$HOME_DIR/libs/.complete" ] && return 0
  command -v java >/dev/null || die "java not found: install a JDK 17 or newer (apt-get install openjdk-17-jre-headless)"
  command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install maven)"
  mkdir -p "$HOME_DIR"
  cat >"$HOME_DIR/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>spillway</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.25.4</version></dependency>
  </dependencies>
</project>
EOF
  echo "kafka.sh: resolving Kafka $KAFKA_VERSION jars with Maven into $HOME_DIR/libs" >&2
  (cd "$HOME_DIR" && mvn -q -B dependency:copy-dependencies -DoutputDirectory=libs -DincludeScope=runtime >&2) \
    || die "Maven could not resolve the Kafka jars (see the output above)"
  touch "$HOME_DIR/libs/.complete"
}

running_pid() { # prints the pid of DIR's broker if it is alive
  local dir=$1 pid
  [ -f "$dir/broker.pid" ] || return 1
  pid=$(cat "$dir/broker.pid")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q kafka.Kafka "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

owns_port() { # PID PORT: whether process PID has a socket listening on TCP port PORT
  python3 - "$1" "$2" <<'PY'
import os, sys
pid, port = sys.argv[1], int(sys.argv[2])
inodes = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        lines = open(table).readlines()[1:]
    except OSError:
        continue
    for line in lines:
        f = line.split()
        if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
            inodes.add(f[9])
fds = f"/proc/{pid}/fd"
try:
    names = os.listdir(fds)
except OSError:
    sys.exit(1)
for fd in names:
    try:
        link = os.readlink(os.path.join(fds, fd))
    except OSError:
        continue
    if link.startswith("socket:[") and link[8:-1] in inodes:
        sys.exit(0)
sys.exit(1)
PY
}

start() {
  local dir=$1; shift
  local port="" port_given="" owner="" temporary=""
  while [ $# -gt 0 ]; do
    case $1 in
      --port) [ $# -ge 2 ] || die "--port needs a value"; port=$2; port_given=1; shift 2 ;;
      --owner) [ $# -ge 2 ] || die "--owner needs a PID"; owner=$2; shift 2
               kill -0 "$owner" 2>/dev/null || die "--owner $owner: no such process" ;;
      --temporary) temporary=1; shift ;;
      *) die "unknown option $1 (usage: kafka.sh start DIR [--port P] [--owner PID [--temporary]])" ;;
    esac
  done
  [ -z "$temporary" ] || [ -n "$owner" ] || die "--temporary needs --owner PID"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if running_pid "$dir" >/dev/null; then
    cat "$dir/bootstrap"
    return 0
  fi
  fetch
  # free_port finds ports that are free now; another process can take one before the
  # broker binds it (an outgoing connection gets its local port from the same range).
  # Ports picked here are then picked again (bounded); a port given with --port is not.
  local attempt status
  for attempt in 1 2 3; do
    status=0
    launch "$dir" "$port" "$owner" "$temporary" || status=$?
    case $status in
      0) return 0 ;;
      2) [ -z "$port_given" ] && [ "$attempt" -lt 3 ] || die "$(cat "$dir/start.err")"
         echo "kafka.sh: $(cat "$dir/start.err"); trying other ports" >&2 ;;
      *) die "$(cat "$dir/start.err")" ;;
    esac
  done
}

# Starts DIR's broker on PORT (a free one if empty) and waits until it listens. Returns
# 0 once it does (printing its address), 2 if it exited because a port was taken, 1 on
# any other failure; the reason is in DIR/start.err.
launch() {
  local dir=$1 port=$2 owner=$3 temporary=$4
  [ -n "$port" ] || port=$(free_port)
  local cport; cport=$(free_port)
  [ "$cport" != "$port" ] || cport=$(free_port)
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
# A killed worker's open transaction blocks read_committed readers of its partitions until
# the coordinator aborts it (transaction.timeout.ms after its start); the default 10 s
# between the coordinator's checks would add up to 10 s more to every failover.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.flush.interval.messages=9223372036854775807
EOF
  local cp="$HOME_DIR/libs/*"
  if [ ! -f "$dir/data/meta.properties" ]; then
    local id
    id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
    if ! java -cp "$cp" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" >"$dir/format.log" 2>&1; then
      echo "formatting the broker's storage failed: $(tail -3 "$dir/format.log")" >"$dir/start.err"
      return 1
    fi
  fi
  nohup java -Xmx512m -XX:+UseSerialGC -cp "$cp" kafka.Kafka "$dir/server.properties" >"$dir/broker.log" 2>&1 &
  local pid=$!
  # Not this shell's job: killing it after a failed start reports nothing.
  disown "$pid" 2>/dev/null || true
  echo "$pid" >"$dir/broker.pid"
  # Ready when the PLAINTEXT port accepts connections (bounded: 60 s).
  for _ in $(seq 1 600); do
    if grep -q "Address already in use" "$dir/broker.log"; then
      # It may linger after failing to bind: stop it before trying other ports.
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$dir/broker.pid"
      echo "the broker could not bind 127.0.0.1:$port or 127.0.0.1:$cport: another process holds it (Address already in use)" >"$dir/start.err"
      return 2
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$dir/broker.pid"
      echo "the broker exited during start-up; last lines of $dir/broker.log: $(tail -5 "$dir/broker.log")" >"$dir/start.err"
      return 1
    fi
    # The port accepting a connection is not enough: another process may listen on it.
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && owns_port "$pid" "$port"; then
      echo "127.0.0.1:$port" >"$dir/bootstrap"
      [ -z "$owner" ] || watch_owner "$dir" "$owner" "$pid" "$temporary"
      cat "$dir/bootstrap"
      return 0
    fi
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/broker.pid"
  echo "the broker did not listen on 127.0.0.1:$port within 60 s (see $dir/broker.log)" >"$dir/start.err"
  return 1
}

# Stops DIR's broker (PID broker) once process OWNER is gone, or ends when the broker
# does; with TEMPORARY, then removes DIR. Detached from the caller's stdout so a caller
# reading it is not held open.
watch_owner() {
  local dir=$1 owner=$2 broker=$3 temporary=$4
  (
    while kill -0 "$owner" 2>/dev/null && kill -0 "$broker" 2>/dev/null; do sleep 1; done
    if kill -0 "$broker" 2>/dev/null; then stop "$dir"; fi
    if [ -n "$temporary" ]; then rm -rf "$dir"; fi
  ) </dev/null >/dev/null 2>&1 &
  disown 2>/dev/null || true
}

stop() {
  local dir=$1 pid
  pid=$(running_pid "$dir") || { rm -f "$dir/broker.pid" "$dir/bootstrap"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  rm -f "$dir/broker.pid" "$dir/bootstrap"
}

[ $# -ge 1 ] || die "usage: kafka.sh start DIR [--port P] | stop DIR | status DIR | fetch"
cmd=$1; shift
case $cmd in
  start) [ $# -ge 1 ] || die "usage: kafka.sh start DIR [--port P] [--owner PID [--temporary]]"; start "$@" ;;
  stop) [ $# -eq 1 ] || die "usage: kafka.sh stop DIR"; stop "$1" ;;
  status) [ $# -eq 1 ] || die "usage: kafka.sh status DIR"
          running_pid "$1" >/dev/null && cat "$1/bootstrap" || { echo "no broker runs in $1" >&2; exit 3; } ;;
  fetch) fetch ;;
  *) die "unknown command $cmd (start, stop, status, fetch)" ;;
esac
