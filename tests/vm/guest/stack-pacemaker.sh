#!/bin/sh
# The daemon under Pacemaker, as a cluster administrator runs it (run-stack.sh pacemaker;
# test2.sh hands over to this script). corosync and pacemaker on both nodes; node 1 makes
# the gfs2 file system and loads the configuration (pcmk.crm): stonith-enabled with one
# fence_vmhost device per node (it has the host power the node's VM off), the
# ocf:pacemaker:controld clone starting dlm_controld (`-s 0`, its default), gfs2 as a cloned
# Filesystem ordered after it. Then, with Pacemaker running everything:
#   1. all started (crm_mon), the daemon the one installed and in the background, plocks2.py
#      across the nodes and the two tables the same;
#   2. node 2 holds a range and its dlm_controld is killed: node 1's daemon and Pacemaker
#      fence it once (dlm_stonith, the default agent when dlm.conf names none, asks
#      Pacemaker's fencer), node 1 grants the range only after the host powered node 2 off
#      (fence2.py); the host boots node 2 again and Pacemaker starts dlm and gfs2 there;
#   3. `crm node standby node2`: Pacemaker unmounts and stops the daemon on node 2, which
#      leaves its lockspace cleanly (nobody fenced); `crm node online node2`: back again;
#   4. both nodes stop pacemaker and corosync cleanly.
# Results (PASS/FAIL lines) in $OUT/stack.txt; the host counts the fence requests.
. /host/guest/lib.sh
. /host/guest/stacklib.sh
begin_two
R=$OUT/stack.txt
export DLM_TOOL=/usr/sbin/dlm_tool
[ -x /usr/sbin/dlm_tool.distrib ] && DLM_TOOL=/usr/sbin/dlm_tool.distrib

# stonith_lib: Debian 13's dlm_stonith (dlm 4.3.0-3) dlopens libstonithd.so.26, the name
# pacemaker 3.0.0's header gives, but pacemaker 3.0.0 ships libstonithd.so.56 (upstream
# fixed the header in 3.0.1): dlm_stonith then exits 177 (-ELIBACC) at once and no daemon,
# C or ours, can fence through it (the lockspaces wait until the failed node rejoins). An
# administrator links the old name to the library (docs/operating.md); so does this run.
stonith_lib() {
    d=/usr/lib/x86_64-linux-gnu
    if grep -aq 'libstonithd\.so\.26' /usr/sbin/dlm_stonith && [ ! -e $d/libstonithd.so.26 ] &&
        [ -e $d/libstonithd.so.56 ]; then
        ln -s libstonithd.so.56 $d/libstonithd.so.26
        note "dlm_stonith wants libstonithd.so.26, pacemaker has libstonithd.so.56: linked"
    fi
}

# pcmk_up N: the node's daemon installed (ours from the package, or Debian's as it is),
# the fence agent, corosync, then pacemaker
pcmk_up() {
    setup_node "$1"
    stonith_lib
    cp /host/guest/fence_vmhost.sh /usr/sbin/fence_vmhost
    chmod 755 /usr/sbin/fence_vmhost
    corosync_up "$1"
    t=$(date +%s)
    systemctl start pacemaker
    note "pacemaker started in $(($(date +%s) - t)) s"
}

# the daemon Pacemaker started is the one installed, forked into the background (its
# parent init, the agent's `dlm_controld -s 0` returned), and `dlm_tool status -v` says
# what the agent's monitor reads
daemon_checks() {
    check "node $N: the running dlm_controld is $DAEMON" running_is "$DAEMON"
    # (C's daemon has a helper process too, its child: the oldest is the daemon)
    check "node $N: started by the agent with -s 0, in the background (parent 1)" \
        sh -c 'p=$(pgrep -o -x dlm_controld) && [ "$(ps -o ppid= -p $p | tr -d " ")" = 1 ] && ps -o args= -p $p | grep -q -- "-s 0"'
    dlm_tool status -v >$OUT/status_v.txt 2>&1
    check "node $N: dlm_tool status -v has stateful_merge_wait=0 on a line of its own" \
        grep -q '^ *stateful_merge_wait=0$' $OUT/status_v.txt
}

