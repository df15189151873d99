#!/usr/bin/env bash
# One VM with Debian 12's kernel (real DLM and gfs2 modules), corosync on one node, and a
# dlm_controld: DAEMON=rust (ours, built here, installed over Debian's with our unit) or
# DAEMON=c (Debian's 4.2.0); PROFILE=dev uses the debug build. Runs guest/test.sh and prints
# its results; exits 0 only if every check passed. TCG emulation (this host's /dev/kvm
# cannot boot a stock kernel). Build first: build-image.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
DAEMON=${DAEMON:-rust}
RUN=${RUN:-$(mktemp -d /tmp/dlm-vm.XXXXXX)}
need=no
[[ $DAEMON == rust ]] && need=yes
prepare_share "$RUN" $need 1:127.0.0.1
echo "$DAEMON" >"$RUN/share/conf/daemon1"
# DLMCONF: more dlm.conf lines (e.g. plock_ownership=1 for Debian's daemon)
[[ -n ${DLMCONF:-} ]] && printf '%s\n' "$DLMCONF" >>"$RUN/share/conf/dlm.conf"
qemu-img create -q -f raw "$RUN/gfs2.img" 1G
start=$SECONDS
vm "$RUN" 1 ""
echo "VM ran $((SECONDS - start)) s; results in $RUN/share/out"
out=$RUN/share/out
for f in threads.txt times.txt plocks.txt uevents.txt rss_kb.txt ls.txt; do
    [[ -f $out/$f ]] && { echo "--- $f"; cat "$out/$f"; }
done
[[ -f $out/dump.txt ]] && echo "--- dump.txt: $(wc -l <"$out/dump.txt") lines"
# every check passed, the plock load beside the uevent burst ended and the daemon runs on,
# the dump read through Debian's dlm_tool has the 350 held locks, and the VM got to the end
grep -q '^RESULT ok' "$out/plocks.txt" 2>/dev/null &&
    grep -q '^load exit 0' "$out/uevents.txt" && grep -qx 'active' "$out/uevents.txt" &&
    [[ $(wc -l <"$out/dump.txt") -eq 350 ]] &&
    grep -q 'name          gfs0' "$out/ls.txt" &&
    [[ -f $out/done ]]
