"""`bigdump.py DIR N`: a child takes N one-byte write locks (every other byte of DIR/big),
so the plock table's dump passes 1 MiB; prints the child's pid once it holds them all and
exits (the caller kills the child: its locks go with it)."""
import fcntl
import os
import signal
import sys

d, n = sys.argv[1], int(sys.argv[2])
r, w = os.pipe()
child = os.fork()
if child == 0:
    os.close(r)
    # the caller reads our parent's stdout to its end: the child must not hold it open
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    fd = os.open(os.path.join(d, "big"), os.O_RDWR | os.O_CREAT)
    for i in range(n):
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2 * i)
    os.write(w, b"x")
    while True:
        signal.pause()
os.close(w)
if os.read(r, 1) != b"x":
    sys.exit(1)
print(child)
