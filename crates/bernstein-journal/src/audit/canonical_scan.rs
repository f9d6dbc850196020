//! The verifier's fast path: one pass over a line's bytes that proves the line is canonical
//! `PY-SPACED` JSON and picks out the few members the chain checks read, without building a
//! tree or re-serialising it.
//!
//! The full path ([`super::record::parse_record_line`]) decodes the line, parses it into a
//! [`bernstein_protocol::pyjson::Value`], re-serialises that and compares the bytes. On a chain
//! of well-formed entries that is most of the verifier's work besides the HMAC. This scanner
//! accepts only the plain shape every writer emits: an object of ASCII bytes, keys without
//! escapes in strictly increasing order, `", "` and `": "` separators, strings whose escapes are
//! exactly the ones Python's `ensure_ascii` encoder writes, integers in their shortest form,
//! floats exactly as Python's `repr` writes them, and the three literals. Anything else (a key
//! with an escape, a lone surrogate, a scheme
//! it does not know, a marker event whose `details` the walk needs, deep nesting) makes it
//! decline, and the caller takes the full path. So the scanner never decides a defect: a line it
//! accepts is one the full path accepts with the same members, and the property tests below
//! hold it to that.

use bernstein_protocol::pyjson::{Dialect, Value, plain_run, write_repr_layout};

/// Nesting deeper than this is left to the full path (which has its own limit).
const MAX_SCAN_DEPTH: usize = 64;

/// Longer integers are left to the full path, which refuses those beyond Python's limit on
/// integer string conversion.
const MAX_SCAN_INT_DIGITS: usize = 64;

/// The members of a line the scanner accepted, borrowed from the line. A member that is absent
/// is `None`; present members are strings of printable ASCII without escapes, so their bytes
/// are their text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScannedRecord<'a> {
    /// The `scheme` number (1 when absent, as the reference reads it).
    pub(crate) scheme: u8,
    /// The stored `hmac`.
    pub(crate) hmac: Option<&'a [u8]>,
    /// `prev_hmac`.
    pub(crate) prev_hmac: Option<&'a [u8]>,
    /// `event_type`.
    pub(crate) event_type: Option<&'a [u8]>,
    /// `details.prev_chain_digest`, when `details` is an object holding it as a string.
    pub(crate) stated_predecessor: Option<&'a [u8]>,
    /// The members of `details` the run-head index reads.
    pub(crate) run_details: RunDetails<'a>,
    /// The byte range to cut out of the line to get the HMAC pre-image: the top-level `hmac`
    /// member and the `", "` that joined it to a neighbour. `None` when the line has no `hmac`
    /// member, and then the whole line is the pre-image.
    pub(crate) hmac_cut: Option<(usize, usize)>,
}

/// The members of a record's `details` that name its runs and a seal's outcome
/// ([`super::head_index`] reads them), each as the scanner found it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RunDetails<'a> {
    /// `details.run_id`.
    pub(crate) run_id: DetailText<'a>,
    /// `details.task_id`.
    pub(crate) task_id: DetailText<'a>,
    /// `details.status`.
    pub(crate) status: DetailText<'a>,
    /// `details.journal_head`.
    pub(crate) journal_head: DetailText<'a>,
}

/// One member of `details`, as far as a reader of its text needs to know.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum DetailText<'a> {
    /// Absent, not a string, or `details` is not an object: the full path reads no text.
    #[default]
    Absent,
    /// A string with no escape: its bytes are its text.
    Plain(&'a [u8]),
    /// A string with an escape, whose text only the full path decodes.
    Escaped,
}

impl<'a> ScannedRecord<'a> {
    /// The HMAC pre-image of the scanned `line` as the two pieces around the `hmac` member: the
    /// same bytes as [`super::record::canonical_line_pre_image`] without copying them.
    pub(crate) fn pre_image<'l>(&self, line: &'l [u8]) -> (&'l [u8], &'l [u8]) {
        match self.hmac_cut {
            Some((start, end)) => (&line[..start], &line[end..]),
            None => (line, &[]),
        }
    }
}

