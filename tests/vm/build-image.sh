#!/usr/bin/env bash
# Builds what a real-kernel run needs, in $VMCACHE (default /var/cache/dlm-vm, outside the
# repository): qemu 7.2 extracted from Debian's packages (it cannot be installed beside the
# host's qemu-utils 10), Debian 12's kernel (never installed on the host), a hand-made
# initramfs (static busybox and the modules to mount an ext4 root on virtio), and a bookworm
# root file system with corosync, Debian's C dlm-controld 4.2.0 (its dlm_tool, and the C
# daemon to compare with) and gfs2-utils. Run as root on Debian 12. About a minute warm.
#
# SUITE=trixie builds a Debian 13 image instead (kernel 6.12, corosync 3.1.9, dlm-controld
# 4.3.0), in $VMCACHE/trixie, from the host's Debian mirror (its own package lists, so the
# host's apt is not touched); the qemu tree is shared.
#
# STACK=1 builds, beside the suite's image (in $VMCACHE/stack, or $VMCACHE/<suite>/stack),
# one with the cluster stack users run over the daemon too: pacemaker, crmsh and
# resource-agents, ocfs2-tools, lvm2-lockd, ctdb (for ping_pong); run-stack.sh boots it. The
# other runs keep their smaller image.
set -euo pipefail
SUITE=${SUITE:-bookworm}
VMCACHE=${VMCACHE:-/var/cache/dlm-vm}
STACK=${STACK:-0}
IMG=$VMCACHE
[[ $SUITE == bookworm ]] || IMG=$VMCACHE/$SUITE
[[ $STACK == 1 ]] && IMG=$IMG/stack
mkdir -p "$VMCACHE"/{debs,qemu} "$IMG"/kernel

# the host's Debian mirror, from its apt sources
mirror() {
    local m
    m=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [[ -n $m ]] || m=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list)
    echo "$m"
}

# suite_apt CMD...: apt-get or apt-cache against SUITE's archive, with lists of its own
suite_apt() {
    local d=$VMCACHE/apt-$SUITE
    mkdir -p "$d"/lists/partial "$d"/cache/archives/partial
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(mirror) $SUITE main" >"$d/sources.list"
    "$@" -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
        -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache"
}

apt_q=(apt-cache)
if [[ $SUITE != bookworm ]]; then
    suite_apt apt-get update -qq
    apt_q=(suite_apt apt-cache)
fi
# the kernel the suite ships now (what linux-image-amd64 depends on), unless told
KVER=${KVER:-$("${apt_q[@]}" depends linux-image-amd64 | awk '/Depends: linux-image-/ {sub("linux-image-", "", $2); print $2; exit}')}
[[ -n $KVER ]] || { echo "no kernel version from apt-cache; set KVER" >&2; exit 1; }
cd "$IMG"
# an image built for another kernel is rebuilt
if [[ -f kver && $(cat kver) != "$KVER" ]]; then
    rm -f initrd.img root.img
fi

host_packages() {
    local want="mmdebstrap busybox-static seabios ipxe-qemu qemu-system-data e2fsprogs cpio xz-utils"
    local libs
    libs=$(apt-cache depends qemu-system-x86 qemu-system-common | awk '/^ +Depends: lib|^ +Depends: zlib/ {print $2}' | sort -u)
    # never let apt remove anything of the host's (qemu-system-x86 would remove qemu-utils)
    if apt-get install -s -y $want $libs | grep -q '^Remv'; then
        echo "apt would remove host packages; refusing" >&2
        exit 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $want $libs >/dev/null
}

