#!/usr/bin/env bash
# The cluster stack users run over the daemon, on two VMs with Debian's kernel and Debian's
# own packages (the image of `STACK=1 build-image.sh`): one shared disk, the socket network
# on loopback, corosync two_node. One run of
#
#   pacemaker  corosync + pacemaker + crmsh: stonith-enabled with fence_vmhost (the host
#              powers a VM off), the ocf:pacemaker:controld clone, gfs2 as a cloned
#              Filesystem; plocks across the nodes; node 2's daemon killed and fenced once
#              through dlm_stonith and Pacemaker's fencer, node 2 booted again; standby and
#              online (guest/stack-pacemaker.sh)
#   ocfs2      ocfs2 on the user stack (pcmk): mkfs, mount on both, plocks, ping_pong -rw,
#              unmount and mount again, fsck (guest/stack-ocfs2.sh)
#   lvmlockd   lvmlockd with lock_type=dlm: a shared VG, activation across the nodes, node 2
#              crashed and booted again, its VG lockspace joined again (guest/stack-lvmlockd.sh)
#
# as `bash tests/vm/run-stack.sh pacemaker|ocfs2|lvmlockd` (docs/real-kernel.md). DAEMON1,
# DAEMON2: rust (ours, the default on both) or c (Debian's); SUITE=trixie for Debian 13;
# DLMCONF: more dlm.conf lines. Exits 0 only if every check of every node passed.
# `run-stack.sh all` runs each of them on both suites, ours on both nodes and ours beside C.
set -euo pipefail
# all: every run on both suites with both pairings, the images built first; one line each
# with its result and wall time at the end
if [[ ${1:-} == all ]]; then
    failed=0
    summary=()
    for suite in bookworm trixie; do
        STACK=1 SUITE=$suite bash "$(dirname "$0")/build-image.sh"
    done
    for run in "bookworm pacemaker rust" "bookworm pacemaker c" "bookworm ocfs2 rust" \
        "bookworm ocfs2 c" "bookworm lvmlockd rust" "bookworm lvmlockd c" \
        "trixie pacemaker rust" "trixie pacemaker c" "trixie ocfs2 c" "trixie lvmlockd c"; do
        read -r suite what d2 <<<"$run"
        t=$SECONDS
        if SUITE=$suite DAEMON1=rust DAEMON2=$d2 bash "$0" "$what"; then
            r=passed
        else
            r=FAILED
            failed=$((failed + 1))
        fi
        summary+=("$what, $suite, node 2 $d2: $r in $((SECONDS - t)) s")
    done
    echo "=== run-stack.sh all"
    printf '%s\n' "${summary[@]}"
    [[ $failed -eq 0 ]]
    exit
fi
# shellcheck disable=SC2034 # lib.sh boots the stack image
STACK=1
source "$(dirname "$0")/lib.sh"
what=${1:-pacemaker}
case $what in
pacemaker | ocfs2 | lvmlockd) ;;
*)
    echo "usage: $0 pacemaker|ocfs2|lvmlockd|all" >&2
    exit 2
    ;;
esac
[[ -f $IMG/root.img ]] || { echo "no stack image in $IMG: STACK=1 SUITE=$SUITE bash tests/vm/build-image.sh" >&2; exit 1; }
DAEMON1=${DAEMON1:-rust}
DAEMON2=${DAEMON2:-rust}
PORT=${PORT:-$((20000 + RANDOM % 20000))}
own_run "dlm-$what"
need=no
[[ $DAEMON1 == rust || $DAEMON2 == rust ]] && need=yes
prepare_share "$RUN" $need 1:10.9.0.1 2:10.9.0.2
# Pacemaker takes each node's name from corosync's nodelist
sed -i 's/^\( *\)nodeid: \([0-9]*\)$/&\n\1name: node\2/' "$RUN/share/conf/corosync.conf"
echo "$DAEMON1" >"$RUN/share/conf/daemon1"
echo "$DAEMON2" >"$RUN/share/conf/daemon2"
echo "$what" >"$RUN/share/conf/stack"
mkdir -p "$RUN/share/fence"
if [[ $what == pacemaker ]]; then
    # fencing on (the default) and no device: dlm_stonith, through Pacemaker's fencer
    printf '# no fence device: dlm_stonith asks Pacemaker to fence\n' >"$RUN/share/conf/dlm.conf"
    # each node's fence device runs on the other node
    cat >"$RUN/share/conf/pcmk.crm" <<'EOF'
primitive fence-node1 stonith:fence_vmhost params pcmk_host_list=node1 op monitor interval=60s
primitive fence-node2 stonith:fence_vmhost params pcmk_host_list=node2 op monitor interval=60s
location fence-node1-elsewhere fence-node1 -inf: node1
location fence-node2-elsewhere fence-node2 -inf: node2
primitive dlm ocf:pacemaker:controld op start timeout=90s interval=0 op stop timeout=100s interval=0 op monitor interval=10s timeout=20s
clone dlm-clone dlm meta interleave=true
primitive gfs2 Filesystem params device=/dev/vdb directory=/mnt fstype=gfs2 op start timeout=60s interval=0 op stop timeout=60s interval=0 op monitor interval=20s timeout=40s
clone gfs2-clone gfs2 meta interleave=true
colocation gfs2-with-dlm inf: gfs2-clone dlm-clone
order dlm-then-gfs2 Mandatory: dlm-clone gfs2-clone
property stonith-enabled=true no-quorum-policy=freeze
EOF
fi
[[ -n ${DLMCONF:-} ]] && printf '%s\n' "$DLMCONF" >>"$RUN/share/conf/dlm.conf"
qemu-img create -q -f raw "$RUN/gfs2.img" 1G

