#!/usr/bin/env bash
# The main job, as far as it exists today: our dlm_controld on a fake kernel, on one node
# (embedded group), joining and leaving two lockspaces while the fake kernel shows every
# configfs/sysfs write the daemon makes. The three-node cluster demo (namespaces, corosync,
# a plock workload, a node killed) replaces this when the cluster work lands.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
echo "building (release)…"
cargo build --workspace --locked --release --quiet
root=$(mktemp -d /tmp/dlm-demo.XXXXXX)
daemon_pid=""
cleanup() {
    if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
    rm -rf "$root"
}
trap cleanup EXIT
status=0
target/release/fake_kernel "$root" --cycle alpha beta &
kernel_pid=$!
sleep 0.2
target/release/dlm_controld --kernel-root "$root" --cluster embedded --foreground &
daemon_pid=$!
for _ in $(seq 300); do
    [[ -e $root/cycle.done ]] && break
    kill -0 "$kernel_pid" 2>/dev/null || break
    sleep 0.1
done
[[ -e $root/cycle.done ]] || status=1
echo
echo "stopping dlm_controld (SIGTERM; it has no lockspace left, so it exits)"
kill -TERM "$daemon_pid" 2>/dev/null || true
wait "$daemon_pid" || status=$?
daemon_pid=""
wait "$kernel_pid" || status=$?
if [[ $status == 0 ]]; then
    echo
    echo "demo finished: both lockspaces joined and left with the C daemon's bytes"
else
    echo "demo FAILED (status $status)" >&2
fi
exit "$status"
