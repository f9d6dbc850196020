//! Appending to the chain, compatible with the reference's writers running at the same time.
//!
//! An append (the reference's `AuditChainStore.log_with_prev_digest` + `AuditLog.log`):
//!
//! 1. takes an exclusive `flock` on `<audit_dir>/.chain.lock` (created with mode 0600, as the
//!    reference creates it), which serialises every Rust and Python appender of the directory;
//! 2. takes one clock reading, under that lock, for both the timestamp and the daily segment
//!    name (a reading taken before the lock could name yesterday's segment after another
//!    appender has already moved the chain into today's, forking it at midnight);
//! 3. re-reads the head from disk: the tail of the day segment, scanned backwards. When that
//!    tail does not verify locally (a crash-torn partial line, bytes failing their MAC, garbage,
//!    a lost terminator), the tear is first sealed with a `chain.torn_record` record, written
//!    together with the missing terminator in one write, exactly as the reference seals it; when
//!    the day segment is new or empty, the head is reading 1 over all segments;
//! 4. sets `details.prev_chain_digest` to that head, mints the scheme-2 record and writes the
//!    line and its `\n` in one write, then fsyncs the segment and, once per process and
//!    segment, the directories naming it ([`crate::durable::ensure_entry_durable`]) before
//!    returning. A failed write or fsync truncates the segment back, so a retry cannot
//!    duplicate the record.
//!
//! **The head from the tail, not a rescan.** Step 3 reads only the end of the day segment. An
//! [`AuditChain`] also remembers, per process, the head it appended last and the segment state
//! after it (name, device, inode, length, and the bytes and offset of its own last line). When
//! the segment is still exactly that (same inode and length, and the line's bytes still at that
//! offset, one `pread`), that head is the head: no line is parsed and no MAC recomputed. Any
//! other state (another process appended, the segment was rewritten, replaced or rotated)
//! falls back to the backwards tail scan above, which seals a torn tail as before.
//! [`AuditChain::append_stats`] counts both.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use bernstein_protocol::encoding::hex;
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use ring::digest;

use super::clock::Timestamp;
use super::head::{TailState, local_tail_state, recovered_head};
use super::record::{
    PREV_CHAIN_DIGEST_KEY, RECORD_TEXT_CAPACITY, Scheme, decode_json_bytes, dumps_spaced,
    expected_hmac, parse_json_bytes, parse_record_line, python_str,
};
use super::report::TearClass;
use super::segments::LineReader;
use super::{EVENT_CHAIN_TORN_RECORD, LOCK_FILE_NAME};
use crate::durable::{append_durably, create_dir_all_durable, ensure_entry_durable};
use crate::key::AuditKey;
use crate::{Error, Result};

/// An event to append: the caller-chosen fields of a record.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    /// Category, e.g. `task.claim_receipt`.
    pub event_type: String,
    /// Who or what caused it, e.g. `task_server`.
    pub actor: String,
    /// Kind of resource affected, e.g. `task_claim`.
    pub resource_type: String,
    /// The affected resource's id.
    pub resource_id: String,
    /// Structured data. An anchored append adds `prev_chain_digest` to a copy of it.
    pub details: Object,
}

impl AuditEvent {
    /// An event with the given fields.
    pub fn new(
        event_type: impl Into<String>,
        actor: impl Into<String>,
        resource_type: impl Into<String>,
        resource_id: impl Into<String>,
        details: Object,
    ) -> AuditEvent {
        AuditEvent {
            event_type: event_type.into(),
            actor: actor.into(),
            resource_type: resource_type.into(),
            resource_id: resource_id.into(),
            details,
        }
    }
}

/// A tear the append found at the tail of its day segment and sealed before writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedTear {
    /// The segment name.
    pub segment: String,
    /// The segment size before sealing (the offset an acknowledgement names).
    pub byte_offset: u64,
    /// End of the last locally valid record before the torn bytes.
    pub verified_prefix_offset: u64,
    /// How the torn bytes look.
    pub tear_class: TearClass,
    /// SHA-256 (hex) of the torn bytes.
    pub torn_bytes_sha256: String,
    /// The `hmac` of the `chain.torn_record` record written.
    pub record_hmac: String,
}

/// What an append wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendedRecord {
    /// The segment file name, `<YYYY-MM-DD>.jsonl`.
    pub segment: String,
    /// Byte offset of the line inside the segment.
    pub offset: u64,
    /// The record's `timestamp`.
    pub timestamp: String,
    /// The record's `hmac`: the chain head after this append.
    pub hmac: String,
    /// The record's `prev_hmac`: the head it was chained onto.
    pub prev_hmac: String,
    /// The full record, including `hmac`.
    pub record: Object,
    /// The line as written, without its `\n`.
    pub line: String,
    /// A tear sealed before this record was written, if there was one.
    pub sealed_tear: Option<SealedTear>,
}

