#!/bin/sh
# Inside the VM (vmtest.service): corosync on one node, the daemon named in
# /host/conf/daemon1 ("rust": ours installed over Debian's, with our unit; "c": Debian's
# 4.2.0), gfs2 on /dev/vdb, then plocks.py through the real kernel's DLM. Results in
# /host/out; the VM powers off at the end.
# two-node runs (run-two.sh) name the node on the kernel command line
grep -q 'dlmnode=' /proc/cmdline && exec /bin/sh /host/guest/test2.sh
OUT=/host/out
mkdir -p $OUT
exec >$OUT/test.log 2>&1
set -x
. /host/guest/lib.sh
ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
uname -r
INSTALL_LATER=1
setup_node 1
# check NAME CMD...: one line of package.txt, "NAME ok" or "NAME FAIL"
check() {
    name=$1
    shift
    if "$@"; then r=ok; else r=FAIL; fi
    echo "$name $r" >>$OUT/package.txt
}
t0=$(ms)
systemctl start corosync
t1=$(ms)
if [ "$DAEMON" = rust ]; then
    # from Debian's package to ours, as an administrator upgrades a node: refused while
    # Debian's daemon runs, then installed, diverting Debian's binaries
    systemctl start dlm
    check debian-daemon-runs daemon_answers
    check install-refused-while-running sh -c '! apt-get install -y -q /host/debs/dlm-controld-rs_*.deb'
    check debian-daemon-kept sh -c "/usr/sbin/dlm_controld --version | grep -q '^dlm_controld 4\.'"
    systemctl stop dlm
    check installed install_ours
    check diverted ours_installed
fi
tp=$(ms)
systemctl start dlm
t2=$(ms)
echo "corosync_start_ms $((t1 - t0)) package_ms $((tp - t1)) dlm_start_ms $((t2 - tp))" >$OUT/times.txt
systemctl status dlm --no-pager | head -5
ctool status
mkfs.gfs2 -O -p lock_dlm -t vmclust:gfs0 -j 1 /dev/vdb
t3=$(ms)
mount -t gfs2 /dev/vdb /mnt
t4=$(ms)
echo "mount_ms $((t4 - t3))" >>$OUT/times.txt
ctool ls
# /host/conf/renice (an experiment): the daemon's thread that reads the plock device (ours:
# dlm_plock; C's: its one thread) at that nice value
if [ -f /host/conf/renice ]; then
    dpid=$(pgrep -o -x dlm_controld)
    tid=$dpid
    for t in /proc/$dpid/task/*; do
        [ "$(cat $t/comm)" = dlm_plock ] && tid=${t##*/}
    done
    renice -n "$(cat /host/conf/renice)" -p "$tid"
fi
threads before
PAIRS_MARK=$OUT/pairs_start python3 /host/guest/plocks.py /mnt >$OUT/plocks.txt 2>&1
echo "plocks.py exit $?" >>$OUT/plocks.txt
[ "$DAEMON" = rust ] && metrics $OUT/metrics.txt
threads after
# CEILING=1 on the host: the same pairs answered by plock_answer while the daemon is
# stopped (one read and one write per request: what no daemon can pass on this guest)
main=$(systemctl show -p MainPID --value dlm)
# (a MainPID of 0, no daemon running, would stop this script's own process group)
if [ -f /host/conf/ceiling ] && [ "${main:-0}" -gt 0 ]; then
    kill -STOP "$main"
    # CEILING=variants: each way of plock_answer, twice, into ceilings.txt
    ways=poll
    [ -f /host/conf/ceiling_variants ] && ways="poll tokio tokio-handoff poll-engine poll tokio tokio-handoff poll-engine"
    [ -f /host/conf/ceiling_ways ] && ways=$(cat /host/conf/ceiling_ways)
    for way in $ways; do
        /host/bin/plock_answer /dev/misc/dlm_plock $way >$OUT/answer.txt 2>&1 &
        answer=$!
        # a stuck request (no answerer) waits killably in the kernel
        timeout -s KILL 60 python3 /host/guest/plocks.py /mnt pairs >$OUT/ceiling.txt 2>&1
        # its context switches: how often a reply's process ran before the next read
        switches=$(awk '/ctxt_switches/ { printf "%s %s ", $1, $2 }' /proc/$answer/status)
        cpu=$(awk '{ printf "user_ticks %s sys_ticks %s", $14, $15 }' /proc/$answer/stat)
        kill "$answer"
        wait "$answer" 2>/dev/null
        echo "$way $(grep pairs_per_s $OUT/ceiling.txt) $switches$cpu $(grep process_us $OUT/ceiling.txt)" >>$OUT/ceilings.txt
    done
    kill -CONT "$main"
fi
# a uevent burst (every device's change event, twice) during a plock load: the daemon
# reads past it (ENOBUFS is counted, not fatal) and answers every request
rm -f /run/uevent-stop
python3 /host/guest/uevent_load.py /mnt /run/uevent-stop >$OUT/uevents.txt 2>&1 &
load=$!
udevadm trigger --action=change
udevadm trigger --action=change
touch /run/uevent-stop
wait $load
echo "load exit $?" >>$OUT/uevents.txt
systemctl is-active dlm >>$OUT/uevents.txt
ctool plocks gfs0 >$OUT/dump.txt
ctool ls >$OUT/ls.txt
if [ "$DAEMON" = rust ]; then
    # a table of more than 1 MiB: Debian's dlm_tool reads its first MiB (4.2.0) or says
    # -ENOSPC (4.3.0), as against C's daemon; ours (installed as dlm_tool) reads it all
    big=$(timeout 300 python3 /host/guest/bigdump.py /mnt 17000) || {
        # what held it up: the daemon's log, its table, the waiting process's kernel stack
        echo "bigdump failed" >>$OUT/big_c.err
        /usr/sbin/dlm_tool dump >$OUT/big_daemon_dump.txt 2>&1
        /usr/sbin/dlm_tool plocks gfs0 | wc -l >>$OUT/big_c.err
        for p in $(pgrep -f bigdump.py); do cat /proc/$p/stack; done >$OUT/big_stacks.txt 2>&1
        dmesg | tail -30 >$OUT/big_dmesg.txt
    }
    ctool plocks gfs0 >$OUT/big_c.txt 2>$OUT/big_c.err
    echo "exit $?" >>$OUT/big_c.err
    /usr/sbin/dlm_tool plocks gfs0 | wc -l >$OUT/big_ours.txt
    ctool -V | head -1 >>$OUT/big_c.err
    kill "$big"
fi
ps -o rss= -p "$(systemctl show -p MainPID --value dlm)" >$OUT/rss_kb.txt
python3 /host/guest/plocks.py /mnt release
t5=$(ms)
umount /mnt
t6=$(ms)
echo "umount_ms $((t6 - t5))" >>$OUT/times.txt
ctool dump >$OUT/daemon_dump.txt
systemctl stop dlm
journalctl -u dlm --no-pager >$OUT/journal_dlm.txt
if [ "$DAEMON" = rust ]; then
    # and back: removing our package puts Debian's binaries back, and its daemon runs
    check removed apt-get remove -y -q dlm-controld-rs
    check debians-back debians_back
    systemctl start dlm
    check debian-daemon-runs-again daemon_answers
    systemctl stop dlm
fi
systemctl stop corosync
echo done >$OUT/done
sync
systemctl poweroff -ff
