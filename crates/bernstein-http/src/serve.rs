//! Serving the service on a TCP listener with hyper-util's server builder.
//!
//! HTTP/1.1 and HTTP/2 (prior knowledge) are both served. A connection that does not send its
//! request headers within [`HttpConfig::header_read_timeout`] (which also bounds an idle
//! keep-alive connection) is closed, so a slow sender holds one connection slot for a bounded
//! time.
//!
//! At most [`HttpConfig::max_connections`] connections are served at once, each holding a slot
//! (a semaphore permit) until it closes. The accept loop never waits for a slot: it accepts, and
//! a connection that finds none free enters a waiting room of [`HttpConfig::waiting_room`]
//! places, where it waits up to [`HttpConfig::queue_timeout`] for a slot, so a short burst is
//! still served. A connection that finds the waiting room full, or that waits out the timeout,
//! is refused: it gets `503 Service Unavailable` with `Retry-After: 1`, `Connection: close` and a
//! JSON body naming the limit, and is closed. Its request is never parsed, so it never reaches
//! the dispatcher. The refusal is one non-blocking write to a socket nothing was written to yet;
//! a socket that cannot take it whole is closed without it, so no client can stall the accept
//! loop. However many connections are opened, the server holds at most the cap plus the waiting
//! room, and every other client learns at once that the server is full instead of waiting
//! unanswered in the kernel's backlog behind idle connections.
//!
//! When `shutdown` resolves, the listener is closed (new connections are refused), connections
//! in the waiting room are closed unserved, SSE streams are ended, and every open connection is
//! asked to finish the request in flight and close; `serve` returns once they have. Calls still
//! running after [`HttpConfig::shutdown_grace`] are cancelled, so each answers with its partial
//! work, and get one more second before the connections are abandoned.
//!
//! [`HttpConfig::header_read_timeout`]: crate::HttpConfig::header_read_timeout
//! [`HttpConfig::max_connections`]: crate::HttpConfig::max_connections
//! [`HttpConfig::waiting_room`]: crate::HttpConfig::waiting_room
//! [`HttpConfig::queue_timeout`]: crate::HttpConfig::queue_timeout
//! [`HttpConfig::shutdown_grace`]: crate::HttpConfig::shutdown_grace

use std::future::Future;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::Error;
use crate::service::McpHttp;

/// How long calls cancelled at the end of the shutdown grace get to answer.
const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// The counter of connections refused for want of a slot, by `reason`.
pub(crate) const CONNECTIONS_REFUSED_TOTAL: &str = "bernstein_mcp_http_connections_refused_total";

/// Describes the transport's own metrics (the connections refused for want of a slot and the
/// requests refused by the auth layer) to the installed `metrics` recorder, so the Prometheus
/// text carries their help lines. Call once, after installing the recorder.
pub fn describe_metrics() {
    metrics::describe_counter!(
        CONNECTIONS_REFUSED_TOTAL,
        "HTTP connections answered 503 and closed because every slot was taken, by reason (waiting_room_full, queue_timeout)."
    );
    metrics::describe_counter!(
        crate::service::AUTH_REFUSALS_TOTAL,
        "HTTP requests refused by the auth layer, by reason."
    );
}

/// The `Retry-After` of a refused connection, in seconds.
const RETRY_AFTER_SECS: u64 = 1;

/// The most bytes read and discarded from a refused connection before its answer is written.
const REFUSAL_DRAIN: usize = 16 * 1024;

/// Why a connection was refused (the `reason` label of [`CONNECTIONS_REFUSED_TOTAL`]).
#[derive(Debug, Clone, Copy)]
enum Refused {
    /// Every slot was taken and the waiting room was full.
    WaitingRoomFull,
    /// No slot freed within the queue timeout.
    QueueTimeout,
}

impl Refused {
    fn reason(self) -> &'static str {
        match self {
            Refused::WaitingRoomFull => "waiting_room_full",
            Refused::QueueTimeout => "queue_timeout",
        }
    }
}

/// The bytes a refused connection gets: a whole HTTP/1.1 503 answer, written before any of the
/// request is parsed.
fn refusal(max_connections: usize) -> Bytes {
    let body = serde_json::json!({
        "error": format!(
            "too many connections: this server serves at most {max_connections} at once and none \
             is free; retry after {RETRY_AFTER_SECS} s"
        )
    })
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: {RETRY_AFTER_SECS}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into()
}

