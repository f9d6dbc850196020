//! Issue 13 (scale): catching up reads only what other processes appended, a prefix changed
//! behind the store's back is detected and read again in full, oversized lines are refused,
//! the status counts kept as records are applied equal a recount after every kind of change,
//! and the backlog a sync writes incrementally equals the one a fresh store projects.

use std::path::Path;

use bernstein_protocol::pyjson::Value;
use bernstein_tasks::backend::{ClaimRequest, ListQuery, StatusSummary};
use bernstein_tasks::embedded::{EmbeddedStore, MAX_LINE_BYTES};
use bernstein_tasks::{Error, NewTask, TaskId, TaskStatus};
use proptest::prelude::*;

use crate::embedded::{backlog, claim_on_rows, outsider_claim, project, runtime, test_key};
use crate::suite::request;

fn log_len(dir: &Path) -> u64 {
    std::fs::metadata(runtime(dir).join("tasks.jsonl"))
        .unwrap()
        .len()
}

#[test]
fn catching_up_reads_only_the_appended_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let writer = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    for n in 0..40 {
        writer.create_task(request(&format!("before {n}"))).unwrap();
    }
    let reader = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    assert_eq!(reader.status_summary().unwrap().total, 40);
    let before = reader.log_read_stats();
    assert_eq!(before.catch_up_bytes, log_len(dir.path()));
    let known = log_len(dir.path());

    let mut later = Vec::new();
    for n in 0..3 {
        later.push(writer.create_task(request(&format!("after {n}"))).unwrap());
    }
    writer.fail_task(&later[0].id, "broken").unwrap();
    let grown = log_len(dir.path()) - known;
    let summary = reader.status_summary().unwrap();
    assert_eq!((summary.total, summary.failed), (43, 1));
    let after = reader.log_read_stats();
    assert_eq!(
        after.catch_up_bytes - before.catch_up_bytes,
        grown,
        "the catch-up read exactly the appended bytes"
    );
    assert_eq!(after.full_rereads, 0);
    // The prefix check costs one line, not the file.
    assert!(after.check_bytes - before.check_bytes < 4096, "{after:?}");

    // Nothing appended: nothing read but the check.
    reader.status_summary().unwrap();
    assert_eq!(reader.log_read_stats().catch_up_bytes, after.catch_up_bytes);
}

#[test]
fn a_prefix_rewritten_in_place_is_detected_and_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let writer = EmbeddedStore::open(dir.path(), None).unwrap();
    let first = writer.create_task(request("first title")).unwrap();
    let second = writer.create_task(request("other title")).unwrap();
    let reader = EmbeddedStore::open(dir.path(), None).unwrap();
    assert_eq!(reader.get_task(&second.id).unwrap().title, "other title");

    // Another process rewrites the file in place (same inode) with a changed line and appends
    // one more: the offset the reader holds no longer ends what it read.
    let path = runtime(dir.path()).join("tasks.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let changed = text.replace("\"other title\"", "\"new.. title\"");
    let third = text
        .lines()
        .next()
        .unwrap()
        .replace(first.id.as_str(), "feedbeef0001");
    std::fs::write(&path, format!("{changed}{third}\n")).unwrap();
    let inode_kept = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&path).unwrap().ino()
    };

    let stats = reader.log_read_stats();
    assert_eq!(reader.get_task(&second.id).unwrap().title, "new.. title");
    assert!(
        reader
            .get_task(&TaskId::parse("feedbeef0001").unwrap())
            .is_ok()
    );
    let after = reader.log_read_stats();
    assert_eq!(after.prefix_changes, stats.prefix_changes + 1);
    assert_eq!(after.full_rereads, stats.full_rereads + 1);
    {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode_kept);
    }

    // A rewrite that breaks a line is reported where it is corrupt, never built upon.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[0] = "{\"id\": \"broken\"";
    let mut broken = lines.join("\n");
    broken.push_str("\n{\"more\": 1}\n");
    std::fs::write(&path, broken).unwrap();
    match reader.status_summary() {
        Err(Error::CorruptStore { line, .. }) => assert_eq!(line, Some(1)),
        other => panic!("expected a corrupt store at line 1, got {other:?}"),
    }
}

