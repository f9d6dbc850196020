//! The claimable backlog `.sdd/runtime/task-backlog.json` (the reference's
//! `core/tasks/claim.py`): rows, their normalisation, and reading and writing the file exactly
//! as the reference does.
//!
//! The file is a JSON array of objects written by `json.dumps(rows, indent=2)` (unsorted keys,
//! ASCII escapes, no trailing newline) to a temporary sibling and renamed into place. Readers
//! accept any formatting: every row goes through [`BacklogEntry::from_dict`], which coerces the
//! fields the way Python's `int()`/`str()`/`float()` do, and the hashes are taken over
//! [`BacklogEntry::to_dict`], so re-indenting the file or reordering keys inside a row changes
//! nothing that is signed.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bernstein_protocol::encoding::hex;
use bernstein_protocol::pyjson::{Object, Value};
use ring::rand::{SecureRandom, SystemRandom};

use super::python::{python_float, python_int, python_truthy, python_type_name};
use crate::audit::{python_repr, python_str};
use crate::handle::render_indent2_objects;
use crate::{Error, Result};

/// File name of the backlog inside `.sdd/runtime/`.
pub const BACKLOG_FILE_NAME: &str = "task-backlog.json";

/// File name of the backlog's cross-process lock, next to the backlog.
pub const BACKLOG_LOCK_FILE_NAME: &str = "task-backlog.json.lock";

/// The status of a row that may be claimed.
pub const STATUS_OPEN: &str = "open";

/// The status a claim moves a row to.
pub const STATUS_IN_PROGRESS: &str = "in_progress";

/// One task row of the backlog (the reference's `BacklogEntry`).
#[derive(Debug, Clone, PartialEq)]
pub struct BacklogEntry {
    /// The task id (required; coerced to a string).
    pub id: String,
    /// Who holds the claim, if anyone.
    pub claimer: Option<String>,
    /// Lifecycle status; `open` rows without a claimer are claimable.
    pub status: String,
    /// Role lane, compared with the filter's role.
    pub role: Option<String>,
    /// Project namespace, compared with the filter's project.
    pub project: Option<String>,
    /// Capabilities the row offers, one of which a filter may require.
    pub capabilities: Vec<String>,
    /// Ids that must all be in the filter's `completed_ids`.
    pub depends_on: Vec<String>,
    /// Admission tags, checked by the filter's tag admission predicate when one is set.
    pub tags: Vec<String>,
    /// How many times the row was claimed.
    pub attempts: i64,
    /// Per-row attempt ceiling.
    pub max_attempts: Option<i64>,
    /// Wall-clock claim time (float Unix seconds); excluded from every hash.
    pub claimed_at: Option<f64>,
    /// Free-form metadata, kept verbatim.
    pub metadata: Object,
}

impl BacklogEntry {
    /// An open, unclaimed row with nothing but an id (the reference's `BacklogEntry(id=...)`).
    pub fn new(id: impl Into<String>) -> BacklogEntry {
        BacklogEntry {
            id: id.into(),
            claimer: None,
            status: STATUS_OPEN.to_owned(),
            role: None,
            project: None,
            capabilities: Vec::new(),
            depends_on: Vec::new(),
            tags: Vec::new(),
            attempts: 0,
            max_attempts: None,
            claimed_at: None,
            metadata: Object::new(),
        }
    }

