//! Durability regressions of the embedded store (issue 14): the log's identity across
//! compactions, hostile backlog rows, evidence a crash left unwritten, plans whose document
//! write failed, and debris that may belong to a writer that takes no lock.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use bernstein_journal::audit::AuditChain;
use bernstein_journal::run_journal::{load_run_journal, task_run_id};
use bernstein_protocol::pyjson::Value;
use bernstein_tasks::backend::{ClaimRequest, ListQuery, PlanStatus};
use bernstein_tasks::embedded::{CrashPoint, EmbeddedStore, verify_task_log};
use bernstein_tasks::{Error, TaskId, TaskStatus};

use crate::embedded::{claim_on_rows, outsider_claim, project, runtime, test_key};
use crate::suite::request;

fn log_path(dir: &Path) -> std::path::PathBuf {
    runtime(dir).join("tasks.jsonl")
}

/// Issue 14 item 1: store B folds the log; store A fails c2 and compacts until the log sits on
/// the inode number B read (ext4 hands a freed inode straight back, unless another process
/// takes it first), then appends until the log is at least as long as what B consumed. B must
/// still see every acknowledged change. Returns whether the inode number came back.
fn two_stores_with_compaction_in_between() -> bool {
    let dir = tempfile::tempdir().unwrap();
    let a = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    let b = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    let c1 = a.create_task(request("c1")).unwrap();
    let c2 = a.create_task(request("c2")).unwrap();
    assert_eq!(b.get_task(&c2.id).unwrap().status, TaskStatus::Open);
    let seen_by_b = std::fs::metadata(log_path(dir.path())).unwrap();

    a.fail_task(&c2.id, "broken").unwrap();
    let mut reused = false;
    for _ in 0..16 {
        a.compact().unwrap();
        if std::fs::metadata(log_path(dir.path())).unwrap().ino() == seen_by_b.ino() {
            reused = true;
            break;
        }
    }
    let mut later = Vec::new();
    while std::fs::metadata(log_path(dir.path())).unwrap().len() < seen_by_b.len() {
        later.push(a.create_task(request("c3")).unwrap().id);
    }
    later.push(a.create_task(request("c3")).unwrap().id);

    assert_eq!(b.get_task(&c1.id).unwrap().status, TaskStatus::Open);
    assert_eq!(b.get_task(&c2.id).unwrap().status, TaskStatus::Failed);
    for id in &later {
        assert!(b.get_task(id).is_ok(), "B lost {id}");
    }
    assert!(matches!(
        b.claim_task(&c2.id, &ClaimRequest::default()),
        Err(Error::NotClaimable { .. })
    ));
    assert_eq!(a.get_task(&c2.id).unwrap().status, TaskStatus::Failed);
    reused
}

/// The scenario above, repeated (bounded) until the file system hands B's inode number back,
/// which it does about every other time on a busy ext4. Once B holds its file open the number
/// can never come back, and every repetition must pass all the same.
#[test]
fn compaction_between_two_stores_never_resurrects_a_failed_task() {
    for _ in 0..16 {
        if two_stores_with_compaction_in_between() {
            break;
        }
    }
}

