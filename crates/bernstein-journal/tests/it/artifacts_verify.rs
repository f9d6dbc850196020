//! The artifact verifier's full reports (`artifacts::verify`): which journal rows it reads, the
//! exact journal-level failures, the newest version per key, and every problem of one row in
//! check order, on scratch projects posted by this crate and then damaged.

use std::fs;
use std::path::Path;

use bernstein_journal::artifacts::{
    ArtifactContent, ArtifactRecord, BlobStore, LineageSpine, NewSpineEntry, PostedArtifact,
    TraceContext, content_address, latest_versions, post_run_artifact_with_clock,
    read_artifact_rows, spine_findings, verify_all_run_artifacts, verify_run_artifacts,
};
use bernstein_journal::audit::AuditChain;
use bernstein_journal::key::AuditKey;
use bernstein_journal::run_journal::{HashProfile, JournalWriter};
use bernstein_protocol::pyjson::{Dialect, Object, Value};

use crate::artifacts::{orphan_spine_entry, request};
use crate::support::vector;

fn audit_key() -> AuditKey {
    let raw = fs::read_to_string(vector("_keys/audit.key")).unwrap();
    AuditKey::from_master_bytes(raw.trim().as_bytes().to_vec())
}

/// Posts `content` as `task_id`/`key` into `project`, with frozen clocks.
fn post(project: &Path, task_id: &str, key: &str, content: &ArtifactContent) -> PostedArtifact {
    let chain = AuditChain::open(project.join(".sdd/audit"), audit_key());
    let request = request(task_id, key, content);
    post_run_artifact_with_clock(project, &chain, &request, || 1_780_000_000.0).unwrap()
}

fn report(body: &str) -> ArtifactContent {
    ArtifactContent::report(body).unwrap()
}

/// Appends a row of another event to the run journal `run_id`, as the task's other writers do.
fn append_other_event(project: &Path, run_id: &str, event: &str, payload: &Object) {
    let mut writer =
        JournalWriter::open_with_clock(project, run_id, HashProfile::PyJsonV1, || 1_780_000_000.0)
            .unwrap();
    writer.append(event, payload).unwrap();
}

/// Replaces `from` by `to` in the file at `path` (the text must occur).
fn edit(path: &Path, from: &str, to: &str) {
    let text = fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{from:?} not in {}", path.display());
    fs::write(path, text.replace(from, to)).unwrap();
}

/// Compact JSON in the order the keys were inserted, so the reference's key order shows.
const IN_ORDER: Dialect = Dialect {
    sort_keys: false,
    compact: true,
    ensure_ascii: false,
};

/// Each result as its reference object.
fn wire(results: &[bernstein_journal::artifacts::ArtifactCheck]) -> Vec<String> {
    results
        .iter()
        .map(|r| Value::Object(r.to_object()).dumps(IN_ORDER))
        .collect()
}

#[test]
fn rows_of_other_events_are_not_artifact_rows() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    // A first row without a task id: the project check must still find the task in the first
    // artifact_posted row, and the per-task check must give exactly one verdict per post.
    append_other_event(project, "task-t-1", "run_started", &Object::new());
    let first = post(project, "t-1", "a", &report("one"));
    append_other_event(
        project,
        "task-t-1",
        "persistent_agent_step",
        &Object::new().with("task_id", "t-1").with("key", "a"),
    );
    let second = post(project, "t-1", "b", &report("two"));
    assert_eq!(
        (first.record.journal_index, second.record.journal_index),
        (1, 3)
    );

    let key = audit_key();
    let task = verify_run_artifacts(project, "t-1", &key).unwrap();
    let verdicts: Vec<(&str, i64, bool)> = task
        .results
        .iter()
        .map(|r| (r.key.as_str(), r.journal_index, r.ok))
        .collect();
    assert_eq!(verdicts, vec![("a", 1, true), ("b", 3, true)]);
    let all = verify_all_run_artifacts(project, &key).unwrap();
    assert_eq!(all.results, task.results);
    assert_eq!(all.tasks.len(), 1);
    assert_eq!(
        read_artifact_rows(project, "t-1").unwrap(),
        vec![first.record, second.record]
    );
}

