//! The stdio transport of bernstein-mcp.
//!
//! This crate owns newline-delimited JSON-RPC framing over a byte stream (the process's stdin
//! and stdout, or an in-memory duplex in tests) and nothing else: it hands every message to the
//! dispatcher in `bernstein-mcp-core` and writes back what the dispatcher answers.
//!
//! Framing rules:
//!
//! * one JSON-RPC message per line, `\n`-terminated (a trailing `\r` is tolerated); blank lines
//!   are skipped;
//! * a line longer than [`MAX_LINE_BYTES`] is answered with a parse error and skipped, without
//!   ever being held in memory whole;
//! * messages are accepted in order (so a `notifications/cancelled` always finds the call it
//!   names, if that call is still running) and answered concurrently, so responses may leave
//!   out of order and a long call never blocks a cancel or a ping;
//! * every outgoing message is one line written whole, responses and progress notifications
//!   alike, through a single writer;
//! * at end of input no new message is read; the calls still in flight run to completion (each
//!   is bounded by its own declared timeout), their responses are written, and [`serve`]
//!   returns `Ok`. A client that piped its requests and closed its end still gets every answer;
//!   one that wants a faster stop cancels first or signals the process, as the MCP stdio
//!   shutdown sequence describes.
//!
//! It must not validate arguments, apply gates or touch the evidence files; stdout belongs to
//! the protocol, so nothing here logs to it (logs go through `tracing`, which the binary points
//! at stderr).

use std::io;
use std::sync::Arc;

use bernstein_mcp_core::{CallScope, Dispatcher, NotificationSink};
use serde_json::Value as JsonValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// The longest line accepted (16 MiB, as rmcp's stdio codec).
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Serves `dispatcher` over newline-delimited JSON-RPC until `input` ends.
///
/// # Errors
///
/// An I/O error reading `input`. A failure writing `output` (the client went away) ends the
/// session the same way as end of input and is not an error.
pub async fn serve<R, W>(dispatcher: Dispatcher, input: R, output: W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (lines, outbox) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(write_lines(output, outbox));
    let scope = CallScope::new();
    let sink: Arc<dyn NotificationSink> = Arc::new(LineSink {
        lines: lines.clone(),
    });
    let mut calls = JoinSet::new();
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    let read_result = loop {
        line.clear();
        match read_line(&mut reader, &mut line, MAX_LINE_BYTES).await {
            Ok(Line::End) => break Ok(()),
            Ok(Line::TooLong) => {
                let response = too_long_response();
                if lines.send(response).is_err() {
                    break Ok(());
                }
            }
            Ok(Line::Complete) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim();
                if text.is_empty() {
                    continue;
                }
                let accepted = dispatcher.accept_text(text, &scope);
                if !accepted.expects_response() {
                    continue;
                }
                let sink = Arc::clone(&sink);
                let lines = lines.clone();
                calls.spawn(async move {
                    if let Some(response) = accepted.respond_text(sink).await {
                        // The writer is gone only when the client stopped reading.
                        let _ = lines.send(response);
                    }
                });
            }
            Err(err) => break Err(err),
        }
        // Reap finished calls so the set does not grow with the session.
        while let Some(joined) = calls.try_join_next() {
            log_join(joined);
        }
        if lines.is_closed() {
            break Ok(());
        }
    };
    if scope.in_flight() > 0 {
        tracing::debug!(
            in_flight = scope.in_flight(),
            "input ended; finishing the calls still in flight"
        );
    }
    while let Some(joined) = calls.join_next().await {
        log_join(joined);
    }
    drop(sink);
    drop(lines);
    match writer.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::debug!("stdout closed: {err}"),
        Err(err) => tracing::error!("the stdout writer failed: {err}"),
    }
    read_result
}

/// Serves `dispatcher` on the process's stdin and stdout.
///
/// # Errors
///
/// As [`serve`].
pub async fn serve_stdio(dispatcher: Dispatcher) -> io::Result<()> {
    serve(dispatcher, tokio::io::stdin(), tokio::io::stdout()).await
}

