//! The checks every protected request passes, in order: the Host allow-list (DNS rebinding),
//! the Origin allow-list (browsers), then the bearer credential; and the OAuth
//! protected-resource discovery document (RFC 9728) with the `WWW-Authenticate` challenge that
//! names it.
//!
//! The discovery URL is built from the request's `Host` and `X-Forwarded-Proto`, sanitised as
//! the reference does: the scheme is `https` only when `X-Forwarded-Proto` is exactly `https`
//! (any case), and the host keeps only `[A-Za-z0-9-._~:[]%]`, so a forged header cannot inject
//! a quote, a parameter or a second header into the challenge. An empty result falls back to
//! the bind address.

use http::HeaderMap;
use http::header::{AUTHORIZATION, HOST, ORIGIN};
use serde_json::json;

use crate::config::{AuthMode, HttpConfig};

/// The well-known path of the protected-resource document.
pub(crate) const PROTECTED_RESOURCE_PATH: &str = bernstein_mcp_core::card::PROTECTED_RESOURCE_PATH;

/// Why a request was refused before it reached the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The Host header is missing or not allowed (421).
    Host,
    /// The Origin header is not allowed (403).
    Origin,
    /// No `Authorization` header (401).
    MissingCredential,
    /// An `Authorization` header that is not `Bearer <token>` (401).
    MalformedCredential,
    /// A bearer token that is not the configured one (401).
    WrongCredential,
}

impl Refusal {
    /// The metrics label.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::Host => "host",
            Refusal::Origin => "origin",
            Refusal::MissingCredential => "missing",
            Refusal::MalformedCredential => "malformed",
            Refusal::WrongCredential => "wrong_token",
        }
    }
}

/// The host part of a `Host` value (`name`, `name:port`, `[v6]`, `[v6]:port`), lowercased.
fn host_name(value: &str) -> String {
    let value = value.trim().to_ascii_lowercase();
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("").to_owned();
    }
    match value.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name.to_owned()
        }
        _ => value,
    }
}

/// Whether the request's Host is on the allow-list. An entry with a port must match exactly;
/// one without matches any port.
pub(crate) fn host_allowed(
    config: &HttpConfig,
    headers: &HeaderMap,
    uri_host: Option<&str>,
) -> bool {
    let Some(host) = headers.get(HOST).and_then(|v| v.to_str().ok()).or(uri_host) else {
        return false;
    };
    let lowered = host.trim().to_ascii_lowercase();
    let name = host_name(&lowered);
    config.allowed_hosts.iter().any(|entry| {
        let entry = entry.trim().to_ascii_lowercase();
        let entry_name = host_name(&entry);
        if entry_name != entry.trim_start_matches('[').trim_end_matches(']') {
            // The entry names a port: the whole value must match.
            entry == lowered
        } else {
            entry_name == name
        }
    })
}

/// Whether an `Origin` value is on the allow-list (absent Origin: not a browser, allowed).
pub(crate) fn origin_allowed(config: &HttpConfig, origin: &str) -> bool {
    let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    config.allowed_origins.iter().any(|entry| {
        let entry = entry.trim().trim_end_matches('/').to_ascii_lowercase();
        if entry == "*" || entry == origin {
            return true;
        }
        match entry.strip_suffix(":*") {
            Some(base) => match origin.strip_prefix(base) {
                Some("") => true,
                Some(rest) => rest.strip_prefix(':').is_some_and(|port| {
                    !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
                }),
                None => false,
            },
            None => false,
        }
    })
}

/// Runs the Host, Origin and credential checks in that order.
pub(crate) fn check(
    config: &HttpConfig,
    headers: &HeaderMap,
    uri_host: Option<&str>,
) -> Result<(), Refusal> {
    if !host_allowed(config, headers, uri_host) {
        return Err(Refusal::Host);
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let allowed = origin.to_str().is_ok_and(|o| origin_allowed(config, o));
        if !allowed {
            return Err(Refusal::Origin);
        }
    }
    credential(config, headers)
}

