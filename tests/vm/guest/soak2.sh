#!/bin/sh
# A soak (run-two.sh with SOAK=<seconds>; test2.sh hands over to this script): the plock
# load of load2.py on both nodes (ours on one, C on the other by default) for that long,
# compared every minute: both loads pause, the two tables must be byte-identical and each
# node's holder must still have its locks; at the end every worker must have had an
# answer to each request. Meanwhile `udevadm trigger` runs in a loop on both nodes (every
# device's change event, each round): the daemon reads past the flood of uevents, keeps
# running (the same pid at the end) and answers every request. Results in soak.txt.
. /host/guest/lib.sh
begin_two
SECS=$(cat /host/conf/soak)
load() { python3 /host/guest/load2.py "$1" "$N" /mnt >>$OUT/soak.txt 2>&1; }
gfs2_up
load start
barrier loaded
pid=$(pidof dlm_controld)
rm -f /run/udev-stop
(r=0; while [ ! -f /run/udev-stop ]; do udevadm trigger --action=change; r=$((r + 1)); sleep 1; done
    echo $r >/run/udev-rounds) &
udev=$!
t=0
while [ $t -lt "$SECS" ]; do
    sleep 60
    t=$((t + 60))
    load pause
    barrier "paused-$t"
    ctool plocks gfs0 >$OUT/dump-$t.txt
    barrier "dumped-$t"
    if [ "$N" = 1 ]; then
        if cmp -s /host/out/node1/dump-$t.txt /host/out/node2/dump-$t.txt; then
            echo "PASS after $t s: the two tables are identical"
        else
            echo "FAIL after $t s: the two tables differ"
        fi >>$OUT/soak.txt
    fi
    load held
    load resume
    barrier "resumed-$t"
done
touch /run/udev-stop
wait $udev
load stop
barrier stopped
rounds=$(cat /run/udev-rounds)
if [ "$rounds" -gt 0 ] && [ "$(pidof dlm_controld)" = "$pid" ]; then
    echo "PASS udevadm trigger ran $rounds times during the load; the daemon ran throughout (pid $pid)"
else
    echo "FAIL udevadm trigger rounds $rounds; daemon pid $pid, now $(pidof dlm_controld)"
fi >>$OUT/soak.txt
umount /mnt
systemctl stop dlm
systemctl stop corosync
grep -q '^FAIL' $OUT/soak.txt || echo "RESULT ok" >>$OUT/soak.txt
echo done >$OUT/done
sync
systemctl poweroff -ff