#[test]
fn artifact_rows_are_read_only_from_a_journal_that_verifies() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    assert_eq!(read_artifact_rows(project, "t-2").unwrap(), vec![]);
    let first = post(project, "t-2", "notes", &report("v1"));
    let second = post(project, "t-2", "notes", &report("v2"));
    assert_eq!(
        read_artifact_rows(project, "t-2").unwrap(),
        vec![first.record.clone(), second.record]
    );
    // An edited row breaks the chain, and the reader then answers with no rows at all.
    edit(
        &project.join(".sdd/runs/task-t-2/journal.jsonl"),
        "\"size\": ",
        "\"size\": 1",
    );
    assert_eq!(read_artifact_rows(project, "t-2").unwrap(), vec![]);
}

fn record(key: &str, version: i64, spine_entry_hash: &str) -> ArtifactRecord {
    ArtifactRecord {
        task_id: "t".to_owned(),
        key: key.to_owned(),
        artifact_type: "report".to_owned(),
        content_hash: String::new(),
        version,
        prev_version_hash: String::new(),
        spine_entry_hash: spine_entry_hash.to_owned(),
        journal_index: 0,
        journal_event_hash: String::new(),
        link_kind: String::new(),
        size: 0,
    }
}

#[test]
fn the_latest_version_is_the_last_row_with_the_highest_version() {
    let check = |records: &[ArtifactRecord], expect: &[(&str, &str)]| {
        let latest = latest_versions(records);
        let mut got: Vec<(&str, &str)> = latest
            .iter()
            .map(|(key, record)| {
                assert_eq!(*key, record.key);
                (key.as_str(), record.spine_entry_hash.as_str())
            })
            .collect();
        got.sort_unstable();
        assert_eq!(got, expect, "{records:?}");
    };
    check(&[], &[]);
    check(&[record("a", 1, "a1")], &[("a", "a1")]);
    check(
        &[
            record("a", 1, "a1"),
            record("a", 2, "a2"),
            record("b", 1, "b1"),
        ],
        &[("a", "a2"), ("b", "b1")],
    );
    // A lower version later in the journal does not replace a higher one.
    check(
        &[record("a", 2, "a2"), record("a", 1, "a1")],
        &[("a", "a2")],
    );
    // Of two rows claiming the same version, the later wins.
    check(
        &[record("a", 1, "first"), record("a", 1, "second")],
        &[("a", "second")],
    );
}

#[test]
fn a_journal_that_does_not_verify_and_shows_no_artifact_row_fails_in_full() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let hidden = project.join(".sdd/runs/task-t-3");
    fs::create_dir_all(&hidden).unwrap();
    fs::write(
        hidden.join("journal.jsonl"),
        "{\"index\": 0, \"event\": \"x\"}\n",
    )
    .unwrap();
    let key = audit_key();
    let task = verify_run_artifacts(project, "t-3", &key).unwrap();
    assert!(!task.ok());
    assert_eq!(
        wire(&task.results),
        vec![
            "{\"ok\":false,\"task_id\":\"t-3\",\"key\":\"\",\"version\":0,\"journal_index\":-1,\"content_hash\":\"\",\"reason\":\"task journal Merkle chain/reader coverage does not verify; artifact rows may be hidden\",\"journal_identity\":\"unverifiable\"}"
        ]
    );
    assert_eq!(
        task.results[0].problems,
        vec![task.results[0].reason.clone()]
    );
    let all = verify_all_run_artifacts(project, &key).unwrap();
    assert!(!all.ok());
    assert_eq!(
        wire(&all.results),
        vec![
            "{\"ok\":false,\"task_id\":\"t-3\",\"key\":\"\",\"version\":0,\"journal_index\":-1,\"content_hash\":\"\",\"reason\":\"task journal Merkle chain/reader coverage does not verify (task-t-3); artifact rows may be hidden\",\"journal_identity\":\"unverifiable\"}"
        ]
    );
}

#[test]
fn a_task_with_one_failing_row_does_not_verify() {
    let report = verify_run_artifacts(&vector("artifacts_tampered"), "t-42", &audit_key()).unwrap();
    assert_eq!(report.results.iter().filter(|r| !r.ok).count(), 1);
    assert!(report.spine_findings.is_empty());
    assert!(!report.ok());
}

