//! `cargo fuzz run conf`: see `dlm_fuzz::conf`.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| dlm_fuzz::conf::run(bytes));
