//! The HTTP transports of bernstein-mcp: stateless streamable HTTP on `/mcp`, and SSE.
//!
//! This crate owns HTTP framing (hyper), bearer authentication, the OAuth protected-resource
//! discovery document, the span-id response header and SSE event ids. Everything a request
//! means is decided by the dispatcher in `bernstein-mcp-core`.
//!
//! It must not validate tool arguments, apply gates or touch the evidence files itself, and hyper
//! or http types never appear in its public API.
//!
//! The crate is filled by the HTTP-transport issue; until then it only states its boundary.
