//! A bare rmcp 3.11 server on stdio with one trivial tool, `add`: the floor the stdio benchmark
//! (`cargo xtask bench stdio`) measures bernstein-mcp against.
//!
//! It does what any rmcp server pays for on every call (framing, JSON-RPC, typed argument
//! deserialisation, structured output) and nothing else: no files, no evidence, no logging.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};

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
    let server = Baseline {
        tool_router: Baseline::tool_router(),
    }
    .serve(rmcp::transport::stdio())
    .await?;
    server.waiting().await?;
    Ok(())
}
