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

use bernstein_protocol::pyjson::{Dialect, Object, ParseError, Value, python_float_repr};

use crate::crypto::{constant_time_eq, hmac_sha256_hex};
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
    let pre_image = body_pre_image(body);
    hmac_over(key, scheme, prev_hmac, &pre_image)
}

/// `PY-SPACED(record_without_hmac)`.
pub(crate) fn body_pre_image(record: &Object) -> String {
    let body: Object = record
        .iter()
        .filter(|(k, _)| *k != "hmac")
        .map(|(k, v)| (k, v.clone()))
        .collect();
    Value::Object(body).dumps(Dialect::PY_SPACED)
}

pub(crate) fn hmac_over(
    key: &AuditKey,
    scheme: Scheme,
    prev_hmac: &str,
    body_json: &str,
) -> String {
    match scheme {
        Scheme::V2 => hmac_sha256_hex(
            key.audit_key(),
            &[
                SCHEME_2_DOMAIN_TAG.as_bytes(),
                prev_hmac.as_bytes(),
                body_json.as_bytes(),
            ],
        ),
        Scheme::V1 => hmac_sha256_hex(key.master(), &[prev_hmac.as_bytes(), body_json.as_bytes()]),
    }
}

/// Whether a record's stored `hmac` matches the one computed from the predecessor the record
/// itself names (`_record_is_locally_valid`). Proves a key holder minted it, not that it sits
/// where it claims.
pub(crate) fn is_locally_valid(key: &AuditKey, record: &Object, scheme: Scheme) -> bool {
    let prev = record.get("prev_hmac").map(python_str).unwrap_or_default();
    let stored = record.get("hmac").map(python_str).unwrap_or_default();
    let expected = expected_hmac(key, scheme, &prev, record);
    constant_time_eq(stored.as_bytes(), expected.as_bytes())
}

/// Why a line's bytes are not a canonical JSON object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LineDefect {
    /// Not UTF-8. `position` is the byte offset of the bad sequence inside the line.
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
}

/// Applies the verifier's per-line checks in the reference's order: decode, parse, object,
/// (scheme, when `check_scheme`), canonical bytes.
pub(crate) fn parse_record_line(
    raw: &[u8],
    check_scheme: bool,
) -> Result<CanonicalRecord, LineDefect> {
    let text = decode_json_bytes(raw)?;
    let value = Value::parse(text).map_err(LineDefect::InvalidJson)?;
    let Value::Object(record) = value else {
        return Err(LineDefect::NotObject);
    };
    let scheme = if check_scheme {
        Some(Scheme::of_record(&record).map_err(LineDefect::UnsupportedScheme)?)
    } else {
        None
    };
    let record = Value::Object(record);
    if record.dumps(Dialect::PY_SPACED).as_bytes() != raw {
        return Err(LineDefect::NonCanonical);
    }
    let Value::Object(record) = record else {
        return Err(LineDefect::NotObject);
    };
    Ok(CanonicalRecord { record, scheme })
}

/// `bytes.decode` as `json.loads(bytes)` does it for UTF-8 input: one leading BOM is dropped,
/// and a decode failure carries the codec's message.
pub(crate) fn decode_json_bytes(raw: &[u8]) -> Result<&str, LineDefect> {
    let body = raw.strip_prefix(b"\xef\xbb\xbf").unwrap_or(raw);
    std::str::from_utf8(body).map_err(|err| {
        let start = err.valid_up_to();
        let (end, reason) = match err.error_len() {
            None => (body.len(), "unexpected end of data"),
            Some(len) => {
                let lead = body[start];
                let reason = if len == 1 && !(0xc2..=0xf4).contains(&lead) {
                    "invalid start byte"
                } else {
                    "invalid continuation byte"
                };
                (start + len, reason)
            }
        };
        let message = if end - start <= 1 {
            format!(
                "'utf-8' codec can't decode byte 0x{:02x} in position {start}: {reason}",
                body[start]
            )
        } else {
            format!(
                "'utf-8' codec can't decode bytes in position {start}-{}: {reason}",
                end - 1
            )
        };
        LineDefect::Undecodable {
            position: start,
            message,
        }
    })
}

/// Python's `str(value)` for a parsed JSON value (`repr` for containers).
pub fn python_str(value: &Value) -> String {
    match value {
        Value::Str(s) => s.clone(),
        other => python_repr(other),
    }
}

/// Python's `repr(value)` for a parsed JSON value.
///
/// Strings follow CPython's quoting rules; characters are escaped when they are ASCII control
/// characters, C1 controls, or a small set of well-known non-printable code points (line and
/// paragraph separators, format characters, non-ASCII spaces, private use). CPython consults the
/// full Unicode database for `isprintable`, so other unassigned code points may be escaped by
/// Python and not here.
pub fn python_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, value);
    out
}

fn write_repr(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Int(i) => out.push_str(i.as_str()),
        Value::Float(x) => out.push_str(&python_float_repr(*x)),
        Value::Str(s) => write_str_repr(out, s),
        Value::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push_str(", ");
                }
                write_repr(out, item);
            }
            out.push(']');
        }
        Value::Object(object) => {
            out.push('{');
            for (n, (k, v)) in object.iter().enumerate() {
                if n > 0 {
                    out.push_str(", ");
                }
                write_str_repr(out, k);
                out.push_str(": ");
                write_repr(out, v);
            }
            out.push('}');
        }
    }
}

fn write_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_python_printable(c) => out.push(c),
            c => {
                let code = u32::from(c);
                if code < 0x100 {
                    out.push_str(&format!("\\x{code:02x}"));
                } else if code < 0x10000 {
                    out.push_str(&format!("\\u{code:04x}"));
                } else {
                    out.push_str(&format!("\\U{code:08x}"));
                }
            }
        }
    }
    out.push(quote);
}

fn is_python_printable(c: char) -> bool {
    let code = u32::from(c);
    !(code < 0x20
        || (0x7f..=0xa0).contains(&code)
        || code == 0xad
        || (0x600..=0x605).contains(&code)
        || code == 0x61c
        || code == 0x6dd
        || code == 0x70f
        || code == 0x1680
        || (0x2000..=0x200f).contains(&code)
        || (0x2028..=0x202f).contains(&code)
        || (0x205f..=0x2064).contains(&code)
        || (0x2066..=0x206f).contains(&code)
        || code == 0x3000
        || (0xe000..=0xf8ff).contains(&code)
        || code == 0xfeff
        || (0xfff9..=0xfffb).contains(&code)
        || (0xf0000..=0x10ffff).contains(&code))
}

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
    use super::*;

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
        assert_eq!(decode_json_bytes(b"\xef\xbb\xbf{}"), Ok("{}"));
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
        check(r#""x""#, None);
        check("[]", Some(0));
        check("[1]", None);
        check("{}", Some(0));
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
