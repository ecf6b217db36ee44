#!/usr/bin/env bash
# The whole test suite on a fresh machine (README's second command; .ci/run calls it).
# Installs what the tests need (idempotent), then checks formatting, runs clippy with
# warnings denied, checks the crate layers and the docs' links, checks the default build
# (no RocksDB), and runs every test with the RocksDB baseline linked against Debian's
# librocksdb (never the bundled C++ build) and the Kafka client against Debian's
# librdkafka (the Kafka test starts its own broker; the tiered-store tests start their
# own redis-server, one per test binary), then builds the Python package into a
# virtualenv and runs its pytest suite, and compares window TVFs and OVER frames with
# real Flink (scripts/flink-parity.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(librocksdb-dev libclang-dev clang pkg-config liblzma-dev python3-venv python3-pip librdkafka-dev openjdk-17-jre-headless openjdk-17-jdk-headless maven redis-server)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done

echo "==> cargo fmt --check"
cargo fmt --all --check
cargo fmt --manifest-path crates/spillway-py/Cargo.toml --check
echo "==> cargo clippy (warnings denied)"
cargo clippy --workspace --all-targets --features spillway-cli/rocksdb,spillway-cli/kafka -- -D warnings
echo "==> cargo doc (the developers' docs: private items included, warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc -q --workspace --no-deps --document-private-items \
    --features spillway-cli/rocksdb,spillway-cli/kafka
echo "==> crate layers (dependencies point down)"
python3 scripts/check-layers.py
echo "==> docs: relative links resolve, nothing outside the repository"
python3 scripts/check-doc-links.py
# Code comments describe the thing, not the issue that asked for it (a reader cannot
# open issues) and not paths outside the repository.
if git grep -nE '[Ii]ssue #[0-9]+|\.\./shared/|shared/papers/' -- 'crates/*.rs' 'crates/*.py'; then
  echo "code comments above point at issue numbers or outside the repository" >&2
  exit 1
fi
echo "==> default build (no RocksDB, no Kafka)"
cargo check --workspace
echo "==> tests"
echo "==> Kafka 4.3.1 jars (Maven; the Kafka test starts and stops its own broker)"
./scripts/kafka.sh fetch
cargo test --workspace --features spillway-cli/rocksdb,spillway-cli/kafka
echo "==> Python package (crates/spillway-py)"
./scripts/test-python.sh
echo "==> differential check against Apache Flink 1.20 (Maven-resolved jars, local environment)"
SPILLWAY_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/spillway" ./scripts/flink-parity.sh
