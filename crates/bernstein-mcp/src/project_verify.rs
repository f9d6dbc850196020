//! `bernstein-mcp verify`: every offline verifier over one project, one report.
//!
//! Each section is one library verifier, run in the order a reader checks evidence: the audit
//! chain first (everything else anchors into it), then run journals and their handles, the
//! mailbox (alone and against the chain), the claim receipts named on the command line, run
//! artifacts with their blobs and spines, the lineage log, context capsules, plans, and the
//! task log against the evidence each of its transactions owes (journal rows, audit events,
//! plan documents), with crash debris at its end. A
//! section that finds nothing to check is present and ok, as in the reference's `verify_dir.py`.
//! A section that cannot run (an unreadable directory, say) fails with the reason; the other
//! sections still run.

use std::path::{Path, PathBuf};

use bernstein_journal::artifacts::{LineageSpine, spine_findings, verify_all_run_artifacts};
use bernstein_journal::audit::{self, AuditChain, VerifyReport};
use bernstein_journal::capsule::{capsules_dir, verify_context_capsule};
use bernstein_journal::claim::verify_claim_receipt_in_project;
use bernstein_journal::durable;
use bernstein_journal::handle;
use bernstein_journal::key::AuditKey;
use bernstein_journal::lineage_log::{AgentCards, LineageProblemKind, verify_lineage};
use bernstein_journal::mailbox::{self, MirrorEvent};
use bernstein_journal::run_journal::{self, runs_dir};
use bernstein_protocol::pyjson::{Object, Value};
use bernstein_tasks::plan::PlanContent;

/// The outcome of one section.
pub(crate) struct Section {
    pub(crate) name: &'static str,
    pub(crate) ok: bool,
    pub(crate) present: bool,
    /// One line per problem, for people.
    pub(crate) problems: Vec<String>,
    /// Things worth knowing that do not fail the section (a mock capsule, a signature that
    /// cannot be checked for want of the signer's card).
    pub(crate) notes: Vec<String>,
    /// The section's machine-readable detail.
    pub(crate) detail: Object,
}

impl Section {
    fn new(name: &'static str) -> Section {
        Section {
            name,
            ok: true,
            present: false,
            problems: Vec::new(),
            notes: Vec::new(),
            detail: Object::new(),
        }
    }

    fn fail(&mut self, problem: impl Into<String>) {
        self.ok = false;
        self.problems.push(problem.into());
    }

    fn to_object(&self) -> Object {
        Object::new()
            .with("ok", self.ok)
            .with("present", self.present)
            .with("problems", self.problems.clone())
            .with("notes", self.notes.clone())
            .with("detail", self.detail.clone())
    }
}

/// How many sections the report has (the array below is typed with it, so it cannot drift).
pub(crate) const SECTION_COUNT: usize = 9;

