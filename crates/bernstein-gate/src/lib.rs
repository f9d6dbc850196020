//! The gates every transport shares.
//!
//! This crate owns the approval gate (only `pending_approval` may be approved), the completion
//! gate (only `open`, `claimed` and `in_progress` may be completed by a worker), their exact
//! refusal payloads, and the shutdown containment barrier that screens a caller-supplied workdir
//! before any filesystem write.
//!
//! Gates are pure functions over a task status and a path: they do no network IO and hold no
//! state, so the stdio and HTTP transports cannot enforce different rules. The crate must not know
//! about JSON-RPC framing or about which transport asked.
//!
//! * [`approval`]: the approval and completion gates (`mcp/approval_gate.py`).
//! * [`cancel`]: the read-before-act pre-check of `bernstein_cancel` and its answers.
//! * [`shutdown`]: the containment barrier in front of the `SHUTDOWN` signal write
//!   (`mcp/signal_paths.py`). It is the one gate that looks at the filesystem, and it only
//!   reads: it stats, reads symlinks and never creates anything.
//!
//! Every payload is a [`bernstein_protocol::pyjson::Object`] with the reference's key order; the
//! tool layer serialises it (the stdio tools pretty-print gate refusals with `indent=2`).

pub mod approval;
pub mod cancel;
mod error;
pub mod shutdown;

pub use approval::{Refusal, approval_gate, completion_gate};
pub use cancel::cancel_precheck;
pub use error::Error;
pub use shutdown::{Workdir, shutdown_signal_path};

/// The spelling every gate reports for a task payload that carried no status: the gates fail
/// closed on it, since it is in no set.
pub const UNKNOWN_STATUS: &str = "unknown";

/// The status a gate reports: the server's string, or [`UNKNOWN_STATUS`] when it was empty.
pub(crate) fn reported(status: &str) -> &str {
    if status.is_empty() {
        UNKNOWN_STATUS
    } else {
        status
    }
}