# net N: node N's end of the VMs' network (as run-two.sh): UDP datagrams on loopback
net() {
    local me=$((PORT + $1 - 1)) peer=$((PORT + 2 - $1))
    echo "-netdev socket,id=n0,udp=127.0.0.1:$peer,localaddr=127.0.0.1:$me -device virtio-net-pci,netdev=n0,mac=52:54:00:00:09:0$1,addr=0x7"
}
# vm_of N: the pids of node N's qemu (its first boot or the next)
vm_of() { pgrep -f "qemu-system-x86_64 .*$RUN/root-${1}b?\.qcow2" || true; }

# the host's side of the guests' requests: fence_vmhost's (share/fence/req.N.TAG: wait
# FENCE_DELAY seconds, power node N's VM off, answer done.N.TAG; each request is counted in
# the log) and a reboot (share/reboot.N: the node powers itself off or crashes); node 2,
# once off, is booted again (dlmrejoin=1: a fresh root, the run's packages installed anew)
host_side() {
    local f=$RUN/share/fence r tag n p again=
    while [[ ! -f $f/stop ]]; do
        for r in "$f"/req.*; do
            [[ -e $r ]] || continue
            tag=${r#"$f"/req.}
            n=${tag%%.*}
            [[ -f $f/done.$tag ]] && continue
            sleep "${FENCE_DELAY:-5}"
            for p in $(vm_of "$n"); do kill -KILL "$p"; done
            echo "$(date +%s.%N) host powered node $n off ($tag)" >>"$f/log"
            touch "$f/off.$n" "$f/done.$n" "$f/done.$tag"
        done
        if [[ -z $again && -z $(vm_of 2) && (-f $f/off.2 || -f $RUN/share/reboot.2) ]]; then
            sleep 2
            rm -f "$f/off.2"
            echo "$(date +%s.%N) host boots node 2 again" >>"$f/log"
            # shellcheck disable=SC2046 # the words of net are qemu arguments
            vm "$RUN" 2b "dlmnode=2 dlmrejoin=1" $(net 2) &
            again=$!
        fi
        sleep 0.2
    done
    [[ -z $again ]] || wait "$again"
}
start=$SECONDS
# shellcheck disable=SC2046 # the words of net are qemu arguments
vm "$RUN" 1 "dlmnode=1" $(net 1) &
p1=$!
sleep 2
# shellcheck disable=SC2046
vm "$RUN" 2 "dlmnode=2" $(net 2) &
p2=$!
host_side &
hp=$!
wait $p1 $p2
# node 1 ends last; node 2's second boot, if any, has ended before it
touch "$RUN/share/fence/stop"
wait $hp
echo "VMs ran $((SECONDS - start)) s ($what; node 1: $DAEMON1, node 2: $DAEMON2; $SUITE); results in $RUN/share/out"
out=$RUN/share/out
for f in "$out"/node*/no_cluster; do
    [[ -f $f ]] && { echo "--- ${f#"$out"/}"; cat "$f"; }
done
ok=yes
for n in 1 2 2b; do
    [[ -d $out/node$n ]] || continue
    echo "=== node $n"
    for f in stack.txt plocks.txt fence.txt pingpong.txt; do
        [[ -f $out/node$n/$f ]] && { echo "--- $f"; grep -E '^(PASS|FAIL|RESULT|\[)' "$out/node$n/$f" || true; }
    done
    ! grep -qs '^FAIL' "$out/node$n/stack.txt" "$out/node$n/plocks.txt" "$out/node$n/fence.txt" || ok=no
done
echo "--- fence log"
cat "$RUN/share/fence/log" 2>/dev/null || true
# node 1 went through to the end and found every check passed
grep -q '^RESULT ok' "$out/node1/stack.txt" || ok=no
[[ -f $out/node1/done ]] || ok=no
case $what in
pacemaker)
    # one fence in all: node 2's, asked once by whoever asked (dlm_stonith, Pacemaker,
    # the agent's own monitor), and node 2 back and stopped cleanly at the end
    [[ $(grep -c ' request node ' "$RUN/share/fence/log" 2>/dev/null) -eq 1 ]] || { echo "not one fence request"; ok=no; }
    grep -q ' request node 2 ' "$RUN/share/fence/log" || ok=no
    [[ -f $out/node2b/done ]] || ok=no
    ;;
*)
    # no fence at all
    [[ ! -s $RUN/share/fence/log ]] || [[ $(grep -c ' request node ' "$RUN/share/fence/log") -eq 0 ]] || ok=no
    [[ -f $out/node2/done || -f $out/node2b/done ]] || ok=no
    ;;
esac
echo "run-stack.sh $what: $([[ $ok == yes ]] && echo passed || echo FAILED) in $((SECONDS - start)) s"
[[ $ok == yes ]]
