//! `bernstein-protocol`: the types and byte encodings everything else agrees on.
//!
//! This crate owns the wire-level vocabulary of bernstein-mcp: the Python-JSON dialects that
//! Bernstein 3.23 hashes and signs ([`pyjson`]), Python's `repr`/`str` of those values
//! ([`pyrepr`]), the spec revision constants, and small encoding
//! helpers (hex, base64 forms) that the evidence formats use.
//!
//! Architecture invariant: this crate does no IO. It reads no file, no environment variable and
//! no clock, so every function here is deterministic and can be tested from literals alone.

pub mod encoding;
pub mod pyjson;
pub mod pyrepr;
pub mod trace;

/// The MCP specification revision this server targets and stamps into run handles and receipts.
pub const SPEC_REVISION: &str = "2026-07-28";
