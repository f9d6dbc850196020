//! Durability primitives shared by every evidence writer: durable directory creation, directory
//! fsyncs, append-with-rollback, and torn-tail recovery with its tear log.
//!
//! **Directory entries.** A new file or directory survives a crash only once the directory that
//! names it has been fsynced. [`create_dir_all_durable`] fsyncs the parent of every directory it
//! creates. [`ensure_entry_durable`] fsyncs, once per process and path, the parent of a file and
//! of each of its ancestors up to and including the directory that holds `.sdd/`: a process
//! whose creator died between `create` and the directory fsync cannot know the file is new, so
//! every process makes the entries durable itself before its first acknowledgement that depends
//! on them. The process that did so then marks the file ([`DURABLE_MARK_XATTR`], an extended
//! attribute naming the file's inode, birth time and path), and another process that finds the
//! mark on the file skips the walk: the fsyncs it would repeat completed before the mark was
//! set. Where the file system keeps no such attribute or no birth time, every process walks.
//!
//! **Appends.** [`append_durably`] writes a whole row with one `write(2)` and fsyncs it; when the
//! write or the fsync fails, the file is truncated back to its length before the row (as the task
//! log does), so a caller that retries after the error cannot duplicate the row. The caller
//! holds the file's writer lock, so no other row can have landed behind ours.
//!
//! **Torn tails.** We acknowledge a row only after the fsync of the whole line, so bytes after
//! the last newline were never acknowledged. [`recover_torn_tail`] cuts them under the writer's
//! lock, after first recording what was cut (file, offset, length, SHA-256 and the bytes
//! themselves up to [`MAX_RECORDED_TORN_BYTES`]) in the project's tear log
//! (`.sdd/torn_tails.jsonl`, [`TEAR_LOG_FILE_NAME`]), which `bernstein-mcp verify` prints. The
//! record is fsynced before the cut, so a crash between the two leaves the evidence and, at
//! worst, a second record of the same bytes.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use base64::Engine as _;
use bernstein_protocol::encoding::hex;
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use ring::digest;

use crate::{Error, Result};

/// The tear log inside `.sdd/`: one JSON line per torn tail cut by a writer.
pub const TEAR_LOG_FILE_NAME: &str = "torn_tails.jsonl";

/// The most bytes of a cut tail kept verbatim in the tear log (its hash and length are always
/// kept).
pub const MAX_RECORDED_TORN_BYTES: usize = 64 * 1024;

/// `<project_root>/.sdd/torn_tails.jsonl`.
pub fn tear_log_path(project_root: &Path) -> PathBuf {
    project_root.join(".sdd").join(TEAR_LOG_FILE_NAME)
}

/// Fsyncs the directory `dir`, so the entries inside it (new files, renames) are durable.
///
/// # Errors
///
/// The IO error of opening or syncing it.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(test)]
    seams::record_dir_sync(dir);
    count_fsync();
    File::open(dir)?.sync_all()
}

/// The histogram of [`sync_file`] latencies, in seconds (recorded through the `metrics` facade,
/// a no-op unless the binary installed a recorder).
pub const FSYNC_SECONDS_METRIC: &str = "bernstein_mcp_fsync_duration_seconds";

/// Describes this crate's metrics to the installed recorder (the binary calls it once).
pub fn describe_metrics() {
    metrics::describe_histogram!(
        FSYNC_SECONDS_METRIC,
        metrics::Unit::Seconds,
        "Latency of the fsync that acknowledges an evidence append (run journal, audit chain, mailbox, spine)."
    );
}

/// Fsyncs an open file's data and metadata (the acknowledgement point of every append).
pub(crate) fn sync_file(file: &File) -> io::Result<()> {
    #[cfg(test)]
    if seams::take_fsync_failure() {
        return Err(io::Error::other("injected fsync failure (test seam)"));
    }
    count_fsync();
    timed_sync(file)
}

/// A thread that fsyncs appended files for one writer, so that the writer's own thread can make
/// a second file durable at the same time (`JournalWriter::append_group_overlapping_then`: the
/// anchoring row's fsync runs here while the caller appends and fsyncs the audit entries).
/// Two fsyncs of different files overlap on the device; one after the other they cost twice
/// one. The thread starts with the first [`SyncHelper::start`] and ends when the helper is
/// dropped. A fsync started here is counted on the thread that started it
/// ([`thread_fsync_count`]), so a caller counts what its operation made durable wherever the
/// fsync ran.
#[derive(Default)]
pub(crate) struct SyncHelper {
    thread: Option<HelperThread>,
}

impl std::fmt::Debug for SyncHelper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncHelper")
            .field("running", &self.thread.is_some())
            .finish()
    }
}

struct HelperThread {
    requests: std::sync::mpsc::Sender<File>,
    results: std::sync::mpsc::Receiver<io::Result<()>>,
}

