//! Streamable HTTP on `/mcp`: the seed's worked example, plain JSON and event-stream answers,
//! the span header, the 2026-07-28 rules, legacy sessions and streaming cancel.

use std::time::{Duration, SystemTime};

use bernstein_mcp_core::Limits;
use serde_json::{Value, json};

use crate::support::{Server, TOKEN, last_anchor_span};

const META_2026: &str = "io.modelcontextprotocol/protocolVersion";

fn meta_2026() -> Value {
    json!({
        META_2026: "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "0"},
    })
}

/// A response the dispatcher names no call id for is labelled with the request's
/// content-derived span id: a `tools/call` refused before its tool runs (whose id is derived
/// only then) exactly as any other request.
#[tokio::test]
async fn a_request_with_no_call_id_is_labelled_with_its_content_derived_span() {
    let server = Server::bearer().await;
    for request in [
        json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"no_such_tool","arguments":{"a":1}}}),
        json!({"jsonrpc":"2.0","id":"t","method":"tools/call","params":{"name":"bernstein_status","arguments":[]}}),
        json!({"jsonrpc":"2.0","id":8,"method":"tools/list"}),
    ] {
        let reply = server.call(&request).await;
        assert_eq!(
            reply.header("x-bernstein-span-id"),
            Some(bernstein_mcp_core::ids::request_span_id(&request).as_str()),
            "{request}"
        );
    }
}

