#!/usr/bin/env bash
# The nemesis run on real kernels (issue 51): two VMs with Debian 12's kernel on one shared
# gfs2 disk (run-two.sh's machinery: corosync two_node, our daemon from our package on both,
# native mode as configured: on by default), fencing through guest/fence_nemesis.sh (the
# host powers the victim off and boots it again). On both nodes workers hold random byte
# ranges of three shared gfs2 files with POSIX locks and write their own tokens into what
# they hold exclusively, checking every read (guest/nemesis.py). Meanwhile this script is
# the nemesis: at random times it kills a node's dlm_controld, crashes a node's kernel
# (sysrq b), cuts corosync's traffic between the VMs (nftables in both guests: both race to
# fence, the loser is powered off) or unmounts and mounts gfs2 on a node; a fenced node is
# booted again, rejoins, mounts and starts its workers again, while the other node's
# workers run throughout. At each quiet point (no fault in progress, both mounted) both
# nodes' workers pause and the two daemons' `dlm_tool plocks gfs0` must be identical.
# Exits 0 only with no violation, no hang, no worker error, every fault recovered, every
# comparison identical and no fence that no fault asked for.
#
#   NEMESIS=<seconds>      how long faults are injected (default 600); the run lasts that
#                          plus the boots and the recovery of the last fault
#   NEMESIS_FAULTS="..."   the faults in this order, cycled: kill, crash, partition, umount,
#                          fenced (one of the first three, drawn), any (one of the four,
#                          drawn) or cycle (the four in an order drawn anew every four
#                          faults: each comes once in every four); default "cycle"
#   NEMESIS_COUNT=<n>      at most n faults (the short run in scripts/test.sh: two)
#   NEMESIS_GAP="MIN MAX"  seconds of load between a quiet point and the next fault
#   NEMESIS_SEED=<n>       the draws (faults, victims, gaps, the workers' requests)
#   NEMESIS_WORKERS=<n>    workers per node (default 3); NEMESIS_HANG=<s> (default 180)
#   NEMESIS_BURST=1        workers also take 320 locks of a fresh file from 8 threads at
#                          once, and probe the other node's (guest/nemesis.py Worker.burst)
#   DLMCONF="..."          more dlm.conf lines (plock_native=0: the same run C-compatible)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
NEMESIS=${NEMESIS:-600}
SEED=${NEMESIS_SEED:-$((RANDOM * 32768 + RANDOM))}
RANDOM=$SEED
read -r GAP_MIN GAP_MAX <<<"${NEMESIS_GAP:-15 45}"
RECOVER=${NEMESIS_RECOVER:-600}
PORT=${PORT:-$((20000 + RANDOM % 20000))}
export VM_TIMEOUT=${VM_TIMEOUT:-$((NEMESIS + 2400))}
own_run dlm-nemesis
# interrupted, the run still ends its VMs (own_run's EXIT trap)
trap 'exit 143' TERM INT
prepare_share "$RUN" yes 1:10.9.0.1 2:10.9.0.2
echo "${DAEMON1:-rust}" >"$RUN/share/conf/daemon1"
echo "${DAEMON2:-rust}" >"$RUN/share/conf/daemon2"
echo "$NEMESIS" >"$RUN/share/conf/nemesis"
echo "$SEED" >"$RUN/share/conf/nemesis_seed"
echo "${NEMESIS_WORKERS:-3}" >"$RUN/share/conf/nemesis_workers"
echo "${NEMESIS_HANG:-180}" >"$RUN/share/conf/nemesis_hang"
echo "${NEMESIS_BURST:-0}" >"$RUN/share/conf/nemesis_burst"
printf 'enable_fencing=1\npost_join_delay=5\nenable_startup_fencing=0\nfence_all /host/guest/fence_nemesis.sh\n' >"$RUN/share/conf/dlm.conf"
[[ -n ${DLMCONF:-} ]] && printf '%s\n' "$DLMCONF" >>"$RUN/share/conf/dlm.conf"
nem=$RUN/share/nem
fence=$RUN/share/fence
out=$RUN/share/out
mkdir -p "$nem" "$fence"
log=$out/nemesis.txt
t0=$SECONDS
say() { echo "T+$((SECONDS - t0))s $*" | tee -a "$log"; }
fail() {
    say "FAIL $*"
    touch "$RUN/failed"
}
gen() { cat "$RUN/gen.$1"; }
# ops N: the lock operations node N's workers of its current boot have counted so far
ops() {
    python3 -c 'import glob, json, sys
print(sum(json.load(open(f))["ops"] for f in glob.glob(sys.argv[1] + "/stats-*.json")))' "$out/node$1/g$(gen "$1")"
}

