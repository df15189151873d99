#!/usr/bin/env bash
# The real-kernel side-by-side numbers (issue 14): two VMs with Debian 12's kernel on one
# gfs2 disk, both nodes on ours (native mode), on Debian's C 4.2.0, and on C with
# plock_ownership=1, back to back on the same images. Each run is run-two.sh with
# BENCH=1: both nodes lock and unlock a file of their own at once for 5 s, then walk a ring
# of ranges of one shared file (lock passing). Prints a table; results in
# docs/BENCHMARKS.md. KINDS="rust own" runs some of the three, and may name one more than
# once ("own rust own rust": the targets are judged on each kind's medians); SMP=<n> gives
# each VM n vCPUs. Needs the image of build-image.sh (VMCACHE), as run-two.sh does.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
declare -A label=([rust]="ours (native mode)" [c]="C 4.2.0" [own]="C 4.2.0 plock_ownership=1")
rows=() cpus=()
declare -A owns passes
for kind in ${KINDS:-rust c own}; do
    run=$(mktemp -d /tmp/dlm-vmbench.XXXXXX)
    d=$kind conf=
    [[ $kind == own ]] && d=c conf=plock_ownership=1
    # DLMCONF_RUST: dlm.conf lines for ours alone (e.g. plock_spin_us=0 to turn its spin off)
    [[ $kind == rust ]] && conf=${DLMCONF_RUST:-}
    BENCH=1 DLMCONF=$conf DAEMON1=$d DAEMON2=$d RUN=$run bash "$here/run-two.sh" >"$run/run.log" 2>&1
    # (C's plock_ownership=1 exits 1 here: its dumps list each node's cached resources
    # with their ages, so the two tables never compare equal; its numbers still count)
    echo "$kind: run-two.sh exit $? ($run)"
    for n in 1 2; do
        f=$run/share/out/node$n/bench.txt
        own=$(sed -n 's/^own_pairs_per_s //p' "$f" 2>/dev/null)
        pass=$(sed -n 's/^passing_steps_per_s //p' "$f" 2>/dev/null)
        rows+=("| ${label[$kind]} | node $n | ${own:-—} | ${pass:-—} |")
        # where each phase's CPU went (plocks2.py: µs per pair or step of the daemon,
        # corosync, the process, and the guest idle)
        cpus+=("$kind node $n: $(grep -h '_cpu_us_per_step' "$f" 2>/dev/null | tr '\n' ';')")
        # every run's number, for the medians when a kind runs more than once
        # (a run without a number keeps its place as "-", so that rounds stay aligned)
        owns[$kind$n]+="${own:--} " passes[$kind$n]+="${pass:--} "
        [[ -n $own && -n $pass ]] || keep=1
    done
    # the run's ~60 MB go once its numbers are read (KEEP_RUN=1, or a missing number, keeps it)
    [[ ${keep:-0} == 1 || ${KEEP_RUN:-0} == 1 ]] || rm -rf "$run"
    keep=0
done
echo "| daemons (both nodes) | node | own file: lock+unlock pairs/s | lock passing: steps/s |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
printf '%s\n' "${cpus[@]}"
# issue 14's targets, node by node, on the medians of each kind's runs (KINDS may name a kind
# more than once): own file ours ≥ 1.2× C's ownership mode; lock passing ours ≥ 1.0× C in
# either mode (the better of those that ran)
median() { tr ' ' '\n' <<<"${1:-}" | grep -v '^-\?$' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR) printf "%s", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b }'; }
better() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { print (a > b ? a : b) }'; }
verdict() { awk -v x="$1" -v y="$2" -v t="$3" 'BEGIN { print (x >= t && y >= t ? "met" : "**missed**") }'; }
# two kinds' runs side by side, the i-th of each on line i ("-": no number, or no such run;
# split on each space, so that a shorter first list leaves its column empty, not shifted)
side_by_side() {
    paste -d' ' <(tr ' ' '\n' <<<"${1:-}" | grep .) <(tr ' ' '\n' <<<"${2:-}" | grep .) |
        awk -F'[ ]' '{ print ($1 == "" ? "-" : $1), ($2 == "" ? "-" : $2) }'
}
# the i-th runs of two kinds against each other, round by round ("1.02 / — / 0.97"), as
# vs_c prints them: a kind run many times is alternated with the others (the host drifts)
rounds() {
    side_by_side "$@" | awk '{ r = ($1 > 0 && $2 > 0) ? sprintf("%.2f", $1 / $2) : "—"
        printf "%s%s", (NR > 1 ? " / " : ""), r }'
}
# the better of two kinds' i-th runs (one kind alone when the other has no number)
betters() {
    side_by_side "$@" | awk '{ m = $1; if ($2 != "-" && (m == "-" || $2 > m)) m = $2; printf "%s ", m }'
}
target() { # label threshold ratio1 ratio2 rounds1 rounds2
    [[ -n $3 && -n $4 ]] && echo "| $1 | $3 | $4 | $(verdict "$3" "$4" "$2") | $5; $6 |"
}
declare -A med
for k in "${!owns[@]}"; do med[own$k]=$(median "${owns[$k]}"); done
for k in "${!passes[@]}"; do med[pass$k]=$(median "${passes[$k]}"); done
echo
echo "| target (issue 14), on the medians | node 1 | node 2 | verdict | round by round, node 1; node 2 |"
echo "|---|---|---|---|---|"
target "own file: ours ≥ 1.2× C's ownership mode" 1.2 \
    "$(ratio "${med[ownrust1]:-}" "${med[ownown1]:-}")" "$(ratio "${med[ownrust2]:-}" "${med[ownown2]:-}")" \
    "$(rounds "${owns[rust1]:-}" "${owns[own1]:-}")" "$(rounds "${owns[rust2]:-}" "${owns[own2]:-}")"
target "lock passing: ours ≥ 1.0× C (the better mode run)" 1.0 \
    "$(ratio "${med[passrust1]:-}" "$(better "${med[passc1]:-}" "${med[passown1]:-}")")" \
    "$(ratio "${med[passrust2]:-}" "$(better "${med[passc2]:-}" "${med[passown2]:-}")")" \
    "$(rounds "${passes[rust1]:-}" "$(betters "${passes[c1]:-}" "${passes[own1]:-}")")" \
    "$(rounds "${passes[rust2]:-}" "$(betters "${passes[c2]:-}" "${passes[own2]:-}")")"
true
