# Shared by run-one.sh and run-two.sh (sourced): the run's share directory and one VM.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
VMCACHE=${VMCACHE:-/var/cache/dlm-vm}
# SUITE=trixie: the Debian 13 image of `SUITE=trixie build-image.sh`
SUITE=${SUITE:-bookworm}
IMG=$VMCACHE
[[ $SUITE == bookworm ]] || IMG=$VMCACHE/$SUITE
# STACK=1: the image with the cluster stack (STACK=1 build-image.sh; run-stack.sh)
[[ ${STACK:-0} == 1 ]] && IMG=$IMG/stack
KVER=${KVER:-$(cat "$IMG/kver")}

# own_run PREFIX: RUN, unless the caller gave one, is a new directory under /tmp that is
# removed when the script exits 0 (a run leaves ~60 MB: disk images, logs), so repeated
# test runs do not fill /tmp; a failed run, or any run with KEEP_RUN=1, keeps it and says
# where. A RUN the caller gave is the caller's and is always kept.
own_run() {
    [[ -n ${RUN:-} ]] && return
    RUN=$(mktemp -d "/tmp/$1.XXXXXX")
    trap 'rc=$?; kill_vms "$RUN"; [[ $rc == 0 ]] || show_guests "$RUN"; if [[ $rc == 0 && ${KEEP_RUN:-0} != 1 ]]; then rm -rf "$RUN"; else echo "run kept: $RUN"; fi; exit $rc' EXIT
}

# kill_vms RUN: any VM of the run still running when its script ends (a script that
# stopped at an error would otherwise leave them to their timeout)
kill_vms() {
    local p
    for p in $(pgrep -f "qemu-system-x86_64 .*$1/" || true); do kill -KILL "$p" 2>/dev/null || true; done
}

# show_guests RUN: where each guest was when a run failed (the CI keeps nothing but its
# log): the last lines of each node's traced test.log and of each VM's console
show_guests() {
    local f
    for f in "$1"/share/out/*/test.log "$1"/share/out/test.log "$1"/console-*.log; do
        [[ -f $f ]] || continue
        echo "--- last lines of ${f#"$1"/}"
        tail -n 25 "$f" | cut -c1-300
    done
}

# prepare_share RUN NEED_RUST: the 9p share (guest scripts; when NEED_RUST is yes our Debian
# package, built by scripts/deb.sh, and our dlm_tool beside it for the nodes that run C;
# dlm.conf), and `corosync.conf` for the nodes given as "id:addr" words.
prepare_share() {
    local run=$1 need_rust=$2
    shift 2
    mkdir -p "$run"/share/{guest,bin,conf,out,sync,debs}
    cp "$here"/guest/*.sh "$here"/guest/*.py "$run/share/guest/"
    if [[ $need_rust == yes ]]; then
        local deb
        deb=$(bash "$repo/scripts/deb.sh" | tail -1)
        cp "$deb" "$run/share/debs/"
        cp "$repo/target/release/dlm_tool" "$run/share/bin/"
    fi
    printf 'enable_fencing=0\n' >"$run/share/conf/dlm.conf"
    {
        printf 'totem {\n    version: 2\n    cluster_name: vmclust\n    transport: knet\n'
        printf '    crypto_cipher: none\n    crypto_hash: none\n}\nnodelist {\n'
        local n
        for n in "$@"; do
            printf '    node {\n        ring0_addr: %s\n        nodeid: %s\n    }\n' "${n#*:}" "${n%%:*}"
        done
        printf '}\nquorum {\n    provider: corosync_votequorum\n'
        [[ $# -eq 2 ]] && printf '    two_node: 1\n'
        printf '}\nlogging {\n    to_syslog: yes\n}\n'
    } >"$run/share/conf/corosync.conf"
}

# vm RUN NAME APPEND [qemu args...]: one VM (TCG, 1 vCPU, 1 GiB; SMP=<n> vCPUs) on a qcow2
# overlay of the image, the run's gfs2 disk (shareable) and share; ends when the guest
# powers off.
vm() {
    local run=$1 name=$2 append=$3
    shift 3
    qemu-img create -q -f qcow2 -F raw -b "$IMG/root.img" "$run/root-$name.qcow2"
    timeout "${VM_TIMEOUT:-1500}" "$VMCACHE/qemu/usr/bin/qemu-system-x86_64" \
        -accel tcg -m 1024 -smp "${SMP:-1}" -no-reboot -display none -monitor none \
        -serial "file:$run/console-$name.log" \
        -kernel "$IMG/kernel/boot/vmlinuz-$KVER" -initrd "$IMG/initrd.img" \
        -append "console=ttyS0 quiet systemd.show_status=0 $append" \
        -drive "file=$run/root-$name.qcow2,if=none,id=root,format=qcow2" \
        -device virtio-blk-pci,drive=root,addr=0x4 \
        -drive "file=$run/gfs2.img,if=none,id=data,format=raw,cache=none,file.locking=off" \
        -device virtio-blk-pci,drive=data,addr=0x5,share-rw=on \
        -fsdev "local,id=host,path=$run/share,security_model=none" \
        -device virtio-9p-pci,fsdev=host,mount_tag=host,addr=0x6 "$@" || true
}

# net N: node N's end of two VMs' network, UDP datagrams on loopback (node 1 on PORT, node
# 2 on PORT+1): connectionless, so either VM can be powered off and booted again; the guest
# finds its device by this MAC (guest/lib.sh net_up)
net() {
    local me=$((PORT + $1 - 1)) peer=$((PORT + 2 - $1))
    echo "-netdev socket,id=n0,udp=127.0.0.1:$peer,localaddr=127.0.0.1:$me -device virtio-net-pci,netdev=n0,mac=52:54:00:00:09:0$1,addr=0x7"
}
