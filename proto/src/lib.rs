//! `dlm-proto`: every byte that another program can see from `dlm_controld`, and nothing else.
//!
//! Three families, each in its own module and never mixed:
//!
//! * [`kernel`] — the kernel ABI in **host byte order**: `struct dlm_plock_info` read from and
//!   written to `/dev/misc/dlm_plock`, the `dlm-control` write request that creates and
//!   removes a lockspace, and the kobject uevent that announces one.
//! * [`wire`] — the daemon-to-daemon messages carried by corosync CPG, **little-endian
//!   always** (`struct dlm_header` and every message type of dlm_controld 4.2.0), and the
//!   lockspace global id.
//! * [`query`] — the `libdlmcontrol`/`dlm_tool` protocol on the two abstract Unix sockets,
//!   in host byte order.
//!
//! Each layout exists twice: a `Raw*` `#[repr(C)]` struct that is exactly the C layout
//! (checked against the real C headers by `tests/layout.rs`), and a validated domain type
//! obtained with `TryFrom`/`decode` and a typed error that names the failed check and carries
//! the offending value. Decoders never panic on any input (property-tested).
//!
//! What this crate deliberately does not do: any I/O, any clock, any allocation on the
//! plock hot path (plock requests and messages encode into fixed arrays), any policy.

pub mod errno;
pub mod kernel;
mod name;
pub mod query;
pub mod wire;

pub use name::{LockspaceName, NameError};

/// Length of a lockspace name buffer in every C structure (`DLM_LOCKSPACE_LEN`).
pub const DLM_LOCKSPACE_LEN: usize = 64;

/// Most members the C daemon tracks per lockspace (`MAX_NODES` in dlm_daemon.h).
pub const MAX_NODES: usize = 128;
