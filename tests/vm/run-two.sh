#!/usr/bin/env bash
# Two VMs with Debian 12's kernel on one shared gfs2 disk and a socket network on loopback:
# node 1 runs DAEMON1 (default rust: ours), node 2 DAEMON2 (default c: Debian's 4.2.0), so
# this is a mixed cluster on real kernels. Runs guest/test2.sh on both; exits 0 only if
# every cross-node check passed on both, both daemons dumped the same plock table, and after
# node 2's kernel stopped dead node 1 recovered alone with only its own locks.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
# NEMESIS=<seconds>: the nemesis run instead (nemesis.sh: faults at random, both on ours)
[[ -n ${NEMESIS:-} ]] && exec bash "$here/nemesis.sh"
DAEMON1=${DAEMON1:-rust}
DAEMON2=${DAEMON2:-c}
PORT=${PORT:-$((20000 + RANDOM % 20000))}
own_run dlm-vm2
# UPGRADE=1: a rolling upgrade with gfs2 in use instead (guest/upgrade2.sh): both nodes
# start on Debian's daemon and are moved to our package and back, one at a time
UPGRADE=${UPGRADE:-0}
[[ $UPGRADE == 1 ]] && DAEMON1=c DAEMON2=c
# FENCE=1: fencing instead (guest/fence2.sh): node 2's daemon is killed with gfs2 in use and
# node 1 fences it with guest/fence_host.sh, which has this script power node 2's VM off
# (FENCE=crash: node 2's kernel stops dead instead of its daemon)
FENCE=${FENCE:-0}
[[ $FENCE != 0 ]] && DAEMON2=${DAEMON2_FENCED:-rust}
# PARTITION=1: corosync's traffic cut between the VMs (guest/partition2.sh): both sides
# stay quorate (two_node) and race to fence; the host powers off the first one fenced and,
# once the survivor has healed the cut, boots it again to rejoin
PARTITION=${PARTITION:-0}
[[ $PARTITION == 1 ]] && FENCE=partition && DAEMON2=${DAEMON2_FENCED:-rust}
need=no
[[ $DAEMON1 == rust || $DAEMON2 == rust || $UPGRADE == 1 ]] && need=yes
prepare_share "$RUN" $need 1:10.9.0.1 2:10.9.0.2
echo "$DAEMON1" >"$RUN/share/conf/daemon1"
echo "$DAEMON2" >"$RUN/share/conf/daemon2"
# BENCH=1: the guests measure first (guest/plocks2.py bench); DLMCONF: more dlm.conf lines
[[ ${BENCH:-0} == 1 ]] && touch "$RUN/share/conf/bench"
# STRACE=1: with BENCH=1, the daemon's system calls over the bench (out/nodeN/bench_strace.txt)
[[ ${STRACE:-0} == 1 ]] && touch "$RUN/share/conf/strace"
# PERF=1: with BENCH=1 and an image built with EXTRA_PKGS=linux-perf, the daemon sampled
# over the bench (out/nodeN/bench_perf.txt)
if [[ ${PERF:-0} == 1 ]]; then
    touch "$RUN/share/conf/perf"
    cp "$repo/target/release/dlm_controld" "$RUN/share/bin/dlm_controld.unstripped"
fi
[[ -n ${DLMCONF:-} ]] && printf '%s\n' "$DLMCONF" >>"$RUN/share/conf/dlm.conf"
# CANCEL=1: an interrupted F_SETLKW each way (guest/plocks2.py cancel; kernels >= 6.6)
[[ ${CANCEL:-0} == 1 ]] && touch "$RUN/share/conf/cancel"
[[ $UPGRADE == 1 ]] && touch "$RUN/share/conf/upgrade"
# SOAK=<seconds>: the plock load of load2.py on both nodes that long (guest/soak2.sh)
[[ -n ${SOAK:-} ]] && echo "$SOAK" >"$RUN/share/conf/soak"
if [[ $FENCE != 0 ]]; then
    echo "$FENCE" >"$RUN/share/conf/fence"
    mkdir -p "$RUN/share/fence"
    printf 'enable_fencing=1\npost_join_delay=5\nenable_startup_fencing=0\nfence_all /host/guest/fence_host.sh\n' >"$RUN/share/conf/dlm.conf"
fi

# the host's side of fence_host.sh: when a node asks for node N to be fenced, wait
# FENCE_DELAY seconds (the survivors must wait meanwhile), power N's VM off (kill its qemu,
# started by this script), then say so
fencer() {
    local f=$RUN/share/fence n p
    while [[ ! -f $f/stop ]]; do
        for n in 1 2; do
            # in a partition both sides ask; the first fence wins, the other asker is off
            [[ $PARTITION == 1 && -f $f/fenced-once ]] && break
            if [[ -f $f/req.$n && ! -f $f/done.$n ]]; then
                sleep "${FENCE_DELAY:-5}"
                for p in $(pgrep -f "qemu-system-x86_64 .*$RUN/root-$n.qcow2"); do kill -KILL "$p"; done
                echo "$(date +%s.%N) host powered node $n off" >>"$f/log"
                touch "$f/done.$n" "$f/fenced-once"
                # and boots it again (a fresh root: it installs our package anew), to rejoin
                if [[ $n == 2 || $PARTITION == 1 ]]; then
                    sleep 2
                    # shellcheck disable=SC2046 # the words of net are qemu arguments
                    vm "$RUN" "${n}b" "dlmnode=$n dlmrejoin=1" $(net "$n")
                fi
            fi
        done
        sleep 0.2
    done
}
qemu-img create -q -f raw "$RUN/gfs2.img" 1G
start=$SECONDS
# shellcheck disable=SC2046 # the words of net are qemu arguments
vm "$RUN" 1 "dlmnode=1" $(net 1) &
p1=$!
sleep 2
# shellcheck disable=SC2046
vm "$RUN" 2 "dlmnode=2" $(net 2) &
p2=$!
fp=
[[ $FENCE != 0 ]] && { fencer & fp=$!; }
wait $p1 $p2
[[ -n $fp ]] && { touch "$RUN/share/fence/stop"; wait "$fp"; }
echo "VMs ran $((SECONDS - start)) s; results in $RUN/share/out (kept if the run fails, or with KEEP_RUN=1)"
out=$RUN/share/out
# a node that never met the other powered off at once (guest/lib.sh cluster_up)
for f in "$out"/node*/no_cluster; do
    [[ -f $f ]] && { echo "--- ${f#"$out"/}"; cat "$f"; }
