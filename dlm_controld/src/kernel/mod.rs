//! The kernel seam: every kernel interface the daemon touches, as one trait of verbs.
//!
//! [`Kernel`] has two implementations, chosen by `--kernel-root DIR` ([`open`]):
//! [`RealKernel`] for `/` — configfs under `/sys/kernel/config/dlm/cluster`, sysfs under
//! `/sys/kernel/dlm/<ls>`, the misc devices `/dev/misc/{dlm_plock,dlm-monitor,dlm-control}`
//! and the uevent netlink socket — and [`RootedKernel`] for any other `DIR`, where the same
//! paths under `DIR` are served by a fake kernel (`tests/`): each misc device is a
//! `SOCK_SEQPACKET` socket and uevents come from `DIR/run/dlm_controld/uevent.sock`.
//!
//! The verbs (`setup_cluster`, `add_comms_node`, `set_members`, `stop_lockspace`,
//! `event_done`, …) are the trait's provided methods, written once over a few primitives
//! (where a path is, how an attribute is written and a directory removed, how a device and
//! the uevent source are opened) that each implementation supplies. The configfs layout and
//! the sysfs attribute names are spelled in this file and nowhere else. Writes: sysfs values
//! end with a NUL, configfs values do not (daemon-spec §2.2, §2.4).

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dlm_proto::LockspaceName;

mod device;
mod real;
mod rooted;

pub use device::{MiscDevice, READ_AT_ONCE, Record, Records, UeventLoss, UeventSource};
pub use real::RealKernel;
pub use rooted::RootedKernel;

