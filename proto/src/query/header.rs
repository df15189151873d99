//! `struct dlmc_header` (96 bytes) and the command numbers.

use std::fmt;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::{DLM_LOCKSPACE_LEN, NameError};

/// `DLMC_MAGIC`
pub const DLMC_MAGIC: u32 = 0xD13C_D13C;
/// `DLMC_VERSION`; only the upper 16 bits must match.
pub const DLMC_VERSION: u32 = 0x0001_0001;
/// `sizeof(struct dlmc_header)`
pub const HEADER_SIZE: usize = 96;
/// Our extension, in `flags` of a DUMP_PLOCKS request: send the whole dump, not at most
/// `DLMC_DUMP_SIZE`. The C daemon ignores `flags` on dump requests, so a client that sets
/// it gets the capped dump from a C daemon and the whole one from ours.
pub const FLAG_UNCAPPED_DUMP: i32 = 0x4000_0000;
/// Our extension, in `flags` of a DUMP_PLOCKS request: end each line with
/// ` age_ms <milliseconds since granted or queued>` before its newline. Only our daemon
/// knows it; a C daemon ignores it and sends plain lines.
pub const FLAG_DUMP_AGES: i32 = 0x2000_0000;

/// The C layout of `struct dlmc_header`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RawDlmcHeader {
    /// `magic`
    pub magic: u32,
    /// `version`
    pub version: u32,
    /// `command`
    pub command: u32,
    /// `option`
    pub option: u32,
    /// `len`: 96 + bytes that follow
    pub len: u32,
    /// `data`
    pub data: i32,
    /// `flags`
    pub flags: i32,
    /// `unsued2` (sic)
    pub unused: i32,
    /// `name[DLM_LOCKSPACE_LEN]`, not NUL-terminated at full length
    pub name: [u8; DLM_LOCKSPACE_LEN],
}

const _: () = assert!(size_of::<RawDlmcHeader>() == HEADER_SIZE);

/// `DLMC_CMD_*`: kept as a number so unknown commands can be logged and refused.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Command(pub u32);

/// Which socket serves a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Socket {
    /// `\0dlmc_query_sock`: one request per connection, read-only.
    Query,
    /// `\0dlmc_sock`: actions; the connection stays open.
    Main,
}

impl Command {
    /// `DLMC_CMD_DUMP_DEBUG`
    pub const DUMP_DEBUG: Self = Self(1);
    /// `DLMC_CMD_DUMP_PLOCKS`
    pub const DUMP_PLOCKS: Self = Self(2);
    /// `DLMC_CMD_LOCKSPACE_INFO`
    pub const LOCKSPACE_INFO: Self = Self(3);
    /// `DLMC_CMD_NODE_INFO`
    pub const NODE_INFO: Self = Self(4);
    /// `DLMC_CMD_LOCKSPACES`
    pub const LOCKSPACES: Self = Self(5);
    /// `DLMC_CMD_LOCKSPACE_NODES`
    pub const LOCKSPACE_NODES: Self = Self(6);
    /// `DLMC_CMD_FS_REGISTER`
    pub const FS_REGISTER: Self = Self(7);
    /// `DLMC_CMD_FS_UNREGISTER`
    pub const FS_UNREGISTER: Self = Self(8);
    /// `DLMC_CMD_FS_NOTIFIED`
    pub const FS_NOTIFIED: Self = Self(9);
    /// `DLMC_CMD_DEADLOCK_CHECK`
    pub const DEADLOCK_CHECK: Self = Self(10);
    /// `DLMC_CMD_DUMP_LOG_PLOCK`
    pub const DUMP_LOG_PLOCK: Self = Self(11);
    /// `DLMC_CMD_FENCE_ACK`
    pub const FENCE_ACK: Self = Self(12);
    /// `DLMC_CMD_DUMP_STATUS`
    pub const DUMP_STATUS: Self = Self(13);
    /// `DLMC_CMD_DUMP_CONFIG`
    pub const DUMP_CONFIG: Self = Self(14);
    /// `DLMC_CMD_RUN_START`
    pub const RUN_START: Self = Self(15);
    /// `DLMC_CMD_RUN_CHECK`
    pub const RUN_CHECK: Self = Self(16);
    /// `DLMC_CMD_DUMP_RUN`
    pub const DUMP_RUN: Self = Self(17);
    /// `DLMC_CMD_RELOAD_CONFIG` (4.2)
    pub const RELOAD_CONFIG: Self = Self(18);
    /// `DLMC_CMD_SET_CONFIG` (4.2)
    pub const SET_CONFIG: Self = Self(19);

