//! Python's `float.__repr__`, which `json.dumps` uses for every finite float.

/// `repr(x)`: shortest round-trip digits, fixed notation when the decimal point falls within
/// `-4 < decpt <= 16`, otherwise `d.ddde±XX`.
pub(crate) fn python_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    // Rust's `{:e}` prints the shortest digits that round-trip, like Python's repr; only the
    // layout differs, so take the digits and the exponent from it and lay them out again.
    let (digits, exponent) = shortest_digits(x.abs());
    let decpt = exponent + 1;
    let mut out = String::with_capacity(digits.len() + 8);
    if x.is_sign_negative() {
        out.push('-');
    }
    if -4 < decpt && decpt <= 16 {
        let ndigits = digits.len() as i32;
        if decpt <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-decpt) as usize));
            out.push_str(&digits);
        } else if decpt < ndigits {
            out.push_str(&digits[..decpt as usize]);
            out.push('.');
            out.push_str(&digits[decpt as usize..]);
        } else {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', (decpt - ndigits) as usize));
            out.push_str(".0");
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        let magnitude = e.unsigned_abs();
        if magnitude < 10 {
            out.push('0');
        }
        out.push_str(&magnitude.to_string());
    }
    out
}

/// The shortest round-trip decimal digits of a finite, non-negative `x` and the exponent of the
/// first digit, chosen the way CPython chooses them.
///
/// Rust's `{:e}` finds the shortest digit count, but when two strings of that length both round-trip
/// it may pick either; CPython picks the one nearest to the exact binary value, with ties going to
/// the even digit. Formatting again at that precision gives exactly that correctly rounded string.
pub(crate) fn shortest_digits(x: f64) -> (String, i32) {
    let split = |sci: &str| -> (String, i32) {
        let (mantissa, exponent) = sci.split_once('e').unwrap_or((sci, "0"));
        let digits = mantissa.chars().filter(|c| *c != '.').collect();
        (digits, exponent.parse().unwrap_or(0))
    };
    let (digits, exponent) = split(&format!("{x:e}"));
    let precision = digits.len() - 1;
    let rounded = format!("{x:.precision$e}");
    if rounded.parse::<f64>().ok() == Some(x) {
        split(&rounded)
    } else {
        (digits, exponent)
    }
}

/// The float as `json.dumps` writes it (`NaN` and `Infinity` for the non-finite values).
pub(crate) fn json_repr(x: f64) -> String {
    if x.is_nan() {
        "NaN".to_owned()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        python_repr(x)
    }
}
