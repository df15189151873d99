"""POSIX locks across two nodes on one gfs2 (run inside each VM: plocks2.py N DIR SYNC).

Node 1 takes a write lock; node 2 must see the conflict (EAGAIN), F_GETLK must name node 1's
holder, node 2's F_SETLKW must wait until node 1 unlocks and then be granted; then the
other way round. Each node then leaves a child holding 100 locks, so both daemons' dumps
can be compared. `plocks2.py N DIR SYNC release` ends that child.
"""
import fcntl
import os
import sys
import time

from plockutil import check, finish, getlk, hold, mark_in, release_holder, wait_in

n, d, sync = int(sys.argv[1]), sys.argv[2], sys.argv[3]
other = 3 - n
path = os.path.join(d, "shared")

if len(sys.argv) > 4 and sys.argv[4] == "after-crash":
    import subprocess

    t0 = time.monotonic()
    # the lockspace restarts with node 1 alone
    while time.monotonic() - t0 < 180:
        ls = subprocess.run([os.environ.get("DLM_TOOL", "dlm_tool"), "ls"], capture_output=True, text=True).stdout
        if "members       1 \n" in ls and "new change" not in ls:
            break
        time.sleep(0.5)
    print(ls, flush=True)
    check("node 1: the lockspace restarted without node 2", "members       1 \n" in ls,
          "after %.1f s" % (time.monotonic() - t0))
    # node 2's locks went with it: its held range is free for node 1
    fd = os.open(os.path.join(d, "held2"), os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        check("node 1: node 2's lock is gone with node 2", True)
    except OSError as e:
        check("node 1: node 2's lock is gone with node 2", False, e)
    dump = subprocess.run([os.environ.get("DLM_TOOL", "dlm_tool"), "plocks", "gfs0"], capture_output=True, text=True).stdout
    # lock and waiter lines (C's plock_ownership=1 also lists cached resources holding
    # nothing: "<number> rown <owner> unused_ms <ms>")
    lines = [l for l in dump.splitlines() if " nodeid " in l]
    others = [l for l in lines if " nodeid 1 " not in l]
    check("node 1: the table holds node 1's 101 locks only", not others and len(lines) == 101,
          "(%d lines, %d of other nodes)" % (len(lines), len(others)))
    finish()

if len(sys.argv) > 4 and sys.argv[4] == "release":
    release_holder()


def mark(name, text=""):
    mark_in(sync, n, name, text)


def wait(name, node, limit=300):
    return wait_in(sync, name, node, limit)


def cpu_ticks():
    """CPU ticks so far (user + sys, /proc) of the daemon, corosync and this process, and
    the guest's idle ticks: what a phase of the bench spent, taken at its start and end."""
    import subprocess

    def of(pid):
        with open("/proc/%s/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    def pid(name):
        return subprocess.run(["pgrep", "-o", "-x", name], capture_output=True, text=True).stdout.strip()

    with open("/proc/stat") as f:
        idle = int(f.readline().split()[4])
    return {"daemon": of(pid("dlm_controld")), "corosync": of(pid("corosync")), "process": of("self"), "idle": idle}


def print_cpu(phase, t0, steps):
    """Each of cpu_ticks()'s counts since `t0`, in µs per step (a tick is 10 ms)."""
    t1 = cpu_ticks()
    per = " ".join("%s %.0f" % (k, (t1[k] - t0[k]) * 10000.0 / max(steps, 1)) for k in t0)
    print("%s_cpu_us_per_step %s" % (phase, per), flush=True)


def bench(secs=5.0):
    """The real-kernel side-by-side numbers (tests/vm/bench-two.sh): both nodes at once,
    each process locking and unlocking a file of its own; then lock passing on one file, a
    ring of 64 one-byte ranges walked by a process per node (node 2 half a ring ahead),
    each taking the next range with F_SETLKW and then releasing the one it held."""
    mark("bench-own")
    wait("bench-own", other)
    fd = os.open(os.path.join(d, "own%d" % n), os.O_RDWR | os.O_CREAT)
    k, t0, c0 = 0, time.monotonic(), cpu_ticks()
    while time.monotonic() - t0 < secs:
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
        k += 1
    print("own_pairs_per_s %.1f" % (k / (time.monotonic() - t0)), flush=True)
    print_cpu("own", c0, k)
    os.close(fd)
    fd = os.open(os.path.join(d, "pass"), os.O_RDWR | os.O_CREAT)
    pos = 0 if n == 1 else 32
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, pos)
    mark("bench-pass")
    wait("bench-pass", other)
    k, t0, c0 = 0, time.monotonic(), cpu_ticks()
    while time.monotonic() - t0 < secs:
        nxt = (pos + 1) % 64
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, nxt)  # F_SETLKW
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, pos)
        pos = nxt
        k += 1
    print("passing_steps_per_s %.1f" % (k / (time.monotonic() - t0)), flush=True)
    print_cpu("passing", c0, k)
    fcntl.lockf(fd, fcntl.LOCK_UN, 0, 0)
    os.close(fd)
    mark("bench-done")
    wait("bench-done", other)