/// A fsync [`SyncHelper::start`] began; [`SyncHelper::finish`] waits for its result.
pub(crate) enum StartedSync {
    /// The helper thread is syncing the file.
    Sent,
    /// The result is known already (a test seam's injected failure, or a descriptor that could
    /// not be duplicated).
    Done(io::Result<()>),
    /// No helper thread could be started: the file is synced when the result is waited for.
    Inline(File),
}

impl SyncHelper {
    /// Starts fsyncing `file` on the helper thread (started now if it is not running).
    pub(crate) fn start(&mut self, file: &File) -> StartedSync {
        #[cfg(test)]
        if seams::take_fsync_failure() {
            return StartedSync::Done(Err(io::Error::other("injected fsync failure (test seam)")));
        }
        count_fsync();
        let file = match file.try_clone() {
            Ok(file) => file,
            Err(err) => return StartedSync::Done(Err(err)),
        };
        if self.thread.is_none() {
            self.thread = HelperThread::spawn();
        }
        match &self.thread {
            Some(thread) => match thread.requests.send(file) {
                Ok(()) => StartedSync::Sent,
                Err(unsent) => {
                    self.thread = None;
                    StartedSync::Inline(unsent.0)
                }
            },
            None => StartedSync::Inline(file),
        }
    }

    /// The result of the fsync `started` began.
    pub(crate) fn finish(&mut self, started: StartedSync) -> io::Result<()> {
        match started {
            StartedSync::Done(result) => result,
            StartedSync::Inline(file) => timed_sync(&file),
            StartedSync::Sent => {
                let received = self.thread.as_ref().map(|thread| thread.results.recv());
                match received {
                    Some(Ok(result)) => result,
                    _ => {
                        self.thread = None;
                        Err(io::Error::other("the fsync helper thread stopped"))
                    }
                }
            }
        }
    }
}

