//! The Tasks-extension run handle (`core/protocols/mcp/tasks_extension.RunHandle`, FORMATS
//! §3.3) and `bernstein_run_status`'s projection of it.
//!
//! A handle is not server state: its status is a fold of the run journal
//! ([`project_task_status`]), its `journalHead` is the journal's last `event_hash` (read without
//! verifying the journal, as the reference does), and it embeds an audit-chain head.
//! `receiptHash` digests all of that, so a forged status or head fails [`verify_handle`].
//!
//! # The run's chain head, the seal, and verifying in a busy project
//!
//! [`poll_run_handle`] embeds the *run's* chain head ([`run_chain_head`]): the newest audit
//! entry naming the run, so call anchors never move it and two polls of an unchanged run are
//! byte-identical (the reference embeds the newest segment's last line instead; this is a
//! deliberate departure from its bytes). A run that ended is sealed by an `mcp.task_handle`
//! entry ([`seal_terminal_run`]), which then is its chain head, and [`verify_handle_chain`]
//! checks a handle against the chain however much was appended after it.
//!
//! # Resolving a polled identifier
//!
//! `bernstein_run` hands a host two identifiers: the task id (`abc123`) and the run id naming
//! its journal (`task-abc123` = [`task_run_id`]). [`resolve_run_journal`] maps either to one run:
//!
//! 1. the id as given, when `.sdd/runs/<id>/journal.jsonl` is a file;
//! 2. otherwise `task_run_id(id)`, when that journal is a file;
//! 3. otherwise (no journal yet) — **different from the reference**, which answers with the id
//!    as given here, so the two forms projected different handles until the journal appeared:
//!    * an id that already has the task-run shape (starts with `task-`) is taken as given;
//!    * any other id is taken as a task id and resolves to `task_run_id(id)` (when that is a
//!      valid, contained run id; else the id as given).
//!
//! So `bernstein_run_status("abc123")` and `bernstein_run_status("task-abc123")` project the
//! identical handle (`taskId` = `runId` = `task-abc123`) both before and after the journal
//! exists, and the resolved id does not change when the journal is created. The rule assumes
//! task ids do not themselves start with `task-` (the task server mints 12 hex digits); a task
//! id that does keeps resolving as in the reference once its journal exists. A non-task run id
//! that does not start with `task-` and has no journal yet resolves to `task-<id>` until its
//! journal appears. The id as given must pass the journal barrier in every case, as in the
//! reference ([`crate::Error::InvalidRunId`] / [`crate::Error::Containment`]).

mod chain;
mod evidence;
mod ledger;
mod progress;
mod seal;
mod status;
mod wire;

pub use chain::{ChainHeadEntry, HandleChainReport, verify_handle_chain};
pub use evidence::read_evidence_counts;
pub use ledger::read_ledger_task_state;
pub use progress::{
    EVENT_CHECKPOINT, EVENT_DIFF_CAPTURED, EVENT_REVIEW_DECISION, PROGRESS_SCHEMA_VERSION,
    ProgressInputs, ProgressVector, fold_progress, is_terminal_phase, phase_ordinal,
    project_progress,
};
pub use seal::{
    SEAL_ACTOR, SealOutcome, append_terminal_row, lifecycle_payload, seal_event, seal_terminal_run,
    seal_terminal_run_at, terminal_event,
};
pub use status::{TaskStatus, project_events, project_task_status};
pub use wire::{join_indent2_items, render_indent2, render_indent2_item, render_indent2_objects};

use crate::audit::{AuditChain, head_index};
use crate::crypto::sha256_hex;
use crate::run_journal::{
    journal_head, load_journal, load_journal_kept, load_journal_shared, python_str_repr,
    run_journal_path, task_run_id,
};
use crate::{Error, Result};
use bernstein_protocol::SPEC_REVISION;
use bernstein_protocol::encoding::base64_std;
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use std::path::{Path, PathBuf};

