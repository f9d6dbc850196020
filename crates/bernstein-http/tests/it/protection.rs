//! Host and Origin allow-lists before auth, the bearer, OAuth discovery, CORS, probes and
//! metrics.

use std::sync::Arc;

use bernstein_mcp_core::BackendChoice;
use serde_json::json;

use crate::support::{Server, TOKEN};

fn with_issuer(c: bernstein_http::HttpConfigBuilder) -> bernstein_http::HttpConfigBuilder {
    c.auth_type("bearer")
        .bearer_token(Some(TOKEN.to_owned()))
        .oauth_issuer(Some("https://idp.example.com/".to_owned()))
        .oauth_scopes(vec!["mcp.read".to_owned()])
}

#[tokio::test]
async fn bad_empty_oversized_and_malformed_tokens_are_401() {
    let server = Server::bearer().await;
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"});
    let oversized = format!("Bearer {}", "x".repeat(16 * 1024));
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Bearer "),
        Some("bearer dev-token"),
        Some("Basic ZGV2LXRva2Vu"),
        Some(oversized.as_str()),
    ] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let reply = server.post(&headers, &list).await;
        assert_eq!(reply.status, 401, "{auth:?}");
        assert_eq!(reply.body_text(), r#"{"error":"unauthorized"}"#);
        assert!(
            reply.header("www-authenticate").is_none(),
            "no issuer, no challenge"
        );
    }
    assert_eq!(server.call(&list).await.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn the_discovery_handshake() {
    let server = Server::with(|b| b, with_issuer).await;
    // 1. Refused, with a challenge naming the document.
    let refused = server.post(&[], &json!({})).await;
    assert_eq!(refused.status, 401);
    assert_eq!(refused.body_text(), r#"{"error":"unauthorized"}"#);
    let challenge = refused.header("www-authenticate").unwrap();
    let url = challenge
        .strip_prefix("Bearer resource_metadata=\"")
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{challenge}"));
    let prefix = format!("http://{}", server.host());
    let path = url.strip_prefix(&prefix).unwrap_or_else(|| panic!("{url}"));
    assert_eq!(path, "/.well-known/oauth-protected-resource");
    // 2. The document, without auth.
    let document = server.request("GET", path, &[], b"").await;
    assert_eq!(document.status, 200);
    assert_eq!(
        document.header("cache-control"),
        Some("public, max-age=300")
    );
    let body = document.json();
    // 3. It names the issuer and this resource.
    assert_eq!(
        body["authorization_servers"],
        json!(["https://idp.example.com"])
    );
    assert_eq!(body["resource"], format!("{prefix}/mcp"));
    assert_eq!(body["scopes_supported"], json!(["mcp.read"]));
    assert_eq!(body["bearer_methods_supported"], json!(["header"]));
    // Behind a TLS proxy the scheme follows X-Forwarded-Proto; a forged one is neutralised.
    let proxied = server
        .request("GET", path, &[("x-forwarded-proto", "https")], b"")
        .await;
    assert_eq!(
        proxied.json()["resource"],
        format!("https://{}/mcp", server.host())
    );
    let forged = server
        .request(
            "GET",
            path,
            &[("x-forwarded-proto", "https\", evil=\"x")],
            b"",
        )
        .await;
    assert_eq!(
        forged.json()["resource"],
        format!("http://{}/mcp", server.host())
    );
    let forged = server
        .post(&[("x-forwarded-proto", "https\r\nx")], &json!({}))
        .await;
    assert_eq!(forged.status, 400, "a header with CR LF never reaches us");
    // The authorization-server document belongs to the IdP and is never served.
    let as_meta = server
        .request("GET", "/.well-known/oauth-authorization-server", &[], b"")
        .await;
    assert_eq!(as_meta.status, 404);
    assert_eq!(as_meta.json(), json!({"error":"not found"}));
    server.stop().await;

    let plain = Server::bearer().await;
    let document = plain
        .request("GET", "/.well-known/oauth-protected-resource", &[], b"")
        .await;
    assert_eq!(document.status, 404);
    assert_eq!(
        document.json(),
        json!({"error":"oauth discovery not configured"})
    );
    plain.stop().await;
}

#[tokio::test]
async fn host_and_origin_are_checked_before_auth() {
    let server = Server::with(|b| b, with_issuer).await;
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"});
    // A forged Host is refused even with the right token, and even for discovery.
    let forged = server
        .raw(&crate::support::request_bytes(
            "evil\"host<>.com:99",
            "POST",
            "/mcp",
            &[
                ("authorization", "Bearer dev-token"),
                ("content-type", "application/json"),
            ],
            list.to_string().as_bytes(),
        ))
        .await;
    assert_eq!(forged.status, 421);
    assert_eq!(forged.json(), json!({"error":"host not allowed"}));
    assert!(forged.header("www-authenticate").is_none());
    let forged = server
        .raw(&crate::support::request_bytes(
            "attacker.example",
            "GET",
            "/.well-known/oauth-protected-resource",
            &[],
            b"",
        ))
        .await;
    assert_eq!(forged.status, 421);
    // An unknown Origin is 403 before the credential is looked at.
    for auth in [None, Some("Bearer dev-token")] {
        let mut headers = vec![("origin", "https://evil.example")];
        headers.extend(auth.map(|a| ("authorization", a)));
        let reply = server.post(&headers, &list).await;
        assert_eq!(reply.status, 403, "{auth:?}");
        assert_eq!(reply.json(), json!({"error":"origin not allowed"}));
    }
    // An allowed origin gets its own origin reflected and the span header exposed.
    let reply = server
        .post(
            &[
                ("origin", "http://localhost:5173"),
                ("authorization", "Bearer dev-token"),
            ],
            &list,
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("access-control-allow-origin"),
        Some("http://localhost:5173")
    );
    assert!(
        reply
            .header("access-control-expose-headers")
            .unwrap()
            .contains("x-bernstein-span-id")
    );
    let preflight = server
        .request(
            "OPTIONS",
            "/mcp",
            &[
                ("origin", "http://127.0.0.1:3000"),
                ("access-control-request-method", "POST"),
                (
                    "access-control-request-headers",
                    "authorization, content-type, mcp-protocol-version",
                ),
            ],
            b"",
        )
        .await;
    assert_eq!(preflight.status, 200);
    assert_eq!(
        preflight.header("access-control-allow-origin"),
        Some("http://127.0.0.1:3000")
    );
    assert!(
        preflight
            .header("access-control-allow-methods")
            .unwrap()
            .contains("POST")
    );
    let refused = server
        .request(
            "OPTIONS",
            "/mcp",
            &[
                ("origin", "https://evil.example"),
                ("access-control-request-method", "POST"),
            ],
            b"",
        )
        .await;
    assert!(refused.header("access-control-allow-origin").is_none());
    server.stop().await;

    // A deployment behind a proxy names its public host.
    let proxied = Server::with(
        |b| b,
        |c| c.allowed_hosts(vec!["mcp.example.com".to_owned()]),
    )
    .await;
    let reply = proxied
        .raw(&crate::support::request_bytes(
            "mcp.example.com",
            "GET",
            "/readyz",
            &[],
            b"",
        ))
        .await;
    assert_eq!(reply.status, 200);
    let reply = proxied.request("GET", "/readyz", &[], b"").await;
    assert_eq!(reply.status, 421, "loopback is no longer listed");
    proxied.stop().await;
}

#[tokio::test]
async fn probes_and_metrics() {
    let renderer: bernstein_http::MetricsRenderer = Arc::new(|| "bernstein_up 1\n".to_owned());
    let server = Server::with(
        |b| b,
        |c| {
            c.auth_type("bearer")
                .bearer_token(Some(TOKEN.to_owned()))
                .metrics(Some(renderer))
        },
    )
    .await;
    let health = server.request("GET", "/healthz", &[], b"").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.body_text(), r#"{"status":"ok"}"#);
    let ready = server.request("GET", "/readyz", &[], b"").await;
    assert_eq!(
        ready.status, 401,
        "readiness follows the MCP endpoint's auth"
    );
    let ready = server
        .request(
            "GET",
            "/readyz",
            &[("authorization", "Bearer dev-token")],
            b"",
        )
        .await;
    assert_eq!(ready.status, 200);
    assert_eq!(ready.json(), json!({"status":"ready"}));
    assert_eq!(
        server.request("GET", "/metrics", &[], b"").await.status,
        401
    );
    let metrics = server
        .request(
            "GET",
            "/metrics",
            &[("authorization", "Bearer dev-token")],
            b"",
        )
        .await;
    assert_eq!(metrics.status, 200);
    assert_eq!(metrics.body_text(), "bernstein_up 1\n");
    assert!(
        metrics
            .header("content-type")
            .unwrap()
            .starts_with("text/plain")
    );
    server.stop().await;

    let bare = Server::start().await;
    assert_eq!(bare.request("GET", "/metrics", &[], b"").await.status, 404);
    bare.stop().await;

    // A task server that does not answer: not ready, with the reason.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let remote = Server::with(
        |b| {
            b.backend(BackendChoice::Remote {
                url,
                bearer_token: None,
            })
        },
        |c| c,
    )
    .await;
    let ready = remote.request("GET", "/readyz", &[], b"").await;
    assert_eq!(ready.status, 503);
    let body = ready.json();
    assert_eq!(body["status"], "unavailable");
    assert!(
        body["reason"].as_str().unwrap().contains("task server"),
        "{body}"
    );
    remote.stop().await;
}

#[cfg(unix)]
#[tokio::test]
async fn a_read_only_sdd_is_not_ready() {
    use std::os::unix::fs::PermissionsExt;
    let server = Server::start().await;
    let sdd = server.dir.path().join(".sdd");
    std::fs::create_dir_all(&sdd).unwrap();
    std::fs::set_permissions(&sdd, std::fs::Permissions::from_mode(0o555)).unwrap();
    let ready = if rustix_probe_writable(&sdd) {
        // Root writes a 0555 directory, so the permission bits bind nothing: a read-only bind
        // mount makes the directory truly read-only (EROFS) for every user instead.
        std::fs::set_permissions(&sdd, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mount = match ReadOnlyBind::mount(&sdd) {
            Ok(mount) => mount,
            Err(reason) => {
                crate::support::skip(&format!(
                    "a read-only .sdd/ SKIPPED: this user (root) writes a 0555 directory, and a \
                     read-only bind mount was refused ({reason}); run where mounting is allowed"
                ));
                server.stop().await;
                return;
            }
        };
        assert!(
            !rustix_probe_writable(&sdd),
            "the read-only bind mount is writable"
        );
        let ready = server.request("GET", "/readyz", &[], b"").await;
        drop(mount);
        ready
    } else {
        let ready = server.request("GET", "/readyz", &[], b"").await;
        std::fs::set_permissions(&sdd, std::fs::Permissions::from_mode(0o755)).unwrap();
        ready
    };
    assert_eq!(ready.status, 503);
    let body = ready.json();
    assert_eq!(body["status"], "unavailable");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains(".sdd/ is not writable"),
        "{body}"
    );
    // Writable again: ready again, so the 503 came from the read-only directory alone.
    let ready = server.request("GET", "/readyz", &[], b"").await;
    assert_eq!(ready.status, 200, "{}", ready.body_text());
    server.stop().await;
}

/// A directory bind-mounted read-only onto itself, unmounted when dropped.
#[cfg(unix)]
struct ReadOnlyBind {
    at: std::path::PathBuf,
}

#[cfg(unix)]
impl ReadOnlyBind {
    /// `mount --bind D D` then `mount -o remount,bind,ro D`, or says why not (mounting needs
    /// root or `CAP_SYS_ADMIN`).
    fn mount(at: &std::path::Path) -> Result<ReadOnlyBind, String> {
        let run = |args: &[&str]| -> Result<(), String> {
            let out = std::process::Command::new("mount")
                .args(args)
                .arg(at)
                .output()
                .map_err(|e| format!("cannot run mount: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
            }
        };
        run(&["--bind", at.to_str().ok_or("a non-UTF-8 path")?])?;
        // From here on the bind exists, so a failed remount still unmounts it (on drop).
        let mount = ReadOnlyBind { at: at.to_owned() };
        run(&["-o", "remount,bind,ro"])?;
        Ok(mount)
    }
}

#[cfg(unix)]
impl Drop for ReadOnlyBind {
    fn drop(&mut self) {
        let ok = std::process::Command::new("umount")
            .arg(&self.at)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Something still holds the mount: detach it now, the kernel frees it later.
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.at)
                .status();
        }
    }
}

