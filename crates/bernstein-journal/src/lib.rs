//! `bernstein-journal`: the evidence core of bernstein-mcp.
//!
//! This crate owns every append-only evidence file Bernstein 3.23 writes and verifies, in the
//! same bytes:
//!
//! * [`audit`]: the HMAC audit chain under `.sdd/audit/` (scheme 2 append, scheme 1 read, daily
//!   segments, gzip archives, the cross-process `.chain.lock`, head readings, and a streaming
//!   verifier with the reference's tear model);
//! * [`key`]: locating and loading the audit master key and deriving per-store keys;
//! * [`run_journal`]: run journals under `.sdd/runs/<run_id>/journal.jsonl` (both hash profiles);
//! * [`handle`]: the Tasks-extension run handle projected from a journal and the chain head;
//! * [`identity`]: Ed25519 signing identities (PKCS#8 / SPKI PEM) and signature encodings;
//! * [`mailbox`] and [`dlp`]: the signed, HMAC-chained worker mailbox and its redaction rules;
//! * [`claim`]: signed claim receipts over the claimable backlog, and their offline verifier;
//! * [`artifacts`]: run artifacts, the content-addressed blob store and the lineage spine;
//! * [`lineage_log`]: the ADR-009 lineage log behind `bernstein_verify_lineage`;
//! * [`capsule`]: signed context capsules and their offline verifier;
//! * [`durable`]: durable directory creation, append rollback and torn-tail recovery.
//!
//! Architecture invariant: the journal knows no transport, no MCP message and no task store. It
//! reads no environment variable: callers pass key locations in explicitly ([`key::KeyLocator`]).
//! Verifiers never stop at the first problem; they return a report listing every finding.

pub mod artifacts;
pub mod audit;
pub mod capsule;
pub mod claim;
pub mod crypto;
pub mod dlp;
pub mod durable;
mod error;
pub mod handle;
pub mod identity;
pub mod key;
pub mod lineage_log;
pub mod mailbox;
pub mod regular_file;
pub mod run_journal;

pub use error::Error;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