/// The clock an [`AuditChain`] reads, under its append lock, for every record it stamps.
#[derive(Clone)]
pub struct AuditClock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl AuditClock {
    /// The system clock ([`Timestamp::now`]).
    pub fn system() -> AuditClock {
        AuditClock(Arc::new(Timestamp::now))
    }

    /// A clock that calls `read` for every reading (pinned or stepping clocks in tests).
    pub fn from_fn(read: impl Fn() -> Timestamp + Send + Sync + 'static) -> AuditClock {
        AuditClock(Arc::new(read))
    }

    fn read(&self) -> Timestamp {
        (self.0)()
    }
}

impl std::fmt::Debug for AuditClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditClock")
    }
}

/// An audit chain directory opened for appending and reading with one key.
///
/// Opening does no IO. Appends create the directory when needed; reads never write.
#[derive(Debug, Clone)]
pub struct AuditChain {
    dir: PathBuf,
    key: AuditKey,
    clock: AuditClock,
    /// What this chain appended last (shared by clones), trusted only under the chain lock
    /// and after the check described in the module documentation.
    last: Arc<Mutex<LastAppend>>,
}

/// The segment state right after this chain's last append.
#[derive(Debug, Default)]
struct LastAppend {
    known: Option<KnownSegmentTail>,
    stats: AppendStats,
}

#[derive(Debug, Clone)]
struct KnownSegmentTail {
    segment: String,
    /// `(st_dev, st_ino, st_size)` right after the append.
    identity: (u64, u64, u64),
    head: String,
    /// Offset and bytes (terminator included) of the line appended.
    line: (u64, Vec<u8>),
}

/// How an [`AuditChain`]'s appends found the head they chained onto.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppendStats {
    /// Appends whose head was this chain's own last record, checked in place.
    pub known_heads: u64,
    /// Appends that read the segment's tail (backwards) to find the head.
    pub tail_scans: u64,
    /// Segment bytes read to find heads (checks and tail scans alike; a tail scan counts the
    /// bytes of the lines it looked at).
    pub bytes_read: u64,
    /// Total time this chain held `.chain.lock`, in microseconds (head, write, fsync).
    pub lock_held_us: u64,
    /// The longest single hold, in microseconds.
    pub lock_held_max_us: u64,
}

impl AuditChain {
    /// The chain in `audit_dir` (normally `<project>/.sdd/audit`), authenticated with `key`.
    pub fn open(audit_dir: impl Into<PathBuf>, key: AuditKey) -> AuditChain {
        AuditChain {
            dir: audit_dir.into(),
            key,
            clock: AuditClock::system(),
            last: Arc::default(),
        }
    }

    /// How this chain's appends found their heads so far (shared by its clones).
    pub fn append_stats(&self) -> AppendStats {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
    }

