"""POSIX locks on gfs2 through the kernel's DLM and the daemon (run inside the VM).

`plocks.py DIR` checks the semantics between processes (conflict, F_GETLK's holder,
blocking until the holder unlocks, disjoint and shared ranges), measures lock+unlock
pairs per second, then leaves a child holding locks for the dump and exits. `plocks.py DIR
release` ends that child; `plocks.py DIR pairs` measures the pairs alone.
"""
import fcntl
import os
import signal
import sys
import threading
import time

from plockutil import check, finish, getlk, hold, release_holder

d = sys.argv[1]
path = os.path.join(d, "f")

if len(sys.argv) > 2 and sys.argv[2] == "release":
    release_holder()


def pairs():
    """Lock+unlock pairs of one byte of one file for 5 s (F_SETLKW): pairs per second."""
    pfd = os.open(os.path.join(d, "bench"), os.O_RDWR | os.O_CREAT)
    n = 0
    # a file the host may watch for (to profile the VM during the loop)
    if os.environ.get("PAIRS_MARK"):
        open(os.environ["PAIRS_MARK"], "w").close()
    t0 = time.monotonic()
    c0 = os.times()
    while time.monotonic() - t0 < 5:
        fcntl.lockf(pfd, fcntl.LOCK_EX, 1, 0)
        fcntl.lockf(pfd, fcntl.LOCK_UN, 1, 0)
        n += 1
    el = time.monotonic() - t0
    c1 = os.times()
    print("pairs_per_s %.1f" % (n / el), flush=True)
    # this process's own CPU per pair (the rest of a pair is the daemon's and the idle)
    def us(a, b):
        return (b - a) * 1e6 / max(n, 1)
    print("process_us_per_pair user %.1f sys %.1f"
          % (us(c0.user, c1.user), us(c0.system, c1.system)), flush=True)


if len(sys.argv) > 2 and sys.argv[2] == "pairs":
    pairs()
    sys.exit(0)







open(path, "w").close()
r, w = os.pipe()
holder = os.fork()
if holder == 0:
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    fd = os.open(path, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
    fcntl.lockf(fd, fcntl.LOCK_SH, 10, 40)
    os.write(w, b"x")
    signal.sigwait([signal.SIGUSR1])
    fcntl.lockf(fd, fcntl.LOCK_UN, 10, 0)
    os.write(w, b"u")
    time.sleep(60)
    os._exit(0)

os.read(r, 1)
fd = os.open(path, os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
    check("conflicting F_SETLK fails", False)
except OSError as e:
    check("conflicting F_SETLK fails with EAGAIN/EACCES", e.errno in (11, 13), e.errno)
t, s, l, pid = getlk(fd, 0, 10)
check("F_GETLK reports the holder", t == fcntl.F_WRLCK and pid == holder and (s, l) == (0, 10), (t, s, l, pid, holder))
t, *_ = getlk(fd, 100, 10)
check("F_GETLK on a free range says F_UNLCK", t == fcntl.F_UNLCK, t)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 20)
check("a disjoint range is granted", True)
fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 10, 40)
check("read locks share", True)
granted = threading.Event()


def setlkw():
    fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)  # F_SETLKW: waits for the holder's unlock
    granted.set()


waiter = threading.Thread(target=setlkw)
waiter.start()
time.sleep(0.5)
check("F_SETLKW blocks while the holder holds", not granted.is_set())
os.kill(holder, signal.SIGUSR1)
check("F_SETLKW granted after the holder unlocked", granted.wait(60) and os.read(r, 1) == b"u")
waiter.join()
fcntl.lockf(fd, fcntl.LOCK_UN, 0, 0)
os.kill(holder, signal.SIGKILL)
os.waitpid(holder, 0)

pairs()

# a child holds 300 locks (every other byte of one file) and 50 files' locks for the dump


def take_350():
    hf = os.open(os.path.join(d, "held"), os.O_RDWR | os.O_CREAT)
    for i in range(300):
        fcntl.lockf(hf, fcntl.LOCK_EX, 1, 2 * i)
    fds = [hf]
    for i in range(50):
        f = os.open(os.path.join(d, "h%d" % i), os.O_RDWR | os.O_CREAT)
        fcntl.lockf(f, fcntl.LOCK_SH, 0, 0)
        fds.append(f)
    return fds


check("holder took 350 locks", hold(take_350))
finish()
