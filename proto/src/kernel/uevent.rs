//! The kobject uevent that announces a lockspace:
//! `online@/kernel/dlm/<ls>\0ACTION=online\0DEVPATH=/kernel/dlm/<ls>\0SUBSYSTEM=dlm\0LOCKSPACE=<ls>\0SEQNUM=<n>\0`.
//!
//! Parsing mirrors `process_uevent()` in main.c: only the first string decides; the
//! key=value pairs are checked for consistency when present.

use crate::{LockspaceName, NameError};

/// What happened to the lockspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UeventAction {
    /// `online@`: a process called `dlm_new_lockspace()`; the daemon must join.
    Online,
    /// `offline@`: the last user released it; the daemon must leave.
    Offline,
}

impl UeventAction {
    fn as_str(self) -> &'static str {
        match self {
            Self::Online => "online",
            Self::Offline => "offline",
        }
    }
}

/// A dlm uevent the daemon acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uevent {
    /// online or offline.
    pub action: UeventAction,
    /// The lockspace.
    pub lockspace: LockspaceName,
    /// `SEQNUM=`, when present.
    pub seqnum: Option<u64>,
}

/// Why a uevent is not one the daemon acts on. Most are expected (other subsystems,
/// `add@`/`remove@`) and are [`UeventError::Ignored`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UeventError {
    /// Not a dlm online/offline event (another subsystem, or `add@`/`remove@`).
    #[error("not a dlm online/offline uevent")]
    Ignored,
    /// The devpath does not have the four parts `act@/kernel/dlm/<ls>`.
    #[error("uevent message has {0} args")]
    Args(usize),
    /// The lockspace name is invalid.
    #[error("uevent lockspace name: {0}")]
    Name(#[from] NameError),
    /// `LOCKSPACE=` or `ACTION=` disagree with the first string.
    #[error("uevent {key}= disagrees with its header")]
    Mismatch {
        /// Which key.
        key: &'static str,
    },
}

impl Uevent {
    /// Parses one raw uevent as the netlink socket delivers it.
    pub fn parse(bytes: &[u8]) -> Result<Self, UeventError> {
        let mut strings = bytes.split(|&b| b == 0);
        let first = strings.next().unwrap_or_default();
        let Some(at) = first.iter().position(|&b| b == b'@') else {
            return Err(UeventError::Ignored);
        };
        let action = match &first[..at] {
            b"online" => UeventAction::Online,
            b"offline" => UeventAction::Offline,
            _ => return Err(UeventError::Ignored),
        };
        let path = &first[at + 1..];
        let parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
        // "/kernel/dlm/<ls>" splits into "", "kernel", "dlm", "<ls>".
        if parts.first().is_some_and(|p| !p.is_empty()) || parts.get(2) != Some(&&b"dlm"[..]) {
            return Err(UeventError::Ignored);
        }
        if parts.len() != 4 || parts[1] != b"kernel" {
            return Err(UeventError::Args(parts.len()));
        }
        let lockspace = LockspaceName::new(parts[3])?;
        let mut seqnum = None;
        for kv in strings {
            let Some(eq) = kv.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (key, value) = (&kv[..eq], &kv[eq + 1..]);
            match key {
                b"LOCKSPACE" if value != lockspace.as_bytes() => {
                    return Err(UeventError::Mismatch { key: "LOCKSPACE" });
                }
                b"ACTION" if value != action.as_str().as_bytes() => {
                    return Err(UeventError::Mismatch { key: "ACTION" });
                }
                b"SEQNUM" => {
                    seqnum = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok());
                }
                _ => {}
            }
        }
        Ok(Self {
            action,
            lockspace,
            seqnum,
        })
    }

    /// The raw uevent exactly as the kernel's `kobject_uevent_env` + `dlm_uevent` send it.
    pub fn encode(&self) -> Vec<u8> {
        let ls = self.lockspace.as_bytes();
        let act = self.action.as_str().as_bytes();
        let mut out = Vec::with_capacity(160 + 2 * ls.len());
        for part in [
            &[act, b"@/kernel/dlm/", ls][..],
            &[b"ACTION=", act],
            &[b"DEVPATH=/kernel/dlm/", ls],
            &[b"SUBSYSTEM=dlm"],
            &[b"LOCKSPACE=", ls],
        ] {
            for p in part {
                out.extend_from_slice(p);
            }
            out.push(0);
        }
        if let Some(seq) = self.seqnum {
            out.extend_from_slice(format!("SEQNUM={seq}").as_bytes());
            out.push(0);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_bytes() {
        let raw = b"online@/kernel/dlm/foo\0ACTION=online\0DEVPATH=/kernel/dlm/foo\0SUBSYSTEM=dlm\0LOCKSPACE=foo\0SEQNUM=1234\0";
        let ev = Uevent::parse(raw).expect("parses");
        assert_eq!(ev.action, UeventAction::Online);
        assert_eq!(ev.lockspace.as_bytes(), b"foo");
        assert_eq!(ev.seqnum, Some(1234));
        assert_eq!(ev.encode(), raw.to_vec());
    }

    #[test]
    fn ignored_and_bad() {
        assert_eq!(
            Uevent::parse(b"add@/kernel/dlm/foo\0"),
            Err(UeventError::Ignored)
        );
        assert_eq!(
            Uevent::parse(b"online@/devices/virtual/net/lo\0"),
            Err(UeventError::Ignored)
        );
        assert_eq!(
            Uevent::parse(b"online@/kernel/dlm\0"),
            Err(UeventError::Args(3))
        );
        assert_eq!(
            Uevent::parse(b"offline@/kernel/dlm/foo\0LOCKSPACE=bar\0"),
            Err(UeventError::Mismatch { key: "LOCKSPACE" })
        );
        assert_eq!(Uevent::parse(b""), Err(UeventError::Ignored));
    }
}
