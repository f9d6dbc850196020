//! Per-run chain heads: for every run, the newest audit entry that names it, kept in step with
//! the chain by reading only what was appended since the last look.
//!
//! A run handle embeds "the run's audit-chain head": the `hmac` of the newest entry that names
//! the run. An entry names run `R` when its `details.run_id` is `R`, or when
//! `task_run_id(details.task_id)` is `R`. An `mcp.stateless_call` anchor names only the
//! anchoring run in its `details.run_id` (its other fields never name a run), so call anchoring
//! never moves another run's head, and two polls of an unchanged run embed the same head.
//!
//! The same walk keeps the **state head**: the newest entry that is not an `mcp.stateless_call`
//! anchor. Anchors record calls, not project state, so a value that should replay identically
//! whatever was called in between (a refused claim receipt) embeds the state head.
//!
//! # Cost
//!
//! Scanning the chain on every poll would make a poll cost the size of the chain. A
//! [`RunHeadIndex`] reads every segment once when it is built (archives, then live segments, the
//! verifier's walk order) and afterwards only the bytes appended to the live segments since its
//! last look, up to the last complete line. So after the first poll of a process, a poll costs a
//! directory listing, a `stat` per live segment and the new bytes. The newest live segment
//! (the one the chain appends to) stays open, up to a bound for the whole process, so its new
//! bytes are one positional read through a descriptor the index already holds, not an open, a
//! seek, a read to the end and a close. It is rebuilt from scratch when a segment it read
//! shrank or was replaced (its device and inode changed): what it read may no longer be there. A live segment that disappeared was archived (or removed); its
//! entries are kept.
//!
//! Like reading 2 of the chain head (`FORMATS.md` §2.3), the index checks no MAC: it takes every
//! canonical line that carries an `hmac`. Whether the chain verifies, and whether the entry a
//! handle names is genuine, is for the verifier ([`crate::handle::verify_handle_seal`]).
//!
//! [`shared`] returns one index per audit directory for the whole process, so every call of a
//! server shares the catch-up work.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use bernstein_protocol::pyjson::{Object, Value};

use super::canonical_scan::{DetailText, ScannedRecord, scan_canonical_record};
use super::record::{parse_record_line, python_str};
use super::segments::{LineReader, SegmentKind, archived_segments, live_segments, open_forward};
use crate::run_journal::task_run_id;

/// Event type of a call anchor, which names only its anchoring run.
pub const EVENT_STATELESS_CALL: &str = "mcp.stateless_call";

/// Event type of a run's terminal handle seal.
pub const EVENT_TASK_HANDLE: &str = "mcp.task_handle";

/// Where an entry sits in the walk order: archives before live segments, then segment name,
/// then byte offset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Position {
    live: bool,
    segment: String,
    offset: u64,
}

/// An entry the index remembers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedEntry {
    /// The entry's `hmac`.
    pub hmac: String,
    /// Its `event_type`.
    pub event_type: String,
    /// The segment file name it was read from.
    pub segment: String,
    /// Its byte offset in that segment (decompressed, for an archive).
    pub offset: u64,
    /// `details.status`, for a seal (`mcp.task_handle`).
    pub status: Option<String>,
    /// `details.journal_head`, for a seal.
    pub journal_head: Option<String>,
}

impl IndexedEntry {
    fn position(&self, live: bool) -> Position {
        Position {
            live,
            segment: self.segment.clone(),
            offset: self.offset,
        }
    }

    /// Whether this entry is a terminal handle seal.
    pub fn is_seal(&self) -> bool {
        self.event_type == EVENT_TASK_HANDLE
    }
}

/// What the index knows about one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunHeads {
    /// The newest entry naming the run.
    pub newest: Option<IndexedEntry>,
    /// The newest seal (`mcp.task_handle`) of the run.
    pub last_seal: Option<IndexedEntry>,
    newest_live: bool,
    seal_live: bool,
}

/// A live segment as far as the index has read it.
#[derive(Debug)]
struct ReadState {
    /// End of the last complete line read.
    read_to: u64,
    /// `(device, inode)` when it was read.
    identity: (u64, u64),
    /// The segment, kept open while the process-wide bound allows: the next catch-up then
    /// reads what was appended with one positional read, instead of opening, seeking, reading
    /// to the end and closing the segment again.
    kept: Option<KeptSegment>,
}

/// At most this many live segments are kept open by all the indexes of a process together, so
/// a server polling many projects stays well within its descriptors; past it a segment is
/// opened for each catch-up, as it would be without keeping.
const MAX_KEPT_SEGMENTS: usize = 64;

/// How many segments the indexes of this process keep open now.
static KEPT_SEGMENTS: AtomicUsize = AtomicUsize::new(0);

/// An open live segment, counted against [`MAX_KEPT_SEGMENTS`] until it is dropped.
#[derive(Debug)]
struct KeptSegment {
    file: File,
    counter: &'static AtomicUsize,
}

impl KeptSegment {
    /// `file` kept, when `counter` is below `max`; the file given back otherwise.
    fn keep_within(
        counter: &'static AtomicUsize,
        max: usize,
        file: File,
    ) -> std::result::Result<KeptSegment, File> {
        match counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |kept| {
            (kept < max).then_some(kept + 1)
        }) {
            Ok(_) => Ok(KeptSegment { file, counter }),
            Err(_) => Err(file),
        }
    }
}

impl Drop for KeptSegment {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The bytes of `file` from `pos` up to `end`, read with positional reads: the descriptor's
/// own offset is neither used nor moved (so a kept segment needs no seek), and the reading
/// stops at the length its caller saw instead of asking the kernel once more for the end.
/// Bytes appended past `end` meanwhile are read by the next catch-up.
struct SegmentRange<'f> {
    file: &'f File,
    pos: u64,
    end: u64,
}

impl Read for SegmentRange<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.end.saturating_sub(self.pos)).unwrap_or(usize::MAX);
        if left == 0 {
            return Ok(0);
        }
        let want = buf.len().min(left);
        let read = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += read as u64;
        Ok(read)
    }
}