#[tokio::test]
async fn the_worked_example_sequence_answers_with_card_meter_and_prompts() {
    let server = Server::bearer().await;
    let init = server
        .call(&json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"example"}}}))
        .await;
    assert_eq!(init.status, 200);
    assert_eq!(init.header("content-type"), Some("application/json"));
    assert!(init.header("x-bernstein-span-id").is_some());
    assert!(init.header("mcp-session-id").is_none());
    let card = &init.json()["result"]["capabilityCard"];
    let transports: Vec<&str> = card["transports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap())
        .collect();
    assert_eq!(transports, ["http", "sse"], "{card}");
    assert_eq!(
        card["auth"]["bearer_token_configured"], false,
        "the card reports the posture the builder was given"
    );
    assert_eq!(
        card["specRevision"],
        init.json()["result"]["protocolVersion"]
    );

    let status = server
        .call(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bernstein_status","arguments":{}}}))
        .await;
    assert_eq!(status.status, 200);
    let body = status.json();
    let meter = &body["result"]["structuredContent"]["_meter"];
    let span = status.header("x-bernstein-span-id").unwrap();
    assert_eq!(meter["call_id"], span, "{body}");
    assert_eq!(last_anchor_span(server.dir.path()), span);

    let prompts = server
        .call(&json!({"jsonrpc":"2.0","id":3,"method":"prompts/list"}))
        .await;
    assert_eq!(
        prompts.json()["result"]["prompts"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let prompt = server
        .call(&json!({"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{"name":"orchestrate_goal","arguments":{"goal":"ship X","role":"qa"}}}))
        .await;
    assert!(
        prompt.json()["result"]["messages"].is_array(),
        "{}",
        prompt.body_text()
    );

    let cancel = server
        .call(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}))
        .await;
    assert_eq!(cancel.status, 202);
    assert!(cancel.body.is_empty());
    server.stop().await;
}

/// The seed's curl commands, byte for byte except the port.
#[tokio::test]
async fn the_worked_example_runs_as_written_with_curl() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        crate::support::skip("curl is not installed");
        return;
    }
    let server = Server::with(
        |b| b,
        |c| {
            c.auth_type("bearer")
                .bearer_token(Some(TOKEN.to_owned()))
                .oauth_issuer(Some("https://idp.example.com".to_owned()))
        },
    )
    .await;
    let mcp = server.url("/mcp");
    let curl = |args: Vec<String>| async move {
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new("curl")
                .args(&args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        })
        .await
        .unwrap()
    };
    let authed = |body: &str| {
        vec![
            "-s".to_owned(),
            mcp.clone(),
            "-H".to_owned(),
            "Authorization: Bearer dev-token".to_owned(),
            "-H".to_owned(),
            "content-type: application/json".to_owned(),
            "-d".to_owned(),
            body.to_owned(),
        ]
    };
    let init: Value = serde_json::from_str(
        &curl(authed(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"example"}}}"#)).await,
    )
    .unwrap();
    assert!(
        init["result"]["capabilityCard"]["tools"]["activeTier"].is_string(),
        "{init}"
    );
    let call: Value = serde_json::from_str(
        &curl(authed(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bernstein_status","arguments":{}}}"#)).await,
    )
    .unwrap();
    assert!(
        call["result"]["structuredContent"]["_meter"]["call_id"].is_string(),
        "{call}"
    );
    let list: Value = serde_json::from_str(
        &curl(authed(
            r#"{"jsonrpc":"2.0","id":3,"method":"prompts/list"}"#,
        ))
        .await,
    )
    .unwrap();
    assert_eq!(list["result"]["prompts"].as_array().unwrap().len(), 3);
    let get: Value = serde_json::from_str(
        &curl(authed(r#"{"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{"name":"orchestrate_goal","arguments":{"goal":"ship X","role":"qa"}}}"#)).await,
    )
    .unwrap();
    assert!(get["result"]["messages"].is_array(), "{get}");
    let document: Value = serde_json::from_str(
        &curl(vec![
            "-s".to_owned(),
            server.url("/.well-known/oauth-protected-resource"),
        ])
        .await,
    )
    .unwrap();
    assert_eq!(
        document["authorization_servers"][0],
        "https://idp.example.com"
    );
    let refusal = curl(vec![
        "-si".to_owned(),
        mcp.clone(),
        "-d".to_owned(),
        "{}".to_owned(),
    ])
    .await;
    let challenge = refusal
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("www-authenticate"))
        .unwrap_or_else(|| panic!("{refusal}"));
    assert!(
        challenge.contains(&format!(
            "Bearer resource_metadata=\"http://{}/.well-known/oauth-protected-resource\"",
            server.host()
        )),
        "{challenge}"
    );
    let cancel = curl(authed(
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#,
    ))
    .await;
    assert_eq!(cancel, "");
    server.stop().await;
}

#[tokio::test]
async fn progress_before_the_result_makes_an_event_stream() {
    let server = Server::start().await;
    let request = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"bernstein_run_status","arguments":{"run_id":"run-b"},"_meta":{"progressToken":"pt-1"}}});
    let reply = server
        .post(
            &[("accept", "application/json, text/event-stream")],
            &request,
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let span = reply.header("x-bernstein-span-id").unwrap().to_owned();
    let events = reply.events();
    assert_eq!(events.len(), 2, "{events:?}");
    let progress: Value = serde_json::from_str(&events[0].2).unwrap();
    assert_eq!(progress["method"], "notifications/progress");
    assert_eq!(events[0].1, None);
    assert_eq!(events[1].0, "message");
    assert_eq!(events[1].1.as_deref(), Some(span.as_str()));
    let response: Value = serde_json::from_str(&events[1].2).unwrap();
    assert_eq!(response["id"], 7);
    assert_eq!(
        response["result"]["structuredContent"]["_meter"]["call_id"],
        span
    );
    assert_eq!(last_anchor_span(server.dir.path()), span);

    // The same poll again ticks nothing (the vector did not move): plain JSON.
    let again = server.post(&[], &request).await;
    assert_eq!(again.header("content-type"), Some("application/json"));

    // A client that accepts only SSE gets its answer as one event.
    let sse_only = server
        .post(
            &[("accept", "text/event-stream")],
            &json!({"jsonrpc":"2.0","id":8,"method":"tools/list"}),
        )
        .await;
    assert_eq!(sse_only.header("content-type"), Some("text/event-stream"));
    let events = sse_only.events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].1.as_deref(),
        sse_only.header("x-bernstein-span-id")
    );
    server.stop().await;
}

