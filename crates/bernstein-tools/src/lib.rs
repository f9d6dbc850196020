//! The MCP tool catalogue of bernstein-mcp.
//!
//! This crate owns every tool's name, draft-07 input schema, description, tier and handler, the
//! deprecated aliases, the input firewall and the cost-meter envelope. Handlers act through the
//! task coordinator, the gates and the evidence journal.
//!
//! It must not know how a request arrived: no transport, no JSON-RPC ids, no HTTP headers. The
//! dispatcher in `bernstein-mcp-core` hands it parsed arguments and per-request metadata.
//!
//! The crate is filled by the MCP-surface issue; until then it only states its boundary.
