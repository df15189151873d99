#!/usr/bin/env bash
# Runs every test of the workspace. On a fresh Debian 12 machine, as root, this is the
# only command needed: it installs the system packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo test --workspace --locked
# the fuzz harnesses replay their seeds (fuzz/seeds; an ordinary test, no libFuzzer)
cargo test --manifest-path fuzz/Cargo.toml --locked
# the real kernel: Debian 12's kernel in qemu, our daemon under gfs2 (tests/vm/README.md)
bash tests/vm/build-image.sh
bash tests/vm/run-one.sh
# two real kernels on one gfs2 disk: ours beside Debian's C daemon
bash tests/vm/run-two.sh