    const NAMES: [&'static str; 19] = [
        "DUMP_DEBUG",
        "DUMP_PLOCKS",
        "LOCKSPACE_INFO",
        "NODE_INFO",
        "LOCKSPACES",
        "LOCKSPACE_NODES",
        "FS_REGISTER",
        "FS_UNREGISTER",
        "FS_NOTIFIED",
        "DEADLOCK_CHECK",
        "DUMP_LOG_PLOCK",
        "FENCE_ACK",
        "DUMP_STATUS",
        "DUMP_CONFIG",
        "RUN_START",
        "RUN_CHECK",
        "DUMP_RUN",
        "RELOAD_CONFIG",
        "SET_CONFIG",
    ];

    /// The name after `DLMC_CMD_`, or `None` for an unknown command.
    pub fn name(self) -> Option<&'static str> {
        let i = usize::try_from(self.0).ok()?.checked_sub(1)?;
        Self::NAMES.get(i).copied()
    }

    /// The socket that serves this command in the C daemon, `None` if unknown.
    pub fn socket(self) -> Option<Socket> {
        match self.0 {
            1..=6 | 11 | 13 | 14 | 17 => Some(Socket::Query),
            7..=10 | 12 | 15 | 16 | 18 | 19 => Some(Socket::Main),
            _ => None,
        }
    }
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "DLMC_CMD_{n}"),
            None => write!(f, "Command({})", self.0),
        }
    }
}

/// Why bytes on a query socket are not a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// Fewer than 96 bytes.
    #[error("request is {0} bytes, a header needs 96")]
    Short(usize),
    /// Wrong magic.
    #[error("bad magic {0:#010x}")]
    Magic(u32),
    /// Major version not 1.
    #[error("bad version {0:#010x}")]
    Version(u32),
    /// `len` disagrees with what the command needs.
    #[error("{command:?} needs len {need}, header says {len}")]
    Len {
        /// The command.
        command: Command,
        /// What it needs.
        need: usize,
        /// What the header says.
        len: u32,
    },
    /// A command number no daemon knows.
    #[error("unknown command {0}")]
    UnknownCommand(u32),
    /// The name field is not a lockspace name.
    #[error("bad lockspace name: {0}")]
    Name(#[from] NameError),
    /// A field has a value the command cannot take.
    #[error("{field} is {value}: {why}")]
    Field {
        /// Field.
        field: &'static str,
        /// Value.
        value: i64,
        /// Rule.
        why: &'static str,
    },
}

/// A checked `dlmc_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DlmcHeader {
    /// Command.
    pub command: Command,
    /// Command-specific option.
    pub option: u32,
    /// 96 + bytes that follow.
    pub len: u32,
    /// Command-specific data / result.
    pub data: i32,
    /// Command-specific flags.
    pub flags: i32,
    /// Name field, as sent (NUL padded).
    pub name: [u8; DLM_LOCKSPACE_LEN],
}

impl DlmcHeader {
    /// A header for `command` with everything else zero and `len` 96.
    pub fn new(command: Command) -> Self {
        Self {
            command,
            option: 0,
            len: 96,
            data: 0,
            flags: 0,
            name: [0; DLM_LOCKSPACE_LEN],
        }
    }

    /// Sets the name field from bytes (truncated to 64, NUL padded).
    pub fn with_name(mut self, name: &[u8]) -> Self {
        self.name = [0; DLM_LOCKSPACE_LEN];
        let n = name.len().min(DLM_LOCKSPACE_LEN);
        self.name[..n].copy_from_slice(&name[..n]);
        self
    }

    /// Sets `len` to 96 + `payload` bytes.
    pub fn with_payload_len(mut self, payload: usize) -> Self {
        self.len = u32::try_from(HEADER_SIZE + payload).unwrap_or(u32::MAX);
        self
    }

    /// The name field up to its first NUL.
    pub fn name_bytes(&self) -> &[u8] {
        let end = self
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.name.len());
        &self.name[..end]
    }

    /// Checks magic and version as both C sockets do (`(version & 0xFFFF0000) == 0x00010000`).
    pub fn decode(bytes: &[u8]) -> Result<Self, QueryError> {
        let (raw, _) =
            RawDlmcHeader::read_from_prefix(bytes).map_err(|_| QueryError::Short(bytes.len()))?;
        if raw.magic != DLMC_MAGIC {
            return Err(QueryError::Magic(raw.magic));
        }
        if raw.version & 0xFFFF_0000 != DLMC_VERSION & 0xFFFF_0000 {
            return Err(QueryError::Version(raw.version));
        }
        Ok(Self {
            command: Command(raw.command),
            option: raw.option,
            len: raw.len,
            data: raw.data,
            flags: raw.flags,
            name: raw.name,
        })
    }

    /// The 96 bytes, with magic and version.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let raw = RawDlmcHeader {
            magic: DLMC_MAGIC,
            version: DLMC_VERSION,
            command: self.command.0,
            option: self.option,
            len: self.len,
            data: self.data,
            flags: self.flags,
            unused: 0,
            name: self.name,
        };
        let mut out = [0u8; HEADER_SIZE];
        out.copy_from_slice(raw.as_bytes());
        out
    }
}