/// A pollable, verifiable handle for a long-running run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunHandle {
    /// The Tasks-extension task id (`bernstein_run_status` sets it to the resolved run id).
    pub task_id: String,
    /// The run whose journal the handle projects.
    pub run_id: String,
    /// The journal's status fold.
    pub status: TaskStatus,
    /// The journal's last non-empty `event_hash` (`""` for no rows).
    pub journal_head: String,
    /// The audit-chain head embedded at projection time.
    pub chain_head: String,
    /// The pinned Tasks-extension revision ([`SPEC_REVISION`]).
    pub spec_revision: String,
    /// The ingested W3C trace id (MCP never sets one: `""`).
    pub trace_id: String,
    /// A carried progress vector (the MCP tool never attaches one; the API route does).
    pub progress: Option<ProgressVector>,
}

impl RunHandle {
    /// Projects a handle from journal rows and the current audit-chain head
    /// (`RunHandle.from_journal`), with no trace id and no progress.
    pub fn from_journal(
        task_id: &str,
        run_id: &str,
        rows: &[Object],
        chain_head: &str,
    ) -> RunHandle {
        RunHandle {
            task_id: task_id.to_owned(),
            run_id: run_id.to_owned(),
            status: project_task_status(rows),
            journal_head: journal_head(rows),
            chain_head: chain_head.to_owned(),
            spec_revision: SPEC_REVISION.to_owned(),
            trace_id: String::new(),
            progress: None,
        }
    }

    /// The same handle carrying `progress`.
    #[must_use]
    pub fn with_progress(mut self, progress: Option<ProgressVector>) -> RunHandle {
        self.progress = progress;
        self
    }

    /// The same handle carrying `trace_id`.
    #[must_use]
    pub fn with_trace_id(mut self, trace_id: &str) -> RunHandle {
        trace_id.clone_into(&mut self.trace_id);
        self
    }

    /// Whether the status is terminal.
    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }

    /// The carried vector's hash, or `""` without one.
    pub fn progress_hash(&self) -> String {
        self.progress
            .as_ref()
            .map(ProgressVector::vector_hash)
            .unwrap_or_default()
    }

    /// `sha256_hex(PY-COMPACT-ASCII({chain_head, journal_head, progress_hash, run_id,
    /// spec_revision, status, task_id, trace_id}))`.
    pub fn receipt_hash(&self) -> String {
        receipt_hash_of(self, &self.progress_hash())
    }

    /// `base64_std(PY-COMPACT-ASCII({"run_id", "spec_revision", "task_id"}))`.
    pub fn poll_token(&self) -> String {
        let state = Object::new()
            .with("task_id", self.task_id.as_str())
            .with("run_id", self.run_id.as_str())
            .with("spec_revision", self.spec_revision.as_str());
        base64_std(
            Value::Object(state)
                .dumps(Dialect::PY_COMPACT_ASCII)
                .as_bytes(),
        )
    }

    /// The wire body, keys in the reference's order: `taskId, runId, status, journalHead,
    /// chainHead, specRevision, traceId, receiptHash, pollToken, progress, progressHash`.
    pub fn to_wire_object(&self) -> Object {
        Object::new()
            .with("taskId", self.task_id.as_str())
            .with("runId", self.run_id.as_str())
            .with("status", self.status.as_str())
            .with("journalHead", self.journal_head.as_str())
            .with("chainHead", self.chain_head.as_str())
            .with("specRevision", self.spec_revision.as_str())
            .with("traceId", self.trace_id.as_str())
            .with("receiptHash", self.receipt_hash())
            .with("pollToken", self.poll_token())
            .with(
                "progress",
                self.progress
                    .as_ref()
                    .map(|p| Value::Object(p.to_wire_object()))
                    .unwrap_or(Value::Null),
            )
            .with("progressHash", self.progress_hash())
    }

    /// Exactly what the reference tool returns with the cost meter off:
    /// `json.dumps(wire, indent=2)`.
    pub fn render_run_status_body(&self) -> String {
        render_indent2(&Value::Object(self.to_wire_object()))
    }
}

