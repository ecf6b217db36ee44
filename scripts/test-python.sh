#!/usr/bin/env bash
# Python package tests: builds crates/spillway-py with maturin (release, via pip) into a
# virtualenv and runs its pytest suite. Idempotent: the venv (target/pyvenv, or
# $SPILLWAY_PYVENV) and cargo's build cache are reused. pytest's exit code is the
# script's; "no tests collected" (exit 5) counts as a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${SPILLWAY_PYVENV:-$PWD/target/pyvenv}"
# The command-line binary the front-end tests compare against (built with the
# workspace's own target directory, before the package's is chosen below).
export SPILLWAY_BIN="${SPILLWAY_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/spillway}"
if [ ! -x "$SPILLWAY_BIN" ]; then
  echo "==> cargo build -p spillway-cli (for $SPILLWAY_BIN)"
  cargo build -q -p spillway-cli
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/py"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

if [ ! -x "$venv/bin/python" ]; then
  echo "==> creating $venv"
  python3 -m venv "$venv"
fi
need=()
for m in pandas numpy pytest maturin; do
  "$venv/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$m') is None)" || need+=("$m")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "==> pip install ${need[*]}"
  "$venv/bin/pip" install -q "${need[@]}"
fi

export PATH="$venv/bin:$PATH"
echo "==> pip install ./crates/spillway-py"
# --no-build-isolation: use the venv's maturin (no download per run).
"$venv/bin/pip" install -q --no-build-isolation --force-reinstall --no-deps ./crates/spillway-py

echo "==> pytest crates/spillway-py/tests"
set +e
"$venv/bin/python" -m pytest -q -p no:cacheprovider crates/spillway-py/tests "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
