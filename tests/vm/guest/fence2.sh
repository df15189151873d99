#!/bin/sh
# Fencing on real kernels (run-two.sh with FENCE=1; test2.sh hands over to this script).
# dlm.conf has enable_fencing=1 and the agent fence_host.sh, which has the host power the
# victim's VM off. Node 2 holds a lock and its dlm_controld is killed (kill -9) with gfs2
# mounted (FENCE=crash: its kernel stops dead instead); node 1's F_SETLKW for the same range must wait until node 2 is fenced, then be
# granted (fence2.py). Results in fence.txt.
. /host/guest/lib.sh
begin_two
export DLM_TOOL=/usr/sbin/dlm_tool
gfs2_up
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
ctool ls >$OUT/ls_after.txt
journalctl -u dlm --no-pager >$OUT/journal_dlm.txt
umount /mnt
systemctl stop dlm
systemctl stop corosync
echo done >$OUT/done
sync
systemctl poweroff -ff
