//! `dlm-tests`: the fake kernel, the multi-node simulator and the cluster tests.
//!
//! Not written yet: they arrive with the daemon and cluster issues.
