//! Fuzz target `dlp`: the property [`bernstein_fuzz::dlp`] on every input.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bernstein_fuzz::dlp(data));
