//! Bad input: every refusal is a clear error and leaves every byte under `.sdd/` as it was.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bernstein_tasks::backend::{ClaimRequest, ListQuery};
use bernstein_tasks::embedded::EmbeddedStore;
use bernstein_tasks::{Error, NewTask, TaskId, TaskStatus};

use crate::embedded::{project, runtime, test_key};
use crate::suite::request;

/// Every file under `dir` with its bytes (lock files included: they must not grow either).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// Runs `refused` against a store that already holds some history, and checks that it fails
/// with an error whose text is `expect`, writing nothing.
fn check_refused(
    dir: &Path,
    refused: impl FnOnce() -> Result<(), Error>,
    expect: impl FnOnce(&Error) -> bool,
) {
    let before = tree(dir);
    let error = refused().expect_err("the request must be refused");
    assert!(expect(&error), "unexpected error: {error:?}");
    assert_eq!(
        tree(dir),
        before,
        "a refused request changed files: {error}"
    );
}

fn seeded() -> (tempfile::TempDir, EmbeddedStore, TaskId) {
    let (dir, store) = project();
    let parent = store.create_task(request("parent")).unwrap();
    store.create_subtask(&parent.id, request("child")).unwrap();
    (dir, store, parent.id)
}

#[test]
fn ids_that_could_name_other_paths_are_refused_before_any_lookup() {
    for bad in ["a/b", "../x", "..", ".", "", "a\\b", "a b", "a\0b"] {
        assert!(
            matches!(TaskId::parse(bad), Err(Error::InvalidTaskId { .. })),
            "{bad:?}"
        );
    }
    let (dir, store, _) = seeded();
    for bad in ["../x", "a/b", ".."] {
        check_refused(
            dir.path(),
            || store.get_plan(bad).map(|_| ()),
            |e| matches!(e, Error::InvalidTaskId { .. }),
        );
        check_refused(
            dir.path(),
            || store.approve_plan(bad, "ok").map(|_| ()),
            |e| matches!(e, Error::InvalidTaskId { .. }),
        );
    }
}

#[test]
fn unknown_ids_and_illegal_transitions_write_nothing() {
    let (dir, store, parent) = seeded();
    let missing = TaskId::parse("000000000000").unwrap();
    check_refused(
        dir.path(),
        || store.complete_task(&missing, "x").map(|_| ()),
        |e| matches!(e, Error::NotFound { .. }),
    );
    check_refused(
        dir.path(),
        || {
            store
                .claim_task(&missing, &ClaimRequest::default())
                .map(|_| ())
        },
        |e| e.http_status() == 404,
    );
    check_refused(
        dir.path(),
        || store.cancel_task(&missing, "x").map(|_| ()),
        |e| e.to_string() == "Task '000000000000' not found",
    );
    check_refused(
        dir.path(),
        || store.create_subtask(&missing, request("x")).map(|_| ()),
        |e| e.to_string() == "Parent task '000000000000' not found",
    );
    let mut orphan = request("orphan");
    orphan.parent_task_id = Some(missing.clone());
    check_refused(
        dir.path(),
        || store.create_task(orphan).map(|_| ()),
        |e| e.http_status() == 404,
    );
    // The parent waits for its subtask: completing it is refused by the gate, atomically.
    check_refused(
        dir.path(),
        || store.complete_task(&parent, "by hand").map(|_| ()),
        |e| {
            matches!(
                e,
                Error::NotCompletable {
                    status: TaskStatus::WaitingForSubtasks,
                    ..
                }
            )
        },
    );
    check_refused(
        dir.path(),
        || {
            store
                .claim_task(&parent, &ClaimRequest::default())
                .map(|_| ())
        },
        |e| matches!(e, Error::NotClaimable { .. }),
    );
    let done = store.create_task(request("done")).unwrap();
    store.complete_task(&done.id, "ok").unwrap();
    check_refused(
        dir.path(),
        || store.cancel_task(&done.id, "late").map(|_| ()),
        |e| {
            matches!(
                e,
                Error::NotCancellable {
                    status: TaskStatus::Done,
                    ..
                }
            )
        },
    );
    check_refused(
        dir.path(),
        || store.complete_task(&done.id, "again").map(|_| ()),
        |e| {
            matches!(
                e,
                Error::NotCompletable {
                    status: TaskStatus::Done,
                    ..
                }
            )
        },
    );
    check_refused(
        dir.path(),
        || store.approve_task(&done.id, "ok").map(|_| ()),
        |e| matches!(e, Error::NotApprovable { .. }),
    );
}

