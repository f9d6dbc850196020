//! Appending rows to a run journal (`EventJournal.record`), safely across processes.
//!
//! Row bytes are PY-ROW (`json.dumps(entry, default=str)`, insertion order) with the keys
//! `ts, elapsed_s, index, event, prev_hash, payload_hash, event_hash, [hash_profile]`, then the
//! payload keys in call order. Every row of a `jcs-v2` journal carries `hash_profile`, exactly
//! as the reference writes it.
//!
//! **Clock.** `ts` and `elapsed_s` come from a caller-supplied [`Clock`]. The reference reads
//! `time.time()` once when the journal object is built (`_start_ts`) and twice per append: once
//! for `ts`, once more for `elapsed_s = round(now - _start_ts, 3)`. This writer makes the same
//! three kinds of reading in the same order, so `elapsed_s` is relative to when *this writer*
//! was opened (per process, not per run), and a stepping clock reproduces the reference
//! generator's frozen-clock vectors byte for byte.
//!
//! **Cross-process safety.** The reference takes no file lock (only a thread lock) and writes
//! with buffered `open("a")`. We hold an exclusive `flock` on the journal file itself for the
//! whole read-tail / hash / write / fsync critical section, so no lock file appears in the run
//! directory and readers are never blocked. Inside the lock the tail is re-read whenever the
//! file changed since our last append (length or inode), so several processes extend one chain.
//! Each row goes out as one `write(2)` of `line + "\n"` on an `O_APPEND` descriptor, followed
//! by `fsync` before the append returns; a failed write or fsync truncates the file back to its
//! length before the row, so a retry cannot duplicate it. Before the first acknowledgement of a
//! process, the directories naming the journal are fsynced up to the project root
//! ([`crate::durable::ensure_entry_durable`]), whoever created them.
//!
//! **Resuming.** Like `EventJournal.resume`, an existing journal is continued only when it is
//! sound: the next index is the number of rows and `prev_hash` is the last row's `event_hash`.
//! A torn tail (bytes after the last line terminator) was never acknowledged, because a row is
//! acknowledged only after the fsync of the whole line: it is recorded in the project's tear log
//! and cut under the lock ([`crate::durable::recover_torn_tail`]), then the append proceeds. Any
//! discarded line, a chain that does not recompute, or an unknown hash profile refuses the
//! append with [`Error::JournalUnusable`]: extending a poisoned chain would launder it. The
//! stored profile of an existing journal wins over the profile the writer was opened with.

use super::hashing::{HashProfile, event_hash, is_excluded_field, payload_hash};
use super::paths::{run_journal_path, validate_run_id};
use super::python::python_round3;
use super::reader::scan;
use super::verify::{detect_hash_profile, row_str, verify_rows};
use crate::durable::{
    append_durably, create_dir_all_durable, ensure_entry_durable, recover_torn_tail,
};
use crate::{Error, Result};
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A source of wall-clock readings, in float Unix seconds (Python's `time.time()`).
pub trait Clock {
    /// The current time in seconds since the Unix epoch.
    fn now_unix_seconds(&mut self) -> f64;
}

/// Any `FnMut() -> f64` is a clock, which keeps deterministic tests one closure long.
impl<F: FnMut() -> f64> Clock for F {
    fn now_unix_seconds(&mut self) -> f64 {
        self()
    }
}

/// The system wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_seconds(&mut self) -> f64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs_f64())
            .unwrap_or(0.0)
    }
}

/// What one append wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendedRow {
    /// The row's position (and `index` field).
    pub index: u64,
    /// The previous row's `event_hash` (`""` at genesis).
    pub prev_hash: String,
    /// The row's `payload_hash`.
    pub payload_hash: String,
    /// The row's `event_hash`, the journal's new head.
    pub event_hash: String,
    /// The profile the row was hashed with.
    pub hash_profile: HashProfile,
    /// The exact line written, without the trailing newline.
    pub line: String,
}

