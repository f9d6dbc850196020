//! The task coordinator of bernstein-mcp.
//!
//! This crate owns the task model (the 17 Bernstein statuses and the legal transition table), the
//! embedded task store that persists under `<workdir>/.sdd/`, plans, and the remote backend that
//! fronts a real `bernstein serve`. Both backends sit behind one trait so the tools cannot tell
//! them apart.
//!
//! It must not know about MCP, JSON-RPC or any transport: it is driven by the tool handlers, and
//! it reaches the evidence files only through `bernstein-journal`.
//!
//! The crate is filled by the task-coordinator issue; until then it only states its boundary.
