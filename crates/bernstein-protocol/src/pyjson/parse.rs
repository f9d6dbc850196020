//! A JSON parser with the acceptance rules of Python's `json.loads`.

use super::{Int, Object, Value};

/// Nesting deeper than this is refused. Python would hit its recursion limit near 1000; a lower
/// fixed bound keeps the Rust stack safe on every thread.
const MAX_DEPTH: usize = 512;

/// Python refuses to convert integer text longer than this (`sys.int_info.str_digits_check_threshold`
/// default), so `json.loads` fails on such numbers; we fail the same way.
const MAX_INT_DIGITS: usize = 4300;

/// Why text is not JSON, with the position in Python's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}: line {line} column {column} (char {char_index})")]
pub struct ParseError {
    /// What was expected or found, in the words Python's `json` module uses where it has them.
    pub message: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
    /// 0-based character index into the text.
    pub char_index: usize,
}

pub(crate) fn parse(text: &str) -> Result<Value, ParseError> {
    let mut parser = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    parser.skip_ws();
    let value = parser.value(0)?;
    parser.skip_ws();
    if parser.pos != parser.bytes.len() {
        return Err(parser.error("Extra data"));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, message: &str) -> ParseError {
        self.error_at(message, self.pos)
    }

    fn error_at(&self, message: &str, byte_pos: usize) -> ParseError {
        let byte_pos = byte_pos.min(self.text.len());
        let before = &self.text[..floor_char_boundary(self.text, byte_pos)];
        let line = before.matches('\n').count() + 1;
        let char_index = before.chars().count();
        let column = match before.rfind('\n') {
            Some(nl) => before[nl + 1..].chars().count() + 1,
            None => char_index + 1,
        };
        ParseError {
            message: message.to_owned(),
            line,
            column,
            char_index,
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn eat_literal(&mut self, literal: &str) -> bool {
        if self.bytes[self.pos..].starts_with(literal.as_bytes()) {
            self.pos += literal.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.error("Nesting too deep"));
        }
        match self.bytes.get(self.pos) {
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'n') if self.eat_literal("null") => Ok(Value::Null),
            Some(b't') if self.eat_literal("true") => Ok(Value::Bool(true)),
            Some(b'f') if self.eat_literal("false") => Ok(Value::Bool(false)),
            Some(b'N') if self.eat_literal("NaN") => Ok(Value::Float(f64::NAN)),
            Some(b'I') if self.eat_literal("Infinity") => Ok(Value::Float(f64::INFINITY)),
            Some(b'-') if self.bytes[self.pos..].starts_with(b"-Infinity") => {
                self.pos += "-Infinity".len();
                Ok(Value::Float(f64::NEG_INFINITY))
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.error("Expecting value")),
        }
    }

    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.pos;
        if self.bytes.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        match self.bytes.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error_at("Expecting value", start)),
        }
        let mut is_float = false;
        if self.bytes.get(self.pos) == Some(&b'.')
            && matches!(self.bytes.get(self.pos + 1), Some(b'0'..=b'9'))
        {
            self.pos += 1;
            self.digits();
            is_float = true;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.pos) {
            let mut look = self.pos + 1;
            if let Some(b'+' | b'-') = self.bytes.get(look) {
                look += 1;
            }
            if matches!(self.bytes.get(look), Some(b'0'..=b'9')) {
                self.pos = look;
                self.digits();
                is_float = true;
            }
        }
        let text = &self.text[start..self.pos];
        if is_float {
            let x: f64 = text
                .parse()
                .map_err(|_| self.error_at("Invalid number", start))?;
            Ok(Value::Float(x))
        } else {
            if text.trim_start_matches('-').len() > MAX_INT_DIGITS {
                return Err(self.error_at(
                    "Exceeds the limit (4300 digits) for integer string conversion",
                    start,
                ));
            }
            let int = Int::parse(text).ok_or_else(|| self.error_at("Invalid number", start))?;
            Ok(Value::Int(int))
        }
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn string(&mut self) -> Result<String, ParseError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let run_start = self.pos;
            while let Some(&b) = self.bytes.get(self.pos) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            out.push_str(&self.text[run_start..self.pos]);
            match self.bytes.get(self.pos) {
                None => return Err(self.error_at("Unterminated string starting at", start)),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    let escape_pos = self.pos;
                    self.pos += 1;
                    let Some(&kind) = self.bytes.get(self.pos) else {
                        return Err(self.error_at("Unterminated string starting at", start));
                    };
                    self.pos += 1;
                    match kind {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => out.push(self.unicode_escape(escape_pos)?),
                        _ => return Err(self.error_at("Invalid \\escape", escape_pos)),
                    }
                }
                Some(_) => return Err(self.error("Invalid control character at")),
            }
        }
    }

    fn hex4(&mut self, escape_pos: usize) -> Result<u32, ParseError> {
        let hex = self
            .text
            .get(self.pos..self.pos + 4)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| self.error_at("Invalid \\uXXXX escape", escape_pos))?;
        self.pos += 4;
        u32::from_str_radix(hex, 16)
            .map_err(|_| self.error_at("Invalid \\uXXXX escape", escape_pos))
    }

    fn unicode_escape(&mut self, escape_pos: usize) -> Result<char, ParseError> {
        let first = self.hex4(escape_pos)?;
        let code =
            if (0xD800..0xDC00).contains(&first) && self.bytes[self.pos..].starts_with(b"\\u") {
                let save = self.pos;
                self.pos += 2;
                let second = self.hex4(escape_pos)?;
                if (0xDC00..0xE000).contains(&second) {
                    0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                } else {
                    self.pos = save;
                    first
                }
            } else {
                first
            };
        // Python keeps a lone surrogate in its `str`; a Rust `String` cannot, so such input is
        // refused here (a documented divergence, FORMATS.md §12).
        char::from_u32(code)
            .ok_or_else(|| self.error_at("Lone surrogate in \\u escape", escape_pos))
    }

    fn array(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.bytes.get(self.pos) == Some(&b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.error("Expecting ',' delimiter")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, ParseError> {
        self.pos += 1;
        let mut object = Object::new();
        self.skip_ws();
        if self.bytes.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            return Ok(Value::Object(object));
        }
        loop {
            self.skip_ws();
            if self.bytes.get(self.pos) != Some(&b'"') {
                return Err(self.error("Expecting property name enclosed in double quotes"));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.bytes.get(self.pos) != Some(&b':') {
                return Err(self.error("Expecting ':' delimiter"));
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value(depth + 1)?;
            object.insert(key, value);
            self.skip_ws();
            match self.bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(object));
                }
                _ => return Err(self.error("Expecting ',' delimiter")),
            }
        }
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
