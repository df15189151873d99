#!/usr/bin/env bash
# What one plock request costs each daemon, counted on the host the way TCG charges for it
# (docs/BENCHMARKS.md, "What one request costs, counted"): `vs_c` drives one daemon
# while callgrind counts (`--dump-instr=yes --collect-jumps=yes`) a window of WINDOW
# seconds of it, then `cg_request` prints, per request, the instructions run, the distinct
# ones, the calls and the calls and jumps to another page, by object, and the functions
# with the most distinct instructions. KIND is vs_c's kind (1 C's default mode, 2 C's
# ownership mode, 3 ours C-compatible, 4 ours native) and CASE its case (0 own files,
# 1 one file, 2 contended, 3 one process alone, the default). Needs valgrind; root
# (network namespaces).
#   KIND=4 bash tests/prof/callgrind.sh            # ours, native, one process alone
#   KIND=2 bash tests/prof/callgrind.sh            # C's ownership mode, the same
# The profile stays in $OUT (default /tmp/dlm-prof) for other tools.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
KIND=${KIND:-4} CASE=${CASE:-3} WINDOW=${WINDOW:-8} OUT=${OUT:-/tmp/dlm-prof}
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed" >&2; exit 1; }
(cd "$repo" && cargo build -q --release -p dlm_controld -p dlm-tests --bins)
rm -rf "$OUT" && mkdir -p "$OUT"
vg="valgrind --tool=callgrind --vgdb=yes --collect-jumps=yes --dump-instr=yes --callgrind-out-file=$OUT/cg.%p"
# ours through a wrapper (VS_DAEMON_BIN), C's through the shim's C_DAEMON_WRAP
printf '#!/bin/sh\nexec %s %s "$@"\n' "$vg" "$repo/target/release/dlm_controld" >"$OUT/dlm_controld"
chmod +x "$OUT/dlm_controld"
# the daemon's requests: ours are each taken by Shell::plock, C's each answered by a write
case $KIND in 1 | 2) requests="=write" ;; *) requests="Shell::plock" ;; esac
VS_DAEMON_BIN=$OUT/dlm_controld C_DAEMON_WRAP=$vg VS_KINDS=$KIND VS_CASES=$CASE VS_ROUNDS=1 \
    VS_PROBE_SECS=0 taskset -c 0 "$repo/target/release/vs_c" $((WINDOW + 30)) >"$OUT/vs_c.txt" 2>&1 &
driver=$!
# the daemon under callgrind (C's forks a helper: the oldest is the daemon), then a steady
# load: the window starts with the counts zeroed and ends with them dumped
pid=
for _ in $(seq 1 60); do
    sleep 1
    pid=$(pgrep -o -f "valgrind.bin --tool=callgrind.*$OUT" || true)
    [[ -n $pid ]] && break
done
[[ -n $pid ]] || { echo "callgrind.sh: no daemon under callgrind" >&2; kill "$driver"; exit 1; }
sleep 15
vgdb --pid="$pid" zero >/dev/null
sleep "$WINDOW"
vgdb --pid="$pid" dump >/dev/null
wait "$driver" || true
profile=$(ls -S "$OUT"/cg."$pid".* | head -1)
echo "profile: $profile"
"$repo/target/release/cg_request" "$profile" "$requests" "${TOP:-25}"
