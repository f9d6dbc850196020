//! The streaming chain verifier: the reference's `AuditLog.verify_detailed()` (`FORMATS.md`
//! §2.4), one line at a time.
//!
//! Walk order is archived segments (dated names first), then live segments by name; the
//! walker's chain head starts at genesis and carries across files. Each line is checked for
//! decoding, JSON, object shape, scheme and canonical bytes (a failure of any of these leaves the
//! head where it was), then for linkage and HMAC (a failure adopts the stored `hmac` as the new
//! head), then for the stated predecessor. After the walk the failures are folded into hard
//! errors and tears exactly as `_build_verify_report` does.
//!
//! Findings of a segment are held until the segment has been read to its end: the reference
//! reads a segment whole before checking it, so a segment that turns out to be unreadable
//! half-way contributes nothing but the "unreadable" error, here as there.

use std::collections::{HashSet, VecDeque};
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};

use bernstein_protocol::encoding::hex_32;
use bernstein_protocol::pyjson::{Object, Value};
use ring::hmac;

use super::canonical_scan::scan_canonical_record;
use super::record::{
    CanonicalRecord, GENESIS_HMAC, LEGACY_ANCHOR_EVENT_TYPES, LineDefect, PREV_CHAIN_DIGEST_KEY,
    Scheme, body_pre_image, canonical_line_pre_image, hmac_over, parse_record_line, prefix_chars,
    python_int_or_zero, python_str, record_mac, scheme_key,
};
use super::report::{Finding, FindingKind, Tear, TearClass, VerifyProgress, VerifyReport};
use super::segments::{
    ByteCounter, LineReader, LineView, MAX_LINE_BYTES, Segment, SegmentKind, open_forward,
    open_live_with_fallback, walk_order,
};
use super::{EVENT_CHAIN_TEAR_ACKNOWLEDGED, EVENT_CHAIN_TORN_RECORD};
use crate::crypto::constant_time_eq;
use crate::key::AuditKey;

/// How often (in on-disk bytes) the progress callback is called at most.
const PROGRESS_STEP_BYTES: u64 = 1024 * 1024;

thread_local! {
    static FOLD_MACS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many record MACs the walk's fold has computed on the current thread because the line's
/// analysis did not know the head it follows. A probe, per thread like
/// [`crate::durable::thread_fsync_count`]: with the parallel verifier only a batch's first
/// record line should need one, the workers having MACed the rest against the head before
/// them. Only the tests read it.
#[cfg(test)]
pub(crate) fn thread_fold_mac_count() -> u64 {
    FOLD_MACS.with(std::cell::Cell::get)
}

/// A record whose linkage and HMAC verified, as the walk reached it.
///
/// The chain's verdict is only known once the walk is over
/// ([`VerifiedRecords::finish`]): a record yielded here is authentic and correctly linked to its
/// predecessor, but the chain may still fail elsewhere.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedRecord {
    /// The segment file name as findings name it (`2026-07-03.jsonl`, `2026-07-01.jsonl.gz`).
    pub segment: String,
    /// 1-based physical line inside the segment.
    pub line: u64,
    /// Byte offset of the line inside the (decompressed) segment.
    pub offset: u64,
    /// The scheme the record is authenticated under.
    pub scheme: Scheme,
    /// `timestamp` (Python `str()` of the field, `""` when absent).
    pub timestamp: String,
    /// `event_type` (Python `str()` of the field, `""` when absent).
    pub event_type: String,
    /// `actor` (Python `str()` of the field, `""` when absent).
    pub actor: String,
    /// `resource_type` (Python `str()` of the field, `""` when absent).
    pub resource_type: String,
    /// `resource_id` (Python `str()` of the field, `""` when absent).
    pub resource_id: String,
    /// `details` when it is an object, else empty.
    pub details: Object,
    /// The record's `hmac`.
    pub hmac: String,
    /// The record's `prev_hmac`.
    pub prev_hmac: String,
    /// The whole record as parsed, including `hmac`.
    pub record: Object,
}

/// How a failing line failed, for the tear classifier (`_LineFinding.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureKind {
    Undecodable,
    InvalidJson,
    NotObject,
    UnsupportedScheme,
    NonCanonical,
    InvalidHmac,
    TooLong,
}

/// One non-verifying line.
#[derive(Debug, Clone)]
struct LineFailure {
    /// Index into the walk's segment list.
    segment: usize,
    line: u64,
    offset: u64,
    kind: FailureKind,
    /// Indices into the walk's findings.
    findings: Vec<usize>,
}

/// A verified `chain.torn_record` or `chain.tear_acknowledged` record.
#[derive(Debug, Clone)]
struct Marker {
    segment: usize,
    line: u64,
    torn: bool,
    details: Object,
}

/// What the walk learnt about one finished segment.
#[derive(Debug, Clone)]
struct SegmentStats {
    name: String,
    total: u64,
    ok_end: u64,
    last_line: u64,
    missing_newline: Option<usize>,
}

/// Where a line sits in its segment, without its bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LineMeta {
    /// 1-based physical line number.
    line_no: u64,
    offset: u64,
    len: u64,
    terminated: bool,
}

impl LineMeta {
    pub(crate) fn of(line_no: u64, line: LineView<'_>) -> LineMeta {
        LineMeta {
            line_no,
            offset: line.offset,
            len: line.len,
            terminated: line.terminated,
        }
    }
}

/// What one line says on its own, before the chain state is applied to it. Computing it is
/// nearly all of the verifier's work (decoding, canonical-bytes check, HMAC), and it needs no
/// state but the predecessor's `hmac`, so the parallel verifier computes it on worker threads.
pub(crate) enum LineAnalysis {
    /// An empty piece: a physical line, not an entry.
    Blank,
    /// The line failed before linkage could be checked: the chain head stays where it was.
    Defect {
        kind: FailureKind,
        findings: Vec<(FindingKind, String)>,
    },
    /// The line is a canonical record of a supported scheme.
    Parsed(Box<ParsedLine>),
    /// The line was proven whole by [`linked_line`]: canonical, linked to the head the analysis
    /// assumed, authentic under it, and with nothing else to report. `head` is its stored
    /// `hmac`, the chain head once it has been applied.
    Linked { head: [u8; 64] },
}

