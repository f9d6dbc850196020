//! Python's `json` module, reproduced byte for byte.
//!
//! Bernstein 3.23 hashes, signs and stores JSON produced by `json.dumps` in five configurations
//! (`FORMATS.md` §1.1). A hash over any other spelling of the same data is a different hash, so
//! this module keeps its own [`Value`] type rather than `serde_json::Value`:
//!
//! * integers are unbounded (Python `int`), kept as their normalised decimal text;
//! * floats are written with Python's `repr` layout (`1e-07`, `2.0`, `-0.0`, `Infinity`);
//! * objects keep insertion order (Python `dict`), which [`Dialect::PY_ROW`] relies on, and a
//!   repeated key replaces the value in place, as `dict` does;
//! * the parser accepts exactly what `json.loads` accepts (including `NaN` and `Infinity`), with
//!   one documented difference: a lone UTF-16 surrogate escape is rejected, because a Rust
//!   `String` cannot hold it.
//!
//! Encoding is [`Value::dumps`] with one of the [`Dialect`] constants, or [`Value::to_jcs`] for
//! RFC 8785.

mod float;
mod jcs;
mod parse;
mod plain;
mod serde_bridge;

pub use float::write_repr_layout;
pub use parse::ParseError;
pub use plain::{is_plain, plain_run};

/// A JSON value as Python's `json.loads` produces it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `null` (Python `None`).
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer of any size.
    Int(Int),
    /// A float, including the non-finite values Python writes as `NaN` and `Infinity`.
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<Value>),
    /// An object with keys in insertion order.
    Object(Object),
}

/// An unbounded integer, stored as normalised decimal text (no leading zeros, no `-0`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Int(Box<str>);

impl Int {
    /// Parses decimal digits with an optional leading `-`; `None` when the text is not an integer.
    pub fn parse(text: &str) -> Option<Int> {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits = digits.trim_start_matches('0');
        if digits.is_empty() {
            return Some(Int("0".into()));
        }
        let mut normalised = String::with_capacity(digits.len() + 1);
        if negative {
            normalised.push('-');
        }
        normalised.push_str(digits);
        Some(Int(normalised.into_boxed_str()))
    }

    /// The decimal text, as Python's `str(int)` writes it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value as an `i64`, when it fits.
    pub fn as_i64(&self) -> Option<i64> {
        self.0.parse().ok()
    }

    /// The value as a `u64`, when it fits.
    pub fn as_u64(&self) -> Option<u64> {
        self.0.parse().ok()
    }
}

macro_rules! int_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Int {
            fn from(n: $t) -> Int {
                Int(n.to_string().into_boxed_str())
            }
        }
        impl From<$t> for Value {
            fn from(n: $t) -> Value {
                Value::Int(Int::from(n))
            }
        }
    )*};
}
int_from!(
    i8, i16, i32, i64, i128, u8, u16, u32, u64, u128, usize, isize
);

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Value {
        Value::Float(x)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}

impl From<&String> for Value {
    fn from(s: &String) -> Value {
        Value::Str(s.clone())
    }
}

impl From<Object> for Value {
    fn from(o: Object) -> Value {
        Value::Object(o)
    }
}

impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(items: Vec<T>) -> Value {
        Value::Array(items.into_iter().map(Into::into).collect())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// A JSON object that keeps insertion order, like a Python `dict`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Object {
    entries: Vec<(String, Value)>,
}

impl Object {
    /// An empty object.
    pub fn new() -> Object {
        Object::default()
    }

    /// Sets `key` to `value`. An existing key keeps its position, as in a Python `dict`.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    /// Builder form of [`Object::insert`].
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Object {
        self.insert(key, value);
        self
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Removes `key`, returning its value; the order of the other keys is kept.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let pos = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(pos).1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The object serialised in `dialect` (as [`Value::dumps`] of it would be), appended to
    /// `out`, without first moving it into a [`Value`].
    pub fn dumps_into(&self, out: &mut String, dialect: Dialect) {
        write_object(out, self, dialect);
    }

    /// Entries in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Keys in insertion order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the object has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for Object {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Object {
        let mut object = Object::new();
        for (k, v) in iter {
            object.insert(k, v);
        }
        object
    }
}

/// One `json.dumps` configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// `sort_keys=True`: keys in code-point order (which is UTF-8 byte order).
    pub sort_keys: bool,
    /// `True` for `separators=(",", ":")`, `False` for the default `", "` / `": "`.
    pub compact: bool,
    /// `ensure_ascii=True`: every code point outside 0x20..=0x7E is escaped.
    pub ensure_ascii: bool,
}

impl Dialect {
    /// `json.dumps(x, sort_keys=True)`: audit records and their HMAC pre-image.
    pub const PY_SPACED: Dialect = Dialect {
        sort_keys: true,
        compact: false,
        ensure_ascii: true,
    };
    /// `json.dumps(x, sort_keys=True, separators=(",", ":"))`: journal, handle and receipt
    /// pre-images.
    pub const PY_COMPACT_ASCII: Dialect = Dialect {
        sort_keys: true,
        compact: true,
        ensure_ascii: true,
    };
    /// The compact sorted form with `ensure_ascii=False`: mailbox, spine, artifact and capsule
    /// bytes.
    pub const PY_COMPACT_UTF8: Dialect = Dialect {
        sort_keys: true,
        compact: true,
        ensure_ascii: false,
    };
    /// `json.dumps(entry, default=str)` without sorting: run-journal file rows.
    pub const PY_ROW: Dialect = Dialect {
        sort_keys: false,
        compact: false,
        ensure_ascii: true,
    };
}