/// A kernel interface failed; the message names the path (and the value written).
#[derive(Debug, thiserror::Error)]
pub enum SeamError {
    /// A write to configfs or sysfs.
    #[error("failed to write {value:?} to {path}: {source}")]
    Write {
        /// File.
        path: PathBuf,
        /// What was written (lossy text).
        value: String,
        /// Cause.
        source: io::Error,
    },
    /// mkdir in configfs.
    #[error("failed to mkdir {path}: {source}")]
    Mkdir {
        /// Directory.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// rmdir in configfs.
    #[error("failed to rmdir {path}: {source}")]
    Rmdir {
        /// Directory.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// Opening or connecting a device or socket.
    #[error("failed to open {path}: {source}")]
    Open {
        /// Device, socket or "netlink".
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
}

/// The seam for `--kernel-root DIR`: the real kernel for `/`, a rooted fake one otherwise.
pub fn open(dir: &Path) -> Arc<dyn Kernel> {
    if dir == Path::new("/") {
        Arc::new(RealKernel)
    } else {
        Arc::new(RootedKernel::new(dir))
    }
}

/// configfs cluster directory, relative to the root.
const CONFIGFS_CLUSTER: &str = "sys/kernel/config/dlm/cluster";
/// sysfs lockspace directories, relative to the root.
const SYSFS_DLM: &str = "sys/kernel/dlm";

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

/// What the daemon asks of the kernel. Implementations supply the primitives; the verbs are
/// provided, the same for both.
pub trait Kernel: std::fmt::Debug + Send + Sync {
    /// Where the kernel path `rel` (relative to `/`) is.
    fn path(&self, rel: &str) -> PathBuf;

    /// Writes `bytes` to a configfs or sysfs attribute in one `write`.
    fn write_attr(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;

    /// Removes a configfs directory.
    fn remove_dir(&self, path: &Path) -> io::Result<()>;

    /// Opens the misc device at `path` (read-only when `!write`), close-on-exec (so fence
    /// agents do not inherit the monitor, unlike C).
    fn open_device(&self, path: &Path, write: bool) -> io::Result<MiscDevice>;

    /// The uevent source.
    fn open_uevents(&self) -> Result<UeventSource, SeamError>;

    /// Whether the daemon logs to syslog unless `--syslog` says otherwise.
    fn syslog_by_default(&self) -> bool;

    /// Opens a misc device (`dlm_plock`, `dlm-monitor`, `dlm-control`).
    fn open_misc(&self, name: &str) -> Result<MiscDevice, SeamError> {
        let path = self.path("dev/misc").join(name);
        self.open_device(&path, name != "dlm-monitor")
            .map_err(|source| SeamError::Open { path, source })
    }

    /// Lockspaces the kernel has at startup (`check_uncontrolled_lockspaces`): entries of
    /// `sys/kernel/dlm` not starting with `.`, sorted.
    fn uncontrolled_lockspaces(&self) -> Vec<String> {
        let Ok(d) = fs::read_dir(self.path(SYSFS_DLM)) else {
            return Vec::new();
        };
        let mut v: Vec<String> = d
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        v.sort();
        v
    }

    /// `clear_configfs` then the cluster attributes in C's order: `[log_debug]
    /// [tcp_port] mark [protocol] recover_callbacks cluster_name`.
    fn setup_cluster(&self, a: &ClusterAttrs) -> Result<(), SeamError> {
        clear_configfs(self);
        configfs_mkdir(self, "")?;
        if let Some(v) = a.log_debug {
            self.set_log_debug(v)?;
        }
        if let Some(v) = a.tcp_port {
            configfs_write(self, "tcp_port", v.to_string().as_bytes())?;
        }
        configfs_write(self, "mark", a.mark.to_string().as_bytes())?;
        if let Some(p) = a.protocol {
            configfs_write(self, "protocol", p.to_string().as_bytes())?;
        }
        configfs_write(self, "recover_callbacks", b"1")?;
        configfs_write(self, "cluster_name", a.cluster_name.as_bytes())
    }

    /// The cluster's `log_debug` (at startup and on `set_config`).
    fn set_log_debug(&self, v: i64) -> Result<(), SeamError> {
        configfs_write(self, "log_debug", v.to_string().as_bytes())
    }

    /// `add_configfs_node`: one address of one node (`storage` is the 128-byte sockaddr).
    fn add_comms_node(
        &self,
        nodeid: u32,
        storage: &[u8; 128],
        local: bool,
        mark: u32,
    ) -> Result<(), SeamError> {
        let dir = format!("comms/{nodeid}");
        configfs_mkdir(self, "comms")?;
        configfs_mkdir(self, &dir)?;
        configfs_write(
            self,
            &format!("{dir}/nodeid"),
            nodeid.to_string().as_bytes(),
        )?;
        configfs_write(self, &format!("{dir}/addr"), storage)?;
        configfs_write(self, &format!("{dir}/mark"), mark.to_string().as_bytes())?;
        if local {
            configfs_write(self, &format!("{dir}/local"), b"1")?;
        }
        Ok(())
    }

    /// `del_configfs_node`.
    fn del_comms_node(&self, nodeid: u32) -> Result<(), SeamError> {
        configfs_rmdir(self, &format!("comms/{nodeid}"))
    }

    /// `set_configfs_members`: the lockspace's `nodes/<id>` directories become `members`
    /// (with `weight` of each); `renew` members are recreated. `members` empty removes the
    /// lockspace directory.
    fn set_members(
        &self,
        ls: &str,
        members: &[u32],
        renew: &[u32],
        weight: &dyn Fn(u32) -> u32,
    ) -> Result<(), SeamError> {
        let nodes = format!("spaces/{ls}/nodes");
        configfs_mkdir(self, "spaces")?;
        configfs_mkdir(self, &format!("spaces/{ls}"))?;
        configfs_mkdir(self, &nodes)?;
        let current: Vec<u32> = configfs_list(self, &nodes)
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        for id in current.iter().filter(|id| !members.contains(id)) {
            configfs_rmdir(self, &format!("{nodes}/{id}"))?;
        }
        if members.is_empty() {
            let _ = configfs_rmdir(self, &nodes);
            return configfs_rmdir(self, &format!("spaces/{ls}"));
        }
        for &id in members {
            let renewed = renew.contains(&id);
            if current.contains(&id) && !renewed {
                continue;
            }
            let dir = format!("{nodes}/{id}");
            if renewed {
                let _ = configfs_rmdir(self, &dir);
            }
            configfs_mkdir(self, &dir)?;
            configfs_write(self, &format!("{dir}/nodeid"), id.to_string().as_bytes())?;
            configfs_write(
                self,
                &format!("{dir}/weight"),
                weight(id).to_string().as_bytes(),
            )?;
        }
        Ok(())
    }

    /// The lockspace's global id (`id`), before it starts.
    fn set_lockspace_id(&self, ls: &LockspaceName, id: u32) -> Result<(), SeamError> {
        sysfs_write(self, ls, "id", &id.to_string())
    }

    /// The lockspace has no resource directory (`nodir`).
    fn set_nodir(&self, ls: &LockspaceName) -> Result<(), SeamError> {
        sysfs_write(self, ls, "nodir", "1")
    }

    /// Stops the lockspace's locking (`control` 0).
    fn stop_lockspace(&self, ls: &LockspaceName) -> Result<(), SeamError> {
        sysfs_write(self, ls, "control", "0")
    }

    /// Starts the lockspace's locking (`control` 1).
    fn start_lockspace(&self, ls: &LockspaceName) -> Result<(), SeamError> {
        sysfs_write(self, ls, "control", "1")
    }

    /// Ends the kernel's wait for a join or leave (`event_done`): 0 done, else an error.
    fn event_done(&self, ls: &LockspaceName, rv: i32) -> Result<(), SeamError> {
        sysfs_write(self, ls, "event_done", &rv.to_string())
    }

    /// The pid file (`/run/dlm_controld/dlm_controld.pid`).
    fn pid_file(&self) -> PathBuf {
        self.path("run/dlm_controld/dlm_controld.pid")
    }

    /// The log file (`/var/log/dlm_controld/dlm_controld.log`).
    fn log_file(&self) -> PathBuf {
        self.path("var/log/dlm_controld/dlm_controld.log")
    }

    /// `/etc/dlm/dlm.conf`.
    fn conf_file(&self) -> PathBuf {
        self.path("etc/dlm/dlm.conf")
    }
}

/// `clear_configfs`: what a previous daemon left. Failures only matter to the log.
fn clear_configfs<K: Kernel + ?Sized>(k: &K) {
    for node in configfs_list(k, "comms") {
        let _ = configfs_rmdir(k, &format!("comms/{node}"));
    }
    for ls in configfs_list(k, "spaces") {
        for node in configfs_list(k, &format!("spaces/{ls}/nodes")) {
            let _ = configfs_rmdir(k, &format!("spaces/{ls}/nodes/{node}"));
        }
        let _ = configfs_rmdir(k, &format!("spaces/{ls}"));
    }
    let _ = configfs_rmdir(k, "");
}

/// `rel` under the configfs cluster directory (`rel` empty: the directory itself).
fn configfs_path<K: Kernel + ?Sized>(k: &K, rel: &str) -> PathBuf {
    let cluster = k.path(CONFIGFS_CLUSTER);
    if rel.is_empty() {
        cluster
    } else {
        cluster.join(rel)
    }
}

fn write<K: Kernel + ?Sized>(k: &K, path: PathBuf, bytes: &[u8]) -> Result<(), SeamError> {
    k.write_attr(&path, bytes)
        .map_err(|source| SeamError::Write {
            path,
            value: String::from_utf8_lossy(bytes).into_owned(),
            source,
        })
}

/// Writes a configfs attribute under the cluster directory: `value` bytes, no NUL.
fn configfs_write<K: Kernel + ?Sized>(k: &K, rel: &str, value: &[u8]) -> Result<(), SeamError> {
    write(k, configfs_path(k, rel), value)
}

/// Creates a configfs directory under the cluster directory (mode 0777 under the umask, as
/// C); an existing one is fine.
fn configfs_mkdir<K: Kernel + ?Sized>(k: &K, rel: &str) -> Result<(), SeamError> {
    let path = configfs_path(k, rel);
    match fs::DirBuilder::new().mode(0o777).create(&path) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            Err(SeamError::Mkdir { path, source: e })
        }
        _ => Ok(()),
    }
}

fn configfs_rmdir<K: Kernel + ?Sized>(k: &K, rel: &str) -> Result<(), SeamError> {
    let path = configfs_path(k, rel);
    k.remove_dir(&path)
        .map_err(|source| SeamError::Rmdir { path, source })
}

/// Names of the subdirectories of a configfs directory (for `clear_configfs`).
fn configfs_list<K: Kernel + ?Sized>(k: &K, rel: &str) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(configfs_path(k, rel))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Writes a sysfs attribute of a lockspace: the decimal text plus its NUL.
fn sysfs_write<K: Kernel + ?Sized>(
    k: &K,
    ls: &LockspaceName,
    attr: &str,
    value: &str,
) -> Result<(), SeamError> {
    let mut bytes = value.as_bytes().to_vec();
    bytes.push(0);
    let path = k
        .path(SYSFS_DLM)
        .join(ls.to_str_lossy().as_ref())
        .join(attr);
    write(k, path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_chooses_the_kernel() {
        assert_eq!(format!("{:?}", open(Path::new("/"))), "RealKernel");
        let fake = open(Path::new("/tmp/k"));
        assert!(format!("{fake:?}").starts_with("RootedKernel"));
        assert_eq!(
            fake.path(CONFIGFS_CLUSTER),
            Path::new("/tmp/k/sys/kernel/config/dlm/cluster")
        );
        assert_eq!(
            open(Path::new("/")).conf_file(),
            Path::new("/etc/dlm/dlm.conf")
        );
        assert!(open(Path::new("/")).syslog_by_default());
        assert!(!fake.syslog_by_default());
    }
}