/// Whether a file can be created in `dir` (then removed), to learn whether permissions bind us.
#[cfg(unix)]
fn rustix_probe_writable(dir: &std::path::Path) -> bool {
    let probe = dir.join(".probe");
    let created = std::fs::File::create(&probe).is_ok();
    let _ = std::fs::remove_file(&probe);
    created
}

/// The service's `Debug` form names itself and its configuration, and, like the
/// configuration's own, never shows the bearer token.
#[test]
fn the_debug_form_shows_the_configuration_without_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let dispatcher = crate::support::http_dispatcher(
        bernstein_mcp_core::Dispatcher::builder(dir.path()).audit_key(crate::support::key()),
    )
    .build()
    .unwrap();
    let config = bernstein_http::HttpConfig::builder("127.0.0.1:0".parse().unwrap())
        .auth_type("bearer")
        .bearer_token(Some("secret-of-the-test".to_owned()))
        .build()
        .unwrap();
    let shown = format!("{:?}", bernstein_http::McpHttp::new(dispatcher, config));
    assert!(
        shown.starts_with("McpHttp { config: HttpConfig {"),
        "{shown}"
    );
    assert!(shown.ends_with(", .. }"), "{shown}");
    assert!(!shown.contains("secret-of-the-test"), "{shown}");
}
