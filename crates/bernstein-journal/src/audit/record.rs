//! One audit record: its schemes, its HMAC, and the byte-strict checks every reader applies.
//!
//! A line on disk is `PY-SPACED(record)`; the scheme-2 HMAC is
//! `hex(HMAC_SHA256(HKDF(master, "audit"), "bernstein:audit:v2" + prev_hmac +
//! PY-SPACED(record_without_hmac)))` and the legacy scheme 1 uses the raw master key with no
//! prefix (`FORMATS.md` §2.2). Everything here is pure: no IO.
//!
//! Python semantics that matter and are reproduced:
//! * `json.loads` on bytes strips one leading UTF-8 BOM and reports undecodable bytes with the
//!   codec's wording;
//! * the scheme is compared with Python `==`, so `1`, `1.0` and `true` are scheme 1 and `2`,
//!   `2.0` are scheme 2; anything else (including `null`) is unsupported and printed with
//!   `repr`;
//! * non-string `hmac` / `prev_hmac` values are turned into text with Python's `str()`.

use std::borrow::Cow;

use bernstein_protocol::pyjson::{Dialect, Object, ParseError, Value};

use bernstein_protocol::encoding::hex;
use ring::hmac;

use crate::crypto::constant_time_eq;
use crate::key::AuditKey;

/// `prev_hmac` of the first record ever written.
pub const GENESIS_HMAC: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Domain tag prefixed to every scheme-2 pre-image.
pub const SCHEME_2_DOMAIN_TAG: &str = "bernstein:audit:v2";

/// The details key by which a record states the chain head it was written onto.
pub const PREV_CHAIN_DIGEST_KEY: &str = "prev_chain_digest";

/// Event types whose `details.prev_chain_digest` predates its current meaning and is therefore
/// not checked (`_LEGACY_ANCHOR_EVENT_TYPES`).
pub const LEGACY_ANCHOR_EVENT_TYPES: [&str; 2] = ["skill.catalog.install", "skill.catalog.upgrade"];

/// The MAC scheme a record is authenticated under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Legacy: raw master key, no domain prefix. Read only.
    V1,
    /// Current: HKDF-derived `"audit"` key, `bernstein:audit:v2` prefix. Every writer emits it.
    V2,
}

impl Scheme {
    /// The record's scheme as the reference resolves it: absent means scheme 1; a present value
    /// is compared with Python `==`. `Err` carries Python's `repr` of an unsupported value.
    pub fn of_record(record: &Object) -> Result<Scheme, String> {
        match record.get("scheme") {
            None => Ok(Scheme::V1),
            Some(value) => Scheme::from_value(value).ok_or_else(|| python_repr(value)),
        }
    }

    fn from_value(value: &Value) -> Option<Scheme> {
        match value {
            Value::Bool(true) => Some(Scheme::V1),
            Value::Int(i) => match i.as_str() {
                "1" => Some(Scheme::V1),
                "2" => Some(Scheme::V2),
                _ => None,
            },
            Value::Float(x) if *x == 1.0 => Some(Scheme::V1),
            Value::Float(x) if *x == 2.0 => Some(Scheme::V2),
            _ => None,
        }
    }

    /// The number written in the `scheme` field.
    pub fn number(self) -> u8 {
        match self {
            Scheme::V1 => 1,
            Scheme::V2 => 2,
        }
    }
}

/// The HMAC a record must carry under `scheme`, chained onto `prev_hmac`. `body` is the record;
/// an `hmac` member in it is excluded from the pre-image.
pub fn expected_hmac(key: &AuditKey, scheme: Scheme, prev_hmac: &str, body: &Object) -> String {
    hmac_over(key, scheme, prev_hmac, &body_pre_image(body, false))
}

/// The room a record's text is written into first: more than most records take (an anchor
/// record is about 700 bytes), so writing one seldom grows the string.
pub(crate) const RECORD_TEXT_CAPACITY: usize = 1024;

/// `PY-SPACED(record_without_hmac)`. `lone_surrogates` says the record was parsed with lone
/// surrogate escapes standing in as placeholders (see [`parse_json_bytes`]).
pub(crate) fn body_pre_image(record: &Object, lone_surrogates: bool) -> String {
    // A record being minted has no `hmac` yet: it is its own body, written without a copy.
    if !record.contains_key("hmac") {
        let mut dumped = String::with_capacity(RECORD_TEXT_CAPACITY);
        record.dumps_into(&mut dumped, Dialect::PY_SPACED);
        return if lone_surrogates {
            restore_lone_surrogates(&dumped)
        } else {
            dumped
        };
    }
    let body: Object = record
        .iter()
        .filter(|(k, _)| *k != "hmac")
        .map(|(k, v)| (k, v.clone()))
        .collect();
    dumps_spaced(&Value::Object(body), lone_surrogates)
}

/// `PY-SPACED(value)`, with lone-surrogate placeholders turned back into the escapes Python
/// writes for them when `lone_surrogates` is set.
pub(crate) fn dumps_spaced(value: &Value, lone_surrogates: bool) -> String {
    let dumped = value.dumps(Dialect::PY_SPACED);
    if lone_surrogates {
        restore_lone_surrogates(&dumped)
    } else {
        dumped
    }
}