/// A canonical record line, ready for the linkage and HMAC checks.
pub(crate) struct ParsedLine {
    scheme: Scheme,
    stored_hmac: String,
    entry_prev: String,
    /// The bytes the HMAC covers after the predecessor.
    pre_image: String,
    /// `(assumed predecessor, expected hmac)`, when the analysis knew a predecessor to assume.
    /// Applying it checks that the assumption was the chain's actual head and recomputes the
    /// HMAC over `pre_image` otherwise.
    expected: Option<(String, String)>,
    event_type: String,
    /// The message of the stated-predecessor finding, when the record names a predecessor
    /// other than its own `prev_hmac`.
    stated_mismatch: Option<String>,
    /// `details` of a torn-record or tear-acknowledgement marker.
    marker_details: Option<Object>,
    /// The record (without `hmac`) and its `hmac` value, kept only when the walk yields records.
    record: Option<(Object, Option<Value>)>,
}

impl LineAnalysis {
    /// The stored `hmac` of a parsed line: the chain head once the line has been applied.
    pub(crate) fn head_after(&self) -> Option<&str> {
        match self {
            LineAnalysis::Parsed(parsed) => Some(&parsed.stored_hmac),
            LineAnalysis::Linked { head } => std::str::from_utf8(head).ok(),
            LineAnalysis::Blank | LineAnalysis::Defect { .. } => None,
        }
    }
}

/// The two keys a chain's records can be authenticated under, expanded once. ring's
/// `hmac::Key::new` hashes a key into its inner and outer pads, two SHA-256 blocks that a
/// line of about 400 bytes would otherwise pay again on top of its own eight.
pub(crate) struct ChainMacs {
    scheme_1: hmac::Key,
    scheme_2: hmac::Key,
}

impl ChainMacs {
    pub(crate) fn new(key: &AuditKey) -> ChainMacs {
        let expand = |scheme| hmac::Key::new(hmac::HMAC_SHA256, scheme_key(key, scheme));
        ChainMacs {
            scheme_1: expand(Scheme::V1),
            scheme_2: expand(Scheme::V2),
        }
    }

    fn key(&self, scheme: Scheme) -> &hmac::Key {
        match scheme {
            Scheme::V1 => &self.scheme_1,
            Scheme::V2 => &self.scheme_2,
        }
    }
}

/// The verifier's fast path for a line whose predecessor is known: `Some(stored hmac)` when
/// the canonical scanner accepts the line, it is not a tear marker, its `prev_hmac` is
/// `assumed`, any predecessor its `details` state is that one too, and its stored `hmac` is
/// the MAC over `assumed` and its pre-image. Such a line has nothing to report, and the MAC is
/// computed over the line's own bytes around the `hmac` member, with no copy and no
/// allocation. `None` means anything else, and the caller analyses the line in full
/// ([`analyze_line`]), which finds whatever there is to find.
pub(crate) fn linked_line(macs: &ChainMacs, bytes: &[u8], assumed: &str) -> Option<[u8; 64]> {
    let scanned = scan_canonical_record(bytes)?;
    let event_type = scanned.event_type.unwrap_or_default();
    if event_type == EVENT_CHAIN_TORN_RECORD.as_bytes()
        || event_type == EVENT_CHAIN_TEAR_ACKNOWLEDGED.as_bytes()
    {
        return None;
    }
    let entry_prev = scanned.prev_hmac.unwrap_or_default();
    if entry_prev != assumed.as_bytes() {
        return None;
    }
    let legacy = LEGACY_ANCHOR_EVENT_TYPES
        .iter()
        .any(|legacy| legacy.as_bytes() == event_type);
    let stated = scanned.stated_predecessor.filter(|_| !legacy);
    if stated.is_some_and(|stated| stated != entry_prev) {
        return None;
    }
    let stored: [u8; 64] = scanned.hmac?.try_into().ok()?;
    let scheme = if scanned.scheme == 2 {
        Scheme::V2
    } else {
        Scheme::V1
    };
    let (before, after) = scanned.pre_image(bytes);
    let mut context = record_mac(macs.key(scheme), scheme, assumed.as_bytes());
    context.update(before);
    context.update(after);
    let expected = hex_32(context.sign().as_ref().try_into().ok()?);
    constant_time_eq(&stored, &expected).then_some(stored)
}

/// `details` when it is an object, else empty.
fn details_of(record: &Object) -> Object {
    match record.get("details") {
        Some(Value::Object(details)) => details.clone(),
        _ => Object::new(),
    }
}

/// Analyses one line of segment `name`; `assumed_prev` is the chain head the line is expected
/// to follow, when known.
pub(crate) fn analyze_line(
    key: &AuditKey,
    name: &str,
    line_no: u64,
    line: LineView<'_>,
    assumed_prev: Option<&str>,
    want_records: bool,
) -> LineAnalysis {
    if line.len == 0 {
        return LineAnalysis::Blank;
    }
    let defect = |kind, finding_kind, message| LineAnalysis::Defect {
        kind,
        findings: vec![(finding_kind, message)],
    };
    let Some(bytes) = line.bytes else {
        return defect(
            FailureKind::TooLong,
            FindingKind::LineTooLong,
            format!(
                "{name}:{line_no}: line of {} bytes exceeds the {MAX_LINE_BYTES}-byte limit",
                line.len
            ),
        );
    };
    if !want_records && let Some(scanned) = scanned_line(key, name, line_no, bytes, assumed_prev) {
        return LineAnalysis::Parsed(Box::new(scanned));
    }
    let CanonicalRecord {
        mut record,
        scheme,
        lone_surrogates,
    } = match parse_record_line(bytes, true) {
        Ok(parsed) => parsed,
        Err(found) => {
            return match found {
                LineDefect::Undecodable { position, message } => defect(
                    FailureKind::Undecodable,
                    FindingKind::Undecodable,
                    format!(
                        "{name}:{line_no}: undecodable bytes at offset {} - {message}",
                        line.offset + position as u64
                    ),
                ),
                LineDefect::InvalidJson(err) => defect(
                    FailureKind::InvalidJson,
                    FindingKind::InvalidJson,
                    format!("{name}:{line_no}: invalid JSON - {err}"),
                ),
                LineDefect::NotObject => defect(
                    FailureKind::NotObject,
                    FindingKind::NotAnObject,
                    format!("{name}:{line_no}: entry is not a JSON object"),
                ),
                LineDefect::UnsupportedScheme(repr) => defect(
                    FailureKind::UnsupportedScheme,
                    FindingKind::UnsupportedScheme,
                    format!("{name}:{line_no}: unsupported audit scheme {repr}"),
                ),
                LineDefect::NonCanonical => defect(
                    FailureKind::NonCanonical,
                    FindingKind::NonCanonical,
                    format!("{name}:{line_no}: non-canonical line bytes"),
                ),
            };
        }
    };
    let scheme = scheme.unwrap_or(Scheme::V1);
    let stored_value = record.remove("hmac");
    let stored_hmac = stored_value.as_ref().map(python_str).unwrap_or_default();
    let entry_prev = record.get("prev_hmac").map(python_str).unwrap_or_default();
    let pre_image = if lone_surrogates {
        None
    } else {
        canonical_line_pre_image(bytes).and_then(|b| String::from_utf8(b).ok())
    }
    .unwrap_or_else(|| body_pre_image(&record, lone_surrogates));
    let expected =
        assumed_prev.map(|prev| (prev.to_owned(), hmac_over(key, scheme, prev, &pre_image)));
    let event_type = record.get("event_type").map(python_str).unwrap_or_default();
    let stated_mismatch = stated_predecessor(&event_type, &record)
        .and_then(|stated| stated_mismatch(name, line_no, stated, &entry_prev));
    // Cloning the details only when someone needs them keeps the plain verify path cheap.
    let marker_details = (event_type == EVENT_CHAIN_TORN_RECORD
        || event_type == EVENT_CHAIN_TEAR_ACKNOWLEDGED)
        .then(|| details_of(&record));
    LineAnalysis::Parsed(Box::new(ParsedLine {
        scheme,
        stored_hmac,
        entry_prev,
        pre_image,
        expected,
        event_type,
        stated_mismatch,
        marker_details,
        record: want_records.then_some((record, stored_value)),
    }))
}

