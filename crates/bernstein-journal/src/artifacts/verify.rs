//! Reading `artifact_posted` rows and verifying run artifacts (the reference's
//! `verify_run_artifacts` and `verify_all_run_artifacts`, the `audit verify` artifact pillar).
//!
//! Per `artifact_posted` row of a task journal:
//!
//! 1. the task journal's chain is consistent and the reader discarded no line;
//! 2. the blob at the row's content address exists and rehashes to it;
//! 3. the task's lineage spine verifies (status `ok`);
//! 4. the spine holds the row's `spine_entry_hash`, binding the same content hash;
//! 5. a finding's stored content is what its SARIF result normalises to, and a report's
//!    finding references still match the findings they cite.
//!
//! Each result carries the reference's `reason` (the first failing check, in its words, so
//! verdicts compare with the oracle) and `problems`, every failing check. An invalid journal
//! that shows no artifact row still fails, because tampering can hide rows.
//!
//! The other direction, which the reference does not check, is reported separately
//! ([`spine_findings`], [`TaskArtifactsReport::spine_findings`]) so the per-row verdicts stay
//! comparable with the oracle: every `artifact:<key>:v<N>` spine entry must be named by exactly
//! one `artifact_posted` row, and no `artifact:<key>:v<N>` may appear twice. A post that died
//! between its spine entry and its journal row leaves such an orphan; the evidence then claims a
//! version nobody acknowledged, and the verdict says so.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bernstein_protocol::pyjson::{Object, Value};

use super::blobs::{BlobState, BlobStore, content_address};
use super::content::verify_finding_blob;
use super::pyint::python_int_i64;
use super::spine::{LineageSpine, SpineEntry, SpineVerification};
use crate::audit::python_str;
use crate::key::AuditKey;
use crate::mailbox::validate_task_id;
use crate::run_journal::{
    JournalVerification, LoadedJournal, load_journal, python_str_repr, run_journal_path, runs_dir,
    task_run_id, verify_loaded,
};
use crate::{Error, Result};

/// The journal event an artifact post appends.
pub const ARTIFACT_POSTED_EVENT: &str = "artifact_posted";

/// The journal event that marks a task's artifacts as produced by a stateful agent.
pub const PERSISTENT_AGENT_STEP_EVENT: &str = "persistent_agent_step";

/// The `journal_identity` every result carries: no external seal of the complete task journal
/// exists in 3.23, so its identity is never established (the reference's `unverifiable`).
pub const JOURNAL_IDENTITY_UNVERIFIABLE: &str = "unverifiable";

/// One artifact version's chain-anchored record (the reference's `RunArtifactRecord`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactRecord {
    /// The task the artifact is bound to.
    pub task_id: String,
    /// The artifact slot.
    pub key: String,
    /// `report`, `table`, `link` or `finding`.
    pub artifact_type: String,
    /// `sha256:<hex>` of the stored content bytes.
    pub content_hash: String,
    /// 1-based version within the key.
    pub version: i64,
    /// The prior version's `spine_entry_hash`, or `""`.
    pub prev_version_hash: String,
    /// This version's spine entry hash: its identity.
    pub spine_entry_hash: String,
    /// 0-based index of the anchoring journal row.
    pub journal_index: i64,
    /// The anchoring journal row's `event_hash`.
    pub journal_event_hash: String,
    /// The declared kind of a link, else `""`.
    pub link_kind: String,
    /// Bytes stored for this version.
    pub size: i64,
}

impl ArtifactRecord {
    /// The record in the reference's key order (`RunArtifactRecord.to_dict`).
    pub fn to_object(&self) -> Object {
        Object::new()
            .with("task_id", self.task_id.as_str())
            .with("key", self.key.as_str())
            .with("artifact_type", self.artifact_type.as_str())
            .with("content_hash", self.content_hash.as_str())
            .with("version", self.version)
            .with("prev_version_hash", self.prev_version_hash.as_str())
            .with("spine_entry_hash", self.spine_entry_hash.as_str())
            .with("journal_index", self.journal_index)
            .with("journal_event_hash", self.journal_event_hash.as_str())
            .with("link_kind", self.link_kind.as_str())
            .with("size", self.size)
    }

    /// The reference's `key='…' version=N index=M` locator used in every reason.
    fn locator(&self) -> String {
        format!(
            "key={} version={} index={}",
            python_str_repr(&self.key),
            self.version,
            self.journal_index
        )
    }
}

