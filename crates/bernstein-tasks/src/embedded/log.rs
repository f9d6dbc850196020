//! The append-only task log `.sdd/runtime/tasks.jsonl` and the in-memory fold of it.
//!
//! Every line is a full task snapshot ([`super::record`]); the last snapshot of an id wins, and
//! ids keep the order of their first snapshot (creation order). A mutation that changes several
//! tasks writes its snapshots in one `write(2)` and marks them `batch: [k, n]`; a reader applies
//! such a group only once all `n` lines are present, so a crash can never leave half of a cascade
//! applied.
//!
//! **Torn tails.** Bytes after the last newline, or a batch whose lines stop short of `n`, can
//! only be the remains of a write that never returned, hence never acknowledged. A reader skips
//! them and reports them ([`TornTail`]). The next writer, holding the exclusive lock, never cuts
//! them: the reference's `bernstein serve` appends to this same log without taking
//! `tasks.jsonl.lock` (its store is single-process by design and uses an in-process lock), so
//! bytes past our last complete record may be another writer's. It first folds any complete
//! record that appeared, then ends the debris with a newline if it lacks one and writes a seal
//! line `{"torn_tail": [offset, length]}` naming exactly the voided bytes, before its own
//! records, in the same write. Readers skip a sealed region (the reference skips both lines: one
//! is not JSON, the other has no `id`). A newline-terminated line that does not parse as a
//! record, or a batch broken in the middle of the file without a seal, is not crash damage:
//! every operation then fails with [`Error::CorruptStore`] naming the line, and nothing is
//! written. A failed append cuts the file back to the length it had just before its own write
//! (a lockless writer appending in that instant is the one case this cannot tell apart).
//!
//! **Owed evidence.** The last record of a transaction carries the evidence it owes under
//! `evidence`; once that is written, a marker line `{"evidence_written": end}` follows (not
//! fsynced: losing it only causes an idempotent re-check). The fold keeps the transactions
//! without a marker ([`TaskLog::owed`]); compaction waits until there are none.
//!
//! **Other processes.** Callers hold the store's lock file around [`TaskLog::catch_up`] and
//! [`TaskLog::append`]. Catching up reads only the bytes appended since the last read; when the
//! file was replaced (compaction by another process: new inode) or shrank, the fold restarts from
//! the beginning. The fold holds the file it read open, so its inode cannot be freed and handed
//! to a later compaction's file: an equal `(st_dev, st_ino)` really is the same file. (Without
//! that, ext4 reuses the number at once, and a reader could take a compacted log for the one it
//! had read and skip or misread the changes in it.) Compaction refuses while bytes past the last
//! record exist, since a rename would drop them.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use bernstein_protocol::pyjson::{Dialect, Object, Value};

use super::fsio::{self, FILE_MODE};
use super::index::{Index, Location, Meta};
use super::record::{EVIDENCE_KEY, StoredTask};
use crate::error::Error;
use crate::model::TaskId;

/// Key of a seal line: `{"torn_tail": [offset, length]}` voids the bytes it names.
const SEAL_KEY: &str = "torn_tail";
/// How a seal line starts, so a reader can tell one without parsing every line twice.
const SEAL_PREFIX: &[u8] = b"{\"torn_tail\": ";
/// Key of an evidence marker line: `{"evidence_written": end}` says the evidence of the
/// transaction ending at byte `end` is written.
const EVIDENCE_WRITTEN_KEY: &str = "evidence_written";

/// The longest line the reader accepts, newline included (16 MiB). A record holds at most a
/// few hundred KiB of text even with a large plan document as owed evidence; a longer line is
/// refused as corrupt rather than read into memory.
pub const MAX_LINE_BYTES: usize = 16 << 20;
/// How much of the log a catch-up reads at a time; a longer line or transaction doubles it, up
/// to [`MAX_TRANSACTION_BYTES`].
const READ_CHUNK: usize = 1 << 20;
/// The most a catch-up holds in memory at once: one whole multi-record transaction (a cascade
/// over many tasks) plus the line after it (256 MiB).
const MAX_TRANSACTION_BYTES: usize = 256 << 20;
/// Full records kept in memory after being read or written, most recent first.
const CACHE_CAPACITY: usize = 128;

/// Crash debris found at the end of the task log: bytes of a write that never completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Where the debris starts (the end of the last complete record or transaction).
    pub offset: u64,
    /// How many bytes it spans (for a sealed tear, including the newline the seal added).
    pub length: u64,
    /// Whether a writer has dealt with it: sealed in place by an append (the bytes stay, voided
    /// by the seal line after them) or dropped by a compaction.
    pub removed: bool,
}

/// What this process read from its task log, and how often it synced it, for tests and
/// benchmarks: catching up must read only what other processes appended, and concurrent
/// mutations share one `fdatasync`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogReadStats {
    /// Bytes read by catch-ups (appended records; a transaction cut by a read chunk is read
    /// again by the next chunk).
    pub catch_up_bytes: u64,
    /// Bytes re-read to check that the last line this process knows is still in place.
    pub check_bytes: u64,
    /// Catch-ups that started over from the beginning of the file after having read it: the
    /// file was replaced (a compaction), shrank, or its known prefix changed.
    pub full_rereads: u64,
    /// Of those, the ones caused by a changed prefix on the same file (a rewrite in place).
    pub prefix_changes: u64,
    /// Full records read back from the log on demand (index hits that missed the cache).
    pub record_loads: u64,
    /// `fdatasync`s of the log by this process's mutations (one per group of mutations).
    pub syncs: u64,
}

/// Evidence a committed transaction owes: what its last record carries under `evidence`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OwedEvidence {
    /// End offset of the transaction in the log file (the marker line names it).
    pub(crate) end: u64,
    /// 1-based line of the transaction's last record.
    pub(crate) line: u64,
    /// `{"journal": [...], "audit": [...], "plan": {...}}`, each part optional.
    pub(crate) evidence: Object,
}

/// A transaction that owes evidence: its end, and the line carrying the evidence (read back
/// when the evidence is settled, so the index does not hold it).
#[derive(Debug, Clone, Copy, PartialEq)]
struct OwedAt {
    end: u64,
    at: Location,
}

/// The last line before `consumed`, to check on the next catch-up that the file still starts
/// with what this process read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LineStamp {
    offset: u64,
    len: u32,
    hash: u64,
}

fn line_hash(bytes: &[u8]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// A small cache of full records by creation slot, each tagged with the offset it was read at,
/// so a newer snapshot never hits an older copy.
#[derive(Debug, Default)]
struct RecordCache {
    records: HashMap<usize, (u64, StoredTask)>,
    order: VecDeque<usize>,
}

impl RecordCache {
    fn get(&self, slot: usize, offset: u64) -> Option<StoredTask> {
        self.records
            .get(&slot)
            .filter(|(at, _)| *at == offset)
            .map(|(_, stored)| stored.clone())
    }

    fn put(&mut self, slot: usize, offset: u64, stored: StoredTask) {
        if self.records.insert(slot, (offset, stored)).is_none() {
            self.order.push_back(slot);
        }
        while self.order.len() > CACHE_CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.records.remove(&old);
            }
        }
    }

    fn clear(&mut self) {
        self.records.clear();
        self.order.clear();
    }
}

/// A parsed line of the log.
enum Parsed {
    Blank,
    Marker(u64),
    Record {
        stored: Box<StoredTask>,
        batch: Option<(usize, usize)>,
        evidence: Option<Object>,
    },
}

