//! Deeply nested JSON is refused before any recursion can overflow a stack, and the server
//! keeps serving: 100 000 levels of arrays or objects, as a whole message or inside a tool's
//! arguments, get a clear JSON-RPC error; nesting below the parser's limit meets the input
//! firewall's depth rule. The Python-JSON parser and the audit verifier (whose workers run on
//! ordinary 2 MiB thread stacks) refuse such lines too.

use bernstein_journal::audit;
use bernstein_journal::key::AuditKey;
use bernstein_protocol::pyjson::Value as PyValue;
use serde_json::json;

use crate::session::Session;

const DEPTH: usize = 100_000;

fn deep_array(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn deep_object(depth: usize) -> String {
    format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
}

async fn assert_still_serving(session: &mut Session, id: i64) {
    let pong = session.request(id, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}), "{pong}");
}

#[tokio::test]
async fn a_hundred_thousand_levels_are_refused_and_the_server_keeps_serving() {
    let mut session = Session::start();
    let before = session.evidence().await;
    let messages = [
        deep_array(DEPTH),
        deep_object(DEPTH),
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"bernstein_run","arguments":{{"goal":"g","x":{}}}}}}}"#,
            deep_array(DEPTH)
        ),
        format!(
            r#"{{"jsonrpc":"2.0","id":8,"method":"ping","params":{}}}"#,
            deep_object(DEPTH)
        ),
    ];
    for (n, message) in messages.iter().enumerate() {
        session.send_line(message).await;
        let refused = session.next_message().await;
        assert_eq!(refused["jsonrpc"], "2.0", "{refused}");
        assert_eq!(refused["id"], json!(null), "message {n}: {refused}");
        assert_eq!(refused["error"]["code"], -32700, "message {n}: {refused}");
        assert_eq!(
            refused["error"]["message"], "Parse error",
            "message {n}: {refused}"
        );
        let detail = refused["error"]["data"]["detail"].as_str().unwrap();
        assert!(
            detail.contains("recursion limit exceeded"),
            "message {n}: {detail}"
        );
        assert_still_serving(&mut session, 100 + n as i64).await;
    }
    assert_eq!(
        session.evidence().await,
        before,
        "a refused message writes nothing"
    );
    session.close_input().await;
    session.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn nesting_below_the_parser_limit_meets_the_firewall_depth_rule() {
    let mut session = Session::start();
    let arguments: serde_json::Value =
        serde_json::from_str(&format!(r#"{{"goal":"g","x":{}}}"#, deep_array(100))).unwrap();
    let refused = session
        .request(
            3,
            "tools/call",
            json!({"name": "bernstein_run", "arguments": arguments}),
        )
        .await;
    // The reference answers a firewall refusal as a tool result carrying the JSON-RPC error.
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let error = &refused["result"]["structuredContent"]["result"]["jsonrpc_error"];
    assert_eq!(error["code"], -32602, "{refused}");
    assert!(
        error.to_string().contains("payload nesting exceeds depth"),
        "{refused}"
    );
    assert_still_serving(&mut session, 4).await;
    session.close_input().await;
    session.server.await.unwrap().unwrap();
}

#[test]
fn the_python_json_parser_refuses_deep_nesting() {
    for text in [deep_array(DEPTH), deep_object(DEPTH)] {
        let refused = PyValue::parse(&text);
        assert!(refused.is_err(), "{:?}", refused.map(|_| ()));
    }
    // The deepest accepted document round-trips through the encoder, which recurses too.
    let mut depth = 1;
    while PyValue::parse(&deep_array(depth + 1)).is_ok() {
        depth += 1;
        assert!(depth < DEPTH, "no depth limit");
    }
    let deepest = PyValue::parse(&deep_array(depth)).unwrap();
    assert_eq!(
        deepest.dumps(bernstein_protocol::pyjson::Dialect::PY_COMPACT_UTF8),
        deep_array(depth)
    );
}

#[test]
fn the_audit_verifier_reports_deep_lines_as_findings() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        deep_array(DEPTH),
        deep_object(DEPTH),
        deep_array(511),
        deep_array(512),
        deep_array(513),
        format!(r#"{{"a": {}}}"#, deep_array(511)),
    ];
    std::fs::write(dir.path().join("2026-07-01.jsonl"), lines.join("\n") + "\n").unwrap();
    let key = AuditKey::from_master_bytes(b"nesting".to_vec());
    let report = audit::verify(dir.path(), &key);
    assert_eq!(report, audit::verify_sequential(dir.path(), &key));
    assert_eq!(report.entries, lines.len() as u64);
    assert_eq!(report.verified_entries, 0);
    let mut lines_with_findings: Vec<u64> = report
        .errors
        .iter()
        .filter_map(|finding| finding.line)
        .collect();
    lines_with_findings.dedup();
    assert_eq!(
        lines_with_findings,
        [1, 2, 3, 4, 5, 6],
        "{:#?}",
        report.errors
    );
}