/// Refuses `stream` with `answer` and closes it, without ever waiting.
///
/// What the client already sent is read and discarded first: closing a socket with unread
/// input makes the kernel reset the connection, and a reset can reach the client before it
/// reads the answer. The answer then goes out in one non-blocking write, which a socket nothing
/// was written to takes whole; if it does not, the socket is closed without it.
fn refuse(stream: TcpStream, peer: SocketAddr, why: Refused, answer: &[u8]) {
    metrics::counter!(CONNECTIONS_REFUSED_TOTAL, "reason" => why.reason()).increment(1);
    tracing::debug!(%peer, reason = why.reason(), "connection refused: no free slot");
    // The std stream stays non-blocking, so neither the reads nor the write below can wait.
    let Ok(stream) = stream.into_std() else {
        return;
    };
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < REFUSAL_DRAIN {
        match (&stream).read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    if !matches!((&stream).write(answer), Ok(n) if n == answer.len()) {
        tracing::debug!(%peer, "the refusal did not fit the socket at once; closed without it");
    }
}

/// What serving a connection needs, shared by every connection task.
struct Connections {
    builder: auto::Builder<TokioExecutor>,
    service: McpHttp,
}

impl Connections {
    /// Serves `stream` until it closes (or shutdown closes it), holding `slot` until then.
    async fn serve(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        slot: OwnedSemaphorePermit,
        watcher: Watcher,
    ) {
        let connection = self
            .builder
            .serve_connection(
                TokioIo::new(stream),
                TowerToHyperService::new(self.service.clone()),
            )
            .into_owned();
        if let Err(err) = watcher.watch(connection).await {
            tracing::debug!(%peer, "connection ended: {err}");
        }
        drop(slot);
    }
}

/// Serves `service` on `listener` until `shutdown` resolves, then shuts down gracefully (see
/// the module docs).
///
/// # Errors
///
/// None today: a failed `accept` (for example, out of file descriptors) is logged and retried
/// after a short pause rather than ending the server.
pub async fn serve<F>(listener: TcpListener, service: McpHttp, shutdown: F) -> Result<(), Error>
where
    F: Future<Output = ()> + Send,
{
    let config = service.config().clone();
    let slots = Arc::new(Semaphore::new(config.max_connections()));
    let waiting = Arc::new(Semaphore::new(config.waiting_room()));
    let answer = refusal(config.max_connections());
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout());
    builder.http2().timer(TokioTimer::new());
    let connections = Arc::new(Connections {
        builder,
        service: service.clone(),
    });
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!("accepting a connection failed: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if let Ok(slot) = Arc::clone(&slots).try_acquire_owned() {
            let (connections, watcher) = (Arc::clone(&connections), graceful.watcher());
            tokio::spawn(async move { connections.serve(stream, peer, slot, watcher).await });
        } else if let Ok(place) = Arc::clone(&waiting).try_acquire_owned() {
            // The watcher is taken now, before shutdown can begin, so that a connection that
            // gets its slot as shutdown begins is still asked to close.
            let (connections, watcher) = (Arc::clone(&connections), graceful.watcher());
            let (slots, answer) = (Arc::clone(&slots), answer.clone());
            let queue_timeout = config.queue_timeout();
            tokio::spawn(async move {
                let slot = tokio::time::timeout(queue_timeout, slots.acquire_owned()).await;
                drop(place);
                match slot {
                    Ok(Ok(slot)) => connections.serve(stream, peer, slot, watcher).await,
                    // The slots close when shutdown begins: a waiting connection is closed
                    // unserved, as the closed listener refuses new ones.
                    Ok(Err(_)) => {}
                    Err(_) => refuse(stream, peer, Refused::QueueTimeout, &answer),
                }
            });
        } else {
            refuse(stream, peer, Refused::WaitingRoomFull, &answer);
        }
    }
    drop(listener);
    slots.close();
    let stragglers = service.close_streams();
    tracing::info!("shutting down: finishing the requests in flight");
    let closed = graceful.shutdown();
    tokio::pin!(closed);
    tokio::select! {
        () = &mut closed => {
            tracing::info!("all connections closed");
            return Ok(());
        }
        () = tokio::time::sleep(config.shutdown_grace()) => {}
    }
    // Past the grace: the calls still running are cancelled and get a moment to answer with
    // their partial work before the connections are abandoned.
    let cancelled = stragglers.cancel();
    tracing::warn!(
        cancelled,
        "calls still running {:?} after shutdown began were cancelled",
        config.shutdown_grace()
    );
    if tokio::time::timeout(CANCEL_GRACE, &mut closed)
        .await
        .is_err()
    {
        tracing::warn!("connections still open were abandoned");
    }
    Ok(())
}
