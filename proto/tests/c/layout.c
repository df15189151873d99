/* Prints "<struct>.<field> <offset> <size>" and "<struct> sizeof <size>" for every
 * structure the Rust crate dlm-proto encodes, from the real headers where they are
 * installed (linux-libc-dev, libdlmcontrol-dev) and daemon_structs.h otherwise. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <linux/dlmconstants.h>
#include <linux/dlm_plock.h>
#include <linux/dlm_device.h>
#include <libdlmcontrol.h>
#include "daemon_structs.h"

#define S(t, n) printf("%s sizeof %zu\n", n, sizeof(t))
#define F(t, n, f) printf("%s.%s %zu %zu\n", n, #f, offsetof(t, f), sizeof(((t *)0)->f))
#define G(t, n, f, name) printf("%s.%s %zu %zu\n", n, name, offsetof(t, f), sizeof(((t *)0)->f))

int main(void)
{
	S(struct dlm_plock_info, "dlm_plock_info");
	F(struct dlm_plock_info, "dlm_plock_info", version);
	F(struct dlm_plock_info, "dlm_plock_info", optype);
	F(struct dlm_plock_info, "dlm_plock_info", ex);
	F(struct dlm_plock_info, "dlm_plock_info", wait);
	F(struct dlm_plock_info, "dlm_plock_info", flags);
	F(struct dlm_plock_info, "dlm_plock_info", pid);
	F(struct dlm_plock_info, "dlm_plock_info", nodeid);
	F(struct dlm_plock_info, "dlm_plock_info", rv);
	F(struct dlm_plock_info, "dlm_plock_info", fsid);
	F(struct dlm_plock_info, "dlm_plock_info", number);
	F(struct dlm_plock_info, "dlm_plock_info", start);
	F(struct dlm_plock_info, "dlm_plock_info", end);
	F(struct dlm_plock_info, "dlm_plock_info", owner);
	printf("DLM_PLOCK_VERSION %d.%d.%d\n", DLM_PLOCK_VERSION_MAJOR,
	       DLM_PLOCK_VERSION_MINOR, DLM_PLOCK_VERSION_PATCH);
	printf("DLM_PLOCK_FL_CLOSE %d\n", DLM_PLOCK_FL_CLOSE);

	S(struct dlm_write_request, "dlm_write_request");
	F(struct dlm_write_request, "dlm_write_request", version);
	F(struct dlm_write_request, "dlm_write_request", cmd);
	F(struct dlm_write_request, "dlm_write_request", is64bit);
	F(struct dlm_write_request, "dlm_write_request", unused);
	G(struct dlm_write_request, "dlm_write_request", i.lspace.flags, "flags");
	G(struct dlm_write_request, "dlm_write_request", i.lspace.minor, "minor");
	printf("dlm_write_request.name %zu\n", offsetof(struct dlm_write_request, i.lspace.name));
	printf("DLM_DEVICE_VERSION %d.%d.%d\n", DLM_DEVICE_VERSION_MAJOR,
	       DLM_DEVICE_VERSION_MINOR, DLM_DEVICE_VERSION_PATCH);
	printf("DLM_USER_CREATE_LOCKSPACE %d\n", DLM_USER_CREATE_LOCKSPACE);
	printf("DLM_USER_REMOVE_LOCKSPACE %d\n", DLM_USER_REMOVE_LOCKSPACE);

	S(struct dlmc_change, "dlmc_change");
	F(struct dlmc_change, "dlmc_change", member_count);
	F(struct dlmc_change, "dlmc_change", joined_count);
	F(struct dlmc_change, "dlmc_change", remove_count);
	F(struct dlmc_change, "dlmc_change", failed_count);
	F(struct dlmc_change, "dlmc_change", wait_condition);
	F(struct dlmc_change, "dlmc_change", wait_messages);
	F(struct dlmc_change, "dlmc_change", seq);
	F(struct dlmc_change, "dlmc_change", combined_seq);

	S(struct dlmc_lockspace, "dlmc_lockspace");
	F(struct dlmc_lockspace, "dlmc_lockspace", cg_prev);
	F(struct dlmc_lockspace, "dlmc_lockspace", cg_next);
	F(struct dlmc_lockspace, "dlmc_lockspace", flags);
	F(struct dlmc_lockspace, "dlmc_lockspace", global_id);
	F(struct dlmc_lockspace, "dlmc_lockspace", name);

	S(struct dlmc_node, "dlmc_node");
	F(struct dlmc_node, "dlmc_node", nodeid);
	F(struct dlmc_node, "dlmc_node", flags);
	F(struct dlmc_node, "dlmc_node", added_seq);
	F(struct dlmc_node, "dlmc_node", removed_seq);
	F(struct dlmc_node, "dlmc_node", fail_reason);
	F(struct dlmc_node, "dlmc_node", fail_walltime);
	F(struct dlmc_node, "dlmc_node", fail_monotime);
	printf("DLMC_LF_SAVE_PLOCKS %d\n", DLMC_LF_SAVE_PLOCKS);
	printf("DLMC_NF_CHECK_FS %d\n", DLMC_NF_CHECK_FS);
	printf("DLMC_NODES_NEXT %d\n", DLMC_NODES_NEXT);
	printf("DLMC_RUN_COMMAND_LEN %d\n", DLMC_RUN_COMMAND_LEN);

	S(struct x_dlm_header, "dlm_header");
	F(struct x_dlm_header, "dlm_header", version);
	F(struct x_dlm_header, "dlm_header", type);
	F(struct x_dlm_header, "dlm_header", nodeid);
	F(struct x_dlm_header, "dlm_header", to_nodeid);
	F(struct x_dlm_header, "dlm_header", global_id);
	F(struct x_dlm_header, "dlm_header", flags);
	F(struct x_dlm_header, "dlm_header", msgdata);
	F(struct x_dlm_header, "dlm_header", msgdata2);
	F(struct x_dlm_header, "dlm_header", pad);

	S(struct x_ls_info, "ls_info");
	F(struct x_ls_info, "ls_info", ls_info_size);
	F(struct x_ls_info, "ls_info", id_info_size);
	F(struct x_ls_info, "ls_info", id_info_count);
	F(struct x_ls_info, "ls_info", started_count);
	F(struct x_ls_info, "ls_info", member_count);
	F(struct x_ls_info, "ls_info", joined_count);
	F(struct x_ls_info, "ls_info", remove_count);
	F(struct x_ls_info, "ls_info", failed_count);

	S(struct x_protocol, "protocol");
	F(struct x_protocol, "protocol", daemon_max);
	F(struct x_protocol, "protocol", kernel_max);
	F(struct x_protocol, "protocol", daemon_run);
	F(struct x_protocol, "protocol", kernel_run);

	S(struct x_fence_result, "fence_result");
	F(struct x_fence_result, "fence_result", version);
	F(struct x_fence_result, "fence_result", flags);
	F(struct x_fence_result, "fence_result", nodeid);
	F(struct x_fence_result, "fence_result", result);
	F(struct x_fence_result, "fence_result", fence_walltime);
	F(struct x_fence_result, "fence_result", unused);

	S(struct x_run_info, "run_info");
	F(struct x_run_info, "run_info", dest_nodeid);
	F(struct x_run_info, "run_info", start_nodeid);
	F(struct x_run_info, "run_info", local_pid);
	F(struct x_run_info, "run_info", local_result);
	F(struct x_run_info, "run_info", need_replies);
	F(struct x_run_info, "run_info", reply_count);
	F(struct x_run_info, "run_info", fail_count);
	F(struct x_run_info, "run_info", flags);

	S(struct x_resource_data, "resource_data");
	F(struct x_resource_data, "resource_data", number);
	F(struct x_resource_data, "resource_data", owner);
	F(struct x_resource_data, "resource_data", lock_count);
	F(struct x_resource_data, "resource_data", flags);
	F(struct x_resource_data, "resource_data", pad);

	S(struct x_plock_data, "plock_data");
	F(struct x_plock_data, "plock_data", start);
	F(struct x_plock_data, "plock_data", end);
	F(struct x_plock_data, "plock_data", owner);
	F(struct x_plock_data, "plock_data", pid);
	F(struct x_plock_data, "plock_data", nodeid);
	F(struct x_plock_data, "plock_data", ex);
	F(struct x_plock_data, "plock_data", waiter);
	F(struct x_plock_data, "plock_data", pad1);
	F(struct x_plock_data, "plock_data", pad);

	S(struct x_dlmc_header, "dlmc_header");
	F(struct x_dlmc_header, "dlmc_header", magic);
	F(struct x_dlmc_header, "dlmc_header", version);
	F(struct x_dlmc_header, "dlmc_header", command);
	F(struct x_dlmc_header, "dlmc_header", option);
	F(struct x_dlmc_header, "dlmc_header", len);
	F(struct x_dlmc_header, "dlmc_header", data);
	F(struct x_dlmc_header, "dlmc_header", flags);
	F(struct x_dlmc_header, "dlmc_header", unused);
	F(struct x_dlmc_header, "dlmc_header", name);

	S(struct x_dlmc_state, "dlmc_state");
	F(struct x_dlmc_state, "dlmc_state", type);
	F(struct x_dlmc_state, "dlmc_state", flags);
	F(struct x_dlmc_state, "dlmc_state", nodeid);
	F(struct x_dlmc_state, "dlmc_state", data32);
	F(struct x_dlmc_state, "dlmc_state", data64);
	F(struct x_dlmc_state, "dlmc_state", str_len);
	F(struct x_dlmc_state, "dlmc_state", bin_len);
	return 0;
}
