//! Verifying a run handle against the audited run, in a busy project.
//!
//! The reference's `verify_handle_chain_head` compares a handle's `chainHead` with the chain's
//! *current* head, so it fails as soon as anything is appended after the poll.
//! [`verify_handle_chain`] checks instead what the handle claims: that its `chainHead` is an
//! entry of a verifying chain that names the run. So it keeps verifying after any number of
//! unrelated appends, and reports (without failing) whether later entries name the run: the
//! handle is then genuine but stale.
//!
//! Checks, every failure reported (none stops the others):
//!
//! 1. the audit chain verifies (every hard error and unacknowledged tear is listed with its
//!    segment and line);
//! 2. a verified entry has `hmac == chainHead` and names the run (`""` is accepted only as
//!    "no entry named the run when it was polled");
//! 3. every seal (`mcp.task_handle`) of the run states the run's head before it
//!    (`chain_head`) and a `receipt_hash` that recomputes from its own fields; a seal that does
//!    not is reported at its segment and line;
//! 4. when the entry at `chainHead` is a seal, its `status` and `journal_head` equal the
//!    handle's;
//! 5. `status` and `journalHead` re-project from the run journal, `receiptHash` recomputes,
//!    and `pollToken` matches ([`super::verify_handle`]).

use std::path::Path;

use bernstein_protocol::pyjson::{Object, Value};

use super::{PresentedHandle, RunHandle, TaskStatus, verify_handle};
use crate::Result;
use crate::audit::head_index::{EVENT_TASK_HANDLE, named_runs};
use crate::audit::{VerifyReport, verified_records};
use crate::key::AuditKey;
use crate::run_journal::{load_journal, run_journal_path};

/// Where the entry a handle's `chainHead` names sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHeadEntry {
    /// The segment file name.
    pub segment: String,
    /// The 1-based line in the segment.
    pub line: u64,
    /// The entry's `event_type`.
    pub event_type: String,
    /// Whether it is the run's terminal seal.
    pub seal: bool,
}

/// The outcome of [`verify_handle_chain`].
#[derive(Debug, Clone)]
pub struct HandleChainReport {
    /// The handle that was checked.
    pub handle: RunHandle,
    /// The audit chain's verification.
    pub chain: VerifyReport,
    /// The verified entry at `chainHead`, when there is one.
    pub chain_head_entry: Option<ChainHeadEntry>,
    /// Verified entries naming the run after the `chainHead` entry (all of them when the
    /// handle's `chainHead` is `""`).
    pub later_entries: u64,
    /// Seals of the run in the chain.
    pub seals: u64,
    /// Every problem found; empty when the handle verifies.
    pub problems: Vec<String>,
}

impl HandleChainReport {
    /// Whether the handle verifies.
    pub fn verified(&self) -> bool {
        self.problems.is_empty()
    }

    /// Whether later entries name the run (the handle is genuine but no longer the newest).
    pub fn stale(&self) -> bool {
        self.later_entries > 0
    }
}

fn detail<'a>(details: &'a Object, key: &str) -> &'a str {
    details.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Checks `presented` against the journal under `project_root` and the audit chain in
/// `<project>/.sdd/audit` (see the module docs). Never writes.
///
/// # Errors
///
/// [`crate::Error::InvalidRunId`] / [`crate::Error::Containment`] when the handle's run id
/// cannot name a journal, [`crate::Error::Io`] when the journal exists but cannot be read.
pub fn verify_handle_chain(
    project_root: &Path,
    key: &AuditKey,
    presented: &PresentedHandle,
) -> Result<HandleChainReport> {
    let handle = &presented.handle;
    let run_id = handle.run_id.as_str();
    let rows = load_journal(&run_journal_path(project_root, run_id)?)?.rows;
    let mut problems = Vec::new();

    let audit_dir = project_root.join(".sdd").join("audit");
    let mut records = verified_records(&audit_dir, key);
    let mut chain_head_entry = None;
    let mut later_entries = 0u64;
    let mut seals = 0u64;
    let mut previous_head = String::new();
    for record in records.by_ref() {
        let names_run = named_runs(&record.event_type, Some(&record.details))
            .iter()
            .any(|named| named == run_id);
        if record.hmac == handle.chain_head && !handle.chain_head.is_empty() {
            if names_run {
                chain_head_entry = Some(ChainHeadEntry {
                    segment: record.segment.clone(),
                    line: record.line,
                    event_type: record.event_type.clone(),
                    seal: record.event_type == EVENT_TASK_HANDLE,
                });
            } else {
                problems.push(format!(
                    "{}:{}: the entry at chainHead ({}) does not name run {run_id}",
                    record.segment, record.line, record.event_type
                ));
            }
        } else if names_run && (chain_head_entry.is_some() || handle.chain_head.is_empty()) {
            later_entries += 1;
        }
        if !names_run {
            continue;
        }
        if record.event_type == EVENT_TASK_HANDLE {
            seals += 1;
            let at = format!("{}:{}", record.segment, record.line);
            let details = &record.details;
            let stated_head = detail(details, "chain_head");
            if stated_head != previous_head {
                problems.push(format!(
                    "{at}: seal states chain_head {stated_head:?}, but the run's head before it \
                     is {previous_head:?}"
                ));
            }
            let status = TaskStatus::from_wire(detail(details, "status"));
            match status {
                Some(status) if status.is_terminal() => {
                    let sealed = RunHandle {
                        task_id: run_id.to_owned(),
                        run_id: run_id.to_owned(),
                        status,
                        journal_head: detail(details, "journal_head").to_owned(),
                        chain_head: stated_head.to_owned(),
                        spec_revision: detail(details, "spec_revision").to_owned(),
                        trace_id: detail(details, "trace_id").to_owned(),
                        progress: None,
                    };
                    if sealed.receipt_hash() != detail(details, "receipt_hash") {
                        problems.push(format!(
                            "{at}: seal receipt_hash does not recompute from its fields"
                        ));
                    }
                }
                _ => problems.push(format!(
                    "{at}: seal status {:?} is not a terminal status",
                    detail(details, "status")
                )),
            }
            if record.hmac == handle.chain_head {
                if detail(details, "status") != handle.status.as_str() {
                    problems.push(format!(
                        "{at}: seal status {:?} differs from the handle's {:?}",
                        detail(details, "status"),
                        handle.status.as_str()
                    ));
                }
                if detail(details, "journal_head") != handle.journal_head {
                    problems.push(format!(
                        "{at}: seal journal_head {:?} differs from the handle's {:?}",
                        detail(details, "journal_head"),
                        handle.journal_head
                    ));
                }
            }
        }
        previous_head = record.hmac.clone();
    }
    let chain = records.finish();
    if !chain.ok() {
        problems.push("audit chain does not verify".to_owned());
        problems.extend(chain.verify_messages());
    }
    if !handle.chain_head.is_empty() && chain_head_entry.is_none() {
        problems.push(format!(
            "chainHead {} is not the hmac of a verified audit entry naming run {run_id}",
            handle.chain_head
        ));
    }
    for problem in verify_handle(presented, &rows, None).problems {
        problems.push(format!("handle: {problem}"));
    }
    Ok(HandleChainReport {
        handle: handle.clone(),
        chain,
        chain_head_entry,
        later_entries,
        seals,
        problems,
    })
}
