//! What a process group reports: deliveries, membership changes, totem ring changes.

/// Why a member joined or left (`cpg_reason_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// `CPG_REASON_JOIN`: the process called join.
    Join,
    /// `CPG_REASON_LEAVE`: the process called leave.
    Leave,
    /// `CPG_REASON_NODEDOWN`: its node failed or was cut off.
    NodeDown,
    /// `CPG_REASON_NODEUP`: its node came back (a merge after a partition).
    NodeUp,
    /// `CPG_REASON_PROCDOWN`: the process exited without leaving, or corosync stopped.
    ProcDown,
    /// A value this crate does not know, kept as sent.
    Other(u32),
}

impl Reason {
    /// From the C value.
    pub fn from_raw(v: u32) -> Self {
        match v {
            1 => Self::Join,
            2 => Self::Leave,
            3 => Self::NodeDown,
            4 => Self::NodeUp,
            5 => Self::ProcDown,
            n => Self::Other(n),
        }
    }

    /// To the C value.
    pub fn to_raw(self) -> u32 {
        match self {
            Self::Join => 1,
            Self::Leave => 2,
            Self::NodeDown => 3,
            Self::NodeUp => 4,
            Self::ProcDown => 5,
            Self::Other(n) => n,
        }
    }

    /// The word C's log lines use for it (`reason_str`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Join => "join",
            Self::Leave => "leave",
            Self::NodeDown => "nodedown",
            Self::NodeUp => "nodeup",
            Self::ProcDown => "procdown",
            Self::Other(_) => "unknown",
        }
    }
}

/// One process in a membership list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Member {
    /// Corosync node id.
    pub nodeid: u32,
    /// Process id on that node.
    pub pid: u32,
    /// Why it is in the joined or left list; corosync sends 0 (`Other(0)`) in the
    /// member list, where no reason applies.
    pub reason: Reason,
}

/// A totem ring identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RingId {
    /// Node that formed the ring.
    pub nodeid: u32,
    /// Ring sequence number.
    pub seq: u64,
}

/// An event of a process group, in the order the group delivers them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A multicast message, in agreed (total) order; includes our own.
    Deliver {
        /// Sender node.
        nodeid: u32,
        /// Sender process.
        pid: u32,
        /// The bytes sent, untouched.
        payload: Vec<u8>,
    },
    /// The group's membership changed.
    ConfChg {
        /// Members after the change.
        members: Vec<Member>,
        /// Members that left, with why.
        left: Vec<Member>,
        /// Members that joined, with why.
        joined: Vec<Member>,
    },
    /// The totem ring changed (also delivered once at join when asked for).
    Totem {
        /// The new ring.
        ring: RingId,
        /// Nodes in the ring.
        members: Vec<u32>,
    },
}

/// Errors of the group layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpgError {
    /// Corosync asks to retry later (flow control); nothing was done.
    #[error("corosync is busy (CS_ERR_TRY_AGAIN)")]
    TryAgain,
    /// Corosync went away (killed, stopped): the handle is dead.
    #[error("corosync connection lost in {call} (cs_error {code})")]
    Gone {
        /// The call that found out.
        call: &'static str,
        /// The `cs_error_t`.
        code: i32,
    },
    /// Another corosync error.
    #[error("{call} failed with cs_error {code}")]
    Call {
        /// The call.
        call: &'static str,
        /// The `cs_error_t`.
        code: i32,
    },
    /// A group name longer than CPG allows (128 bytes).
    #[error("group name is {0} bytes, at most 128")]
    NameTooLong(usize),
    /// The group was left or its bus is gone.
    #[error("group is closed")]
    Closed,
    /// A callback of ours panicked inside `cpg_dispatch`; the handle is not used again.
    #[error("a cpg_dispatch callback panicked")]
    CallbackPanicked,
    /// `cpg_dispatch` refused on a thread whose stack is too small for libcpg's buffer.
    #[error("{call}: the thread has {stack} bytes of stack, libcpg's dispatch needs 2 MiB")]
    SmallStack {
        /// The call refused.
        call: &'static str,
        /// The thread's stack size (0 if unknown).
        stack: usize,
    },
    /// The event loop around the handle failed (registering its fd, waiting on it).
    #[error("{call}: {source}")]
    Io {
        /// What failed.
        call: &'static str,
        /// Why.
        #[source]
        source: IoCause,
    },
}

/// An `io::Error` kept whole inside a [`CpgError`] (which is `Clone` and `Eq`): shared, and
/// compared by its kind and OS error number.
#[derive(Debug, Clone)]
pub struct IoCause(pub std::sync::Arc<std::io::Error>);

impl From<std::io::Error> for IoCause {
    fn from(e: std::io::Error) -> Self {
        Self(std::sync::Arc::new(e))
    }
}

impl PartialEq for IoCause {
    fn eq(&self, other: &Self) -> bool {
        self.0.kind() == other.0.kind() && self.0.raw_os_error() == other.0.raw_os_error()
    }
}

impl Eq for IoCause {}

impl std::fmt::Display for IoCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for IoCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    #[test]
    fn reasons_round_trip_and_have_c_words() {
        let words: Vec<(u32, &str)> = (0..7)
            .map(|v| {
                let r = Reason::from_raw(v);
                assert_eq!(r.to_raw(), v);
                (v, r.name())
            })
            .collect();
        assert_eq!(
            words,
            [
                (0, "unknown"),
                (1, "join"),
                (2, "leave"),
                (3, "nodedown"),
                (4, "nodeup"),
                (5, "procdown"),
                (6, "unknown")
            ]
        );
    }
}