fn receipt_hash_of(handle: &RunHandle, progress_hash: &str) -> String {
    let preimage = Object::new()
        .with("task_id", handle.task_id.as_str())
        .with("run_id", handle.run_id.as_str())
        .with("status", handle.status.as_str())
        .with("journal_head", handle.journal_head.as_str())
        .with("chain_head", handle.chain_head.as_str())
        .with("spec_revision", handle.spec_revision.as_str())
        .with("trace_id", handle.trace_id.as_str())
        .with("progress_hash", progress_hash);
    sha256_hex(
        Value::Object(preimage)
            .dumps(Dialect::PY_COMPACT_ASCII)
            .as_bytes(),
    )
}

/// Which rule of [`resolve_run_journal`] picked the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// Rule 1: the id names an existing journal.
    ExistingJournal,
    /// Rule 2: `task_run_id(id)` names an existing journal.
    TaskJournal,
    /// Rule 3: no journal yet; the id is a task id and resolves to `task_run_id(id)`.
    TaskRunIdWithoutJournal,
    /// Rule 3: no journal yet; the id is taken as given.
    AsGivenWithoutJournal,
}

impl Resolution {
    /// Whether the resolved journal file existed.
    pub fn journal_exists(self) -> bool {
        matches!(self, Resolution::ExistingJournal | Resolution::TaskJournal)
    }
}

/// A polled identifier resolved to one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRun {
    /// The run id the handle projects (both `taskId` and `runId`).
    pub run_id: String,
    /// Its containment-checked journal path (which may not exist).
    pub journal_path: PathBuf,
    /// The rule that decided.
    pub resolution: Resolution,
}

/// Resolves a polled identifier to a run (see the module docs for the rule).
///
/// # Errors
///
/// [`Error::InvalidRunId`] / [`Error::Containment`] when the id *as given* cannot name a
/// journal (the reference refuses those polls too).
pub fn resolve_run_journal(project_root: &Path, id: &str) -> Result<ResolvedRun> {
    let direct = run_journal_path(project_root, id)?;
    if direct.is_file() {
        return Ok(ResolvedRun {
            run_id: id.to_owned(),
            journal_path: direct,
            resolution: Resolution::ExistingJournal,
        });
    }
    let derived_id = task_run_id(id);
    // As in the reference, a derived id that cannot name a journal is simply not a candidate.
    let derived = run_journal_path(project_root, &derived_id).ok();
    if let Some(path) = &derived
        && path.is_file()
    {
        return Ok(ResolvedRun {
            run_id: derived_id,
            journal_path: path.clone(),
            resolution: Resolution::TaskJournal,
        });
    }
    match derived {
        Some(path) if !id.starts_with("task-") => Ok(ResolvedRun {
            run_id: derived_id,
            journal_path: path,
            resolution: Resolution::TaskRunIdWithoutJournal,
        }),
        _ => Ok(ResolvedRun {
            run_id: id.to_owned(),
            journal_path: direct,
            resolution: Resolution::AsGivenWithoutJournal,
        }),
    }
}

/// `bernstein_run_status`'s projection: resolve `id`, read the journal tolerantly (without
/// verifying it), and project the handle with `taskId` = `runId` = the resolved id, embedding
/// `chain_head` (the audit chain's reading 2, supplied by the caller).
///
/// # Errors
///
/// As [`resolve_run_journal`], plus [`Error::Io`] when the journal exists but cannot be read.
pub fn project_run_handle(project_root: &Path, id: &str, chain_head: &str) -> Result<RunHandle> {
    let resolved = resolve_run_journal(project_root, id)?;
    let loaded = load_journal(&resolved.journal_path)?;
    Ok(RunHandle::from_journal(
        &resolved.run_id,
        &resolved.run_id,
        &loaded.rows,
        chain_head,
    ))
}

/// The run's chain head: the `hmac` of the newest audit entry in `<project>/.sdd/audit` that
/// names `run_id` (see [`crate::audit::head_index`]), `""` when none does.
///
/// # Errors
///
/// [`Error::Io`] when the chain's segments cannot be listed or read.
pub fn run_chain_head(project_root: &Path, run_id: &str) -> Result<String> {
    let audit_dir = project_root.join(".sdd").join("audit");
    head_index::run_head(&audit_dir, run_id).map_err(|err| Error::io("read", &audit_dir, err))
}

