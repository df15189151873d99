#!/usr/bin/env bash
# The main job. The three-node demo cluster (issue "whole-cluster proof") is not built yet;
# until then this builds the workspace and says what the demo will be.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build --workspace --locked --release
cat <<'TEXT'

Built. The demo is not written yet. When it is, this command will:
  1. create three network namespaces with real corosync in each,
  2. start our dlm_controld on a fake kernel in each and join a lockspace,
  3. run a plock workload of simulated processes across the nodes, showing
     `dlm_tool ls`, `dlm_tool plocks` and the throughput,
  4. kill one node and show the survivors recovering,
  5. remove everything it created.
TEXT
exit 1