/// [`analyze_line`] for a line the canonical scanner accepts ([`scan_canonical_record`]): the
/// same analysis from the line's bytes, without parsing it into a tree and writing it out again
/// to compare. `None` sends the line down the full path: the scanner declined it, or it is a
/// tear marker, whose `details` the walk keeps.
fn scanned_line<'l>(
    key: &AuditKey,
    name: &str,
    line_no: u64,
    bytes: &'l [u8],
    assumed_prev: Option<&str>,
) -> Option<ParsedLine> {
    let scanned = scan_canonical_record(bytes)?;
    // The scanner took only printable ASCII, so each member's bytes are its text.
    let text = |member: Option<&'l [u8]>| std::str::from_utf8(member.unwrap_or_default()).ok();
    let event_type = text(scanned.event_type)?;
    if event_type == EVENT_CHAIN_TORN_RECORD || event_type == EVENT_CHAIN_TEAR_ACKNOWLEDGED {
        return None;
    }
    let scheme = if scanned.scheme == 2 {
        Scheme::V2
    } else {
        Scheme::V1
    };
    // A canonical line without a top-level `hmac` is its own pre-image.
    let pre_image = match canonical_line_pre_image(bytes) {
        Some(cut) => String::from_utf8(cut).ok()?,
        None => std::str::from_utf8(bytes).ok()?.to_owned(),
    };
    let entry_prev = text(scanned.prev_hmac)?;
    let stated = match scanned.stated_predecessor {
        Some(stated) if !LEGACY_ANCHOR_EVENT_TYPES.contains(&event_type) => text(Some(stated)),
        _ => None,
    };
    Some(ParsedLine {
        scheme,
        stored_hmac: text(scanned.hmac)?.to_owned(),
        entry_prev: entry_prev.to_owned(),
        expected: assumed_prev
            .map(|prev| (prev.to_owned(), hmac_over(key, scheme, prev, &pre_image))),
        pre_image,
        event_type: event_type.to_owned(),
        stated_mismatch: stated
            .and_then(|stated| stated_mismatch(name, line_no, stated, entry_prev)),
        marker_details: None,
        record: None,
    })
}

/// The finding for a record whose `details.prev_chain_digest` names another predecessor than
/// its own `prev_hmac`; `None` when they agree.
fn stated_mismatch(name: &str, line_no: u64, stated: &str, entry_prev: &str) -> Option<String> {
    (!constant_time_eq(stated.as_bytes(), entry_prev.as_bytes())).then(|| {
        format!(
            "{name}:{line_no}: stated chain predecessor {}\u{2026} is not the record's own predecessor {}\u{2026}",
            prefix_chars(stated, 16),
            prefix_chars(entry_prev, 16)
        )
    })
}

/// The segment being read.
struct OpenSegment {
    segment: Segment,
    counter: ByteCounter,
    line_no: u64,
    last_line: Option<(u64, u64, bool)>,
    findings: Vec<Finding>,
    failures: Vec<LineFailure>,
    markers: Vec<Marker>,
    ok_end: u64,
    entries: u64,
    verified: u64,
}

impl OpenSegment {
    fn fail(&mut self, meta: LineMeta, kind: FailureKind, findings: Vec<(FindingKind, String)>) {
        let start = self.findings.len();
        for (finding_kind, message) in findings {
            self.findings.push(Finding {
                file: self.segment.name.clone(),
                line: Some(meta.line_no),
                offset: Some(meta.offset),
                kind: finding_kind,
                message,
            });
        }
        self.failures.push(LineFailure {
            segment: 0,
            line: meta.line_no,
            offset: meta.offset,
            kind,
            findings: (start..self.findings.len()).collect(),
        });
    }
}

enum Step {
    Record(Box<VerifiedRecord>),
    Continue,
    Done,
}

/// The walk over one audit directory: the chain state, and (for the sequential verifier) the
/// segments still to read. The parallel verifier takes the segment list away, reads and
/// analyses the lines on other threads and feeds the results back in order through
/// [`Walk::begin_segment`], [`Walk::apply_line`], [`Walk::end_segment`] and
/// [`Walk::stop_unreadable`], so both verifiers fold findings with the same code.
pub(crate) struct Walk<'a> {
    audit_dir: PathBuf,
    key: &'a AuditKey,
    want_records: bool,
    queue: VecDeque<Segment>,
    reader: Option<LineReader<Box<dyn BufRead + Send>>>,
    current: Option<OpenSegment>,
    prev: String,
    findings: Vec<Finding>,
    failures: Vec<LineFailure>,
    markers: Vec<Marker>,
    stats: Vec<SegmentStats>,
    files: Vec<String>,
    entries: u64,
    verified: u64,
    stopped: bool,
    finished: bool,
    bytes_total: u64,
    bytes_done_before: u64,
}