/// Reads a record from a journal row the way the reference's `_row_to_record` does
/// (`str()` of text fields, `int()` of numbers); a number Python's `int()` refuses reads as 0
/// and is named in the returned problems.
pub(crate) fn record_from_row(row: &Object) -> (ArtifactRecord, Vec<String>) {
    let mut problems = Vec::new();
    let text = |name: &str| row.get(name).map(python_str).unwrap_or_default();
    let mut number = |name: &str| match row.get(name) {
        None => 0,
        Some(value) => python_int_i64(value).unwrap_or_else(|| {
            problems.push(format!("artifact row field {name} is not an integer"));
            0
        }),
    };
    let version = number("version");
    let journal_index = number("index");
    let size = number("size");
    let record = ArtifactRecord {
        task_id: text("task_id"),
        key: text("key"),
        artifact_type: text("artifact_type"),
        content_hash: text("content_hash"),
        version,
        prev_version_hash: text("prev_version_hash"),
        spine_entry_hash: text("spine_entry_hash"),
        journal_index,
        journal_event_hash: text("event_hash"),
        link_kind: text("link_kind"),
        size,
    };
    (record, problems)
}

fn is_event(row: &Object, event: &str) -> bool {
    row.get("event").map(python_str).as_deref() == Some(event)
}

/// The `artifact_posted` rows of a loaded journal, in append order, with their read problems.
pub(crate) fn artifact_rows(loaded: &LoadedJournal) -> Vec<(ArtifactRecord, Vec<String>)> {
    loaded
        .rows
        .iter()
        .filter(|row| is_event(row, ARTIFACT_POSTED_EVENT))
        .map(record_from_row)
        .collect()
}

/// The task's artifact records from its *verified* journal, in append order; a journal that
/// does not verify yields none (fail-closed, as the reference's `read_artifact_rows`).
///
/// # Errors
///
/// [`Error::InvalidTaskId`], [`Error::InvalidRunId`] or [`Error::Containment`] for an id that
/// cannot name a task journal; [`Error::Io`] when the journal exists but cannot be read.
pub fn read_artifact_rows(project_root: &Path, task_id: &str) -> Result<Vec<ArtifactRecord>> {
    let path = task_journal_path(project_root, task_id)?;
    let loaded = load_journal(&path)?;
    if !verify_loaded(&loaded).ok() {
        return Ok(Vec::new());
    }
    Ok(artifact_rows(&loaded)
        .into_iter()
        .map(|(record, _)| record)
        .collect())
}

/// The newest record per key (a later row with an equal or higher version wins).
pub fn latest_versions(records: &[ArtifactRecord]) -> HashMap<String, ArtifactRecord> {
    let mut latest: HashMap<String, ArtifactRecord> = HashMap::new();
    for record in records {
        let newer = latest
            .get(&record.key)
            .is_none_or(|current| record.version >= current.version);
        if newer {
            latest.insert(record.key.clone(), record.clone());
        }
    }
    latest
}

/// The containment-checked journal of a task: `.sdd/runs/task-<slug>/journal.jsonl`.
///
/// # Errors
///
/// [`Error::InvalidTaskId`] for an id outside `^[A-Za-z0-9_.:-]{1,256}$` (or `.`/`..`);
/// [`Error::InvalidRunId`] when the derived run id is longer than a run id may be;
/// [`Error::Containment`] when the run directory resolves outside the project.
pub fn task_journal_path(project_root: &Path, task_id: &str) -> Result<PathBuf> {
    validate_task_id(task_id)?;
    run_journal_path(project_root, &task_run_id(task_id))
}

/// The verdict on one artifact version (the reference's `ArtifactVerifyResult`, plus every
/// problem found).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactCheck {
    /// Whether every check passed.
    pub ok: bool,
    /// The task.
    pub task_id: String,
    /// The artifact key (`""` for a journal-level failure).
    pub key: String,
    /// The version (0 for a journal-level failure).
    pub version: i64,
    /// The journal index (-1 for a journal-level failure).
    pub journal_index: i64,
    /// The row's content hash (`""` for a journal-level failure).
    pub content_hash: String,
    /// The first problem in the reference's words, `""` when ok.
    pub reason: String,
    /// Always [`JOURNAL_IDENTITY_UNVERIFIABLE`] in 3.23.
    pub journal_identity: String,
    /// Every problem found, in check order (the first is `reason`).
    pub problems: Vec<String>,
}

