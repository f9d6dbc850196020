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

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use bernstein_protocol::pyjson::{Dialect, Object, Value};

use super::fsio::{self, FILE_MODE};
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

/// The fold of the task log, plus where reading stopped.
#[derive(Debug, Default)]
pub(crate) struct TaskLog {
    path: PathBuf,
    /// The file the fold was read from, held open. While a descriptor holds it, its inode cannot
    /// be freed, so no later file at the same path (a compaction's rename) can reuse its number:
    /// `(st_dev, st_ino)` equality with the path's current file then really means the same file.
    file: Option<File>,
    /// `(st_dev, st_ino)` of [`TaskLog::file`].
    identity: Option<(u64, u64)>,
    /// End offset of the last committed record.
    consumed: u64,
    /// Lines (including blank ones) before `consumed`, for line numbers in errors.
    lines: u64,
    /// Records folded since the file was last read from its start.
    records: u64,
    tasks: HashMap<TaskId, StoredTask>,
    order: Vec<TaskId>,
    /// Debris after `consumed`, as seen by the last catch-up.
    torn: Option<TornTail>,
    /// Every tear this process has seen, in the order it saw them.
    tears_seen: Vec<TornTail>,
    /// Transactions whose evidence no marker line says is written, oldest first.
    owed: Vec<OwedEvidence>,
    /// Every transaction's evidence, when kept for verification.
    history: Option<Vec<OwedEvidence>>,
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

    /// The task with id `id`.
    pub(crate) fn get(&self, id: &TaskId) -> Option<&StoredTask> {
        self.tasks.get(id)
    }

