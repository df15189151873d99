//! `cargo fuzz run plock_model`: see `dlm_fuzz::plock_model`.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| dlm_fuzz::plock_model::run(bytes));
