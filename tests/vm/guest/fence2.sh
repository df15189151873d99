#!/bin/sh
# Fencing on real kernels (run-two.sh with FENCE=1; test2.sh hands over to this script).
# dlm.conf has enable_fencing=1 and the agent fence_host.sh, which has the host power the
# victim's VM off. Node 2 holds a lock and its dlm_controld is killed (kill -9) with gfs2
# mounted (FENCE=crash: its kernel stops dead instead); node 1's F_SETLKW for the same range must wait until node 2 is fenced, then be
# granted (fence2.py). Then the host boots node 2 again (dlmrejoin=1 on its kernel command
# line): it installs our package, joins the cluster, mounts and must get node 1's table.
# All the while both nodes run load2.py's plock load (holders, own files, a shared file):
# node 2 fails in the middle of it, and node 1's workers, one of them waiting for node 2's
# shared range, must each get an answer to every request. Results in fence.txt.
. /host/guest/lib.sh
begin_two
export DLM_TOOL=/usr/sbin/dlm_tool
if grep -q dlmrejoin /proc/cmdline; then
    setup_node 2
    cluster_up 2
    mount -t gfs2 /dev/vdb /mnt
    ctool plocks gfs0 >$OUT/dump.txt
    touch $SYNC/rejoined.2
    i=0
    while [ ! -f $SYNC/compared.1 ] && [ $i -lt 3000 ]; do sleep 0.2; i=$((i + 1)); done
    shutdown_node
fi
gfs2_up
python3 /host/guest/load2.py start "$N" /mnt >$OUT/load.txt 2>&1
if [ "$N" = 2 ]; then
    python3 /host/guest/fence2.py 2 /mnt $SYNC hold
    while [ ! -f $SYNC/fwaiting.1 ]; do sleep 0.2; done
    touch $SYNC/fkilled.2
    sync
    if grep -q crash /host/conf/fence; then
        # the kernel stops dead (qemu exits: -no-reboot) with the lockspace in use
        echo 1 >/proc/sys/kernel/sysrq
        echo b >/proc/sysrq-trigger
    fi
    # our daemon dies with the lockspace in use; the host powers this VM off when fenced
    kill -9 "$(pidof dlm_controld)"
    sleep 600
fi
python3 /host/guest/fence2.py 1 /mnt $SYNC wait >$OUT/fence.txt 2>&1
echo "fence2.py exit $?" >>$OUT/fence.txt
# the load went on through node 2's failure: every request of node 1's workers answered
python3 /host/guest/load2.py stop 1 /mnt >>$OUT/fence.txt 2>&1
ctool ls >$OUT/ls_after.txt
# node 2, booted again, rejoins: both tables hold node 1's lock, both nodes are members
i=0
while [ ! -f $SYNC/rejoined.2 ] && [ $i -lt 3000 ]; do sleep 0.2; i=$((i + 1)); done
ctool plocks gfs0 >$OUT/dump_rejoin.txt
ctool ls >$OUT/ls_rejoin.txt
if [ -f $SYNC/rejoined.2 ] && cmp -s $OUT/dump_rejoin.txt /host/out/node2b/dump.txt &&
    [ "$(wc -l <$OUT/dump_rejoin.txt)" = 1 ] && grep -q '^members       1 2 $' $OUT/ls_rejoin.txt; then
    echo "PASS node 2 rejoined after its fence: members 1 2, both tables hold node 1's lock"
else
    echo "FAIL node 2 did not rejoin cleanly"
fi >>$OUT/fence.txt
touch $SYNC/compared.1
kill "$(cat /run/fence-holder.pid)"
journalctl -u dlm --no-pager >$OUT/journal_dlm.txt
shutdown_node
