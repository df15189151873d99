//! The Rust `Raw*` layouts agree, field by field, with what the C compiler makes of the real
//! headers (`linux/dlm_plock.h`, `linux/dlm_device.h`, `libdlmcontrol.h`) and of the
//! daemon's private structures (tests/c/daemon_structs.h).

use std::collections::BTreeSet;
use std::mem::offset_of;
use std::path::PathBuf;
use std::process::Command;

use dlm_proto::kernel::{self, RawPlockInfo, RawWriteRequestHead};
use dlm_proto::query::{RawDlmcChange, RawDlmcHeader, RawDlmcLockspace, RawDlmcNode, RawDlmcState};
use dlm_proto::wire::{
    RawDlmHeader, RawFenceResult, RawLsInfo, RawPlockData, RawPlockInfoLe, RawProtocol,
    RawResourceData, RawRunInfo,
};
use zerocopy::FromZeros;

/// `<c struct>.<c field> <offset> <size>` for a Rust field.
macro_rules! field {
    ($out:ident, $t:ty, $c:literal, $f:ident, $cf:expr) => {
        $out.insert(format!(
            "{}.{} {} {}",
            $c,
            $cf,
            offset_of!($t, $f),
            size_of_val(&<$t>::new_zeroed().$f)
        ));
    };
    ($out:ident, $t:ty, $c:literal, $f:ident) => {
        field!($out, $t, $c, $f, stringify!($f))
    };
}

macro_rules! size {
    ($out:ident, $t:ty, $c:literal) => {
        $out.insert(format!("{} sizeof {}", $c, size_of::<$t>()));
    };
}

