//! Python's `int(x)` on a decoded JSON value, as the reference applies it to spine and journal
//! fields (`int(row["timestamp"])`, `int(row.get("version", 0))`).
//!
//! The result matters beyond success: the converted number is hashed (a spine row's timestamp
//! enters its entry hash as `int(...)`), so a float must convert to its exact integer part, not
//! to a rounded decimal spelling.

use bernstein_protocol::pyjson::{Int, Value};

use crate::run_journal::python_strip;

/// `int(value)` as an unbounded integer, or `None` where Python raises (`None`, containers,
/// NaN, infinities, text that is not a base-10 literal).
pub(crate) fn python_int(value: &Value) -> Option<Int> {
    match value {
        Value::Int(i) => Some(i.clone()),
        Value::Bool(b) => Some(Int::from(i64::from(*b))),
        Value::Float(x) => float_integer_part(*x),
        Value::Str(text) => integer_literal(python_strip(text)),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// `int(value)` when it fits an `i64`.
pub(crate) fn python_int_i64(value: &Value) -> Option<i64> {
    python_int(value).and_then(|i| i.as_i64())
}

/// A base-10 literal `int()` accepts: optional sign, ASCII digits with single underscores
/// between digits.
fn integer_literal(text: &str) -> Option<Int> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let bytes = digits.as_bytes();
    if bytes.is_empty() {
        return None;
    }
    for (n, b) in bytes.iter().enumerate() {
        let is_digit = |at: Option<usize>| {
            at.and_then(|p| bytes.get(p))
                .is_some_and(u8::is_ascii_digit)
        };
        match b {
            b'0'..=b'9' => {}
            b'_' if is_digit(n.checked_sub(1)) && is_digit(Some(n + 1)) => {}
            _ => return None,
        }
    }
    let plain: String = digits.chars().filter(|c| *c != '_').collect();
    Int::parse(&if negative { format!("-{plain}") } else { plain })
}

/// The exact integer part of a finite float (truncation toward zero), as Python's
/// `int(float)` computes it.
fn float_integer_part(x: f64) -> Option<Int> {
    if !x.is_finite() {
        return None;
    }
    let truncated = x.trunc();
    if truncated.abs() < 9.0e15 {
        // Exactly representable as i64, and `as` is exact for integral values in range.
        #[allow(clippy::cast_possible_truncation)]
        return Some(Int::from(truncated as i64));
    }
    // value = mantissa * 2^exponent with exponent >= 0 here, since |x| >= 2^53.
    let bits = truncated.to_bits();
    let raw_exponent = i64::try_from((bits >> 52) & 0x7ff).ok()?;
    let mantissa = (bits & ((1u64 << 52) - 1)) | (1u64 << 52);
    let exponent = raw_exponent - 1075;
    let mut digits = decimal_digits(mantissa);
    for _ in 0..exponent.max(0) {
        double_in_place(&mut digits);
    }
    let text: String = digits.iter().rev().map(|d| char::from(b'0' + d)).collect();
    Int::parse(&if x < 0.0 { format!("-{text}") } else { text })
}

/// Little-endian decimal digits of `n`.
fn decimal_digits(mut n: u64) -> Vec<u8> {
    let mut digits = Vec::new();
    while n > 0 {
        digits.push(u8::try_from(n % 10).unwrap_or(0));
        n /= 10;
    }
    digits
}

fn double_in_place(digits: &mut Vec<u8>) {
    let mut carry = 0u8;
    for digit in digits.iter_mut() {
        let doubled = *digit * 2 + carry;
        *digit = doubled % 10;
        carry = doubled / 10;
    }
    if carry > 0 {
        digits.push(carry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_match_python() {
        let check = |value: Value, expect: Option<&str>| {
            assert_eq!(
                python_int(&value).as_ref().map(Int::as_str),
                expect,
                "{value:?}"
            );
        };
        check(Value::from(1_780_000_700), Some("1780000700"));
        check(Value::from(true), Some("1"));
        check(Value::from(-2.7), Some("-2"));
        check(Value::from(0.5), Some("0"));
        // int(2.0 ** 70) is exact in Python.
        check(
            Value::from(1_180_591_620_717_411_303_424.0),
            Some("1180591620717411303424"),
        );
        check(Value::from(1e16), Some("10000000000000000"));
        check(Value::from(f64::NAN), None);
        check(Value::from(f64::INFINITY), None);
        check(Value::from(" +1_000 "), Some("1000"));
        check(Value::from("-007"), Some("-7"));
        check(Value::from("1__0"), None);
        check(Value::from("_1"), None);
        check(Value::from("1.5"), None);
        check(Value::from(""), None);
        check(Value::Null, None);
        check(Value::Array(vec![]), None);
    }

    #[test]
    fn an_underscore_needs_a_digit_on_both_sides() {
        // Python's int() rejects an underscore that is not flanked by digits on both sides, so a
        // trailing or a sign-adjacent underscore must fail just like a leading one.
        let check = |text: &str, expect: Option<&str>| {
            assert_eq!(
                python_int(&Value::from(text)).as_ref().map(Int::as_str),
                expect,
                "{text:?}"
            );
        };
        check("1_", None);
        check("12_", None);
        check("-_1", None);
        check("1_2_3", Some("123"));
    }

    #[test]
    fn large_negative_floats_keep_their_sign() {
        // Floats at or beyond 2^53 take the exact digit-doubling path, which must still put the
        // sign back: int(-(2.0 ** 70)) is -1180591620717411303424 in Python.
        let check = |value: f64, expect: &str| {
            assert_eq!(
                python_int(&Value::from(value)).as_ref().map(Int::as_str),
                Some(expect),
                "{value:?}"
            );
        };
        check(-1_180_591_620_717_411_303_424.0, "-1180591620717411303424");
        check(-1e16, "-10000000000000000");
    }

    #[test]
    fn i64_conversion_returns_the_value_or_none_when_it_does_not_fit() {
        // The verifier reads a row's version through this narrowing, so both the converted value
        // and the refusal of numbers beyond i64 (or of non-numbers) must come through unchanged.
        let check = |value: Value, expect: Option<i64>| {
            assert_eq!(python_int_i64(&value), expect, "{value:?}");
        };
        check(Value::from(7), Some(7));
        check(Value::from("-42"), Some(-42));
        check(Value::from(false), Some(0));
        check(Value::from(1_180_591_620_717_411_303_424.0), None);
        check(Value::from("9223372036854775808"), None);
        check(Value::Null, None);
    }
}