impl<'a> Walk<'a> {
    pub(crate) fn new(audit_dir: &Path, key: &'a AuditKey, want_records: bool) -> Walk<'a> {
        let mut walk = Walk {
            audit_dir: audit_dir.to_path_buf(),
            key,
            want_records,
            queue: VecDeque::new(),
            reader: None,
            current: None,
            prev: GENESIS_HMAC.to_owned(),
            findings: Vec::new(),
            failures: Vec::new(),
            markers: Vec::new(),
            stats: Vec::new(),
            files: Vec::new(),
            entries: 0,
            verified: 0,
            stopped: false,
            finished: false,
            bytes_total: 0,
            bytes_done_before: 0,
        };
        match walk_order(audit_dir) {
            Ok(segments) => {
                walk.bytes_total = segments
                    .iter()
                    .filter_map(|s| std::fs::metadata(&s.path).ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum();
                walk.queue = segments.into();
            }
            Err(err) => {
                walk.findings.push(Finding {
                    file: audit_dir.display().to_string(),
                    line: None,
                    offset: None,
                    kind: FindingKind::UnreadableDirectory,
                    message: format!(
                        "{}: cannot list the audit directory - {err}",
                        audit_dir.display()
                    ),
                });
                walk.stopped = true;
            }
        }
        walk
    }

    pub(crate) fn audit_dir(&self) -> &Path {
        &self.audit_dir
    }

    pub(crate) fn key(&self) -> &'a AuditKey {
        self.key
    }

    /// Hands the segments still to read to another reader.
    pub(crate) fn take_segments(&mut self) -> Vec<Segment> {
        if self.stopped {
            return Vec::new();
        }
        self.queue.drain(..).collect()
    }

    fn step(&mut self) -> Step {
        if self.stopped || self.finished {
            return Step::Done;
        }
        let (Some(current), Some(reader)) = (self.current.as_mut(), self.reader.as_mut()) else {
            let Some(segment) = self.queue.pop_front() else {
                self.finished = true;
                return Step::Done;
            };
            match open_segment(&self.audit_dir, &segment) {
                Ok((reader, counter)) => {
                    self.reader = Some(LineReader::new(reader));
                    self.begin_segment(segment, counter);
                }
                Err(err) => self.stop_unreadable(&segment, &err),
            }
            return Step::Continue;
        };
        match reader.next_line() {
            Ok(Some(line)) => {
                let line_no = current.line_no + 1;
                let analysis = analyze_line(
                    self.key,
                    &current.segment.name,
                    line_no,
                    line.view(),
                    Some(&self.prev),
                    self.want_records,
                );
                match self.apply_line(LineMeta::of(line_no, line.view()), analysis) {
                    Some(record) => Step::Record(Box::new(record)),
                    None => Step::Continue,
                }
            }
            Ok(None) => {
                let total = reader.position();
                self.reader = None;
                self.end_segment(total);
                Step::Continue
            }
            Err(err) => {
                let segment = current.segment.clone();
                self.reader = None;
                self.stop_unreadable(&segment, &err);
                Step::Continue
            }
        }
    }

    /// Starts checking `segment`, whose reader counts its on-disk bytes in `counter`.
    pub(crate) fn begin_segment(&mut self, segment: Segment, counter: ByteCounter) {
        self.current = Some(OpenSegment {
            segment,
            counter,
            line_no: 0,
            last_line: None,
            findings: Vec::new(),
            failures: Vec::new(),
            markers: Vec::new(),
            ok_end: 0,
            entries: 0,
            verified: 0,
        });
    }

    /// The reference stops at a segment it cannot read: it cannot establish linkage past it.
    /// The errors so far are all reported as hard errors, and no tear is computed. Whatever
    /// the unreadable segment contributed before the failure is dropped with it.
    pub(crate) fn stop_unreadable(&mut self, segment: &Segment, err: &io::Error) {
        self.current = None;
        let (kind, message) = match segment.kind {
            SegmentKind::Archived => (
                FindingKind::UnreadableArchive,
                format!("{}: unreadable archived segment - {err}", segment.name),
            ),
            SegmentKind::Live => (
                FindingKind::UnreadableSegment,
                format!("{}: segment disappeared during verification", segment.name),
            ),
        };
        self.findings.push(Finding {
            file: segment.name.clone(),
            line: None,
            offset: None,
            kind,
            message,
        });
        self.stopped = true;
    }

    /// Applies the chain state to the next line of the current segment: linkage and HMAC
    /// (a failure adopts the stored `hmac` as the new head), then the stated predecessor.
    /// Returns the record when it verified and the walk yields records.
    pub(crate) fn apply_line(
        &mut self,
        meta: LineMeta,
        analysis: LineAnalysis,
    ) -> Option<VerifiedRecord> {
        let current = self.current.as_mut()?;
        current.line_no = meta.line_no;
        current.last_line = Some((meta.line_no, meta.offset, meta.terminated));
        let parsed = match analysis {
            LineAnalysis::Blank => return None,
            LineAnalysis::Linked { head } => {
                // The analysis assumed the head of the batch's previous record line, which is
                // the head here: every record line makes its stored `hmac` the head, and the
                // lines are applied in the order they were analysed.
                let head = std::str::from_utf8(&head).unwrap_or_default();
                current.entries += 1;
                current.ok_end = meta.offset + meta.len + u64::from(meta.terminated);
                current.verified += 1;
                self.prev.clear();
                self.prev.push_str(head);
                return None;
            }
            LineAnalysis::Defect { kind, findings } => {
                current.entries += 1;
                current.fail(meta, kind, findings);
                return None;
            }
            LineAnalysis::Parsed(parsed) => parsed,
        };
        current.entries += 1;
        let ParsedLine {
            scheme,
            stored_hmac,
            entry_prev,
            pre_image,
            expected,
            event_type,
            stated_mismatch,
            marker_details,
            record,
        } = *parsed;
        let expected = match expected {
            Some((assumed, expected)) if assumed == self.prev => expected,
            _ => {
                FOLD_MACS.with(|count| count.set(count.get() + 1));
                hmac_over(self.key, scheme, &self.prev, &pre_image)
            }
        };
        let name = &current.segment.name;
        let line_no = meta.line_no;
        let mut mismatches = Vec::new();
        if !constant_time_eq(entry_prev.as_bytes(), self.prev.as_bytes()) {
            mismatches.push((
                FindingKind::PrevHmacMismatch,
                format!(
                    "{name}:{line_no}: prev_hmac mismatch (expected {}\u{2026}, got {}\u{2026})",
                    prefix_chars(&self.prev, 16),
                    prefix_chars(&entry_prev, 16)
                ),
            ));
        }
        if !constant_time_eq(stored_hmac.as_bytes(), expected.as_bytes()) {
            mismatches.push((
                FindingKind::HmacMismatch,
                format!(
                    "{name}:{line_no}: HMAC mismatch (expected {}\u{2026}, got {}\u{2026})",
                    prefix_chars(&expected, 16),
                    prefix_chars(&stored_hmac, 16)
                ),
            ));
        }
        if !mismatches.is_empty() {
            current.fail(meta, FailureKind::InvalidHmac, mismatches);
            self.prev = stored_hmac;
            return None;
        }
        if let Some(message) = stated_mismatch {
            // A genuine record (canonical bytes, valid MAC) that names the wrong predecessor is
            // not damage: it is reported as a hard error and never handed to the tear model,
            // which could otherwise reclassify it as clearable tail damage.
            current.findings.push(Finding {
                file: name.clone(),
                line: Some(line_no),
                offset: Some(meta.offset),
                kind: FindingKind::StatedPredecessorMismatch,
                message,
            });
        }
        current.ok_end = meta.offset + meta.len + u64::from(meta.terminated);
        current.verified += 1;
        if let Some(details) = marker_details {
            current.markers.push(Marker {
                segment: 0,
                line: line_no,
                torn: event_type == EVENT_CHAIN_TORN_RECORD,
                details,
            });
        }
        let Some((record, stored_value)) = record else {
            self.prev = stored_hmac;
            return None;
        };
        self.prev = stored_hmac.clone();
        let text = |key: &str| record.get(key).map(python_str).unwrap_or_default();
        Some(VerifiedRecord {
            segment: name.clone(),
            line: line_no,
            offset: meta.offset,
            scheme,
            timestamp: text("timestamp"),
            event_type,
            actor: text("actor"),
            resource_type: text("resource_type"),
            resource_id: text("resource_id"),
            details: details_of(&record),
            hmac: stored_hmac,
            prev_hmac: entry_prev,
            record: {
                let mut full = record.clone();
                if let Some(value) = stored_value {
                    full.insert("hmac", value);
                }
                full
            },
        })
    }

    /// Ends the current segment, `total` (decompressed) bytes long.
    pub(crate) fn end_segment(&mut self, total: u64) {
        let Some(mut current) = self.current.take() else {
            return;
        };
        let index = self.stats.len();
        let mut missing_newline = None;
        let last_line = current.last_line.map_or(0, |(n, _, _)| n);
        if let Some((line_no, offset, false)) = current.last_line {
            // The reference reports this before the segment's line errors.
            current.findings.insert(
                0,
                Finding {
                    file: current.segment.name.clone(),
                    line: Some(line_no),
                    offset: Some(offset),
                    kind: FindingKind::MissingTrailingNewline,
                    message: format!("{}: missing trailing newline", current.segment.name),
                },
            );
            for failure in &mut current.failures {
                failure.findings.iter_mut().for_each(|i| *i += 1);
            }
            missing_newline = Some(self.findings.len());
        }
        let base = self.findings.len();
        self.findings.append(&mut current.findings);
        for mut failure in current.failures {
            failure.segment = index;
            failure.findings.iter_mut().for_each(|i| *i += base);
            self.failures.push(failure);
        }
        for mut marker in current.markers {
            marker.segment = index;
            self.markers.push(marker);
        }
        self.entries += current.entries;
        self.verified += current.verified;
        self.bytes_done_before += current.counter.get();
        self.files.push(current.segment.relative.clone());
        self.stats.push(SegmentStats {
            name: current.segment.name,
            total,
            ok_end: current.ok_end,
            last_line,
            missing_newline,
        });
    }

    /// On-disk bytes read so far.
    fn progress(&self) -> VerifyProgress {
        VerifyProgress {
            bytes_done: self.bytes_done_before
                + self.current.as_ref().map_or(0, |c| c.counter.get()),
            bytes_total: self.bytes_total,
        }
    }

    /// Segments finished so far.
    fn segments_done(&self) -> usize {
        self.stats.len()
    }

    fn next_record(&mut self) -> Option<VerifiedRecord> {
        loop {
            match self.step() {
                Step::Record(record) => return Some(*record),
                Step::Continue => {}
                Step::Done => return None,
            }
        }
    }

    /// Walks to the end and folds the observations into the report.
    pub(crate) fn finish(self) -> VerifyReport {
        self.finish_with_progress(&mut |_| {})
    }

    /// [`Walk::finish`], calling `progress` at most once per [`PROGRESS_STEP_BYTES`], after
    /// each segment, and once at the end.
    pub(crate) fn finish_with_progress(
        mut self,
        progress: &mut dyn FnMut(VerifyProgress),
    ) -> VerifyReport {
        self.want_records = false;
        let mut gate = ProgressGate::new(&self);
        loop {
            let step = self.step();
            let done = matches!(step, Step::Done);
            gate.tick(&self, done, progress);
            if done {
                break;
            }
        }
        self.report()
    }

    /// Folds the observations into the report.
    pub(crate) fn report(self) -> VerifyReport {
        if self.stopped {
            // Partial walks report every error so far as hard, without the tear fold, as the
            // reference does when it returns early.
            return VerifyReport {
                errors: self.findings,
                tears: Vec::new(),
                entries: self.entries,
                verified_entries: self.verified,
                head: self.prev,
                files: self.files,
            };
        }
        let (errors, tears) =
            fold_tears(&self.findings, &self.failures, &self.markers, &self.stats);
        VerifyReport {
            errors,
            tears,
            entries: self.entries,
            verified_entries: self.verified,
            head: self.prev,
            files: self.files,
        }
    }
}

/// Decides when the progress callback is due: after each finished segment, once per
/// [`PROGRESS_STEP_BYTES`] read, and at the end.
pub(crate) struct ProgressGate {
    reported: u64,
    segments_seen: usize,
}

impl ProgressGate {
    pub(crate) fn new(walk: &Walk<'_>) -> ProgressGate {
        ProgressGate {
            reported: 0,
            segments_seen: walk.segments_done(),
        }
    }

