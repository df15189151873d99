#!/bin/sh
# fence_vmhost: a fence agent for Pacemaker's fencer (installed as /usr/sbin/fence_vmhost by
# the stack runs, run-stack.sh) that powers a VM of the run off through the host, as
# fence_host.sh does for dlm_controld: it asks through the 9p share and succeeds once the
# host says the VM is off (the host boots it again by itself). It follows the fence-agents
# conventions: options as `-o ACTION -n PLUG` (or `--action=`, `--plug=`), or without
# arguments as key=value lines on stdin (action, port/plug, nodename); actions off, reboot
# and on, status, monitor, list, validate-all, metadata. A node's name is nodeN.
action=reboot
plug=
if [ $# -gt 0 ]; then
    while [ $# -gt 0 ]; do
        case $1 in
        -o) action=$2 && shift ;;
        --action=*) action=${1#--action=} ;;
        -n) plug=$2 && shift ;;
        --plug=* | --port=*) plug=${1#--*=} ;;
        esac
        shift
    done
else
    while read -r line; do
        case $line in
        action=* | option=*) action=${line#*=} ;;
        port=* | plug=*) plug=${line#*=} ;;
        nodename=*) [ -n "$plug" ] || plug=${line#nodename=} ;;
        esac
    done
fi

metadata() {
    cat <<'EOF'
<?xml version="1.0" ?>
<resource-agent name="fence_vmhost" shortdesc="Fence agent for the VMs of dlm_controld's tests/vm runs">
<longdesc>fence_vmhost asks the host of a tests/vm run, through its 9p share, to power a VM off; the host boots it again by itself.</longdesc>
<parameters>
	<parameter name="action" unique="0" required="1">
		<getopt mixed="-o, --action=[action]" />
		<content type="string" default="reboot" />
		<shortdesc lang="en">Fencing action</shortdesc>
	</parameter>
	<parameter name="plug" unique="0" required="1" obsoletes="port">
		<getopt mixed="-n, --plug=[name]" />
		<content type="string" />
		<shortdesc lang="en">The node to fence: node1, node2</shortdesc>
	</parameter>
	<parameter name="port" unique="0" required="0" deprecated="1">
		<getopt mixed="-n, --plug=[name]" />
		<content type="string" />
		<shortdesc lang="en">The node to fence: node1, node2</shortdesc>
	</parameter>
</parameters>
<actions>
	<action name="on" automatic="0" />
	<action name="off" />
	<action name="reboot" />
	<action name="status" />
	<action name="list" />
	<action name="monitor" />
	<action name="metadata" />
	<action name="validate-all" />
</actions>
</resource-agent>
EOF
}

# the node's number from its name (node2 -> 2)
node=$(echo "$plug" | tr -cd '0-9')
case $action in
metadata) metadata ;;
monitor | validate-all) [ -d /host/fence ] ;;
list) printf 'node1\nnode2\n' ;;
status)
    # on unless the host powered it off and has not booted it again
    [ -n "$node" ] || exit 1
    [ ! -f "/host/fence/off.$node" ] || exit 2
    ;;
on) [ -n "$node" ] ;;
off | reboot)
    [ -n "$node" ] || exit 1
    tag=$(date +%s%N)
    echo "$(date +%s.%N) request node $node ($action from $(hostname), fence_vmhost)" >>/host/fence/log
    touch "/host/fence/req.$node.$tag"
    i=0
    while [ ! -f "/host/fence/done.$node.$tag" ]; do
        i=$((i + 1))
        [ $i -gt 1200 ] && exit 1
        sleep 0.1
    done
    echo "$(date +%s.%N) done node $node ($tag)" >>/host/fence/log
    ;;
*) exit 1 ;;
esac