/// The bearer check alone.
fn credential(config: &HttpConfig, headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(check) = config
        .bearer
        .as_ref()
        .filter(|_| config.auth == AuthMode::Bearer)
    else {
        return Ok(());
    };
    let Some(value) = headers.get(AUTHORIZATION) else {
        return Err(Refusal::MissingCredential);
    };
    let Some(token) = value.as_bytes().strip_prefix(b"Bearer ") else {
        return Err(Refusal::MalformedCredential);
    };
    if check.matches(token) {
        Ok(())
    } else {
        Err(Refusal::WrongCredential)
    }
}

/// `http(s)://host[:port]` of the request, sanitised (see the module docs).
pub(crate) fn request_base(config: &HttpConfig, headers: &HeaderMap) -> String {
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    let scheme = if https { "https" } else { "http" };
    let host: String = headers
        .get(HOST)
        .map(|v| {
            v.as_bytes()
                .iter()
                .filter(|b| b.is_ascii_alphanumeric() || b"-._~:[]%".contains(b))
                .map(|&b| char::from(b))
                .collect()
        })
        .unwrap_or_default();
    let host = if host.is_empty() {
        config.bind.to_string()
    } else {
        host
    };
    format!("{scheme}://{host}")
}

/// The `WWW-Authenticate` value of a 401, when an issuer is configured.
pub(crate) fn challenge(config: &HttpConfig, headers: &HeaderMap) -> Option<String> {
    config.oauth_issuer.as_ref()?;
    Some(format!(
        "Bearer resource_metadata=\"{}{PROTECTED_RESOURCE_PATH}\"",
        request_base(config, headers)
    ))
}

