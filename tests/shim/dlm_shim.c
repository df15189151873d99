/*
 * LD_PRELOAD shim that lets the unmodified C dlm_controld run on the project's fake
 * kernel (test code only). The daemon is started in a mount namespace where the fake
 * kernel's sys/kernel tree is bind-mounted on /sys/kernel; $DLM_FAKE_ROOT names the
 * fake kernel's root. The shim:
 *  - turns open("/dev/misc/dlm_plock") into a SOCK_SEQPACKET connection to the fake
 *    kernel's plock socket (one packet = one read() or write() of the device);
 *  - turns the NETLINK_KOBJECT_UEVENT socket into a connection to the fake kernel's
 *    uevent socket (bind and setsockopt on it succeed and do nothing);
 *  - opens configfs/sysfs attributes for writing with O_CREAT|O_APPEND, so each write is
 *    a new record for the fake kernel, as on the real (virtual) files;
 *  - makes the default groups configfs makes with a directory (cluster/comms,
 *    cluster/spaces, spaces/<ls>/nodes) and empties a configfs directory before rmdir;
 *  - reads /etc/dlm/dlm.conf from the fake root (etc/dlm/dlm.conf there);
 *  - shows the daemon a /proc/misc with the three DLM devices, and those devices under
 *    /dev/misc with the matching minors (the monitor device too is the fake kernel's).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

static int uevent_fd = -1;

static void *real(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

static int connect_to(const char *rel)
{
	const char *root = getenv("DLM_FAKE_ROOT");
	int (*sock)(int, int, int) = real("socket");
	struct sockaddr_un a;
	int fd, e;

	if (!root) {
		errno = ENOENT;
		return -1;
	}
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", root, rel);
	fd = sock(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

static const char proc_misc[] = "120 dlm_plock\n121 dlm-monitor\n122 dlm-control\n";

static int misc_minor(const char *path)
{
	if (!strcmp(path, "/dev/misc/dlm_plock"))
		return 120;
	if (!strcmp(path, "/dev/misc/dlm-monitor"))
		return 121;
	if (!strcmp(path, "/dev/misc/dlm-control"))
		return 122;
	return 0;
}

FILE *fopen(const char *path, const char *mode)
{
	FILE *(*f)(const char *, const char *) = real("fopen");

	const char *root = getenv("DLM_FAKE_ROOT");
	char p[4096];

	if (!strcmp(path, "/proc/misc"))
		return fmemopen((void *)proc_misc, strlen(proc_misc), "r");
	if (root && !strncmp(path, "/etc/dlm/", 9)) {
		snprintf(p, sizeof(p), "%s%s", root, path);
		return f(p, mode);
	}
	return f(path, mode);
}

int stat(const char *path, struct stat *st)
{
	int (*s)(const char *, struct stat *) = real("stat");
	int minor = misc_minor(path);

	if (minor) {
		memset(st, 0, sizeof(*st));
		st->st_mode = S_IFCHR | 0666;
		st->st_rdev = makedev(10, minor);
		return 0;
	}
	return s(path, st);
}

static int fake_attr(const char *path, int flags)
{
	return !strncmp(path, "/sys/kernel/", 12) && (flags & O_ACCMODE) == O_WRONLY;
}

static int do_open(const char *fn, const char *path, int flags, mode_t mode)
{
	int (*o)(const char *, int, ...) = real(fn);

	if (!strcmp(path, "/dev/misc/dlm_plock"))
		return connect_to("dev/misc/dlm_plock");
	if (!strcmp(path, "/dev/misc/dlm-monitor"))
		return connect_to("dev/misc/dlm-monitor");
	if (fake_attr(path, flags)) {
		flags |= O_CREAT | O_APPEND;
		mode = 0644;
	}
	return o(path, flags, mode);
}

#define MODE_ARG(flags, mode)                            \
	do {                                             \
		if ((flags) & (O_CREAT | __O_TMPFILE)) { \
			va_list ap;                      \
			va_start(ap, flags);             \
			mode = va_arg(ap, mode_t);       \
			va_end(ap);                      \
		}                                        \
	} while (0)

int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	MODE_ARG(flags, mode);
	return do_open("open", path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	mode_t mode = 0;
	MODE_ARG(flags, mode);
	return do_open("open64", path, flags, mode);
}

int __open_2(const char *path, int flags)
{
	return do_open("open", path, flags, 0);
}

int __open64_2(const char *path, int flags)
{
	return do_open("open64", path, flags, 0);
}

int socket(int domain, int type, int protocol)
{
	int (*s)(int, int, int) = real("socket");

	if (domain == AF_NETLINK && protocol == NETLINK_KOBJECT_UEVENT) {
		uevent_fd = connect_to("run/dlm_controld/uevent.sock");
		return uevent_fd;
	}
	return s(domain, type, protocol);
}

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	int (*b)(int, const struct sockaddr *, socklen_t) = real("bind");

	if (fd >= 0 && fd == uevent_fd)
		return 0;
	return b(fd, addr, len);
}

int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	int (*s)(int, int, int, const void *, socklen_t) = real("setsockopt");

	if (fd >= 0 && fd == uevent_fd)
		return 0;
	return s(fd, level, name, val, len);
}

int mkdir(const char *path, mode_t mode)
{
	int (*m)(const char *, mode_t) = real("mkdir");
	const char *spaces = "/sys/kernel/config/dlm/cluster/spaces/";
	char p[4096];
	int rv = m(path, mode);

	if (rv < 0)
		return rv;
	if (!strcmp(path, "/sys/kernel/config/dlm/cluster")) {
		snprintf(p, sizeof(p), "%s/comms", path);
		m(p, mode);
		snprintf(p, sizeof(p), "%s/spaces", path);
		m(p, mode);
	} else if (!strncmp(path, spaces, strlen(spaces)) &&
		   !strchr(path + strlen(spaces), '/')) {
		snprintf(p, sizeof(p), "%s/nodes", path);
		m(p, mode);
	}
	return 0;
}

int rmdir(const char *path)
{
	int (*r)(const char *) = real("rmdir");
	char p[4096];
	struct dirent *de;
	DIR *d;

	if (!strncmp(path, "/sys/kernel/config/", 19) && (d = opendir(path))) {
		while ((de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
			if (de->d_type == DT_REG)
				unlink(p);
			else if (de->d_type == DT_DIR)
				r(p); /* a default group (nodes, comms, spaces): empty */
		}
		closedir(d);
	}
	return r(path);
}