/// The per-run head index of one audit directory (see the module docs).
#[derive(Debug)]
pub struct RunHeadIndex {
    dir: PathBuf,
    built: bool,
    /// `(device, inode, mtime seconds, mtime nanoseconds)` of the audit directory when its
    /// live segments were last listed, kept only when that mtime was already old then (see
    /// [`RunHeadIndex::refresh`]).
    listed: Option<(u64, u64, i64, i64)>,
    listings: u64,
    live: HashMap<String, ReadState>,
    runs: HashMap<String, RunHeads>,
    state_head: Option<(Position, String)>,
    bytes_read: u64,
    segment_opens: u64,
}

impl RunHeadIndex {
    /// An index of the chain in `audit_dir`. Nothing is read until the first query.
    pub fn new(audit_dir: impl Into<PathBuf>) -> RunHeadIndex {
        RunHeadIndex {
            dir: audit_dir.into(),
            built: false,
            listed: None,
            listings: 0,
            live: HashMap::new(),
            runs: HashMap::new(),
            state_head: None,
            bytes_read: 0,
            segment_opens: 0,
        }
    }

    /// The audit directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Total segment bytes this index has read since it was created (for benchmarks and tests
    /// that check a poll reads only what is new).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// How many times this index has opened a live segment to read it (for tests that check a
    /// catch-up reads a kept segment without opening it again).
    pub fn segment_opens(&self) -> u64 {
        self.segment_opens
    }

    /// How many live segments this index holds open now (for tests that check it lets go of
    /// every segment but the newest, and of one whose path vanished).
    pub fn kept_segments(&self) -> usize {
        self.live
            .values()
            .filter(|state| state.kept.is_some())
            .count()
    }

    /// How many times this index has listed the audit directory (for tests that check a poll
    /// lists nothing while no segment was added or removed).
    pub fn listings(&self) -> u64 {
        self.listings
    }

    /// Catches up with the chain: reads whatever was appended since the last call, or
    /// everything when the index is new or must be rebuilt.
    ///
    /// The directory is listed again only when it changed: its device, inode and mtime are
    /// compared with those of the last listing (a `stat`), and otherwise the segments already
    /// known are checked one `stat` each. A listing is trusted this way only when no later
    /// change of the directory can keep its mtime: a segment created within the filesystem's
    /// timestamp granularity of the listing could leave the mtime unchanged ("racy"
    /// timestamps). That is known when, read before the listing, the newest known segment's
    /// mtime is later than the directory's (the same clock stamps both, so it has moved past
    /// the directory's; in a project seconds old this holds after the first appends), or when
    /// the directory's mtime was at least [`SETTLED_MTIME`] old when the listing was taken.
    /// Otherwise the next poll lists again.
    ///
    /// # Errors
    ///
    /// The filesystem's errors listing or reading the segments (a missing audit directory is an
    /// empty chain, not an error).
    pub fn refresh(&mut self) -> io::Result<()> {
        self.refresh_within(None).map(drop)
    }

    /// [`RunHeadIndex::run`] when catching up is brief: `Ok(None)`, having read and changed
    /// nothing, when the index must first be built or rebuilt, or when more than `max_bytes`
    /// were appended since the last look. A caller on an async worker answers from it and
    /// leaves the long catch-ups to a blocking thread.
    ///
    /// # Errors
    ///
    /// As [`RunHeadIndex::refresh`].
    pub fn run_within(&mut self, run_id: &str, max_bytes: u64) -> io::Result<Option<RunHeads>> {
        if !self.refresh_within(Some(max_bytes))? {
            return Ok(None);
        }
        Ok(Some(self.runs.get(run_id).cloned().unwrap_or_default()))
    }

