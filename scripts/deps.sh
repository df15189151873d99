#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the tests need. Safe to re-run.
set -euo pipefail
if [[ "${DLM_DEPS_INSTALLED:-0}" == 1 ]]; then
    exit 0
fi
if [[ $(id -u) != 0 ]]; then
    echo "deps.sh: run as root (apt-get install)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
packages=(
    gcc libc6-dev pkg-config      # the layout test compiles C against the real headers
    linux-libc-dev                # linux/dlm_plock.h, linux/dlm_device.h
    libdlmcontrol-dev             # libdlmcontrol.h (dlmc_lockspace, dlmc_node)
    corosync libcpg-dev libcmap-dev libquorum-dev libvotequorum-dev libcfg-dev
    iproute2                      # network namespaces for the multi-node tests
    dlm-controld                  # the real dlm_tool 4.2.0 (a client) and the C dlm_controld (a peer)
    systemd                       # systemd-analyze verifies systemd/dlm.service
    util-linux                    # setpriv: a non-root client of the main socket
    debhelper dpkg-dev            # scripts/deb.sh builds the Debian package
)
echo "installing system packages (apt-get)…"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
