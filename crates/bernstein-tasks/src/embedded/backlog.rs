//! The claimable backlog `.sdd/runtime/task-backlog.json` (`FORMATS.md` §4), kept in step with
//! the store.
//!
//! The reference's claim-receipt route claims rows of this file (under `task-backlog.json.lock`)
//! without telling any task store. The embedded store therefore treats the file as a shared
//! projection and reconciles it on every mutation, holding the backlog lock inside its own lock:
//!
//! 1. **Adopt** claims made on the file: a row `in_progress` with a string `claimer` whose task
//!    is still `open` in the store makes the task `claimed` by that claimer (see
//!    [`super::ops::adopt_backlog_claim`]), so a task claimed through a receipt is never
//!    claimed again through the store.
//! 2. **Project**: rows of store tasks are rewritten from the store (an `open` task as an `open`
//!    row, a `claimed`/`in_progress` task as an `in_progress` row naming its claimer; any other
//!    status drops the row, since it is neither claimable nor held). A row of an `open` task that
//!    is neither plainly open nor adoptable is left as it is rather than reopened. Rows of ids the
//!    store does not hold are kept untouched, in place. New store tasks are appended in creation
//!    order.
//! 3. **Write** only when the bytes change, as `json.dumps(rows, indent=2)` through a temporary
//!    file, fsync, `rename` and directory fsync.
//!
//! A backlog that is not a JSON array of objects with unique ids is left alone and reported: its
//! rows may belong to someone else, and rewriting it would lose them.
//!
//! Projected rows use `BacklogEntry.to_dict()` key order and omission rules, with the metadata of
//! the reference's task-store projection (`title, description, priority, scope, tenant_id,
//! version`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bernstein_journal::handle::render_indent2;
use bernstein_protocol::pyjson::{Object, Value};

use super::fsio::{self, LockFile, LockGuard};
use crate::error::Error;
use crate::lifecycle::TaskStatus;
use crate::model::{Task, TaskId};

/// The backlog file name inside `.sdd/runtime/`.
pub(crate) const BACKLOG_FILE: &str = "task-backlog.json";
/// Its lock file name.
pub(crate) const BACKLOG_LOCK_FILE: &str = "task-backlog.json.lock";

/// A claim found on the backlog file for a task the store still has `open`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BacklogClaim {
    /// The task.
    pub(crate) task_id: TaskId,
    /// The claimer, when it is a valid worker id.
    pub(crate) claimer: Option<String>,
    /// The row's claim time.
    pub(crate) claimed_at: Option<f64>,
    /// The row's attempt count.
    pub(crate) attempts: Option<u32>,
}

/// The backlog as read under its lock.
#[derive(Debug)]
pub(crate) struct LockedBacklog<'a> {
    path: PathBuf,
    /// The backlog lock, held until this drops (`None` for a verifier's read, which writes
    /// nothing).
    _guard: Option<LockGuard<'a>>,
    /// The file text, `None` when the file does not exist.
    original: Option<String>,
    /// The rows, or why the file cannot be used.
    rows: Result<Vec<Object>, String>,
}

/// Takes the backlog lock and reads the file.
pub(crate) fn lock_and_read<'a>(
    runtime_dir: &Path,
    lock: &'a LockFile,
) -> Result<LockedBacklog<'a>, Error> {
    let guard = lock.exclusive()?;
    read(runtime_dir, Some(guard))
}

/// Reads the backlog without its lock, for a verifier: the result is only ever compared.
pub(crate) fn read_unlocked(runtime_dir: &Path) -> Result<LockedBacklog<'static>, Error> {
    read(runtime_dir, None)
}

fn read<'a>(runtime_dir: &Path, guard: Option<LockGuard<'a>>) -> Result<LockedBacklog<'a>, Error> {
    let path = runtime_dir.join(BACKLOG_FILE);
    let original = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::storage("read", &path, &e)),
    };
    let rows = match &original {
        None => Ok(Vec::new()),
        Some(text) => parse_rows(text),
    };
    Ok(LockedBacklog {
        path,
        _guard: guard,
        original,
        rows,
    })
}

fn parse_rows(text: &str) -> Result<Vec<Object>, String> {
    let value = Value::parse(text).map_err(|e| format!("not JSON: {e:?}"))?;
    let Value::Array(items) = value else {
        return Err("not a JSON array".to_owned());
    };
    let mut rows = Vec::new();
    let mut seen = BTreeSet::new();
    for (index, item) in items.into_iter().enumerate() {
        let Value::Object(row) = item else {
            return Err(format!("row {index} is not an object"));
        };
        let Some(id) = row.get("id").map(Value::to_python_str) else {
            return Err(format!("row {index} has no id"));
        };
        if !seen.insert(id.clone()) {
            return Err(format!("duplicate task id {id:?}"));
        }
        rows.push(row);
    }
    Ok(rows)
}

