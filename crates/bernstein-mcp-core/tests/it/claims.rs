//! Claim receipts replay byte-identically under call anchoring: a refusal is signed over the
//! chain's state head (its newest entry that is not a call anchor), so the same backlog
//! snapshot, claimer and filter give the same receipt however many calls were anchored in
//! between, and in two identical copies of a project. Every receipt still verifies offline.

use bernstein_journal::claim::verify_claim_receipt_in_project;
use bernstein_mcp_core::Dispatcher;
use bernstein_protocol::pyjson::Value as PyValue;
use serde_json::{Value, json};

use crate::support::{Project, key, payload};

async fn claim(project: &Project, args: Value) -> Value {
    payload(&project.call("bernstein_claim", args).await)
}

fn verifies(project: &Project, receipt: &Value) {
    let wire = PyValue::parse(&receipt.to_string()).unwrap();
    let report =
        verify_claim_receipt_in_project(project.dir.path(), wire.as_object().unwrap(), key())
            .unwrap();
    assert!(report.ok(), "{:?}", report.findings);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_refused_claim_twice_gives_equal_receipts_with_calls_in_between() {
    let project = Project::new();
    project
        .call(
            "bernstein_run",
            json!({"goal": "backend work", "role": "backend"}),
        )
        .await;
    let refused_args = json!({"claimer_id": "w1", "role": "frontend"});
    let first = claim(&project, refused_args.clone()).await;
    assert_eq!(first["granted"], false, "{first}");
    for _ in 0..5 {
        project.call("bernstein_status", json!({})).await;
        project
            .call("bernstein_run_status", json!({"run_id": "task-none"}))
            .await;
    }
    let second = claim(&project, refused_args).await;
    assert_eq!(second, first);
    verifies(&project, &first);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_identical_project_copies_give_equal_refusals() {
    let source = Project::new();
    source
        .call(
            "bernstein_run",
            json!({"goal": "backend work", "role": "backend"}),
        )
        .await;
    // A first claim creates the claim-signing identity, which the copy then shares.
    claim(&source, json!({"claimer_id": "w0", "role": "nobody"})).await;
    let copy = Project::new();
    copy_tree(
        &source.dir.path().join(".sdd"),
        &copy.dir.path().join(".sdd"),
    );
    let copy = Project {
        dispatcher: Dispatcher::builder(copy.dir.path())
            .audit_key(key())
            .build()
            .unwrap(),
        ..copy
    };
    let args = json!({"claimer_id": "w1", "role": "frontend"});
    let a = claim(&source, args.clone()).await;
    let b = claim(&copy, args).await;
    assert_eq!(a["granted"], false, "{a}");
    assert_eq!(a, b);
    verifies(&source, &a);
    verifies(&copy, &b);

    // A grant binds its own task.claim_receipt event (the reference's verifier looks it up by
    // its prev_chain_digest), which follows the call's anchor: everything but the chain head
    // and what derives from it agrees, and both verify.
    let args = json!({"claimer_id": "w1", "role": "backend"});
    let a = claim(&source, args.clone()).await;
    let b = claim(&copy, args).await;
    assert_eq!(a["granted"], true, "{a}");
    for field in [
        "taskId",
        "backlogHead",
        "filterDigest",
        "claimerCardFingerprint",
    ] {
        assert_eq!(a[field], b[field], "{field}");
    }
    verifies(&source, &a);
    verifies(&copy, &b);
}

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