/// Issue 14 item 5: a backlog row claiming an open task with a claim time the model refuses
/// (-1, NaN, Infinity) is reported and skipped; creating and failing tasks goes on.
#[test]
fn a_hostile_backlog_claim_time_is_reported_and_skipped() {
    for claimed_at in ["-1", "NaN", "Infinity", "-Infinity", "1e400"] {
        let (dir, store) = project();
        let victim = store.create_task(request("victim")).unwrap();
        let row = format!(
            r#"[{{"id": "{}", "status": "in_progress", "claimer": "w", "claimed_at": {claimed_at}}}]"#,
            victim.id
        );
        std::fs::write(runtime(dir.path()).join("task-backlog.json"), row).unwrap();
        let other = store
            .create_task(request("after the hostile row"))
            .unwrap_or_else(|e| panic!("claimed_at {claimed_at}: {e}"));
        store
            .fail_task(&other.id, "still served")
            .unwrap_or_else(|e| panic!("claimed_at {claimed_at}: {e}"));
        store
            .fail_task(&victim.id, "the row's task itself")
            .unwrap_or_else(|e| panic!("claimed_at {claimed_at}: {e}"));
        let reported = store
            .evidence_failures()
            .iter()
            .any(|f| f.task_id == victim.id.as_str() && f.message.contains("row skipped"));
        assert!(
            reported,
            "claimed_at {claimed_at}: {:?}",
            store.evidence_failures()
        );
    }
    // The verifier names such a row with its file, row and kind.
    let (dir, store) = project();
    let victim = store.create_task(request("victim")).unwrap();
    let row = format!(
        r#"[{{"id": "{}", "status": "in_progress", "claimer": "w", "claimed_at": NaN}}]"#,
        victim.id
    );
    std::fs::write(runtime(dir.path()).join("task-backlog.json"), row).unwrap();
    let gaps = verify_task_log(dir.path(), None).unwrap();
    assert!(
        gaps.iter().any(|g| g.kind == "unadoptable_backlog_row"
            && g.line == 1
            && g.file.ends_with("task-backlog.json")),
        "{gaps:?}"
    );
}

/// A transaction whose evidence marker is missing is named, and only that one.
#[test]
fn only_the_transaction_without_its_marker_is_named_unwritten() {
    let (dir, store) = project();
    store.create_task(request("one")).unwrap();
    store.create_task(request("two")).unwrap();
    let log = runtime(dir.path()).join("tasks.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[1].starts_with("{\"evidence_written\""),
        "{}",
        lines[1]
    );
    // Blanked, not removed: markers name byte offsets, which must not move.
    let blank = " ".repeat(lines[1].len());
    let without = [lines[0], blank.as_str(), lines[2], lines[3]].join("\n") + "\n";
    std::fs::write(&log, without).unwrap();
    let gaps = verify_task_log(dir.path(), None).unwrap();
    let unwritten: Vec<u64> = gaps
        .iter()
        .filter(|g| g.kind == "unwritten_evidence")
        .map(|g| g.line)
        .collect();
    assert_eq!(unwritten, [1], "{gaps:?}");
}

/// Debris at the end of the log (an unfinished write) is named as a torn tail on the line
/// after the last complete record, with its offset and length.
#[test]
fn a_torn_tail_is_named_on_the_line_after_the_last_record() {
    let (dir, store) = project();
    store.create_task(request("one")).unwrap();
    store.create_task(request("two")).unwrap();
    let log = runtime(dir.path()).join("tasks.jsonl");
    let mut bytes = std::fs::read(&log).unwrap();
    let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    let offset = bytes.len();
    bytes.extend_from_slice(b"{\"id\": \"unfin");
    std::fs::write(&log, &bytes).unwrap();
    let gaps = verify_task_log(dir.path(), None).unwrap();
    let torn: Vec<_> = gaps.iter().filter(|g| g.kind == "torn_tail").collect();
    assert_eq!(torn.len(), 1, "{gaps:?}");
    assert_eq!(torn[0].line, lines + 1);
    assert_eq!(
        torn[0].detail,
        format!("13 byte(s) of an unfinished write at offset {offset}")
    );
}

/// A backlog put back to an older copy is no evidence gap (the backlog is brought in step when
/// a reader needs it), and the next sync rewrites it from the task log.
#[test]
fn a_stale_backlog_is_brought_in_step_by_the_next_sync() {
    let (dir, store) = project();
    let task = store.create_task(request("t")).unwrap();
    store.sync_backlog().unwrap();
    let path = runtime(dir.path()).join("task-backlog.json");
    let old = std::fs::read(&path).unwrap();
    assert!(String::from_utf8_lossy(&old).contains(task.id.as_str()));
    store.fail_task(&task.id, "gone").unwrap();
    store.sync_backlog().unwrap();
    let current = std::fs::read(&path).unwrap();
    assert_eq!(current, b"[]");
    std::fs::write(&path, &old).unwrap();
    assert_eq!(verify_task_log(dir.path(), None).unwrap(), []);
    store.create_task(request("next")).unwrap();
    store.sync_backlog().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(task.id.as_str()), "{text}");
}