#[test]
fn spine_findings_name_each_reused_or_misnamed_entry_once() {
    let torn = |entry: usize, step: &str| {
        format!(
            "torn post: spine task-t-5: entry {entry} ({step}) has no artifact_posted row in the journal: a post that did not complete, never acknowledged"
        )
    };
    // `damage` edits the project after `notes` v1 and `other` v1 were posted.
    let check = |damage: &dyn Fn(&Path), problems: &[&str], tears: &[String]| {
        let scratch = tempfile::tempdir().unwrap();
        let project = scratch.path();
        post(project, "t-5", "notes", &report("v1"));
        post(project, "t-5", "other", &report("o1"));
        damage(project);
        let key = audit_key();
        let findings = spine_findings(project, "task-t-5", &key).unwrap();
        assert_eq!(findings.problems, problems);
        assert_eq!(findings.tears, tears);
        let task = verify_run_artifacts(project, "t-5", &key).unwrap();
        assert_eq!(task.spine_findings, problems);
        assert_eq!(task.spine_tears, tears);
        assert_eq!(
            task.ok(),
            problems.is_empty() && task.results.iter().all(|r| r.ok)
        );
        let all = verify_all_run_artifacts(project, &key).unwrap();
        assert_eq!(all.ok(), task.ok());
    };
    let journal = |project: &Path| project.join(".sdd/runs/task-t-5/journal.jsonl");

    check(&|_| {}, &[], &[]);
    // A version recorded three times is one reuse, named where it first repeats.
    check(
        &|project| {
            orphan_spine_entry(project, "task-t-5", "notes", 1);
            orphan_spine_entry(project, "task-t-5", "notes", 1);
        },
        &[
            "spine task-t-5: artifact:notes:v1 is recorded more than once (again at entry 3); a version was reused",
        ],
        &[torn(3, "artifact:notes:v1"), torn(4, "artifact:notes:v1")],
    );
    // Spine entries that are not artifact versions are none of this check's business.
    check(
        &|project| {
            orphan_spine_entry(project, "task-t-5", "notes", 0);
            orphan_spine_entry(project, "task-t-5", "notes", -1);
        },
        &[],
        &[],
    );
    // A row naming the entry of another key, or of another version of its key.
    check(
        &|project| {
            edit(
                &journal(project),
                "\"key\": \"other\"",
                "\"key\": \"third\"",
            )
        },
        &[
            "spine task-t-5: entry 2 (artifact:other:v1) is named by the journal row for key='third' version=1",
        ],
        &[],
    );
    check(
        &|project| {
            let text = fs::read_to_string(journal(project)).unwrap();
            let mut lines: Vec<&str> = text.lines().collect();
            let edited = lines[1].replace("\"version\": 1", "\"version\": 7");
            lines[1] = &edited;
            fs::write(journal(project), lines.join("\n") + "\n").unwrap();
        },
        &[
            "spine task-t-5: entry 2 (artifact:other:v1) is named by the journal row for key='other' version=7",
        ],
        &[],
    );
}

/// How [`hand_post`] leaves the blob of the row it writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Blob {
    /// Stored under its address.
    Stored,
    /// Never stored.
    Absent,
    /// Other bytes stored under its address.
    Corrupt,
}

/// Writes an `artifact_posted` row for arbitrary `bytes` the way a post does (blob, spine entry
/// `artifact:<key>:v<version>`, journal row), so that payloads a post would refuse to build can
/// be verified. Returns the content address.
fn hand_post(
    project: &Path,
    task_id: &str,
    key: &str,
    artifact_type: &str,
    version: i64,
    bytes: &[u8],
    blob: Blob,
) -> String {
    let run_id = format!("task-{task_id}");
    let content_hash = content_address(bytes);
    let store = BlobStore::for_project(project);
    match blob {
        Blob::Stored => {
            store.put(bytes).unwrap();
        }
        Blob::Absent => {}
        Blob::Corrupt => {
            let path = store.path_for(&content_hash).unwrap();
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, b"not the posted bytes").unwrap();
        }
    }
    let entry = LineageSpine::open(project, &run_id, &audit_key())
        .unwrap()
        .append(&NewSpineEntry {
            artifact_path: &format!("run-artifacts/{run_id}/{key}/v{version}"),
            content: bytes,
            actor: "worker-a",
            step_id: &format!("artifact:{key}:v{version}"),
            model: "",
            timestamp: 1_780_000_700,
            trace: &TraceContext::default(),
        })
        .unwrap();
    let payload = Object::new()
        .with("task_id", task_id)
        .with("key", key)
        .with("artifact_type", artifact_type)
        .with("content_hash", content_hash.as_str())
        .with("version", version)
        .with("prev_version_hash", "")
        .with("spine_entry_hash", entry.entry_hash.as_str())
        .with("link_kind", "")
        .with("size", bytes.len());
    append_other_event(project, &run_id, "artifact_posted", &payload);
    content_hash
}

