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
setup_node 1
t0=$(ms)
systemctl start corosync
t1=$(ms)
systemctl start dlm
t2=$(ms)
echo "corosync_start_ms $((t1 - t0)) dlm_start_ms $((t2 - t1))" >$OUT/times.txt
systemctl status dlm --no-pager | head -5
dlm_tool status
mkfs.gfs2 -O -p lock_dlm -t vmclust:gfs0 -j 1 /dev/vdb
t3=$(ms)
mount -t gfs2 /dev/vdb /mnt
t4=$(ms)
echo "mount_ms $((t4 - t3))" >>$OUT/times.txt
dlm_tool ls
# each daemon thread's context switches and CPU ticks around plocks.py (threads.txt)
threads() {
    for t in /proc/$(pgrep -o -x dlm_controld)/task/*; do
        printf '%s %s %s %s\n' "$1" "$(cat $t/comm)" \
            "$(awk '/^voluntary_ctxt/ {v=$2} /^nonvoluntary_ctxt/ {print v, $2}' $t/status)" \
            "$(awk '{print "user", $14, "sys", $15}' $t/stat)"
    done >>$OUT/threads.txt
}
threads before
PAIRS_MARK=$OUT/pairs_start python3 /host/guest/plocks.py /mnt >$OUT/plocks.txt 2>&1
echo "plocks.py exit $?" >>$OUT/plocks.txt
threads after
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
dlm_tool plocks gfs0 >$OUT/dump.txt
dlm_tool ls >$OUT/ls.txt
ps -o rss= -p "$(systemctl show -p MainPID --value dlm)" >$OUT/rss_kb.txt
python3 /host/guest/plocks.py /mnt release
t5=$(ms)
umount /mnt
t6=$(ms)
echo "umount_ms $((t6 - t5))" >>$OUT/times.txt
dlm_tool dump >$OUT/daemon_dump.txt
systemctl stop dlm
systemctl stop corosync
journalctl -u dlm --no-pager >$OUT/journal_dlm.txt
echo done >$OUT/done
sync
systemctl poweroff -ff
