#!/bin/sh
# ocfs2 on the user stack over the daemon (run-stack.sh ocfs2; test2.sh hands over to this
# script). corosync and dlm (`systemctl start dlm`) on both nodes, "pcmk" written to
# /sys/fs/ocfs2/cluster_stack (ocfs2_stack_user: the kernel's DLM, its lockspaces joined by
# dlm_controld), then
#   1. node 1 runs mkfs.ocfs2 --cluster-stack=pcmk --cluster-name=vmclust;
#   2. both mount it (the kernel creates the lockspace named by the file system's UUID);
#      plocks2.py across the nodes through dlm_posix_lock, the two tables the same;
#   3. ctdb's ping_pong -rw on one file from both nodes at once: every node sees the data
#      increment by the number of nodes (locks and data coherent across the nodes);
#   4. both unmount (the daemon leaves, no lockspace left) and mount again, plocks2.py
#      once more, the two tables the same;
#   5. both unmount; node 1 runs tunefs.ocfs2 and fsck.ocfs2, each taking the cluster
#      lock in a lockspace it creates from user space (libdlm: /dev/misc/dlm-control, the
#      kernel's uevent to the daemon), then releases it.
# Results (PASS/FAIL lines) in $OUT/stack.txt.
. /host/guest/lib.sh
. /host/guest/stacklib.sh
begin_two
R=$OUT/stack.txt
export DLM_TOOL=/usr/sbin/dlm_tool
[ -x /usr/sbin/dlm_tool.distrib ] && DLM_TOOL=/usr/sbin/dlm_tool.distrib
setup_node "$N"
modprobe ocfs2_stack_user
modprobe ocfs2
corosync_up "$N"
systemctl start dlm || journalctl -u dlm --no-pager | tail -40
check "node $N: the running dlm_controld is $DAEMON" running_is "$DAEMON"
echo pcmk >/sys/fs/ocfs2/cluster_stack
check "node $N: the ocfs2 cluster stack is pcmk" grep -qx pcmk /sys/fs/ocfs2/cluster_stack
barrier up
if [ "$N" = 1 ]; then
    t=$(date +%s)
    check "node 1: mkfs.ocfs2 --cluster-stack=pcmk" \
        mkfs.ocfs2 -q -N 2 -L stack --cluster-stack=pcmk --cluster-name=vmclust /dev/vdb
    note "mkfs.ocfs2: $(($(date +%s) - t)) s"
fi
barrier mkfs
# ocfs2's lockspace is named by the file system's UUID (upper case, no dashes)
LS=$(blkid -o value -s UUID /dev/vdb | tr -d - | tr a-f A-F)
export DLM_LS="$LS"
note "lockspace $LS"
# mount_both TAG: mounted here, the lockspace joined with both nodes
mount_both() {
    t=$(date +%s)
    check "node $N: mount -t ocfs2 ($1)" mount -t ocfs2 /dev/vdb /mnt
    note "mount ($1): $(($(date +%s) - t)) s"
    barrier "mounted-$1"
    check "node $N: the lockspace $LS has both nodes ($1)" members_are $LS "1 2 "
}
# locks_both TAG: plocks2.py across the nodes, the two tables compared by the host
locks_both() {
    # plocks2.py's marks of each round in a directory of its own
    mkdir -p $SYNC/$1
    barrier "plocks-$1"
    python3 /host/guest/plocks2.py "$N" /mnt $SYNC/$1 >$OUT/plocks-$1.txt 2>&1
    echo "plocks2.py exit $?" >>$OUT/plocks-$1.txt
    cat $OUT/plocks-$1.txt >>$OUT/plocks.txt
    barrier "held-$1"
    ctool plocks "$LS" >$OUT/dump-$1.txt
    barrier "dumped-$1"
    [ "$N" = 1 ] && check "node 1: both daemons' tables the same, 200 locks ($1)" same_tables dump-$1.txt 200
    python3 /host/guest/plocks2.py "$N" /mnt $SYNC/$1 release
    # the next round's holder says it holds its locks by writing this file anew
    rm -f /run/plock-holder.pid
}
mount_both first
locks_both first
# 3. ping_pong -rw from both nodes at once (3 locks: one more than the nodes)
[ "$N" = 1 ] && : >/mnt/pingpong
barrier pingpong
timeout -s INT 30 ping_pong -rw /mnt/pingpong 3 >$OUT/pingpong.raw 2>&1
tr '\r' '\n' <$OUT/pingpong.raw | grep -v '^ *$' >$OUT/pingpong.txt
note "ping_pong: $(grep -c 'locks/sec' $OUT/pingpong.txt) rate lines, last $(grep 'locks/sec' $OUT/pingpong.txt | tail -1 | tr -s ' ')"
note "ping_pong increments: $(grep -o 'data increment = [0-9]*' $OUT/pingpong.txt | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
# coherent: with both nodes running every node saw the data go up by 2 between its own
# turns, and never by anything but 1 (alone, at the start or end) or 2
check "node $N: ping_pong -rw saw the increment of two nodes" grep -q 'data increment = 2$' $OUT/pingpong.txt
check "node $N: ping_pong -rw saw no other increment" \
    sh -c "! grep 'data increment = ' $OUT/pingpong.txt | grep -qv 'increment = [12]\$'"
barrier pingponged
# 4. unmount (the daemon leaves the lockspace) and mount again
t=$(date +%s)
check "node $N: umount" umount /mnt
note "umount: $(($(date +%s) - t)) s"
barrier unmounted
check "node $N: no lockspace left after umount" no_lockspaces
mount_both again
locks_both again
check "node $N: umount (again)" umount /mnt
barrier unmounted-again
# 5. tunefs.ocfs2 and fsck.ocfs2 (which repairs, so opens the device read-write) take the
#    cluster lock in a lockspace of their own, created from user space through libdlm
#    (/dev/misc/dlm-control; the kernel's uevent to the daemon, as for a mount)
# uevents_of ACTION: how many uevents of ACTION (online, offline) the daemon has logged
uevents_of() { ctool dump 2>/dev/null | grep -c "kernel: $1@ "; }
# by_libdlm CMD...: CMD succeeds, the daemon joined one more lockspace and left it again,
# none is left
by_libdlm() {
    on=$(uevents_of online)
    off=$(uevents_of offline)
    t=$(date +%s)
    check "node 1: $*" "$@"
    note "$1: $(($(date +%s) - t)) s"
    check "node 1: the daemon joined and left $1's lockspace" \
        sh -c "[ $(uevents_of online) = $((on + 1)) ] && [ $(uevents_of offline) = $((off + 1)) ]"
    check "node 1: no lockspace left after $1" no_lockspaces
}
if [ "$N" = 1 ]; then
    by_libdlm tunefs.ocfs2 -L tuned /dev/vdb
    by_libdlm fsck.ocfs2 -fy /dev/vdb
    check "node 1: the label tunefs.ocfs2 wrote" sh -c 'blkid -o value -s LABEL /dev/vdb | grep -qx tuned'
    ctool dump >$OUT/daemon_dump.txt 2>&1
fi
barrier fsck
journalctl -u dlm --no-pager >$OUT/journal_dlm.txt
systemctl stop dlm
systemctl stop corosync
if grep -q '^FAIL' $R $OUT/plocks.txt; then
    echo "RESULT failed" >>$R
else
    echo "RESULT ok" >>$R
fi
echo "done" >$OUT/done
sync
systemctl poweroff -ff