    pub(crate) fn tick(
        &mut self,
        walk: &Walk<'_>,
        done: bool,
        progress: &mut dyn FnMut(VerifyProgress),
    ) {
        let now = walk.progress();
        if done
            || walk.segments_done() != self.segments_seen
            || now.bytes_done >= self.reported + PROGRESS_STEP_BYTES
        {
            self.reported = now.bytes_done;
            self.segments_seen = walk.segments_done();
            progress(now);
        }
    }
}

/// Opens a segment for forward reading: archives directly, live segments with the fallback to
/// their archived copy.
pub(crate) fn open_segment(
    audit_dir: &Path,
    segment: &Segment,
) -> io::Result<(Box<dyn BufRead + Send>, ByteCounter)> {
    match segment.kind {
        SegmentKind::Archived => open_forward(segment),
        SegmentKind::Live => open_live_with_fallback(audit_dir, segment),
    }
}

/// The predecessor a record states in `details.prev_chain_digest`, when it states one: legacy
/// skill-catalog events, absent, non-string and empty values make no claim.
fn stated_predecessor<'r>(event_type: &str, record: &'r Object) -> Option<&'r str> {
    if LEGACY_ANCHOR_EVENT_TYPES.contains(&event_type) {
        return None;
    }
    match record.get("details")? {
        Value::Object(details) => match details.get(PREV_CHAIN_DIGEST_KEY)? {
            Value::Str(stated) if !stated.is_empty() => Some(stated),
            _ => None,
        },
        _ => None,
    }
}

