//! Small pieces of Python semantics the journal readers must copy exactly.
//!
//! The reference reads journals, ledgers and evidence bundles with Python built-ins whose edge
//! behaviour decides verdicts: `str.strip()` (which whitespace), `round(x, 3)`, `repr(str)` in
//! error texts, and the `int(x)` / `float(x)` coercions that decide whether a row is usable or
//! raises. Each helper here names the built-in it reproduces.

use bernstein_protocol::pyjson::Value;

/// Whether `c` is whitespace for Python's `str.isspace()` (and therefore `str.strip()`).
///
/// This is Unicode `White_Space` plus U+001C..U+001F, which Python also treats as whitespace
/// (they are bidirectional separators).
pub(crate) fn is_python_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `text.strip()`.
pub(crate) fn python_strip(text: &str) -> &str {
    text.trim_matches(is_python_whitespace)
}

/// Python's `round(x, 3)` for a float: correctly rounded (ties to even on the exact binary
/// value), then read back as the nearest float.
pub(crate) fn python_round3(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    // Rust's fixed-precision formatting is exact and rounds ties to even, which is the
    // decimal rounding `round()` performs before converting back to a float.
    format!("{x:.3}").parse().unwrap_or(x)
}

pub use bernstein_protocol::pyrepr::python_str_repr;

/// How a Python coercion (`int(x)`, `float(x)`, `x["key"]`, iteration) ended.
///
/// The readers that use these coercions catch some exception classes and let others escape,
/// so the class matters, not just "it failed".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PyException {
    /// `ValueError` (bad literal, NaN to int, undecodable text).
    Value,
    /// `TypeError` (wrong type: `int(None)`, `[]["k"]`, iterating a number).
    Type,
    /// `KeyError` (a required key is missing).
    Key,
    /// `OverflowError` (`int(inf)`, `float(10**400)`).
    Overflow,
}

impl PyException {
    /// The Python class name, for error texts.
    pub(crate) fn name(self) -> &'static str {
        match self {
            PyException::Value => "ValueError",
            PyException::Type => "TypeError",
            PyException::Key => "KeyError",
            PyException::Overflow => "OverflowError",
        }
    }
}

/// Whether Python's `int(value)` succeeds on a JSON value, and if not, how it fails.
///
/// Only success matters to the callers (the converted numbers are never used), so no value is
/// returned.
pub(crate) fn python_int_check(value: &Value) -> Result<(), PyException> {
    match value {
        Value::Int(_) | Value::Bool(_) => Ok(()),
        Value::Float(x) if x.is_nan() => Err(PyException::Value),
        Value::Float(x) if x.is_infinite() => Err(PyException::Overflow),
        Value::Float(_) => Ok(()),
        Value::Str(s) => {
            if is_python_int_literal(python_strip(s)) {
                Ok(())
            } else {
                Err(PyException::Value)
            }
        }
        Value::Null | Value::Array(_) | Value::Object(_) => Err(PyException::Type),
    }
}

/// Whether Python's `float(value)` succeeds on a JSON value, and if not, how it fails.
pub(crate) fn python_float_check(value: &Value) -> Result<(), PyException> {
    match value {
        Value::Float(_) | Value::Bool(_) => Ok(()),
        Value::Int(i) => {
            // `float(int)` raises OverflowError once the integer exceeds the largest double.
            match i.as_str().parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(()),
                _ => Err(PyException::Overflow),
            }
        }
        Value::Str(s) => {
            if python_float_literal(python_strip(s)).is_some() {
                Ok(())
            } else {
                Err(PyException::Value)
            }
        }
        Value::Null | Value::Array(_) | Value::Object(_) => Err(PyException::Type),
    }
}

/// Whether `text` (already stripped) is a base-10 literal Python's `int()` accepts: an optional
/// sign, then ASCII digits where single underscores may separate digits.
fn is_python_int_literal(text: &str) -> bool {
    let digits = text
        .strip_prefix('+')
        .or_else(|| text.strip_prefix('-'))
        .unwrap_or(text);
    digits_with_underscores(digits)
}

