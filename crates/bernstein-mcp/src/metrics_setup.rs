//! Metrics: the Prometheus recorder behind the `metrics` facade, the renderer the HTTP
//! transport serves on `/metrics`, and the `--metrics-addr` listener.
//!
//! The library crates record through the facade (no IO there); this module installs the one
//! global recorder, keeps its [`PrometheusHandle`], and renders the text exposition format on
//! demand. Rendering reads the recorder's atomics and its own histogram buffers, never a lock a
//! call takes, so a scrape neither waits for calls nor makes them wait.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bernstein_mcp_core::telemetry;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::Semaphore;

use crate::cli_ops::MetricsArgs;

/// Histogram buckets for latencies, in seconds: from a page-cache fsync to the 120 s hard
/// timeout of a call.
const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    120.0,
];

/// Histogram buckets for the rows of one anchoring commit.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// How often histogram buffers are folded when nobody scrapes, so memory stays bounded.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Connections the metrics listener serves at once; more wait in the accept queue.
const MAX_SCRAPERS: usize = 16;

/// The media type of the Prometheus text exposition format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What renders the current metrics in the Prometheus text format: the HTTP transport's
/// `HttpConfig` takes one to serve `/metrics` behind its auth.
pub(crate) type MetricsRenderer = Arc<dyn Fn() -> String + Send + Sync>;

/// Installs the Prometheus recorder as the process's global `metrics` recorder, describes
/// every metric, and starts the upkeep thread. Call once, before serving.
///
/// # Errors
///
/// When a recorder is already installed or a bucket list is invalid.
pub(crate) fn install() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), SECONDS_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(telemetry::GROUP_COMMIT_BATCH_SIZE.to_owned()),
                BATCH_BUCKETS,
            )
        })
        .context("invalid metric buckets")?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    telemetry::describe();
    bernstein_http::describe_metrics();
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                upkeep.run_upkeep();
            }
        })
        .context("cannot start the metrics upkeep thread")?;
    Ok(handle)
}

/// The renderer of `handle`, for the HTTP transport's `/metrics` route.
pub(crate) fn renderer(handle: &PrometheusHandle) -> MetricsRenderer {
    let handle = handle.clone();
    Arc::new(move || handle.render())
}

/// Binds the `--metrics-addr` listener, if one was asked for, refusing an address that is not
/// loopback unless `--metrics-public` says so. Binding happens before serving starts, so a
/// busy port is a setup error rather than a silent gap in the metrics.
pub(crate) fn bind(args: &MetricsArgs) -> anyhow::Result<Option<std::net::TcpListener>> {
    let Some(addr) = args.metrics_addr else {
        return Ok(None);
    };
    anyhow::ensure!(
        addr.ip().is_loopback() || args.metrics_public,
        "--metrics-addr {addr} is not a loopback address; the metrics listener has no auth, so \
         pass --metrics-public as well to expose it there"
    );
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("cannot bind the metrics listener on {addr}"))?;
    listener
        .set_nonblocking(true)
        .context("cannot make the metrics listener non-blocking")?;
    Ok(Some(listener))
}

/// Serves `GET /metrics` on `listener`, rendered by `render`, until the runtime stops. Must run
/// inside the runtime.
pub(crate) async fn serve(listener: std::net::TcpListener, render: MetricsRenderer) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(err) => {
            tracing::error!("cannot serve metrics: {err}");
            return;
        }
    };
    if let Ok(local) = listener.local_addr() {
        tracing::info!(addr = %local, "serving Prometheus metrics on http://{local}/metrics");
    }
    let slots = Arc::new(Semaphore::new(MAX_SCRAPERS));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!("metrics listener: accept failed: {err}");
                continue;
            }
        };
        let render = Arc::clone(&render);
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(request, Arc::clone(&render)));
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(err) = served {
                tracing::debug!(%peer, "metrics connection ended: {err}");
            }
            drop(slot);
        });
    }
}

/// `GET /metrics` renders; any other path is 404, any other method 405.
async fn answer(
    request: Request<Incoming>,
    render: MetricsRenderer,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => (StatusCode::OK, CONTENT_TYPE, render()),
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "use GET\n".to_owned(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "metrics are served on /metrics\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    Ok(response)
}
