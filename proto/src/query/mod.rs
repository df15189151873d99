//! The `libdlmcontrol` protocol between `dlm_tool` and the daemon, on two abstract Unix
//! stream sockets, in host byte order (daemon-spec §5, dlm_controld.h, libdlmcontrol.h).
//!
//! Every request is a 96-byte [`DlmcHeader`], sometimes followed by 1024 bytes (RUN_START,
//! SET_CONFIG). [`Request::decode`] turns one into a typed request; the reply builders
//! produce the exact bytes the C daemon sends, quirks included.

mod header;
mod lockspace;
mod node;
mod request;
mod state;

pub use header::{
    Command, DLMC_MAGIC, DLMC_VERSION, DlmcHeader, FLAG_DUMP_AGES, FLAG_UNCAPPED_DUMP, HEADER_SIZE,
    QueryError, RawDlmcHeader, Socket,
};
pub use lockspace::{
    DlmcChange, DlmcLockspace, LOCKSPACE_SIZE, LockspaceFlags, RawDlmcChange, RawDlmcLockspace,
    WaitCondition,
};
pub use node::{DlmcNode, FailReason, NODE_SIZE, NodeFlags, NodesKind, RawDlmcNode};
pub use request::{EXTRA_SIZE, Request, RunCheckFlags, RunStartFlags, RunStatus};
pub use state::{RawDlmcState, STATE_SIZE, StateRecord, StateType};

/// Abstract name of the query socket (`DLMC_QUERY_SOCK_PATH`), without the leading NUL.
pub const QUERY_SOCK_NAME: &[u8] = b"dlmc_query_sock";
/// Abstract name of the main ("action") socket (`DLMC_SOCK_PATH`).
pub const MAIN_SOCK_NAME: &[u8] = b"dlmc_sock";

/// `sockaddr_un` length that dlm_tool passes to connect(): family (2) + NUL + name, no
/// trailing NUL. 18 for the query socket, 12 for the main socket.
pub const fn sockaddr_len(name: &[u8]) -> usize {
    2 + 1 + name.len()
}

/// Most bytes a dump reply carries (`DLMC_DUMP_SIZE`); ours streams without this cap,
/// the real dlm_tool reads at most this much.
pub const DUMP_SIZE: usize = 1024 * 1024;
