//! `dlm-cpg`: corosync process groups for dlm_controld — opaque byte payloads and
//! membership, never parsed here.
//!
//! One interface, [`Group`], three implementations:
//!
//! * [`CorosyncGroup`] — the real engine, through our own thin bindings ([`sys`]) to
//!   Debian 12's corosync 3 (`libcpg`), driven from tokio by [`AsyncCorosyncGroup`], plus the services the daemon needs: [`Quorum`],
//!   [`Cfg`] (node id, node addresses, kill) and [`Cmap`];
//! * [`EmbeddedGroup`] — one member, no corosync, for a single-node cluster and the demo;
//! * [`SimBus`]/[`SimGroup`] — many nodes in one process, deterministic from a seed, for
//!   the simulation tests: total order, virtual synchrony, crash, partition, merge.
//!
//! What this crate deliberately does not do: look inside payloads, decide anything about
//! membership, or block: sends queue on `CS_ERR_TRY_AGAIN` and go out on
//! [`Group::flush`].

mod async_group;
mod corosync;
mod embedded;
mod event;
mod group;
mod services;
mod sim;
pub mod sys;

pub use async_group::AsyncCorosyncGroup;
pub use corosync::CorosyncGroup;
pub use embedded::EmbeddedGroup;
pub use event::{CpgError, Event, IoCause, Member, Reason, RingId};
pub use group::Group;
pub use services::{Cfg, Cmap, NodeAddr, Quorum, QuorumChange};
pub use sim::{SimBus, SimGroup};
