//! Wire shapes of the protocol surface: initialize, discovery, lists, prompts, resources, the
//! capability card, and every protocol error payload (snapshots), plus the instruction rules.

use bernstein_mcp_core::instructions::{MAX_INSTRUCTIONS_CHARS, MENTIONED_TOOLS};
use bernstein_tools::{Tier, ToolConfig};
use serde_json::{Value, json};

use crate::support::{Project, meta_2026};

#[tokio::test]
async fn initialize_negotiates_a_handshake_version() {
    let project = Project::new();
    let result = project
        .result(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}),
        )
        .await;
    insta::assert_json_snapshot!("initialize_result", result);
    let check = |requested: &'static str, expect: &'static str| async move {
        let project = Project::new();
        let result = project
            .result(
                "initialize",
                json!({"protocolVersion": requested, "capabilities": {}}),
            )
            .await;
        assert_eq!(result["protocolVersion"], expect, "{requested}");
    };
    check("2024-11-05", "2024-11-05").await;
    check("2025-11-25", "2025-11-25").await;
    check("2026-07-28", "2025-11-25").await;
    check("1999-01-01", "2025-11-25").await;
}

#[tokio::test]
async fn discovery_and_stateless_results() {
    let project = Project::new();
    let discovered = project
        .result("server/discover", json!({"_meta": meta_2026(false)}))
        .await;
    insta::assert_json_snapshot!("discover_result", discovered);
    let listed = project
        .result("prompts/list", json!({"_meta": meta_2026(false)}))
        .await;
    assert_eq!(listed["resultType"], "complete");
    assert_eq!(listed["ttlMs"], 0);
    assert_eq!(listed["cacheScope"], "private");
    assert_eq!(
        listed["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "bernstein"
    );
    // Legacy results carry none of it.
    let legacy = project.result("prompts/list", json!({})).await;
    for key in ["resultType", "ttlMs", "cacheScope", "_meta"] {
        assert!(legacy.get(key).is_none(), "{key}: {legacy}");
    }
    // ping exists only on the initialize lifecycle.
    assert_eq!(project.result("ping", json!({})).await, json!({}));
    let error = project
        .error("ping", json!({"_meta": meta_2026(false)}))
        .await;
    assert_eq!(error["code"], -32601);
}

#[tokio::test]
async fn tools_list_advertises_task_support() {
    let project = Project::new();
    let result = project.result("tools/list", json!({})).await;
    let tools = result["tools"].as_array().unwrap();
    let execution = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["execution"].clone())
            .unwrap()
    };
    assert_eq!(
        execution("bernstein_run"),
        json!({"taskSupport": "optional"})
    );
    assert_eq!(
        execution("bernstein_run_status"),
        json!({"taskSupport": "forbidden"})
    );
    insta::assert_json_snapshot!("tools_list", result);
}

#[tokio::test]
async fn prompts_list_and_get() {
    let project = Project::new();
    insta::assert_json_snapshot!(
        "prompts_list",
        project.result("prompts/list", json!({})).await
    );
    let got = project
        .result(
            "prompts/get",
            json!({"name": "orchestrate_goal", "arguments": {"goal": "ship X", "role": "qa"}}),
        )
        .await;
    insta::assert_json_snapshot!("prompts_get_orchestrate_goal", got);
    let again = project
        .result(
            "prompts/get",
            json!({"name": "orchestrate_goal", "arguments": {"goal": "ship X", "role": "qa"}}),
        )
        .await;
    assert_eq!(got, again, "prompts render deterministically");
}

#[tokio::test]
async fn capability_card_reflects_the_configuration() {
    let project = Project::new();
    let read = project
        .result("resources/read", json!({"uri": "bernstein://capability"}))
        .await;
    let text = read["contents"][0]["text"].as_str().unwrap();
    // The resource text is `json.dumps(card, sort_keys=True)`.
    assert!(
        text.starts_with("{\"auth\": {\"anonymous_scope\": \"loopback-only\", "),
        "{text}"
    );
    let card: Value = serde_json::from_str(text).unwrap();
    insta::assert_json_snapshot!("capability_card", card);

    let core = Project::with(|b| {
        b.tool_config(ToolConfig {
            tier: Tier::Core,
            cost_meter: false,
            ..ToolConfig::default()
        })
    });
    let read = core
        .result(
            "resources/read",
            json!({"uri": "bernstein://capability", "_meta": meta_2026(false)}),
        )
        .await;
    let card: Value = serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(card["tools"]["activeTier"], "core");
    assert_eq!(
        card["tools"]["advertised"],
        json!(["bernstein_run", "bernstein_run_status", "bernstein_status"])
    );
    assert_eq!(card["costMeter"]["enabled"], false);
    assert_eq!(card["specRevision"], "2026-07-28");

    // The orchestration prompt names `bernstein_post_message` only where it is served.
    let text = orchestration_text(&core).await;
    assert!(!text.contains("bernstein_post_message"), "{text}");
    assert!(text.contains("tell the user the task id"), "{text}");
    let text = orchestration_text(&Project::new()).await;
    assert!(
        text.contains("record it on the task with `bernstein_post_message`"),
        "{text}"
    );
}