/// The Bernstein task id whose run is `run_id` (`task-<id>` with `task_run_id(id) == run_id`).
pub fn task_id_of_run(run_id: &str) -> Option<&str> {
    run_id
        .strip_prefix("task-")
        .filter(|task| !task.is_empty() && task_run_id(task) == run_id)
}

/// `bernstein_run_status`'s projection as this server serves it: resolve `id`, read the
/// journal tolerantly, and embed the run's chain head ([`run_chain_head`]), so two polls of an
/// unchanged run are byte-identical however many other calls were anchored in between.
///
/// With `sealer`, a terminal run of a task whose newest seal does not bind the current status
/// and journal head is sealed first ([`seal_terminal_run`]), so a host's terminal handle is
/// always the sealed one, whoever ended the run.
///
/// # Errors
///
/// As [`resolve_run_journal`], plus [`Error::Io`] when the journal or the chain cannot be read
/// and the chain's errors when a seal cannot be appended.
pub fn poll_run_handle(
    project_root: &Path,
    id: &str,
    sealer: Option<&AuditChain>,
) -> Result<(RunHandle, ResolvedRun)> {
    let resolved = resolve_run_journal(project_root, id)?;
    let audit_dir = project_root.join(".sdd").join("audit");
    // A run polled again and again is parsed once per change of its journal's bytes.
    let mut loaded = load_journal_shared(&resolved.journal_path)?;
    // One catch-up of the index per poll: the seal check and the head read the same state.
    let mut heads = run_heads(&audit_dir, &resolved.run_id)?;
    if let Some(chain) = sealer
        && let Some(task_id) = task_to_seal(&resolved.run_id, &loaded.rows, &heads)
    {
        // Whatever the outcome (sealed here, or by another poller meanwhile), the chain and
        // journal moved since they were read: read both again.
        seal_terminal_run(project_root, chain, task_id)?;
        loaded = load_journal_shared(&resolved.journal_path)?;
        heads = run_heads(&audit_dir, &resolved.run_id)?;
    }
    Ok(project_handle(resolved, &loaded.rows, heads))
}

/// [`poll_run_handle`] when it is brief enough to run on an async worker: it writes nothing,
/// waits for no other poller, and parses no journal over
/// [`crate::run_journal::SHARED_JOURNAL_MAX_BYTES`] (those are parsed again on every poll; one
/// is read, not parsed, and declined, with no `stat` before it). `Ok(None)` when the poll needs
/// more: the journal is larger; another poller is catching the chain's head index up, or
/// catching up would build the index, rebuild it, or read more than [`BRIEF_CATCH_UP_BYTES`]
/// of chain; or, with `may_seal`, the run is terminal and its newest seal does not bind it
/// yet, so [`poll_run_handle`] with a sealer must seal it first. Otherwise the handle is
/// exactly the one [`poll_run_handle`] projects.
///
/// # Errors
///
/// As [`poll_run_handle`], without the seal's.
pub fn poll_run_handle_brief(
    project_root: &Path,
    id: &str,
    may_seal: bool,
) -> Result<Option<(RunHandle, ResolvedRun)>> {
    let resolved = resolve_run_journal(project_root, id)?;
    let Some(loaded) = load_journal_kept(&resolved.journal_path)? else {
        return Ok(None);
    };
    let audit_dir = project_root.join(".sdd").join("audit");
    let Some(heads) = run_heads_brief(&audit_dir, &resolved.run_id)? else {
        return Ok(None);
    };
    if may_seal && task_to_seal(&resolved.run_id, &loaded.rows, &heads).is_some() {
        return Ok(None);
    }
    Ok(Some(project_handle(resolved, &loaded.rows, heads)))
}

/// The task of run `run_id` when its journal `rows` are terminal and its newest seal does not
/// bind them: the poll must seal it before projecting.
fn task_to_seal<'a>(
    run_id: &'a str,
    rows: &[Object],
    heads: &head_index::RunHeads,
) -> Option<&'a str> {
    if !project_task_status(rows).is_terminal() || binds(heads.last_seal.as_ref(), rows) {
        return None;
    }
    task_id_of_run(run_id)
}