    /// Every task in creation order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &StoredTask> {
        self.order.iter().filter_map(|id| self.tasks.get(id))
    }

    /// Position of `id` in creation order.
    pub(crate) fn position(&self, id: &TaskId) -> Option<usize> {
        self.order.iter().position(|candidate| candidate == id)
    }

    /// The task ids in creation order.
    pub(crate) fn order(&self) -> &[TaskId] {
        &self.order
    }

    /// How many tasks the log holds.
    pub(crate) fn len(&self) -> usize {
        self.order.len()
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

    /// Transactions whose evidence is not marked written, oldest first.
    pub(crate) fn owed(&self) -> &[OwedEvidence] {
        &self.owed
    }

    /// The evidence of every transaction read, for a fold made with
    /// [`TaskLog::keeping_history`].
    pub(crate) fn history(&self) -> &[OwedEvidence] {
        self.history.as_deref().unwrap_or_default()
    }

    fn reset(&mut self) {
        let history = self.history.as_ref().map(|_| Vec::new());
        *self = TaskLog {
            history,
            tears_seen: std::mem::take(&mut self.tears_seen),
            ..TaskLog::new(std::mem::take(&mut self.path))
        };
    }

    fn apply(&mut self, stored: StoredTask) {
        let id = stored.task.id.clone();
        if !self.tasks.contains_key(&id) {
            self.order.push(id.clone());
        }
        self.tasks.insert(id, stored);
        self.records += 1;
    }

    fn owe(&mut self, owed: OwedEvidence) {
        if let Some(history) = &mut self.history {
            history.push(owed.clone());
        }
        self.owed.push(owed);
    }

    fn note_tear(&mut self, tear: TornTail) {
        if self.torn != Some(tear) {
            self.tears_seen.push(tear);
        }
        self.torn = Some(tear);
    }

    /// Folds every record appended since the last call. Fails on a corrupt line, having folded
    /// the records before it.
    pub(crate) fn catch_up(&mut self) -> Result<(), Error> {
        let mut file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if self.identity.is_some() {
                    self.reset();
                }
                return Ok(());
            }
            Err(e) => return Err(Error::storage("open", &self.path, &e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| Error::storage("stat", &self.path, &e))?;
        let identity = (meta.dev(), meta.ino());
        if self.identity != Some(identity) || meta.len() < self.consumed {
            self.reset();
            self.identity = Some(identity);
        }
        if meta.len() == self.consumed {
            self.torn = None;
            self.file = Some(file);
            return Ok(());
        }
        file.seek(SeekFrom::Start(self.consumed))
            .map_err(|e| Error::storage("seek in", &self.path, &e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| Error::storage("read", &self.path, &e))?;
        self.file = Some(file);
        self.fold_bytes(&bytes)
    }

    fn fold_bytes(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let origin = self.consumed;
        let mut committed = 0usize;
        let result = self.fold_from(bytes, &mut committed);
        // Records before a corrupt line stay folded: they were committed.
        self.consumed = origin + committed as u64;
        result?;
        if bytes.len() > committed {
            self.note_tear(TornTail {
                offset: self.consumed,
                length: (bytes.len() - committed) as u64,
                removed: false,
            });
        } else {
            self.torn = None;
        }
        Ok(())
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

    /// Folds the complete records and transactions of `bytes`, advancing `committed` past each.
    fn fold_from(&mut self, bytes: &[u8], committed: &mut usize) -> Result<(), Error> {
        let origin = self.consumed;
        // A transaction being collected: its records, its declared size, its owed evidence.
        let mut pending: Vec<StoredTask> = Vec::new();
        let mut pending_size = 0usize;
        let mut start = 0usize;
        while let Some(newline) = bytes[start..].iter().position(|&b| b == b'\n') {
            let end = start + newline + 1;
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
                continue;
            }
            let line_number = self.lines + pending.len() as u64 + 1;
            let corrupt = |problem: String| Error::CorruptStore {
                path: self.path.clone(),
                line: Some(line_number),
                problem,
            };
            let text = std::str::from_utf8(&bytes[start..end - 1])
                .map_err(|e| corrupt(format!("not UTF-8: {e}")))?
                .trim();
            if text.is_empty() {
                if !pending.is_empty() {
                    return Err(corrupt(
                        "blank line inside a multi-record transaction".to_owned(),
                    ));
                }
                self.lines += 1;
                *committed = end;
                start = end;
                continue;
            }
            let value = Value::parse(text).map_err(|e| corrupt(format!("not JSON: {e:?}")))?;
            let record = value
                .as_object()
                .ok_or_else(|| corrupt("not a JSON object".to_owned()))?;
            if !record.contains_key("id")
                && let Some(marker) = record.get(EVIDENCE_WRITTEN_KEY)
            {
                let Some(written) = marker.as_i64().and_then(|n| u64::try_from(n).ok()) else {
                    return Err(corrupt("an evidence marker without an offset".to_owned()));
                };
                if !pending.is_empty() {
                    return Err(corrupt(
                        "an evidence marker inside a multi-record transaction".to_owned(),
                    ));
                }
                self.owed.retain(|owed| owed.end != written);
                self.lines += 1;
                *committed = end;
                start = end;
                continue;
            }
            let evidence = match record.get(EVIDENCE_KEY) {
                None => None,
                Some(Value::Object(evidence)) => Some(evidence.clone()),
                Some(_) => return Err(corrupt("evidence: must be an object".to_owned())),
            };
            let (stored, batch) = StoredTask::from_record(record).map_err(|problems| {
                corrupt(
                    problems
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                )
            })?;
            match batch {
                None if pending.is_empty() => {
                    self.apply(stored);
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
                            "transaction record {index}/{size} where record {expected} was due"
                        )));
                    }
                    if evidence.is_some() && index != size {
                        return Err(corrupt(format!(
                            "evidence on transaction record {index}/{size}, not the last"
                        )));
                    }
                    pending_size = size;
                    pending.push(stored);
                    if index == size {
                        self.lines += pending.len() as u64;
                        for stored in pending.drain(..) {
                            self.apply(stored);
                        }
                        *committed = end;
                    }
                }
            }
            if let Some(evidence) = evidence
                && pending.is_empty()
            {
                self.owe(OwedEvidence {
                    end: origin + end as u64,
                    line: self.lines,
                    evidence,
                });
            }
            start = end;
        }
        Ok(())
    }

    /// Appends `records` (one transaction) durably, with the evidence it owes on its last line:
    /// seals crash debris first, writes every line in one `write(2)`, `fdatasync`s, and fsyncs
    /// the directory when the file is new. Call with the exclusive lock held, right after
    /// [`TaskLog::catch_up`]. On failure the bytes this call wrote are cut off again, so the
    /// change does not take effect. Returns the transaction's end offset when it owes evidence.
    pub(crate) fn append(
        &mut self,
        records: Vec<StoredTask>,
        evidence: Option<Object>,
    ) -> Result<Option<u64>, Error> {
        if records.is_empty() {
            return Ok(None);
        }
        let size = records.len();
        let mut bytes = String::new();
        for (index, stored) in records.iter().enumerate() {
            let batch = (size > 1).then_some((index + 1, size));
            let owed = evidence.as_ref().filter(|_| index + 1 == size);
            bytes.push_str(&stored.to_line_with_evidence(batch, owed));
        }
        let end = self.write_lines(&bytes, size as u64, true)?;
        for stored in records {
            self.apply(stored);
        }
        Ok(evidence.map(|evidence| {
            self.owe(OwedEvidence {
                end,
                line: self.lines,
                evidence,
            });
            end
        }))
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

    /// Appends `body` (`body_lines` complete lines) after sealing any debris, and returns the
    /// new end of the log.
    ///
    /// Bytes past `consumed` are never cut: the reference server appends to this log without
    /// taking the store lock, so they may be another writer's. Complete records among them are
    /// folded first; what remains is a tear, which a seal line voids in place.
    fn write_lines(&mut self, body: &str, body_lines: u64, sync: bool) -> Result<u64, Error> {
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
            let mut debris = vec![0u8; usize::try_from(before - self.consumed).unwrap_or(0)];
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
        self.consumed = before;
        self.lines += lines;
        Ok(before)
    }

    /// Rewrites the log as one snapshot per task, in creation order, through a temporary file,
    /// fsync, atomic rename and directory fsync. Call with the exclusive lock held, right after
    /// [`TaskLog::catch_up`], and only when no transaction owes evidence (its record of what is
    /// owed would be lost). Returns the bytes before and after.
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
        let mut bytes = String::new();
        for stored in self.iter() {
            bytes.push_str(&stored.to_line(None));
        }
        fsio::write_atomic(&self.path, bytes.as_bytes())?;
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
        self.file = Some(file);
        self.identity = Some((meta.dev(), meta.ino()));
        self.consumed = bytes.len() as u64;
        self.lines = self.order.len() as u64;
        self.records = self.order.len() as u64;
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
            prop_assert_eq!(log.order(), order.as_slice());
            for id in &order {
                // Compare as records: a read snapshot carries the defaults the line spelled out.
                prop_assert_eq!(
                    log.get(id).map(|s| s.to_record(None)),
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

            log.append(vec![snapshot(9, 1)], None).unwrap();
            // The debris is sealed in place, never cut: it may be a lockless writer's.
            let after = std::fs::read(&path).unwrap();
            prop_assert_eq!(&after[..cut], &bytes[..cut]);
            let mut fresh = TaskLog::new(path);
            fresh.catch_up().unwrap();
            prop_assert_eq!(fresh.len(), order.len() + 1);
            prop_assert_eq!(fresh.get(&snapshot(9, 1).task.id).is_some(), true);
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
            again.append(vec![snapshot(8, 1)], None).unwrap();
            let mut last = TaskLog::new(fresh.path.clone());
            last.catch_up().unwrap();
            prop_assert_eq!(last.len(), order.len() + 2);
        }
    }
}
