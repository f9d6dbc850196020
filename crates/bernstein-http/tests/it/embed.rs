//! The `examples/embed.rs` host, run in process: its own route and MCP side by side.

#[path = "../../examples/embed.rs"]
#[allow(dead_code, unreachable_pub, missing_docs)]
mod example;

use bernstein_http::{HttpConfig, McpHttp};
use bernstein_mcp_core::Dispatcher;
use serde_json::json;

use crate::support::{Reply, key, request_bytes};

#[tokio::test]
async fn the_example_host_serves_its_route_beside_mcp() {
    let dir = tempfile::tempdir().unwrap();
    let dispatcher = Dispatcher::builder(dir.path())
        .audit_key(key())
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = HttpConfig::builder(addr).build().unwrap();
    let host = example::Host::new(McpHttp::new(dispatcher, config));
    let server = tokio::spawn(example::run(listener, host));
    let send = |bytes: Vec<u8>| async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.unwrap();
        Reply::parse(&out)
    };
    let hello = send(request_bytes(&addr.to_string(), "GET", "/hello", &[], b"")).await;
    assert_eq!(hello.status, 200);
    assert_eq!(hello.body_text(), "hello from the host\n");
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bernstein_status","arguments":{}}});
    let mcp = send(request_bytes(
        &addr.to_string(),
        "POST",
        "/mcp",
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    ))
    .await;
    assert_eq!(mcp.status, 200);
    assert_eq!(
        mcp.json()["result"]["structuredContent"]["_meter"]["call_id"],
        mcp.header("x-bernstein-span-id").unwrap()
    );
    server.abort();
}