/// The live name of a segment (`X.jsonl.gz` → `X.jsonl`).
fn live_name(name: &str) -> &str {
    name.strip_suffix(".gz").unwrap_or(name)
}

fn clamp_i64(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
}

/// `_build_verify_report`: sealed tears claim the failures inside their recorded span; the
/// unclaimed failures after the last verified record of the final segment form the unsealed
/// tail tear; acknowledgements match by `(segment, byte_offset)`; everything unclaimed is hard.
fn fold_tears(
    findings: &[Finding],
    failures: &[LineFailure],
    markers: &[Marker],
    stats: &[SegmentStats],
) -> (Vec<Finding>, Vec<Tear>) {
    let mut claimed_failures = vec![false; failures.len()];
    let mut claimed_findings = vec![false; findings.len()];
    let mut tears: Vec<Tear> = Vec::new();
    let mut seen: HashSet<(String, i128)> = HashSet::new();

    for marker in markers.iter().filter(|m| m.torn) {
        let Some(stats_of_marker) = stats.get(marker.segment) else {
            continue;
        };
        let segment = live_name(&stats_of_marker.name).to_owned();
        let recorded_segment = marker
            .details
            .get("segment")
            .map(python_str)
            .unwrap_or_default();
        if recorded_segment != segment {
            continue;
        }
        // Where the reference's `int(...)` would raise, the marker vouches for nothing.
        let Some(byte_offset) = python_int_or_zero(marker.details.get("byte_offset")) else {
            continue;
        };
        let prefix_end = match marker.details.get("verified_prefix_offset") {
            None => Some(byte_offset),
            Some(value) => python_int_or_zero(Some(value)),
        };
        let Some(prefix_end) = prefix_end else {
            continue;
        };
        if !seen.insert((segment.clone(), byte_offset)) {
            continue;
        }
        let mut raw = Vec::new();
        let mut first_line = None;
        for (index, failure) in failures.iter().enumerate() {
            if claimed_failures[index] || failure.segment != marker.segment {
                continue;
            }
            let offset = i128::from(failure.offset);
            if prefix_end <= offset && offset < byte_offset {
                claimed_failures[index] = true;
                first_line.get_or_insert(failure.line);
                for &f in &failure.findings {
                    claimed_findings[f] = true;
                    raw.push(findings[f].clone());
                }
            }
        }
        let class = marker
            .details
            .get("tear_class")
            .map_or_else(|| "unknown".to_owned(), python_str);
        tears.push(Tear {
            segment,
            line: first_line.unwrap_or(marker.line),
            byte_offset: clamp_i64(byte_offset),
            verified_prefix_offset: clamp_i64(prefix_end),
            class: TearClass::from_name(&class),
            sealed: true,
            acknowledged: false,
            raw_errors: raw,
        });
    }

    // A crash damages the suffix of history that verified; when nothing verified anywhere the
    // damage is a broken or foreign chain and stays hard.
    if let Some(final_stats) = stats.last()
        && stats.iter().any(|s| s.ok_end > 0)
    {
        let final_index = stats.len() - 1;
        let tail: Vec<usize> = failures
            .iter()
            .enumerate()
            .filter(|(index, failure)| {
                !claimed_failures[*index]
                    && failure.segment == final_index
                    && failure.offset >= final_stats.ok_end
            })
            .map(|(index, _)| index)
            .collect();
        let segment = live_name(&final_stats.name).to_owned();
        let total = i128::from(final_stats.total);
        if !tail.is_empty() {
            let mut raw = Vec::new();
            if let Some(f) = final_stats.missing_newline {
                claimed_findings[f] = true;
                raw.push(findings[f].clone());
            }
            let mut kinds = Vec::new();
            for &index in &tail {
                claimed_failures[index] = true;
                kinds.push(failures[index].kind);
                for &f in &failures[index].findings {
                    claimed_findings[f] = true;
                    raw.push(findings[f].clone());
                }
            }
            if seen.insert((segment.clone(), total)) {
                tears.push(Tear {
                    segment,
                    line: failures[tail[0]].line,
                    byte_offset: clamp_i64(total),
                    verified_prefix_offset: clamp_i64(i128::from(final_stats.ok_end)),
                    class: tail_tear_class(&kinds, final_stats.missing_newline.is_some()),
                    sealed: false,
                    acknowledged: false,
                    raw_errors: raw,
                });
            }
        } else if let Some(f) = final_stats.missing_newline {
            // The final record is valid and lost only its terminator: nothing failed, but the
            // tail is still torn and the next append must seal it.
            claimed_findings[f] = true;
            if !seen.contains(&(segment.clone(), total)) {
                tears.push(Tear {
                    segment,
                    line: final_stats.last_line,
                    byte_offset: clamp_i64(total),
                    verified_prefix_offset: clamp_i64(total),
                    class: TearClass::UnterminatedRecord,
                    sealed: false,
                    acknowledged: false,
                    raw_errors: vec![findings[f].clone()],
                });
            }
        }
    }

    let acknowledged: HashSet<(String, i128)> = markers
        .iter()
        .filter(|m| !m.torn)
        .filter_map(|m| {
            let segment = m.details.get("segment").map(python_str).unwrap_or_default();
            let offset = python_int_or_zero(m.details.get("byte_offset"))?;
            Some((segment, offset))
        })
        .collect();
    for tear in &mut tears {
        tear.acknowledged =
            acknowledged.contains(&(tear.segment.clone(), i128::from(tear.byte_offset)));
    }

    let errors = findings
        .iter()
        .zip(&claimed_findings)
        .filter(|(_, claimed)| !**claimed)
        .map(|(finding, _)| finding.clone())
        .collect();
    (errors, tears)
}