    /// The same chain, stamping records from `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: AuditClock) -> AuditChain {
        self.clock = clock;
        self
    }

    /// The audit directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key.
    pub fn key(&self) -> &AuditKey {
        &self.key
    }

    /// The day segment an append made now would go to (the chain's clock, read now; an
    /// append reads it again under the lock).
    pub fn current_segment_path(&self) -> PathBuf {
        self.dir.join(self.clock.read().segment_name())
    }

    /// Appends `event` now (the chain's clock, read under the append lock), with
    /// `details.prev_chain_digest` set to the head it chains onto.
    pub fn append(&self, event: &AuditEvent) -> Result<AppendedRecord> {
        self.append_inner(event, None, true)
    }

    /// [`AuditChain::append`] with an explicit clock reading (deterministic tests, replays).
    pub fn append_at(&self, event: &AuditEvent, at: Timestamp) -> Result<AppendedRecord> {
        self.append_inner(event, Some(at), true)
    }

    /// Appends `events` in order, each chained onto the one before, as one group commit: one
    /// lock, one clock reading (every record of the group carries the same timestamp and goes
    /// to the same day segment), one write and one fsync. The records are exactly the ones
    /// [`AuditChain::append`] would write one by one at that instant. Returns what each wrote,
    /// in order; an empty slice writes nothing and takes no lock.
    ///
    /// # Errors
    ///
    /// As [`AuditChain::append`]; on an error none of the group is on disk (a failed write or
    /// fsync truncates the segment back to its length before the group).
    pub fn append_many(&self, events: &[AuditEvent]) -> Result<Vec<AppendedRecord>> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        self.append_group(events, None, true)
    }

    /// Appends `event` without adding `details.prev_chain_digest`, as the reference's plain
    /// `AuditLog.log` does (used for `chain.tear_acknowledged` records). `at` defaults to now.
    pub fn append_unanchored(
        &self,
        event: &AuditEvent,
        at: Option<Timestamp>,
    ) -> Result<AppendedRecord> {
        self.append_inner(event, at, false)
    }

    /// Reading 1, the MAC-valid recovered head, computed now from disk (no lock is taken: a
    /// concurrent append may land right after).
    pub fn recovered_head(&self) -> String {
        recovered_head(&self.dir, &self.key)
    }

    fn append_inner(
        &self,
        event: &AuditEvent,
        at: Option<Timestamp>,
        anchored: bool,
    ) -> Result<AppendedRecord> {
        let mut appended = self.append_group(std::slice::from_ref(event), at, anchored)?;
        Ok(appended.remove(0))
    }

    /// Appends a non-empty group of events under one lock, with one write and one fsync.
    fn append_group(
        &self,
        events: &[AuditEvent],
        at: Option<Timestamp>,
        anchored: bool,
    ) -> Result<Vec<AppendedRecord>> {
        // The directory is created (and its parents fsynced) before the first append of this
        // chain; afterwards it is only recreated when taking the lock finds it gone.
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let lock = match last.known {
            Some(_) => ChainLock::acquire(&self.dir).ok(),
            None => None,
        };
        let lock = match lock {
            Some(lock) => lock,
            None => {
                create_dir_all_durable(&self.dir)
                    .map_err(|err| Error::io("create directory", &self.dir, err))?;
                ChainLock::acquire(&self.dir)?
            }
        };
        let locked = std::time::Instant::now();
        let appended = self.append_locked(&mut last, events, at, anchored);
        drop(lock);
        let held = u64::try_from(locked.elapsed().as_micros()).unwrap_or(u64::MAX);
        last.stats.lock_held_us = last.stats.lock_held_us.saturating_add(held);
        last.stats.lock_held_max_us = last.stats.lock_held_max_us.max(held);
        drop(last);
        tracing::debug!(target: "bernstein_journal::locks", lock = "audit chain", held_us = held, "lock released");
        let (appended, segment_path) = appended?;
        // Whoever created the segment may have died before fsyncing its directory; every
        // process makes the entry durable itself before its first acknowledgement.
        ensure_entry_durable(&segment_path)
            .map_err(|err| Error::io("sync directory", &self.dir, err))?;
        Ok(appended)
    }

    /// The part of an append made under the chain lock: every event of the group, chained in
    /// order, in one write.
    fn append_locked(
        &self,
        last: &mut LastAppend,
        events: &[AuditEvent],
        at: Option<Timestamp>,
        anchored: bool,
    ) -> Result<(Vec<AppendedRecord>, PathBuf)> {
        // The clock is read only now, under the lock: see the module documentation, step 2.
        let at = at.unwrap_or_else(|| self.clock.read());
        let segment = at.segment_name();
        let segment_path = self.dir.join(&segment);
        let timestamp = at.to_record_string();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&segment_path)
            .map_err(|err| Error::io("open", &segment_path, err))?;
        let meta = file
            .metadata()
            .map_err(|err| Error::io("stat", &segment_path, err))?;
        let identity = (meta.dev(), meta.ino(), meta.len());
        let known_head = last.known.take().and_then(|known| {
            if known.segment != segment || known.identity != identity {
                return None;
            }
            let (at, bytes) = &known.line;
            let mut found = vec![0u8; bytes.len()];
            last.stats.bytes_read += bytes.len() as u64;
            (file.read_exact_at(&mut found, *at).is_ok() && found == *bytes).then_some(known.head)
        });
        let (head, sealed_tear) = match known_head {
            Some(head) => {
                last.stats.known_heads += 1;
                (head, None)
            }
            None => {
                last.stats.tail_scans += 1;
                let synced = self.sync_for_append(&segment_path, &segment, &timestamp)?;
                last.stats.bytes_read += synced.2;
                (synced.0, synced.1)
            }
        };
        // A seal grew the segment: the record goes after it.
        let size = match &sealed_tear {
            Some(_) => file
                .metadata()
                .map_err(|err| Error::io("stat", &segment_path, err))?
                .len(),
            None => identity.2,
        };

        let mut bytes = Vec::new();
        let mut appended = Vec::with_capacity(events.len());
        let mut sealed_tear = sealed_tear;
        let mut head = head;
        for event in events {
            let mut details = event.details.clone();
            if anchored {
                details.insert(PREV_CHAIN_DIGEST_KEY, head.as_str());
            }
            let minted = mint(
                &self.key,
                &head,
                &timestamp,
                &event.event_type,
                &event.actor,
                &event.resource_type,
                &event.resource_id,
                details,
            );
            let offset = size + bytes.len() as u64;
            bytes.extend_from_slice(minted.line.as_bytes());
            bytes.push(b'\n');
            let prev_hmac = std::mem::replace(&mut head, minted.hmac.clone());
            appended.push(AppendedRecord {
                segment: segment.clone(),
                offset,
                timestamp: timestamp.clone(),
                hmac: minted.hmac,
                prev_hmac,
                record: minted.record,
                line: minted.line,
                // A tear is sealed once, before the group's first record.
                sealed_tear: sealed_tear.take(),
            });
        }
        // One write on the O_APPEND descriptor, fsynced; a failure truncates back to `size`
        // (we hold the chain lock), so no record of the group is left behind.
        append_durably(&mut file, size, &bytes)
            .map_err(|err| Error::io("append to", &segment_path, err))?;
        let last_offset = appended.last().map_or(size, |record| record.offset);
        let last_line = bytes[usize::try_from(last_offset - size).unwrap_or(0)..].to_vec();
        last.known = Some(KnownSegmentTail {
            segment,
            identity: (identity.0, identity.1, size + bytes.len() as u64),
            head,
            line: (last_offset, last_line),
        });
        Ok((appended, segment_path))
    }

    /// The head the next record chains onto, sealing a torn day-segment tail first
    /// (`_sync_for_append`). Returns the head and the seal if one was written. The caller holds
    /// the chain lock.
    fn sync_for_append(
        &self,
        segment_path: &Path,
        segment: &str,
        timestamp: &str,
    ) -> Result<(String, Option<SealedTear>, u64)> {
        let state = local_tail_state(segment_path, &self.key)
            .map_err(|err| Error::io("read", segment_path, err))?;
        let Some(state) = state else {
            return Ok((recovered_head(&self.dir, &self.key), None, 0));
        };
        let read = state.size - state.scanned_from.min(state.size);
        if state.size == 0 {
            return Ok((recovered_head(&self.dir, &self.key), None, 0));
        }
        if state.verified_prefix != state.size || !state.ends_with_newline {
            let seal = self.seal_torn_tail(segment_path, segment, timestamp, &state)?;
            return Ok((seal.record_hmac.clone(), Some(seal), read));
        }
        let head = match state.local_head {
            Some(head) => head,
            None => recovered_head(&self.dir, &self.key),
        };
        Ok((head, None, read))
    }

    /// Seals a non-verifying tail with a `chain.torn_record` record (`_seal_torn_tail`). Never
    /// repairs or truncates: the torn bytes stay; the missing terminator and the evidence land
    /// in one write, so the evidence cannot be separated from the repair.
    fn seal_torn_tail(
        &self,
        segment_path: &Path,
        segment: &str,
        timestamp: &str,
        state: &TailState,
    ) -> Result<SealedTear> {
        let start_head = match &state.local_head {
            Some(head) => head.clone(),
            None => recovered_head(&self.dir, &self.key),
        };
        let torn = inspect_torn_bytes(segment_path, state.verified_prefix, state.size, start_head)
            .map_err(|err| Error::io("read", segment_path, err))?;
        let details = Object::new()
            .with("segment", segment)
            .with("byte_offset", state.size)
            .with("verified_prefix_offset", state.verified_prefix)
            .with("torn_bytes_sha256", torn.sha256.as_str())
            .with("tear_class", torn.class.as_str());
        let minted = mint(
            &self.key,
            &torn.seal_prev,
            timestamp,
            EVENT_CHAIN_TORN_RECORD,
            "audit-log",
            "audit_segment",
            segment,
            details,
        );
        let mut buffer = Vec::new();
        if !state.ends_with_newline {
            buffer.push(b'\n');
        }
        buffer.extend_from_slice(minted.line.as_bytes());
        buffer.push(b'\n');
        let offset = append_bytes(segment_path, &buffer)?;
        #[cfg(test)]
        if let Some(intruder) = crate::durable::seams::take_intruder_bytes() {
            append_bytes(segment_path, &intruder)?;
        }
        let landed = fs::metadata(segment_path)
            .map_err(|err| Error::io("stat", segment_path, err))?
            .len();
        if offset != state.size || landed != state.size + buffer.len() as u64 {
            // Appending onto a seal that did not land whole would fuse two records, which is
            // what sealing exists to prevent; refusing leaves the damage reportable.
            return Err(Error::io(
                "seal the torn tail of",
                segment_path,
                io::Error::other(format!(
                    "expected the segment to grow from {} to {} bytes, found {landed}",
                    state.size,
                    state.size + buffer.len() as u64
                )),
            ));
        }
        Ok(SealedTear {
            segment: segment.to_owned(),
            byte_offset: state.size,
            verified_prefix_offset: state.verified_prefix,
            tear_class: torn.class,
            torn_bytes_sha256: torn.sha256,
            record_hmac: minted.hmac,
        })
    }
}