impl HelperThread {
    /// `None` when the thread cannot be started; the caller then syncs inline.
    fn spawn() -> Option<HelperThread> {
        let (requests, files) = std::sync::mpsc::channel::<File>();
        let (answers, results) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("evidence-sync".to_owned())
            .spawn(move || {
                for file in files {
                    if answers.send(timed_sync(&file)).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(HelperThread { requests, results })
    }
}

/// `file.sync_all()`, timed into [`FSYNC_SECONDS_METRIC`].
fn timed_sync(file: &File) -> io::Result<()> {
    let started = std::time::Instant::now();
    let synced = file.sync_all();
    metrics::histogram!(FSYNC_SECONDS_METRIC).record(started.elapsed().as_secs_f64());
    synced
}

thread_local! {
    static THREAD_FSYNCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count_fsync() {
    THREAD_FSYNCS.with(|count| count.set(count.get() + 1));
}

/// How many fsyncs (of appended files and of directories) the current thread has made through
/// these primitives since it started. A probe, per thread so that tests running in parallel do
/// not disturb each other: a test counts what one operation makes durable, and a benchmark
/// what one call costs.
pub fn thread_fsync_count() -> u64 {
    THREAD_FSYNCS.with(std::cell::Cell::get)
}

/// Creates `dir` and every missing ancestor, fsyncing the parent of each directory created
/// before returning, so none of them can vanish in a crash after the caller acknowledges
/// something stored inside.
///
/// # Errors
///
/// The IO error of a `mkdir` (other than one racing another creator) or a directory fsync.
pub fn create_dir_all_durable(dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut cursor = Some(dir);
    while let Some(path) = cursor {
        if path.as_os_str().is_empty() || path.is_dir() {
            break;
        }
        missing.push(path);
        cursor = path.parent();
    }
    for path in missing.into_iter().rev() {
        match fs::create_dir(path) {
            Ok(()) => {}
            // Another process created it meanwhile; its parent still gets our fsync below,
            // because that process may die before its own.
            Err(err) if err.kind() == ErrorKind::AlreadyExists && path.is_dir() => {}
            Err(err) => return Err(err),
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
            // The new directory's own entry is durable now. When its parent's entries up to
            // the project root are known durable as well, a file made inside it later needs
            // only this directory fsynced (see `ensure_entry_durable`); otherwise an ancestor
            // another process created may still be waiting for its fsync.
            let mut known = durable_entries();
            if known.contains(parent) {
                known.insert(path.to_path_buf());
            }
        }
    }
    Ok(())
}

/// The files and directories whose directory entries this process has already made durable.
static DURABLE_ENTRIES: LazyLock<Mutex<HashSet<PathBuf>>> =
    LazyLock::new(|| Mutex::new(HashSet::new()));

fn durable_entries() -> std::sync::MutexGuard<'static, HashSet<PathBuf>> {
    DURABLE_ENTRIES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes the directory entry of `path`, and of each ancestor up to the one named `.sdd`,
/// durable: fsyncs `path`'s parent and each ancestor's parent, ending with the directory that
/// holds `.sdd/` (or only the immediate parent when `path` is not under a `.sdd`). Done once
/// per process and path; later calls return at once. The walk stops at an ancestor whose own
/// entry this process already made durable with all of its ancestors (here, or when
/// [`create_dir_all_durable`] created it inside such a directory), so a new run's journal costs
/// one directory fsync, not one per level up to the project root.
///
/// # Errors
///
/// The IO error of a directory fsync; the path is then not remembered, so the next call tries
/// again.
pub fn ensure_entry_durable(path: &Path) -> io::Result<()> {
    let mut seen = durable_entries();
    if seen.contains(path) {
        return Ok(());
    }
    let mark = DurableMark::of(path);
    if mark.as_ref().is_some_and(|mark| mark.is_on(path)) {
        seen.insert(path.to_path_buf());
        return Ok(());
    }
    let under_sdd = path.components().any(|c| c.as_os_str() == ".sdd");
    let mut child = path;
    while let Some(parent) = child.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
        seen.insert(child.to_path_buf());
        if !under_sdd
            || child.file_name().is_some_and(|name| name == ".sdd")
            || seen.contains(parent)
        {
            break;
        }
        child = parent;
    }
    if let Some(mark) = mark {
        mark.put_on(path);
    }
    Ok(())
}

/// The extended attribute [`ensure_entry_durable`] sets on a file once the file's directory
/// entry and its ancestors' are durable, so that other processes need not fsync them again.
pub const DURABLE_MARK_XATTR: &str = "user.bernstein.entry-durable";

/// What [`DURABLE_MARK_XATTR`] holds: the file's device, inode number and birth time, and a
/// digest of the path it was made durable under. A mark is trusted only when all of them still
/// match, so it says nothing about a copy (another inode, or a later birth time where the inode
/// number was reused) nor about the file after a rename (another path), whose new entry no
/// fsync has covered yet.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DurableMark(String);

impl DurableMark {
    /// The mark `path` would carry, or `None` when it cannot carry one: the file does not exist
    /// yet, or the file system reports no birth time.
    fn of(path: &Path) -> Option<DurableMark> {
        use rustix::fs::{AtFlags, CWD, StatxFlags, statx};
        let stat = statx(
            CWD,
            path,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::INO | StatxFlags::BTIME,
        )
        .ok()?;
        if !StatxFlags::from_bits_retain(stat.stx_mask).contains(StatxFlags::BTIME) {
            return None;
        }
        let path_digest = digest::digest(
            &digest::SHA256,
            std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()),
        );
        Some(DurableMark(format!(
            "1 {}:{} {} {}.{:09} {}",
            stat.stx_dev_major,
            stat.stx_dev_minor,
            stat.stx_ino,
            stat.stx_btime.tv_sec,
            stat.stx_btime.tv_nsec,
            hex(path_digest.as_ref())
        )))
    }

    /// Whether `path` carries this mark.
    fn is_on(&self, path: &Path) -> bool {
        let mut found = [0u8; 160];
        rustix::fs::lgetxattr(path, DURABLE_MARK_XATTR, &mut found[..])
            .is_ok_and(|len| found.get(..len) == Some(self.0.as_bytes()))
    }

    /// Sets the mark on `path`, best effort: without it, other processes fsync the entries
    /// again, which costs time and loses nothing.
    fn put_on(&self, path: &Path) {
        let set = rustix::fs::lsetxattr(
            path,
            DURABLE_MARK_XATTR,
            self.0.as_bytes(),
            rustix::fs::XattrFlags::empty(),
        );
        if let Err(err) = set {
            tracing::trace!(
                target: "bernstein_journal::durable",
                path = %path.display(),
                "the durable-entry mark was not set (other processes fsync the entries again): {err}"
            );
        }
    }
}

/// Appends `bytes` (one whole row) to `file`, opened with `O_APPEND` and locked by the caller,
/// and fsyncs it. `old_len` is the file's length before the write, read under the same lock.
/// When the write or the fsync fails, the file is truncated back to `old_len` (best effort) so
/// the failed row cannot be read, nor duplicated by a retry.
///
/// # Errors
///
/// The IO error of the write or fsync.
pub(crate) fn append_durably(file: &mut File, old_len: u64, bytes: &[u8]) -> io::Result<()> {
    append_unsynced(file, old_len, bytes)?;
    sync_file(file).inspect_err(|_| take_back(file, old_len))
}

/// [`append_durably`] without the fsync: the caller makes the bytes durable itself (with a
/// [`SyncHelper`]) before acknowledging them. A failed write is taken back the same way.
pub(crate) fn append_unsynced(file: &mut File, old_len: u64, bytes: &[u8]) -> io::Result<()> {
    file.write_all(bytes)
        .inspect_err(|_| take_back(file, old_len))
}

/// Truncates `file` back to `old_len` after a failed append. The caller's lock excludes every
/// other writer of ours, so the bytes past `old_len` are this append's alone. A failed rollback
/// leaves a torn or complete unacknowledged row, which the next writer's torn-tail recovery or
/// the verifier reports.
fn take_back(file: &File, old_len: u64) {
    let _ = file.set_len(old_len).and_then(|()| file.sync_all());
}

/// What [`recover_torn_tail`] cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutTail {
    /// The file that was cut.
    pub path: PathBuf,
    /// Where the cut bytes started (the file's new length).
    pub offset: u64,
    /// How many bytes were cut.
    pub length: u64,
    /// SHA-256 (hex) of the cut bytes.
    pub sha256: String,
}

/// Cuts a torn tail (bytes after the last `\n`) off `file`, which the caller holds open for
/// reading and writing under its writer lock, after recording it in the tear log of
/// `project_root`. Returns `None` when the file ends on a line boundary (or is empty).
///
/// # Errors
///
/// [`Error::Io`] when the file cannot be read, the tear cannot be recorded (then nothing is
/// cut), or the truncation fails.
pub(crate) fn recover_torn_tail(
    project_root: &Path,
    file: &mut File,
    path: &Path,
) -> Result<Option<CutTail>> {
    let len = file
        .metadata()
        .map_err(|err| Error::io("stat", path, err))?
        .len();
    let Some(offset) = torn_tail_start(file, len).map_err(|err| Error::io("read", path, err))?
    else {
        return Ok(None);
    };
    let length = len - offset;
    file.seek(SeekFrom::Start(offset))
        .map_err(|err| Error::io("read", path, err))?;
    let mut kept = Vec::new();
    let mut context = digest::Context::new(&digest::SHA256);
    let mut buffer = vec![0u8; 64 * 1024];
    let mut reader = (&*file).take(length);
    loop {
        let n = reader
            .read(&mut buffer)
            .map_err(|err| Error::io("read", path, err))?;
        if n == 0 {
            break;
        }
        context.update(&buffer[..n]);
        let room = MAX_RECORDED_TORN_BYTES.saturating_sub(kept.len());
        kept.extend_from_slice(&buffer[..n.min(room)]);
    }
    let cut = CutTail {
        path: path.to_path_buf(),
        offset,
        length,
        sha256: hex(context.finish().as_ref()),
    };
    record_tear(project_root, &cut, &kept)?;
    file.set_len(offset)
        .and_then(|()| file.sync_all())
        .map_err(|err| Error::io("truncate the torn tail of", path, err))?;
    tracing::warn!(
        path = %path.display(),
        offset,
        length,
        "cut an unacknowledged torn tail (recorded in .sdd/torn_tails.jsonl)"
    );
    Ok(Some(cut))
}

/// The offset just after the last `\n` of a file of length `len`, when bytes follow it.
fn torn_tail_start(file: &mut File, len: u64) -> io::Result<Option<u64>> {
    let mut end = len;
    let mut buffer = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(buffer.len() as u64);
        let chunk = &mut buffer[..usize::try_from(end - start).unwrap_or(0)];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(pos) = chunk.iter().rposition(|&b| b == b'\n') {
            let boundary = start + pos as u64 + 1;
            return Ok((boundary < len).then_some(boundary));
        }
        end = start;
    }
    Ok((len > 0).then_some(0))
}

