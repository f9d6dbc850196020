//! Serving the service on a TCP listener with hyper-util's server builder.
//!
//! HTTP/1.1 and HTTP/2 (prior knowledge) are both served. A connection that does not send its
//! request headers within [`HttpConfig::header_read_timeout`] (which also bounds an idle
//! keep-alive connection) is closed, so a slow sender holds one connection slot for a bounded
//! time. At most [`HttpConfig::max_connections`] connections are served at once: the accept loop
//! waits for a free slot (a semaphore permit each connection holds until it closes), so the
//! kernel's backlog absorbs a burst instead of the process.
//!
//! When `shutdown` resolves, the listener is closed (new connections are refused), SSE streams
//! are ended, and every open connection is asked to finish the request in flight and close;
//! `serve` returns once they have, or after [`HttpConfig::shutdown_grace`]. A call already
//! anchored finishes its evidence within that bound because the dispatcher writes it before the
//! answer is produced.
//!
//! [`HttpConfig::header_read_timeout`]: crate::HttpConfig::header_read_timeout
//! [`HttpConfig::max_connections`]: crate::HttpConfig::max_connections
//! [`HttpConfig::shutdown_grace`]: crate::HttpConfig::shutdown_grace

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::error::Error;
use crate::service::McpHttp;

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
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout());
    builder.http2().timer(TokioTimer::new());
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
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
        let connection = builder
            .serve_connection(
                TokioIo::new(stream),
                TowerToHyperService::new(service.clone()),
            )
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(%peer, "connection ended: {err}");
            }
            drop(permit);
        });
    }
    drop(listener);
    service.close_streams();
    tracing::info!("shutting down: finishing the requests in flight");
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(config.shutdown_grace()) => {
            tracing::warn!("connections still open after {:?} were abandoned", config.shutdown_grace());
        }
    }
    Ok(())
}
