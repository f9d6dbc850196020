//! Python's built-in coercions (`int(x)`, `float(x)`, `str(x)`, `bool(x)`) over parsed JSON
//! values, as the reference's `from_dict` constructors apply them to backlog rows and capsule
//! records.
//!
//! The reference never validates the types of these fields; it coerces them. A row whose
//! `attempts` is the string `" 2 "` therefore loads as `2`, and one whose `attempts` is a list
//! fails to load. Reproducing the coercions keeps our verdicts (and hashes, which cover the
//! coerced values) identical to the reference's on hand-edited files.
//!
//! Integers are `i64` here while Python's are unbounded: a value outside `i64` is refused with
//! an "out of range" message where the reference would accept it. No Bernstein writer produces
//! such values.

use bernstein_protocol::pyjson::Value;

use crate::audit::python_repr;

/// Python's `type(value).__name__` for a parsed JSON value.
pub(crate) fn python_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Float(_) => "float",
        Value::Str(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Python's `bool(value)`: empty containers, empty strings, zero and `None` are false.
pub(crate) fn python_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Int(i) => i.as_str() != "0",
        Value::Float(x) => *x != 0.0,
        Value::Str(s) => !s.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(object) => !object.is_empty(),
    }
}

/// Python's `str.strip()` whitespace: Unicode white space plus the four ASCII information
/// separators (0x1C..=0x1F), which Python counts as white space and Rust does not.
fn is_python_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Removes the underscores Python's numeric literals allow: single underscores between two
/// digits. `None` when an underscore is misplaced.
fn strip_digit_underscores(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    for (at, &b) in bytes.iter().enumerate() {
        if b == b'_' {
            let before = at.checked_sub(1).and_then(|i| bytes.get(i));
            let after = bytes.get(at + 1);
            if !(before.is_some_and(u8::is_ascii_digit) && after.is_some_and(u8::is_ascii_digit)) {
                return None;
            }
        } else {
            out.push(char::from(b));
        }
    }
    Some(out)
}

/// Python's `int(value)` for a parsed JSON value, limited to `i64`.
///
/// `Err` carries the message Python raises (`invalid literal for int() with base 10: 'x'`,
/// `int() argument must be …`), or an out-of-range note.
pub(crate) fn python_int(value: &Value) -> Result<i64, String> {
    let out_of_range = || format!("integer {} is out of range", python_repr(value));
    match value {
        Value::Bool(b) => Ok(i64::from(*b)),
        Value::Int(i) => i.as_i64().ok_or_else(out_of_range),
        Value::Float(x) if x.is_nan() => Err("cannot convert float NaN to integer".to_owned()),
        Value::Float(x) if x.is_infinite() => {
            Err("cannot convert float infinity to integer".to_owned())
        }
        Value::Float(x) => {
            let truncated = x.trunc();
            // `i64::MAX as f64` rounds up to 2^63, so the upper bound is exclusive.
            if truncated >= -(2f64.powi(63)) && truncated < 2f64.powi(63) {
                // The range check above makes this conversion exact.
                #[allow(clippy::cast_possible_truncation)]
                Ok(truncated as i64)
            } else {
                Err(out_of_range())
            }
        }
        Value::Str(text) => {
            let invalid = || {
                format!(
                    "invalid literal for int() with base 10: {}",
                    python_repr(value)
                )
            };
            let trimmed = text.trim_matches(is_python_whitespace);
            let (negative, unsigned) = match trimmed.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
            };
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
                return Err(invalid());
            }
            let digits = strip_digit_underscores(unsigned).ok_or_else(invalid)?;
            let signed = if negative {
                format!("-{digits}")
            } else {
                digits
            };
            signed.parse::<i64>().map_err(|_| out_of_range())
        }
        Value::Null | Value::Array(_) | Value::Object(_) => Err(format!(
            "int() argument must be a string, a bytes-like object or a real number, not '{}'",
            python_type_name(value)
        )),
    }
}

