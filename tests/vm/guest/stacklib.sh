# Sourced after lib.sh by the stack runs' guest scripts (run-stack.sh: stack-pacemaker.sh,
# stack-ocfs2.sh, stack-lvmlockd.sh). Each check is one PASS or FAIL line in $R.

# check NAME CMD...: CMD's exit status as a PASS or FAIL line for NAME
check() {
    name=$1
    shift
    if "$@"; then
        echo "PASS $name" >>$R
    else
        echo "FAIL $name" >>$R
    fi
}

# note TEXT: a line of what was seen, beside the checks (at the guest's uptime)
note() { echo "[$(cut -d' ' -f1 /proc/uptime) s] $*" >>$R; }

# corosync_up N: this VM named nodeN, its address on the socket network, corosync until
# quorate (no dlm: who starts it is the run's business); a node that never meets the other
# powers off at once (lib.sh no_cluster)
corosync_up() {
    hostname node$1
    echo node$1 >/etc/hostname
    printf '10.9.0.1 node1\n10.9.0.2 node2\n' >>/etc/hosts
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
}

# running_is DAEMON: the dlm_controld running here is ours ("rust") or Debian's ("c"), by
# the version of the binary it runs
running_is() {
    p=$(pgrep -o -x dlm_controld) || return 1
    v=$(/proc/$p/exe --version 2>&1 | head -1)
    echo "running dlm_controld (pid $p): $v; $(ps -o args= -p $p)"
    case $1 in
    rust) echo "$v" | grep -q Rust ;;
    *) echo "$v" | grep -q '^dlm_controld 4\.' ;;
    esac
}

# wait_for CMD...: CMD succeeds within 5 minutes
wait_for() {
    i=0
    until "$@"; do
        i=$((i + 1))
        [ $i -gt 600 ] && return 1
        sleep 0.5
    done
}

# members LS: the lockspace's members as `dlm_tool ls` prints them ("1 2 ")
members() {
    ctool ls "$1" 2>/dev/null | sed -n 's/^members *//p'
}

# no_lockspaces: the kernel has no lockspace left on this node
no_lockspaces() { [ -z "$(ls /sys/kernel/dlm 2>/dev/null)" ]; }

# wait_mark NAME: the mark $SYNC/NAME exists (up to 10 minutes)
wait_mark() {
    i=0
    while [ ! -f "$SYNC/$1" ] && [ $i -lt 3000 ]; do
        sleep 0.2
        i=$((i + 1))
    done
}

# same_tables FILE LINES: node 1's dump FILE and node 2's are the same table of LINES
# lines: byte for byte where a C daemon is in the lockspace (every resource made in the
# total order), the same lines where both are ours (native mode: each node's resources in
# the order it made them)
same_tables() {
    a=$OUT/$1
    b=/host/out/node2/$1
    [ -f $b ] || b=/host/out/node2b/$1
    [ "$(wc -l <$a)" = "$2" ] || return 1
    if [ "$(cat /host/conf/daemon1)" = rust ] && [ "$(cat /host/conf/daemon2)" = rust ]; then
        sort $a >/tmp/a.sorted && sort $b >/tmp/b.sorted && cmp -s /tmp/a.sorted /tmp/b.sorted
    else
        cmp -s $a $b
    fi
}

# members_are LS "1 2 ": the lockspace's members are those
members_are() { [ "$(members "$1")" = "$2" ]; }