/// A minted record.
struct Minted {
    record: Object,
    hmac: String,
    line: String,
}

/// Builds a scheme-2 record on `prev_hmac` (`_mint_record`).
#[allow(clippy::too_many_arguments)]
fn mint(
    key: &AuditKey,
    prev_hmac: &str,
    timestamp: &str,
    event_type: &str,
    actor: &str,
    resource_type: &str,
    resource_id: &str,
    details: Object,
) -> Minted {
    let mut record = Object::new()
        .with("timestamp", timestamp)
        .with("event_type", event_type)
        .with("actor", actor)
        .with("resource_type", resource_type)
        .with("resource_id", resource_id)
        .with("details", details)
        .with("prev_hmac", prev_hmac)
        .with("scheme", i64::from(Scheme::V2.number()));
    let hmac = expected_hmac(key, Scheme::V2, prev_hmac, &record);
    record.insert("hmac", hmac.as_str());
    let mut line = String::with_capacity(RECORD_TEXT_CAPACITY);
    record.dumps_into(&mut line, Dialect::PY_SPACED);
    Minted { record, hmac, line }
}

/// Appends `bytes` with one write on an `O_APPEND` descriptor and fsyncs; returns the offset
/// the bytes start at. A failed write or fsync truncates the segment back to that offset (the
/// caller holds the chain lock), so the caller's retry cannot duplicate the record.
fn append_bytes(path: &Path, bytes: &[u8]) -> Result<u64> {
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|err| Error::io("open", path, err))?;
    let offset = file
        .seek(SeekFrom::End(0))
        .map_err(|err| Error::io("seek", path, err))?;
    append_durably(&mut file, offset, bytes).map_err(|err| Error::io("append to", path, err))?;
    Ok(offset)
}

