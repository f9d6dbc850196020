//! The crate's one error type: configurations refused at construction, and serving failures.

use std::net::SocketAddr;

/// Why an HTTP transport could not be configured or served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An auth type other than `none` or `bearer`.
    #[error(
        "unsupported auth type {0:?}: the HTTP transport accepts `none` or `bearer` only (an identity provider's token is not a credential here)"
    )]
    AuthType(String),
    /// Bearer auth without a token.
    #[error("bearer auth needs a token: set BERNSTEIN_MCP_TOKEN (or BERNSTEIN_MCP_AUTH_TOKEN)")]
    MissingToken,
    /// Anonymous access on an address that is not loopback.
    #[error(
        "refusing to serve {0} without a bearer token: anonymous access is allowed only on 127.0.0.1, localhost and ::1; set BERNSTEIN_MCP_TOKEN (or BERNSTEIN_MCP_AUTH_TOKEN) or bind to loopback"
    )]
    AnonymousNonLoopback(SocketAddr),
    /// The system random source failed.
    #[error("the system random source failed")]
    Random,
    /// Accepting connections failed.
    #[error("serving HTTP failed: {0}")]
    Io(#[from] std::io::Error),
}
