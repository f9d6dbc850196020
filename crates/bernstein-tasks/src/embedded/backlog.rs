//! The claimable backlog `.sdd/runtime/task-backlog.json` (`FORMATS.md` §4), kept in step with
//! the store when a reader needs it.
//!
//! The reference's claim-receipt route claims rows of this file (under `task-backlog.json.lock`)
//! without telling any task store. The embedded store therefore treats the file as a shared
//! projection:
//!
//! 1. **Adopt** claims made on the file, in every mutation, but only when the file changed since
//!    this process last wrote or read it ([`BacklogTracker`] compares its device, inode, size,
//!    mtime and ctime, and holds the file it saw open so the inode number cannot be reused): a
//!    row `in_progress` with a string `claimer` whose task is still `open` in the store makes the
//!    task `claimed` by that claimer (see [`super::ops::adopt_backlog_claim`]), so a task claimed
//!    through a receipt is never claimed again through the store. A file another store process
//!    left with every claim on it adopted is not read at all ([`ADOPTED_NOTE_FILE`]).
//! 2. **Project**, only when a reader needs the file current: for a claim on it
//!    ([`super::EmbeddedStore::claim_on_backlog`], which claims on the projected rows, has the
//!    store adopt a grant, and then writes the file once), on
//!    [`super::EmbeddedStore::sync_backlog`],
//!    and when the last handle of a store that changed tasks is dropped (best effort). Rows of
//!    store tasks are rewritten from the store (an `open` task as an `open` row, a
//!    `claimed`/`in_progress` task as an `in_progress` row naming its claimer; any other status
//!    drops the row, since it is neither claimable nor held). A row whose status and
//!    `metadata.version` match the task's index entry is current and kept as it is, so only the
//!    records of tasks that changed since the last projection are read back from the log. A row
//!    of an `open` task that is neither plainly open nor adoptable is left as it is rather than
//!    reopened. Rows of ids the store does not hold are kept untouched, in place. Store tasks
//!    missing from the file are appended in creation order.
//! 3. **Write** only when the bytes change, as `json.dumps(rows, indent=2)` through a temporary
//!    file, fsync, `rename` and directory fsync.
//!
//! **Why not on every mutation.** The file is one JSON array; keeping it current on every
//! operation means rewriting all of it each time (1.5 MB at 5,000 tasks), which made every call
//! cost as much as the project's size. Its readers are claims on the file: ours bring it in step
//! first under the store lock, so they never grant from a stale row. A reference
//! `bernstein serve` started on the project later reads the file as the last claim, sync or
//! clean shutdown of this store left it; running one beside this store at the same time was
//! already unsupported (module `log`). `bernstein backlog verify-claim` checks our receipts
//! against the snapshot they carry (`backlogSource: "task_store"`), not the file.
//!
//! A backlog that is not a JSON array of objects with unique ids is left alone and reported: its
//! rows may belong to someone else, and rewriting it would lose them.
//!
//! Projected rows use `BacklogEntry.to_dict()` key order and omission rules, with the metadata of
//! the reference's task-store projection (`title, description, priority, scope, tenant_id,
//! version`).

use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bernstein_journal::handle::{join_indent2_items, render_indent2_item};
use bernstein_protocol::pyjson::{Object, Value};

use super::fsio::{self, LockFile, LockGuard};
use super::index::Index;
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

/// One row of the backlog file, with the text `json.dumps(rows, indent=2)` writes for it.
/// Rows are shared between the file's last reading, a projection and the rows held for a
/// claim, and a file is rendered by joining its rows' texts: a claim then copies and renders
/// only the rows that changed, not every open row of the backlog.
#[derive(Debug)]
pub(crate) struct Row {
    /// The row.
    pub(crate) object: Object,
    /// Its item text in the file (see [`render_indent2_item`]), rendered when a file is first
    /// written with it: a reading that only looks for claims renders nothing.
    text: OnceLock<String>,
}

impl Row {
    /// A row.
    pub(crate) fn new(object: Object) -> Arc<Row> {
        Arc::new(Row {
            object,
            text: OnceLock::new(),
        })
    }

    /// Its item text in the file, rendered once.
    fn text(&self) -> &str {
        self.text.get_or_init(|| render_indent2_item(&self.object))
    }
}

/// The rows of a backlog file, in file order.
pub(crate) type Rows = Arc<Vec<Arc<Row>>>;

/// The backlog as read under its lock.
#[derive(Debug)]
pub(crate) struct LockedBacklog<'a> {
    path: PathBuf,
    /// The backlog lock, held until this drops (`None` for a verifier's read, which writes
    /// nothing).
    guard: Option<LockGuard<'a>>,
    /// The file text, `None` when the file does not exist.
    original: Option<Arc<str>>,
    /// The rows, or why the file cannot be used.
    rows: Result<Rows, String>,
    /// Whether `original` is known to be the indent-2 rendering of `rows`, so a projection
    /// that keeps every row needs no rendering to know the file is current.
    canonical: bool,
    /// Whether the text was parsed by this read (`false`: it equalled the text this process
    /// last read or wrote, whose rows were reused).
    parsed: bool,
}

/// The backlog text this process last read or wrote, with its rows. A read that finds the
/// same bytes on disk reuses the rows instead of parsing the file again: the file is rewritten
/// by every claim, and parsing it was most of a claim's cost with a large open backlog. The
/// bytes are compared in full, so no stamp or clock is trusted for the rows' correctness.
#[derive(Debug, Clone)]
pub(crate) struct KnownBacklog {
    text: Arc<str>,
    rows: Rows,
    /// Whether `text` is the indent-2 rendering of `rows`.
    canonical: bool,
}

/// The largest backlog text whose rows a store keeps between operations (about 3,500 rows).
/// Beyond it every read parses the file again: a claim then parses it twice (the projection
/// and the adoption after the claim) instead of not at all, and the store's memory stays
/// bounded by its index rather than growing with the open backlog.
pub(crate) const KNOWN_BACKLOG_MAX_BYTES: usize = 1 << 20;