fn claim_events(dir: &Path, id: &TaskId) -> usize {
    AuditChain::open(dir.join(".sdd/audit"), test_key())
        .verified_records()
        .filter(|r| r.event_type == "task.claim_receipt" && r.resource_id == id.as_str())
        .count()
}

fn claimed_rows(dir: &Path, id: &TaskId) -> usize {
    load_run_journal(dir, &task_run_id(id.as_str()))
        .unwrap()
        .rows
        .iter()
        .filter(|r| r.get("event").and_then(Value::as_str) == Some("task_claimed"))
        .count()
}

/// Issue 14 item 6a: a crash after the task log holds a claim, at each point before its
/// evidence is complete, is finished on the next open: one `task_claimed` row, one claim
/// receipt, the backlog in step, and `verify_task_log` names the gap before and none after.
/// Opening again writes nothing twice.
#[test]
fn evidence_a_crash_left_unwritten_is_written_once_on_open() {
    for point in [
        CrashPoint::AfterLogAppend,
        CrashPoint::AfterBacklog,
        CrashPoint::AfterJournalRows,
    ] {
        let (dir, store) = project();
        let task = store.create_task(request("crash")).unwrap();
        store.set_crash_point(Some(point));
        let claim = ClaimRequest {
            claimer: Some("worker-x".into()),
            ..ClaimRequest::default()
        };
        assert!(store.claim_task(&task.id, &claim).is_err(), "{point:?}");
        drop(store);

        let chain = AuditChain::open(dir.path().join(".sdd/audit"), test_key());
        let gaps = verify_task_log(dir.path(), Some(&chain)).unwrap();
        let kinds: Vec<&str> = gaps.iter().map(|g| g.kind).collect();
        assert!(kinds.contains(&"unwritten_evidence"), "{point:?}: {gaps:?}");
        assert!(
            kinds.contains(&"missing_audit_event"),
            "{point:?}: {gaps:?}"
        );
        assert_eq!(
            kinds.contains(&"missing_journal_row"),
            point != CrashPoint::AfterJournalRows,
            "{point:?}: {gaps:?}"
        );
        assert!(
            gaps.iter()
                .all(|g| g.file.ends_with("tasks.jsonl") && g.line > 0)
        );

        for _ in 0..2 {
            let reopened = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
            assert_eq!(reopened.evidence_failures(), [], "{point:?}");
            assert_eq!(
                reopened.get_task(&task.id).unwrap().status,
                TaskStatus::Claimed
            );
            reopened.sync_backlog().unwrap();
        }
        assert_eq!(claimed_rows(dir.path(), &task.id), 1, "{point:?}");
        assert_eq!(claim_events(dir.path(), &task.id), 1, "{point:?}");
        let backlog =
            std::fs::read_to_string(runtime(dir.path()).join("task-backlog.json")).unwrap();
        assert!(backlog.contains("worker-x"), "{point:?}: {backlog}");
        assert_eq!(
            verify_task_log(dir.path(), Some(&chain)).unwrap(),
            [],
            "{point:?}"
        );
    }
}

/// The same replay happens under the lock before the next mutation of a store that is
/// already open (another process's crash, seen by a live server).
#[test]
fn a_live_store_finishes_another_writers_evidence_before_its_next_change() {
    let (dir, live) = project();
    let crashed = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    let task = crashed.create_task(request("crash")).unwrap();
    crashed.set_crash_point(Some(CrashPoint::AfterLogAppend));
    assert!(crashed.fail_task(&task.id, "died").is_err());
    drop(crashed);
    live.create_task(request("next")).unwrap();
    assert_eq!(live.evidence_failures(), []);
    let journal = load_run_journal(dir.path(), &task_run_id(task.id.as_str())).unwrap();
    assert!(
        journal
            .rows
            .iter()
            .any(|r| r.get("event").and_then(Value::as_str) == Some("task_failed"))
    );
    let chain = AuditChain::open(dir.path().join(".sdd/audit"), test_key());
    assert_eq!(verify_task_log(dir.path(), Some(&chain)).unwrap(), []);
}

