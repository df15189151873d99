//! PLOCKS_DATA (9): header + `struct resource_data` (24) + k × `struct plock_data` (40),
//! k ≤ 24, at most 1024 bytes (plock.c `pack_send_buf`, `receive_plocks_data`).
//!
//! Decoding borrows the entries (no allocation per message: a state transfer of 10⁶ locks
//! is ~42,000 of these); [`PlocksDataWriter`] fills a fixed 1024-byte buffer.

use zerocopy::little_endian::{I32, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::{DlmHeader, HEADER_SIZE, WireError};

/// Largest PLOCKS_DATA message the C daemon builds or accepts.
pub const MAX_PLOCKS_DATA_SIZE: usize = 1024;
/// Entries that fit: (1024 − 40 − 24) / 40.
pub const MAX_PLOCKS_DATA_ENTRIES: usize = 24;
/// `RD_CONTINUE`: this message continues the previous resource.
pub const RD_CONTINUE: u32 = 1;

const RESOURCE_SIZE: usize = 24;
const ENTRY_SIZE: usize = 40;

/// The C layout of `struct resource_data`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RawResourceData {
    /// `number`
    pub number: U64,
    /// `owner`
    pub owner: I32,
    /// `lock_count`: entries in this message
    pub lock_count: U32,
    /// `flags` (`RD_CONTINUE`)
    pub flags: U32,
    /// `pad`
    pub pad: U32,
}

/// The C layout of `struct plock_data`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RawPlockData {
    /// `start`
    pub start: U64,
    /// `end`
    pub end: U64,
    /// `owner`
    pub owner: U64,
    /// `pid`
    pub pid: U32,
    /// `nodeid`
    pub nodeid: U32,
    /// `ex`
    pub ex: u8,
    /// `waiter`
    pub waiter: u8,
    /// `pad1`
    pub pad1: [u8; 2],
    /// `pad`
    pub pad: U32,
}

const _: () = assert!(size_of::<RawResourceData>() == RESOURCE_SIZE);
const _: () = assert!(size_of::<RawPlockData>() == ENTRY_SIZE);
const _: () = assert!(
    HEADER_SIZE + RESOURCE_SIZE + MAX_PLOCKS_DATA_ENTRIES * ENTRY_SIZE <= MAX_PLOCKS_DATA_SIZE
);

/// The resource part of one PLOCKS_DATA message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResourceData {
    /// Resource (inode) number.
    pub number: u64,
    /// Owner: 0 in default mode.
    pub owner: i32,
    /// `RD_CONTINUE` or 0.
    pub flags: u32,
}

/// One granted lock or waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlockData {
    /// First byte.
    pub start: u64,
    /// Last byte.
    pub end: u64,
    /// Lock owner.
    pub owner: u64,
    /// Pid (informational).
    pub pid: u32,
    /// Node holding or waiting.
    pub nodeid: u32,
    /// Write lock.
    pub ex: bool,
    /// A waiter rather than a granted lock.
    pub waiter: bool,
}

impl PlockData {
    fn validate(raw: &RawPlockData) -> Result<(), WireError> {
        let (start, end) = (raw.start.get(), raw.end.get());
        if start > end {
            return Err(WireError::field("plock_data.start", start, "after end"));
        }
        if raw.ex > 1 {
            return Err(WireError::field("plock_data.ex", raw.ex, "not 0 or 1"));
        }
        if raw.waiter > 1 {
            return Err(WireError::field(
                "plock_data.waiter",
                raw.waiter,
                "not 0 or 1",
            ));
        }
        Ok(())
    }

    /// Reads an entry that [`PlockData::validate`] accepted.
    fn from_raw(raw: &RawPlockData) -> Self {
        Self {
            start: raw.start.get(),
            end: raw.end.get(),
            owner: raw.owner.get(),
            pid: raw.pid.get(),
            nodeid: raw.nodeid.get(),
            ex: raw.ex != 0,
            waiter: raw.waiter != 0,
        }
    }

    fn to_raw(self) -> RawPlockData {
        RawPlockData {
            start: U64::new(self.start),
            end: U64::new(self.end),
            owner: U64::new(self.owner),
            pid: U32::new(self.pid),
            nodeid: U32::new(self.nodeid),
            ex: u8::from(self.ex),
            waiter: u8::from(self.waiter),
            pad1: [0; 2],
            pad: U32::new(0),
        }
    }
}