/// Appends one tear record to the tear log, under an exclusive lock on the log itself, and
/// fsyncs it (and its directory entries) before returning.
fn record_tear(project_root: &Path, cut: &CutTail, kept: &[u8]) -> Result<()> {
    let log = tear_log_path(project_root);
    let sdd = project_root.join(".sdd");
    create_dir_all_durable(&sdd).map_err(|err| Error::io("create", &sdd, err))?;
    let relative = cut
        .path
        .strip_prefix(project_root)
        .unwrap_or(&cut.path)
        .to_string_lossy()
        .into_owned();
    let recorded_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let record = Object::new()
        .with("file", relative)
        .with("offset", cut.offset)
        .with("length", cut.length)
        .with("sha256", cut.sha256.as_str())
        .with(
            "bytes_b64",
            base64::engine::general_purpose::STANDARD.encode(kept),
        )
        .with("bytes_truncated", kept.len() as u64 != cut.length)
        .with("recorded_at", recorded_at);
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(&log)
        .map_err(|err| Error::io("open", &log, err))?;
    file.lock().map_err(|err| Error::io("lock", &log, err))?;
    let old_len = file
        .metadata()
        .map_err(|err| Error::io("stat", &log, err))?
        .len();
    let mut line = Vec::new();
    // A torn record of the log itself stays as it is (the reader skips it); ours starts on a
    // fresh line.
    if old_len > 0 && torn_tail_start(&mut file, old_len).ok().flatten().is_some() {
        line.push(b'\n');
    }
    line.extend_from_slice(Value::Object(record).dumps(Dialect::PY_SPACED).as_bytes());
    line.push(b'\n');
    append_durably(&mut file, old_len, &line).map_err(|err| Error::io("append to", &log, err))?;
    ensure_entry_durable(&log).map_err(|err| Error::io("fsync the directory of", &log, err))
}

