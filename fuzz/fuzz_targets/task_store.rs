//! Fuzz target `task_store`: the property [`bernstein_fuzz::task_store`] on every input.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bernstein_fuzz::task_store(data));