fn rust_rows() -> BTreeSet<String> {
    let mut r = BTreeSet::new();
    size!(r, RawPlockInfo, "dlm_plock_info");
    field!(r, RawPlockInfo, "dlm_plock_info", version);
    field!(r, RawPlockInfo, "dlm_plock_info", optype);
    field!(r, RawPlockInfo, "dlm_plock_info", ex);
    field!(r, RawPlockInfo, "dlm_plock_info", wait);
    field!(r, RawPlockInfo, "dlm_plock_info", flags);
    field!(r, RawPlockInfo, "dlm_plock_info", pid);
    field!(r, RawPlockInfo, "dlm_plock_info", nodeid);
    field!(r, RawPlockInfo, "dlm_plock_info", rv);
    field!(r, RawPlockInfo, "dlm_plock_info", fsid);
    field!(r, RawPlockInfo, "dlm_plock_info", number);
    field!(r, RawPlockInfo, "dlm_plock_info", start);
    field!(r, RawPlockInfo, "dlm_plock_info", end);
    field!(r, RawPlockInfo, "dlm_plock_info", owner);
    let v = kernel::PLOCK_VERSION.0;
    r.insert(format!("DLM_PLOCK_VERSION {}.{}.{}", v[0], v[1], v[2]));
    r.insert(format!("DLM_PLOCK_FL_CLOSE {}", kernel::PlockFlags::CLOSE));

    r.insert(format!(
        "dlm_write_request sizeof {}",
        kernel::WRITE_REQUEST_SIZE
    ));
    field!(r, RawWriteRequestHead, "dlm_write_request", version);
    field!(r, RawWriteRequestHead, "dlm_write_request", cmd);
    field!(r, RawWriteRequestHead, "dlm_write_request", is64bit);
    field!(r, RawWriteRequestHead, "dlm_write_request", unused);
    field!(r, RawWriteRequestHead, "dlm_write_request", flags);
    field!(r, RawWriteRequestHead, "dlm_write_request", minor);
    r.insert(format!(
        "dlm_write_request.name {}",
        size_of::<RawWriteRequestHead>()
    ));
    let d = kernel::DEVICE_VERSION;
    r.insert(format!("DLM_DEVICE_VERSION {}.{}.{}", d[0], d[1], d[2]));
    // the encoder's command bytes, read back from encoded requests
    let name = dlm_proto::LockspaceName::new(b"x").expect("valid");
    let create = kernel::ControlRequest::Create { name, flags: 0 }.encode().0[12];
    let remove = kernel::ControlRequest::Remove { minor: 1, flags: 0 }
        .encode()
        .0[12];
    r.insert(format!("DLM_USER_CREATE_LOCKSPACE {create}"));
    r.insert(format!("DLM_USER_REMOVE_LOCKSPACE {remove}"));

    size!(r, RawDlmcChange, "dlmc_change");
    field!(r, RawDlmcChange, "dlmc_change", member_count);
    field!(r, RawDlmcChange, "dlmc_change", joined_count);
    field!(r, RawDlmcChange, "dlmc_change", remove_count);
    field!(r, RawDlmcChange, "dlmc_change", failed_count);
    field!(r, RawDlmcChange, "dlmc_change", wait_condition);
    field!(r, RawDlmcChange, "dlmc_change", wait_messages);
    field!(r, RawDlmcChange, "dlmc_change", seq);
    field!(r, RawDlmcChange, "dlmc_change", combined_seq);

    size!(r, RawDlmcLockspace, "dlmc_lockspace");
    field!(r, RawDlmcLockspace, "dlmc_lockspace", cg_prev);
    field!(r, RawDlmcLockspace, "dlmc_lockspace", cg_next);
    field!(r, RawDlmcLockspace, "dlmc_lockspace", flags);
    field!(r, RawDlmcLockspace, "dlmc_lockspace", global_id);
    field!(r, RawDlmcLockspace, "dlmc_lockspace", name);

    size!(r, RawDlmcNode, "dlmc_node");
    field!(r, RawDlmcNode, "dlmc_node", nodeid);
    field!(r, RawDlmcNode, "dlmc_node", flags);
    field!(r, RawDlmcNode, "dlmc_node", added_seq);
    field!(r, RawDlmcNode, "dlmc_node", removed_seq);
    field!(r, RawDlmcNode, "dlmc_node", fail_reason);
    field!(r, RawDlmcNode, "dlmc_node", fail_walltime);
    field!(r, RawDlmcNode, "dlmc_node", fail_monotime);
    use dlm_proto::query::{LockspaceFlags, NodeFlags, NodesKind};
    r.insert(format!(
        "DLMC_LF_SAVE_PLOCKS {}",
        LockspaceFlags::SAVE_PLOCKS
    ));
    r.insert(format!("DLMC_NF_CHECK_FS {}", NodeFlags::CHECK_FS));
    r.insert(format!("DLMC_NODES_NEXT {}", NodesKind::Next.to_raw()));
    r.insert(format!(
        "DLMC_RUN_COMMAND_LEN {}",
        dlm_proto::wire::RUN_COMMAND_LEN
    ));

    size!(r, RawDlmHeader, "dlm_header");
    field!(r, RawDlmHeader, "dlm_header", version);
    field!(r, RawDlmHeader, "dlm_header", msg_type, "type");
    field!(r, RawDlmHeader, "dlm_header", nodeid);
    field!(r, RawDlmHeader, "dlm_header", to_nodeid);
    field!(r, RawDlmHeader, "dlm_header", global_id);
    field!(r, RawDlmHeader, "dlm_header", flags);
    field!(r, RawDlmHeader, "dlm_header", msgdata);
    field!(r, RawDlmHeader, "dlm_header", msgdata2);
    field!(r, RawDlmHeader, "dlm_header", pad);

    size!(r, RawLsInfo, "ls_info");
    field!(r, RawLsInfo, "ls_info", ls_info_size);
    field!(r, RawLsInfo, "ls_info", id_info_size);
    field!(r, RawLsInfo, "ls_info", id_info_count);
    field!(r, RawLsInfo, "ls_info", started_count);
    field!(r, RawLsInfo, "ls_info", member_count);
    field!(r, RawLsInfo, "ls_info", joined_count);
    field!(r, RawLsInfo, "ls_info", remove_count);
    field!(r, RawLsInfo, "ls_info", failed_count);

    size!(r, RawProtocol, "protocol");
    field!(r, RawProtocol, "protocol", daemon_max);
    field!(r, RawProtocol, "protocol", kernel_max);
    field!(r, RawProtocol, "protocol", daemon_run);
    field!(r, RawProtocol, "protocol", kernel_run);

    size!(r, RawFenceResult, "fence_result");
    field!(r, RawFenceResult, "fence_result", version);
    field!(r, RawFenceResult, "fence_result", flags);
    field!(r, RawFenceResult, "fence_result", nodeid);
    field!(r, RawFenceResult, "fence_result", result);
    field!(r, RawFenceResult, "fence_result", fence_walltime);
    field!(r, RawFenceResult, "fence_result", unused);

    size!(r, RawRunInfo, "run_info");
    field!(r, RawRunInfo, "run_info", dest_nodeid);
    field!(r, RawRunInfo, "run_info", start_nodeid);
    field!(r, RawRunInfo, "run_info", local_pid);
    field!(r, RawRunInfo, "run_info", local_result);
    field!(r, RawRunInfo, "run_info", need_replies);
    field!(r, RawRunInfo, "run_info", reply_count);
    field!(r, RawRunInfo, "run_info", fail_count);
    field!(r, RawRunInfo, "run_info", flags);

    size!(r, RawResourceData, "resource_data");
    field!(r, RawResourceData, "resource_data", number);
    field!(r, RawResourceData, "resource_data", owner);
    field!(r, RawResourceData, "resource_data", lock_count);
    field!(r, RawResourceData, "resource_data", flags);
    field!(r, RawResourceData, "resource_data", pad);

    size!(r, RawPlockData, "plock_data");
    field!(r, RawPlockData, "plock_data", start);
    field!(r, RawPlockData, "plock_data", end);
    field!(r, RawPlockData, "plock_data", owner);
    field!(r, RawPlockData, "plock_data", pid);
    field!(r, RawPlockData, "plock_data", nodeid);
    field!(r, RawPlockData, "plock_data", ex);
    field!(r, RawPlockData, "plock_data", waiter);
    field!(r, RawPlockData, "plock_data", pad1);
    field!(r, RawPlockData, "plock_data", pad);

    size!(r, RawDlmcHeader, "dlmc_header");
    field!(r, RawDlmcHeader, "dlmc_header", magic);
    field!(r, RawDlmcHeader, "dlmc_header", version);
    field!(r, RawDlmcHeader, "dlmc_header", command);
    field!(r, RawDlmcHeader, "dlmc_header", option);
    field!(r, RawDlmcHeader, "dlmc_header", len);
    field!(r, RawDlmcHeader, "dlmc_header", data);
    field!(r, RawDlmcHeader, "dlmc_header", flags);
    field!(r, RawDlmcHeader, "dlmc_header", unused);
    field!(r, RawDlmcHeader, "dlmc_header", name);

    size!(r, RawDlmcState, "dlmc_state");
    field!(r, RawDlmcState, "dlmc_state", state_type, "type");
    field!(r, RawDlmcState, "dlmc_state", flags);
    field!(r, RawDlmcState, "dlmc_state", nodeid);
    field!(r, RawDlmcState, "dlmc_state", data32);
    field!(r, RawDlmcState, "dlmc_state", data64);
    field!(r, RawDlmcState, "dlmc_state", str_len);
    field!(r, RawDlmcState, "dlmc_state", bin_len);
    r
}

