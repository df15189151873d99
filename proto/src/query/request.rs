//! Typed requests on both sockets (`process_connection` and `query_thread_fn` in main.c).

use super::{Command, DlmcHeader, HEADER_SIZE, NodesKind, QueryError};
use crate::{LockspaceName, NameError};

/// Bytes after the header for RUN_START (the command) and SET_CONFIG (`key=val ...`).
pub const EXTRA_SIZE: usize = 1024;

/// `DLMC_FLAG_RUN_START_NODE_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RunStartFlags(pub u32);

impl RunStartFlags {
    /// `NODE_NONE`: not on the starting node.
    pub const NODE_NONE: u32 = 1;
    /// `NODE_FIRST`: on the starting node at once.
    pub const NODE_FIRST: u32 = 2;
    /// `NODE_RECV`: on the starting node when its own request is delivered.
    pub const NODE_RECV: u32 = 4;
}

/// `DLMC_FLAG_RUN_CHECK_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RunCheckFlags(pub u32);

impl RunCheckFlags {
    /// `CLEAR`: free the record when done.
    pub const CLEAR: u32 = 1;
    /// `CANCEL`: free it even if not done.
    pub const CANCEL: u32 = 2;
}

/// `DLMC_RUN_STATUS_*` in the RUN_CHECK reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RunStatus(pub u32);

impl RunStatus {
    /// `WAITING`
    pub const WAITING: u32 = 1;
    /// `DONE`
    pub const DONE: u32 = 2;
    /// `FAILED`
    pub const FAILED: u32 = 4;
}

/// A decoded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// 1: the debug buffer.
    DumpDebug,
    /// 2: `dlm_tool plocks <ls>`.
    DumpPlocks(LockspaceName),
    /// 3: `dlm_tool ls <ls>`.
    LockspaceInfo(LockspaceName),
    /// 4: one node of a lockspace.
    NodeInfo {
        /// Lockspace.
        lockspace: LockspaceName,
        /// Node.
        nodeid: i32,
    },
    /// 5: all lockspaces, at most `max` entries.
    Lockspaces {
        /// Entries the client has room for.
        max: i32,
    },
    /// 6: nodes of a lockspace.
    LockspaceNodes {
        /// Lockspace.
        lockspace: LockspaceName,
        /// Which nodes.
        kind: NodesKind,
        /// Entries the client has room for.
        max: i32,
    },
    /// 7: a file system registers (only with `enable_fscontrol`).
    FsRegister(LockspaceName),
    /// 8: a file system unregisters.
    FsUnregister(LockspaceName),
    /// 9: a file system has handled a node failure.
    FsNotified {
        /// Lockspace.
        lockspace: LockspaceName,
        /// Node.
        nodeid: i32,
    },
    /// 10: compiled out of the C daemon; logged and ignored.
    DeadlockCheck,
    /// 11: the plock log (answered with command 1).
    DumpLogPlock,
    /// 12: `dlm_tool fence_ack <nodeid>`.
    FenceAck {
        /// Node, parsed from the name field.
        nodeid: i32,
    },
    /// 13: `dlm_tool status` (record stream, no header).
    DumpStatus,
    /// 14: `dlm_tool dump_config`.
    DumpConfig,
    /// 15: `dlm_tool run`.
    RunStart {
        /// Node to run on, 0 = all.
        dest_nodeid: i32,
        /// `RUN_START_NODE_*`.
        flags: RunStartFlags,
        /// Command text up to its NUL.
        command: Vec<u8>,
    },
    /// 16: `dlm_tool run_check`.
    RunCheck {
        /// Run uuid.
        uuid: Vec<u8>,
        /// `RUN_CHECK_*`.
        flags: RunCheckFlags,
    },
    /// 17: `dlm_tool run_list`.
    DumpRun,
    /// 18: `dlm_tool reload_config`.
    ReloadConfig,
    /// 19: `dlm_tool set_config key=val ...`.
    SetConfig {
        /// The `key=val key=val ` text up to its NUL.
        text: Vec<u8>,
    },
}

fn c_str(buf: &[u8]) -> &[u8] {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    &buf[..end]
}

fn name(h: &DlmcHeader) -> Result<LockspaceName, NameError> {
    LockspaceName::from_c_buf(&h.name)
}

/// Bytes that must follow the header for this command, or 0.
fn extra_for(command: Command) -> usize {
    match command {
        Command::RUN_START | Command::SET_CONFIG => EXTRA_SIZE,
        _ => 0,
    }
}

impl Request {
    /// How many bytes after the header a request with this header carries (what a server
    /// must read before calling [`Request::decode`]); at most 1024.
    pub fn extra_len(header: &DlmcHeader) -> usize {
        let said = (header.len as usize).saturating_sub(HEADER_SIZE);
        said.min(extra_for(header.command))
    }