if len(sys.argv) > 4 and sys.argv[4] == "bench":
    bench()
    sys.exit(0)


def crosswise(detect):
    """A process per node locks crosswise on one file: node 1's holds byte 0 and waits
    for byte 1, node 2's holds byte 1 and asks for byte 0. With deadlock detection
    (`detect`, every daemon ours with plock_deadlock_detect=1) node 2's F_SETLKW returns
    EDEADLK; without, both wait, and our `dlm_tool plocks --waits` on either node shows the
    cycle with both pids; node 2's process is then killed and node 1's granted."""
    import signal
    import subprocess

    path = os.path.join(d, "cross")
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, n - 1)
        mark("xlocked", str(os.getpid()))
        wait("xlocked", other)
        if n == 2:
            wait("xasking", 1)
            time.sleep(2.0)  # node 1's request is a waiter everywhere by now
        else:
            mark("xasking")
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX, 1, other - 1)  # F_SETLKW
            os.write(w, b"granted")
        except OSError as e:
            os.write(w, b"errno %d" % e.errno)
        os._exit(0)
    os.close(w)
    mine = int(wait("xlocked", n))
    theirs = int(wait("xlocked", other))
    wait("xasking", 1)
    if detect:
        if n == 2:
            got = os.read(r, 64).decode()
            check("node 2: the F_SETLKW closing the cycle gets EDEADLK", got == "errno 35", got)
            mark("xrefused")
            os.waitpid(child, 0)  # its exit releases byte 1: node 1's process is granted
        else:
            got = os.read(r, 64).decode()
            check("node 1: its F_SETLKW is granted once node 2's process ends", got == "granted", got)
            os.waitpid(child, 0)
        mark("xdone")
        wait("xdone", other)
        return
    time.sleep(3.0)
    waits = ""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        waits = subprocess.run(["/host/bin/dlm_tool", "plocks", "--waits", "gfs0"],
                               capture_output=True, text=True).stdout
        if "2 owners in a cycle" in waits:
            break
        time.sleep(0.5)
    print(waits, flush=True)
    cyc = [l for l in waits.splitlines() if l.endswith("DEADLOCK (cycle)")]
    check("node %d: plocks --waits shows the cycle with both pids" % n,
          len(cyc) == 2 and any(" pid %d " % mine in l for l in cyc)
          and any(" pid %d " % theirs in l for l in cyc), cyc)
    mark("xseen")
    wait("xseen", other)
    if n == 2:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        mark("xkilled")
    else:
        wait("xkilled", 2)
        got = os.read(r, 64).decode()
        check("node 1: granted once node 2's process is killed", got == "granted", got)
        os.waitpid(child, 0)
    mark("xdone")
    wait("xdone", other)


if len(sys.argv) > 4 and sys.argv[4] == "crosswise":
    crosswise(len(sys.argv) > 5 and sys.argv[5] == "detect")
    finish()


def table():
    """This node's daemon's plock table, through Debian's dlm_tool."""
    import subprocess

    return subprocess.run([os.environ.get("DLM_TOOL", "dlm_tool"), "plocks", "gfs0"],
                          capture_output=True, text=True).stdout