/// Runs every verifier over the project at `root` (the directory holding `.sdd/`), calling
/// `starting` with each section's name before verifying it.
pub(crate) fn verify_project(
    root: &Path,
    key: &AuditKey,
    receipts: &[PathBuf],
    starting: &mut dyn FnMut(&'static str),
) -> Vec<Section> {
    let sdd = root.join(".sdd");
    let audit_dir = sdd.join("audit");
    let steps: [(&'static str, &dyn Fn() -> Section); SECTION_COUNT] = [
        ("audit", &|| {
            audit_section(&audit_dir, &audit::verify(&audit_dir, key))
        }),
        ("journals", &|| journals_section(root, &audit_dir, key)),
        ("mailbox", &|| mailbox_section(&sdd, key)),
        ("receipts", &|| receipts_section(root, key, receipts)),
        ("artifacts", &|| artifacts_section(root, key)),
        ("lineage_log", &|| lineage_section(root, &sdd, key)),
        ("capsules", &|| capsules_section(root, &audit_dir, key)),
        ("plans", &|| plans_section(&sdd)),
        ("tasks", &|| tasks_section(root, &audit_dir, key)),
    ];
    steps
        .iter()
        .map(|(name, verify)| {
            starting(name);
            verify()
        })
        .collect()
}

/// The whole report as one JSON object: `{"ok", "sections": {name: {...}}}`.
pub(crate) fn report_object(sections: &[Section]) -> Object {
    let mut by_name = Object::new();
    for section in sections {
        by_name.insert(section.name, section.to_object());
    }
    Object::new()
        .with("ok", sections.iter().all(|s| s.ok))
        .with("sections", by_name)
}

fn audit_section(audit_dir: &Path, report: &VerifyReport) -> Section {
    let mut section = Section::new("audit");
    section.present = audit_dir.is_dir();
    for finding in &report.errors {
        section.fail(finding.message.clone());
    }
    for tear in report.unacknowledged_tears() {
        section.fail(tear.describe());
    }
    section.detail = Object::new()
        .with("entries", report.entries)
        .with("verified_entries", report.verified_entries)
        .with("head", report.head.clone())
        .with(
            "tears",
            report
                .tears
                .iter()
                .map(|t| t.describe())
                .collect::<Vec<_>>(),
        );
    section
}

/// The run directories under `.sdd/runs`, sorted, or the reason they cannot be listed.
fn run_ids(root: &Path) -> Result<Vec<String>, String> {
    let dir = runs_dir(root);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let listing = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut ids: Vec<String> = listing
        .flatten()
        .filter(|e| e.path().join(run_journal::JOURNAL_FILENAME).is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    ids.sort();
    Ok(ids)
}

fn journals_section(root: &Path, audit_dir: &Path, key: &AuditKey) -> Section {
    let mut section = Section::new("journals");
    let ids = match run_ids(root) {
        Ok(ids) => ids,
        Err(reason) => {
            section.fail(reason);
            return section;
        }
    };
    section.present = !ids.is_empty();
    for run_id in ids {
        let mut run = Object::new();
        match run_journal::verify_run_journal(root, &run_id) {
            Ok(report) => {
                for error in &report.errors {
                    section.fail(format!("{run_id}: {error}"));
                }
                if report.discarded() > 0 {
                    section.fail(format!(
                        "{run_id}: {} discarded line(s)",
                        report.discarded()
                    ));
                }
                run.insert("ok", report.ok());
                run.insert("rows", report.count);
                run.insert("head", report.journal_head.clone());
            }
            Err(err) => {
                section.fail(format!("{run_id}: {err}"));
                run.insert("ok", false);
            }
        }
        // The handle `bernstein_run_status` would return now (its chain head is the run's own,
        // from the head index), read without sealing: verification never writes.
        if let Ok((handle, _)) = handle::poll_run_handle(root, &run_id, None) {
            run.insert("status", handle.status.as_str());
            run.insert("receipt_hash", handle.receipt_hash());
        }
        check_call_order(root, audit_dir, key, &run_id, &mut section, &mut run);
        section.detail.insert(run_id, run);
    }
    note_recovered_tears(root, &mut section);
    section
}

/// The MCP call order of a run whose journal anchors calls (`mcp.stateless_call` rows), read
/// from the chain and held against the journal. An index used up by a call that never ran (its
/// server stopped between the row and the audit entry) is a note: recorded as abandoned by a
/// later call, or, for the journal's last call row, not recorded yet. Gaps, duplicates and
/// unexplained row counts fail the section; the chain's own findings are the audit section's.
fn check_call_order(
    root: &Path,
    audit_dir: &Path,
    key: &AuditKey,
    run_id: &str,
    section: &mut Section,
    run: &mut Object,
) {
    let Ok(journal) = run_journal::load_run_journal(root, run_id) else {
        return;
    };
    let call_rows: Vec<&Object> = journal
        .rows
        .iter()
        .filter(|row| {
            row.get("event").and_then(Value::as_str)
                == Some(bernstein_mcp_core::STATELESS_CALL_EVENT)
        })
        .collect();
    let Some(last_row) = call_rows.last() else {
        return;
    };
    let rows = call_rows.len();
    let order = bernstein_mcp_core::reconstruct_call_order(audit_dir, key, run_id);
    for problem in &order.problems {
        section.fail(format!("{run_id}: call order: {problem}"));
    }
    for call in &order.abandoned {
        section.notes.push(format!(
            "{run_id}: call_index {} was abandoned (its server stopped before the call's audit \
             entry; the call never ran), recorded at {}:{}",
            call.call_index, call.segment, call.line
        ));
    }
    let recorded = order.calls.len() + order.abandoned.len();
    // Only the journal's last call row can be waiting to be settled by the next call.
    let last_index = match last_row.get("call_index") {
        Some(Value::Int(i)) => i.as_u64(),
        _ => None,
    };
    let last_unrecorded = last_index.filter(|index| {
        !order
            .calls
            .iter()
            .chain(&order.abandoned)
            .any(|call| call.call_index == *index)
    });
    match last_unrecorded {
        Some(index) if rows == recorded + 1 => section.notes.push(format!(
            "{run_id}: call_index {index} has a journal row but no audit entry yet (its server \
             stopped before the entry; the call never ran, and the next call records it as \
             abandoned)"
        )),
        _ if rows != recorded => section.fail(format!(
            "{run_id}: the journal holds {rows} mcp.stateless_call row(s) but the chain records \
             {recorded} call(s)"
        )),
        _ => {}
    }
    run.insert("calls", order.calls.len());
    run.insert(
        "abandoned_calls",
        order
            .abandoned
            .iter()
            .map(|call| call.call_index)
            .collect::<Vec<_>>(),
    );
}

/// The torn tails writers cut from journals and spines (`.sdd/torn_tails.jsonl`). Their bytes
/// were never acknowledged, so each is a note, not a failure; a tear log line that is not a
/// record fails the section.
fn note_recovered_tears(root: &Path, section: &mut Section) {
    match durable::read_tear_log(root) {
        Ok(log) => {
            for tear in &log.tears {
                section
                    .notes
                    .push(format!("recovered tear: {}", tear.describe()));
            }
            if let Some(line) = log.torn_last_line {
                section.notes.push(format!(
                    ".sdd/{}: line {line} is a torn record (its writer died mid-write)",
                    durable::TEAR_LOG_FILE_NAME
                ));
            }
            for (line, reason) in &log.unreadable {
                section.fail(format!(
                    ".sdd/{} line {line}: {reason}",
                    durable::TEAR_LOG_FILE_NAME
                ));
            }
            if !log.tears.is_empty() {
                section.present = true;
                section.detail.insert("recovered_tears", log.tears.len());
            }
        }
        Err(err) => section.fail(err.to_string()),
    }
}

fn mailbox_section(sdd: &Path, key: &AuditKey) -> Section {
    let mut section = Section::new("mailbox");
    let path = mailbox::journal_path(sdd);
    if !path.exists() {
        return section;
    }
    section.present = true;
    let journal = match mailbox::read_journal(&path) {
        Ok(journal) => journal,
        Err(err) => {
            section.fail(err.to_string());
            return section;
        }
    };
    let alone = mailbox::verify_journal(&journal, key.master());
    // The mirrors are the verified `task.mailbox_message` events of the live chain.
    let mut records = audit::verified_records(&sdd.join("audit"), key);
    let mirrors: Vec<MirrorEvent> = records
        .by_ref()
        .filter(|r| r.event_type == mailbox::MIRROR_EVENT_TYPE)
        .filter_map(|r| MirrorEvent::from_details(&r.details))
        .collect();
    let chain = records.finish();
    let chain_problems: Vec<String> = chain.verify_messages();
    let against =
        mailbox::verify_journal_against_chain(&journal, key.master(), &mirrors, &chain_problems);
    for problem in alone.problems.iter().chain(&against.problems) {
        if !section.problems.contains(problem) {
            section.fail(problem.clone());
        }
    }
    section.detail = Object::new()
        .with("entries", alone.entries)
        .with("head", alone.head);
    section
}

fn receipts_section(root: &Path, key: &AuditKey, receipts: &[PathBuf]) -> Section {
    let mut section = Section::new("receipts");
    section.present = !receipts.is_empty();
    for path in receipts {
        let name = path.display().to_string();
        let wire = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| Value::parse(&text).map_err(|e| e.to_string()))
            .and_then(|value| {
                // Accept a bare receipt or a tool result enveloped as `{"result": …}`.
                let object = value.as_object().cloned().ok_or("not a JSON object")?;
                Ok(match object.get("result").and_then(Value::as_object) {
                    Some(inner) => inner.clone(),
                    None => object,
                })
            });
        let report = wire.and_then(|wire| {
            verify_claim_receipt_in_project(root, &wire, key.clone()).map_err(|e| e.to_string())
        });
        match report {
            Ok(report) => {
                for finding in &report.findings {
                    section.fail(format!("{name}: {}", finding.message));
                }
                section.detail.insert(name, report.to_object());
            }
            Err(reason) => section.fail(format!("{name}: {reason}")),
        }
    }
    section
}

fn artifacts_section(root: &Path, key: &AuditKey) -> Section {
    let mut section = Section::new("artifacts");
    match verify_all_run_artifacts(root, key) {
        Ok(report) => {
            section.present = !report.results.is_empty();
            for result in report.results.iter().filter(|r| !r.ok) {
                let what = format!("{}/{} v{}", result.task_id, result.key, result.version);
                section.fail(format!("{what}: {}", result.problems.join("; ")));
            }
            section.detail.insert("checked", report.results.len());
        }
        Err(err) => section.fail(err.to_string()),
    }
    // Every spine on disk, including those no journal row points at any more.
    let lineage = root.join(".sdd").join("lineage");
    let mut spines: Vec<String> = std::fs::read_dir(&lineage)
        .map(|listing| {
            listing
                .flatten()
                .filter(|e| e.path().join("spine.jsonl").is_file())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    spines.sort();
    for run_id in spines {
        section.present = true;
        let spine_file = lineage.join(&run_id).join("spine.jsonl");
        let empty = std::fs::metadata(&spine_file).is_ok_and(|meta| meta.len() == 0);
        match LineageSpine::open(root, &run_id, key).and_then(|spine| spine.verify()) {
            Ok(report) => {
                for error in report.errors.iter().chain(&report.head_findings) {
                    section.fail(format!("spine {run_id}: {error}"));
                }
                // Crash debris of a post killed after its row and before `spine.head`.
                for tear in &report.head_tears {
                    section
                        .notes
                        .push(format!("spine {run_id}: torn post, head behind: {tear}"));
                }
                if empty {
                    // A first post killed after creating the file and before its row: the
                    // file holds no byte, so nothing was recorded, let alone acknowledged.
                    section.notes.push(format!(
                        "spine {run_id}: torn post: the spine file is empty (a first post \
                         stopped before its row; nothing was acknowledged)"
                    ));
                } else if !report.ok() && report.errors.is_empty() {
                    // Intact, but no produced artifact: say which status, so an empty spine a
                    // killed first post left is told from a sealed one.
                    section.fail(format!(
                        "spine {run_id}: status {} (no produced artifact recorded)",
                        report.status.as_str()
                    ));
                }
                section
                    .detail
                    .insert(format!("spine {run_id}"), report.to_object());
            }
            Err(err) => section.fail(format!("spine {run_id}: {err}")),
        }
        // The other direction: spine versions no journal row accounts for, or reused.
        match spine_findings(root, &run_id, key) {
            Ok(findings) => {
                findings.problems.into_iter().for_each(|f| section.fail(f));
                section.notes.extend(findings.tears);
            }
            Err(err) => section.fail(format!("spine {run_id}: {err}")),
        }
    }
    section
}

fn lineage_section(root: &Path, sdd: &Path, key: &AuditKey) -> Section {
    let mut section = Section::new("lineage_log");
    let cards = match AgentCards::load_dir(&sdd.join("agents")) {
        Ok(cards) => cards,
        Err(err) => {
            section.fail(err.to_string());
            return section;
        }
    };
    // An empty artefact path checks the whole log without asking about one artefact.
    match verify_lineage(root, "", key.master(), &cards) {
        Ok(report) => {
            section.present = report.log_present;
            for problem in &report.problems {
                // Without the agent's card a signature cannot be checked either way; the
                // reference does not check signatures at all, so this is a note, not a failure.
                // The operator HMAC over the same entry is still checked.
                if problem.kind == LineageProblemKind::UnknownAgentCard {
                    section.notes.push(problem.message.clone());
                } else {
                    section.fail(problem.message.clone());
                }
            }
            section.detail.insert("entries", report.entries);
        }
        Err(err) => section.fail(err.to_string()),
    }
    section
}

fn capsules_section(root: &Path, audit_dir: &Path, key: &AuditKey) -> Section {
    let mut section = Section::new("capsules");
    let dir = capsules_dir(root);
    let mut task_ids: Vec<String> = std::fs::read_dir(&dir)
        .map(|listing| {
            listing
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter_map(|name| name.strip_suffix(".json").map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    task_ids.sort();
    section.present = !task_ids.is_empty();
    let chain = audit::AuditChain::open(audit_dir, key.clone());
    for task_id in task_ids {
        match verify_context_capsule(root, &chain, &task_id) {
            Ok(report) => {
                // A mock capsule is a test fixture, never evidence: it is reported as such and
                // its verdict stays "not OK", but it does not fail the project, as in the
                // reference's `verify_dir.py`.
                if report.is_mock {
                    section.notes.push(format!("{task_id}: {}", report.reason));
                } else if !report.ok {
                    section.fail(format!("{task_id}: {}", report.reason));
                }
                section.detail.insert(task_id, report.to_wire());
            }
            Err(err) => section.fail(format!("{task_id}: {err}")),
        }
    }
    section
}

fn plans_section(sdd: &Path) -> Section {
    let mut section = Section::new("plans");
    let dir = sdd.join("runtime").join("plans");
    let Ok(listing) = std::fs::read_dir(&dir) else {
        return section;
    };
    let mut files: Vec<PathBuf> = listing
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for path in files {
        section.present = true;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let document = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| Value::parse(&text).map_err(|e| e.to_string()));
        let checked = document.and_then(|doc| {
            let stored = doc
                .as_object()
                .and_then(|o| o.get("rendering_hash"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let content = PlanContent::from_stored(&doc).map_err(|e| e.to_string())?;
            Ok((stored, content.rendering_hash()))
        });
        match checked {
            // Plans created before the hash existed store "" and skip the check, as in the
            // reference.
            Ok((stored, _)) if stored.is_empty() => {
                section.detail.insert(name, Object::new().with("ok", true));
            }
            Ok((stored, current)) if stored == current => {
                section.detail.insert(name, Object::new().with("ok", true));
            }
            Ok((stored, current)) => section.fail(bernstein_tasks::plan::hash_mismatch_message(
                &name, &stored, &current,
            )),
            Err(reason) => section.fail(format!("{name}: {reason}")),
        }
    }
    section
}

/// The task log against the evidence its transactions owe: each gap is reported with the log's
/// file and line and a kind (`missing_journal_row`, `missing_audit_event`, `missing_plan`,
/// `stale_plan`, `unwritten_evidence`, `torn_tail`, ...). A log that cannot be read fails the
/// section with the reason (a corrupt line names its line).
fn tasks_section(root: &Path, audit_dir: &Path, key: &AuditKey) -> Section {
    let mut section = Section::new("tasks");
    let log = root
        .join(".sdd")
        .join("runtime")
        .join(bernstein_tasks::embedded::TASK_LOG_FILE);
    if !log.exists() {
        return section;
    }
    section.present = true;
    let chain = AuditChain::open(audit_dir, key.clone());
    match bernstein_tasks::embedded::verify_task_log(root, Some(&chain)) {
        Ok(gaps) => {
            let mut listed = Vec::new();
            for gap in &gaps {
                section.fail(gap.to_string());
                listed.push(Value::Object(
                    Object::new()
                        .with("file", gap.file.display().to_string())
                        .with("line", gap.line)
                        .with("kind", gap.kind)
                        .with("detail", gap.detail.as_str()),
                ));
            }
            section.detail.insert("gaps", listed);
        }
        Err(err) => section.fail(err.to_string()),
    }
    section
}