#[tokio::test]
async fn resources_list_and_skill_index() {
    let project = Project::new();
    let listed = project.result("resources/list", json!({})).await;
    let uris: Vec<&str> = listed["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(
        uris,
        vec![
            "bernstein://capability",
            "bernstein://skills/index",
            "lineage://stats"
        ]
    );
    let stats = project
        .result("resources/read", json!({"uri": "lineage://stats"}))
        .await;
    assert_eq!(
        stats["contents"][0]["text"],
        r#"{"agents_seen": [], "artefacts": 0, "last_24h_entries": 0, "open_forks": 0, "total_entries": 0}"#
    );
    let templates = project.result("resources/templates/list", json!({})).await;
    assert_eq!(
        templates["resourceTemplates"][0]["uriTemplate"],
        "lineage://artefact/{artefact_path}"
    );
    let artefact = project
        .result(
            "resources/read",
            json!({"uri": "lineage://artefact/src/app.py"}),
        )
        .await;
    assert_eq!(artefact["contents"][0]["mimeType"], "application/x-ndjson");
    assert_eq!(artefact["contents"][0]["text"], "");
    let index = project
        .result("resources/read", json!({"uri": "bernstein://skills/index"}))
        .await;
    let text = index["contents"][0]["text"].as_str().unwrap();
    let parsed: Value = serde_json::from_str(text).unwrap();
    assert!(
        parsed["skills"].as_array().is_some_and(|s| !s.is_empty()),
        "{text}"
    );
}

#[tokio::test]
async fn instructions_are_short_and_name_only_registered_tools() {
    for tier in Tier::ALL {
        let project = Project::with(|b| {
            b.tool_config(ToolConfig {
                tier,
                ..ToolConfig::default()
            })
        });
        let text = project.dispatcher.instructions().to_owned();
        assert!(
            text.chars().count() <= MAX_INSTRUCTIONS_CHARS,
            "{tier:?}: {}",
            text.len()
        );
        let registered: Vec<&str> = project.dispatcher.tool_names().collect();
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let looks_like_tool = word.starts_with("bernstein_") || MENTIONED_TOOLS.contains(&word);
            if looks_like_tool {
                assert!(
                    registered.contains(&word),
                    "{tier:?}: {word} is not registered"
                );
            }
        }
        let initialized = project
            .result("initialize", json!({"protocolVersion": "2025-11-25"}))
            .await;
        assert_eq!(initialized["instructions"], text.as_str());
    }
}

/// Every protocol error payload, each next to the message that provoked it.
#[tokio::test]
async fn protocol_error_payloads() {
    let project = Project::new();
    let mut cases: Vec<(String, Value)> = Vec::new();
    let lines = [
        "{not json",
        "[]",
        "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
        "42",
        r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":7}"#,
        r#"{"jsonrpc":"2.0","id":5}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/list","params":[1]}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"no/such/method"}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"prompts/get","params":{"name":"no_such_prompt"}}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"prompts/get","params":{"name":"orchestrate_goal","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":10,"method":"prompts/get","params":{"name":"triage_failed_tasks","arguments":{"limit":"many"}}}"#,
        r#"{"jsonrpc":"2.0","id":11,"method":"prompts/get","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":12,"method":"resources/read","params":{"uri":"bernstein://nope"}}"#,
        r#"{"jsonrpc":"2.0","id":13,"method":"resources/read","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"bernstein_status","arguments":[1]}}"#,
        r#"{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"bernstein_run_status","arguments":{"run_id":"r"},"task":{"ttl":1000}}}"#,
        r#"{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"bernstein_status","arguments":{},"_meta":{"baggage":"mcp.call_index=99"}}}"#,
        r#"{"jsonrpc":"2.0","id":18,"method":"tasks/get","params":{"taskId":"no-such-task"}}"#,
        r#"{"jsonrpc":"2.0","id":19,"method":"tasks/get","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":20,"method":"tasks/list","params":{"cursor":"!!"}}"#,
        r#"{"jsonrpc":"2.0","id":21,"method":"tasks/cancel","params":{"taskId":"no-such-task"}}"#,
        r#"{"jsonrpc":"2.0","id":22,"method":"tasks/result","params":{"taskId":"no-such-task"}}"#,
        r#"{"jsonrpc":"2.0","id":23,"method":"prompts/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"1999-01-01"}}}"#,
        r#"{"jsonrpc":"2.0","id":24,"method":"prompts/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        r#"{"jsonrpc":"2.0","id":25,"method":"server/discover","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":26,"method":"tasks/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#,
        r#"{"jsonrpc":"2.0","id":27,"method":"resources/read","params":{"uri":"bernstein://nope","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#,
        r#"{"jsonrpc":"2.0","id":28,"method":"tools/call","params":{"name":"bernstein_run","arguments":{"goal":"g"},"task":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#,
    ];
    for line in lines {
        let reply = project
            .send_text(line)
            .await
            .unwrap_or_else(|| panic!("no reply to {line}"));
        assert!(reply.get("error").is_some(), "{line}: {reply}");
        cases.push((line.to_owned(), reply));
    }
    insta::assert_json_snapshot!("protocol_errors", cases);
}

