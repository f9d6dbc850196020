//! The stdio transport of bernstein-mcp.
//!
//! This crate owns newline-delimited JSON-RPC framing over a byte stream (the process's stdin and
//! stdout, or an in-memory duplex in tests) and nothing else: it hands every message to the
//! dispatcher in `bernstein-mcp-core` and writes back what the dispatcher answers.
//!
//! It must not validate arguments, apply gates or touch the evidence files; stdout belongs to the
//! protocol, so nothing here logs to it.
//!
//! The crate is filled by the MCP-surface issue; until then it only states its boundary.