/// The HMAC pre-image of a line already known to be canonical PY-SPACED: the line with its
/// top-level `"hmac": …` member cut out.
///
/// For a canonical line this is byte-identical to `PY-SPACED(record_without_hmac)` (the writer
/// emits sorted keys with `", "` between members), and it saves cloning and re-serialising every
/// record on the verify path. Returns `None` when the line is not an object it can walk, so the
/// caller falls back to [`body_pre_image`].
pub(crate) fn canonical_line_pre_image(line: &[u8]) -> Option<Vec<u8>> {
    if line.first() != Some(&b'{') {
        return None;
    }
    // Walk the top-level members, tracking nesting and string state, and note where each
    // member starts and ends.
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut member_start = 1usize;
    for (i, &b) in line.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return cut_member(line, member_start, i, true);
                }
            }
            b',' if depth == 1 => {
                if let Some(cut) = cut_member(line, member_start, i, false) {
                    return Some(cut);
                }
                // Members are separated by ", ": the next one starts after the space.
                member_start = i + 2;
            }
            _ => {}
        }
    }
    None
}

/// If the member `line[start..end]` is the `"hmac"` member, the line without it (and without
/// the separator that joined it to its neighbour).
fn cut_member(line: &[u8], start: usize, end: usize, last: bool) -> Option<Vec<u8>> {
    if !line.get(start..end)?.starts_with(b"\"hmac\": ") {
        return None;
    }
    let mut out = Vec::with_capacity(line.len());
    if last {
        // `…, "hmac": v}` → `…}`; a lone member `{"hmac": v}` → `{}`.
        out.extend_from_slice(&line[..start.saturating_sub(2).max(1)]);
        out.extend_from_slice(&line[end..]);
    } else {
        // `"hmac": v, next` → `next`.
        out.extend_from_slice(&line[..start]);
        out.extend_from_slice(line.get(end + 2..)?);
    }
    Some(out)
}

pub(crate) fn hmac_over(
    key: &AuditKey,
    scheme: Scheme,
    prev_hmac: &str,
    body_json: &str,
) -> String {
    let mac_key = hmac::Key::new(hmac::HMAC_SHA256, scheme_key(key, scheme));
    let mut context = record_mac(&mac_key, scheme, prev_hmac.as_bytes());
    context.update(body_json.as_bytes());
    hex(context.sign().as_ref())
}

/// The key bytes a record of `scheme` is MACed under: the master key for scheme 1, the derived
/// audit key for scheme 2.
pub(crate) fn scheme_key(key: &AuditKey, scheme: Scheme) -> &[u8] {
    match scheme {
        Scheme::V1 => key.master(),
        Scheme::V2 => key.audit_key(),
    }
}

/// A record's MAC under `mac_key` (the [`scheme_key`] of `scheme`), started with what comes
/// before the record's body: scheme 2's domain tag, then the predecessor's `hmac`. The body's
/// bytes follow, whole or in pieces. The one definition the writer and both verifier paths use.
pub(crate) fn record_mac(mac_key: &hmac::Key, scheme: Scheme, prev_hmac: &[u8]) -> hmac::Context {
    let mut context = hmac::Context::with_key(mac_key);
    if scheme == Scheme::V2 {
        context.update(SCHEME_2_DOMAIN_TAG.as_bytes());
    }
    context.update(prev_hmac);
    context
}

/// Whether a record's stored `hmac` matches the one computed from the predecessor the record
/// itself names (`_record_is_locally_valid`). Proves a key holder minted it, not that it sits
/// where it claims.
pub(crate) fn is_locally_valid(key: &AuditKey, parsed: &CanonicalRecord, scheme: Scheme) -> bool {
    let record = &parsed.record;
    let prev = record.get("prev_hmac").map(python_str).unwrap_or_default();
    let stored = record.get("hmac").map(python_str).unwrap_or_default();
    let expected = hmac_over(
        key,
        scheme,
        &prev,
        &body_pre_image(record, parsed.lone_surrogates),
    );
    constant_time_eq(stored.as_bytes(), expected.as_bytes())
}

/// Why a line's bytes are not a canonical JSON object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LineDefect {
    /// Not decodable. `position` is where the codec says the bad bytes start.
    Undecodable { position: usize, message: String },
    /// Not JSON.
    InvalidJson(ParseError),
    /// JSON, but not an object.
    NotObject,
    /// An object whose `scheme` is unknown (its Python `repr`). Only reported by
    /// [`parse_record_line`] when asked to check the scheme.
    UnsupportedScheme(String),
    /// An object, but not in the writer's byte framing.
    NonCanonical,
}

/// A line that parsed as a canonical record.
#[derive(Debug, Clone)]
pub(crate) struct CanonicalRecord {
    pub(crate) record: Object,
    /// `Some` when the scheme was checked.
    pub(crate) scheme: Option<Scheme>,
    /// Whether lone-surrogate placeholders stand in the record (see [`parse_json_bytes`]).
    pub(crate) lone_surrogates: bool,
}

