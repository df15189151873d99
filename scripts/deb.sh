#!/usr/bin/env bash
# Builds the Debian package dlm-controld-rs (debian/) with dpkg-buildpackage and debhelper:
# target/debian/dlm-controld-rs_<version>_<arch>.deb. Install it with
# `apt install ./target/debian/dlm-controld-rs_*.deb` (docs/operating.md, "Installing").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
out=target/debian
mkdir -p "$out"
# dpkg-buildpackage writes its results beside the source tree: gather ours from a copy of
# the changes file's list, so other files there are never touched
dpkg-buildpackage -b -uc -us --no-sign >"$out/build.log" 2>&1 || {
    tail -40 "$out/build.log" >&2
    exit 1
}
changes=$(ls -t ../dlm-controld-rs_*.changes | head -1)
for f in $(awk '/^Files:/ {on=1; next} /^[^ ]/ {on=0} on {print $5}' "$changes"); do
    mv "../$f" "$out/"
done
mv "$changes" ../dlm-controld-rs_*.buildinfo "$out/" 2>/dev/null || true
ls "$out"/dlm-controld-rs_*.deb
