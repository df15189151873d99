"""A partition of two nodes on real kernels (partition2.sh): `partition2.py N DIR hold|wait`.

Each node holds bytes 10N..10N+9 of DIR/part and a child waits in F_SETLKW for the other
node's bytes. Then corosync's traffic is cut both ways; with two_node both sides stay
quorate and race to fence each other, and the host powers off the node fenced first. On
the survivor the child must be granted the other's bytes only once that node is off
(/host/fence/done.<other> exists at the moment of the grant). `arm` returns once both
lock is taken (hold) or the child waits (wait); the child writes its outcome to
/run/part-result.
"""
import fcntl
import os
import sys
import time

n, d, what = int(sys.argv[1]), sys.argv[2], sys.argv[3]
other = 3 - n
path = os.path.join(d, "part")
fd = os.open(path, os.O_RDWR | os.O_CREAT)


def detached():
    null = os.open(os.devnull, os.O_RDWR)
    for f in (0, 1, 2):
        os.dup2(null, f)


if what == "hold" and os.fork() == 0:
    # the holder of this node's bytes
    detached()
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 10 * n)
    open("/run/part-held", "w").close()
    while True:
        time.sleep(60)
if what == "hold":
    for _ in range(600):
        if os.path.exists("/run/part-held"):
            break
        time.sleep(0.1)
    sys.exit(0)
# the other node's bytes are held there by now (partition2.sh met it at a barrier first)
if os.fork() == 0:
    detached()
    wfd = os.open(path, os.O_RDWR)
    open("/run/part-waiting", "w").close()
    fcntl.lockf(wfd, fcntl.LOCK_EX, 10, 10 * other)  # F_SETLKW
    fenced = os.path.exists("/host/fence/done.%d" % other)
    with open("/run/part-result", "w") as f:
        f.write("granted fenced" if fenced else "granted unfenced")
    while True:
        time.sleep(60)
for _ in range(600):
    if os.path.exists("/run/part-waiting"):
        break
    time.sleep(0.1)
