//! Run journals: `.sdd/runs/<run_id>/journal.jsonl`, byte-compatible with Bernstein 3.23's
//! `core/replay/journal.py` (FORMATS §3.1).
//!
//! A journal is a hash chain of PY-ROW lines. Each row binds its payload (every key outside the
//! wall-clock envelope) and its position to the previous row's hash:
//!
//! ```text
//! event_hash = sha256(canon({event_type, index, payload_hash, prev_hash}))
//! ```
//!
//! * [`validate_run_id`], [`task_run_id`] and [`run_journal_path`] turn identifiers into a
//!   containment-checked path (a symlinked run directory, journal file or runs directory that
//!   leads out of the project root is refused);
//! * [`JournalWriter`] appends rows in either [`HashProfile`], safely across processes;
//! * [`load_journal`] is the tolerant reader and [`verify_journal`] recomputes the chain,
//!   reporting every divergent row and every discarded line.
//!
//! The "journal head" is the last row's `event_hash`; it is a hash chain, not a Merkle tree.

mod hashing;
mod paths;
mod python;
mod reader;
mod verify;
mod writer;

pub use hashing::{
    EXCLUDED_FIELDS, GENESIS_HASH, HashProfile, event_hash, is_excluded_field, payload_hash,
    payload_preimage_object,
};
pub use paths::{
    JOURNAL_FILENAME, MAX_RUN_ID_LEN, canonicalize_cheaply, canonicalize_directory_cheaply,
    journal_barrier_message, run_journal_path, runs_dir, task_run_id, validate_run_id,
};
pub use python::python_str_repr;
pub use reader::{
    LoadedJournal, SHARED_JOURNAL_MAX_BYTES, load_journal, load_journal_kept, load_journal_shared,
    parse_journal_bytes,
};
pub use verify::{JournalVerification, journal_head, verify_journal, verify_loaded, verify_rows};
pub use writer::{
    AppendedRow, CatchUpStats, Clock, JournalSummary, JournalWriter, RECENT_ROWS_PER_EVENT,
    SystemClock,
};

pub(crate) use paths::contained_path;
pub(crate) use python::{PyException, python_float_check, python_int_check, python_strip};
pub(crate) use reader::for_each_physical_line;
pub(crate) use verify::row_str;

use crate::Result;
use std::path::Path;

/// Loads the journal of `run_id` under `project_root` through the containment barrier
/// (a missing journal reads as empty).
///
/// # Errors
///
/// [`crate::Error::InvalidRunId`], [`crate::Error::Containment`], or [`crate::Error::Io`] when
/// the file exists but cannot be read.
pub fn load_run_journal(project_root: &Path, run_id: &str) -> Result<LoadedJournal> {
    load_journal(&run_journal_path(project_root, run_id)?)
}

/// Verifies the journal of `run_id` under `project_root` through the containment barrier.
///
/// # Errors
///
/// As [`load_run_journal`].
pub fn verify_run_journal(project_root: &Path, run_id: &str) -> Result<JournalVerification> {
    verify_journal(&run_journal_path(project_root, run_id)?)
}
