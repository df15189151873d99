#!/usr/bin/env bash
# One VM with Debian 12's kernel (real DLM and gfs2 modules), corosync on one node, and a
# dlm_controld: DAEMON=rust (ours, built here, installed over Debian's with our unit) or
# DAEMON=c (Debian's 4.2.0); PROFILE=dev uses the debug build. Runs guest/test.sh and prints
# its results; exits 0 only if every check passed. TCG emulation (this
# host's /dev/kvm cannot boot a stock kernel), 1 vCPU, 1 GiB. Build first: build-image.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
VMCACHE=${VMCACHE:-/var/cache/dlm-vm}
KVER=${KVER:-6.1.0-57-amd64}
DAEMON=${DAEMON:-rust}
RUN=${RUN:-$(mktemp -d /tmp/dlm-vm.XXXXXX)}
mkdir -p "$RUN"/share/{guest,bin,conf,out}
cp "$here"/guest/* "$RUN/share/guest/"
PROFILE=${PROFILE:-release}
if [[ $DAEMON == rust ]]; then
    (cd "$repo" && cargo build --profile "$PROFILE" --locked -p dlm_controld --quiet)
    dir=$PROFILE
    [[ $PROFILE == dev ]] && dir=debug
    cp "$repo/target/$dir/dlm_controld" "$RUN/share/bin/"
    cp "$repo/systemd/dlm.service" "$RUN/share/conf/"
fi
echo "$DAEMON" >"$RUN/share/conf/daemon"
printf 'enable_fencing=0\n' >"$RUN/share/conf/dlm.conf"
cat >"$RUN/share/conf/corosync.conf" <<'CONF'
totem {
    version: 2
    cluster_name: vmclust
    transport: knet
    crypto_cipher: none
    crypto_hash: none
}
nodelist {
    node {
        ring0_addr: 127.0.0.1
        nodeid: 1
    }
}
quorum {
    provider: corosync_votequorum
}
logging {
    to_syslog: yes
}
CONF
qemu-img create -q -f qcow2 -F raw -b "$VMCACHE/root.img" "$RUN/root.qcow2"
qemu-img create -q -f raw "$RUN/gfs2.img" 1G
start=$SECONDS
timeout "${VM_TIMEOUT:-1200}" "$VMCACHE/qemu/usr/bin/qemu-system-x86_64" \
    -accel tcg -m 1024 -smp 1 -no-reboot -display none -monitor none \
    -serial "file:$RUN/console.log" \
    -kernel "$VMCACHE/kernel/boot/vmlinuz-$KVER" -initrd "$VMCACHE/initrd.img" \
    -append "console=ttyS0 quiet systemd.show_status=0" \
    -drive "file=$RUN/root.qcow2,if=none,id=root,format=qcow2" -device virtio-blk-pci,drive=root,addr=0x4 \
    -drive "file=$RUN/gfs2.img,if=none,id=data,format=raw" -device virtio-blk-pci,drive=data,addr=0x5 \
    -fsdev "local,id=host,path=$RUN/share,security_model=none" \
    -device virtio-9p-pci,fsdev=host,mount_tag=host,addr=0x6 || true
echo "VM ran $((SECONDS - start)) s; results in $RUN/share/out"
out=$RUN/share/out
for f in times.txt plocks.txt rss_kb.txt ls.txt; do
    [[ -f $out/$f ]] && { echo "--- $f"; cat "$out/$f"; }
done
[[ -f $out/dump.txt ]] && echo "--- dump.txt: $(wc -l <"$out/dump.txt") lines"
# every check passed, the dump read through Debian's dlm_tool has the 350 held locks, and
# the VM got to the end of the test
grep -q '^RESULT ok' "$out/plocks.txt" 2>/dev/null &&
    [[ $(wc -l <"$out/dump.txt") -eq 350 ]] &&
    grep -q 'name          gfs0' "$out/ls.txt" &&
    [[ -f $out/done ]]