/// The handle a poll answers: the journal's projection with the run's chain head.
fn project_handle(
    resolved: ResolvedRun,
    rows: &[Object],
    heads: head_index::RunHeads,
) -> (RunHandle, ResolvedRun) {
    let chain_head = heads.newest.map(|entry| entry.hmac).unwrap_or_default();
    let handle = RunHandle::from_journal(&resolved.run_id, &resolved.run_id, rows, &chain_head);
    (handle, resolved)
}

/// What the process-wide index knows about `run_id` after catching up.
fn run_heads(audit_dir: &Path, run_id: &str) -> Result<head_index::RunHeads> {
    head_index::shared(audit_dir)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .run(run_id)
        .map_err(|err| Error::io("read", audit_dir, err))
}

/// The most a brief read, one answered on an async worker rather than a blocking thread, reads
/// to catch up with other processes' appends: here the chain a brief poll
/// ([`poll_run_handle_brief`]) reads to catch the head index up. Past it the read declines and
/// its caller takes the blocking path.
pub const BRIEF_CATCH_UP_BYTES: u64 = 1 << 20;

/// [`run_heads`] for a brief poll: `None` when another poller holds the index for longer than
/// [`BRIEF_INDEX_WAIT`] (it is catching up at length) or catching up is not brief (see
/// [`head_index::RunHeadIndex::run_within`]).
fn run_heads_brief(audit_dir: &Path, run_id: &str) -> Result<Option<head_index::RunHeads>> {
    run_heads_brief_waiting(audit_dir, run_id, BRIEF_INDEX_WAIT)
}

/// How long a brief poll spins for the head index while another poller holds it. Under many
/// concurrent polls another brief poll (a few microseconds of catching up) is the usual holder,
/// and declining would send the poll to a blocking thread and the full poll, which cost far
/// more; a holder still there after this is taken to be catching up at length, and the poll
/// declines as it always did.
const BRIEF_INDEX_WAIT: std::time::Duration = std::time::Duration::from_micros(50);

/// [`run_heads_brief`], spinning up to `wait` for an index another poller holds.
fn run_heads_brief_waiting(
    audit_dir: &Path,
    run_id: &str,
    wait: std::time::Duration,
) -> Result<Option<head_index::RunHeads>> {
    let index = head_index::shared(audit_dir);
    let deadline = std::time::Instant::now() + wait;
    let mut index = loop {
        match index.try_lock() {
            Ok(index) => break index,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => break poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::hint::spin_loop();
            }
            Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
        }
    };
    index
        .run_within(run_id, BRIEF_CATCH_UP_BYTES)
        .map_err(|err| Error::io("read", audit_dir, err))
}

/// Whether `seal` binds the status and head `rows` project (checked without the journal lock:
/// a quick test before [`seal_terminal_run`] re-checks under it).
fn binds(seal: Option<&head_index::IndexedEntry>, rows: &[Object]) -> bool {
    seal.is_some_and(|seal| {
        seal.status.as_deref() == Some(project_task_status(rows).as_str())
            && seal.journal_head.as_deref() == Some(journal_head(rows).as_str())
    })
}

/// A handle as a client presents it: the fields plus the digests it states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresentedHandle {
    /// The presented fields.
    pub handle: RunHandle,
    /// The stated `receiptHash`, if any.
    pub receipt_hash: Option<String>,
    /// The stated `pollToken`, if any.
    pub poll_token: Option<String>,
    /// The stated `progressHash`, if any.
    pub progress_hash: Option<String>,
}

