//! One decoded CPG message: the header and a typed body.

use super::plock::decode_plock_payload;
use super::{
    Change, DlmHeader, FenceResult, MsgType, NativeBatch, PlocksData, Protocol, RunReply,
    RunRequest, WireError,
};
use crate::kernel::PlockInfo;

/// The body of a message, by type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body<'a> {
    /// `DLM_MSG_PROTOCOL`
    Protocol(Protocol),
    /// `DLM_MSG_START`
    Start(Change),
    /// `DLM_MSG_PLOCK`
    Plock(PlockInfo),
    /// `DLM_MSG_PLOCK_OWN` (ownership mode)
    PlockOwn(PlockInfo),
    /// `DLM_MSG_PLOCK_DROP` (ownership mode)
    PlockDrop(PlockInfo),
    /// `DLM_MSG_PLOCK_SYNC_LOCK` (ownership mode)
    PlockSyncLock(PlockInfo),
    /// `DLM_MSG_PLOCK_SYNC_WAITER` (ownership mode)
    PlockSyncWaiter(PlockInfo),
    /// `DLM_MSG_PLOCKS_DONE`
    PlocksDone(Change),
    /// `DLM_MSG_PLOCKS_DATA`
    PlocksData(PlocksData<'a>),
    /// `DLM_MSG_FENCE_RESULT`
    FenceResult(FenceResult),
    /// `DLM_MSG_FENCE_CLEAR`
    FenceClear(FenceResult),
    /// `DLM_MSG_RUN_REQUEST`
    RunRequest(RunRequest<'a>),
    /// `DLM_MSG_RUN_REPLY`
    RunReply(RunReply<'a>),
    /// This project's NATIVE batch.
    Native(NativeBatch<'a>),
}

/// A CPG message as delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<'a> {
    /// The header (version not yet checked against the negotiated protocol).
    pub header: DlmHeader,
    /// The typed body.
    pub body: Body<'a>,
}

impl<'a> Message<'a> {
    /// Decodes one delivered CPG payload.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, WireError> {
        let (header, payload) = DlmHeader::decode(bytes)?;
        let body = match header.msg_type {
            MsgType::PROTOCOL => Body::Protocol(Protocol::decode(payload)?),
            MsgType::START => Body::Start(Change::decode(payload)?),
            MsgType::PLOCK => Body::Plock(decode_plock_payload(payload)?),
            MsgType::PLOCK_OWN => Body::PlockOwn(decode_plock_payload(payload)?),
            MsgType::PLOCK_DROP => Body::PlockDrop(decode_plock_payload(payload)?),
            MsgType::PLOCK_SYNC_LOCK => Body::PlockSyncLock(decode_plock_payload(payload)?),
            MsgType::PLOCK_SYNC_WAITER => Body::PlockSyncWaiter(decode_plock_payload(payload)?),
            MsgType::PLOCKS_DONE => Body::PlocksDone(Change::decode(payload)?),
            MsgType::PLOCKS_DATA => Body::PlocksData(PlocksData::decode(payload)?),
            MsgType::FENCE_RESULT => Body::FenceResult(FenceResult::decode(payload)?),
            MsgType::FENCE_CLEAR => Body::FenceClear(FenceResult::decode(payload)?),
            MsgType::RUN_REQUEST => Body::RunRequest(RunRequest::decode(payload)?),
            MsgType::RUN_REPLY => Body::RunReply(RunReply::decode(payload)?),
            MsgType::NATIVE => Body::Native(NativeBatch::decode(header.msgdata, payload)?),
            t if t.name().is_some() => return Err(WireError::NotOnCpg(t)),
            t => return Err(WireError::UnknownType(t.0)),
        };
        Ok(Self { header, body })
    }

    /// Encodes the message. The header's type must match the body (it is overwritten
    /// to match; PROTOCOL and FENCE_* take only the sender from it, as C builds them).
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let mut h = self.header;
        let with = |h: &mut DlmHeader, t: MsgType| {
            h.msg_type = t;
            *h
        };
        Ok(match &self.body {
            Body::Protocol(p) => p.encode(h.nodeid).to_vec(),
            Body::Start(c) => c.encode(&with(&mut h, MsgType::START)),
            Body::PlocksDone(c) => c.encode(&with(&mut h, MsgType::PLOCKS_DONE)),
            Body::Plock(p) => super::encode_plock_msg(&with(&mut h, MsgType::PLOCK), p).to_vec(),
            Body::PlockOwn(p) => {
                super::encode_plock_msg(&with(&mut h, MsgType::PLOCK_OWN), p).to_vec()
            }
            Body::PlockDrop(p) => {
                super::encode_plock_msg(&with(&mut h, MsgType::PLOCK_DROP), p).to_vec()
            }
            Body::PlockSyncLock(p) => {
                super::encode_plock_msg(&with(&mut h, MsgType::PLOCK_SYNC_LOCK), p).to_vec()
            }
            Body::PlockSyncWaiter(p) => {
                super::encode_plock_msg(&with(&mut h, MsgType::PLOCK_SYNC_WAITER), p).to_vec()
            }
            Body::PlocksData(d) => {
                let mut w =
                    super::PlocksDataWriter::new(&with(&mut h, MsgType::PLOCKS_DATA), d.resource);
                for e in d.entries() {
                    w.push(e);
                }
                w.as_bytes().to_vec()
            }
            Body::FenceResult(f) => f.encode(MsgType::FENCE_RESULT, h.nodeid),
            Body::FenceClear(f) => f.encode(MsgType::FENCE_CLEAR, h.nodeid),
            Body::RunRequest(r) => r.encode(&with(&mut h, MsgType::RUN_REQUEST))?,
            Body::RunReply(r) => r.encode(&with(&mut h, MsgType::RUN_REPLY))?,
            Body::Native(b) => {
                let mut w = super::NativeWriter::new(h);
                for e in b.entries() {
                    w.push(&e);
                }
                w.finish().unwrap_or_default()
            }
        })
    }
}
