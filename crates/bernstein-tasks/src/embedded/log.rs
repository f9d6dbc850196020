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
//! them and reports them ([`TornTail`]); the next writer, holding the exclusive lock, truncates
//! them away (and fsyncs) before it appends. A newline-terminated line that does not parse as a
//! record, or a batch broken in the middle of the file, is not crash damage: every operation then
//! fails with [`Error::CorruptStore`] naming the line, and nothing is written.
//!
//! **Other processes.** Callers hold the store's lock file around [`TaskLog::catch_up`] and
//! [`TaskLog::append`]. Catching up reads only the bytes appended since the last read; when the
//! file was replaced (compaction by another process: new inode) or shrank, the fold restarts from
//! the beginning.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use bernstein_protocol::pyjson::Value;

use super::fsio::{self, FILE_MODE};
use super::record::StoredTask;
use crate::error::Error;
use crate::model::TaskId;

/// Crash debris found at the end of the task log: bytes of a write that never completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Where the debris starts (the end of the last complete record or transaction).
    pub offset: u64,
    /// How many bytes it spans.
    pub length: u64,
    /// Whether it has been truncated away (by an append or a compaction of this process).
    pub removed: bool,
}

/// The fold of the task log, plus where reading stopped.
#[derive(Debug, Default)]
pub(crate) struct TaskLog {
    path: PathBuf,
    /// `(st_dev, st_ino)` of the file the fold was read from.
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
}

impl TaskLog {
    /// An empty fold of the log at `path`; nothing is read until [`TaskLog::catch_up`].
    pub(crate) fn new(path: PathBuf) -> TaskLog {
        TaskLog {
            path,
            ..TaskLog::default()
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

    /// Every tear this process has seen.
    pub(crate) fn tears_seen(&self) -> &[TornTail] {
        &self.tears_seen
    }

    fn reset(&mut self) {
        *self = TaskLog::new(std::mem::take(&mut self.path))
            .with_tears(std::mem::take(&mut self.tears_seen));
    }

    fn with_tears(mut self, tears: Vec<TornTail>) -> TaskLog {
        self.tears_seen = tears;
        self
    }

    fn apply(&mut self, stored: StoredTask) {
        let id = stored.task.id.clone();
        if !self.tasks.contains_key(&id) {
            self.order.push(id.clone());
        }
        self.tasks.insert(id, stored);
        self.records += 1;
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
            return Ok(());
        }
        file.seek(SeekFrom::Start(self.consumed))
            .map_err(|e| Error::storage("seek in", &self.path, &e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| Error::storage("read", &self.path, &e))?;
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

    /// Folds the complete records and transactions of `bytes`, advancing `committed` past each.
    fn fold_from(&mut self, bytes: &[u8], committed: &mut usize) -> Result<(), Error> {
        // A transaction being collected: its records and its declared size.
        let mut pending: Vec<StoredTask> = Vec::new();
        let mut pending_size = 0usize;
        let mut start = 0usize;
        while let Some(newline) = bytes[start..].iter().position(|&b| b == b'\n') {
            let end = start + newline + 1;
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
            start = end;
        }
        Ok(())
    }

    /// Appends `records` (one transaction) durably: truncates crash debris first, writes every
    /// line in one `write(2)`, `fdatasync`s, and fsyncs the directory when the file is new. Call
    /// with the exclusive lock held, right after [`TaskLog::catch_up`]. On failure the file is
    /// cut back to where it was, so the change does not take effect.
    pub(crate) fn append(&mut self, records: Vec<StoredTask>) -> Result<(), Error> {
        if records.is_empty() {
            return Ok(());
        }
        let size = records.len();
        let mut bytes = String::new();
        for (index, stored) in records.iter().enumerate() {
            let batch = (size > 1).then_some((index + 1, size));
            bytes.push_str(&stored.to_line(batch));
        }
        let existed = self.path.exists();
        let mut file = OpenOptions::new()
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
        if meta.len() != self.consumed {
            file.set_len(self.consumed)
                .and_then(|()| file.sync_data())
                .map_err(|e| Error::storage("truncate crash debris in", &self.path, &e))?;
            if let Some(tear) = self.torn.take() {
                let removed = TornTail {
                    removed: true,
                    ..tear
                };
                self.tears_seen.push(removed);
            }
        }
        let written = file
            .write_all(bytes.as_bytes())
            .and_then(|()| file.sync_data());
        if let Err(e) = written {
            // Best effort: take back whatever reached the file, so a change we report as failed
            // is not folded by the next reader.
            let _ = file.set_len(self.consumed).and_then(|()| file.sync_data());
            return Err(Error::storage("append to", &self.path, &e));
        }
        if !existed {
            fsio::sync_dir(&fsio::parent_of(&self.path)?)?;
        }
        self.identity = Some(identity);
        self.consumed += bytes.len() as u64;
        self.lines += size as u64;
        for stored in records {
            self.apply(stored);
        }
        Ok(())
    }

    /// Rewrites the log as one snapshot per task, in creation order, through a temporary file,
    /// fsync, atomic rename and directory fsync. Call with the exclusive lock held, right after
    /// [`TaskLog::catch_up`]. Returns the bytes before and after.
    pub(crate) fn compact(&mut self) -> Result<(u64, u64), Error> {
        let before = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        let mut bytes = String::new();
        for stored in self.iter() {
            bytes.push_str(&stored.to_line(None));
        }
        fsio::write_atomic(&self.path, bytes.as_bytes())?;
        let meta =
            std::fs::metadata(&self.path).map_err(|e| Error::storage("stat", &self.path, &e))?;
        if let Some(tear) = self.torn.take() {
            self.tears_seen.push(TornTail {
                removed: true,
                ..tear
            });
        }
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

            log.append(vec![snapshot(9, 1)]).unwrap();
            let after = std::fs::read(&path).unwrap();
            prop_assert_eq!(&after[..committed], &bytes[..committed]);
            let mut fresh = TaskLog::new(path);
            fresh.catch_up().unwrap();
            prop_assert_eq!(fresh.len(), order.len() + 1);
            prop_assert_eq!(fresh.tears_seen(), &[]);
        }
    }
}
