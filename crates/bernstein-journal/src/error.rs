//! The one error type of `bernstein-journal`.

use std::path::PathBuf;

/// Everything that can stop a journal or audit-chain operation.
///
/// Verification findings are not errors: verifiers return reports. An `Error` means the
/// operation could not run at all (no key, unreadable directory, refused path).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A filesystem operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("read", "append to", "lock", ...).
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// No audit key exists at any of the looked-up locations.
    #[error("no audit key found (looked in: {searched})")]
    KeyMissing {
        /// The locations that were tried, in order.
        searched: String,
    },
    /// The audit key file is readable by group or others.
    #[error(
        "audit key {path} has mode {mode:o}; it must not grant group or world access (chmod 600)"
    )]
    KeyPermissions {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The audit key file content is not a usable key.
    #[error("audit key {path} is malformed: {reason}")]
    KeyMalformed {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A run id or task id is not a safe single path component.
    #[error("invalid run id {id:?}: {reason}")]
    InvalidRunId {
        /// The offending id.
        id: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A path would leave the project root (symlink or traversal).
    #[error("refusing {path}: {reason}")]
    Containment {
        /// The refused path.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// A record to append cannot be written in the required format.
    #[error("cannot encode record: {0}")]
    Encode(String),
    /// An existing run journal cannot be extended without corrupting its chain (torn tail,
    /// unparsable rows, a chain that does not recompute, or an unknown hash profile).
    #[error("cannot append to {path}: {reason}")]
    JournalUnusable {
        /// The journal file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An input document (a presented run handle, an evidence bundle, a work-ledger row) does not
    /// have the shape its reader requires.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// Which kind of document.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