impl ArtifactCheck {
    fn from_problems(record: &ArtifactRecord, problems: Vec<String>) -> ArtifactCheck {
        ArtifactCheck {
            ok: problems.is_empty(),
            task_id: record.task_id.clone(),
            key: record.key.clone(),
            version: record.version,
            journal_index: record.journal_index,
            content_hash: record.content_hash.clone(),
            reason: problems.first().cloned().unwrap_or_default(),
            journal_identity: JOURNAL_IDENTITY_UNVERIFIABLE.to_owned(),
            problems,
        }
    }

    fn journal_failure(task_id: &str, reason: String) -> ArtifactCheck {
        ArtifactCheck {
            ok: false,
            task_id: task_id.to_owned(),
            key: String::new(),
            version: 0,
            journal_index: -1,
            content_hash: String::new(),
            reason: reason.clone(),
            journal_identity: JOURNAL_IDENTITY_UNVERIFIABLE.to_owned(),
            problems: vec![reason],
        }
    }

    /// The reference's result object (`ok, task_id, key, version, journal_index, content_hash,
    /// reason, journal_identity`).
    pub fn to_object(&self) -> Object {
        Object::new()
            .with("ok", self.ok)
            .with("task_id", self.task_id.as_str())
            .with("key", self.key.as_str())
            .with("version", self.version)
            .with("journal_index", self.journal_index)
            .with("content_hash", self.content_hash.as_str())
            .with("reason", self.reason.as_str())
            .with("journal_identity", self.journal_identity.as_str())
    }
}

/// The verification of one task's artifacts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskArtifactsReport {
    /// The task.
    pub task_id: String,
    /// Its journal run id (`task-<slug>`).
    pub run_id: String,
    /// The journal verification, `None` when the task has no journal.
    pub journal: Option<JournalVerification>,
    /// The spine verification, `None` when there was no artifact row to anchor.
    pub spine: Option<SpineVerification>,
    /// One result per `artifact_posted` row (or one journal-level failure).
    pub results: Vec<ArtifactCheck>,
    /// Repeated spine versions, and entries the journal names for another version
    /// ([`SpineFindings::problems`]).
    pub spine_findings: Vec<String>,
    /// Spine entries no journal row accounts for: posts torn by a crash
    /// ([`SpineFindings::tears`]).
    pub spine_tears: Vec<String>,
}

impl TaskArtifactsReport {
    /// Whether every result is ok and the spine holds no repeated or misnamed version (torn
    /// posts are reported in [`TaskArtifactsReport::spine_tears`] and do not fail it).
    pub fn ok(&self) -> bool {
        self.results.iter().all(|result| result.ok) && self.spine_findings.is_empty()
    }
}

/// The verification of every task journal under `.sdd/runs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectArtifactsReport {
    /// The per-task reports of journals whose rows name their own task.
    pub tasks: Vec<TaskArtifactsReport>,
    /// Every result, in run-directory order, including journal-level failures.
    pub results: Vec<ArtifactCheck>,
}

impl ProjectArtifactsReport {
    /// Whether every result is ok (no artifact at all is ok) and no task's spine holds an
    /// orphan or repeated version.
    pub fn ok(&self) -> bool {
        self.results.iter().all(|result| result.ok)
            && self.tasks.iter().all(|task| task.spine_findings.is_empty())
    }
}

/// The key and version of an `artifact:<key>:v<N>` spine step id.
fn artifact_step(step_id: &str) -> Option<(&str, i64)> {
    let (key, version) = step_id.strip_prefix("artifact:")?.rsplit_once(":v")?;
    let version: i64 = version.parse().ok().filter(|v| *v >= 1)?;
    Some((key, version))
}

/// The highest version of `key` the spine entries record (0 when none).
pub(crate) fn spine_max_version(entries: &[SpineEntry], key: &str) -> i64 {
    entries
        .iter()
        .filter_map(|entry| artifact_step(&entry.step_id))
        .filter(|(entry_key, _)| *entry_key == key)
        .map(|(_, version)| version)
        .max()
        .unwrap_or(0)
}

/// What checking a spine against its journal found ([`spine_findings`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpineFindings {
    /// A version recorded twice, or an entry named by the journal row of another version.
    pub problems: Vec<String>,
    /// Entries no `artifact_posted` row names: posts killed after their spine entry and before
    /// their journal row, never acknowledged (the next post of the key takes the next version,
    /// so none is reused). Crash debris, as a torn tail is: reported, not failed.
    pub tears: Vec<String>,
}

