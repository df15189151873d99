#!/usr/bin/env bash
# Runs every test of the workspace. On a fresh Debian 12 machine, as root, this is the
# only command needed: it installs the system packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo test --workspace --locked
# every interleaving of small clusters with one fault (dlm_controld/tests/native_explore.rs):
# a release build, which a debug one is too slow for
cargo test --locked --release -p dlm_controld --test native_explore -- --nocapture
# the fuzz harnesses replay their seeds (fuzz/seeds; an ordinary test, no libFuzzer)
cargo test --manifest-path fuzz/Cargo.toml --locked
# the real kernel (tests/vm/README.md): our Debian package (scripts/deb.sh) on Debian 12's
# kernel in qemu under gfs2, installed over Debian's daemon and removed again
bash tests/vm/build-image.sh
bash tests/vm/run-one.sh
# two real kernels on one gfs2 disk: ours beside Debian's C daemon 4.2.0
bash tests/vm/run-two.sh
# a rolling upgrade with gfs2 in use: both on C, one node then the other to our package,
# then one back to C, the other node's load and locks running on throughout
UPGRADE=1 bash tests/vm/run-two.sh
# fencing that powers the victim off: node 2's daemon killed with gfs2 in use, node 1 must
# fence it (the host stops node 2's VM) before granting node 2's range
FENCE=1 bash tests/vm/run-two.sh
# the same with node 2's kernel stopped dead instead of its daemon
FENCE=crash bash tests/vm/run-two.sh
# corosync's traffic cut between the two (nftables): both stay quorate (two_node) and race
# to fence; the survivor grants the other's range only once the host has powered it off,
# then the cut heals and the victim, booted again, rejoins with the survivor's table
PARTITION=1 bash tests/vm/run-two.sh
# two minutes of mixed load on ours and C 4.2.0 with udevadm trigger in a loop on both:
# tables identical every minute, every request answered (SOAK=600: the ten-minute soak)
DAEMON2=c SOAK=120 bash tests/vm/run-two.sh
# the nemesis (issue 51), short: ours on both nodes, native mode on, workers checking every
# byte they hold of shared gfs2 files while one node unmounts and mounts, then one node is
# fenced (its daemon killed, its kernel crashed or corosync cut: drawn) and rejoins; no
# violation, every request answered, identical tables at each quiet point (NEMESIS=600:
# the ten-minute run, docs/real-kernel.md)
NEMESIS=120 NEMESIS_COUNT=2 NEMESIS_GAP="5 8" NEMESIS_FAULTS="umount fenced" bash tests/vm/nemesis.sh
# Debian 13 (kernel 6.12, dlm 4.3.0): the same on one node, then two nodes with ours beside
# C 4.3.0 and an interrupted F_SETLKW each way (the kernel's CANCEL)
SUITE=trixie bash tests/vm/build-image.sh
SUITE=trixie bash tests/vm/run-one.sh
SUITE=trixie CANCEL=1 DLMCONF=c_peers_apply_cancel=1 bash tests/vm/run-two.sh
# the cluster stack users run over the daemon, with Debian's packages (tests/vm/run-stack.sh;
# every run on both suites, ours on both and beside C: `bash tests/vm/run-stack.sh all`):
# Pacemaker with the controld clone, gfs2 as a cloned Filesystem and a node fenced through
# dlm_stonith; ocfs2 on the pcmk user stack with ours beside C
STACK=1 bash tests/vm/build-image.sh
bash tests/vm/run-stack.sh pacemaker
DAEMON2=c bash tests/vm/run-stack.sh ocfs2
