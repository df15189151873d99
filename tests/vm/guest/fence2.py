"""Fencing on real kernels (fence2.sh): `fence2.py N DIR SYNC hold|wait`.

hold (node 2, the victim): a child takes bytes 0-9 of DIR/fenced and keeps them.
wait (node 1): a child asks for the same bytes with F_SETLKW and waits; after node 2's
daemon is killed, the survivor must not grant them before node 2 is fenced (the host has
powered its VM off: /host/fence/done.2 exists at the moment of the grant); then granted,
the lockspace has node 1 alone and node 2's lock is gone from the table.
"""
import fcntl
import os
import subprocess
import sys
import time

from plockutil import check, finish, mark_in, wait_in

n, d, sync, what = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
path = os.path.join(d, "fenced")


def mark(name):
    mark_in(sync, n, name)


def wait(name, node):
    wait_in(sync, name, node, 600)


def ls():
    return subprocess.run([os.environ.get("DLM_TOOL", "dlm_tool"), "ls"], capture_output=True,
                          text=True).stdout


if what == "hold":
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
        mark("fheld")
        while True:
            time.sleep(60)
    wait("fheld", 2)
    sys.exit(0)

wait("fheld", 2)
r, w = os.pipe()
child = os.fork()
if child == 0:
    os.close(r)
    null = os.open(os.devnull, os.O_RDWR)
    for f in (0, 1, 2):
        os.dup2(null, f)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)  # F_SETLKW, behind node 2's lock
    fenced = os.path.exists("/host/fence/done.2")
    os.write(w, b"granted fenced" if fenced else b"granted unfenced")
    time.sleep(3600)
    os._exit(0)
os.close(w)
time.sleep(3)
mark("fwaiting")
wait("fkilled", 2)
waits = set()
t0 = time.monotonic()
got = b""
os.set_blocking(r, False)
while time.monotonic() - t0 < 300:
    try:
        got = os.read(r, 64)
        if got:
            break
    except BlockingIOError:
        pass
    for l in ls().splitlines():
        if "wait fencing" in l or "fencing" in l:
            waits.add(l.strip())
    time.sleep(0.5)
check("node 1: granted node 2's range once node 2 failed", got.startswith(b"granted"), got)
check("node 1: not before node 2 was fenced (its VM powered off)", got == b"granted fenced", got)
check("node 1: dlm_tool ls showed the lockspace waiting for fencing meanwhile", bool(waits), waits)
out = ls()
check("node 1: the lockspace runs on with node 1 alone", "members       1 \n" in out, out)
dump = subprocess.run([os.environ.get("DLM_TOOL", "dlm_tool"), "plocks", "gfs0"],
                      capture_output=True, text=True).stdout
check("node 1: node 2's locks are gone from the table", " nodeid 2 " not in dump, dump)
# the child keeps node 1's lock for node 2's rejoin (fence2.sh ends it)
with open("/run/fence-holder.pid", "w") as f:
    f.write(str(child))
finish()
