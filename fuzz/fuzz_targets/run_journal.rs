//! Fuzz target `run_journal`: the property [`bernstein_fuzz::run_journal`] on every input.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bernstein_fuzz::run_journal(data));