    /// [`RunHeadIndex::refresh`], declining (`false`, nothing read or changed) with a
    /// `max_bytes` bound that a rebuild or the appended bytes would pass.
    fn refresh_within(&mut self, max_bytes: Option<u64>) -> io::Result<bool> {
        let dir_meta = match std::fs::metadata(&self.dir) {
            Ok(meta) if meta.is_dir() => meta,
            _ => {
                self.reset();
                self.built = true;
                return Ok(true);
            }
        };
        let stamp = (
            dir_meta.dev(),
            dir_meta.ino(),
            dir_meta.mtime(),
            dir_meta.mtime_nsec(),
        );
        if !self.built
            || self
                .listed
                .is_some_and(|listed| listed.0 != stamp.0 || listed.1 != stamp.1)
        {
            if max_bytes.is_some() {
                return Ok(false);
            }
            self.listed = settled(&dir_meta).then_some(stamp);
            return self.rebuild().map(|()| true);
        }
        // A new listing is remembered only once the catch-up goes ahead: a declined one must
        // be listed again, or its new segments would never be read.
        let mut listed = self.listed;
        let names: Vec<(String, PathBuf)> = if self.listed == Some(stamp) {
            let mut names: Vec<String> = self.live.keys().cloned().collect();
            names.sort();
            names
                .into_iter()
                .map(|name| {
                    let path = self.dir.join(&name);
                    (name, path)
                })
                .collect()
        } else {
            // Read before the listing: a known segment stamped later than the directory shows
            // the filesystem's clock already past the directory's mtime, so no change after
            // the listing can leave that mtime as it is.
            let clock_past_mtime = self.newest_known_segment_stamped_after(&dir_meta);
            self.listings += 1;
            listed = (clock_past_mtime || settled(&dir_meta)).then_some(stamp);
            let names: Vec<(String, PathBuf)> = live_segments(&self.dir)?
                .into_iter()
                .map(|segment| (segment.name, segment.path))
                .collect();
            // A known segment no longer listed was archived or removed: its descriptor would
            // only pin the deleted file.
            for (name, state) in &mut self.live {
                if !names.iter().any(|(listed, _)| listed == name) {
                    state.kept = None;
                }
            }
            names
        };
        let mut pending = Vec::new();
        let mut pending_bytes = 0u64;
        for (name, path) in names {
            let meta = match std::fs::metadata(&path) {
                Ok(meta) => meta,
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    // Archived or removed: its descriptor would only pin the deleted file.
                    if let Some(state) = self.live.get_mut(&name) {
                        state.kept = None;
                    }
                    continue;
                }
                Err(err) => return Err(err),
            };
            let identity = (meta.dev(), meta.ino());
            let from = match self.live.get(&name) {
                Some(state) if state.identity != identity || meta.len() < state.read_to => {
                    if max_bytes.is_some() {
                        return Ok(false);
                    }
                    self.listed = None;
                    return self.rebuild().map(|()| true);
                }
                Some(state) if meta.len() == state.read_to => continue,
                Some(state) => state.read_to,
                None => 0,
            };
            pending_bytes += meta.len() - from;
            pending.push((name, path, from, (identity, meta.len())));
        }
        if max_bytes.is_some_and(|max| pending_bytes > max) {
            return Ok(false);
        }
        self.listed = listed;
        for (name, path, from, seen) in pending {
            self.read_live(&name, &path, from, Some(seen))?;
        }
        Ok(true)
    }

    /// Whether the newest live segment this index knows has an mtime later than the
    /// directory's `dir_meta` mtime (both stamped by the filesystem's own clock).
    fn newest_known_segment_stamped_after(&self, dir_meta: &std::fs::Metadata) -> bool {
        let Some(newest) = self.live.keys().max() else {
            return false;
        };
        std::fs::metadata(self.dir.join(newest)).is_ok_and(|segment| {
            (segment.mtime(), segment.mtime_nsec()) > (dir_meta.mtime(), dir_meta.mtime_nsec())
        })
    }

    fn reset(&mut self) {
        self.live.clear();
        self.runs.clear();
        self.state_head = None;
    }

    fn rebuild(&mut self) -> io::Result<()> {
        self.reset();
        self.built = true;
        self.listings += 1;
        for segment in archived_segments(&self.dir)? {
            debug_assert_eq!(segment.kind, SegmentKind::Archived);
            let (reader, _) = match open_forward(&segment) {
                Ok(opened) => opened,
                // An unreadable archive is the verifier's finding; its entries stay unknown.
                Err(_) => continue,
            };
            let mut lines = LineReader::new(reader);
            // A corrupt gzip stream ends the archive where it breaks, as a reader can get.
            while let Ok(Some(line)) = lines.next_line() {
                self.bytes_read += line.len + u64::from(line.terminated);
                if let Some(bytes) = line.bytes.as_deref() {
                    self.observe(bytes, false, &segment.name, line.offset);
                }
            }
        }
        for segment in live_segments(&self.dir)? {
            match self.read_live(&segment.name, &segment.path, 0, None) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// Reads the complete lines of a live segment from `from` on. `seen` is the segment's
    /// `(device, inode)` and length as its path was just found: when the index keeps that very
    /// file open (the same identity; an open descriptor keeps its inode from being reused), the
    /// lines up to that length are read through it; otherwise the segment is opened. Only the
    /// newest live segment, the one the chain appends to, is kept (when the bound allows):
    /// an older day's segment no longer grows, and keeping it would only hold a descriptor
    /// and, once it is archived, the space of the deleted file.
    fn read_live(
        &mut self,
        name: &str,
        path: &Path,
        from: u64,
        seen: Option<((u64, u64), u64)>,
    ) -> io::Result<()> {
        let kept = self.live.remove(name).and_then(|state| {
            let (identity, _) = seen?;
            state.kept.filter(|_| state.identity == identity)
        });
        let newest = self.live.keys().all(|other| other.as_str() < name);
        let (kept, identity, end) = match (kept, seen) {
            (Some(kept), Some((identity, len))) => (Ok(kept), identity, len),
            _ => {
                let file = File::open(path)?;
                self.segment_opens += 1;
                let meta = file.metadata()?;
                let kept = if newest {
                    KeptSegment::keep_within(&KEPT_SEGMENTS, MAX_KEPT_SEGMENTS, file)
                } else {
                    Err(file)
                };
                (kept, (meta.dev(), meta.ino()), meta.len())
            }
        };
        if newest {
            for state in self.live.values_mut() {
                state.kept = None;
            }
        }
        // Over the bound the segment is read through a descriptor of its own, closed after.
        let file = match &kept {
            Ok(kept) => &kept.file,
            Err(own) => own,
        };
        let read_to = self.read_lines(name, file, from, end)?;
        self.live.insert(
            name.to_owned(),
            ReadState {
                read_to,
                identity,
                kept: kept.ok().filter(|_| newest),
            },
        );
        Ok(())
    }

    /// Observes the complete lines of live segment `name` between `from` and `end`, and
    /// returns the end of the last of them.
    fn read_lines(&mut self, name: &str, file: &File, from: u64, end: u64) -> io::Result<u64> {
        let range = SegmentRange {
            file,
            pos: from,
            end,
        };
        // The buffer is no larger than the range: a reader other than `File` gets its buffer
        // zeroed before the first read, which for the usual catch-up of a few entries would
        // cost more than reading them.
        let capacity = usize::try_from(end.saturating_sub(from))
            .unwrap_or(usize::MAX)
            .clamp(1, 64 * 1024);
        let mut lines = LineReader::new(BufReader::with_capacity(capacity, range));
        let mut read_to = from;
        while let Some(line) = lines.next_line()? {
            if !line.terminated {
                // A line still being written (or a torn tail): read it again once it ends.
                break;
            }
            let offset = from + line.offset;
            read_to = offset + line.len + 1;
            self.bytes_read += line.len + 1;
            if let Some(bytes) = line.bytes.as_deref() {
                self.observe(bytes, true, name, offset);
            }
        }
        Ok(read_to)
    }

    /// Takes one line into account.
    fn observe(&mut self, bytes: &[u8], live: bool, segment: &str, offset: u64) {
        let Some(fields) = EntryFields::of_line(bytes) else {
            return;
        };
        let EntryFields {
            hmac,
            event_type,
            run_id,
            task_id,
            status,
            journal_head,
        } = fields;
        let position = Position {
            live,
            segment: segment.to_owned(),
            offset,
        };
        let is_seal = event_type == EVENT_TASK_HANDLE;
        let runs = runs_named(&event_type, run_id.as_deref(), task_id.as_deref());
        let entry = IndexedEntry {
            hmac: hmac.clone(),
            segment: segment.to_owned(),
            offset,
            status: status.filter(|_| is_seal),
            journal_head: journal_head.filter(|_| is_seal),
            event_type,
        };
        if entry.event_type != EVENT_STATELESS_CALL
            && self
                .state_head
                .as_ref()
                .is_none_or(|(at, _)| *at < position)
        {
            self.state_head = Some((position.clone(), hmac));
        }
        for run in runs {
            let heads = self.runs.entry(run).or_default();
            if heads
                .newest
                .as_ref()
                .is_none_or(|n| n.position(heads.newest_live) < position)
            {
                heads.newest = Some(entry.clone());
                heads.newest_live = live;
            }
            if is_seal
                && heads
                    .last_seal
                    .as_ref()
                    .is_none_or(|s| s.position(heads.seal_live) < position)
            {
                heads.last_seal = Some(entry.clone());
                heads.seal_live = live;
            }
        }
    }

    /// What the index knows about `run_id` after catching up.
    ///
    /// # Errors
    ///
    /// As [`RunHeadIndex::refresh`].
    pub fn run(&mut self, run_id: &str) -> io::Result<RunHeads> {
        self.refresh()?;
        Ok(self.runs.get(run_id).cloned().unwrap_or_default())
    }

    /// The run's chain head: the `hmac` of the newest entry naming `run_id`, `""` when none
    /// does.
    ///
    /// # Errors
    ///
    /// As [`RunHeadIndex::refresh`].
    pub fn run_head(&mut self, run_id: &str) -> io::Result<String> {
        Ok(self
            .run(run_id)?
            .newest
            .map(|entry| entry.hmac)
            .unwrap_or_default())
    }

    /// The state head: the `hmac` of the newest entry that is not an `mcp.stateless_call`
    /// anchor, `""` when there is none.
    ///
    /// # Errors
    ///
    /// As [`RunHeadIndex::refresh`].
    pub fn state_head(&mut self) -> io::Result<String> {
        self.refresh()?;
        Ok(self
            .state_head
            .as_ref()
            .map(|(_, hmac)| hmac.clone())
            .unwrap_or_default())
    }
}

/// How old a directory's mtime must be for a listing taken now to stand for it later.
pub const SETTLED_MTIME: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether `meta`'s mtime is at least [`SETTLED_MTIME`] in the past.
fn settled(meta: &std::fs::Metadata) -> bool {
    meta.modified()
        .ok()
        .and_then(|modified| std::time::SystemTime::now().duration_since(modified).ok())
        .is_some_and(|age| age >= SETTLED_MTIME)
}

/// The members of an entry the index reads. `None` for a line that is not a canonical record
/// carrying an `hmac`, which the index passes over.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EntryFields {
    /// The stored `hmac`, as Python's `str` writes it.
    hmac: String,
    /// `event_type` when it is a string, else empty.
    event_type: String,
    /// The strings `details.run_id`, `details.task_id`, `details.status` and
    /// `details.journal_head`.
    run_id: Option<String>,
    task_id: Option<String>,
    status: Option<String>,
    journal_head: Option<String>,
}

