//! The methods conformance 0.1.16 found missing: `logging/setLevel` (and the tools'
//! `notifications/message` it filters), `completion/complete` and `resources/subscribe` /
//! `unsubscribe`, in both lifecycles; and the extension point that serves a host's extra tools,
//! prompts and resources through the same dispatcher.

use std::sync::Arc;

use bernstein_mcp_core::extension::{BoxFuture, Extension, ExtensionAnswer, ExtensionCall};
use bernstein_mcp_core::jsonrpc::RpcError;
use bernstein_mcp_core::{CAPABILITY_URI, Dispatcher, LogLevel, MAX_SUBSCRIPTIONS_PER_STREAM};
use bernstein_tools::ToolConfig;
use serde_json::{Map, Value, json};

use crate::support::{Project, key, meta_2026};

fn messages(notes: &[Value]) -> Vec<Value> {
    notes
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .map(|n| n["params"].clone())
        .collect()
}

#[tokio::test]
async fn initialize_advertises_logging_completions_and_subscriptions() {
    let project = Project::new();
    let init = project
        .result(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        )
        .await;
    let caps = &init["capabilities"];
    assert_eq!(caps["logging"], json!({}), "{caps}");
    assert_eq!(caps["completions"], json!({}), "{caps}");
    assert_eq!(caps["resources"]["subscribe"], true, "{caps}");
    // 2026-07-28 has no resources/subscribe (replaced by subscriptions/listen) and no setLevel.
    let discovered = project
        .result("server/discover", json!({"_meta": meta_2026(false)}))
        .await;
    assert_eq!(discovered["capabilities"]["resources"]["subscribe"], false);
    assert_eq!(discovered["capabilities"]["completions"], json!({}));
}

#[tokio::test]
async fn set_level_filters_the_tools_messages_on_its_stream() {
    let project = Project::new();
    // No level set: a legacy stream gets no log messages.
    project.call("bernstein_status", json!({})).await;
    assert_eq!(messages(&project.notes.take()), Vec::<Value>::new());

    assert_eq!(
        project
            .result("logging/setLevel", json!({"level": "debug"}))
            .await,
        json!({})
    );
    let result = project.call("bernstein_status", json!({})).await;
    let call_id = result["structuredContent"]["_meter"]["call_id"].clone();
    let logged = messages(&project.notes.take());
    assert_eq!(
        logged,
        vec![
            json!({"level": "debug", "logger": "bernstein_status", "data": {"message": "calling bernstein_status", "callId": call_id, "anchored": true}}),
            json!({"level": "info", "logger": "bernstein_status", "data": {"message": "bernstein_status answered", "callId": call_id}}),
        ]
    );

    // Raised to warning: a successful call is quiet, a refused one warns.
    project
        .result("logging/setLevel", json!({"level": "warning"}))
        .await;
    project.call("bernstein_status", json!({})).await;
    assert_eq!(messages(&project.notes.take()), Vec::<Value>::new());
    let refused = project
        .call("bernstein_run_status", json!({"run_id": "../escape"}))
        .await;
    assert_eq!(refused["isError"], true, "{refused}");
    let logged = messages(&project.notes.take());
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["level"], "warning");
    assert_eq!(
        logged[0]["data"]["message"],
        "bernstein_run_status answered an error"
    );

    // The level belongs to the stream: another stream on the same dispatcher is still quiet.
    let other = bernstein_mcp_core::CallScope::new();
    let notes = Arc::new(crate::support::Notes::default());
    project
        .dispatcher
        .handle(
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "bernstein_status", "arguments": {}}}),
            &other,
            notes.clone(),
        )
        .await
        .unwrap();
    assert_eq!(messages(&notes.take()), Vec::<Value>::new());
}