/// The chain position at the end of the file, as last seen by this writer.
#[derive(Debug, Clone)]
struct Tail {
    /// `(st_dev, st_ino, st_size)` of the file right after our own append.
    identity: (u64, u64, u64),
    next_index: u64,
    head: String,
    profile: HashProfile,
}

/// An appender for one run's journal.
#[derive(Debug)]
pub struct JournalWriter<C: Clock = SystemClock> {
    project_root: PathBuf,
    run_id: String,
    new_journal_profile: HashProfile,
    clock: C,
    start_ts: f64,
    tail: Option<Tail>,
    /// Rows per event type, valid for the file state `tail` describes (same identity).
    counts: Option<EventCounts>,
}

/// How many rows of each event type a journal holds, as of one file state.
#[derive(Debug, Clone, Default)]
struct EventCounts {
    identity: (u64, u64, u64),
    by_event: HashMap<String, u64>,
    /// The last row of each event type, as read or written.
    last_by_event: HashMap<String, Object>,
    rows: u64,
}

/// What [`JournalWriter::append_counted`] tells its payload builder about the journal: the
/// rows it holds, in total and per event type, read under the append's lock.
#[derive(Debug)]
pub struct JournalSummary<'a> {
    rows: u64,
    by_event: &'a HashMap<String, u64>,
    last_by_event: &'a HashMap<String, Object>,
}

impl JournalSummary<'_> {
    /// Every row in the journal.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The rows whose `event` is `event`.
    pub fn count_of(&self, event: &str) -> u64 {
        self.by_event.get(event).copied().unwrap_or(0)
    }

    /// The last row whose `event` is `event` (the whole row: envelope and payload keys), so a
    /// caller can check, under the lock, whether the operation that row began was completed.
    pub fn last_of(&self, event: &str) -> Option<&Object> {
        self.last_by_event.get(event)
    }
}

impl JournalWriter<SystemClock> {
    /// Opens a writer on the system clock. See [`JournalWriter::open_with_clock`].
    ///
    /// # Errors
    ///
    /// As [`JournalWriter::open_with_clock`].
    pub fn open(
        project_root: &Path,
        run_id: &str,
        new_journal_profile: HashProfile,
    ) -> Result<JournalWriter<SystemClock>> {
        JournalWriter::open_with_clock(project_root, run_id, new_journal_profile, SystemClock)
    }
}

impl<C: Clock> JournalWriter<C> {
    /// Opens a writer for `.sdd/runs/<run_id>/journal.jsonl` under `project_root`.
    ///
    /// Nothing is created until the first append. `new_journal_profile` applies when the
    /// journal is empty or absent; an existing journal keeps its own profile. The clock is read
    /// once now, as the origin of `elapsed_s`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRunId`] or [`Error::Containment`] when the run id cannot name a journal
    /// inside the project root.
    pub fn open_with_clock(
        project_root: &Path,
        run_id: &str,
        new_journal_profile: HashProfile,
        mut clock: C,
    ) -> Result<JournalWriter<C>> {
        validate_run_id(run_id)?;
        run_journal_path(project_root, run_id)?;
        let start_ts = clock.now_unix_seconds();
        Ok(JournalWriter {
            project_root: project_root.to_path_buf(),
            run_id: run_id.to_owned(),
            new_journal_profile,
            clock,
            start_ts,
            tail: None,
            counts: None,
        })
    }

    /// The run this writer appends to.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The containment-checked journal path (re-checked on every append).
    ///
    /// # Errors
    ///
    /// [`Error::Containment`] when the run directory now resolves outside the project.
    pub fn path(&self) -> Result<PathBuf> {
        run_journal_path(&self.project_root, &self.run_id)
    }

