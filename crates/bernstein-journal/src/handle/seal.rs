//! The terminal seal of a run: an `mcp.task_handle` audit entry that binds the terminal handle a
//! host watched to the audited run.
//!
//! When a transition ends a run (completion, approval to `done`, failure, cancellation), its
//! lifecycle row is appended to the run journal first; then [`seal_terminal_run`] appends one
//! `mcp.task_handle` entry (`FORMATS.md` §2.6 lists it; the reference never writes one) whose
//! details are the handle as it stood just before the seal:
//!
//! | key | value |
//! |---|---|
//! | `task_id` | the Bernstein task id (the run is `task_run_id(task_id)`) |
//! | `run_id` | the run |
//! | `status` | the journal's terminal fold |
//! | `journal_head` | the journal's last `event_hash` |
//! | `chain_head` | the run's chain head before this entry ([`crate::audit::head_index`]) |
//! | `receipt_hash` | the handle's `receiptHash` with that chain head |
//! | `spec_revision`, `trace_id` | the handle's (`2026-07-28`, `""`) |
//!
//! The entry names the run, so from then on the handle's `chainHead` is the seal's `hmac`.
//!
//! **Exactly once.** The check "is the run's newest seal already this status and journal head?"
//! and the append run under the run journal's own lock (the `flock` [`crate::run_journal::
//! JournalWriter`] takes), so any number of processes sealing the same run write one seal. A
//! run is sealed again only when its journal moved on after its seal. The chain lock is taken
//! inside the journal lock, never the other way round. [`append_terminal_row`] is the same
//! exactly-once rule for the lifecycle row itself (used where no task store writes it).

use std::fs::File;
use std::path::Path;

use bernstein_protocol::pyjson::{Object, Value};

use super::{RunHandle, TaskStatus, project_task_status};
use crate::audit::head_index::EVENT_TASK_HANDLE;
use crate::audit::{AppendedRecord, AuditChain, AuditEvent, Timestamp};
use crate::run_journal::{HashProfile, JournalWriter, load_journal, run_journal_path, task_run_id};
use crate::{Error, Result};

/// The actor, resource type of a seal entry.
pub const SEAL_ACTOR: &str = "mcp_task_handle";

/// What [`seal_terminal_run`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum SealOutcome {
    /// The run's journal does not fold to a terminal status (or does not exist): nothing sealed.
    NotTerminal,
    /// The run's newest seal already binds this status and journal head.
    AlreadySealed {
        /// That seal's `hmac`.
        hmac: String,
    },
    /// A seal was appended.
    Sealed(Box<AppendedRecord>),
}

/// The seal entry for `handle`, a terminal handle whose `chain_head` is the run's head before
/// the seal, for the task `task_id`.
pub fn seal_event(task_id: &str, handle: &RunHandle) -> AuditEvent {
    let details = Object::new()
        .with("task_id", task_id)
        .with("run_id", handle.run_id.as_str())
        .with("status", handle.status.as_str())
        .with("journal_head", handle.journal_head.as_str())
        .with("chain_head", handle.chain_head.as_str())
        .with("receipt_hash", handle.receipt_hash())
        .with("spec_revision", handle.spec_revision.as_str())
        .with("trace_id", handle.trace_id.as_str());
    AuditEvent::new(
        EVENT_TASK_HANDLE,
        SEAL_ACTOR,
        SEAL_ACTOR,
        handle.run_id.as_str(),
        details,
    )
}

/// The exclusive lock on a run journal file, the one its writers take. Closing the descriptor
/// when this drops releases the lock.
struct JournalLock {
    /// The locked journal, held only so that the lock lasts until this drops.
    _locked: File,
}

impl JournalLock {
    /// Locks `path`; `None` when the journal does not exist.
    fn acquire(path: &Path) -> Result<Option<JournalLock>> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(Error::io("open", path, err)),
        };
        file.lock().map_err(|err| Error::io("lock", path, err))?;
        Ok(Some(JournalLock { _locked: file }))
    }
}