/// Scans `line` (without its newline). `None` means "not proven canonical here": the caller
/// must take the full path, which reports whatever is wrong, if anything is.
pub(crate) fn scan_canonical_record(line: &[u8]) -> Option<ScannedRecord<'_>> {
    let mut scanner = Scanner {
        bytes: line,
        at: 0,
        record: ScannedRecord {
            scheme: 1,
            hmac: None,
            prev_hmac: None,
            event_type: None,
            stated_predecessor: None,
            run_details: RunDetails::default(),
            hmac_cut: None,
        },
    };
    scanner.object(0, Place::Top)?;
    (scanner.at == line.len()).then_some(scanner.record)
}

/// Whether object key `previous` sorts strictly before `key`, as bytes. Keys of one object
/// mostly differ in their first byte, which decides without a call to `memcmp`.
fn sorts_before(previous: &[u8], key: &[u8]) -> bool {
    match (previous.first(), key.first()) {
        (Some(a), Some(b)) if a != b => a < b,
        _ => previous < key,
    }
}

/// Whether the float token `text` is what Python's `repr` writes for the value it parses to,
/// found by parsing it and writing the value out again as the full path does.
fn float_written_back(text: &str) -> bool {
    text.parse::<f64>()
        .is_ok_and(|value| Value::Float(value).dumps(Dialect::PY_SPACED) == text)
}

/// Most significant digits [`short_float_is_python_repr`] decides on.
const SHORT_FLOAT_DIGITS: usize = 15;

/// Whether the float token `text` (a minus, digits, a fraction, an exponent, as
/// [`Scanner::number`] read it) is exactly what Python's `repr` writes for the value it denotes,
/// decided from the text alone; `None` when the text is beyond what this decides and the value
/// must be parsed and written out again.
///
/// It decides a value of at most [`SHORT_FLOAT_DIGITS`] significant digits well inside the
/// normal range. Every decimal of at most 15 significant digits survives the trip to the
/// nearest double and back to 15 digits (`DBL_DIG`), so two such decimals that denote the same
/// double are the same decimal: the text's digits, without trailing zeros, are the shortest
/// that round-trip, which are the digits `repr` writes. What is left is `repr`'s layout of them.
fn short_float_is_python_repr(text: &[u8]) -> Option<bool> {
    let (negative, unsigned) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let mantissa_end = unsigned
        .iter()
        .position(|b| matches!(b, b'e' | b'E'))
        .unwrap_or(unsigned.len());
    let (mantissa, exponent) = unsigned.split_at(mantissa_end);
    let exponent: i32 = match exponent.get(1..) {
        None => 0,
        Some(digits) if digits.len() <= 5 => std::str::from_utf8(digits).ok()?.parse().ok()?,
        Some(_) => return None,
    };
    let (int_part, fraction) = match mantissa.iter().position(|&b| b == b'.') {
        Some(dot) => (&mantissa[..dot], &mantissa[dot + 1..]),
        None => (mantissa, &[][..]),
    };
    let digits = int_part.iter().chain(fraction).copied();
    let Some(first) = digits.clone().position(|d| d != b'0') else {
        // Zero: `repr` writes `0.0` or `-0.0`.
        return Some(unsigned == b"0.0");
    };
    let mut significant = ShortText::default();
    for digit in digits.skip(first) {
        significant.push(digit)?;
    }
    let significant = significant.as_slice();
    let kept = significant.len() - significant.iter().rev().take_while(|&&d| d == b'0').count();
    if kept > SHORT_FLOAT_DIGITS {
        return None;
    }
    let significant = &significant[..kept];
    // The value is 0.<significant> times ten to `point`.
    let point = i32::try_from(int_part.len()).ok()? - i32::try_from(first).ok()? + exponent;
    if !(-300..=300).contains(&point) {
        return None;
    }
    let mut written = ShortText::default();
    let mut fits = true;
    write_repr_layout(negative, significant, point, &mut |piece| {
        fits &= written.extend(piece.iter().copied()).is_some();
    });
    Some(fits && written.as_slice() == text)
}

/// A float's text on the stack: the scanner's hot path allocates nothing for it.
struct ShortText {
    bytes: [u8; 48],
    len: usize,
}

impl Default for ShortText {
    fn default() -> ShortText {
        ShortText {
            bytes: [0; 48],
            len: 0,
        }
    }
}

impl ShortText {
    /// `None` when the text outgrows the buffer.
    fn push(&mut self, byte: u8) -> Option<()> {
        *self.bytes.get_mut(self.len)? = byte;
        self.len += 1;
        Some(())
    }

