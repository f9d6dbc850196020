//! The work-ledger input of the progress fold (`work_ledger.LedgerReader.entries` +
//! `replay_state`, as `progress._project_ledger_phase` uses them).
//!
//! The ledger lives in `.sdd/runtime/ledger/<run_id>/000000.jsonl`. The progress read does not
//! verify its hash chain: it takes every line that parses as an object with an `entry_hash`,
//! builds an entry from it, and replays task transitions. The task's phase is the state of its
//! last task-level transition and its attempts are its `task.started` count.
//!
//! The reference catches `OSError` and `ValueError` (answering "no phase, 0 attempts") but lets
//! `KeyError`, `TypeError` and `OverflowError` from building an entry escape, which makes the
//! whole progress projection fail; both outcomes are reproduced. Unlike the reference, reading
//! does not create `.sdd/runtime/ledger`.

use crate::run_journal::{
    PyException, contained_path, for_each_physical_line, python_float_check, python_int_check,
    python_strip, validate_run_id,
};
use crate::{Error, Result};
use bernstein_protocol::pyjson::{Object, Value};
use std::path::Path;

/// The bucket file of a run's ledger.
const LEDGER_BUCKET: &str = "000000.jsonl";

/// `.sdd/runtime/ledger` under a project root.
fn ledger_root(project_root: &Path) -> std::path::PathBuf {
    project_root.join(".sdd").join("runtime").join("ledger")
}

/// The `(phase, attempts)` the work ledger of `run_id` records for `task_id`, or `("", 0)` when
/// there is no ledger, no entry for the task, or the reference would swallow the failure.
///
/// # Errors
///
/// [`Error::Malformed`] where the reference's entry construction raises an exception it does
/// not catch (a row missing `seq`, `prev_hash` or `kind`, a `null`/array/object where a number
/// is required, an infinite `seq`).
pub fn read_ledger_task_state(
    project_root: &Path,
    run_id: &str,
    task_id: &str,
) -> Result<(String, u64)> {
    const NOTHING: (String, u64) = (String::new(), 0);
    if run_id.is_empty() || validate_run_id(run_id).is_err() {
        return Ok(NOTHING);
    }
    let Ok(ledger_dir) = contained_path(project_root, &ledger_root(project_root), &[run_id]) else {
        return Ok(NOTHING);
    };
    let Ok(bucket) = contained_path(project_root, &ledger_dir, &[LEDGER_BUCKET]) else {
        return Ok(NOTHING);
    };
    let bytes = match std::fs::read(&bucket) {
        Ok(bytes) => bytes,
        Err(_) => return Ok(NOTHING),
    };
    // Python decodes the file strictly as UTF-8; a decode error is a ValueError, swallowed.
    if std::str::from_utf8(&bytes).is_err() {
        return Ok(NOTHING);
    }
    let mut outcome: std::result::Result<ReplayedTask, PyException> = Ok(ReplayedTask::default());
    let mut last = None;
    // Reading from memory cannot fail.
    let _ = for_each_physical_line(
        bytes.as_slice(),
        |_, line| {
            let Ok(replayed) = outcome.as_mut() else {
                return;
            };
            if let Err(exc) = replay_line(replayed, line, task_id) {
                outcome = Err(exc);
            }
        },
        &mut last,
    );
    match outcome {
        Ok(task) => Ok((task.phase, task.attempts)),
        Err(PyException::Value) => Ok(NOTHING),
        Err(exc) => Err(Error::Malformed {
            what: "work ledger",
            reason: format!(
                "{}: {exc_name} while reading an entry",
                bucket.display(),
                exc_name = exc.name()
            ),
        }),
    }
}

/// The replay state of one task.
#[derive(Debug, Default)]
struct ReplayedTask {
    phase: String,
    attempts: u64,
}

/// The state a task-level transition kind moves a task to.
fn task_state_for_kind(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "task.scheduled" => "scheduled",
        "task.started" | "task.resumed" => "started",
        "task.completed" => "completed",
        "task.failed" => "failed",
        "task.abandoned" => "abandoned",
        "task.suspended" => "suspended",
        _ => return None,
    })
}

