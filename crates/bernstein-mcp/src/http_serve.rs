//! `--transport http`: serve the project over streamable HTTP (`/mcp`) and SSE (`/sse`,
//! `/messages`) on one listener.
//!
//! Read here, once, at start-up:
//!
//! | source | effect |
//! |---|---|
//! | `--transport`, else `BERNSTEIN_MCP_TRANSPORT` | `stdio` (default) or `http` |
//! | `--host`, else `BERNSTEIN_MCP_HOST` | the bind host (default `127.0.0.1`) |
//! | `--port`, else `BERNSTEIN_MCP_PORT` | the bind port (default 8053) |
//! | `BERNSTEIN_MCP_TOKEN`, else `BERNSTEIN_MCP_AUTH_TOKEN` | the static bearer; without one only a loopback bind is served |
//! | `BERNSTEIN_MCP_ALLOWED_ORIGINS` | the Origin allow-list, comma-separated (default: loopback origins) |
//! | `BERNSTEIN_MCP_ALLOWED_HOSTS` | the Host allow-list, comma-separated (default: loopback names and the bind address) |
//! | `BERNSTEIN_MCP_OAUTH_ISSUER`, `BERNSTEIN_MCP_OAUTH_SCOPES` | the protected-resource discovery document |
//!
//! Tools' `workdir` arguments are always confined to the project root (plus `--allow-root`
//! roots) over HTTP: the client is not necessarily the local user. SIGTERM and SIGINT shut the
//! server down gracefully.

use std::net::SocketAddr;

use anyhow::{Context, bail};
use bernstein_http::{HttpConfig, McpHttp, split_list};
use bernstein_mcp_core::{DispatcherBuilder, TransportInfo};

use crate::Outcome;
use crate::cli::{ServeArgs, env_value};

/// Where to listen, when HTTP was asked for.
#[derive(Debug, Clone)]
pub(crate) struct HttpArgs {
    host: String,
    port: u16,
}

/// `Some` when the command line or the environment asks for `--transport http`.
pub(crate) fn requested(args: &ServeArgs) -> anyhow::Result<Option<HttpArgs>> {
    let transport = args
        .transport
        .clone()
        .or_else(|| env_value("BERNSTEIN_MCP_TRANSPORT"))
        .unwrap_or_else(|| "stdio".to_owned());
    match transport.as_str() {
        "stdio" => Ok(None),
        "http" => {
            let host = args
                .host
                .clone()
                .or_else(|| env_value("BERNSTEIN_MCP_HOST"))
                .unwrap_or_else(|| "127.0.0.1".to_owned());
            let port = match args.port {
                Some(port) => port,
                None => match env_value("BERNSTEIN_MCP_PORT") {
                    Some(port) => port
                        .parse()
                        .with_context(|| format!("BERNSTEIN_MCP_PORT is not a port: {port:?}"))?,
                    None => 8053,
                },
            };
            Ok(Some(HttpArgs { host, port }))
        }
        other => bail!("unknown transport {other:?}: use `stdio` or `http`"),
    }
}

/// Builds the dispatcher for HTTP and serves it until SIGTERM or SIGINT.
pub(crate) fn serve_http(builder: DispatcherBuilder, http: HttpArgs) -> anyhow::Result<Outcome> {
    let token = env_value("BERNSTEIN_MCP_TOKEN").or_else(|| env_value("BERNSTEIN_MCP_AUTH_TOKEN"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let address: SocketAddr = tokio::net::lookup_host((http.host.as_str(), http.port))
            .await
            .with_context(|| format!("cannot resolve --host {}", http.host))?
            .next()
            .with_context(|| format!("--host {} resolves to no address", http.host))?;
        // Validated before binding, so an unsafe configuration never opens a port.
        let config = http_config(address, token.clone())?;
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address}"))?;
        let local = listener
            .local_addr()
            .context("cannot read the bound address")?;
        let config = if local == address {
            config
        } else {
            http_config(local, token)?
        };
        let dispatcher = builder
            .confine_workdirs(true)
            .transports(vec![
                TransportInfo::Http {
                    path: bernstein_http::MCP_PATH.to_owned(),
                    default: true,
                },
                TransportInfo::Sse {
                    command: "bernstein-mcp --transport http".to_owned(),
                    default: false,
                },
            ])
            .build()
            .context("cannot serve the project")?;
        tracing::info!(
            address = %local,
            auth = config.auth().as_str(),
            "serving MCP over streamable HTTP on /mcp and SSE on /sse"
        );
        bernstein_http::serve(
            listener,
            McpHttp::new(dispatcher, config),
            shutdown_signal(),
        )
        .await
        .context("serving HTTP failed")
    })?;
    Ok(Outcome::Served)
}

fn http_config(address: SocketAddr, token: Option<String>) -> anyhow::Result<HttpConfig> {
    let mut config = HttpConfig::builder(address)
        .auth_type(if token.is_some() { "bearer" } else { "none" })
        .bearer_token(token)
        .oauth_issuer(env_value("BERNSTEIN_MCP_OAUTH_ISSUER"));
    if let Some(origins) = env_value("BERNSTEIN_MCP_ALLOWED_ORIGINS") {
        config = config.allowed_origins(split_list(&origins));
    }
    if let Some(hosts) = env_value("BERNSTEIN_MCP_ALLOWED_HOSTS") {
        config = config.allowed_hosts(split_list(&hosts));
    }
    if let Some(scopes) = env_value("BERNSTEIN_MCP_OAUTH_SCOPES") {
        config = config.oauth_scopes(split_list(&scopes));
    }
    Ok(config.build()?)
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(err) => {
                    tracing::warn!("cannot watch SIGTERM: {err}");
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
    tracing::info!("shutdown signal received");
}