#[tokio::test]
async fn notifications_and_client_responses_get_no_reply() {
    let project = Project::new();
    for line in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}"#,
        r#"{"jsonrpc":"2.0","method":"unknown/notification"}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
    ] {
        assert_eq!(project.send_text(line).await, None, "{line}");
    }
}

/// The methods that exist only on the initialize lifecycle are not found on the stateless one,
/// whatever their params; on the initialize lifecycle they run.
#[tokio::test]
async fn initialize_lifecycle_methods_are_not_found_on_the_stateless_one() {
    let project = Project::new();
    let outcome = |reply: Value| match reply.get("error") {
        Some(error) => format!("{} {}", error["code"], error["message"]),
        None => format!("result {}", reply["result"]),
    };
    for (method, params, legacy) in [
        ("ping", json!({}), "result {}"),
        ("logging/setLevel", json!({"level": "debug"}), "result {}"),
        (
            "resources/subscribe",
            json!({"uri": "bernstein://capability"}),
            "result {}",
        ),
        (
            "resources/unsubscribe",
            json!({"uri": "bernstein://capability"}),
            "result {}",
        ),
        (
            "tasks/result",
            json!({"taskId": "no-such-task"}),
            "-32602 \"Unknown task: no-such-task\"",
        ),
        ("tasks/list", json!({}), "result {\"tasks\":[]}"),
    ] {
        let request =
            |params: Value| json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        assert_eq!(
            outcome(project.send(request(params.clone())).await),
            legacy,
            "{method}"
        );
        let mut stateless = params;
        stateless["_meta"] = meta_2026(true);
        assert_eq!(
            outcome(project.send(request(stateless)).await),
            format!("-32601 \"Method not found: {method}\""),
            "{method}"
        );
    }
}

/// A request whose `_meta` declares a version before 2026-07-28 is served on the initialize
/// lifecycle: it needs none of the 2026-07-28 `_meta` keys, `ping` exists for it, and its
/// result is not stamped.
#[tokio::test]
async fn a_declared_version_before_2026_07_28_is_served_on_the_initialize_lifecycle() {
    let project = Project::new();
    for version in ["2024-11-05", "2025-11-25"] {
        let meta = json!({"io.modelcontextprotocol/protocolVersion": version});
        let listed = project.result("prompts/list", json!({"_meta": meta})).await;
        for key in ["resultType", "ttlMs", "cacheScope", "_meta"] {
            assert!(listed.get(key).is_none(), "{version} {key}: {listed}");
        }
        assert_eq!(
            project.result("ping", json!({"_meta": meta})).await,
            json!({}),
            "{version}"
        );
    }
}

/// The lineage resources exist only while lineage is enabled, and an artefact URI must name an
/// artefact: the bare prefix is not one.
#[tokio::test]
async fn lineage_resources_are_read_only_when_enabled_and_named() {
    let outcome = |reply: Value| match reply.get("error") {
        Some(error) => format!("{} {}", error["code"], error["message"]),
        None => format!("{}", reply["result"]["contents"][0]["mimeType"]),
    };
    for (lineage_enabled, uri, expect) in [
        (true, "lineage://stats", r#""application/json""#),
        (true, "lineage://artefact/a", r#""application/x-ndjson""#),
        (
            true,
            "lineage://artefact/",
            r#"-32002 "Resource not found: lineage://artefact/""#,
        ),
        (
            false,
            "lineage://stats",
            r#"-32002 "Resource not found: lineage://stats""#,
        ),
        (
            false,
            "lineage://artefact/a",
            r#"-32002 "Resource not found: lineage://artefact/a""#,
        ),
    ] {
        let project = Project::with(|b| {
            b.tool_config(ToolConfig {
                lineage_enabled,
                ..ToolConfig::default()
            })
        });
        let reply = project
            .send(json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri}}))
            .await;
        assert_eq!(outcome(reply), expect, "{lineage_enabled} {uri}");
    }
}

/// The text of the `orchestrate_goal` prompt for the goal "ship it".
async fn orchestration_text(project: &Project) -> String {
    let prompt = project
        .result(
            "prompts/get",
            json!({"name": "orchestrate_goal", "arguments": {"goal": "ship it"}}),
        )
        .await;
    prompt["messages"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}
