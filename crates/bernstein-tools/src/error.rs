//! The one error type of `bernstein-tools`.
//!
//! Tool failures reach the caller as a [`crate::ToolOutcome`] whose payload carries the
//! reference's error shapes; this type is what the catalogue and the [`crate::Backend`]
//! operations return before a handler renders it. Its `Display` text is what the reference puts
//! in its generic `{"error": str(exception), ...}` payload: for a remote task server that is
//! httpx's wording ([`bernstein_tasks::remote::RemoteFailure::reference_text`]).

use bernstein_tasks::remote::RemoteFailure;

/// Why a catalogue could not be built or a backend operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tier name that is none of `core`, `standard`, `all`. The message is the reference's
    /// `ValueError` text, with the value as the caller gave it (Python `repr`).
    #[error("Unknown MCP tool tier {value_repr}. Valid tiers: core, standard, all.")]
    UnknownTier {
        /// The rejected value, spelled as Python's `repr` spells it.
        value_repr: String,
    },
    /// A packaged input schema is not a valid draft-07 schema (a build defect, caught by tests).
    #[error("the input schema of {tool} is not a valid draft-07 schema: {reason}")]
    InvalidSchema {
        /// The tool whose schema failed.
        tool: String,
        /// What the schema compiler reported.
        reason: String,
    },
    /// The embedded task store refused or failed.
    #[error("{0}")]
    Task(#[from] bernstein_tasks::Error),
    /// The remote task server refused, or could not be reached.
    #[error("{}", .0.reference_text())]
    Remote(RemoteFailure),
    /// An evidence file (journal, mailbox, backlog, spine, capsule) refused or failed.
    #[error("{0}")]
    Evidence(#[from] bernstein_journal::Error),
    /// The backend has no such operation (for example administrative runs on the embedded
    /// store), or a required piece of configuration (the audit key) is missing.
    #[error("{0}")]
    Unsupported(String),
    /// The task server answered with JSON that is not the shape the tool needs.
    #[error("{0}")]
    UnexpectedAnswer(String),
}

impl From<RemoteFailure> for Error {
    fn from(failure: RemoteFailure) -> Error {
        Error::Remote(failure)
    }
}

impl Error {
    /// Whether the failure means "no such task" (a 404 from the server, or the store's
    /// not-found).
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Task(bernstein_tasks::Error::NotFound { .. }) => true,
            Error::Remote(failure) => failure.status_code() == Some(404),
            _ => false,
        }
    }

    /// Whether the failure is a refused state change (HTTP 409, or the store's transition and
    /// gate refusals).
    pub fn is_conflict(&self) -> bool {
        match self {
            Error::Task(
                bernstein_tasks::Error::IllegalTransition { .. }
                | bernstein_tasks::Error::NotCancellable { .. }
                | bernstein_tasks::Error::NotCompletable { .. }
                | bernstein_tasks::Error::NotApprovable { .. }
                | bernstein_tasks::Error::NotClaimable { .. },
            ) => true,
            Error::Remote(failure) => failure.status_code() == Some(409),
            _ => false,
        }
    }
}
