//! `struct dlmc_node` (40 bytes, libdlmcontrol.h).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::QueryError;

/// `sizeof(struct dlmc_node)`.
pub const NODE_SIZE: usize = 40;

/// The C layout, with the 4 bytes of padding before `fail_walltime` made explicit.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RawDlmcNode {
    /// `nodeid`
    pub nodeid: i32,
    /// `flags`
    pub flags: u32,
    /// `added_seq`
    pub added_seq: u32,
    /// `removed_seq`
    pub removed_seq: u32,
    /// `fail_reason`
    pub fail_reason: i32,
    /// padding
    pub pad: u32,
    /// `fail_walltime`
    pub fail_walltime: u64,
    /// `fail_monotime`
    pub fail_monotime: u64,
}

const _: () = assert!(size_of::<RawDlmcNode>() == NODE_SIZE);

/// `DLMC_NF_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NodeFlags(pub u32);

impl NodeFlags {
    /// `DLMC_NF_MEMBER`
    pub const MEMBER: u32 = 0x1;
    /// `DLMC_NF_START`
    pub const START: u32 = 0x2;
    /// `DLMC_NF_DISALLOWED`
    pub const DISALLOWED: u32 = 0x4;
    /// `DLMC_NF_NEED_FENCING`
    pub const NEED_FENCING: u32 = 0x8;
    /// `DLMC_NF_CHECK_FS`
    pub const CHECK_FS: u32 = 0x10;
}

/// Why a node left, as corosync CPG reports it (`CPG_REASON_*`), plus 0 for "none".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailReason {
    /// 0: never left.
    None,
    /// `CPG_REASON_JOIN` (1)
    Join,
    /// `CPG_REASON_LEAVE` (2)
    Leave,
    /// `CPG_REASON_NODEDOWN` (3)
    NodeDown,
    /// `CPG_REASON_NODEUP` (4)
    NodeUp,
    /// `CPG_REASON_PROCDOWN` (5)
    ProcDown,
    /// Anything else, kept as sent.
    Other(i32),
}

impl FailReason {
    /// From the C int.
    pub fn from_raw(v: i32) -> Self {
        match v {
            0 => Self::None,
            1 => Self::Join,
            2 => Self::Leave,
            3 => Self::NodeDown,
            4 => Self::NodeUp,
            5 => Self::ProcDown,
            n => Self::Other(n),
        }
    }

    /// To the C int.
    pub fn to_raw(self) -> i32 {
        match self {
            Self::None => 0,
            Self::Join => 1,
            Self::Leave => 2,
            Self::NodeDown => 3,
            Self::NodeUp => 4,
            Self::ProcDown => 5,
            Self::Other(n) => n,
        }
    }
}

/// `DLMC_NODES_*` for LOCKSPACE_NODES.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodesKind {
    /// `DLMC_NODES_ALL` (1): the lockspace's node history.
    All,
    /// `DLMC_NODES_MEMBERS` (2): members of the started change.
    Members,
    /// `DLMC_NODES_NEXT` (3): members of the newest pending change.
    Next,
    /// Anything else: the C daemon answers with count 0.
    Other(u32),
}

impl NodesKind {
    /// From the request's `option`.
    pub fn from_raw(v: u32) -> Self {
        match v {
            1 => Self::All,
            2 => Self::Members,
            3 => Self::Next,
            n => Self::Other(n),
        }
    }

    /// To the request's `option`.
    pub fn to_raw(self) -> u32 {
        match self {
            Self::All => 1,
            Self::Members => 2,
            Self::Next => 3,
            Self::Other(n) => n,
        }
    }
}

/// `struct dlmc_node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DlmcNode {
    /// Node id.
    pub nodeid: i32,
    /// `DLMC_NF_*`.
    pub flags: NodeFlags,
    /// Change seq when added.
    pub added_seq: u32,
    /// Change seq when removed.
    pub removed_seq: u32,
    /// Why it left.
    pub fail_reason: FailReason,
    /// Wall-clock seconds of the failure.
    pub fail_walltime: u64,
    /// Monotonic seconds of the failure.
    pub fail_monotime: u64,
}

impl DlmcNode {
    /// The 40 bytes.
    pub fn encode(&self) -> [u8; NODE_SIZE] {
        let raw = RawDlmcNode {
            nodeid: self.nodeid,
            flags: self.flags.0,
            added_seq: self.added_seq,
            removed_seq: self.removed_seq,
            fail_reason: self.fail_reason.to_raw(),
            pad: 0,
            fail_walltime: self.fail_walltime,
            fail_monotime: self.fail_monotime,
        };
        let mut out = [0u8; NODE_SIZE];
        out.copy_from_slice(raw.as_bytes());
        out
    }

    /// Decodes 40 bytes (more are ignored).
    pub fn decode(bytes: &[u8]) -> Result<Self, QueryError> {
        let (raw, _) =
            RawDlmcNode::read_from_prefix(bytes).map_err(|_| QueryError::Short(bytes.len()))?;
        Ok(Self {
            nodeid: raw.nodeid,
            flags: NodeFlags(raw.flags),
            added_seq: raw.added_seq,
            removed_seq: raw.removed_seq,
            fail_reason: FailReason::from_raw(raw.fail_reason),
            fail_walltime: raw.fail_walltime,
            fail_monotime: raw.fail_monotime,
        })
    }
}