#[test]
fn a_line_longer_than_the_cap_is_refused_with_its_line_number() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = EmbeddedStore::open(dir.path(), None).unwrap();
        store.create_task(request("fine")).unwrap();
    }
    let path = runtime(dir.path()).join("tasks.jsonl");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend(std::iter::repeat_n(b'x', MAX_LINE_BYTES + 1));
    bytes.extend(b"\n");
    std::fs::write(&path, &bytes).unwrap();
    let error = EmbeddedStore::open(dir.path(), None).unwrap_err();
    assert!(
        matches!(&error, Error::CorruptStore { line: Some(2), problem, .. }
            if problem.contains("longer than")),
        "{error}"
    );
    assert_eq!(std::fs::read(&path).unwrap().len(), bytes.len());
}

fn recount(store: &EmbeddedStore) -> StatusSummary {
    StatusSummary::from_tasks(&store.list_tasks(&ListQuery::all()).unwrap().tasks)
}

#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Subtask(usize, u8),
    Depend(usize),
    Claim(usize),
    Complete(usize, bool),
    Fail(usize),
    Cancel(usize),
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3).prop_map(Op::Create),
        1 => (any::<usize>(), 0u8..3).prop_map(|(p, r)| Op::Subtask(p, r)),
        1 => any::<usize>().prop_map(Op::Depend),
        2 => any::<usize>().prop_map(Op::Claim),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(t, e)| Op::Complete(t, e)),
        1 => any::<usize>().prop_map(Op::Fail),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

const ROLES: [&str; 3] = ["backend", "frontend", "qa"];

fn role_request(title: &str, role: u8) -> NewTask {
    let mut request = request(title);
    request.role = ROLES[usize::from(role)].to_owned();
    request
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    /// The counts `bernstein_status` reads, kept up to date as records are applied, equal a
    /// recount over every task after each create, claim, completion, failure, cancel (with
    /// its cascades), compaction and reopen; and the backlog synced incrementally equals the
    /// one a fresh store projects from the same log.
    #[test]
    fn status_counts_stay_exact_and_the_backlog_matches_a_full_projection(
        ops in proptest::collection::vec(op(), 1..24),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = EmbeddedStore::open(dir.path(), None).unwrap();
        let mut ids: Vec<TaskId> = Vec::new();
        let pick = |ids: &[TaskId], n: usize| ids.get(n % ids.len().max(1)).cloned();
        for (step, op) in ops.iter().enumerate() {
            // Refusals (illegal transitions, unmet dependencies) are part of the mix.
            match op {
                Op::Create(role) => {
                    ids.push(store.create_task(role_request(&format!("t{step}"), *role)).unwrap().id);
                }
                Op::Subtask(parent, role) => {
                    if let Some(parent) = pick(&ids, *parent)
                        && let Ok(task) = store.create_subtask(&parent, role_request("sub", *role))
                    {
                        ids.push(task.id);
                    }
                }
                Op::Depend(on) => {
                    if let Some(dep) = pick(&ids, *on) {
                        let mut request = request("dependent");
                        request.depends_on = vec![dep];
                        ids.push(store.create_task(request).unwrap().id);
                    }
                }
                Op::Claim(t) => {
                    if let Some(id) = pick(&ids, *t) {
                        let _ = store.claim_task(&id, &ClaimRequest {
                            claimer: Some("w".into()),
                            ..ClaimRequest::default()
                        });
                    }
                }
                Op::Complete(t, empty) => {
                    if let Some(id) = pick(&ids, *t) {
                        let _ = store.complete_task(&id, if *empty { "" } else { "done" });
                    }
                }
                Op::Fail(t) => {
                    if let Some(id) = pick(&ids, *t) {
                        let _ = store.fail_task(&id, "broken");
                    }
                }
                Op::Cancel(t) => {
                    if let Some(id) = pick(&ids, *t) {
                        let _ = store.cancel_task(&id, "not needed");
                    }
                }
                Op::Compact => {
                    store.compact().unwrap();
                }
                Op::Reopen => {
                    drop(store);
                    store = EmbeddedStore::open(dir.path(), None).unwrap();
                }
            }
            prop_assert_eq!(store.status_summary().unwrap(), recount(&store), "after {:?}", op);
        }

        store.sync_backlog().unwrap();
        let synced = std::fs::read(runtime(dir.path()).join("task-backlog.json")).unwrap_or_default();
        let fresh = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(runtime(fresh.path())).unwrap();
        if runtime(dir.path()).join("tasks.jsonl").exists() {
            std::fs::copy(
                runtime(dir.path()).join("tasks.jsonl"),
                runtime(fresh.path()).join("tasks.jsonl"),
            )
            .unwrap();
        }
        let other = EmbeddedStore::open(fresh.path(), None).unwrap();
        other.sync_backlog().unwrap();
        let projected = std::fs::read(runtime(fresh.path()).join("task-backlog.json")).unwrap_or_default();
        // No backlog file and `[]` say the same (readers take a missing file as empty): a
        // store that never had a claimable task leaves the file absent, while one whose tasks
        // all left the backlog rewrites it to `[]`.
        let rows = |bytes: &[u8]| if bytes.is_empty() { "[]".to_owned() } else { String::from_utf8_lossy(bytes).into_owned() };
        prop_assert_eq!(rows(&synced), rows(&projected));
        let open_rows = other
            .list_tasks(&ListQuery { status: Some(TaskStatus::Open), ..ListQuery::all() })
            .unwrap()
            .tasks
            .len();
        prop_assert_eq!(String::from_utf8_lossy(&projected).matches("\"status\": \"open\"").count(), open_rows);
    }
}

