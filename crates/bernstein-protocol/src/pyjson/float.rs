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
    let mut out = String::with_capacity(digits.len() + 8);
    write_repr_layout(
        x.is_sign_negative(),
        digits.as_bytes(),
        exponent + 1,
        &mut |piece| out.push_str(std::str::from_utf8(piece).unwrap_or_default()),
    );
    out
}

/// `repr`'s layout of a finite float from its sign, its significant digits (ASCII, no trailing
/// zeros) and the position of its decimal point: the value is `0.<digits>` times ten to
/// `point`. Fixed notation when `-4 < point <= 16`, otherwise `d.ddde±XX`. The pieces go to
/// `out` in order, so a caller can lay the text into a buffer of its own (the audit scanner
/// checks a float's text with no allocation).
pub fn write_repr_layout(negative: bool, digits: &[u8], point: i32, out: &mut dyn FnMut(&[u8])) {
    if negative {
        out(b"-");
    }
    let count = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let zeros = |out: &mut dyn FnMut(&[u8]), n: u32| {
        for _ in 0..n {
            out(b"0");
        }
    };
    if -4 < point && point <= 16 {
        if point <= 0 {
            out(b"0.");
            zeros(out, point.unsigned_abs());
            out(digits);
        } else if point < count {
            let (whole, part) = digits.split_at(point.unsigned_abs() as usize);
            out(whole);
            out(b".");
            out(part);
        } else {
            out(digits);
            zeros(out, (point - count).unsigned_abs());
            out(b".0");
        }
    } else {
        let (lead, rest) = digits.split_at(digits.len().min(1));
        out(lead);
        if !rest.is_empty() {
            out(b".");
            out(rest);
        }
        let exponent = point - 1;
        out(if exponent < 0 { b"e-" } else { b"e+" });
        let magnitude = exponent.unsigned_abs();
        if magnitude < 10 {
            out(b"0");
        }
        let mut text = [0u8; 10];
        let mut at = text.len();
        let mut rest = magnitude;
        loop {
            at -= 1;
            text[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        out(&text[at..]);
    }
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
