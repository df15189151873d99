#!/usr/bin/env bash
# Two VMs with Debian 12's kernel on one shared gfs2 disk and a socket network on loopback:
# node 1 runs DAEMON1 (default rust: ours), node 2 DAEMON2 (default c: Debian's 4.2.0), so
# this is a mixed cluster on real kernels. Runs guest/test2.sh on both; exits 0 only if
# every cross-node check passed on both, both daemons dumped the same plock table, and after
# node 2's kernel stopped dead node 1 recovered alone with only its own locks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
VMCACHE=${VMCACHE:-/var/cache/dlm-vm}
KVER=${KVER:-6.1.0-57-amd64}
DAEMON1=${DAEMON1:-rust}
DAEMON2=${DAEMON2:-c}
PROFILE=${PROFILE:-release}
PORT=${PORT:-$((20000 + RANDOM % 20000))}
RUN=${RUN:-$(mktemp -d /tmp/dlm-vm2.XXXXXX)}
mkdir -p "$RUN"/share/{guest,bin,conf,out,sync}
cp "$here"/guest/* "$RUN/share/guest/"
if [[ $DAEMON1 == rust || $DAEMON2 == rust ]]; then
    (cd "$repo" && cargo build --profile "$PROFILE" --locked -p dlm_controld --quiet)
    dir=$PROFILE
    [[ $PROFILE == dev ]] && dir=debug
    cp "$repo/target/$dir/dlm_controld" "$RUN/share/bin/"
    cp "$repo/systemd/dlm.service" "$RUN/share/conf/"
fi
echo "$DAEMON1" >"$RUN/share/conf/daemon1"
echo "$DAEMON2" >"$RUN/share/conf/daemon2"
printf 'enable_fencing=0\n' >"$RUN/share/conf/dlm.conf"
cat >"$RUN/share/conf/corosync2.conf" <<'CONF'
totem {
    version: 2
    cluster_name: vmclust
    transport: knet
    crypto_cipher: none
    crypto_hash: none
}
nodelist {
    node {
        ring0_addr: 10.9.0.1
        nodeid: 1
    }
    node {
        ring0_addr: 10.9.0.2
        nodeid: 2
    }
}
quorum {
    provider: corosync_votequorum
    two_node: 1
}
logging {
    to_syslog: yes
}
CONF
qemu-img create -q -f raw "$RUN/gfs2.img" 1G
vm() {
    local n=$1 net=$2
    qemu-img create -q -f qcow2 -F raw -b "$VMCACHE/root.img" "$RUN/root$n.qcow2"
    timeout "${VM_TIMEOUT:-1500}" "$VMCACHE/qemu/usr/bin/qemu-system-x86_64" \
        -accel tcg -m 1024 -smp 1 -no-reboot -display none -monitor none \
        -serial "file:$RUN/console$n.log" \
        -kernel "$VMCACHE/kernel/boot/vmlinuz-$KVER" -initrd "$VMCACHE/initrd.img" \
        -append "console=ttyS0 quiet systemd.show_status=0 dlmnode=$n" \
        -drive "file=$RUN/root$n.qcow2,if=none,id=root,format=qcow2" -device virtio-blk-pci,drive=root,addr=0x4 \
        -drive "file=$RUN/gfs2.img,if=none,id=data,format=raw,cache=none,file.locking=off" \
        -device virtio-blk-pci,drive=data,addr=0x5,share-rw=on \
        -fsdev "local,id=host,path=$RUN/share,security_model=none" \
        -device virtio-9p-pci,fsdev=host,mount_tag=host,addr=0x6 \
        -netdev "socket,id=n0,$net" -device "virtio-net-pci,netdev=n0,mac=52:54:00:00:09:0$n,addr=0x7" || true
}
start=$SECONDS
vm 1 "listen=127.0.0.1:$PORT" &
p1=$!
sleep 2
vm 2 "connect=127.0.0.1:$PORT" &
p2=$!
wait $p1 $p2
echo "VMs ran $((SECONDS - start)) s; results in $RUN/share/out"
out=$RUN/share/out
for n in 1 2; do
    echo "=== node $n ($(cat "$RUN/share/conf/daemon$n"))"
    for f in plocks.txt ls.txt recovery.txt; do
        [[ -f $out/node$n/$f ]] && { echo "--- $f"; cat "$out/node$n/$f"; }
    done
    [[ -f $out/node$n/dump.txt ]] && echo "--- dump.txt: $(wc -l <"$out/node$n/dump.txt") lines"
done
same=no
cmp -s "$out/node1/dump.txt" "$out/node2/dump.txt" && same=yes
echo "the two daemons' dumps are byte-identical: $same"
# then node 2 failed and node 1 recovered without it
grep -q '^RESULT ok' "$out/node1/plocks.txt" && grep -q '^RESULT ok' "$out/node2/plocks.txt" &&
    [[ $same == yes && $(wc -l <"$out/node1/dump.txt") -eq 200 ]] &&
    [[ -f $out/node2/crashed ]] && grep -q '^RESULT ok' "$out/node1/recovery.txt" &&
    [[ -f $out/node1/done ]]