/// Applies the verifier's per-line checks in the reference's order: decode, parse, object,
/// (scheme, when `check_scheme`), canonical bytes.
pub(crate) fn parse_record_line(
    raw: &[u8],
    check_scheme: bool,
) -> Result<CanonicalRecord, LineDefect> {
    let parsed = parse_json_bytes(raw)?;
    let Value::Object(record) = parsed.value else {
        return Err(LineDefect::NotObject);
    };
    let scheme = if check_scheme {
        Some(Scheme::of_record(&record).map_err(LineDefect::UnsupportedScheme)?)
    } else {
        None
    };
    let record = Value::Object(record);
    if dumps_spaced(&record, parsed.lone_surrogates).as_bytes() != raw {
        return Err(LineDefect::NonCanonical);
    }
    let Value::Object(record) = record else {
        return Err(LineDefect::NotObject);
    };
    Ok(CanonicalRecord {
        record,
        scheme,
        lone_surrogates: parsed.lone_surrogates,
    })
}

/// A parsed line.
#[derive(Debug, Clone)]
pub(crate) struct ParsedJson {
    pub(crate) value: Value,
    /// Whether lone surrogates were replaced by placeholders to parse it.
    pub(crate) lone_surrogates: bool,
}

/// `json.loads(bytes)`: decode, then parse.
///
/// Python accepts a lone UTF-16 surrogate escape (`"\ud800"`) and keeps the surrogate in its
/// string; `json.dumps` writes it back as the same escape, so a record holding one (a client can
/// send one in any string) is canonical and verifies in the reference. A Rust `String` cannot
/// hold a surrogate, so each lone surrogate escape `\uD800`..`\uDFFF` is parsed as a placeholder
/// escape `\uE000`..`\uE7FF` (private use, same relative order), and [`dumps_spaced`] writes the
/// placeholders back as the surrogate escapes. The substitution is only made when the line holds
/// no private-use character of that range itself; otherwise the line is refused as invalid JSON.
/// Placeholders are visible in the parsed values (for example in a record's `details`).
pub(crate) fn parse_json_bytes(raw: &[u8]) -> Result<ParsedJson, LineDefect> {
    let text = decode_json_bytes(raw)?;
    match Value::parse(&text) {
        Ok(value) => Ok(ParsedJson {
            value,
            lone_surrogates: false,
        }),
        Err(first_error) => match substitute_lone_surrogates(&text) {
            Some(substituted) => Value::parse(&substituted)
                .map(|value| ParsedJson {
                    value,
                    lone_surrogates: true,
                })
                .map_err(LineDefect::InvalidJson),
            None => Err(LineDefect::InvalidJson(first_error)),
        },
    }
}

const SURROGATES: std::ops::RangeInclusive<u32> = 0xd800..=0xdfff;
const PLACEHOLDER_BASE: u32 = 0xe000;
const PLACEHOLDERS: std::ops::RangeInclusive<u32> = 0xe000..=0xe7ff;

