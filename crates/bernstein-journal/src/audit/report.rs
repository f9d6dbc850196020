//! The verifier's findings, tears and verdict.
//!
//! Every type here is plain data with `as_str()` kind names, so the CLI can render
//! `{"ok", "errors": [...], "tears": [...], "entries", "head"}` without this crate depending on
//! serde.

use std::fmt;

/// What a hard-error finding is about. `as_str()` gives the machine name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FindingKind {
    /// The segment does not end in `\n` (`<seg>: missing trailing newline`).
    MissingTrailingNewline,
    /// The line is not UTF-8 (`undecodable bytes at offset N - …`).
    Undecodable,
    /// The line is not JSON (`invalid JSON - <parser message>`).
    InvalidJson,
    /// The line is JSON but not an object (`entry is not a JSON object`).
    NotAnObject,
    /// The record's `scheme` is neither 1 nor 2 (`unsupported audit scheme N`).
    UnsupportedScheme,
    /// The line is not byte-identical to `PY-SPACED(parse(line))` (`non-canonical line bytes`).
    NonCanonical,
    /// The record's `prev_hmac` is not the walker's chain head (`prev_hmac mismatch (…)`).
    PrevHmacMismatch,
    /// The stored `hmac` is not the one recomputed from the chain head (`HMAC mismatch (…)`).
    HmacMismatch,
    /// A genuine record's `details.prev_chain_digest` differs from its own `prev_hmac`.
    StatedPredecessorMismatch,
    /// The line is longer than [`super::MAX_LINE_BYTES`] and was not parsed.
    LineTooLong,
    /// An archived segment cannot be decompressed; verification stopped there.
    UnreadableArchive,
    /// A live segment cannot be read; verification stopped there.
    UnreadableSegment,
    /// The audit directory cannot be listed.
    UnreadableDirectory,
}

impl FindingKind {
    /// The snake_case machine name.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::MissingTrailingNewline => "missing_trailing_newline",
            FindingKind::Undecodable => "undecodable",
            FindingKind::InvalidJson => "invalid_json",
            FindingKind::NotAnObject => "not_an_object",
            FindingKind::UnsupportedScheme => "unsupported_scheme",
            FindingKind::NonCanonical => "non_canonical",
            FindingKind::PrevHmacMismatch => "prev_hmac_mismatch",
            FindingKind::HmacMismatch => "hmac_mismatch",
            FindingKind::StatedPredecessorMismatch => "stated_predecessor_mismatch",
            FindingKind::LineTooLong => "line_too_long",
            FindingKind::UnreadableArchive => "unreadable_archive",
            FindingKind::UnreadableSegment => "unreadable_segment",
            FindingKind::UnreadableDirectory => "unreadable_directory",
        }
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem the verifier found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The segment's file name as the reference prints it: `2026-07-03.jsonl` for a live
    /// segment, `2026-07-01.jsonl.gz` for an archived one (no `archive/` prefix).
    pub file: String,
    /// 1-based physical line (`\n`-separated, empty lines counted). For
    /// `missing_trailing_newline` it is the unterminated last line. `None` for findings about a
    /// whole file or directory.
    pub line: Option<u64>,
    /// Byte offset of the start of that line inside the (decompressed) segment.
    pub offset: Option<u64>,
    /// The machine kind.
    pub kind: FindingKind,
    /// The message in the reference's wording, e.g.
    /// `2026-07-02.jsonl:2: HMAC mismatch (expected b3dd6911c1bcde60…, got c5d71c1d9634c280…)`.
    pub message: String,
}

/// How the damaged bytes of a tear look.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TearClass {
    /// The final record is valid and only its terminator is missing.
    UnterminatedRecord,
    /// One unterminated line that does not parse: a crash mid-write.
    PartialRecord,
    /// One line that parses as a canonical `hmac`-bearing object but fails its MAC.
    InvalidHmac,
    /// One line that parses but is not in the writer's byte framing.
    NonCanonical,
    /// Undecodable bytes, several damaged lines, or anything else.
    GarbageBytes,
    /// A class recorded by a sealing record that is not one of the above (the reference copies
    /// whatever the record says, `"unknown"` when it says nothing).
    Recorded(String),
}

impl TearClass {
    /// The class name as the reference writes it.
    pub fn as_str(&self) -> &str {
        match self {
            TearClass::UnterminatedRecord => "unterminated_record",
            TearClass::PartialRecord => "partial_record",
            TearClass::InvalidHmac => "invalid_hmac",
            TearClass::NonCanonical => "non_canonical",
            TearClass::GarbageBytes => "garbage_bytes",
            TearClass::Recorded(name) => name,
        }
    }

