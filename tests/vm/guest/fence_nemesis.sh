#!/bin/sh
# The nemesis run's fence agent (tests/vm/nemesis.sh): as fence_host.sh, it asks the host
# through the 9p share to power the victim off and succeeds once the host says it has; each
# request is one of its own (a node is fenced again at each of its failures), named
# VICTIM.ASKER.ASKER_GEN.TIME: in a partition both nodes ask, the host powers off the
# victim of the first request and ignores the other (its asker is off by then).
# stdin: the dlm.conf device's key=val words, node=<id>, fail_time=<secs> (as any agent).
node=
while read -r line; do
    case $line in node=*) node=${line#node=} ;; esac
done
[ -n "$node" ] || exit 1
me=$(sed -n 's/.*dlmnode=\([0-9]\).*/\1/p' /proc/cmdline)
gen=$(sed -n 's/.*dlmgen=\([0-9]*\).*/\1/p' /proc/cmdline)
id=$node.$me.${gen:-0}.$(date +%s%N)
echo "$(date +%s.%N) node $me (boot ${gen:-0}) requests fencing of node $node: $id" >>/host/fence/log
echo "$id" >"/host/fence/new.$id"
mv "/host/fence/new.$id" "/host/fence/req.$id"
i=0
while [ ! -f "/host/fence/done.$id" ]; do
    i=$((i + 1))
    [ $i -gt 6000 ] && exit 1
    sleep 0.1
done
echo "$(date +%s.%N) node $me: node $node fenced ($id)" >>/host/fence/log
exit 0