#[tokio::test]
async fn stateless_requests_log_at_their_own_meta_level() {
    let project = Project::new();
    let mut meta = meta_2026(false);
    meta["io.modelcontextprotocol/logLevel"] = json!("info");
    let result = project
        .result(
            "tools/call",
            json!({"name": "bernstein_status", "arguments": {}, "_meta": meta}),
        )
        .await;
    assert_eq!(result["isError"], false);
    let logged = messages(&project.notes.take());
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["level"], "info");
    // No level in _meta: no messages, whatever a legacy stream set.
    project
        .result("logging/setLevel", json!({"level": "debug"}))
        .await;
    project
        .result(
            "tools/call",
            json!({"name": "bernstein_status", "arguments": {}, "_meta": meta_2026(false)}),
        )
        .await;
    assert_eq!(messages(&project.notes.take()), Vec::<Value>::new());
    // setLevel itself is gone from 2026-07-28.
    let gone = project
        .error(
            "logging/setLevel",
            json!({"level": "info", "_meta": meta_2026(false)}),
        )
        .await;
    assert_eq!(gone["code"], -32601);
}

#[tokio::test]
async fn bad_levels_are_refused_and_change_nothing() {
    let project = Project::new();
    let mut errors = Map::new();
    for (label, params) in [
        ("set_level_unknown", json!({"level": "loud"})),
        ("set_level_missing", json!({})),
        ("set_level_number", json!({"level": 7})),
    ] {
        errors.insert(
            label.to_owned(),
            project.error("logging/setLevel", params).await,
        );
    }
    let mut meta = meta_2026(false);
    meta["io.modelcontextprotocol/logLevel"] = json!("LOUD");
    errors.insert(
        "meta_level_unknown".to_owned(),
        project
            .error(
                "tools/call",
                json!({"name": "bernstein_status", "arguments": {}, "_meta": meta}),
            )
            .await,
    );
    insta::assert_json_snapshot!("log_level_errors", errors);
    // Nothing was set and nothing anchored: the next call is the run's first and logs nothing.
    let result = project.call("bernstein_status", json!({})).await;
    assert_eq!(messages(&project.notes.take()), Vec::<Value>::new());
    let journal =
        std::fs::read_to_string(project.dir.path().join(".sdd/runs/mcp-calls/journal.jsonl"))
            .unwrap_or_default();
    assert_eq!(journal.lines().count(), 1, "{journal}\n{result}");
}

#[tokio::test]
async fn completion_completes_prompt_arguments() {
    let project = Project::new();
    let complete = |name: &str, argument: &str, value: &str| json!({"ref": {"type": "ref/prompt", "name": name}, "argument": {"name": argument, "value": value}});
    let roles = project
        .result(
            "completion/complete",
            complete("orchestrate_goal", "role", "re"),
        )
        .await;
    insta::assert_json_snapshot!("completion_roles", roles);
    let windows = project
        .result(
            "completion/complete",
            complete("cost_recap", "window", "LAST"),
        )
        .await;
    assert_eq!(
        windows["completion"]["values"],
        json!(["last week", "last month"])
    );
    let scopes = project
        .result(
            "completion/complete",
            complete("orchestrate_goal", "scope", ""),
        )
        .await;
    assert_eq!(
        scopes["completion"]["values"],
        json!(["small", "medium", "large"])
    );
    // The same in the stateless lifecycle, stamped as every 2026 result is.
    let mut params = complete("orchestrate_goal", "role", "q");
    params["_meta"] = meta_2026(false);
    let stateless = project.result("completion/complete", params).await;
    assert_eq!(stateless["completion"]["values"], json!(["qa"]));
    assert_eq!(stateless["resultType"], "complete");

    let mut errors = Map::new();
    for (label, params) in [
        ("unknown_prompt", complete("no_such_prompt", "x", "")),
        ("unknown_argument", complete("cost_recap", "colour", "")),
        ("no_ref", json!({"argument": {"name": "a", "value": ""}})),
        (
            "unknown_template",
            json!({"ref": {"type": "ref/resource", "uri": "file:///{x}"}, "argument": {"name": "x", "value": ""}}),
        ),
    ] {
        errors.insert(
            label.to_owned(),
            project.error("completion/complete", params).await,
        );
    }
    insta::assert_json_snapshot!("completion_errors", errors);
}

