# Sourced by test.sh and test2.sh inside a VM.

# CTOOL: Debian's C dlm_tool (diverted to dlm_tool.distrib while our package is installed),
# the client these runs read our daemon with.
ctool() {
    if [ -x /usr/sbin/dlm_tool.distrib ]; then
        /usr/sbin/dlm_tool.distrib "$@"
    else
        /usr/sbin/dlm_tool "$@"
    fi
}

# install_ours: our package from the share, as an administrator installs it (apt, offline:
# its dependencies are Debian's dlm-controld and corosync, already here).
install_ours() {
    apt-get install -y -q /host/debs/dlm-controld-rs_*.deb
}

# setup_node N: kernel modules, configfs, corosync.conf and dlm.conf from the share, and
# the daemon named in /host/conf/daemonN ("rust": our package installed, diverting
# Debian's binaries; "c": Debian's as installed; "c-then-rust": Debian's now, ours
# installed later by the caller).
setup_node() {
    DAEMON=$(cat /host/conf/daemon$1)
    modprobe configfs
    modprobe dlm
    modprobe gfs2
    mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
    cp /host/conf/corosync.conf /etc/corosync/corosync.conf
    mkdir -p /etc/dlm
    cp /host/conf/dlm.conf /etc/dlm/dlm.conf
    if [ "$DAEMON" = rust ] && [ -z "${INSTALL_LATER:-}" ]; then
        install_ours
        # a profiled run (PERF=1): the same build with its symbols (the package's is stripped)
        [ -f /host/conf/perf ] && cp /host/bin/dlm_controld.unstripped /usr/sbin/dlm_controld
    fi
    /usr/sbin/dlm_controld --version
}

# ours_installed: /usr/sbin/dlm_controld is ours and Debian's is diverted beside it.
ours_installed() {
    /usr/sbin/dlm_controld --version | grep -q Rust &&
        /usr/sbin/dlm_controld.distrib --version | grep -q '^dlm_controld 4\.' &&
        dpkg-divert --list /usr/sbin/dlm_tool | grep -q 'by dlm-controld-rs'
}

# debians_back: our package gone, Debian's binaries in their places, no diversion left.
debians_back() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' dlm-controld-rs 2>/dev/null)" != installed ] &&
        /usr/sbin/dlm_controld --version | grep -q '^dlm_controld 4\.' &&
        /usr/sbin/dlm_tool -V | grep -q 'dlm_tool 4\.' &&
        [ ! -e /usr/sbin/dlm_controld.distrib ] &&
        [ -z "$(dpkg-divert --list '/usr/sbin/dlm_*')" ]
}

# daemon_answers: a dlm_controld answers Debian's dlm_tool on this node.
daemon_answers() {
    ctool status | grep -q '^cluster nodeid'
}

# barrier NAME: waits until both nodes reached NAME (marks in $SYNC; $N is this node)
barrier() {
    touch $SYNC/$1.$N
    i=0
    while [ ! -f $SYNC/$1.1 ] || [ ! -f $SYNC/$1.2 ]; do
        sleep 0.2
        i=$((i + 1))
        [ $i -gt 3000 ] && { echo "barrier $1 timed out"; break; }
    done
}

# net_up N: this VM's address 10.9.0.N on its network device, found by the MAC address
# run-two.sh gave it (52:54:00:00:09:0N) once udev has named it: udev's coldplug runs beside
# the test and renames eth0 to ens7, and a name read before the rename is gone after it
# (seen in CI: the address went onto eth0, the link stayed down as "ens7", corosync never
# met the other node). Each step is checked; up to ~20 s.
net_up() {
    modprobe virtio_net 2>/dev/null
    for i in $(seq 100); do
        udevadm settle --timeout=5 2>/dev/null
        f=$(grep -l "^52:54:00:00:09:0$1\$" /sys/class/net/*/address 2>/dev/null | head -1)
        IF=${f%/address}
        IF=${IF##*/}
        if [ -n "$f" ] && ip addr replace 10.9.0.$1/24 dev "$IF" && ip link set "$IF" up &&
            ip -o addr show dev "$IF" | grep -q "10\.9\.0\.$1/"; then
            return 0
        fi
        sleep 0.2
    done
    return 1
}

# cluster_up N: this VM's address on the socket network, corosync until quorate, dlm. A
# node that never meets the other (no network device, or no quorum after 2 minutes where it
# takes seconds) gives up at once instead of hanging in mount until qemu's timeout.
cluster_up() {
    net_up "$1" || no_cluster "node $1: no network device with this node's MAC came up"
    systemctl start corosync
    i=0
    until corosync-quorumtool -s | grep -q 'Quorate: *Yes'; do
        sleep 0.5
        i=$((i + 1))
        [ $i -gt 240 ] && break
    done
    q=$(corosync-quorumtool -s)
    echo "$q"
    echo "$q" | grep -q 'Quorate: *Yes' || no_cluster "node $1: not quorate after 2 minutes"
    systemctl start dlm || journalctl -u dlm --no-pager | tail -40
}

# no_cluster WHY: this node cannot meet the other: WHY, its links, addresses and corosync's
# view into $OUT/no_cluster (run-two.sh prints it), then the VM off
no_cluster() {
    { echo "$1"; ip -br link; ip -br addr; corosync-cfgtool -s; } >$OUT/no_cluster 2>&1
    sync
    systemctl poweroff -ff
    sleep 600
}

# begin_two: this node's number (dlmnode=N on the kernel command line), its results
# directory (the test's output goes to its test.log, traced) and the VMs' meeting place
begin_two() {
    N=$(sed -n 's/.*dlmnode=\([0-9]\).*/\1/p' /proc/cmdline)
    OUT=/host/out/node$N
    # a node booted again by the host (fence2.sh) keeps its first boot's results
    grep -q dlmrejoin /proc/cmdline && OUT=/host/out/node${N}b
    SYNC=/host/sync
    mkdir -p $OUT
    exec >$OUT/test.log 2>&1
    set -x
}

# gfs2_up: the node set up (setup_node), in the cluster with dlm running, the shared
# gfs2 made by node 1 and mounted on /mnt on both
gfs2_up() {
    setup_node "$N"
    cluster_up "$N"
    barrier up
    [ "$N" = 1 ] && mkfs.gfs2 -O -p lock_dlm -t vmclust:gfs0 -j 2 /dev/vdb
    barrier mkfs
    # what the daemon says if the mount is slow (its lockspace join waits for something)
    (sleep 40; ctool ls; ctool status; ctool dump) >$OUT/mount_wait.txt 2>&1 &
    mount -t gfs2 /dev/vdb /mnt
    barrier mounted
}

# shutdown_node: gfs2 unmounted, dlm and corosync stopped, done marked, the VM off
shutdown_node() {
    umount /mnt
    systemctl stop dlm
    systemctl stop corosync
    echo done >$OUT/done
    sync
    systemctl poweroff -ff
}

# threads LABEL: each daemon thread's context switches and CPU ticks, appended to
# $OUT/threads.txt (taken around a timed loop)
threads() {
    for t in /proc/$(pgrep -o -x dlm_controld)/task/*; do
        printf '%s %s %s %s\n' "$1" "$(cat $t/comm)" \
            "$(awk '/^voluntary_ctxt/ {v=$2} /^nonvoluntary_ctxt/ {print v, $2}' $t/status)" \
            "$(awk '{print "user", $14, "sys", $15}' $t/stat)"
    done >>$OUT/threads.txt
}

# metrics FILE: our daemon's Prometheus metrics, when it serves them
metrics() {
    python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:9465/metrics").read().decode())' >"$1" 2>/dev/null
}