fn parse_line(text: &str) -> Result<Parsed, String> {
    if text.is_empty() {
        return Ok(Parsed::Blank);
    }
    let value = Value::parse(text).map_err(|e| format!("not JSON: {e:?}"))?;
    let record = value
        .as_object()
        .ok_or_else(|| "not a JSON object".to_owned())?;
    if !record.contains_key("id")
        && let Some(marker) = record.get(EVIDENCE_WRITTEN_KEY)
    {
        return marker
            .as_i64()
            .and_then(|n| u64::try_from(n).ok())
            .map(Parsed::Marker)
            .ok_or_else(|| "an evidence marker without an offset".to_owned());
    }
    let evidence = match record.get(EVIDENCE_KEY) {
        None => None,
        Some(Value::Object(evidence)) => Some(evidence.clone()),
        Some(_) => return Err("evidence: must be an object".to_owned()),
    };
    let (stored, batch) = StoredTask::from_record(record).map_err(|problems| {
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    Ok(Parsed::Record {
        stored: Box::new(stored),
        batch,
        evidence,
    })
}

/// A line as the index build reads it.
enum IndexLine {
    Blank,
    Marker(u64),
    Record {
        meta: Meta,
        batch: Option<(usize, usize)>,
        has_evidence: bool,
        /// The evidence object, when kept for verification.
        evidence: Option<Object>,
    },
}

/// Reads `text` for the index: the fast path (module `scan`) when it applies, the full reader
/// otherwise (which also words every refusal).
fn index_line(text: &str, keep_evidence: bool) -> Result<IndexLine, String> {
    if text.is_empty() {
        return Ok(IndexLine::Blank);
    }
    if let Some(fast) = super::scan::record(text) {
        let evidence = match fast.evidence.filter(|_| keep_evidence) {
            Some(raw) => Some(
                Value::parse(raw)
                    .ok()
                    .and_then(|value| value.as_object().cloned())
                    .ok_or_else(|| "evidence: must be an object".to_owned())?,
            ),
            None => None,
        };
        return Ok(IndexLine::Record {
            meta: fast.meta,
            batch: fast.batch,
            has_evidence: fast.evidence.is_some(),
            evidence,
        });
    }
    Ok(match parse_line(text)? {
        Parsed::Blank => IndexLine::Blank,
        Parsed::Marker(end) => IndexLine::Marker(end),
        Parsed::Record {
            stored,
            batch,
            evidence,
        } => IndexLine::Record {
            meta: Meta::of(&stored.task),
            batch,
            has_evidence: evidence.is_some(),
            evidence: evidence.filter(|_| keep_evidence),
        },
    })
}

/// A record of a transaction being collected.
struct Pending {
    meta: Meta,
    at: Location,
}

/// The index of the task log, plus where reading stopped.
#[derive(Debug, Default)]
pub(crate) struct TaskLog {
    path: PathBuf,
    /// The file the index was read from, held open. While a descriptor holds it, its inode
    /// cannot be freed, so no later file at the same path (a compaction's rename) can reuse its
    /// number: `(st_dev, st_ino)` equality with the path's current file then really means the
    /// same file. Full records are read back from it by offset.
    file: Option<File>,
    /// `(st_dev, st_ino)` of [`TaskLog::file`].
    identity: Option<(u64, u64)>,
    /// End offset of the last committed record.
    consumed: u64,
    /// Lines (including blank ones) before `consumed`, for line numbers in errors.
    lines: u64,
    /// The last line before `consumed`.
    last_line: Option<LineStamp>,
    /// Records folded since the file was last read from its start.
    records: u64,
    index: Index,
    cache: RefCell<RecordCache>,
    stats: RefCell<LogReadStats>,
    /// Debris after `consumed`, as seen by the last catch-up.
    torn: Option<TornTail>,
    /// Every tear this process has seen, in the order it saw them.
    tears_seen: Vec<TornTail>,
    /// Transactions whose evidence no marker line says is written, oldest first.
    owed: Vec<OwedAt>,
    /// Every transaction's evidence, when kept for verification.
    history: Option<Vec<OwedEvidence>>,
    /// The file's length when the last write began (debris a lockless writer left included).
    last_write_from: u64,
}

impl TaskLog {
    /// An empty fold of the log at `path`; nothing is read until [`TaskLog::catch_up`].
    pub(crate) fn new(path: PathBuf) -> TaskLog {
        TaskLog {
            path,
            ..TaskLog::default()
        }
    }

    /// An empty fold that also keeps the evidence of every transaction it reads.
    pub(crate) fn keeping_history(path: PathBuf) -> TaskLog {
        TaskLog {
            history: Some(Vec::new()),
            ..TaskLog::new(path)
        }
    }

    /// The index of every task.
    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    /// The current snapshot of `id`, read back from the log unless cached.
    pub(crate) fn load(&self, id: &TaskId) -> Result<Option<StoredTask>, Error> {
        match self.index.slot(id) {
            Some(slot) => self.load_slot(slot, true).map(Some),
            None => Ok(None),
        }
    }

    /// The current snapshot of the task at creation position `slot`.
    pub(crate) fn load_slot(&self, slot: usize, cache: bool) -> Result<StoredTask, Error> {
        let at = self.index.location(slot);
        if let Some(stored) = self.cache.borrow().get(slot, at.offset) {
            return Ok(stored);
        }
        let corrupt = |problem: String| Error::CorruptStore {
            path: self.path.clone(),
            line: Some(at.line),
            problem,
        };
        let Some(file) = &self.file else {
            return Err(corrupt("the indexed log file is not open".to_owned()));
        };
        let mut bytes = vec![0u8; at.len as usize];
        file.read_exact_at(&mut bytes, at.offset)
            .map_err(|e| Error::storage("read a record of", &self.path, &e))?;
        self.stats.borrow_mut().record_loads += 1;
        let text = std::str::from_utf8(&bytes)
            .map_err(|e| corrupt(format!("not UTF-8: {e}")))?
            .trim();
        let Parsed::Record { stored, .. } = parse_line(text).map_err(&corrupt)? else {
            return Err(corrupt("the indexed line is no longer a record".to_owned()));
        };
        if stored.task.id != self.index.ids()[slot] {
            return Err(corrupt(format!(
                "the indexed line now holds task {}, not {}; the log changed under the store",
                stored.task.id,
                self.index.ids()[slot]
            )));
        }
        if cache {
            self.cache
                .borrow_mut()
                .put(slot, at.offset, (*stored).clone());
        }
        Ok(*stored)
    }

    /// How many tasks the log holds.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// How many records were folded since the file was last read from its start.
    pub(crate) fn records(&self) -> u64 {
        self.records
    }

    /// Lines before the end of the last complete record.
    pub(crate) fn lines(&self) -> u64 {
        self.lines
    }

    /// Every tear this process has seen.
    pub(crate) fn tears_seen(&self) -> &[TornTail] {
        &self.tears_seen
    }

    /// What this fold read so far.
    pub(crate) fn stats(&self) -> LogReadStats {
        *self.stats.borrow()
    }

    /// Whether some transaction's evidence is not marked written.
    pub(crate) fn owes(&self) -> bool {
        !self.owed.is_empty()
    }

    /// Transactions whose evidence is not marked written, oldest first, read back from the
    /// lines that carry it.
    pub(crate) fn owed(&self) -> Result<Vec<OwedEvidence>, Error> {
        self.owed
            .iter()
            .map(|owed| {
                let corrupt = |problem: String| Error::CorruptStore {
                    path: self.path.clone(),
                    line: Some(owed.at.line),
                    problem,
                };
                let file = self
                    .file
                    .as_ref()
                    .ok_or_else(|| corrupt("the indexed log file is not open".to_owned()))?;
                let mut bytes = vec![0u8; owed.at.len as usize];
                file.read_exact_at(&mut bytes, owed.at.offset)
                    .map_err(|e| Error::storage("read owed evidence in", &self.path, &e))?;
                let text = std::str::from_utf8(&bytes)
                    .map_err(|e| corrupt(format!("not UTF-8: {e}")))?
                    .trim();
                match parse_line(text).map_err(&corrupt)? {
                    Parsed::Record {
                        evidence: Some(evidence),
                        ..
                    } => Ok(OwedEvidence {
                        end: owed.end,
                        line: owed.at.line,
                        evidence,
                    }),
                    _ => Err(corrupt(
                        "the line no longer carries the evidence it owed".to_owned(),
                    )),
                }
            })
            .collect()
    }

    /// The evidence of every transaction read, for a fold made with
    /// [`TaskLog::keeping_history`].
    pub(crate) fn history(&self) -> &[OwedEvidence] {
        self.history.as_deref().unwrap_or_default()
    }

    fn reset(&mut self) {
        let history = self.history.as_ref().map(|_| Vec::new());
        let stats = self.stats();
        *self = TaskLog {
            history,
            tears_seen: std::mem::take(&mut self.tears_seen),
            stats: RefCell::new(stats),
            ..TaskLog::new(std::mem::take(&mut self.path))
        };
    }

    fn apply(&mut self, meta: Meta, at: Location) {
        self.index.apply(meta, at);
        self.records += 1;
    }

    fn owe(&mut self, end: u64, at: Location, evidence: Option<Object>) {
        if let (Some(history), Some(evidence)) = (&mut self.history, evidence) {
            history.push(OwedEvidence {
                end,
                line: at.line,
                evidence,
            });
        }
        self.owed.push(OwedAt { end, at });
    }

    fn note_tear(&mut self, tear: TornTail) {
        if self.torn != Some(tear) {
            self.tears_seen.push(tear);
        }
        self.torn = Some(tear);
    }

    /// Whether the last line this fold read is still where it was, byte for byte: the cheap
    /// check that the file was not truncated and rewritten in place while we held an offset.
    fn prefix_intact(&self, file: &File) -> Result<bool, Error> {
        let Some(stamp) = self.last_line else {
            return Ok(true);
        };
        let mut bytes = vec![0u8; stamp.len as usize];
        match file.read_exact_at(&mut bytes, stamp.offset) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(Error::storage("read", &self.path, &e)),
        }
        self.stats.borrow_mut().check_bytes += u64::from(stamp.len);
        Ok(line_hash(&bytes) == stamp.hash)
    }

    /// Folds every record appended since the last call, reading only the appended bytes once
    /// the known prefix checks out (same file, the last known line unchanged); otherwise the
    /// index is rebuilt from the start of the file. Fails on a corrupt line, having folded the
    /// records before it.
    pub(crate) fn catch_up(&mut self) -> Result<(), Error> {
        self.catch_up_within(None).map(drop)
    }

    /// [`TaskLog::catch_up`], declining (`false`, nothing read or changed) with a `max_bytes`
    /// bound when the log must be read again from the start (replaced, shortened or rewritten)
    /// or more than `max_bytes` were appended since the last call.
    pub(crate) fn catch_up_within(&mut self, max_bytes: Option<u64>) -> Result<bool, Error> {
        let file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if self.identity.is_some() {
                    if max_bytes.is_some() {
                        return Ok(false);
                    }
                    self.reset();
                    self.stats.borrow_mut().full_rereads += 1;
                }
                return Ok(true);
            }
            Err(e) => return Err(Error::storage("open", &self.path, &e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| Error::storage("stat", &self.path, &e))?;
        let identity = (meta.dev(), meta.ino());
        let len = meta.len();
        let known = self.identity.is_some();
        let replaced = self.identity != Some(identity) || len < self.consumed;
        let changed = !replaced && !self.prefix_intact(&file)?;
        if let Some(max) = max_bytes
            && (replaced || changed || len - self.consumed > max)
        {
            return Ok(false);
        }
        if changed {
            tracing::warn!(
                target: "bernstein_tasks::embedded",
                path = %self.path.display(),
                "the task log changed before offset {} since it was last read (rewritten in \
                 place); reading it again from the start",
                self.consumed
            );
        }
        if replaced || changed {
            self.reset();
            self.identity = Some(identity);
            let mut stats = self.stats.borrow_mut();
            if known {
                stats.full_rereads += 1;
            }
            if changed {
                stats.prefix_changes += 1;
            }
        }
        self.file = Some(file);
        if len == self.consumed {
            self.torn = None;
            return Ok(true);
        }
        self.read_to(len).map(|()| true)
    }

    /// Reads and folds `[consumed, len)` in bounded chunks.
    fn read_to(&mut self, len: u64) -> Result<(), Error> {
        let mut chunk = READ_CHUNK;
        let mut buffer = Vec::new();
        loop {
            let remaining = len.saturating_sub(self.consumed);
            if remaining == 0 {
                self.torn = None;
                return Ok(());
            }
            let want = usize::try_from(remaining).unwrap_or(usize::MAX).min(chunk);
            let at_eof = want as u64 == remaining;
            buffer.resize(want, 0);
            let Some(file) = &self.file else {
                return Ok(());
            };
            file.read_exact_at(&mut buffer, self.consumed)
                .map_err(|e| Error::storage("read", &self.path, &e))?;
            self.stats.borrow_mut().catch_up_bytes += want as u64;
            let mut committed = 0usize;
            let result = self.fold_from(&buffer, &mut committed, at_eof);
            // Records before a corrupt line stay folded: they were committed.
            if committed > 0 {
                self.stamp_last_line(&buffer[..committed]);
            }
            self.consumed += committed as u64;
            result?;
            if at_eof {
                if buffer.len() > committed {
                    self.note_tear(TornTail {
                        offset: self.consumed,
                        length: (buffer.len() - committed) as u64,
                        removed: false,
                    });
                } else {
                    self.torn = None;
                }
                return Ok(());
            }
            if committed == 0 {
                // No progress: a line, or a transaction, longer than the chunk.
                let longest_line = buffer
                    .split(|&b| b == b'\n')
                    .map(<[u8]>::len)
                    .max()
                    .unwrap_or(0);
                if longest_line >= MAX_LINE_BYTES || chunk >= MAX_TRANSACTION_BYTES {
                    let line = self.lines
                        + 1
                        + buffer
                            .split(|&b| b == b'\n')
                            .take_while(|line| line.len() < MAX_LINE_BYTES)
                            .count() as u64;
                    return Err(Error::CorruptStore {
                        path: self.path.clone(),
                        line: Some(line),
                        problem: if longest_line >= MAX_LINE_BYTES {
                            format!(
                                "a line longer than {MAX_LINE_BYTES} bytes; refusing to read it \
                                 into memory"
                            )
                        } else {
                            format!(
                                "a transaction longer than {MAX_TRANSACTION_BYTES} bytes; \
                                 refusing to read it into memory"
                            )
                        },
                    });
                }
                chunk = (chunk * 2).min(MAX_TRANSACTION_BYTES);
            }
        }
    }

    /// Remembers the last line of `committed` (bytes ending at the new `consumed`).
    fn stamp_last_line(&mut self, committed: &[u8]) {
        let body = &committed[..committed.len().saturating_sub(1)];
        let start = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let line = &committed[start..];
        self.last_line = Some(LineStamp {
            offset: self.consumed + start as u64,
            len: u32::try_from(line.len()).unwrap_or(u32::MAX),
            hash: line_hash(line),
        });
    }

    /// When the line starting at `at` is a seal voiding exactly `[from, to)` (absolute offsets),
    /// the end of the seal line (relative to `bytes`) and the voided length.
    fn seal_at(bytes: &[u8], at: usize, from: u64, to: u64) -> Option<(usize, u64)> {
        let rest = bytes.get(at..)?;
        if !rest.starts_with(SEAL_PREFIX) {
            return None;
        }
        let newline = rest.iter().position(|&b| b == b'\n')?;
        let text = std::str::from_utf8(&rest[..newline]).ok()?;
        let value = Value::parse(text).ok()?;
        let pair = value.as_object()?.get(SEAL_KEY)?.as_array()?;
        let [Value::Int(offset), Value::Int(length)] = pair else {
            return None;
        };
        let (offset, length) = (offset.as_u64()?, length.as_u64()?);
        (offset == from && offset.checked_add(length) == Some(to))
            .then_some((at + newline + 1, length))
    }

    /// Folds the complete records and transactions of `bytes` (read from `consumed`),
    /// advancing `committed` past each. Unless `at_eof`, a line is taken only once the line
    /// after it is complete too, since that one may be a seal voiding it; the rest is read
    /// again by the next chunk.
    fn fold_from(
        &mut self,
        bytes: &[u8],
        committed: &mut usize,
        at_eof: bool,
    ) -> Result<(), Error> {
        let origin = self.consumed;
        let find = |from: usize| {
            bytes
                .get(from..)
                .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
                .map(|i| from + i + 1)
        };
        // A transaction being collected: its records, its declared size.
        let mut pending: Vec<Pending> = Vec::new();
        let mut pending_size = 0usize;
        let mut start = 0usize;
        let mut line_end = find(0);
        while let Some(end) = line_end {
            let next_end = find(end);
            if next_end.is_none() && !at_eof {
                return Ok(());
            }
            // Debris a later writer sealed: everything from the last commit to here is void.
            let void_from = origin + *committed as u64;
            if let Some((seal_end, length)) =
                Self::seal_at(bytes, end, void_from, origin + end as u64)
            {
                let voided = bytes[*committed..seal_end]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count();
                self.lines += voided as u64;
                pending.clear();
                let tear = TornTail {
                    offset: void_from,
                    length,
                    removed: true,
                };
                if !self.tears_seen.contains(&tear) {
                    self.tears_seen.push(tear);
                }
                *committed = seal_end;
                start = seal_end;
                line_end = find(start);
                continue;
            }
            let line_number = self.lines + pending.len() as u64 + 1;
            let corrupt = |problem: String| Error::CorruptStore {
                path: self.path.clone(),
                line: Some(line_number),
                problem,
            };
            if end - start > MAX_LINE_BYTES {
                return Err(corrupt(format!(
                    "a line of {} bytes, longer than {MAX_LINE_BYTES}; refusing to parse it",
                    end - start
                )));
            }
            let text = std::str::from_utf8(&bytes[start..end - 1])
                .map_err(|e| corrupt(format!("not UTF-8: {e}")))?
                .trim();
            let at = Location {
                offset: origin + start as u64,
                len: u32::try_from(end - start).unwrap_or(u32::MAX),
                line: line_number,
            };
            match index_line(text, self.history.is_some()).map_err(&corrupt)? {
                IndexLine::Blank => {
                    if !pending.is_empty() {
                        return Err(corrupt(
                            "blank line inside a multi-record transaction".to_owned(),
                        ));
                    }
                    self.lines += 1;
                    *committed = end;
                }
                IndexLine::Marker(written) => {
                    if !pending.is_empty() {
                        return Err(corrupt(
                            "an evidence marker inside a multi-record transaction".to_owned(),
                        ));
                    }
                    self.owed.retain(|owed| owed.end != written);
                    self.lines += 1;
                    *committed = end;
                }
                IndexLine::Record {
                    meta,
                    batch,
                    has_evidence,
                    evidence,
                } => {
                    match batch {
                        None if pending.is_empty() => {
                            self.apply(meta, at);
                            self.lines += 1;
                            *committed = end;
                        }
                        None => {
                            return Err(corrupt(format!(
                                "a transaction of {pending_size} records ends after {}",
                                pending.len()
                            )));
                        }
                        Some((index, size)) => {
                            let expected = pending.len() + 1;
                            if index != expected || (index > 1 && size != pending_size) {
                                return Err(corrupt(format!(
                                    "transaction record {index}/{size} where record {expected} \
                                     was due"
                                )));
                            }
                            if has_evidence && index != size {
                                return Err(corrupt(format!(
                                    "evidence on transaction record {index}/{size}, not the last"
                                )));
                            }
                            pending_size = size;
                            pending.push(Pending { meta, at });
                            if index == size {
                                self.lines += pending.len() as u64;
                                for record in std::mem::take(&mut pending) {
                                    self.apply(record.meta, record.at);
                                }
                                *committed = end;
                            }
                        }
                    }
                    if has_evidence && pending.is_empty() {
                        self.owe(origin + end as u64, at, evidence);
                    }
                }
            }
            start = end;
            line_end = next_end;
        }
        Ok(())
    }

    /// Appends `records` (one transaction), with the evidence it owes on its last line: seals
    /// crash debris first, writes every line in one `write(2)`, and fsyncs the directory when
    /// the file is new; with `sync`, `fdatasync`s the file too, and otherwise the caller must
    /// call [`TaskLog::sync`] before anything relies on the change (a group of transactions
    /// shares that one sync). Call with the exclusive lock held, right after
    /// [`TaskLog::catch_up`]. On failure the bytes this call wrote are cut off again, so the
    /// change does not take effect. Returns the transaction's end offset when it owes evidence.
    pub(crate) fn append(
        &mut self,
        records: Vec<StoredTask>,
        evidence: Option<Object>,
        sync: bool,
    ) -> Result<Option<u64>, Error> {
        if records.is_empty() {
            return Ok(None);
        }
        let size = records.len();
        let mut bytes = String::new();
        let mut spans = Vec::with_capacity(size);
        for (index, stored) in records.iter().enumerate() {
            let batch = (size > 1).then_some((index + 1, size));
            let owed = evidence.as_ref().filter(|_| index + 1 == size);
            let start = bytes.len();
            bytes.push_str(&stored.to_line_with_evidence(batch, owed));
            spans.push((start, bytes.len() - start));
        }
        let (body_start, end) = self.write_lines(&bytes, size as u64, sync)?;
        if sync {
            self.stats.borrow_mut().syncs += 1;
        }
        let first_line = self.lines - size as u64 + 1;
        let mut last = None;
        for (index, (stored, (start, len))) in records.into_iter().zip(spans).enumerate() {
            let at = Location {
                offset: body_start + start as u64,
                len: u32::try_from(len).unwrap_or(u32::MAX),
                line: first_line + index as u64,
            };
            self.apply(Meta::of(&stored.task), at);
            if let Some(slot) = self.index.slot(&stored.task.id) {
                self.cache.borrow_mut().put(slot, at.offset, stored);
            }
            last = Some(at);
        }
        Ok(match (evidence, last) {
            (Some(evidence), Some(at)) => {
                self.owe(end, at, self.history.is_some().then_some(evidence));
                Some(end)
            }
            _ => None,
        })
    }

    /// Records that the evidence of the transaction ending at `end` is written. The marker is
    /// not fsynced: losing it to a power cut only makes the next process check that evidence
    /// again, which is idempotent. Call with the exclusive lock held.
    pub(crate) fn mark_evidence_written(&mut self, end: u64) -> Result<(), Error> {
        let mut line =
            Value::Object(Object::new().with(EVIDENCE_WRITTEN_KEY, end)).dumps(Dialect::PY_ROW);
        line.push('\n');
        self.write_lines(&line, 1, false)?;
        self.owed.retain(|owed| owed.end != end);
        Ok(())
    }

    /// `fdatasync`s the log, making every transaction [`TaskLog::append`]ed without `sync`
    /// durable. Call with the exclusive lock still held since those appends.
    pub(crate) fn sync(&mut self) -> Result<(), Error> {
        let file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|e| Error::storage("open", &self.path, &e))?;
        file.sync_data()
            .map_err(|e| Error::storage("fdatasync", &self.path, &e))?;
        self.stats.borrow_mut().syncs += 1;
        Ok(())
    }

    /// The file's length when the last [`TaskLog::append`] began writing: cutting the file back
    /// to it takes back that append and every later one, and nothing another writer left
    /// before it.
    pub(crate) fn last_write_from(&self) -> u64 {
        self.last_write_from
    }

    /// Cuts the log back to `end` (a [`TaskLog::last_write_from`]), best effort, after appends
    /// whose [`TaskLog::sync`] failed, and forgets what was folded, so the next catch-up reads
    /// the file as it is rather than trusting changes that may not be on disk.
    pub(crate) fn take_back(&mut self, end: u64) {
        if let Ok(file) = OpenOptions::new().write(true).open(&self.path) {
            let _ = file.set_len(end).and_then(|()| file.sync_data());
        }
        self.reset();
    }

    /// Appends `body` (`body_lines` complete lines) after sealing any debris, and returns where
    /// the body starts and the new end of the log.
    ///
    /// Bytes past `consumed` are never cut: the reference server appends to this log without
    /// taking the store lock, so they may be another writer's. Complete records among them are
    /// folded first; what remains is a tear, which a seal line voids in place.
    fn write_lines(
        &mut self,
        body: &str,
        body_lines: u64,
        sync: bool,
    ) -> Result<(u64, u64), Error> {
        let existed = self.path.exists();
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(FILE_MODE)
            .open(&self.path)
            .map_err(|e| Error::storage("open", &self.path, &e))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::storage("stat", &self.path, &e))?;
        let identity = (meta.dev(), meta.ino());
        if existed && self.identity != Some(identity) {
            // Only a writer ignoring the lock file can replace the log between our catch-up and
            // this open; refuse rather than append to a file we have not read.
            return Err(Error::Storage {
                operation: "append to",
                path: self.path.clone(),
                kind: ErrorKind::Other,
                message: "the file was replaced while the store lock was held".to_owned(),
            });
        }
        if meta.len() > self.consumed && self.torn.is_none() {
            // Something appended after our catch-up without the lock: fold what is complete.
            self.catch_up()?;
        }
        let mut before = file
            .metadata()
            .map_err(|e| Error::storage("stat", &self.path, &e))?
            .len();
        if before < self.consumed {
            return Err(Error::Storage {
                operation: "append to",
                path: self.path.clone(),
                kind: ErrorKind::Other,
                message: "the file shrank while the store lock was held".to_owned(),
            });
        }
        let mut bytes = String::new();
        let mut lines = body_lines;
        if before > self.consumed {
            let debris_len = before - self.consumed;
            if debris_len > MAX_LINE_BYTES as u64 {
                return Err(Error::CorruptStore {
                    path: self.path.clone(),
                    line: Some(self.lines + 1),
                    problem: format!(
                        "{debris_len} bytes past the last complete record, more than a line \
                         may hold ({MAX_LINE_BYTES}); refusing to seal them"
                    ),
                });
            }
            let mut debris = vec![0u8; usize::try_from(debris_len).unwrap_or(0)];
            file.read_exact_at(&mut debris, self.consumed)
                .map_err(|e| Error::storage("read crash debris in", &self.path, &e))?;
            let mut length = debris.len() as u64;
            lines += debris.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
            if debris.last() != Some(&b'\n') {
                bytes.push('\n');
                length += 1;
                lines += 1;
            }
            let seal = Object::new().with(SEAL_KEY, vec![self.consumed, length]);
            bytes.push_str(&Value::Object(seal).dumps(Dialect::PY_ROW));
            bytes.push('\n');
            if let Some(tear) = self.torn.take() {
                self.tears_seen.push(TornTail {
                    removed: true,
                    ..tear
                });
            }
        }
        let body_start = before + bytes.len() as u64;
        self.last_write_from = before;
        bytes.push_str(body);
        let mut file = file;
        let written = file
            .write_all(bytes.as_bytes())
            .and_then(|()| if sync { file.sync_data() } else { Ok(()) });
        if let Err(e) = written {
            // Best effort: take back what this call wrote (and only that), so a change we
            // report as failed is not folded by the next reader.
            let _ = file.set_len(before).and_then(|()| file.sync_data());
            return Err(Error::storage("append to", &self.path, &e));
        }
        // Not only when this call created the log: its creator may have died before fsyncing
        // the directory, and nothing else would. Once per process and log, then free.
        bernstein_journal::durable::ensure_entry_durable(&self.path)
            .map_err(|e| Error::storage("sync the directory of", &self.path, &e))?;
        before += bytes.len() as u64;
        self.identity = Some(identity);
        if self.file.is_none() {
            self.file = Some(file);
        }
        self.consumed = before - bytes.len() as u64;
        self.stamp_last_line(bytes.as_bytes());
        self.consumed = before;
        self.lines += lines;
        Ok((body_start, before))
    }

    /// Rewrites the log as one snapshot per task, in creation order, through a temporary file,
    /// fsync, atomic rename and directory fsync, streaming record by record (each read back
    /// from the current log), so memory stays bounded whatever the log's size. Call with the
    /// exclusive lock held, right after [`TaskLog::catch_up`], and only when no transaction
    /// owes evidence (its record of what is owed would be lost). Returns the bytes before and
    /// after.
    pub(crate) fn compact(&mut self) -> Result<(u64, u64), Error> {
        if !self.owed.is_empty() {
            return Err(Error::Storage {
                operation: "compact",
                path: self.path.clone(),
                kind: ErrorKind::Other,
                message: format!(
                    "{} transaction(s) still owe evidence that could not be written",
                    self.owed.len()
                ),
            });
        }
        let before = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        if before != self.consumed {
            // Debris, or bytes of a writer that takes no lock: a rewrite would drop them.
            return Err(Error::Storage {
                operation: "compact",
                path: self.path.clone(),
                kind: ErrorKind::Other,
                message: "the log holds bytes past its last complete record".to_owned(),
            });
        }
        let mut spans: Vec<Location> = Vec::with_capacity(self.index.len());
        let mut read_error = None;
        let mut last = (0u64, String::new());
        fsio::write_atomic_with(&self.path, |out| {
            let mut offset = 0u64;
            for slot in 0..self.index.len() {
                let stored = match self.load_slot(slot, false) {
                    Ok(stored) => stored,
                    Err(e) => {
                        read_error = Some(e);
                        return Err(std::io::Error::other("a record could not be read back"));
                    }
                };
                let line = stored.to_line(None);
                out.write_all(line.as_bytes())?;
                spans.push(Location {
                    offset,
                    len: u32::try_from(line.len()).unwrap_or(u32::MAX),
                    line: slot as u64 + 1,
                });
                offset += line.len() as u64;
                last = (offset - line.len() as u64, line);
            }
            Ok(())
        })
        .map_err(|e| read_error.take().unwrap_or(e))?;
        let file = File::open(&self.path).map_err(|e| Error::storage("open", &self.path, &e))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::storage("stat", &self.path, &e))?;
        if let Some(tear) = self.torn.take() {
            self.tears_seen.push(TornTail {
                removed: true,
                ..tear
            });
        }
        for (slot, at) in spans.into_iter().enumerate() {
            self.index.relocate(slot, at);
        }
        self.cache.borrow_mut().clear();
        self.file = Some(file);
        self.identity = Some((meta.dev(), meta.ino()));
        self.consumed = meta.len();
        self.last_line = (!last.1.is_empty()).then(|| LineStamp {
            offset: last.0,
            len: u32::try_from(last.1.len()).unwrap_or(u32::MAX),
            hash: line_hash(last.1.as_bytes()),
        });
        self.lines = self.index.len() as u64;
        self.records = self.index.len() as u64;
        Ok((before, meta.len()))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::lifecycle::TaskStatus;
    use crate::model::{NewTask, Task};

    fn snapshot(id: usize, version: u64) -> StoredTask {
        let mut task = Task::new(
            TaskId::parse(&format!("t{id}")).unwrap(),
            NewTask::new(format!("task {id}"), "é and \u{1F600} survive byte cuts"),
            1.5,
        )
        .unwrap();
        task.version = version;
        if version > 1 {
            task.status = TaskStatus::Claimed;
        }
        StoredTask::created(task)
    }

    /// The bytes of `transactions`, and the byte offset where each one ends.
    fn encode(transactions: &[Vec<StoredTask>]) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for records in transactions {
            let size = records.len();
            for (index, stored) in records.iter().enumerate() {
                let batch = (size > 1).then_some((index + 1, size));
                bytes.extend_from_slice(stored.to_line(batch).as_bytes());
            }
            ends.push(bytes.len());
        }
        (bytes, ends)
    }

    fn transactions() -> impl Strategy<Value = Vec<Vec<StoredTask>>> {
        proptest::collection::vec(proptest::collection::vec((0usize..6, 1u64..5), 1..4), 1..8)
            .prop_map(|txns| {
                txns.into_iter()
                    .map(|records| {
                        records
                            .into_iter()
                            .map(|(id, version)| snapshot(id, version))
                            .collect()
                    })
                    .collect()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Cutting the log at any byte folds exactly the transactions that ended before the
        /// cut, reports the rest as a tear, and an append cuts the tear away.
        #[test]
        fn a_cut_at_any_byte_folds_exactly_the_complete_transactions(
            transactions in transactions(),
            cut_fraction in 0.0f64..=1.0,
        ) {
            let (bytes, ends) = encode(&transactions);
            let cut = ((bytes.len() as f64) * cut_fraction) as usize;
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("tasks.jsonl");
            std::fs::write(&path, &bytes[..cut]).unwrap();

            let mut log = TaskLog::new(path.clone());
            log.catch_up().unwrap();
            let complete = ends.iter().take_while(|&&end| end <= cut).count();
            let mut expected: HashMap<TaskId, StoredTask> = HashMap::new();
            let mut order = Vec::new();
            for stored in transactions[..complete].iter().flatten() {
                if !expected.contains_key(&stored.task.id) {
                    order.push(stored.task.id.clone());
                }
                expected.insert(stored.task.id.clone(), stored.clone());
            }
            prop_assert_eq!(log.index().ids(), order.as_slice());
            for id in &order {
                // Compare as records: a read snapshot carries the defaults the line spelled out.
                prop_assert_eq!(
                    log.load(id).unwrap().map(|s| s.to_record(None)),
                    expected.get(id).map(|s| s.to_record(None))
                );
            }
            let committed = if complete == 0 { 0 } else { ends[complete - 1] };
            let tear = (cut > committed).then_some(TornTail {
                offset: committed as u64,
                length: (cut - committed) as u64,
                removed: false,
            });
            prop_assert_eq!(log.tears_seen().first().copied(), tear);

            log.append(vec![snapshot(9, 1)], None, true).unwrap();
            // The debris is sealed in place, never cut: it may be a lockless writer's.
            let after = std::fs::read(&path).unwrap();
            prop_assert_eq!(&after[..cut], &bytes[..cut]);
            let mut fresh = TaskLog::new(path);
            fresh.catch_up().unwrap();
            prop_assert_eq!(fresh.len(), order.len() + 1);
            prop_assert_eq!(fresh.index().contains(&snapshot(9, 1).task.id), true);
            let sealed: Vec<TornTail> = fresh.tears_seen().to_vec();
            match tear {
                None => prop_assert_eq!(sealed, vec![]),
                Some(tear) => {
                    prop_assert_eq!(sealed.len(), 1);
                    prop_assert_eq!(sealed[0].offset, tear.offset);
                    prop_assert!(sealed[0].removed);
                    let newline = usize::from(bytes[cut - 1] != b'\n');
                    prop_assert_eq!(sealed[0].length, tear.length + newline as u64);
                }
            }
            // A second append after the seal folds cleanly too.
            let mut again = TaskLog::new(fresh.path.clone());
            again.catch_up().unwrap();
            again.append(vec![snapshot(8, 1)], None, true).unwrap();
            let mut last = TaskLog::new(fresh.path.clone());
            last.catch_up().unwrap();
            prop_assert_eq!(last.len(), order.len() + 2);
        }
    }

    /// A log holding `bytes` in a new temporary directory (kept alive by the first item),
    /// caught up.
    fn caught_up(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf, TaskLog) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        std::fs::write(&path, bytes).unwrap();
        let mut log = TaskLog::new(path.clone());
        log.catch_up().unwrap();
        (dir, path, log)
    }

    fn id(n: usize) -> TaskId {
        TaskId::parse(&format!("t{n}")).unwrap()
    }

    /// Loads served from the record cache read nothing; it holds the last 128 records put,
    /// first in, first out.
    #[test]
    fn the_record_cache_serves_repeated_loads_and_keeps_the_last_128() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        let mut writer = TaskLog::new(path.clone());
        writer.catch_up().unwrap();
        writer
            .append((0..130).map(|n| snapshot(n, 1)).collect(), None, true)
            .unwrap();
        let mut log = TaskLog::new(path);
        log.catch_up().unwrap();
        let loads = |log: &TaskLog| log.stats().record_loads;
        for n in 0..130 {
            assert_eq!(log.load(&id(n)).unwrap().unwrap().task.id, id(n));
        }
        assert_eq!(loads(&log), 130);
        log.load(&id(129)).unwrap();
        log.load(&id(2)).unwrap();
        assert_eq!(loads(&log), 130, "the newest 128 are cached");
        log.load(&id(1)).unwrap();
        assert_eq!(loads(&log), 131, "the oldest were evicted");
    }

    /// A compaction moves records to new offsets, where an older copy in the cache could look
    /// current again; the cache is emptied, so a load after it reads the current version.
    #[test]
    fn a_compaction_empties_the_record_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        let mut ours = TaskLog::new(path.clone());
        ours.catch_up().unwrap();
        ours.append(vec![snapshot(0, 1)], None, true).unwrap();
        assert_eq!(ours.load(&id(0)).unwrap().unwrap().task.version, 1);
        let mut theirs = TaskLog::new(path);
        theirs.catch_up().unwrap();
        theirs.append(vec![snapshot(0, 2)], None, true).unwrap();
        ours.catch_up().unwrap();
        ours.compact().unwrap();
        assert_eq!(ours.load(&id(0)).unwrap().unwrap().task.version, 2);
    }

    /// Reading the log again from its start (it was replaced) keeps what this process saw and
    /// counted before: the tears it saw and its read statistics.
    #[test]
    fn a_full_reread_keeps_the_tears_seen_and_the_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        let (clean, _) = encode(&[vec![snapshot(0, 1)], vec![snapshot(1, 1)]]);
        let mut torn = clean.clone();
        torn.extend_from_slice(b"{\"id\": \"t2");
        std::fs::write(&path, &torn).unwrap();
        let mut log = TaskLog::new(path.clone());
        log.catch_up().unwrap();
        assert_eq!(log.tears_seen().len(), 1);
        log.load(&id(0)).unwrap();
        assert_eq!(log.stats().record_loads, 1);
        // A catch-up with nothing new checks the last complete line, and reads nothing else.
        let before = log.stats();
        log.catch_up().unwrap();
        let last_line = snapshot(1, 1).to_line(None);
        assert_eq!(
            log.stats().check_bytes - before.check_bytes,
            last_line.len() as u64,
            "the line and its newline"
        );
        let replacement = dir.path().join("replacement");
        std::fs::write(&replacement, &clean).unwrap();
        std::fs::rename(&replacement, &path).unwrap();
        log.catch_up().unwrap();
        let stats = log.stats();
        assert_eq!(
            (stats.full_rereads, stats.record_loads),
            (1, 1),
            "{stats:?}"
        );
        assert_eq!(log.tears_seen().len(), 1);
        assert_eq!(log.len(), 2);
    }

    /// A log removed after it was read is read again as empty; one that cannot be opened for
    /// a reason other than being absent is an error, never an empty log.
    #[test]
    fn a_log_that_cannot_be_opened_is_an_error() {
        let (bytes, _) = encode(&[vec![snapshot(0, 1)]]);
        let (_dir, path, mut log) = caught_up(&bytes);
        assert_eq!(log.len(), 1);
        // Removed, it is an empty log read again from nothing.
        std::fs::remove_file(&path).unwrap();
        log.catch_up().unwrap();
        assert_eq!((log.len(), log.stats().full_rereads), (0, 1));
        std::os::unix::fs::symlink(&path, &path).unwrap();
        assert!(log.catch_up().is_err());
    }

    /// A brief catch-up goes ahead when the bytes appended since the last look are at most
    /// its bound, however long the log already is, and declines beyond it, reading nothing.
    #[test]
    fn a_brief_catch_up_is_bounded_by_the_appended_bytes_alone() {
        let (bytes, _) = encode(&(0..20).map(|n| vec![snapshot(n, 1)]).collect::<Vec<_>>());
        let (_dir, path, mut log) = caught_up(&bytes);
        let (more, _) = encode(&[vec![snapshot(20, 1)]]);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, &more).unwrap();
        let appended = more.len() as u64;
        assert!(!log.catch_up_within(Some(appended - 1)).unwrap());
        assert_eq!(log.len(), 20);
        assert!(log.catch_up_within(Some(appended)).unwrap());
        assert_eq!(log.len(), 21);
    }

    /// A seal voids exactly the bytes it names: with their offset and length right, the fold
    /// skips them and goes on after the seal; a seal off by its length voids nothing, and the
    /// debris is then a corrupt line.
    #[test]
    fn a_seal_voids_exactly_the_bytes_it_names() {
        let fold = |length_error: u64| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("tasks.jsonl");
            let (first, _) = encode(&[vec![snapshot(0, 1)]]);
            let (second, _) = encode(&[vec![snapshot(1, 1)]]);
            let debris = b"{\"id\": \"t9\n";
            let seal = format!(
                "{{\"torn_tail\": [{}, {}]}}\n",
                first.len(),
                debris.len() as u64 + length_error
            );
            let bytes = [first, debris.to_vec(), seal.into_bytes(), second].concat();
            std::fs::write(&path, &bytes).unwrap();
            let mut log = TaskLog::new(path);
            log.catch_up().map(|_| log.index().ids().to_vec())
        };
        assert_eq!(fold(0).unwrap(), [id(0), id(1)]);
        assert!(matches!(fold(1), Err(Error::CorruptStore { .. })));
    }

    /// The line kept to check the prefix is the last complete record's, also after a catch-up
    /// that found only debris: a rewrite in place of that record is still noticed.
    #[test]
    fn debris_after_the_last_record_does_not_hide_a_rewrite_of_it() {
        let (bytes, _) = encode(&[vec![snapshot(0, 1)]]);
        let (_dir, path, mut log) = caught_up(&bytes);
        let mut torn = bytes.clone();
        torn.extend_from_slice(b"{\"id\": ");
        std::fs::write(&path, &torn).unwrap();
        log.catch_up().unwrap();
        assert_eq!(log.tears_seen().len(), 1);
        let rewritten = String::from_utf8(torn)
            .unwrap()
            .replacen("task 0", "task 7", 1);
        std::fs::write(&path, rewritten).unwrap();
        log.catch_up().unwrap();
        assert_eq!(log.stats().prefix_changes, 1, "{:?}", log.stats());
    }

    /// A corrupt line is named by its line in the file: blank lines and sealed debris count.
    #[test]
    fn corrupt_lines_are_numbered_counting_blank_lines_and_sealed_debris() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        let (first, _) = encode(&[vec![snapshot(0, 1)]]);
        let (second, _) = encode(&[vec![snapshot(1, 1)]]);
        let before_debris = first.len() + 1 + second.len();
        let debris = b"{\"id\": \"t9\n";
        let seal = format!("{{\"torn_tail\": [{before_debris}, {}]}}\n", debris.len());
        let bytes = [
            first,
            b"\n".to_vec(),
            second,
            debris.to_vec(),
            seal.into_bytes(),
            b"not a record\n".to_vec(),
        ]
        .concat();
        std::fs::write(&path, &bytes).unwrap();
        let mut log = TaskLog::new(path);
        let err = log.catch_up().unwrap_err();
        assert!(
            matches!(err, Error::CorruptStore { line: Some(6), .. }),
            "{err}"
        );
        assert_eq!(log.index().ids(), [id(0), id(1)]);
    }

    /// A transaction's records are numbered 1 to n with the same n throughout; a record out of
    /// turn, or one that changes n, is a corrupt line, never part of a transaction.
    #[test]
    fn a_transaction_out_of_turn_or_changing_its_size_is_corrupt() {
        let fold = |lines: &[String]| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("tasks.jsonl");
            let (after, _) = encode(&[vec![snapshot(5, 1)]]);
            let mut bytes = lines.concat().into_bytes();
            bytes.extend_from_slice(&after);
            std::fs::write(&path, &bytes).unwrap();
            let mut log = TaskLog::new(path);
            log.catch_up().map(|_| log.len())
        };
        let line = |n: usize, batch: (usize, usize)| snapshot(n, 1).to_line(Some(batch));
        assert_eq!(fold(&[line(0, (1, 2)), line(1, (2, 2))]).unwrap(), 3);
        for lines in [
            [line(0, (2, 2)), line(1, (1, 2))],
            [line(0, (1, 3)), line(1, (2, 2))],
        ] {
            let err = fold(&lines).unwrap_err();
            assert!(
                matches!(&err, Error::CorruptStore { problem, .. } if problem.contains("was due")),
                "{err}"
            );
        }
    }

    /// A line of exactly the cap (its newline included) is still parsed; one byte more is
    /// refused unparsed.
    #[test]
    fn a_line_at_the_cap_is_parsed_and_one_byte_more_is_refused() {
        let problem = |line_bytes: usize| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("tasks.jsonl");
            let (mut bytes, _) = encode(&[vec![snapshot(0, 1)]]);
            bytes.extend(std::iter::repeat_n(b'x', line_bytes - 1));
            bytes.push(b'\n');
            std::fs::write(&path, &bytes).unwrap();
            match TaskLog::new(path).catch_up() {
                Err(Error::CorruptStore { line, problem, .. }) => {
                    assert_eq!(line, Some(2));
                    problem
                }
                other => panic!("{other:?}"),
            }
        };
        assert!(!problem(MAX_LINE_BYTES).contains("longer than"));
        assert!(problem(MAX_LINE_BYTES + 1).contains("longer than"));
    }

    /// An append numbers its records' lines after those already in the log, so the evidence
    /// a transaction owes names the line of its last record; each durable append counts one
    /// sync.
    #[test]
    fn appended_records_are_numbered_after_the_lines_before_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        let mut log = TaskLog::new(path);
        log.catch_up().unwrap();
        log.append(vec![snapshot(0, 1)], None, true).unwrap();
        log.append(vec![snapshot(1, 1)], None, false).unwrap();
        let evidence = Object::new().with("audit", Value::Array(Vec::new()));
        log.append(
            vec![snapshot(2, 1), snapshot(3, 1), snapshot(4, 1)],
            Some(evidence),
            true,
        )
        .unwrap();
        assert_eq!(log.stats().syncs, 2);
        let owed = log.owed().unwrap();
        assert_eq!(owed.len(), 1);
        assert_eq!(owed[0].line, 5);
        assert_eq!(log.lines(), 5);
    }

    /// A complete record another writer appended without the lock after our catch-up is
    /// folded before our own append, never sealed as debris.
    #[test]
    fn a_lockless_writers_complete_record_is_folded_before_an_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        let mut log = TaskLog::new(path.clone());
        log.catch_up().unwrap();
        log.append(vec![snapshot(0, 1)], None, true).unwrap();
        let (theirs, _) = encode(&[vec![snapshot(1, 1)]]);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, &theirs).unwrap();
        log.append(vec![snapshot(2, 1)], None, true).unwrap();
        assert!(log.tears_seen().is_empty(), "{:?}", log.tears_seen());
        let mut fresh = TaskLog::new(path);
        fresh.catch_up().unwrap();
        assert_eq!(fresh.index().ids(), [id(0), id(1), id(2)]);
        assert!(fresh.tears_seen().is_empty());
    }

    /// An append after debris seals it in the same write and numbers the lines and offsets of
    /// its records after the debris and the seal.
    #[test]
    fn an_append_after_debris_counts_the_debris_and_the_seal() {
        let (mut bytes, _) = encode(&[vec![snapshot(0, 1)]]);
        // A transaction torn after its first record, in the middle of its second.
        bytes.extend_from_slice(snapshot(8, 1).to_line(Some((1, 2))).as_bytes());
        bytes.extend_from_slice(b"{\"id\": \"t9");
        let (_dir, path, mut log) = caught_up(&bytes);
        let evidence = Object::new().with("audit", Value::Array(Vec::new()));
        log.append(vec![snapshot(1, 1)], Some(evidence), true)
            .unwrap();
        // Line 1 the record, 2 and 3 the debris (a newline added), 4 the seal, 5 ours.
        assert_eq!(log.lines(), 5);
        assert_eq!(log.owed().unwrap()[0].line, 5);
        // Pushed out of the cache, the record is read back from where the index says it is.
        log.append((10..140).map(|n| snapshot(n, 1)).collect(), None, true)
            .unwrap();
        assert_eq!(log.load(&id(1)).unwrap().unwrap().task.id, id(1));
        let mut fresh = TaskLog::new(path);
        fresh.catch_up().unwrap();
        assert_eq!(fresh.len(), 132);
    }

    /// Debris up to a line's cap is sealed; more than that is refused, naming the line after
    /// the last record, and nothing is written.
    #[test]
    fn debris_over_the_line_cap_is_refused_and_left_alone() {
        let sealed = |debris_len: usize| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("tasks.jsonl");
            let (mut bytes, _) = encode(&[vec![snapshot(0, 1)]]);
            bytes.extend(std::iter::repeat_n(b'x', debris_len));
            std::fs::write(&path, &bytes).unwrap();
            let mut log = TaskLog::new(path.clone());
            log.catch_up().unwrap();
            let appended = log.append(vec![snapshot(1, 1)], None, true);
            let unchanged = std::fs::metadata(&path).unwrap().len() == bytes.len() as u64;
            (appended.map(|_| ()), unchanged)
        };
        let (appended, _) = sealed(MAX_LINE_BYTES);
        appended.unwrap();
        let (appended, unchanged) = sealed(MAX_LINE_BYTES + 1);
        assert!(
            matches!(appended, Err(Error::CorruptStore { line: Some(2), .. })),
            "{appended:?}"
        );
        assert!(unchanged);
    }

    /// After a compaction each record sits on the line of its creation slot, and a record
    /// found changed under the store is named by that line.
    #[test]
    fn compacted_records_are_numbered_by_their_slot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.jsonl");
        let (bytes, _) = encode(&[
            vec![snapshot(0, 1)],
            vec![snapshot(1, 1)],
            vec![snapshot(1, 2)],
        ]);
        std::fs::write(&path, &bytes).unwrap();
        let mut log = TaskLog::new(path.clone());
        log.catch_up().unwrap();
        log.compact().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"t1\"", "\"t7\"")).unwrap();
        let err = log.load(&id(1)).unwrap_err();
        assert!(
            matches!(err, Error::CorruptStore { line: Some(2), .. }),
            "{err}"
        );
    }

    /// A compaction keeps the compacted file's last line to check: nothing new reads just that
    /// line, and a rewrite of it is noticed.
    #[test]
    fn after_a_compaction_the_last_line_is_checked() {
        let (bytes, _) = encode(&[vec![snapshot(0, 1)], vec![snapshot(1, 1)]]);
        let (_dir, path, mut log) = caught_up(&bytes);
        log.compact().unwrap();
        let before = log.stats();
        log.catch_up().unwrap();
        let last = snapshot(1, 1).to_line(None);
        assert_eq!(
            log.stats().check_bytes - before.check_bytes,
            last.len() as u64
        );
        assert_eq!(log.stats().prefix_changes, 0);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("task 1", "task 7")).unwrap();
        log.catch_up().unwrap();
        assert_eq!(log.stats().prefix_changes, 1);
    }
}
