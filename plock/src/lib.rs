//! `dlm-plock`: the cluster-wide POSIX-lock ("plock") table of a DLM lockspace, as a pure,
//! deterministic, replicated state machine.
//!
//! Every node holds a [`Lockspace`] per lockspace and applies the same PLOCK messages in
//! the same (corosync CPG total) order, so every replica reaches the same state — proven by
//! [`Lockspace::digest`]. A kernel request is never applied locally: the daemon multicasts
//! it, and applies it when CPG delivers it back. Only the node that issued a request
//! answers it; [`Lockspace::apply`] returns those answers as [`Reply`]s.
//!
//! Decisions are the C daemon's (dlm 4.1/4.2 `plock.c`) so C and Rust nodes can share a
//! cluster; the data structures are not: see the `lockspace` module for the indexes.
//!
//! What this crate deliberately does not do: I/O, clocks (time comes in as `now`,
//! monotonic milliseconds, used only for ages), randomness, threads, or `plock_ownership=1`
//! (refused by the daemon).
//!
//! ```
//! use dlm_plock::Lockspace;
//! use dlm_proto::kernel::{PlockFlags, PlockInfo, PlockOp, PLOCK_VERSION};
//!
//! let req = |nodeid: i32, op, wait, start, end| PlockInfo {
//!     version: PLOCK_VERSION, op, ex: true, wait, flags: PlockFlags(0), pid: 100,
//!     nodeid, rv: 0, fsid: 7, number: 42, start, end, owner: nodeid as u64,
//! };
//! let mut node1 = Lockspace::new(1, 7, 0x5eed);
//! let mut node2 = Lockspace::new(2, 7, 0xbeef);
//! // The same three messages, delivered in the same order on both nodes.
//! let msgs = [
//!     (1, req(1, PlockOp::LOCK, false, 0, 99)),   // node 1 write-locks 0-99
//!     (2, req(2, PlockOp::LOCK, true, 50, 59)),   // node 2 waits for 50-59
//!     (1, req(1, PlockOp::UNLOCK, false, 0, 99)), // node 1 unlocks
//! ];
//! let (mut out1, mut out2) = (Vec::new(), Vec::new());
//! for (from, m) in &msgs {
//!     node1.apply(0, *from, m, &mut out1).unwrap();
//!     node2.apply(0, *from, m, &mut out2).unwrap();
//! }
//! // node 1 answers its lock and its unlock; node 2 answers its waiter, now granted
//! assert_eq!(out1.iter().map(|r| r.info.rv).collect::<Vec<_>>(), [0, 0]);
//! assert_eq!(out2.len(), 1);
//! assert_eq!((out2[0].info.start, out2[0].info.rv), (50, 0));
//! assert_eq!(node1.digest(), node2.digest());
//! assert_eq!(node1.dump_text(), "42 WR 50-59 nodeid 2 pid 100 owner 2 rown 0\n");
//! ```

mod arena;
mod dump;
mod effects;
mod keyed;
mod lockspace;
mod range;
mod snapshot;
pub mod waits;

pub use dump::DumpEntry;
pub use effects::{ApplyError, Reply, RestoreError};
pub use keyed::{KeyedNumbers, NumberHasher};
pub use lockspace::Lockspace;
pub use lockspace::state::Held;
pub use snapshot::{Chunk, Snapshot, SnapshotCursor};
pub use waits::{Wait, Waits};