/// Takes the backlog lock and reads the file, reusing `known`'s rows when the file holds
/// exactly its text.
pub(crate) fn lock_and_read<'a>(
    runtime_dir: &Path,
    lock: &'a LockFile,
    known: Option<&KnownBacklog>,
) -> Result<LockedBacklog<'a>, Error> {
    let guard = lock.exclusive()?;
    read(runtime_dir, Some(guard), known)
}

/// Reads the backlog without its lock, for a verifier: the result is only ever compared.
pub(crate) fn read_unlocked(runtime_dir: &Path) -> Result<LockedBacklog<'static>, Error> {
    read(runtime_dir, None, None)
}

fn read<'a>(
    runtime_dir: &Path,
    guard: Option<LockGuard<'a>>,
    known: Option<&KnownBacklog>,
) -> Result<LockedBacklog<'a>, Error> {
    let path = runtime_dir.join(BACKLOG_FILE);
    let original = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::storage("read", &path, &e)),
    };
    let mut backlog = LockedBacklog {
        path,
        guard,
        original: None,
        rows: Ok(Arc::new(Vec::new())),
        canonical: false,
        parsed: false,
    };
    match (original, known) {
        (None, _) => {}
        (Some(text), Some(known)) if *text == *known.text => {
            backlog.original = Some(Arc::clone(&known.text));
            backlog.rows = Ok(Arc::clone(&known.rows));
            backlog.canonical = known.canonical;
        }
        (Some(text), _) => {
            backlog.rows = parse_rows(&text).map(Arc::new);
            backlog.original = Some(Arc::from(text));
            backlog.parsed = true;
        }
    }
    Ok(backlog)
}