    /// Hydrates a row the way `BacklogEntry.from_dict` does.
    ///
    /// * `id` is required (a missing or `null` id is an error) and coerced with `str()`;
    /// * a missing `status` becomes `in_progress` when a claimer is set, else `open`;
    /// * `claimer`, `role`, `project` are `str()`-ed unless `null`;
    /// * `capabilities`, `depends_on`, `tags` must be lists (or absent / `null`); their items
    ///   are `str()`-ed;
    /// * `attempts` is `int(x or 0)`, `max_attempts` is `int(x)` unless `null`, `claimed_at` is
    ///   `float(x)` unless `null`;
    /// * `metadata` must be an object (or absent / `null`);
    /// * unknown keys are dropped.
    ///
    /// # Errors
    ///
    /// [`Error::Malformed`] naming the row and the field, with Python's message where Python
    /// raises one.
    pub fn from_dict(raw: &Object) -> Result<BacklogEntry> {
        let present = |key: &str| raw.get(key).filter(|v| !matches!(v, Value::Null));
        let Some(raw_id) = present("id") else {
            return Err(malformed(
                "backlog entry is missing required 'id'".to_owned(),
            ));
        };
        let id = python_str(raw_id);
        let id_repr = python_repr(raw_id);
        let claimer = present("claimer").map(python_str);
        let status = match present("status") {
            Some(status) => python_str(status),
            None if claimer.is_some() => STATUS_IN_PROGRESS.to_owned(),
            None => STATUS_OPEN.to_owned(),
        };
        let list = |key: &str| -> Result<Vec<String>> {
            match present(key) {
                None => Ok(Vec::new()),
                Some(Value::Array(items)) => Ok(items.iter().map(python_str).collect()),
                Some(_) => Err(malformed(format!(
                    "backlog entry {id_repr} has non-list {key}"
                ))),
            }
        };
        let capabilities = list("capabilities")?;
        let depends_on = list("depends_on")?;
        let tags = list("tags")?;
        let field_error = |key: &str, message: String| {
            malformed(format!("backlog entry {id_repr}: {key}: {message}"))
        };
        let attempts = match raw.get("attempts") {
            Some(value) if python_truthy(value) => {
                python_int(value).map_err(|m| field_error("attempts", m))?
            }
            _ => 0,
        };
        let max_attempts = present("max_attempts")
            .map(|value| python_int(value).map_err(|m| field_error("max_attempts", m)))
            .transpose()?;
        let claimed_at = present("claimed_at")
            .map(|value| python_float(value).map_err(|m| field_error("claimed_at", m)))
            .transpose()?;
        let metadata = match present("metadata") {
            None => Object::new(),
            Some(Value::Object(object)) => object.clone(),
            Some(_) => {
                return Err(malformed(format!(
                    "backlog entry {id_repr} has non-object metadata"
                )));
            }
        };
        Ok(BacklogEntry {
            id,
            claimer,
            status,
            role: present("role").map(python_str),
            project: present("project").map(python_str),
            capabilities,
            depends_on,
            tags,
            attempts,
            max_attempts,
            claimed_at,
            metadata,
        })
    }

    /// Serialises the row the way `BacklogEntry.to_dict` does: `id`, `status` and `claimer`
    /// always (a `null` claimer included), then `role`, `project` unless unset, `capabilities`,
    /// `depends_on`, `tags` unless empty, `attempts` unless 0, `max_attempts` and `claimed_at`
    /// unless unset, `metadata` unless empty, in that order.
    pub fn to_dict(&self) -> Object {
        let mut out = Object::new()
            .with("id", self.id.as_str())
            .with("status", self.status.as_str())
            .with("claimer", self.claimer.clone());
        if let Some(role) = &self.role {
            out.insert("role", role.as_str());
        }
        if let Some(project) = &self.project {
            out.insert("project", project.as_str());
        }
        for (key, items) in [
            ("capabilities", &self.capabilities),
            ("depends_on", &self.depends_on),
            ("tags", &self.tags),
        ] {
            if !items.is_empty() {
                out.insert(key, items.clone());
            }
        }
        if self.attempts != 0 {
            out.insert("attempts", self.attempts);
        }
        if let Some(max_attempts) = self.max_attempts {
            out.insert("max_attempts", max_attempts);
        }
        if let Some(claimed_at) = self.claimed_at {
            out.insert("claimed_at", claimed_at);
        }
        if !self.metadata.is_empty() {
            out.insert("metadata", self.metadata.clone());
        }
        out
    }

    /// Marks the row as owned by `claimer_id` at `now` (float Unix seconds): status
    /// `in_progress`, the claimer, `claimed_at`, and one more attempt.
    ///
    /// # Errors
    ///
    /// [`Error::Malformed`] when the attempt counter cannot be incremented (`i64::MAX`).
    pub fn claim(&mut self, claimer_id: &str, now: f64) -> Result<()> {
        let attempts = self.attempts.checked_add(1).ok_or_else(|| {
            malformed(format!(
                "backlog entry {}: attempts {} cannot be incremented",
                python_repr(&Value::Str(self.id.clone())),
                self.attempts
            ))
        })?;
        STATUS_IN_PROGRESS.clone_into(&mut self.status);
        self.claimer = Some(claimer_id.to_owned());
        self.claimed_at = Some(now);
        self.attempts = attempts;
        Ok(())
    }
}

fn malformed(reason: String) -> Error {
    Error::Malformed {
        what: "backlog",
        reason,
    }
}

/// `<project_root>/.sdd/runtime/task-backlog.json`, unresolved.
pub fn backlog_path(project_root: &Path) -> PathBuf {
    project_root
        .join(".sdd")
        .join("runtime")
        .join(BACKLOG_FILE_NAME)
}

