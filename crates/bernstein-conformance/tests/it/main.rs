//! The conformance fixtures served through the real dispatcher: each scenario's checks of the
//! suite (0.1.16), asserted over JSON-RPC, plus the validity of the image and audio bytes.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bernstein_mcp_core::{CallScope, Dispatcher, NotificationSink};
use serde_json::{Value, json};

#[derive(Default)]
struct Notes(Mutex<Vec<Value>>);

impl NotificationSink for Notes {
    fn send(&self, notification: Value) {
        self.0.lock().unwrap().push(notification);
    }
}

struct Server {
    _dir: tempfile::TempDir,
    dispatcher: Dispatcher,
    scope: CallScope,
    notes: Arc<Notes>,
}

impl Server {
    fn new() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let dispatcher = bernstein_conformance::dispatcher(dir.path()).unwrap();
        Server {
            _dir: dir,
            dispatcher,
            scope: CallScope::new(),
            notes: Arc::default(),
        }
    }

    async fn result(&self, method: &str, params: Value) -> Value {
        let reply = self
            .dispatcher
            .handle(
                json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
                &self.scope,
                self.notes.clone(),
            )
            .await
            .unwrap();
        assert!(reply.get("error").is_none(), "{method}: {reply}");
        reply["result"].clone()
    }

    async fn call(&self, name: &str, meta: Value) -> Value {
        self.result(
            "tools/call",
            json!({"name": name, "arguments": {}, "_meta": meta}),
        )
        .await
    }

    fn notes(&self, method: &str) -> Vec<Value> {
        let mut notes = self.notes.0.lock().unwrap();
        let (wanted, rest): (Vec<Value>, Vec<Value>) =
            notes.drain(..).partition(|n| n["method"] == method);
        *notes = rest;
        wanted.into_iter().map(|n| n["params"].clone()).collect()
    }
}

fn decode(data: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(data.as_str().unwrap())
        .unwrap()
}

#[tokio::test]
async fn fixture_tools_answer_what_the_scenarios_check() {
    let server = Server::new();
    let init = server
        .result(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        )
        .await;
    for capability in ["logging", "completions", "tools", "prompts", "resources"] {
        assert!(
            init["capabilities"].get(capability).is_some(),
            "{capability}: {init}"
        );
    }
    let tools = server.result("tools/list", json!({})).await;
    let schema = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "json_schema_2020_12_tool")
        .unwrap()["inputSchema"]
        .clone();
    assert_eq!(
        schema["$schema"],
        bernstein_conformance::JSON_SCHEMA_2020_12
    );
    assert!(schema["$defs"].get("address").is_some());
    assert_eq!(schema["additionalProperties"], false);

    let simple = server.call("test_simple_text", json!({})).await;
    assert_eq!(simple["content"][0]["type"], "text");
    let image = server.call("test_image_content", json!({})).await;
    assert_eq!(image["content"][0]["mimeType"], "image/png");
    assert_eq!(
        &decode(&image["content"][0]["data"])[..8],
        b"\x89PNG\r\n\x1a\n"
    );
    let audio = server.call("test_audio_content", json!({})).await;
    assert_eq!(audio["content"][0]["mimeType"], "audio/wav");
    let wav = decode(&audio["content"][0]["data"]);
    assert_eq!((&wav[..4], &wav[8..12]), (&b"RIFF"[..], &b"WAVE"[..]));
    assert_eq!(
        u32::from_le_bytes(wav[4..8].try_into().unwrap()) as usize,
        wav.len() - 8
    );
    let embedded = server.call("test_embedded_resource", json!({})).await;
    let resource = &embedded["content"][0]["resource"];
    assert!(
        resource["uri"].is_string()
            && resource["mimeType"].is_string()
            && resource["text"].is_string()
    );
    let mixed = server.call("test_multiple_content_types", json!({})).await;
    let kinds: Vec<&str> = mixed["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["text", "image", "resource"]);
    let error = server.call("test_error_handling", json!({})).await;
    assert_eq!(error["isError"], true);
    assert!(
        error["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("intentionally")
    );

    server
        .result("logging/setLevel", json!({"level": "debug"}))
        .await;
    server.call("test_tool_with_logging", json!({})).await;
    let logged = server.notes("notifications/message");
    assert_eq!(logged.len(), 3, "{logged:?}");
    assert!(
        logged
            .iter()
            .all(|m| m["level"] == "info" && m["logger"] == "conformance")
    );

    server
        .call("test_tool_with_progress", json!({"progressToken": "p-1"}))
        .await;
    let progress: Vec<f64> = server
        .notes("notifications/progress")
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert_eq!(progress, [0.0, 50.0, 100.0]);
    // Without a token, no progress is sent.
    server.call("test_tool_with_progress", json!({})).await;
    assert!(server.notes("notifications/progress").is_empty());
}

#[tokio::test]
async fn fixture_prompts_resources_and_completion() {
    let server = Server::new();
    let simple = server
        .result("prompts/get", json!({"name": "test_simple_prompt"}))
        .await;
    assert_eq!(simple["messages"][0]["role"], "user");
    let args = server.result("prompts/get", json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "testValue1", "arg2": "testValue2"}})).await;
    let text = args["messages"].to_string();
    assert!(
        text.contains("testValue1") && text.contains("testValue2"),
        "{text}"
    );
    let embedded = server.result("prompts/get", json!({"name": "test_prompt_with_embedded_resource", "arguments": {"resourceUri": "test://example-resource"}})).await;
    assert_eq!(
        embedded["messages"][0]["content"]["resource"]["uri"],
        "test://example-resource"
    );
    let image = server
        .result("prompts/get", json!({"name": "test_prompt_with_image"}))
        .await;
    assert_eq!(image["messages"][0]["content"]["type"], "image");
    let missing = server.dispatcher.handle(json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": "test_prompt_with_arguments", "arguments": {"arg1": "x"}}}), &server.scope, server.notes.clone()).await.unwrap();
    assert_eq!(
        missing["error"]["message"],
        "Missing required argument: arg2"
    );

    let text = server
        .result("resources/read", json!({"uri": "test://static-text"}))
        .await;
    assert_eq!(
        text["contents"][0]["text"],
        bernstein_conformance::STATIC_TEXT
    );
    let binary = server
        .result("resources/read", json!({"uri": "test://static-binary"}))
        .await;
    assert_eq!(&decode(&binary["contents"][0]["blob"])[..4], b"\x89PNG");
    let templated = server
        .result("resources/read", json!({"uri": "test://template/123/data"}))
        .await;
    assert!(
        templated["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("123")
    );
    let not_found = server.dispatcher.handle(json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "test://template//data"}}), &server.scope, server.notes.clone()).await.unwrap();
    assert_eq!(not_found["error"]["code"], -32002);

    let completed = server.result("completion/complete", json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1", "value": "par"}})).await;
    assert_eq!(
        completed["completion"]["values"],
        json!(["paris", "park", "party"])
    );
    assert_eq!(
        server
            .result(
                "resources/subscribe",
                json!({"uri": "test://watched-resource"})
            )
            .await,
        json!({})
    );
    assert_eq!(
        server
            .result(
                "resources/unsubscribe",
                json!({"uri": "test://watched-resource"})
            )
            .await,
        json!({})
    );
    // Bernstein's own surface is still served beside the fixtures.
    let status = server.call("bernstein_status", json!({})).await;
    assert_eq!(status["isError"], false, "{status}");
}