fn parse_rows(text: &str) -> Result<Vec<Arc<Row>>, String> {
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
        rows.push(Row::new(row));
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

/// The claims recorded on `rows` (an `in_progress` row naming a claimer) for tasks `is_open`
/// reports as still `open` in the store.
pub(crate) fn claims_in<'a>(
    rows: impl IntoIterator<Item = &'a Object>,
    is_open: impl Fn(&TaskId) -> bool,
) -> Vec<BacklogClaim> {
    rows.into_iter()
        .filter_map(|row| {
            // Most rows are open: look at the status before parsing the id.
            let claimed = row.get("status").and_then(Value::as_str) == Some("in_progress")
                && row_claimer(row).is_some();
            if !claimed {
                return None;
            }
            let task_id = row_id(row)?;
            is_open(&task_id).then(|| BacklogClaim {
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

impl LockedBacklog<'_> {
    /// What this read leaves known of the file, for the next read to reuse (`None` for a
    /// missing or unusable file).
    fn known(&self) -> Option<KnownBacklog> {
        match (&self.original, &self.rows) {
            (Some(text), Ok(rows)) => Some(KnownBacklog {
                text: Arc::clone(text),
                rows: Arc::clone(rows),
                canonical: self.canonical,
            }),
            _ => None,
        }
    }

    /// Why the file cannot be reconciled, if it cannot.
    pub(crate) fn problem(&self) -> Option<String> {
        self.rows
            .as_ref()
            .err()
            .map(|problem| format!("{}: {problem}", self.path.display()))
    }

    /// Claims recorded on the file for tasks `is_open` reports as still `open` in the store.
    pub(crate) fn claims_to_adopt(&self, is_open: impl Fn(&TaskId) -> bool) -> Vec<BacklogClaim> {
        match &self.rows {
            Ok(rows) => claims_in(rows.iter().map(|row| &row.object), is_open),
            Err(_) => Vec::new(),
        }
    }

    /// Rewrites the file with the projection of the store's tasks when it differs from what
    /// is on disk, and returns what the file holds afterwards. Does nothing for an unusable
    /// file (`None`).
    pub(crate) fn reconcile(
        &self,
        index: &Index,
        load: impl FnMut(usize) -> Result<Task, Error>,
    ) -> Result<Option<KnownBacklog>, Error> {
        let Some(projection) = self.projection(index, load)? else {
            return Ok(None);
        };
        projection.trace();
        match projection.text {
            Some(text) => {
                fsio::write_atomic(&self.path, text.as_bytes())?;
                Ok(Some(KnownBacklog {
                    text: Arc::from(text),
                    rows: projection.rows,
                    canonical: true,
                }))
            }
            None => Ok(self.known().map(|known| KnownBacklog {
                rows: projection.rows,
                canonical: true,
                ..known
            })),
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
                let row = &row.object;
                let claimed = row.get("status").and_then(Value::as_str) == Some("in_progress")
                    && row_claimer(row).is_some();
                let at = row.get("claimed_at").and_then(Value::as_f64)?;
                if !claimed || at.is_finite() && at >= 0.0 {
                    return None;
                }
                let id = row_id(row)?;
                is_open(&id).then(|| {
                    (
                        index,
                        format!("task {id}: claimed_at {at} is not a Unix time"),
                    )
                })
            })
            .collect()
    }

    /// The projection of the store's tasks (`index`, creation order) onto the file: its rows,
    /// and the text to write unless the file already holds it; `None` when the file cannot be
    /// used. A row whose status and version match the task's index entry is kept as it is;
    /// `load` reads back the task at an index slot for every other row to project, so only
    /// tasks that changed since the last projection cost a read. When every row is kept and
    /// the file is known to be their rendering, nothing is rendered at all.
    pub(crate) fn projection(
        &self,
        index: &Index,
        mut load: impl FnMut(usize) -> Result<Task, Error>,
    ) -> Result<Option<Projection>, Error> {
        let Ok(rows) = &self.rows else {
            return Ok(None);
        };
        let mut actions = Vec::with_capacity(rows.len());
        let mut seen = HashSet::with_capacity(rows.len());
        let mut seen_with_rows = 0_u64;
        for row in rows.iter().map(|row| &row.object) {
            let Some(slot) = row_id(row).and_then(|id| index.slot(&id)) else {
                actions.push(RowAction::Keep);
                continue;
            };
            let status = index.status_at(slot);
            if seen.insert(slot) && projected_status(status).is_some() {
                seen_with_rows += 1;
            }
            if status == TaskStatus::Open && !row_is_plain_open(row) {
                actions.push(RowAction::Keep);
                continue;
            }
            actions.push(match projected_status(status) {
                None => RowAction::Drop,
                Some(projected) if row_is_current(row, projected, index.version_at(slot)) => {
                    RowAction::Keep
                }
                Some(_) => RowAction::Project(slot),
            });
        }
        // Every task with a row is on the file when the file names as many of them as the
        // index counts: then no pass over the whole index (every task the project ever had)
        // looks for the missing ones.
        let (missing, slots_scanned): (Vec<usize>, usize) =
            if seen_with_rows == tasks_with_rows(index) {
                (Vec::new(), 0)
            } else {
                let missing = (0..index.len())
                    .filter(|slot| {
                        !seen.contains(slot) && projected_status(index.status_at(*slot)).is_some()
                    })
                    .collect();
                (missing, index.len())
            };
        if missing.is_empty()
            && actions
                .iter()
                .all(|action| matches!(action, RowAction::Keep))
        {
            let current = self.canonical || self.original.is_none() && rows.is_empty();
            let text = (!current)
                .then(|| render_rows(rows))
                .filter(|text| !self.holds(text));
            return Ok(Some(Projection {
                rows: Arc::clone(rows),
                text,
                slots_scanned,
            }));
        }
        let mut out = Vec::with_capacity(rows.len() + missing.len());
        for (row, action) in rows.iter().zip(actions) {
            match action {
                RowAction::Keep => out.push(Arc::clone(row)),
                RowAction::Drop => {}
                RowAction::Project(slot) => out.extend(project(&load(slot)?).map(Row::new)),
            }
        }
        for slot in missing {
            out.extend(project(&load(slot)?).map(Row::new));
        }
        let text = Some(render_rows(&out)).filter(|text| !self.holds(text));
        Ok(Some(Projection {
            rows: Arc::new(out),
            text,
            slots_scanned,
        }))
    }

    /// Whether the file already holds `text` (a missing file holds the empty array).
    fn holds(&self, text: &str) -> bool {
        match &self.original {
            Some(original) => **original == *text,
            None => text == "[]",
        }
    }
}

/// What a projection keeps of one row of the file.
enum RowAction {
    /// The row as it is (a foreign row, a claim to adopt, or a current projection).
    Keep,
    /// No row: the task is neither claimable nor held.
    Drop,
    /// The row rewritten from the task at this index slot.
    Project(usize),
}

/// The rows a projection leaves on the file, and the text to write when the file does not
/// hold it already.
#[derive(Debug)]
pub(crate) struct Projection {
    pub(crate) rows: Rows,
    pub(crate) text: Option<String>,
    /// How many index slots were looked at for tasks missing from the file: 0 when the file
    /// already names every task that has a row. The index holds every task the project ever
    /// had, so this pass is the one part of a projection whose cost grows with the project.
    pub(crate) slots_scanned: usize,
}

impl Projection {
    /// Logs what the projection cost, at trace level.
    fn trace(&self) {
        tracing::trace!(
            rows = self.rows.len(),
            slots_scanned = self.slots_scanned,
            rewrite = self.text.is_some(),
            "claimable backlog projected"
        );
    }
}

/// The file text of `rows`: `json.dumps(rows, indent=2)`, joined from the rows' texts.
pub(crate) fn render_rows(rows: &[Arc<Row>]) -> String {
    join_indent2_items(rows.iter().map(|row| row.text()))
}

/// How many tasks of `index` have a row on the file: those in a status [`projected_status`]
/// gives a row, counted from the index's kept per-status counts (no pass over the tasks).
fn tasks_with_rows(index: &Index) -> u64 {
    let with_rows: Vec<TaskStatus> = TaskStatus::ALL
        .into_iter()
        .filter(|status| projected_status(*status).is_some())
        .collect();
    index.count_in(&with_rows)
}

/// The row status a task in `status` projects to, or `None` when it has no row.
fn projected_status(status: TaskStatus) -> Option<&'static str> {
    match status {
        TaskStatus::Open => Some("open"),
        TaskStatus::Claimed | TaskStatus::InProgress => Some("in_progress"),
        _ => None,
    }
}

/// Whether `row` is the projection of the task version `version` in a status projecting to
/// `status`: a snapshot never changes without its version rising, so such a row needs no read.
fn row_is_current(row: &Object, status: &str, version: u64) -> bool {
    let row_version = row
        .get("metadata")
        .and_then(Value::as_object)
        .and_then(|metadata| metadata.get("version"))
        .and_then(|v| match v {
            Value::Int(n) => n.as_u64(),
            _ => None,
        });
    row.get("status").and_then(Value::as_str) == Some(status) && row_version == Some(version)
}

/// The note beside the backlog in which a store records the stamp of a backlog file whose
/// claims the task log holds: written after the store brought the file in step, or adopted
/// every claim on it, under the store's exclusive lock. Another store process that finds the
/// file with exactly that stamp knows there is nothing on it to adopt and skips reading and
/// parsing it: without the note, every mutation after another process's claim parsed the
/// whole backlog (a thousand open tasks made each such call several times slower than in one
/// process). The note is a cache: a missing, stale or unreadable note only means the file is
/// read, and a claim a mistaken match could hide is still found by the read every projection
/// makes before a claim is granted ([`BacklogTracker::sync`]).
pub(crate) const ADOPTED_NOTE_FILE: &str = "task-backlog.json.adopted";

/// The state of a file as seen by `fstat`: equal stamps of a file held open mean no one has
/// replaced or rewritten it in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    /// The note's text: the seven numbers on one line.
    fn note(&self) -> String {
        format!(
            "{} {} {} {} {} {} {}\n",
            self.dev, self.ino, self.len, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1
        )
    }

    /// The stamp a note names, if the note is whole.
    fn from_note(text: &str) -> Option<FileStamp> {
        let mut numbers = text.trim_end_matches('\n').split(' ');
        let mut next = || numbers.next()?.parse::<i64>().ok();
        let stamp = FileStamp {
            dev: u64::try_from(next()?).ok()?,
            ino: u64::try_from(next()?).ok()?,
            len: u64::try_from(next()?).ok()?,
            mtime: (next()?, next()?),
            ctime: (next()?, next()?),
        };
        numbers.next().is_none().then_some(stamp)
    }
}

/// Records, best effort, that the backlog file with `stamp` holds no claim the task log lacks.
fn note_adopted(runtime_dir: &Path, stamp: &FileStamp) {
    let path = runtime_dir.join(ADOPTED_NOTE_FILE);
    if let Err(e) = std::fs::write(&path, stamp.note()) {
        tracing::debug!(
            target: "bernstein_tasks::embedded",
            path = %path.display(),
            "the backlog's adopted note was not written (the next reader parses the file): {e}"
        );
    }
}

/// The stamp the adopted note names, when there is a whole note.
fn adopted_note(runtime_dir: &Path) -> Option<FileStamp> {
    let text = std::fs::read_to_string(runtime_dir.join(ADOPTED_NOTE_FILE)).ok()?;
    FileStamp::from_note(&text)
}

fn stamp_of(path: &Path) -> Result<Option<(FileStamp, File)>, Error> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::storage("open", path, &e)),
    };
    let meta = file
        .metadata()
        .map_err(|e| Error::storage("stat", path, &e))?;
    let stamp = FileStamp {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
    };
    Ok(Some((stamp, file)))
}