fn log_join(joined: Result<(), tokio::task::JoinError>) {
    if let Err(err) = joined {
        tracing::error!("a request handler failed: {err}");
    }
}

/// Sends notifications through the single writer.
struct LineSink {
    lines: mpsc::UnboundedSender<String>,
}

impl NotificationSink for LineSink {
    fn send(&self, notification: JsonValue) {
        if let Ok(text) = serde_json::to_string(&notification) {
            let _ = self.lines.send(text);
        }
    }
}

/// Writes each message as one line and flushes it, until every sender is gone.
async fn write_lines<W>(
    mut output: W,
    mut outbox: mpsc::UnboundedReceiver<String>,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    let result = async {
        while let Some(mut text) = outbox.recv().await {
            text.push('\n');
            output.write_all(text.as_bytes()).await?;
            output.flush().await?;
        }
        output.shutdown().await
    }
    .await;
    // Stop accepting lines so the read loop notices a dead client.
    outbox.close();
    result
}

enum Line {
    /// A line (without its terminator) is in the buffer. The last line of the input may lack
    /// its `\n`.
    Complete,
    /// The line exceeded [`MAX_LINE_BYTES`]; it was consumed and dropped.
    TooLong,
    /// End of input.
    End,
}

/// Reads one line into `buffer`, never holding more than `max_bytes` of it.
async fn read_line<R>(
    reader: &mut BufReader<R>,
    buffer: &mut Vec<u8>,
    max_bytes: usize,
) -> io::Result<Line>
where
    R: AsyncRead + Unpin,
{
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if too_long {
                Line::TooLong
            } else if buffer.is_empty() {
                Line::End
            } else {
                Line::Complete
            });
        }
        let (chunk, found_newline) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..at], true),
            None => (available, false),
        };
        let consumed = chunk.len() + usize::from(found_newline);
        if !too_long {
            if buffer.len() + chunk.len() > max_bytes {
                too_long = true;
                buffer.clear();
            } else {
                buffer.extend_from_slice(chunk);
            }
        }
        reader.consume(consumed);
        if found_newline {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
    }
}

fn too_long_response() -> String {
    let error = bernstein_mcp_core::jsonrpc::RpcError::new(
        bernstein_mcp_core::jsonrpc::PARSE_ERROR,
        "Parse error",
    )
    .with_data(serde_json::json!({
        "detail": format!("message exceeds {MAX_LINE_BYTES} bytes")
    }));
    serde_json::to_string(&bernstein_mcp_core::jsonrpc::error_response(None, &error))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines_of(input: &[u8], max_bytes: usize) -> Vec<String> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        let mut buffer = Vec::new();
        loop {
            buffer.clear();
            match read_line(&mut reader, &mut buffer, max_bytes)
                .await
                .unwrap()
            {
                Line::End => return out,
                Line::TooLong => out.push("<too long>".to_owned()),
                Line::Complete => out.push(String::from_utf8(buffer.clone()).unwrap()),
            }
        }
    }

    #[tokio::test]
    async fn lines_split_on_newlines_across_buffer_refills() {
        assert_eq!(
            lines_of(b"ab\ncdefgh\n\nlast", 100).await,
            vec!["ab", "cdefgh", "", "last"]
        );
        assert!(lines_of(b"", 100).await.is_empty());
    }

    #[tokio::test]
    async fn over_long_lines_are_dropped_and_reading_goes_on() {
        assert_eq!(
            lines_of(b"12345\n123456789\nok\n1234567", 5).await,
            vec!["12345", "<too long>", "ok", "<too long>"]
        );
    }

    #[test]
    fn too_long_is_a_parse_error_without_an_id() {
        let value: JsonValue = serde_json::from_str(&too_long_response()).unwrap();
        assert_eq!(value["error"]["code"], -32700);
        assert_eq!(value["id"], JsonValue::Null);
    }
}
