//! The approval gate and the completion gate (`mcp/approval_gate.py`).
//!
//! Both verbs read the task first and decide from its reported status which request, if any, is
//! sent. They fail in different directions, so they are two gates:
//!
//! * *Is there an approval to grant?* Only a task holding a finished result for sign-off
//!   (`pending_approval`) has one. A `planned` task waits on its plan's decision, so the refusal
//!   names the plan route instead of the generic advice.
//! * *Is this the caller's work to finish?* Only `open`, `claimed` and `in_progress`. A parent
//!   waiting on subtasks, an orphaned task and a result awaiting sign-off are refused, because
//!   completing them marks work done that the caller did not do.
//!
//! The sets come from [`bernstein_tasks::lifecycle`], so the gates cannot drift from the state
//! machine. An empty status is reported as `unknown` and refused (fail closed).
//!
//! The gates do not make the read and the write atomic: the task server decides whether the
//! completion lands on whatever the task has become in between.

use bernstein_protocol::pyjson::{Object, Value};
use bernstein_tasks::TaskStatus;
use bernstein_tasks::lifecycle::{
    APPROVABLE_TASK_STATUSES, PLAN_GATED_TASK_STATUSES, WORKER_COMPLETABLE_TASK_STATUSES,
    set_contains, set_values,
};

use crate::reported;

/// The `error` code of an approval refusal.
pub const APPROVAL_REFUSAL_ERROR: &str = "task_not_awaiting_approval";

/// The `error` code of a completion refusal.
pub const COMPLETION_REFUSAL_ERROR: &str = "task_not_completable";

/// The `approval` value of a granted sign-off.
pub const APPROVAL_GRANTED: &str = "completion_signed_off";

/// The hint of an approval refusal for a task held by plan mode.
pub const PLAN_GATE_HINT: &str = "This task is held by plan mode and is released when the plan \
    it belongs to is approved, not one task at a time. Decide the plan instead: \
    POST /plans/{plan_id}/approve, or 'bernstein plan approve <plan_id>'. Approving the task on \
    its own would start the work while the plan is still undecided, so a later rejection of the \
    plan would have nothing left to cancel.";

/// The hint of every other approval refusal.
pub const APPROVAL_HINT: &str = "To finish work you are executing, use bernstein_complete. To \
    report that the task is stuck, post to the task mailbox with bernstein_post_message. To \
    abandon the work, cancel the task (bernstein task cancel <task_id>).";

/// The hint of a completion refusal.
pub const COMPLETION_HINT: &str = "A parent in 'waiting_for_subtasks' completes when its \
    subtasks do. An 'orphaned' task belongs to crash recovery. To report what you found without \
    claiming the work is finished, post to the task mailbox with bernstein_post_message.";

/// A gate's refusal: the payload the tool answers with instead of sending a state-changing
/// request.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    payload: Object,
}

impl Refusal {
    pub(crate) fn new(payload: Object) -> Refusal {
        Refusal { payload }
    }

    /// The payload, in the reference's key order.
    pub fn payload(&self) -> &Object {
        &self.payload
    }

    /// The payload, by value.
    pub fn into_payload(self) -> Object {
        self.payload
    }
}

/// Whether an approval is defined for the reported status.
pub fn is_approvable(status: &str) -> bool {
    set_contains(APPROVABLE_TASK_STATUSES, status)
}

/// Whether the reported status waits on a decision the plan gate owns.
pub fn is_plan_gated(status: &str) -> bool {
    set_contains(PLAN_GATED_TASK_STATUSES, status)
}

/// Whether a worker may report its own completion from the reported status.
pub fn is_worker_completable(status: &str) -> bool {
    set_contains(WORKER_COMPLETABLE_TASK_STATUSES, status)
}

/// The approval gate: `Ok(status)` when task `task_id`, reported in `reported_status` (the task
/// server's `status` field, empty when it had none), holds a result awaiting sign-off and the
/// completion may be posted; otherwise the refusal to answer with.
pub fn approval_gate(task_id: &str, reported_status: &str) -> Result<TaskStatus, Refusal> {
    match TaskStatus::parse(reported_status) {
        Some(status) if is_approvable(reported_status) => Ok(status),
        _ => Err(Refusal::new(approval_refusal(task_id, reported_status))),
    }
}

/// The completion gate: `Ok(status)` when a worker may complete task `task_id` from
/// `reported_status`; otherwise the refusal to answer with.
pub fn completion_gate(task_id: &str, reported_status: &str) -> Result<TaskStatus, Refusal> {
    match TaskStatus::parse(reported_status) {
        Some(status) if is_worker_completable(reported_status) => Ok(status),
        _ => Err(Refusal::new(completion_refusal(task_id, reported_status))),
    }
}

/// The `task_not_awaiting_approval` payload: `error`, `task_id`, `current_status`,
/// `approvable_statuses`, `message`, `hint`.
pub fn approval_refusal(task_id: &str, reported_status: &str) -> Object {
    let status = reported(reported_status);
    let approvable = set_values(APPROVABLE_TASK_STATUSES);
    let plan_gated = is_plan_gated(status);
    let message = if plan_gated {
        format!(
            "Task {task_id} is in status '{status}' and is waiting on a plan decision, not on a \
             per-task approval. bernstein_approve does not release a task from plan mode."
        )
    } else {
        format!(
            "Task {task_id} is in status '{status}'. bernstein_approve only acts on a task \
             holding a finished result for sign-off ({}), and never forces another state \
             forward.",
            approvable.join(", ")
        )
    };
    Object::new()
        .with("error", APPROVAL_REFUSAL_ERROR)
        .with("task_id", task_id)
        .with("current_status", status)
        .with("approvable_statuses", approvable)
        .with("message", message)
        .with(
            "hint",
            if plan_gated {
                PLAN_GATE_HINT
            } else {
                APPROVAL_HINT
            },
        )
}

