"""A plock load on one node of two, kept running while the other node's daemon is replaced
(upgrade2.sh). `load2.py CMD N DIR`:

- `start`: forks a holder (20 write locks on DIR/hold<N>, kept until `stop`), two workers
  that lock and unlock files of their own (F_SETLKW) and one that takes and releases a
  range of DIR/shared that the other node's worker wants too; each worker counts its
  requests and ends after the one in progress when told to stop. Returns at once.
- `pause` / `resume`: every worker of this node stops between two requests (so the table
  holds still for the dumps), then goes on.
- `stop`: the workers end and report; a worker that does not end within a minute waits
  for a reply that never came (FAIL). Then the holder ends.
- `held`: the other node's holder's 20 locks are still there (each conflicts: EAGAIN).
Prints PASS/FAIL lines; exits 1 if any failed.
"""
import fcntl
import os
import signal
import sys
import time

cmd, n, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
other = 3 - n
RUN = "/run/load2"
WORKERS = ["own1", "own2", "shared"]
failed = False


def check(name, cond, detail=""):
    global failed
    failed |= not cond
    print(("PASS " if cond else "FAIL ") + name + (" " + str(detail) if detail else ""), flush=True)


def flag(name):
    return os.path.join(RUN, name)


def detach():
    """The forked process must not hold the caller's stdout (a `$(...)` waits for it)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.setsid()


def worker(name):
    detach()
    if name == "shared":
        path, start = os.path.join(d, "shared"), 0
    else:
        path, start = os.path.join(d, "%s_%d" % (name, n)), 0
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    count = 0
    while not os.path.exists(flag("stop")):
        if os.path.exists(flag("pause")):
            open(flag("paused." + name), "w").close()
            time.sleep(0.1)
            continue
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, start)  # F_SETLKW
        count += 1
        if name == "shared":
            time.sleep(0.01)
        fcntl.lockf(fd, fcntl.LOCK_UN, 10, start)
        count += 1
    with open(flag("done." + name), "w") as f:
        f.write(str(count))
    os._exit(0)


def holder():
    detach()
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    fd = os.open(os.path.join(d, "hold%d" % n), os.O_RDWR | os.O_CREAT)
    for i in range(20):
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2 * i)
    with open(flag("holding"), "w") as f:
        f.write(str(os.getpid()))
    signal.sigwait([signal.SIGTERM])
    os._exit(0)


def wait_for(paths, limit):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if all(os.path.exists(p) for p in paths):
            return True
        time.sleep(0.1)
    return False


if cmd == "start":
    os.makedirs(RUN, exist_ok=True)
    for f in os.listdir(RUN):
        os.unlink(flag(f))
    if os.fork() == 0:
        holder()
    check("node %d: the holder took its 20 locks" % n, wait_for([flag("holding")], 120))
    for w in WORKERS:
        if os.fork() == 0:
            worker(w)
elif cmd == "pause":
    open(flag("pause"), "w").close()
    ok = wait_for([flag("paused." + w) for w in WORKERS], 120)
    check("node %d: the load paused (every request in progress answered)" % n, ok)
elif cmd == "resume":
    for f in os.listdir(RUN):
        if f == "pause" or f.startswith("paused."):
            os.unlink(flag(f))
elif cmd == "stop":
    if os.path.exists(flag("pause")):
        os.unlink(flag("pause"))
    open(flag("stop"), "w").close()
    ok = wait_for([flag("done." + w) for w in WORKERS], 60)
    counts = {w: open(flag("done." + w)).read() for w in WORKERS if os.path.exists(flag("done." + w))}
    check("node %d: every worker ended, each request answered" % n, ok, counts)
    try:
        os.kill(int(open(flag("holding")).read()), signal.SIGTERM)
    except (OSError, ValueError) as e:
        check("node %d: the holder was there to end" % n, False, e)
elif cmd == "held":
    fd = os.open(os.path.join(d, "hold%d" % other), os.O_RDWR)
    busy = 0
    for i in range(20):
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2 * i)
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, 2 * i)
        except OSError:
            busy += 1
    os.close(fd)
    check("node %d: node %d's holder still has its 20 locks" % (n, other), busy == 20, busy)
sys.exit(1 if failed else 0)