qemu_tree() {
    local q=$VMCACHE/qemu
    [[ -x $q/usr/bin/qemu-system-x86_64 ]] && return
    (cd "$VMCACHE/debs" && apt-get download qemu-system-x86 qemu-system-common)
    for d in "$VMCACHE"/debs/qemu-system-x86_*.deb "$VMCACHE"/debs/qemu-system-common_*.deb; do
        dpkg-deb -x "$d" "$q"
    done
    # firmware, found relative to the binary
    mkdir -p "$q/usr/share/qemu"
    for f in /usr/share/qemu/* /usr/share/seabios/* /usr/lib/ipxe/qemu/*; do
        [[ -e $q/usr/share/qemu/$(basename "$f") ]] || ln -s "$f" "$q/usr/share/qemu/"
    done
}

kernel_tree() {
    [[ -f kernel/boot/vmlinuz-$KVER ]] && return
    local get=(apt-get)
    [[ $SUITE == bookworm ]] || get=(suite_apt apt-get)
    (cd "$VMCACHE/debs" && "${get[@]}" download "linux-image-$KVER")
    dpkg-deb -x "$VMCACHE"/debs/linux-image-"$KVER"_*.deb kernel
    # merged /usr (trixie): the modules are under usr/lib
    [[ -d kernel/lib/modules/$KVER ]] || { mkdir -p kernel/lib && cp -a kernel/usr/lib/modules kernel/lib/; }
    depmod -b kernel "$KVER"
}

initrd() {
    [[ -f initrd.img ]] && return
    local d=initrd.d
    rm -rf $d && mkdir -p $d/{bin,dev,proc,sys,newroot,mods}
    cp /bin/busybox $d/bin/busybox
    for a in sh mount umount insmod switch_root mkdir sleep; do ln -s busybox $d/bin/$a; done
    local i=0
    : >$d/mods/order
    modprobe -d kernel -S "$KVER" --show-depends -a virtio_pci virtio_blk ext4 crc32c_generic 9p 9pnet_virtio |
        awk '/^insmod/ {print $2}' | while read -r m; do
            b=$(printf '%02d-%s' $i "$(basename "$m")")
            if ! grep -q "$(basename "$m")$" $d/mods/order; then
                # busybox's insmod takes no compressed module (trixie's are .ko.xz)
                case $b in
                *.xz) b=${b%.xz} && xz -dc "$m" >$d/mods/"$b" ;;
                *) cp "$m" $d/mods/"$b" ;;
                esac
                echo "$b" >>$d/mods/order
                i=$((i + 1))
            fi
        done
    cat >$d/init <<'INIT'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
while read m; do insmod /mods/$m 2>/dev/null; done </mods/order
for i in 1 2 3 4 5 6 7 8 9 10; do [ -b /dev/vda ] && break; sleep 0.2; done
mount -t ext4 /dev/vda /newroot || sh
umount /proc /sys
exec switch_root /newroot /sbin/init
INIT
    chmod +x $d/init
    (cd $d && find . | cpio -o -H newc 2>/dev/null | gzip) >initrd.img
}

# the image's packages (an image built with another list is built again; strace for
# profiling a daemon in the guest, STRACE=1 in a bench)
PKGS=systemd-sysv,udev,kmod,iproute2,nftables,procps,psmisc,python3,strace${EXTRA_PKGS:+,$EXTRA_PKGS},corosync,dlm-controld,gfs2-utils
[[ $STACK == 1 ]] && PKGS=$PKGS,pacemaker,pacemaker-cli-utils,crmsh,resource-agents,ocfs2-tools,lvm2-lockd,ctdb

rootfs() {
    [[ -f root.img && $(cat root.pkgs 2>/dev/null) == "$PKGS" ]] && return
    rm -rf rootfs
    # bookworm from the host's apt sources as they are; another suite from the same mirror
    local mirrors=()
    [[ $SUITE == bookworm ]] || mirrors=("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(mirror) $SUITE main")
    mmdebstrap --variant=apt --quiet \
        --include="$PKGS" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook="mkdir -p \"\$1/lib/modules\" && cp -a kernel/lib/modules/$KVER \"\$1/lib/modules/\"" \
        --customize-hook="for u in corosync dlm pacemaker ctdb lvmlockd lvmlocks o2cb ocfs2; do chroot \"\$1\" systemctl disable \$u >/dev/null 2>&1 || true; done" \
        --customize-hook="chroot \"\$1\" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer >/dev/null 2>&1 || true" \
        --customize-hook="echo 'host /host 9p trans=virtio,version=9p2000.L,msize=262144,nofail 0 0' >>\"\$1/etc/fstab\"" \
        --customize-hook="mkdir -p \"\$1/host\"" \
        --customize-hook="printf '[Unit]\nDescription=dlm real-kernel test\nAfter=local-fs.target host.mount\n[Service]\nType=exec\nExecStart=/bin/sh /host/guest/test.sh\nStandardOutput=journal+console\nStandardError=journal+console\n[Install]\nWantedBy=multi-user.target\n' >\"\$1/etc/systemd/system/vmtest.service\" && chroot \"\$1\" systemctl enable vmtest >/dev/null 2>&1" \
        --customize-hook="echo 'root:root' | chroot \"\$1\" chpasswd" \
        "$SUITE" rootfs "${mirrors[@]}"
    rm -f root.img
    mkfs.ext4 -q -d rootfs -L root root.img "$([[ $STACK == 1 ]] && echo 2500M || echo 1500M)"
    rm -rf rootfs
    echo "$PKGS" >root.pkgs
}

host_packages
qemu_tree
kernel_tree
initrd
rootfs
echo "$KVER" >kver
echo "built in $IMG for $KVER ($SUITE)"