/// The RFC 9728 protected-resource document, when an issuer is configured.
pub(crate) fn protected_resource(
    config: &HttpConfig,
    headers: &HeaderMap,
) -> Option<serde_json::Value> {
    let issuer = config.oauth_issuer.as_ref()?;
    Some(json!({
        "resource": format!("{}/mcp", request_base(config, headers)),
        "authorization_servers": [issuer],
        "scopes_supported": config.oauth_scopes,
        "bearer_methods_supported": ["header"],
        "resource_documentation": "https://github.com/sipyourdrink-ltd/bernstein/blob/main/docs/mcp/server.md",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn config() -> HttpConfig {
        HttpConfig::builder("127.0.0.1:8053".parse().unwrap())
            .auth_type("bearer")
            .bearer_token(Some("tok".to_owned()))
            .oauth_issuer(Some("https://idp.example.com/".to_owned()))
            .build()
            .unwrap()
    }

    fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_bytes(value).unwrap());
        }
        map
    }

    #[test]
    fn forged_hosts_cannot_inject_into_the_challenge() {
        let config = config();
        let forged = headers(&[
            ("host", b"evil\"host<>.com:99, x=\"y"),
            ("x-forwarded-proto", b"https\"; a=b"),
        ]);
        let value = challenge(&config, &forged).unwrap();
        assert_eq!(
            value,
            "Bearer resource_metadata=\"http://evilhost.com:99xy/.well-known/oauth-protected-resource\""
        );
        assert_eq!(value.matches('"').count(), 2);
        let https = headers(&[
            ("host", b"bernstein.example.com"),
            ("x-forwarded-proto", b"HTTPS"),
        ]);
        assert_eq!(
            request_base(&config, &https),
            "https://bernstein.example.com"
        );
        assert_eq!(
            request_base(&config, &headers(&[("host", b"\"<>")])),
            "http://127.0.0.1:8053"
        );
    }

    #[test]
    fn hosts_and_origins_follow_their_allow_lists() {
        let config = config();
        for ok in [
            &b"127.0.0.1:8053"[..],
            b"localhost",
            b"LOCALHOST:1",
            b"[::1]:8053",
        ] {
            assert!(
                host_allowed(&config, &headers(&[("host", ok)]), None),
                "{ok:?}"
            );
        }
        for bad in [
            &b"evil.com"[..],
            b"127.0.0.1.evil.com",
            b"localhost.evil:80",
        ] {
            assert!(
                !host_allowed(&config, &headers(&[("host", bad)]), None),
                "{bad:?}"
            );
        }
        assert!(!host_allowed(&config, &HeaderMap::new(), None));
        assert!(origin_allowed(&config, "http://localhost:3000"));
        assert!(origin_allowed(&config, "http://LOCALHOST/"));
        assert!(!origin_allowed(&config, "http://localhost:3000.evil.com"));
        assert!(!origin_allowed(&config, "http://localhostevil.com"));
        assert!(!origin_allowed(&config, "https://evil.example"));
        assert!(!origin_allowed(&config, "null"));
    }

    /// A configuration whose allow-lists are `hosts` and `origins`.
    fn listing(hosts: &[&str], origins: &[&str]) -> HttpConfig {
        let owned = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect();
        HttpConfig::builder("127.0.0.1:8053".parse().unwrap())
            .allowed_hosts(owned(hosts))
            .allowed_origins(owned(origins))
            .build()
            .unwrap()
    }

    #[test]
    fn a_host_entry_with_a_port_admits_that_port_only() {
        let config = listing(&["mcp.example:8443", "[::1]:9000"], &[]);
        let allowed =
            |host: &'static [u8]| host_allowed(&config, &headers(&[("host", host)]), None);
        assert!(allowed(b"mcp.example:8443"));
        assert!(allowed(b"MCP.example:8443"));
        assert!(allowed(b"[::1]:9000"));
        for refused in [
            &b"mcp.example"[..],
            b"mcp.example:8444",
            b"evil.example:8443",
            b"[::1]:9001",
            b"[::1]",
        ] {
            assert!(!allowed(refused), "{refused:?}");
        }
    }

    #[test]
    fn an_origin_entry_admits_itself_and_a_star_admits_every_origin() {
        let exact = listing(&["localhost"], &["https://app.example"]);
        assert!(origin_allowed(&exact, "https://app.example"));
        assert!(origin_allowed(&exact, "HTTPS://APP.EXAMPLE/"));
        assert!(!origin_allowed(&exact, "https://app.example:8443"));
        assert!(!origin_allowed(&exact, "https://app.example.evil"));
        assert!(!origin_allowed(&exact, "http://localhost:3000"));
        let any = listing(&["localhost"], &["*"]);
        for origin in ["https://anything.example", "null", "http://localhost:1"] {
            assert!(origin_allowed(&any, origin), "{origin}");
        }
    }

    #[test]
    fn credentials_are_checked_in_order() {
        let config = config();
        let host = ("host", &b"127.0.0.1"[..]);
        assert_eq!(
            check(&config, &headers(&[host]), None),
            Err(Refusal::MissingCredential)
        );
        assert_eq!(
            check(
                &config,
                &headers(&[host, ("authorization", b"bearer tok")]),
                None
            ),
            Err(Refusal::MalformedCredential)
        );
        assert_eq!(
            check(
                &config,
                &headers(&[host, ("authorization", b"Bearer ")]),
                None
            ),
            Err(Refusal::WrongCredential)
        );
        assert_eq!(
            check(
                &config,
                &headers(&[host, ("authorization", b"Bearer tok")]),
                None
            ),
            Ok(())
        );
        assert_eq!(
            check(
                &config,
                &headers(&[
                    host,
                    ("origin", b"https://evil.example"),
                    ("authorization", b"Bearer tok")
                ]),
                None
            ),
            Err(Refusal::Origin)
        );
        assert_eq!(
            check(
                &config,
                &headers(&[("host", b"evil"), ("authorization", b"Bearer tok")]),
                None
            ),
            Err(Refusal::Host)
        );
    }
}
