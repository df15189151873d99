//! `cargo fuzz run wire`: see `dlm_fuzz::wire`.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| dlm_fuzz::wire::run(bytes));
