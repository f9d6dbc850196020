//! Writing the evidence of a committed mutation: run-journal rows, then audit events, then a
//! plan document.
//!
//! Evidence is written after the task log holds the change, so a crash can lose evidence of a
//! change but never leave evidence of a change the log does not hold. As in the reference
//! (`_record_claim_receipt`, `_record_release_receipt`: "best-effort, never blocks the
//! transition"), a failed evidence write does not undo or fail the committed change: it is
//! logged and kept in the store's list of [`EvidenceFailure`]s for the caller to surface.
//!
//! **Owed evidence.** What a transaction must write is carried on its last log line
//! (`"evidence": {"journal": [...], "audit": [...], "plan": {...}}`), and a marker line follows
//! once it is all written. A transaction without its marker (the writer died, or a write
//! failed) is replayed under the store lock by the next process that opens the store or
//! mutates it ([`EvidenceSinks::replay`]): each journal row and audit event is looked up first
//! (by task, event and task version) and written only when absent, so replaying twice writes
//! nothing twice. A plan document is only ever moved forward (missing to pending, pending to
//! decided), so an old replay cannot undo a later decision.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bernstein_journal::audit::{AuditChain, AuditEvent};
use bernstein_journal::handle::render_indent2;
use bernstein_journal::run_journal::{HashProfile, JournalWriter, load_run_journal, task_run_id};
use bernstein_protocol::pyjson::{Object, Value};

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

    /// Appends the run-journal rows in order and returns what failed. Journal rows go before
    /// audit events: the run handle a host polls reads them, and the audit chain head it embeds
    /// should not be ahead of the journal it vouches for.
    pub(crate) fn write_rows(&self, rows: &[OwedRow]) -> Vec<EvidenceFailure> {
        let mut failures = Vec::new();
        for row in rows {
            let run_id = task_run_id(&row.task_id);
            let appended = JournalWriter::open(&self.project_root, &run_id, HashProfile::PyJsonV1)
                .and_then(|mut writer| writer.append(&row.event, &row.payload));
            if let Err(e) = appended {
                failures.push(EvidenceFailure {
                    target: format!("run journal {run_id} ({})", row.event),
                    task_id: row.task_id.clone(),
                    message: e.to_string(),
                });
            }
        }
        warn(&failures);
        failures
    }

    /// Appends the audit events in order (when the store has a chain), as one group: one
    /// write and one fsync of the chain for all of them (a group commit's events included),
    /// all or none on disk. Returns what failed: every event, when the group did.
    pub(crate) fn write_events(&self, events: &[AuditEvent]) -> Vec<EvidenceFailure> {
        let mut failures = Vec::new();
        if let Some(chain) = &self.chain
            && let Err(e) = chain.append_many(events)
        {
            failures.extend(events.iter().map(|event| EvidenceFailure {
                target: format!("audit event {}", event.event_type),
                task_id: event.resource_id.clone(),
                message: e.to_string(),
            }));
        }
        warn(&failures);
        failures
    }

    /// Whether these sinks can write everything `owed` lists: audit events need the chain,
    /// which a store opened without a key does not have (it leaves them owed for one that has).
    pub(crate) fn can_settle(&self, owed: &Owed) -> bool {
        self.chain.is_some() || owed.events.is_empty()
    }

    /// Writes whatever of `owed` is not on disk yet (see the module documentation) and returns
    /// what failed.
    pub(crate) fn replay(&self, owed: &Owed, plans_dir: &Path) -> Vec<EvidenceFailure> {
        let rows: Vec<OwedRow> = owed
            .rows
            .iter()
            .filter(|row| !journal_has(&self.project_root, row))
            .cloned()
            .collect();
        let mut failures = self.write_rows(&rows);
        if let Some(chain) = &self.chain
            && !owed.events.is_empty()
        {
            let present = chain_events(chain);
            let missing: Vec<AuditEvent> = owed
                .events
                .iter()
                .filter(|event| !present.contains(&event_identity(event)))
                .cloned()
                .collect();
            failures.extend(self.write_events(&missing));
        }
        if let Some(plan) = &owed.plan
            && let Err(e) = super::plans::write_forward(plans_dir, plan)
        {
            failures.push(plan_failure(plan, &e));
        }
        warn(&failures);
        failures
    }
}

