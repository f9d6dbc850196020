//! The one error type of `bernstein-gate`: why the shutdown barrier refused a workdir.
//!
//! Approval, completion and cancel refusals are not errors; they are answers
//! ([`crate::Refusal`]). An [`Error`] means the `SHUTDOWN` signal must not be written. Each
//! message is the reference's `ShutdownSignalPathError` text, and every variant renders to the
//! same structured tool error through [`Error::refusal_payload`].

use bernstein_protocol::pyjson::Object;

use crate::shutdown::{MAX_PATH_BYTES, REFUSAL_HINT};

/// Why a workdir cannot name a shutdown-signal path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The workdir argument is not a path at all (a number, a list, null, ...).
    #[error("workdir must name a path, not {python_type}")]
    NotAPath {
        /// The Python type name the reference reports (`int`, `list`, `NoneType`, ...).
        python_type: &'static str,
    },
    /// The workdir argument is raw bytes rather than text.
    #[error("workdir must name a path as text, not bytes")]
    Bytes,
    /// The workdir is longer than any path on this filesystem; it is measured, never echoed.
    #[error("workdir is {bytes} bytes, over the {MAX_PATH_BYTES}-byte filesystem limit for a path")]
    TooLong {
        /// Its length in UTF-8 bytes.
        bytes: usize,
    },
    /// The workdir cannot be resolved (an embedded NUL, a symlink loop, no working directory).
    #[error("workdir does not name a directory this filesystem can address: {workdir_repr}")]
    Unaddressable {
        /// The workdir as Python's `repr` spells it.
        workdir_repr: String,
    },
    /// The resolved workdir holds no `.sdd` directory.
    #[error(
        "workdir is not an existing Bernstein project root (no .sdd directory): {workdir_repr}"
    )]
    NotAProjectRoot {
        /// The workdir as Python's `repr` spells it.
        workdir_repr: String,
    },
    /// A `.sdd`, `runtime`, `signals` or `SHUTDOWN` entry leads outside the resolved root (or
    /// the signal path would exceed the filesystem's path limit).
    #[error(
        "shutdown signal path resolves outside the project root named by workdir: {workdir_repr}"
    )]
    Escapes {
        /// The workdir as Python's `repr` spells it.
        workdir_repr: String,
    },
}

impl Error {
    /// The stdio tool error: `{"error": <message>, "hint": "workdir must be an existing
    /// Bernstein project root"}`. The remote transport reports the bare message instead.
    pub fn refusal_payload(&self) -> Object {
        Object::new()
            .with("error", self.to_string())
            .with("hint", REFUSAL_HINT)
    }
}
