//! Startup writes, in the C daemon's order (`setup_configfs_options`): what the options
//! make of the cluster's configfs attributes (the seam writes them).

use crate::config::{Config, Opt, Source};
use crate::kernel::ClusterAttrs;

/// The cluster's configfs attributes for these options (`setup_configfs_options`).
pub(crate) fn cluster_attrs(cfg: &Config, cluster_name: &str) -> ClusterAttrs {
    let o = &cfg.options;
    let set = |opt| o.source(opt) != Source::Default;
    ClusterAttrs {
        log_debug: set(Opt::LogDebug).then(|| o.num(Opt::LogDebug)),
        tcp_port: set(Opt::Port).then(|| o.num(Opt::Port)),
        mark: o.num(Opt::Mark),
        protocol: match o.protocol() {
            "tcp" | "0" => Some(0),
            "sctp" | "1" => Some(1),
            // detect: corosync 3 has no totem.rrp_mode, so nothing is written (observed)
            _ => None,
        },
        cluster_name: cluster_name.to_string(),
    }
}