#[tokio::test]
async fn completion_lists_the_artefacts_of_the_lineage_template() {
    let project = Project::with(|b| {
        b.tool_config(ToolConfig {
            lineage_enabled: true,
            ..ToolConfig::default()
        })
    });
    let log = project.dir.path().join(".sdd/lineage");
    std::fs::create_dir_all(&log).unwrap();
    std::fs::write(
        log.join("log.jsonl"),
        concat!(
            "{\"artefact_path\": \"src/a.rs\"}\n",
            "{\"artefact_path\": \"src/b.rs\"}\n",
            "{\"artefact_path\": \"docs/c.md\"}\n",
            "{\"artefact_path\": \"src/a.rs\"}\n",
        ),
    )
    .unwrap();
    let params = |value: &str| json!({"ref": {"type": "ref/resource", "uri": "lineage://artefact/{artefact_path}"}, "argument": {"name": "artefact_path", "value": value}});
    let got = project.result("completion/complete", params("src/")).await;
    assert_eq!(
        got["completion"]["values"],
        json!(["src/a.rs", "src/b.rs"]),
        "{got}"
    );
    let got = project.result("completion/complete", params("")).await;
    assert_eq!(got["completion"]["total"], 3, "{got}");
}

#[tokio::test]
async fn subscriptions_are_acknowledged_and_report_changes_after_a_call() {
    let project = Project::with(|b| {
        b.tool_config(ToolConfig {
            lineage_enabled: true,
            ..ToolConfig::default()
        })
    });
    assert_eq!(
        project
            .result(
                "resources/subscribe",
                json!({"uri": "lineage://artefact/src/a.rs"})
            )
            .await,
        json!({})
    );
    assert_eq!(
        project
            .result("resources/subscribe", json!({"uri": CAPABILITY_URI}))
            .await,
        json!({})
    );
    // A call that changes nothing subscribed sends no update.
    project.call("bernstein_status", json!({})).await;
    let updates = |notes: Vec<Value>| -> Vec<Value> {
        notes
            .into_iter()
            .filter(|n| n["method"] == "notifications/resources/updated")
            .map(|n| n["params"].clone())
            .collect()
    };
    assert_eq!(updates(project.notes.take()), Vec::<Value>::new());
    // The artefact appears in the lineage log: the next call reports it, once.
    let log = project.dir.path().join(".sdd/lineage");
    std::fs::create_dir_all(&log).unwrap();
    std::fs::write(log.join("log.jsonl"), "{\"artefact_path\": \"src/a.rs\"}\n").unwrap();
    project.call("bernstein_status", json!({})).await;
    assert_eq!(
        updates(project.notes.take()),
        vec![json!({"uri": "lineage://artefact/src/a.rs"})]
    );
    project.call("bernstein_status", json!({})).await;
    assert_eq!(updates(project.notes.take()), Vec::<Value>::new());
    // Unsubscribed: a later change is not reported; a second unsubscribe is a no-op.
    for _ in 0..2 {
        assert_eq!(
            project
                .result(
                    "resources/unsubscribe",
                    json!({"uri": "lineage://artefact/src/a.rs"})
                )
                .await,
            json!({})
        );
    }
    std::fs::write(
        log.join("log.jsonl"),
        "{\"artefact_path\": \"src/a.rs\"}\n{\"artefact_path\": \"src/a.rs\", \"n\": 2}\n",
    )
    .unwrap();
    project.call("bernstein_status", json!({})).await;
    assert_eq!(updates(project.notes.take()), Vec::<Value>::new());
}