/// Parses backlog text the way `Backlog.load` does: a JSON array of objects, each hydrated by
/// [`BacklogEntry::from_dict`], with unique ids. `origin` names the file in error messages.
///
/// # Errors
///
/// [`Error::Malformed`] for text that is not JSON, a document that is not an array, a row that
/// is not an object or does not hydrate, or a duplicated id.
pub fn parse_backlog(text: &str, origin: &str) -> Result<Vec<BacklogEntry>> {
    let document = Value::parse(text)
        .map_err(|err| malformed(format!("backlog at {origin} is not valid JSON: {err}")))?;
    let Value::Array(rows) = document else {
        return Err(malformed(format!(
            "backlog at {origin} must be a JSON array, got {}",
            python_type_name(&document)
        )));
    };
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let Value::Object(row) = row else {
            return Err(malformed(format!(
                "backlog at {origin} contains non-object row: {}",
                python_type_name(row)
            )));
        };
        entries.push(BacklogEntry::from_dict(row)?);
    }
    check_unique_ids(&entries, origin)?;
    Ok(entries)
}

/// Hydrates rows already parsed from a backlog the way [`parse_backlog`] hydrates the rows
/// of its text: each by [`BacklogEntry::from_dict`], with unique ids. For a caller that holds
/// the parsed rows (a task store keeping the file as its projection), so the file need not be
/// read and parsed again.
///
/// # Errors
///
/// [`Error::Malformed`] for a row that does not hydrate, or a duplicated id.
pub fn entries_from_rows<'a>(
    rows: impl IntoIterator<Item = &'a Object>,
    origin: &str,
) -> Result<Vec<BacklogEntry>> {
    let entries = rows
        .into_iter()
        .map(BacklogEntry::from_dict)
        .collect::<Result<Vec<_>>>()?;
    check_unique_ids(&entries, origin)?;
    Ok(entries)
}

/// Refuses a backlog that names one id twice (the reference's `_validate_unique_ids`).
fn check_unique_ids(entries: &[BacklogEntry], origin: &str) -> Result<()> {
    let mut seen = BTreeSet::new();
    let mut duplicates = BTreeSet::new();
    for entry in entries {
        if !seen.insert(entry.id.as_str()) {
            duplicates.insert(entry.id.as_str());
        }
    }
    if duplicates.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = duplicates.into_iter().collect();
    Err(malformed(format!(
        "backlog at {origin} contains duplicate task id(s): {}",
        names.join(", ")
    )))
}

/// Reads the backlog file at `path`; a missing file is an empty backlog, as in the reference.
///
/// # Errors
///
/// [`Error::Io`] when the file exists but cannot be read, [`Error::Malformed`] when it is not
/// UTF-8 or does not parse (see [`parse_backlog`]).
pub fn read_backlog(path: &Path) -> Result<Vec<BacklogEntry>> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(Error::io("read", path, err)),
    };
    let origin = path.display().to_string();
    let text = String::from_utf8(bytes)
        .map_err(|err| malformed(format!("backlog at {origin} is not UTF-8: {err}")))?;
    parse_backlog(&text, &origin)
}

/// The backlog file bytes the reference writes for `entries`: `json.dumps([e.to_dict() for e in
/// entries], indent=2)`, without a trailing newline.
pub fn render_backlog(entries: &[BacklogEntry]) -> String {
    let rows: Vec<Object> = entries.iter().map(BacklogEntry::to_dict).collect();
    render_indent2_objects(&rows)
}

/// Writes `entries` to `path` the way the reference's `write_atomic_json` does: the rendered
/// bytes go to `<name>.tmp.<pid>.<8 hex>` created with mode 0600, are fsynced, renamed over
/// `path`, and the directory is fsynced. The temporary file is removed when any step fails.
///
/// # Errors
///
/// [`Error::Malformed`] when two entries share an id (the reference refuses to write such a
/// backlog), [`Error::Io`] for filesystem failures.
pub fn write_backlog(path: &Path, entries: &[BacklogEntry]) -> Result<()> {
    check_unique_ids(entries, &path.display().to_string())?;
    let parent = path.parent().unwrap_or_else(|| Path::new("."));
    crate::durable::create_dir_all_durable(parent)
        .map_err(|err| Error::io("create directory", parent, err))?;
    let mut suffix = [0u8; 4];
    SystemRandom::new()
        .fill(&mut suffix)
        .map_err(|_| Error::Encode("the system random generator failed".to_owned()))?;
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| BACKLOG_FILE_NAME.to_owned());
    let tmp = parent.join(format!(
        "{file_name}.tmp.{}.{}",
        std::process::id(),
        hex(&suffix)
    ));
    let written = write_new_file(&tmp, render_backlog(entries).as_bytes()).and_then(|()| {
        fs::rename(&tmp, path).map_err(|err| Error::io("rename into place", path, err))
    });
    if let Err(err) = written {
        // Best effort: the temporary file is garbage either way, and the original error is
        // the one worth reporting.
        let _ = fs::remove_file(&tmp);
        return Err(err);
    }
    // The rename is already atomic for readers; the directory fsync makes it durable.
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|err| Error::io("sync directory", parent, err))
}

