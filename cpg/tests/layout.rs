//! `dlm_cpg::sys` agrees field by field and constant by constant with Debian's corosync
//! headers, as the C compiler lays them out.

use std::collections::BTreeSet;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use dlm_cpg::sys::*;
use dlm_cpg::{Reason, RingId};

macro_rules! f {
    ($r:ident, $t:ty, $n:literal, $f:ident) => {
        $r.insert(format!(
            "{}.{} {} {}",
            $n,
            stringify!($f),
            offset_of!($t, $f),
            {
                // size of the field through a zeroed value (all our sys structs allow it)
                let z: $t = unsafe_free_zero::<$t>();
                size_of_val(&z.$f)
            }
        ));
    };
}

/// A zeroed value for layout inspection only; every `sys` struct is plain data whose
/// all-zero bit pattern is valid (integers, arrays, `Option<fn>` = None).
fn unsafe_free_zero<T: Copy>() -> T {
    let bytes = vec![0u8; size_of::<T>()];
    // SAFETY: see above: zero is a valid T for every struct this test instantiates, and
    // read_unaligned copes with the Vec's alignment.
    unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) }
}

fn rust_rows() -> BTreeSet<String> {
    let mut r = BTreeSet::new();
    let s = |r: &mut BTreeSet<String>, n: &str, v: usize| r.insert(format!("{n} sizeof {v}"));
    let c = |r: &mut BTreeSet<String>, n: &str, v: i64| r.insert(format!("{n} {v}"));
    s(&mut r, "cpg_name", size_of::<cpg_name>());
    f!(r, cpg_name, "cpg_name", length);
    f!(r, cpg_name, "cpg_name", value);
    s(&mut r, "cpg_address", size_of::<cpg_address>());
    f!(r, cpg_address, "cpg_address", nodeid);
    f!(r, cpg_address, "cpg_address", pid);
    f!(r, cpg_address, "cpg_address", reason);
    s(&mut r, "cpg_ring_id", size_of::<cpg_ring_id>());
    f!(r, cpg_ring_id, "cpg_ring_id", nodeid);
    f!(r, cpg_ring_id, "cpg_ring_id", seq);
    s(
        &mut r,
        "cpg_model_v1_data_t",
        size_of::<cpg_model_v1_data_t>(),
    );
    f!(r, cpg_model_v1_data_t, "cpg_model_v1_data_t", model);
    f!(
        r,
        cpg_model_v1_data_t,
        "cpg_model_v1_data_t",
        cpg_deliver_fn
    );
    f!(
        r,
        cpg_model_v1_data_t,
        "cpg_model_v1_data_t",
        cpg_confchg_fn
    );
    f!(
        r,
        cpg_model_v1_data_t,
        "cpg_model_v1_data_t",
        cpg_totem_confchg_fn
    );
    f!(r, cpg_model_v1_data_t, "cpg_model_v1_data_t", flags);
    s(
        &mut r,
        "quorum_callbacks_t",
        size_of::<quorum_callbacks_t>(),
    );
    f!(
        r,
        quorum_callbacks_t,
        "quorum_callbacks_t",
        quorum_notify_fn
    );
    s(
        &mut r,
        "corosync_cfg_callbacks_t",
        size_of::<corosync_cfg_callbacks_t>(),
    );
    f!(
        r,
        corosync_cfg_callbacks_t,
        "corosync_cfg_callbacks_t",
        corosync_cfg_shutdown_callback
    );
    s(
        &mut r,
        "corosync_cfg_node_address_t",
        size_of::<corosync_cfg_node_address_t>(),
    );
    f!(
        r,
        corosync_cfg_node_address_t,
        "corosync_cfg_node_address_t",
        address_length
    );
    f!(
        r,
        corosync_cfg_node_address_t,
        "corosync_cfg_node_address_t",
        address
    );
    s(&mut r, "cs_error_t", size_of::<cs_error_t>());
    s(&mut r, "cpg_handle_t", size_of::<cpg_handle_t>());
    for (n, v) in [
        ("CS_OK", CS_OK),
        ("CS_ERR_LIBRARY", CS_ERR_LIBRARY),
        ("CS_ERR_TRY_AGAIN", CS_ERR_TRY_AGAIN),
        ("CS_ERR_BAD_HANDLE", CS_ERR_BAD_HANDLE),
        ("CS_ERR_NOT_EXIST", 12),
        ("CS_DISPATCH_ALL", CS_DISPATCH_ALL),
        ("CS_DISPATCH_ONE_NONBLOCKING", CS_DISPATCH_ONE_NONBLOCKING),
        ("CPG_TYPE_AGREED", CPG_TYPE_AGREED),
        ("CPG_MODEL_V1", CPG_MODEL_V1),
        (
            "COROSYNC_CFG_SHUTDOWN_FLAG_REQUEST",
            COROSYNC_CFG_SHUTDOWN_FLAG_REQUEST,
        ),
        (
            "COROSYNC_CFG_SHUTDOWN_FLAG_NO",
            COROSYNC_CFG_SHUTDOWN_FLAG_NO,
        ),
        (
            "COROSYNC_CFG_SHUTDOWN_FLAG_YES",
            COROSYNC_CFG_SHUTDOWN_FLAG_YES,
        ),
    ] {
        c(&mut r, n, i64::from(v));
    }
    c(&mut r, "CS_TRACK_CURRENT", i64::from(CS_TRACK_CURRENT));
    c(&mut r, "CS_TRACK_CHANGES", i64::from(CS_TRACK_CHANGES));
    c(
        &mut r,
        "CPG_MODEL_V1_DELIVER_INITIAL_TOTEM_CONF",
        i64::from(CPG_MODEL_V1_DELIVER_INITIAL_TOTEM_CONF),
    );
    c(
        &mut r,
        "CPG_MAX_NAME_LENGTH",
        i64::try_from(CPG_MAX_NAME_LENGTH).expect("small"),
    );
    for (n, reason) in [
        ("CPG_REASON_JOIN", Reason::Join),
        ("CPG_REASON_LEAVE", Reason::Leave),
        ("CPG_REASON_NODEDOWN", Reason::NodeDown),
        ("CPG_REASON_NODEUP", Reason::NodeUp),
        ("CPG_REASON_PROCDOWN", Reason::ProcDown),
    ] {
        c(&mut r, n, i64::from(reason.to_raw()));
    }
    let _ = RingId::default();
    r
}

#[test]
fn sys_matches_corosync_headers() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cpg_layout");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc)
        .arg("-Wall")
        .arg(dir.join("layout.c"))
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("a C compiler (cc) is needed: .ci/run installs it");
    assert!(
        status.success(),
        "compiling cpg/tests/c/layout.c failed (corosync -dev packages installed?)"
    );
    let out = Command::new(&exe).output().expect("run layout program");
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
    assert!(c.len() > 40);
}
