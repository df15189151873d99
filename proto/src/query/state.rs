//! The DUMP_STATUS stream: `struct dlmc_state` (28 bytes) records, each followed by
//! `str_len` bytes of `key=value ` text with its NUL, then `bin_len` bytes (always 0).
//! No `dlmc_header` precedes the stream; the daemon closes the socket after the last record.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::QueryError;

/// `sizeof(struct dlmc_state)`.
pub const STATE_SIZE: usize = 28;
/// `DLMC_STATE_MAXSTR` / `DLMC_STATE_MAXBIN`.
const MAX_STR: u32 = 4096;

/// The C layout of `struct dlmc_state`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RawDlmcState {
    /// `type` (`DLMC_STATE_*`)
    pub state_type: u32,
    /// `flags`
    pub flags: u32,
    /// `nodeid`
    pub nodeid: i32,
    /// `data32`
    pub data32: u32,
    /// `data64` (a u32 despite its name)
    pub data64: u32,
    /// `str_len`: text bytes including NUL
    pub str_len: u32,
    /// `bin_len`
    pub bin_len: u32,
}

const _: () = assert!(size_of::<RawDlmcState>() == STATE_SIZE);

/// `DLMC_STATE_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateType {
    /// `DLMC_STATE_DAEMON` (1)
    Daemon,
    /// `DLMC_STATE_DAEMON_NODE` (2)
    DaemonNode,
    /// `DLMC_STATE_STARTUP_NODE` (3)
    StartupNode,
    /// `DLMC_STATE_RUN` (4)
    Run,
}

impl StateType {
    fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::Daemon,
            2 => Self::DaemonNode,
            3 => Self::StartupNode,
            4 => Self::Run,
            _ => return None,
        })
    }

    fn to_raw(self) -> u32 {
        match self {
            Self::Daemon => 1,
            Self::DaemonNode => 2,
            Self::StartupNode => 3,
            Self::Run => 4,
        }
    }
}

/// One record of the stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StateRecord {
    /// Record type.
    pub kind: StateType,
    /// Node it describes (our own for DAEMON).
    pub nodeid: i32,
    /// The `key=value ` text, without its NUL.
    pub text: Vec<u8>,
}

impl StateRecord {
    /// Appends the record's bytes to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let raw = RawDlmcState {
            state_type: self.kind.to_raw(),
            flags: 0,
            nodeid: self.nodeid,
            data32: 0,
            data64: 0,
            str_len: u32::try_from(self.text.len() + 1).unwrap_or(u32::MAX),
            bin_len: 0,
        };
        out.extend_from_slice(raw.as_bytes());
        out.extend_from_slice(&self.text);
        out.push(0);
    }

    /// Reads one record from the start of `bytes`; returns it and the bytes it used.
    pub fn decode(bytes: &[u8]) -> Result<(Self, usize), QueryError> {
        let (raw, rest) =
            RawDlmcState::read_from_prefix(bytes).map_err(|_| QueryError::Short(bytes.len()))?;
        let kind = StateType::from_raw(raw.state_type).ok_or(QueryError::Field {
            field: "dlmc_state.type",
            value: i64::from(raw.state_type),
            why: "not a DLMC_STATE_* value",
        })?;
        if raw.str_len > MAX_STR || raw.bin_len > MAX_STR {
            return Err(QueryError::Field {
                field: "dlmc_state.str_len",
                value: i64::from(raw.str_len.max(raw.bin_len)),
                why: "over 4096",
            });
        }
        let body = raw.str_len as usize + raw.bin_len as usize;
        if rest.len() < body {
            return Err(QueryError::Short(bytes.len()));
        }
        let text = &rest[..raw.str_len as usize];
        let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
        Ok((
            Self {
                kind,
                nodeid: raw.nodeid,
                text: text[..end].to_vec(),
            },
            STATE_SIZE + body,
        ))
    }
}