#[tokio::test]
async fn the_2026_07_28_header_rules() {
    let server = Server::start().await;
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bernstein_status","arguments":{},"_meta":meta_2026()}});
    let good = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "bernstein_status"),
    ];
    let ok = server.post(&good, &call).await;
    assert_eq!(ok.status, 200, "{}", ok.body_text());
    assert_eq!(ok.json()["result"]["resultType"], "complete");

    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (
            vec![
                ("mcp-method", "tools/call"),
                ("mcp-name", "bernstein_status"),
            ],
            "MCP-Protocol-Version header is required",
        ),
        (
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-name", "bernstein_status"),
            ],
            "Mcp-Method header is required",
        ),
        (
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/list"),
                ("mcp-name", "bernstein_status"),
            ],
            "does not match the method",
        ),
        (
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "other"),
            ],
            "Mcp-Name header \"other\"",
        ),
        (
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
            ],
            "Mcp-Name header is required",
        ),
        (
            vec![
                ("mcp-protocol-version", "2025-11-25"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "bernstein_status"),
            ],
            "does not match the request's _meta",
        ),
    ];
    for (headers, message) in cases {
        let reply = server.post(&headers, &call).await;
        assert_eq!(reply.status, 400, "{headers:?}");
        let body = reply.json();
        assert_eq!(body["error"]["code"], -32020, "{body}");
        assert_eq!(body["id"], 1);
        assert!(
            body["error"]["message"].as_str().unwrap().contains(message),
            "{body}"
        );
    }
    // `prompts/get` names its prompt and `resources/read` its URI in `Mcp-Name` as well; a
    // header naming something else is refused before the method runs.
    for (method, params, named) in [
        (
            "prompts/get",
            json!({"name": "bernstein-plan", "_meta": meta_2026()}),
            "bernstein-plan",
        ),
        (
            "resources/read",
            json!({"uri": "bernstein://runs", "_meta": meta_2026()}),
            "bernstein://runs",
        ),
    ] {
        let request = json!({"jsonrpc":"2.0","id":3,"method":method,"params":params});
        let headers = |name| {
            [
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", method),
                ("mcp-name", name),
            ]
        };
        let reply = server.post(&headers("other"), &request).await;
        assert_eq!(reply.status, 400, "{method}");
        let body = reply.json();
        assert_eq!(body["error"]["code"], -32020, "{body}");
        assert_eq!(
            body["error"]["message"],
            format!("Mcp-Name header \"other\" does not match {named:?}"),
        );
        let reply = server.post(&headers(named), &request).await;
        assert_ne!(
            reply.json()["error"]["code"],
            -32020,
            "{method}: {}",
            reply.body_text()
        );
    }
    // A base64-sentinel Mcp-Name decodes.
    let encoded = server
        .post(
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "=?base64?YmVybnN0ZWluX3N0YXR1cw==?="),
            ],
            &call,
        )
        .await;
    assert_eq!(encoded.status, 200, "{}", encoded.body_text());

    let unsupported = server
        .post(
            &[("mcp-protocol-version", "2099-01-01")],
            &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
        )
        .await;
    assert_eq!(unsupported.status, 400);
    let body = unsupported.json();
    assert_eq!(body["error"]["code"], -32022);
    assert!(
        body["error"]["data"]["supported"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );

    for method in ["ping", "foo/bar"] {
        let reply = server
            .post(
                &[
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", method),
                ],
                &json!({"jsonrpc":"2.0","id":3,"method":method,"params":{"_meta":meta_2026()}}),
            )
            .await;
        assert_eq!(reply.status, 404, "{method}");
        assert_eq!(reply.json()["error"]["code"], -32601);
    }
    // Legacy traffic keeps 200 for an unknown method, and its ping works.
    let legacy = server
        .post(&[], &json!({"jsonrpc":"2.0","id":4,"method":"foo/bar"}))
        .await;
    assert_eq!(legacy.status, 200);
    assert_eq!(legacy.json()["error"]["code"], -32601);
    let ping = server
        .post(&[], &json!({"jsonrpc":"2.0","id":5,"method":"ping"}))
        .await;
    assert_eq!(ping.json()["result"], json!({}));
    server.stop().await;
}