/// Digits with single underscores allowed only between two digits.
fn digits_with_underscores(text: &str) -> bool {
    if text.is_empty() {
        return false;
    }
    let bytes = text.as_bytes();
    for (n, b) in bytes.iter().enumerate() {
        match b {
            b'0'..=b'9' => {}
            b'_' => {
                let before = n.checked_sub(1).and_then(|p| bytes.get(p));
                let after = bytes.get(n + 1);
                if !matches!(before, Some(b'0'..=b'9')) || !matches!(after, Some(b'0'..=b'9')) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// Python's `float(text)` for already-stripped text, or `None` where it raises `ValueError`.
fn python_float_literal(text: &str) -> Option<f64> {
    let unsigned = text
        .strip_prefix('+')
        .or_else(|| text.strip_prefix('-'))
        .unwrap_or(text);
    let lower = unsigned.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        return text
            .to_ascii_lowercase()
            .replace("infinity", "inf")
            .parse()
            .ok();
    }
    // Underscores are allowed only between digits; validate each digit run, then drop them.
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let (int_part, frac_part) = match mantissa.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (mantissa, None),
    };
    let run_ok = |run: &str| run.is_empty() || digits_with_underscores(run);
    if !run_ok(int_part) || !frac_part.is_none_or(run_ok) {
        return None;
    }
    if int_part.is_empty() && frac_part.is_none_or(str::is_empty) {
        return None;
    }
    if let Some(exp) = exponent {
        let exp_digits = exp
            .strip_prefix('+')
            .or_else(|| exp.strip_prefix('-'))
            .unwrap_or(exp);
        if !digits_with_underscores(exp_digits) {
            return None;
        }
    }
    text.replace('_', "").parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_matches_python_whitespace() {
        let check =
            |input: &str, expect: &str| assert_eq!(python_strip(input), expect, "{input:?}");
        check(" \t\x0b\x0c\x1c\x1f{}\u{85}\u{a0}\u{2028}\u{3000}", "{}");
        check("\0{}\0", "\0{}\0");
        check("\u{feff}{}", "\u{feff}{}");
    }

    #[test]
    fn round3_matches_python_round() {
        let check =
            |x: f64, expect: f64| assert_eq!(python_round3(x).to_bits(), expect.to_bits(), "{x}");
        // Reference values from CPython 3.12: round(x, 3).
        check(0.0005, 0.001);
        check(1.0005, 1.0);
        check(0.0015, 0.002);
        check(1234.5675, 1234.568);
        check(2.675, 2.675);
        check(0.5, 0.5);
        check(-0.0004, -0.0);
        check(f64::INFINITY, f64::INFINITY);
    }

    #[test]
    fn str_repr_matches_python() {
        let check =
            |input: &str, expect: &str| assert_eq!(python_str_repr(input), expect, "{input:?}");
        check("abc", "'abc'");
        check("a/b", "'a/b'");
        check("it's", "\"it's\"");
        check("'\"", "'\\'\"'");
        check("a\0b", "'a\\x00b'");
        check("tab\tnl\n", "'tab\\tnl\\n'");
        check("caf\u{e9}", "'caf\u{e9}'");
        check("\u{7f}\u{a0}\u{2028}", "'\\x7f\\xa0\\u2028'");
        check("\u{200b}", "'\\u200b'");
        check("\u{10ffff}", "'\\U0010ffff'");
        check("\\", "'\\\\'");
    }

    #[test]
    fn int_coercion_matches_python() {
        let check = |text: &str, expect: Result<(), PyException>| {
            let value = Value::parse(text).unwrap();
            assert_eq!(python_int_check(&value), expect, "{text}");
        };
        check("1", Ok(()));
        check("true", Ok(()));
        check("1.5", Ok(()));
        check("1e300", Ok(()));
        check("NaN", Err(PyException::Value));
        check("Infinity", Err(PyException::Overflow));
        check("\" 12 \"", Ok(()));
        check("\"-1_000\"", Ok(()));
        check("\"007\"", Ok(()));
        check("\"1__0\"", Err(PyException::Value));
        check("\"_1\"", Err(PyException::Value));
        check("\"1.5\"", Err(PyException::Value));
        check("\"\"", Err(PyException::Value));
        check("null", Err(PyException::Type));
        check("[]", Err(PyException::Type));
        check("{}", Err(PyException::Type));
    }

    #[test]
    fn float_coercion_matches_python() {
        let check = |text: &str, expect: Result<(), PyException>| {
            let value = Value::parse(text).unwrap();
            assert_eq!(python_float_check(&value), expect, "{text}");
        };
        check("1", Ok(()));
        check("1.5", Ok(()));
        check("\"1_0.5\"", Ok(()));
        check("\" -Infinity \"", Ok(()));
        check("\"nan\"", Ok(()));
        check("\"+nan\"", Ok(()));
        check("\".5\"", Ok(()));
        check("\"5.\"", Ok(()));
        check("\"1e5\"", Ok(()));
        check("\".\"", Err(PyException::Value));
        check("\"1e\"", Err(PyException::Value));
        check("\"1_\"", Err(PyException::Value));
        check("\"abc\"", Err(PyException::Value));
        let huge = format!("1{}", "0".repeat(400));
        check(&huge, Err(PyException::Overflow));
        check("null", Err(PyException::Type));
    }
}