if grep -q dlmrejoin /proc/cmdline; then
    # node 2, booted again after its fence: Pacemaker starts dlm and gfs2 on it
    DAEMON=$(cat /host/conf/daemon2)
    pcmk_up 2
    python3 /host/guest/pcmk.py started node1 node2 >>$R 2>&1
    check "node 2 (rebooted): gfs2 mounted by Pacemaker" mountpoint -q /mnt
    daemon_checks
    ctool plocks gfs0 >$OUT/dump.txt
    touch $SYNC/rejoined.2
    # standby: Pacemaker stops gfs2 and the daemon here; nothing of the DLM left
    wait_mark standby.1
    check "node 2 (standby): gfs2 unmounted" sh -c '! mountpoint -q /mnt'
    check "node 2 (standby): no dlm_controld running" sh -c '! pgrep -x dlm_controld'
    check "node 2 (standby): no lockspace left in the kernel" no_lockspaces
    touch $SYNC/standby-checked.2
    wait_mark online.1
    check "node 2 (online again): gfs2 mounted" mountpoint -q /mnt
    daemon_checks
    # node 1's process still holds bytes 0-9 of /mnt/fenced
    check "node 2 (online again): F_SETLK on node 1's range fails" \
        python3 -c 'import fcntl, os, sys
fd = os.open("/mnt/fenced", os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
except OSError as e:
    sys.exit(0 if e.errno in (11, 13) else 1)
sys.exit(1)'
    ctool plocks gfs0 >$OUT/dump_online.txt
    touch $SYNC/online-checked.2
    wait_mark stop.1
    t=$(date +%s)
    systemctl stop pacemaker
    note "node 2: pacemaker stopped in $(($(date +%s) - t)) s"
    check "node 2: no lockspace left after pacemaker stopped" no_lockspaces
    systemctl stop corosync
    touch $SYNC/stopped.2
    echo "done" >$OUT/done
    sync
    systemctl poweroff -ff
fi

pcmk_up "$N"
barrier pcmk-up
if [ "$N" = 1 ]; then
    python3 /host/guest/pcmk.py online node1 node2 >>$R 2>&1
    mkfs.gfs2 -O -p lock_dlm -t vmclust:gfs0 -j 2 /dev/vdb
    t=$(date +%s)
    crm configure load update /host/conf/pcmk.crm
    note "crm configure load update: $(($(date +%s) - t)) s"
    crm configure show >$OUT/cib.txt 2>&1
fi
barrier configured
python3 /host/guest/pcmk.py started node1 node2 >>$R 2>&1
check "node $N: gfs2 mounted by Pacemaker" mountpoint -q /mnt
daemon_checks
ctool ls >$OUT/ls.txt
# 1. POSIX locks across the nodes, both tables the same
python3 /host/guest/plocks2.py "$N" /mnt $SYNC >$OUT/plocks.txt 2>&1
echo "plocks2.py exit $?" >>$OUT/plocks.txt
barrier held
ctool plocks gfs0 >$OUT/dump.txt
barrier dumped
[ "$N" = 1 ] && check "node 1: both daemons' tables the same, 200 locks" same_tables dump.txt 200
python3 /host/guest/plocks2.py "$N" /mnt $SYNC release
barrier released
# 2. node 2's daemon killed with gfs2 in use
if [ "$N" = 2 ]; then
    python3 /host/guest/fence2.py 2 /mnt $SYNC hold
    while [ ! -f $SYNC/fwaiting.1 ]; do sleep 0.2; done
    touch $SYNC/fkilled.2
    sync
    # (C's daemon and its helper process)
    # shellcheck disable=SC2046 # one pid a word
    kill -9 $(pidof dlm_controld)
    # Pacemaker's fencer has the host power this VM off
    sleep 600
fi
python3 /host/guest/fence2.py 1 /mnt $SYNC wait >$OUT/fence.txt 2>&1
echo "fence2.py exit $?" >>$OUT/fence.txt
# what Pacemaker and our daemon each say of the fence
stonith_admin --history node2 >$OUT/stonith_history.txt 2>&1
ctool status >$OUT/status_after_fence.txt 2>&1
ctool dump >$OUT/daemon_dump_fence.txt 2>&1
check "node 1: dlm_stonith ran for node 2 and succeeded" \
    sh -c "grep -Eq 'fence result 2 pid [0-9]+ result 0' $OUT/daemon_dump_fence.txt"
check "node 1: Pacemaker's history has node 2 fenced, once" \
    sh -c "[ \$(grep -c 'reboot of node2 successful' $OUT/stonith_history.txt) = 1 ]"
# who asked: dlm_stonith, Pacemaker's scheduler, the agent's monitor on node 2; the
# fencer merges a request with one in flight for the same node
journalctl --no-pager -u pacemaker | grep -E 'wants to fence|Merging fencing' >>$R
# node 2 back: Pacemaker starts dlm and gfs2 on it, which gets node 1's table
wait_mark rejoined.2
python3 /host/guest/pcmk.py started node1 node2 >>$R 2>&1
ctool plocks gfs0 >$OUT/dump_rejoin.txt
check "node 1: node 2 rejoined under Pacemaker, both tables hold node 1's lock" \
    sh -c "cmp -s $OUT/dump_rejoin.txt /host/out/node2b/dump.txt && [ \$(wc -l <$OUT/dump_rejoin.txt) = 1 ]"
check "node 1: the lockspace has both nodes again" members_are gfs0 "1 2 "
# 3. standby and online: node 2's daemon leaves and joins cleanly
t=$(date +%s)
crm node standby node2
python3 /host/guest/pcmk.py stopped-on node2 >>$R 2>&1
note "standby: $(($(date +%s) - t)) s"
check "node 1: node 2 left the lockspace (members 1)" members_are gfs0 "1 "
ctool ls >$OUT/ls_standby.txt
ctool status >$OUT/status_standby.txt
check "node 1: no fencing after node 2's clean stop" sh -c "! grep -q 'wait fencing' $OUT/ls_standby.txt"
touch $SYNC/standby.1
wait_mark standby-checked.2
t=$(date +%s)
crm node online node2
python3 /host/guest/pcmk.py started node1 node2 >>$R 2>&1
note "online: $(($(date +%s) - t)) s"
check "node 1: node 2 is back in the lockspace (members 1 2)" members_are gfs0 "1 2 "
ctool plocks gfs0 >$OUT/dump_online.txt
touch $SYNC/online.1
wait_mark online-checked.2
check "node 1: both tables the same after standby and online" \
    cmp -s $OUT/dump_online.txt /host/out/node2b/dump_online.txt
# 4. a clean stop of the whole cluster: node 2 first, then node 1
kill "$(cat /run/fence-holder.pid)"
touch $SYNC/stop.1
wait_mark stopped.2
ctool dump >$OUT/daemon_dump.txt 2>&1
journalctl --no-pager -u pacemaker >$OUT/journal_pacemaker.txt 2>&1
t=$(date +%s)
systemctl stop pacemaker
note "node 1: pacemaker stopped in $(($(date +%s) - t)) s"
check "node 1: no lockspace left after pacemaker stopped" no_lockspaces
systemctl stop corosync
if grep -q '^FAIL' $R || grep -q 'RESULT failed' $OUT/plocks.txt $OUT/fence.txt; then
    echo "RESULT failed" >>$R
else
    echo "RESULT ok" >>$R
fi
echo "done" >$OUT/done
sync
systemctl poweroff -ff