/// Issue 14 item 6c: a plan whose document could not be written (the plans directory is
/// blocked by a file) leaves planned tasks that the next open gives their plan back.
#[test]
fn a_plan_whose_document_failed_is_written_on_the_next_open() {
    let (dir, store) = project();
    let plans = runtime(dir.path()).join("plans");
    std::fs::write(&plans, b"in the way").unwrap();
    let err = store
        .create_plan("goal", vec![request("p1"), request("p2")])
        .unwrap_err();
    assert_eq!(err.code(), "storage", "{err}");
    let planned = store
        .list_tasks(&ListQuery {
            status: Some(TaskStatus::Planned),
            ..ListQuery::all()
        })
        .unwrap()
        .tasks;
    assert_eq!(planned.len(), 2);
    std::fs::remove_file(&plans).unwrap();

    let reopened = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    let listed = reopened.list_plans().unwrap();
    assert_eq!(listed.len(), 1);
    let ids: Vec<String> = listed[0]
        .content
        .task_estimates
        .iter()
        .map(|e| e.task_id.clone())
        .collect();
    let mut expected: Vec<String> = planned.iter().map(|t| t.id.to_string()).collect();
    expected.sort();
    let mut got = ids.clone();
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(listed[0].status, PlanStatus::Pending);
    let decision = reopened.approve_plan(listed[0].id(), "go").unwrap();
    assert_eq!(decision.task_ids.len(), 2);
}

/// Issue 14 item 6c: an approval that moved the tasks and then died before the plan document
/// said so is finished before the next decision, so a later rejection is refused.
#[test]
fn a_reject_after_a_failed_approve_is_refused() {
    let (_dir, store) = project();
    let plan = store
        .create_plan("goal", vec![request("p1"), request("p2")])
        .unwrap();
    store.set_crash_point(Some(CrashPoint::AfterBacklog));
    assert!(store.approve_plan(plan.id(), "ship it").is_err());
    store.set_crash_point(None);
    let err = store.reject_plan(plan.id(), "too late").unwrap_err();
    assert!(
        matches!(&err, Error::PlanAlreadyDecided { status, .. } if status == "approved"),
        "{err}"
    );
    assert_eq!(
        store.get_plan(plan.id()).unwrap().status,
        PlanStatus::Approved
    );
    for estimate in &store.get_plan(plan.id()).unwrap().content.task_estimates {
        let id = TaskId::parse(&estimate.task_id).unwrap();
        assert_eq!(store.get_task(&id).unwrap().status, TaskStatus::Open);
    }
}