/// What one process knows of the backlog file.
#[derive(Debug, Default)]
pub(crate) struct BacklogTracker {
    /// The file as this process last wrote or read it, held open so that its inode number
    /// cannot be handed to a later file (`None`: never looked, or there was no file).
    seen: Option<(FileStamp, File)>,
    /// Whether `seen` was ever set (so a missing file is known to be missing).
    looked: bool,
    /// Whether this process changed tasks since it last brought the file in step.
    behind: bool,
    /// Times this process parsed the file (a probe for tests and benchmarks).
    reads: u64,
    /// The file's text as this process last read or wrote it, with its rows.
    known: Option<KnownBacklog>,
}

/// Claims found on a backlog file that changed, to adopt in the current transaction.
#[derive(Debug)]
pub(crate) struct ChangedBacklog {
    stamp: Option<(FileStamp, File)>,
    /// The claims to adopt.
    pub(crate) claims: Vec<BacklogClaim>,
    /// Why the file cannot be used, if it cannot.
    pub(crate) problem: Option<String>,
    /// Whether the adopted note already names this file (nothing to note again).
    noted: bool,
}

impl BacklogTracker {
    /// When the file changed since this process last saw it, reads it under its lock and
    /// returns the claims on it for tasks `is_open` reports as `open`; `None` when it did not
    /// change (one `open` and `fstat`, no read). Call [`BacklogTracker::adopted`] once the
    /// transaction holding the adoptions is in the log.
    pub(crate) fn changed_claims(
        &mut self,
        runtime_dir: &Path,
        lock: &LockFile,
        is_open: impl Fn(&TaskId) -> bool,
    ) -> Result<Option<ChangedBacklog>, Error> {
        let path = runtime_dir.join(BACKLOG_FILE);
        let now = stamp_of(&path)?;
        let same = match (&now, &self.seen) {
            (Some((a, _)), Some((b, _))) => a == b,
            (None, None) => self.looked,
            _ => false,
        };
        if same {
            return Ok(None);
        }
        // The file another store process left with every claim on it in the task log.
        if let Some((stamp, _)) = &now
            && adopted_note(runtime_dir) == Some(*stamp)
        {
            return Ok(Some(ChangedBacklog {
                stamp: now,
                claims: Vec::new(),
                problem: None,
                noted: true,
            }));
        }
        let backlog = self.read_locked(runtime_dir, lock)?;
        // Stamped under the lock, after the read: a write after this is seen next time.
        let stamp = stamp_of(&path)?;
        Ok(Some(ChangedBacklog {
            claims: backlog.claims_to_adopt(is_open),
            problem: backlog.problem(),
            stamp,
            noted: false,
        }))
    }

    /// Records that the claims of `changed` are adopted (or reported), in the log now. When
    /// every one was adopted (`all_adopted`) and the file was usable, the adopted note says so
    /// for the other store processes.
    pub(crate) fn adopted(
        &mut self,
        runtime_dir: &Path,
        changed: ChangedBacklog,
        all_adopted: bool,
    ) {
        if all_adopted
            && !changed.noted
            && changed.problem.is_none()
            && let Some((stamp, _)) = &changed.stamp
        {
            note_adopted(runtime_dir, stamp);
        }
        self.replace_seen(changed.stamp);
        self.looked = true;
    }

    /// Records `now` as the file last seen, handing the file seen before to the closer thread:
    /// when another process replaced it, this descriptor may be the last one on a large
    /// unlinked file, and freeing that must not hold up the call or the locks it holds.
    fn replace_seen(&mut self, now: Option<(FileStamp, File)>) {
        if let Some((_, replaced)) = std::mem::replace(&mut self.seen, now) {
            fsio::close_off_the_call_path(replaced);
        }
    }

    /// How many times this process parsed the backlog file (a read that finds the text it
    /// last read or wrote reuses its rows and is not counted).
    pub(crate) fn reads(&self) -> u64 {
        self.reads
    }

    /// Keeps `known` for the next read, unless its text is over [`KNOWN_BACKLOG_MAX_BYTES`]:
    /// the parsed rows of a larger backlog would hold more memory than the store's index.
    fn remember(&mut self, known: Option<KnownBacklog>) {
        self.known = known.filter(|known| known.text.len() <= KNOWN_BACKLOG_MAX_BYTES);
    }