    fn extend(&mut self, bytes: impl IntoIterator<Item = u8>) -> Option<()> {
        bytes.into_iter().try_for_each(|byte| self.push(byte))
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Where an object sits, for the members the scanner picks out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The record itself.
    Top,
    /// The record's `details`.
    Details,
    /// Anywhere else.
    Nested,
}

struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
    record: ScannedRecord<'a>,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, expected: &[u8]) -> Option<()> {
        let end = self.at.checked_add(expected.len())?;
        (self.bytes.get(self.at..end)? == expected).then(|| self.at = end)
    }

    fn object(&mut self, depth: usize, place: Place) -> Option<()> {
        if depth > MAX_SCAN_DEPTH {
            return None;
        }
        self.eat(b"{")?;
        if self.eat(b"}").is_some() {
            return Some(());
        }
        let mut previous_key: Option<&'a [u8]> = None;
        loop {
            let member_start = self.at;
            let key = self.plain_key()?;
            // Strictly increasing: sorted, and no duplicate (which the parser would collapse).
            if previous_key.is_some_and(|previous| !sorts_before(previous, key)) {
                return None;
            }
            previous_key = Some(key);
            self.eat(b": ")?;
            self.member(key, depth, place)?;
            let member_end = self.at;
            let closed = self.closed_or_separated(b'}')?;
            if place == Place::Top && key == b"hmac" {
                // `…, "hmac": v}` loses `, "hmac": v` (a lone member leaves `{}`); `"hmac": v,
                // next` loses `"hmac": v, `.
                self.record.hmac_cut = Some(if closed {
                    (member_start.saturating_sub(2).max(1), member_end)
                } else {
                    (member_start, member_end + 2)
                });
            }
            if closed {
                return Some(());
            }
        }
    }

    /// After a member or an item: `Some(true)` past the closing bracket `close`, `Some(false)`
    /// past the `", "` before the next one, `None` for anything else.
    fn closed_or_separated(&mut self, close: u8) -> Option<bool> {
        if self.peek()? == close {
            self.at += 1;
            return Some(true);
        }
        self.eat(b", ").map(|()| false)
    }

    /// One member's value, noting the members the chain checks read.
    fn member(&mut self, key: &[u8], depth: usize, place: Place) -> Option<()> {
        match (place, key) {
            (Place::Top, b"hmac") => self.record.hmac = Some(self.plain_string()?),
            (Place::Top, b"prev_hmac") => self.record.prev_hmac = Some(self.plain_string()?),
            (Place::Top, b"event_type") => self.record.event_type = Some(self.plain_string()?),
            (Place::Top, b"scheme") => {
                self.record.scheme = if self.eat(b"true").is_some() {
                    1
                } else {
                    match self.int_token() {
                        b"1" => 1,
                        b"2" => 2,
                        _ => return None,
                    }
                };
            }
            (Place::Top, b"details") if self.peek() == Some(b'{') => {
                self.object(depth + 1, Place::Details)?;
            }
            (Place::Details, b"prev_chain_digest") if self.peek() == Some(b'"') => {
                let stated = self.plain_string()?;
                self.record.stated_predecessor = (!stated.is_empty()).then_some(stated);
            }
            (Place::Details, b"run_id") if self.peek() == Some(b'"') => {
                self.record.run_details.run_id = self.detail_text()?;
            }
            (Place::Details, b"task_id") if self.peek() == Some(b'"') => {
                self.record.run_details.task_id = self.detail_text()?;
            }
            (Place::Details, b"status") if self.peek() == Some(b'"') => {
                self.record.run_details.status = self.detail_text()?;
            }
            (Place::Details, b"journal_head") if self.peek() == Some(b'"') => {
                self.record.run_details.journal_head = self.detail_text()?;
            }
            _ => self.value(depth + 1)?,
        }
        Some(())
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(depth, Place::Nested),
            b'[' => self.array(depth),
            b'"' => self.string(),
            b't' => self.eat(b"true"),
            b'f' => self.eat(b"false"),
            b'n' => self.eat(b"null"),
            _ => self.number(),
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_SCAN_DEPTH {
            return None;
        }
        self.eat(b"[")?;
        if self.eat(b"]").is_some() {
            return Some(());
        }
        loop {
            self.value(depth + 1)?;
            if self.closed_or_separated(b']')? {
                return Some(());
            }
        }
    }

    /// An optional minus and digits, as written: the caller compares them.
    fn int_token(&mut self) -> &'a [u8] {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        self.digits();
        &self.bytes[start..self.at]
    }

    /// A number: an integer in the form Python writes (`0` or a non-zero leading digit, never
    /// `-0`, at most [`MAX_SCAN_INT_DIGITS`] digits), or a float whose text is exactly what Python's `repr` writes
    /// for the value it parses to (the full path parses and writes it back the same way).
    fn number(&mut self) -> Option<()> {
        let start = self.at;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let int_digits = self.digits();
        if int_digits.is_empty() || (int_digits.len() > 1 && int_digits[0] == b'0') {
            return None;
        }
        let mut is_float = false;
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits().is_empty() {
                return None;
            }
            is_float = true;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits().is_empty() {
                return None;
            }
            is_float = true;
        }
        if !is_float {
            let plain =
                int_digits.len() <= MAX_SCAN_INT_DIGITS && !(negative && int_digits == b"0");
            return plain.then_some(());
        }
        let text = &self.bytes[start..self.at];
        short_float_is_python_repr(text)
            .unwrap_or_else(|| std::str::from_utf8(text).is_ok_and(float_written_back))
            .then_some(())
    }

    fn digits(&mut self) -> &'a [u8] {
        let start = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        &self.bytes[start..self.at]
    }

    /// A key: a string of printable ASCII without escapes, whose bytes then order the way
    /// Python orders the decoded text.
    fn plain_key(&mut self) -> Option<&'a [u8]> {
        self.plain_string()
    }

    /// A string of printable ASCII with no escape at all, returned without its quotes.
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b"\"")?;
        let start = self.at;
        let end = start + plain_run(self.bytes.get(start..)?, true);
        if self.bytes.get(end) != Some(&b'"') {
            return None;
        }
        self.at = end + 1;
        Some(&self.bytes[start..end])
    }

    /// A string, as [`Scanner::string`] accepts it, read as a [`DetailText`].
    fn detail_text(&mut self) -> Option<DetailText<'a>> {
        let start = self.at;
        self.string()?;
        let text = &self.bytes[start + 1..self.at - 1];
        Some(if text.contains(&b'\\') {
            DetailText::Escaped
        } else {
            DetailText::Plain(text)
        })
    }

    /// A string as `ensure_ascii` writes it: printable ASCII but `"` and `\`, the short
    /// escapes, and `\u` with four lowercase hex digits for every other code point, a
    /// character beyond the BMP as a surrogate pair. A lone surrogate declines the scan.
    fn string(&mut self) -> Option<()> {
        self.eat(b"\"")?;
        loop {
            self.at += plain_run(self.bytes.get(self.at..)?, true);
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                b'\\' => self.at += 1,
                _ => return None,
            }
            match self.peek()? {
                b'"' | b'\\' | b'n' | b'r' | b't' | b'b' | b'f' => self.at += 1,
                b'u' => {
                    self.at += 1;
                    self.unicode_escape()?;
                }
                _ => return None,
            }
        }
    }

    /// The four digits after `\u` (and, for a high surrogate, the low one's escape after it):
    /// only code points Python escapes this way, in lowercase.
    fn unicode_escape(&mut self) -> Option<()> {
        let code = self.hex4()?;
        match code {
            // Python writes these with their short escapes.
            0x08 | 0x09 | 0x0a | 0x0c | 0x0d => None,
            0x00..=0x1f | 0x7f => Some(()),
            0xd800..=0xdbff => {
                self.eat(b"\\u")?;
                matches!(self.hex4()?, 0xdc00..=0xdfff).then_some(())
            }
            0xdc00..=0xdfff => None,
            0x80..=0xffff => Some(()),
            _ => None,
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at.checked_add(4)?)?;
        let mut code = 0u32;
        for &digit in digits {
            let value = match digit {
                b'0'..=b'9' => digit - b'0',
                b'a'..=b'f' => digit - b'a' + 10,
                _ => return None,
            };
            code = code * 16 + u32::from(value);
        }
        self.at += 4;
        Some(code)
    }
}