#[tokio::test]
async fn subscriptions_are_bounded_and_validated() {
    let project = Project::new();
    for i in 0..MAX_SUBSCRIPTIONS_PER_STREAM {
        project
            .result(
                "resources/subscribe",
                json!({"uri": format!("test://r/{i}")}),
            )
            .await;
    }
    // Re-subscribing to a held URI is fine; a new one past the cap is refused.
    project
        .result("resources/subscribe", json!({"uri": "test://r/0"}))
        .await;
    let full = project
        .error("resources/subscribe", json!({"uri": "test://one-too-many"}))
        .await;
    assert_eq!(full["code"], -32602, "{full}");
    assert_eq!(
        full["data"]["maxSubscriptions"],
        MAX_SUBSCRIPTIONS_PER_STREAM
    );
    let no_uri = project
        .error("resources/subscribe", json!({"uri": 5}))
        .await;
    assert_eq!(no_uri["message"], "resources/subscribe needs a string uri");
    let stateless = project
        .error(
            "resources/subscribe",
            json!({"uri": CAPABILITY_URI, "_meta": meta_2026(false)}),
        )
        .await;
    assert_eq!(stateless["code"], -32601);
}

/// A host's extra entries, in the style of the conformance fixtures.
#[derive(Debug)]
struct Fixtures;

impl Extension for Fixtures {
    fn tools(&self) -> Vec<Value> {
        vec![
            json!({"name": "echo_twice", "description": "Echoes with progress and logs.", "inputSchema": {"type": "object"}}),
        ]
    }

    fn call_tool<'a>(
        &'a self,
        name: &'a str,
        call: ExtensionCall,
    ) -> BoxFuture<'a, ExtensionAnswer> {
        Box::pin(async move {
            assert_eq!(name, "echo_twice");
            call.progress(1.0, Some(2.0), Some("half"));
            call.log(LogLevel::Info, "fixture", json!("working"));
            call.progress(2.0, Some(2.0), None);
            let text = call
                .arguments
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or("");
            Ok(
                json!({"content": [{"type": "text", "text": format!("{text}{text}")}], "callId": call.call_id}),
            )
        })
    }

    fn prompts(&self) -> Vec<Value> {
        vec![json!({"name": "fixture_prompt", "arguments": [{"name": "arg", "required": true}]})]
    }

    fn get_prompt(&self, name: &str, arguments: &Map<String, Value>) -> ExtensionAnswer {
        let arg = arguments
            .get("arg")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params(format!("{name} needs arg")))?;
        Ok(json!({"messages": [{"role": "user", "content": {"type": "text", "text": arg}}]}))
    }

    fn resources(&self) -> Vec<Value> {
        vec![json!({"uri": "fixture://one", "name": "one"})]
    }

    fn resource_templates(&self) -> Vec<Value> {
        vec![json!({"uriTemplate": "fixture://item/{id}", "name": "item"})]
    }

    fn read_resource(&self, uri: &str) -> Option<ExtensionAnswer> {
        let id = uri.strip_prefix("fixture://item/")?;
        Some(Ok(
            json!({"contents": [{"uri": uri, "text": format!("item {id}")}]}),
        ))
    }

    fn complete(
        &self,
        reference: &Value,
        argument: &str,
        _value: &str,
    ) -> Option<Result<Vec<String>, RpcError>> {
        (reference["name"] == "fixture_prompt" && argument == "arg")
            .then(|| Ok(vec!["alpha".to_owned(), "beta".to_owned()]))
    }
}