impl PresentedHandle {
    /// Reads a handle wire body. A `{"result": {...}}` envelope (the cost meter's) is unwrapped.
    /// `specRevision` defaults to [`SPEC_REVISION`] and `traceId` to `""`, as in the reference
    /// verifier.
    ///
    /// # Errors
    ///
    /// [`Error::Malformed`] when the body is not an object, a required string field
    /// (`taskId`, `runId`, `status`, `journalHead`, `chainHead`) is missing, the status is not
    /// a Tasks-extension status, or a carried progress vector is malformed.
    pub fn from_wire(value: &Value) -> Result<PresentedHandle> {
        let malformed = |reason: String| Error::Malformed {
            what: "run handle",
            reason,
        };
        let mut object = value
            .as_object()
            .ok_or_else(|| malformed("the handle is not a JSON object".to_owned()))?;
        if let Some(inner) = object.get("result").and_then(Value::as_object) {
            object = inner;
        }
        let required = |key: &str| -> Result<String> {
            object
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| malformed(format!("{key} must be a string")))
        };
        let optional = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_owned);
        let status_text = required("status")?;
        let status = TaskStatus::from_wire(&status_text).ok_or_else(|| {
            malformed(format!(
                "status {} is not a Tasks-extension status",
                python_str_repr(&status_text)
            ))
        })?;
        let progress = match object.get("progress") {
            None | Some(Value::Null) => None,
            Some(Value::Object(progress)) => Some(ProgressVector::from_wire(progress)?),
            Some(_) => return Err(malformed("progress must be an object or null".to_owned())),
        };
        Ok(PresentedHandle {
            handle: RunHandle {
                task_id: required("taskId")?,
                run_id: required("runId")?,
                status,
                journal_head: required("journalHead")?,
                chain_head: required("chainHead")?,
                spec_revision: optional("specRevision").unwrap_or_else(|| SPEC_REVISION.to_owned()),
                trace_id: optional("traceId").unwrap_or_default(),
                progress,
            },
            receipt_hash: optional("receiptHash"),
            poll_token: optional("pollToken"),
            progress_hash: optional("progressHash"),
        })
    }
}

/// The outcome of a handle check: every problem found, in the reference's wording where the
/// reference has one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandleVerification {
    /// Every mismatch, in check order.
    pub problems: Vec<String>,
}

impl HandleVerification {
    /// No problem was found.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The reference's `(ok, reason)` tuple: the verdict and the first problem.
    pub fn first_problem(&self) -> Option<&str> {
        self.problems.first().map(String::as_str)
    }
}

/// Checks that a presented handle is a faithful projection of the run journal `rows`
/// (`verify_handle`): the status fold, the journal head, the carried progress against the
/// authoritative vector, the stated `progressHash`, the stated `receiptHash` against the
/// re-projected handle, and the stated `pollToken`. Every mismatch is reported.
pub fn verify_handle(
    presented: &PresentedHandle,
    rows: &[Object],
    authoritative_progress: Option<&ProgressVector>,
) -> HandleVerification {
    let handle = &presented.handle;
    let mut problems = Vec::new();
    let expected_status = project_task_status(rows);
    if handle.status != expected_status {
        problems.push(format!(
            "status {} does not match journal projection {}",
            python_str_repr(handle.status.as_str()),
            python_str_repr(expected_status.as_str())
        ));
    }
    let expected_head = journal_head(rows);
    if handle.journal_head != expected_head {
        problems.push("journal_head does not match the run journal".to_owned());
    }
    let carried_hash = handle.progress_hash();
    let mut projected_progress_hash = carried_hash.clone();
    if handle.progress.is_some() {
        match authoritative_progress {
            None => problems.push(
                "handle carries progress but no authoritative progress vector was supplied"
                    .to_owned(),
            ),
            Some(authoritative) => {
                projected_progress_hash = authoritative.vector_hash();
                if carried_hash != projected_progress_hash {
                    problems.push(
                        "progress vector does not match the authoritative projection".to_owned(),
                    );
                }
            }
        }
    }
    if let Some(stated) = &presented.progress_hash
        && *stated != carried_hash
    {
        problems.push("progressHash does not match the carried progress vector".to_owned());
    }
    let projected = RunHandle {
        status: expected_status,
        journal_head: expected_head,
        ..handle.clone()
    };
    match &presented.receipt_hash {
        Some(stated) if *stated == receipt_hash_of(&projected, &projected_progress_hash) => {}
        Some(_) => problems.push("receipt_hash does not match the projected handle".to_owned()),
        None => problems.push("the handle states no receiptHash".to_owned()),
    }
    if let Some(stated) = &presented.poll_token
        && *stated != handle.poll_token()
    {
        problems.push("pollToken does not match the handle identity".to_owned());
    }
    HandleVerification { problems }
}

