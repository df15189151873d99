#!/bin/sh
# A node of the nemesis run (tests/vm/nemesis.sh; test2.sh hands over to this script), at
# each of its boots: dlmnode=N and dlmgen=G (0 at the first boot, one more at each boot the
# host gives it after a fence) on the kernel command line. Corosync, our daemon from our
# package, gfs2 mounted (node 1 makes it and the shared files at the first boot, the
# nodes meeting at barriers), then the agent (nemesis.py): the workers, and the host's
# commands from /host/nem. Results in /host/out/nodeN/gG.
. /host/guest/lib.sh
N=$(sed -n 's/.*dlmnode=\([0-9]\).*/\1/p' /proc/cmdline)
GEN=$(sed -n 's/.*dlmgen=\([0-9]*\).*/\1/p' /proc/cmdline)
GEN=${GEN:-0}
OUT=/host/out/node$N/g$GEN
# shellcheck disable=SC2034 # barrier (lib.sh) meets the other node there
SYNC=/host/sync
mkdir -p "$OUT"
exec >"$OUT/test.log" 2>&1
set -x
setup_node "$N"
cluster_up "$N"
if [ "$GEN" = 0 ]; then
    barrier up
    [ "$N" = 1 ] && mkfs.gfs2 -O -p lock_dlm -t vmclust:gfs0 -j 2 /dev/vdb
    barrier mkfs
fi
# what the daemon says if the mount is slow (its lockspace join waits for something)
(sleep 90; ctool ls; ctool status; ctool dump) >"$OUT/mount_wait.txt" 2>&1 &
mount -t gfs2 /dev/vdb /mnt
if [ "$GEN" = 0 ]; then
    [ "$N" = 1 ] && python3 /host/guest/nemesis.py files /mnt
    barrier files
fi
exec python3 /host/guest/nemesis.py agent "$N" "$GEN" /mnt