/// Issue 13, the claim's cost: a claim used to read and parse the whole backlog file four
/// times (the adoption check, the projection, the claim itself and the adoption after it),
/// each time in full, so a claim cost what the open backlog costs several times over. The
/// store now keeps the text and rows it last read or wrote, and a read that finds the same
/// bytes reuses them: claims on a backlog only this store wrote parse nothing. A claim made on
/// the file by someone else changes its bytes, is parsed once, adopted, and never granted
/// again.
#[test]
fn claims_parse_the_backlog_only_when_someone_else_changed_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    for n in 0..30 {
        store.create_task(request(&format!("t{n}"))).unwrap();
    }
    assert!(claim_on_rows(&store, dir.path(), "first").granted());
    let reads = store.backlog_reads();
    let mut granted = Vec::new();
    for n in 0..4 {
        store.create_task(request(&format!("more {n}"))).unwrap();
        let outcome = claim_on_rows(&store, dir.path(), "worker");
        let id = TaskId::parse(&outcome.receipt.task_id).unwrap();
        assert_eq!(store.get_task(&id).unwrap().status, TaskStatus::Claimed);
        store.complete_task(&id, "done").unwrap();
        granted.push(id);
    }
    assert_eq!(
        store.backlog_reads(),
        reads,
        "a claim parsed a backlog this store had written itself"
    );

    let taken = outsider_claim(dir.path());
    let next = claim_on_rows(&store, dir.path(), "worker");
    assert!(next.granted());
    assert_ne!(
        next.receipt.task_id,
        taken.as_str(),
        "a task claimed on the file was granted again"
    );
    assert_eq!(store.backlog_reads(), reads + 1);
    let adopted = store.get_task(&taken).unwrap();
    assert_eq!(adopted.claimed_by.as_deref(), Some("outsider"));

    // What the store leaves behind is exactly what a fresh store projects from the task log.
    drop(store);
    let path = runtime(dir.path()).join("task-backlog.json");
    let left = std::fs::read_to_string(&path).unwrap();
    let fresh = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    fresh.sync_backlog().unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), left);
    assert!(left.contains(next.receipt.task_id.as_str()), "{left}");
}