    /// Appends one event with `payload` (keys kept in the given order) and returns what was
    /// written, after it is on stable storage.
    ///
    /// # Errors
    ///
    /// * [`Error::Encode`] when a payload key collides with the row envelope (`ts`,
    ///   `elapsed_s`, `index`, `event`, `prev_hash`, `payload_hash`, `event_hash`,
    ///   `hash_profile`; the reference would silently overwrite the envelope and write a row
    ///   that cannot verify), or a `jcs-v2` payload holds NaN or an infinity;
    /// * [`Error::Containment`] when the run directory resolves outside the project (nothing is
    ///   created or written then);
    /// * [`Error::JournalUnusable`] when the existing journal cannot be extended soundly;
    /// * [`Error::Io`] for filesystem failures.
    pub fn append(&mut self, event: &str, payload: &Object) -> Result<AppendedRow> {
        check_payload_keys(payload)?;
        let (mut file, path) = self.open_locked()?;
        // Closing the descriptor (when `file` drops) releases the lock.
        self.append_locked(&mut file, &path, event, payload)
    }

    /// Appends one event whose payload is built from what the journal holds (its row count per
    /// event type), read under the same exclusive lock the append holds, so a value derived
    /// from it (a call index, an order) cannot be raced by another process appending in
    /// between.
    ///
    /// `build` returns the payload, or `None` to append nothing (the call then returns
    /// `Ok(None)`; the journal file may have been created empty). The counts are kept between
    /// calls and the journal is re-read only when another writer changed the file since this
    /// writer's last append, so a long-lived writer appends in constant time.
    ///
    /// # Errors
    ///
    /// As [`JournalWriter::append`].
    pub fn append_counted<F>(&mut self, event: &str, build: F) -> Result<Option<AppendedRow>>
    where
        F: FnOnce(&JournalSummary<'_>) -> Option<Object>,
    {
        self.append_counted_then(event, build, |_| Ok(()))
            .map(|appended| appended.map(|(row, ())| row))
    }

    /// [`JournalWriter::append_counted`], then `then(&row)` while the journal's lock is still
    /// held. When `then` fails, the row is taken back (the file is truncated to its length
    /// before the row and fsynced) and `then`'s error is returned, so the journal holds no row
    /// for an operation that did not complete: nothing else can have been appended behind it.
    /// `then` must not append to this journal itself.
    ///
    /// # Errors
    ///
    /// As [`JournalWriter::append`], and `then`'s error.
    pub fn append_counted_then<F, G, T>(
        &mut self,
        event: &str,
        build: F,
        then: G,
    ) -> Result<Option<(AppendedRow, T)>>
    where
        F: FnOnce(&JournalSummary<'_>) -> Option<Object>,
        G: FnOnce(&AppendedRow) -> Result<T>,
    {
        let (mut file, path) = self.open_locked()?;
        let identity = file_identity(&file, &path)?;
        let cached = match (&self.tail, &self.counts) {
            (Some(tail), Some(counts))
                if tail.identity == identity && counts.identity == identity =>
            {
                Some((tail.clone(), counts.clone()))
            }
            _ => None,
        };
        let (tail, mut counts) = match cached {
            Some(cached) => cached,
            None => {
                let (tail, rows) = self.read_rows(&mut file, &path, identity)?;
                // The file may have lost a torn tail: the identity is the tail's now.
                let identity = tail.identity;
                let mut counts = EventCounts {
                    identity,
                    by_event: HashMap::new(),
                    last_by_event: HashMap::new(),
                    rows: 0,
                };
                let mut last_at: HashMap<&str, usize> = HashMap::new();
                for (at, row) in rows.iter().enumerate() {
                    counts.rows += 1;
                    if let Some(name) = row.get("event").and_then(Value::as_str) {
                        *counts.by_event.entry(name.to_owned()).or_insert(0) += 1;
                        last_at.insert(name, at);
                    }
                }
                for (name, at) in last_at {
                    counts
                        .last_by_event
                        .insert(name.to_owned(), rows[at].clone());
                }
                (tail, counts)
            }
        };
        let summary = JournalSummary {
            rows: counts.rows,
            by_event: &counts.by_event,
            last_by_event: &counts.last_by_event,
        };
        let Some(payload) = build(&summary) else {
            return Ok(None);
        };
        check_payload_keys(&payload)?;
        counts.identity = tail.identity;
        self.counts = Some(counts);
        let size_before = tail.identity.2;
        // `write_row` advances the counts with the row it writes.
        let row = self.write_row(&mut file, &path, tail, event, &payload)?;
        match then(&row) {
            Ok(value) => Ok(Some((row, value))),
            Err(err) => {
                // The cached tail and counts describe the row being taken back; forget them.
                self.tail = None;
                self.counts = None;
                if let Err(rollback) = file.set_len(size_before).and_then(|()| file.sync_all()) {
                    tracing::error!(
                        path = %path.display(),
                        index = row.index,
                        error = %rollback,
                        "could not take back a journal row whose operation failed"
                    );
                }
                Err(err)
            }
        }
    }

    /// Creates the run directory and journal file when needed, and returns the file opened for
    /// appending with its exclusive lock held.
    fn open_locked(&self) -> Result<(File, PathBuf)> {
        let checked = self.path()?;
        let run_dir =
            checked
                .parent()
                .map(Path::to_path_buf)
                .ok_or_else(|| Error::Containment {
                    path: checked.clone(),
                    reason: "the journal path has no parent directory".to_owned(),
                })?;
        create_dir_all_durable(&run_dir).map_err(|err| Error::io("create", &run_dir, err))?;
        // Re-check after creating directories, so a symlink planted meanwhile is refused too.
        let path = self.path()?;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|err| Error::io("open", &path, err))?;
        // Make the directory entries durable before any row depends on them, so a failure here
        // is reported while nothing has been written yet. The creator may have died before its
        // own directory fsync, so this does not depend on who created the file.
        ensure_entry_durable(&path).map_err(|err| Error::io("fsync", &run_dir, err))?;
        file.lock().map_err(|err| Error::io("lock", &path, err))?;
        Ok((file, path))
    }

    fn append_locked(
        &mut self,
        file: &mut File,
        path: &Path,
        event: &str,
        payload: &Object,
    ) -> Result<AppendedRow> {
        let identity = file_identity(file, path)?;
        let tail = match &self.tail {
            Some(tail) if tail.identity == identity => tail.clone(),
            _ => self.read_rows(file, path, identity)?.0,
        };
        self.write_row(file, path, tail, event, payload)
    }

    /// Hashes and writes one row after `tail` (whose identity is the file's now), fsyncs it,
    /// and remembers the new tail.
    fn write_row(
        &mut self,
        file: &mut File,
        path: &Path,
        tail: Tail,
        event: &str,
        payload: &Object,
    ) -> Result<AppendedRow> {
        let mut hashed = Object::new();
        if tail.profile != HashProfile::PyJsonV1 {
            hashed.insert("hash_profile", tail.profile.as_str());
        }
        for (key, value) in payload.iter() {
            hashed.insert(key, value.clone());
        }
        let p_hash = payload_hash(tail.profile, event, &hashed)
            .map_err(|err| Error::Encode(err.to_string()))?;
        let e_hash = event_hash(tail.profile, &tail.head, event, &p_hash, tail.next_index);

        let ts = self.clock.now_unix_seconds();
        let elapsed = python_round3(self.clock.now_unix_seconds() - self.start_ts);
        let mut row = Object::new()
            .with("ts", ts)
            .with("elapsed_s", elapsed)
            .with("index", tail.next_index)
            .with("event", event)
            .with("prev_hash", tail.head.as_str())
            .with("payload_hash", p_hash.as_str())
            .with("event_hash", e_hash.as_str());
        if tail.profile != HashProfile::PyJsonV1 {
            row.insert("hash_profile", tail.profile.as_str());
        }
        for (key, value) in payload.iter() {
            row.insert(key, value.clone());
        }
        let line = Value::Object(row.clone()).dumps(Dialect::PY_ROW);
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        let identity = tail.identity;
        let (dev, ino, size) = identity;
        // One write(2) on an O_APPEND descriptor; `write_all` only loops on a short write. A
        // failure takes the row back (we hold the lock, so the bytes past `size` are ours).
        append_durably(file, size, &bytes).map_err(|err| Error::io("append to", path, err))?;

        let written = bytes.len() as u64;
        // Counts that described the file before this row describe it after, plus this row.
        match &mut self.counts {
            Some(counts) if counts.identity == identity => {
                counts.identity = (dev, ino, size + written);
                counts.rows += 1;
                *counts.by_event.entry(event.to_owned()).or_insert(0) += 1;
                counts.last_by_event.insert(event.to_owned(), row);
            }
            _ => self.counts = None,
        }
        self.tail = Some(Tail {
            identity: (dev, ino, size + written),
            next_index: tail.next_index + 1,
            head: e_hash.clone(),
            profile: tail.profile,
        });
        Ok(AppendedRow {
            index: tail.next_index,
            prev_hash: tail.head,
            payload_hash: p_hash,
            event_hash: e_hash,
            hash_profile: tail.profile,
            line,
        })
    }

    /// Re-reads the whole journal under the lock and derives the chain tail, refusing a journal
    /// that cannot be extended soundly. A torn tail is recorded and cut first, and the returned
    /// tail carries the file's identity after the cut. Returns the rows read as well.
    fn read_rows(
        &self,
        file: &mut File,
        path: &Path,
        mut identity: (u64, u64, u64),
    ) -> Result<(Tail, Vec<Object>)> {
        let unusable = |reason: String| Error::JournalUnusable {
            path: path.to_path_buf(),
            reason,
        };
        file.seek(SeekFrom::Start(0))
            .map_err(|err| Error::io("read", path, err))?;
        let mut scanned = scan(&*file).map_err(|err| Error::io("read", path, err))?;
        if !scanned.ends_on_line_boundary
            && recover_torn_tail(&self.project_root, file, path)?.is_some()
        {
            identity = file_identity(file, path)?;
            file.seek(SeekFrom::Start(0))
                .map_err(|err| Error::io("read", path, err))?;
            scanned = scan(&*file).map_err(|err| Error::io("read", path, err))?;
        }
        if !scanned.ends_on_line_boundary {
            return Err(unusable(
                "the last row is torn (no trailing newline); repair the tail first".to_owned(),
            ));
        }
        let rows = &scanned.loaded.rows;
        if !scanned.loaded.discarded_lines.is_empty() {
            let joined: Vec<String> = scanned
                .loaded
                .discarded_lines
                .iter()
                .map(usize::to_string)
                .collect();
            return Err(unusable(format!(
                "reader discarded physical line(s): {}",
                joined.join(", ")
            )));
        }
        let profile = if rows.is_empty() {
            self.new_journal_profile
        } else {
            detect_hash_profile(rows)
                .map_err(|name| unusable(format!("unknown hash_profile {name:?}")))?
        };
        let verification = verify_rows(rows);
        if !verification.chain_consistent {
            return Err(unusable(format!(
                "the existing chain does not verify: {}",
                verification.errors.join("; ")
            )));
        }
        let tail = Tail {
            identity,
            next_index: rows.len() as u64,
            head: rows
                .last()
                .map(|row| row_str(row, "event_hash"))
                .unwrap_or_default(),
            profile,
        };
        Ok((tail, scanned.loaded.rows))
    }
}

/// Refuses a payload key that collides with the row envelope.
fn check_payload_keys(payload: &Object) -> Result<()> {
    match payload
        .keys()
        .find(|key| is_excluded_field(key) || matches!(*key, "event" | "hash_profile"))
    {
        Some(key) => Err(Error::Encode(format!(
            "payload key {key:?} collides with the journal row envelope"
        ))),
        None => Ok(()),
    }
}

fn file_identity(file: &File, path: &Path) -> Result<(u64, u64, u64)> {
    let meta = file
        .metadata()
        .map_err(|err| Error::io("stat", path, err))?;
    Ok((meta.dev(), meta.ino(), meta.size()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_journal::{load_journal, verify_journal};

    fn stepping_clock(start: f64) -> impl FnMut() -> f64 {
        let mut now = start;
        move || {
            let value = now;
            now += 0.25;
            value
        }
    }

    #[test]
    fn rows_chain_and_verify() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open_with_clock(
            dir.path(),
            "run-1",
            HashProfile::PyJsonV1,
            stepping_clock(1_780_000_000.0),
        )
        .unwrap();
        let first = writer
            .append("run_started", &Object::new().with("goal", "x"))
            .unwrap();
        assert_eq!(
            first.line,
            format!(
                "{{\"ts\": 1780000000.25, \"elapsed_s\": 0.5, \"index\": 0, \"event\": \"run_started\", \"prev_hash\": \"\", \"payload_hash\": \"{}\", \"event_hash\": \"{}\", \"goal\": \"x\"}}",
                first.payload_hash, first.event_hash
            )
        );
        let second = writer.append("run_completed", &Object::new()).unwrap();
        assert_eq!(second.index, 1);
        assert_eq!(second.prev_hash, first.event_hash);
        let report = verify_journal(&writer.path().unwrap()).unwrap();
        assert!(report.ok(), "{report:?}");
        assert_eq!(report.head, second.event_hash);
    }

    #[test]
    fn append_counted_builds_the_payload_from_the_journal_under_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let mut second = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let count = |seen: &JournalSummary<'_>| {
            Some(
                Object::new()
                    .with("seen", seen.count_of("counted"))
                    .with("rows", seen.rows()),
            )
        };
        let a = first.append_counted("counted", count).unwrap().unwrap();
        // The second writer has no cached counts; it must see the first writer's row.
        let b = second.append_counted("counted", count).unwrap().unwrap();
        // The first writer's cache is stale now (the file grew under it): it re-reads.
        let c = first.append_counted("counted", count).unwrap().unwrap();
        first.append("other", &Object::new()).unwrap();
        // Cached after its own plain append: the count of "counted" rows stays right.
        let d = first.append_counted("counted", count).unwrap().unwrap();
        assert_eq!((a.index, b.index, c.index, d.index), (0, 1, 2, 4));
        assert!(c.line.ends_with("\"seen\": 2, \"rows\": 2}"), "{}", c.line);
        assert!(d.line.ends_with("\"seen\": 3, \"rows\": 4}"), "{}", d.line);
        assert_eq!(second.append_counted("counted", |_| None).unwrap(), None);
        let err = first
            .append_counted("x", |_| Some(Object::new().with("index", 1)))
            .unwrap_err();
        assert!(matches!(err, Error::Encode(_)), "{err}");
        let report = verify_journal(&first.path().unwrap()).unwrap();
        assert!(report.ok() && report.count == 5, "{report:?}");
    }