#[test]
fn every_finding_reference_problem_is_named() {
    // The cited task `t-9`: a finding `f1` in two versions, a report `rep`, a finding whose blob
    // was never stored and one whose stored blob was replaced.
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let f1v1 = hand_post(project, "t-9", "f1", "finding", 1, b"F1", Blob::Stored);
    let f1v2 = hand_post(project, "t-9", "f1", "finding", 2, b"F2", Blob::Stored);
    hand_post(project, "t-9", "rep", "report", 1, b"{}", Blob::Stored);
    let gone = hand_post(project, "t-9", "gone", "finding", 1, b"G", Blob::Absent);
    let bad = hand_post(project, "t-9", "bad", "finding", 1, b"B", Blob::Corrupt);
    let replaced = content_address(b"not the posted bytes");
    let key = audit_key();
    let mut version = 0;
    let mut check = |payload: &[u8], expect: &[String]| {
        version += 1;
        hand_post(
            project,
            "t-r",
            "r",
            "report",
            version,
            payload,
            Blob::Stored,
        );
        let task = verify_run_artifacts(project, "t-r", &key).unwrap();
        let result = task.results.last().unwrap();
        assert_eq!(
            result.problems,
            expect,
            "{}",
            String::from_utf8_lossy(payload)
        );
        assert_eq!(result.ok, expect.is_empty());
        assert_eq!(result.reason, expect.first().cloned().unwrap_or_default());
    };
    let at = |version: i64| format!("(key='r' version={version} index={})", version - 1);
    let cite = |reference: &str| format!("{{\"body\":\"b\",\"finding_references\":[{reference}]}}");

    check(
        b"\xff",
        &[format!(
            "report payload does not parse as JSON: invalid utf-8 sequence of 1 bytes from index 0 {}",
            at(1)
        )],
    );
    check(
        b"[1]",
        &[format!("report payload is not a JSON object {}", at(2))],
    );
    check(b"{\"body\":\"b\"}", &[]);
    check(
        b"{\"finding_references\":{}}",
        &[format!(
            "report finding_references must be a list {}",
            at(4)
        )],
    );
    check(cite("").as_bytes(), &[]);
    // One message per reference, in order; a good reference adds none.
    let good = format!("{{\"task_id\":\"t-9\",\"key\":\"f1\",\"finding_hash\":\"{f1v2}\"}}");
    check(
        cite(&format!("5,{good},{{\"key\":\"f1\"}},{{\"task_id\":\"\",\"key\":\"f1\"}},{{\"task_id\":\"t-9\"}},{{\"task_id\":\"t-9\",\"key\":\"\"}}")).as_bytes(),
        &[
            format!("report finding_reference must be a dict {}", at(6)),
            format!("report finding_reference missing task_id {}", at(6)),
            format!("report finding_reference missing task_id {}", at(6)),
            format!("report finding_reference missing key {}", at(6)),
            format!("report finding_reference missing key {}", at(6)),
        ],
    );
    check(
        cite("{\"task_id\":\"t-none\",\"key\":\"f1\"},{\"task_id\":\"../x\",\"key\":\"f1\"},{\"task_id\":\"t-9\",\"key\":\"nope\"},{\"task_id\":\"t-9\",\"key\":\"rep\"}").as_bytes(),
        &[
            format!("referenced finding task 't-none' has no artifacts {}", at(7)),
            format!("referenced finding task '../x' has no artifacts {}", at(7)),
            format!("referenced finding 't-9':'nope' not found or not a finding artifact {}", at(7)),
            format!("referenced finding 't-9':'rep' not found or not a finding artifact {}", at(7)),
        ],
    );
    // The version chooses the row; without one (or null) the latest row is cited.
    let versioned = |version: &str, hash: &str| {
        format!(
            "{{\"task_id\":\"t-9\",\"key\":\"f1\",\"version\":{version},\"finding_hash\":\"{hash}\"}}"
        )
    };
    check(
        cite(
            &[
                versioned("1", &f1v1),
                versioned("2", &f1v2),
                versioned("true", &f1v1),
                versioned("null", &f1v2),
            ]
            .join(","),
        )
        .as_bytes(),
        &[],
    );
    let not_positive = format!(
        "referenced finding version must be a positive integer {}",
        at(9)
    );
    let mismatch = format!(
        "referenced finding 't-9':'f1' receipt hash {f1v2} does not match report's recorded finding_hash {f1v1} {}",
        at(9)
    );
    check(
        cite(
            &[
                versioned("0", &f1v1),
                versioned("false", &f1v1),
                versioned("-1", &f1v1),
                versioned("1.0", &f1v1),
                versioned("\"1\"", &f1v1),
                versioned("3", &f1v1),
                versioned("2", &f1v1),
                versioned("null", &f1v1),
            ]
            .join(","),
        )
        .as_bytes(),
        &[
            vec![not_positive; 5],
            vec![format!(
                "referenced finding 't-9':'f1' version 3 not found {}",
                at(9)
            )],
            vec![mismatch; 2],
        ]
        .concat(),
    );
    // The recorded hash, then the stored receipt.
    check(
        cite(&format!(
            "{{\"task_id\":\"t-9\",\"key\":\"f1\"}},{{\"task_id\":\"t-9\",\"key\":\"f1\",\"finding_hash\":\"\"}},{},{},{},{}",
            "{\"task_id\":\"t-9\",\"key\":\"f1\",\"finding_hash\":\"md5:00\"}",
            format_args!("{{\"task_id\":\"t-9\",\"key\":\"gone\",\"finding_hash\":\"{gone}\"}}"),
            format_args!("{{\"task_id\":\"t-9\",\"key\":\"bad\",\"finding_hash\":\"{bad}\"}}"),
            format_args!("{{\"task_id\":\"t-9\",\"key\":\"bad\",\"finding_hash\":\"{replaced}\"}}"),
        ))
        .as_bytes(),
        &[
            format!("report finding_reference for 't-9':'f1' records no finding_hash, so a change to the referenced finding cannot be detected {}", at(10)),
            format!("report finding_reference for 't-9':'f1' records no finding_hash, so a change to the referenced finding cannot be detected {}", at(10)),
            format!("report finding_reference for 't-9':'f1' has malformed finding_hash {}", at(10)),
            format!("referenced finding 't-9':'gone' receipt is not in the evidence store {}", at(10)),
            format!("referenced finding 't-9':'bad' receipt hash {replaced} does not match report's recorded finding_hash {bad} {}", at(10)),
        ],
    );
}