/// The failure of a plan document write.
pub(crate) fn plan_failure(plan: &Object, error: &crate::Error) -> EvidenceFailure {
    EvidenceFailure {
        target: "plan document".to_owned(),
        task_id: plan
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        message: error.to_string(),
    }
}

fn warn(failures: &[EvidenceFailure]) {
    for failure in failures {
        tracing::warn!(
            target: "bernstein_tasks::embedded",
            task_id = %failure.task_id,
            "{} not written after the task change was stored: {}",
            failure.target,
            failure.message
        );
    }
}

/// One owed run-journal row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OwedRow {
    /// The task whose run journal receives the row.
    pub(crate) task_id: String,
    /// The event name.
    pub(crate) event: String,
    /// The payload (`task_id`, `status`, `task_version`, ...).
    pub(crate) payload: Object,
}

impl From<&JournalRow> for OwedRow {
    fn from(row: &JournalRow) -> OwedRow {
        OwedRow {
            task_id: row.task_id.to_string(),
            event: row.event.to_owned(),
            payload: row.payload.clone(),
        }
    }
}

/// Everything one transaction owes.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Owed {
    /// Run-journal rows, in order.
    pub(crate) rows: Vec<OwedRow>,
    /// Audit events, in order.
    pub(crate) events: Vec<AuditEvent>,
    /// The plan document to bring forward to, when the transaction changed a plan.
    pub(crate) plan: Option<Object>,
}

impl Owed {
    /// Whether nothing is owed.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.events.is_empty() && self.plan.is_none()
    }

    /// The `evidence` object of the log line.
    pub(crate) fn to_object(&self) -> Object {
        let mut object = Object::new();
        if !self.rows.is_empty() {
            let rows: Vec<Value> = self
                .rows
                .iter()
                .map(|row| {
                    Value::Object(
                        Object::new()
                            .with("task_id", row.task_id.as_str())
                            .with("event", row.event.as_str())
                            .with("payload", row.payload.clone()),
                    )
                })
                .collect();
            object.insert("journal", rows);
        }
        if !self.events.is_empty() {
            let events: Vec<Value> = self
                .events
                .iter()
                .map(|event| {
                    Value::Object(
                        Object::new()
                            .with("event_type", event.event_type.as_str())
                            .with("actor", event.actor.as_str())
                            .with("resource_type", event.resource_type.as_str())
                            .with("resource_id", event.resource_id.as_str())
                            .with("details", event.details.clone()),
                    )
                })
                .collect();
            object.insert("audit", events);
        }
        if let Some(plan) = &self.plan {
            object.insert("plan", plan.clone());
        }
        object
    }

    /// Reads an `evidence` object back; parts that are not well formed are reported.
    pub(crate) fn from_object(object: &Object) -> Result<Owed, String> {
        let text = |item: &Object, key: &str| -> Result<String, String> {
            item.get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("{key}: must be a string"))
        };
        let items = |key: &str| -> Result<Vec<Object>, String> {
            match object.get(key) {
                None => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|item| {
                        item.as_object()
                            .cloned()
                            .ok_or_else(|| format!("{key}: every item must be an object"))
                    })
                    .collect(),
                Some(_) => Err(format!("{key}: must be a list")),
            }
        };
        let field = |item: &Object, key: &str| -> Result<Object, String> {
            item.get(key)
                .and_then(Value::as_object)
                .cloned()
                .ok_or_else(|| format!("{key}: must be an object"))
        };
        let mut owed = Owed::default();
        for item in items("journal")? {
            owed.rows.push(OwedRow {
                task_id: text(&item, "task_id")?,
                event: text(&item, "event")?,
                payload: field(&item, "payload")?,
            });
        }
        for item in items("audit")? {
            owed.events.push(AuditEvent::new(
                text(&item, "event_type")?,
                text(&item, "actor")?,
                text(&item, "resource_type")?,
                text(&item, "resource_id")?,
                field(&item, "details")?,
            ));
        }
        owed.plan = match object.get("plan") {
            None => None,
            Some(Value::Object(plan)) => Some(plan.clone()),
            Some(_) => return Err("plan: must be an object".to_owned()),
        };
        Ok(owed)
    }
}

/// What tells one task event from another: type, resource and the task version it names
/// (`task.created` names none; a task is created once).
fn event_identity(event: &AuditEvent) -> (String, String, Option<i64>) {
    (
        event.event_type.clone(),
        event.resource_id.clone(),
        event.details.get("task_version").and_then(Value::as_i64),
    )
}

