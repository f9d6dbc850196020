//! The HTTP transports of bernstein-mcp: stateless streamable HTTP on `/mcp`, and SSE.
//!
//! This crate owns HTTP framing, the protection checks (Host and Origin allow-lists, the static
//! bearer), the OAuth protected-resource discovery document, the span-id response header, SSE
//! event ids, the probes (`/healthz`, `/readyz`) and the `/metrics` route. Everything a request
//! means is decided by the dispatcher in `bernstein-mcp-core`; it must not validate tool
//! arguments, apply gates or touch the evidence files itself.
//!
//! Its public API is a `tower::Service<http::Request<B>>`, [`McpHttp`], built from a
//! [`bernstein_mcp_core::Dispatcher`] and a validated [`HttpConfig`], so a hyper, tower or axum
//! host mounts it beside its own routes, and [`serve`], which runs it on a TCP listener with
//! hyper-util's server builder and graceful shutdown. The `http` and `http-body` types in that
//! API are the ecosystem's shared vocabulary; nothing else of hyper is exposed.
//!
//! ```no_run
//! # async fn demo(dispatcher: bernstein_mcp_core::Dispatcher) -> Result<(), bernstein_http::Error> {
//! use bernstein_http::{HttpConfig, McpHttp, serve};
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8053").await?;
//! let config = HttpConfig::builder(listener.local_addr()?).build()?;
//! let service = McpHttp::new(dispatcher, config);
//! // Any future ends the server: a signal, a oneshot, or never.
//! serve(listener, service, std::future::pending()).await
//! # }
//! ```
//!
//! Streamable HTTP answers `application/json` unless the call sends progress before its result,
//! which makes the answer a `text/event-stream`. The wire rules (statuses, bodies, headers) are
//! listed in `docs/http.md`.

mod access;
mod auth;
mod body;
mod calls;
mod config;
mod error;
mod serve;
mod service;
mod sse;

pub use body::{BoxError, ResponseBody, SPAN_HEADER};
pub use config::{
    AuthMode, Clock, DEFAULT_OAUTH_SCOPES, HttpConfig, HttpConfigBuilder,
    LEGACY_SESSION_WINDOW_END, MetricsRenderer, split_list,
};
pub use error::Error;
pub use serve::{describe_metrics, serve};
pub use service::{HEADER_MISMATCH, MCP_PATH, McpHttp};
