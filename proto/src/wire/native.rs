//! NATIVE (64): this project's batch of plock entries, multicast only in a lockspace whose
//! members all run it (docs/native-mode.md). The header (`msgdata` = entry count), then
//! entries of 72 bytes: `kind`, `flags`, `count` (u16, little-endian; STATE only), 4 zero
//! bytes, and the 64 bytes of a PLOCK message's `dlm_plock_info` (little-endian). A STATE
//! entry is followed in the same message by exactly `count` HELD entries of its resource.
//! SYNC and SYNCED (kinds 6 and 7) are sent only where every member's START has
//! `HeaderFlags::NATIVE_SYNC`.
//! C daemons never see one in a lockspace they are started in.

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
const KIND_RELEASE: u8 = 3;
const KIND_STATE: u8 = 4;
const KIND_HELD: u8 = 5;
const KIND_SYNC: u8 = 6;
const KIND_SYNCED: u8 = 7;
const FLAG_CLAIM: u8 = 1;
const FLAG_CANDIDATE: u8 = 2;
/// HELD entries one STATE may announce (a state fits in one message).
pub const MAX_STATE_HELD: usize = MAX_NATIVE_ENTRIES - 1;

/// What an entry asks of the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeKind {
    /// A request, applied as a PLOCK message; `claim`: the sender asks to own the resource.
    Request {
        /// The sender asks to decide the resource locally from now on.
        claim: bool,
    },
    /// The owner gives resource `info.number` back.
    Release,
    /// The owner's resource `info.number` holds exactly the `held` HELD entries that follow.
    State {
        /// HELD entries that follow.
        held: u16,
    },
    /// One lock (`info.wait` 0) or waiter (`wait` 1) of the STATE before it.
    Held {
        /// A waiter to examine at the resource's next waiter pass.
        candidate: bool,
    },
    /// The sender (`info.nodeid`) asks every owner for the state of what it decided:
    /// request `info.number` (a dump that shows every owner's locks).
    Sync,
    /// The sender (`info.nodeid`) has sent the STATEs of what it decided, before this:
    /// the answer to request `info.number` of node `info.owner`.
    Synced,
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
        let count = u16::from_le_bytes([bytes[2], bytes[3]]);
        if bytes[4..PREFIX].iter().any(|&b| b != 0) {
            return Err(WireError::field("native pad", 1u8, "must be zero"));
        }
        if count != 0 && kind != KIND_STATE {
            return Err(WireError::field("native count", count, "only on STATE"));
        }
        let kind = match (kind, flags) {
            (KIND_REQUEST, f) if f & !FLAG_CLAIM == 0 => NativeKind::Request {
                claim: f & FLAG_CLAIM != 0,
            },
            (KIND_RELEASE, 0) => NativeKind::Release,
            (KIND_STATE, 0) if usize::from(count) <= MAX_STATE_HELD => {
                NativeKind::State { held: count }
            }
            (KIND_STATE, 0) => {
                return Err(WireError::field("native count", count, "more than 255"));
            }
            (KIND_HELD, f) if f & !FLAG_CANDIDATE == 0 => NativeKind::Held {
                candidate: f & FLAG_CANDIDATE != 0,
            },
            (KIND_SYNC, 0) => NativeKind::Sync,
            (KIND_SYNCED, 0) => NativeKind::Synced,
            (KIND_REQUEST | KIND_RELEASE | KIND_STATE | KIND_HELD | KIND_SYNC | KIND_SYNCED, f) => {
                return Err(WireError::field("native flags", f, "unknown flag"));
            }
            (k, _) => return Err(WireError::field("native kind", k, "not 1, 3, 4, 5, 6 or 7")),
        };
        Ok(Self {
            kind,
            info: decode_plock_payload(&bytes[PREFIX..])?,
        })
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        let (kind, flags, count) = match self.kind {
            NativeKind::Request { claim } => (KIND_REQUEST, u8::from(claim) * FLAG_CLAIM, 0),
            NativeKind::Release => (KIND_RELEASE, 0, 0),
            NativeKind::State { held } => (KIND_STATE, 0, held),
            NativeKind::Held { candidate } => (KIND_HELD, u8::from(candidate) * FLAG_CANDIDATE, 0),
            NativeKind::Sync => (KIND_SYNC, 0, 0),
            NativeKind::Synced => (KIND_SYNCED, 0, 0),
        };
        let [c0, c1] = count.to_le_bytes();
        out.extend_from_slice(&[kind, flags, c0, c1, 0, 0, 0, 0]);
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
        // every STATE is followed by exactly its HELD entries, of its resource
        let mut held_left = 0u16;
        let mut number = 0u64;
        for e in payload.chunks_exact(NATIVE_ENTRY_SIZE) {
            let e = NativeEntry::decode(e)?;
            match e.kind {
                NativeKind::Held { .. } if held_left > 0 && e.info.number == number => {
                    held_left -= 1;
                }
                NativeKind::Held { .. } => {
                    return Err(WireError::field(
                        "native HELD",
                        e.info.number,
                        "not after its STATE",
                    ));
                }
                _ if held_left > 0 => {
                    return Err(WireError::field(
                        "native STATE",
                        held_left,
                        "HELD entries missing",
                    ));
                }
                NativeKind::State { held } => {
                    held_left = held;
                    number = e.info.number;
                }
                _ => {}
            }
        }
        if held_left > 0 {
            return Err(WireError::field(
                "native STATE",
                held_left,
                "HELD entries missing",
            ));
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
    /// Entries a message holds at most.
    max: usize,
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
            max: MAX_NATIVE_ENTRIES,
        }
    }

    /// Messages hold at most `max` entries from now on (1 to [`MAX_NATIVE_ENTRIES`]; the
    /// default is the most): tests make them small to reach the bounds with a few entries.
    pub fn set_max(&mut self, max: usize) {
        self.max = max.clamp(1, MAX_NATIVE_ENTRIES);
    }

    /// Entries a message holds at most.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Entries written since the last [`Self::finish`].
    pub fn len(&self) -> usize {
        (self.buf.len() - HEADER_SIZE) / NATIVE_ENTRY_SIZE
    }

    /// The entries written since the last [`Self::finish`], encoded.
    pub fn pending(&self) -> &[u8] {
        &self.buf[HEADER_SIZE..]
    }

    /// No entry since the last [`Self::finish`].
    pub fn is_empty(&self) -> bool {
        self.buf.len() == HEADER_SIZE
    }

    /// The message is full ([`Self::max`] entries).
    pub fn is_full(&self) -> bool {
        self.len() >= self.max
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
                kind: NativeKind::State { held: 1 },
                info: info(PlockOp::UNLOCK, 6),
            },
            NativeEntry {
                kind: NativeKind::Held { candidate: true },
                info: info(PlockOp::LOCK, 6),
            },
            NativeEntry {
                kind: NativeKind::Release,
                info: info(PlockOp::UNLOCK, 7),
            },
            NativeEntry {
                kind: NativeKind::Sync,
                info: info(PlockOp::UNLOCK, 41),
            },
            NativeEntry {
                kind: NativeKind::Synced,
                info: info(PlockOp::UNLOCK, 41),
            },
        ];
        for x in &e {
            assert!(w.push(x));
        }
        let bytes = w.finish().expect("six entries");
        assert!(w.is_empty() && w.finish().is_none());
        assert_eq!(bytes.len(), HEADER_SIZE + 6 * NATIVE_ENTRY_SIZE);
        let m = Message::decode(&bytes).expect("decodes");
        assert_eq!(m.header.msg_type, MsgType::NATIVE);
        assert_eq!(m.header.msgdata, 6);
        let Body::Native(b) = m.body else {
            panic!("not native: {:?}", m.body)
        };
        assert_eq!(b.entries().collect::<Vec<_>>(), e);
        // golden: the prefix of the first entry, then the first info's version field
        assert_eq!(&bytes[40..48], &[1, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[48..52], &1u32.to_le_bytes());
        assert_eq!(&bytes[40 + 72..40 + 80], &[4, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[40 + 144..40 + 152], &[5, 2, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[40 + 288..40 + 296], &[6, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[40 + 360..40 + 368], &[7, 0, 0, 0, 0, 0, 0, 0]);
        // the encoded message equals what Message::encode makes of it
        assert_eq!(m.encode().expect("encodes"), bytes);
    }

    #[test]
    fn bad_batches_are_refused_with_the_check() {
        let mut w = writer();
        w.push(&NativeEntry {
            kind: NativeKind::Release,
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
        flag[41] = 1; // claim on a RELEASE
        assert!(Message::decode(&flag).is_err());
        let mut count = good.clone();
        count[42] = 1; // a count on a RELEASE
        assert!(Message::decode(&count).is_err());
        for k in [6, 7] {
            let mut sync = good.clone();
            sync[40] = k;
            assert!(Message::decode(&sync).is_ok(), "SYNC, SYNCED");
            sync[41] = 2; // no flag on either
            assert!(Message::decode(&sync).is_err());
        }
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
    fn a_state_comes_with_exactly_its_held_entries() {
        let state = |held| NativeEntry {
            kind: NativeKind::State { held },
            info: info(PlockOp::LOCK, 3),
        };
        let held = |number| NativeEntry {
            kind: NativeKind::Held { candidate: false },
            info: info(PlockOp::LOCK, number),
        };
        let batch = |entries: &[NativeEntry]| {
            let mut w = writer();
            for e in entries {
                w.push(e);
            }
            Message::decode(&w.finish().expect("entries")).map(|_| ())
        };
        assert!(batch(&[state(2), held(3), held(3)]).is_ok());
        assert!(batch(&[state(0)]).is_ok(), "an empty resource");
        assert!(batch(&[state(2), held(3)]).is_err(), "one missing");
        assert!(batch(&[held(3)]).is_err(), "no STATE");
        assert!(batch(&[state(1), held(4)]).is_err(), "another resource");
        assert!(batch(&[state(1), state(0)]).is_err(), "a STATE in a STATE");
    }

    #[test]
    fn a_full_writer_refuses_more() {
        let mut w = writer();
        let e = NativeEntry {
            kind: NativeKind::Request { claim: false },
            info: info(PlockOp::LOCK, 1),
        };
        for _ in 0..MAX_NATIVE_ENTRIES {
            assert!(w.push(&e));
        }
        assert!(w.is_full() && !w.push(&e));
        let bytes = w.finish().expect("full");
        w.set_max(3);
        for _ in 0..3 {
            assert!(w.push(&e));
        }
        assert!(w.is_full() && !w.push(&e) && w.max() == 3);
        assert_eq!(
            w.finish().map(|b| b.len()),
            Some(HEADER_SIZE + 3 * NATIVE_ENTRY_SIZE)
        );
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
