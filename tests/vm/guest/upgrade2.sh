#!/bin/sh
# A rolling upgrade on two VMs with gfs2 in use (run-two.sh with UPGRADE=1; test2.sh hands
# over to this script). Both nodes start on Debian's C daemon with a plock load running
# (load2.py: a holder of 20 locks, workers on files of their own and on a shared one).
# Then, one node at a time while the other's load and locks stay: node 2 goes to our
# package, node 1 goes to our package, node 2 goes back to Debian's daemon. Each time the
# node stops its load, unmounts, stops dlm, changes package, starts dlm, mounts and starts
# its load again; then both pause their loads, and both daemons' tables must be identical
# and the other node's holder must still have its locks. Results in upgrade.txt.
. /host/guest/lib.sh
begin_two
load() { python3 /host/guest/load2.py "$1" "$N" /mnt >>$OUT/upgrade.txt 2>&1; }
version() { /usr/sbin/dlm_controld --version | head -1; }

# compare NAME: both loads paused, both tables dumped with Debian's dlm_tool, node 1
# compares them; then the loads go on
compare() {
    load pause
    barrier "paused-$1"
    ctool plocks gfs0 >$OUT/dump-$1.txt
    echo "node $N runs $(version)" >>$OUT/upgrade.txt
    barrier "dumped-$1"
    if [ "$N" = 1 ]; then
        if cmp -s /host/out/node1/dump-$1.txt /host/out/node2/dump-$1.txt; then
            echo "PASS $1: the two tables are identical ($(wc -l </host/out/node1/dump-$1.txt) lines)"
        else
            echo "FAIL $1: the two tables differ"
        fi >>$OUT/upgrade.txt
    fi
    load held
    load resume
    barrier "resumed-$1"
}

# replace NODE WHAT NAME: node NODE stops its load, changes its daemon (install: our
# package; remove: back to Debian's), comes back; the other node's load runs on
replace() {
    if [ "$N" = "$1" ]; then
        load stop
        umount /mnt
        systemctl stop dlm
        if [ "$2" = install ]; then install_ours; else apt-get remove -y -q dlm-controld-rs; fi
        systemctl start dlm
        mount -t gfs2 /dev/vdb /mnt
        load start
        echo "node $N: now $(version)" >>$OUT/upgrade.txt
    fi
    barrier "replaced-$3"
    compare "$3"
}

gfs2_up
load start
barrier loaded
compare c-and-c
replace 2 install ours-on-2
replace 1 install ours-on-both
replace 2 remove c-back-on-2
load stop
barrier stopped
umount /mnt
systemctl stop dlm
systemctl stop corosync
grep -q '^FAIL' $OUT/upgrade.txt || echo "RESULT ok" >>$OUT/upgrade.txt
echo done >$OUT/done
sync
systemctl poweroff -ff
