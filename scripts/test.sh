#!/usr/bin/env bash
# Runs every test of linefs: formatting and lints, then the whole workspace's unit, property,
# reference-model, crash and FUSE integration tests. FUSE tests need root and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# No import cycle between the modules of any crate (prints each cycle and the lines that
# close it, and fails, if there is one).
cargo run -q -p xtask -- cycles
# Build the binaries the integration tests drive (linefs, linefs-fuse).
cargo build --workspace --bins
cargo test --workspace -- --test-threads=2
# The MINOS checks (model check with losses, duplicates and crashes, mutations, simulation)
# ran in the workspace run above, about 3 minutes on 2 cores; not run twice. Their states
# explored per mode: cargo test -p linefs-minos --test model_check -- --nocapture
# The crash suite's bounded slice: every single step, a sample of pairs and triples, every
# crash state of each recovered and checked (a few minutes on 2 cores).
target/debug/linefs crash-suite --quick
# One minute of the kill -9 soak: fsynced files must survive SIGKILLs of the mount.
soak_dir=$(mktemp -d)
target/debug/linefs soak --minutes 1 --dir "$soak_dir"
rm -rf "$soak_dir"
# 40 s of the 3-node soak: replica nicfs and kworker killed too, every fsynced file read back
# through node 0, 1 and 2 at the end (full length: linefs soak --nodes 3 --minutes 10).
soak_dir=$(mktemp -d)
target/debug/linefs soak --nodes 3 --minutes 0.67 --dir "$soak_dir"
rm -rf "$soak_dir"
