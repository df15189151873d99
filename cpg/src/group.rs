//! The one interface the daemon sees, whatever carries the bytes.

use crate::{CpgError, Event};

/// A joined process group: multicast in agreed order, membership events.
///
/// Sending never blocks: [`Group::mcast`] queues, and the implementation sends the queue in
/// order as the transport allows (corosync's `CS_ERR_TRY_AGAIN` keeps a message queued,
/// never spins). Events come out of [`Group::poll_event`] after [`Group::dispatch`]
/// (or whenever an in-process implementation produced them).
pub trait Group {
    /// Our node id.
    fn local_nodeid(&self) -> u32;
    /// Queues `payload` for multicast and sends what the transport accepts now.
    fn mcast(&mut self, payload: &[u8]) -> Result<(), CpgError>;
    /// Sends queued messages; `Ok(true)` when the queue is empty.
    fn flush(&mut self) -> Result<bool, CpgError>;
    /// Moves what the transport has received into the event queue, without blocking.
    fn dispatch(&mut self) -> Result<(), CpgError>;
    /// The next event, if one is queued.
    fn poll_event(&mut self) -> Option<Event>;
    /// Messages queued but not yet accepted by the transport.
    fn send_queue_len(&self) -> usize;
}
