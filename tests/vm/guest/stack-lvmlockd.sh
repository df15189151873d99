#!/bin/sh
# lvmlockd with lock_type=dlm over the daemon (run-stack.sh lvmlockd; test2.sh hands over
# to this script). corosync, dlm (`systemctl start dlm`) and lvmlockd on both nodes
# (use_lvmlockd=1), then
#   1. node 1 makes a shared VG on the shared disk (vgcreate --shared) and both start its
#      lockspace (vgchange --lockstart); `dlm_tool ls` shows lvm_global and lvm_vg1 with
#      both nodes on both;
#   2. an LV, activated across the nodes as lvmlockd documents: exclusive on one node
#      refuses exclusive and shared on the other; shared on both is granted, and refuses
#      exclusive;
#   3. node 2's kernel stops dead with the LV active shared (enable_fencing=0: the
#      lockspaces recover without it), node 1 then gets it exclusive; the host boots node 2
#      again and lvmlocks.service (as at boot: vgchange --lock-start --lock-opt auto) joins
#      the VG's lockspace again, node 1's exclusive activation refusing it shared until
#      node 1 lets go;
#   4. both stop the lockspaces (vgchange --lockstop), lvmlockd and dlm: nothing left.
# Results (PASS/FAIL lines) in $OUT/stack.txt.
. /host/guest/lib.sh
. /host/guest/stacklib.sh
begin_two
R=$OUT/stack.txt
export DLM_TOOL=/usr/sbin/dlm_tool
[ -x /usr/sbin/dlm_tool.distrib ] && DLM_TOOL=/usr/sbin/dlm_tool.distrib

# lvm_up N: the daemon, corosync, dlm, lvmlockd
lvm_up() {
    setup_node "$1"
    corosync_up "$1"
    systemctl start dlm || journalctl -u dlm --no-pager | tail -40
    check "node $1: the running dlm_controld is $DAEMON" running_is "$DAEMON"
    sed -i 's/^\([[:space:]]*\)# use_lvmlockd = 0/\1use_lvmlockd = 1/' /etc/lvm/lvm.conf
    check "node $1: use_lvmlockd=1" sh -c 'lvmconfig global/use_lvmlockd | grep -qx "use_lvmlockd=1"'
    systemctl start lvmlockd
    check "node $1: lvmlockd running" systemctl -q is-active lvmlockd
}

# lvm_left: this node is in none of lvm's lockspaces
lvm_left() { [ -z "$(members lvm_vg1)" ] && [ -z "$(members lvm_global)" ]; }

# recovered_alone: lvm_vg1 has node 1 alone and no change under way
recovered_alone() { members_are lvm_vg1 "1 " && ! ctool ls | grep -q 'new change\|new status'; }

# ok NAME CMD...: CMD succeeds; refused NAME CMD...: CMD fails because the other node
# holds the LV's lock (its output in the log)
ok() {
    name=$1
    shift
    check "node $N: $name" "$@"
}
refused() {
    name=$1
    shift
    check "node $N: $name is refused (LV locked by other host)" \
        sh -c '"$@" >/tmp/refused.txt 2>&1; r=$?; cat /tmp/refused.txt; [ $r != 0 ] && grep -q "LV locked by other host" /tmp/refused.txt' refused "$@"
}

# lockspaces_both: lvm_global and lvm_vg1 have both nodes
lockspaces_both() {
    [ "$(members lvm_global)" = '1 2 ' ] && [ "$(members lvm_vg1)" = '1 2 ' ]
}

if grep -q dlmrejoin /proc/cmdline; then
    # node 2, booted again after its crash: it joins the VG's lockspace again
    DAEMON=$(cat /host/conf/daemon2)
    lvm_up 2
    wait_mark exclusive.1
    # as at boot: lvmlocks.service (vgchange --lock-start --lock-opt auto, after dlm and
    # lvmlockd) starts the shared VGs' lockspaces
    t=$(date +%s)
    ok "lvmlocks.service started the VG's lockspace (after the reboot)" systemctl start lvmlocks
    note "lvmlocks.service after the reboot: $(($(date +%s) - t)) s"
    ok "lvm_vg1 and lvm_global have both nodes again" wait_for lockspaces_both
    refused "lvchange -asy vg1/lv1 while node 1 has it exclusive" lvchange -asy vg1/lv1
    touch $SYNC/rejoined.2
    wait_mark released.1
    ok "lvchange -asy vg1/lv1 once node 1 let go" lvchange -asy vg1/lv1
    ok "lvchange -an vg1/lv1" lvchange -an vg1/lv1
    ok "vgchange --lockstop" vgchange --lockstop
    systemctl stop lvmlockd
    ok "lvm's lockspaces left" lvm_left
    touch $SYNC/stopped.2
    wait_mark end.1
    systemctl stop dlm
    check "node 2: no lockspace left" no_lockspaces
    systemctl stop corosync
    echo "done" >$OUT/done
    sync
    systemctl poweroff -ff