/// The exclusive cross-process append lock: `flock(LOCK_EX)` on `<dir>/.chain.lock`, held until
/// dropped.
struct ChainLock {
    file: File,
}

impl ChainLock {
    fn acquire(dir: &Path) -> Result<ChainLock> {
        let path = dir.join(LOCK_FILE_NAME);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|err| Error::io("open", &path, err))?;
        file.lock().map_err(|err| Error::io("lock", &path, err))?;
        Ok(ChainLock { file })
    }
}

impl Drop for ChainLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock too; unlocking first just makes it prompt.
        let _ = self.file.unlock();
    }
}

/// What the torn bytes of a segment tail look like.
struct TornBytes {
    sha256: String,
    class: TearClass,
    /// The head the verifier will hold after walking the torn bytes: the stored `hmac` of the
    /// last canonical record with a known scheme among them, else the head before them.
    seal_prev: String,
}

/// Streams `[from, to)` of `path` once: hashes it, classifies it (`_classify_torn_bytes`) and
/// follows the verifier's head adoption over it.
///
/// The reference adopts the `hmac` of every canonical line here, including lines with an
/// unknown scheme, which its own verifier skips; a seal built that way fails linkage. This
/// follows the verifier so the seal always verifies.
fn inspect_torn_bytes(
    path: &Path,
    from: u64,
    to: u64,
    start_head: String,
) -> io::Result<TornBytes> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(from))?;
    let mut hashing = HashingReader {
        inner: file.take(to.saturating_sub(from)),
        context: digest::Context::new(&digest::SHA256),
    };
    let mut seal_prev = start_head;
    let mut all_utf8 = true;
    let mut fragments = 0usize;
    let mut first_fragment: Option<Vec<u8>> = None;
    let mut any_too_long = false;
    {
        let mut lines = LineReader::new(BufReader::new(&mut hashing));
        while let Some(line) = lines.next_line()? {
            let Some(bytes) = line.bytes else {
                any_too_long = true;
                fragments += 1;
                continue;
            };
            if std::str::from_utf8(&bytes).is_err() {
                all_utf8 = false;
            }
            if bytes.is_empty() {
                continue;
            }
            fragments += 1;
            if let Ok(parsed) = parse_record_line(&bytes, true) {
                seal_prev = parsed
                    .record
                    .get("hmac")
                    .map(python_str)
                    .unwrap_or_default();
            }
            if first_fragment.is_none() {
                first_fragment = Some(bytes);
            }
        }
    }
    let sha256 = hex(hashing.context.finish().as_ref());
    let class = if to <= from {
        TearClass::UnterminatedRecord
    } else if !all_utf8 || any_too_long || fragments != 1 {
        TearClass::GarbageBytes
    } else {
        classify_single_fragment(first_fragment.as_deref().unwrap_or_default())
    };
    Ok(TornBytes {
        sha256,
        class,
        seal_prev,
    })
}

