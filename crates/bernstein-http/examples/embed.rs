//! A host that mounts the MCP endpoint beside a route of its own.
//!
//! `GET /hello` is the host's; everything else goes to [`bernstein_http::McpHttp`]. The host
//! here is a plain tower `service_fn` served by hyper-util; an axum host does the same with
//! `Router::new().route("/hello", get(..)).fallback_service(mcp)`.
//!
//! Run it on a project with `cargo run -p bernstein-http --example embed -- <workdir> [port]`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;

use bernstein_http::{HttpConfig, McpHttp, ResponseBody};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tower::{Service, ServiceExt};

/// The host's service: its own `/hello`, and MCP for the rest.
#[derive(Clone)]
pub struct Host {
    mcp: McpHttp,
}

impl Host {
    /// A host around `mcp`.
    pub fn new(mcp: McpHttp) -> Host {
        Host { mcp }
    }
}

impl Service<Request<hyper::body::Incoming>> for Host {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResponseBody>, Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<hyper::body::Incoming>) -> Self::Future {
        if request.uri().path() == "/hello" {
            let body = Full::new(Bytes::from_static(b"hello from the host\n"))
                .map_err(|never| match never {})
                .boxed_unsync();
            return Box::pin(async move { Ok(Response::new(body)) });
        }
        Box::pin(self.mcp.clone().oneshot(request))
    }
}

/// Serves `host` on `listener` until the process is interrupted.
pub async fn run(listener: tokio::net::TcpListener, host: Host) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(host.clone());
        tokio::spawn(async move {
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let _ = builder
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let workdir = args.next().unwrap_or_else(|| ".".to_owned());
    let port: u16 = args.next().map_or(Ok(8054), |p| p.parse())?;
    let key =
        bernstein_journal::key::AuditKey::load_or_create(&bernstein_journal::key::KeyLocator {
            explicit: None,
            env_key_path: std::env::var_os("BERNSTEIN_AUDIT_KEY_PATH").map(Into::into),
            xdg_state_home: std::env::var_os("XDG_STATE_HOME").map(Into::into),
            home: std::env::var_os("HOME").map(Into::into),
        })?;
    let dispatcher = bernstein_mcp_core::Dispatcher::builder(workdir)
        .audit_key(key)
        .confine_workdirs(true)
        .build()?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let config = HttpConfig::builder(listener.local_addr()?).build()?;
    run(listener, Host::new(McpHttp::new(dispatcher, config))).await;
    Ok(())
}
