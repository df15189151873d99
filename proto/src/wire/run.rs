//! RUN_REQUEST (16) and RUN_REPLY (17): `struct run_info` (32 bytes) + uuid[64]
//! (+ command[1024] for a request). Exact lengths: 1160 and 136 (helper.c, daemon_cpg.c).

use zerocopy::little_endian::{I32, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::{DlmHeader, HEADER_SIZE, WireError};

/// `RUN_UUID_LEN` (= `DLM_LOCKSPACE_LEN`).
pub const RUN_UUID_LEN: usize = 64;
/// `RUN_COMMAND_LEN`.
pub const RUN_COMMAND_LEN: usize = 1024;
/// RUN_REQUEST size.
pub const RUN_REQUEST_SIZE: usize = HEADER_SIZE + 32 + RUN_UUID_LEN + RUN_COMMAND_LEN;
/// RUN_REPLY size.
pub const RUN_REPLY_SIZE: usize = HEADER_SIZE + 32 + RUN_UUID_LEN;

/// The C layout of `struct run_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RawRunInfo {
    /// `dest_nodeid`
    pub dest_nodeid: I32,
    /// `start_nodeid`
    pub start_nodeid: I32,
    /// `local_pid`
    pub local_pid: I32,
    /// `local_result`
    pub local_result: I32,
    /// `need_replies`
    pub need_replies: I32,
    /// `reply_count`
    pub reply_count: I32,
    /// `fail_count`
    pub fail_count: I32,
    /// `flags` (`DLMC_FLAG_RUN_START_NODE_*`)
    pub flags: U32,
}

const _: () = assert!(size_of::<RawRunInfo>() == 32);

/// `struct run_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RunInfo {
    /// Node that must run it, 0 = all.
    pub dest_nodeid: i32,
    /// Node that started it.
    pub start_nodeid: i32,
    /// Pid of the command on the replying node.
    pub local_pid: i32,
    /// Exit status on the replying node.
    pub local_result: i32,
    /// Replies still expected.
    pub need_replies: i32,
    /// Replies received.
    pub reply_count: i32,
    /// Failed replies.
    pub fail_count: i32,
    /// `DLMC_FLAG_RUN_START_NODE_{NONE,FIRST,RECV}`.
    pub flags: u32,
}

impl RunInfo {
    fn from_raw(r: &RawRunInfo) -> Self {
        Self {
            dest_nodeid: r.dest_nodeid.get(),
            start_nodeid: r.start_nodeid.get(),
            local_pid: r.local_pid.get(),
            local_result: r.local_result.get(),
            need_replies: r.need_replies.get(),
            reply_count: r.reply_count.get(),
            fail_count: r.fail_count.get(),
            flags: r.flags.get(),
        }
    }

    fn to_raw(self) -> RawRunInfo {
        RawRunInfo {
            dest_nodeid: I32::new(self.dest_nodeid),
            start_nodeid: I32::new(self.start_nodeid),
            local_pid: I32::new(self.local_pid),
            local_result: I32::new(self.local_result),
            need_replies: I32::new(self.need_replies),
            reply_count: I32::new(self.reply_count),
            fail_count: I32::new(self.fail_count),
            flags: U32::new(self.flags),
        }
    }
}

/// The bytes of a C string in a fixed buffer: up to the first NUL.
fn c_str(buf: &[u8]) -> &[u8] {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    &buf[..end]
}

fn put_c_str(
    out: &mut Vec<u8>,
    s: &[u8],
    len: usize,
    field: &'static str,
) -> Result<(), WireError> {
    if s.len() > len || s.contains(&0) {
        return Err(WireError::field(
            field,
            s.len() as u64,
            "too long or contains NUL",
        ));
    }
    out.extend_from_slice(s);
    out.resize(out.len() + len - s.len(), 0);
    Ok(())
}

/// A request to run a command on the daemons' nodes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunRequest<'a> {
    /// Run bookkeeping.
    pub info: RunInfo,
    /// The run's uuid text (36 characters).
    pub uuid: &'a [u8],
    /// The command line.
    pub command: &'a [u8],
}

impl<'a> RunRequest<'a> {
    /// Decodes the payload after the header; the whole message must be 1160 bytes.
    pub fn decode(payload: &'a [u8]) -> Result<Self, WireError> {
        if HEADER_SIZE + payload.len() != RUN_REQUEST_SIZE {
            return Err(WireError::Length {
                what: "RUN_REQUEST",
                expected: RUN_REQUEST_SIZE,
                got: HEADER_SIZE + payload.len(),
            });
        }
        let (raw, rest) = RawRunInfo::read_from_prefix(payload).map_err(|_| WireError::Short {
            what: "run_info",
            need: RUN_REQUEST_SIZE,
            got: HEADER_SIZE + payload.len(),
        })?;
        let (uuid, command) = rest.split_at(RUN_UUID_LEN);
        Ok(Self {
            info: RunInfo::from_raw(&raw),
            uuid: c_str(uuid),
            command: c_str(command),
        })
    }

    /// The 1160-byte message.
    pub fn encode(&self, header: &DlmHeader) -> Result<Vec<u8>, WireError> {
        let mut out = Vec::with_capacity(RUN_REQUEST_SIZE);
        out.extend_from_slice(&header.encode());
        out.extend_from_slice(self.info.to_raw().as_bytes());
        put_c_str(&mut out, self.uuid, RUN_UUID_LEN, "uuid")?;
        put_c_str(&mut out, self.command, RUN_COMMAND_LEN, "command")?;
        Ok(out)
    }
}

/// The result of a run on one node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunReply<'a> {
    /// Run bookkeeping with `local_pid` and `local_result` of the replying node.
    pub info: RunInfo,
    /// The run's uuid text.
    pub uuid: &'a [u8],
}

impl<'a> RunReply<'a> {
    /// Decodes the payload after the header; the whole message must be 136 bytes.
    pub fn decode(payload: &'a [u8]) -> Result<Self, WireError> {
        if HEADER_SIZE + payload.len() != RUN_REPLY_SIZE {
            return Err(WireError::Length {
                what: "RUN_REPLY",
                expected: RUN_REPLY_SIZE,
                got: HEADER_SIZE + payload.len(),
            });
        }
        let (raw, rest) = RawRunInfo::read_from_prefix(payload).map_err(|_| WireError::Short {
            what: "run_info",
            need: RUN_REPLY_SIZE,
            got: HEADER_SIZE + payload.len(),
        })?;
        Ok(Self {
            info: RunInfo::from_raw(&raw),
            uuid: c_str(rest),
        })
    }

    /// The 136-byte message.
    pub fn encode(&self, header: &DlmHeader) -> Result<Vec<u8>, WireError> {
        let mut out = Vec::with_capacity(RUN_REPLY_SIZE);
        out.extend_from_slice(&header.encode());
        out.extend_from_slice(self.info.to_raw().as_bytes());
        put_c_str(&mut out, self.uuid, RUN_UUID_LEN, "uuid")?;
        Ok(out)
    }
}
