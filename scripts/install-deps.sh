#!/usr/bin/env bash
# Installs what linefs needs from Debian and crates.io on a fresh machine. Idempotent.
set -euo pipefail

need=()
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
dpkg -s libfuse3-dev >/dev/null 2>&1 || need+=(libfuse3-dev)
# libleveldb-dev: only `linefs bench leveldb` (bench/build.rs builds without it).
dpkg -s libleveldb-dev >/dev/null 2>&1 || need+=(libleveldb-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# bindfs: the second FUSE passthrough baseline of `linefs bench` (skipped if missing).
command -v bindfs >/dev/null 2>&1 || need+=(bindfs)
# ZooKeeper (the cluster manager's store, started by `linefs up` on loopback and by the
# clustermgr tests) and the logger its jar needs; the package's own service is not used.
dpkg -s zookeeper >/dev/null 2>&1 || need+=(zookeeper)
dpkg -s libslf4j-java >/dev/null 2>&1 || need+=(libslf4j-java)

if [ "${#need[@]}" -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "install-deps: installing ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=600 "${need[@]}"
fi

if [ ! -e /dev/fuse ]; then
    echo "install-deps: /dev/fuse is missing: FUSE mounts will not work on this machine" >&2
    exit 1
fi
command -v cargo >/dev/null 2>&1 || { echo "install-deps: cargo not found (install Rust first)" >&2; exit 1; }
echo "install-deps: ok"
