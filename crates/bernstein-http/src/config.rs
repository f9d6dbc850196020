//! The validated configuration of the HTTP transports.
//!
//! [`HttpConfig::builder`] collects what the binary read from its flags and environment (the
//! library reads neither) and [`HttpConfigBuilder::build`] refuses a configuration that would
//! start a server that is unsafe or that denies everything: an auth type other than `none` or
//! `bearer`, a bearer mode without a token, or an anonymous server on a non-loopback address.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use crate::error::Error;

/// The day the legacy `Mcp-Session-Id` compatibility window closes: 2027-07-28T00:00:00Z,
/// twelve months after the stateless revision (2026-07-28) removed protocol sessions.
pub const LEGACY_SESSION_WINDOW_END: &str = "2027-07-28";

/// [`LEGACY_SESSION_WINDOW_END`] as seconds since the Unix epoch.
const LEGACY_SESSION_WINDOW_END_SECS: u64 = 1_816_732_800;

/// The default OAuth scopes of the protected-resource document.
pub const DEFAULT_OAUTH_SCOPES: [&str; 2] = ["bernstein.read", "bernstein.write"];

/// The current time, injectable so tests can pin the legacy-session window.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Renders the Prometheus text exposition served on `/metrics`.
pub type MetricsRenderer = Arc<dyn Fn() -> String + Send + Sync>;

/// How a client authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// No credential (allowed only on a loopback bind).
    None,
    /// A static bearer token, compared in constant time.
    Bearer,
}

impl AuthMode {
    /// Parses `none` or `bearer`; anything else (including `oauth`) is refused, because this
    /// transport cannot validate a token an identity provider issues.
    ///
    /// # Errors
    ///
    /// [`Error::AuthType`] for any other value.
    pub fn parse(value: &str) -> Result<AuthMode, Error> {
        match value {
            "none" => Ok(AuthMode::None),
            "bearer" => Ok(AuthMode::Bearer),
            other => Err(Error::AuthType(other.to_owned())),
        }
    }

    /// The mode's name as the configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMode::None => "none",
            AuthMode::Bearer => "bearer",
        }
    }
}

/// The configured bearer token, kept only as an HMAC tag under a per-process random key so that
/// the comparison is constant-time (`ring::hmac::verify`) and the token never sits in a
/// `Debug` output.
#[derive(Clone)]
pub(crate) struct BearerCheck {
    key: hmac::Key,
    tag: Vec<u8>,
}

impl BearerCheck {
    fn new(token: &str) -> Result<BearerCheck, Error> {
        let mut secret = [0u8; 32];
        SystemRandom::new()
            .fill(&mut secret)
            .map_err(|_| Error::Random)?;
        let key = hmac::Key::new(hmac::HMAC_SHA256, &secret);
        let tag = hmac::sign(&key, token.as_bytes()).as_ref().to_vec();
        Ok(BearerCheck { key, tag })
    }

    /// Whether `presented` is the token, in time independent of where they differ.
    pub(crate) fn matches(&self, presented: &[u8]) -> bool {
        hmac::verify(&self.key, presented, &self.tag).is_ok()
    }
}

impl fmt::Debug for BearerCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerCheck(<redacted>)")
    }
}

/// The validated configuration (see the module docs).
#[derive(Clone)]
pub struct HttpConfig {
    pub(crate) bind: SocketAddr,
    pub(crate) auth: AuthMode,
    pub(crate) bearer: Option<BearerCheck>,
    pub(crate) allowed_origins: Vec<String>,
    pub(crate) allowed_hosts: Vec<String>,
    pub(crate) oauth_issuer: Option<String>,
    pub(crate) oauth_scopes: Vec<String>,
    pub(crate) body_limit: usize,
    pub(crate) request_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) header_read_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) waiting_room: usize,
    pub(crate) queue_timeout: Duration,
    pub(crate) shutdown_grace: Duration,
    pub(crate) sse_keepalive: Duration,
    pub(crate) clock: Clock,
    pub(crate) metrics: Option<MetricsRenderer>,
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("bind", &self.bind)
            .field("auth", &self.auth)
            .field("allowed_origins", &self.allowed_origins)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("oauth_issuer", &self.oauth_issuer)
            .field("oauth_scopes", &self.oauth_scopes)
            .field("body_limit", &self.body_limit)
            .field("request_timeout", &self.request_timeout)
            .field("body_timeout", &self.body_timeout)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("max_connections", &self.max_connections)
            .field("waiting_room", &self.waiting_room)
            .field("queue_timeout", &self.queue_timeout)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("metrics", &self.metrics.is_some())
            .finish_non_exhaustive()
    }
}

