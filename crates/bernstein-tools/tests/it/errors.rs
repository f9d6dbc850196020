//! Every error payload the tools answer with, as exact text (meter off).

use serde_json::{Value, json};

use crate::common::{Project, config, payload};

async fn task(project: &Project, title: &str) -> String {
    let outcome = project
        .call(
            "bernstein_create_task",
            json!({"title": title, "description": "d", "role": "backend"}),
        )
        .await;
    payload(&outcome)["id"].as_str().unwrap().to_owned()
}

fn redact(text: &str, id: &str, name: &str) -> String {
    text.replace(id, name)
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_tool() {
    let project = Project::new(config(true));
    let outcome = project.call("no_such_tool", json!({})).await;
    assert!(outcome.is_error);
    assert!(outcome.structured.is_none());
    assert_eq!(outcome.text, "Unknown tool: no_such_tool");
    let core = Project::new(bernstein_tools::ToolConfig {
        tier: bernstein_tools::Tier::Core,
        ..config(true)
    });
    let outcome = core
        .call("bernstein_claim", json!({"claimer_id": "w"}))
        .await;
    assert_eq!(outcome.text, "Unknown tool: bernstein_claim");
    let no_aliases = Project::new(bernstein_tools::ToolConfig {
        aliases_enabled: false,
        ..config(true)
    });
    let outcome = no_aliases.call("bernstein_health", json!({})).await;
    assert_eq!(outcome.text, "Unknown tool: bernstein_health");
}

#[tokio::test(flavor = "multi_thread")]
async fn gate_refusals() {
    let project = Project::new(config(false));
    let open = task(&project, "open task").await;
    let outcome = project
        .call("bernstein_approve", json!({"task_id": open}))
        .await;
    insta::assert_snapshot!("approve_open_task", redact(&outcome.text, &open, "T1"));

    let parent = task(&project, "parent").await;
    let child = project
        .call(
            "bernstein_run",
            json!({"goal": "child", "parent_task_id": parent}),
        )
        .await;
    assert_eq!(
        payload(&child)["parent_task_id"],
        parent.as_str(),
        "{}",
        child.text
    );
    let outcome = project
        .call(
            "bernstein_complete",
            json!({"task_id": parent, "result_summary": "done"}),
        )
        .await;
    insta::assert_snapshot!(
        "complete_waiting_parent",
        redact(&outcome.text, &parent, "T2")
    );

    let done = project
        .call(
            "bernstein_complete",
            json!({"task_id": open, "result_summary": "finished"}),
        )
        .await;
    assert_eq!(payload(&done)["status"], "done", "{}", done.text);
    let outcome = project
        .call(
            "bernstein_complete",
            json!({"task_id": open, "result_summary": "again"}),
        )
        .await;
    insta::assert_snapshot!("complete_done_task", redact(&outcome.text, &open, "T1"));
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_answers() {
    let project = Project::new(config(false));
    let outcome = project
        .call("bernstein_cancel", json!({"task_id": "nope"}))
        .await;
    insta::assert_snapshot!("cancel_unknown", outcome.text);

    let root = task(&project, "root").await;
    project
        .call(
            "bernstein_run",
            json!({"goal": "sub", "parent_task_id": root}),
        )
        .await;
    let outcome = project
        .call(
            "bernstein_cancel",
            json!({"task_id": root, "reason": "stop"}),
        )
        .await;
    let body = payload(&outcome);
    assert_eq!(body["cancelled"], true, "{}", outcome.text);
    assert_eq!(body["cancelled_descendants"], 1);
    let outcome = project
        .call("bernstein_cancel", json!({"task_id": root}))
        .await;
    insta::assert_snapshot!("cancel_terminal", redact(&outcome.text, &root, "T1"));
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_containment() {
    let project = Project::new(config(false));
    let outside = tempfile::tempdir().unwrap();
    let outcome = project
        .call(
            "bernstein_shutdown_orchestrator",
            json!({"workdir": outside.path().to_str().unwrap()}),
        )
        .await;
    let text = outcome
        .text
        .replace(outside.path().to_str().unwrap(), "$OUTSIDE");
    insta::assert_snapshot!("shutdown_not_a_project", text);
    assert!(
        std::fs::read_dir(outside.path()).unwrap().next().is_none(),
        "nothing created"
    );

    // A `.sdd/runtime` symlink leading out of the root is an escape.
    let escaping = tempfile::tempdir().unwrap();
    std::fs::create_dir(escaping.path().join(".sdd")).unwrap();
    std::os::unix::fs::symlink(outside.path(), escaping.path().join(".sdd").join("runtime"))
        .unwrap();
    let outcome = project
        .call(
            "bernstein_stop",
            json!({"workdir": escaping.path().to_str().unwrap()}),
        )
        .await;
    let text = outcome
        .text
        .replace(escaping.path().to_str().unwrap(), "$ESCAPING");
    insta::assert_snapshot!("stop_alias_escape", text);
    assert!(
        std::fs::read_dir(outside.path()).unwrap().next().is_none(),
        "nothing written"
    );

    let outcome = project
        .call("bernstein_shutdown_orchestrator", json!({}))
        .await;
    let signal = project.root().join(".sdd/runtime/signals/SHUTDOWN");
    assert_eq!(std::fs::read_to_string(&signal).unwrap(), "mcp-stop\n");
    let body = payload(&outcome);
    assert_eq!(body["status"], "shutdown signal sent");
    assert_eq!(
        std::fs::canonicalize(body["path"].as_str().unwrap()).unwrap(),
        std::fs::canonicalize(signal).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn alias_wrappers() {
    let project = Project::new(config(false));
    let outcome = project.call("bernstein_health", json!({})).await;
    insta::assert_snapshot!("alias_health", outcome.text);
    assert_eq!(
        outcome.structured.as_ref().unwrap()["result"],
        Value::String(outcome.text.clone())
    );
    let outcome = project
        .call(
            "bernstein_create_subtask",
            json!({"parent_task_id": "p", "goal": "g", "role": "wizard"}),
        )
        .await;
    insta::assert_snapshot!("alias_wrapped_validation_error", outcome.text);
    let outcome = project
        .call(
            "bernstein_create_subtask",
            json!({"parent_task_id": "missing", "goal": "g"}),
        )
        .await;
    insta::assert_snapshot!("alias_wrapped_unknown_parent", outcome.text);
    let outcome = project.call("bernstein_cost", json!({})).await;
    insta::assert_snapshot!("alias_cost", outcome.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn local_tool_errors() {
    let project = Project::new(config(false));
    let outcome = project
        .call("bernstein_task_capsule", json!({"task_id": "t1"}))
        .await;
    insta::assert_snapshot!("capsule_missing", outcome.text);
    let outcome = project
        .call("bernstein_run_status", json!({"run_id": "a:b"}))
        .await;
    insta::assert_snapshot!("run_status_unsafe_id", outcome.text);
    let outcome = project
        .call("bernstein_run", json!({"template": "administrative"}))
        .await;
    insta::assert_snapshot!("administrative_on_embedded", outcome.text);
    let outcome = project
        .call(
            "bernstein_run",
            json!({"template": "administrative", "parent_task_id": "p"}),
        )
        .await;
    insta::assert_snapshot!("administrative_with_parent", outcome.text);
    let outcome = project
        .call("load_skill", json!({"name": "no-such-skill"}))
        .await;
    insta::assert_snapshot!("skill_unknown", outcome.text);
    let outcome = project
        .call(
            "load_skill",
            json!({"name": "backend", "reference": "../../etc/passwd"}),
        )
        .await;
    assert_eq!(
        payload(&outcome)["error"],
        "reference \"../../etc/passwd\" not found for skill \"backend\""
    );
    let all = Project::new(bernstein_tools::ToolConfig {
        tier: bernstein_tools::Tier::All,
        ..config(false)
    });
    let outcome = all
        .call(
            "bernstein_scenario",
            json!({"action": "run", "scenario_id": "nope"}),
        )
        .await;
    insta::assert_snapshot!("scenario_unknown", outcome.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_summary_fails_the_task() {
    let project = Project::new(config(false));
    let id = task(&project, "t").await;
    let outcome = project
        .call(
            "bernstein_complete",
            json!({"task_id": id, "result_summary": "   "}),
        )
        .await;
    insta::assert_snapshot!(redact(&outcome.text, &id, "T1"));
    let failed = project
        .call("bernstein_status", json!({"status": "failed"}))
        .await;
    let body = payload(&failed);
    assert_eq!(body["counts"]["failed"], 1, "{}", failed.text);
    assert_eq!(body["tasks"][0]["id"], id.as_str());
    assert_eq!(body["tasks"][0]["status"], "failed");
}

/// A copy of the vector project `fixtures/vectors/<name>` served with the vector's audit key
/// (`None`: a remote backend, which holds no key); the store itself lives elsewhere.
fn vector_project(
    name: &str,
    with_key: bool,
) -> (
    tempfile::TempDir,
    tempfile::TempDir,
    bernstein_tools::ToolContext,
) {
    fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_tree(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    let vectors = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/vectors");
    let project = tempfile::tempdir().unwrap();
    copy_tree(&vectors.join(name), project.path());
    // The vector's writer is the generator's agent (Ed25519 seed 0x33 repeated); its card lets
    // the verifier bind the signatures, as a project's `.sdd/agents` does.
    let card_dir = project.path().join(".sdd/agents/worker-a");
    std::fs::create_dir_all(&card_dir).unwrap();
    let signer = bernstein_journal::identity::SigningIdentity::from_seed(&[0x33; 32]).unwrap();
    let card = json!({
        "agent_id": "agent:worker-a",
        "kid": "worker-a-key-1",
        "public_key_pem": signer.public_key_pem(),
    });
    std::fs::write(card_dir.join("card.json"), card.to_string()).unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let backend = if with_key {
        let raw = std::fs::read_to_string(vectors.join("_keys/audit.key")).unwrap();
        let key =
            bernstein_journal::key::AuditKey::from_master_bytes(raw.trim().as_bytes().to_vec());
        let store =
            bernstein_tasks::embedded::EmbeddedStore::open(store_dir.path(), Some(key.clone()))
                .unwrap();
        bernstein_tools::Backend::embedded(store, key)
    } else {
        let remote = bernstein_tasks::remote::RemoteBackend::new(
            bernstein_tasks::remote::RemoteConfig::new("http://127.0.0.1:9"),
        )
        .unwrap();
        bernstein_tools::Backend::remote(remote)
    };
    let ctx = bernstein_tools::ToolContext::new(project.path(), std::sync::Arc::new(backend));
    (project, store_dir, ctx)
}

#[tokio::test(flavor = "multi_thread")]
async fn lineage_verification_works() {
    let catalogue = bernstein_tools::Catalogue::new(&bernstein_tools::ToolConfig {
        tier: bernstein_tools::Tier::All,
        ..config(false)
    })
    .unwrap();
    let verify = |ctx: bernstein_tools::ToolContext| {
        let catalogue = &catalogue;
        async move {
            let outcome = catalogue
                .call(
                    &ctx,
                    "bernstein_verify_lineage",
                    json!({"artefact_path": "src/app.py"}),
                )
                .await;
            payload(&outcome)
        }
    };
    // The reference's own log verifies; the reference's answer is `{"ok": true, "reason": null}`.
    let (_project, _store, ctx) = vector_project("artifacts", true);
    assert_eq!(verify(ctx).await, json!({"ok": true, "reason": null}));
    // Its tampered copy does not, for the reason the reference's verifier gives.
    let (_project, _store, ctx) = vector_project("artifacts_tampered", true);
    assert_eq!(
        verify(ctx).await,
        json!({"ok": false, "reason": "non-canonical line bytes in log.jsonl"})
    );
    // Without the install key there is nothing to verify the operator HMACs with.
    let (_project, _store, ctx) = vector_project("artifacts", false);
    let body = verify(ctx).await;
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("verifying lineage needs the install audit key"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_lineage_log_verifies_and_the_alias_agrees() {
    let project = Project::new(bernstein_tools::ToolConfig {
        tier: bernstein_tools::Tier::All,
        ..config(false)
    });
    let outcome = project
        .call(
            "bernstein_verify_lineage",
            json!({"artefact_path": "src/app.py"}),
        )
        .await;
    insta::assert_snapshot!("verify_lineage_empty_log", outcome.text);
    let alias = project
        .call("verify_chain", json!({"artefact_path": "src/app.py"}))
        .await;
    assert_eq!(payload(&alias)["result"], payload(&outcome));
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_optional_text_counts_as_absent() {
    let project = Project::new(config(false));
    let id = task(&project, "t").await;
    let outcome = project
        .call("bernstein_cancel", json!({"task_id": id, "reason": ""}))
        .await;
    assert_eq!(payload(&outcome)["cancelled"], true, "{}", outcome.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn skills_are_served_as_text() {
    let project = Project::new(config(false));
    let index = project.call("load_skill", json!({})).await;
    // Checked against a committed file, not against the function that produces it.
    insta::assert_snapshot!("skill_index", index.text);
    let skills = payload(&index)["skills"].as_array().unwrap().clone();
    assert_eq!(skills.len(), 16);
    assert_eq!(skills[2]["name"], "backend");
    let backend = project
        .call(
            "load_skill",
            json!({"name": "backend", "script": "lint.sh"}),
        )
        .await;
    let body = payload(&backend);
    assert_eq!(
        body["available_references"],
        json!([
            "python-conventions.md",
            "test-patterns.md",
            "error-handling.md"
        ])
    );
    assert!(
        body["script_content"]
            .as_str()
            .unwrap()
            .starts_with("#!/bin/sh")
    );
    assert_eq!(body["error"], Value::Null);
    assert_eq!(
        skills[2]["content_hash"],
        bernstein_journal::crypto::sha256_hex(body["body"].as_str().unwrap().as_bytes())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sealed_capsule_is_read_and_verified() {
    use bernstein_journal::capsule::{ContextCapsule, SignedContextCapsule, write_capsule_record};
    use bernstein_journal::identity::SigningIdentity;

    let project = Project::new(config(false));
    let identity = SigningIdentity::from_seed(&[7u8; 32]).unwrap();
    let signed = SignedContextCapsule::seal(ContextCapsule::new("t1", "task-t1"), &identity);
    write_capsule_record(project.root(), &signed).unwrap();
    let outcome = project
        .call("bernstein_task_capsule", json!({"task_id": "t1"}))
        .await;
    let body = payload(&outcome);
    assert_eq!(body["capsule"]["task_id"], "t1", "{}", outcome.text);
    assert!(body.get("verify").is_none());
    let verified = project
        .call(
            "bernstein_context",
            json!({"task_id": "t1", "verify": true}),
        )
        .await;
    let report = &payload(&verified)["result"]["verify"];
    // The capsule was never bound to the audit chain, so it cannot verify; the report says why.
    assert_eq!(report["ok"], false, "{}", verified.text);
    assert_eq!(
        report["reason"],
        "capsule hash is not anchored in the audit chain (tampered or never recorded)"
    );
    assert_eq!(report["is_mock"], false);
}

/// A firewall refusal, a gate refusal and a handler error keep their payload bytes but answer
/// `isError: true` and `_meter.ok: false`; a success stays `isError: false`, `ok: true`.
/// Before the fix every one of them read as a success.
#[tokio::test(flavor = "multi_thread")]
async fn refusals_and_errors_are_error_results() {
    let project = Project::new(config(true));
    let open = task(&project, "open task").await;
    let check = |outcome: &bernstein_tools::ToolOutcome, failed: bool| {
        let envelope: Value = serde_json::from_str(&outcome.text).unwrap();
        assert_eq!(outcome.is_error, failed, "{}", outcome.text);
        assert_eq!(envelope["_meter"]["ok"], !failed, "{}", outcome.text);
        assert_eq!(outcome.meter.as_ref().unwrap()["ok"], !failed);
    };
    let firewall = project
        .call("bernstein_approve", json!({"task_id": "../x"}))
        .await;
    check(&firewall, true);
    let gate = project
        .call("bernstein_approve", json!({"task_id": open}))
        .await;
    check(&gate, true);
    assert_eq!(payload(&gate)["error"], "task_not_awaiting_approval");
    let handler = project
        .call("bernstein_task_capsule", json!({"task_id": "t1"}))
        .await;
    check(&handler, true);
    let success = project.call("bernstein_status", json!({})).await;
    check(&success, false);
    // `load_skill` answers `"error": null` on success: not an error.
    let skill = project.call("load_skill", json!({"name": "backend"})).await;
    check(&skill, false);
}
