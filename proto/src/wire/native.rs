//! NATIVE (64): this project's batch of plock entries, multicast only in a lockspace whose
//! members all run it (docs/native-mode.md). The header (`msgdata` = entry count), then
//! entries of 72 bytes: `kind`, `flags`, 6 zero bytes, and the 64 bytes of a PLOCK
//! message's `dlm_plock_info` (little-endian). C daemons never see one in a lockspace
//! they are started in.

use zerocopy::IntoBytes;

use super::plock::{RawPlockInfoLe, decode_plock_payload};
use super::{DlmHeader, HEADER_SIZE, MsgType, WireError};
use crate::kernel::PlockInfo;

/// Bytes of one entry.
pub const NATIVE_ENTRY_SIZE: usize = 72;
/// Entries one message may hold (18 KiB of entries).
pub const MAX_NATIVE_ENTRIES: usize = 256;

const PREFIX: usize = NATIVE_ENTRY_SIZE - crate::kernel::PLOCK_INFO_SIZE;
const KIND_REQUEST: u8 = 1;
const KIND_DECIDED: u8 = 2;
const KIND_RELEASE: u8 = 3;
const FLAG_CLAIM: u8 = 1;

/// What an entry asks of the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeKind {
    /// A request, applied as a PLOCK message; `claim`: the sender asks to own the resource.
    Request {
        /// The sender asks to decide the resource locally from now on.
        claim: bool,
    },
    /// A request its sender, the resource's owner, has already applied and answered.
    Decided,
    /// The owner gives resource `info.number` back.
    Release,
}

/// One entry of a NATIVE message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeEntry {
    /// What to do with it.
    pub kind: NativeKind,
    /// The request (for `Release`, only `number` and `nodeid` mean anything).
    pub info: PlockInfo,
}

impl NativeEntry {
    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let (kind, flags) = (bytes[0], bytes[1]);
        if bytes[2..PREFIX].iter().any(|&b| b != 0) {
            return Err(WireError::field("native pad", 1u8, "must be zero"));
        }
        let kind = match (kind, flags) {
            (KIND_REQUEST, f) if f & !FLAG_CLAIM == 0 => NativeKind::Request {
                claim: f & FLAG_CLAIM != 0,
            },
            (KIND_DECIDED, 0) => NativeKind::Decided,
            (KIND_RELEASE, 0) => NativeKind::Release,
            (KIND_REQUEST | KIND_DECIDED | KIND_RELEASE, f) => {
                return Err(WireError::field("native flags", f, "unknown flag"));
            }
            (k, _) => return Err(WireError::field("native kind", k, "not 1, 2 or 3")),
        };
        Ok(Self {
            kind,
            info: decode_plock_payload(&bytes[PREFIX..])?,
        })
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        let (kind, flags) = match self.kind {
            NativeKind::Request { claim } => (KIND_REQUEST, if claim { FLAG_CLAIM } else { 0 }),
            NativeKind::Decided => (KIND_DECIDED, 0),
            NativeKind::Release => (KIND_RELEASE, 0),
        };
        out.extend_from_slice(&[kind, flags, 0, 0, 0, 0, 0, 0]);
        out.extend_from_slice(RawPlockInfoLe::from(&self.info).as_bytes());
    }
}

/// A decoded NATIVE message: every entry was checked at decode, the entries are read from
/// the delivered bytes (nothing allocated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeBatch<'a> {
    bytes: &'a [u8],
}

impl<'a> NativeBatch<'a> {
    /// Checks the payload of a NATIVE message whose header says `count` entries.
    pub fn decode(count: u32, payload: &'a [u8]) -> Result<Self, WireError> {
        let n = usize::try_from(count).unwrap_or(usize::MAX);
        if n == 0 || n > MAX_NATIVE_ENTRIES {
            return Err(WireError::field(
                "msgdata",
                count,
                "native entry count must be 1..=256",
            ));
        }
        if payload.len() != n * NATIVE_ENTRY_SIZE {
            return Err(WireError::Length {
                what: "native entries",
                expected: n * NATIVE_ENTRY_SIZE,
                got: payload.len(),
            });
        }
        for e in payload.chunks_exact(NATIVE_ENTRY_SIZE) {
            NativeEntry::decode(e)?;
        }
        Ok(Self { bytes: payload })
    }

    /// The entries, in order.
    pub fn entries(&self) -> impl Iterator<Item = NativeEntry> + 'a {
        self.bytes
            .chunks_exact(NATIVE_ENTRY_SIZE)
            .filter_map(|e| NativeEntry::decode(e).ok())
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.bytes.len() / NATIVE_ENTRY_SIZE
    }

    /// Never true for a decoded batch (a batch has at least one entry).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Builds NATIVE messages: one buffer reused (its capacity stays), the header written at
/// [`Self::finish`].
#[derive(Debug, Clone)]
pub struct NativeWriter {
    header: DlmHeader,
    buf: Vec<u8>,
}

impl NativeWriter {
    /// A writer for messages with this header (type and `msgdata` are set here).
    pub fn new(header: DlmHeader) -> Self {
        let mut buf = Vec::with_capacity(HEADER_SIZE + MAX_NATIVE_ENTRIES * NATIVE_ENTRY_SIZE);
        buf.resize(HEADER_SIZE, 0);
        Self {
            header: DlmHeader {
                msg_type: MsgType::NATIVE,
                ..header
            },
            buf,
        }
    }

