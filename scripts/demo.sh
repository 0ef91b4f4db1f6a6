#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the main job: installs what is missing,
# builds linefs, brings up a 3-node cluster (ZooKeeper on loopback, nicfs and kworker per
# node, every client log chain-replicated by nicfs), mounts node 0, does real work on it
# (files, directories, fsync, a host crash with kill -9 and recovery), reads it back
# through mounts of node 1 and node 2, shows status, and shuts down.
#
#   scripts/demo.sh [DIR]        (default DIR: ./linefs-cluster; PM lives in DIR/pm)
#
# Needs root for the FUSE mount (/dev/fuse is root-only on these machines).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-./linefs-cluster}
MNT="$DIR/mnt"
MNT1="$DIR/mnt1"
MNT2="$DIR/mnt2"

scripts/install-deps.sh
cargo build --release --bins
L=target/release/linefs

step() { printf '\n== %s\n' "$*"; }

step "linefs up --nodes 3 --dir $DIR"
$L up --nodes 3 --dir "$DIR"
mkdir -p "$MNT" "$MNT1" "$MNT2"
step "linefs mount $MNT (node 0)"
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

step "read it back on node 1 and node 2 (their own public areas, filled by replication)"
# fsync returned only once both replicas held the log durable; each replica publishes its
# copy in the background: wait until node 1 and 2 have published all node 0 sent them.
sync "$MNT/projects/latest"
for i in $(seq 1 100); do
  $L status --dir "$DIR" --json | python3 -c '
import json, sys
v = json.load(sys.stdin)
ok = True
for n in v["cluster"]["nodes"][1:]:
    for c in ((n.get("replication") or {}).get("copies") or []):
        ok = ok and c["durable_lsn"] == c["published_lsn"]
sys.exit(0 if ok else 1)' && break
  sleep 0.1
done
$L mount --dir "$DIR" --node 1 "$MNT1"
$L mount --dir "$DIR" --node 2 "$MNT2"
for m in "$MNT1" "$MNT2"; do
  cmp "$DIR/random.bin" "$m/projects/latest" && echo "node ${m: -1}: the 32 MiB file written on node 0 reads back identical"
  diff -r "$MNT/projects/src" "$m/projects/src" && echo "node ${m: -1}: projects/src identical ($(ls "$m/projects/src" | wc -l) files)"
done
$L umount --dir "$DIR" "$MNT1"
$L umount --dir "$DIR" "$MNT2"

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
echo "demo finished: data kept in $DIR/pm (linefs up --dir $DIR brings it back)"