#[test]
fn every_problem_of_one_row_is_listed_in_check_order() {
    // `setup` writes the task `t-6` (one row, key `k`) and damages it; `expect` receives what
    // `setup` returned (the row's content hash, or the spine entry hash it names) and returns
    // the row's problems.
    let check = |setup: &dyn Fn(&Path) -> String, expect: &dyn Fn(&str) -> Vec<String>| {
        let scratch = tempfile::tempdir().unwrap();
        let project = scratch.path();
        let named = setup(project);
        let task = verify_run_artifacts(project, "t-6", &audit_key()).unwrap();
        assert_eq!(task.results.len(), 1);
        let expect = expect(&named);
        assert_eq!(task.results[0].problems, expect);
        assert_eq!(task.results[0].ok, expect.is_empty());
    };
    let locator = "key='k' version=1 index=0";
    let at = format!("({locator})");
    let report =
        |project: &Path, blob: Blob| hand_post(project, "t-6", "k", "report", 1, b"{}", blob);
    let journal = |project: &Path| project.join(".sdd/runs/task-t-6/journal.jsonl");
    let spine = |project: &Path| project.join(".sdd/lineage/task-t-6/spine.jsonl");

    check(&|project| report(project, Blob::Stored), &|_| vec![]);
    check(&|project| report(project, Blob::Absent), &|_| {
        vec![format!("stored blob missing for {locator}")]
    });
    check(&|project| report(project, Blob::Corrupt), &|hash| {
        vec![format!(
            "blob content hash {} does not match journal row {hash} {at}",
            content_address(b"not the posted bytes")
        )]
    });
    // A broken journal chain, with the blob gone as well: both, the journal first.
    check(
        &|project| {
            let hash = report(project, Blob::Absent);
            edit(&journal(project), "\"size\": 2", "\"size\": 3");
            hash
        },
        &|_| {
            vec![
                format!("task journal Merkle chain/reader coverage does not verify {at}"),
                format!("stored blob missing for {locator}"),
            ]
        },
    );
    check(
        &|project| {
            let hash = report(project, Blob::Stored);
            edit(&spine(project), "worker-a", "worker-b");
            hash
        },
        &|_| vec![format!("lineage spine does not verify {at}")],
    );
    // The spine entry binds other content than the row names.
    check(
        &|project| {
            let hash = report(project, Blob::Stored);
            edit(&spine(project), &hash, &content_address(b"other"));
            hash
        },
        &|hash| {
            vec![
                format!("lineage spine does not verify {at}"),
                format!(
                    "spine anchor binds {}, journal row says {hash} {at}",
                    content_address(b"other")
                ),
            ]
        },
    );
    // The spine holds no entry under the row's spine_entry_hash.
    check(
        &|project| {
            report(project, Blob::Stored);
            let entry = LineageSpine::open(project, "task-t-6", &audit_key())
                .unwrap()
                .entries()
                .unwrap()
                .remove(0)
                .entry_hash;
            edit(
                &spine(project),
                &format!("\"entry_hash\":\"{entry}\""),
                "\"entry_hash\":\"sha256:00\"",
            );
            entry
        },
        &|entry| {
            vec![
                format!("lineage spine does not verify {at}"),
                format!("spine entry {entry} for {locator} is not in the lineage spine"),
            ]
        },
    );
    // A finding's stored content is checked; a report's citations are, and other types' are not.
    check(
        &|project| hand_post(project, "t-6", "k", "finding", 1, b"[]", Blob::Stored),
        &|_| {
            vec![format!(
                "finding payload does not verify: finding payload must be a JSON object {at}"
            )]
        },
    );
    check(
        &|project| hand_post(project, "t-6", "k", "report", 1, b"[]", Blob::Stored),
        &|_| vec![format!("report payload is not a JSON object {at}")],
    );
    check(
        &|project| hand_post(project, "t-6", "k", "table", 1, b"[]", Blob::Stored),
        &|_| vec![],
    );
}

