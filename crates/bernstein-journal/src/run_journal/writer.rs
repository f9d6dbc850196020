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
use super::paths::{realpath, run_journal_path, validate_run_id};
use super::python::python_round3;
use super::reader::{Classified, classify, for_each_physical_line, scan};
use super::verify::{ChainCheck, detect_hash_profile, row_str};
use crate::durable::{
    SyncHelper, append_durably, append_unsynced, create_dir_all_durable, ensure_entry_durable,
    recover_torn_tail,
};
use crate::{Error, Result};
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
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

/// What this writer knows about the journal, as of one file state: the chain position at the
/// end of the file and the rows per event type.
#[derive(Debug, Clone)]
struct Known {
    /// `(st_dev, st_ino, st_size)` of the file as last read or written.
    identity: (u64, u64, u64),
    next_index: u64,
    head: String,
    profile: HashProfile,
    /// The end of the file as last seen (offset and bytes, from just after the last `\n` before
    /// the final byte): before reading only what other writers appended, the writer checks
    /// these bytes are still where they were, so a prefix rewritten or truncated behind its
    /// back is re-read in full instead of being built on. `None` for an empty file.
    last_line: Option<(u64, Vec<u8>)>,
    by_event: HashMap<String, u64>,
    /// The last [`RECENT_ROWS_PER_EVENT`] rows of each event type, oldest first, as read or
    /// written.
    recent_by_event: HashMap<String, VecDeque<Object>>,
}

impl Known {
    /// Counts `row` of `event` and keeps it among the event's recent rows.
    fn remember(&mut self, event: String, row: Object) {
        *self.by_event.entry(event.clone()).or_insert(0) += 1;
        let recent = self.recent_by_event.entry(event).or_default();
        if recent.len() == RECENT_ROWS_PER_EVENT {
            recent.pop_front();
        }
        recent.push_back(row);
    }
}

/// How many of the newest rows of each event type a writer keeps for its payload builders
/// ([`JournalSummary::recent_of`]): enough for a caller that appends groups of rows up to this
/// size to look back over a whole group another process left behind.
pub const RECENT_ROWS_PER_EVENT: usize = 64;

/// The room a row's text is written into first: more than most rows take (an anchoring row is
/// about 460 bytes), so writing one seldom grows the string.
const ROW_TEXT_CAPACITY: usize = 640;

/// How much reading a writer's catch-ups did, since it was opened. Public so that tests and
/// benchmarks can show that catching up on other processes' appends reads only the new bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatchUpStats {
    /// Journal bytes read to catch up: whole files on a full read, otherwise the check of the
    /// known last line plus the bytes appended since.
    pub bytes_read: u64,
    /// Catch-ups that read the whole journal (the first one, and every one whose check failed).
    pub full_reads: u64,
    /// Catch-ups that found bytes appended by another writer and read only those.
    pub incremental_reads: u64,
    /// Full reads forced because the file this writer knew was replaced, shrank, or no longer
    /// holds its known last line (rewritten behind its back).
    pub prefix_changes: u64,
    /// Appends made (each holds the journal's lock once).
    pub lock_holds: u64,
    /// Total time the journal's lock was held by this writer, in microseconds (everything
    /// between `flock` and the descriptor's close: catch-up, write, fsync and, for
    /// [`JournalWriter::append_counted_then`], its `then`).
    pub lock_held_us: u64,
    /// The longest single hold, in microseconds.
    pub lock_held_max_us: u64,
    /// Appends that opened the journal by its full path, checking containment again (the
    /// first, and any whose reopen below the resolved project root failed); the others
    /// reopen it with one `openat2`.
    pub path_checks: u64,
}

impl CatchUpStats {
    fn held(&mut self, since: std::time::Instant, path: &Path) {
        let held = u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.lock_holds += 1;
        self.lock_held_us = self.lock_held_us.saturating_add(held);
        self.lock_held_max_us = self.lock_held_max_us.max(held);
        tracing::debug!(target: "bernstein_journal::locks", lock = "run journal", path = %path.display(), held_us = held, "lock released");
    }
}

/// A directory handle on the resolved project root and the journal path below it, from a
/// containment check that passed: the journal is reopened through it with `openat2`
/// (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), one syscall that fails if any component has since
/// become a symlink or the file is gone, instead of resolving the path again on every append.
#[derive(Debug)]
struct ResolvedJournal {
    root: OwnedFd,
    relative: PathBuf,
    resolved: PathBuf,
}

/// An appender for one run's journal.
#[derive(Debug)]
pub struct JournalWriter<C: Clock = SystemClock> {
    project_root: PathBuf,
    run_id: String,
    new_journal_profile: HashProfile,
    clock: C,
    start_ts: f64,
    known: Option<Known>,
    resolved: Option<ResolvedJournal>,
    stats: CatchUpStats,
    sync_helper: SyncHelper,
}

/// Whether a group's fsync waits for the group's `then` or runs beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overlap {
    /// The rows are fsynced before `then` runs.
    None,
    /// The rows' fsync runs on a helper thread while `then` runs.
    WithThen,
}

