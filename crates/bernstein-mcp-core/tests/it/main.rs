//! The one integration-test binary of `bernstein-mcp-core`: the dispatcher driven with real
//! JSON-RPC messages over a scratch project, the embedded backend and the real catalogue.

mod abandoned;
mod admission;
mod anchoring;
mod claims;
mod cold_start;
mod embedding;
mod gaps;
mod handles;
mod hostile;
mod protocol;
mod readiness;
mod remote_tasks;
mod status_paging;
mod support;
mod tasks;