#[test]
fn oversized_fields_are_refused_with_every_problem_listed() {
    let (dir, store, _) = seeded();
    let long_title = NewTask::new("t".repeat(1025), "d");
    check_refused(
        dir.path(),
        || store.create_task(long_title).map(|_| ()),
        |e| e.to_string() == "invalid task: title: is 1025 characters, more than 1024",
    );
    let long_description = NewTask::new("t", "d".repeat(8193));
    check_refused(
        dir.path(),
        || store.create_task(long_description).map(|_| ()),
        |e| {
            e.to_string() == "invalid task: description: is 8193 characters, more than 8192"
                && e.http_status() == 422
        },
    );
    let mut everything = NewTask::new("", "d".repeat(8193));
    everything.priority = 9;
    everything.role = String::new();
    check_refused(
        dir.path(),
        || store.create_task(everything).map(|_| ()),
        |e| matches!(e, Error::InvalidTask(problems) if problems.len() == 4),
    );
    // Exactly at the limits is fine.
    store
        .create_task(NewTask::new("t".repeat(1024), "d".repeat(8192)))
        .unwrap();
    // A bad claimer id is refused as a field problem, before anything is written.
    let task = store.create_task(request("claim me")).unwrap();
    let bad_claimer = ClaimRequest {
        claimer: Some("worker/1".into()),
        ..ClaimRequest::default()
    };
    check_refused(
        dir.path(),
        || store.claim_task(&task.id, &bad_claimer).map(|_| ()),
        |e| matches!(e, Error::InvalidTask(_)),
    );
    // A plan with a bad task creates neither tasks nor a plan.
    check_refused(
        dir.path(),
        || {
            store
                .create_plan("goal", vec![request("fine"), NewTask::new("", "")])
                .map(|_| ())
        },
        |e| matches!(e, Error::InvalidTask(_)),
    );
    check_refused(
        dir.path(),
        || store.create_plan("goal", Vec::new()).map(|_| ()),
        |e| matches!(e, Error::InvalidRequest(_)),
    );
}

#[test]
fn a_corrupt_line_in_the_middle_is_a_clear_error_and_nothing_is_written() {
    let (dir, store, parent) = seeded();
    store.create_task(request("third")).unwrap();
    let log = runtime(dir.path()).join("tasks.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(1, "{\"id\": \"x\", \"title\": 1}");
    let corrupt = lines.join("\n") + "\n";
    std::fs::write(&log, &corrupt).unwrap();

    // A fresh open refuses, naming the file and the line.
    let before = tree(dir.path());
    let error = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "task store file {} is corrupt at line 2: title: must be a string; description: is missing; role: is missing",
            log.display()
        )
    );
    assert_eq!(error.code(), "corrupt_store");
    assert_eq!(tree(dir.path()), before);

    // A store that was already open refuses every operation once it reads the damage.
    check_refused(
        dir.path(),
        || store.create_task(request("more")).map(|_| ()),
        |e| matches!(e, Error::CorruptStore { line: Some(_), .. }),
    );
    check_refused(
        dir.path(),
        || store.cancel_task(&parent, "x").map(|_| ()),
        |e| matches!(e, Error::CorruptStore { .. }),
    );
    check_refused(
        dir.path(),
        || store.list_tasks(&ListQuery::all()).map(|_| ()),
        |e| matches!(e, Error::CorruptStore { .. }),
    );
    check_refused(
        dir.path(),
        || store.compact().map(|_| ()),
        |e| matches!(e, Error::CorruptStore { .. }),
    );
}

#[test]
fn other_kinds_of_damage_are_named() {
    let check = |content: &[u8], expect: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(runtime(dir.path())).unwrap();
        let log = runtime(dir.path()).join("tasks.jsonl");
        std::fs::write(&log, content).unwrap();
        let error = EmbeddedStore::open(dir.path(), None).unwrap_err();
        let message = error.to_string();
        assert!(message.contains(expect), "{message}");
        assert_eq!(std::fs::read(&log).unwrap(), content);
    };
    let valid = {
        // Without an audit key a creation owes no evidence: one plain record line.
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path(), None).unwrap();
        store.create_task(request("valid")).unwrap();
        std::fs::read_to_string(runtime(dir.path()).join("tasks.jsonl")).unwrap()
    };
    assert_eq!(valid.lines().count(), 1, "{valid}");
    check(b"not json\n", "at line 1: not JSON");
    check(b"[1, 2]\n", "at line 1: not a JSON object");
    check(b"\xff\xfe\n", "at line 1: not UTF-8");
    check(
        format!("{valid}garbage\n{valid}").as_bytes(),
        "at line 2: not JSON",
    );
    let batched = valid.replace("}\n", ", \"batch\": [2, 2]}\n");
    check(
        batched.as_bytes(),
        "transaction record 2/2 where record 1 was due",
    );
    let first_of_two = valid.replace("}\n", ", \"batch\": [1, 2]}\n");
    check(
        format!("{first_of_two}{valid}").as_bytes(),
        "at line 2: a transaction of 2 records ends after 1",
    );
}

#[test]
fn a_workdir_that_is_not_a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let error = EmbeddedStore::open(&file, None).unwrap_err();
    assert_eq!(error.code(), "storage");
    let error = EmbeddedStore::open(dir.path().join("missing"), None).unwrap_err();
    assert!(matches!(
        error,
        Error::Storage {
            kind: std::io::ErrorKind::NotFound,
            ..
        }
    ));
}
