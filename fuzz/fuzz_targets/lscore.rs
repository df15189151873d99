//! `cargo fuzz run lscore`: see `dlm_fuzz::lscore`.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| dlm_fuzz::lscore::run(bytes));
