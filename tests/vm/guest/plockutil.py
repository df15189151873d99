"""Shared by plocks.py and plocks2.py: PASS/FAIL lines and F_GETLK."""
import fcntl
import struct

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
