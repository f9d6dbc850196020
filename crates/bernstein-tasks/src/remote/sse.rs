//! The server-sent-event reader behind `bernstein_subscribe`.
//!
//! The task server streams `GET /events/tasks?role=` as `text/event-stream`: a heartbeat first,
//! then one `event: task.created` / `data: {json}` block per new task of that role. The
//! reference tool reads it line by line, remembers the last `event:` name until a blank line,
//! and returns the first `data:` line seen while that name is `task.created`, parsed as JSON.
//! [`EventScanner`] reproduces that rule.
//!
//! [`LineSplitter`] cuts the byte stream into lines at `\n`, `\r\n` or `\r`, the three line
//! ends the SSE specification allows, holding a trailing `\r` back until the next chunk shows
//! whether a `\n` follows. (httpx's line reader also splits at the rarer `str.splitlines`
//! separators such as U+2028; the server's payloads are ASCII-escaped JSON, where those cannot
//! occur.) A line longer than [`MAX_LINE_BYTES`] is refused, so a stream without line ends
//! cannot grow the buffer without bound.

use bernstein_protocol::pyjson::{ParseError, Value};

/// Longest SSE line accepted, in bytes.
pub(crate) const MAX_LINE_BYTES: usize = 1024 * 1024;

/// The event name the subscription waits for.
pub(crate) const TASK_CREATED: &str = "task.created";

/// Splits a byte stream into text lines.
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    buffer: Vec<u8>,
    /// The previous chunk ended in `\r`, so a leading `\n` in the next one belongs to it.
    pending_cr: bool,
}

/// A line longer than [`MAX_LINE_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LineTooLong;

impl LineSplitter {
    /// Feeds one chunk and returns the lines it completed (without their line ends).
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<String>, LineTooLong> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        if self.pending_cr {
            self.pending_cr = false;
            if let Some(after) = rest.strip_prefix(b"\n") {
                rest = after;
            }
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.buffer.extend_from_slice(&rest[..end]);
            self.check_length()?;
            lines.push(String::from_utf8_lossy(&self.buffer).into_owned());
            self.buffer.clear();
            let terminator = rest[end];
            rest = &rest[end + 1..];
            if terminator == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
        }
        self.buffer.extend_from_slice(rest);
        self.check_length()?;
        Ok(lines)
    }

    /// The unterminated last line when the stream ends, if any.
    pub(crate) fn finish(&mut self) -> Option<String> {
        if self.buffer.is_empty() {
            return None;
        }
        let line = String::from_utf8_lossy(&self.buffer).into_owned();
        self.buffer.clear();
        Some(line)
    }

    fn check_length(&self) -> Result<(), LineTooLong> {
        if self.buffer.len() > MAX_LINE_BYTES {
            Err(LineTooLong)
        } else {
            Ok(())
        }
    }
}

/// Tracks the current event name and recognises the first `task.created` data line.
#[derive(Debug, Default)]
pub(crate) struct EventScanner {
    event: String,
}

impl EventScanner {
    /// Reads one line: `Some(Ok(json))` for a `task.created` data line, `Some(Err(..))` when that
    /// line's data is not JSON, `None` for every other line.
    pub(crate) fn line(&mut self, line: &str) -> Option<Result<Value, ParseError>> {
        if line.is_empty() {
            self.event.clear();
        } else if let Some(name) = line.strip_prefix("event:") {
            self.event = name.trim().to_owned();
        } else if let Some(data) = line.strip_prefix("data:")
            && self.event == TASK_CREATED
        {
            return Some(Value::parse(data));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use bernstein_protocol::pyjson::Dialect;
    use proptest::prelude::*;

    use super::*;

    fn split_all(chunks: &[&[u8]]) -> Vec<String> {
        let mut splitter = LineSplitter::default();
        let mut lines = Vec::new();
        for chunk in chunks {
            lines.extend(splitter.push(chunk).unwrap());
        }
        lines.extend(splitter.finish());
        lines
    }

    #[test]
    fn line_ends() {
        assert_eq!(split_all(&[b"a\nb\r\nc\rd"]), ["a", "b", "c", "d"]);
        assert_eq!(split_all(&[b"a\r", b"\nb\n"]), ["a", "b"]);
        assert_eq!(split_all(&[b"a\r", b"b\n"]), ["a", "b"]);
        assert_eq!(split_all(&[b"a\r", b"\r\n"]), ["a", ""]);
        assert_eq!(split_all(&[b"\n\n"]), ["", ""]);
        assert_eq!(split_all(&[b"par", b"tial", b"\n"]), ["partial"]);
        assert_eq!(split_all(&[b"\xff\n"]), ["\u{fffd}"]);
    }

    #[test]
    fn overlong_lines_are_refused() {
        let mut splitter = LineSplitter::default();
        let chunk = vec![b'x'; MAX_LINE_BYTES];
        assert_eq!(splitter.push(&chunk).map(|l| l.len()), Ok(0));
        assert_eq!(splitter.push(b"x"), Err(LineTooLong));
    }

    fn scan(lines: &[&str]) -> Option<Result<String, String>> {
        let mut scanner = EventScanner::default();
        lines.iter().find_map(|line| {
            scanner.line(line).map(|result| {
                result
                    .map(|value| value.dumps(Dialect::PY_ROW))
                    .map_err(|e| e.message)
            })
        })
    }

    #[test]
    fn first_task_created_data_wins() {
        let stream = [
            "event: heartbeat",
            "data: {\"connected\": true}",
            "",
            "event: task.created",
            "data: {\"task_id\": \"abc\", \"title\": \"T\", \"timestamp\": 1796004102.5}",
            "",
            "event: task.created",
            "data: {\"task_id\": \"second\"}",
        ];
        assert_eq!(
            scan(&stream),
            Some(Ok(
                r#"{"task_id": "abc", "title": "T", "timestamp": 1796004102.5}"#.to_owned()
            ))
        );
    }

    #[test]
    fn event_names_reset_at_blank_lines() {
        assert_eq!(scan(&["event: task.created", "", "data: {}"]), None);
        assert_eq!(
            scan(&["event:task.created", "data:{}"]),
            Some(Ok("{}".to_owned()))
        );
        assert_eq!(scan(&["event: task.claimed", "data: {}"]), None);
        assert_eq!(scan(&["data: {}"]), None);
        assert_eq!(
            scan(&["event: task.created", "data: not json"]),
            Some(Err("Expecting value".to_owned()))
        );
    }

    proptest! {
        #[test]
        fn chunking_never_changes_the_lines(text in "[a-c\r\n]{0,40}", cut in 0usize..40) {
            let bytes = text.as_bytes();
            let cut = cut.min(bytes.len());
            let whole = split_all(&[bytes]);
            let pieces = split_all(&[&bytes[..cut], &bytes[cut..]]);
            prop_assert_eq!(whole, pieces);
        }
    }
}
