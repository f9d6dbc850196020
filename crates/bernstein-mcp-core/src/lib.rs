//! `bernstein-mcp-core`: the one MCP dispatcher.
//!
//! This crate owns the request dispatcher every transport calls (initialize and discovery,
//! tools, prompts, resources, the Tasks extension, cancellation by request id) and the builder a
//! Rust host uses to embed it (workdir, backend, tier, meter, aliases, anchoring run id).
//!
//! It keeps no per-connection state that a response depends on: every request is served from its
//! body and per-request `_meta`, so transports only frame. It must not know about stdio, sockets
//! or HTTP.
//!
//! The crate is filled by the MCP-surface issue; until then it only states its boundary.