    /// Takes the backlog lock and reads the file, reusing the known rows when its text is
    /// unchanged, and remembers what it read.
    fn read_locked<'a>(
        &mut self,
        runtime_dir: &Path,
        lock: &'a LockFile,
    ) -> Result<LockedBacklog<'a>, Error> {
        let backlog = lock_and_read(runtime_dir, lock, self.known.as_ref())?;
        if backlog.parsed {
            self.reads += 1;
        }
        self.remember(backlog.known());
        Ok(backlog)
    }

    /// Records that tasks changed, so the file may be behind the log.
    pub(crate) fn log_changed(&mut self) {
        self.behind = true;
    }

    /// Whether this process changed tasks since it last brought the file in step.
    pub(crate) fn is_behind(&self) -> bool {
        self.behind
    }

    /// Brings the file in step with the store's tasks, under the backlog lock (see the module
    /// documentation). Claims on the file must have been adopted first.
    pub(crate) fn sync(
        &mut self,
        runtime_dir: &Path,
        lock: &LockFile,
        index: &Index,
        load: impl FnMut(usize) -> Result<Task, Error>,
    ) -> Result<(), Error> {
        let held = self.sync_and_hold(runtime_dir, lock, index, load)?;
        self.finish_held(runtime_dir, held)
    }

    /// Takes the backlog lock, reads the file and projects the store's tasks onto it without
    /// writing yet: the returned [`HeldBacklog`] holds the lock and the rows the file must now
    /// hold, for a claim to choose from. [`BacklogTracker::finish_held`] writes them;
    /// [`BacklogTracker::project_held`] writes them once the store adopted a claim made on
    /// them, so a claim rewrites the file once rather than before and after.
    pub(crate) fn sync_and_hold<'a>(
        &mut self,
        runtime_dir: &Path,
        lock: &'a LockFile,
        index: &Index,
        load: impl FnMut(usize) -> Result<Task, Error>,
    ) -> Result<HeldBacklog<'a>, Error> {
        let mut backlog = self.read_locked(runtime_dir, lock)?;
        // A claim made on the file since the last adoption is kept in place by the projection;
        // forget the stamp so the next mutation reads the file again and adopts it.
        let unadopted = !backlog
            .claims_to_adopt(|id| index.status(id) == Some(TaskStatus::Open))
            .is_empty();
        let unusable = |problem: String| Error::Storage {
            operation: "bring the claimable backlog in step in",
            path: backlog.path.clone(),
            kind: std::io::ErrorKind::InvalidData,
            message: format!("left unchanged because it cannot be read: {problem}"),
        };
        if let Some(problem) = backlog.problem() {
            return Err(unusable(problem));
        }
        let projection = backlog
            .projection(index, load)?
            .ok_or_else(|| unusable(backlog.path.display().to_string()))?;
        projection.trace();
        Ok(HeldBacklog {
            _guard: backlog.guard.take(),
            path: backlog.path.clone(),
            rows: projection.rows,
            pending: projection.text,
            on_file: backlog.original.clone(),
            unadopted,
        })
    }

    /// Writes the held rows when the file does not hold them yet, records the file as in step
    /// with the task log, and releases the lock.
    pub(crate) fn finish_held(
        &mut self,
        runtime_dir: &Path,
        held: HeldBacklog<'_>,
    ) -> Result<(), Error> {
        let text = match held.pending {
            Some(text) => {
                fsio::write_atomic(&held.path, text.as_bytes())?;
                Some(Arc::from(text))
            }
            None => held.on_file,
        };
        let known = text.map(|text| KnownBacklog {
            text,
            rows: held.rows,
            canonical: true,
        });
        self.now_in_step(&held.path, known, held.unadopted, runtime_dir)
    }

    /// Records that the file at `path` now holds `on_file` (`None`: missing or too large to
    /// keep), brought in step with the task log; `unadopted` says a claim on it is not in the
    /// log yet, so the next mutation must read it again rather than trust the adopted note.
    fn now_in_step(
        &mut self,
        path: &Path,
        on_file: Option<KnownBacklog>,
        unadopted: bool,
        runtime_dir: &Path,
    ) -> Result<(), Error> {
        self.remember(on_file);
        self.replace_seen(stamp_of(path)?);
        self.looked = true;
        if unadopted {
            self.replace_seen(None);
            self.looked = false;
        } else if let Some((stamp, _)) = &self.seen {
            note_adopted(runtime_dir, stamp);
        }
        self.behind = false;
        Ok(())
    }

    /// Brings the held file in step with the task log again, after the store adopted a claim
    /// made on the held rows, then releases the lock: the claimed row is projected from the
    /// log (now holding the claim at its new version) and the file rewritten once. The held
    /// text stands for the file, which no one else could change while the lock was held.
    pub(crate) fn project_held(
        &mut self,
        runtime_dir: &Path,
        mut held: HeldBacklog<'_>,
        index: &Index,
        load: impl FnMut(usize) -> Result<Task, Error>,
    ) -> Result<(), Error> {
        let backlog = LockedBacklog {
            path: held.path.clone(),
            guard: held._guard.take(),
            // The text on the file, which holds the held rows' rendering only when the
            // projection before the claim had nothing to write.
            canonical: held.pending.is_none(),
            original: held.on_file.take(),
            rows: Ok(Arc::clone(&held.rows)),
            parsed: false,
        };
        let unadopted = !backlog
            .claims_to_adopt(|id| index.status(id) == Some(TaskStatus::Open))
            .is_empty();
        let now_on_file = backlog.reconcile(index, load)?;
        self.now_in_step(&backlog.path, now_on_file, unadopted, runtime_dir)
    }

    /// Writes `rows` (already normalised: `BacklogEntry.to_dict()` objects) over the held
    /// file, as `json.dumps(rows, indent=2)` through a temporary file, fsync and rename, and
    /// remembers the text, then releases the lock. The stamp the adopted note and `seen` keep
    /// is left as it was, so the next mutation reads the new file (reusing these rows) and
    /// adopts a claim written here.
    pub(crate) fn write_held(
        &mut self,
        held: HeldBacklog<'_>,
        rows: Vec<Object>,
    ) -> Result<(), Error> {
        let rows: Vec<Arc<Row>> = rows.into_iter().map(Row::new).collect();
        let text = render_rows(&rows);
        fsio::write_atomic(&held.path, text.as_bytes())?;
        self.remember(Some(KnownBacklog {
            text: Arc::from(text),
            rows: Arc::new(rows),
            canonical: true,
        }));
        Ok(())
    }
}

