//! The chain-head readings (`FORMATS.md` §2.3).
//!
//! * Reading 1, [`recovered_head`]: the last record that is canonical, carries an `hmac`, and
//!   is locally MAC-valid under scheme 1 or 2, searched from the end of the newest live segment,
//!   then older live segments, then archives newest-first; genesis when there is none. Appenders
//!   recompute it under the chain lock, so it sees every process's appends.
//! * Reading 2, [`keyless_newest_segment_head`]: what `bernstein_run_status` embeds. Only the
//!   newest live segment, the last canonical `hmac`-bearing line, no MAC check, `""` when
//!   nothing qualifies.
//!
//! Both scan live segments backwards in blocks, so their cost is the size of the newest
//! records, not of the segment.

use std::io;
use std::path::Path;

use super::record::{GENESIS_HMAC, Scheme, is_locally_valid, parse_record_line, python_str};
use super::segments::{
    LineReader, ReverseLines, SegmentKind, archived_segments, live_segments, open_forward,
    open_live_with_fallback,
};
use crate::key::AuditKey;

/// Reading 2: the `hmac` of the last canonical, `hmac`-bearing line of the newest live
/// segment (by sorted name), without any MAC check; `""` when there is no segment, the newest
/// one cannot be read, or nothing in it qualifies. Needs no key and writes nothing.
pub fn keyless_newest_segment_head(audit_dir: &Path) -> String {
    if !audit_dir.is_dir() {
        return String::new();
    }
    let Some(newest) = live_segments(audit_dir).ok().and_then(|mut s| s.pop()) else {
        return String::new();
    };
    let Ok(mut lines) = ReverseLines::open(&newest.path) else {
        return String::new();
    };
    loop {
        match lines.next_back() {
            Ok(Some(line)) => {
                if let Some(hmac) = line
                    .bytes
                    .as_deref()
                    .filter(|b| !b.is_empty())
                    .and_then(|b| parse_record_line(b, false).ok())
                    .and_then(|c| c.record.get("hmac").map(python_str))
                {
                    return hmac;
                }
            }
            Ok(None) | Err(_) => return String::new(),
        }
    }
}

/// Reading 1: the MAC-valid recovered head (see the module docs). Unreadable segments are
/// skipped, as the reference skips them. Needs the key; writes nothing.
pub fn recovered_head(audit_dir: &Path, key: &AuditKey) -> String {
    let recovery_candidate = |bytes: &[u8]| -> Option<String> {
        if bytes.is_empty() {
            return None;
        }
        let parsed = parse_record_line(bytes, false).ok()?;
        let hmac = parsed.record.get("hmac")?;
        // Both schemes are tried whatever the record says, as the reference's recovery does.
        (is_locally_valid(key, &parsed, Scheme::V1) || is_locally_valid(key, &parsed, Scheme::V2))
            .then(|| python_str(hmac))
    };

    let mut live = live_segments(audit_dir).unwrap_or_default();
    live.reverse();
    for segment in &live {
        let found = match ReverseLines::open(&segment.path) {
            Ok(mut lines) => scan_backwards(&mut lines, &recovery_candidate)
                .ok()
                .flatten(),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                // Retention archived it after the listing: read its archived copy.
                open_live_with_fallback(audit_dir, segment)
                    .ok()
                    .and_then(|(reader, _)| last_match_forward(reader, &recovery_candidate))
            }
            Err(_) => None,
        };
        if let Some(head) = found {
            return head;
        }
    }

    let mut archived = archived_segments(audit_dir).unwrap_or_default();
    archived.reverse();
    for segment in &archived {
        debug_assert_eq!(segment.kind, SegmentKind::Archived);
        if let Some(head) = open_forward(segment)
            .ok()
            .and_then(|(reader, _)| last_match_forward(reader, &recovery_candidate))
        {
            return head;
        }
    }
    GENESIS_HMAC.to_owned()
}

