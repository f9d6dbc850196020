//! Loopback integration tests of the HTTP transports: each serves a fresh project on port 0.

mod bad_input;
mod embed;
mod protection;
mod sse;
mod streamable;
mod support;