/// Python's `float(value)` for a parsed JSON value.
pub(crate) fn python_float(value: &Value) -> Result<f64, String> {
    match value {
        Value::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        Value::Float(x) => Ok(*x),
        Value::Int(i) => match i.as_str().parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(x),
            _ => Err("int too large to convert to float".to_owned()),
        },
        Value::Str(text) => {
            let invalid = || format!("could not convert string to float: {}", python_repr(value));
            let trimmed = text.trim_matches(is_python_whitespace);
            // Rust's parser accepts the same spellings as Python's for decimals, exponents,
            // `inf`, `infinity` and `nan` (any case, optional sign); only the digit
            // underscores need removing first.
            let cleaned = strip_digit_underscores(trimmed).ok_or_else(invalid)?;
            cleaned.parse::<f64>().map_err(|_| invalid())
        }
        Value::Null | Value::Array(_) | Value::Object(_) => Err(format!(
            "float() argument must be a string or a real number, not '{}'",
            python_type_name(value)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Value {
        Value::parse(json).unwrap()
    }

    #[test]
    fn int_coercion_matches_python() {
        let check = |json: &str, expect: Result<i64, &str>| {
            assert_eq!(
                python_int(&parse(json)),
                expect.map_err(str::to_owned),
                "{json}"
            );
        };
        check("3", Ok(3));
        check("true", Ok(1));
        check("false", Ok(0));
        check("3.9", Ok(3));
        check("-3.9", Ok(-3));
        check(r#"" 7 ""#, Ok(7));
        check(r#""+7""#, Ok(7));
        check(r#""-1_000""#, Ok(-1000));
        check(r#""\u001f5\u001c""#, Ok(5));
        check(
            r#""1__0""#,
            Err("invalid literal for int() with base 10: '1__0'"),
        );
        check(
            r#""_1""#,
            Err("invalid literal for int() with base 10: '_1'"),
        );
        check(
            r#""2.5""#,
            Err("invalid literal for int() with base 10: '2.5'"),
        );
        check(r#""""#, Err("invalid literal for int() with base 10: ''"));
        check(
            "null",
            Err(
                "int() argument must be a string, a bytes-like object or a real number, not 'NoneType'",
            ),
        );
        check(
            "[1]",
            Err(
                "int() argument must be a string, a bytes-like object or a real number, not 'list'",
            ),
        );
        check("NaN", Err("cannot convert float NaN to integer"));
        check("-Infinity", Err("cannot convert float infinity to integer"));
        check(
            "100000000000000000000",
            Err("integer 100000000000000000000 is out of range"),
        );
        check("9223372036854775807", Ok(i64::MAX));
        // 2^63 is the first float past `i64::MAX`; -2^63 is `i64::MIN` exactly.
        check(
            "9223372036854775808.0",
            Err("integer 9.223372036854776e+18 is out of range"),
        );
        check("-9223372036854775808.0", Ok(i64::MIN));
        check("1e300", Err("integer 1e+300 is out of range"));
    }

    #[test]
    fn float_coercion_matches_python() {
        let check = |json: &str, expect: Result<f64, &str>| {
            assert_eq!(
                python_float(&parse(json)),
                expect.map_err(str::to_owned),
                "{json}"
            );
        };
        check("5", Ok(5.0));
        check("1780000500.123456", Ok(1_780_000_500.123_456));
        check("true", Ok(1.0));
        check(r#"" 1_0.5 ""#, Ok(10.5));
        check(r#""-inf""#, Ok(f64::NEG_INFINITY));
        check(r#""1e3""#, Ok(1000.0));
        check(r#""abc""#, Err("could not convert string to float: 'abc'"));
        check(r#""""#, Err("could not convert string to float: ''"));
        check(
            &format!("1{}", "0".repeat(400)),
            Err("int too large to convert to float"),
        );
        check(
            "{}",
            Err("float() argument must be a string or a real number, not 'dict'"),
        );
        assert!(python_float(&parse(r#""NaN""#)).unwrap().is_nan());
    }

    #[test]
    fn truthiness_matches_python() {
        let check =
            |json: &str, expect: bool| assert_eq!(python_truthy(&parse(json)), expect, "{json}");
        check("null", false);
        check("0", false);
        check("0.0", false);
        check(r#""""#, false);
        check("[]", false);
        check("{}", false);
        check("false", false);
        check("1", true);
        check(r#""false""#, true);
        check("[0]", true);
        check("-0.5", true);
    }
}