done
if [[ -n ${SOAK:-} ]]; then
    for n in 1 2; do
        echo "=== node $n ($(cat "$RUN/share/conf/daemon$n"))"
        cat "$out/node$n/soak.txt" 2>/dev/null || true
    done
    grep -q '^RESULT ok' "$out/node1/soak.txt" && grep -q '^RESULT ok' "$out/node2/soak.txt" &&
        grep -q '^PASS after' "$out/node1/soak.txt"
    exit
fi
if [[ $PARTITION == 1 ]]; then
    survivors=0
    for n in 1 2; do
        echo "=== node $n ($(cat "$RUN/share/conf/daemon$n"))"
        cat "$out/node$n/partition.txt" 2>/dev/null || true
        grep -q '^RESULT ok' "$out/node$n/partition.txt" 2>/dev/null && [[ -f $out/node$n/done ]] &&
            survivors=$((survivors + 1))
    done
    echo "--- fence log"
    cat "$RUN/share/fence/log" 2>/dev/null || true
    # one side fenced the other and went on alone
    [[ $survivors -eq 1 && $(grep -c 'powered node' "$RUN/share/fence/log") -eq 1 ]]
    exit
fi
if [[ $FENCE != 0 ]]; then
    echo "--- fence.txt (node 1: $DAEMON1, node 2: $DAEMON2)"
    cat "$out/node1/fence.txt" 2>/dev/null || true
    echo "--- fence log"
    cat "$RUN/share/fence/log" 2>/dev/null || true
    grep -q '^RESULT ok' "$out/node1/fence.txt" && ! grep -q '^FAIL' "$out/node1/fence.txt" &&
        grep -q '^PASS node 2 rejoined' "$out/node1/fence.txt" && [[ -f $out/node1/done ]] &&
        [[ $(grep -c ' request node ' "$RUN/share/fence/log") -eq 1 ]] # the clean stops fence nobody
    exit
fi
if [[ $UPGRADE == 1 ]]; then
    for n in 1 2; do
        echo "=== node $n"
        cat "$out/node$n/upgrade.txt" 2>/dev/null || true
    done
    grep -q '^RESULT ok' "$out/node1/upgrade.txt" && grep -q '^RESULT ok' "$out/node2/upgrade.txt" &&
        grep -q '^PASS ours-on-both: the two tables are identical' "$out/node1/upgrade.txt"
    exit
fi
for n in 1 2; do
    echo "=== node $n ($(cat "$RUN/share/conf/daemon$n"))"
    for f in plocks.txt crosswise.txt cancel.txt ls.txt recovery.txt; do
        [[ -f $out/node$n/$f ]] && { echo "--- $f"; cat "$out/node$n/$f"; }
    done
    [[ -f $out/node$n/dump.txt ]] && echo "--- dump.txt: $(wc -l <"$out/node$n/dump.txt") lines"
done
same=no
if [[ $DAEMON1 == rust && $DAEMON2 == rust || ${DLMCONF:-} == *plock_ownership=1* ]]; then
    # native mode (and C's ownership mode) creates a node's own resources when it first
    # uses them, not in the total order: the same lines, each node's resources in the
    # order it created them (the order of C's dump)
    cmp -s <(sort "$out/node1/dump.txt") <(sort "$out/node2/dump.txt") && same=yes
    echo "the two daemons' tables are identical (the dumps sorted): $same"
else
    # a C-compatible lockspace creates every resource in the total order
    cmp -s "$out/node1/dump.txt" "$out/node2/dump.txt" && same=yes
    echo "the two daemons' dumps are byte-identical: $same"
fi
# then node 2 failed and node 1 recovered without it
# the crosswise deadlock ran (our dlm_tool is in the share whenever ours runs) and passed
for n in 1 2; do
    [[ ! -x $RUN/share/bin/dlm_tool ]] || grep -q '^RESULT ok' "$out/node$n/crosswise.txt" || exit 1
done
for n in 1 2; do
    [[ ! -f $RUN/share/conf/cancel ]] ||
        { grep -q '^RESULT ok' "$out/node$n/cancel.txt" && ! grep -q '^FAIL' "$out/node$n/cancel.txt"; } || exit 1
done
grep -q '^RESULT ok' "$out/node1/plocks.txt" && grep -q '^RESULT ok' "$out/node2/plocks.txt" &&
    [[ $same == yes && $(wc -l <"$out/node1/dump.txt") -eq 200 ]] &&
    [[ -f $out/node2/crashed ]] && grep -q '^RESULT ok' "$out/node1/recovery.txt" &&
    [[ -f $out/node1/done ]]
