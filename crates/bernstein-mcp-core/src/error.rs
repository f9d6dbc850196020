//! The one error type of `bernstein-mcp-core`.

use std::path::PathBuf;

/// Why a dispatcher operation could not run.
///
/// Protocol-level refusals (an unknown method, bad params) are not errors of this type: they
/// are JSON-RPC error responses the dispatcher answers with. This type covers what stops the
/// dispatcher itself: anchoring evidence it cannot write, a builder missing a part.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The run journal or the audit chain refused or failed an operation.
    #[error(transparent)]
    Journal(#[from] bernstein_journal::Error),
    /// The task backend failed.
    #[error(transparent)]
    Tasks(#[from] bernstein_tasks::Error),
    /// The tool catalogue could not be built.
    #[error(transparent)]
    Tools(#[from] bernstein_tools::Error),
    /// A client's `baggage` claimed a call index the anchoring run's journal does not have next.
    #[error(
        "baggage claims mcp.call_index={claimed} but the next call of run {run_id} is {actual}"
    )]
    CallIndexClaim {
        /// The claimed value as sent.
        claimed: String,
        /// The call index the journal assigns next.
        actual: u64,
        /// The anchoring run.
        run_id: String,
    },
    /// One failure shared by every call of an anchoring group (see [`crate::Anchor::anchor`]);
    /// it reads exactly as the failure itself.
    #[error(transparent)]
    Group(std::sync::Arc<Error>),
    /// The blocking anchoring work was lost (its thread panicked or the runtime shut down).
    #[error("anchoring did not complete: {0}")]
    AnchorTask(String),
    /// The host's [`crate::Extension`] lists an entry without a name, twice, or over a
    /// built-in one.
    #[error("extension refused: {0}")]
    Extension(String),
    /// The project directory cannot hold evidence.
    #[error("{path}: {reason}")]
    Project {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
