/*
 * Test-only LD_PRELOAD shim: corosync pushing back. While the file named by the
 * environment variable DLM_PUSHBACK_FILE exists, cpg_mcast_joined() answers
 * CS_ERR_TRY_AGAIN without sending, as corosync does when its queue is full or a
 * membership change is being synchronised. Otherwise the real function is called.
 * Likewise cpg_leave() while the file named by DLM_PUSHBACK_LEAVE_FILE exists.
 * Used by dlm_controld/tests/daemon_corosync.rs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/uio.h>
#include <corosync/cpg.h>

typedef cs_error_t (*mcast_fn)(cpg_handle_t, cpg_guarantee_t, const struct iovec *,
                               unsigned int);

cs_error_t cpg_mcast_joined(cpg_handle_t handle, cpg_guarantee_t guarantee,
                            const struct iovec *iovec, unsigned int iov_len)
{
	static mcast_fn real;
	const char *hold = getenv("DLM_PUSHBACK_FILE");

	if (hold && access(hold, F_OK) == 0)
		return CS_ERR_TRY_AGAIN;
	if (!real)
		real = (mcast_fn)dlsym(RTLD_NEXT, "cpg_mcast_joined");
	if (!real)
		return CS_ERR_LIBRARY;
	return real(handle, guarantee, iovec, iov_len);
}

typedef cs_error_t (*leave_fn)(cpg_handle_t, const struct cpg_name *);

cs_error_t cpg_leave(cpg_handle_t handle, const struct cpg_name *group_name)
{
	static leave_fn real;
	const char *hold = getenv("DLM_PUSHBACK_LEAVE_FILE");

	if (hold && access(hold, F_OK) == 0)
		return CS_ERR_TRY_AGAIN;
	if (!real)
		real = (leave_fn)dlsym(RTLD_NEXT, "cpg_leave");
	if (!real)
		return CS_ERR_LIBRARY;
	return real(handle, group_name);
}