#[cfg(test)]
mod tests {
    use bernstein_protocol::pyjson::{Object, is_plain};
    use proptest::prelude::*;

    use super::*;
    use crate::audit::record::{body_pre_image, parse_record_line, python_str};

    /// What the full path says about the members the scanner reads, when it accepts the line.
    fn full_path(line: &[u8]) -> Option<ScannedRecord<'static>> {
        let parsed = parse_record_line(line, true).ok()?;
        let text = |key: &str| -> Option<&'static [u8]> {
            parsed
                .record
                .get(key)
                .map(|v| &*Box::leak(python_str(v).into_bytes().into_boxed_slice()))
        };
        let stated = match parsed.record.get("details") {
            Some(Value::Object(details)) => match details.get("prev_chain_digest") {
                Some(Value::Str(s)) if !s.is_empty() => {
                    Some(&*Box::leak(s.clone().into_bytes().into_boxed_slice()))
                }
                _ => None,
            },
            _ => None,
        };
        let details = match parsed.record.get("details") {
            Some(Value::Object(details)) => Some(details),
            _ => None,
        };
        // The writer escapes exactly the characters that are not plain, so a decoded string
        // of plain characters was written as it reads.
        let detail = |key: &str| match details.and_then(|details| details.get(key)) {
            Some(Value::Str(s)) if s.bytes().all(|b| is_plain(b, true)) => {
                DetailText::Plain(Box::leak(s.clone().into_bytes().into_boxed_slice()))
            }
            Some(Value::Str(_)) => DetailText::Escaped,
            _ => DetailText::Absent,
        };
        Some(ScannedRecord {
            scheme: parsed.scheme?.number(),
            hmac: text("hmac"),
            prev_hmac: text("prev_hmac"),
            event_type: text("event_type"),
            stated_predecessor: stated,
            run_details: RunDetails {
                run_id: detail("run_id"),
                task_id: detail("task_id"),
                status: detail("status"),
                journal_head: detail("journal_head"),
            },
            hmac_cut: None,
        })
    }

    /// The record without its `hmac`, written out as the writer writes a body: the pre-image
    /// the full path MACs.
    fn full_path_pre_image(line: &[u8]) -> Vec<u8> {
        let mut parsed = parse_record_line(line, true).unwrap();
        parsed.record.remove("hmac");
        body_pre_image(&parsed.record, parsed.lone_surrogates).into_bytes()
    }

    /// The scanner either declines or agrees with the full path member for member, and cuts
    /// out the same pre-image the full path writes.
    fn assert_agrees(line: &[u8]) -> bool {
        match scan_canonical_record(line) {
            None => false,
            Some(scanned) => {
                let full = full_path(line);
                assert_eq!(
                    Some(ScannedRecord {
                        hmac_cut: None,
                        ..scanned
                    }),
                    full,
                    "the scanner accepted {:?}",
                    String::from_utf8_lossy(line)
                );
                let (before, after) = scanned.pre_image(line);
                assert_eq!(
                    String::from_utf8_lossy(&[before, after].concat()),
                    String::from_utf8_lossy(&full_path_pre_image(line)),
                    "the pre-image of {:?}",
                    String::from_utf8_lossy(line)
                );
                true
            }
        }
    }

    fn check(line: &str, accepted: bool) {
        assert_eq!(assert_agrees(line.as_bytes()), accepted, "{line}");
    }

    #[test]
    fn writer_shaped_lines_are_accepted_and_everything_unusual_declines() {
        let entry = r#"{"actor": "a", "details": {"n": -12, "prev_chain_digest": "ab", "x": [1, true, null, {"k": "\u00e9\n\ud83d\ude00\u007f"}]}, "event_type": "e", "hmac": "ff", "prev_hmac": "00", "resource_id": "r", "resource_type": "t", "scheme": 2, "timestamp": "2026-12-02T00:00:00.000000+00:00"}"#;
        check(entry, true);
        check(r#"{}"#, true);
        // The pre-image loses the top-level `hmac` wherever it sits, and only that one.
        check(r#"{"hmac": "ff"}"#, true);
        check(r#"{"a": 1, "hmac": "ff"}"#, true);
        check(r#"{"hmac": "ff", "z": 1}"#, true);
        check(r#"{"a": 1, "hmac": "ff", "z": [2]}"#, true);
        check(r#"{"details": {"hmac": "ff"}, "hmac": "ee"}"#, true);
        check(r#"{"a": [], "b": {}}"#, true);
        // An escaped backslash or quote ends its escape: what follows is read afresh.
        check(r#"{"a": "\\u0041", "b": "\\\"", "c": "\\n"}"#, true);
        check(r#"{"hmac": "x"}"#, true);
        check(r#"{"scheme": true}"#, true);
        // Not the writer's framing, or not a record at all.
        check(r#"{"b": 1, "a": 2}"#, false);
        check(r#"{"a": 1, "a": 2}"#, false);
        check(r#"{"a":1}"#, false);
        check(r#"{"a": 1,"b": 2}"#, false);
        check(r#" {"a": 1}"#, false);
        check(r#"{"a": 1} "#, false);
        check(r#"[1]"#, false);
        check(
            r#"{"a": 1.5, "b": -0.0, "c": 1e+16, "d": 1e-05, "e": 123456.789}"#,
            true,
        );
        check(r#"{"a": 1.50}"#, false);
        check(r#"{"a": 1e3}"#, false);
        check(r#"{"a": 1E+16}"#, false);
        check(r#"{"a": 1e400}"#, false);
        check(r#"{"a": 1.}"#, false);
        check(r#"{"a": .5}"#, false);
        check(&format!(r#"{{"a": {}}}"#, "9".repeat(65)), false);
        check(r#"{"a": -0}"#, false);
        check(r#"{"a": 01}"#, false);
        check(r#"{"a": "\u00E9"}"#, false);
        check(r#"{"a": "\u000a"}"#, false);
        check(r#"{"a": "\/"}"#, false);
        check(r#"{"a": "\ud800"}"#, false);
        check(r#"{"a": "\udc00"}"#, false);
        check("{\"a\": \"\u{e9}\"}", false);
        check(r#"{"a\u0041": 1}"#, false);
        check(r#"{"scheme": 3}"#, false);
        check(r#"{"scheme": -1}"#, false);
        check(r#"{"scheme": 2.0}"#, false);
        check(r#"{"hmac": 5}"#, false);
        check(r#"{"hmac": "a\"b"}"#, false);
        check(r#"{"a": NaN}"#, false);
        check(r#"{"a": 1"#, false);
        check(
            &format!("{}1{}", "{\"a\": ".repeat(80), "}".repeat(80)),
            false,
        );
        // The members naming runs are read from `details` alone, escaped or not.
        check(
            r#"{"details": {"journal_head": "ab", "run_id": "r-1", "status": "done", "task_id": "t\u00e9"}, "hmac": "ff"}"#,
            true,
        );
        check(r#"{"details": {"run_id": 5, "task_id": ["t"]}}"#, true);
        check(
            r#"{"details": {"x": {"run_id": "nested"}}, "run_id": "top"}"#,
            true,
        );
        check(r#"{"details": {"run_id": "\/"}}"#, false);
        // A stated predecessor that is empty or not a string makes no claim.
        check(r#"{"details": {"prev_chain_digest": ""}}"#, true);
        check(r#"{"details": {"prev_chain_digest": 7}}"#, true);
        check(r#"{"details": [1]}"#, true);
    }

    /// `levels` objects nested in one another, the outermost the record, each holding the
    /// next under `key` and the innermost holding `1`.
    fn nested_objects(key: &str, levels: usize) -> String {
        format!(
            "{}1{}",
            format!("{{\"{key}\": ").repeat(levels),
            "}".repeat(levels)
        )
    }

    /// A record holding `levels` arrays nested in one another under `a`.
    fn nested_arrays(levels: usize) -> String {
        format!(r#"{{"a": {}1{}}}"#, "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn nesting_is_scanned_to_its_limit_and_declined_past_it() {
        // The record is depth 0 and each level below it one more, under `details` as under
        // any other member; arrays count the same way.
        for key in ["a", "details"] {
            check(&nested_objects(key, MAX_SCAN_DEPTH + 1), true);
            check(&nested_objects(key, MAX_SCAN_DEPTH + 2), false);
        }
        check(&nested_arrays(MAX_SCAN_DEPTH), true);
        check(&nested_arrays(MAX_SCAN_DEPTH + 1), false);
        // Far past the limit the scanner stops at it rather than recursing on: a hostile
        // line of this depth would otherwise overflow the verifier's stack.
        check(&nested_objects("a", 100_000), false);
        check(&nested_objects("details", 100_000), false);
        check(&nested_arrays(100_000), false);
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::Float),
            (-1e6f64..1e6).prop_map(Value::Float),
            "[a-z]{0,6}".prop_map(Value::from),
            any::<String>().prop_map(Value::from),
            prop::sample::select(vec!["\u{7f}", "\u{1f600}", "\t\u{8}\u{c}", "\u{0}", "\\\""])
                .prop_map(Value::from),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-z_]{1,8}|[^\"]{1,3}", inner), 0..4).prop_map(
                    |members| {
                        let mut object = Object::new();
                        for (key, value) in members {
                            object.insert(key, value);
                        }
                        Value::Object(object)
                    }
                ),
            ]
        })
    }

    fn record() -> impl Strategy<Value = Value> {
        (
            prop::option::of("[0-9a-f]{0,8}"),
            prop::option::of("[0-9a-f]{0,8}"),
            prop::option::of("[a-z.]{0,12}"),
            prop::option::of(prop::sample::select(vec![
                Value::from(1),
                Value::from(2),
                Value::from(3),
                Value::Bool(true),
                Value::Float(2.0),
                Value::Null,
            ])),
            prop::option::of(value()),
            prop::option::of(prop::option::of("[0-9a-f]{0,4}")),
            value(),
            prop::collection::vec(
                (
                    prop::sample::select(vec!["run_id", "task_id", "status", "journal_head"]),
                    prop_oneof![
                        "[a-z0-9-]{0,8}".prop_map(Value::from),
                        "[a-z\"\\\\\u{e9}\n]{0,4}".prop_map(Value::from),
                        value(),
                    ],
                ),
                0..4,
            ),
        )
            .prop_map(
                |(hmac, prev, event, scheme, details, stated, extra, named)| {
                    let mut record = Object::new();
                    if let Some(hmac) = hmac {
                        record.insert("hmac", hmac);
                    }
                    if let Some(prev) = prev {
                        record.insert("prev_hmac", prev);
                    }
                    if let Some(event) = event {
                        record.insert("event_type", event);
                    }
                    if let Some(scheme) = scheme {
                        record.insert("scheme", scheme);
                    }
                    let mut details = match details {
                        Some(Value::Object(details)) => details,
                        Some(other) => {
                            record.insert("details", other);
                            Object::new()
                        }
                        None => Object::new(),
                    };
                    if let Some(stated) = stated {
                        details
                            .insert("prev_chain_digest", stated.map_or(Value::Null, Value::from));
                    }
                    for (key, value) in named {
                        details.insert(key, value);
                    }
                    if !details.is_empty() {
                        record.insert("details", details);
                    }
                    record.insert("extra", extra);
                    Value::Object(record)
                },
            )
    }

    fn check_short_float(text: &str, expect: Option<bool>) {
        let decided = short_float_is_python_repr(text.as_bytes());
        assert_eq!(decided, expect, "{text}");
        if let Some(canonical) = decided {
            assert_eq!(canonical, float_written_back(text), "{text}");
        }
    }

    /// Every `repr` text CPython wrote in the pyjson fixtures that the text-only check decides
    /// is accepted, and the short ones are all decided.
    #[test]
    fn cpython_repr_texts_are_accepted_from_their_text() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/pyjson/python_json_cases.json"
        );
        let cases: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut decided = 0;
        for case in cases["floats"].as_array().unwrap() {
            let text = case["repr"].as_str().unwrap();
            if text.contains("inf") || text.contains("nan") {
                continue;
            }
            let digits = text
                .split(['e', 'E'])
                .next()
                .unwrap()
                .trim_start_matches(['-', '0', '.'])
                .replace('.', "");
            match short_float_is_python_repr(text.as_bytes()) {
                Some(canonical) => {
                    assert!(canonical, "{text}");
                    decided += 1;
                }
                None => assert!(
                    digits.trim_end_matches('0').len() > SHORT_FLOAT_DIGITS
                        || text.contains("e-3")
                        || text.contains("e+3"),
                    "{text} was not decided"
                ),
            }
        }
        assert!(decided > 100, "{decided}");
    }

    #[test]
    fn short_floats_are_decided_from_their_text() {
        check_short_float("1.5", Some(true));
        check_short_float("-0.0", Some(true));
        check_short_float("0.0", Some(true));
        check_short_float("0e0", Some(false));
        check_short_float("1.50", Some(false));
        check_short_float("1e+16", Some(true));
        check_short_float("1e16", Some(false));
        check_short_float("10000000000000000.0", Some(false));
        check_short_float("1000000000000000.0", Some(true));
        check_short_float("1e-05", Some(true));
        check_short_float("0.0001", Some(true));
        check_short_float("0.00001", Some(false));
        check_short_float("123456.789", Some(true));
        check_short_float("1.2345e+100", Some(true));
        check_short_float("1.2345e+300", None);
        check_short_float("5e-324", None);
        check_short_float("0.30000000000000004", None);
        check_short_float("0.1", Some(true));
        check_short_float("100.0", Some(true));
        check_short_float("1E+16", Some(false));
    }

    #[test]
    fn keys_sort_before_others_as_bytes_do() {
        let check = |previous: &[u8], key: &[u8], expect: bool| {
            assert_eq!(sorts_before(previous, key), expect, "{previous:?} {key:?}");
        };
        check(b"actor", b"details", true);
        check(b"details", b"actor", false);
        check(b"hmac", b"hmac", false);
        check(b"prev_hmac", b"prev", false);
        check(b"prev", b"prev_hmac", true);
        check(b"resource_id", b"resource_type", true);
        check(b"", b"a", true);
        check(b"a", b"", false);
        check(b"", b"", false);
        check(b"Z", b"a", true);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The first-byte shortcut decides as comparing the whole keys does.
        #[test]
        fn key_order_agrees_with_comparing_whole_keys(
            previous in prop::collection::vec(prop_oneof![b'a'..b'd', any::<u8>()], 0..6),
            key in prop::collection::vec(prop_oneof![b'a'..b'd', any::<u8>()], 0..6),
        ) {
            prop_assert_eq!(sorts_before(&previous, &key), previous < key);
        }

        /// Whatever `repr` writes for a double, and that text bent a little, the text-only
        /// decision agrees with parsing and writing back whenever it decides.
        #[test]
        fn short_float_decisions_agree_with_writing_back(
            value in prop_oneof![any::<f64>(), (-1e6f64..1e6), (-1e-3f64..1e-3)],
            digits in 1usize..17,
            bend in 0usize..4,
        ) {
            let written = Value::Float(value).dumps(Dialect::PY_SPACED);
            let rounded = format!("{value:.digits$e}");
            let rounded_fixed = format!("{value:.digits$}");
            let bent = match bend {
                0 => written.clone(),
                1 => written.replace("e+", "e"),
                2 => format!("{written}0"),
                _ => written.replacen('.', "", 1),
            };
            for text in [written, rounded, rounded_fixed, bent] {
                if let Some(canonical) = short_float_is_python_repr(text.as_bytes()) {
                    prop_assert_eq!(canonical, float_written_back(&text), "{}", text);
                }
            }
        }

        /// Whatever the writer emits, the scanner agrees with the full path or declines;
        /// on records without floats it accepts.
        #[test]
        fn the_scanner_agrees_with_the_full_path_on_written_records(record in record()) {
            let line = record.dumps(Dialect::PY_SPACED);
            let accepted = assert_agrees(line.as_bytes());
            if !line.contains("Infinity") && !line.contains("NaN") && !line.contains("\"scheme\": 3")
                && !line.contains("\"scheme\": 2.0")
                && !line.contains("\"scheme\": null") && full_path(line.as_bytes()).is_some()
                && !line.contains('\\')
            {
                prop_assert!(accepted, "declined a plain line: {line}");
            }
        }

        /// One byte changed anywhere: the scanner still agrees or declines.
        #[test]
        fn the_scanner_agrees_with_the_full_path_on_damaged_lines(
            record in record(),
            at in any::<prop::sample::Index>(),
            byte in prop::sample::select(b" ,:{}[]\"\\u0aE.-1x".to_vec()),
            cut in any::<bool>(),
        ) {
            let mut line = record.dumps(Dialect::PY_SPACED).into_bytes();
            let at = at.index(line.len());
            if cut {
                line.remove(at);
            } else {
                line[at] = byte;
            }
            assert_agrees(&line);
        }
    }
}