/// One torn tail a writer cut, as the tear log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedTear {
    /// The file, relative to the project root.
    pub file: String,
    /// Where the cut bytes started.
    pub offset: u64,
    /// How many bytes were cut.
    pub length: u64,
    /// SHA-256 (hex) of the cut bytes.
    pub sha256: String,
    /// 1-based line of the record in the tear log.
    pub line: usize,
}

impl RecordedTear {
    /// One line for people.
    pub fn describe(&self) -> String {
        format!(
            "{}: cut {} unacknowledged byte(s) of a torn last row at offset {} (sha256 {}; tear log line {})",
            self.file, self.length, self.offset, self.sha256, self.line
        )
    }
}

/// The tear log of a project: every record, and the lines that are not readable records
/// (1-based, with the reason).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TearLog {
    /// The readable records, in file order.
    pub tears: Vec<RecordedTear>,
    /// Complete lines that are not tear records.
    pub unreadable: Vec<(usize, String)>,
    /// The line number of a torn last record (a recorder killed mid-write; the tear it was
    /// recording was not cut yet, so the next writer records it again).
    pub torn_last_line: Option<usize>,
}

/// Reads the project's tear log; a missing log is empty. Never writes.
///
/// # Errors
///
/// [`Error::Io`] when the log exists but cannot be read.
pub fn read_tear_log(project_root: &Path) -> Result<TearLog> {
    let path = tear_log_path(project_root);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(TearLog::default()),
        Err(err) => return Err(Error::io("read", &path, err)),
    };
    let mut log = TearLog::default();
    let complete = bytes.ends_with(b"\n");
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let count = lines.len();
    for (i, raw) in lines.into_iter().enumerate() {
        let number = i + 1;
        if raw.is_empty() {
            continue;
        }
        if i + 1 == count && !complete {
            log.torn_last_line = Some(number);
            continue;
        }
        let parsed = std::str::from_utf8(raw)
            .ok()
            .and_then(|text| Value::parse(text).ok());
        let Some(Value::Object(record)) = parsed else {
            log.unreadable
                .push((number, "not a JSON object".to_owned()));
            continue;
        };
        let text = |key: &str| record.get(key).and_then(Value::as_str).map(str::to_owned);
        let number_of = |key: &str| match record.get(key) {
            Some(Value::Int(n)) => n.as_u64(),
            _ => None,
        };
        match (
            text("file"),
            number_of("offset"),
            number_of("length"),
            text("sha256"),
        ) {
            (Some(file), Some(offset), Some(length), Some(sha256)) => {
                log.tears.push(RecordedTear {
                    file,
                    offset,
                    length,
                    sha256,
                    line: number,
                });
            }
            _ => log
                .unreadable
                .push((number, "missing file, offset, length or sha256".to_owned())),
        }
    }
    Ok(log)
}

/// Test seams: a thread-local record of directory fsyncs and injectable fsync failures. Only
/// compiled into this crate's unit tests; production code has no switch.
#[cfg(test)]
pub(crate) mod seams {
    use std::cell::{Cell, RefCell};
    use std::path::{Path, PathBuf};

    thread_local! {
        static DIR_SYNCS: RefCell<Vec<PathBuf>> = const { RefCell::new(Vec::new()) };
        static FAIL_FSYNCS: Cell<u32> = const { Cell::new(0) };
        static INTRUDER_BYTES: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
    }

    /// Makes a writer that ignores the chain lock append `bytes` right after the next seal
    /// of a torn audit tail on this thread lands, before the sealer looks at the segment's
    /// size again.
    pub(crate) fn intrude_after_next_seal(bytes: &[u8]) {
        INTRUDER_BYTES.with(|held| *held.borrow_mut() = Some(bytes.to_vec()));
    }

    /// The bytes set by [`intrude_after_next_seal`], once.
    pub(crate) fn take_intruder_bytes() -> Option<Vec<u8>> {
        INTRUDER_BYTES.with(|held| held.borrow_mut().take())
    }

    pub(crate) fn record_dir_sync(dir: &Path) {
        DIR_SYNCS.with(|syncs| syncs.borrow_mut().push(dir.to_path_buf()));
    }

    /// The directories fsynced on this thread since the last call.
    pub(crate) fn take_dir_syncs() -> Vec<PathBuf> {
        DIR_SYNCS.with(|syncs| std::mem::take(&mut *syncs.borrow_mut()))
    }

    /// Makes the next `count` file fsyncs of the append path on this thread fail.
    pub(crate) fn fail_next_fsyncs(count: u32) {
        FAIL_FSYNCS.with(|fail| fail.set(count));
    }

