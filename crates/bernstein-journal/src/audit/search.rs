//! Finding the newest record of a kind without verifying the whole chain.
//!
//! [`newest_record_where`] answers "what is the last record of this kind?" from the end of the
//! chain: the newest live segment backwards in blocks, then older live segments, then archives
//! newest-first. A writer that appends records of one kind in a known order (the anchoring run's
//! call records, which are written under the run journal's lock in call-index order) can then
//! check whether its latest operation reached the chain at a cost that depends on how many
//! records were appended since, not on the chain's length.
//!
//! Only canonical records that are locally MAC-valid under their own scheme count: a forged or
//! torn line never answers the question. The whole-chain linkage is the verifier's business
//! ([`super::verify`]); this reading only has to be as strong as the chain head appenders use.

use std::io;
use std::path::Path;

use bernstein_protocol::pyjson::Object;

use super::record::{Scheme, is_locally_valid, parse_record_line};
use super::segments::{
    LineReader, ReverseLines, archived_segments, live_segments, open_forward,
    open_live_with_fallback,
};
use crate::key::AuditKey;

/// The newest locally MAC-valid record of the chain in `audit_dir` for which `wanted` is true,
/// or `None` when there is none (or no chain).
///
/// # Errors
///
/// Any segment that cannot be listed or read before a match is found: the caller is deciding
/// that something is *absent* from the chain, which an unreadable segment cannot show.
pub fn newest_record_where(
    audit_dir: &Path,
    key: &AuditKey,
    wanted: &dyn Fn(&Object) -> bool,
) -> io::Result<Option<Object>> {
    if !audit_dir.is_dir() {
        return Ok(None);
    }
    let candidate = |bytes: &[u8]| -> Option<Object> {
        if bytes.is_empty() {
            return None;
        }
        let parsed = parse_record_line(bytes, false).ok()?;
        let scheme = Scheme::of_record(&parsed.record).ok()?;
        (is_locally_valid(key, &parsed, scheme) && wanted(&parsed.record)).then_some(parsed.record)
    };

    let mut live = live_segments(audit_dir)?;
    live.reverse();
    for segment in &live {
        match ReverseLines::open(&segment.path) {
            Ok(mut lines) => {
                while let Some(line) = lines.next_back()? {
                    if let Some(found) = line.bytes.as_deref().and_then(candidate) {
                        return Ok(Some(found));
                    }
                }
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                // Retention archived it after the listing: read its archived copy.
                let (reader, _) = open_live_with_fallback(audit_dir, segment)?;
                if let Some(found) = last_match_forward(reader, &candidate)? {
                    return Ok(Some(found));
                }
            }
            Err(err) => return Err(err),
        }
    }

    let mut archived = archived_segments(audit_dir)?;
    archived.reverse();
    for segment in &archived {
        let (reader, _) = open_forward(segment)?;
        if let Some(found) = last_match_forward(reader, &candidate)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// The newest locally MAC-valid record of the one live segment at `segment` for which `wanted`
/// is true, read backwards, or `None` when the segment does not exist or holds none. No
/// directory is listed: a caller that expects its answer near the end of the current segment
/// (a record written a moment ago by another process) asks here first, and asks
/// [`newest_record_where`] only when this cannot answer.
///
/// # Errors
///
/// The segment exists but cannot be read.
pub fn newest_record_in_segment_where(
    segment: &Path,
    key: &AuditKey,
    wanted: &dyn Fn(&Object) -> bool,
) -> io::Result<Option<Object>> {
    let mut lines = match ReverseLines::open(segment) {
        Ok(lines) => lines,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    while let Some(line) = lines.next_back()? {
        let Some(bytes) = line.bytes.as_deref().filter(|b| !b.is_empty()) else {
            continue;
        };
        let Ok(parsed) = parse_record_line(bytes, false) else {
            continue;
        };
        let Ok(scheme) = Scheme::of_record(&parsed.record) else {
            continue;
        };
        if is_locally_valid(key, &parsed, scheme) && wanted(&parsed.record) {
            return Ok(Some(parsed.record));
        }
    }
    Ok(None)
}

/// The last line of a forward stream for which `candidate` returns a record.
fn last_match_forward(
    reader: Box<dyn io::BufRead + Send>,
    candidate: &dyn Fn(&[u8]) -> Option<Object>,
) -> io::Result<Option<Object>> {
    let mut lines = LineReader::new(reader);
    let mut last = None;
    while let Some(line) = lines.next_line()? {
        if let Some(found) = line.bytes.as_deref().and_then(candidate) {
            last = Some(found);
        }
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditChain, AuditEvent};
    use bernstein_protocol::pyjson::Value;

    fn key() -> AuditKey {
        AuditKey::from_master_bytes(b"k".repeat(64))
    }

    fn kind_is(kind: &'static str) -> impl Fn(&Object) -> bool {
        move |record| record.get("event_type").and_then(Value::as_str) == Some(kind)
    }

    #[test]
    fn finds_the_newest_valid_record_of_a_kind() {
        let dir = tempfile::tempdir().unwrap();
        let audit = dir.path().join("audit");
        assert_eq!(
            newest_record_where(&audit, &key(), &kind_is("a")).unwrap(),
            None
        );
        let chain = AuditChain::open(&audit, key());
        for (kind, n) in [("a", 1), ("b", 2), ("a", 3), ("b", 4)] {
            let details = Object::new().with("n", n);
            chain
                .append(&AuditEvent::new(kind, "t", "t", "r", details))
                .unwrap();
        }
        let found = newest_record_where(&audit, &key(), &kind_is("a"))
            .unwrap()
            .unwrap();
        let n = found
            .get("details")
            .and_then(Value::as_object)
            .and_then(|d| d.get("n"))
            .cloned();
        assert_eq!(n, Some(Value::from(3u64)));
        assert_eq!(
            newest_record_where(&audit, &key(), &kind_is("c")).unwrap(),
            None
        );
        // Under another key no record is MAC-valid, so none is found.
        let other = AuditKey::from_master_bytes(b"o".repeat(64));
        assert_eq!(
            newest_record_where(&audit, &other, &kind_is("a")).unwrap(),
            None
        );
    }
}