impl EntryFields {
    /// Reads `bytes` through the verifier's scanner, which proves a writer-shaped line
    /// canonical without building it; a line the scanner declines, or whose members it cannot
    /// give as plain text, is parsed in full. Both read the same members from the same line.
    fn of_line(bytes: &[u8]) -> Option<EntryFields> {
        if bytes.is_empty() {
            return None;
        }
        match scan_canonical_record(bytes).map(|scanned| EntryFields::of_scanned(&scanned)) {
            Some(Scanned::Entry(fields)) => Some(fields),
            Some(Scanned::NoHmac) => None,
            Some(Scanned::Escaped) | None => EntryFields::of_parsed(bytes),
        }
    }

    fn of_scanned(scanned: &ScannedRecord<'_>) -> Scanned {
        let Some(hmac) = scanned.hmac else {
            return Scanned::NoHmac;
        };
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        let detail = |member: DetailText<'_>| match member {
            DetailText::Absent => Ok(None),
            DetailText::Plain(bytes) => Ok(Some(text(bytes))),
            DetailText::Escaped => Err(()),
        };
        let details = &scanned.run_details;
        let (Ok(run_id), Ok(task_id), Ok(status), Ok(journal_head)) = (
            detail(details.run_id),
            detail(details.task_id),
            detail(details.status),
            detail(details.journal_head),
        ) else {
            return Scanned::Escaped;
        };
        Scanned::Entry(EntryFields {
            hmac: text(hmac),
            event_type: scanned.event_type.map(text).unwrap_or_default(),
            run_id,
            task_id,
            status,
            journal_head,
        })
    }

    fn of_parsed(bytes: &[u8]) -> Option<EntryFields> {
        let record = parse_record_line(bytes, false).ok()?.record;
        let hmac = record.get("hmac").map(python_str)?;
        let details = record.get("details").and_then(Value::as_object);
        let detail = |key: &str| {
            details
                .and_then(|details| details.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Some(EntryFields {
            hmac,
            event_type: record
                .get("event_type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            run_id: detail("run_id"),
            task_id: detail("task_id"),
            status: detail("status"),
            journal_head: detail("journal_head"),
        })
    }
}

/// What the scanner's reading of a line gives the index.
enum Scanned {
    Entry(EntryFields),
    /// A canonical record without an `hmac`: passed over.
    NoHmac,
    /// A member the index reads holds an escape: the full parse decodes it.
    Escaped,
}

/// The runs an entry names (see the module docs): at most two.
pub fn named_runs(event_type: &str, details: Option<&Object>) -> Vec<String> {
    let Some(details) = details else {
        return Vec::new();
    };
    let text = |key: &str| details.get(key).and_then(Value::as_str);
    runs_named(event_type, text("run_id"), text("task_id"))
}

/// [`named_runs`] from the two members it reads.
fn runs_named(event_type: &str, run_id: Option<&str>, task_id: Option<&str>) -> Vec<String> {
    let mut runs = Vec::new();
    if let Some(run) = run_id {
        runs.push(run.to_owned());
    }
    if event_type != EVENT_STATELESS_CALL
        && let Some(task) = task_id
    {
        let run = task_run_id(task);
        if !runs.contains(&run) {
            runs.push(run);
        }
    }
    runs
}

/// The process-wide index of `audit_dir` (one per directory, created on first use).
pub fn shared(audit_dir: &Path) -> Arc<Mutex<RunHeadIndex>> {
    static REGISTRY: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<RunHeadIndex>>>>> = OnceLock::new();
    let mut registry = REGISTRY
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    // The path as spelled is looked up first, so a poll resolves nothing; a new spelling is
    // canonicalized once and shares the index of the directory it names.
    if let Some(index) = registry.get(audit_dir) {
        return Arc::clone(index);
    }
    let key = std::fs::canonicalize(audit_dir).unwrap_or_else(|_| audit_dir.to_path_buf());
    let index = Arc::clone(
        registry
            .entry(key)
            .or_insert_with(|| Arc::new(Mutex::new(RunHeadIndex::new(audit_dir)))),
    );
    registry.insert(audit_dir.to_path_buf(), Arc::clone(&index));
    index
}

/// The run head of `run_id` in `audit_dir` through the shared index.
///
/// # Errors
///
/// As [`RunHeadIndex::refresh`].
pub fn run_head(audit_dir: &Path, run_id: &str) -> io::Result<String> {
    shared(audit_dir)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .run_head(run_id)
}

/// The state head of `audit_dir` through the shared index.
///
/// # Errors
///
/// As [`RunHeadIndex::refresh`].
pub fn state_head(audit_dir: &Path) -> io::Result<String> {
    shared(audit_dir)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .state_head()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{ARCHIVE_DIR, AuditChain, AuditEvent, Timestamp};
    use crate::key::AuditKey;
    use std::io::Write;

    fn chain(dir: &Path) -> AuditChain {
        AuditChain::open(dir, AuditKey::from_master_bytes(b"k".repeat(64)))
    }

    /// The members the index reads from `line`, and whether the scanner gave them without the
    /// full parse; they must be what the full parse reads.
    fn check_fields(line: &str, scanned: bool, expect: Option<(&str, &[Option<&str>; 4])>) {
        let fields = EntryFields::of_line(line.as_bytes());
        assert_eq!(fields, EntryFields::of_parsed(line.as_bytes()), "{line}");
        let by_scan = scan_canonical_record(line.as_bytes())
            .map(|record| EntryFields::of_scanned(&record))
            .is_some_and(|read| matches!(read, Scanned::Entry(_) | Scanned::NoHmac));
        assert_eq!(by_scan, scanned, "{line}");
        let owned = |text: &Option<&str>| text.map(str::to_owned);
        assert_eq!(
            fields.map(|f| (
                f.event_type,
                [f.run_id, f.task_id, f.status, f.journal_head]
            )),
            expect.map(|(event, details)| (event.to_owned(), details.each_ref().map(owned))),
            "{line}"
        );
    }

    #[test]
    fn an_entry_names_its_run_id_and_its_task_run_once_each() {
        fn check(event_type: &str, details: Option<Object>, expect: &[&str]) {
            assert_eq!(
                named_runs(event_type, details.as_ref()),
                expect,
                "{event_type} {details:?}"
            );
        }
        let details = |run: Option<&str>, task: Option<&str>| {
            let mut details = Object::new();
            if let Some(run) = run {
                details.insert("run_id", run);
            }
            if let Some(task) = task {
                details.insert("task_id", task);
            }
            Some(details)
        };
        check("task.created", None, &[]);
        check("task.created", details(None, None), &[]);
        check("task.created", details(Some("r-1"), None), &["r-1"]);
        check("task.created", details(None, Some("t1")), &["task-t1"]);
        check(
            "task.created",
            details(Some("r-1"), Some("t1")),
            &["r-1", "task-t1"],
        );
        // A run id that is the task's run is named once.
        check(
            "task.created",
            details(Some("task-t1"), Some("t1")),
            &["task-t1"],
        );
        // An anchor names only the anchoring run, never the task its call was about.
        check(
            EVENT_STATELESS_CALL,
            details(Some("mcp-calls"), Some("t1")),
            &["mcp-calls"],
        );
        // Members that are not strings name nothing.
        let mut numbers = Object::new();
        numbers.insert("run_id", 5);
        numbers.insert("task_id", 6);
        check("task.created", Some(numbers), &[]);
    }

    #[test]
    fn the_scanner_and_the_full_parse_read_the_same_members() {
        check_fields(
            r#"{"details": {"journal_head": "jh", "run_id": "r-1", "status": "done", "task_id": "t1"}, "event_type": "task.handle", "hmac": "ff"}"#,
            true,
            Some((
                "task.handle",
                &[Some("r-1"), Some("t1"), Some("done"), Some("jh")],
            )),
        );
        // An escaped member is decoded by the full parse.
        check_fields(
            r#"{"details": {"run_id": "r\u00e9"}, "event_type": "e", "hmac": "ff"}"#,
            false,
            Some(("e", &[Some("r\u{e9}"), None, None, None])),
        );
        check_fields(
            r#"{"details": {"task_id": "a\"b"}, "hmac": "ff"}"#,
            false,
            Some(("", &[None, Some("a\"b"), None, None])),
        );
        // Members that are not strings, or not directly in `details`, name nothing.
        check_fields(
            r#"{"details": {"run_id": 5, "x": {"task_id": "t"}}, "hmac": "ff", "task_id": "top"}"#,
            true,
            Some(("", &[None, None, None, None])),
        );
        check_fields(
            r#"{"details": ["r"], "event_type": "e", "hmac": "ff"}"#,
            true,
            Some(("e", &[None, None, None, None])),
        );
        // No `hmac`, or not a canonical record: the line is passed over.
        check_fields(r#"{"details": {"run_id": "r"}}"#, true, None);
        check_fields(r#"{"details": {"run_id":"r"}, "hmac": "ff"}"#, false, None);
        // A stored `hmac` that is not a string is read as Python's `str` writes it.
        check_fields(
            r#"{"hmac": 5}"#,
            false,
            Some(("", &[None, None, None, None])),
        );
        check_fields("", false, None);
    }

    fn event(event_type: &str, details: Object) -> AuditEvent {
        AuditEvent::new(event_type, "t", "t", "r", details)
    }

    fn at(day: i64, n: i64) -> Timestamp {
        Timestamp::from_unix_micros((1_796_000_000 + day * 86_400 + n) * 1_000_000).unwrap()
    }

    /// A chain in `audit` under a new temporary directory (kept alive by the first item).
    fn chain_in_tempdir() -> (tempfile::TempDir, PathBuf, AuditChain) {
        let dir = tempfile::tempdir().unwrap();
        let audit = dir.path().join("audit");
        let chain = chain(&audit);
        (dir, audit, chain)
    }

    /// Details naming run `r`, numbered `n`.
    fn named(n: i64) -> Object {
        Object::new().with("run_id", "r").with("n", n)
    }

    /// Dates the directory's mtime an hour back, so a listing of it is trusted.
    fn settle(audit: &Path) {
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        File::open(audit).unwrap().set_modified(old).unwrap();
    }

    /// A poll stats the directory and the segments it knows; it lists the directory again
    /// only when that changed (a segment added), and never trusts a listing taken while the
    /// directory's mtime was fresh.
    #[test]
    fn polls_list_the_directory_only_when_it_changed() {
        let (_dir, audit, chain) = chain_in_tempdir();
        chain.append_at(&event("e", named(0)), at(0, 0)).unwrap();
        let mut index = RunHeadIndex::new(&audit);
        index.refresh().unwrap();
        // Fresh mtime: the next poll lists again.
        index.refresh().unwrap();
        assert_eq!(index.listings(), 2);
        settle(&audit);
        index.refresh().unwrap();
        assert_eq!(index.listings(), 3);
        let second = chain.append_at(&event("e", named(1)), at(0, 1)).unwrap();
        assert_eq!(index.run_head("r").unwrap(), second.hmac);
        assert_eq!(index.run_head("r").unwrap(), second.hmac);
        assert_eq!(index.listings(), 3, "nothing was added to the directory");
        // A new day's segment changes the directory: it is listed and read.
        let third = chain.append_at(&event("e", named(2)), at(1, 0)).unwrap();
        assert_eq!(index.run_head("r").unwrap(), third.hmac);
        assert_eq!(index.listings(), 4);
    }

    /// In a directory seconds old, a listing is trusted once the segment it knows is stamped
    /// later than the directory: the filesystem's clock has then passed the directory's mtime,
    /// so no later change can keep it. Stamped the same, every poll lists.
    #[test]
    fn a_fresh_directory_is_trusted_once_its_segment_is_stamped_after_it() {
        let (_dir, audit, chain) = chain_in_tempdir();
        chain.append_at(&event("e", named(0)), at(0, 0)).unwrap();
        let segment = std::fs::read_dir(&audit)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .find(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
            .unwrap();
        let stamp = |path: &Path, when: std::time::SystemTime| {
            File::open(path).unwrap().set_modified(when).unwrap();
        };
        let now = std::time::SystemTime::now();
        let fresh = now - std::time::Duration::from_millis(50);
        stamp(&audit, fresh);
        stamp(&segment, fresh);
        let mut index = RunHeadIndex::new(&audit);
        for _ in 0..3 {
            index.refresh().unwrap();
        }
        assert_eq!(
            index.listings(),
            3,
            "not past the directory: every poll lists"
        );

        stamp(&segment, now);
        index.refresh().unwrap();
        assert_eq!(index.listings(), 4);
        let second = chain.append_at(&event("e", named(1)), at(0, 1)).unwrap();
        assert_eq!(index.run_head("r").unwrap(), second.hmac);
        assert_eq!(index.listings(), 4, "the listing was trusted");
        // A new day's segment still changes the directory, and is listed and read.
        let third = chain.append_at(&event("e", named(2)), at(1, 0)).unwrap();
        assert_eq!(index.run_head("r").unwrap(), third.hmac);
        assert_eq!(index.listings(), 5);
    }

    /// An audit directory replaced by another (a new inode) is read again from scratch at
    /// once, without first trusting the segments it seems to share with the old one.
    #[test]
    fn a_replaced_audit_directory_is_read_again_from_scratch() {
        let (dir, audit, chain) = chain_in_tempdir();
        chain.append_at(&event("e", named(0)), at(0, 0)).unwrap();
        let mut index = RunHeadIndex::new(&audit);
        index.refresh().unwrap();
        settle(&audit);
        index.refresh().unwrap();
        let listings = index.listings();
        let moved = dir.path().join("moved");
        std::fs::rename(&audit, &moved).unwrap();
        let replacement = chain_in_tempdir();
        let newer = replacement
            .2
            .append_at(&event("e", named(7)), at(0, 0))
            .unwrap();
        std::fs::rename(&replacement.1, &audit).unwrap();
        assert_eq!(index.run_head("r").unwrap(), newer.hmac);
        assert_eq!(
            index.listings(),
            listings + 1,
            "one rebuild, no listing first"
        );
    }

    /// A known segment gone behind an unchanged directory stamp (its mtime set back) is
    /// skipped; a segment that cannot be looked at for another reason (a symlink loop) is an
    /// error, not a segment silently left out.
    #[test]
    fn a_vanished_segment_is_skipped_and_an_unreadable_one_is_an_error() {
        let (_dir, audit, chain) = chain_in_tempdir();
        let first = chain.append_at(&event("e", named(0)), at(0, 0)).unwrap();
        chain.append_at(&event("e", named(1)), at(1, 0)).unwrap();
        settle(&audit);
        let mut index = RunHeadIndex::new(&audit);
        index.refresh().unwrap();
        let stamp = std::fs::metadata(&audit).unwrap().modified().unwrap();
        let gone = audit.join(&first.segment);
        std::fs::remove_file(&gone).unwrap();
        File::open(&audit).unwrap().set_modified(stamp).unwrap();
        index.refresh().unwrap();

        std::os::unix::fs::symlink(&gone, &gone).unwrap();
        let err = index.refresh().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(40), "ELOOP: {err}");
    }

    /// A brief catch-up weighs only the bytes appended since its last look, not the segment
    /// they were appended to.
    #[test]
    fn a_brief_catch_up_weighs_only_the_appended_bytes() {
        let (_dir, audit, chain) = chain_in_tempdir();
        for n in 0..50 {
            chain.append_at(&event("e", named(n)), at(0, n)).unwrap();
        }
        let mut index = RunHeadIndex::new(&audit);
        index.refresh().unwrap();
        let last = chain.append_at(&event("e", named(50)), at(0, 50)).unwrap();
        let heads = index
            .run_within("r", last.line.len() as u64 + 1)
            .unwrap()
            .expect("the new line is within the bound");
        assert_eq!(heads.newest.unwrap().hmac, last.hmac);
    }

    /// After the first read of a live segment the index keeps it open: each later catch-up
    /// reads only the appended lines through that descriptor, without opening the segment
    /// again, and still sees every new head. A segment replaced under the same name (another
    /// inode) is opened afresh, not read through the old descriptor.
    #[test]
    fn a_catch_up_reads_the_kept_segment_without_opening_it_again() {
        let (_dir, audit, chain) = chain_in_tempdir();
        chain.append_at(&event("e", named(0)), at(0, 0)).unwrap();
        let mut index = RunHeadIndex::new(&audit);
        index.refresh().unwrap();
        assert_eq!(index.segment_opens(), 1);
        for n in 1..4 {
            let last = chain.append_at(&event("e", named(n)), at(0, n)).unwrap();
            let heads = index.run_within("r", 1 << 20).unwrap().unwrap();
            assert_eq!(heads.newest.unwrap().hmac, last.hmac);
        }
        assert_eq!(index.segment_opens(), 1);

        let segment = live_segments(&audit).unwrap().remove(0).path;
        let copy = audit.join("copy.tmp");
        std::fs::copy(&segment, &copy).unwrap();
        std::fs::rename(&copy, &segment).unwrap();
        let last = chain.append_at(&event("e", named(4)), at(0, 4)).unwrap();
        index.refresh().unwrap();
        assert_eq!(index.run("r").unwrap().newest.unwrap().hmac, last.hmac);
        assert_eq!(index.segment_opens(), 2);
    }

    /// Only the newest live segment, the one the chain appends to, stays open: once a newer
    /// day's segment is read the older one is let go, and a kept segment whose path vanished
    /// (archived or removed) is let go at the next catch-up, so no descriptor pins the space
    /// of a deleted file.
    #[test]
    fn only_the_newest_segment_stays_open_and_a_vanished_one_is_let_go() {
        let (_dir, audit, chain) = chain_in_tempdir();
        chain.append_at(&event("e", named(0)), at(0, 0)).unwrap();
        let mut index = RunHeadIndex::new(&audit);
        index.refresh().unwrap();
        assert_eq!(index.kept_segments(), 1);
        let newer = chain.append_at(&event("e", named(1)), at(1, 1)).unwrap();
        index.refresh().unwrap();
        assert_eq!(index.run("r").unwrap().newest.unwrap().hmac, newer.hmac);
        assert_eq!(index.kept_segments(), 1);
        // An entry that lands late in the older segment is read without taking the newest's
        // place: the next entry of the newest is read through its kept descriptor.
        chain.append_at(&event("e", named(2)), at(0, 2)).unwrap();
        index.refresh().unwrap();
        let opens = index.segment_opens();
        let newest = chain.append_at(&event("e", named(3)), at(1, 3)).unwrap();
        index.refresh().unwrap();
        assert_eq!(index.run("r").unwrap().newest.unwrap().hmac, newest.hmac);
        assert_eq!(index.segment_opens(), opens);
        assert_eq!(index.kept_segments(), 1);
        for segment in live_segments(&audit).unwrap() {
            std::fs::remove_file(segment.path).unwrap();
        }
        index.refresh().unwrap();
        assert_eq!(index.kept_segments(), 0);
        assert_eq!(index.run("r").unwrap().newest.unwrap().hmac, newest.hmac);

        // The same when the listing is trusted and only the segment's own `stat` finds it gone.
        let (_dir, audit, chain) = chain_in_tempdir();
        let only = chain.append_at(&event("e", named(0)), at(0, 0)).unwrap();
        settle(&audit);
        let mut index = RunHeadIndex::new(&audit);
        index.refresh().unwrap();
        assert_eq!(index.kept_segments(), 1);
        let stamp = std::fs::metadata(&audit).unwrap().modified().unwrap();
        std::fs::remove_file(audit.join(&only.segment)).unwrap();
        File::open(&audit).unwrap().set_modified(stamp).unwrap();
        let listings = index.listings();
        index.refresh().unwrap();
        assert_eq!(index.listings(), listings, "the trusted listing was used");
        assert_eq!(index.kept_segments(), 0);
    }

    /// Segments are kept open only within the bound: past it the file is given back (to be
    /// read and closed), and a kept segment dropped frees its place.
    #[test]
    fn segments_are_kept_open_only_within_the_bound() {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let file = || tempfile::tempfile().unwrap();
        let first = KeptSegment::keep_within(&COUNTER, 2, file()).unwrap();
        let second = KeptSegment::keep_within(&COUNTER, 2, file()).unwrap();
        assert!(KeptSegment::keep_within(&COUNTER, 2, file()).is_err());
        assert_eq!(COUNTER.load(Ordering::Acquire), 2);
        drop(first);
        assert_eq!(COUNTER.load(Ordering::Acquire), 1);
        let third = KeptSegment::keep_within(&COUNTER, 2, file()).unwrap();
        assert_eq!(COUNTER.load(Ordering::Acquire), 2);
        drop((second, third));
        assert_eq!(COUNTER.load(Ordering::Acquire), 0);
    }

    /// A rebuild reads the archived segments (decompressed) before the live ones, counting
    /// every byte it decompressed; a live segment listed but gone (a dangling link) is skipped,
    /// and one that cannot be opened for another reason (a symlink loop) is an error.
    #[test]
    fn a_rebuild_reads_the_archives_and_then_the_live_segments() {
        let (_dir, audit, chain) = chain_in_tempdir();
        let archived = chain
            .append_at(&event(EVENT_TASK_HANDLE, named(0)), at(0, 0))
            .unwrap();
        let live = chain.append_at(&event("e", named(1)), at(1, 0)).unwrap();
        let old = audit.join(&archived.segment);
        let bytes = std::fs::read(&old).unwrap();
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(&bytes).unwrap();
        std::fs::create_dir(audit.join(ARCHIVE_DIR)).unwrap();
        std::fs::write(
            audit
                .join(ARCHIVE_DIR)
                .join(format!("{}.gz", archived.segment)),
            encoder.finish().unwrap(),
        )
        .unwrap();
        std::fs::remove_file(&old).unwrap();
        std::os::unix::fs::symlink(audit.join("nowhere"), audit.join("2020-01-01.jsonl")).unwrap();
        let mut index = RunHeadIndex::new(&audit);
        let heads = index.run("r").unwrap();
        assert_eq!(heads.last_seal.unwrap().hmac, archived.hmac);
        assert_eq!(heads.newest.unwrap().hmac, live.hmac);
        assert_eq!(
            index.bytes_read(),
            bytes.len() as u64 + live.line.len() as u64 + 1
        );

        let looped = audit.join("2020-01-02.jsonl");
        std::os::unix::fs::symlink(&looped, &looped).unwrap();
        let err = RunHeadIndex::new(&audit).refresh().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(40), "ELOOP: {err}");
    }

    /// A brief catch-up declines an index not built yet and more appended bytes than its
    /// bound, reading nothing; the directory listing it took is not trusted afterwards, so
    /// the new segment it saw is still read by the next catch-up.
    #[test]
    fn a_declined_brief_catch_up_reads_nothing_and_loses_nothing() {
        let (_dir, audit, chain) = chain_in_tempdir();
        let first = chain.append_at(&event("e", named(0)), at(0, 0)).unwrap();
        let mut index = RunHeadIndex::new(&audit);
        assert!(
            index.run_within("r", u64::MAX).unwrap().is_none(),
            "not built"
        );
        assert_eq!(index.bytes_read(), 0);
        index.refresh().unwrap();
        let heads = index.run_within("r", 0).unwrap().expect("nothing to read");
        assert_eq!(heads.newest.unwrap().hmac, first.hmac);

        let second = chain.append_at(&event("e", named(1)), at(1, 0)).unwrap();
        // A settled directory: a listing taken now would be trusted next time.
        settle(&audit);
        let read = index.bytes_read();
        assert!(
            index.run_within("r", 10).unwrap().is_none(),
            "too much to read"
        );
        assert_eq!(
            index.bytes_read(),
            read,
            "a declined catch-up reads nothing"
        );
        let heads = index.run_within("r", u64::MAX).unwrap().unwrap();
        assert_eq!(heads.newest.unwrap().hmac, second.hmac);
    }

    /// A seal is the handle event, and only it; the run's newest seal (the later of two) is
    /// kept apart from its newest entry.
    #[test]
    fn seals_are_the_handle_events() {
        let (_dir, audit, chain) = chain_in_tempdir();
        chain
            .append_at(&event(EVENT_TASK_HANDLE, named(0)), at(0, 0))
            .unwrap();
        let seal = chain
            .append_at(&event(EVENT_TASK_HANDLE, named(1)), at(0, 1))
            .unwrap();
        let later = chain
            .append_at(&event("task.progress", named(2)), at(0, 2))
            .unwrap();
        let heads = RunHeadIndex::new(&audit).run("r").unwrap();
        let newest = heads.newest.unwrap();
        let last_seal = heads.last_seal.unwrap();
        assert_eq!((newest.is_seal(), newest.hmac), (false, later.hmac));
        assert_eq!((last_seal.is_seal(), last_seal.hmac), (true, seal.hmac));
    }

    /// A file where the audit directory should be holds no chain: the index reads it as
    /// empty, as it does a missing directory.
    #[test]
    fn a_file_where_the_audit_directory_should_be_is_an_empty_chain() {
        let dir = tempfile::tempdir().unwrap();
        let audit = dir.path().join("audit");
        std::fs::write(&audit, b"not a directory").unwrap();
        let mut index = RunHeadIndex::new(&audit);
        assert_eq!(index.run("r").unwrap(), RunHeads::default());
        assert_eq!(index.run_head("r").unwrap(), "");
    }

    #[test]
    fn heads_follow_the_newest_naming_entry_and_ignore_anchors() {
        let dir = tempfile::tempdir().unwrap();
        let chain = chain(dir.path());
        let mut index = RunHeadIndex::new(dir.path());
        assert_eq!(index.run_head("task-a").unwrap(), "");
        let created = chain
            .append_at(
                &event("task.created", Object::new().with("task_id", "a")),
                at(0, 1),
            )
            .unwrap();
        let anchor = chain
            .append_at(
                &event(
                    EVENT_STATELESS_CALL,
                    Object::new()
                        .with("run_id", "mcp-calls")
                        .with("task_id", "a"),
                ),
                at(0, 2),
            )
            .unwrap();
        assert_eq!(index.run_head("task-a").unwrap(), created.hmac);
        assert_eq!(index.run_head("mcp-calls").unwrap(), anchor.hmac);
        assert_eq!(index.state_head().unwrap(), created.hmac);
        // A new day's segment is picked up incrementally; the older one is not re-read.
        let read = index.bytes_read();
        let message = chain
            .append_at(
                &event("task.mailbox_message", Object::new().with("task_id", "a")),
                at(1, 1),
            )
            .unwrap();
        assert_eq!(index.run_head("task-a").unwrap(), message.hmac);
        assert_eq!(
            index.bytes_read() - read,
            message.line.len() as u64 + 1,
            "only the new line was read"
        );
        // A fresh index over the same chain agrees.
        let mut fresh = RunHeadIndex::new(dir.path());
        assert_eq!(fresh.run_head("task-a").unwrap(), message.hmac);
        assert_eq!(fresh.state_head().unwrap(), message.hmac);
    }

    #[test]
    fn an_unterminated_tail_is_read_once_it_ends_and_a_rewritten_segment_rebuilds() {
        let dir = tempfile::tempdir().unwrap();
        let chain = chain(dir.path());
        let first = chain
            .append_at(&event("x", Object::new().with("run_id", "r")), at(0, 1))
            .unwrap();
        let mut index = RunHeadIndex::new(dir.path());
        assert_eq!(index.run_head("r").unwrap(), first.hmac);
        let second = chain
            .append_at(&event("x", Object::new().with("run_id", "r")), at(0, 2))
            .unwrap();
        // Half of the second line is on disk: not taken yet.
        let path = dir.path().join(&first.segment);
        let full = std::fs::read(&path).unwrap();
        let cut = full.len() - 10;
        std::fs::write(&path, &full[..cut]).unwrap();
        let mut fresh = RunHeadIndex::new(dir.path());
        assert_eq!(fresh.run_head("r").unwrap(), first.hmac);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&full[cut..])
            .unwrap();
        assert_eq!(fresh.run_head("r").unwrap(), second.hmac);
        // The segment shrinks (rewritten): the index rebuilds rather than trusting old offsets.
        std::fs::write(&path, format!("{}\n", first.line)).unwrap();
        assert_eq!(index.run_head("r").unwrap(), first.hmac);
        assert_eq!(fresh.run_head("r").unwrap(), first.hmac);
    }
}