/// The backlog file in step with the task log, its lock held until this drops.
#[derive(Debug)]
pub(crate) struct HeldBacklog<'a> {
    _guard: Option<LockGuard<'a>>,
    path: PathBuf,
    /// The rows the file must hold: the store's tasks projected onto it.
    pub(crate) rows: Rows,
    /// Their rendering, when the file does not hold it yet.
    pending: Option<String>,
    /// The text on the file (`None`: no file).
    on_file: Option<Arc<str>>,
    /// Whether a claim on the file is not in the task log yet.
    unadopted: bool,
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

    fn index_of(tasks: &[Task]) -> Index {
        let mut index = Index::default();
        for (line, task) in tasks.iter().enumerate() {
            let at = super::super::index::Location {
                offset: 0,
                len: 0,
                line: line as u64 + 1,
            };
            index.apply(super::super::index::Meta::of(task), at);
        }
        index
    }

    fn reconcile(existing: Option<&str>, tasks: &[Task]) -> (String, Vec<BacklogClaim>) {
        let dir = tempfile::tempdir().unwrap();
        if let Some(text) = existing {
            std::fs::write(dir.path().join(BACKLOG_FILE), text).unwrap();
        }
        let lock = LockFile::open(&dir.path().join(BACKLOG_LOCK_FILE)).unwrap();
        let backlog = lock_and_read(dir.path(), &lock, None).unwrap();
        let claims = backlog.claims_to_adopt(|id| {
            tasks
                .iter()
                .any(|t| &t.id == id && t.status == TaskStatus::Open)
        });
        backlog
            .reconcile(&index_of(tasks), |slot| Ok(tasks[slot].clone()))
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

    /// A row of an open task that is not plain open (a claimer named on an open row, or a claim
    /// in progress without its claimer) is somebody's record, kept as written, not projected
    /// over.
    #[test]
    fn an_open_tasks_row_that_is_not_plain_open_is_kept_as_written() {
        let check = |row: &str, kept: &str| {
            let file = format!("[{row}]");
            let (text, claims) = reconcile(Some(&file), &[task("t-open", TaskStatus::Open)]);
            assert!(claims.is_empty(), "{row}: {claims:?}");
            assert!(text.contains(kept), "{row} became {text}");
        };
        check(
            r#"{"id": "t-open", "status": "open", "claimer": "worker-a"}"#,
            r#""claimer": "worker-a""#,
        );
        check(
            r#"{"id": "t-open", "status": "in_progress", "claimer": null}"#,
            r#""status": "in_progress""#,
        );
    }

    /// A file another reader finds already holding the projection is known to be its
    /// rendering afterwards, so the next projection renders nothing to compare.
    #[test]
    fn a_file_found_to_hold_the_projection_is_known_canonical() {
        let dir = tempfile::tempdir().unwrap();
        let lock = LockFile::open(&dir.path().join(BACKLOG_LOCK_FILE)).unwrap();
        let tasks = [task("t-1", TaskStatus::Open), task("t-2", TaskStatus::Open)];
        let index = index_of(&tasks);
        let load = |slot: usize| Ok(tasks[slot].clone());
        lock_and_read(dir.path(), &lock, None)
            .unwrap()
            .reconcile(&index, load)
            .unwrap();
        // A reader that knows nothing parses the file and cannot tell it is canonical yet.
        let fresh = lock_and_read(dir.path(), &lock, None).unwrap();
        assert!(fresh.parsed && !fresh.canonical);
        let known = fresh.reconcile(&index, load).unwrap().unwrap();
        assert!(known.canonical, "the file was found to be the rendering");
    }

    /// A file that already holds the projection is not written again, whether this process
    /// knew it (nothing rendered) or parsed it afresh (rendered, found equal); an empty array
    /// written another way is rewritten as the reference writes it.
    #[test]
    fn only_a_file_that_differs_from_the_projection_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let lock = LockFile::open(&dir.path().join(BACKLOG_LOCK_FILE)).unwrap();
        let tasks = [task("t-1", TaskStatus::Open)];
        let index = index_of(&tasks);
        let load = |slot: usize| Ok(tasks[slot].clone());
        let known = lock_and_read(dir.path(), &lock, None)
            .unwrap()
            .reconcile(&index, load)
            .unwrap()
            .unwrap();
        for known in [Some(&known), None] {
            let backlog = lock_and_read(dir.path(), &lock, known).unwrap();
            let projection = backlog.projection(&index, load).unwrap().unwrap();
            assert_eq!(projection.text, None, "known: {}", known.is_some());
        }

        let empty = tempfile::tempdir().unwrap();
        std::fs::write(empty.path().join(BACKLOG_FILE), "[ ]").unwrap();
        let lock = LockFile::open(&empty.path().join(BACKLOG_LOCK_FILE)).unwrap();
        let backlog = lock_and_read(empty.path(), &lock, None).unwrap();
        let projection = backlog
            .projection(&Index::default(), load)
            .unwrap()
            .unwrap();
        assert_eq!(projection.text.as_deref(), Some("[]"));
    }

    /// A backlog file that exists but cannot be read is a storage error, never taken for a
    /// missing (empty) backlog that the next write would replace.
    #[test]
    fn a_backlog_that_cannot_be_read_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(BACKLOG_FILE)).unwrap();
        let lock = LockFile::open(&dir.path().join(BACKLOG_LOCK_FILE)).unwrap();
        match lock_and_read(dir.path(), &lock, None) {
            Err(err) => assert!(err.to_string().contains(BACKLOG_FILE), "{err}"),
            Ok(_) => panic!("a directory in the backlog's place was read as a backlog"),
        }
    }

    /// A row is current only at the task's version: a task that moved on and came back to the
    /// same status has its row written again.
    #[test]
    fn a_row_of_an_older_version_is_projected_again() {
        let older = task("t-open", TaskStatus::Open);
        let (text, _) = reconcile(None, std::slice::from_ref(&older));
        assert!(text.contains(r#""version": 1"#), "{text}");
        let mut newer = older;
        newer.version = 3;
        newer.title = "T, retitled".to_owned();
        let (text, _) = reconcile(Some(&text), &[newer]);
        assert!(text.contains(r#""version": 3"#), "{text}");
        assert!(text.contains("T, retitled"), "{text}");
    }

    /// What the tracker reads again: a missing file only until it has looked once; a file it
    /// adopted wholly is noted for the other store processes; a path it cannot open is an
    /// error, not a missing file.
    #[test]
    fn the_tracker_looks_once_notes_what_it_adopted_and_refuses_what_it_cannot_open() {
        let dir = tempfile::tempdir().unwrap();
        let lock = LockFile::open(&dir.path().join(BACKLOG_LOCK_FILE)).unwrap();
        let mut tracker = BacklogTracker::default();
        let missing = tracker
            .changed_claims(dir.path(), &lock, |_| false)
            .unwrap()
            .expect("the first look at a missing file is a change");
        tracker.adopted(dir.path(), missing, true);
        assert!(
            tracker
                .changed_claims(dir.path(), &lock, |_| false)
                .unwrap()
                .is_none(),
            "a file still missing is not looked for again"
        );

        // A path that cannot be opened in the missing file's place is not still missing.
        let path = dir.path().join(BACKLOG_FILE);
        std::os::unix::fs::symlink(&path, &path).unwrap();
        let refused = tracker.changed_claims(dir.path(), &lock, |_| false);
        assert!(refused.is_err(), "a symlink loop read as {refused:?}");
        std::fs::remove_file(&path).unwrap();

        std::fs::write(&path, "[]").unwrap();
        let read = tracker
            .changed_claims(dir.path(), &lock, |_| false)
            .unwrap()
            .expect("the new file is seen");
        assert!(!read.noted);
        let stamp = read.stamp.as_ref().map(|(stamp, _)| *stamp);
        tracker.adopted(dir.path(), read, true);
        assert_eq!(adopted_note(dir.path()), stamp, "the adoption is noted");
    }

    /// The tracker's descriptor on a backlog another process replaced can be the last one on a
    /// large unlinked file; it is let go of on the closer thread, not inside the call.
    #[test]
    fn a_replaced_backlog_is_closed_off_the_call_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(BACKLOG_FILE);
        std::fs::write(&path, "[]").unwrap();
        let lock = LockFile::open(&dir.path().join(BACKLOG_LOCK_FILE)).unwrap();
        let mut tracker = BacklogTracker::default();
        let first = tracker
            .changed_claims(dir.path(), &lock, |_| false)
            .unwrap()
            .expect("the first look sees the file");
        tracker.adopted(dir.path(), first, true);
        let replaced = {
            let meta = std::fs::metadata(&path).unwrap();
            (meta.dev(), meta.ino())
        };
        // Another process replaces the file.
        fsio::write_atomic(&path, b"[\n]").unwrap();
        let closed_before = fsio::closed_by_closer().len();
        let changed = tracker
            .changed_claims(dir.path(), &lock, |_| false)
            .unwrap()
            .expect("the replacement is seen");
        tracker.adopted(dir.path(), changed, true);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !fsio::closed_by_closer()[closed_before..].contains(&replaced) {
            assert!(
                std::time::Instant::now() < deadline,
                "the replaced file never reached the closer thread"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            tracker
                .changed_claims(dir.path(), &lock, |_| false)
                .unwrap()
                .is_none(),
            "the replacement is the file now seen"
        );
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
            let backlog = lock_and_read(dir.path(), &lock, None).unwrap();
            assert!(backlog.problem().is_some(), "{bad}");
            let tasks = [task("t-open", TaskStatus::Open)];
            backlog
                .reconcile(&index_of(&tasks), |slot| Ok(tasks[slot].clone()))
                .unwrap();
            assert_eq!(
                std::fs::read_to_string(dir.path().join(BACKLOG_FILE)).unwrap(),
                bad
            );
        }
    }

    #[test]
    fn a_projection_looks_for_missing_tasks_only_when_the_file_lacks_some() {
        // Many settled tasks and a few with rows: once the file names every task with a row,
        // a projection must not walk the settled ones.
        let project = |tasks: &[Task], file: Option<&KnownBacklog>| {
            let dir = tempfile::tempdir().unwrap();
            let lock = LockFile::open(&dir.path().join(BACKLOG_LOCK_FILE)).unwrap();
            if let Some(file) = file {
                std::fs::write(dir.path().join(BACKLOG_FILE), &*file.text).unwrap();
            }
            let backlog = lock_and_read(dir.path(), &lock, file).unwrap();
            backlog
                .projection(&index_of(tasks), |slot| Ok(tasks[slot].clone()))
                .unwrap()
                .unwrap()
        };
        let mut tasks: Vec<Task> = (0..200)
            .map(|n| task(&format!("t-{n}"), TaskStatus::Done))
            .collect();
        for n in [3, 70, 199] {
            tasks[n].status = TaskStatus::Open;
        }
        tasks[120].status = TaskStatus::InProgress;
        tasks[120].claimed_by = Some("worker-a".into());
        let first = project(&tasks, None);
        assert_eq!(first.slots_scanned, 200, "a missing file lacks every row");
        assert_eq!(first.rows.len(), 4);
        let on_file = KnownBacklog {
            text: Arc::from(first.text.unwrap()),
            rows: first.rows,
            canonical: true,
        };
        let again = project(&tasks, Some(&on_file));
        assert_eq!(again.slots_scanned, 0);
        assert!(again.text.is_none(), "nothing changed, nothing to write");
        // A task that gains a row (reopened) is found, and so is one that gains a row while a
        // task on the file settles.
        tasks[10].status = TaskStatus::Open;
        let reopened = project(&tasks, Some(&on_file));
        assert_eq!(reopened.slots_scanned, 200);
        assert_eq!(reopened.rows.len(), 5);
        tasks[10].status = TaskStatus::Done;
        tasks[3].status = TaskStatus::Done;
        tasks[50].status = TaskStatus::Claimed;
        tasks[50].claimed_by = Some("worker-b".into());
        let swapped = project(&tasks, Some(&on_file));
        let ids: Vec<&str> = swapped
            .rows
            .iter()
            .filter_map(|row| row.object.get("id").and_then(Value::as_str))
            .collect();
        assert_eq!(ids, ["t-70", "t-120", "t-199", "t-50"]);
    }

    #[test]
    fn a_projection_shares_the_rows_it_keeps_and_renders_them_as_json_dumps() {
        let dir = tempfile::tempdir().unwrap();
        let lock = LockFile::open(&dir.path().join(BACKLOG_LOCK_FILE)).unwrap();
        let mut tasks: Vec<Task> = (0..4)
            .map(|n| task(&format!("t-{n}"), TaskStatus::Open))
            .collect();
        let index = index_of(&tasks);
        let first = lock_and_read(dir.path(), &lock, None).unwrap();
        let known = first
            .reconcile(&index, |slot| Ok(tasks[slot].clone()))
            .unwrap()
            .unwrap();
        drop(first);
        // One task moves on; the other rows must be the same rows, not copies.
        tasks[2].status = TaskStatus::Done;
        let index = index_of(&tasks);
        let second = lock_and_read(dir.path(), &lock, Some(&known)).unwrap();
        assert!(
            !second.parsed,
            "the file as last written is not parsed again"
        );
        let projection = second
            .projection(&index, |slot| Ok(tasks[slot].clone()))
            .unwrap()
            .unwrap();
        assert_eq!(projection.rows.len(), 3);
        for (kept, before) in projection.rows.iter().zip([0, 1, 3]) {
            assert!(
                Arc::ptr_eq(kept, &known.rows[before]),
                "row {before} copied"
            );
        }
        let objects: Vec<Object> = projection
            .rows
            .iter()
            .map(|row| row.object.clone())
            .collect();
        assert_eq!(
            projection.text.unwrap(),
            bernstein_journal::handle::render_indent2_objects(&objects)
        );
    }

    #[test]
    fn claims_are_in_progress_rows_with_a_claimer_of_open_tasks() {
        let check = |row: &str, expect: Option<(&str, Option<&str>)>| {
            let Value::Object(row) = Value::parse(row).unwrap() else {
                panic!("{row} is not an object");
            };
            let open = |id: &TaskId| id.as_str().starts_with("t-open");
            let claims = claims_in([&row], open);
            let got = claims
                .first()
                .map(|claim| (claim.task_id.as_str(), claim.claimer.as_deref()));
            assert_eq!(got, expect, "{row:?}");
        };
        check(
            r#"{"id": "t-open", "status": "in_progress", "claimer": "w-1"}"#,
            Some(("t-open", Some("w-1"))),
        );
        // A claimer that is no worker id is adopted without a claimer.
        check(
            r#"{"id": "t-open", "status": "in_progress", "claimer": "a/b"}"#,
            Some(("t-open", None)),
        );
        check(
            r#"{"id": "t-done", "status": "in_progress", "claimer": "w-1"}"#,
            None,
        );
        check(
            r#"{"id": "t-open", "status": "in_progress", "claimer": null}"#,
            None,
        );
        check(r#"{"id": "t-open", "status": "in_progress"}"#, None);
        check(
            r#"{"id": "t-open", "status": "open", "claimer": "w-1"}"#,
            None,
        );
        check(r#"{"id": "t-open", "claimer": "w-1"}"#, None);
        check(
            r#"{"id": "../t-open", "status": "in_progress", "claimer": "w-1"}"#,
            None,
        );
        check(r#"{"status": "in_progress", "claimer": "w-1"}"#, None);
    }

    #[test]
    fn claims_with_a_claim_time_that_is_no_unix_time_are_unadoptable() {
        let text = r#"[
            {"id": "t-open-1", "status": "in_progress", "claimer": "w", "claimed_at": -1},
            {"id": "t-open-2", "status": "in_progress", "claimer": "w", "claimed_at": 5.5},
            {"id": "t-open-3", "status": "in_progress", "claimer": "w", "claimed_at": NaN},
            {"id": "t-open-4", "status": "open", "claimer": null, "claimed_at": -1},
            {"id": "t-done-5", "status": "in_progress", "claimer": "w", "claimed_at": -1},
            {"id": "t-open-6", "status": "in_progress", "claimer": "w", "claimed_at": Infinity},
            {"id": "t-open-7", "status": "in_progress", "claimer": null, "claimed_at": -1},
            {"id": "t-open-8", "status": "open", "claimer": "w", "claimed_at": -1}
        ]"#;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(BACKLOG_FILE), text).unwrap();
        let backlog = read_unlocked(dir.path()).unwrap();
        let found = backlog.unadoptable(|id| id.as_str().starts_with("t-open"));
        let rows: Vec<usize> = found.iter().map(|(index, _)| *index).collect();
        assert_eq!(rows, [0, 2, 5], "{found:?}");
        assert_eq!(
            found[0].1,
            "task t-open-1: claimed_at -1 is not a Unix time"
        );
    }

    #[test]
    fn no_file_is_written_for_an_empty_projection() {
        let (text, _) = reconcile(None, &[task("t-done", TaskStatus::Done)]);
        assert_eq!(text, "");
    }
}
