#!/usr/bin/env bash
# One VM with Debian 12's kernel (real DLM and gfs2 modules), corosync on one node, and a
# dlm_controld: DAEMON=rust (ours: our Debian package, built here by scripts/deb.sh,
# installed over Debian's running daemon — refused — then over the stopped one, and removed
# again at the end) or DAEMON=c (Debian's 4.2.0). Runs guest/test.sh and prints
# its results; exits 0 only if every check passed. TCG emulation (this host's /dev/kvm
# cannot boot a stock kernel). Build first: build-image.sh. CEILING=1: after plocks.py, its
# pairs once more against plock_answer (the daemon stopped), the guest's ceiling;
# CEILING=variants: against each of plock_answer's ways (poll, tokio, tokio-handoff,
# poll-engine), twice: the cost of the skeleton alone, and of our engine in C's loop;
# CEILING_WAYS="<way> ...": those ways in that order (poll-pages:N and poll-calls:N among
# them: what a page and a call of a request path cost under emulation).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
DAEMON=${DAEMON:-rust}
own_run dlm-vm
need=no
[[ $DAEMON == rust ]] && need=yes
prepare_share "$RUN" $need 1:127.0.0.1
echo "$DAEMON" >"$RUN/share/conf/daemon1"
# CEILING=1: after plocks.py, its pairs again against plock_answer (the daemon stopped)
[[ -n ${CEILING_WAYS:-} ]] && CEILING=${CEILING:-1}
if [[ ${CEILING:-0} == 1 || ${CEILING:-0} == variants ]]; then
    (cd "$repo" && cargo build -q --release -p dlm-tests --bin plock_answer)
    cp "$repo/target/release/plock_answer" "$RUN/share/bin/"
    touch "$RUN/share/conf/ceiling"
    [[ $CEILING == variants ]] && touch "$RUN/share/conf/ceiling_variants"
    [[ -n ${CEILING_WAYS:-} ]] && echo "$CEILING_WAYS" >"$RUN/share/conf/ceiling_ways"
fi
# RENICE=<n>: the daemon's thread that reads the plock device (ours: dlm_plock) at nice n
# once it runs (an experiment)
[[ -n ${RENICE:-} ]] && echo "$RENICE" >"$RUN/share/conf/renice"
# DLMCONF: more dlm.conf lines (e.g. plock_ownership=1 for Debian's daemon)
[[ -n ${DLMCONF:-} ]] && printf '%s\n' "$DLMCONF" >>"$RUN/share/conf/dlm.conf"
qemu-img create -q -f raw "$RUN/gfs2.img" 1G
start=$SECONDS
vm "$RUN" 1 ""
echo "VM ran $((SECONDS - start)) s; results in $RUN/share/out (kept if the run fails, or with KEEP_RUN=1)"
out=$RUN/share/out
for f in threads.txt times.txt plocks.txt ceiling.txt ceilings.txt uevents.txt rss_kb.txt ls.txt; do
    [[ -f $out/$f ]] && { echo "--- $f"; cat "$out/$f"; }
done
[[ -f $out/dump.txt ]] && echo "--- dump.txt: $(wc -l <"$out/dump.txt") lines"
# ours: what the plock device's reader learned for its spin, after plocks.py
[[ -f $out/metrics.txt ]] && { echo "--- spin and looks"; grep -E "^dlm_plock_(spin|look)" "$out/metrics.txt" || true; }
# ours came from the package: installed over Debian's (refused while Debian's daemon ran),
# removed again, Debian's daemon running after it
if [[ $DAEMON == rust ]]; then
    echo "--- package.txt"
    cat "$out/package.txt" 2>/dev/null || true
    [[ $(grep -c ' ok$' "$out/package.txt" 2>/dev/null) -eq 8 ]] || exit 1
    # the dump of 17,350 locks (over 1 MiB): ours whole, Debian's tool as against C
    echo "--- big dump: ours $(cat "$out/big_ours.txt") lines; Debian's tool: $(wc -c <"$out/big_c.txt") bytes, $(tr '\n' ' ' <"$out/big_c.err")"
    [[ $(cat "$out/big_ours.txt") -eq 17350 ]] || exit 1
    if grep -q 'dlm_tool[.a-z]* 4\.2' "$out/big_c.err"; then
        grep -q '^exit 0' "$out/big_c.err" && [[ $(wc -c <"$out/big_c.txt") -le 1048576 ]] || exit 1
    else
        grep -q '^failed: No space left on device' "$out/big_c.err" && grep -q '^exit 1' "$out/big_c.err" || exit 1
    fi
fi
# every check passed, the plock load beside the uevent burst ended and the daemon runs on,
# the dump read through Debian's dlm_tool has the 350 held locks, and the VM got to the end
grep -q '^RESULT ok' "$out/plocks.txt" 2>/dev/null &&
    grep -q '^load exit 0' "$out/uevents.txt" && grep -qx 'active' "$out/uevents.txt" &&
    [[ $(wc -l <"$out/dump.txt") -eq 350 ]] &&
    grep -q 'name          gfs0' "$out/ls.txt" &&
    [[ -f $out/done ]]
