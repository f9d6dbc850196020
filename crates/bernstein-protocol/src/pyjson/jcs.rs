//! RFC 8785 (JCS) canonical JSON, as Bernstein's `canonicalize_jcs` writes it.
//!
//! Two details follow Bernstein rather than a generic JCS library: integers are written exactly
//! (never through a double), and strings use Python's `ensure_ascii=False` escaping.

use super::{JcsError, Value, float, write_string};

pub(super) fn to_jcs(value: &Value) -> Result<String, JcsError> {
    let mut out = String::new();
    write(&mut out, value)?;
    Ok(out)
}

fn write(out: &mut String, value: &Value) -> Result<(), JcsError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Int(i) => out.push_str(i.as_str()),
        Value::Float(x) => out.push_str(&es6_number(*x)?),
        Value::Str(s) => write_string(out, s, false),
        Value::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                write(out, item)?;
            }
            out.push(']');
        }
        Value::Object(object) => {
            let mut entries: Vec<(&str, &Value)> = object.iter().collect();
            // RFC 8785 §3.2.3 orders property names by UTF-16 code units, not code points.
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (n, (key, item)) in entries.into_iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                write_string(out, key, false);
                out.push(':');
                write(out, item)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// ECMAScript `Number::toString` for a double (RFC 8785 §3.2.2.3).
fn es6_number(x: f64) -> Result<String, JcsError> {
    if !x.is_finite() {
        return Err(JcsError::NonFinite(float::json_repr(x)));
    }
    if x == 0.0 {
        return Ok("0".to_owned());
    }
    if x < 0.0 {
        return Ok(format!("-{}", es6_number(-x)?));
    }
    let (digits, exponent) = float::shortest_digits(x);
    let digits = {
        let trimmed = digits.trim_end_matches('0');
        if trimmed.is_empty() { "0" } else { trimmed }
    };
    let k = digits.len() as i32;
    // `n` is where the decimal point sits: the value is digits × 10^(n − k).
    let n = exponent + 1;
    Ok(if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let mantissa = if k == 1 {
            digits.to_owned()
        } else {
            format!("{}.{}", &digits[..1], &digits[1..])
        };
        let sign = if n > 0 { '+' } else { '-' };
        format!("{mantissa}e{sign}{}", (n - 1).abs())
    })
}
