//! Fuzz target `firewall`: the property [`bernstein_fuzz::firewall`] on every input.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bernstein_fuzz::firewall(data));