/// Replaces every lone surrogate escape inside a JSON string with its placeholder escape (as
/// Python's scanner pairs them: a high surrogate escape followed by a low one is a pair, anything
/// else is lone). `None` when there is no lone surrogate, or when the text already holds a
/// placeholder code point (raw or escaped), which would make the substitution ambiguous.
fn substitute_lone_surrogates(text: &str) -> Option<String> {
    if text.chars().any(|c| PLACEHOLDERS.contains(&u32::from(c))) {
        return None;
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut in_string = false;
    let mut found = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                in_string = !in_string;
                i += 1;
            }
            b'\\' if in_string => {
                let Some(code) = hex_escape(bytes, i) else {
                    i += 2;
                    continue;
                };
                if PLACEHOLDERS.contains(&code) {
                    return None;
                }
                if (0xd800..=0xdbff).contains(&code)
                    && hex_escape(bytes, i + 6).is_some_and(|low| (0xdc00..=0xdfff).contains(&low))
                {
                    i += 12;
                } else if SURROGATES.contains(&code) {
                    out.push_str(&text[copied..i]);
                    out.push_str(&format!("\\u{:04x}", code - 0xd800 + PLACEHOLDER_BASE));
                    i += 6;
                    copied = i;
                    found = true;
                } else {
                    i += 6;
                }
            }
            _ => i += 1,
        }
    }
    if !found {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

/// The code unit of a `\uXXXX` escape starting at `at`, if there is one.
fn hex_escape(bytes: &[u8], at: usize) -> Option<u32> {
    let escape = bytes.get(at..at + 6)?;
    if escape[0] != b'\\' || escape[1] != b'u' {
        return None;
    }
    let digits = std::str::from_utf8(&escape[2..]).ok()?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

/// Turns placeholder escapes in `json.dumps` output back into the lone surrogate escapes they
/// stand for. Only escapes are touched: `\\` pairs are skipped as a unit.
fn restore_lone_surrogates(dumped: &str) -> String {
    let bytes = dumped.as_bytes();
    let mut out = String::with_capacity(dumped.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        match hex_escape(bytes, i) {
            Some(code) if PLACEHOLDERS.contains(&code) => {
                out.push_str(&dumped[copied..i]);
                out.push_str(&format!("\\u{:04x}", code - PLACEHOLDER_BASE + 0xd800));
                i += 6;
                copied = i;
            }
            Some(_) => i += 6,
            None => i += 2,
        }
    }
    out.push_str(&dumped[copied..]);
    out
}

/// `json.loads(bytes)`'s decoding step: `json.detect_encoding` picks UTF-8 (with or without a
/// BOM), UTF-16 or UTF-32 from the first bytes, and the bytes are decoded with
/// `errors="surrogatepass"`. A decode failure carries the codec's message, with the position
/// the codec reports.
///
/// Lone surrogates, which Python keeps in its `str` but a Rust `String` cannot hold, become
/// U+FFFD. That cannot change a verdict: a line that needs UTF-16/32 decoding or holds an
/// encoded surrogate can never equal its own canonical (ASCII) form. UTF-8-encoded surrogates
/// (`ED A0 80`) are refused as undecodable, where Python would decode them (`FORMATS.md` §12).
pub(crate) fn decode_json_bytes(raw: &[u8]) -> Result<Cow<'_, str>, LineDefect> {
    match detect_encoding(raw) {
        Encoding::Utf8 => decode_utf8(raw).map(Cow::Borrowed),
        Encoding::Utf8Sig => decode_utf8(&raw[3..]).map(Cow::Borrowed),
        Encoding::Utf16 { big_endian, skip } => decode_utf16(raw, skip, big_endian).map(Cow::Owned),
        Encoding::Utf32 { big_endian, skip } => decode_utf32(raw, skip, big_endian).map(Cow::Owned),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Utf8,
    Utf8Sig,
    Utf16 { big_endian: bool, skip: usize },
    Utf32 { big_endian: bool, skip: usize },
}

/// `json.detect_encoding`.
fn detect_encoding(b: &[u8]) -> Encoding {
    if b.starts_with(b"\x00\x00\xfe\xff") {
        return Encoding::Utf32 {
            big_endian: true,
            skip: 4,
        };
    }
    if b.starts_with(b"\xff\xfe\x00\x00") {
        return Encoding::Utf32 {
            big_endian: false,
            skip: 4,
        };
    }
    if b.starts_with(b"\xfe\xff") {
        return Encoding::Utf16 {
            big_endian: true,
            skip: 2,
        };
    }
    if b.starts_with(b"\xff\xfe") {
        return Encoding::Utf16 {
            big_endian: false,
            skip: 2,
        };
    }
    if b.starts_with(b"\xef\xbb\xbf") {
        return Encoding::Utf8Sig;
    }
    if b.len() >= 4 {
        if b[0] == 0 {
            return if b[1] != 0 {
                Encoding::Utf16 {
                    big_endian: true,
                    skip: 0,
                }
            } else {
                Encoding::Utf32 {
                    big_endian: true,
                    skip: 0,
                }
            };
        }
        if b[1] == 0 {
            return if b[2] != 0 || b[3] != 0 {
                Encoding::Utf16 {
                    big_endian: false,
                    skip: 0,
                }
            } else {
                Encoding::Utf32 {
                    big_endian: false,
                    skip: 0,
                }
            };
        }
    } else if b.len() == 2 {
        if b[0] == 0 {
            return Encoding::Utf16 {
                big_endian: true,
                skip: 0,
            };
        }
        if b[1] == 0 {
            return Encoding::Utf16 {
                big_endian: false,
                skip: 0,
            };
        }
    }
    Encoding::Utf8
}

/// A codec error in CPython's wording: `'<codec>' codec can't decode byte 0x.. in position N:
/// <reason>` for one byte, `... bytes in position S-E: <reason>` for several.
fn codec_error(codec: &str, bytes: &[u8], start: usize, end: usize, reason: &str) -> LineDefect {
    let message = if end - start <= 1 {
        format!(
            "'{codec}' codec can't decode byte 0x{:02x} in position {start}: {reason}",
            bytes[start]
        )
    } else {
        format!(
            "'{codec}' codec can't decode bytes in position {start}-{}: {reason}",
            end - 1
        )
    };
    LineDefect::Undecodable {
        position: start,
        message,
    }
}

fn decode_utf8(body: &[u8]) -> Result<&str, LineDefect> {
    std::str::from_utf8(body).map_err(|err| {
        let start = err.valid_up_to();
        let (end, reason) = match err.error_len() {
            None => (body.len(), "unexpected end of data"),
            Some(len) => {
                let reason = if len == 1 && !(0xc2..=0xf4).contains(&body[start]) {
                    "invalid start byte"
                } else {
                    "invalid continuation byte"
                };
                (start + len, reason)
            }
        };
        codec_error("utf-8", body, start, end, reason)
    })
}

fn decode_utf16(raw: &[u8], skip: usize, big_endian: bool) -> Result<String, LineDefect> {
    let codec = if big_endian { "utf-16-be" } else { "utf-16-le" };
    let body = &raw[skip..];
    if body.len() % 2 == 1 {
        let at = raw.len() - 1;
        return Err(codec_error(codec, raw, at, at + 1, "truncated data"));
    }
    let units = body.chunks_exact(2).map(|pair| {
        if big_endian {
            u16::from_be_bytes([pair[0], pair[1]])
        } else {
            u16::from_le_bytes([pair[0], pair[1]])
        }
    });
    Ok(char::decode_utf16(units)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect())
}

fn decode_utf32(raw: &[u8], skip: usize, big_endian: bool) -> Result<String, LineDefect> {
    let codec = if big_endian { "utf-32-be" } else { "utf-32-le" };
    let body = &raw[skip..];
    let mut out = String::with_capacity(body.len() / 4);
    for (index, unit) in body.chunks_exact(4).enumerate() {
        let bytes = [unit[0], unit[1], unit[2], unit[3]];
        let code = if big_endian {
            u32::from_be_bytes(bytes)
        } else {
            u32::from_le_bytes(bytes)
        };
        if code > 0x10ffff {
            let at = skip + index * 4;
            return Err(codec_error(
                codec,
                raw,
                at,
                at + 4,
                "code point not in range(0x110000)",
            ));
        }
        out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
    }
    let rest = body.len() % 4;
    if rest != 0 {
        let at = raw.len() - rest;
        return Err(codec_error(codec, raw, at, raw.len(), "truncated data"));
    }
    Ok(out)
}

pub use bernstein_protocol::pyrepr::{python_repr, python_str};

/// Python's `int(value or 0)` for the offsets a tear marker records, saturated to `i128` (the
/// offsets they are compared with are far smaller). `None` where Python would raise.
pub(crate) fn python_int_or_zero(value: Option<&Value>) -> Option<i128> {
    let Some(value) = value else {
        return Some(0);
    };
    match value {
        Value::Null | Value::Bool(false) => Some(0),
        Value::Bool(true) => Some(1),
        Value::Int(i) => Some(saturating_decimal(i.as_str())),
        Value::Float(x) if x.is_finite() => Some(x.trunc() as i128),
        Value::Float(_) => None,
        Value::Str(s) if s.is_empty() => Some(0),
        Value::Str(s) => parse_python_int_literal(s),
        Value::Array(items) if items.is_empty() => Some(0),
        Value::Object(object) if object.is_empty() => Some(0),
        Value::Array(_) | Value::Object(_) => None,
    }
}

fn saturating_decimal(text: &str) -> i128 {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let magnitude = digits
        .bytes()
        .filter(u8::is_ascii_digit)
        .fold(0i128, |acc, d| {
            acc.saturating_mul(10).saturating_add(i128::from(d - b'0'))
        });
    if negative { -magnitude } else { magnitude }
}

/// `int(text)` for base-10 text: surrounding whitespace, an optional sign, digits with single
/// underscores between them.
fn parse_python_int_literal(text: &str) -> Option<i128> {
    let trimmed = text.trim();
    let unsigned = trimmed.strip_prefix(['+', '-']).unwrap_or(trimmed);
    if unsigned.is_empty()
        || unsigned.starts_with('_')
        || unsigned.ends_with('_')
        || unsigned.contains("__")
        || !unsigned.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        return None;
    }
    Some(saturating_decimal(&trimmed.replace('_', "")))
}

/// The first `n` characters of `text` (Python's `text[:n]`).
pub(crate) fn prefix_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((pos, _)) => &text[..pos],
        None => text,
    }
}