/// What [`JournalWriter::append_counted`] tells its payload builder about the journal: the
/// rows it holds, in total and per event type, read under the append's lock.
#[derive(Debug)]
pub struct JournalSummary<'a> {
    rows: u64,
    by_event: &'a HashMap<String, u64>,
    recent_by_event: &'a HashMap<String, VecDeque<Object>>,
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
        self.recent_by_event.get(event).and_then(VecDeque::back)
    }

    /// The newest rows whose `event` is `event`, oldest first: at most
    /// [`RECENT_ROWS_PER_EVENT`] of them, the last being [`JournalSummary::last_of`].
    pub fn recent_of(&self, event: &str) -> impl Iterator<Item = &Object> {
        self.recent_by_event.get(event).into_iter().flatten()
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
            known: None,
            resolved: None,
            stats: CatchUpStats::default(),
            sync_helper: SyncHelper::default(),
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
        let locked = std::time::Instant::now();
        // Closing the descriptor (when `file` drops) releases the lock.
        let written = self.catch_up(&mut file, &path).and_then(|mut known| {
            let row = self.write_row(&mut file, &path, &mut known, event, payload)?;
            self.known = Some(known);
            Ok(row)
        });
        drop(file);
        self.stats.held(locked, &path);
        written
    }

    /// Reads an existing journal as the next append would, under the same lock, so that the
    /// append then reads only the bytes appended meanwhile: a long-lived journal's whole read
    /// can run before a client is waiting on it. Creates nothing: `Ok(false)` when there is no
    /// journal yet (or the writer already knows it, `Ok(true)`, without reading).
    ///
    /// # Errors
    ///
    /// As [`JournalWriter::append`] for opening and reading: the journal's containment, an
    /// unusable journal, a filesystem failure. The next append reads the journal again then.
    pub fn read_ahead(&mut self) -> Result<bool> {
        if self.known.is_some() {
            return Ok(true);
        }
        if !self.path()?.is_file() {
            return Ok(false);
        }
        let (mut file, path) = self.open_locked()?;
        let known = self.catch_up(&mut file, &path)?;
        self.known = Some(known);
        Ok(true)
    }

    /// How much reading this writer's catch-ups have done so far.
    pub fn catch_up_stats(&self) -> CatchUpStats {
        self.stats
    }

    /// Appends one event whose payload is built from what the journal holds (its row count per
    /// event type), read under the same exclusive lock the append holds, so a value derived
    /// from it (a call index, an order) cannot be raced by another process appending in
    /// between.
    ///
    /// `build` returns the payload, or `None` to append nothing (the call then returns
    /// `Ok(None)`; the journal file may have been created empty). The counts are kept between
    /// calls; when another writer appended meanwhile, only its rows are read (after checking
    /// that the end of the file this writer knew is still in place), so a long-lived writer
    /// appends in constant time whatever the journal's length.
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
        // A group of at most one row, whose `then` runs only when there is a row.
        let (rows, value) = self.append_group_then(
            event,
            |summary| build(summary).into_iter().collect(),
            |rows| rows.first().map(then).transpose(),
        )?;
        Ok(rows.into_iter().next().zip(value))
    }

    /// Appends a group of rows of `event` as one commit: `build` reads what the journal holds
    /// (as for [`JournalWriter::append_counted`], under the same exclusive lock) and returns
    /// the payloads, in order; they are written in one `write(2)` and made durable by one
    /// fsync. Then `then(&rows)` runs, still under the lock, even when there are no rows (a
    /// caller may have other work to do under the lock, such as settling rows another process
    /// left). When `then` fails, every row of the group is taken back (the file is truncated
    /// to its length before the group and fsynced) and `then`'s error is returned. `then` must
    /// not append to this journal itself.
    ///
    /// A group larger than [`RECENT_ROWS_PER_EVENT`] is allowed, but a later builder can look
    /// back only that far ([`JournalSummary::recent_of`]).
    ///
    /// # Errors
    ///
    /// As [`JournalWriter::append`] (for any payload of the group: then nothing is written),
    /// and `then`'s error.
    pub fn append_group_then<F, G, T>(
        &mut self,
        event: &str,
        build: F,
        then: G,
    ) -> Result<(Vec<AppendedRow>, T)>
    where
        F: FnOnce(&JournalSummary<'_>) -> Vec<Object>,
        G: FnOnce(&[AppendedRow]) -> Result<T>,
    {
        self.append_group_with(event, build, then, Overlap::None)
    }

    /// [`JournalWriter::append_group_then`] with the group's fsync overlapping `then`: the rows
    /// are written, their fsync starts on a helper thread, and `then` runs meanwhile (the
    /// anchor appends and fsyncs its audit entries there), so the two fsyncs cost about one.
    /// The method returns only once both are done, and it acknowledges nothing before: `Ok`
    /// means the rows and whatever `then` wrote are durable.
    ///
    /// `then` sees rows that are written but may not be durable yet, so whatever it makes
    /// durable can outlive them in a crash (a power cut, not a killed process, whose written
    /// bytes the kernel still holds): the caller must be able to rebuild a lost row from what
    /// `then` wrote, as the anchor rebuilds a call row from its audit entry (the row's
    /// `event_hash` covers neither `ts` nor `elapsed_s`, so the rebuilt row hashes the same).
    ///
    /// # Errors
    ///
    /// As [`JournalWriter::append_group_then`]. When `then` succeeded but the rows' fsync
    /// failed, the rows stay (what `then` made durable names them) and the fsync error is
    /// returned.
    pub fn append_group_overlapping_then<F, G, T>(
        &mut self,
        event: &str,
        build: F,
        then: G,
    ) -> Result<(Vec<AppendedRow>, T)>
    where
        F: FnOnce(&JournalSummary<'_>) -> Vec<Object>,
        G: FnOnce(&[AppendedRow]) -> Result<T>,
    {
        self.append_group_with(event, build, then, Overlap::WithThen)
    }

    fn append_group_with<F, G, T>(
        &mut self,
        event: &str,
        build: F,
        then: G,
        overlap: Overlap,
    ) -> Result<(Vec<AppendedRow>, T)>
    where
        F: FnOnce(&JournalSummary<'_>) -> Vec<Object>,
        G: FnOnce(&[AppendedRow]) -> Result<T>,
    {
        let (mut file, path) = self.open_locked()?;
        let locked = std::time::Instant::now();
        let appended = self.append_group_locked(&mut file, &path, event, build, then, overlap);
        drop(file);
        self.stats.held(locked, &path);
        appended
    }

    /// [`JournalWriter::append_group_then`] with the journal open and locked.
    fn append_group_locked<F, G, T>(
        &mut self,
        file: &mut File,
        path: &Path,
        event: &str,
        build: F,
        then: G,
        overlap: Overlap,
    ) -> Result<(Vec<AppendedRow>, T)>
    where
        F: FnOnce(&JournalSummary<'_>) -> Vec<Object>,
        G: FnOnce(&[AppendedRow]) -> Result<T>,
    {
        let mut known = self.catch_up(file, path)?;
        let summary = JournalSummary {
            rows: known.next_index,
            by_event: &known.by_event,
            recent_by_event: &known.recent_by_event,
        };
        let payloads = build(&summary);
        if let Some(err) = payloads.iter().find_map(|p| check_payload_keys(p).err()) {
            self.known = Some(known);
            return Err(err);
        }
        let size_before = known.identity.2;
        // What this writer knew before the group is not copied for a rollback: a copy of the
        // recent rows of every event on each append cost about a tenth of an anchored call.
        // After a failure the writer forgets what it knew, and the next append reads the
        // journal again, which is always right whatever the failure left.
        let sync_now = overlap == Overlap::None;
        let rows = self.write_rows(file, path, &mut known, event, &payloads, sync_now)?;
        let started = (!sync_now && !rows.is_empty()).then(|| self.sync_helper.start(file));
        let outcome = then(&rows);
        let synced = started.map_or(Ok(()), |started| self.sync_helper.finish(started));
        match (outcome, synced) {
            (Ok(value), Ok(())) => {
                self.known = Some(known);
                Ok((rows, value))
            }
            // What `then` made durable names the rows, so they are not taken back; the writer
            // forgets what it knew and reads the journal again at the next append.
            (Ok(_), Err(err)) => Err(Error::io("fsync", path, err)),
            (Err(err), _) if rows.is_empty() => {
                self.known = Some(known);
                Err(err)
            }
            (Err(err), _) => {
                // `known` is left unset either way: the next append reads the journal again.
                if let Err(rollback) = file.set_len(size_before).and_then(|()| file.sync_all()) {
                    tracing::error!(
                        path = %path.display(),
                        rows = rows.len(),
                        error = %rollback,
                        "could not take back the journal rows of a group whose operation failed"
                    );
                }
                Err(err)
            }
        }
    }

    /// Creates the run directory and journal file when needed, and returns the file opened for
    /// appending with its exclusive lock held.
    ///
    /// After the first append the path is not resolved again: the journal is reopened below a
    /// handle on the resolved project root with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`,
    /// which refuses any symlink on the way (the resolved path has none) and any escape from
    /// the root. When that fails for any reason (a component swapped for a symlink, the file
    /// or a directory removed, a kernel without `openat2`), the full containment check runs
    /// again, so a symlink planted later is still refused.
    fn open_locked(&mut self) -> Result<(File, PathBuf)> {
        if let Some(resolved) = &self.resolved {
            let opened = rustix::fs::openat2(
                &resolved.root,
                &resolved.relative,
                OFlags::RDWR | OFlags::APPEND | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            );
            if let Ok(fd) = opened {
                let file = File::from(fd);
                let path = resolved.resolved.clone();
                file.lock().map_err(|err| Error::io("lock", &path, err))?;
                return Ok((file, path));
            }
            self.resolved = None;
        }
        self.stats.path_checks += 1;
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
        self.resolved = resolve_below_root(&self.project_root, &path);
        Ok((file, path))
    }

    /// Brings what this writer knows in step with the file it holds locked: reads only the
    /// bytes appended since its last look when the end of the file it knew is still in place,
    /// and the whole journal otherwise (first use, file replaced or shrunk, known last line
    /// rewritten, or appended bytes that do not extend the chain soundly, so that any fault
    /// is reported by the full read at the row where it is).
    fn catch_up(&mut self, file: &mut File, path: &Path) -> Result<Known> {
        let identity = file_identity(file, path)?;
        if let Some(known) = self.known.take() {
            let extended = self
                .extend_known(file, known, identity)
                .map_err(|err| Error::io("read", path, err))?;
            if let Some(known) = extended {
                return Ok(known);
            }
        }
        self.read_all(file, path, identity)
    }

    /// The incremental half of [`JournalWriter::catch_up`]: `Ok(None)` when a full read is
    /// needed.
    fn extend_known(
        &mut self,
        file: &File,
        mut known: Known,
        identity: (u64, u64, u64),
    ) -> std::io::Result<Option<Known>> {
        let (dev, ino, size) = identity;
        let (known_dev, known_ino, known_size) = known.identity;
        if (dev, ino) != (known_dev, known_ino) || size < known_size {
            self.stats.prefix_changes += 1;
            return Ok(None);
        }
        match &known.last_line {
            Some((at, bytes)) => {
                let mut found = vec![0u8; bytes.len()];
                self.stats.bytes_read += bytes.len() as u64;
                if file.read_exact_at(&mut found, *at).is_err() || found != *bytes {
                    self.stats.prefix_changes += 1;
                    return Ok(None);
                }
            }
            None if known_size != 0 => return Ok(None),
            None => {}
        }
        if size == known_size {
            return Ok(Some(known));
        }
        let Ok(length) = usize::try_from(size - known_size) else {
            return Ok(None);
        };
        let mut appended = vec![0u8; length];
        file.read_exact_at(&mut appended, known_size)?;
        self.stats.bytes_read += appended.len() as u64;
        let scanned = scan(appended.as_slice())?;
        if !scanned.ends_on_line_boundary || !scanned.loaded.discarded_lines.is_empty() {
            // A torn tail to cut, or a line to report: the full read does both.
            return Ok(None);
        }
        for row in scanned.loaded.rows {
            let event = row_str(&row, "event");
            let expected = payload_hash(known.profile, &event, &row)
                .map(|p_hash| {
                    event_hash(
                        known.profile,
                        &known.head,
                        &event,
                        &p_hash,
                        known.next_index,
                    )
                })
                .unwrap_or_default();
            if row_str(&row, "prev_hash") != known.head || row_str(&row, "event_hash") != expected {
                return Ok(None);
            }
            known.head = expected;
            known.next_index += 1;
            known.remember(event, row);
        }
        let window_start = appended[..appended.len() - 1]
            .iter()
            .rposition(|&byte| byte == b'\n')
            .map_or(0, |at| at + 1);
        known.last_line = Some((
            known_size + window_start as u64,
            appended[window_start..].to_vec(),
        ));
        known.identity = identity;
        self.stats.incremental_reads += 1;
        Ok(Some(known))
    }

    /// Hashes and writes one row after `known` (whose identity is the file's now), fsyncs it,
    /// and advances `known` past it.
    fn write_row(
        &mut self,
        file: &mut File,
        path: &Path,
        known: &mut Known,
        event: &str,
        payload: &Object,
    ) -> Result<AppendedRow> {
        let mut rows = self.write_rows(
            file,
            path,
            known,
            event,
            std::slice::from_ref(payload),
            true,
        )?;
        Ok(rows.remove(0))
    }

    /// Hashes the rows of `payloads` (each chained onto the one before) after `known`, writes
    /// them in one `write(2)` on the `O_APPEND` descriptor followed by one fsync, and advances
    /// `known` past them. Nothing is written for no payloads. A failed write or fsync takes
    /// every row of the group back (we hold the lock, so the bytes past the old end are ours)
    /// and leaves `known` as it was.
    fn write_rows(
        &mut self,
        file: &mut File,
        path: &Path,
        known: &mut Known,
        event: &str,
        payloads: &[Object],
        sync_now: bool,
    ) -> Result<Vec<AppendedRow>> {
        let (dev, ino, size) = known.identity;
        let mut head = known.head.clone();
        let mut index = known.next_index;
        let mut bytes = Vec::new();
        let mut last_start = 0;
        let mut appended = Vec::with_capacity(payloads.len());
        let mut rows = Vec::with_capacity(payloads.len());
        for payload in payloads {
            let mut hashed = Object::new();
            if known.profile != HashProfile::PyJsonV1 {
                hashed.insert("hash_profile", known.profile.as_str());
            }
            for (key, value) in payload.iter() {
                hashed.insert(key, value.clone());
            }
            let p_hash = payload_hash(known.profile, event, &hashed)
                .map_err(|err| Error::Encode(err.to_string()))?;
            let e_hash = event_hash(known.profile, &head, event, &p_hash, index);

            let ts = self.clock.now_unix_seconds();
            let elapsed = python_round3(self.clock.now_unix_seconds() - self.start_ts);
            let mut row = Object::new()
                .with("ts", ts)
                .with("elapsed_s", elapsed)
                .with("index", index)
                .with("event", event)
                .with("prev_hash", head.as_str())
                .with("payload_hash", p_hash.as_str())
                .with("event_hash", e_hash.as_str());
            if known.profile != HashProfile::PyJsonV1 {
                row.insert("hash_profile", known.profile.as_str());
            }
            for (key, value) in payload.iter() {
                row.insert(key, value.clone());
            }
            // Rows are a few hundred bytes: written into room for them, without a copy of the row.
            let mut line = String::with_capacity(ROW_TEXT_CAPACITY);
            row.dumps_into(&mut line, Dialect::PY_ROW);
            last_start = bytes.len();
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
            appended.push(AppendedRow {
                index,
                prev_hash: std::mem::replace(&mut head, e_hash.clone()),
                payload_hash: p_hash,
                event_hash: e_hash,
                hash_profile: known.profile,
                line,
            });
            rows.push(row);
            index += 1;
        }
        if appended.is_empty() {
            return Ok(appended);
        }
        // One write(2) on an O_APPEND descriptor; `write_all` only loops on a short write.
        let written = if sync_now {
            append_durably(file, size, &bytes)
        } else {
            append_unsynced(file, size, &bytes)
        };
        written.map_err(|err| Error::io("append to", path, err))?;

        known.identity = (dev, ino, size + bytes.len() as u64);
        known.next_index = index;
        known.head = head;
        for row in rows {
            known.remember(event.to_owned(), row);
        }
        known.last_line = Some((size + last_start as u64, bytes.split_off(last_start)));
        Ok(appended)
    }

    /// Re-reads the whole journal under the lock and derives what this writer knows of it,
    /// refusing a journal that cannot be extended soundly. A torn tail is recorded and cut
    /// first, and the result carries the file's identity after the cut.
    fn read_all(
        &mut self,
        file: &mut File,
        path: &Path,
        mut identity: (u64, u64, u64),
    ) -> Result<Known> {
        let unusable = |reason: String| Error::JournalUnusable {
            path: path.to_path_buf(),
            reason,
        };
        self.stats.full_reads += 1;
        self.stats.bytes_read += identity.2;
        let mut streamed = self
            .stream_rows(file, identity)
            .map_err(|err| Error::io("read", path, err))?;
        if !streamed.ends_on_line_boundary
            && recover_torn_tail(&self.project_root, file, path)?.is_some()
        {
            identity = file_identity(file, path)?;
            self.stats.bytes_read += identity.2;
            streamed = self
                .stream_rows(file, identity)
                .map_err(|err| Error::io("read", path, err))?;
        }
        if !streamed.ends_on_line_boundary {
            return Err(unusable(
                "the last row is torn (no trailing newline); repair the tail first".to_owned(),
            ));
        }
        if !streamed.discarded_lines.is_empty() {
            let joined: Vec<String> = streamed
                .discarded_lines
                .iter()
                .map(usize::to_string)
                .collect();
            return Err(unusable(format!(
                "reader discarded physical line(s): {}",
                joined.join(", ")
            )));
        }
        let (known, verification) = match streamed.chain {
            None => (streamed.known, None),
            Some(Ok(check)) => (streamed.known, Some(check.finish())),
            Some(Err(name)) => return Err(unusable(format!("unknown hash_profile {name:?}"))),
        };
        if let Some(verification) = verification
            && !verification.chain_consistent
        {
            return Err(unusable(format!(
                "the existing chain does not verify: {}",
                verification.errors.join("; ")
            )));
        }
        Ok(known)
    }

    /// One pass over the whole file: every row is checked against the chain and counted, and
    /// only the newest rows of each event are kept, so a full read holds a bounded number of
    /// rows in memory whatever the journal's length.
    fn stream_rows(&self, file: &mut File, identity: (u64, u64, u64)) -> std::io::Result<Streamed> {
        file.seek(SeekFrom::Start(0))?;
        let mut known = Known {
            identity,
            next_index: 0,
            head: String::new(),
            profile: self.new_journal_profile,
            last_line: None,
            by_event: HashMap::new(),
            recent_by_event: HashMap::new(),
        };
        let mut chain: Option<std::result::Result<ChainCheck, String>> = None;
        let mut discarded_lines = Vec::new();
        let mut last_byte = None;
        for_each_physical_line(
            &*file,
            |index, line| match classify(line) {
                Classified::Blank => {}
                Classified::Discarded => discarded_lines.push(index),
                Classified::Row(row) => {
                    let check = chain.get_or_insert_with(|| {
                        detect_hash_profile(std::slice::from_ref(&row)).map(ChainCheck::new)
                    });
                    if let Ok(check) = check {
                        check.push(&row);
                        known.profile = check.profile();
                    }
                    known.next_index += 1;
                    known.head = row_str(&row, "event_hash");
                    if let Some(name) = row.get("event").and_then(Value::as_str) {
                        known.remember(name.to_owned(), row);
                    }
                }
            },
            &mut last_byte,
        )?;
        known.last_line = last_line_window(file, identity.2)?;
        Ok(Streamed {
            known,
            chain,
            discarded_lines,
            ends_on_line_boundary: matches!(last_byte, None | Some(b'\n' | b'\r')),
        })
    }
}

/// What one streaming pass over a journal found (see [`JournalWriter::stream_rows`]).
struct Streamed {
    /// The counts, head and newest rows; trusted only when the rest is clean.
    known: Known,
    /// The chain check (`None` for a journal with no row), or the unknown hash profile the
    /// first row names.
    chain: Option<std::result::Result<ChainCheck, String>>,
    discarded_lines: Vec<usize>,
    ends_on_line_boundary: bool,
}

/// The end of a file of `size` bytes that a writer checks before trusting what it knows: from
/// just after the last `\n` before the final byte (or the start of the file) to the end.
fn last_line_window(file: &File, size: u64) -> std::io::Result<Option<(u64, Vec<u8>)>> {
    if size == 0 {
        return Ok(None);
    }
    let mut start = size;
    let mut window: Vec<u8> = Vec::new();
    loop {
        let step = start.min(4096);
        let from = start - step;
        let mut part = vec![0u8; step as usize];
        file.read_exact_at(&mut part, from)?;
        part.extend_from_slice(&window);
        window = part;
        start = from;
        if let Some(at) = window[..window.len() - 1]
            .iter()
            .rposition(|&byte| byte == b'\n')
        {
            return Ok(Some((start + at as u64 + 1, window[at + 1..].to_vec())));
        }
        if start == 0 {
            return Ok(Some((0, window)));
        }
    }
}

/// The handle [`JournalWriter::open_locked`] reopens the journal through, for the journal at
/// `resolved` (a containment-checked path); `None` when the project root cannot be opened or
/// does not hold the path, and the full check then runs on every append.
fn resolve_below_root(project_root: &Path, resolved: &Path) -> Option<ResolvedJournal> {
    let root_real = realpath(project_root);
    let relative = resolved.strip_prefix(&root_real).ok()?.to_path_buf();
    if relative.as_os_str().is_empty() {
        return None;
    }
    let root = rustix::fs::open(
        &root_real,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    Some(ResolvedJournal {
        root,
        relative,
        resolved: resolved.to_path_buf(),
    })
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

    /// A group of rows is one write: each row chained onto the one before, counted, and kept
    /// for looking back; a failing `then` takes the whole group back, and `then` runs for an
    /// empty group too.
    #[test]
    fn a_group_of_rows_is_appended_and_taken_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        writer.append("start", &Object::new()).unwrap();
        let group = |first: u64| -> Vec<Object> {
            (first..first + 3)
                .map(|n| Object::new().with("n", n))
                .collect()
        };
        let (rows, seen) = writer
            .append_group_then(
                "call",
                |journal| group(journal.count_of("call")),
                |rows| Ok(rows.len()),
            )
            .unwrap();
        assert_eq!(seen, 3);
        assert_eq!(
            rows.iter().map(|r| r.index).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(rows[1].prev_hash, rows[0].event_hash);
        let path = writer.path().unwrap();
        let length = std::fs::metadata(&path).unwrap().len();

        let failed = writer.append_group_then(
            "call",
            |journal| group(journal.count_of("call")),
            |_| -> Result<()> { Err(Error::Encode("the operation failed".to_owned())) },
        );
        assert!(failed.is_err());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), length);

        let mut ran = false;
        let (empty, ()) = writer
            .append_group_then(
                "call",
                |_| Vec::new(),
                |_| {
                    ran = true;
                    Ok(())
                },
            )
            .unwrap();
        assert!(empty.is_empty() && ran);

        let (rows, ()) = writer
            .append_group_then(
                "call",
                |journal| {
                    let recent: Vec<u64> = journal
                        .recent_of("call")
                        .map(|row| match row.get("n") {
                            Some(Value::Int(n)) => n.as_u64().unwrap(),
                            _ => panic!("row without n"),
                        })
                        .collect();
                    assert_eq!(recent, vec![0, 1, 2]);
                    group(journal.count_of("call"))
                },
                |_| Ok(()),
            )
            .unwrap();
        assert_eq!(rows[0].index, 4);
        let loaded = load_journal(&path).unwrap();
        assert_eq!(loaded.rows.len(), 7);
        assert!(verify_journal(&path).unwrap().ok());
        // Another writer reads the groups as rows like any others.
        let mut other = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let row = other
            .append_counted("call", |journal| {
                assert_eq!(journal.count_of("call"), 6);
                assert_eq!(journal.recent_of("call").count(), 6);
                Some(Object::new())
            })
            .unwrap()
            .unwrap();
        assert_eq!(row.index, 7);
    }

    /// A read ahead does the whole read an append would, so the first append after it reads
    /// only what was appended meanwhile; it creates no journal where there is none.
    #[test]
    fn a_read_ahead_takes_the_whole_read_off_the_first_append() {
        let dir = tempfile::tempdir().unwrap();
        let mut fresh = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        assert!(!fresh.read_ahead().unwrap(), "no journal to read");
        assert!(
            !fresh.path().unwrap().exists(),
            "a read ahead creates nothing"
        );
        assert!(!dir.path().join(".sdd").exists());

        let mut earlier = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        for n in 0..50_u64 {
            earlier.append("call", &Object::new().with("n", n)).unwrap();
        }
        let journal_len = std::fs::metadata(earlier.path().unwrap()).unwrap().len();
        let mut later = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        assert!(later.read_ahead().unwrap());
        let read = later.catch_up_stats();
        assert_eq!(
            (read.full_reads, read.bytes_read, read.lock_holds),
            (1, journal_len, 0),
            "{read:?}"
        );
        assert!(later.read_ahead().unwrap(), "known already");
        assert_eq!(later.catch_up_stats().bytes_read, journal_len);

        let theirs = earlier
            .append("call", &Object::new().with("n", 50))
            .unwrap();
        let mine = later.append("call", &Object::new().with("n", 51)).unwrap();
        assert_eq!(
            (mine.index, mine.prev_hash.as_str()),
            (51, theirs.event_hash.as_str())
        );
        let after = later.catch_up_stats();
        assert_eq!(
            (after.full_reads, after.incremental_reads),
            (1, 1),
            "{after:?}"
        );
    }

    /// Another process's appends are read by themselves: the catch-up reads the known last
    /// line (to check it is still in place) and the new rows, not the journal.
    #[test]
    fn catching_up_reads_only_what_other_writers_appended() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let mut second = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let count = |seen: &JournalSummary<'_>| Some(Object::new().with("n", seen.rows()));
        let mut last = None;
        for _ in 0..300 {
            last = first.append_counted("call", count).unwrap();
        }
        let own_last = last.unwrap().line.len() as u64 + 1;
        let theirs = second.append_counted("call", count).unwrap().unwrap();
        assert_eq!(theirs.index, 300);
        let before = first.catch_up_stats();
        let mine = first.append_counted("call", count).unwrap().unwrap();
        assert_eq!(
            (mine.index, mine.prev_hash.as_str()),
            (301, theirs.event_hash.as_str())
        );
        assert!(mine.line.ends_with("\"n\": 301}"), "{}", mine.line);
        let after = first.catch_up_stats();
        assert_eq!(after.incremental_reads - before.incremental_reads, 1);
        assert_eq!(after.full_reads, before.full_reads);
        assert_eq!(
            after.bytes_read - before.bytes_read,
            own_last + theirs.line.len() as u64 + 1,
            "{after:?}"
        );
        // Its own appends in between read nothing but the check of its own last line.
        let quiet = first.catch_up_stats();
        first.append("other", &Object::new()).unwrap();
        assert_eq!(
            first.catch_up_stats().bytes_read - quiet.bytes_read,
            mine.line.len() as u64 + 1
        );
        let report = verify_journal(&first.path().unwrap()).unwrap();
        assert!(report.ok() && report.count == 303, "{report:?}");
        // Every append held the lock once, and the longest hold is one of them.
        let held = first.catch_up_stats();
        assert_eq!(held.lock_holds, 302);
        assert!(held.lock_held_max_us <= held.lock_held_us, "{held:?}");
    }

    /// A writer on the system clock stamps each row with the time it was appended.
    #[test]
    fn the_system_clock_stamps_rows_with_the_time_of_the_append() {
        let now = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        };
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let before = now();
        writer.append("call", &Object::new()).unwrap();
        let after = now();
        let rows = load_journal(&writer.path().unwrap()).unwrap().rows;
        let ts = rows[0].get("ts").and_then(Value::as_f64).unwrap();
        assert!(before <= ts && ts <= after, "{before} <= {ts} <= {after}");
    }

    /// A journal truncated and regrown, or whose last line was rewritten, while a writer held
    /// its offset is read again in full: the writer never builds on what it can no longer see,
    /// and a rewrite that breaks the chain refuses the append naming the row.
    #[test]
    fn a_prefix_changed_behind_our_back_is_read_again_in_full() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        for n in 0..4 {
            writer.append("e", &Object::new().with("n", n)).unwrap();
        }
        let path = writer.path().unwrap();
        let whole = std::fs::read(&path).unwrap();
        let first_two: usize = whole
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(1)
            .unwrap()
            .0
            + 1;
        // Another process truncates to two rows and a third writer appends three new ones, so
        // the file is longer than before and the offset we held falls inside a new row.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(first_two as u64)
            .unwrap();
        let mut other = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        for n in 0..3 {
            other
                .append(
                    "x",
                    &Object::new().with("long", "y".repeat(40)).with("n", n),
                )
                .unwrap();
        }
        assert!(std::fs::metadata(&path).unwrap().len() > whole.len() as u64);
        let row = writer.append("e", &Object::new()).unwrap();
        assert_eq!(row.index, 5);
        let stats = writer.catch_up_stats();
        assert_eq!(
            (stats.prefix_changes, stats.full_reads),
            (1, 2),
            "{stats:?}"
        );
        assert!(verify_journal(&path).unwrap().ok());

        // The last line rewritten in place, same length: the chain no longer recomputes, and
        // the append is refused at that row instead of extending it.
        let text = std::fs::read_to_string(&path).unwrap();
        let last_start = text[..text.len() - 1].rfind('\n').unwrap() + 1;
        let last = text[last_start..].replace("\"event\": \"e\"", "\"event\": \"f\"");
        assert_ne!(last, text[last_start..]);
        let bytes = format!("{}{last}", &text[..last_start]).into_bytes();
        std::fs::write(&path, &bytes).unwrap();
        let err = writer.append("e", &Object::new()).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, Error::JournalUnusable { .. })
                && text.contains("step 5: event_hash mismatch"),
            "{text}"
        );
        assert_eq!(writer.catch_up_stats().prefix_changes, 2);
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing appended");
    }

    /// The journal is reopened below the resolved root without resolving its path again; a
    /// symlink swapped in for the run directory afterwards is still refused.
    #[test]
    fn a_symlink_swapped_in_after_the_first_append_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        writer.append("a", &Object::new()).unwrap();
        let run_dir = dir.path().join(".sdd/runs/r");
        let moved = dir.path().join("moved");
        std::fs::rename(&run_dir, &moved).unwrap();
        std::fs::copy(
            moved.join("journal.jsonl"),
            outside.path().join("journal.jsonl"),
        )
        .unwrap();
        std::os::unix::fs::symlink(outside.path(), &run_dir).unwrap();
        assert_eq!(writer.catch_up_stats().path_checks, 1);
        let err = writer.append("b", &Object::new()).unwrap_err();
        assert!(matches!(err, Error::Containment { .. }), "{err}");
        assert_eq!(writer.catch_up_stats().path_checks, 2);
        let outside_rows = std::fs::read_to_string(outside.path().join("journal.jsonl")).unwrap();
        assert_eq!(
            outside_rows.lines().count(),
            1,
            "nothing written outside the root"
        );
        // Put back, the journal is appended to again.
        std::fs::remove_file(&run_dir).unwrap();
        std::fs::rename(&moved, &run_dir).unwrap();
        assert_eq!(writer.append("b", &Object::new()).unwrap().index, 1);
        // Resolved again, the path is not checked again while nothing changes.
        for _ in 0..3 {
            writer.append("c", &Object::new()).unwrap();
        }
        assert_eq!(writer.catch_up_stats().path_checks, 3);
    }

    /// A journal replaced by another file (a new inode) is read again in full, even when the
    /// new file holds the same rows and more: the offsets the writer kept belonged to the file
    /// it knew.
    #[test]
    fn a_replaced_journal_is_read_again_in_full() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        writer.append("a", &Object::new()).unwrap();
        writer.append("a", &Object::new()).unwrap();
        let mut other = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        other.append("a", &Object::new()).unwrap();
        let journal = writer.path().unwrap();
        let copy = dir.path().join("copy.jsonl");
        std::fs::copy(&journal, &copy).unwrap();
        std::fs::rename(&copy, &journal).unwrap();
        let before = writer.catch_up_stats();
        assert_eq!(writer.append("a", &Object::new()).unwrap().index, 3);
        let after = writer.catch_up_stats();
        assert_eq!(after.prefix_changes - before.prefix_changes, 1, "{after:?}");
        assert_eq!(after.full_reads - before.full_reads, 1, "{after:?}");
    }

    /// A writer that last saw the journal empty reads only what another writer appended since:
    /// an empty file has no last line to check, and nothing before the new bytes to re-read.
    #[test]
    fn catching_up_from_an_empty_journal_reads_only_the_new_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let journal = writer.path().unwrap();
        std::fs::create_dir_all(journal.parent().unwrap()).unwrap();
        std::fs::write(&journal, b"").unwrap();
        assert!(writer.append_counted("a", |_| None).unwrap().is_none());
        let mut other = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let theirs = other.append("a", &Object::new()).unwrap();
        let before = writer.catch_up_stats();
        assert_eq!(writer.append("a", &Object::new()).unwrap().index, 1);
        let after = writer.catch_up_stats();
        assert_eq!(after.full_reads, before.full_reads, "{after:?}");
        assert_eq!(after.incremental_reads - before.incremental_reads, 1);
        assert_eq!(
            after.bytes_read - before.bytes_read,
            theirs.line.len() as u64 + 1
        );
    }

    /// What another writer appended is checked before it is built on: a row missing its
    /// newline, a line that is not a row, or a row that does not chain sends the writer to the
    /// full read, which cuts the torn tail or refuses the journal, naming what it found.
    #[test]
    fn appended_bytes_that_do_not_extend_the_chain_soundly_are_read_in_full() {
        // `damage` edits what the other writer appended (its row and terminator).
        let after_damage = |damage: &dyn Fn(Vec<u8>) -> Vec<u8>| {
            let dir = tempfile::tempdir().unwrap();
            let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
            writer.append("a", &Object::new()).unwrap();
            let journal = writer.path().unwrap();
            let size = std::fs::metadata(&journal).unwrap().len() as usize;
            let mut other = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
            other.append("a", &Object::new()).unwrap();
            let mut bytes = std::fs::read(&journal).unwrap();
            let theirs = bytes.split_off(size);
            bytes.extend(damage(theirs));
            std::fs::write(&journal, &bytes).unwrap();
            let before = writer.catch_up_stats();
            let appended = writer.append("a", &Object::new());
            let after = writer.catch_up_stats();
            assert_eq!(after.full_reads - before.full_reads, 1, "{after:?}");
            assert_eq!(after.incremental_reads, before.incremental_reads);
            (appended, verify_journal(&journal).unwrap())
        };

        // Their row without its newline: cut as a torn tail, and ours follows the first row.
        let (appended, report) = after_damage(&|mut theirs| {
            theirs.pop();
            theirs
        });
        assert_eq!(appended.unwrap().index, 1);
        assert!(report.ok() && report.count == 2, "{report:?}");

        // The full read read the journal twice: as found, then after the cut.
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        let first = writer.append("a", &Object::new()).unwrap();
        let journal = writer.path().unwrap();
        let clean = first.line.len() as u64 + 1;
        let mut torn = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        torn.append("a", &Object::new()).unwrap();
        let found = std::fs::metadata(&journal).unwrap().len() - 1;
        let mut bytes = std::fs::read(&journal).unwrap();
        bytes.pop();
        std::fs::write(&journal, &bytes).unwrap();
        let mut fresh = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        assert_eq!(fresh.append("a", &Object::new()).unwrap().index, 1);
        assert_eq!(fresh.catch_up_stats().bytes_read, found + clean);

        // A line that is not a row: refused, naming the line.
        let (appended, _) = after_damage(&|_| b"not a row\n".to_vec());
        let err = appended.unwrap_err().to_string();
        assert!(err.contains("discarded physical line(s): 1"), "{err}");

        // Their row with its `event_hash` changed (its `prev_hash` still chains): refused.
        let (appended, _) = after_damage(&|theirs| {
            let text = String::from_utf8(theirs).unwrap();
            let at = text.find("\"event_hash\": \"").unwrap() + 15;
            let digit = if &text[at..=at] == "0" { "1" } else { "0" };
            format!("{}{digit}{}", &text[..at], &text[at + 1..]).into_bytes()
        });
        let err = appended.unwrap_err().to_string();
        assert!(err.contains("does not verify"), "{err}");
    }

    /// After catching up on several rows another writer appended at once, the writer checks
    /// only the last of them next time (the window it keeps is that row), so a catch-up with
    /// nothing new reads that one line and no more.
    #[test]
    fn the_line_kept_after_a_catch_up_is_the_last_row_appended() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        writer.append("a", &Object::new()).unwrap();
        let mut other = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        other.append("a", &Object::new()).unwrap();
        let last = other.append("a", &Object::new()).unwrap();
        assert!(writer.append_counted("a", |_| None).unwrap().is_none());
        let before = writer.catch_up_stats();
        assert!(writer.append_counted("a", |_| None).unwrap().is_none());
        let after = writer.catch_up_stats();
        assert_eq!(
            (after.full_reads, after.prefix_changes),
            (before.full_reads, before.prefix_changes),
            "{after:?}"
        );
        assert_eq!(
            after.bytes_read - before.bytes_read,
            last.line.len() as u64 + 1
        );
    }

    /// After a full read the writer keeps the journal's last line to check next time, found
    /// by reading backwards in blocks (here across three of them), so a catch-up with nothing
    /// new reads that line and no more.
    #[test]
    fn the_line_kept_after_a_full_read_is_the_last_row() {
        let dir = tempfile::tempdir().unwrap();
        let mut other = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        other.append("a", &Object::new()).unwrap();
        let long = other
            .append("a", &Object::new().with("text", "x".repeat(10_000)))
            .unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        assert!(writer.append_counted("a", |_| None).unwrap().is_none());
        let before = writer.catch_up_stats();
        assert_eq!(before.full_reads, 1);
        assert!(writer.append_counted("a", |_| None).unwrap().is_none());
        let after = writer.catch_up_stats();
        assert_eq!(
            (after.full_reads, after.prefix_changes),
            (1, 0),
            "{after:?}"
        );
        assert_eq!(
            after.bytes_read - before.bytes_read,
            long.line.len() as u64 + 1
        );
    }

    /// A group that wrote no rows has nothing to take back when its `then` fails, so the
    /// writer keeps what it knew and the next append does not read the journal again.
    #[test]
    fn an_empty_group_whose_then_fails_keeps_what_the_writer_knew() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        writer.append("a", &Object::new()).unwrap();
        let before = writer.catch_up_stats();
        let failed = writer.append_group_then(
            "a",
            |_| Vec::new(),
            |rows| -> Result<()> {
                assert!(rows.is_empty());
                Err(Error::Encode("refused by then".to_owned()))
            },
        );
        assert!(matches!(failed, Err(Error::Encode(_))), "{failed:?}");
        assert_eq!(writer.append("a", &Object::new()).unwrap().index, 1);
        assert_eq!(writer.catch_up_stats().full_reads, before.full_reads);
    }

    /// An overlapped group is durable when it returns: its fsync ran beside `then` (on the
    /// helper thread, counted on the caller's), and `then` saw the rows already written.
    #[test]
    fn an_overlapped_group_is_written_before_then_and_synced_before_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        writer.append("a", &Object::new()).unwrap();
        let journal = writer.path().unwrap();
        let before = crate::durable::thread_fsync_count();
        let (rows, seen) = writer
            .append_group_overlapping_then(
                "a",
                |_| vec![Object::new().with("n", 1), Object::new().with("n", 2)],
                |rows| Ok((rows.len(), std::fs::read_to_string(&journal).unwrap())),
            )
            .unwrap();
        assert_eq!(crate::durable::thread_fsync_count() - before, 1);
        assert_eq!(rows.len(), 2);
        let (count, text) = seen;
        assert_eq!(count, 2);
        assert_eq!(
            text.lines().count(),
            3,
            "then ran after the rows were written"
        );
        assert!(text.ends_with(&format!("{}\n", rows[1].line)));
        assert_eq!(writer.append("a", &Object::new()).unwrap().index, 3);
        assert!(
            crate::run_journal::verify_run_journal(dir.path(), "r")
                .unwrap()
                .chain_consistent
        );
        // A group with no row syncs nothing, and a plain group syncs once, before its `then`.
        let before = crate::durable::thread_fsync_count();
        writer
            .append_group_overlapping_then("a", |_| Vec::new(), |_| Ok(()))
            .unwrap();
        assert_eq!(crate::durable::thread_fsync_count(), before);
        writer
            .append_group_then("a", |_| vec![Object::new(), Object::new()], |_| Ok(()))
            .unwrap();
        assert_eq!(crate::durable::thread_fsync_count() - before, 1);
    }

    /// The helper thread that runs an overlapped group's fsync starts with the first such
    /// group, not before; a writer that never overlaps has none.
    #[test]
    fn the_sync_helper_thread_starts_with_the_first_overlapped_group() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        writer.append("a", &Object::new()).unwrap();
        let idle = "sync_helper: SyncHelper { running: false }";
        assert!(format!("{writer:?}").contains(idle), "{writer:?}");
        writer
            .append_group_overlapping_then("a", |_| vec![Object::new()], |_| Ok(()))
            .unwrap();
        let running = "sync_helper: SyncHelper { running: true }";
        assert!(format!("{writer:?}").contains(running), "{writer:?}");
    }

    /// When the rows' fsync fails after `then` succeeded, the group fails and its rows stay:
    /// what `then` made durable names them.
    #[test]
    fn an_overlapped_group_whose_fsync_fails_keeps_its_rows_and_fails() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        writer.append("a", &Object::new()).unwrap();
        crate::durable::seams::fail_next_fsyncs(1);
        let failed = writer.append_group_overlapping_then(
            "a",
            |_| vec![Object::new().with("n", 1)],
            |_| Ok(()),
        );
        assert!(
            matches!(&failed, Err(Error::Io { op: "fsync", .. })),
            "{failed:?}"
        );
        let journal = writer.path().unwrap();
        assert_eq!(
            std::fs::read_to_string(&journal).unwrap().lines().count(),
            2
        );
        assert_eq!(writer.append("a", &Object::new()).unwrap().index, 2);
        assert!(
            crate::run_journal::verify_run_journal(dir.path(), "r")
                .unwrap()
                .chain_consistent
        );
    }

    /// When `then` fails, an overlapped group's rows are taken back as a plain group's are.
    #[test]
    fn an_overlapped_group_whose_then_fails_is_taken_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        writer.append("a", &Object::new()).unwrap();
        let journal = writer.path().unwrap();
        let size = std::fs::metadata(&journal).unwrap().len();
        let failed = writer.append_group_overlapping_then(
            "a",
            |_| vec![Object::new().with("n", 1), Object::new().with("n", 2)],
            |_| -> Result<()> { Err(Error::Encode("refused by then".to_owned())) },
        );
        assert!(matches!(failed, Err(Error::Encode(_))), "{failed:?}");
        assert_eq!(std::fs::metadata(&journal).unwrap().len(), size);
        assert_eq!(writer.append("a", &Object::new()).unwrap().index, 1);
    }

    /// A symlink that stays inside the root is refused as well: the journal is appended to
    /// at its own path or not at all, never through a link to another file of the project.
    #[test]
    fn a_journal_swapped_for_a_symlink_inside_the_root_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = JournalWriter::open(dir.path(), "r", HashProfile::PyJsonV1).unwrap();
        writer.append("a", &Object::new()).unwrap();
        let journal = writer.path().unwrap();
        let elsewhere = dir.path().join("elsewhere.jsonl");
        std::fs::rename(&journal, &elsewhere).unwrap();
        // Relative, so that it resolves beneath the root (`.sdd/runs/r/journal.jsonl`).
        std::os::unix::fs::symlink("../../../elsewhere.jsonl", &journal).unwrap();
        assert!(journal.is_file(), "the link resolves");
        let err = writer.append("b", &Object::new()).unwrap_err();
        assert!(matches!(err, Error::Containment { .. }), "{err}");
        let rows = std::fs::read_to_string(&elsewhere).unwrap();
        assert_eq!(rows.lines().count(), 1, "nothing written through the link");
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