/// Checks the spine of `run_id` against its journal: every `artifact:<key>:v<N>` entry must be
/// named (by `spine_entry_hash`) by an `artifact_posted` row of the run's journal with the same
/// key and version, and no `artifact:<key>:v<N>` may be recorded twice. Returns one line per
/// finding; a run without a spine has none.
///
/// # Errors
///
/// [`Error::InvalidRunId`] or [`Error::Containment`] for a run id that cannot name its
/// directories; [`Error::Io`] when a file exists but cannot be read.
pub fn spine_findings(project_root: &Path, run_id: &str, key: &AuditKey) -> Result<SpineFindings> {
    let entries = LineageSpine::open(project_root, run_id, key)?.entries()?;
    let loaded = load_journal(&run_journal_path(project_root, run_id)?)?;
    let rows: HashMap<String, ArtifactRecord> = artifact_rows(&loaded)
        .into_iter()
        .map(|(record, _)| (record.spine_entry_hash.clone(), record))
        .collect();
    let mut findings = SpineFindings::default();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (line, entry) in entries.iter().enumerate() {
        let Some((artifact_key, version)) = artifact_step(&entry.step_id) else {
            continue;
        };
        let count = seen.entry(entry.step_id.as_str()).or_insert(0);
        *count += 1;
        if *count == 2 {
            findings.problems.push(format!(
                "spine {run_id}: {} is recorded more than once (again at entry {}); a version was reused",
                entry.step_id,
                line + 1
            ));
        }
        match rows.get(&entry.entry_hash) {
            None => findings.tears.push(format!(
                "torn post: spine {run_id}: entry {} ({}) has no artifact_posted row in the journal: a post that did not complete, never acknowledged",
                line + 1,
                entry.step_id
            )),
            Some(row) if row.key != artifact_key || row.version != version => {
                findings.problems.push(format!(
                    "spine {run_id}: entry {} ({}) is named by the journal row for key={} version={}",
                    line + 1,
                    entry.step_id,
                    python_str_repr(&row.key),
                    row.version
                ));
            }
            Some(_) => {}
        }
    }
    Ok(findings)
}

/// Verifies every artifact version of `task_id` (see the module documentation). A task without
/// a journal has no artifact and verifies.
///
/// # Errors
///
/// As [`task_journal_path`], and [`Error::Io`] when a file exists but cannot be read.
pub fn verify_run_artifacts(
    project_root: &Path,
    task_id: &str,
    key: &AuditKey,
) -> Result<TaskArtifactsReport> {
    let path = task_journal_path(project_root, task_id)?;
    verify_task_journal(project_root, task_id, &path, key)
}

fn verify_task_journal(
    project_root: &Path,
    task_id: &str,
    journal_path: &Path,
    key: &AuditKey,
) -> Result<TaskArtifactsReport> {
    let run_id = task_run_id(task_id);
    let mut report = TaskArtifactsReport {
        task_id: task_id.to_owned(),
        run_id: run_id.clone(),
        journal: None,
        spine: None,
        results: Vec::new(),
        spine_findings: Vec::new(),
        spine_tears: Vec::new(),
    };
    let cross_check = spine_findings(project_root, &run_id, key)?;
    report.spine_findings = cross_check.problems;
    report.spine_tears = cross_check.tears;
    if !journal_path.is_file() {
        return Ok(report);
    }
    let loaded = load_journal(journal_path)?;
    let journal = verify_loaded(&loaded);
    let journal_ok = journal.ok();
    report.journal = Some(journal);
    let rows = artifact_rows(&loaded);
    if rows.is_empty() {
        if !journal_ok {
            report.results.push(ArtifactCheck::journal_failure(
                task_id,
                "task journal Merkle chain/reader coverage does not verify; artifact rows may be hidden"
                    .to_owned(),
            ));
        }
        return Ok(report);
    }
    let spine = LineageSpine::open(project_root, &run_id, key)?;
    let spine_report = spine.verify()?;
    let anchors: HashMap<String, String> = spine
        .entries()?
        .into_iter()
        .map(|entry| (entry.entry_hash, entry.content_hash))
        .collect();
    let context = CheckContext {
        project_root,
        journal_ok,
        spine_ok: spine_report.ok(),
        anchors: &anchors,
        blobs: BlobStore::for_project(project_root),
    };
    report.spine = Some(spine_report);
    for (record, read_problems) in rows {
        let mut problems = read_problems;
        problems.extend(context.check(&record));
        report
            .results
            .push(ArtifactCheck::from_problems(&record, problems));
    }
    Ok(report)
}

