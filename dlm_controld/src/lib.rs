//! The dlm_controld daemon's library: configuration today; the kernel seam, lockspace
//! lifecycle, daemon protocol and plock path arrive with their issues.

pub mod config;
