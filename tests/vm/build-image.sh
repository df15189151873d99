#!/usr/bin/env bash
# Builds what a real-kernel run needs, in $VMCACHE (default /var/cache/dlm-vm, outside the
# repository): qemu 7.2 extracted from Debian's packages (it cannot be installed beside the
# host's qemu-utils 10), Debian 12's kernel (never installed on the host), a hand-made
# initramfs (static busybox and the modules to mount an ext4 root on virtio), and a bookworm
# root file system with corosync, Debian's C dlm-controld 4.2.0 (its dlm_tool, and the C
# daemon to compare with) and gfs2-utils. Run as root on Debian 12. About a minute warm.
set -euo pipefail
VMCACHE=${VMCACHE:-/var/cache/dlm-vm}
# the kernel Debian 12 ships now (what linux-image-amd64 depends on), unless told
KVER=${KVER:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {sub("linux-image-", "", $2); print $2; exit}')}
[[ -n $KVER ]] || { echo "no kernel version from apt-cache; set KVER" >&2; exit 1; }
mkdir -p "$VMCACHE"/{debs,qemu,kernel}
cd "$VMCACHE"
# an image built for another kernel is rebuilt
if [[ -f kver && $(cat kver) != "$KVER" ]]; then
    rm -f initrd.img root.img
fi

host_packages() {
    local want="mmdebstrap busybox-static seabios ipxe-qemu qemu-system-data e2fsprogs cpio"
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
    [[ -x qemu/usr/bin/qemu-system-x86_64 ]] && return
    (cd debs && apt-get download qemu-system-x86 qemu-system-common)
    for d in debs/qemu-system-x86_*.deb debs/qemu-system-common_*.deb; do dpkg-deb -x "$d" qemu; done
    # firmware, found relative to the binary
    mkdir -p qemu/usr/share/qemu
    for f in /usr/share/qemu/* /usr/share/seabios/* /usr/lib/ipxe/qemu/*; do
        [[ -e qemu/usr/share/qemu/$(basename "$f") ]] || ln -s "$f" qemu/usr/share/qemu/
    done
}

kernel_tree() {
    [[ -f kernel/boot/vmlinuz-$KVER ]] && return
    (cd debs && apt-get download "linux-image-$KVER")
    dpkg-deb -x debs/linux-image-"$KVER"_*.deb kernel
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
                cp "$m" $d/mods/"$b"
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

rootfs() {
    [[ -f root.img ]] && return
    rm -rf rootfs
    mmdebstrap --variant=apt --quiet \
        --include=systemd-sysv,udev,kmod,iproute2,procps,psmisc,python3,corosync,dlm-controld,gfs2-utils \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook="mkdir -p \"\$1/lib/modules\" && cp -a kernel/lib/modules/$KVER \"\$1/lib/modules/\"" \
        --customize-hook="chroot \"\$1\" systemctl disable corosync dlm >/dev/null 2>&1 || true" \
        --customize-hook="chroot \"\$1\" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer >/dev/null 2>&1 || true" \
        --customize-hook="echo 'host /host 9p trans=virtio,version=9p2000.L,msize=262144,nofail 0 0' >>\"\$1/etc/fstab\"" \
        --customize-hook="mkdir -p \"\$1/host\"" \
        --customize-hook="printf '[Unit]\nDescription=dlm real-kernel test\nAfter=local-fs.target host.mount\n[Service]\nType=exec\nExecStart=/bin/sh /host/guest/test.sh\nStandardOutput=journal+console\nStandardError=journal+console\n[Install]\nWantedBy=multi-user.target\n' >\"\$1/etc/systemd/system/vmtest.service\" && chroot \"\$1\" systemctl enable vmtest >/dev/null 2>&1" \
        --customize-hook="echo 'root:root' | chroot \"\$1\" chpasswd" \
        bookworm rootfs
    mkfs.ext4 -q -d rootfs -L root root.img 1200M
    rm -rf rootfs
}

host_packages
qemu_tree
kernel_tree
initrd
rootfs
echo "$KVER" >kver
echo "built in $VMCACHE for $KVER"