#[tokio::test]
async fn an_extension_is_served_through_the_same_dispatcher() {
    let project = Project::with(|b| b.extension(Arc::new(Fixtures)));
    let tools = project.result("tools/list", json!({})).await;
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.last(), Some(&"echo_twice"));
    assert!(names.contains(&"bernstein_status"));

    project
        .result("logging/setLevel", json!({"level": "info"}))
        .await;
    let reply = project
        .send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "echo_twice", "arguments": {"text": "ab"}, "_meta": {"progressToken": "p"}}}))
        .await;
    assert_eq!(reply["result"]["content"][0]["text"], "abab", "{reply}");
    let notes = project.notes.take();
    let methods: Vec<&str> = notes
        .iter()
        .map(|n| n["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "notifications/progress",
            "notifications/message",
            "notifications/progress"
        ]
    );
    // Anchored like a built-in call: the journal holds the row, the span is the call id.
    let journal =
        std::fs::read_to_string(project.dir.path().join(".sdd/runs/mcp-calls/journal.jsonl"))
            .unwrap();
    assert_eq!(journal.lines().count(), 1);
    let span = reply["result"]["callId"].as_str().unwrap();
    assert!(journal.contains(span), "{span} not in {journal}");
    // A negative integer is a progress token too.
    project
        .send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "echo_twice", "arguments": {}, "_meta": {"progressToken": -2}}}))
        .await;
    let tokens: Vec<Value> = project
        .notes
        .take()
        .into_iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| n["params"]["progressToken"].clone())
        .collect();
    assert_eq!(tokens, [json!(-2), json!(-2)]);
    // A host's tool cannot run as a task; a null `task` asks for none.
    let as_task = project
        .error(
            "tools/call",
            json!({"name": "echo_twice", "arguments": {}, "task": {}}),
        )
        .await;
    assert_eq!(
        as_task,
        json!({"code": -32602, "message": "tool echo_twice cannot be called as a task (execution.taskSupport is not optional)"})
    );
    let plain = project
        .result(
            "tools/call",
            json!({"name": "echo_twice", "arguments": {"text": "c"}, "task": null}),
        )
        .await;
    assert_eq!(plain["content"][0]["text"], "cc", "{plain}");

    let prompt = project
        .result(
            "prompts/get",
            json!({"name": "fixture_prompt", "arguments": {"arg": "hi"}}),
        )
        .await;
    assert_eq!(prompt["messages"][0]["content"]["text"], "hi");
    let prompts = project.result("prompts/list", json!({})).await;
    assert_eq!(prompts["prompts"].as_array().unwrap().len(), 4);
    let read = project
        .result(
            "resources/read",
            json!({"uri": "fixture://item/42", "_meta": meta_2026(false)}),
        )
        .await;
    assert_eq!(read["contents"][0]["text"], "item 42");
    assert_eq!(read["resultType"], "complete");
    assert_eq!(read["ttlMs"], 0);
    let missing = project
        .error("resources/read", json!({"uri": "fixture://nope"}))
        .await;
    assert_eq!(missing["code"], -32002);
    let templates = project.result("resources/templates/list", json!({})).await;
    let templates = templates["resourceTemplates"].as_array().unwrap();
    assert_eq!(templates.last().unwrap()["name"], "item");
    let completed = project
        .result(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "fixture_prompt"}, "argument": {"name": "arg", "value": "b"}}),
        )
        .await;
    assert_eq!(completed["completion"]["values"], json!(["beta"]));
}

#[derive(Debug)]
struct Shadowing(&'static str, &'static str);

impl Extension for Shadowing {
    fn tools(&self) -> Vec<Value> {
        vec![json!({"name": self.0, "inputSchema": {"type": "object"}})]
    }
    fn resources(&self) -> Vec<Value> {
        vec![json!({"uri": self.1, "name": "r"})]
    }
}

#[test]
fn an_extension_cannot_shadow_a_built_in() {
    let dir = tempfile::tempdir().unwrap();
    let build = |extension: Shadowing| {
        Dispatcher::builder(dir.path())
            .audit_key(key())
            .extension(Arc::new(extension))
            .build()
            .map(|_| ())
            .map_err(|err| err.to_string())
    };
    assert_eq!(build(Shadowing("mine", "fixture://x")), Ok(()));
    assert_eq!(
        build(Shadowing("bernstein_status", "fixture://x")),
        Err(
            "extension refused: the extension tool \"bernstein_status\" shadows a built-in one"
                .to_owned()
        )
    );
    // A deprecated alias is callable though not listed, so it is a built-in name too.
    assert_eq!(
        build(Shadowing("bernstein_health", "fixture://x")),
        Err(
            "extension refused: the extension tool \"bernstein_health\" shadows a built-in one"
                .to_owned()
        )
    );
    assert_eq!(
        build(Shadowing("mine", CAPABILITY_URI)),
        Err("extension refused: the extension resource \"bernstein://capability\" shadows a built-in one".to_owned())
    );
}
