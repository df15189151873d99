"""Shared by plocks.py and plocks2.py: PASS/FAIL lines, F_GETLK, and a child process that
holds locks until released (for the dumps)."""
import fcntl
import os
import signal
import struct
import sys
import time

HOLDER_PID = "/run/plock-holder.pid"

results = []


def check(name, cond, detail=""):
    """Prints PASS or FAIL for one property and remembers it."""
    results.append(bool(cond))
    print(("PASS " if cond else "FAIL ") + name + (" " + str(detail) if detail else ""), flush=True)


def all_passed():
    return all(results)


def getlk(fd, start, length, typ=fcntl.F_WRLCK):
    """F_GETLK for [start, start+length): (type, start, len, pid) of the first conflict."""
    # struct flock on x86_64: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
    arg = struct.pack("hhqqi4x", typ, 0, start, length, 0)
    t, _, s, l, pid = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, arg))
    return t, s, l, pid


def hold(take):
    """Forks a child that runs `take()` (its locks), then holds them until SIGTERM; returns
    whether it got that far within a minute."""
    if os.fork() == 0:
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
        kept = take()
        with open(HOLDER_PID, "w") as f:
            f.write(str(os.getpid()))
        signal.sigwait([signal.SIGTERM])
        del kept
        os._exit(0)
    for _ in range(600):
        if os.path.exists(HOLDER_PID):
            return True
        time.sleep(0.1)
    return False


def release_holder():
    """Ends the child of `hold` (a later run of the script), then exits."""
    try:
        with open(HOLDER_PID) as f:
            os.kill(int(f.read()), signal.SIGTERM)
    except (OSError, ValueError):
        pass
    time.sleep(1)
    sys.exit(0)


def finish():
    """Prints the RESULT line and exits with it."""
    print("RESULT", "ok" if all_passed() else "failed", flush=True)
    sys.exit(0 if all_passed() else 1)


def mark_in(sync, n, name, text=""):
    """Creates the mark NAME.N in SYNC with its text at once (the other node may read it
    the moment it exists): written beside it, then renamed."""
    p = os.path.join(sync, "%s.%d" % (name, n))
    with open(p + ".tmp", "w") as f:
        f.write(text)
    os.rename(p + ".tmp", p)


def wait_in(sync, name, node, limit=300):
    """Waits for the mark NAME.NODE in SYNC and returns its text; FAIL and exit after
    `limit` seconds."""
    p = os.path.join(sync, "%s.%d" % (name, node))
    t = time.monotonic()
    while not os.path.exists(p):
        if time.monotonic() - t > limit:
            check("waited for %s.%d" % (name, node), False)
            finish()
        time.sleep(0.1)
    return open(p).read()