#[cfg(test)]
mod tests {

    /// Slicing the `hmac` member out of a canonical line gives exactly the re-serialised body,
    /// wherever the member sits and whatever the other members hold.
    #[test]
    fn canonical_line_pre_image_equals_reserialised_body() {
        let cases = [
            r#"{"actor": "a", "details": {"hmac": "nested", "x": [1, {"hmac": 2}]}, "event_type": "e", "hmac": "ab", "prev_hmac": "p", "scheme": 2}"#,
            r#"{"hmac": "only"}"#,
            r#"{"a": "x, \"hmac\": y", "hmac": "last"}"#,
            r#"{"hmac": "first", "z": "caf\u00e9"}"#,
            r#"{"actor": "no hmac member at all"}"#,
            // Structure inside strings is not structure: a closing brace, a comma before an
            // escaped quote.
            r#"{"a": "}", "hmac": "h"}"#,
            r#"{"a": "q\", }", "hmac": "h"}"#,
            // Only a top-level member is cut, also when a nested one is named `hmac` and
            // follows a comma.
            r#"{"details": {"a": 1, "hmac": "nested"}, "hmac": "top"}"#,
        ];
        for line in cases {
            let value = bernstein_protocol::pyjson::Value::parse(line).unwrap();
            let record = value.as_object().unwrap();
            let expected = body_pre_image(record, false);
            let sliced =
                canonical_line_pre_image(line.as_bytes()).map(|b| String::from_utf8(b).unwrap());
            assert_eq!(sliced.as_deref().unwrap_or(line), expected, "{line}");
        }
    }

    use super::*;

