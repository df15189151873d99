//! The dlm_controld daemon's library: configuration, the kernel seam, the sans-I/O machines
//! (lockspace membership, daemon protocol, fencing, one lockspace's core) and the tokio
//! shell that runs them (docs/ARCHITECTURE.md).

pub mod clock;
pub mod confchg;
pub mod config;
pub mod daemon;
pub mod daemon_core;
pub mod daemon_proto;
pub mod fencing;
pub mod kernel;
pub mod log;
pub mod lscore;
pub mod membership;
pub mod metrics;
pub mod native;
pub mod rate;
pub mod run;
pub mod status;
