//! Python's `repr()` and `str()` of JSON values, which the reference interpolates into error
//! texts, verification reasons and hashed `default=str` fields.
//!
//! `bernstein_cancel` answers an unknown id with `No task with id 'x'; nothing was cancelled.`,
//! the shutdown barrier echoes the caller's workdir as `repr(workdir)`, and the journal barrier
//! says `unsafe run_id for journal path: '<id>'`, so a byte-compatible message needs CPython
//! 3.12's exact quoting and escaping rules for strings:
//!
//! * the string is wrapped in `'`, or in `"` when it contains `'` but no `"`;
//! * `\` and the chosen quote are backslash-escaped; TAB, LF and CR become `\t`, `\n`, `\r`;
//! * other code points below U+0020, and U+007F, become `\xHH`;
//! * code points above U+007F are kept when `str.isprintable()` accepts them, and otherwise
//!   become `\xHH`, `\uHHHH` or `\UHHHHHHHH` (lowercase hex), whichever is the shortest form
//!   that fits.

mod printable;

use std::fmt::Write as _;

use crate::pyjson::{Value, python_float_repr};

/// `repr(text)` as CPython 3.12 spells it.
pub fn python_str_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for ch in text.chars() {
        let code = u32::from(ch);
        match ch {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            _ if ch == quote => {
                out.push('\\');
                out.push(ch);
            }
            _ if code < 0x20 || code == 0x7f => push_escape(&mut out, code),
            _ if code < 0x7f => out.push(ch),
            _ if is_printable(code) => out.push(ch),
            _ => push_escape(&mut out, code),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr(value)` for a parsed JSON value (`None`, `True`, `1.5`, `'text'`, `[1, 'a']`,
/// `{'k': 2}`).
pub fn python_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, value);
    out
}

/// Python's `str(value)`: the text itself for a string, `repr` for everything else.
pub fn python_str(value: &Value) -> String {
    match value {
        Value::Str(s) => s.clone(),
        other => python_repr(other),
    }
}

fn write_repr(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Int(i) => out.push_str(i.as_str()),
        Value::Float(x) => out.push_str(&python_float_repr(*x)),
        Value::Str(s) => out.push_str(&python_str_repr(s)),
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
            for (n, (key, item)) in object.iter().enumerate() {
                if n > 0 {
                    out.push_str(", ");
                }
                out.push_str(&python_str_repr(key));
                out.push_str(": ");
                write_repr(out, item);
            }
            out.push('}');
        }
    }
}

/// Whether CPython's `str.isprintable()` accepts the non-ASCII code point `code`.
fn is_printable(code: u32) -> bool {
    let table = printable::NON_PRINTABLE;
    // The ranges are sorted and disjoint: find the last range starting at or before `code`.
    let after = table.partition_point(|&(start, _)| start <= code);
    match after.checked_sub(1).and_then(|index| table.get(index)) {
        Some(&(_, end)) => code > end,
        None => true,
    }
}

fn push_escape(out: &mut String, code: u32) {
    // Writing to a String cannot fail.
    let _ = if code <= 0xff {
        write!(out, "\\x{code:02x}")
    } else if code <= 0xffff {
        write!(out, "\\u{code:04x}")
    } else {
        write!(out, "\\U{code:08x}")
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_cpython() {
        // Each pair is (input, CPython 3.12.1 `repr(input)`).
        let cases = [
            ("no-such-task", "'no-such-task'"),
            ("", "''"),
            ("it's", "\"it's\""),
            ("say \"hi\"", "'say \"hi\"'"),
            ("both ' and \"", "'both \\' and \"'"),
            ("back\\slash", "'back\\\\slash'"),
            ("tab\u{9}nl\u{a}cr\u{d}", "'tab\\tnl\\ncr\\r'"),
            ("nul\u{0}x", "'nul\\x00x'"),
            ("\u{1f}\u{7f}", "'\\x1f\\x7f'"),
            ("caf\u{e9}", "'caf\u{e9}'"),
            ("\u{a0}nbsp", "'\\xa0nbsp'"),
            ("\u{ad}", "'\\xad'"),
            ("zw\u{200b}sp", "'zw\\u200bsp'"),
            ("\u{2028}", "'\\u2028'"),
            ("\u{d7ff}", "'\\ud7ff'"),
            ("\u{e000}", "'\\ue000'"),
            ("\u{1f600}", "'\u{1f600}'"),
            ("\u{e0001}", "'\\U000e0001'"),
            ("\u{10ffff}", "'\\U0010ffff'"),
            ("\u{378}", "'\\u0378'"),
            ("$WORKSPACE/proj\u{0}x", "'$WORKSPACE/proj\\x00x'"),
            ("\u{80}\u{9f}\u{ff}", "'\\x80\\x9f\u{ff}'"),
            ("\u{3000}", "'\\u3000'"),
            (" space ", "' space '"),
        ];
        for (input, expect) in cases {
            assert_eq!(python_str_repr(input), expect, "{input:?}");
        }
    }

    #[test]
    fn table_is_sorted_and_disjoint() {
        let table = printable::NON_PRINTABLE;
        for pair in table.windows(2) {
            assert!(pair[0].0 <= pair[0].1 && pair[0].1 < pair[1].0, "{pair:?}");
        }
        assert_eq!(table.first().map(|r| r.0), Some(0x80));
        assert_eq!(table.last().map(|r| r.1), Some(0x10ffff));
    }

    #[test]
    fn printable_lookup_at_range_edges() {
        assert!(!is_printable(0x80));
        assert!(!is_printable(0xa0));
        assert!(is_printable(0xa1));
        assert!(!is_printable(0xad));
        assert!(is_printable(0xae));
        assert!(is_printable(0x1f600));
        assert!(!is_printable(0x10ffff));
    }
}