fn replay_line(task: &mut ReplayedTask, line: &[u8], task_id: &str) -> Result<(), PyException> {
    let text = python_strip(std::str::from_utf8(line).map_err(|_| PyException::Value)?);
    if text.is_empty() {
        return Ok(());
    }
    let Ok(Value::Object(row)) = Value::parse(text) else {
        return Ok(());
    };
    if !row.contains_key("entry_hash") {
        return Ok(());
    }
    let (kind, entry_task_id) = entry_from_row(&row)?;
    if let Some(state) = task_state_for_kind(&kind)
        && entry_task_id == task_id
    {
        state.clone_into(&mut task.phase);
        if kind == "task.started" {
            task.attempts += 1;
        }
    }
    Ok(())
}

/// `LedgerEntry.from_dict`: the `(kind, task_id)` of a row, or the exception it raises.
fn entry_from_row(row: &Object) -> Result<(String, String), PyException> {
    let required = |key: &str| row.get(key).ok_or(PyException::Key);
    python_int_check(required("seq")?)?;
    required("prev_hash")?;
    let kind = required("kind")?.to_python_str();
    let task_id = row
        .get("task_id")
        .map(Value::to_python_str)
        .unwrap_or_default();
    if let Some(ts) = row.get("ts") {
        python_float_check(ts)?;
    }
    for key in ["redactions", "schema_version"] {
        if let Some(value) = row.get(key) {
            python_int_check(value)?;
        }
    }
    Ok((kind, task_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project_with_ledger(content: &[u8]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join(".sdd/runtime/ledger/run-1");
        std::fs::create_dir_all(&ledger).unwrap();
        std::fs::write(ledger.join(LEDGER_BUCKET), content).unwrap();
        dir
    }

    fn entry(seq: u64, kind: &str, task: &str) -> String {
        format!(
            "{{\"seq\": {seq}, \"prev_hash\": \"p\", \"kind\": \"{kind}\", \"task_id\": \"{task}\", \"payload\": {{}}, \"entry_hash\": \"h{seq}\", \"ts\": 1.0}}\n"
        )
    }

    #[test]
    fn phase_and_attempts_follow_the_task_transitions() {
        let content = [
            entry(0, "run.open", ""),
            entry(1, "task.scheduled", "t"),
            entry(2, "task.started", "t"),
            entry(3, "task.started", "other"),
            entry(4, "task.suspended", "t"),
            entry(5, "task.resumed", "t"),
            entry(6, "task.started", "t"),
            entry(7, "mission.defined", "t"),
            "{torn".to_owned(),
        ]
        .concat();
        let dir = project_with_ledger(content.as_bytes());
        assert_eq!(
            read_ledger_task_state(dir.path(), "run-1", "t").unwrap(),
            ("started".to_owned(), 2)
        );
        assert_eq!(
            read_ledger_task_state(dir.path(), "run-1", "absent").unwrap(),
            (String::new(), 0)
        );
        assert_eq!(
            read_ledger_task_state(dir.path(), "no-such-run", "t").unwrap(),
            (String::new(), 0)
        );
    }

    #[test]
    fn swallowed_and_escaping_failures() {
        let check = |content: &str, escapes: bool| {
            let dir = project_with_ledger(
                format!("{}{content}\n", entry(0, "task.started", "t")).as_bytes(),
            );
            let result = read_ledger_task_state(dir.path(), "run-1", "t");
            match result {
                Ok(state) => {
                    assert!(!escapes, "{content}: expected an escaping failure");
                    assert_eq!(state, (String::new(), 0), "{content}");
                }
                Err(err) => assert!(escapes, "{content}: {err}"),
            }
        };
        check(
            r#"{"seq": "x", "prev_hash": "", "kind": "k", "entry_hash": "h"}"#,
            false,
        );
        check(
            r#"{"seq": 1, "prev_hash": "", "kind": "k", "entry_hash": "h", "ts": "soon"}"#,
            false,
        );
        check(r#"{"prev_hash": "", "kind": "k", "entry_hash": "h"}"#, true);
        check(
            r#"{"seq": null, "prev_hash": "", "kind": "k", "entry_hash": "h"}"#,
            true,
        );
        check(
            r#"{"seq": Infinity, "prev_hash": "", "kind": "k", "entry_hash": "h"}"#,
            true,
        );
        check(
            r#"{"seq": 1, "prev_hash": "", "kind": "k", "entry_hash": "h", "ts": null}"#,
            true,
        );
    }

    #[test]
    fn undecodable_ledger_reads_as_nothing() {
        let mut content = entry(0, "task.started", "t").into_bytes();
        content.extend_from_slice(b"\xff\n");
        let dir = project_with_ledger(&content);
        assert_eq!(
            read_ledger_task_state(dir.path(), "run-1", "t").unwrap(),
            (String::new(), 0)
        );
    }
}
