# Sourced by test.sh and test2.sh inside a VM.

# setup_node N: kernel modules, configfs, corosync.conf and dlm.conf from the share, and
# the daemon named in /host/conf/daemonN ("rust": ours installed over Debian's, with our
# unit; "c": Debian's 4.2.0 as installed).
setup_node() {
    DAEMON=$(cat /host/conf/daemon$1)
    modprobe configfs
    modprobe dlm
    modprobe gfs2
    mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
    cp /host/conf/corosync.conf /etc/corosync/corosync.conf
    mkdir -p /etc/dlm
    cp /host/conf/dlm.conf /etc/dlm/dlm.conf
    if [ "$DAEMON" = rust ]; then
        install -m 755 /host/bin/dlm_controld /usr/sbin/dlm_controld
        cp /host/conf/dlm.service /etc/systemd/system/dlm.service
        systemctl daemon-reload
    fi
    /usr/sbin/dlm_controld --version
}