/// `_tail_tear_class`: the damage class of an unsealed tail from its failure kinds.
fn tail_tear_class(kinds: &[FailureKind], unterminated: bool) -> TearClass {
    if kinds.contains(&FailureKind::Undecodable) || kinds.len() != 1 {
        return TearClass::GarbageBytes;
    }
    match kinds[0] {
        FailureKind::InvalidJson if unterminated => TearClass::PartialRecord,
        FailureKind::InvalidHmac => TearClass::InvalidHmac,
        FailureKind::NonCanonical | FailureKind::NotObject => TearClass::NonCanonical,
        FailureKind::InvalidJson
        | FailureKind::Undecodable
        | FailureKind::UnsupportedScheme
        | FailureKind::TooLong => TearClass::GarbageBytes,
    }
}

/// The most threads [`verify`] analyses lines on: beyond a handful the single reader and the
/// in-order fold are the limit.
const MAX_WORKERS: usize = 8;

/// Verifies the chain in `audit_dir` under `key`. Reads only; writes nothing, locks nothing.
///
/// The lines are analysed on every available core; the report is the one
/// [`verify_sequential`] returns, finding for finding, and memory stays bounded whatever the
/// chain's length.
pub fn verify(audit_dir: &Path, key: &AuditKey) -> VerifyReport {
    verify_with_progress(audit_dir, key, &mut |_| {})
}

/// [`verify`] on the calling thread alone: the reference the parallel verifier is tested
/// against, and the cheapest choice when only one core is free.
pub fn verify_sequential(audit_dir: &Path, key: &AuditKey) -> VerifyReport {
    Walk::new(audit_dir, key, false).finish()
}

/// [`verify`] with a progress callback, called at most once per MiB read, after each segment,
/// and once at the end.
pub fn verify_with_progress(
    audit_dir: &Path,
    key: &AuditKey,
    progress: &mut dyn FnMut(VerifyProgress),
) -> VerifyReport {
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_WORKERS);
    verify_with_workers(
        audit_dir,
        key,
        workers,
        super::verify_parallel::BATCH_LINES,
        progress,
    )
}

/// [`verify_with_progress`] with `workers` analysing threads (one means the sequential walk)
/// dealt `batch_lines` lines at a time.
pub(crate) fn verify_with_workers(
    audit_dir: &Path,
    key: &AuditKey,
    workers: usize,
    batch_lines: usize,
    progress: &mut dyn FnMut(VerifyProgress),
) -> VerifyReport {
    let walk = Walk::new(audit_dir, key, false);
    if workers < 2 {
        return walk.finish_with_progress(progress);
    }
    super::verify_parallel::finish(walk, workers, batch_lines, progress)
}

/// A read-only iterator over the records that verify, in chain order, with the verdict at the
/// end ([`VerifiedRecords::finish`]).
///
/// ```no_run
/// # use bernstein_journal::{audit, key::AuditKey};
/// # fn demo(dir: &std::path::Path, key: &AuditKey) {
/// let mut records = audit::verified_records(dir, key);
/// let calls: Vec<_> = records
///     .by_ref()
///     .filter(|r| r.event_type == "mcp.stateless_call")
///     .collect();
/// let report = records.finish();
/// assert!(report.ok(), "{:?}", report.errors);
/// # let _ = calls;
/// # }
/// ```
pub struct VerifiedRecords<'a> {
    walk: Walk<'a>,
}

impl VerifiedRecords<'_> {
    /// Walks whatever is left and returns the full report.
    pub fn finish(self) -> VerifyReport {
        self.walk.finish()
    }
}

impl Iterator for VerifiedRecords<'_> {
    type Item = VerifiedRecord;

    fn next(&mut self) -> Option<VerifiedRecord> {
        self.walk.next_record()
    }
}

/// Starts a verifying walk that yields each record whose linkage and HMAC verified.
pub fn verified_records<'a>(audit_dir: &Path, key: &'a AuditKey) -> VerifiedRecords<'a> {
    VerifiedRecords {
        walk: Walk::new(audit_dir, key, true),
    }
}

#[cfg(test)]
mod tests {
    use bernstein_protocol::pyjson::{Dialect, Object, Value};

    use super::*;
    use crate::audit::record::expected_hmac;

    const PREV: &str = "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12";

    fn body(event: &str, stated: &str) -> Object {
        Object::new()
            .with("actor", "a")
            .with(
                "details",
                Object::new()
                    .with("cost_usd", 0.25)
                    .with("prev_chain_digest", stated),
            )
            .with("event_type", event)
            .with("prev_hmac", PREV)
            .with("scheme", 2)
    }

    fn line(key: &AuditKey, body: &Object) -> (String, String) {
        let hmac = expected_hmac(key, Scheme::V2, PREV, body);
        let line = Value::Object(body.clone().with("hmac", hmac.clone())).dumps(Dialect::PY_SPACED);
        (line, hmac)
    }

    fn check(line: &str, assumed: &str, expect: Option<&str>) {
        let key = AuditKey::from_master_bytes(b"k".to_vec());
        let head = linked_line(&ChainMacs::new(&key), line.as_bytes(), assumed);
        assert_eq!(
            head.as_ref().map(|head| std::str::from_utf8(head).unwrap()),
            expect,
            "{line}"
        );
    }

    /// What a record's `details.prev_chain_digest` claims on the full path: a non-empty string
    /// is a claim; absent, empty, non-string values, `details` that is no object, and legacy
    /// anchor events make none.
    #[test]
    fn a_stated_predecessor_is_a_non_empty_string_in_details() {
        let check = |event: &str, details: Value, expect: Option<&str>| {
            let record = Object::new().with("details", details.clone());
            assert_eq!(
                stated_predecessor(event, &record),
                expect,
                "{event} {details:?}"
            );
        };
        let digest = Object::new().with(PREV_CHAIN_DIGEST_KEY, "ab");
        check("e", Value::Object(digest.clone()), Some("ab"));
        check("skill.catalog.install", Value::Object(digest), None);
        check(
            "e",
            Value::Object(Object::new().with(PREV_CHAIN_DIGEST_KEY, "")),
            None,
        );
        check(
            "e",
            Value::Object(Object::new().with(PREV_CHAIN_DIGEST_KEY, 5)),
            None,
        );
        check("e", Value::Object(Object::new()), None);
        check("e", Value::from("ab"), None);
        assert_eq!(stated_predecessor("e", &Object::new()), None);
    }

