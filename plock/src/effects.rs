//! What applying a message asks of the daemon.

use dlm_proto::kernel::PlockInfo;

/// A reply the daemon must write to the kernel: this node issued the request. `info` is the
/// request as delivered (or as queued, for a granted waiter) with `rv` set, and for GET the
/// conflicting lock's `ex`, `pid`, `start` and `end` filled in, exactly as C writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// The record to write to `/dev/misc/dlm_plock`.
    pub info: PlockInfo,
}

/// Why a delivered plock message was not applied. Nothing changed; the daemon logs it once
/// and counts it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The request's `nodeid` is not the CPG sender (C: "receive_plock from %d vs %d").
    #[error("plock request names node {claimed} but was sent by node {sender}")]
    NodeMismatch {
        /// nodeid inside the request.
        claimed: i32,
        /// CPG sender.
        sender: u32,
    },
}

/// Why a PLOCKS_DATA message could not be restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// A resource owned by a node: only ownership mode sends those, and it is refused.
    #[error("resource {number:#x} has owner {owner} (ownership mode is not supported)")]
    Owned {
        /// Resource.
        number: u64,
        /// Owner sent.
        owner: i32,
    },
    /// A first message for a resource that already exists.
    #[error("resource {0:#x} sent twice")]
    Duplicate(u64),
    /// A continuation for a resource that was never started.
    #[error("continuation for unknown resource {0:#x}")]
    UnknownContinuation(u64),
    /// A node id that does not fit the kernel's signed nodeid.
    #[error("entry nodeid {0} out of range")]
    NodeId(u32),
}