/// A decoded PLOCKS_DATA body. Entries were all validated by [`PlocksData::decode`].
/// Equality is by meaning: the resource and the entries, not the entries' padding bytes
/// (C sends zeros there; they carry no meaning).
#[derive(Debug, Clone)]
pub struct PlocksData<'a> {
    /// The resource.
    pub resource: ResourceData,
    entries: &'a [RawPlockData],
}

impl PartialEq for PlocksData<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.resource == other.resource && self.entries().eq(other.entries())
    }
}

impl Eq for PlocksData<'_> {}

impl<'a> PlocksData<'a> {
    /// Decodes the payload after the header: `lock_count` must match the length exactly.
    pub fn decode(payload: &'a [u8]) -> Result<Self, WireError> {
        let got = HEADER_SIZE + payload.len();
        if got > MAX_PLOCKS_DATA_SIZE {
            return Err(WireError::field(
                "PLOCKS_DATA length",
                got as u64,
                "over 1024 bytes",
            ));
        }
        let (raw, rest) =
            RawResourceData::ref_from_prefix(payload).map_err(|_| WireError::Short {
                what: "resource_data",
                need: HEADER_SIZE + RESOURCE_SIZE,
                got,
            })?;
        let count = raw.lock_count.get();
        if count as usize > MAX_PLOCKS_DATA_ENTRIES {
            return Err(WireError::field(
                "lock_count",
                count,
                "more than 24 entries",
            ));
        }
        let expected = HEADER_SIZE + RESOURCE_SIZE + ENTRY_SIZE * count as usize;
        if got != expected {
            return Err(WireError::Length {
                what: "PLOCKS_DATA for its lock_count",
                expected,
                got,
            });
        }
        let entries = <[RawPlockData]>::ref_from_bytes(rest).map_err(|_| WireError::Length {
            what: "plock_data array",
            expected,
            got,
        })?;
        for e in entries {
            PlockData::validate(e)?;
        }
        Ok(Self {
            resource: ResourceData {
                number: raw.number.get(),
                owner: raw.owner.get(),
                flags: raw.flags.get(),
            },
            entries,
        })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No entries (an empty resource still gets a message).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in message order (locks before waiters, as sent).
    pub fn entries(&self) -> impl ExactSizeIterator<Item = PlockData> + 'a {
        self.entries.iter().map(PlockData::from_raw)
    }
}

/// Builds one PLOCKS_DATA message in a fixed buffer.
#[derive(Debug, Clone)]
pub struct PlocksDataWriter {
    buf: [u8; MAX_PLOCKS_DATA_SIZE],
    count: usize,
}

impl PlocksDataWriter {
    /// Starts a message for `resource` with this header (type PLOCKS_DATA).
    pub fn new(header: &DlmHeader, resource: ResourceData) -> Self {
        let mut buf = [0u8; MAX_PLOCKS_DATA_SIZE];
        buf[..HEADER_SIZE].copy_from_slice(&header.encode());
        let raw = RawResourceData {
            number: U64::new(resource.number),
            owner: I32::new(resource.owner),
            lock_count: U32::new(0),
            flags: U32::new(resource.flags),
            pad: U32::new(0),
        };
        buf[HEADER_SIZE..HEADER_SIZE + RESOURCE_SIZE].copy_from_slice(raw.as_bytes());
        Self { buf, count: 0 }
    }

    /// Whether another entry fits.
    pub fn is_full(&self) -> bool {
        self.count == MAX_PLOCKS_DATA_ENTRIES
    }

    /// Appends an entry; returns `false` (and changes nothing) when the message is full.
    pub fn push(&mut self, entry: PlockData) -> bool {
        if self.is_full() {
            return false;
        }
        let at = HEADER_SIZE + RESOURCE_SIZE + self.count * ENTRY_SIZE;
        self.buf[at..at + ENTRY_SIZE].copy_from_slice(entry.to_raw().as_bytes());
        self.count += 1;
        let count = u32::try_from(self.count).unwrap_or(u32::MAX);
        // lock_count lives at offset 12 of resource_data
        let lc = HEADER_SIZE + 12;
        self.buf[lc..lc + 4].copy_from_slice(&count.to_le_bytes());
        true
    }

    /// The entries so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no entry was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The message bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..HEADER_SIZE + RESOURCE_SIZE + self.count * ENTRY_SIZE]
    }
}