/// A backlog over the kept-rows cap (1 MiB, about 3,500 rows) is not kept between operations:
/// each claim parses it once (the projection before the claim; the store adopts the claim from
/// the rows it holds, not from the file), instead of holding a copy of every open row beside
/// the index.
#[test]
fn a_backlog_over_the_cap_is_parsed_again_and_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    store
        .create_tasks((0..4_000).map(|n| request(&format!("t{n}"))).collect())
        .unwrap();
    assert!(claim_on_rows(&store, dir.path(), "first").granted());
    let size = std::fs::metadata(runtime(dir.path()).join("task-backlog.json"))
        .unwrap()
        .len();
    assert!(size > 1 << 20, "the backlog is only {size} bytes");
    let reads = store.backlog_reads();
    assert!(claim_on_rows(&store, dir.path(), "second").granted());
    assert_eq!(store.backlog_reads(), reads + 1);
}

/// A claim leaves the backlog file as the task log projects it (the claimed row at the task's
/// version after the adoption), so the file is rewritten once per claim: bringing it in step
/// right after the claim, as the next claim does first, finds nothing to write.
#[test]
fn a_claim_leaves_the_backlog_in_step_with_the_log() {
    use std::os::unix::fs::MetadataExt;

    let (dir, store) = project();
    for n in 0..5 {
        store.create_task(request(&format!("t{n}"))).unwrap();
    }
    let outcome = claim_on_rows(&store, dir.path(), "worker");
    let id = TaskId::parse(&outcome.receipt.task_id).unwrap();
    let task = store.get_task(&id).unwrap();
    assert_eq!(task.status, TaskStatus::Claimed);

    let rows = backlog(dir.path());
    let row = rows
        .iter()
        .find(|row| row.get("id").and_then(Value::as_str) == Some(id.as_str()))
        .expect("the claimed task has a row");
    assert_eq!(
        row.get("status").and_then(Value::as_str),
        Some("in_progress")
    );
    assert_eq!(row.get("claimer").and_then(Value::as_str), Some("worker"));
    let version = row
        .get("metadata")
        .and_then(Value::as_object)
        .and_then(|metadata| metadata.get("version"))
        .map(Value::to_python_str);
    assert_eq!(
        version,
        Some(task.version.to_string()),
        "the row is not at the adopted version"
    );

    let path = runtime(dir.path()).join("task-backlog.json");
    let inode = std::fs::metadata(&path).unwrap().ino();
    store.sync_backlog().unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().ino(),
        inode,
        "bringing the backlog in step after a claim rewrote it"
    );
}

/// What cancelling a task cascaded to, as the store walks it on its index: the cancelled tasks
/// below the root reached only through cancelled tasks, in creation order. A task cancelled on
/// its own below a subtask that failed, and cancelled tasks elsewhere, are not among them.
#[test]
fn cancelled_descendants_follow_the_cancelled_subtree_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    let elsewhere = store.create_task(request("elsewhere")).unwrap();
    store.cancel_task(&elsewhere.id, "unrelated").unwrap();
    let root = store.create_task(request("root")).unwrap();
    let finished = store.create_subtask(&root.id, request("finished")).unwrap();
    let below_finished = store
        .create_subtask(&finished.id, request("below finished"))
        .unwrap();
    let second = store.create_subtask(&root.id, request("second")).unwrap();
    let grandchild = store
        .create_subtask(&second.id, request("grandchild"))
        .unwrap();
    store.cancel_task(&below_finished.id, "on its own").unwrap();
    store.fail_task(&finished.id, "given up early").unwrap();

    let outcome = store.cancel_task(&root.id, "stop").unwrap();
    assert_eq!(outcome.cancelled_descendants, 2);
    let ids: Vec<TaskId> = store
        .cancelled_descendants(&root.id)
        .unwrap()
        .into_iter()
        .map(|task| task.id)
        .collect();
    assert_eq!(ids, vec![second.id.clone(), grandchild.id.clone()]);
    assert!(
        store
            .cancelled_descendants(&elsewhere.id)
            .unwrap()
            .is_empty()
    );
}
