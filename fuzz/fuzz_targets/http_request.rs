//! Fuzz target `http_request`: the property [`bernstein_fuzz::http_request`] on every input.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bernstein_fuzz::http_request(data));