/// The first line from the end for which `candidate` returns a value.
fn scan_backwards(
    lines: &mut ReverseLines,
    candidate: &dyn Fn(&[u8]) -> Option<String>,
) -> io::Result<Option<String>> {
    while let Some(line) = lines.next_back()? {
        if let Some(found) = line.bytes.as_deref().and_then(candidate) {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// The last line of a forward stream for which `candidate` returns a value. A stream that
/// fails part-way yields nothing: the reference cannot read such a segment at all.
fn last_match_forward(
    reader: Box<dyn io::BufRead>,
    candidate: &dyn Fn(&[u8]) -> Option<String>,
) -> Option<String> {
    let mut lines = LineReader::new(reader);
    let mut last = None;
    loop {
        match lines.next_line() {
            Ok(Some(line)) => {
                if let Some(found) = line.bytes.as_deref().and_then(candidate) {
                    last = Some(found);
                }
            }
            Ok(None) => return last,
            Err(_) => return None,
        }
    }
}

/// The state of the tail of one live segment, as an appender needs it (`_local_tail_state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TailState {
    /// Segment length when read.
    pub(crate) size: u64,
    /// Whether the segment ends in `\n`.
    pub(crate) ends_with_newline: bool,
    /// End (including its terminator) of the last canonical, `hmac`-bearing record that is
    /// locally valid under its own scheme; 0 when there is none.
    pub(crate) verified_prefix: u64,
    /// That record's `hmac`.
    pub(crate) local_head: Option<String>,
    /// Offset of the earliest line the backwards scan looked at (what it cost).
    pub(crate) scanned_from: u64,
}

/// Reads the tail state of `path`; `Ok(None)` when the file does not exist.
pub(crate) fn local_tail_state(path: &Path, key: &AuditKey) -> io::Result<Option<TailState>> {
    let mut lines = match ReverseLines::open(path) {
        Ok(lines) => lines,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    let size = lines.size();
    let ends_with_newline = lines.ends_with_newline()?;
    let mut scanned_from = size;
    while let Some(line) = lines.next_back()? {
        scanned_from = line.offset;
        let Some(bytes) = line.bytes.as_deref().filter(|b| !b.is_empty()) else {
            continue;
        };
        let Ok(parsed) = parse_record_line(bytes, false) else {
            continue;
        };
        let Some(hmac) = parsed.record.get("hmac") else {
            continue;
        };
        let Ok(scheme) = Scheme::of_record(&parsed.record) else {
            continue;
        };
        if !is_locally_valid(key, &parsed, scheme) {
            continue;
        }
        return Ok(Some(TailState {
            size,
            ends_with_newline,
            verified_prefix: line.offset + line.len + u64::from(line.terminated),
            local_head: Some(python_str(hmac)),
            scanned_from,
        }));
    }
    Ok(Some(TailState {
        size,
        ends_with_newline,
        verified_prefix: 0,
        local_head: None,
        scanned_from,
    }))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::PathBuf;

    use bernstein_protocol::pyjson::Object;

    use super::*;
    use crate::audit::{ARCHIVE_DIR, AppendedRecord, AuditChain, AuditEvent, Timestamp};

    fn key() -> AuditKey {
        AuditKey::from_master_bytes(b"k".repeat(64))
    }

    fn at(day: i64) -> Timestamp {
        Timestamp::from_unix_micros((1_796_000_000 + day * 86_400) * 1_000_000).unwrap()
    }

    /// A chain of one entry on day 0 (older) and one on day 1 (newer), each in its own segment.
    fn two_days() -> (tempfile::TempDir, PathBuf, AppendedRecord, AppendedRecord) {
        let dir = tempfile::tempdir().unwrap();
        let audit = dir.path().join("audit");
        let chain = AuditChain::open(&audit, key());
        let event = AuditEvent::new("e", "t", "t", "r", Object::new());
        let older = chain.append_at(&event, at(0)).unwrap();
        let newer = chain.append_at(&event, at(1)).unwrap();
        (dir, audit, older, newer)
    }

    /// Moves the newer day's segment into the archive, gzipped.
    fn archive(audit: &Path, segment: &str) {
        let live = audit.join(segment);
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(&std::fs::read(&live).unwrap()).unwrap();
        std::fs::create_dir_all(audit.join(ARCHIVE_DIR)).unwrap();
        let gz = audit.join(ARCHIVE_DIR).join(format!("{segment}.gz"));
        std::fs::write(gz, encoder.finish().unwrap()).unwrap();
        std::fs::remove_file(&live).unwrap();
    }

    /// A live segment listed but gone when opened (retention archived it in between; here a
    /// dangling link stands for it) is read from its archived copy, so the head is still the
    /// newest entry, not the one of an older live segment.
    #[test]
    fn a_live_segment_gone_after_the_listing_is_read_from_its_archive() {
        let (_dir, audit, _older, newer) = two_days();
        archive(&audit, &newer.segment);
        std::os::unix::fs::symlink(audit.join("nowhere"), audit.join(&newer.segment)).unwrap();
        assert_eq!(recovered_head(&audit, &key()), newer.hmac);
    }

    /// A live segment that cannot be opened for another reason (a symlink loop) is skipped, as
    /// the reference skips an unreadable segment, even when an archived copy of it exists.
    #[test]
    fn an_unreadable_live_segment_is_skipped_not_read_from_its_archive() {
        let (_dir, audit, older, newer) = two_days();
        archive(&audit, &newer.segment);
        let looped = audit.join(&newer.segment);
        std::os::unix::fs::symlink(&looped, &looped).unwrap();
        assert_eq!(recovered_head(&audit, &key()), older.hmac);
    }

    /// An appender's tail state: none for a segment that does not exist, an error for one that
    /// cannot be opened for another reason.
    #[test]
    fn the_tail_state_of_a_missing_segment_is_none_and_of_an_unopenable_one_an_error() {
        let (_dir, audit, _older, newer) = two_days();
        assert_eq!(
            local_tail_state(&audit.join("2000-01-01.jsonl"), &key()).unwrap(),
            None
        );
        let state = local_tail_state(&audit.join(&newer.segment), &key())
            .unwrap()
            .unwrap();
        assert_eq!(state.local_head, Some(newer.hmac.clone()));
        let looped = audit.join("2000-01-02.jsonl");
        std::os::unix::fs::symlink(&looped, &looped).unwrap();
        assert!(local_tail_state(&looped, &key()).is_err());
    }
}