#[test]
fn only_broken_task_journals_without_artifact_rows_fail_the_project() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let key = audit_key();
    assert_eq!(
        verify_all_run_artifacts(project, &key).unwrap().results,
        vec![]
    );
    // A task journal without artifact rows that verifies, and broken journals of runs that are
    // not tasks, hide nothing the artifact check could name.
    append_other_event(project, "task-t-7", "run_started", &Object::new());
    for run in ["run-a", "t-8"] {
        let dir = project.join(".sdd/runs").join(run);
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("journal.jsonl"),
            "{\"index\": 0, \"event\": \"x\"}\n",
        )
        .unwrap();
    }
    let all = verify_all_run_artifacts(project, &key).unwrap();
    assert!(all.ok());
    assert_eq!(all.results, vec![]);
    assert_eq!(all.tasks, vec![]);
    // Broken task journals fail, in run-directory order.
    for run in ["task-t-9", "task-t-10"] {
        let dir = project.join(".sdd/runs").join(run);
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("journal.jsonl"),
            "{\"index\": 0, \"event\": \"x\"}\n",
        )
        .unwrap();
    }
    let failed: Vec<(String, String)> = verify_all_run_artifacts(project, &key)
        .unwrap()
        .results
        .into_iter()
        .map(|r| (r.task_id, r.reason))
        .collect();
    let broken = |run: &str| {
        format!(
            "task journal Merkle chain/reader coverage does not verify ({run}); artifact rows may be hidden"
        )
    };
    assert_eq!(
        failed,
        vec![
            ("t-10".to_owned(), broken("task-t-10")),
            ("t-9".to_owned(), broken("task-t-9")),
        ]
    );
}