# boot N G: node N's G-th boot (a fresh root on the image: it installs our package anew)
boot() {
    local extra=""
    [[ $2 != 0 ]] && extra=" dlmrejoin=1"
    # shellcheck disable=SC2046 # the words of net are qemu arguments
    vm "$RUN" "$1g$2" "dlmnode=$1 dlmgen=$2$extra" $(net "$1") &
}
# the VM's qemu itself, not the timeout that runs it (killed, it would leave qemu behind)
qemu_of() { pgrep -f "^$VMCACHE/qemu/usr/bin/qemu-system-x86_64 .*$RUN/root-$1g$2.qcow2" || true; }
# power_off N G: qemu stops the VM at once on SIGTERM (the guest runs no more; what it
# wrote to the shared disk is on it, as after a power cut); -9 if it has not ended in 5 s
power_off() {
    local p i
    for p in $(qemu_of "$1" "$2"); do kill -TERM "$p"; done
    for i in $(seq 25); do
        [[ -z $(qemu_of "$1" "$2") ]] && return
        sleep 0.2
    done
    for p in $(qemu_of "$1" "$2"); do kill -KILL "$p"; done
}

# the host's side of fence_nemesis.sh: the first request for a node powers it off (after
# FENCE_DELAY seconds, in which the survivor must wait), answers, and boots the node again;
# a request whose asker is off or booted again since it asked lost a race and is ignored. A
# request that no fault explains ($RUN/expect: the node killed or crashed, "any" in a
# partition) is a failure, and served all the same.
fencer() {
    local r id victim asker agen rest g
    while [[ ! -f $fence/stop ]]; do
        # in the order they came (a partition's two requests race: the first one wins);
        # shellcheck disable=SC2045 # the names are the agent's: no spaces
        for r in $(ls -1tr "$fence"/req.* 2>/dev/null); do
            id=${r#"$fence"/req.}
            victim=${id%%.*} rest=${id#*.}
            asker=${rest%%.*} rest=${rest#*.}
            agen=${rest%%.*}
            mv "$r" "$fence/seen.$id"
            if [[ -f $RUN/off.$asker || $(gen "$asker") != "$agen" ]]; then
                say "fence request $id ignored: node $asker was powered off since it asked"
                continue
            fi
            local want
            want=$(cat "$RUN/expect" 2>/dev/null || true)
            if [[ $want != any && $want != "$victim" ]]; then
                fail "node $asker asked to fence node $victim, which no fault explains ($id)"
            fi
            sleep "${FENCE_DELAY:-5}"
            g=$(gen "$victim")
            touch "$RUN/off.$victim"
            power_off "$victim" "$g"
            say "host powered node $victim off (boot $g), fenced for node $asker"
            echo "$(date +%s.%N) host powered node $victim off" >>"$fence/log"
            touch "$fence/done.$id"
            rm -f "$RUN/expect"
            # in a partition the survivor lets corosync's traffic through again before the
            # victim comes back
            if [[ -f $RUN/partitioned ]]; then
                send "$asker" heal >/dev/null
                rm -f "$RUN/partitioned"
            fi
            sleep 2
            echo $((g + 1)) >"$RUN/gen.$victim"
            rm -f "$RUN/off.$victim"
            boot "$victim" $((g + 1))
        done
        sleep 0.2
    done
}

# send N WORDS...: a command to node N's current boot; prints its id for wait_ack
send() {
    local n=$1 id
    shift
    id=$(gen "$n").$(date +%s%N)
    echo "$*" >"$nem/new.$n.$id"
    mv "$nem/new.$n.$id" "$nem/cmd.$n.$id"
    echo "$id"
}
# wait_ack N ID LIMIT: the agent's answer (prints it), or fails after LIMIT seconds
wait_ack() {
    local i=0
    while [[ ! -f $nem/ack.$1.$2 ]]; do
        watch
        i=$((i + 1))
        [[ $i -gt $(($3 * 5)) ]] && return 1
        sleep 0.2
    done
    cat "$nem/ack.$1.$2"
}
# watch: a violation or a hang reported since the last look has both nodes record their
# daemons' tables and dumps (nemesis.py diag)
seen_viol=0
watch() {
    local h v n tag
    for h in "$nem"/hang.*; do
        [[ -e $h ]] || continue
        tag=${h##*.}
        mv "$h" "$nem/seen-${h##*/}"
        say "HANG reported: $(cat "$nem/seen-${h##*/}")"
        for n in 1 2; do [[ -f $RUN/off.$n ]] || send "$n" diag "$tag" >/dev/null; done
    done
    v=$(cat "$out"/node*/g*/violations.txt 2>/dev/null | wc -l || true)
    if [[ $v -gt $seen_viol ]]; then
        say "VIOLATION reported ($v in all): $(cat "$out"/node*/g*/violations.txt | tail -1 | cut -c1-400)"
        seen_viol=$v
        for n in 1 2; do [[ -f $RUN/off.$n ]] || send "$n" diag "violation$v" >/dev/null; done
    fi
}
# wait_ready N G LIMIT: node N's boot G has mounted and started its workers; fails when
# that boot's VM ended first (it never met the other node, or never mounted)
wait_ready() {
    local i=0 started=no
    while [[ ! -f $nem/ready.$1.$2 ]]; do
        watch
        if [[ -n $(qemu_of "$1" "$2") ]]; then
            started=yes
        elif [[ $started == yes && ! -f $RUN/off.$1 ]]; then
            fail "node $1 (boot $2) ended before it was ready"
            return 1
        fi
        i=$((i + 1))
        [[ $i -gt $(($3 * 5)) ]] && { fail "node $1 (boot $2) not ready after $3 s"; return 1; }
        sleep 0.2
    done
}

# compare K: a quiet point: both nodes' workers pause (each blocked F_SETLKW stays in the
# table as a waiter), both daemons dump, the dumps must be identical (dumped again up to
# four times, 2 s apart, while a grant that was in flight settles); then the workers go on
compares=0 identical=0
compare() {
    local a1 a2 q1 q2 try d1="" d2="" same=no
    compares=$((compares + 1))
    a1=$(send 1 pause) a2=$(send 2 pause)
    q1=$(wait_ack 1 "$a1" 200) || q1="no answer"
    q2=$(wait_ack 2 "$a2" 200) || q2="no answer"
    [[ $q1 == quiet* && $q2 == quiet* ]] || say "compare $1: not quiet: node 1 $q1; node 2 $q2"
    for try in 1 2 3 4 5; do
        a1=$(send 1 dump "$1-$try") a2=$(send 2 dump "$1-$try")
        if ! wait_ack 1 "$a1" 120 >/dev/null || ! wait_ack 2 "$a2" 120 >/dev/null; then
            break
        fi
        d1=$out/node1/g$(gen 1)/dump-$1-$try.txt d2=$out/node2/g$(gen 2)/dump-$1-$try.txt
        if cmp -s "$d1" "$d2"; then
            same=yes
            break
        fi
        sleep 2
    done
    if [[ $same == yes ]]; then
        identical=$((identical + 1))
        say "compare $1: identical ($(wc -l <"$d1") lines, dump $try)"
    else
        fail "compare $1: the two daemons' tables differ ($d1 $d2)"
        diff "$d1" "$d2" | head -20 | tee -a "$log" || true
    fi
    a1=$(send 1 resume) a2=$(send 2 resume)
    wait_ack 1 "$a1" 60 >/dev/null || true
    wait_ack 2 "$a2" 60 >/dev/null || true
}

# the faults; each returns once the cluster is whole again (both nodes mounted, working)
faults=()
fault_kill() { fenced_fault "$1" killdaemon; }
fault_crash() { fenced_fault "$1" crash; }
fenced_fault() {
    local n=$1 g
    g=$(gen "$n")
    echo "$n" >"$RUN/expect"
    say "fault: $2 on node $n"
    wait_ack "$n" "$(send "$n" "$2")" 60 >/dev/null || { fail "node $n took no $2"; return 1; }
    wait_gen "$n" "$g" || return 1
    wait_ready "$n" $((g + 1)) "$RECOVER" && say "node $n back: boot $((g + 1)) mounted, its workers started"
}
# wait_gen N G: node N powered off by a fence and booted again after boot G
wait_gen() {
    local i=0
    while [[ $(gen "$1") == "$2" ]]; do
        watch
        i=$((i + 1))
        [[ $i -gt $((RECOVER * 5)) ]] && { fail "node $1 not fenced within $RECOVER s"; return 1; }
        sleep 0.2
    done
}
fault_partition() {
    local g1 g2 a1 a2 i=0 v
    g1=$(gen 1) g2=$(gen 2)
    echo any >"$RUN/expect"
    touch "$RUN/partitioned"
    say "fault: partition (corosync's udp 5405 dropped in both guests)"
    a1=$(send 1 cut) a2=$(send 2 cut)
    if ! wait_ack 1 "$a1" 60 >/dev/null || ! wait_ack 2 "$a2" 60 >/dev/null; then
        fail "the cut was not made on both"
    fi
    while [[ $(gen 1) == "$g1" && $(gen 2) == "$g2" ]]; do
        watch
        i=$((i + 1))
        if [[ $i -gt $((RECOVER * 5)) ]]; then
            fail "nobody fenced within $RECOVER s of the partition"
            rm -f "$RUN/partitioned"
            send 1 heal >/dev/null && send 2 heal >/dev/null
            return 1
        fi
        sleep 0.2
    done
    v=1
    [[ $(gen 1) == "$g1" ]] && v=2
    say "partition: node $v lost the race"
    wait_ready "$v" "$(gen "$v")" "$RECOVER" && say "node $v back: boot $(gen "$v") mounted, its workers started"
}
fault_umount() {
    local how=stop what="stopped" r
    [[ $((RANDOM % 2)) == 0 ]] && how=kill what="killed (-9)"
    say "fault: umount and mount on node $1 (its workers $what first)"
    r=$(wait_ack "$1" "$(send "$1" umount "$how" $((1 + RANDOM % 5)))" 400) || { fail "node $1: umount/mount unanswered"; return 1; }
    say "node $1: $r"
    [[ $r == *"mount rc 0"*"mount rc 0"* ]] || fail "node $1: umount or mount failed"
}

# the checker first, on the host: it sees no violation with real locks and some when the
# workers' lock calls are skipped
python3 "$here/guest/nemesis.py" selftest "$RUN/selftest" | tee -a "$log"
qemu-img create -q -f raw "$RUN/gfs2.img" 1G
echo 0 >"$RUN/gen.1"
echo 0 >"$RUN/gen.2"
say "nemesis: $NEMESIS s of faults, seed $SEED; dlm.conf: $(tr '\n' ';' <"$RUN/share/conf/dlm.conf")"
boot 1 0
sleep 2
boot 2 0
fencer &
fp=$!
if wait_ready 1 0 600 && wait_ready 2 0 600; then
    say "both nodes mounted, workers running"
    compare 0
    start=$SECONDS
    k=0
    read -ra order <<<"${NEMESIS_FAULTS:-cycle}"
    bag=()
    for n in 1 2; do gen "$n" >"$RUN/gen0.$n"; done
    while ((SECONDS - start < NEMESIS && k < ${NEMESIS_COUNT:-1000000})) && [[ ! -f $RUN/failed ]]; do
        gap=$((GAP_MIN + RANDOM % (GAP_MAX - GAP_MIN + 1)))
        for _ in $(seq $((gap * 5))); do watch; sleep 0.2; done
        ((SECONDS - start < NEMESIS)) || break
        k=$((k + 1))
        f=${order[$(((k - 1) % ${#order[@]}))]}
        kinds=(kill crash partition umount)
        [[ $f == fenced ]] && f=${kinds[$((RANDOM % 3))]}
        [[ $f == any ]] && f=${kinds[$((RANDOM % 4))]}
        if [[ $f == cycle ]]; then
            if [[ ${#bag[@]} == 0 ]]; then
                bag=("${kinds[@]}")
                for i in 3 2 1; do
                    j=$((RANDOM % (i + 1)))
                    t=${bag[i]} bag[i]=${bag[j]} bag[j]=$t
                done
            fi
            f=${bag[0]}
            bag=("${bag[@]:1}")
        fi
        victim=$((1 + RANDOM % 2))
        faults+=("$f")
        before=$(ops 1)/$(ops 2)
        "fault_$f" "$victim" || break
        # the node the fault spared went on working through it (a partition spares the one
        # that won the race: the one not booted again)
        for n in 1 2; do
            [[ $f == partition || $n != "$victim" ]] || continue
            b=${before%/*}
            [[ $n == 2 ]] && b=${before#*/}
            [[ $(gen "$n") == "$(cat "$RUN/gen0.$n")" ]] || continue
            a=$(ops "$n")
            if [[ $a -gt $b ]]; then
                say "node $n worked through the fault: $((a - b)) lock operations"
            else
                fail "node $n's workers made no progress through the fault ($b, then $a operations)"
            fi
        done
        compare "$k"
        for n in 1 2; do gen "$n" >"$RUN/gen0.$n"; done
    done
    say "faults done: ${faults[*]}"
    # a last stretch of load, a last quiet point
    for _ in $(seq $((GAP_MIN * 5))); do watch; sleep 0.2; done
    compare end
    # the end: workers stop (each must end: its last request answered), both nodes leave
    s1=$(send 1 stop) s2=$(send 2 stop)
    wait_ack 1 "$s1" 300 >/dev/null || fail "node 1 did not stop"
    wait_ack 2 "$s2" 300 >/dev/null || fail "node 2 did not stop"
fi
touch "$fence/stop"
wait "$fp" || true
# every VM ends (the stopped ones power themselves off)
for _ in $(seq 300); do
    [[ -z $(pgrep -f "qemu-system-x86_64 .*$RUN/root-") ]] && break
    sleep 1
done
for p in $(pgrep -f "qemu-system-x86_64 .*$RUN/root-" || true); do kill -KILL "$p"; done
wait
for n in 1 2; do
    d=$out/node$n/g$(gen "$n")
    [[ -f $d/done ]] || fail "node $n's last boot did not stop cleanly"
    grep -q '^stuck \[\] umount 0' "$d/done" 2>/dev/null || fail "node $n: $(cat "$d/done" 2>/dev/null)"
done
# a node that never met the other powered off at once (guest/lib.sh cluster_up)
for f in "$out"/node*/g*/no_cluster; do
    [[ -f $f ]] && { echo "--- ${f#"$out"/}"; cat "$f"; }
done
echo "--- fence log"
cat "$fence/log" 2>/dev/null || true
echo "--- per node"
python3 "$here/guest/nemesis.py" report "$out" | tee "$out/report.txt" || touch "$RUN/failed"
fenced=0
[[ -f $fence/log ]] && fenced=$(grep -c 'host powered node' "$fence/log" || true)
echo "RESULT seed $SEED, $((SECONDS - t0)) s: faults ${faults[*]:-none} (${#faults[@]}; $fenced fenced); dump comparisons $identical of $compares identical" | tee -a "$log"
[[ ! -f $RUN/failed && $identical == "$compares" && $compares -gt 0 ]]