    /// `_tail_tear_class`: one failure kind decides the class; undecodable bytes, several
    /// failures or none are garbage.
    #[test]
    fn a_tail_tear_is_classed_by_its_one_failure() {
        use FailureKind::{InvalidHmac, InvalidJson, NonCanonical, NotObject, Undecodable};
        let check = |kinds: &[FailureKind], unterminated: bool, expect: TearClass| {
            assert_eq!(
                tail_tear_class(kinds, unterminated),
                expect,
                "{kinds:?} {unterminated}"
            );
        };
        check(&[InvalidJson], true, TearClass::PartialRecord);
        check(&[InvalidJson], false, TearClass::GarbageBytes);
        check(&[InvalidHmac], false, TearClass::InvalidHmac);
        check(&[NonCanonical], false, TearClass::NonCanonical);
        check(&[NotObject], true, TearClass::NonCanonical);
        check(&[Undecodable], true, TearClass::GarbageBytes);
        check(&[InvalidHmac, InvalidHmac], false, TearClass::GarbageBytes);
        check(&[InvalidJson, InvalidHmac], true, TearClass::GarbageBytes);
        check(&[], true, TearClass::GarbageBytes);
    }

    #[test]
    fn offsets_beyond_i64_are_clamped_to_its_ends() {
        let check = |value: i128, expect: i64| assert_eq!(clamp_i64(value), expect, "{value}");
        check(0, 0);
        check(-7, -7);
        check(i128::from(i64::MAX) + 1, i64::MAX);
        check(i128::from(i64::MIN) - 1, i64::MIN);
        check(i128::MAX, i64::MAX);
        check(i128::MIN, i64::MIN);
    }

    /// A sealed tear claims only the failures of its own segment inside its recorded span
    /// (`verified_prefix_offset` up to `byte_offset`); a failure after the span, and one at an
    /// offset inside the span but in another segment, stay hard.
    #[test]
    fn a_sealed_tear_claims_only_its_own_span() {
        let finding = |file: &str, offset: u64| Finding {
            file: file.to_owned(),
            line: Some(offset / 100 + 1),
            offset: Some(offset),
            kind: FindingKind::InvalidJson,
            message: format!("{file}@{offset}"),
        };
        let findings = vec![
            finding("2026-01-01.jsonl", 100),
            finding("2026-01-01.jsonl", 300),
            finding("2026-01-02.jsonl", 100),
            finding("2026-01-01.jsonl", 200),
        ];
        let failure = |segment: usize, offset: u64, index: usize| LineFailure {
            segment,
            line: offset / 100 + 1,
            offset,
            kind: FailureKind::InvalidJson,
            findings: vec![index],
        };
        // The span ends before `byte_offset`: a failure starting there is not inside it.
        let failures = vec![
            failure(0, 100, 0),
            failure(0, 300, 1),
            failure(1, 100, 2),
            failure(0, 200, 3),
        ];
        let markers = vec![Marker {
            segment: 0,
            line: 5,
            torn: true,
            details: Object::new()
                .with("segment", "2026-01-01.jsonl")
                .with("byte_offset", 200)
                .with("verified_prefix_offset", 50)
                .with("tear_class", "partial_record"),
        }];
        let stats = |name: &str| SegmentStats {
            name: name.to_owned(),
            total: 600,
            ok_end: 600,
            last_line: 6,
            missing_newline: None,
        };
        let stats = vec![stats("2026-01-01.jsonl"), stats("2026-01-02.jsonl")];
        let (hard, tears) = fold_tears(&findings, &failures, &markers, &stats);
        let messages =
            |list: &[Finding]| list.iter().map(|f| f.message.clone()).collect::<Vec<_>>();
        assert_eq!(
            messages(&hard),
            [
                "2026-01-01.jsonl@300",
                "2026-01-02.jsonl@100",
                "2026-01-01.jsonl@200"
            ]
        );
        assert_eq!(tears.len(), 1, "{tears:?}");
        assert_eq!(messages(&tears[0].raw_errors), ["2026-01-01.jsonl@100"]);
        assert_eq!(
            (
                tears[0].byte_offset,
                tears[0].verified_prefix_offset,
                tears[0].line
            ),
            (200, 50, 2)
        );
    }

    /// A legacy anchor event's `details.prev_chain_digest` is not a stated predecessor, on the
    /// scanner's path (`want_records` false) as on the full one; any other event's is.
    #[test]
    fn only_legacy_anchor_events_state_no_predecessor_on_either_path() {
        let key = AuditKey::from_master_bytes(b"k".to_vec());
        for (event, states) in [
            ("skill.catalog.install", false),
            ("skill.catalog.upgrade", false),
            ("task.created", true),
        ] {
            let (text, _) = line(&key, &body(event, &"1".repeat(64)));
            for want_records in [false, true] {
                let view = LineView {
                    offset: 0,
                    len: text.len() as u64,
                    bytes: Some(text.as_bytes()),
                    terminated: true,
                };
                let LineAnalysis::Parsed(parsed) =
                    analyze_line(&key, "s.jsonl", 1, view, None, want_records)
                else {
                    panic!("{event}: not parsed");
                };
                assert_eq!(
                    parsed.stated_mismatch.is_some(),
                    states,
                    "{event}, want_records {want_records}"
                );
            }
        }
    }

    #[test]
    fn the_fast_path_takes_only_a_whole_linked_authentic_line() {
        let key = AuditKey::from_master_bytes(b"k".to_vec());
        let (good, hmac) = line(&key, &body("task.created", PREV));
        check(&good, PREV, Some(&hmac));
        // Another head than the one the line names.
        check(&good, &"0".repeat(64), None);
        // A byte of the body changed, so the MAC no longer matches.
        check(
            &good.replace("\"actor\": \"a\"", "\"actor\": \"b\""),
            PREV,
            None,
        );
        // Signed under another key.
        let (foreign, _) = line(
            &AuditKey::from_master_bytes(b"j".to_vec()),
            &body("e", PREV),
        );
        check(&foreign, PREV, None);
        // Authentic, but stating another predecessor: there is a finding to make.
        let (stated, _) = line(&key, &body("task.created", &"1".repeat(64)));
        check(&stated, PREV, None);
        // A tear marker, whose details the walk keeps.
        let (marker, _) = line(&key, &body(EVENT_CHAIN_TORN_RECORD, PREV));
        check(&marker, PREV, None);
        // Not canonical: the same members with other spacing.
        check(
            &good.replace(", \"event_type\"", ",\"event_type\""),
            PREV,
            None,
        );
        // Without its `hmac`.
        let cut = good.find(", \"hmac\"").unwrap();
        check(
            &format!("{}{}", &good[..cut], &good[cut + 76..]),
            PREV,
            None,
        );
    }
}
