//! `dlm-tests`: the fake kernel (library and `fake_kernel` binary); the multi-node
//! simulator and the cluster tests arrive with the cluster issue.

pub mod fake_kernel;

pub use fake_kernel::{FakeKernel, Record};
