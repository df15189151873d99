use super::MsgType;
use crate::kernel::PlockInfoError;

/// Why a CPG message was refused. Each variant names the check that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the fixed part needs.
    #[error("{what} needs {need} bytes, message has {got}")]
    Short {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        got: usize,
    },
    /// A message type whose length is fixed has another length.
    #[error("{what} must be {expected} bytes, message has {got}")]
    Length {
        /// What was being read.
        what: &'static str,
        /// The only valid length.
        expected: usize,
        /// Bytes present.
        got: usize,
    },
    /// A type no dlm_controld sends.
    #[error("unknown message type {0}")]
    UnknownType(u16),
    /// A known type that is never multicast (DEADLK_*, RUN_CANCEL).
    #[error("message type {0:?} is never sent over CPG")]
    NotOnCpg(MsgType),
    /// A field with an impossible value.
    #[error("{field} is {value}: {why}")]
    Field {
        /// Field name as in the C struct.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The rule it breaks.
        why: &'static str,
    },
    /// The 64-byte plock payload is invalid.
    #[error("plock payload: {0}")]
    Plock(#[from] PlockInfoError),
}

impl WireError {
    pub(crate) fn field(field: &'static str, value: impl Into<u64>, why: &'static str) -> Self {
        Self::Field {
            field,
            value: value.into(),
            why,
        }
    }
}
