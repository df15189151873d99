#!/bin/sh
# A partition on real kernels (run-two.sh with PARTITION=1; test2.sh hands over to this
# script): fencing on, each node holds a range and waits for the other's (partition2.py);
# then all of corosync's traffic between the VMs is dropped inside both guests (netem loss
# 100%). With two_node both sides stay quorate and race to fence the other; the host powers
# off the first node fenced. The survivor must grant the victim's range only after the
# fence and run on alone. Results in partition.txt (the victim writes none).
. /host/guest/lib.sh
begin_two
export DLM_TOOL=/usr/sbin/dlm_tool
gfs2_up
python3 /host/guest/partition2.py "$N" /mnt hold
barrier held
python3 /host/guest/partition2.py "$N" /mnt wait
barrier armed
sleep 3
modprobe sch_netem
tc qdisc add dev "$IF" root netem loss 100%
echo "traffic cut at $(date +%s.%N)" >>$OUT/partition.txt
i=0
while [ ! -f /run/part-result ] && [ $i -lt 1500 ]; do sleep 0.2; i=$((i + 1)); done
got=$(cat /run/part-result 2>/dev/null)
if [ "$got" = "granted fenced" ]; then
    echo "PASS node $N: the other node's range granted only after its fence"
else
    echo "FAIL node $N: $got"
fi >>$OUT/partition.txt
ls_out=$(ctool ls)
echo "$ls_out" >>$OUT/partition.txt
if echo "$ls_out" | grep -q "^members       $N \$"; then
    echo "PASS node $N: the lockspace runs on with this node alone"
else
    echo "FAIL node $N: the lockspace did not go on alone"
fi >>$OUT/partition.txt
grep -q '^FAIL' $OUT/partition.txt || echo "RESULT ok" >>$OUT/partition.txt
journalctl -u dlm --no-pager >$OUT/journal_dlm.txt
echo done >$OUT/done
sync
systemctl poweroff -ff