    /// The class for a recorded name.
    pub fn from_name(name: &str) -> TearClass {
        match name {
            "unterminated_record" => TearClass::UnterminatedRecord,
            "partial_record" => TearClass::PartialRecord,
            "invalid_hmac" => TearClass::InvalidHmac,
            "non_canonical" => TearClass::NonCanonical,
            "garbage_bytes" => TearClass::GarbageBytes,
            other => TearClass::Recorded(other.to_owned()),
        }
    }
}

impl fmt::Display for TearClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Crash-shaped damage at the tail of the chain, or its sealed remains (`TearEvidence`).
///
/// A tear is not a hard error; it fails verification until a `chain.tear_acknowledged` record
/// names the same `(segment, byte_offset)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tear {
    /// The live segment name the tear sits in (an archived copy is named by its live name).
    pub segment: String,
    /// The first physical line the tear covers. For a tear with no damaged line (only a lost
    /// terminator) it is the line that lost it; for a sealed tear whose damaged lines are gone
    /// it is the sealing record's line.
    pub line: u64,
    /// The segment size when the tear was observed or sealed: the offset an acknowledgement
    /// must name.
    pub byte_offset: i64,
    /// The end of the last verifiable record before the damage.
    pub verified_prefix_offset: i64,
    /// The damage class.
    pub class: TearClass,
    /// Whether a verified `chain.torn_record` record anchors it.
    pub sealed: bool,
    /// Whether a verified `chain.tear_acknowledged` record names it.
    pub acknowledged: bool,
    /// The findings this tear subsumes (they are not listed as hard errors).
    pub raw_errors: Vec<Finding>,
}

impl Tear {
    /// The reference's one-line description, e.g. `2026-07-03.jsonl: invalid_hmac tear at byte
    /// 3154 (verifiable prefix ends at 2312; unsealed, UNACKNOWLEDGED)`.
    pub fn describe(&self) -> String {
        format!(
            "{}: {} tear at byte {} (verifiable prefix ends at {}; {}, {})",
            self.segment,
            self.class,
            self.byte_offset,
            self.verified_prefix_offset,
            if self.sealed { "sealed" } else { "unsealed" },
            if self.acknowledged {
                "acknowledged"
            } else {
                "UNACKNOWLEDGED"
            }
        )
    }
}

/// The outcome of verifying a whole audit directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Hard errors in walk order (the reference's `verify_detailed().hard_errors`).
    pub errors: Vec<Finding>,
    /// Tears, sealed ones first (in chain order), then the unsealed tail.
    pub tears: Vec<Tear>,
    /// Non-empty lines walked: every record or damaged line the verifier visited (a segment
    /// abandoned as unreadable contributes nothing).
    pub entries: u64,
    /// Records among them whose linkage and HMAC verified.
    pub verified_entries: u64,
    /// The walker's chain head after the last line: the last adopted `hmac`, genesis
    /// (`"0"*64`) for an empty chain.
    pub head: String,
    /// The segments walked, in walk order, relative to the audit directory
    /// (`archive/2026-07-01.jsonl.gz`, `2026-07-02.jsonl`, ...).
    pub files: Vec<String>,
}

impl VerifyReport {
    /// The verdict of the reference's `verify()`: no hard error and no unacknowledged tear.
    pub fn ok(&self) -> bool {
        self.errors.is_empty() && self.tears.iter().all(|t| t.acknowledged)
    }

    /// Tears no acknowledgement names.
    pub fn unacknowledged_tears(&self) -> impl Iterator<Item = &Tear> {
        self.tears.iter().filter(|t| !t.acknowledged)
    }

    /// The error list of the reference's `verify()`: the hard errors, then for every
    /// unacknowledged tear its raw errors (or its description when it has none).
    pub fn verify_messages(&self) -> Vec<String> {
        let mut out: Vec<String> = self.errors.iter().map(|f| f.message.clone()).collect();
        for tear in self.unacknowledged_tears() {
            if tear.raw_errors.is_empty() {
                out.push(format!(
                    "{} - run 'bernstein audit ack-tear' after investigating",
                    tear.describe()
                ));
            } else {
                out.extend(tear.raw_errors.iter().map(|f| f.message.clone()));
            }
        }
        out
    }
}

/// How far a verification has got, reported to a progress callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyProgress {
    /// On-disk bytes read so far (compressed bytes for archived segments).
    pub bytes_done: u64,
    /// Sum of the on-disk sizes of all segments when the walk started. `bytes_done` can exceed
    /// it when a segment grows during the walk.
    pub bytes_total: u64,
}