fn row_id(row: &Object) -> Option<TaskId> {
    row.get("id")
        .and_then(Value::as_str)
        .and_then(|id| TaskId::parse(id).ok())
}

fn row_claimer(row: &Object) -> Option<&str> {
    row.get("claimer").and_then(Value::as_str)
}

fn row_is_plain_open(row: &Object) -> bool {
    let status_open = match row.get("status") {
        None => row_claimer(row).is_none(),
        Some(status) => status.as_str() == Some("open"),
    };
    status_open && matches!(row.get("claimer"), None | Some(Value::Null))
}

impl LockedBacklog<'_> {
    /// Why the file cannot be reconciled, if it cannot.
    pub(crate) fn problem(&self) -> Option<String> {
        self.rows
            .as_ref()
            .err()
            .map(|problem| format!("{}: {problem}", self.path.display()))
    }

    /// Claims recorded on the file for tasks `is_open` reports as still `open` in the store.
    pub(crate) fn claims_to_adopt(&self, is_open: impl Fn(&TaskId) -> bool) -> Vec<BacklogClaim> {
        let Ok(rows) = &self.rows else {
            return Vec::new();
        };
        rows.iter()
            .filter_map(|row| {
                let task_id = row_id(row)?;
                let claimed = row.get("status").and_then(Value::as_str) == Some("in_progress")
                    && row_claimer(row).is_some();
                (claimed && is_open(&task_id)).then(|| BacklogClaim {
                    claimer: row_claimer(row)
                        .filter(|c| TaskId::parse(c).is_ok())
                        .map(str::to_owned),
                    claimed_at: row.get("claimed_at").and_then(Value::as_f64),
                    attempts: row
                        .get("attempts")
                        .and_then(|a| match a {
                            Value::Int(n) => n.as_u64(),
                            _ => None,
                        })
                        .and_then(|n| u32::try_from(n).ok()),
                    task_id,
                })
            })
            .collect()
    }

    /// Rewrites the file from `tasks` (every store task, creation order) when the projection
    /// differs from what is on disk. Does nothing for an unusable file.
    pub(crate) fn reconcile<'t>(
        &self,
        tasks: impl IntoIterator<Item = &'t Task>,
        lookup: impl Fn(&TaskId) -> Option<&'t Task>,
    ) -> Result<(), Error> {
        match self.projection(tasks, lookup) {
            Some(text) => fsio::write_atomic(&self.path, text.as_bytes()),
            None => Ok(()),
        }
    }

    /// Rows whose claim the store cannot adopt because a field breaks the task rules (a claim
    /// time of -1, NaN or Infinity): `(row index, task id, problem)`.
    pub(crate) fn unadoptable(&self, is_open: impl Fn(&TaskId) -> bool) -> Vec<(usize, String)> {
        let Ok(rows) = &self.rows else {
            return Vec::new();
        };
        rows.iter()
            .enumerate()
            .filter_map(|(index, row)| {
                let id = row_id(row)?;
                let claimed = row.get("status").and_then(Value::as_str) == Some("in_progress")
                    && row_claimer(row).is_some();
                let at = row.get("claimed_at").and_then(Value::as_f64)?;
                (claimed && is_open(&id) && !(at.is_finite() && at >= 0.0)).then(|| {
                    (
                        index,
                        format!("task {id}: claimed_at {at} is not a Unix time"),
                    )
                })
            })
            .collect()
    }

    /// The file text the projection of `tasks` calls for, or `None` when the file already
    /// holds it (or cannot be used).
    pub(crate) fn projection<'t>(
        &self,
        tasks: impl IntoIterator<Item = &'t Task>,
        lookup: impl Fn(&TaskId) -> Option<&'t Task>,
    ) -> Option<String> {
        let Ok(rows) = &self.rows else {
            return None;
        };
        let mut out: Vec<Value> = Vec::new();
        let mut seen = BTreeSet::new();
        for row in rows {
            let Some(task) = row_id(row).and_then(|id| lookup(&id)) else {
                out.push(Value::Object(row.clone()));
                continue;
            };
            seen.insert(task.id.clone());
            if task.status == TaskStatus::Open && !row_is_plain_open(row) {
                out.push(Value::Object(row.clone()));
            } else if let Some(projected) = project(task) {
                out.push(Value::Object(projected));
            }
        }
        for task in tasks {
            if !seen.contains(&task.id)
                && let Some(projected) = project(task)
            {
                out.push(Value::Object(projected));
            }
        }
        let text = render_indent2(&Value::Array(out));
        if self.original.as_deref() == Some(text.as_str())
            || (self.original.is_none() && text == "[]")
        {
            return None;
        }
        Some(text)
    }
}