fn classify_single_fragment(fragment: &[u8]) -> TearClass {
    let Ok(parsed) = parse_json_bytes(fragment) else {
        // Undecodable bytes would make the reference's classifier raise; they are garbage.
        return if decode_json_bytes(fragment).is_err() {
            TearClass::GarbageBytes
        } else {
            TearClass::PartialRecord
        };
    };
    match &parsed.value {
        Value::Object(record)
            if dumps_spaced(&parsed.value, parsed.lone_surrogates).as_bytes() == fragment
                && record.contains_key("hmac") =>
        {
            TearClass::InvalidHmac
        }
        _ => TearClass::NonCanonical,
    }
}

struct HashingReader<R> {
    inner: R,
    context: digest::Context,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.context.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::seams;
    use std::sync::Mutex;
    use std::thread::JoinHandle;

    fn key() -> AuditKey {
        AuditKey::from_master_bytes(b"k".repeat(64))
    }

    fn event(id: &str) -> AuditEvent {
        AuditEvent::new("test.event", "tester", "thing", id, Object::new())
    }

    /// A group commit writes exactly the bytes the same events appended one by one at the
    /// same instant write, in one write: the group is an optimisation, never a format.
    #[test]
    fn a_group_writes_the_bytes_of_one_by_one_appends() {
        let at = Timestamp::parse("2026-03-01T12:00:00.000000Z").unwrap();
        let events: Vec<AuditEvent> = (0..5).map(|n| event(&format!("e{n}"))).collect();
        let one_by_one = tempfile::tempdir().unwrap();
        let single = AuditChain::open(one_by_one.path(), key());
        single.append_at(&event("first"), at).unwrap();
        for e in &events {
            single.append_at(e, at).unwrap();
        }
        let grouped_dir = tempfile::tempdir().unwrap();
        let grouped =
            AuditChain::open(grouped_dir.path(), key()).with_clock(AuditClock::from_fn(move || at));
        grouped.append(&event("first")).unwrap();
        let records = grouped.append_many(&events).unwrap();
        assert_eq!(records.len(), events.len());
        assert!(grouped.append_many(&[]).unwrap().is_empty());
        let segment = at.segment_name();
        let bytes = |dir: &Path| std::fs::read(dir.join(&segment)).unwrap();
        assert_eq!(bytes(grouped_dir.path()), bytes(one_by_one.path()));
        // What the group reports is what it wrote, line by line and chained.
        let written = String::from_utf8(bytes(grouped_dir.path())).unwrap();
        let lines: Vec<&str> = written.lines().skip(1).collect();
        for (record, line) in records.iter().zip(&lines) {
            assert_eq!(record.line, *line);
            assert_eq!(&written[record.offset as usize..][..line.len()], *line);
        }
        for pair in records.windows(2) {
            assert_eq!(pair[1].prev_hmac, pair[0].hmac);
        }
        assert!(grouped.verify().ok());
        // The next append knows the head without a tail scan.
        grouped.append(&event("after")).unwrap();
        assert_eq!(
            grouped.append_stats().tail_scans,
            1,
            "{:?}",
            grouped.append_stats()
        );
    }

