//! Golden checks against the Bernstein 3.23 vectors in `fixtures/vectors/`: the transition
//! table and named sets (`lifecycle.json`) and the plan rendering hash (`plan/`, `plan_probe/`).

use std::path::PathBuf;

use bernstein_protocol::pyjson::{Object, Value};
use bernstein_tasks::TaskStatus;
use bernstein_tasks::lifecycle::{self, can_transition, set_values};
use bernstein_tasks::plan::{PlanContent, hash_mismatch_message};

fn fixture(relative: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/vectors")
        .join(relative);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    Value::parse(&text).unwrap_or_else(|e| panic!("parse {}: {e:?}", path.display()))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().expect("a string"))
        .collect()
}

fn lifecycle_vector() -> Object {
    fixture("lifecycle.json")
        .as_object()
        .expect("an object")
        .clone()
}

#[test]
fn statuses_are_the_reference_enum_in_order() {
    let vector = lifecycle_vector();
    let ours: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(ours, strings(vector.get("statuses").unwrap()));
}

#[test]
fn every_status_pair_matches_the_transition_table() {
    let vector = lifecycle_vector();
    let legal: Vec<(&str, &str)> = vector
        .get("transitions")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| {
            let pair = strings(pair);
            assert_eq!(pair.len(), 2);
            (pair[0], pair[1])
        })
        .collect();
    let mut checked = 0;
    for from in TaskStatus::ALL {
        for to in TaskStatus::ALL {
            let expect = legal.contains(&(from.as_str(), to.as_str()));
            assert_eq!(can_transition(from, to), expect, "{from} -> {to}");
            assert_eq!(
                lifecycle::transition("t-1", from, to).is_ok(),
                expect,
                "{from} -> {to}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 17 * 17);
    assert_eq!(lifecycle::transitions().count(), legal.len());
}

#[test]
fn outgoing_lists_match_the_vector() {
    let vector = lifecycle_vector();
    let outgoing = vector.get("outgoing").unwrap().as_object().unwrap();
    assert_eq!(outgoing.len(), 17);
    for (status, targets) in outgoing.iter() {
        let status = TaskStatus::parse(status).expect("a known status");
        assert_eq!(set_values(status.outgoing()), strings(targets), "{status}");
    }
}

#[test]
fn named_sets_match_the_vector() {
    let vector = lifecycle_vector();
    let sets: [(&str, &[TaskStatus]); 12] = [
        (
            "APPROVABLE_TASK_STATUSES",
            lifecycle::APPROVABLE_TASK_STATUSES,
        ),
        (
            "PLAN_GATED_TASK_STATUSES",
            lifecycle::PLAN_GATED_TASK_STATUSES,
        ),
        (
            "WORKER_COMPLETABLE_TASK_STATUSES",
            lifecycle::WORKER_COMPLETABLE_TASK_STATUSES,
        ),
        ("TERMINAL_TASK_STATUSES", lifecycle::TERMINAL_TASK_STATUSES),
        ("LANE_FINISHED_STATUSES", lifecycle::LANE_FINISHED_STATUSES),
        (
            "SUCCESSFUL_TASK_STATUSES",
            lifecycle::SUCCESSFUL_TASK_STATUSES,
        ),
        (
            "UNSUCCESSFUL_TERMINAL_STATUSES",
            lifecycle::UNSUCCESSFUL_TERMINAL_STATUSES,
        ),
        (
            "DEPENDENCY_BLOCKED_STATUSES",
            lifecycle::DEPENDENCY_BLOCKED_STATUSES,
        ),
        (
            "IN_FLIGHT_TASK_STATUSES",
            lifecycle::IN_FLIGHT_TASK_STATUSES,
        ),
        (
            "mcp_bernstein_cancel_cancellable",
            lifecycle::MCP_CANCELLABLE_STATUSES,
        ),
        (
            "route_and_store_cancellable",
            lifecycle::SERVER_CANCELLABLE_STATUSES,
        ),
        // The FSM-terminal set is derived, not stated: recompute it from the vector's table.
        ("TERMINAL_TASK_STATUSES", &terminal_from_outgoing(&vector)),
    ];
    for (name, set) in sets {
        assert_eq!(
            set_values(set),
            strings(vector.get(name).unwrap()),
            "{name}"
        );
    }
}

fn terminal_from_outgoing(vector: &Object) -> Vec<TaskStatus> {
    let outgoing = vector.get("outgoing").unwrap().as_object().unwrap();
    let mut terminal: Vec<TaskStatus> = outgoing
        .iter()
        .filter(|(_, targets)| targets.as_array().unwrap().is_empty())
        .map(|(status, _)| TaskStatus::parse(status).unwrap())
        .collect();
    terminal.sort_by_key(|s| s.as_str());
    terminal
}

#[test]
fn approval_targets_match_the_vector() {
    let vector = lifecycle_vector();
    let targets = vector
        .get("TASK_APPROVAL_TARGETS")
        .unwrap()
        .as_object()
        .unwrap();
    for status in TaskStatus::ALL {
        let expect = targets.get(status.as_str()).map(|v| v.as_str().unwrap());
        assert_eq!(
            lifecycle::approval_target(status).map(TaskStatus::as_str),
            expect,
            "{status}"
        );
    }
}

#[test]
fn stored_plan_hash_matches_the_reference() {
    let expected = fixture("plan/expected.json");
    let expected = expected.as_object().unwrap();
    let stored = fixture("plan/.sdd/runtime/plans/0123456789ab.json");
    let content = PlanContent::from_stored(&stored).unwrap();
    let want_hash = expected.get("rendering_hash").unwrap().as_str().unwrap();
    assert_eq!(
        content.rendering_preimage(&Default::default()),
        expected
            .get("rendering_hash_preimage")
            .unwrap()
            .as_str()
            .unwrap()
    );
    assert_eq!(content.rendering_hash(), want_hash);
    assert_eq!(
        stored
            .as_object()
            .unwrap()
            .get("rendering_hash")
            .unwrap()
            .as_str(),
        Some(want_hash)
    );
}

#[test]
fn edited_goal_gives_the_reference_mismatch_detail() {
    let expected = fixture("plan/expected.json");
    let expected = expected.as_object().unwrap();
    let stored = fixture("plan/.sdd/runtime/plans/0123456789ab.json");
    let mut content = PlanContent::from_stored(&stored).unwrap();
    let stored_hash = content.rendering_hash();
    // The generator edits the goal of the loaded plan and asks the store to verify it.
    content.goal = "Ship v3".to_owned();
    let message = hash_mismatch_message(&content.id, &stored_hash, &content.rendering_hash());
    for key in ["mismatch_error_after_goal_edit", "http_409_detail"] {
        assert_eq!(
            Some(message.as_str()),
            expected.get(key).unwrap().as_str(),
            "{key}"
        );
    }
}

#[test]
fn live_server_plans_hash_to_their_stored_digest() {
    // Plans written by a real plan-mode task server, with task ids out of order on disk.
    for id in ["86fb98ac29f1", "2404f1031889"] {
        let stored = fixture(&format!("plan_probe/.sdd/runtime/plans/{id}.json"));
        let content = PlanContent::from_stored(&stored).unwrap();
        assert_eq!(content.id, id);
        assert_eq!(
            Some(content.rendering_hash().as_str()),
            stored
                .as_object()
                .unwrap()
                .get("rendering_hash")
                .unwrap()
                .as_str(),
            "{id}"
        );
    }
}

#[test]
fn row_keys_are_task_response_keys() {
    use bernstein_tasks::{NewTask, Task, TaskId};
    // Every key our row carries is spelled as on a real task-server row, and carries the same
    // JSON kind of value for an equivalent freshly created task.
    let transcript = fixture("http/transcript.json");
    let created = transcript.as_array().unwrap()[0]
        .as_object()
        .unwrap()
        .get("response")
        .unwrap()
        .as_object()
        .unwrap()
        .get("json")
        .unwrap()
        .as_object()
        .unwrap()
        .clone();
    let mut request = NewTask::new("Add auth", "Add auth to API");
    request.role = "backend".into();
    let task = Task::new(TaskId::parse("3ed7631685aa").unwrap(), request, 1.5).unwrap();
    let kind = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Float(_) => "float",
        Value::Str(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    };
    for (key, ours) in task.to_object().iter() {
        let theirs = created
            .get(key)
            .unwrap_or_else(|| panic!("{key} is not a TaskResponse field"));
        assert_eq!(kind(ours), kind(theirs), "{key}");
        if !matches!(key, "created_at") {
            assert_eq!(ours, theirs, "{key}");
        }
    }
}
