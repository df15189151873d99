#!/bin/sh
# A fence agent that really powers the victim off (tests/vm, FENCE=1): it asks the host,
# through the 9p share, to stop the victim's VM, and succeeds once the host says it has.
# stdin: the dlm.conf device's key=val words, node=<id>, fail_time=<secs> (as any agent).
node=
while read -r line; do
    case $line in node=*) node=${line#node=} ;; esac
done
[ -n "$node" ] || exit 1
echo "$(date +%s.%N) request node $node" >>/host/fence/log
touch /host/fence/req.$node
i=0
while [ ! -f /host/fence/done.$node ]; do
    i=$((i + 1))
    [ $i -gt 1200 ] && exit 1
    sleep 0.1
done
echo "$(date +%s.%N) done node $node" >>/host/fence/log
exit 0