/// Checks a handle's embedded chain head against the audited run
/// (`verify_handle_chain_head`): the audit chain must verify (`chain_ok`) **and** its current
/// MAC-valid head (reading 1) must equal the embedded head. Because it compares against the
/// *current* head, it fails as soon as anything is appended to the chain after the poll.
pub fn verify_handle_chain_head(
    handle: &RunHandle,
    chain_ok: bool,
    current_chain_head: &str,
) -> HandleVerification {
    let mut problems = Vec::new();
    if !chain_ok {
        problems.push("audit chain does not verify".to_owned());
    }
    if handle.chain_head != current_chain_head {
        problems.push("embedded chain_head does not match the audit chain head".to_owned());
    }
    HandleVerification { problems }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditChain, AuditEvent};
    use crate::key::AuditKey;

    #[test]
    fn a_run_id_names_a_task_only_in_the_form_task_run_id_gives() {
        let check = |run_id: &str, expect: Option<&str>| {
            assert_eq!(task_id_of_run(run_id), expect, "{run_id}");
        };
        check("task-abc", Some("abc"));
        check("task-a.b_c-1", Some("a.b_c-1"));
        check("task-", None);
        check("run-abc", None);
        check("abc", None);
        // `task_run_id("task-x y")` is `task-task-x-y`: the stripped id would map elsewhere.
        check("task-x y", None);
    }

    /// A brief poll finding the head index held waits for it within its bound: with no wait
    /// it declines (`None`) while another poller holds the index, and with room to wait it
    /// answers once the holder lets go.
    #[test]
    fn a_brief_poll_waits_for_a_held_index_only_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let audit = dir.path().join("audit");
        let chain = AuditChain::open(
            &audit,
            crate::key::AuditKey::from_master_bytes(b"k".repeat(64)),
        );
        let entry = chain
            .append(&crate::audit::AuditEvent::new(
                "e",
                "actor",
                "run",
                "r",
                Object::new().with("run_id", "r"),
            ))
            .unwrap();
        let index = head_index::shared(&audit);
        // Built once, so that a brief catch-up does not decline for want of an index.
        index.lock().unwrap().refresh().unwrap();
        let held = index.lock().unwrap();
        assert!(
            run_heads_brief_waiting(&audit, "r", std::time::Duration::ZERO)
                .unwrap()
                .is_none()
        );
        let (started, waiting) = std::sync::mpsc::channel();
        let poller = std::thread::spawn({
            let audit = audit.clone();
            move || {
                started.send(()).unwrap();
                run_heads_brief_waiting(&audit, "r", std::time::Duration::from_secs(60))
            }
        });
        waiting.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(held);
        let heads = poller
            .join()
            .unwrap()
            .unwrap()
            .expect("the index was let go");
        assert_eq!(heads.newest.unwrap().hmac, entry.hmac);
    }

    #[test]
    fn only_the_rules_that_found_a_journal_say_it_exists() {
        let check = |resolution: Resolution, expect: bool| {
            assert_eq!(resolution.journal_exists(), expect, "{resolution:?}");
        };
        check(Resolution::ExistingJournal, true);
        check(Resolution::TaskJournal, true);
        check(Resolution::TaskRunIdWithoutJournal, false);
        check(Resolution::AsGivenWithoutJournal, false);
    }

    #[test]
    fn a_handle_is_terminal_once_its_journal_ends_the_run() {
        let rows = |events: &[&str]| -> Vec<Object> {
            events
                .iter()
                .map(|event| Object::new().with("event", *event))
                .collect()
        };
        let check = |events: &[&str], expect: bool| {
            let handle = RunHandle::from_journal("task-a", "task-a", &rows(events), "");
            assert_eq!(handle.is_terminal(), expect, "{events:?}");
        };
        check(&[], false);
        check(&["run_started"], false);
        check(&["run_started", "input_required"], false);
        check(&["run_started", "task_completed"], true);
        check(&["run_started", "run_failed"], true);
        check(&["run_cancelled"], true);
    }

    #[test]
    fn a_handle_behind_its_journal_fails_on_the_head_and_on_the_receipt() {
        let row =
            |event: &str, hash: &str| Object::new().with("event", event).with("event_hash", hash);
        let rows = vec![row("run_started", "h1"), row("task_progress", "h2")];
        let current = RunHandle::from_journal("task-a", "task-a", &rows, "c");
        let presented = |handle: &RunHandle| {
            PresentedHandle::from_wire(&Value::Object(handle.to_wire_object())).unwrap()
        };
        assert_eq!(
            verify_handle(&presented(&current), &rows, None).problems,
            Vec::<String>::new()
        );
        // Projected before the second row: the same status, an older head, and a receipt
        // hash over that older head, which the handle re-projected on the journal disowns.
        let behind = RunHandle::from_journal("task-a", "task-a", &rows[..1], "c");
        assert_eq!(behind.status, current.status);
        assert_eq!(
            verify_handle(&presented(&behind), &rows, None).problems,
            [
                "journal_head does not match the run journal",
                "receipt_hash does not match the projected handle"
            ]
        );
    }

    #[test]
    fn the_run_chain_head_is_the_newest_entry_naming_the_run() {
        let project = tempfile::tempdir().unwrap();
        assert_eq!(run_chain_head(project.path(), "task-a").unwrap(), "");
        let chain = AuditChain::open(
            project.path().join(".sdd").join("audit"),
            AuditKey::from_master_bytes(b"run-chain-head test key".to_vec()),
        );
        // Each step appends one entry, then reads task-a's head: the newest entry naming it
        // (by its task id, or by its run id), never one of another run.
        let mut head = String::new();
        for (details, names_task_a) in [
            (Object::new().with("task_id", "a"), true),
            (Object::new().with("run_id", "other"), false),
            (Object::new().with("run_id", "task-a"), true),
        ] {
            let appended = chain
                .append(&AuditEvent::new(
                    "test.event",
                    "tester",
                    "thing",
                    "r",
                    details,
                ))
                .unwrap();
            if names_task_a {
                head = appended.hmac;
            }
            assert_eq!(run_chain_head(project.path(), "task-a").unwrap(), head);
        }
        assert_eq!(run_chain_head(project.path(), "task-b").unwrap(), "");
    }

    #[test]
    fn empty_handle_matches_the_reference_vector() {
        // MCP_SURFACE §4.3: id task-does-not-exist, empty heads.
        let handle = RunHandle::from_journal("task-does-not-exist", "task-does-not-exist", &[], "");
        assert_eq!(
            handle.receipt_hash(),
            "fc75ed7d14f1d02791d27e67d32777eae302cec4aacc0c8ea37710119e5a779c"
        );
        assert_eq!(
            handle.poll_token(),
            "eyJydW5faWQiOiJ0YXNrLWRvZXMtbm90LWV4aXN0Iiwic3BlY19yZXZpc2lvbiI6IjIwMjYtMDctMjgiLCJ0YXNrX2lkIjoidGFzay1kb2VzLW5vdC1leGlzdCJ9"
        );
        assert_eq!(handle.status, TaskStatus::Working);
    }

    #[test]
    fn chain_head_check_reports_both_problems() {
        let handle = RunHandle::from_journal("r", "r", &[], "abc");
        assert!(verify_handle_chain_head(&handle, true, "abc").ok());
        let report = verify_handle_chain_head(&handle, false, "def");
        assert_eq!(
            report.problems,
            vec![
                "audit chain does not verify",
                "embedded chain_head does not match the audit chain head"
            ]
        );
    }

    #[test]
    fn wire_round_trip_verifies() {
        let handle = RunHandle::from_journal("r", "r", &[], "abc").with_trace_id("t");
        let presented =
            PresentedHandle::from_wire(&Value::Object(handle.to_wire_object())).unwrap();
        assert_eq!(presented.handle, handle);
        assert!(verify_handle(&presented, &[], None).ok());
        let wrapped = Value::Object(Object::new().with("result", handle.to_wire_object()));
        assert_eq!(PresentedHandle::from_wire(&wrapped).unwrap(), presented);
    }
}
