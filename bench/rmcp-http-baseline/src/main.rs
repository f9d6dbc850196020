//! A bare rmcp 3.11 stateless streamable-HTTP server with one trivial tool, `add`: the floor the
//! HTTP benchmark (`cargo xtask bench http`) measures bernstein-mcp against.
//!
//! Usage: `rmcp-http-baseline PORT`. It listens on `127.0.0.1:PORT` only, serves MCP at `/mcp`
//! with sessions off and JSON responses (no SSE), and does what any rmcp HTTP server pays for on
//! every request (HTTP/1.1, JSON-RPC, typed argument deserialisation, structured output) and
//! nothing else: no files, no evidence, no logging.

use std::sync::Arc;

use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, schemars, tool, tool_handler, tool_router};

/// The arguments of `add`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct AddRequest {
    /// The left operand.
    a: i64,
    /// The right operand.
    b: i64,
}

/// The structured result of `add`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
struct AddResult {
    /// `a + b`, saturating rather than overflowing.
    sum: i64,
}

/// The server: a tool router and nothing else.
#[derive(Debug, Clone)]
struct Baseline {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Baseline {
    #[tool(description = "Add two integers.")]
    fn add(&self, Parameters(AddRequest { a, b }): Parameters<AddRequest>) -> Json<AddResult> {
        Json(AddResult {
            sum: a.saturating_add(b),
        })
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Baseline {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = std::env::args()
        .nth(1)
        .ok_or("usage: rmcp-http-baseline PORT")?
        .parse()?;
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None);
    let service = StreamableHttpService::new(
        || {
            Ok(Baseline {
                tool_router: Baseline::tool_router(),
            })
        },
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            // A connection error concerns that client only.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