impl HttpConfig {
    /// A builder for a server bound to `bind`.
    pub fn builder(bind: SocketAddr) -> HttpConfigBuilder {
        HttpConfigBuilder {
            bind,
            auth_type: "none".to_owned(),
            token: None,
            allowed_origins: None,
            allowed_hosts: None,
            oauth_issuer: None,
            oauth_scopes: None,
            body_limit: 1024 * 1024,
            request_timeout: Duration::from_secs(180),
            body_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(30),
            max_connections: 256,
            waiting_room: None,
            queue_timeout: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
            sse_keepalive: Duration::from_secs(15),
            clock: Arc::new(SystemTime::now),
            metrics: None,
        }
    }

    /// The address the server is bound to.
    pub fn bind(&self) -> SocketAddr {
        self.bind
    }

    /// The auth mode.
    pub fn auth(&self) -> AuthMode {
        self.auth
    }

    /// The OAuth issuer the discovery document points at, when configured.
    pub fn oauth_issuer(&self) -> Option<&str> {
        self.oauth_issuer.as_deref()
    }

    /// How long a connection may take to send a request's headers (also the idle keep-alive
    /// bound between requests).
    pub fn header_read_timeout(&self) -> Duration {
        self.header_read_timeout
    }

    /// The most connections served at once. A connection beyond them waits in the waiting room
    /// or is refused with 503; the accept loop never waits.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// How many connections may wait for a free slot at once.
    pub fn waiting_room(&self) -> usize {
        self.waiting_room
    }

    /// How long a connection in the waiting room waits for a free slot before it is refused.
    pub fn queue_timeout(&self) -> Duration {
        self.queue_timeout
    }

    /// How long a graceful shutdown waits for requests in flight.
    pub fn shutdown_grace(&self) -> Duration {
        self.shutdown_grace
    }

    /// Whether the legacy-session compatibility window is still open at the clock's now.
    pub(crate) fn legacy_window_open(&self) -> bool {
        let now = (self.clock)()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        now < LEGACY_SESSION_WINDOW_END_SECS
    }
}

/// Builds an [`HttpConfig`].
pub struct HttpConfigBuilder {
    bind: SocketAddr,
    auth_type: String,
    token: Option<String>,
    allowed_origins: Option<Vec<String>>,
    allowed_hosts: Option<Vec<String>>,
    oauth_issuer: Option<String>,
    oauth_scopes: Option<Vec<String>>,
    body_limit: usize,
    request_timeout: Duration,
    body_timeout: Duration,
    header_read_timeout: Duration,
    max_connections: usize,
    waiting_room: Option<usize>,
    queue_timeout: Duration,
    shutdown_grace: Duration,
    sse_keepalive: Duration,
    clock: Clock,
    metrics: Option<MetricsRenderer>,
}

impl fmt::Debug for HttpConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfigBuilder")
            .field("bind", &self.bind)
            .field("auth_type", &self.auth_type)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// Splits a comma-separated list, trimming entries and dropping empty ones.
pub fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

impl HttpConfigBuilder {
    /// The auth type, `none` or `bearer` (checked by [`HttpConfigBuilder::build`]).
    #[must_use]
    pub fn auth_type(mut self, auth_type: impl Into<String>) -> Self {
        self.auth_type = auth_type.into();
        self
    }

    /// The static bearer token (an empty one counts as none).
    #[must_use]
    pub fn bearer_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// The Origin allow-list. Entries match case-insensitively with a trailing `/` ignored; `*`
    /// allows any origin and `scheme://host:*` any port of that host. Default: the loopback
    /// origins (`http(s)://localhost:*`, `http(s)://127.0.0.1:*`, `http(s)://[::1]:*`).
    #[must_use]
    pub fn allowed_origins(mut self, origins: Vec<String>) -> Self {
        self.allowed_origins = Some(origins);
        self
    }

    /// The Host allow-list (names, optionally with a port). Default: `localhost`,
    /// `127.0.0.1`, `::1` and the bind address.
    #[must_use]
    pub fn allowed_hosts(mut self, hosts: Vec<String>) -> Self {
        self.allowed_hosts = Some(hosts);
        self
    }

    /// The OAuth issuer (trimmed, trailing `/` removed; empty counts as none).
    #[must_use]
    pub fn oauth_issuer(mut self, issuer: Option<String>) -> Self {
        self.oauth_issuer = issuer
            .map(|i| i.trim().trim_end_matches('/').to_owned())
            .filter(|i| !i.is_empty());
        self
    }