impl Value {
    /// Parses text the way `json.loads` does.
    pub fn parse(text: &str) -> Result<Value, ParseError> {
        parse::parse(text)
    }

    /// Serialises the value in `dialect`, byte-identical to the matching `json.dumps` call.
    pub fn dumps(&self, dialect: Dialect) -> String {
        // Most texts written here (records, rows, hash pre-images) are a few hundred bytes:
        // starting there saves the several doublings a text would otherwise grow through.
        let mut out = String::with_capacity(DUMPS_START_CAPACITY);
        write_value(&mut out, self, dialect);
        out
    }

    /// [`Value::dumps`], appended to `out`: for writers that assemble a larger text (an
    /// indented document, an array of many rows) without a string per value.
    pub fn dumps_into(&self, out: &mut String, dialect: Dialect) {
        write_value(out, self, dialect);
    }

    /// Serialises the value as RFC 8785 (JCS) canonical JSON, the way Bernstein's
    /// `canonicalize_jcs` does.
    pub fn to_jcs(&self) -> Result<String, JcsError> {
        jcs::to_jcs(self)
    }

    /// The object inside, if this is an object.
    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The string inside, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer as `i64`, if this is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => i.as_i64(),
            _ => None,
        }
    }

    /// The number as `f64`, for an int or a float (Python's `float(x)`).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(x) => Some(*x),
            Value::Int(i) => i.as_str().parse().ok(),
            _ => None,
        }
    }

    /// The items, if this is an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// Python's `str(value)` (see [`crate::pyrepr::python_str`]).
    pub fn to_python_str(&self) -> String {
        crate::pyrepr::python_str(self)
    }
}

/// Why a value has no JCS form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JcsError {
    /// RFC 8785 has no spelling for NaN or an infinity.
    #[error("JCS cannot represent the non-finite number {0}")]
    NonFinite(String),
}

/// Python's `repr(float)`, the form `json.dumps` writes floats in.
pub fn python_float_repr(x: f64) -> String {
    float::python_repr(x)
}

fn write_value(out: &mut String, value: &Value, dialect: Dialect) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Int(i) => out.push_str(i.as_str()),
        Value::Float(x) => out.push_str(&float::json_repr(*x)),
        Value::Str(s) => write_string(out, s, dialect.ensure_ascii),
        Value::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push_str(if dialect.compact { "," } else { ", " });
                }
                write_value(out, item, dialect);
            }
            out.push(']');
        }
        Value::Object(object) => write_object(out, object, dialect),
    }
}

fn write_object(out: &mut String, object: &Object, dialect: Dialect) {
    let write_entry = |out: &mut String, n: usize, key: &str, item: &Value| {
        if n > 0 {
            out.push_str(if dialect.compact { "," } else { ", " });
        }
        write_string(out, key, dialect.ensure_ascii);
        out.push_str(if dialect.compact { ":" } else { ": " });
        write_value(out, item, dialect);
    };
    out.push('{');
    if dialect.sort_keys {
        let mut entries: Vec<&(String, Value)> = object.entries.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (n, (key, item)) in entries.into_iter().enumerate() {
            write_entry(out, n, key, item);
        }
    } else {
        for (n, (key, item)) in object.entries.iter().enumerate() {
            write_entry(out, n, key, item);
        }
    }
    out.push('}');
}

/// Appends `s` as a JSON string literal in `dialect` (only its `ensure_ascii` matters), as
/// [`Value::dumps`] of the string would write it.
pub fn dumps_str_into(out: &mut String, s: &str, dialect: Dialect) {
    write_string(out, s, dialect.ensure_ascii);
}

/// The capacity [`Value::dumps`] starts its text with.
const DUMPS_START_CAPACITY: usize = 256;

/// Writes `s` as a JSON string literal with Python's escaping rules.
///
/// Runs of characters that need no escape are found eight bytes at a time ([`plain_run`]) and
/// copied as whole slices: every audit entry, journal row and tool answer is written through
/// here, so it avoids per-character tests, pushes and formatting.
pub(crate) fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut i = 0;
    loop {
        // A run ends at an ASCII stop or, with `ensure_ascii`, at the first byte of a
        // non-ASCII character: on a character boundary either way.
        let run = plain_run(&bytes[i..], ensure_ascii);
        out.push_str(&s[i..i + run]);
        i += run;
        let Some(&b) = bytes.get(i) else {
            break;
        };
        if b < 0x80 {
            match b {
                b'"' => out.push_str("\\\""),
                b'\\' => out.push_str("\\\\"),
                b'\n' => out.push_str("\\n"),
                b'\r' => out.push_str("\\r"),
                b'\t' => out.push_str("\\t"),
                0x08 => out.push_str("\\b"),
                0x0c => out.push_str("\\f"),
                _ => push_unicode_escape(out, u16::from(b)),
            }
            i += 1;
        } else {
            // Only reached with `ensure_ascii`: escape the whole character, as UTF-16 units.
            let c = s[i..].chars().next().unwrap_or(char::REPLACEMENT_CHARACTER);
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                push_unicode_escape(out, *unit);
            }
            i += c.len_utf8();
        }
    }
    out.push('"');
}

/// Appends `\uXXXX` with lowercase hex digits, as Python writes it.
fn push_unicode_escape(out: &mut String, unit: u16) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(DIGITS[usize::from((unit >> shift) & 0xf)] as char);
    }
}

#[cfg(test)]
mod tests;
