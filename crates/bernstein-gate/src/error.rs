//! The one error type of `bernstein-gate`: why the shutdown barrier refused a workdir.
//!
//! Approval, completion and cancel refusals are not errors; they are answers
//! ([`crate::Refusal`]). An [`Error`] means the `SHUTDOWN` signal must not be written. Each
//! message is the reference's `ShutdownSignalPathError` text, and every variant renders to the
//! same structured tool error through [`Error::refusal_payload`].

use bernstein_protocol::pyjson::Object;

use crate::shutdown::{MAX_PATH_BYTES, REFUSAL_HINT, WRITE_FAILURE_HINT};

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
    /// At write time, an entry on the way to `SHUTDOWN` is a symlink (or not a directory):
    /// the write follows no link, so it cannot be raced onto another file.
    #[error(
        "shutdown signal path has a symlink or non-directory at {entry} below the project root named by workdir, and the signal is written without following links: {workdir_repr}"
    )]
    Symlink {
        /// The workdir as Python's `repr` spells it.
        workdir_repr: String,
        /// The entry, relative to the project root (`.sdd/runtime`, ...).
        entry: String,
    },
    /// `SHUTDOWN` exists and is not a regular file of its own (a FIFO, device, socket,
    /// directory, or a file with other hard links).
    #[error(
        "shutdown signal path exists and is not a regular file with a single link: {workdir_repr}"
    )]
    NotARegularFile {
        /// The workdir as Python's `repr` spells it.
        workdir_repr: String,
    },
    /// The filesystem refused the write after every check passed (permissions, no space).
    #[error("cannot write the shutdown signal at {entry}: {reason}")]
    Write {
        /// The entry, relative to the project root.
        entry: String,
        /// The operating system's reason.
        reason: String,
    },
}

impl Error {
    /// The stdio tool error: `{"error": <message>, "hint": "workdir must be an existing
    /// Bernstein project root"}` (for a failed write after the checks, the hint is
    /// "Could not write shutdown signal"). The remote transport reports the bare message
    /// instead.
    pub fn refusal_payload(&self) -> Object {
        let hint = match self {
            Error::Write { .. } => WRITE_FAILURE_HINT,
            _ => REFUSAL_HINT,
        };
        Object::new()
            .with("error", self.to_string())
            .with("hint", hint)
    }
}
