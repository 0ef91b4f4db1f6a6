#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the main job: installs what is missing,
# builds linefs, brings up a node, mounts it, does real work on it (files, directories,
# fsync, a host crash with kill -9 and recovery), shows status, and shuts down.
#
#   scripts/demo.sh [DIR]        (default DIR: ./linefs-cluster; PM lives in DIR/pm)
#
# Needs root for the FUSE mount (/dev/fuse is root-only on these machines).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-./linefs-cluster}
MNT="$DIR/mnt"

scripts/install-deps.sh
cargo build --release --bins
L=target/release/linefs

step() { printf '\n== %s\n' "$*"; }

step "linefs up --nodes 1 --dir $DIR"
$L up --nodes 1 --dir "$DIR"
mkdir -p "$MNT"
step "linefs mount $MNT"
$L mount --dir "$DIR" "$MNT"
trap '$L down --dir "$DIR" >/dev/null 2>&1 || true' EXIT

step "real work on the mount"
mount | grep " $(realpath "$MNT") " || true
mkdir -p "$MNT/projects/src"
for i in $(seq 1 200); do printf 'line %d of a small file\n' "$i" > "$MNT/projects/src/file$i.txt"; done
dd if=/dev/urandom of="$DIR/random.bin" bs=1M count=32 status=none
cp "$DIR/random.bin" "$MNT/projects/random.bin"
sync "$MNT/projects/random.bin"
ln -s random.bin "$MNT/projects/latest"
mv "$MNT/projects/src/file1.txt" "$MNT/projects/first.txt"
cmp "$DIR/random.bin" "$MNT/projects/latest" && echo "32 MiB file reads back identical"
ls "$MNT/projects/src" | wc -l | xargs echo "files in projects/src:"
df -h "$MNT"

step "linefs status"
$L status --dir "$DIR"

step "host crash: linefs kill-host 0 (SIGKILL of the mount), then restart-host 0 (recovery)"
printf 'acknowledged before the crash\n' > "$MNT/projects/fsynced.txt"
python3 - "$MNT/projects/fsynced.txt" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.close(fd)
PY
$L kill-host 0 --dir "$DIR"
$L restart-host 0 --dir "$DIR"
cat "$MNT/projects/fsynced.txt"
cmp "$DIR/random.bin" "$MNT/projects/random.bin" && echo "32 MiB file intact after the crash"

step "linefs umount, mount again: data is persistent"
$L umount --dir "$DIR" "$MNT"
$L mount --dir "$DIR" "$MNT"
cmp "$DIR/random.bin" "$MNT/projects/random.bin" && echo "intact after remount"
$L status --dir "$DIR"

step "linefs down"
$L down --dir "$DIR"
trap - EXIT
echo "demo finished: data kept in $DIR/pm (linefs up --nodes 1 --dir $DIR brings it back)"
