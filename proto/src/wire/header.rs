//! `struct dlm_header` (dlm_daemon.h): 40 bytes, little-endian.

use std::fmt;

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::WireError;

/// Size of `struct dlm_header`.
pub const HEADER_SIZE: usize = 40;

/// The C layout.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RawDlmHeader {
    /// `version[3]`
    pub version: [U16; 3],
    /// `type`
    pub msg_type: U16,
    /// `nodeid`
    pub nodeid: U32,
    /// `to_nodeid`
    pub to_nodeid: U32,
    /// `global_id`
    pub global_id: U32,
    /// `flags`
    pub flags: U32,
    /// `msgdata`
    pub msgdata: U32,
    /// `msgdata2`
    pub msgdata2: U32,
    /// `pad`
    pub pad: U64,
}

const _: () = assert!(size_of::<RawDlmHeader>() == HEADER_SIZE);

/// A three-part protocol version (`major.minor.patch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Version3(pub [u16; 3]);

impl fmt::Display for Version3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0[0], self.0[1], self.0[2])
    }
}

/// `DLM_MSG_*`: relayed and logged even when unknown, hence a newtype.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgType(pub u16);

impl MsgType {
    /// `DLM_MSG_PROTOCOL`
    pub const PROTOCOL: Self = Self(1);
    /// `DLM_MSG_START`
    pub const START: Self = Self(2);
    /// `DLM_MSG_PLOCK`
    pub const PLOCK: Self = Self(3);
    /// `DLM_MSG_PLOCK_OWN`
    pub const PLOCK_OWN: Self = Self(4);
    /// `DLM_MSG_PLOCK_DROP`
    pub const PLOCK_DROP: Self = Self(5);
    /// `DLM_MSG_PLOCK_SYNC_LOCK`
    pub const PLOCK_SYNC_LOCK: Self = Self(6);
    /// `DLM_MSG_PLOCK_SYNC_WAITER`
    pub const PLOCK_SYNC_WAITER: Self = Self(7);
    /// `DLM_MSG_PLOCKS_DONE`
    pub const PLOCKS_DONE: Self = Self(8);
    /// `DLM_MSG_PLOCKS_DATA`
    pub const PLOCKS_DATA: Self = Self(9);
    /// `DLM_MSG_DEADLK_CYCLE_START` (compiled out of the C daemon; never sent)
    pub const DEADLK_CYCLE_START: Self = Self(10);
    /// `DLM_MSG_DEADLK_CYCLE_END` (never sent)
    pub const DEADLK_CYCLE_END: Self = Self(11);
    /// `DLM_MSG_DEADLK_CHECKPOINT_READY` (never sent)
    pub const DEADLK_CHECKPOINT_READY: Self = Self(12);
    /// `DLM_MSG_DEADLK_CANCEL_LOCK` (never sent)
    pub const DEADLK_CANCEL_LOCK: Self = Self(13);
    /// `DLM_MSG_FENCE_RESULT`
    pub const FENCE_RESULT: Self = Self(14);
    /// `DLM_MSG_FENCE_CLEAR`
    pub const FENCE_CLEAR: Self = Self(15);
    /// `DLM_MSG_RUN_REQUEST`
    pub const RUN_REQUEST: Self = Self(16);
    /// `DLM_MSG_RUN_REPLY`
    pub const RUN_REPLY: Self = Self(17);
    /// `DLM_MSG_RUN_CANCEL` (helper pipe only; never multicast)
    pub const RUN_CANCEL: Self = Self(18);
    /// This project's batch of plock entries (docs/native-mode.md); no C daemon sends it.
    pub const NATIVE: Self = Self(64);

    /// The C constant's name.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "DLM_MSG_PROTOCOL",
            2 => "DLM_MSG_START",
            3 => "DLM_MSG_PLOCK",
            4 => "DLM_MSG_PLOCK_OWN",
            5 => "DLM_MSG_PLOCK_DROP",
            6 => "DLM_MSG_PLOCK_SYNC_LOCK",
            7 => "DLM_MSG_PLOCK_SYNC_WAITER",
            8 => "DLM_MSG_PLOCKS_DONE",
            9 => "DLM_MSG_PLOCKS_DATA",
            10 => "DLM_MSG_DEADLK_CYCLE_START",
            11 => "DLM_MSG_DEADLK_CYCLE_END",
            12 => "DLM_MSG_DEADLK_CHECKPOINT_READY",
            13 => "DLM_MSG_DEADLK_CANCEL_LOCK",
            14 => "DLM_MSG_FENCE_RESULT",
            15 => "DLM_MSG_FENCE_CLEAR",
            16 => "DLM_MSG_RUN_REQUEST",
            17 => "DLM_MSG_RUN_REPLY",
            18 => "DLM_MSG_RUN_CANCEL",
            64 => "NATIVE",
            _ => return None,
        })
    }
}

impl fmt::Debug for MsgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "MsgType({})", self.0),
        }
    }
}

/// `DLM_MFLG_*`; unknown bits are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderFlags(pub u32);

