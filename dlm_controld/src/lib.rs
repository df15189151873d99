//! The dlm_controld daemon's library: configuration and the lockspace membership machine
//! today; the kernel seam, daemon protocol, fencing and the plock path arrive with their
//! issues.

pub mod clock;
pub mod config;
pub mod daemon;
pub mod daemon_proto;
pub mod fencing;
pub mod kernel;
pub mod log;
pub mod lscore;
pub mod membership;
pub mod metrics;
pub mod rate;
pub mod status;
