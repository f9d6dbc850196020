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
//! * [`lifecycle`]: [`TaskStatus`], the legal transition table and the named status sets the
//!   gates and routes are projected from.
//! * [`model`]: the [`Task`] record, safe [`TaskId`]s and their validation.
//! * [`plan`]: plan-mode cost estimates and the SHA-256 rendering hash an approval is bound to.
//! * [`backend`]: the [`TaskBackend`] trait both backends implement, and its request and result
//!   types.
//! * [`embedded`]: the durable, multi-process [`embedded::EmbeddedStore`] under `<workdir>/.sdd/`,
//!   writing the reference server's own task log, backlog, run-journal rows and audit events.
//! * [`remote`]: the [`TaskBackend`] over a running `bernstein serve` (HTTP/1.1), and the raw
//!   route-by-route client for tools that pass the server's JSON on verbatim.

pub mod backend;
pub mod blocking;
pub mod embedded;
mod error;
pub mod lifecycle;
pub mod model;
pub mod plan;
pub mod remote;

pub use backend::TaskBackend;
pub use error::{Error, ErrorKind, FieldProblem, Resource};
pub use lifecycle::TaskStatus;
pub use model::{Complexity, NewTask, Scope, Task, TaskId};
