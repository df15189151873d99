//! Startup writes, in the C daemon's order (`setup_configfs_options`, `add_configfs_node`)
//! and the per-lockspace configfs members (`set_configfs_members`).

use crate::config::{Config, Opt, Source};
use crate::kernel::{KernelRoot, SeamError};

/// `clear_configfs` then the cluster attributes: `[log_debug] [tcp_port] mark [protocol]
/// recover_callbacks cluster_name`.
pub(crate) fn setup_configfs(
    seam: &KernelRoot,
    cfg: &Config,
    cluster_name: &str,
) -> Result<(), SeamError> {
    clear_configfs(seam);
    seam.configfs_mkdir("")?;
    let o = &cfg.options;
    let set = |opt| o.source(opt) != Source::Default;
    if set(Opt::LogDebug) {
        seam.configfs_write("log_debug", o.num(Opt::LogDebug).to_string().as_bytes())?;
    }
    if set(Opt::Port) {
        seam.configfs_write("tcp_port", o.num(Opt::Port).to_string().as_bytes())?;
    }
    seam.configfs_write("mark", o.num(Opt::Mark).to_string().as_bytes())?;
    match o.protocol() {
        "tcp" | "0" => seam.configfs_write("protocol", b"0")?,
        "sctp" | "1" => seam.configfs_write("protocol", b"1")?,
        // detect: corosync 3 has no totem.rrp_mode, so nothing is written (observed)
        _ => {}
    }
    seam.configfs_write("recover_callbacks", b"1")?;
    seam.configfs_write("cluster_name", cluster_name.as_bytes())
}

/// `clear_configfs`: what a previous daemon left. Failures only matter to the log.
fn clear_configfs(seam: &KernelRoot) {
    for node in seam.configfs_list("comms") {
        let _ = seam.configfs_rmdir(&format!("comms/{node}"));
    }
    for ls in seam.configfs_list("spaces") {
        for node in seam.configfs_list(&format!("spaces/{ls}/nodes")) {
            let _ = seam.configfs_rmdir(&format!("spaces/{ls}/nodes/{node}"));
        }
        let _ = seam.configfs_rmdir(&format!("spaces/{ls}"));
    }
    let _ = seam.configfs_rmdir("");
}

/// `add_configfs_node`: one address of one node (`storage` is the 128-byte sockaddr).
pub(crate) fn add_node(
    seam: &KernelRoot,
    nodeid: u32,
    storage: &[u8; 128],
    local: bool,
    mark: u32,
) -> Result<(), SeamError> {
    let dir = format!("comms/{nodeid}");
    seam.configfs_mkdir("comms")?;
    seam.configfs_mkdir(&dir)?;
    seam.configfs_write(&format!("{dir}/nodeid"), nodeid.to_string().as_bytes())?;
    seam.configfs_write(&format!("{dir}/addr"), storage)?;
    seam.configfs_write(&format!("{dir}/mark"), mark.to_string().as_bytes())?;
    if local {
        seam.configfs_write(&format!("{dir}/local"), b"1")?;
    }
    Ok(())
}

/// `set_configfs_members`: the lockspace's `nodes/<id>` directories become `members`;
/// `renew` members are recreated. `members` empty removes the lockspace directory.
pub(crate) fn set_members(
    seam: &KernelRoot,
    ls: &str,
    members: &[u32],
    renew: &[u32],
    weight: impl Fn(u32) -> u32,
) -> Result<(), SeamError> {
    seam.configfs_mkdir("spaces")?;
    seam.configfs_mkdir(&format!("spaces/{ls}"))?;
    seam.configfs_mkdir(&format!("spaces/{ls}/nodes"))?;
    let current: Vec<u32> = seam
        .configfs_list(&format!("spaces/{ls}/nodes"))
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    for id in current.iter().filter(|id| !members.contains(id)) {
        seam.configfs_rmdir(&format!("spaces/{ls}/nodes/{id}"))?;
    }
    if members.is_empty() {
        let _ = seam.configfs_rmdir(&format!("spaces/{ls}/nodes"));
        return seam.configfs_rmdir(&format!("spaces/{ls}"));
    }
    for &id in members {
        let renewed = renew.contains(&id);
        if current.contains(&id) && !renewed {
            continue;
        }
        let dir = format!("spaces/{ls}/nodes/{id}");
        if renewed {
            let _ = seam.configfs_rmdir(&dir);
        }
        seam.configfs_mkdir(&dir)?;
        seam.configfs_write(&format!("{dir}/nodeid"), id.to_string().as_bytes())?;
        seam.configfs_write(&format!("{dir}/weight"), weight(id).to_string().as_bytes())?;
    }
    Ok(())
}
