//! Fuzz target `pyjson`: the property [`bernstein_fuzz::pyjson`] on every input.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bernstein_fuzz::pyjson(data));
