//! The HMAC audit chain under `.sdd/audit/` (`FORMATS.md` §2), byte-compatible with
//! Bernstein 3.23.
//!
//! * Writing: [`AuditChain::append`] appends scheme-2 records under the same cross-process
//!   `flock` the reference uses (`.chain.lock`), so Rust and Python writers can share a chain.
//! * Reading the head: [`keyless_newest_segment_head`] (the reference's poll reading),
//!   [`recovered_head`] (the MAC-valid head appenders chain onto), and per run through
//!   [`head_index`] (what `bernstein_run_status` embeds: the newest entry naming the run).
//! * Searching from the end: [`newest_record_where`] (the newest valid record of a kind).
//! * Verifying: [`verify`] streams every segment (archives first), analyses the lines on every
//!   core, and returns a [`VerifyReport`] listing every hard error and every tear, with the
//!   reference's verdict ([`verify_sequential`] returns the same report from one thread);
//!   [`verified_records`] iterates over the records that verify, with the same verdict at the
//!   end.
//!
//! Verifying and head readings never write (no key creation, no lock file).

mod append;
mod canonical_scan;
mod clock;
mod head;
pub mod head_index;
mod record;
mod report;
mod search;
mod segments;
mod verify;
mod verify_parallel;

pub use append::{AppendStats, AppendedRecord, AuditChain, AuditClock, AuditEvent, SealedTear};
pub use clock::Timestamp;
pub use head::{keyless_newest_segment_head, recovered_head};
pub use record::{
    GENESIS_HMAC, LEGACY_ANCHOR_EVENT_TYPES, PREV_CHAIN_DIGEST_KEY, SCHEME_2_DOMAIN_TAG, Scheme,
    expected_hmac, python_repr, python_str,
};
pub use report::{Finding, FindingKind, Tear, TearClass, VerifyProgress, VerifyReport};
pub use search::{newest_record_in_segment_where, newest_record_where};
pub use segments::{ARCHIVE_DIR, ARCHIVED_SUFFIX, LIVE_SUFFIX, MAX_LINE_BYTES};
pub use verify::{
    VerifiedRecord, VerifiedRecords, verified_records, verify, verify_sequential,
    verify_with_progress,
};

/// Name of the cross-process append lock file inside the audit directory.
pub const LOCK_FILE_NAME: &str = ".chain.lock";

/// Event type of the record that seals a torn segment tail.
pub const EVENT_CHAIN_TORN_RECORD: &str = "chain.torn_record";

/// Event type of the record by which an operator acknowledges a tear.
pub const EVENT_CHAIN_TEAR_ACKNOWLEDGED: &str = "chain.tear_acknowledged";

impl AuditChain {
    /// Verifies the whole chain (see [`verify`]).
    pub fn verify(&self) -> VerifyReport {
        verify(self.dir(), self.key())
    }

    /// Verifies with a progress callback (see [`verify_with_progress`]).
    pub fn verify_with_progress(&self, progress: &mut dyn FnMut(VerifyProgress)) -> VerifyReport {
        verify_with_progress(self.dir(), self.key(), progress)
    }

    /// Iterates over the records that verify (see [`verified_records`]).
    pub fn verified_records(&self) -> VerifiedRecords<'_> {
        verified_records(self.dir(), self.key())
    }

    /// Reading 2 for this chain's directory (see [`keyless_newest_segment_head`]).
    pub fn keyless_newest_segment_head(&self) -> String {
        keyless_newest_segment_head(self.dir())
    }
}
