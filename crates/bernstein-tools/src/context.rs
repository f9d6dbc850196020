//! What the dispatcher hands a tool call besides its arguments.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::backend::Backend;

/// One `notifications/progress` tick a tool wants sent before its result.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressTick {
    /// The request's `_meta.progressToken`, as the client sent it.
    pub progress_token: serde_json::Value,
    /// `progress` (the reference sends a float, e.g. `0.0`).
    pub progress: f64,
    /// `total`, omitted when `None`.
    pub total: Option<f64>,
    /// `message`.
    pub message: String,
}

/// Where a tool sends progress ticks. Called synchronously, before the result is returned.
pub type ProgressSink = Arc<dyn Fn(ProgressTick) + Send + Sync>;

/// Per-request metadata from the request's `_meta` and the dispatcher.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallMeta {
    /// W3C `traceparent` from `_meta`.
    pub traceparent: Option<String>,
    /// W3C `tracestate` from `_meta`.
    pub tracestate: Option<String>,
    /// W3C `baggage` from `_meta`.
    pub baggage: Option<String>,
    /// `_meta.progressToken`, when the client asked for progress.
    pub progress_token: Option<serde_json::Value>,
    /// The content-derived span id of this call; `_meter.call_id`.
    pub call_id: String,
}

/// Everything a tool call needs besides its arguments.
#[derive(Clone)]
pub struct ToolContext {
    /// The project root: the default `workdir` of the tools that take one, and the root of the
    /// embedded store's `.sdd/`.
    pub workdir: PathBuf,
    /// The task backend and evidence operations.
    pub backend: Arc<Backend>,
    /// Per-request metadata.
    pub meta: CallMeta,
    /// Where progress ticks go; `None` drops them.
    pub progress: Option<ProgressSink>,
    /// Cancelled when the client cancels this request; the call then returns its partial work.
    pub cancel: CancellationToken,
    /// Workdir confinement: `None` lets a `workdir` argument name any directory (stdio, where
    /// the client is the local user); `Some(roots)` refuses one that does not resolve inside
    /// one of `roots` (canonical paths: the served root and the roots the operator listed).
    pub workdir_roots: Option<Arc<[PathBuf]>>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("workdir", &self.workdir)
            .field("backend", &self.backend)
            .field("meta", &self.meta)
            .field("progress", &self.progress.as_ref().map(|_| "<sink>"))
            .field("cancel", &self.cancel)
            .field("workdir_roots", &self.workdir_roots)
            .finish()
    }
}

impl ToolContext {
    /// A context for `workdir` and `backend` with empty metadata, no progress sink, a fresh
    /// cancellation token and no workdir confinement.
    pub fn new(workdir: impl Into<PathBuf>, backend: Arc<Backend>) -> ToolContext {
        ToolContext {
            workdir: workdir.into(),
            backend,
            meta: CallMeta::default(),
            progress: None,
            cancel: CancellationToken::new(),
            workdir_roots: None,
        }
    }
}
