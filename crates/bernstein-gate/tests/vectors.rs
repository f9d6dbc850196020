//! The gate refusals against the payloads Bernstein 3.23 produced for the same inputs
//! (`fixtures/vectors/lifecycle.json`), byte for byte once serialised the way the vector was.

use std::path::PathBuf;

use bernstein_gate::approval::{approval_refusal, completion_refusal};
use bernstein_protocol::pyjson::{Dialect, Object, Value};

fn lifecycle_vector() -> Object {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/vectors/lifecycle.json");
    let text = std::fs::read_to_string(&path).unwrap();
    Value::parse(&text).unwrap().as_object().unwrap().clone()
}

fn check(vector_key: &str, ours: Object) {
    let vector = lifecycle_vector();
    let theirs = vector.get(vector_key).unwrap();
    // The vector was written with sorted keys, so compare in that spelling; the key order the
    // tools emit is checked separately below.
    assert_eq!(
        Value::Object(ours).dumps(Dialect::PY_SPACED),
        theirs.dumps(Dialect::PY_SPACED),
        "{vector_key}"
    );
}

#[test]
fn approval_refusal_for_in_progress() {
    check(
        "approval_refusal_in_progress",
        approval_refusal("t-42", "in_progress"),
    );
}

#[test]
fn approval_refusal_for_planned() {
    check(
        "approval_refusal_planned",
        approval_refusal("t-42", "planned"),
    );
}

#[test]
fn completion_refusal_for_waiting_for_subtasks() {
    check(
        "completion_refusal_waiting",
        completion_refusal("t-42", "waiting_for_subtasks"),
    );
}

#[test]
fn key_order_is_the_reference_dict_order() {
    let approval: Vec<String> = approval_refusal("t", "open")
        .keys()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        approval,
        [
            "error",
            "task_id",
            "current_status",
            "approvable_statuses",
            "message",
            "hint"
        ]
    );
    let completion: Vec<String> = completion_refusal("t", "done")
        .keys()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        completion,
        [
            "error",
            "task_id",
            "current_status",
            "completable_statuses",
            "message",
            "hint"
        ]
    );
}