impl HeaderFlags {
    /// `DLM_MFLG_JOINING`: accompanies START, the sender is joining.
    pub const JOINING: u32 = 1;
    /// `DLM_MFLG_HAVEPLOCK`: accompanies START/PLOCKS_DONE, the sender has plock state.
    pub const HAVEPLOCK: u32 = 2;
    /// `DLM_MFLG_NACK`: accompanies START, the sender refuses this change.
    pub const NACK: u32 = 4;
    /// This project's extension, on START: the sender applies PLOCK messages with op
    /// CANCEL (kernel ≥ 6.6). C 4.x daemons neither send nor read it; a lockspace treats
    /// CANCEL as C does (unknown op) unless every member of the started change sent it.
    pub const CANCEL_AWARE: u32 = 0x100;
    /// This project's extension, on START, from its first native mode (before session
    /// 39): the sender ran native mode by rules that differ from [`Self::NATIVE2`]'s
    /// (docs/native-mode.md, "Versions"). No longer sent; a member that sends it is a
    /// daemon of ours from then, and a lockspace with it is C-compatible.
    pub const NATIVE: u32 = 0x200;
    /// This project's extension, on START: the sender answers a blocking LOCK that would
    /// close a cycle of waiting owners with -EDEADLK (`plock_deadlock_detect=1`); a started
    /// change detects deadlocks when every member sent it.
    pub const DEADLOCK_AWARE: u32 = 0x400;
    /// This project's extension, on START: the sender was told (`c_peers_apply_cancel=1`)
    /// that the C daemons it shares lockspaces with apply CANCEL (dlm ≥ 4.3.0). A lockspace
    /// with C members applies CANCEL when every member of ours sent it; the wire cannot
    /// tell a C 4.3.0 from a 4.2.0 (both speak daemon protocol 3.1.1).
    pub const C_PEERS_CANCEL: u32 = 0x800;
    /// This project's extension, on START with [`Self::NATIVE2`]: the sender answers a
    /// NATIVE SYNC (docs/native-mode.md, "What an operator sees"); a started change sends
    /// SYNC when every member sent it.
    pub const NATIVE_SYNC: u32 = 0x1000;
    /// This project's extension, on START: the sender runs native mode
    /// (docs/native-mode.md) by its current rules (a purge leaves a resource
    /// another node owns to its give-back; every item applies by the rules of its place
    /// in the total order; only a lock claims). A started change is native when every
    /// member sent it: a daemon of ours with the earlier rules sent [`Self::NATIVE`]
    /// instead, so a lockspace with it is C-compatible on every member, never native by
    /// two rule sets.
    pub const NATIVE2: u32 = 0x2000;

    /// Whether every bit of `bit` is set.
    pub fn has(self, bit: u32) -> bool {
        self.0 & bit == bit
    }
}

/// A decoded header. `pad` is not kept (the C daemon sends 0 and never reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DlmHeader {
    /// Protocol version: `daemon_run` for lockspace and RUN messages, 0.0.0 for
    /// PROTOCOL and FENCE_*.
    pub version: Version3,
    /// Message type.
    pub msg_type: MsgType,
    /// Sender nodeid.
    pub nodeid: u32,
    /// Recipient, 0 = all.
    pub to_nodeid: u32,
    /// Lockspace global id (0 on the daemon group).
    pub global_id: u32,
    /// `DLM_MFLG_*`.
    pub flags: HeaderFlags,
    /// START/PLOCKS_DATA/PLOCKS_DONE: the sender's change seq.
    pub msgdata: u32,
    /// PLOCKS_DONE: number of PLOCKS_DATA messages sent.
    pub msgdata2: u32,
}

impl DlmHeader {
    /// A header with everything but the version, type and sender zero.
    pub fn new(version: Version3, msg_type: MsgType, nodeid: u32) -> Self {
        Self {
            version,
            msg_type,
            nodeid,
            to_nodeid: 0,
            global_id: 0,
            flags: HeaderFlags(0),
            msgdata: 0,
            msgdata2: 0,
        }
    }

    /// Reads the header at the start of `bytes`; returns it and the payload.
    pub fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let (raw, rest) = RawDlmHeader::read_from_prefix(bytes).map_err(|_| WireError::Short {
            what: "dlm_header",
            need: HEADER_SIZE,
            got: bytes.len(),
        })?;
        Ok((Self::from(&raw), rest))
    }

    /// The 40 bytes of this header.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let raw = RawDlmHeader::from(self);
        let mut out = [0u8; HEADER_SIZE];
        out.copy_from_slice(raw.as_bytes());
        out
    }
}

impl From<&RawDlmHeader> for DlmHeader {
    fn from(raw: &RawDlmHeader) -> Self {
        Self {
            version: Version3([
                raw.version[0].get(),
                raw.version[1].get(),
                raw.version[2].get(),
            ]),
            msg_type: MsgType(raw.msg_type.get()),
            nodeid: raw.nodeid.get(),
            to_nodeid: raw.to_nodeid.get(),
            global_id: raw.global_id.get(),
            flags: HeaderFlags(raw.flags.get()),
            msgdata: raw.msgdata.get(),
            msgdata2: raw.msgdata2.get(),
        }
    }
}

impl From<&DlmHeader> for RawDlmHeader {
    fn from(h: &DlmHeader) -> Self {
        Self {
            version: h.version.0.map(U16::new),
            msg_type: U16::new(h.msg_type.0),
            nodeid: U32::new(h.nodeid),
            to_nodeid: U32::new(h.to_nodeid),
            global_id: U32::new(h.global_id),
            flags: U32::new(h.flags.0),
            msgdata: U32::new(h.msgdata),
            msgdata2: U32::new(h.msgdata2),
            pad: U64::new(0),
        }
    }
}
