//! Loopback integration tests of the HTTP transports: each serves a fresh project on port 0.

mod bad_input;
mod embed;
mod exhaustion;
mod protection;
mod refusal_metrics;
mod sse;
mod streamable;
mod support;
