#!/bin/sh
# Inside one of two VMs (node N from the kernel command line, dlmnode=N): corosync on two
# nodes over the VMs' socket network, the daemon named in /host/conf/daemonN ("rust" or
# "c"), gfs2 on the shared disk /dev/vdb mounted on both, then plocks2.py across the nodes.
# The VMs meet at file barriers in /host/sync (one 9p share for both).
# the nemesis run (tests/vm/nemesis.sh) instead, when the run asks for it
[ -f /host/conf/nemesis ] && exec /bin/sh /host/guest/nemesis2.sh
# the cluster stack users run (run-stack.sh: pacemaker, ocfs2, lvmlockd), when asked for
[ -f /host/conf/stack ] && exec /bin/sh "/host/guest/stack-$(cat /host/conf/stack).sh"
# a rolling upgrade instead, when the run asks for it
[ -f /host/conf/upgrade ] && exec /bin/sh /host/guest/upgrade2.sh
# or a partition, or fencing with an agent that powers the victim off
grep -q partition /host/conf/fence 2>/dev/null && exec /bin/sh /host/guest/partition2.sh
[ -f /host/conf/fence ] && exec /bin/sh /host/guest/fence2.sh
# or a soak of a plock load on both nodes
[ -f /host/conf/soak ] && exec /bin/sh /host/guest/soak2.sh
. /host/guest/lib.sh
begin_two
# plocks2.py reads the daemons with Debian's dlm_tool too
export DLM_TOOL=/usr/sbin/dlm_tool
[ -x /usr/sbin/dlm_tool.distrib ] && DLM_TOOL=/usr/sbin/dlm_tool.distrib
setup_node "$N"
cluster_up "$N"
barrier up
ctool status
if [ "$N" = 1 ]; then
    mkfs.gfs2 -O -p lock_dlm -t vmclust:gfs0 -j 2 /dev/vdb
fi
barrier mkfs
mount -t gfs2 /dev/vdb /mnt
barrier mounted
ctool ls
# the side-by-side numbers, when tests/vm/bench-two.sh asks for them
if [ -f /host/conf/bench ]; then
    # the guest's clock (under TCG a clock read that is not the vDSO's is a system call)
    cat /sys/devices/system/clocksource/clocksource0/current_clocksource >$OUT/clocksource.txt
    threads before
    # STRACE=1 (run-two.sh): the daemon's system calls over the bench, counted
    if [ -f /host/conf/strace ]; then
        strace -c -f -o $OUT/bench_strace.txt -p "$(pgrep -o -x dlm_controld)" &
        tracer=$!
        sleep 1
    fi
    # PERF=1 (run-two.sh): where the daemon's time goes over the bench, sampled (our
    # binary with its symbols: setup_node)
    if [ -f /host/conf/perf ]; then
        perf record -e cpu-clock -F 2000 -o /tmp/perf.data -p "$(pgrep -o -x dlm_controld)" 2>/dev/null &
        profiler=$!
        sleep 1
    fi
    python3 /host/guest/plocks2.py "$N" /mnt $SYNC bench >$OUT/bench.txt 2>&1
    [ -n "${tracer:-}" ] && kill -INT $tracer && wait $tracer
    if [ -n "${profiler:-}" ]; then
        kill -INT $profiler && wait $profiler
        perf report -i /tmp/perf.data --stdio --no-children --sort dso 2>/dev/null | grep '%' >$OUT/bench_perf.txt
        perf report -i /tmp/perf.data --stdio --no-children --sort dso,sym 2>/dev/null | grep '%' | head -150 >>$OUT/bench_perf.txt
    fi
    threads after
    [ "$DAEMON" = rust ] && metrics $OUT/bench_metrics.txt
fi
python3 /host/guest/plocks2.py "$N" /mnt $SYNC >$OUT/plocks.txt 2>&1
echo "plocks2.py exit $?" >>$OUT/plocks.txt
# processes locking crosswise on the two nodes (a deadlock across nodes), when our
# dlm_tool is in the share: detected with plock_deadlock_detect=1, else shown by --waits
if [ -x /host/bin/dlm_tool ]; then
    detect=
    grep -q '^plock_deadlock_detect=1' /host/conf/dlm.conf && detect=detect
    python3 /host/guest/plocks2.py "$N" /mnt $SYNC crosswise $detect >$OUT/crosswise.txt 2>&1
    echo "crosswise exit $?" >>$OUT/crosswise.txt
fi
# an interrupted F_SETLKW (kernel >= 6.6 sends CANCEL), when the run asks for it
if [ -f /host/conf/cancel ]; then
    python3 /host/guest/plocks2.py "$N" /mnt $SYNC cancel >$OUT/cancel.txt 2>&1
    echo "cancel exit $?" >>$OUT/cancel.txt
    # the kernel had a reply for every request it sent and none for the cancelled LOCK
    dmesg | grep -i 'dlm.*no op' >>$OUT/cancel.txt && echo "FAIL a reply the kernel did not expect" >>$OUT/cancel.txt
fi
barrier held
ctool plocks gfs0 >$OUT/dump.txt
ctool ls >$OUT/ls.txt
barrier dumped
if [ "$N" = 2 ]; then
    # node 2 fails: the kernel stops at once (qemu exits), holding its 100 locks
    ctool dump >$OUT/daemon_dump.txt
    echo crashed >$OUT/crashed
    sync
    echo 1 >/proc/sys/kernel/sysrq
    echo b >/proc/sysrq-trigger
    sleep 60
fi
# node 1: the survivor recovers without it (enable_fencing=0)
python3 /host/guest/plocks2.py "$N" /mnt $SYNC after-crash >$OUT/recovery.txt 2>&1
echo "after-crash exit $?" >>$OUT/recovery.txt
ctool plocks gfs0 >$OUT/dump_after.txt
ctool ls >$OUT/ls_after.txt
python3 /host/guest/plocks2.py "$N" /mnt $SYNC release
umount /mnt
ctool dump >$OUT/daemon_dump.txt
systemctl stop dlm
systemctl stop corosync
echo done >$OUT/done
sync
systemctl poweroff -ff
