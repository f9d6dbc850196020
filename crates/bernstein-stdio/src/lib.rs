//! The stdio transport of bernstein-mcp.
//!
//! This crate owns newline-delimited JSON-RPC framing over a byte stream (the process's stdin
//! and stdout, or an in-memory duplex in tests) and nothing else: it hands every message to the
//! dispatcher in `bernstein-mcp-core` and writes back what the dispatcher answers.
//!
//! Framing rules:
//!
//! * one JSON-RPC message per line, `\n`-terminated; blank lines are skipped. Only the
//!   whitespace JSON allows (space, tab, CR, LF) is stripped, so a trailing `\r` is tolerated
//!   and anything else (U+00A0, VT, FF) is part of the message and fails to parse;
//! * a line must be UTF-8: anything else is answered with a parse error and never decoded
//!   lossily, so no replacement character reaches the dispatcher or the evidence;
//! * a line longer than [`MAX_LINE_BYTES`] is answered with a parse error and skipped, without
//!   ever being held in memory whole;
//! * messages are accepted in order (so a `notifications/cancelled` always finds the call it
//!   names, if that call is still running) and answered concurrently, so responses may leave
//!   out of order and a long call never blocks a cancel or a ping;
//! * every outgoing message is one line written whole, responses and progress notifications
//!   alike, through a single writer fed by a bounded queue ([`Limits::outbox_messages`]). A
//!   client that does not read its answers fills the queue, and then no further input is read
//!   until it drains: memory stays bounded by the queue, the requests in flight
//!   ([`Limits::max_in_flight_per_stream`]) and the line cap. A progress notification that finds
//!   the queue full is dropped (progress is advisory; responses are never dropped);
//! * at end of input no new message is read; the calls still in flight may finish for up to
//!   [`Limits::drain_timeout`], their responses are written, and [`serve`] returns `Ok`. A
//!   client that piped its requests and closed its end still gets every answer that is ready in
//!   time. Calls still running then are cancelled, and get [`CANCEL_GRACE`] to answer with
//!   their partial work; whatever is left after that (and a writer the client no longer reads)
//!   is abandoned, so the process always ends.
//!
//! It must not validate arguments, apply gates or touch the evidence files; stdout belongs to
//! the protocol, so nothing here logs to it (logs go through `tracing`, which the binary points
//! at stderr).
//!
//! [`Limits::outbox_messages`]: bernstein_mcp_core::Limits::outbox_messages
//! [`Limits::max_in_flight_per_stream`]: bernstein_mcp_core::Limits::max_in_flight_per_stream
//! [`Limits::drain_timeout`]: bernstein_mcp_core::Limits::drain_timeout

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bernstein_mcp_core::{CallScope, Dispatcher, NotificationSink};
use serde_json::Value as JsonValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

pub mod threaded;

/// The longest line accepted (16 MiB, as rmcp's stdio codec).
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How long calls cancelled at the end of the drain get to answer before they are abandoned.
pub const CANCEL_GRACE: Duration = Duration::from_secs(1);

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
    let limits = *dispatcher.limits();
    let (lines, outbox) = mpsc::channel::<String>(limits.outbox_messages.max(1));
    let mut writer = tokio::spawn(write_lines(output, outbox));
    let scope = CallScope::new();
    let sink: Arc<dyn NotificationSink> = Arc::new(LineSink {
        lines: lines.clone(),
    });
    let mut calls = JoinSet::new();
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    let read_result = loop {
        line.clear();
        let response = match read_line(&mut reader, &mut line, MAX_LINE_BYTES).await {
            Ok(Line::End) => break Ok(()),
            Ok(Line::TooLong) => Some(too_long_response()),
            Ok(Line::Complete) => {
                let message = trim_json_whitespace(&line);
                if message.is_empty() {
                    continue;
                }
                let accepted = dispatcher.accept_bytes(message, &scope);
                if accepted.is_ready() {
                    // Answered without running anything: send it from here, so a client that
                    // does not read stops this loop too.
                    accepted.respond_text(Arc::clone(&sink)).await
                } else {
                    // The call takes its answer's place in the queue before it starts, so a
                    // client that leaves its answers unread stops this loop once the queue is
                    // full, however fast the calls end; a call answered and waiting for room
                    // would hold no request slot, and the loop would read on.
                    let Ok(place) = lines.clone().reserve_owned().await else {
                        // The writer is gone only when the client stopped reading.
                        break Ok(());
                    };
                    let sink = Arc::clone(&sink);
                    calls.spawn(async move {
                        if let Some(response) = accepted.respond_text(sink).await {
                            place.send(response);
                        }
                    });
                    None
                }
            }
            Err(err) => break Err(err),
        };
        // Waiting here for room in the queue is the backpressure: no more input is read while
        // the client leaves its answers unread.
        if let Some(response) = response
            && lines.send(response).await.is_err()
        {
            break Ok(());
        }
        // Reap finished calls so the set does not grow with the session.
        while let Some(joined) = calls.try_join_next() {
            log_join(joined);
        }
        if lines.is_closed() {
            break Ok(());
        }
    };
    let input_ended = Instant::now();
    drain(&mut calls, &scope, limits.drain_timeout).await;
    drop(sink);
    drop(lines);
    // The writer flushes what is queued, within what is left of the drain bound (and at least
    // the grace): a client that stopped reading cannot hold the process open.
    let flush_by = (input_ended + limits.drain_timeout).max(Instant::now()) + CANCEL_GRACE;
    match tokio::time::timeout_at(flush_by, &mut writer).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(err))) => tracing::debug!("stdout closed: {err}"),
        Ok(Err(err)) => tracing::error!("the stdout writer failed: {err}"),
        Err(_) => {
            tracing::warn!("stdout is not being read; abandoning the answers still queued");
            writer.abort();
        }
    }
    read_result
}

