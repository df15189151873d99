"""The nemesis run on real kernels (tests/vm/nemesis.sh; guest/nemesis2.sh starts the agent).

Workers on both nodes hold byte ranges of a few shared gfs2 files with POSIX locks
(F_SETLKW and F_SETLK, shared and exclusive, random ranges, F_GETLK, close() of an fd that
holds locks). A worker writes a token of its own (its id and a sequence number) into every
range it takes exclusively and checks, whenever it reads the file, that every byte it holds
is still what it wrote (exclusive) or what it read when it took the lock (shared): any
difference means another process, on this node or the other, wrote bytes this worker held,
so two owners both believed they had the range (a violation). An F_GETLK answer that names
another owner's lock over bytes this worker holds exclusively (or a write lock over bytes
it holds at all) is a violation too. gfs2 keeps its page cache coherent across nodes under
its glocks (a read takes the inode's glock shared, a write exclusive, and the node giving
up an exclusive glock writes its dirty pages back first), so plain pread/pwrite see the
other node's bytes once the POSIX lock is held; the POSIX locks are the application's
protocol on top, which is what is tested.

    nemesis.py files DIR                 node 1, once: the shared files, written out
    nemesis.py agent N GEN DIR           a node's agent: its workers, the host's commands
    nemesis.py worker ID SEED DIR OUT    one worker (started by the agent)
    nemesis.py getlk PATH START LEN EX   F_GETLK from a process of its own (the monitor's)
    nemesis.py report OUT                on the host: each node's counts, the verdict
    nemesis.py selftest DIR              on the host, first: the checker can fail

Deadlocks between workers are impossible by construction (the daemons run without
deadlock detection): a worker blocks (F_SETLKW) only for a range that starts above every
byte it holds, in one order of (file, offset); any other lock it asks for with F_SETLK.
So a request still waiting after HANG_S while no other owner holds a conflicting range
(F_GETLK from another process) is a hang, and so is any non-blocking request unanswered
after HANG_S.
"""
import errno
import fcntl
import hashlib
import json
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time

FILES = 3
FSIZE = 256
MAXLEN = 48
BURST_LOCKS, BURST_THREADS = 320, 8
RUN = "/run/nemesis"
NEM = "/host/nem"
CONF = "/host/conf"
DLM_TOOL = "/usr/sbin/dlm_tool.distrib" if os.path.exists("/usr/sbin/dlm_tool.distrib") else "/usr/sbin/dlm_tool"


def conf(name, default):
    """A setting the host wrote into the share (nemesis.sh), or the default."""
    try:
        with open(os.path.join(CONF, name)) as f:
            return type(default)(f.read().strip())
    except (OSError, ValueError):
        return default


# NEMESIS_BURST=1 (nemesis.sh): workers also burst locks into fresh files (Worker.burst)
BURST = conf("nemesis_burst", 0)


def paths(d):
    return [os.path.join(d, "nem%d" % i) for i in range(FILES)]


def flock(typ, start, length):
    # struct flock on x86_64: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
    return struct.pack("hhqqi4x", typ, 0, start, length, 0)


def getlk(fd, start, length, typ):
    t, _, s, l, pid = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, flock(typ, start, length)))
    return t, s, l, pid