fi

lvm_up "$N"
barrier up
# 1. a shared VG, its lockspace started on both nodes
if [ "$N" = 1 ]; then
    t=$(date +%s)
    ok "vgcreate --shared vg1 /dev/vdb" vgcreate --shared vg1 /dev/vdb
    note "vgcreate --shared: $(($(date +%s) - t)) s"
    vgs -o name,lock_type,lock_args vg1 >>$R 2>&1
    ok "vg1's lock type is dlm, for cluster vmclust" sh -c 'vgs --noheadings -o lock_type,lock_args vg1 | grep -q "dlm.*:vmclust"'
fi
barrier vgcreate
t=$(date +%s)
ok "vgchange --lockstart vg1" vgchange --lockstart vg1
note "vgchange --lockstart: $(($(date +%s) - t)) s"
barrier lockstart
ok "lvm_vg1 and lvm_global have both nodes" wait_for lockspaces_both
ctool ls >$OUT/ls.txt
# 2. activation across the nodes
if [ "$N" = 1 ]; then
    ok "lvcreate -aey -L 64M -n lv1 vg1" lvcreate -aey -L 64M -n lv1 vg1
fi
barrier lvcreate
if [ "$N" = 2 ]; then
    refused "lvchange -aey vg1/lv1 while node 1 has it exclusive" lvchange -aey vg1/lv1
    refused "lvchange -asy vg1/lv1 while node 1 has it exclusive" lvchange -asy vg1/lv1
fi
barrier refused-ex
[ "$N" = 1 ] && ok "lvchange -an vg1/lv1" lvchange -an vg1/lv1
barrier released-ex
[ "$N" = 2 ] && ok "lvchange -aey vg1/lv1 once node 1 let go" lvchange -aey vg1/lv1
barrier ex2
[ "$N" = 1 ] && refused "lvchange -aey vg1/lv1 while node 2 has it exclusive" lvchange -aey vg1/lv1
barrier refused-ex2
[ "$N" = 2 ] && ok "lvchange -an vg1/lv1" lvchange -an vg1/lv1
barrier released-ex2
ok "lvchange -asy vg1/lv1 on both nodes" lvchange -asy vg1/lv1
barrier shared
if [ "$N" = 1 ]; then
    lvs vg1 >>$R 2>&1
    ok "lvchange -an vg1/lv1" lvchange -an vg1/lv1
    refused "lvchange -aey vg1/lv1 while node 2 has it shared" lvchange -aey vg1/lv1
    ok "lvchange -asy vg1/lv1 again" lvchange -asy vg1/lv1
fi
barrier checked-shared
# 3. node 2 dies with the LV active shared, and comes back
if [ "$N" = 2 ]; then
    ctool dump >$OUT/daemon_dump.txt 2>&1
    touch /host/reboot.2
    touch $SYNC/crashed.2
    sync
    echo 1 >/proc/sys/kernel/sysrq
    echo b >/proc/sysrq-trigger
    sleep 600
fi
wait_mark crashed.2
t=$(date +%s)
ok "lvm_vg1 recovered without node 2" wait_for recovered_alone
note "lvm_vg1 recovered in $(($(date +%s) - t)) s"
ok "lvchange -an vg1/lv1" lvchange -an vg1/lv1
ok "lvchange -aey vg1/lv1 once node 2's lock went with it" lvchange -aey vg1/lv1
touch $SYNC/exclusive.1
wait_mark rejoined.2
ok "lvm_vg1 and lvm_global have both nodes again" lockspaces_both
ctool ls >$OUT/ls_rejoin.txt
ok "lvchange -an vg1/lv1" lvchange -an vg1/lv1
touch $SYNC/released.1
wait_mark stopped.2
ok "node 2 left lvm_vg1 cleanly" members_are lvm_vg1 "1 "
# 4. a clean stop
ok "vgchange --lockstop" vgchange --lockstop
journalctl -u lvmlockd --no-pager >$OUT/journal_lvmlockd.txt 2>&1
systemctl stop lvmlockd
ctool dump >$OUT/daemon_dump.txt 2>&1
systemctl stop dlm
check "node 1: no lockspace left" no_lockspaces
touch $SYNC/end.1
systemctl stop corosync
if grep -q '^FAIL' $R; then
    echo "RESULT failed" >>$R
else
    echo "RESULT ok" >>$R
fi
echo "done" >$OUT/done
sync
systemctl poweroff -ff