    pub(crate) fn take_fsync_failure() -> bool {
        FAIL_FSYNCS.with(|fail| {
            let left = fail.get();
            if left > 0 {
                fail.set(left - 1);
            }
            left > 0
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_directories_have_their_parents_fsynced() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let deep = base.join("a").join("b").join("c");
        seams::take_dir_syncs();
        create_dir_all_durable(&deep).unwrap();
        assert!(deep.is_dir());
        assert_eq!(
            seams::take_dir_syncs(),
            vec![base.clone(), base.join("a"), base.join("a").join("b")]
        );
        // Nothing created, nothing to sync.
        create_dir_all_durable(&deep).unwrap();
        assert_eq!(seams::take_dir_syncs(), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_file_entry_is_made_durable_up_to_the_project_root_once() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let runs = base.join(".sdd").join("runs").join("r");
        fs::create_dir_all(&runs).unwrap();
        let file = runs.join("journal.jsonl");
        fs::write(&file, b"").unwrap();
        seams::take_dir_syncs();
        ensure_entry_durable(&file).unwrap();
        assert_eq!(
            seams::take_dir_syncs(),
            vec![
                runs.clone(),
                base.join(".sdd").join("runs"),
                base.join(".sdd"),
                base.clone()
            ]
        );
        ensure_entry_durable(&file).unwrap();
        assert!(seams::take_dir_syncs().is_empty());
    }

    /// Forgets what this process made durable under `base`, so the next walk there is the one
    /// a second process would make.
    fn forget_durable_entries_under(base: &Path) {
        durable_entries().retain(|known| !known.starts_with(base));
    }

    /// Whether the file system under `dir` keeps user extended attributes and birth times,
    /// asked of the file system directly rather than through [`DurableMark`], so that a broken
    /// mark cannot make its own tests expect nothing of it.
    fn file_system_keeps_marks(dir: &Path) -> bool {
        use rustix::fs::{AtFlags, CWD, StatxFlags, XattrFlags};
        let probe = dir.join("file-system-probe");
        fs::write(&probe, b"").unwrap();
        let birth_time = rustix::fs::statx(CWD, &probe, AtFlags::empty(), StatxFlags::BTIME)
            .is_ok_and(|stat| {
                StatxFlags::from_bits_retain(stat.stx_mask).contains(StatxFlags::BTIME)
            });
        let attributes =
            rustix::fs::lsetxattr(&probe, "user.bernstein.probe", b"1", XattrFlags::empty())
                .is_ok();
        fs::remove_file(&probe).unwrap();
        birth_time && attributes
    }

    /// A journal made durable under `<base>/.sdd/runs/r`, and the four directories its walk
    /// fsyncs.
    fn durable_journal(base: &Path) -> (PathBuf, Vec<PathBuf>) {
        let runs = base.join(".sdd").join("runs").join("r");
        fs::create_dir_all(&runs).unwrap();
        let file = runs.join("journal.jsonl");
        fs::write(&file, b"").unwrap();
        let walk = vec![
            runs,
            base.join(".sdd").join("runs"),
            base.join(".sdd"),
            base.to_path_buf(),
        ];
        seams::take_dir_syncs();
        ensure_entry_durable(&file).unwrap();
        assert_eq!(seams::take_dir_syncs(), walk);
        (file, walk)
    }

    /// A second process's first append to a file another process made durable costs no
    /// directory fsync: the first process's mark on the file says its walk completed. Where the
    /// file system keeps no mark, the second process walks again.
    #[test]
    fn a_file_another_process_made_durable_is_not_walked_again() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let (file, walk) = durable_journal(&base);
        forget_durable_entries_under(&base);
        ensure_entry_durable(&file).unwrap();
        let expected = if file_system_keeps_marks(&base) {
            Vec::new()
        } else {
            walk
        };
        assert_eq!(seams::take_dir_syncs(), expected);
        // Remembered now, as after a walk.
        ensure_entry_durable(&file).unwrap();
        assert!(seams::take_dir_syncs().is_empty());
    }

    /// The mark is trusted only on the file and path it was made for: a renamed file's new
    /// entry, a copy carrying the attribute, and a mark with other content are walked again.
    #[test]
    fn a_mark_on_a_renamed_copied_or_altered_file_is_not_trusted() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        if !file_system_keeps_marks(&base) {
            // Nothing is ever skipped without the mark; the test above covers that case.
            return;
        }
        let (file, walk) = durable_journal(&base);
        let mark = DurableMark::of(&file).expect("the file has a birth time");
        assert!(mark.is_on(&file), "the walk marks the file");

        let renamed = file.with_file_name("renamed.jsonl");
        fs::rename(&file, &renamed).unwrap();
        forget_durable_entries_under(&base);
        ensure_entry_durable(&renamed).unwrap();
        assert_eq!(
            seams::take_dir_syncs(),
            walk,
            "a renamed file is walked again"
        );

        let copy = renamed.with_file_name("copy.jsonl");
        fs::copy(&renamed, &copy).unwrap();
        let mut carried = [0u8; 160];
        let len = rustix::fs::lgetxattr(&renamed, DURABLE_MARK_XATTR, &mut carried[..]).unwrap();
        rustix::fs::lsetxattr(
            &copy,
            DURABLE_MARK_XATTR,
            &carried[..len],
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        forget_durable_entries_under(&base);
        ensure_entry_durable(&copy).unwrap();
        assert_eq!(seams::take_dir_syncs(), walk, "a copy is walked again");

        let altered = copy.with_file_name("altered.jsonl");
        fs::write(&altered, b"").unwrap();
        let mut forged = DurableMark::of(&altered).unwrap().0.into_bytes();
        forged.push(b'0');
        rustix::fs::lsetxattr(
            &altered,
            DURABLE_MARK_XATTR,
            &forged,
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        forget_durable_entries_under(&base);
        ensure_entry_durable(&altered).unwrap();
        assert_eq!(seams::take_dir_syncs(), walk, "a mark with other content");
    }

    /// Outside a `.sdd` directory only the file's own directory is fsynced: the walk up to
    /// the project root is for the evidence tree, not for every file.
    #[test]
    fn a_file_outside_sdd_has_only_its_directory_fsynced() {
        let root = tempfile::tempdir().unwrap();
        let plain = root
            .path()
            .canonicalize()
            .unwrap()
            .join("plain")
            .join("deeper");
        fs::create_dir_all(&plain).unwrap();
        seams::take_dir_syncs();
        ensure_entry_durable(&plain.join("file")).unwrap();
        assert_eq!(seams::take_dir_syncs(), vec![plain]);
    }

    #[test]
    fn a_file_in_a_directory_made_durable_costs_one_directory_sync() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let runs = base.join(".sdd").join("runs");
        seams::take_dir_syncs();
        create_dir_all_durable(&runs.join("first")).unwrap();
        ensure_entry_durable(&runs.join("first").join("journal.jsonl")).unwrap();
        // The first time, the directories were created before their own parents were known
        // durable, so the journal's walk goes up to the directory holding `.sdd`.
        assert_eq!(
            seams::take_dir_syncs(),
            vec![
                base.clone(),
                base.join(".sdd"),
                runs.clone(),
                runs.join("first"),
                runs.clone(),
                base.join(".sdd"),
                base.clone()
            ]
        );
        // The second run's directory is new (its parent is fsynced); the levels above it were
        // made durable with the first run and are not fsynced again.
        create_dir_all_durable(&runs.join("second")).unwrap();
        ensure_entry_durable(&runs.join("second").join("journal.jsonl")).unwrap();
        assert_eq!(
            seams::take_dir_syncs(),
            vec![runs.clone(), runs.join("second")]
        );
        // A journal in a directory another process created walks up until it meets an entry
        // this process knows is durable.
        fs::create_dir(runs.join("third")).unwrap();
        ensure_entry_durable(&runs.join("third").join("journal.jsonl")).unwrap();
        assert_eq!(
            seams::take_dir_syncs(),
            vec![runs.join("third"), runs.clone()]
        );
    }

    #[test]
    fn a_failed_fsync_rolls_the_row_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        fs::write(&path, b"one\n").unwrap();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        seams::fail_next_fsyncs(1);
        assert!(append_durably(&mut file, 4, b"two\n").is_err());
        assert_eq!(fs::read(&path).unwrap(), b"one\n");
        append_durably(&mut file, 4, b"two\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"one\ntwo\n");
    }

    /// `path` opened for reading and writing, as a writer holds a file it may cut.
    fn open_rw(path: &Path) -> File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap()
    }

    #[test]
    fn a_torn_tail_is_recorded_then_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.jsonl");
        fs::write(&path, b"{\"a\": 1}\n{\"b\": ").unwrap();
        let mut file = open_rw(&path);
        let cut = recover_torn_tail(dir.path(), &mut file, &path)
            .unwrap()
            .unwrap();
        assert_eq!((cut.offset, cut.length), (9, 6));
        assert_eq!(fs::read(&path).unwrap(), b"{\"a\": 1}\n");
        assert_eq!(
            recover_torn_tail(dir.path(), &mut file, &path).unwrap(),
            None
        );
        let log = read_tear_log(dir.path()).unwrap();
        assert_eq!(log.unreadable, vec![]);
        assert_eq!(log.tears.len(), 1);
        assert_eq!(log.tears[0].file, "f.jsonl");
        assert_eq!((log.tears[0].offset, log.tears[0].length), (9, 6));
        assert_eq!(log.tears[0].sha256, cut.sha256);

        // A file with no newline at all is entirely torn.
        fs::write(&path, b"partial").unwrap();
        let cut = recover_torn_tail(dir.path(), &mut file, &path)
            .unwrap()
            .unwrap();
        assert_eq!((cut.offset, cut.length), (0, 7));
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
    }

