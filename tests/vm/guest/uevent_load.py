"""Lock+unlock pairs on one gfs2 file until the file STOP exists (run inside the VM while
udevadm trigger floods the kernel's uevent socket): every request must be answered."""
import fcntl
import os
import sys
import time

d, stop = sys.argv[1], sys.argv[2]
fd = os.open(os.path.join(d, "uevent-load"), os.O_RDWR | os.O_CREAT)
n = 0
t0 = time.monotonic()
while not os.path.exists(stop) and time.monotonic() - t0 < 600:
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
    n += 1
print("pairs %d in %.1f s" % (n, time.monotonic() - t0), flush=True)