    /// Entries written since the last [`Self::finish`].
    pub fn len(&self) -> usize {
        (self.buf.len() - HEADER_SIZE) / NATIVE_ENTRY_SIZE
    }

    /// No entry since the last [`Self::finish`].
    pub fn is_empty(&self) -> bool {
        self.buf.len() == HEADER_SIZE
    }

    /// The message is full ([`MAX_NATIVE_ENTRIES`]).
    pub fn is_full(&self) -> bool {
        self.len() >= MAX_NATIVE_ENTRIES
    }

    /// Appends an entry; a full writer must be finished first (the entry is refused).
    pub fn push(&mut self, entry: &NativeEntry) -> bool {
        if self.is_full() {
            return false;
        }
        entry.encode_into(&mut self.buf);
        true
    }

    /// The message of the entries written (None when there are none); the writer is empty
    /// again.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        if self.is_empty() {
            return None;
        }
        let count = u32::try_from(self.len()).unwrap_or(u32::MAX);
        let header = DlmHeader {
            msgdata: count,
            ..self.header
        };
        self.buf[..HEADER_SIZE].copy_from_slice(&header.encode());
        let bytes = self.buf.clone();
        self.buf.truncate(HEADER_SIZE);
        Some(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{PlockFlags, PlockOp, PlockVersion};
    use crate::wire::{Body, Message, Version3};

    fn info(op: PlockOp, number: u64) -> PlockInfo {
        PlockInfo {
            version: PlockVersion([1, 2, 0]),
            op,
            ex: true,
            wait: false,
            flags: PlockFlags(0),
            pid: 77,
            nodeid: 2,
            rv: 0,
            fsid: 0x1234,
            number,
            start: 10,
            end: 20,
            owner: 0xabc,
        }
    }

    fn writer() -> NativeWriter {
        NativeWriter::new(DlmHeader {
            global_id: 0x1234,
            ..DlmHeader::new(Version3([3, 1, 1]), MsgType::PLOCK, 2)
        })
    }

    #[test]
    fn entries_round_trip_in_order() {
        let mut w = writer();
        let e = [
            NativeEntry {
                kind: NativeKind::Request { claim: true },
                info: info(PlockOp::LOCK, 5),
            },
            NativeEntry {
                kind: NativeKind::Decided,
                info: info(PlockOp::UNLOCK, 6),
            },
            NativeEntry {
                kind: NativeKind::Release,
                info: info(PlockOp::UNLOCK, 7),
            },
        ];
        for x in &e {
            assert!(w.push(x));
        }
        let bytes = w.finish().expect("three entries");
        assert!(w.is_empty() && w.finish().is_none());
        assert_eq!(bytes.len(), HEADER_SIZE + 3 * NATIVE_ENTRY_SIZE);
        let m = Message::decode(&bytes).expect("decodes");
        assert_eq!(m.header.msg_type, MsgType::NATIVE);
        assert_eq!(m.header.msgdata, 3);
        let Body::Native(b) = m.body else {
            panic!("not native: {:?}", m.body)
        };
        assert_eq!(b.entries().collect::<Vec<_>>(), e);
        // golden: the prefix of the first entry, then the first info's version field
        assert_eq!(&bytes[40..48], &[1, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[48..52], &1u32.to_le_bytes());
        assert_eq!(&bytes[40 + 72..40 + 80], &[2, 0, 0, 0, 0, 0, 0, 0]);
        // the encoded message equals what Message::encode makes of it
        assert_eq!(m.encode().expect("encodes"), bytes);
    }

    #[test]
    fn bad_batches_are_refused_with_the_check() {
        let mut w = writer();
        w.push(&NativeEntry {
            kind: NativeKind::Decided,
            info: info(PlockOp::LOCK, 1),
        });
        let good = w.finish().expect("one");
        let mut count = good.clone();
        count[24..28].copy_from_slice(&2u32.to_le_bytes()); // msgdata
        assert!(matches!(
            Message::decode(&count),
            Err(WireError::Length { .. })
        ));
        let mut kind = good.clone();
        kind[40] = 9;
        assert!(matches!(
            Message::decode(&kind),
            Err(WireError::Field {
                field: "native kind",
                ..
            })
        ));
        let mut flag = good.clone();
        flag[41] = 1; // claim on a decided entry
        assert!(Message::decode(&flag).is_err());
        let mut pad = good.clone();
        pad[45] = 1;
        assert!(Message::decode(&pad).is_err());
        let mut range = good;
        range[40 + 8 + 40..40 + 8 + 48].copy_from_slice(&u64::MAX.to_le_bytes()); // start > end
        assert!(matches!(Message::decode(&range), Err(WireError::Plock(_))));
        let empty = writer().header.encode();
        assert!(Message::decode(&empty).is_err());
    }

    #[test]
    fn a_full_writer_refuses_more() {
        let mut w = writer();
        let e = NativeEntry {
            kind: NativeKind::Decided,
            info: info(PlockOp::LOCK, 1),
        };
        for _ in 0..MAX_NATIVE_ENTRIES {
            assert!(w.push(&e));
        }
        assert!(w.is_full() && !w.push(&e));
        let bytes = w.finish().expect("full");
        let Ok(Message {
            body: Body::Native(b),
            ..
        }) = Message::decode(&bytes)
        else {
            panic!("decodes")
        };
        assert_eq!(b.len(), MAX_NATIVE_ENTRIES);
    }
}