    /// Decodes a request from its header and the bytes that followed it.
    pub fn decode(h: &DlmcHeader, extra: &[u8]) -> Result<Self, QueryError> {
        let need = extra_for(h.command);
        if need > 0 && ((h.len as usize) < HEADER_SIZE + need || extra.len() < need) {
            return Err(QueryError::Len {
                command: h.command,
                need: HEADER_SIZE + need,
                len: h.len,
            });
        }
        Ok(match h.command {
            Command::DUMP_DEBUG => Self::DumpDebug,
            Command::DUMP_PLOCKS => Self::DumpPlocks(name(h)?),
            Command::LOCKSPACE_INFO => Self::LockspaceInfo(name(h)?),
            Command::NODE_INFO => Self::NodeInfo {
                lockspace: name(h)?,
                nodeid: h.data,
            },
            Command::LOCKSPACES => Self::Lockspaces { max: h.data },
            Command::LOCKSPACE_NODES => Self::LockspaceNodes {
                lockspace: name(h)?,
                kind: NodesKind::from_raw(h.option),
                max: h.data,
            },
            Command::FS_REGISTER => Self::FsRegister(name(h)?),
            Command::FS_UNREGISTER => Self::FsUnregister(name(h)?),
            Command::FS_NOTIFIED => Self::FsNotified {
                lockspace: name(h)?,
                nodeid: h.data,
            },
            Command::DEADLOCK_CHECK => Self::DeadlockCheck,
            Command::DUMP_LOG_PLOCK => Self::DumpLogPlock,
            Command::FENCE_ACK => {
                let text = c_str(&h.name);
                let nodeid = std::str::from_utf8(text)
                    .ok()
                    .and_then(|s| s.trim().parse::<i32>().ok())
                    .filter(|&n| n > 0)
                    .ok_or(QueryError::Field {
                        field: "fence_ack nodeid",
                        value: i64::try_from(text.len()).unwrap_or(i64::MAX),
                        why: "name field is not a positive nodeid",
                    })?;
                Self::FenceAck { nodeid }
            }
            Command::DUMP_STATUS => Self::DumpStatus,
            Command::DUMP_CONFIG => Self::DumpConfig,
            Command::RUN_START => Self::RunStart {
                dest_nodeid: h.data,
                flags: RunStartFlags(u32::from_ne_bytes(h.flags.to_ne_bytes())),
                command: c_str(&extra[..need]).to_vec(),
            },
            Command::RUN_CHECK => Self::RunCheck {
                uuid: c_str(&h.name).to_vec(),
                flags: RunCheckFlags(u32::from_ne_bytes(h.flags.to_ne_bytes())),
            },
            Command::DUMP_RUN => Self::DumpRun,
            Command::RELOAD_CONFIG => Self::ReloadConfig,
            Command::SET_CONFIG => Self::SetConfig {
                text: c_str(&extra[..need]).to_vec(),
            },
            other => return Err(QueryError::UnknownCommand(other.0)),
        })
    }

    /// The bytes `dlm_tool` 4.2.0 sends for this request (header, plus 1024 bytes for
    /// RUN_START and SET_CONFIG).
    pub fn encode(&self) -> Vec<u8> {
        let mut extra: Option<&[u8]> = None;
        let h = match self {
            Self::DumpDebug => DlmcHeader::new(Command::DUMP_DEBUG),
            Self::DumpPlocks(n) => DlmcHeader::new(Command::DUMP_PLOCKS).with_name(n.as_bytes()),
            Self::LockspaceInfo(n) => {
                DlmcHeader::new(Command::LOCKSPACE_INFO).with_name(n.as_bytes())
            }
            Self::NodeInfo { lockspace, nodeid } => DlmcHeader {
                data: *nodeid,
                ..DlmcHeader::new(Command::NODE_INFO).with_name(lockspace.as_bytes())
            },
            Self::Lockspaces { max } => DlmcHeader {
                data: *max,
                ..DlmcHeader::new(Command::LOCKSPACES)
            },
            Self::LockspaceNodes {
                lockspace,
                kind,
                max,
            } => DlmcHeader {
                option: kind.to_raw(),
                data: *max,
                ..DlmcHeader::new(Command::LOCKSPACE_NODES).with_name(lockspace.as_bytes())
            },
            Self::FsRegister(n) => DlmcHeader::new(Command::FS_REGISTER).with_name(n.as_bytes()),
            Self::FsUnregister(n) => {
                DlmcHeader::new(Command::FS_UNREGISTER).with_name(n.as_bytes())
            }
            Self::FsNotified { lockspace, nodeid } => DlmcHeader {
                data: *nodeid,
                ..DlmcHeader::new(Command::FS_NOTIFIED).with_name(lockspace.as_bytes())
            },
            Self::DeadlockCheck => DlmcHeader::new(Command::DEADLOCK_CHECK),
            Self::DumpLogPlock => DlmcHeader::new(Command::DUMP_LOG_PLOCK),
            Self::FenceAck { nodeid } => {
                DlmcHeader::new(Command::FENCE_ACK).with_name(nodeid.to_string().as_bytes())
            }
            Self::DumpStatus => DlmcHeader::new(Command::DUMP_STATUS),
            Self::DumpConfig => DlmcHeader::new(Command::DUMP_CONFIG),
            Self::RunStart {
                dest_nodeid,
                flags,
                command,
            } => {
                extra = Some(command);
                DlmcHeader {
                    data: *dest_nodeid,
                    flags: i32::from_ne_bytes(flags.0.to_ne_bytes()),
                    ..DlmcHeader::new(Command::RUN_START).with_payload_len(EXTRA_SIZE)
                }
            }
            Self::RunCheck { uuid, flags } => DlmcHeader {
                flags: i32::from_ne_bytes(flags.0.to_ne_bytes()),
                ..DlmcHeader::new(Command::RUN_CHECK).with_name(uuid)
            },
            Self::DumpRun => DlmcHeader::new(Command::DUMP_RUN),
            Self::ReloadConfig => DlmcHeader::new(Command::RELOAD_CONFIG),
            Self::SetConfig { text } => {
                extra = Some(text);
                DlmcHeader::new(Command::SET_CONFIG).with_payload_len(EXTRA_SIZE)
            }
        };
        let mut out = h.encode().to_vec();
        if let Some(e) = extra {
            let n = e.len().min(EXTRA_SIZE - 1);
            out.extend_from_slice(&e[..n]);
            out.resize(HEADER_SIZE + EXTRA_SIZE, 0);
        }
        out
    }
}