/// Lets the calls in flight at end of input finish within `bound`, then cancels the rest, gives
/// them [`CANCEL_GRACE`] to answer, and abandons what still runs.
async fn drain(calls: &mut JoinSet<()>, scope: &CallScope, bound: Duration) {
    if calls.is_empty() {
        return;
    }
    tracing::debug!(
        in_flight = scope.in_flight(),
        "input ended; finishing the calls still in flight"
    );
    if join_until(calls, Instant::now() + bound).await {
        return;
    }
    let cancelled = scope.cancel_all();
    tracing::warn!(
        cancelled,
        "calls still running {bound:?} after input ended were cancelled"
    );
    if join_until(calls, Instant::now() + CANCEL_GRACE).await {
        return;
    }
    tracing::warn!(
        abandoned = calls.len(),
        "calls that did not stop when cancelled were abandoned"
    );
    calls.abort_all();
}

/// Joins calls until none is left (`true`) or `deadline` passes (`false`).
async fn join_until(calls: &mut JoinSet<()>, deadline: Instant) -> bool {
    loop {
        match tokio::time::timeout_at(deadline, calls.join_next()).await {
            Ok(Some(joined)) => log_join(joined),
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
}

/// Serves `dispatcher` on the process's stdin and stdout, each read or written by a dedicated
/// thread ([`threaded`]).
///
/// # Errors
///
/// As [`serve`], and the error of spawning the two threads.
pub async fn serve_stdio(dispatcher: Dispatcher) -> io::Result<()> {
    serve(
        dispatcher,
        threaded::ThreadedStdin::spawn()?,
        threaded::ThreadedStdout::spawn()?,
    )
    .await
}

fn log_join(joined: Result<(), tokio::task::JoinError>) {
    if let Err(err) = joined {
        tracing::error!("a request handler failed: {err}");
    }
}

/// Strips the whitespace JSON allows around a value (RFC 8259: space, tab, LF, CR) and nothing
/// else.
fn trim_json_whitespace(line: &[u8]) -> &[u8] {
    let is_json_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let start = line
        .iter()
        .position(|b| !is_json_space(b))
        .unwrap_or(line.len());
    let end = line
        .iter()
        .rposition(|b| !is_json_space(b))
        .map_or(start, |at| at + 1);
    &line[start..end]
}

/// Sends notifications through the single writer.
struct LineSink {
    lines: mpsc::Sender<String>,
}

impl NotificationSink for LineSink {
    fn send(&self, notification: JsonValue) {
        if let Ok(text) = serde_json::to_string(&notification) {
            // A full queue means the client is not reading; progress is advisory and dropped.
            let _ = self.lines.try_send(text);
        }
    }
}

/// Writes each message as one line and flushes it, until every sender is gone.
async fn write_lines<W>(mut output: W, mut outbox: mpsc::Receiver<String>) -> io::Result<()>
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
