//! The fuzz harnesses as plain functions: `fuzz_targets/` hands them libFuzzer's inputs
//! (`cargo fuzz run <name>`), and `tests/seeds.rs` replays the checked-in seeds of
//! `seeds/<name>/` through them in an ordinary `cargo test`, so what a fuzzing run found
//! stays fixed. Each function panics when the property it checks fails.

#![allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]

#[path = "../../plock/tests/model/mod.rs"]
mod model;

pub mod conf;
pub mod lscore;
pub mod plock_model;
pub mod wire;