/// The LE plock payload is the host-order struct with swapped fields: same offsets.
#[test]
fn le_plock_info_matches_host_layout() {
    assert_eq!(size_of::<RawPlockInfoLe>(), size_of::<RawPlockInfo>());
    assert_eq!(
        offset_of!(RawPlockInfoLe, owner),
        offset_of!(RawPlockInfo, owner)
    );
    assert_eq!(
        offset_of!(RawPlockInfoLe, fsid),
        offset_of!(RawPlockInfo, fsid)
    );
    assert_eq!(
        offset_of!(RawPlockInfoLe, flags),
        offset_of!(RawPlockInfo, flags)
    );
}

#[test]
fn layouts_match_c_headers() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dlm_layout");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .arg("-Wall")
        .arg("-I")
        .arg(&dir)
        .arg(dir.join("layout.c"))
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("a C compiler (cc) is needed: .ci/run installs it");
    assert!(
        status.success(),
        "compiling tests/c/layout.c failed (linux-libc-dev and libdlmcontrol-dev installed?)"
    );
    let out = Command::new(&exe).output().expect("run layout program");
    assert!(out.status.success());
    let c: BTreeSet<String> = String::from_utf8(out.stdout)
        .expect("ascii")
        .lines()
        .map(str::to_owned)
        .collect();
    let rust = rust_rows();
    let only_c: Vec<_> = c.difference(&rust).collect();
    let only_rust: Vec<_> = rust.difference(&c).collect();
    assert!(
        only_c.is_empty() && only_rust.is_empty(),
        "layout mismatch\n  C says:    {only_c:?}\n  Rust says: {only_rust:?}"
    );
    assert!(
        c.len() > 100,
        "the C program printed too little: {}",
        c.len()
    );
}