    #[test]
    fn the_summary_holds_the_last_row_of_each_event_whoever_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let mut second = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let last_n = |seen: &JournalSummary<'_>, event: &str| {
            seen.last_of(event)
                .and_then(|row| row.get("n"))
                .and_then(Value::as_i64)
        };
        let mut seen = Vec::new();
        let mut note = |writer: &mut JournalWriter, n: i64| {
            writer
                .append_counted("call", |summary| {
                    seen.push((last_n(summary, "call"), last_n(summary, "other")));
                    Some(Object::new().with("n", n))
                })
                .unwrap()
                .unwrap()
        };
        note(&mut first, 1);
        // Read from disk: the first writer's row.
        note(&mut second, 2);
        second.append("other", &Object::new().with("n", 9)).unwrap();
        // Cached: the second writer's own rows, including the plain append.
        note(&mut second, 3);
        // Re-read after the file changed under the first writer.
        note(&mut first, 4);
        assert_eq!(
            seen,
            vec![
                (None, None),
                (Some(1), None),
                (Some(2), Some(9)),
                (Some(3), Some(9))
            ]
        );
    }

    #[test]
    fn envelope_keys_in_the_payload_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        for key in [
            "ts",
            "index",
            "event",
            "prev_hash",
            "event_hash",
            "hash_profile",
        ] {
            let err = writer.append("e", &Object::new().with(key, 1)).unwrap_err();
            assert!(matches!(err, Error::Encode(_)), "{key}: {err}");
        }
        assert!(!dir.path().join(".sdd").exists());
    }

    #[test]
    fn a_second_writer_resumes_the_chain_and_keeps_the_stored_profile() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = JournalWriter::open(dir.path(), "r", HashProfile::JcsV2).unwrap();
        first.append("a", &Object::new()).unwrap();
        let mut second = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let row = second.append("b", &Object::new().with("n", 1)).unwrap();
        assert_eq!(row.index, 1);
        assert_eq!(row.hash_profile, HashProfile::JcsV2);
        first.append("c", &Object::new()).unwrap();
        let loaded = load_journal(&first.path().unwrap()).unwrap();
        assert_eq!(loaded.rows.len(), 3);
        assert!(verify_journal(&first.path().unwrap()).unwrap().ok());
    }

    #[test]
    fn unsound_journals_are_not_extended() {
        let check = |content: &[u8]| {
            let dir = tempfile::tempdir().unwrap();
            let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
            let path = writer.path().unwrap();
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, content).unwrap();
            let err = writer.append("e", &Object::new()).unwrap_err();
            assert!(
                matches!(err, Error::JournalUnusable { .. }),
                "{content:?}: {err}"
            );
            assert_eq!(
                std::fs::read(&path).unwrap(),
                content,
                "file must be untouched"
            );
        };
        check(b"garbage\n");
        check(b"{\"event\": \"x\", \"prev_hash\": \"\", \"event_hash\": \"bad\"}\n");
        check(b"{\"event\": \"x\", \"hash_profile\": \"v9\"}\n");
    }

    /// A writer killed in the middle of `write_all` leaves half a row. It was never
    /// acknowledged, so the next append records and cuts it instead of refusing for ever.
    #[test]
    fn a_half_written_row_is_cut_recorded_and_the_append_proceeds() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let first = writer.append("a", &Object::new()).unwrap();
        let path = writer.path().unwrap();
        let whole = std::fs::read(&path).unwrap();
        let half = b"{\"ts\": 1780000000.5, \"elapsed_s\": 0.1, \"ind";
        let mut torn = whole.clone();
        torn.extend_from_slice(half);
        std::fs::write(&path, &torn).unwrap();

        // A fresh writer (another process) and the first one (stale cache) both get through.
        let mut other = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let second = other.append("b", &Object::new()).unwrap();
        assert_eq!(
            (second.index, second.prev_hash.as_str()),
            (1, first.event_hash.as_str())
        );
        let third = writer.append("c", &Object::new()).unwrap();
        assert_eq!(third.index, 2);
        let report = verify_journal(&path).unwrap();
        assert!(report.ok() && report.count == 3, "{report:?}");

        let log = crate::durable::read_tear_log(dir.path()).unwrap();
        assert_eq!(log.tears.len(), 1, "{log:?}");
        let tear = &log.tears[0];
        assert_eq!(tear.file, ".sdd/runs/r/journal.jsonl");
        assert_eq!(
            (tear.offset, tear.length),
            (whole.len() as u64, half.len() as u64)
        );
    }

    #[test]
    fn a_failed_fsync_takes_the_row_back_so_a_retry_does_not_duplicate_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        writer.append("a", &Object::new()).unwrap();
        crate::durable::seams::fail_next_fsyncs(1);
        let err = writer.append("b", &Object::new()).unwrap_err();
        assert!(err.to_string().contains("injected fsync failure"), "{err}");
        writer.append("b", &Object::new()).unwrap();
        let loaded = load_journal(&writer.path().unwrap()).unwrap();
        let events: Vec<&str> = loaded
            .rows
            .iter()
            .map(|row| row.get("event").and_then(Value::as_str).unwrap())
            .collect();
        assert_eq!(events, vec!["a", "b"]);
        assert!(verify_journal(&writer.path().unwrap()).unwrap().ok());
    }

    #[test]
    fn jcs_refuses_non_finite_payloads() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::JcsV2).unwrap();
        let err = writer
            .append("e", &Object::new().with("x", f64::INFINITY))
            .unwrap_err();
        assert!(matches!(err, Error::Encode(_)));
    }
}