struct CheckContext<'a> {
    project_root: &'a Path,
    journal_ok: bool,
    spine_ok: bool,
    anchors: &'a HashMap<String, String>,
    blobs: BlobStore,
}

impl CheckContext<'_> {
    /// Every problem of one record, in the reference's check order.
    fn check(&self, record: &ArtifactRecord) -> Vec<String> {
        let locator = record.locator();
        let mut problems = Vec::new();
        if !self.journal_ok {
            problems.push(format!(
                "task journal Merkle chain/reader coverage does not verify ({locator})"
            ));
        }
        let blob = match self.blobs.state(&record.content_hash) {
            Ok(BlobState::Intact(bytes)) => Some(bytes),
            Ok(BlobState::Corrupt { actual, .. }) => {
                problems.push(format!(
                    "blob content hash {actual} does not match journal row {} ({locator})",
                    record.content_hash
                ));
                None
            }
            Ok(BlobState::Absent) | Err(Error::Malformed { .. }) => {
                problems.push(format!("stored blob missing for {locator}"));
                None
            }
            Err(err) => {
                problems.push(format!("stored blob unreadable ({err}) for {locator}"));
                None
            }
        };
        if !self.spine_ok {
            problems.push(format!("lineage spine does not verify ({locator})"));
        }
        match self.anchors.get(&record.spine_entry_hash) {
            None => problems.push(format!(
                "spine entry {} for {locator} is not in the lineage spine",
                record.spine_entry_hash
            )),
            Some(anchored) if *anchored != record.content_hash => problems.push(format!(
                "spine anchor binds {anchored}, journal row says {} ({locator})",
                record.content_hash
            )),
            Some(_) => {}
        }
        if let Some(bytes) = blob {
            match record.artifact_type.as_str() {
                "finding" => problems.extend(verify_finding_blob(&bytes, &locator)),
                "report" => problems.extend(self.check_finding_references(&bytes, &locator)),
                _ => {}
            }
        }
        problems
    }

    /// The reference's `_verify_finding_references_in_report`: every cited finding is re-read
    /// from the store and its current bytes must still hash to the recorded `finding_hash`.
    fn check_finding_references(&self, blob: &[u8], locator: &str) -> Vec<String> {
        let parsed = std::str::from_utf8(blob)
            .map_err(|err| err.to_string())
            .and_then(|text| Value::parse(text).map_err(|err| err.to_string()));
        let content = match parsed {
            Ok(Value::Object(content)) => content,
            Ok(_) => return vec![format!("report payload is not a JSON object ({locator})")],
            Err(err) => {
                return vec![format!(
                    "report payload does not parse as JSON: {err} ({locator})"
                )];
            }
        };
        let references = match content.get("finding_references") {
            None => return Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(_) => {
                return vec![format!(
                    "report finding_references must be a list ({locator})"
                )];
            }
        };
        references
            .iter()
            .filter_map(|reference| self.check_one_reference(reference, locator))
            .collect()
    }

    fn check_one_reference(&self, reference: &Value, locator: &str) -> Option<String> {
        let Some(reference) = reference.as_object() else {
            return Some(format!(
                "report finding_reference must be a dict ({locator})"
            ));
        };
        let non_empty = |name: &str| {
            reference
                .get(name)
                .and_then(Value::as_str)
                .filter(|text| !text.is_empty())
        };
        let Some(task_id) = non_empty("task_id") else {
            return Some(format!(
                "report finding_reference missing task_id ({locator})"
            ));
        };
        let Some(key) = non_empty("key") else {
            return Some(format!("report finding_reference missing key ({locator})"));
        };
        let cited = format!("{}:{}", python_str_repr(task_id), python_str_repr(key));
        let rows: Vec<ArtifactRecord> = task_journal_path(self.project_root, task_id)
            .ok()
            .and_then(|path| load_journal(&path).ok())
            .map(|loaded| {
                artifact_rows(&loaded)
                    .into_iter()
                    .map(|(record, _)| record)
                    .collect()
            })
            .unwrap_or_default();
        if rows.is_empty() {
            return Some(format!(
                "referenced finding task {} has no artifacts ({locator})",
                python_str_repr(task_id)
            ));
        }
        let matching: Vec<&ArtifactRecord> = rows
            .iter()
            .filter(|row| row.key == key && row.artifact_type == "finding")
            .collect();
        let Some(latest) = matching.last() else {
            return Some(format!(
                "referenced finding {cited} not found or not a finding artifact ({locator})"
            ));
        };
        let selected = match reference.get("version") {
            None | Some(Value::Null) => *latest,
            Some(version) => {
                let wanted = match version {
                    Value::Bool(b) => Some(i64::from(*b)),
                    Value::Int(i) => i.as_i64(),
                    _ => None,
                };
                let Some(wanted) = wanted.filter(|v| *v >= 1) else {
                    return Some(format!(
                        "referenced finding version must be a positive integer ({locator})"
                    ));
                };
                let Some(found) = matching.iter().find(|row| row.version == wanted) else {
                    return Some(format!(
                        "referenced finding {cited} version {} not found ({locator})",
                        python_str(version)
                    ));
                };
                *found
            }
        };
        let current = match self.blobs.state(&selected.content_hash) {
            Ok(BlobState::Intact(bytes) | BlobState::Corrupt { bytes, .. }) => {
                Some(content_address(&bytes))
            }
            _ => None,
        };
        let recorded = match reference.get("finding_hash").and_then(Value::as_str) {
            Some(hash) if !hash.is_empty() => hash,
            _ => {
                return Some(format!(
                    "report finding_reference for {cited} records no finding_hash, so a change to the referenced finding cannot be detected ({locator})"
                ));
            }
        };
        if !recorded.starts_with("sha256:") {
            return Some(format!(
                "report finding_reference for {cited} has malformed finding_hash ({locator})"
            ));
        }
        let Some(current) = current else {
            return Some(format!(
                "referenced finding {cited} receipt is not in the evidence store ({locator})"
            ));
        };
        if current != recorded {
            return Some(format!(
                "referenced finding {cited} receipt hash {current} does not match report's recorded finding_hash {recorded} ({locator})"
            ));
        }
        None
    }
}