/// The identities of every verified event on `chain`.
fn chain_events(chain: &AuditChain) -> BTreeSet<(String, String, Option<i64>)> {
    chain
        .verified_records()
        .map(|record| {
            (
                record.event_type,
                record.resource_id,
                record.details.get("task_version").and_then(Value::as_i64),
            )
        })
        .collect()
}

/// Whether the task's run journal already holds `row` (same event, same task version).
fn journal_has(project_root: &Path, row: &OwedRow) -> bool {
    let version = row.payload.get("task_version");
    load_run_journal(project_root, &task_run_id(&row.task_id)).is_ok_and(|journal| {
        journal.rows.iter().any(|found| {
            found.get("event").and_then(Value::as_str) == Some(row.event.as_str())
                && found.get("task_version") == version
        })
    })
}

/// A gap between the task log and the evidence it owes, found by [`verify_task_log`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceGap {
    /// The file the gap is in (`.sdd/runtime/tasks.jsonl`, or the backlog).
    pub file: PathBuf,
    /// 1-based line of the transaction's last record (see `kind` for the backlog).
    pub line: u64,
    /// `missing_journal_row`, `missing_audit_event`, `missing_plan`, `stale_plan`,
    /// `unreadable_plan`, `unwritten_evidence` (no marker yet), `malformed_evidence`,
    /// `torn_tail`, `stale_backlog`, `unreadable_backlog` or `unadoptable_backlog_row` (for the
    /// backlog, `line` is the 1-based row, or 0 for the whole file).
    pub kind: &'static str,
    /// What exactly is missing, for people.
    pub detail: String,
}

impl std::fmt::Display for EvidenceGap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file.display(),
            self.line,
            self.kind,
            self.detail
        )
    }
}

/// Checks every transaction's owed evidence against the run journals, the audit chain (when
/// `chain` is given) and the plan documents, without writing anything.
pub(crate) fn check_history(
    log_path: &Path,
    history: &[super::log::OwedEvidence],
    owed_now: &[super::log::OwedEvidence],
    project_root: &Path,
    chain: Option<&AuditChain>,
    plans_dir: &Path,
) -> Vec<EvidenceGap> {
    let mut gaps = Vec::new();
    let gap = |line: u64, kind: &'static str, detail: String| EvidenceGap {
        file: log_path.to_path_buf(),
        line,
        kind,
        detail,
    };
    let present = chain.map(chain_events);
    for entry in history {
        let owed = match Owed::from_object(&entry.evidence) {
            Ok(owed) => owed,
            Err(problem) => {
                gaps.push(gap(entry.line, "malformed_evidence", problem));
                continue;
            }
        };
        if owed_now.iter().any(|o| o.end == entry.end) {
            gaps.push(gap(
                entry.line,
                "unwritten_evidence",
                "no marker says this transaction's evidence was written".to_owned(),
            ));
        }
        for row in &owed.rows {
            if !journal_has(project_root, row) {
                gaps.push(gap(
                    entry.line,
                    "missing_journal_row",
                    format!(
                        "{} of task {} (task_version {}) is not in .sdd/runs/{}/journal.jsonl",
                        row.event,
                        row.task_id,
                        row.payload
                            .get("task_version")
                            .map(Value::to_python_str)
                            .unwrap_or_default(),
                        task_run_id(&row.task_id)
                    ),
                ));
            }
        }
        if let Some(present) = &present {
            for event in &owed.events {
                if !present.contains(&event_identity(event)) {
                    gaps.push(gap(
                        entry.line,
                        "missing_audit_event",
                        format!(
                            "{} of {} is not on the audit chain",
                            event.event_type, event.resource_id
                        ),
                    ));
                }
            }
        }
        if let Some(plan) = &owed.plan
            && let Some(problem) = super::plans::behind(plans_dir, plan)
        {
            gaps.push(gap(entry.line, problem.0, problem.1));
        }
    }
    gaps
}