    /// A group whose fsync fails leaves none of its records behind.
    #[test]
    fn a_group_that_fails_to_sync_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let chain = AuditChain::open(dir.path(), key());
        chain.append(&event("first")).unwrap();
        let events: Vec<AuditEvent> = (0..3).map(|n| event(&format!("e{n}"))).collect();
        seams::fail_next_fsyncs(1);
        let err = chain.append_many(&events).unwrap_err();
        assert!(err.to_string().contains("injected fsync failure"), "{err}");
        assert_eq!(chain.verify().entries, 1);
        chain.append_many(&events).unwrap();
        let report = chain.verify();
        assert!(report.ok());
        assert_eq!(report.entries, 4);
    }

    /// Two appenders at midnight: A's clock reads 23:59:59.999999 and, before A can append,
    /// B appends at 00:00:00.000001 into the next day's segment. If A read its clock outside
    /// the chain lock, B gets in between and A then chains onto the old segment's tail, the
    /// head B already used. Read under the lock, B waits and chains onto A instead.
    #[test]
    fn a_clock_read_across_midnight_cannot_fork_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let audit = dir.path().join("audit");
        let day1_noon = Timestamp::parse("2026-03-01T12:00:00.000000Z").unwrap();
        let day1_last = Timestamp::parse("2026-03-01T23:59:59.999999Z").unwrap();
        let day2_first = Timestamp::parse("2026-03-02T00:00:00.000001Z").unwrap();
        AuditChain::open(&audit, key())
            .append_at(&event("first"), day1_noon)
            .unwrap();

        let b_thread: Arc<Mutex<Option<JoinHandle<AppendedRecord>>>> = Arc::default();
        let b_slot = Arc::clone(&b_thread);
        let lock_path = audit.join(LOCK_FILE_NAME);
        let b_audit = audit.clone();
        let a_clock = AuditClock::from_fn(move || {
            // B appends while A is reading its clock.
            let b_audit = b_audit.clone();
            let b = std::thread::spawn(move || {
                AuditChain::open(&b_audit, key())
                    .with_clock(AuditClock::from_fn(move || day2_first))
                    .append(&event("b"))
                    .unwrap()
            });
            // Whether A holds the chain lock while it reads the clock. If it does, B blocks
            // until A is done; waiting for B here would deadlock, so B is joined afterwards.
            let probe = File::open(&lock_path).unwrap();
            let a_holds_lock = probe.try_lock().is_err();
            drop(probe);
            if a_holds_lock {
                *b_slot.lock().unwrap() = Some(b);
            } else {
                b.join().unwrap();
            }
            day1_last
        });
        let a = AuditChain::open(&audit, key())
            .with_clock(a_clock)
            .append(&event("a"))
            .unwrap();
        if let Some(b) = b_thread.lock().unwrap().take() {
            let b = b.join().unwrap();
            assert_eq!(b.prev_hmac, a.hmac, "B must chain onto A");
        }

        let chain = AuditChain::open(&audit, key());
        let mut prevs = Vec::new();
        for segment in ["2026-03-01.jsonl", "2026-03-02.jsonl"] {
            let text = fs::read_to_string(audit.join(segment)).unwrap_or_default();
            for line in text.lines() {
                let Ok(Value::Object(record)) = Value::parse(line) else {
                    panic!("unreadable record in {segment}: {line}");
                };
                prevs.push(record.get("prev_hmac").map(python_str).unwrap());
            }
        }
        let mut unique = prevs.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(prevs.len(), 3, "{prevs:?}");
        assert_eq!(unique.len(), prevs.len(), "two records share a prev_hmac");
        let report = chain.verify();
        assert!(report.ok(), "{report:?}");
        assert!(report.tears.is_empty(), "{:?}", report.tears);
    }

    #[test]
    fn a_failed_fsync_leaves_no_record_to_duplicate() {
        let dir = tempfile::tempdir().unwrap();
        let chain = AuditChain::open(dir.path().join("audit"), key());
        let at = Timestamp::parse("2026-03-01T12:00:00.000000Z").unwrap();
        chain.append_at(&event("one"), at).unwrap();
        seams::fail_next_fsyncs(1);
        let err = chain.append_at(&event("two"), at).unwrap_err();
        assert!(err.to_string().contains("injected fsync failure"), "{err}");
        // The caller retries the refused append.
        chain.append_at(&event("two"), at).unwrap();
        let ids: Vec<String> = chain.verified_records().map(|r| r.resource_id).collect();
        assert_eq!(ids, vec!["one", "two"]);
        let report = chain.verify();
        assert!(report.ok() && report.tears.is_empty(), "{report:?}");
    }

    /// An append chains onto this chain's own last record without reading the tail while the
    /// segment is exactly as it left it; another writer's record, or its own last line
    /// rewritten in place, sends it back to the tail scan (which seals the rewrite).
    #[test]
    fn the_head_comes_from_the_last_append_only_while_the_segment_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let audit = dir.path().join("audit");
        let at = Timestamp::parse("2026-03-01T12:00:00.000000Z").unwrap();
        let ours = AuditChain::open(&audit, key());
        let mut previous = ours.append_at(&event("0"), at).unwrap();
        let mut checked = 0;
        for n in 1..20 {
            checked += previous.line.len() as u64 + 1;
            let record = ours.append_at(&event(&n.to_string()), at).unwrap();
            assert_eq!(record.prev_hmac, previous.hmac);
            previous = record;
        }
        let stats = ours.append_stats();
        assert_eq!((stats.tail_scans, stats.known_heads), (1, 19), "{stats:?}");
        // Each known head cost one read of the previous record's line, nothing more.
        assert_eq!(stats.bytes_read, checked);

        let theirs = AuditChain::open(&audit, key())
            .append_at(&event("other"), at)
            .unwrap();
        let next = ours.append_at(&event("next"), at).unwrap();
        assert_eq!(next.prev_hmac, theirs.hmac);
        assert_eq!(ours.append_stats().tail_scans, 2);
        // The segment grew, so the known head was not even checked; the scan read the other
        // writer's line (and its terminator) to find the head, and nothing before it.
        assert_eq!(
            ours.append_stats().bytes_read,
            checked + theirs.line.len() as u64 + 1
        );

        // Our last line rewritten in place (its MAC broken, same length).
        let path = audit.join(&next.segment);
        let mut bytes = fs::read(&path).unwrap();
        let flip = next.offset as usize + next.line.find("\"hmac\": \"").unwrap() + 9;
        bytes[flip] = if bytes[flip] == b'0' { b'1' } else { b'0' };
        fs::write(&path, &bytes).unwrap();
        let after = ours.append_at(&event("after"), at).unwrap();
        assert!(after.sealed_tear.is_some(), "{after:?}");
        assert_eq!(ours.append_stats().tail_scans, 3);
    }

    /// A seal is written at the size the sealer read; bytes that another writer (one that
    /// ignores the chain lock) appends right behind it would fuse with the record that follows,
    /// so the append is refused and the damage left for verify to report.
    #[test]
    fn a_seal_that_another_writer_appended_behind_refuses_the_append() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let at = Timestamp::parse("2026-03-01T12:00:00.000000Z").unwrap();
        let chain = AuditChain::open(dir.path(), key());
        let first = chain.append_at(&event("one"), at).unwrap();
        let path = dir.path().join(&first.segment);
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"torn")
            .unwrap();
        seams::intrude_after_next_seal(b"{\"intruder\": 1}\n");
        let err = chain.append_at(&event("two"), at).unwrap_err().to_string();
        assert!(err.contains("expected the segment to grow"), "{err}");
        assert!(!fs::read_to_string(&path).unwrap().contains("\"two\""));
    }

    /// The segment an append would go to is named by the chain's own clock, so a pinned clock
    /// pins it (the anchor reads it to find today's segment).
    #[test]
    fn the_current_segment_is_the_one_the_chain_clock_names() {
        let dir = tempfile::tempdir().unwrap();
        let at = Timestamp::parse("2026-03-01T23:59:59.999999Z").unwrap();
        let chain = AuditChain::open(dir.path(), key()).with_clock(AuditClock::from_fn(move || at));
        assert_eq!(
            chain.current_segment_path(),
            dir.path().join("2026-03-01.jsonl")
        );
        let record = chain.append(&event("one")).unwrap();
        assert_eq!(
            dir.path().join(&record.segment),
            chain.current_segment_path()
        );
    }

    /// A chain's `Debug` (which reaches logs) names its clock and never prints the key.
    #[test]
    fn a_chain_debug_names_its_clock_and_never_prints_the_key() {
        let chain = AuditChain::open("/nowhere", key());
        let printed = format!("{chain:?}");
        assert!(printed.contains("clock: AuditClock"), "{printed}");
        assert!(!printed.contains(&"6b".repeat(8)), "{printed}");
        assert!(!printed.contains("kkkkkkkk"), "{printed}");
    }

    #[test]
    fn single_fragments_are_classified_like_the_reference() {
        let check = |fragment: &[u8], expect: TearClass| {
            assert_eq!(
                classify_single_fragment(fragment),
                expect,
                "{}",
                String::from_utf8_lossy(fragment)
            );
        };
        check(br#"{"actor": "x", "hm"#, TearClass::PartialRecord);
        check(br#"{"hmac": "ab"}"#, TearClass::InvalidHmac);
        check(br#"{"hmac":"ab"}"#, TearClass::NonCanonical);
        check(br#"{"a": 1}"#, TearClass::NonCanonical);
        check(b"[1]", TearClass::NonCanonical);
    }
}
