//! Fuzz target `stdio_framing`: the property [`bernstein_fuzz::stdio_framing`] on every input.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bernstein_fuzz::stdio_framing(data));
