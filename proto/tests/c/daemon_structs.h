/*
 * Layouts of the dlm_controld structures that are not in any installed header
 * (they live in the daemon's private headers and .c files). Written for this project
 * from daemon-spec.md / plock-spec.md; compiled by the C compiler so that its padding
 * and alignment rules, not ours, decide the offsets the Rust side must match.
 */
#include <stdint.h>

#define LAYOUT_LOCKSPACE_LEN 64

struct x_dlm_header {            /* dlm_daemon.h */
	uint16_t version[3];
	uint16_t type;
	uint32_t nodeid;
	uint32_t to_nodeid;
	uint32_t global_id;
	uint32_t flags;
	uint32_t msgdata;
	uint32_t msgdata2;
	uint64_t pad;
};

struct x_ls_info {               /* cpg.c */
	uint32_t ls_info_size;
	uint32_t id_info_size;
	uint32_t id_info_count;
	uint32_t started_count;
	int member_count;
	int joined_count;
	int remove_count;
	int failed_count;
};

struct x_protocol {              /* daemon_cpg.c: four {major,minor,patch,flags} */
	uint16_t daemon_max[4];
	uint16_t kernel_max[4];
	uint16_t daemon_run[4];
	uint16_t kernel_run[4];
};

struct x_fence_result {          /* daemon_cpg.c */
	uint32_t version;
	uint32_t flags;
	uint32_t nodeid;
	uint32_t result;
	uint64_t fence_walltime;
	char unused[1000];
};

struct x_run_info {              /* dlm_daemon.h */
	int dest_nodeid;
	int start_nodeid;
	int local_pid;
	int local_result;
	int need_replies;
	int reply_count;
	int fail_count;
	uint32_t flags;
};

struct x_resource_data {         /* plock.c */
	uint64_t number;
	int owner;
	uint32_t lock_count;
	uint32_t flags;
	uint32_t pad;
};

struct x_plock_data {            /* plock.c */
	uint64_t start;
	uint64_t end;
	uint64_t owner;
	uint32_t pid;
	uint32_t nodeid;
	uint8_t ex;
	uint8_t waiter;
	uint16_t pad1;
	uint32_t pad;
};

struct x_dlmc_header {           /* dlm_controld.h */
	unsigned int magic;
	unsigned int version;
	unsigned int command;
	unsigned int option;
	unsigned int len;
	int data;
	int flags;
	int unused;
	char name[LAYOUT_LOCKSPACE_LEN];
};

struct x_dlmc_state {            /* dlm_controld.h */
	uint32_t type;
	uint32_t flags;
	int32_t nodeid;
	uint32_t data32;
	uint32_t data64;
	uint32_t str_len;
	uint32_t bin_len;
};