/// Renders a plan object as its document text.
pub(crate) fn plan_text(plan: &Object) -> String {
    render_indent2(&Value::Object(plan.clone()))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use bernstein_journal::key::AuditKey;

    use super::*;
    use crate::embedded::log::OwedEvidence;
    use crate::embedded::plans;

    /// What the test subscriber wrote, shared so that the test can read it back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Each evidence failure reaches the operator as a warning naming what was not written,
    /// the task, and why.
    #[test]
    fn each_evidence_failure_is_logged_as_a_warning() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            warn(&[EvidenceFailure {
                target: "audit event task.created".to_owned(),
                task_id: "abc".to_owned(),
                message: "disk full".to_owned(),
            }]);
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("WARN"), "{text}");
        assert!(text.contains("task_id=abc"), "{text}");
        assert!(
            text.contains(
                "audit event task.created not written after the task change was stored: disk full"
            ),
            "{text}"
        );
    }

    /// A gap reads as `file:line: kind: detail`, as compilers and `grep -n` print places.
    #[test]
    fn a_gap_reads_as_file_line_kind_detail() {
        let gap = EvidenceGap {
            file: PathBuf::from(".sdd/runtime/tasks.jsonl"),
            line: 7,
            kind: "missing_plan",
            detail: "plan p is not in .sdd/plans".to_owned(),
        };
        assert_eq!(
            gap.to_string(),
            ".sdd/runtime/tasks.jsonl:7: missing_plan: plan p is not in .sdd/plans"
        );
    }

    /// Sinks over a fresh project whose audit chain lives in `.sdd/audit`.
    fn project() -> (tempfile::TempDir, EvidenceSinks) {
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_master_bytes(b"evidence test key".to_vec());
        let chain = AuditChain::open(dir.path().join(".sdd/audit"), key);
        let sinks = EvidenceSinks::new(dir.path(), Some(chain));
        (dir, sinks)
    }

    /// A run-journal row owed for version `task_version` of task `task_id`.
    fn row(task_id: &str, event: &str, task_version: i64) -> OwedRow {
        OwedRow {
            task_id: task_id.to_owned(),
            event: event.to_owned(),
            payload: Object::new()
                .with("task_id", task_id)
                .with("task_version", task_version),
        }
    }

    /// An audit event about task `task_id`, naming `task_version` when given.
    fn event(event_type: &str, task_id: &str, task_version: Option<i64>) -> AuditEvent {
        let mut details = Object::new();
        if let Some(version) = task_version {
            details.insert("task_version", version);
        }
        AuditEvent::new(event_type, "task_server", "task", task_id, details)
    }

    /// The smallest plan object a plan document can be written from.
    fn plan(id: &str, status: &str) -> Object {
        Object::new().with("id", id).with("status", status)
    }

    /// The event and task version of every row in the run journal of `task_id`, in order.
    fn journal_rows(project_root: &Path, task_id: &str) -> Vec<(String, i64)> {
        let Ok(journal) = load_run_journal(project_root, &task_run_id(task_id)) else {
            return Vec::new();
        };
        journal
            .rows
            .iter()
            .map(|found| {
                (
                    found
                        .get("event")
                        .and_then(Value::as_str)
                        .unwrap()
                        .to_owned(),
                    found.get("task_version").and_then(Value::as_i64).unwrap(),
                )
            })
            .collect()
    }

    /// The identity of every event on the chain, in order, repeats included.
    fn chain_identities(sinks: &EvidenceSinks) -> Vec<(String, String, Option<i64>)> {
        sinks
            .chain()
            .unwrap()
            .verified_records()
            .map(|record| {
                (
                    record.event_type,
                    record.resource_id,
                    record.details.get("task_version").and_then(Value::as_i64),
                )
            })
            .collect()
    }

    /// What tells one audit event from another, as `event_identity` builds it.
    fn identity(
        event_type: &str,
        task_id: &str,
        version: Option<i64>,
    ) -> (String, String, Option<i64>) {
        (event_type.to_owned(), task_id.to_owned(), version)
    }

    /// Replay writes the rows and events that are not on disk yet, tells them apart by event,
    /// task and task version, brings the plan document forward, and writes nothing twice.
    #[test]
    fn replay_writes_only_what_is_missing_and_nothing_twice() {
        let (dir, sinks) = project();
        let plans_dir = dir.path().join(".sdd/runtime/plans");
        assert_eq!(sinks.write_rows(&[row("abc", "task.created", 1)]), []);
        assert_eq!(
            sinks.write_events(&[event("task.created", "abc", None)]),
            []
        );
        // Each missing row or event shares its event, task or version with one on disk, so
        // only the full identity tells it apart.
        let owed = Owed {
            rows: vec![
                row("abc", "task.created", 1),
                row("abc", "task.claimed", 1),
                row("abc", "task.created", 2),
            ],
            events: vec![
                event("task.created", "abc", None),
                event("task.claimed", "abc", Some(1)),
                event("task.claimed", "abc", Some(2)),
                event("task.claimed", "def", Some(1)),
            ],
            plan: Some(plan("86fb98ac29f1", "approved")),
        };
        for attempt in ["first", "second"] {
            assert_eq!(sinks.replay(&owed, &plans_dir), [], "{attempt} replay");
            assert_eq!(
                journal_rows(dir.path(), "abc"),
                [
                    ("task.created".to_owned(), 1),
                    ("task.claimed".to_owned(), 1),
                    ("task.created".to_owned(), 2),
                ],
                "{attempt} replay"
            );
            assert_eq!(
                chain_identities(&sinks),
                [
                    identity("task.created", "abc", None),
                    identity("task.claimed", "abc", Some(1)),
                    identity("task.claimed", "abc", Some(2)),
                    identity("task.claimed", "def", Some(1)),
                ],
                "{attempt} replay"
            );
            let stored = plans::read(&plans_dir, "86fb98ac29f1").unwrap();
            assert_eq!(stored.status.as_str(), "approved", "{attempt} replay");
        }
    }

    /// Every part replay cannot write is returned as a failure naming what and which task:
    /// here the run directory, the audit directory and the plan document are all in the way.
    #[test]
    fn replay_reports_each_evidence_it_could_not_write() {
        let (dir, sinks) = project();
        std::fs::create_dir(dir.path().join(".sdd")).unwrap();
        std::fs::write(dir.path().join(".sdd/runs"), "").unwrap();
        std::fs::write(dir.path().join(".sdd/audit"), "").unwrap();
        let plans_dir = dir.path().join("plans");
        std::fs::create_dir_all(plans_dir.join("86fb98ac29f1.json")).unwrap();
        let owed = Owed {
            rows: vec![row("abc", "task.created", 1)],
            events: vec![
                event("task.created", "abc", None),
                event("task.claimed", "abc", Some(1)),
            ],
            plan: Some(plan("86fb98ac29f1", "approved")),
        };
        let failures = sinks.replay(&owed, &plans_dir);
        let named: Vec<(&str, &str)> = failures
            .iter()
            .map(|f| (f.target.as_str(), f.task_id.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("run journal task-abc (task.created)", "abc"),
                ("audit event task.created", "abc"),
                ("audit event task.claimed", "abc"),
                ("plan document", "86fb98ac29f1"),
            ]
        );
        for failure in &failures {
            assert!(!failure.message.is_empty(), "{failure:?}");
        }
    }

    /// Sinks without a chain write no audit events, so they can settle only what owes none.
    #[test]
    fn only_sinks_with_a_chain_can_settle_audit_events() {
        let (dir, with_chain) = project();
        let without_chain = EvidenceSinks::new(dir.path(), None);
        assert_eq!(
            with_chain.chain().map(AuditChain::dir),
            Some(dir.path().join(".sdd/audit").as_path())
        );
        assert!(without_chain.chain().is_none());
        let no_events = Owed {
            rows: vec![row("abc", "task.created", 1)],
            ..Owed::default()
        };
        let events = Owed {
            events: vec![event("task.created", "abc", None)],
            ..Owed::default()
        };
        for (sinks, owed, expect) in [
            (&with_chain, &no_events, true),
            (&with_chain, &events, true),
            (&without_chain, &no_events, true),
            (&without_chain, &events, false),
        ] {
            assert_eq!(
                sinks.can_settle(owed),
                expect,
                "chain: {}, events: {}",
                sinks.chain().is_some(),
                owed.events.len()
            );
        }
    }

    /// An owed part of any kind makes the evidence non-empty, and every part survives the
    /// trip through the log line's `evidence` object.
    #[test]
    fn owed_evidence_round_trips_through_its_log_object() {
        let rows = Owed {
            rows: vec![row("abc", "task.created", 1)],
            ..Owed::default()
        };
        let events = Owed {
            events: vec![event("task.claimed", "abc", Some(2))],
            ..Owed::default()
        };
        let plans = Owed {
            plan: Some(plan("86fb98ac29f1", "pending")),
            ..Owed::default()
        };
        let all = Owed {
            rows: rows.rows.clone(),
            events: events.events.clone(),
            plan: plans.plan.clone(),
        };
        for (owed, empty, keys) in [
            (&Owed::default(), true, &[][..]),
            (&rows, false, &["journal"][..]),
            (&events, false, &["audit"][..]),
            (&plans, false, &["plan"][..]),
            (&all, false, &["journal", "audit", "plan"][..]),
        ] {
            assert_eq!(owed.is_empty(), empty, "{owed:?}");
            let object = owed.to_object();
            assert_eq!(object.keys().collect::<Vec<_>>(), keys, "{owed:?}");
            assert_eq!(Owed::from_object(&object).as_ref(), Ok(owed));
        }
    }

    /// An `evidence` object that is not well formed is refused with the part that is wrong.
    #[test]
    fn malformed_evidence_names_what_is_wrong() {
        let check = |evidence: &str, expect: &str| {
            let value = Value::parse(evidence).unwrap();
            assert_eq!(
                Owed::from_object(value.as_object().unwrap()),
                Err(expect.to_owned()),
                "{evidence}"
            );
        };
        check(r#"{"journal": 1}"#, "journal: must be a list");
        check(r#"{"audit": [1]}"#, "audit: every item must be an object");
        check(
            r#"{"journal": [{"task_id": "a", "event": "e"}]}"#,
            "payload: must be an object",
        );
        check(
            r#"{"audit": [{"event_type": 1}]}"#,
            "event_type: must be a string",
        );
        check(r#"{"plan": []}"#, "plan: must be an object");
    }

    /// The history check reports, per transaction line, evidence without its marker, rows not
    /// in the run journal, events not on the chain (only when a chain is given), plan documents
    /// behind the log, and evidence it cannot read; evidence that is all on disk is no gap.
    #[test]
    fn the_history_check_reports_each_missing_piece_of_evidence() {
        let (dir, sinks) = project();
        let plans_dir = dir.path().join(".sdd/runtime/plans");
        let log_path = dir.path().join(".sdd/runtime/tasks.jsonl");
        let written = Owed {
            rows: vec![row("abc", "task.created", 1)],
            events: vec![event("task.created", "abc", None)],
            plan: Some(plan("86fb98ac29f1", "pending")),
        };
        assert_eq!(sinks.replay(&written, &plans_dir), []);
        let unwritten = Owed {
            rows: vec![row("abc", "task.claimed", 2)],
            events: vec![event("task.claimed", "abc", Some(2))],
            plan: Some(plan("000000000002", "approved")),
        };
        let entry = |line: u64, evidence: Object| OwedEvidence {
            end: line * 100,
            line,
            evidence,
        };
        let history = [
            entry(1, written.to_object()),
            entry(2, unwritten.to_object()),
            entry(3, Object::new().with("journal", 1)),
        ];
        let owed_now = [history[1].clone()];
        let missing_plan = format!(
            "plan document {} does not exist",
            plans_dir.join("000000000002.json").display()
        );
        let expected = [
            (
                2,
                "unwritten_evidence",
                "no marker says this transaction's evidence was written",
            ),
            (
                2,
                "missing_journal_row",
                "task.claimed of task abc (task_version 2) is not in \
                 .sdd/runs/task-abc/journal.jsonl",
            ),
            (
                2,
                "missing_audit_event",
                "task.claimed of abc is not on the audit chain",
            ),
            (2, "missing_plan", missing_plan.as_str()),
            (3, "malformed_evidence", "journal: must be a list"),
        ];
        for chain in [sinks.chain(), None] {
            let gaps = check_history(
                &log_path,
                &history,
                &owed_now,
                dir.path(),
                chain,
                &plans_dir,
            );
            assert!(gaps.iter().all(|gap| gap.file == log_path), "{gaps:?}");
            let found: Vec<(u64, &str, &str)> = gaps
                .iter()
                .map(|gap| (gap.line, gap.kind, gap.detail.as_str()))
                .collect();
            let wanted: Vec<(u64, &str, &str)> = expected
                .iter()
                .copied()
                .filter(|(_, kind, _)| chain.is_some() || *kind != "missing_audit_event")
                .collect();
            assert_eq!(found, wanted, "chain: {}", chain.is_some());
        }
    }
}