def cancel_step(holder):
    """`holder` takes bytes 100-109 of one file; the other node's process waits for them in
    F_SETLKW and is interrupted by a signal (kernel >= 6.6 sends CANCEL): it must get EINTR
    while the holder still holds, its waiter must be gone from both nodes' tables, and once
    the holder unlocks nothing is granted to it (the range is free for anyone)."""
    import signal

    tag = "c%d" % holder
    fd = os.open(os.path.join(d, "cancel"), os.O_RDWR | os.O_CREAT)
    if n == holder:
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 100)
        mark(tag + "held")
        wait(tag + "interrupted", other)
        time.sleep(1.0)
        t = table()
        check("node %d: no waiter is left in our table after the other's CANCEL" % n,
              "WAITING" not in t, "" if "WAITING" not in t else t)
        fcntl.lockf(fd, fcntl.LOCK_UN, 10, 100)
        mark(tag + "unlocked")
        wait(tag + "checked", other)
        os.close(fd)
        return
    wait(tag + "held", holder)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        class Interrupted(Exception):
            pass

        def on_signal(*_):
            raise Interrupted()

        signal.signal(signal.SIGUSR1, on_signal)
        os.close(r)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX, 10, 100)  # F_SETLKW
            got = b"granted"
        except Interrupted:
            got = b"eintr"
        except OSError as e:
            got = b"errno %d" % e.errno
        os.write(w, got)
        os._exit(0)
    os.close(w)
    t0 = time.monotonic()
    while "WAITING" not in table() and time.monotonic() - t0 < 60:
        time.sleep(0.2)
    check("node %d: the F_SETLKW waits behind node %d's lock" % (n, holder), "WAITING" in table())
    os.kill(child, signal.SIGUSR1)
    got = os.read(r, 64).decode()
    os.waitpid(child, 0)
    check("node %d: the interrupted F_SETLKW returns EINTR" % n, got == "eintr", got)
    t = table()
    check("node %d: its waiter is gone from our table" % n, "WAITING" not in t,
          "" if "WAITING" not in t else t)
    mark(tag + "interrupted")
    wait(tag + "unlocked", holder)
    time.sleep(1.0)
    t = table()
    check("node %d: the holder's unlock granted the cancelled request nothing" % n,
          " 100-109 " not in t, "" if " 100-109 " not in t else t)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 100)
        fcntl.lockf(fd, fcntl.LOCK_UN, 10, 100)
        check("node %d: the range is free afterwards" % n, True)
    except OSError as e:
        check("node %d: the range is free afterwards" % n, False, e)
    mark(tag + "checked")
    os.close(fd)


if len(sys.argv) > 4 and sys.argv[4] == "cancel":
    cancel_step(1)
    cancel_step(2)
    finish()


def holder_then_waiter(first):
    """`first` takes 0-9 and unlocks once the other waits; the other checks and waits."""
    tag = "r%d" % first
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    if n == first:
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
        mark(tag + "locked", str(os.getpid()))
        wait(tag + "waiting", other)
        time.sleep(1.0)
        # marked before the unlock: the other node's grant may overtake a mark written after
        mark(tag + "unlocking")
        fcntl.lockf(fd, fcntl.LOCK_UN, 10, 0)
        wait(tag + "granted", other)
    else:
        holder = int(wait(tag + "locked", first))
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
            check("node %d: F_SETLK against node %d's lock fails" % (n, first), False)
        except OSError as e:
            check("node %d: F_SETLK against node %d's lock fails with EAGAIN/EACCES" % (n, first), e.errno in (11, 13), e.errno)
        t, s, l, pid = getlk(fd, 0, 10)
        check("node %d: F_GETLK names node %d's holder" % (n, first), t == fcntl.F_WRLCK and (s, l) == (0, 10) and abs(pid) == holder, (t, s, l, pid, holder))
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 100)
        check("node %d: a disjoint range is granted" % n, True)
        mark(tag + "waiting")
        t0 = time.monotonic()
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)  # F_SETLKW
        waited = time.monotonic() - t0
        unlocking = os.path.exists(os.path.join(sync, "%sunlocking.%d" % (tag, first)))
        check("node %d: F_SETLKW granted once node %d unlocked" % (n, first), unlocking and waited > 0.5, "%.2f s" % waited)
        fcntl.lockf(fd, fcntl.LOCK_UN, 0, 0)
        mark(tag + "granted")
    os.close(fd)


holder_then_waiter(1)
holder_then_waiter(2)


def take_100():
    hf = os.open(os.path.join(d, "held%d" % n), os.O_RDWR | os.O_CREAT)
    for i in range(100):
        fcntl.lockf(hf, fcntl.LOCK_EX, 1, 2 * i)
    return hf


check("node %d: holder took 100 locks" % n, hold(take_100))
finish()