fn write_new_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|err| Error::io("create", path, err))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|err| Error::io("write", path, err))
}

/// The backlog's cross-process lock: an exclusive `flock` on `task-backlog.json.lock`, the
/// lock the reference's `claim_next_entry` and `backlog_transaction` take. Released on drop,
/// when the descriptor holding it is closed.
///
/// `flock` locks belong to an open file description, so two threads of one process that each
/// acquire the lock also exclude each other.
#[derive(Debug)]
pub struct BacklogLock {
    /// The locked lock file, held only so that the lock lasts until this drops.
    _locked: File,
}

impl BacklogLock {
    /// Blocks until the lock next to `backlog_path` is held; creates the lock file (and its
    /// directory) when missing, never truncating it.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the lock file cannot be created or locked.
    pub fn acquire(backlog_path: &Path) -> Result<BacklogLock> {
        let parent = backlog_path.parent().unwrap_or_else(|| Path::new("."));
        fs::create_dir_all(parent).map_err(|err| Error::io("create directory", parent, err))?;
        let lock_path = parent.join(BACKLOG_LOCK_FILE_NAME);
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&lock_path)
            .map_err(|err| Error::io("open", &lock_path, err))?;
        file.lock()
            .map_err(|err| Error::io("lock", &lock_path, err))?;
        Ok(BacklogLock { _locked: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(json: &str) -> Object {
        Value::parse(json).unwrap().as_object().unwrap().clone()
    }

    /// `from_dict(row).to_dict()` in PY-COMPACT-ASCII, or the error text.
    fn normalise(json: &str) -> String {
        match BacklogEntry::from_dict(&row(json)) {
            Ok(entry) => {
                Value::Object(entry.to_dict()).dumps(bernstein_protocol::pyjson::Dialect::PY_ROW)
            }
            Err(err) => format!("error: {err}"),
        }
    }

    #[test]
    fn normalisation_matches_the_reference() {
        let check = |json: &str, expect: &str| assert_eq!(normalise(json), expect, "{json}");
        // Expected texts from CPython 3.12 with bernstein 3.23:
        // json.dumps(BacklogEntry.from_dict(json.loads(row)).to_dict())
        check(
            r#"{"id": 7}"#,
            r#"{"id": "7", "status": "open", "claimer": null}"#,
        );
        check(
            r#"{"id": "a", "claimer": "w"}"#,
            r#"{"id": "a", "status": "in_progress", "claimer": "w"}"#,
        );
        check(
            r#"{"id": "a", "status": null, "claimer": null, "role": null, "capabilities": null, "attempts": null, "metadata": null}"#,
            r#"{"id": "a", "status": "open", "claimer": null}"#,
        );
        check(
            r#"{"metadata": {"z": 1}, "attempts": "2", "tags": [1, true], "id": "a", "max_attempts": 3.7, "claimed_at": 5, "role": 9}"#,
            r#"{"id": "a", "status": "open", "claimer": null, "role": "9", "tags": ["1", "True"], "attempts": 2, "max_attempts": 3, "claimed_at": 5.0, "metadata": {"z": 1}}"#,
        );
        check(
            r#"{"id": "a", "attempts": 0, "max_attempts": 0, "capabilities": [], "depends_on": ["x"], "extra": 1}"#,
            r#"{"id": "a", "status": "open", "claimer": null, "depends_on": ["x"], "max_attempts": 0}"#,
        );
        check(
            r#"{"id": ["x", 1]}"#,
            r#"{"id": "['x', 1]", "status": "open", "claimer": null}"#,
        );
        check(
            r#"{"role": "x"}"#,
            "error: malformed backlog: backlog entry is missing required 'id'",
        );
        check(
            r#"{"id": null}"#,
            "error: malformed backlog: backlog entry is missing required 'id'",
        );
        check(
            r#"{"id": "a", "tags": "gpu"}"#,
            "error: malformed backlog: backlog entry 'a' has non-list tags",
        );
        check(
            r#"{"id": 5, "metadata": []}"#,
            "error: malformed backlog: backlog entry 5 has non-object metadata",
        );
        check(
            r#"{"id": "a", "attempts": "x"}"#,
            "error: malformed backlog: backlog entry 'a': attempts: invalid literal for int() with base 10: 'x'",
        );
        check(
            r#"{"id": "a", "claimed_at": []}"#,
            "error: malformed backlog: backlog entry 'a': claimed_at: float() argument must be a string or a real number, not 'list'",
        );
    }

    #[test]
    fn claim_updates_the_row() {
        let mut entry = BacklogEntry::new("t-1");
        entry.claim("worker-a", 12.5).unwrap();
        assert_eq!(entry.status, STATUS_IN_PROGRESS);
        assert_eq!(entry.claimer.as_deref(), Some("worker-a"));
        assert_eq!(entry.claimed_at, Some(12.5));
        assert_eq!(entry.attempts, 1);
        entry.attempts = i64::MAX;
        assert!(matches!(
            entry.claim("worker-a", 13.0),
            Err(Error::Malformed { .. })
        ));
        assert_eq!(
            entry.attempts,
            i64::MAX,
            "a refused claim leaves the row alone"
        );
    }

    #[test]
    fn parse_refuses_bad_documents() {
        let check = |text: &str, expect: &str| {
            let got = parse_backlog(text, "b.json").map(|rows| rows.len());
            assert_eq!(
                got.map_err(|e| e.to_string()),
                Err(expect.to_owned()),
                "{text}"
            );
        };
        check(
            r#"{"id": "a"}"#,
            "malformed backlog: backlog at b.json must be a JSON array, got dict",
        );
        check(
            r#"[{"id": "a"}, 3]"#,
            "malformed backlog: backlog at b.json contains non-object row: int",
        );
        check(
            r#"[{"id": "b"}, {"id": "a"}, {"id": "b"}, {"id": "a"}]"#,
            "malformed backlog: backlog at b.json contains duplicate task id(s): a, b",
        );
        assert!(parse_backlog("[", "b.json").is_err());
        assert_eq!(parse_backlog("[]", "b.json").unwrap(), Vec::new());
    }

    #[test]
    fn render_is_python_indent_two() {
        let mut entry = BacklogEntry::new("t-1");
        entry.metadata.insert("note", "é");
        entry.tags = vec!["gpu".to_owned()];
        assert_eq!(
            render_backlog(&[entry]),
            "[\n  {\n    \"id\": \"t-1\",\n    \"status\": \"open\",\n    \"claimer\": null,\n    \"tags\": [\n      \"gpu\"\n    ],\n    \"metadata\": {\n      \"note\": \"\\u00e9\"\n    }\n  }\n]"
        );
        assert_eq!(render_backlog(&[]), "[]");
    }

    #[test]
    fn write_then_read_round_trips_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runtime").join(BACKLOG_FILE_NAME);
        let mut entry = BacklogEntry::new("t-1");
        entry.claimed_at = Some(1_780_000_500.123_456);
        write_backlog(&path, std::slice::from_ref(&entry)).unwrap();
        assert_eq!(read_backlog(&path).unwrap(), vec![entry.clone()]);
        let names: Vec<String> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![BACKLOG_FILE_NAME.to_owned()]);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(matches!(
            write_backlog(&path, &[entry.clone(), entry]),
            Err(Error::Malformed { .. })
        ));
        assert!(
            read_backlog(&dir.path().join("missing.json"))
                .unwrap()
                .is_empty()
        );
        // Only a missing file is an empty backlog: one that exists and cannot be read is an
        // error, never a backlog with nothing to claim.
        let unreadable = dir.path().join("a-directory.json");
        fs::create_dir(&unreadable).unwrap();
        assert!(matches!(read_backlog(&unreadable), Err(Error::Io { .. })));
    }

    #[test]
    fn rows_already_parsed_hydrate_as_the_file_would() {
        let rows = [
            row(r#"{"id": "b", "claimer": "w"}"#),
            row(r#"{"id": 7, "attempts": "2"}"#),
        ];
        let entries = entries_from_rows(&rows, "store").unwrap();
        let text = render_indent2_objects(&rows);
        assert_eq!(entries, parse_backlog(&text, "store").unwrap());
        let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["b", "7"]);
        assert_eq!(entries[0].status, STATUS_IN_PROGRESS);
        assert_eq!(entries[1].attempts, 2);
        let twice = [row(r#"{"id": "a"}"#), row(r#"{"id": "a", "role": "r"}"#)];
        assert_eq!(
            entries_from_rows(&twice, "store").map_err(|e| e.to_string()),
            Err("malformed backlog: backlog at store contains duplicate task id(s): a".to_owned())
        );
        assert!(entries_from_rows(&[row(r#"{"role": "x"}"#)], "store").is_err());
    }
}
