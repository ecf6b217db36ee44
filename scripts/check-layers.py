#!/usr/bin/env python3
"""Fails when a crate depends on a crate of its own layer or above: dependencies point
down. Layers, bottom up:

  0  spillway-units, spillway-zipf        small utilities, no Spillway dependencies
  1  spillway-store                       the state stores
  2  spillway-engine                      the streaming engine (may use 0-1)
  3  spillway-bench                       the workload harness (may use 0-2)
  4  spillway-cli, spillway-py            the binary and the Python package (may use 0-3)

Reads `cargo metadata` of the workspace and of the Python package's own manifest."""

import json
import subprocess
import sys

LAYER = {
    "spillway-units": 0,
    "spillway-zipf": 0,
    "spillway-store": 1,
    "spillway-engine": 2,
    "spillway-bench": 3,
    "spillway-cli": 4,
    "spillway-py": 4,
}


def packages(manifest=None):
    cmd = ["cargo", "metadata", "--format-version", "1", "--no-deps"]
    if manifest:
        cmd += ["--manifest-path", manifest]
    return json.loads(subprocess.check_output(cmd))["packages"]


bad = []
seen = set()
for pkgs in (packages(), packages("crates/spillway-py/Cargo.toml")):
    for p in pkgs:
        if p["name"] in seen:
            continue
        seen.add(p["name"])
        if p["name"] not in LAYER:
            bad.append(f"{p['name']}: not in this script's layer table")
            continue
        for d in p["dependencies"]:
            if d["name"] in LAYER and d.get("kind") != "dev":
                if LAYER[d["name"]] >= LAYER[p["name"]]:
                    bad.append(
                        f"{p['name']} (layer {LAYER[p['name']]}) depends on {d['name']} "
                        f"(layer {LAYER[d['name']]}): dependencies must point down"
                    )
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
print(f"crate layers: {len(seen)} crates, every dependency points down")