/// Issue 14 item 8: the reference server appends to the log without the store lock, so bytes
/// past the last complete record may be another writer's. They are sealed in place, never cut,
/// and a complete line such a writer added after our last read is folded, not dropped.
#[test]
fn bytes_past_the_last_record_are_never_cut() {
    let (dir, store) = project();
    let first = store.create_task(request("first")).unwrap();
    let log = log_path(dir.path());
    let foreign = {
        let other_dir = tempfile::tempdir().unwrap();
        let other = EmbeddedStore::open(other_dir.path(), None).unwrap();
        let task = other.create_task(request("foreign")).unwrap();
        let text = std::fs::read_to_string(log_path(other_dir.path())).unwrap();
        (task.id, text.lines().next().unwrap().to_owned())
    };
    // A complete foreign line, then the start of another one still being written.
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(foreign.1.as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(b"{\"id\": \"unfinished\", \"ti");
    std::fs::write(&log, &bytes).unwrap();

    let next = store.create_task(request("next")).unwrap();
    let after = std::fs::read(&log).unwrap();
    assert!(after.starts_with(&bytes), "the debris was cut");
    let reopened = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    for id in [&first.id, &foreign.0, &next.id] {
        assert!(reopened.get_task(id).is_ok(), "{id} lost");
    }
    assert!(reopened.torn_tails().iter().any(|t| t.removed));
}

/// A store opened without the audit key writes the journal rows a crashed keyed store owed,
/// but leaves its audit events owed (it cannot write them) for the next store with the key.
#[test]
fn a_keyless_store_leaves_owed_audit_events_for_a_keyed_one() {
    let (dir, store) = project();
    let task = store.create_task(request("t")).unwrap();
    store.set_crash_point(Some(CrashPoint::AfterLogAppend));
    assert!(
        store
            .claim_task(&task.id, &ClaimRequest::default())
            .is_err()
    );
    drop(store);

    let keyless = EmbeddedStore::open(dir.path(), None).unwrap();
    keyless.create_task(request("u")).unwrap();
    assert_eq!(claimed_rows(dir.path(), &task.id), 1);
    assert_eq!(claim_events(dir.path(), &task.id), 0);
    drop(keyless);

    EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    assert_eq!(claim_events(dir.path(), &task.id), 1);
    assert_eq!(claimed_rows(dir.path(), &task.id), 1);
    let chain = AuditChain::open(dir.path().join(".sdd/audit"), test_key());
    assert_eq!(verify_task_log(dir.path(), Some(&chain)).unwrap(), []);
}

/// Issue 14 item 2, the crash itself: the process dies after the log holds a failure and
/// before the backlog is rewritten, so the backlog still offers the failed task. A claim on
/// the backlog file through the store is refused; the task is never granted again.
#[test]
fn a_crash_before_the_backlog_rewrite_never_grants_the_task_again() {
    let (dir, store) = project();
    let task = store.create_task(request("t")).unwrap();
    store.sync_backlog().unwrap();
    store.set_crash_point(Some(CrashPoint::AfterLogAppend));
    assert!(store.fail_task(&task.id, "broken").is_err());
    store.set_crash_point(None);
    let backlog = std::fs::read_to_string(runtime(dir.path()).join("task-backlog.json")).unwrap();
    assert!(backlog.contains(task.id.as_str()), "{backlog}");

    let outcome = claim_on_rows(&store, dir.path(), "worker");
    assert!(!outcome.granted(), "{:?}", outcome.receipt);
    assert_eq!(store.get_task(&task.id).unwrap().status, TaskStatus::Failed);
}

/// Issue 13, many writers: after one store process claims through the backlog file (and so
/// rewrites it), the other's next mutations do not read and parse the file again, because
/// the first left the adopted note; a claim an outside writer then makes on the file (the
/// reference's receipt route) changes it past the note, and is read and adopted.
#[test]
fn a_backlog_another_store_adopted_is_not_parsed_again() {
    let (dir, first) = project();
    let second = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    for n in 0..20 {
        first.create_task(request(&format!("t{n}"))).unwrap();
    }
    second.create_task(request("seen")).unwrap();
    assert!(claim_on_rows(&first, dir.path(), "worker").granted());

    let before = second.backlog_reads();
    for n in 0..3 {
        second.create_task(request(&format!("after {n}"))).unwrap();
    }
    assert_eq!(
        second.backlog_reads(),
        before,
        "the second store parsed a backlog the first had already adopted"
    );

    let id = outsider_claim(dir.path());
    second.create_task(request("later")).unwrap();
    assert_eq!(second.backlog_reads(), before + 1);
    let adopted = second.get_task(&id).unwrap();
    assert_eq!(adopted.status, TaskStatus::Claimed);
    assert_eq!(adopted.claimed_by.as_deref(), Some("outsider"));
}

/// A granted claim the task log cannot take (its adoption fails) is written to the backlog file
/// instead, from which the next mutation adopts it: the granted task never stays claimable.
#[test]
fn a_claim_the_log_cannot_take_is_kept_on_the_backlog_and_adopted_later() {
    use bernstein_journal::claim::{
        ClaimFilter, ClaimRequest as BacklogClaim, ClaimTime, claim_on_entries, entries_from_rows,
    };

    let (dir, store) = project();
    let task = store.create_task(request("only")).unwrap();
    let log = log_path(dir.path());
    let aside = runtime(dir.path()).join("tasks.jsonl.aside");
    let claim = BacklogClaim::new("worker", ClaimFilter::default());
    let outcome = store
        .claim_on_backlog(
            |rows| {
                let entries = entries_from_rows(rows.iter().copied(), "task-backlog.json")?;
                let outcome =
                    claim_on_entries(dir.path(), test_key(), &claim, entries, ClaimTime::now())?;
                // The log becomes unwritable between the claim and its adoption.
                std::fs::rename(&log, &aside).unwrap();
                std::fs::create_dir(&log).unwrap();
                Ok::<_, bernstein_journal::Error>(outcome)
            },
            |outcome| {
                outcome
                    .granted()
                    .then_some(outcome.normalised_rows.as_slice())
            },
        )
        .unwrap()
        .unwrap();
    assert!(outcome.granted());
    assert_eq!(outcome.receipt.task_id, task.id.as_str());
    assert!(
        store
            .evidence_failures()
            .iter()
            .any(|failure| failure.target == "backlog claim adoption"),
        "{:?}",
        store.evidence_failures()
    );
    std::fs::remove_dir(&log).unwrap();
    std::fs::rename(&aside, &log).unwrap();
    let backlog = std::fs::read_to_string(runtime(dir.path()).join("task-backlog.json")).unwrap();
    assert!(backlog.contains(r#""claimer": "worker""#), "{backlog}");
    assert_eq!(store.get_task(&task.id).unwrap().status, TaskStatus::Open);

    store.create_task(request("next")).unwrap();
    let adopted = store.get_task(&task.id).unwrap();
    assert_eq!(adopted.status, TaskStatus::Claimed);
    assert_eq!(adopted.claimed_by.as_deref(), Some("worker"));
    let other = claim_on_rows(&store, dir.path(), "other");
    assert!(other.granted());
    assert_ne!(
        other.receipt.task_id,
        task.id.as_str(),
        "the task was granted twice"
    );
}

/// A claim adopts its grant while it holds the backlog lock, so that adoption must not look at
/// the backlog file again: doing so when the file's stamp moved (a writer that ignores the
/// lock, here) took the lock a second time on the same descriptor, and dropping that inner
/// guard released the claim's own lock before the claim's write. The adoption now reads
/// nothing; the file is parsed once, by the projection before the claim.
#[test]
fn a_claim_adopts_its_grant_without_reading_the_backlog_it_holds() {
    use bernstein_journal::claim::{
        ClaimFilter, ClaimRequest as BacklogClaim, ClaimTime, claim_on_entries, entries_from_rows,
    };

    let (dir, store) = project();
    let task = store.create_task(request("only")).unwrap();
    store.sync_backlog().unwrap();
    let path = runtime(dir.path()).join("task-backlog.json");
    let reads = store.backlog_reads();
    let claim = BacklogClaim::new("worker", ClaimFilter::default());
    let outcome = store
        .claim_on_backlog(
            |rows| {
                let entries = entries_from_rows(rows.iter().copied(), "task-backlog.json")?;
                let outcome =
                    claim_on_entries(dir.path(), test_key(), &claim, entries, ClaimTime::now())?;
                // A lockless writer touches the file: same rows, new bytes and stamp.
                let text = std::fs::read_to_string(&path).unwrap();
                std::fs::write(&path, format!("{text}\n")).unwrap();
                Ok::<_, bernstein_journal::Error>(outcome)
            },
            |outcome| {
                outcome
                    .granted()
                    .then_some(outcome.normalised_rows.as_slice())
            },
        )
        .unwrap()
        .unwrap();
    assert!(outcome.granted());
    assert_eq!(
        store.backlog_reads(),
        reads,
        "the adoption read the backlog the claim holds"
    );
    assert_eq!(
        store.get_task(&task.id).unwrap().claimed_by.as_deref(),
        Some("worker")
    );
    assert_eq!(store.evidence_failures(), []);
}
