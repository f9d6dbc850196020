//! The input firewall: every refused payload answers the structured validation error and
//! writes nothing at all under `.sdd/`.

use serde_json::{Value, json};

use crate::common::{Project, config, payload};

fn nested(depth: usize) -> Value {
    let mut value = json!("leaf");
    for _ in 0..depth {
        value = json!({ "k": value });
    }
    value
}

/// Calls `name` with `arguments` in a project holding one task, and checks the refusal and
/// that `.sdd/` is byte-for-byte unchanged. Returns the payload text (meter off).
async fn refused(name: &str, arguments: Value, message: &str) -> String {
    let project = Project::new(config(false));
    let created = project
        .call(
            "bernstein_create_task",
            json!({"title": "t", "description": "d", "role": "backend"}),
        )
        .await;
    let task_id = payload(&created)["id"].as_str().unwrap().to_owned();
    let arguments = serde_json::from_str(&arguments.to_string().replace("TASK", &task_id)).unwrap();
    let before = project.sdd_files();
    let outcome = project.call(name, arguments).await;
    // The payload is the reference's, and the result says it is a refusal.
    assert!(outcome.is_error, "{}", outcome.text);
    let body = payload(&outcome);
    assert_eq!(body["error"], message, "{}", outcome.text);
    assert_eq!(body["jsonrpc_error"]["code"], -32602);
    assert_eq!(body["jsonrpc_error"]["data"]["tool"], name);
    assert_eq!(project.sdd_files(), before, "{name} wrote something");
    outcome.text.replace(&task_id, "TASK")
}

const DENY: &str = "payload rejected by deny-by-default rules";
const SCHEMA: &str = "payload failed schema validation";

#[tokio::test(flavor = "multi_thread")]
async fn oversize_payload() {
    let text = refused(
        "bernstein_post_message",
        json!({"task_id": "TASK", "sender": "w", "body": "x".repeat(70_000)}),
        DENY,
    )
    .await;
    insta::assert_snapshot!(text);
}

#[tokio::test(flavor = "multi_thread")]
async fn nesting_deeper_than_ten() {
    let text = refused(
        "bernstein_post_artifact",
        json!({"task_id": "TASK", "key": "k", "artifact_type": "finding", "poster": "w",
               "sarif_result": nested(10)}),
        DENY,
    )
    .await;
    insta::assert_snapshot!(text);
}

#[tokio::test(flavor = "multi_thread")]
async fn nesting_of_ten_passes_the_deny_rules() {
    let project = Project::new(config(false));
    let outcome = project
        .call(
            "bernstein_post_artifact",
            json!({"task_id": "abc", "key": "k", "artifact_type": "finding", "poster": "w",
                   "sarif_result": nested(9)}),
        )
        .await;
    assert_ne!(payload(&outcome)["error"], DENY, "{}", outcome.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn control_characters() {
    let text = refused(
        "bernstein_post_message",
        json!({"task_id": "TASK", "sender": "w\u{1b}[31m", "body": "bell\u{7}", "kind": "finding"}),
        DENY,
    )
    .await;
    insta::assert_snapshot!(text);
}

/// A control character in an object key is refused like one in a value, and nothing is sealed.
/// Before the fix the key below was sealed into a SARIF blob.
#[tokio::test(flavor = "multi_thread")]
async fn control_characters_in_object_keys() {
    let text = refused(
        "bernstein_post_artifact",
        json!({"task_id": "TASK", "key": "k", "artifact_type": "finding", "poster": "w",
               "sarif_result": {"ruleId": "r", "\u{1b}]0;pwned\u{7}\u{0}": "x"}}),
        DENY,
    )
    .await;
    assert!(
        text.contains(r#"{"path": "/sarif_result", "reason": "object key contains disallowed control character"}"#),
        "{text}"
    );
    assert!(!text.contains("pwned"), "the key is not echoed: {text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn traversal_ids() {
    let text = refused(
        "bernstein_post_message",
        json!({"task_id": "../TASK", "sender": "w", "body": "hello"}),
        SCHEMA,
    )
    .await;
    insta::assert_snapshot!("traversal_task_id", text);
    let text = refused("bernstein_cancel", json!({"task_id": "a/b"}), SCHEMA).await;
    insta::assert_snapshot!("traversal_cancel_id", text);
    let text = refused(
        "bernstein_claim",
        json!({"claimer_id": "w", "completed_ids": ["ok", "../../etc"]}),
        SCHEMA,
    )
    .await;
    insta::assert_snapshot!("traversal_completed_ids", text);
}

#[tokio::test(flavor = "multi_thread")]
async fn extra_keys() {
    let text = refused(
        "bernstein_create_task",
        json!({"title": "t", "description": "d", "evil": true, "also": 1}),
        SCHEMA,
    )
    .await;
    insta::assert_snapshot!(text);
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_types() {
    let text = refused(
        "bernstein_run",
        json!({"goal": "g", "priority": "2", "estimated_minutes": 1.5}),
        SCHEMA,
    )
    .await;
    insta::assert_snapshot!("wrong_types_run", text);
    let text = refused(
        "bernstein_complete",
        json!({"task_id": "TASK", "result_summary": 5}),
        SCHEMA,
    )
    .await;
    insta::assert_snapshot!("wrong_types_complete", text);
}

#[tokio::test(flavor = "multi_thread")]
async fn range_enum_and_conditional_rules() {
    let text = refused(
        "bernstein_run",
        json!({"goal": "g", "priority": 9, "scope": "huge"}),
        SCHEMA,
    )
    .await;
    insta::assert_snapshot!("range_and_enum", text);
    let text = refused(
        "bernstein_post_artifact",
        json!({"task_id": "TASK", "key": "report", "artifact_type": "table", "poster": "w"}),
        SCHEMA,
    )
    .await;
    insta::assert_snapshot!("conditional_required", text);
    let text = refused("load_skill", json!({"reference": "x.md"}), SCHEMA).await;
    insta::assert_snapshot!("dependency", text);
    let text = refused("bernstein_run", json!({"role": "qa"}), SCHEMA).await;
    insta::assert_snapshot!("run_without_goal", text);
}

#[tokio::test(flavor = "multi_thread")]
async fn arguments_that_are_not_an_object() {
    let project = Project::new(config(false));
    let outcome = project.call("bernstein_status", json!(["status"])).await;
    insta::assert_snapshot!(outcome.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn permissive_mode_lets_the_call_through() {
    let project = Project::new(bernstein_tools::ToolConfig {
        validation: bernstein_tools::Validation::Permissive,
        ..config(false)
    });
    let outcome = project
        .call("bernstein_status", json!({"detail": "yes", "extra": 1}))
        .await;
    let body = payload(&outcome);
    assert_eq!(body["live"], true, "{}", outcome.text);
    assert!(body.get("error").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn nulls_are_dropped_before_validation() {
    let project = Project::new(config(false));
    let outcome = project
        .call("bernstein_status", json!({"status": null, "detail": null}))
        .await;
    assert_eq!(payload(&outcome)["live"], true, "{}", outcome.text);
}
