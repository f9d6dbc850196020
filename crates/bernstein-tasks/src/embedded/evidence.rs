//! Writing the evidence of a committed mutation: run-journal rows, then audit events.
//!
//! Evidence is written after the task log holds the change, so a crash can lose evidence of a
//! change but never leave evidence of a change the log does not hold. As in the reference
//! (`_record_claim_receipt`, `_record_release_receipt`: "best-effort, never blocks the
//! transition"), a failed evidence write does not undo or fail the committed change: it is
//! logged and kept in the store's list of [`EvidenceFailure`]s for the caller to surface.

use std::path::{Path, PathBuf};

use bernstein_journal::audit::{AuditChain, AuditEvent};
use bernstein_journal::run_journal::{HashProfile, JournalWriter, task_run_id};

use super::txn::JournalRow;

/// Evidence that could not be written for a change the task log already holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceFailure {
    /// What was being written (`run journal task-abc` or `audit event task.created`).
    pub target: String,
    /// The task the evidence was about.
    pub task_id: String,
    /// Why it failed.
    pub message: String,
}

/// The evidence sinks of one project.
#[derive(Debug, Clone)]
pub(crate) struct EvidenceSinks {
    project_root: PathBuf,
    chain: Option<AuditChain>,
}

impl EvidenceSinks {
    /// Sinks under `project_root`; audit events are written only when a chain is given.
    pub(crate) fn new(project_root: &Path, chain: Option<AuditChain>) -> EvidenceSinks {
        EvidenceSinks {
            project_root: project_root.to_path_buf(),
            chain,
        }
    }

    /// The audit chain, if the store writes one.
    pub(crate) fn chain(&self) -> Option<&AuditChain> {
        self.chain.as_ref()
    }

    /// Writes every row and event in order and returns what failed. Journal rows go first: the
    /// run handle a host polls reads them, and the audit chain head it embeds should not be
    /// ahead of the journal it vouches for.
    pub(crate) fn write(&self, rows: &[JournalRow], events: &[AuditEvent]) -> Vec<EvidenceFailure> {
        let mut failures = Vec::new();
        for row in rows {
            let run_id = task_run_id(row.task_id.as_str());
            let appended = JournalWriter::open(&self.project_root, &run_id, HashProfile::PyJsonV1)
                .and_then(|mut writer| writer.append(row.event, &row.payload));
            if let Err(e) = appended {
                failures.push(EvidenceFailure {
                    target: format!("run journal {run_id} ({})", row.event),
                    task_id: row.task_id.to_string(),
                    message: e.to_string(),
                });
            }
        }
        if let Some(chain) = &self.chain {
            for event in events {
                if let Err(e) = chain.append(event) {
                    failures.push(EvidenceFailure {
                        target: format!("audit event {}", event.event_type),
                        task_id: event.resource_id.clone(),
                        message: e.to_string(),
                    });
                }
            }
        }
        for failure in &failures {
            tracing::warn!(
                target: "bernstein_tasks::embedded",
                task_id = %failure.task_id,
                "{} not written after the task change was stored: {}",
                failure.target,
                failure.message
            );
        }
        failures
    }
}