/// The backlog row of `task`, or `None` when the task is neither claimable nor held.
fn project(task: &Task) -> Option<Object> {
    let (status, claimer, claimed_at) = match task.status {
        TaskStatus::Open => ("open", None, None),
        TaskStatus::Claimed | TaskStatus::InProgress => {
            ("in_progress", task.claimed_by.clone(), task.claimed_at)
        }
        _ => return None,
    };
    let mut row = Object::new()
        .with("id", &task.id)
        .with("status", status)
        .with("claimer", claimer)
        .with("role", task.role.as_str());
    if !task.depends_on.is_empty() {
        row.insert(
            "depends_on",
            task.depends_on.iter().map(Value::from).collect::<Vec<_>>(),
        );
    }
    if task.attempts > 0 {
        row.insert("attempts", task.attempts);
    }
    if let Some(at) = claimed_at {
        row.insert("claimed_at", at);
    }
    row.insert(
        "metadata",
        Object::new()
            .with("title", task.title.as_str())
            .with("description", task.description.as_str())
            .with("priority", task.priority)
            .with("scope", task.scope.as_str())
            .with("tenant_id", "default")
            .with("version", task.version),
    );
    Some(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NewTask;

    fn task(id: &str, status: TaskStatus) -> Task {
        let mut request = NewTask::new("T", "d");
        request.depends_on = vec![TaskId::parse("b-1").unwrap()];
        let mut task = Task::new(TaskId::parse(id).unwrap(), request, 1.0).unwrap();
        task.status = status;
        task
    }

    fn reconcile(existing: Option<&str>, tasks: &[Task]) -> (String, Vec<BacklogClaim>) {
        let dir = tempfile::tempdir().unwrap();
        if let Some(text) = existing {
            std::fs::write(dir.path().join(BACKLOG_FILE), text).unwrap();
        }
        let lock = LockFile::open(&dir.path().join(BACKLOG_LOCK_FILE)).unwrap();
        let backlog = lock_and_read(dir.path(), &lock).unwrap();
        let claims = backlog.claims_to_adopt(|id| {
            tasks
                .iter()
                .any(|t| &t.id == id && t.status == TaskStatus::Open)
        });
        backlog
            .reconcile(tasks, |id| tasks.iter().find(|t| &t.id == id))
            .unwrap();
        let text = std::fs::read_to_string(dir.path().join(BACKLOG_FILE)).unwrap_or_default();
        (text, claims)
    }

    #[test]
    fn projection_keeps_foreign_rows_and_drops_finished_tasks() {
        let foreign = r#"[{"id": "b-1", "status": "done", "claimer": "x", "role": "backend"},
            {"id": "t-done", "status": "open", "claimer": null}]"#;
        let mut claimed = task("t-claimed", TaskStatus::Claimed);
        claimed.claimed_by = Some("worker-a".into());
        claimed.claimed_at = Some(1_796_004_103.392_215_3);
        claimed.attempts = 1;
        let tasks = [
            task("t-done", TaskStatus::Done),
            task("t-open", TaskStatus::Open),
            claimed,
        ];
        let (text, claims) = reconcile(Some(foreign), &tasks);
        assert!(claims.is_empty());
        insta::assert_snapshot!(text);
    }

    #[test]
    fn receipt_claims_are_adopted_not_reopened() {
        let claimed_on_file = r#"[{"id": "t-open", "status": "in_progress", "claimer": "worker-b",
            "attempts": 1, "claimed_at": 5.5}]"#;
        let tasks = [task("t-open", TaskStatus::Open)];
        let (text, claims) = reconcile(Some(claimed_on_file), &tasks);
        assert_eq!(
            claims,
            [BacklogClaim {
                task_id: TaskId::parse("t-open").unwrap(),
                claimer: Some("worker-b".into()),
                claimed_at: Some(5.5),
                attempts: Some(1),
            }]
        );
        // The row is kept as the claimer left it until the store has adopted the claim.
        assert!(text.contains("worker-b"), "{text}");
    }

    #[test]
    fn unusable_backlogs_are_left_alone() {
        for bad in [
            "{",
            "{}",
            "[1]",
            r#"[{"id": "a"}, {"id": "a"}]"#,
            r#"[{"x": 1}]"#,
        ] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(BACKLOG_FILE), bad).unwrap();
            let lock = LockFile::open(&dir.path().join(BACKLOG_LOCK_FILE)).unwrap();
            let backlog = lock_and_read(dir.path(), &lock).unwrap();
            assert!(backlog.problem().is_some(), "{bad}");
            let tasks = [task("t-open", TaskStatus::Open)];
            backlog
                .reconcile(&tasks, |id| tasks.iter().find(|t| &t.id == id))
                .unwrap();
            assert_eq!(
                std::fs::read_to_string(dir.path().join(BACKLOG_FILE)).unwrap(),
                bad
            );
        }
    }

    #[test]
    fn no_file_is_written_for_an_empty_projection() {
        let (text, _) = reconcile(None, &[task("t-done", TaskStatus::Done)]);
        assert_eq!(text, "");
    }
}