/// Seals the run of `task_id` when its journal folds to a terminal status and its newest seal
/// does not already bind that status and journal head (see the module docs).
///
/// # Errors
///
/// [`Error::InvalidRunId`] / [`Error::Containment`] when the task's run cannot name a journal;
/// the filesystem's and the chain's errors.
pub fn seal_terminal_run(
    project_root: &Path,
    chain: &AuditChain,
    task_id: &str,
) -> Result<SealOutcome> {
    seal_terminal_run_at(project_root, chain, task_id, None)
}

/// [`seal_terminal_run`] with an explicit clock reading for the seal entry (deterministic
/// fixtures); `None` is now.
///
/// # Errors
///
/// As [`seal_terminal_run`].
pub fn seal_terminal_run_at(
    project_root: &Path,
    chain: &AuditChain,
    task_id: &str,
    at: Option<Timestamp>,
) -> Result<SealOutcome> {
    let run_id = task_run_id(task_id);
    let path = run_journal_path(project_root, &run_id)?;
    let Some(_lock) = JournalLock::acquire(&path)? else {
        return Ok(SealOutcome::NotTerminal);
    };
    let rows = load_journal(&path)?.rows;
    if !project_task_status(&rows).is_terminal() {
        return Ok(SealOutcome::NotTerminal);
    }
    let heads = super::run_heads(chain.dir(), &run_id)?;
    if let Some(seal) = &heads.last_seal
        && super::binds(Some(seal), &rows)
    {
        return Ok(SealOutcome::AlreadySealed {
            hmac: seal.hmac.clone(),
        });
    }
    let chain_head = heads.newest.map(|e| e.hmac).unwrap_or_default();
    let handle = RunHandle::from_journal(&run_id, &run_id, &rows, &chain_head);
    let event = seal_event(task_id, &handle);
    let record = match at {
        Some(at) => chain.append_at(&event, at)?,
        None => chain.append(&event)?,
    };
    Ok(SealOutcome::Sealed(Box::new(record)))
}

/// The lifecycle event a terminal status is journalled with.
pub fn terminal_event(status: TaskStatus) -> Option<&'static str> {
    match status {
        TaskStatus::Completed => Some("task_completed"),
        TaskStatus::Failed => Some("task_failed"),
        TaskStatus::Cancelled => Some("task_cancelled"),
        TaskStatus::Working | TaskStatus::InputRequired => None,
    }
}

/// Appends `event` with `payload` to the run journal of `task_id` unless the journal already
/// holds a terminal row (any row the status fold treats as terminal), checked under the
/// journal's lock, so several processes append at most one. Returns whether a row was written.
///
/// # Errors
///
/// As [`JournalWriter::append_counted`].
pub fn append_terminal_row(
    project_root: &Path,
    task_id: &str,
    event: &str,
    payload: &Object,
) -> Result<bool> {
    let run_id = task_run_id(task_id);
    let mut writer = JournalWriter::open(project_root, &run_id, HashProfile::PyJsonV1)?;
    let appended = writer.append_counted(event, |summary| {
        let terminal = [
            "task_completed",
            "run_completed",
            "task_failed",
            "run_failed",
            "task_cancelled",
            "run_cancelled",
        ]
        .iter()
        .any(|name| summary.count_of(name) > 0);
        (!terminal).then(|| payload.clone())
    })?;
    Ok(appended.is_some())
}

/// The payload the embedded store journals a lifecycle row with, built from a task row:
/// `task_id, status, task_version` and, when given, `reason`.
pub fn lifecycle_payload(task_id: &str, row: &Object, reason: Option<&str>) -> Object {
    let mut payload = Object::new()
        .with("task_id", task_id)
        .with(
            "status",
            row.get("status")
                .cloned()
                .unwrap_or(Value::Str(String::new())),
        )
        .with(
            "task_version",
            row.get("version").cloned().unwrap_or(Value::from(1)),
        );
    if let Some(reason) = reason {
        payload.insert("reason", reason);
    }
    payload
}