    /// The scopes the discovery document lists (default [`DEFAULT_OAUTH_SCOPES`]).
    #[must_use]
    pub fn oauth_scopes(mut self, scopes: Vec<String>) -> Self {
        self.oauth_scopes = Some(scopes).filter(|s| !s.is_empty());
        self
    }

    /// The largest request body accepted (413 beyond it). Default 1 MiB.
    #[must_use]
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// The bound on producing a response's head (408 beyond it). Default 180 s, longer than
    /// the dispatcher's hard call timeout so that the call's own timeout answer wins.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long a request body may take to arrive (408 beyond it). Default 30 s.
    #[must_use]
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// How long a connection may take to send request headers. Default 30 s.
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// The most connections served at once. Default 256.
    #[must_use]
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections.max(1);
        self
    }

    /// How many connections beyond [`HttpConfigBuilder::max_connections`] may wait for a free
    /// slot; a connection arriving when the waiting room is full is refused with 503 at once.
    /// Zero refuses every connection beyond the cap at once. Default: as many as
    /// `max_connections`.
    #[must_use]
    pub fn waiting_room(mut self, connections: usize) -> Self {
        self.waiting_room = Some(connections);
        self
    }

    /// How long a connection in the waiting room waits for a free slot before it is refused
    /// with 503. Default 1 s: long enough to absorb a short burst, short enough that a client
    /// learns at once that the server is full.
    #[must_use]
    pub fn queue_timeout(mut self, timeout: Duration) -> Self {
        self.queue_timeout = timeout;
        self
    }

    /// How long a graceful shutdown waits for requests in flight. Default 10 s.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// How often an idle SSE stream gets a keep-alive comment. Default 15 s.
    #[must_use]
    pub fn sse_keepalive(mut self, every: Duration) -> Self {
        self.sse_keepalive = every.max(Duration::from_millis(10));
        self
    }

    /// The clock the legacy-session window is judged by.
    #[must_use]
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Serves `/metrics` from this renderer (404 without one).
    #[must_use]
    pub fn metrics(mut self, renderer: Option<MetricsRenderer>) -> Self {
        self.metrics = renderer;
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    ///
    /// [`Error::AuthType`] for an auth type other than `none`/`bearer`; [`Error::MissingToken`]
    /// for bearer without a token; [`Error::AnonymousNonLoopback`] for `none` on an address
    /// that is not loopback.
    pub fn build(self) -> Result<HttpConfig, Error> {
        let auth = AuthMode::parse(&self.auth_type)?;
        let bearer = match (auth, &self.token) {
            (AuthMode::Bearer, Some(token)) => Some(BearerCheck::new(token)?),
            (AuthMode::Bearer, None) => return Err(Error::MissingToken),
            (AuthMode::None, _) => None,
        };
        if auth == AuthMode::None && !self.bind.ip().is_loopback() {
            return Err(Error::AnonymousNonLoopback(self.bind));
        }
        let allowed_origins = self.allowed_origins.unwrap_or_else(|| {
            ["localhost", "127.0.0.1", "[::1]"]
                .iter()
                .flat_map(|h| [format!("http://{h}:*"), format!("https://{h}:*")])
                .collect()
        });
        let allowed_hosts = match self.allowed_hosts {
            Some(hosts) => hosts,
            None => {
                let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
                    .iter()
                    .map(|h| (*h).to_owned())
                    .collect();
                let ip = self.bind.ip().to_string();
                if !hosts.contains(&ip) {
                    hosts.push(ip);
                }
                hosts
            }
        };
        Ok(HttpConfig {
            bind: self.bind,
            auth,
            bearer,
            allowed_origins,
            allowed_hosts,
            oauth_issuer: self.oauth_issuer,
            oauth_scopes: self.oauth_scopes.unwrap_or_else(|| {
                DEFAULT_OAUTH_SCOPES
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect()
            }),
            body_limit: self.body_limit,
            request_timeout: self.request_timeout,
            body_timeout: self.body_timeout,
            header_read_timeout: self.header_read_timeout,
            max_connections: self.max_connections,
            waiting_room: self.waiting_room.unwrap_or(self.max_connections),
            queue_timeout: self.queue_timeout,
            shutdown_grace: self.shutdown_grace,
            sse_keepalive: self.sse_keepalive,
            clock: self.clock,
            metrics: self.metrics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> SocketAddr {
        "127.0.0.1:8053".parse().unwrap()
    }

    #[test]
    fn only_none_and_bearer_are_accepted() {
        for bad in ["oauth", "Bearer", "", "basic"] {
            let err = HttpConfig::builder(loopback())
                .auth_type(bad)
                .build()
                .unwrap_err();
            assert!(matches!(err, Error::AuthType(ref v) if v == bad), "{err}");
        }
        assert!(
            HttpConfig::builder(loopback())
                .auth_type("none")
                .build()
                .is_ok()
        );
    }

    #[test]
    fn each_mode_is_named_as_the_configuration_spells_it() {
        for (mode, name) in [(AuthMode::None, "none"), (AuthMode::Bearer, "bearer")] {
            assert_eq!(mode.as_str(), name);
            assert_eq!(AuthMode::parse(name).unwrap(), mode);
        }
    }

    #[test]
    fn lists_are_split_on_commas_trimmed_and_without_empty_entries() {
        let check =
            |value: &str, expect: &[&str]| assert_eq!(split_list(value), expect, "{value:?}");
        check("", &[]);
        check(" , ,", &[]);
        check("mcp.read", &["mcp.read"]);
        check(
            " a.example , ,b.example:8053,",
            &["a.example", "b.example:8053"],
        );
    }

    #[test]
    fn the_defaults_and_what_the_accessors_give_back() {
        let config = HttpConfig::builder(loopback()).build().unwrap();
        assert_eq!(config.body_limit, 1024 * 1024);
        assert_eq!(config.shutdown_grace(), Duration::from_secs(10));
        assert_eq!(config.oauth_issuer(), None);
        let config = HttpConfig::builder(loopback())
            .oauth_issuer(Some("https://idp.example.com".to_owned()))
            .shutdown_grace(Duration::from_millis(1500))
            .build()
            .unwrap();
        assert_eq!(config.oauth_issuer(), Some("https://idp.example.com"));
        assert_eq!(config.shutdown_grace(), Duration::from_millis(1500));
    }

    #[test]
    fn debug_forms_name_their_fields_and_redact_the_token() {
        let builder = HttpConfig::builder(loopback())
            .auth_type("bearer")
            .bearer_token(Some("secret-of-the-test".to_owned()));
        assert_eq!(
            format!("{builder:?}"),
            "HttpConfigBuilder { bind: 127.0.0.1:8053, auth_type: \"bearer\", \
             token: Some(\"<redacted>\"), .. }"
        );
        let config = builder.build().unwrap();
        let bearer = config.bearer.as_ref().unwrap();
        assert_eq!(format!("{bearer:?}"), "BearerCheck(<redacted>)");
        let shown = format!("{config:?}");
        assert!(
            shown.starts_with("HttpConfig { bind: 127.0.0.1:8053, auth: Bearer, "),
            "{shown}"
        );
        assert!(
            shown.contains("shutdown_grace: 10s, metrics: false"),
            "{shown}"
        );
        assert!(!shown.contains("secret-of-the-test"), "{shown}");
    }

    #[test]
    fn bearer_needs_a_token_and_anonymous_needs_loopback() {
        let err = HttpConfig::builder(loopback())
            .auth_type("bearer")
            .bearer_token(Some(String::new()))
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::MissingToken));
        let public: SocketAddr = "0.0.0.0:8053".parse().unwrap();
        let err = HttpConfig::builder(public).build().unwrap_err();
        assert!(matches!(err, Error::AnonymousNonLoopback(_)), "{err}");
        assert!(err.to_string().contains("BERNSTEIN_MCP_TOKEN"));
        let config = HttpConfig::builder(public)
            .auth_type("bearer")
            .bearer_token(Some("t".to_owned()))
            .build()
            .unwrap();
        assert!(config.allowed_hosts.contains(&"0.0.0.0".to_owned()));
        assert!(!format!("{config:?}").contains("\"t\""));
    }

    #[test]
    fn the_bearer_check_accepts_only_the_token() {
        let check = BearerCheck::new("dev-token").unwrap();
        assert!(check.matches(b"dev-token"));
        for wrong in [
            &b""[..],
            b"dev-toke",
            b"dev-token ",
            b"DEV-TOKEN",
            &[b'x'; 9000],
        ] {
            assert!(!check.matches(wrong));
        }
    }

    #[test]
    fn the_legacy_window_closes_on_2027_07_28_utc() {
        let at = |secs: u64| {
            HttpConfig::builder(loopback())
                .clock(Arc::new(move || UNIX_EPOCH + Duration::from_secs(secs)))
                .build()
                .unwrap()
                .legacy_window_open()
        };
        assert!(at(LEGACY_SESSION_WINDOW_END_SECS - 1));
        assert!(!at(LEGACY_SESSION_WINDOW_END_SECS));
    }
}
