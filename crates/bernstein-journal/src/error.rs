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
    /// An existing run journal cannot be extended without corrupting its chain (unparsable rows,
    /// a chain that does not recompute, or an unknown hash profile; a torn tail is cut instead).
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
    /// An Ed25519 private key file grants group or world permission bits.
    #[error(
        "signing key {path} has mode {mode:o}; it must not grant group or world access (chmod 600)"
    )]
    SigningKeyPermissions {
        /// The private key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A PEM key (a file or a text) is not a usable Ed25519 key.
    #[error("signing key {origin} is malformed: {reason}")]
    SigningKeyMalformed {
        /// The file path, or a description of the text that was parsed.
        origin: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A public key file is not the public half of the private key stored next to it.
    #[error("signing key pair mismatch: {public} is not the public half of {private}")]
    SigningKeyMismatch {
        /// The private key file.
        private: PathBuf,
        /// The public key file.
        public: PathBuf,
    },
    /// A mailbox message kind outside the typed vocabulary (reference: `UnknownMessageKind`).
    #[error(
        "unknown message kind {}; expected one of {}",
        bernstein_protocol::pyrepr::python_str_repr(.kind),
        crate::mailbox::MESSAGE_KINDS_REPR
    )]
    UnknownMessageKind {
        /// The refused kind.
        kind: String,
    },
    /// A mailbox body over the byte cap, measured before redaction (reference: `MessageTooLarge`).
    #[error("message body exceeds {limit} bytes")]
    MessageTooLarge {
        /// The UTF-8 length of the refused body.
        bytes: usize,
        /// The cap.
        limit: usize,
    },
    /// The recipient task already holds the per-task cap of unconsumed messages (reference:
    /// `MailboxFull`).
    #[error(
        "task {} already holds {limit} unconsumed messages",
        bernstein_protocol::pyrepr::python_str_repr(.task_id)
    )]
    MailboxFull {
        /// The recipient task.
        task_id: String,
        /// The cap.
        limit: usize,
    },
    /// The poster may not append this protocol step (reference: `MailboxAuthorizationError`).
    #[error("{reason}")]
    MailboxUnauthorized {
        /// Why, in the reference's words.
        reason: String,
    },
    /// A task id that is not a plain identifier (`^[A-Za-z0-9_.:-]{1,256}$`, not `.` or `..`).
    #[error("invalid task id {id:?}: {reason}")]
    InvalidTaskId {
        /// The refused id.
        id: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A run artifact cannot be posted as given: its key, its typed content or its trace
    /// context is invalid (the reference's `ArtifactValidationError`; the text is its message).
    #[error("{reason}")]
    ArtifactInvalid {
        /// What is wrong, in the reference's words where it has them.
        reason: String,
    },
    /// A run artifact's canonical content is over the per-blob cap (reference:
    /// `ArtifactTooLargeError`).
    #[error("artifact payload is {size} bytes, exceeds the {cap}-byte per-blob cap")]
    ArtifactTooLarge {
        /// The size of the canonical content bytes.
        size: usize,
        /// The cap.
        cap: usize,
    },
    /// The poster does not hold the task's claim; the refusal was audit-recorded (reference:
    /// the route's typed 403).
    #[error("caller does not hold an active claim for task '{task_id}'")]
    ArtifactRefused {
        /// The task the post was aimed at.
        task_id: String,
        /// The identity that tried to post.
        caller: String,
        /// `unclaimed_task` or `claim_scope_violation`, as recorded in the audit chain.
        reason: &'static str,
    },
    /// An evidence store (a lineage spine, a blob, the lineage log) is not in a state that can
    /// be extended without laundering tampering or corrupting it.
    #[error("cannot extend {path}: {reason}")]
    EvidenceUnusable {
        /// The file or directory involved.
        path: PathBuf,
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
