//! Daemon-to-daemon messages over corosync CPG: `struct dlm_header` (40 bytes) and a
//! payload per message type, **little-endian always**, exactly as dlm_controld 4.2.0
//! sends and accepts them (daemon-spec §3, plock-spec §3).
//!
//! [`Message::decode`] checks every length the C daemon does not check and says which
//! check failed. It does not check the header version against the negotiated protocol, nor
//! the sender: those need daemon state and are the caller's (`deliver_cb` in cpg.c).

mod change;
mod error;
mod fence;
mod global_id;
mod header;
mod message;
mod native;
mod plock;
mod plocks_data;
mod protocol;
mod run;

pub use change::{Change, ID_INFO_SIZE_OURS, Incarnation, LS_INFO_SIZE, RawLsInfo};
pub use error::WireError;
pub use fence::{FENCE_RESULT_SIZE, FenceFlags, FenceResult, RawFenceResult};
pub use global_id::{crc32, global_id, lockspace_group_name};
pub use header::{DlmHeader, HEADER_SIZE, HeaderFlags, MsgType, RawDlmHeader, Version3};
pub use message::{Body, Message};
pub use native::{
    MAX_NATIVE_ENTRIES, MAX_STATE_HELD, NATIVE_ENTRY_SIZE, NativeBatch, NativeEntry, NativeKind,
    NativeWriter,
};
pub use plock::{PLOCK_MSG_SIZE, RawPlockInfoLe, encode_plock_msg};
pub use plocks_data::{
    MAX_PLOCKS_DATA_ENTRIES, MAX_PLOCKS_DATA_SIZE, PlockData, PlocksData, PlocksDataWriter,
    RD_CONTINUE, RawPlockData, RawResourceData, ResourceData,
};
pub use protocol::{PROTOCOL_MSG_SIZE, Protocol, ProtocolVersion, RawProtocol};
pub use run::{
    RUN_COMMAND_LEN, RUN_REPLY_SIZE, RUN_REQUEST_SIZE, RUN_UUID_LEN, RawRunInfo, RunInfo, RunReply,
    RunRequest,
};

/// The daemon protocol this implementation speaks (`daemon_max` in daemon_cpg.c).
pub const DAEMON_PROTOCOL: Version3 = Version3([3, 1, 1]);
/// The kernel protocol advertised alongside it (`kernel_max`).
pub const KERNEL_PROTOCOL: Version3 = Version3([1, 1, 1]);
/// The daemon CPG group name; its CPG length counts the trailing NUL (13).
pub const DAEMON_GROUP_NAME: &[u8] = b"dlm:controld\0";
