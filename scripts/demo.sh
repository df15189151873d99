#!/usr/bin/env bash
# The main job: a three-node cluster on this one machine. Three network namespaces on a
# bridge, real corosync in each, our dlm_controld on a fake kernel in each; a lockspace
# joined everywhere, POSIX locks from every node (one waits), the same table on every node
# (dlm_tool plocks), the waiter granted across nodes, a burst with its throughput, then
# node 3 killed, fenced by node 1 with a demo fence agent, and the survivors recovering
# without it. Exits non-zero if any step does not happen. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
echo "building (release)…"
cargo build --workspace --locked --release --quiet
exec target/release/demo_cluster