    /// The tear log keeps the cut bytes verbatim up to 64 KiB (their hash and length always
    /// cover all of them), and says when it kept fewer.
    #[test]
    fn the_tear_log_keeps_at_most_64_kib_of_the_cut_bytes() {
        use base64::Engine as _;
        let recorded = |tail: &[u8]| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f.jsonl");
            let mut bytes = b"{}\n".to_vec();
            bytes.extend_from_slice(tail);
            fs::write(&path, &bytes).unwrap();
            let mut file = open_rw(&path);
            let cut = recover_torn_tail(dir.path(), &mut file, &path)
                .unwrap()
                .unwrap();
            assert_eq!(cut.length, tail.len() as u64);
            assert_eq!(cut.sha256, crate::crypto::sha256_hex(tail));
            let line = fs::read_to_string(tear_log_path(dir.path())).unwrap();
            let record: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
            let kept = base64::engine::general_purpose::STANDARD
                .decode(record["bytes_b64"].as_str().unwrap())
                .unwrap();
            (kept, record["bytes_truncated"].as_bool().unwrap())
        };
        let tail: Vec<u8> = (0..MAX_RECORDED_TORN_BYTES + 100)
            .map(|i| b"abcdefgh"[i % 8])
            .collect();
        let (kept, truncated) = recorded(&tail[..MAX_RECORDED_TORN_BYTES]);
        assert_eq!((kept.len(), truncated), (64 * 1024, false));
        let (kept, truncated) = recorded(&tail);
        assert_eq!((kept.as_slice(), truncated), (&tail[..64 * 1024], true));
    }

    /// The tear log reads as records with their 1-based lines, lines that are not records
    /// with the reason, and a torn last record (a recorder killed mid-write) apart from both;
    /// a record written after a torn one starts on a fresh line.
    #[test]
    fn the_tear_log_reads_records_unreadable_lines_and_a_torn_last_record() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_tear_log(dir.path()).unwrap(), TearLog::default());
        let log_path = tear_log_path(dir.path());
        fs::create_dir_all(&log_path).unwrap();
        assert!(
            read_tear_log(dir.path()).is_err(),
            "a log that cannot be read"
        );
        fs::remove_dir(&log_path).unwrap();

        let record = |file: &str, offset: u64| {
            format!(
                "{{\"file\": \"{file}\", \"offset\": {offset}, \"length\": 3, \"sha256\": \"ab\"}}\n"
            )
        };
        let text = [
            record("a.jsonl", 1),
            "\n".to_owned(),
            "[1]\n".to_owned(),
            "{\"file\": \"b.jsonl\"}\n".to_owned(),
            record("c.jsonl", 7),
            "{\"file\": \"d.js".to_owned(),
        ]
        .concat();
        fs::write(&log_path, &text).unwrap();
        let log = read_tear_log(dir.path()).unwrap();
        let found: Vec<(&str, u64, usize)> = log
            .tears
            .iter()
            .map(|t| (t.file.as_str(), t.offset, t.line))
            .collect();
        assert_eq!(found, [("a.jsonl", 1, 1), ("c.jsonl", 7, 5)]);
        assert_eq!(
            log.unreadable,
            [
                (3, "not a JSON object".to_owned()),
                (4, "missing file, offset, length or sha256".to_owned())
            ]
        );
        assert_eq!(log.torn_last_line, Some(6));
        assert_eq!(
            log.tears[1].describe(),
            "c.jsonl: cut 3 unacknowledged byte(s) of a torn last row at offset 7 \
             (sha256 ab; tear log line 5)"
        );

        // The next record does not fuse with the torn one.
        let torn = dir.path().join("t.jsonl");
        fs::write(&torn, b"{}\nxy").unwrap();
        let mut file = open_rw(&torn);
        recover_torn_tail(dir.path(), &mut file, &torn)
            .unwrap()
            .unwrap();
        let log = read_tear_log(dir.path()).unwrap();
        assert_eq!(log.tears.last().unwrap().line, 7);
        assert_eq!(log.tears.last().unwrap().file, "t.jsonl");
        assert_eq!(log.torn_last_line, None);
        assert_eq!(log.unreadable.len(), 3, "{:?}", log.unreadable);
        // After a whole record, the next follows on the very next line.
        fs::write(&torn, b"{}\nxy").unwrap();
        recover_torn_tail(dir.path(), &mut file, &torn)
            .unwrap()
            .unwrap();
        assert_eq!(
            read_tear_log(dir.path())
                .unwrap()
                .tears
                .last()
                .unwrap()
                .line,
            8
        );
    }

    /// Every file and directory fsync counts once on the thread that made it (the probe the
    /// fsyncs-per-call tests read).
    #[test]
    fn each_fsync_counts_once_on_its_thread() {
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("f")).unwrap();
        let before = thread_fsync_count();
        sync_file(&file).unwrap();
        assert_eq!(thread_fsync_count() - before, 1);
        sync_dir(dir.path()).unwrap();
        assert_eq!(thread_fsync_count() - before, 2);
        let elsewhere = std::thread::spawn(thread_fsync_count).join().unwrap();
        assert_eq!(elsewhere, 0);
    }

    /// A path that exists but is not a directory is an error, not a directory made durable.
    #[test]
    fn creating_a_directory_where_a_file_is_fails() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        fs::write(&file, b"").unwrap();
        let err = create_dir_all_durable(&file).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AlreadyExists);
        assert!(create_dir_all_durable(&file.join("below")).is_err());
    }
}
