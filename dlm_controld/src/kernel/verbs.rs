//! What the daemon asks of the kernel, as verbs: the configfs layout (the cluster's
//! attributes, `comms/<nodeid>`, `spaces/<ls>/nodes/<nodeid>`) and a lockspace's sysfs
//! attributes (`id`, `nodir`, `control`, `event_done`) are spelled here and nowhere else.

use dlm_proto::LockspaceName;

use super::{KernelRoot, SeamError};

/// The cluster's configfs attributes, as `setup_configfs_options` writes them (`None`:
/// left as the kernel has it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterAttrs {
    /// `log_debug`, when configured.
    pub log_debug: Option<i64>,
    /// `tcp_port`, when configured.
    pub tcp_port: Option<i64>,
    /// `mark`.
    pub mark: i64,
    /// `protocol` (0 tcp, 1 sctp), unless detected.
    pub protocol: Option<u8>,
    /// `cluster_name`.
    pub cluster_name: String,
}

impl KernelRoot {
    /// `clear_configfs` then the cluster attributes in C's order: `[log_debug]
    /// [tcp_port] mark [protocol] recover_callbacks cluster_name`.
    pub fn setup_cluster(&self, a: &ClusterAttrs) -> Result<(), SeamError> {
        self.clear_configfs();
        self.configfs_mkdir("")?;
        if let Some(v) = a.log_debug {
            self.set_log_debug(v)?;
        }
        if let Some(v) = a.tcp_port {
            self.configfs_write("tcp_port", v.to_string().as_bytes())?;
        }
        self.configfs_write("mark", a.mark.to_string().as_bytes())?;
        if let Some(p) = a.protocol {
            self.configfs_write("protocol", p.to_string().as_bytes())?;
        }
        self.configfs_write("recover_callbacks", b"1")?;
        self.configfs_write("cluster_name", a.cluster_name.as_bytes())
    }

    /// The cluster's `log_debug` (at startup and on `set_config`).
    pub fn set_log_debug(&self, v: i64) -> Result<(), SeamError> {
        self.configfs_write("log_debug", v.to_string().as_bytes())
    }

    /// `clear_configfs`: what a previous daemon left. Failures only matter to the log.
    fn clear_configfs(&self) {
        for node in self.configfs_list("comms") {
            let _ = self.configfs_rmdir(&format!("comms/{node}"));
        }
        for ls in self.configfs_list("spaces") {
            for node in self.configfs_list(&format!("spaces/{ls}/nodes")) {
                let _ = self.configfs_rmdir(&format!("spaces/{ls}/nodes/{node}"));
            }
            let _ = self.configfs_rmdir(&format!("spaces/{ls}"));
        }
        let _ = self.configfs_rmdir("");
    }

    /// `add_configfs_node`: one address of one node (`storage` is the 128-byte sockaddr).
    pub fn add_comms_node(
        &self,
        nodeid: u32,
        storage: &[u8; 128],
        local: bool,
        mark: u32,
    ) -> Result<(), SeamError> {
        let dir = format!("comms/{nodeid}");
        self.configfs_mkdir("comms")?;
        self.configfs_mkdir(&dir)?;
        self.configfs_write(&format!("{dir}/nodeid"), nodeid.to_string().as_bytes())?;
        self.configfs_write(&format!("{dir}/addr"), storage)?;
        self.configfs_write(&format!("{dir}/mark"), mark.to_string().as_bytes())?;
        if local {
            self.configfs_write(&format!("{dir}/local"), b"1")?;
        }
        Ok(())
    }

    /// `del_configfs_node`.
    pub fn del_comms_node(&self, nodeid: u32) -> Result<(), SeamError> {
        self.configfs_rmdir(&format!("comms/{nodeid}"))
    }

    /// `set_configfs_members`: the lockspace's `nodes/<id>` directories become `members`;
    /// `renew` members are recreated. `members` empty removes the lockspace directory.
    pub fn set_members(
        &self,
        ls: &str,
        members: &[u32],
        renew: &[u32],
        weight: impl Fn(u32) -> u32,
    ) -> Result<(), SeamError> {
        let nodes = format!("spaces/{ls}/nodes");
        self.configfs_mkdir("spaces")?;
        self.configfs_mkdir(&format!("spaces/{ls}"))?;
        self.configfs_mkdir(&nodes)?;
        let current: Vec<u32> = self
            .configfs_list(&nodes)
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        for id in current.iter().filter(|id| !members.contains(id)) {
            self.configfs_rmdir(&format!("{nodes}/{id}"))?;
        }
        if members.is_empty() {
            let _ = self.configfs_rmdir(&nodes);
            return self.configfs_rmdir(&format!("spaces/{ls}"));
        }
        for &id in members {
            let renewed = renew.contains(&id);
            if current.contains(&id) && !renewed {
                continue;
            }
            let dir = format!("{nodes}/{id}");
            if renewed {
                let _ = self.configfs_rmdir(&dir);
            }
            self.configfs_mkdir(&dir)?;
            self.configfs_write(&format!("{dir}/nodeid"), id.to_string().as_bytes())?;
            self.configfs_write(&format!("{dir}/weight"), weight(id).to_string().as_bytes())?;
        }
        Ok(())
    }

    /// The lockspace's global id (`id`), before it starts.
    pub fn set_lockspace_id(&self, ls: &LockspaceName, id: u32) -> Result<(), SeamError> {
        self.sysfs_write(ls, "id", &id.to_string())
    }

    /// The lockspace has no resource directory (`nodir`).
    pub fn set_nodir(&self, ls: &LockspaceName) -> Result<(), SeamError> {
        self.sysfs_write(ls, "nodir", "1")
    }

    /// Stops the lockspace's locking (`control` 0).
    pub fn stop_lockspace(&self, ls: &LockspaceName) -> Result<(), SeamError> {
        self.sysfs_write(ls, "control", "0")
    }

    /// Starts the lockspace's locking (`control` 1).
    pub fn start_lockspace(&self, ls: &LockspaceName) -> Result<(), SeamError> {
        self.sysfs_write(ls, "control", "1")
    }

    /// Ends the kernel's wait for a join or leave (`event_done`): 0 done, else an error.
    pub fn event_done(&self, ls: &LockspaceName, rv: i32) -> Result<(), SeamError> {
        self.sysfs_write(ls, "event_done", &rv.to_string())
    }

    /// The pid file (`/run/dlm_controld/dlm_controld.pid`).
    pub fn pid_file(&self) -> std::path::PathBuf {
        self.path("run/dlm_controld/dlm_controld.pid")
    }

    /// The log file (`/var/log/dlm_controld/dlm_controld.log`).
    pub fn log_file(&self) -> std::path::PathBuf {
        self.path("var/log/dlm_controld/dlm_controld.log")
    }

    /// `/etc/dlm/dlm.conf`.
    pub fn conf_file(&self) -> std::path::PathBuf {
        self.path("etc/dlm/dlm.conf")
    }
}
