//! The kobject uevent that announces a lockspace:
//! `online@/kernel/dlm/<ls>\0ACTION=online\0DEVPATH=/kernel/dlm/<ls>\0SUBSYSTEM=dlm\0LOCKSPACE=<ls>\0SEQNUM=<n>\0`.
//!
//! Parsing mirrors dlm 4.3.0's `process_uevent()` in main.c: the variables decide (4.2.0
//! split the first string instead; the kernel's events say the same in both).

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
    /// Not a dlm online/offline event: another subsystem, another action (`add`,
    /// `remove`), or a variable missing.
    #[error("not a dlm online/offline uevent")]
    Ignored,
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
    /// Parses one raw uevent as the netlink socket delivers it, by its variables as
    /// dlm 4.3.0's `process_uevent`/`decode_uevent` do: `ACTION=`, `DEVPATH=`,
    /// `SUBSYSTEM=` and `LOCKSPACE=` must all be there and `SUBSYSTEM=dlm`; the action and
    /// the lockspace are those variables' (the first string, which 4.2.0 read, is not).
    pub fn parse(bytes: &[u8]) -> Result<Self, UeventError> {
        let (mut action, mut devpath, mut subsystem, mut lockspace, mut seqnum) =
            (None, None, None, None, None);
        // the first string is "<action>@<devpath>", no variable
        for kv in bytes.split(|&b| b == 0).skip(1) {
            let Some(eq) = kv.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (key, value) = (&kv[..eq], &kv[eq + 1..]);
            // the last of each wins, as in decode_uevent (the kernel sends each once)
            let slot = match key {
                b"ACTION" => &mut action,
                b"DEVPATH" => &mut devpath,
                b"SUBSYSTEM" => &mut subsystem,
                b"LOCKSPACE" => &mut lockspace,
                b"SEQNUM" => &mut seqnum,
                _ => continue,
            };
            *slot = Some(value);
        }
        let (Some(action), Some(_), Some(subsystem), Some(lockspace)) =
            (action, devpath, subsystem, lockspace)
        else {
            return Err(UeventError::Ignored);
        };
        if subsystem != b"dlm" {
            return Err(UeventError::Ignored);
        }
        let action = match action {
            b"online" => UeventAction::Online,
            b"offline" => UeventAction::Offline,
            _ => return Err(UeventError::Ignored),
        };
        Ok(Self {
            action,
            lockspace: LockspaceName::new(lockspace)?,
            seqnum: seqnum
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse().ok()),
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
        let ev = |vars: &[&str]| {
            let mut v = b"online@/kernel/dlm/foo\0".to_vec();
            for s in vars {
                v.extend_from_slice(s.as_bytes());
                v.push(0);
            }
            Uevent::parse(&v)
        };
        let all = [
            "ACTION=online",
            "DEVPATH=/kernel/dlm/foo",
            "SUBSYSTEM=dlm",
            "LOCKSPACE=foo",
        ];
        assert!(ev(&all).is_ok());
        // each of the four is needed
        for skip in 0..4 {
            let some: Vec<&str> = (0..4).filter(|&i| i != skip).map(|i| all[i]).collect();
            assert_eq!(
                ev(&some),
                Err(UeventError::Ignored),
                "without {}",
                all[skip]
            );
        }
        // the variables decide, not the first string (4.3.0)
        let r = ev(&[
            "ACTION=offline",
            "DEVPATH=/kernel/dlm/bar",
            "SUBSYSTEM=dlm",
            "LOCKSPACE=bar",
        ])
        .expect("parses");
        assert_eq!(
            (r.action, r.lockspace.as_bytes()),
            (UeventAction::Offline, &b"bar"[..])
        );
        assert_eq!(
            ev(&[
                "ACTION=add",
                "DEVPATH=/kernel/dlm/foo",
                "SUBSYSTEM=dlm",
                "LOCKSPACE=foo"
            ]),
            Err(UeventError::Ignored)
        );
        assert_eq!(
            ev(&[
                "ACTION=online",
                "DEVPATH=/kernel/dlm/foo",
                "SUBSYSTEM=net",
                "LOCKSPACE=foo"
            ]),
            Err(UeventError::Ignored)
        );
        assert!(matches!(
            ev(&[
                "ACTION=online",
                "DEVPATH=/kernel/dlm/x",
                "SUBSYSTEM=dlm",
                "LOCKSPACE="
            ]),
            Err(UeventError::Name(_))
        ));
        assert_eq!(
            Uevent::parse(b"online@/kernel/dlm/foo\0"),
            Err(UeventError::Ignored)
        );
        assert_eq!(Uevent::parse(b""), Err(UeventError::Ignored));
    }
}