def write_atomic(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def append(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


# --- worker -------------------------------------------------------------------------------

class Worker:
    """One process: its locks, what it expects in every byte it holds, its counts."""

    def __init__(self, ident, seed, d, out):
        self.ident, self.out = ident, out
        self.rng = random.Random(seed)
        # node N's workers use file N-1 most (native mode: the node claims it and decides
        # it locally), the file both share next, the other node's now and then (a recall)
        home = int(ident[1]) - 1 if ident[:1] == "n" and ident[1:2] in ("1", "2") else None
        self.weights = [1] * FILES if home is None else [70 if f == home else 25 if f == 2 else 5 for f in range(FILES)]
        self.paths = paths(d)
        self.fds = [os.open(p, os.O_RDWR) for p in self.paths]
        self.mask = [bytearray(FSIZE) for _ in range(FILES)]  # 0xff: held
        self.ex = [bytearray(FSIZE) for _ in range(FILES)]  # 1: held exclusively
        self.want = [bytearray(FSIZE) for _ in range(FILES)]  # the bytes expected there
        self.whose = [[""] * FSIZE for _ in range(FILES)]  # the token or read that set them
        self.seq = 0
        self.nburst = 0
        self.since_empty = 0
        self.stats = {k: 0 for k in (
            "ops", "lock_ex_wait", "lock_sh_wait", "lock_ex_ok", "lock_ex_busy", "lock_sh_ok",
            "lock_sh_busy", "unlock", "unlock_all", "getlk", "getlk_conflict", "close",
            "close_holding", "verify", "bytes_written", "violations", "errors")}
        if BURST:
            self.stats.update(bursts=0, burst_locks=0, probes=0)
        self.state_path = os.path.join(RUN, "state." + ident)
        self.state("run")
        self.flushed = 0.0
        self.stats_path = os.path.join(out, "stats-%s.json" % ident)

    # the monitor reads this: what the worker is doing, since when
    def state(self, kind, desc=""):
        write_atomic(self.state_path, "%s %.3f %s" % (kind, time.monotonic(), desc))

    def flush(self, ended=False):
        s = dict(self.stats, ident=self.ident, ended=ended)
        write_atomic(self.stats_path, json.dumps(s))
        self.flushed = time.monotonic()

    def violation(self, what, **detail):
        self.stats["violations"] += 1
        rec = dict(t=time.time(), ident=self.ident, what=what, **detail)
        append(os.path.join(self.out, "violations.txt"), json.dumps(rec))
        self.flush()

    def error(self, what, e):
        self.stats["errors"] += 1
        append(os.path.join(self.out, "errors.txt"), "%.3f %s %s %s" % (time.time(), self.ident, what, e))

    def held(self, f):
        return self.mask[f].find(b"\xff") >= 0

    def maxkey(self):
        for f in range(FILES - 1, -1, -1):
            i = self.mask[f].rfind(b"\xff")
            if i >= 0:
                return f * FSIZE + i
        return -1

    def verify(self, f, why):
        """Every byte held in file f is what this worker expects there."""
        if not self.held(f):
            return
        data = os.pread(self.fds[f], FSIZE, 0)
        self.stats["verify"] += 1
        m = int.from_bytes(self.mask[f], "big")
        if (int.from_bytes(data, "big") ^ int.from_bytes(self.want[f], "big")) & m == 0:
            return
        bad = [i for i in range(FSIZE) if self.mask[f][i] and data[i] != self.want[f][i]]
        lo, hi = bad[0], bad[-1] + 1
        t = getlk(self.fds[f], lo, hi - lo, fcntl.F_WRLCK)
        self.violation(
            "held bytes changed", file=f, why=why, bytes=len(bad), first=lo, last=hi - 1,
            exclusive=bool(self.ex[f][lo]), expected=self.want[f][lo:hi].hex(),
            found=data[lo:hi].hex(), found_text=data[lo:hi].decode("ascii", "replace"),
            set_by=sorted(set(self.whose[f][i] for i in bad))[:4],
            getlk_now=dict(type=t[0], start=t[1], len=t[2], pid=t[3]))
        # report once: forget the file's locks (unlock it whole)
        self.unlock_all(f, verify=False)

    def call(self, f, cmd, typ, start, length, desc):
        self.state("block" if cmd == fcntl.F_SETLKW else "wait",
                    "%d %d %d %s %s" % (f, start, length, "ex" if typ == fcntl.F_WRLCK else "sh" if typ == fcntl.F_RDLCK else "un", desc))
        try:
            fcntl.fcntl(self.fds[f], cmd, flock(typ, start, length))
            return True
        except OSError as e:
            if cmd == fcntl.F_SETLK and typ != fcntl.F_UNLCK and e.errno in (errno.EAGAIN, errno.EACCES):
                return False
            self.error(desc, e)
            return False
        finally:
            self.stats["ops"] += 1
            self.state("run")

    def token(self, length):
        self.seq += 1
        tok = "<%s.%d>" % (self.ident, self.seq)
        stream = hashlib.blake2b(tok.encode(), digest_size=64).digest()
        data = (tok.encode() + stream)[:length] if length >= len(tok) else stream[:length]
        return tok, data

    def lock(self, f, start, length, exclusive, blocking):
        typ = fcntl.F_WRLCK if exclusive else fcntl.F_RDLCK
        cmd = fcntl.F_SETLKW if blocking else fcntl.F_SETLK
        kind = ("lock_ex" if exclusive else "lock_sh") + ("_wait" if blocking else "")
        if exclusive and self.mask[f].find(b"\xff", start, start + length) >= 0:
            self.verify(f, "before " + kind)  # bytes held already are about to be rewritten
        if not self.call(f, cmd, typ, start, length, kind):
            if not blocking:
                self.stats[kind + "_busy"] += 1
            return
        self.stats[kind if blocking else kind + "_ok"] += 1
        end = start + length
        if exclusive:
            tok, data = self.token(length)
            os.pwrite(self.fds[f], data, start)
            self.stats["bytes_written"] += length
            self.want[f][start:end] = data
            self.whose[f][start:end] = [tok] * length
            self.ex[f][start:end] = b"\x01" * length
        else:
            data = os.pread(self.fds[f], length, start)
            for i in range(start, end):
                # bytes this worker held already must be unchanged; the others are as read
                if not self.mask[f][i]:
                    self.want[f][i] = data[i - start]
                    self.whose[f][i] = "read %s.%d" % (self.ident, self.seq)
            self.ex[f][start:end] = bytes(length)
        self.mask[f][start:end] = b"\xff" * length

    def unlock(self, f, start, length):
        self.verify(f, "before unlock")
        if self.call(f, fcntl.F_SETLK, fcntl.F_UNLCK, start, length, "unlock"):
            self.stats["unlock"] += 1
            self.mask[f][start:start + length] = bytes(length)
            self.ex[f][start:start + length] = bytes(length)

    def unlock_all(self, f, verify=True):
        if verify:
            self.verify(f, "before unlock_all")
        if self.call(f, fcntl.F_SETLK, fcntl.F_UNLCK, 0, 0, "unlock_all"):
            self.stats["unlock_all"] += 1
        self.mask[f] = bytearray(FSIZE)
        self.ex[f] = bytearray(FSIZE)

    def close(self, f):
        """close() of the fd: the kernel drops every lock of this process on the file."""
        self.verify(f, "before close")
        self.stats["close"] += 1
        if self.held(f):
            self.stats["close_holding"] += 1
        self.state("wait", "%d 0 0 close" % f)
        os.close(self.fds[f])
        self.fds[f] = os.open(self.paths[f], os.O_RDWR)
        self.stats["ops"] += 1
        self.state("run")
        self.mask[f] = bytearray(FSIZE)
        self.ex[f] = bytearray(FSIZE)

    def getlk_check(self, f, start, length):
        self.state("wait", "%d %d %d ex getlk" % (f, start, length))
        try:
            t, s, l, pid = getlk(self.fds[f], start, length, fcntl.F_WRLCK)
        except OSError as e:
            self.error("getlk", e)
            return
        finally:
            self.stats["ops"] += 1
            self.state("run")
        self.stats["getlk"] += 1
        if t == fcntl.F_UNLCK:
            return
        self.stats["getlk_conflict"] += 1
        end = FSIZE if l == 0 else min(FSIZE, s + l)
        for i in range(max(0, s), end):
            if self.mask[f][i] and (self.ex[f][i] or t == fcntl.F_WRLCK):
                self.violation(
                    "F_GETLK names another owner's lock over bytes held here", file=f, byte=i,
                    held_exclusive=bool(self.ex[f][i]), their_type="ex" if t == fcntl.F_WRLCK else "sh",
                    their_start=s, their_len=l, their_pid=pid, query=[start, length])
                return

    def burst(self):
        """NEMESIS_BURST=1: this process takes BURST_LOCKS exclusive one-byte locks (two
        bytes apart: none merge) of a file no lock is on, from BURST_THREADS threads at
        once, so that many of its requests are in CPG together while its first one claims
        the file (issue 51's second defect: more than one STATE holds); all must be
        granted (nobody else locks those bytes but the other node's occasional probe),
        then it unlocks the file whole. A request that never returns is a hang."""
        import threading
        self.nburst += 1
        path = os.path.join(os.path.dirname(self.paths[0]), "burst-%s-%d" % (self.ident, self.nburst))
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        write_atomic(os.path.join(NEM, "burst." + self.ident), path)
        got = [0] * BURST_THREADS

        def take(t):
            for j in range(t, BURST_LOCKS, BURST_THREADS):
                try:
                    fcntl.fcntl(fd, fcntl.F_SETLK, flock(fcntl.F_WRLCK, 2 * j, 1))
                    got[t] += 1
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EACCES):
                        self.error("burst lock", e)
        self.state("wait", "0 0 0 ex burst %s" % path)
        threads = [threading.Thread(target=take, args=(t,)) for t in range(BURST_THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.stats["ops"] += BURST_LOCKS
        self.stats["burst_locks"] += sum(got)
        self.state("wait", "0 0 0 un burst-unlock %s" % path)
        try:
            fcntl.fcntl(fd, fcntl.F_SETLK, flock(fcntl.F_UNLCK, 0, 0))
        except OSError as e:
            self.error("burst unlock", e)
        self.stats["ops"] += 1
        os.close(fd)
        self.state("run")
        self.stats["bursts"] += 1

    def probe(self):
        """The other node's latest burst file: F_GETLK and a one-byte F_SETLK there (a
        recall of the file if that node owns it)."""
        try:
            names = [x for x in os.listdir(NEM) if x.startswith("burst.")]
        except OSError:
            return
        mine = "n" + self.ident[1]
        others = [x for x in names if not x.startswith("burst.%s" % mine)]
        if not others:
            return
        try:
            path = open(os.path.join(NEM, self.rng.choice(others))).read().strip()
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return
        b = 2 * self.rng.randrange(BURST_LOCKS)
        self.state("wait", "0 %d 1 ex probe %s" % (b, path))
        try:
            getlk(fd, b, 1, fcntl.F_WRLCK)
            fcntl.fcntl(fd, fcntl.F_SETLK, flock(fcntl.F_WRLCK, b, 1))
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                self.error("probe", e)
        finally:
            os.close(fd)  # drops the byte if it was taken
            self.stats["ops"] += 2
            self.stats["probes"] += 1
            self.state("run")

    def step(self):
        rng = self.rng
        if BURST and not any(self.held(g) for g in range(FILES)):
            r = rng.random()
            if r < 0.01:
                self.burst()
                return
            if r < 0.05:
                self.probe()
                return
        if self.since_empty > 12 or sum(m.count(0xff) for m in self.mask) > 160:
            for f in range(FILES):
                if self.held(f):
                    self.unlock_all(f)
            self.since_empty = 0
            return
        f = rng.choices(range(FILES), self.weights)[0]
        start = rng.randrange(FSIZE - 1)
        length = rng.randint(1, min(MAXLEN, FSIZE - start))
        r = rng.random()
        if r < 0.55:
            exclusive = rng.random() < 0.5
            # blocking only above every byte held: no cycle of waiters can form
            blocking = f * FSIZE + start > self.maxkey() and rng.random() < 0.75
            self.lock(f, start, length, exclusive, blocking)
        elif r < 0.75:
            files = [g for g in range(FILES) if self.held(g)]
            if files:
                f = rng.choice(files)
                i = rng.choice([j for j, b in enumerate(self.mask[f]) if b])
                start = max(0, i - rng.randrange(MAXLEN))
                length = min(FSIZE - start, rng.randint(1, MAXLEN))
            self.unlock(f, start, length)
        elif r < 0.87:
            self.getlk_check(f, start, length)
        elif r < 0.92:
            self.close(f)
        else:
            for g in range(FILES):
                self.verify(g, "holding")
            time.sleep(rng.uniform(0, 0.05))
        self.since_empty = self.since_empty + 1 if any(self.held(g) for g in range(FILES)) else 0
        # sometimes keep what is held a moment
        if rng.random() < 0.2:
            time.sleep(rng.uniform(0, 0.1))
        for g in range(FILES):
            if self.held(g) and rng.random() < 0.15:
                self.verify(g, "holding")

    def run(self):
        stop, pause = os.path.join(RUN, "stop"), os.path.join(RUN, "pause")
        while not os.path.exists(stop):
            if os.path.exists(pause):
                self.state("paused")
                while os.path.exists(pause) and not os.path.exists(stop):
                    time.sleep(0.1)
                self.state("run")
                continue
            self.step()
            if time.monotonic() - self.flushed > 1:
                self.flush()
        for f in range(FILES):
            if self.held(f):
                self.unlock_all(f)
        for fd in self.fds:
            os.close(fd)
        self.flush(ended=True)
        self.state("done")


def worker_main(ident, seed, d, out):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    w = Worker(ident, int(seed), d, out)
    try:
        w.run()
    except Exception as e:  # any surprise is a failure the report shows
        w.error("worker died", repr(e))
        w.flush(ended=False)
        raise


# --- agent --------------------------------------------------------------------------------

class Agent:
    """A node's agent: starts its workers, watches them for hangs, obeys the host."""

    def __init__(self, n, gen, d):
        self.n, self.gen, self.d = n, gen, d
        self.out = "/host/out/node%d/g%d" % (n, gen)
        self.workers = []
        self.epoch = 0
        self.nworkers = conf("nemesis_workers", 3)
        self.hang_s = conf("nemesis_hang", 180)
        self.seed = conf("nemesis_seed", 1)
        self.reported = set()
        self.lock = threading.Lock()
        os.makedirs(RUN, exist_ok=True)

    def log(self, msg):
        append(os.path.join(self.out, "agent.txt"), "%.3f %s" % (time.time(), msg))

    def start_workers(self):
        for f in os.listdir(RUN):
            os.unlink(os.path.join(RUN, f))
        self.epoch += 1
        with self.lock:
            self.workers = []
            for w in range(self.nworkers):
                ident = "n%dg%dm%dw%d" % (self.n, self.gen, self.epoch, w)
                seed = hash((self.seed, self.n, self.gen, self.epoch, w)) & 0xffffffff
                err = open(os.path.join(self.out, "worker-%s.err" % ident), "w")
                p = subprocess.Popen([sys.executable, __file__, "worker", ident, str(seed), self.d, self.out],
                                     stdin=subprocess.DEVNULL, stdout=err, stderr=err)
                self.workers.append((ident, p))
        self.log("workers started: epoch %d" % self.epoch)

    def states(self):
        out = {}
        for ident, _ in self.workers:
            try:
                with open(os.path.join(RUN, "state." + ident)) as f:
                    kind, t0, *desc = f.read().split(" ", 2)
                out[ident] = (kind, float(t0), desc[0] if desc else "")
            except (OSError, ValueError):
                out[ident] = ("starting", time.monotonic(), "")
        return out

    def stop_workers(self, kill, limit):
        """Ends the workers: kill -9 at once, or asked to stop (each ends after the request
        in progress; one that has not ended after `limit` s waits for an answer: a hang)."""
        with self.lock:
            workers = list(self.workers)
            self.workers = []
        if kill:
            for _, p in workers:
                p.kill()
        else:
            open(os.path.join(RUN, "stop"), "w").close()
        t0 = time.monotonic()
        stuck = []
        for ident, p in workers:
            try:
                p.wait(max(1, limit - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                stuck.append(ident)
        if stuck:
            self.hang(stuck, "did not end within %d s of stop" % limit)
            for ident, p in workers:
                if ident in stuck:
                    p.kill()
                    p.wait()
        return stuck

    def diag(self, tag):
        """What both daemons hold and log, for a violation or a hang."""
        for name, cmd in (("plocks", [DLM_TOOL, "plocks", "gfs0"]), ("dump", [DLM_TOOL, "dump"]),
                          ("ls", [DLM_TOOL, "ls"]), ("status", [DLM_TOOL, "status"]),
                          ("waits", ["/host/bin/dlm_tool", "plocks", "--waits", "gfs0"])):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
                text = r.stdout + r.stderr
            except (OSError, subprocess.TimeoutExpired) as e:
                text = "failed: %r" % e
            with open(os.path.join(self.out, "diag-%s-%s.txt" % (tag, name)), "w") as f:
                f.write(text)

    def hang(self, idents, why):
        tag = "hang%d" % int(time.time())
        line = "%.3f node %d: %s: %s" % (time.time(), self.n, " ".join(idents), why)
        append(os.path.join(self.out, "hangs.txt"), line)
        self.log("HANG " + line)
        write_atomic(os.path.join(NEM, "hang.%d.%d.%s" % (self.n, self.gen, tag)), line)
        self.diag(tag)

    def monitor(self):
        """Every 5 s: a request older than hang_s is a hang if it is non-blocking, or if
        nobody else holds a conflicting range (F_GETLK from a process of its own)."""
        while True:
            time.sleep(5)
            with self.lock:
                st = self.states()
            now = time.monotonic()
            for ident, (kind, t0, desc) in st.items():
                if kind not in ("wait", "block") or now - t0 < self.hang_s or (ident, t0) in self.reported:
                    continue
                if kind == "wait":
                    self.reported.add((ident, t0))
                    self.hang([ident], "non-blocking request unanswered for %.0f s: %s" % (now - t0, desc))
                    continue
                f, start, length, mode = desc.split()[:4]
                try:
                    r = subprocess.run([sys.executable, __file__, "getlk", paths(self.d)[int(f)], start, length,
                                        "1" if mode == "ex" else "0"], capture_output=True, text=True, timeout=90)
                    held = r.stdout.strip()
                except subprocess.TimeoutExpired:
                    held = "getlk unanswered"
                if held.startswith("free") or held == "getlk unanswered":
                    self.reported.add((ident, t0))
                    self.hang([ident], "F_SETLKW waiting %.0f s (%s), range %s" % (now - t0, desc, held))
                elif (ident, t0, "slow") not in self.reported:
                    self.reported.add((ident, t0, "slow"))
                    self.log("slow: %s waits %.0f s for %s behind %s" % (ident, now - t0, desc, held))

    def sh(self, *cmd, timeout=120):
        try:
            r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
            return r.returncode, (r.stdout + r.stderr).strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            return -1, repr(e)

    def command(self, cmd, args):
        if cmd == "pause":
            open(os.path.join(RUN, "pause"), "w").close()
            t0 = time.monotonic()
            while time.monotonic() - t0 < 150:
                st = self.states()
                if all(k in ("paused", "block", "done") for k, _, _ in st.values()):
                    time.sleep(1)
                    return "quiet " + " ".join("%s=%s" % (i, k) for i, (k, _, _) in sorted(st.items()))
                time.sleep(0.2)
            return "not quiet " + " ".join("%s=%s:%s" % (i, k, d) for i, (k, _, d) in sorted(self.states().items()))
        if cmd == "resume":
            try:
                os.unlink(os.path.join(RUN, "pause"))
            except OSError:
                pass
            return "resumed"
        if cmd == "dump":
            rc, text = self.sh(DLM_TOOL, "plocks", "gfs0", timeout=60)
            with open(os.path.join(self.out, "dump-%s.txt" % args[0]), "w") as f:
                f.write(text + "\n" if text else "")
            self.metrics()
            return "dumped rc %d" % rc
        if cmd == "diag":
            self.diag(args[0])
            return "diag"
        if cmd in ("cut", "heal"):
            if cmd == "cut":
                cmds = [["nft", "add", "table", "inet", "cut"],
                        ["nft", "add", "chain", "inet", "cut", "in", "{ type filter hook input priority 0; policy accept; }"],
                        ["nft", "add", "chain", "inet", "cut", "out", "{ type filter hook output priority 0; policy accept; }"],
                        ["nft", "add", "rule", "inet", "cut", "in", "udp", "dport", "5405", "drop"],
                        ["nft", "add", "rule", "inet", "cut", "out", "udp", "dport", "5405", "drop"]]
            else:
                cmds = [["nft", "delete", "table", "inet", "cut"]]
            res = [self.sh(*c) for c in cmds]
            return "%s %s" % (cmd, " ".join(str(rc) for rc, _ in res))
        if cmd == "umount":
            kill = args[0] == "kill"
            stuck = self.stop_workers(kill, 120)
            rc1, t1 = 1, ""
            for _ in range(20):
                rc1, t1 = self.sh("umount", "/mnt")
                if rc1 == 0:
                    break
                time.sleep(1)
            time.sleep(float(args[1]) if len(args) > 1 else 3)
            rc2, t2 = self.sh("mount", "-t", "gfs2", "/dev/vdb", "/mnt", timeout=600)
            if rc2 == 0:
                self.start_workers()
            return "umount rc %d %s; mount rc %d %s; workers %s, stuck %s" % (
                rc1, t1, rc2, t2, "killed" if kill else "stopped", stuck)
        return "unknown command " + cmd

    def fatal(self, cmd):
        """Commands after which this node is gone: the ack is written first."""
        subprocess.run(["sync"])
        if cmd == "crash":
            with open("/proc/sys/kernel/sysrq", "w") as f:
                f.write("1")
            with open("/proc/sysrq-trigger", "w") as f:
                f.write("b")
        elif cmd == "killdaemon":
            pid = subprocess.run(["pidof", "dlm_controld"], capture_output=True, text=True).stdout.split()
            for p in pid:
                os.kill(int(p), signal.SIGKILL)
            self.log("dlm_controld killed: %s" % pid)

    def metrics(self):
        """Our daemon's counters as they are now (the report reads each boot's last)."""
        try:
            import urllib.request
            text = urllib.request.urlopen("http://127.0.0.1:9465/metrics", timeout=10).read().decode()
            write_atomic(os.path.join(self.out, "metrics.txt"), text)
        except Exception as e:
            self.log("metrics: %r" % e)

    def stop(self):
        stuck = self.stop_workers(False, 120)
        self.metrics()
        rc, text = self.sh("umount", "/mnt")
        self.log("stop: stuck %s; umount %d %s" % (stuck, rc, text))
        if rc == 0:
            self.sh("systemctl", "stop", "dlm")
            self.sh("systemctl", "stop", "corosync")
        self.sh("sh", "-c", "journalctl -u dlm --no-pager >%s/journal_dlm.txt" % self.out)
        write_atomic(os.path.join(self.out, "done"), "stuck %s umount %d\n" % (stuck, rc))

    def run(self):
        os.makedirs(NEM, exist_ok=True)
        self.start_workers()
        threading.Thread(target=self.monitor, daemon=True).start()
        write_atomic(os.path.join(NEM, "ready.%d.%d" % (self.n, self.gen)), "%.3f" % time.time())
        prefix = "cmd.%d.%d." % (self.n, self.gen)
        while True:
            names = sorted(x for x in os.listdir(NEM) if x.startswith(prefix) and not x.endswith(".tmp"))
            if not names:
                time.sleep(0.3)
                continue
            name = names[0]
            with open(os.path.join(NEM, name)) as f:
                words = f.read().split()
            os.unlink(os.path.join(NEM, name))
            ack = os.path.join(NEM, "ack" + name[3:])
            cmd, args = words[0], words[1:]
            self.log("command %s %s" % (cmd, " ".join(args)))
            if cmd in ("crash", "killdaemon"):
                write_atomic(ack, cmd)
                self.fatal(cmd)
                time.sleep(600)
                continue
            if cmd == "stop":
                self.stop()
                write_atomic(ack, "stopped")
                subprocess.run(["sync"])
                subprocess.run(["systemctl", "poweroff", "-ff"])
                time.sleep(600)
            result = self.command(cmd, args)
            self.log("-> " + result)
            write_atomic(ack, result)


def make_files(d):
    for p in paths(d):
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, bytes(FSIZE), 0)
        os.fsync(fd)
        os.close(fd)


def getlk_main(path, start, length, ex):
    fd = os.open(path, os.O_RDWR)
    t, s, l, pid = getlk(fd, int(start), int(length), fcntl.F_WRLCK if ex == "1" else fcntl.F_RDLCK)
    if t == fcntl.F_UNLCK:
        print("free")
    else:
        print("held %s [%d len %d] pid %d" % ("ex" if t == fcntl.F_WRLCK else "sh", s, l, pid))


# --- on the host ---------------------------------------------------------------------------

def selftest(d, secs=3.0):
    """The checker on the host's own file system before a run: three workers with real
    locks see no violation; the same workers with their F_SETLK/F_SETLKW calls skipped
    (every range granted to all of them at once: what a double grant is) must see some."""
    global RUN
    found = {}
    for mode in ("real", "skipped"):
        base = os.path.join(d, mode)
        out, RUN = os.path.join(base, "out"), os.path.join(base, "run")
        os.makedirs(out)
        os.makedirs(RUN)
        make_files(base)
        pids = []
        for i in range(3):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    if mode == "skipped":
                        real = fcntl.fcntl
                        fcntl.fcntl = lambda fd, cmd, arg=0: (
                            arg if cmd in (fcntl.F_SETLK, fcntl.F_SETLKW) else real(fd, cmd, arg))
                    Worker("%s%d" % (mode, i), i, base, out).run()
                except Exception as e:
                    print("selftest worker:", repr(e), file=sys.stderr)
                    code = 1
                os._exit(code)
            pids.append(pid)
        time.sleep(secs)
        open(os.path.join(RUN, "stop"), "w").close()
        ok = all(os.waitpid(p, 0)[1] == 0 for p in pids)
        try:
            found[mode] = len(open(os.path.join(out, "violations.txt")).read().splitlines())
        except OSError:
            found[mode] = 0
        ops = sum(json.load(open(os.path.join(out, f)))["ops"] for f in os.listdir(out) if f.endswith(".json"))
        found[mode + "_ops"] = ops if ok else -1
    print("checker self-test on the host: real locks %d violations in %d operations; locks skipped %d in %d"
          % (found["real"], found["real_ops"], found["skipped"], found["skipped_ops"]))
    sys.exit(0 if found["real"] == 0 and found["real_ops"] > 0 and found["skipped"] > 0 else 1)


def report(out):
    """Each node's counts over all its boots and workers; exit 1 on any violation, hang,
    worker error or a node whose workers did no work."""
    ok = True
    total = {}
    for node in sorted(x for x in os.listdir(out) if x.startswith("node")):
        nd = os.path.join(out, node)
        counts, workers, ended, viol, hangs, errors = {}, 0, 0, [], [], []
        for g in sorted(os.listdir(nd)):
            gd = os.path.join(nd, g)
            if not os.path.isdir(gd):
                continue
            for f in sorted(os.listdir(gd)):
                p = os.path.join(gd, f)
                if f.startswith("stats-") and f.endswith(".json"):
                    s = json.load(open(p))
                    workers += 1
                    ended += bool(s.pop("ended"))
                    s.pop("ident")
                    for k, v in s.items():
                        counts[k] = counts.get(k, 0) + v
                elif f == "violations.txt":
                    viol += [l for l in open(p).read().splitlines() if l]
                elif f == "hangs.txt":
                    hangs += [l for l in open(p).read().splitlines() if l]
                elif f == "errors.txt":
                    errors += [l for l in open(p).read().splitlines() if l]
        # what the daemons did for them, from each boot's last metrics
        daemon = {}
        for g in sorted(os.listdir(nd)):
            try:
                lines = open(os.path.join(nd, g, "metrics.txt")).read().splitlines()
            except OSError:
                continue
            for l in lines:
                name = l.split("{")[0].split(" ")[0]
                if name in ("dlm_plock_requests_total", "dlm_plock_local_total", "dlm_plock_recalls_total",
                            "dlm_plock_native_messages_total") and 'lockspace="gfs0"' in l:
                    daemon[name] = daemon.get(name, 0) + int(float(l.split()[-1]))
        total[node] = counts.get("ops", 0)
        print("%s: %d lock operations by %d workers (%d ended by a stop, the others with their node or mount)"
              % (node, counts.get("ops", 0), workers, ended))
        print("  " + ", ".join("%s %d" % kv for kv in sorted(counts.items()) if kv[0] != "ops"))
        if daemon:
            print("  the daemons (each boot's last count; a boot fenced loses its own): "
                  + ", ".join("%s %d" % (k[len("dlm_plock_"):-len("_total")], v) for k, v in sorted(daemon.items())))
        print("  violations %d, hangs %d, errors %d" % (len(viol), len(hangs), len(errors)))
        for l in viol[:10] + hangs[:10] + errors[:10]:
            print("  " + l[:600])
        ok &= not viol and not hangs and not errors and counts.get("ops", 0) > 0
    print("lock operations: " + ", ".join("%s %d" % kv for kv in sorted(total.items())))
    sys.exit(0 if ok and len(total) == 2 else 1)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "files":
        make_files(sys.argv[2])
    elif what == "agent":
        Agent(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]).run()
    elif what == "worker":
        worker_main(*sys.argv[2:6])
    elif what == "getlk":
        getlk_main(*sys.argv[2:6])
    elif what == "report":
        report(sys.argv[2])
    elif what == "selftest":
        selftest(sys.argv[2])
    else:
        sys.exit("unknown: " + what)