/// SEP-2575 over HTTP, as conformance 0.2.0-alpha.12's `server-stateless` checks it: a
/// 2026-07-28 request whose `_meta` lacks a required key is 400 with -32602, and `initialize`
/// sent in that era is a removed method, 404 with -32601; a legacy `initialize` still works.
#[tokio::test]
async fn the_2026_07_28_meta_and_removed_handshake_statuses() {
    let server = Server::start().await;
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "server/discover"),
    ];
    let missing_capabilities = json!({
        META_2026: "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "0"},
    });
    for (id, params) in [
        (101, json!({})),
        (104, json!({"_meta": missing_capabilities})),
    ] {
        let reply = server
            .post(
                &headers,
                &json!({"jsonrpc":"2.0","id":id,"method":"server/discover","params":params}),
            )
            .await;
        assert_eq!(reply.status, 400, "{}", reply.body_text());
        let body = reply.json();
        assert_eq!(body["error"]["code"], -32602, "{body}");
        assert_eq!(body["id"], id, "{body}");
    }
    let complete = server
        .post(
            &headers,
            &json!({"jsonrpc":"2.0","id":105,"method":"server/discover","params":{"_meta":meta_2026()}}),
        )
        .await;
    assert_eq!(complete.status, 200, "{}", complete.body_text());

    let removed = server
        .post(
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "initialize"),
            ],
            &json!({"jsonrpc":"2.0","id":500,"method":"initialize","params":{"_meta":meta_2026()}}),
        )
        .await;
    assert_eq!(removed.status, 404, "{}", removed.body_text());
    let body = removed.json();
    assert_eq!(body["error"]["code"], -32601, "{body}");
    assert_eq!(body["id"], 500, "{body}");

    let legacy = server
        .post(
            &[],
            &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
                "protocolVersion":"2025-11-25","capabilities":{},
                "clientInfo":{"name":"it","version":"0"}}}),
        )
        .await;
    assert_eq!(legacy.status, 200, "{}", legacy.body_text());
    assert!(legacy.json()["result"]["capabilityCard"].is_object());
    server.stop().await;
}

#[tokio::test]
async fn legacy_sessions_are_ignored_until_the_window_closes() {
    let server = Server::start().await;
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"legacy","version":"0"}}});
    let reply = server.post(&[("mcp-session-id", "abc123")], &init).await;
    assert_eq!(reply.status, 200);
    assert!(reply.header("mcp-session-id").is_none(), "never echoed");
    assert_eq!(reply.json()["result"]["protocolVersion"], "2025-06-18");
    let delete = server
        .request("DELETE", "/mcp", &[("mcp-session-id", "abc123")], b"")
        .await;
    assert_eq!(delete.status, 200);
    assert_eq!(delete.json(), json!({"status":"ok"}));
    server.stop().await;

    let closed = Server::with(
        |b| b,
        |c| {
            c.clock(std::sync::Arc::new(|| {
                SystemTime::UNIX_EPOCH + Duration::from_secs(1_816_732_800)
            }))
        },
    )
    .await;
    let expected = json!({"error": "protocol sessions were removed by the stateless MCP spec revision; the mcp-session-id compatibility window ended on 2027-07-28"});
    let refused = closed.post(&[("mcp-session-id", "abc123")], &init).await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json(), expected);
    let delete = closed.request("DELETE", "/mcp", &[], b"").await;
    assert_eq!(delete.status, 400);
    assert_eq!(delete.json(), expected);
    // Without the header the request is served as usual.
    assert_eq!(closed.post(&[], &init).await.status, 200);
    closed.stop().await;
}

fn subscribe(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "bernstein_subscribe", "arguments": {"role": "qa", "timeout_seconds": 60.0}}})
}

