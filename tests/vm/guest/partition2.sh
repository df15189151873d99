#!/bin/sh
# A partition on real kernels (run-two.sh with PARTITION=1; test2.sh hands over to this
# script): fencing on, each node holds a range and waits for the other's (partition2.py);
# then corosync's traffic between the VMs is dropped inside both guests (nftables: udp
# port 5405 both ways). With two_node both sides stay quorate and race to fence the other;
# the host powers off the first node fenced. The survivor must grant the victim's range
# only after the fence and run on alone; then it lets corosync's traffic through again,
# the host boots the victim anew (dlmrejoin=1) and it must rejoin the cluster and the
# lockspace with the survivor's table. Results in partition.txt (the victim's first boot
# writes none).
. /host/guest/lib.sh
begin_two
export DLM_TOOL=/usr/sbin/dlm_tool
# cut: corosync's packets (knet, udp 5405) dropped both ways; heal: let them through again
cut() {
    nft add table inet cut
    nft add chain inet cut in '{ type filter hook input priority 0; policy accept; }'
    nft add chain inet cut out '{ type filter hook output priority 0; policy accept; }'
    nft add rule inet cut in udp dport 5405 drop
    nft add rule inet cut out udp dport 5405 drop
}
heal() { nft delete table inet cut; }
if grep -q dlmrejoin /proc/cmdline; then
    # the victim, booted again: it joins, mounts, and reads the survivor's table
    setup_node "$N"
    cluster_up "$N"
    mount -t gfs2 /dev/vdb /mnt
    ctool plocks gfs0 >$OUT/dump.txt
    touch $SYNC/rejoined.$N
    i=0
    while [ ! -f $SYNC/compared ] && [ $i -lt 3000 ]; do sleep 0.2; i=$((i + 1)); done
    shutdown_node
fi
gfs2_up
python3 /host/guest/partition2.py "$N" /mnt hold
barrier held
python3 /host/guest/partition2.py "$N" /mnt wait
barrier armed
sleep 3
cut
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
# the partition heals; the victim, booted again, rejoins with this node's table
heal
other=$((3 - N))
i=0
while [ ! -f $SYNC/rejoined.$other ] && [ $i -lt 3000 ]; do sleep 0.2; i=$((i + 1)); done
ctool plocks gfs0 >$OUT/dump_rejoin.txt
ctool ls >$OUT/ls_rejoin.txt
cat $OUT/dump_rejoin.txt $OUT/ls_rejoin.txt >>$OUT/partition.txt
if [ -f $SYNC/rejoined.$other ] && cmp -s $OUT/dump_rejoin.txt /host/out/node${other}b/dump.txt &&
    [ "$(wc -l <$OUT/dump_rejoin.txt)" = 2 ] && grep -q '^members       1 2 $' $OUT/ls_rejoin.txt; then
    echo "PASS node $other rejoined after the partition and its fence: members 1 2, both tables hold this node's two locks"
else
    echo "FAIL node $other did not rejoin cleanly"
fi >>$OUT/partition.txt
touch $SYNC/compared
# stay up until the victim has left again (gone at once, this node would be fenced by it)
i=0
while [ ! -f /host/out/node${other}b/done ] && [ $i -lt 3000 ]; do sleep 0.2; i=$((i + 1)); done
grep -q '^FAIL' $OUT/partition.txt || echo "RESULT ok" >>$OUT/partition.txt
journalctl -u dlm --no-pager >$OUT/journal_dlm.txt
echo done >$OUT/done
sync
systemctl poweroff -ff
