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
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};
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

/// Installs the process's global `metrics` recorder, the Prometheus recorder behind a
/// [`Deferred`] one, and starts building the Prometheus recorder on a thread of its own, which
/// then describes every metric and runs the upkeep. Call once, before serving; take the
/// handle with [`Installing::finish`].
///
/// Building the Prometheus recorder calibrates `quanta`'s clock against the system's, a loop
/// that takes a millisecond on a quiet machine and tens on a busy one; on its own thread it
/// runs while the dispatcher is built, instead of before. Nothing recorded meanwhile is lost:
/// the deferred recorder waits for the Prometheus one.
///
/// # Errors
///
/// When a recorder is already installed, a bucket list is invalid or the thread cannot start.
pub(crate) fn install() -> anyhow::Result<Installing> {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), SECONDS_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(telemetry::GROUP_COMMIT_BATCH_SIZE.to_owned()),
                BATCH_BUCKETS,
            )
        })
        .context("invalid metric buckets")?;
    let deferred = Deferred::default();
    let ready = Arc::clone(&deferred.inner);
    let unbuilt = Arc::clone(&deferred.inner);
    metrics::set_global_recorder(deferred)
        .map_err(|_| anyhow::anyhow!("cannot install the metrics recorder: one is installed"))?;
    let building = std::thread::Builder::new()
        .name("metrics-build".to_owned())
        .spawn(move || {
            let built =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.build_recorder()));
            let Ok(recorder) = built else {
                // Nothing may wait for a recorder that will never come: metrics become no-ops,
                // and `finish` reports the failure before anything is served.
                let _ = ready.set(None);
                anyhow::bail!("building the metrics recorder panicked");
            };
            let handle = recorder.handle();
            // Only this thread sets it, once.
            let _ = ready.set(Some(recorder));
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
        })
        .inspect_err(|_| {
            // The deferred recorder is installed: with no thread to build the Prometheus one,
            // metrics become no-ops rather than waits without end.
            let _ = unbuilt.set(None);
        })
        .context("cannot start building the metrics recorder")?;
    Ok(Installing(building))
}

/// The Prometheus recorder being built (see [`install`]).
pub(crate) struct Installing(std::thread::JoinHandle<anyhow::Result<PrometheusHandle>>);

impl Installing {
    /// Waits for the Prometheus recorder and returns its handle.
    ///
    /// # Errors
    ///
    /// When the upkeep thread could not start, or building the recorder panicked.
    pub(crate) fn finish(self) -> anyhow::Result<PrometheusHandle> {
        self.0
            .join()
            .map_err(|_| anyhow::anyhow!("building the metrics recorder panicked"))?
    }
}

/// The global recorder: the Prometheus recorder once it is built, waited for by whatever
/// registers or describes a metric before then (`None` when building it failed: then every
/// metric is a no-op).
#[derive(Default)]
struct Deferred {
    inner: Arc<std::sync::OnceLock<Option<PrometheusRecorder>>>,
}

impl Deferred {
    fn ready(&self) -> Option<&PrometheusRecorder> {
        self.inner.wait().as_ref()
    }
}

impl metrics::Recorder for Deferred {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if let Some(recorder) = self.ready() {
            recorder.describe_counter(key, unit, description);
        }
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if let Some(recorder) = self.ready() {
            recorder.describe_gauge(key, unit, description);
        }
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if let Some(recorder) = self.ready() {
            recorder.describe_histogram(key, unit, description);
        }
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.ready().map_or_else(Counter::noop, |recorder| {
            recorder.register_counter(key, metadata)
        })
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.ready().map_or_else(Gauge::noop, |recorder| {
            recorder.register_gauge(key, metadata)
        })
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.ready().map_or_else(Histogram::noop, |recorder| {
            recorder.register_histogram(key, metadata)
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use metrics::Recorder as _;

    /// A metric recorded while the Prometheus recorder is still being built waits for it and is
    /// counted, rather than dropped.
    #[test]
    fn a_metric_recorded_before_the_recorder_is_built_is_kept() {
        let deferred = Arc::new(Deferred::default());
        let early = {
            let deferred = Arc::clone(&deferred);
            std::thread::spawn(move || {
                let metadata = Metadata::new("test", metrics::Level::INFO, None);
                deferred
                    .register_counter(&Key::from_static_name("early_calls_total"), &metadata)
                    .increment(3);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!early.is_finished(), "the early metric did not wait");
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        deferred.inner.set(Some(recorder)).ok().unwrap();
        early.join().unwrap();
        assert!(
            handle.render().contains("early_calls_total 3"),
            "{}",
            handle.render()
        );
    }

    /// When the recorder could not be built, metrics are no-ops instead of waits without end:
    /// a metric recorded then returns within the test's bound.
    #[test]
    fn no_metric_waits_for_a_recorder_that_failed() {
        let deferred = Deferred::default();
        deferred.inner.set(None).ok().unwrap();
        let (done, returned) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let metadata = Metadata::new("test", metrics::Level::INFO, None);
            deferred
                .register_histogram(&Key::from_static_name("late_seconds"), &metadata)
                .record(1.0);
            deferred.describe_counter("late_total".into(), None, "never".into());
            done.send(()).unwrap();
        });
        returned
            .recv_timeout(Duration::from_secs(10))
            .expect("a metric waited for a recorder that will never be built");
    }
}