/// Verifies the artifacts of every task journal under `.sdd/runs` (the reference's
/// `verify_all_run_artifacts`): a journal whose first artifact row names a task is verified as
/// that task's journal, and must *be* that task's journal; a `task-*` journal without artifact
/// rows whose chain does not verify fails, because tampering may have hidden its rows.
///
/// # Errors
///
/// [`Error::Io`] when the runs directory exists but cannot be listed, or a file cannot be read.
pub fn verify_all_run_artifacts(
    project_root: &Path,
    key: &AuditKey,
) -> Result<ProjectArtifactsReport> {
    let mut report = ProjectArtifactsReport {
        tasks: Vec::new(),
        results: Vec::new(),
    };
    let runs = runs_dir(project_root);
    if !runs.is_dir() {
        return Ok(report);
    }
    let listing = std::fs::read_dir(&runs).map_err(|err| Error::io("list", &runs, err))?;
    let mut names: Vec<String> = Vec::new();
    for entry in listing {
        let entry = entry.map_err(|err| Error::io("list", &runs, err))?;
        if entry.path().is_dir() {
            // A directory name that is not UTF-8 cannot be a valid run id.
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
    }
    names.sort();
    for name in names {
        let Ok(journal_path) = run_journal_path(project_root, &name) else {
            continue;
        };
        if !journal_path.is_file() {
            continue;
        }
        let loaded = load_journal(&journal_path)?;
        let named_task = loaded
            .rows
            .iter()
            .find(|row| is_event(row, ARTIFACT_POSTED_EVENT))
            .map(|row| row.get("task_id").map(python_str).unwrap_or_default())
            .filter(|task_id| !task_id.is_empty());
        let own_task = name.strip_prefix("task-").unwrap_or(&name).to_owned();
        match named_task {
            Some(task_id) => {
                let derived = task_journal_path(project_root, &task_id).ok();
                if derived.as_deref() == Some(journal_path.as_path()) {
                    let task = verify_task_journal(project_root, &task_id, &journal_path, key)?;
                    report.results.extend(task.results.iter().cloned());
                    report.tasks.push(task);
                } else {
                    report.results.push(ArtifactCheck::journal_failure(
                        &own_task,
                        format!(
                            "artifact row task id does not resolve to its own journal ({name}); the journal has been tampered with"
                        ),
                    ));
                }
            }
            None => {
                if name.starts_with("task-") && !verify_loaded(&loaded).ok() {
                    report.results.push(ArtifactCheck::journal_failure(
                        &own_task,
                        format!(
                            "task journal Merkle chain/reader coverage does not verify ({name}); artifact rows may be hidden"
                        ),
                    ));
                }
            }
        }
    }
    Ok(report)
}