    /// A record without `hmac` (one being minted) is written without a copy; its pre-image is
    /// still exactly `PY-SPACED` of the record, keys sorted whatever their insertion order.
    #[test]
    fn a_pre_image_without_hmac_is_the_record_written_spaced() {
        let record = Object::new()
            .with("timestamp", "2026-12-04T16:00:00.000001+00:00")
            .with("event_type", "mcp.stateless_call")
            .with(
                "details",
                Object::new()
                    .with("z", 0.1)
                    .with("caf\u{e9}", "\u{1d11e} \"quoted\"")
                    // A lone-surrogate placeholder (see `parse_json_bytes`), which the
                    // pre-image of a record parsed with lone surrogates writes back as one.
                    .with("lone", "\u{e123}")
                    .with("list", vec![Value::from(1), Value::Null, Value::from(true)]),
            )
            .with("actor", "a")
            .with("scheme", 2);
        for lone_surrogates in [false, true] {
            let pre_image = body_pre_image(&record, lone_surrogates);
            assert_eq!(
                pre_image,
                dumps_spaced(&Value::Object(record.clone()), lone_surrogates)
            );
            assert!(pre_image.starts_with(r#"{"actor": "a", "details": {"caf\u00e9": "#));
        }
        assert_ne!(
            body_pre_image(&record, true),
            body_pre_image(&record, false),
            "the placeholder is written back only for a record parsed with lone surrogates"
        );
        let signed = record.clone().with("hmac", "ab");
        assert_eq!(
            body_pre_image(&signed, false),
            body_pre_image(&record, false)
        );
    }

    #[test]
    fn scheme_follows_python_equality() {
        let check = |json: &str, expect: Result<Scheme, &str>| {
            let Value::Object(record) = Value::parse(json).unwrap() else {
                panic!("{json}")
            };
            assert_eq!(
                Scheme::of_record(&record),
                expect.map_err(str::to_owned),
                "{json}"
            );
        };
        check("{}", Ok(Scheme::V1));
        check(r#"{"scheme": 1}"#, Ok(Scheme::V1));
        check(r#"{"scheme": 1.0}"#, Ok(Scheme::V1));
        check(r#"{"scheme": true}"#, Ok(Scheme::V1));
        check(r#"{"scheme": 2}"#, Ok(Scheme::V2));
        check(r#"{"scheme": 2.0}"#, Ok(Scheme::V2));
        check(r#"{"scheme": 3}"#, Err("3"));
        check(r#"{"scheme": false}"#, Err("False"));
        check(r#"{"scheme": null}"#, Err("None"));
        check(r#"{"scheme": "2"}"#, Err("'2'"));
        check(r#"{"scheme": [2, "it's"]}"#, Err(r#"[2, "it's"]"#));
        check(r#"{"scheme": {"a": NaN}}"#, Err("{'a': nan}"));
        check(r#"{"scheme": 2.5}"#, Err("2.5"));
    }

    #[test]
    fn repr_quotes_and_escapes_like_cpython() {
        let check = |s: &str, expect: &str| assert_eq!(python_repr(&Value::from(s)), expect);
        check("plain", "'plain'");
        check("it's", "\"it's\"");
        check("both ' and \"", "'both \\' and \"'");
        check(
            "tab\tnl\n\u{7f}\u{85}é\u{2028}",
            "'tab\\tnl\\n\\x7f\\x85é\\u2028'",
        );
        check("\\", "'\\\\'");
    }

    #[test]
    fn undecodable_messages_use_the_codec_wording() {
        let check = |raw: &[u8], position: usize, message: &str| match decode_json_bytes(raw) {
            Err(LineDefect::Undecodable {
                position: got_pos,
                message: got,
            }) => {
                assert_eq!((got_pos, got.as_str()), (position, message), "{raw:?}");
            }
            other => panic!("{raw:?}: {other:?}"),
        };
        // Messages checked against CPython 3.12 `bytes.decode("utf-8")`.
        check(
            b"ab\xff",
            2,
            "'utf-8' codec can't decode byte 0xff in position 2: invalid start byte",
        );
        check(
            b"\x80",
            0,
            "'utf-8' codec can't decode byte 0x80 in position 0: invalid start byte",
        );
        check(
            b"a\xe2\x82",
            1,
            "'utf-8' codec can't decode bytes in position 1-2: unexpected end of data",
        );
        check(
            b"a\xe2",
            1,
            "'utf-8' codec can't decode byte 0xe2 in position 1: unexpected end of data",
        );
        check(
            b"\xe2\x82A",
            0,
            "'utf-8' codec can't decode bytes in position 0-1: invalid continuation byte",
        );
        check(
            b"\xe2A",
            0,
            "'utf-8' codec can't decode byte 0xe2 in position 0: invalid continuation byte",
        );
        check(
            b"\xc0\x80",
            0,
            "'utf-8' codec can't decode byte 0xc0 in position 0: invalid start byte",
        );
        assert_eq!(
            decode_json_bytes(b"\xef\xbb\xbf{}"),
            Ok(Cow::Borrowed("{}"))
        );
    }

    #[test]
    fn json_loads_encoding_detection_matches_cpython() {
        // Outcomes of CPython 3.12 `json.loads(bytes)`: `Ok(repr)` or the decode error.
        let check = |raw: &[u8], expect: Result<&str, (usize, &str)>| {
            let got = match decode_json_bytes(raw) {
                Ok(text) => Ok(match Value::parse(&text) {
                    Ok(value) => python_repr(&value),
                    Err(err) => format!("JDE {err}"),
                }),
                Err(LineDefect::Undecodable { position, message }) => Err((position, message)),
                Err(other) => panic!("{other:?}"),
            };
            let expect = expect
                .map(str::to_owned)
                .map_err(|(p, m)| (p, m.to_owned()));
            assert_eq!(got, expect, "{raw:?}");
        };
        let jde0 = "JDE Expecting value: line 1 column 1 (char 0)";
        check(b"\0\0\0", Ok(jde0));
        check(b"\0\0\0\0", Ok(jde0));
        check(b"\0\0", Ok(jde0));
        check(b"ab\0\0", Ok(jde0));
        check(
            b"\0\0\0\0\0",
            Err((
                4,
                "'utf-32-be' codec can't decode byte 0x00 in position 4: truncated data",
            )),
        );
        check(b"\0{\0}", Ok("{}"));
        check(b"{\0}\0", Ok("{}"));
        check(
            b"\0{\0}\0",
            Err((
                4,
                "'utf-16-be' codec can't decode byte 0x00 in position 4: truncated data",
            )),
        );
        check(
            b"{\0}\0\0",
            Err((
                4,
                "'utf-16-le' codec can't decode byte 0x00 in position 4: truncated data",
            )),
        );
        check(b"\xff\xfe{\0}\0", Ok("{}"));
        check(
            b"\xff\xfe{\0}",
            Err((
                4,
                "'utf-16-le' codec can't decode byte 0x7d in position 4: truncated data",
            )),
        );
        check(
            b"\xfe\xff\0{\0}\0",
            Err((
                6,
                "'utf-16-be' codec can't decode byte 0x00 in position 6: truncated data",
            )),
        );
        check(b"\xff\xfe\0\0{\0\0\0}\0\0\0", Ok("{}"));
        check(
            b"\xff\xfe\0\0{\0\0\0}\0\0",
            Err((
                8,
                "'utf-32-le' codec can't decode bytes in position 8-10: truncated data",
            )),
        );
        check(b"\xff\xfe\0\0", Ok(jde0));
        check(b"\xff\xfe", Ok(jde0));
        check(b"\0\0\0{\0\0\0}", Ok("{}"));
        check(b"\0\0\x11\0\0\0\0{", Ok(jde0));
        check(
            b"\0\0\0a\x00\x11\x00\x00",
            Err((
                4,
                "'utf-32-be' codec can't decode bytes in position 4-7: code point not in range(0x110000)",
            )),
        );
        check(
            b"a\0\0\0\0\0\x11\0",
            Err((
                4,
                "'utf-32-le' codec can't decode bytes in position 4-7: code point not in range(0x110000)",
            )),
        );
        check(
            b"\0\0\0a\0\0\0",
            Err((
                4,
                "'utf-32-be' codec can't decode bytes in position 4-6: truncated data",
            )),
        );
        check(
            b"\0a\xd8",
            Err((
                2,
                "'utf-8' codec can't decode byte 0xd8 in position 2: unexpected end of data",
            )),
        );
        check(b"\0\"\xd8\0\xdc\0\0\"", Ok("'\u{10000}'"));
        check(b"\0\"\xd8\0\0\"", Ok("'\u{fffd}'"));
        check(
            b"\0\"\xd8\0",
            Ok("JDE Unterminated string starting at: line 1 column 1 (char 0)"),
        );
        check(
            b"a\0\0\xd8\0\xdc\0",
            Err((
                6,
                "'utf-16-le' codec can't decode byte 0x00 in position 6: truncated data",
            )),
        );
        check(
            b"\0\0\0a\0\0\xd8\0\0\0",
            Err((
                8,
                "'utf-32-be' codec can't decode bytes in position 8-9: truncated data",
            )),
        );
        check(b"\0{\0\"\0s\0\"\0:\0 \x003\0}", Ok("{'s': 3}"));
        // The last code point there is decodes (one more is out of range, above).
        check(b"\0\0\0\"\0\x10\xff\xff\0\0\0\"", Ok("'\\U0010ffff'"));
        check(
            b"\xef\xbb\xbf{\"a\xff\": 1}",
            Err((
                3,
                "'utf-8' codec can't decode byte 0xff in position 3: invalid start byte",
            )),
        );
    }

    #[test]
    fn lone_surrogate_escapes_round_trip_as_python_writes_them() {
        let check = |raw: &str, expect: &str| {
            let got = match parse_record_line(raw.as_bytes(), true) {
                Ok(parsed) => format!(
                    "ok {}",
                    body_pre_image(&parsed.record, parsed.lone_surrogates)
                ),
                Err(LineDefect::InvalidJson(err)) => format!("invalid {err}"),
                Err(other) => format!("{other:?}"),
            };
            assert_eq!(got, expect, "{raw}");
        };
        check(r#"{"a": "\ud800"}"#, r#"ok {"a": "\ud800"}"#);
        check(
            r#"{"a": "x\udfffy\ud834\udd1e"}"#,
            r#"ok {"a": "x\udfffy\ud834\udd1e"}"#,
        );
        check(
            r#"{"\ud7ff": 2, "\udc00": 1}"#,
            r#"ok {"\ud7ff": 2, "\udc00": 1}"#,
        );
        check(r#"{"\udc00": 1, "\ud7ff": 2}"#, "NonCanonical");
        check(r#"{"a": "\ud800\ud800"}"#, r#"ok {"a": "\ud800\ud800"}"#);
        check(r#"{"a": "\\ud800"}"#, r#"ok {"a": "\\ud800"}"#);
        check(r#"{"a": "\uD800"}"#, "NonCanonical");
        // Python parses this one; a placeholder would be ambiguous here, so it is refused.
        check(
            r#"{"a": "\ud800", "b": "\ue000"}"#,
            "invalid Lone surrogate in \\u escape: line 1 column 8 (char 7)",
        );
        // A real syntax error after a lone surrogate is reported, not the surrogate.
        check(
            r#"{"a": "\ud800" "b": 1}"#,
            "invalid Expecting ',' delimiter: line 1 column 16 (char 15)",
        );
        check(r#"{"a": "\ud800", "hmac": "x"}"#, r#"ok {"a": "\ud800"}"#);
        // Other escapes before a lone surrogate, a pair before one, and an escaped backslash
        // followed by four hex digits (which is no escape of a code unit).
        check(r#"{"a": "\n\ud800"}"#, r#"ok {"a": "\n\ud800"}"#);
        check(
            r#"{"a": "\ud834\udd1e\ud800"}"#,
            r#"ok {"a": "\ud834\udd1e\ud800"}"#,
        );
        check(
            r#"{"a": "\\d800", "b": "\ud800"}"#,
            r#"ok {"a": "\\d800", "b": "\ud800"}"#,
        );
        // A pair on a line that also holds a lone surrogate decodes as the character it
        // encodes, as Python's decoder reads it; only the lone one becomes a placeholder.
        let parsed = parse_record_line(r#"{"a": "\ud800x\ud834\udd1e"}"#.as_bytes(), true)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(parsed.lone_surrogates);
        let Some(Value::Str(text)) = parsed.record.get("a") else {
            panic!("{:?}", parsed.record);
        };
        assert_eq!(text.chars().skip(1).collect::<String>(), "x\u{1d11e}");
    }

    #[test]
    fn line_checks_run_in_the_reference_order() {
        let check = |raw: &[u8], expect: &str| {
            let got = match parse_record_line(raw, true) {
                Ok(_) => "ok",
                Err(LineDefect::Undecodable { .. }) => "undecodable",
                Err(LineDefect::InvalidJson(_)) => "invalid_json",
                Err(LineDefect::NotObject) => "not_object",
                Err(LineDefect::UnsupportedScheme(_)) => "unsupported_scheme",
                Err(LineDefect::NonCanonical) => "non_canonical",
            };
            assert_eq!(got, expect, "{}", String::from_utf8_lossy(raw));
        };
        check(br#"{"a": 1}"#, "ok");
        check(br#"{"a":1}"#, "non_canonical");
        check(br#"{"b": 1, "a": 2}"#, "non_canonical");
        check(br#"{"scheme": 3}"#, "unsupported_scheme");
        check(br#"{"scheme":3}"#, "unsupported_scheme");
        check(b"[1, 2]", "not_object");
        check(b"{\"a\": 1}\x0b{}", "invalid_json");
        check(b"\xef\xbb\xbf{\"a\": 1}", "non_canonical");
        check(b"{\"a\": \"\xff\"}", "undecodable");
        check(b"\0\0", "invalid_json");
        check(b"\0{\0}", "non_canonical");
        check(b"\0\0\0\0\0", "undecodable");
        check("{\"a\": \"é\"}".as_bytes(), "non_canonical");
        check(br#"{"a": "\u00e9"}"#, "ok");
    }

    #[test]
    fn python_int_conversion_matches_int_of_value_or_zero() {
        let check = |json: &str, expect: Option<i128>| {
            assert_eq!(
                python_int_or_zero(Some(&Value::parse(json).unwrap())),
                expect,
                "{json}"
            );
        };
        check("12", Some(12));
        check("-3", Some(-3));
        check("0", Some(0));
        check("null", Some(0));
        check("false", Some(0));
        check("true", Some(1));
        check("12.9", Some(12));
        check("-12.9", Some(-12));
        check("NaN", None);
        check(r#""""#, Some(0));
        check(r#"" 1_000 ""#, Some(1000));
        check(r#""1__0""#, None);
        check(r#""_1""#, None);
        check(r#""1_""#, None);
        check(r#""-""#, None);
        check(r#""+12""#, Some(12));
        check(r#""x""#, None);
        check("[]", Some(0));
        check("[1]", None);
        check("{}", Some(0));
        check(r#"{"a": 1}"#, None);
        check(
            "100000000000000000000000000000000000000000000",
            Some(i128::MAX),
        );
        assert_eq!(python_int_or_zero(None), Some(0));
    }

    #[test]
    fn prefix_chars_counts_characters() {
        assert_eq!(prefix_chars("ééé", 2), "éé");
        assert_eq!(prefix_chars("ab", 16), "ab");
    }
}
