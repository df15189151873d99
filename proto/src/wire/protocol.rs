//! PROTOCOL (type 1): `struct protocol`, four `{major, minor, patch, flags}` of u16
//! (daemon_cpg.c). The header carries version 0.0.0.

use zerocopy::little_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::{DlmHeader, HEADER_SIZE, MsgType, Version3, WireError};

/// Whole PROTOCOL message: header + 32 bytes.
pub const PROTOCOL_MSG_SIZE: usize = HEADER_SIZE + 32;

/// The C layout of `struct protocol`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RawProtocol {
    /// `daemon_max[4]`
    pub daemon_max: [U16; 4],
    /// `kernel_max[4]`
    pub kernel_max: [U16; 4],
    /// `daemon_run[4]`
    pub daemon_run: [U16; 4],
    /// `kernel_run[4]`
    pub kernel_run: [U16; 4],
}

const _: () = assert!(size_of::<RawProtocol>() == 32);

/// `struct protocol_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ProtocolVersion {
    /// major.minor.patch
    pub version: Version3,
    /// Flags word: bit 0 `PV_STATEFUL` in `daemon_run`.
    pub flags: u16,
}

impl ProtocolVersion {
    /// `PV_STATEFUL`: the sender has started a lockspace since it joined.
    pub const STATEFUL: u16 = 1;

    fn from_raw(raw: &[U16; 4]) -> Self {
        Self {
            version: Version3([raw[0].get(), raw[1].get(), raw[2].get()]),
            flags: raw[3].get(),
        }
    }

    fn to_raw(self) -> [U16; 4] {
        let v = self.version.0;
        [
            U16::new(v[0]),
            U16::new(v[1]),
            U16::new(v[2]),
            U16::new(self.flags),
        ]
    }
}

/// A validated PROTOCOL body, with the checks of `receive_protocol()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Protocol {
    /// Highest daemon protocol the sender speaks.
    pub daemon_max: ProtocolVersion,
    /// Highest kernel protocol.
    pub kernel_max: ProtocolVersion,
    /// Negotiated daemon protocol (zero until negotiated).
    pub daemon_run: ProtocolVersion,
    /// Negotiated kernel protocol (zero until negotiated).
    pub kernel_run: ProtocolVersion,
}

impl Protocol {
    /// Decodes the payload after the header.
    pub fn decode(payload: &[u8]) -> Result<Self, WireError> {
        let (raw, _) = RawProtocol::read_from_prefix(payload).map_err(|_| WireError::Short {
            what: "PROTOCOL",
            need: PROTOCOL_MSG_SIZE,
            got: HEADER_SIZE + payload.len(),
        })?;
        let p = Self {
            daemon_max: ProtocolVersion::from_raw(&raw.daemon_max),
            kernel_max: ProtocolVersion::from_raw(&raw.kernel_max),
            daemon_run: ProtocolVersion::from_raw(&raw.daemon_run),
            kernel_run: ProtocolVersion::from_raw(&raw.kernel_run),
        };
        // zero is an invalid max version value
        for (field, v) in [("daemon_max", p.daemon_max), ("kernel_max", p.kernel_max)] {
            if v.version.0.contains(&0) {
                return Err(WireError::field(field, 0u16, "a max version part is zero"));
            }
        }
        // run values are all zero until negotiated, then none is zero
        let dr = p.daemon_run.version.0;
        let kr = p.kernel_run.version.0;
        if dr[0] != 0 && (dr[1] == 0 || dr[2] == 0 || kr.contains(&0)) {
            return Err(WireError::field(
                "daemon_run",
                dr[0],
                "a run version part is zero",
            ));
        }
        Ok(p)
    }

    /// The whole 72-byte message from `nodeid` (header version 0.0.0, as C builds it).
    pub fn encode(&self, nodeid: u32) -> [u8; PROTOCOL_MSG_SIZE] {
        let header = DlmHeader::new(Version3::default(), MsgType::PROTOCOL, nodeid);
        let raw = RawProtocol {
            daemon_max: self.daemon_max.to_raw(),
            kernel_max: self.kernel_max.to_raw(),
            daemon_run: self.daemon_run.to_raw(),
            kernel_run: self.kernel_run.to_raw(),
        };
        let mut out = [0u8; PROTOCOL_MSG_SIZE];
        out[..HEADER_SIZE].copy_from_slice(&header.encode());
        out[HEADER_SIZE..].copy_from_slice(raw.as_bytes());
        out
    }
}