#[tokio::test]
async fn a_cancel_notification_stops_the_call_and_it_answers_its_partial_work() {
    let server = std::sync::Arc::new(Server::start().await);
    let running = {
        let server = std::sync::Arc::clone(&server);
        tokio::spawn(async move { server.post(&[], &subscribe(2)).await })
    };
    // Wait until the call is anchored (it runs from then on).
    let journal = server.dir.path().join(".sdd/runs/mcp-calls/journal.jsonl");
    for _ in 0..200 {
        if journal.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let unknown = server
        .post(
            &[],
            &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}),
        )
        .await;
    assert_eq!(unknown.status, 202);
    assert!(!running.is_finished(), "an unknown id is a no-op");
    let cancel = server
        .post(
            &[],
            &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}),
        )
        .await;
    assert_eq!(cancel.status, 202);
    let reply = tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the cancelled call answered")
        .unwrap();
    assert_eq!(reply.status, 200);
    let body = reply.json();
    let result = &body["result"];
    assert_eq!(result["cancelled"], true, "{body}");
    assert!(result["partial"].is_array(), "{body}");
    assert!(result.get("isError").is_none(), "{body}");
    assert_eq!(
        result["_meter"]["call_id"],
        reply.header("x-bernstein-span-id").unwrap()
    );
    // Settled: cancelling it again is a no-op.
    let again = server
        .post(
            &[],
            &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}),
        )
        .await;
    assert_eq!(again.status, 202);
}

#[tokio::test]
async fn closing_the_response_stream_cancels_the_call() {
    // One request slot in the whole process: a call that is not cancelled keeps it for 60 s.
    let server = Server::with(
        |b| {
            b.limits(Limits {
                max_in_flight: 1,
                ..Limits::default()
            })
        },
        |c| c,
    )
    .await;
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let body = subscribe(1).to_string();
    let bytes = crate::support::request_bytes(
        &server.host(),
        "POST",
        "/mcp",
        &[("content-type", "application/json")],
        body.as_bytes(),
    );
    tokio::io::AsyncWriteExt::write_all(&mut stream, &bytes)
        .await
        .unwrap();
    let journal = server.dir.path().join(".sdd/runs/mcp-calls/journal.jsonl");
    for _ in 0..200 {
        if journal.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let busy = server
        .post(&[], &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}))
        .await;
    assert!(
        busy.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("server busy"),
        "{}",
        busy.body_text()
    );
    drop(stream);
    let mut freed = false;
    for _ in 0..100 {
        let reply = server
            .post(&[], &json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}))
            .await;
        if reply.json()["result"]["tools"].is_array() {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        freed,
        "the dropped call was cancelled and released its slot"
    );
    server.stop().await;
}

#[tokio::test]
async fn shutdown_lets_the_call_in_flight_finish() {
    let server = Server::with(|b| b, |c| c.shutdown_grace(Duration::from_secs(20))).await;
    let addr = server.addr;
    let host = server.host();
    let running = tokio::spawn(async move {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "bernstein_subscribe", "arguments": {"role": "qa", "timeout_seconds": 1.0}}});
        let bytes = crate::support::request_bytes(
            &host,
            "POST",
            "/mcp",
            &[("content-type", "application/json")],
            request.to_string().as_bytes(),
        );
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stream, &bytes)
            .await
            .unwrap();
        let mut out = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut out)
            .await
            .unwrap();
        crate::support::Reply::parse(&out)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.stop().await;
    let reply = running.await.unwrap();
    assert_eq!(reply.status, 200);
    assert!(reply.json()["result"].is_object(), "{}", reply.body_text());
    // New connections are refused once the server stopped.
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn shutdown_past_its_grace_cancels_the_calls_still_running() {
    let server = Server::with(|b| b, |c| c.shutdown_grace(Duration::from_millis(300))).await;
    let addr = server.addr;
    let host = server.host();
    let running = tokio::spawn(async move {
        let bytes = crate::support::request_bytes(
            &host,
            "POST",
            "/mcp",
            &[("content-type", "application/json")],
            subscribe(1).to_string().as_bytes(),
        );
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stream, &bytes)
            .await
            .unwrap();
        let mut out = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut out)
            .await
            .unwrap();
        crate::support::Reply::parse(&out)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.stop().await;
    let reply = running.await.unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json()["result"]["cancelled"],
        true,
        "{}",
        reply.body_text()
    );
}
