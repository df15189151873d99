/* Prints "<name> <offset> <size>" / "<name> sizeof <n>" / "<CONST> <value>" for every
 * declaration of dlm-cpg's sys module, from Debian's corosync headers. */
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <corosync/corotypes.h>
#include <corosync/cpg.h>
#include <corosync/quorum.h>
#include <corosync/cfg.h>
#include <corosync/cmap.h>

#define S(t, n) printf("%s sizeof %zu\n", n, sizeof(t))
#define F(t, n, f) printf("%s.%s %zu %zu\n", n, #f, offsetof(t, f), sizeof(((t *)0)->f))
#define C(c) printf("%s %lld\n", #c, (long long)(c))

int main(void)
{
	S(struct cpg_name, "cpg_name");
	F(struct cpg_name, "cpg_name", length);
	F(struct cpg_name, "cpg_name", value);
	S(struct cpg_address, "cpg_address");
	F(struct cpg_address, "cpg_address", nodeid);
	F(struct cpg_address, "cpg_address", pid);
	F(struct cpg_address, "cpg_address", reason);
	S(struct cpg_ring_id, "cpg_ring_id");
	F(struct cpg_ring_id, "cpg_ring_id", nodeid);
	F(struct cpg_ring_id, "cpg_ring_id", seq);
	S(cpg_model_v1_data_t, "cpg_model_v1_data_t");
	F(cpg_model_v1_data_t, "cpg_model_v1_data_t", model);
	F(cpg_model_v1_data_t, "cpg_model_v1_data_t", cpg_deliver_fn);
	F(cpg_model_v1_data_t, "cpg_model_v1_data_t", cpg_confchg_fn);
	F(cpg_model_v1_data_t, "cpg_model_v1_data_t", cpg_totem_confchg_fn);
	F(cpg_model_v1_data_t, "cpg_model_v1_data_t", flags);
	S(quorum_callbacks_t, "quorum_callbacks_t");
	F(quorum_callbacks_t, "quorum_callbacks_t", quorum_notify_fn);
	S(corosync_cfg_callbacks_t, "corosync_cfg_callbacks_t");
	F(corosync_cfg_callbacks_t, "corosync_cfg_callbacks_t", corosync_cfg_shutdown_callback);
	S(corosync_cfg_node_address_t, "corosync_cfg_node_address_t");
	F(corosync_cfg_node_address_t, "corosync_cfg_node_address_t", address_length);
	F(corosync_cfg_node_address_t, "corosync_cfg_node_address_t", address);
	S(cs_error_t, "cs_error_t");
	S(cpg_handle_t, "cpg_handle_t");
	C(CS_OK); C(CS_ERR_LIBRARY); C(CS_ERR_TRY_AGAIN); C(CS_ERR_BAD_HANDLE); C(CS_ERR_NOT_EXIST);
	C(CS_DISPATCH_ALL); C(CS_DISPATCH_ONE_NONBLOCKING); C(CS_TRACK_CURRENT); C(CS_TRACK_CHANGES);
	C(CPG_TYPE_AGREED); C(CPG_MODEL_V1); C(CPG_MODEL_V1_DELIVER_INITIAL_TOTEM_CONF);
	C(CPG_MAX_NAME_LENGTH);
	C(CPG_REASON_JOIN); C(CPG_REASON_LEAVE); C(CPG_REASON_NODEDOWN); C(CPG_REASON_NODEUP);
	C(CPG_REASON_PROCDOWN);
	C(COROSYNC_CFG_SHUTDOWN_FLAG_REQUEST); C(COROSYNC_CFG_SHUTDOWN_FLAG_NO); C(COROSYNC_CFG_SHUTDOWN_FLAG_YES);
	return 0;
}