/// The `task_not_completable` payload: `error`, `task_id`, `current_status`,
/// `completable_statuses`, `message`, `hint`.
pub fn completion_refusal(task_id: &str, reported_status: &str) -> Object {
    let status = reported(reported_status);
    let completable = set_values(WORKER_COMPLETABLE_TASK_STATUSES);
    let message = format!(
        "Task {task_id} is in status '{status}'. bernstein_complete reports the result of work \
         you are executing ({}), and does not finish a task that is waiting on its subtasks, \
         whose worker is gone, or whose result is already awaiting a decision.",
        completable.join(", ")
    );
    Object::new()
        .with("error", COMPLETION_REFUSAL_ERROR)
        .with("task_id", task_id)
        .with("current_status", status)
        .with("completable_statuses", completable)
        .with("message", message)
        .with("hint", COMPLETION_HINT)
}

/// The stdio answer after a granted approval: `task_id`, `status`, `approval`, `approved_from`,
/// `result_summary`. `task_id`, `status` and `result_summary` are taken from the task row the
/// completion returned; `approved_from` is the status the gate read.
pub fn approval_granted(
    task_id: impl Into<Value>,
    status: impl Into<Value>,
    approved_from: &str,
    result_summary: impl Into<Value>,
) -> Object {
    Object::new()
        .with("task_id", task_id)
        .with("status", status)
        .with("approval", APPROVAL_GRANTED)
        .with("approved_from", approved_from)
        .with("result_summary", result_summary)
}

/// The stdio answer after a completion: `task_id`, `status`, `result_summary`, taken from the
/// task row the completion returned.
pub fn completion_done(
    task_id: impl Into<Value>,
    status: impl Into<Value>,
    result_summary: impl Into<Value>,
) -> Object {
    Object::new()
        .with("task_id", task_id)
        .with("status", status)
        .with("result_summary", result_summary)
}

#[cfg(test)]
mod tests {
    use bernstein_protocol::pyjson::Dialect;

    use super::*;

    fn row(payload: &Object) -> String {
        Value::Object(payload.clone()).dumps(Dialect::PY_ROW)
    }

    #[test]
    fn approval_passes_only_pending_approval() {
        for status in TaskStatus::ALL {
            let decision = approval_gate("t-42", status.as_str());
            if status == TaskStatus::PendingApproval {
                assert_eq!(decision, Ok(status));
            } else {
                let refusal = decision.unwrap_err();
                assert_eq!(
                    refusal.payload().get("current_status"),
                    Some(&Value::from(status.as_str()))
                );
            }
        }
    }

    /// The tool layer takes a refusal's payload by value; it must be the payload the gate
    /// built, not an empty object.
    #[test]
    fn a_refusal_hands_over_the_payload_it_holds() {
        let refusal = approval_gate("t-42", "open").unwrap_err();
        let held = refusal.payload().clone();
        assert_eq!(held.get("current_status"), Some(&Value::from("open")));
        assert_eq!(refusal.into_payload(), held);
    }

    #[test]
    fn completion_passes_only_worker_held_statuses() {
        for status in TaskStatus::ALL {
            let expect = matches!(
                status,
                TaskStatus::Open | TaskStatus::Claimed | TaskStatus::InProgress
            );
            assert_eq!(
                completion_gate("t-42", status.as_str()).is_ok(),
                expect,
                "{status}"
            );
        }
    }

    #[test]
    fn unreadable_status_fails_closed_as_unknown() {
        for status in ["", "unknown", "PENDING_APPROVAL", "Open"] {
            let approval = approval_gate("t-42", status).unwrap_err();
            let completion = completion_gate("t-42", status).unwrap_err();
            let shown = if status.is_empty() { "unknown" } else { status };
            for refusal in [approval, completion] {
                assert_eq!(
                    refusal.payload().get("current_status"),
                    Some(&Value::from(shown))
                );
            }
        }
    }

    #[test]
    fn approval_refusal_in_progress() {
        insta::assert_snapshot!(row(&approval_refusal("t-42", "in_progress")));
    }

    #[test]
    fn approval_refusal_planned() {
        insta::assert_snapshot!(row(&approval_refusal("t-42", "planned")));
    }

    #[test]
    fn approval_refusal_without_status() {
        insta::assert_snapshot!(row(&approval_refusal("t-42", "")));
    }

    #[test]
    fn completion_refusal_waiting_for_subtasks() {
        insta::assert_snapshot!(row(&completion_refusal("t-42", "waiting_for_subtasks")));
    }

    #[test]
    fn completion_refusal_pending_approval() {
        insta::assert_snapshot!(row(&completion_refusal("cde2edf2e338", "pending_approval")));
    }

    #[test]
    fn success_payloads() {
        insta::assert_snapshot!(format!(
            "{}\n{}",
            row(&approval_granted(
                "t-42",
                "done",
                "pending_approval",
                "Approved via MCP"
            )),
            row(&completion_done("t-42", "done", Value::Null)),
        ));
    }
}
