//! `bernstein-mcp-core`: the one MCP dispatcher.
//!
//! This crate owns the request dispatcher every transport calls (initialize and discovery,
//! tools, prompts, resources, completion, logging, resource subscriptions, the Tasks extension,
//! cancellation by request id), the builder a
//! Rust host uses to embed it (workdir, backend, tool configuration, anchoring run), and call
//! anchoring: every served `tools/call` is recorded in a run journal and the audit chain before
//! it runs, so the call order of a run can be proven from the chain alone.
//!
//! ```no_run
//! # async fn demo(key: bernstein_journal::key::AuditKey) -> Result<(), bernstein_mcp_core::Error> {
//! use std::sync::Arc;
//! use bernstein_mcp_core::{CallScope, DiscardNotifications, Dispatcher};
//!
//! let dispatcher = Dispatcher::builder("/path/to/project").audit_key(key).build()?;
//! let scope = CallScope::new();
//! let reply = dispatcher
//!     .handle_text(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#, &scope, Arc::new(DiscardNotifications))
//!     .await;
//! # let _ = reply;
//! # Ok(())
//! # }
//! ```
//!
//! It keeps no per-connection state that a response depends on: every request is served from
//! its body and per-request `_meta`, so transports only frame. It knows nothing of stdio,
//! sockets or HTTP. Model types (protocol versions, per-request `_meta`, prompts, tasks) come
//! from `rmcp`; its service loop is not used (see `docs/ARCHITECTURE.md`).

pub mod anchor;
pub mod card;
pub mod completion;
mod dispatcher;
mod error;
pub mod extension;
pub mod ids;
pub mod instructions;
pub mod jsonrpc;
mod limits;
pub mod logging;
pub mod prompts;
mod readiness;
mod scope;
mod storage_fault;
mod tasks;
pub mod telemetry;

pub use anchor::{
    ABANDONED_CALL_EVENT, Anchor, AnchoredCall, CallOrder, GroupStats, MAX_GROUP, OrderProblem,
    RecordedCall, STATELESS_CALL_EVENT, reconstruct_call_order,
};
pub use card::{AuthPosture, ServerIdentity, TransportInfo};
pub use dispatcher::{
    Accepted, BackendChoice, CAPABILITY_URI, DEFAULT_ANCHOR_RUN_ID, Dispatcher, DispatcherBuilder,
    LINEAGE_ARTEFACT_PREFIX, LINEAGE_STATS_URI, MAX_SUBSCRIPTIONS_PER_STREAM, SKILL_INDEX_URI,
};
pub use error::{Error, Result};
pub use extension::{BoxFuture, Extension, ExtensionAnswer, ExtensionCall};
pub use limits::{DECLARED_TIMEOUT_GRACE, Limits};
pub use logging::{LogLevel, RequestLog};
pub use scope::{CallScope, DiscardNotifications, NotificationSink};
pub use tasks::{TASK_LIST_PAGE, TASK_POLL_INTERVAL_MS, TASK_TTL_MS};
