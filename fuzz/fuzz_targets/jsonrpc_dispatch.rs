//! Fuzz target `jsonrpc_dispatch`: the property [`bernstein_fuzz::jsonrpc_dispatch`] on every input.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bernstein_fuzz::jsonrpc_dispatch(data));
