//! Fuzz target `audit_verify`: the property [`bernstein_fuzz::audit_verify`] on every input.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bernstein_fuzz::audit_verify(data));
