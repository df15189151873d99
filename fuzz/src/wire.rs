//! Every decoder of bytes another program sends: CPG messages (and what decodes re-encodes
//! to the same bytes' meaning), kernel records, uevents, dlm-control, query requests.

use dlm_proto::LockspaceName;
use dlm_proto::kernel::{ControlRequest, PlockInfo, Uevent};
use dlm_proto::query::{DlmcHeader, Request};
use dlm_proto::wire::{Body, Message};

/// One input.
pub fn run(bytes: &[u8]) {
    if let Ok(p) = PlockInfo::decode(bytes) {
        assert_eq!(PlockInfo::decode(&p.encode()).ok(), Some(p));
    }
    if let Ok(m) = Message::decode(bytes) {
        // what decodes encodes, and the encoding decodes to the same message
        let bytes = m.encode().expect("a decoded message encodes");
        let again = Message::decode(&bytes).expect("re-encoded message decodes");
        match m.body {
            // built as C builds them: only the sender is taken from the header
            Body::Protocol(_) | Body::FenceResult(_) | Body::FenceClear(_) => {
                assert_eq!(
                    (again.header.nodeid, &again.body),
                    (m.header.nodeid, &m.body)
                );
            }
            _ => assert_eq!(again, m),
        }
    }
    if let Ok(h) = DlmcHeader::decode(bytes) {
        let rest = bytes.get(96..).unwrap_or_default();
        let n = Request::extra_len(&h).min(rest.len());
        let _ = Request::decode(&h, &rest[..n]);
    }
    let _ = Uevent::parse(bytes);
    let _ = ControlRequest::decode(bytes);
    let _ = LockspaceName::new(bytes);
}
