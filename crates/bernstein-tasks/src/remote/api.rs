//! [`TaskServerClient`]: one method per task-server route the MCP tools call, returning the
//! server's JSON as it came.
//!
//! Several tools hand the server's answer to the caller verbatim (claim receipts, mailbox
//! entries, artifact records, full task rows, administrative runs), and those bodies carry
//! hashes and signatures over their exact content. So these methods return the parsed
//! [`Value`] untouched: unbounded integers, Python float spellings and key order all survive a
//! round trip through [`Value::dumps`]. [`super::RemoteBackend`] builds the typed
//! [`crate::TaskBackend`] on top of them.
//!
//! Request bodies are written the way httpx writes `json=`: insertion order, compact, UTF-8.
//! Every id that goes into a path is a [`TaskId`] (or checked against the same alphabet) and is
//! percent-encoded on top, so no request can address a path the caller did not mean.

use std::time::Duration;

use bernstein_protocol::pyjson::{Object, Value};
use http_body_util::BodyExt;
use hyper::header::{HeaderName, HeaderValue};

use super::client::{Call, HttpClient};
use super::endpoint::Target;
use super::failure::RemoteFailure;
use super::sse::{EventScanner, LineSplitter, LineTooLong};
use crate::lifecycle::TaskStatus;
use crate::model::TaskId;

/// The agent-identity header `POST /tasks/{id}/artifacts` checks against the claim holder.
pub const AGENT_ID_HEADER: &str = "x-bernstein-agent-id";

/// Longest role accepted by [`TaskServerClient::subscribe`] (the route's own limit).
const MAX_ROLE_CHARS: usize = 64;

/// W3C trace-context headers to forward with requests (`traceparent`, `tracestate`,
/// `baggage`), as the reference forwards the ones it finds in a tool call's `_meta`. Empty
/// values are not sent.
pub use bernstein_protocol::trace::TraceContext;

/// How a [`TaskServerClient::subscribe`] wait ended without an error.
#[derive(Debug, Clone, PartialEq)]
pub enum SubscribeOutcome {
    /// The first `task.created` notification's data, as the server sent it.
    Notification(Value),
    /// The deadline passed first (the reference's `{"notifications":[],"timed_out":true}`).
    TimedOut,
    /// The server closed the stream before any notification (the reference's `Task event
    /// stream ended before a notification`).
    StreamEnded,
}

/// The raw HTTP API of one Bernstein task server.
///
/// Cheap to clone: clones share the connection machinery. Needs a Tokio runtime to run its
/// futures.
#[derive(Debug, Clone)]
pub struct TaskServerClient {
    http: HttpClient,
    trace: Vec<(HeaderName, HeaderValue)>,
}

impl TaskServerClient {
    pub(crate) fn from_http(http: HttpClient) -> TaskServerClient {
        TaskServerClient {
            http,
            trace: Vec::new(),
        }
    }

    /// The task server's base URL, normalised (no trailing slash).
    pub fn base_url(&self) -> String {
        self.http.base_url()
    }

    /// The deadline of each request.
    pub fn timeout(&self) -> Duration {
        self.http.timeout()
    }

    /// Whether an `Authorization: Bearer` header is sent.
    pub fn bearer_configured(&self) -> bool {
        self.http.bearer_configured()
    }

    /// A clone that also sends `trace`'s headers on every request. Fails, without sending
    /// anything, when a value cannot be an HTTP header (control characters, non-ASCII).
    pub fn with_trace(&self, trace: &TraceContext) -> Result<TaskServerClient, RemoteFailure> {
        let mut headers = Vec::new();
        for (name, value) in trace.fields() {
            let value = HeaderValue::from_str(value).map_err(|_| {
                RemoteFailure::invalid_argument(format!(
                    "the {name} value cannot be sent as an HTTP header (it must be visible ASCII)"
                ))
            })?;
            headers.push((HeaderName::from_static(name), value));
        }
        Ok(TaskServerClient {
            http: self.http.clone(),
            trace: headers,
        })
    }

    async fn json(&self, call: Call) -> Result<Value, RemoteFailure> {
        let mut call = call;
        for (name, value) in &self.trace {
            call = call.header(name.clone(), value.clone());
        }
        self.http.send_json(call).await
    }

    fn tasks(id: &TaskId) -> Target {
        Target::route("tasks").segment(id.as_str())
    }

    /// `POST /tasks` with `body` (a `TaskCreate`); the created task row.
    pub async fn create_task(&self, body: &Object) -> Result<Value, RemoteFailure> {
        self.json(Call::post(
            Target::route("tasks"),
            Some(Value::Object(body.clone())),
        ))
        .await
    }

    /// `POST /tasks/self-create` with `body` (a `TaskSelfCreate`, which names its
    /// `parent_task_id`); the created subtask row.
    pub async fn create_subtask(&self, body: &Object) -> Result<Value, RemoteFailure> {
        self.json(Call::post(
            Target::route("tasks").then("self-create"),
            Some(Value::Object(body.clone())),
        ))
        .await
    }

    /// `GET /tasks[?status=]`: the legacy flat list of task rows (the server caps it at 500
    /// rows; use [`TaskServerClient::list_tasks_page`] to read more).
    pub async fn list_tasks(&self, status: Option<TaskStatus>) -> Result<Value, RemoteFailure> {
        let target =
            Target::route("tasks").query_opt("status", status.map(|s| s.as_str().to_owned()));
        self.json(Call::get(target)).await
    }

    /// `GET /tasks?[status=&]limit=&offset=`: the paginated envelope
    /// `{tasks, total, limit, offset}` (the server clamps `limit` to 1..=500).
    pub async fn list_tasks_page(
        &self,
        status: Option<TaskStatus>,
        limit: usize,
        offset: usize,
    ) -> Result<Value, RemoteFailure> {
        let target = Target::route("tasks")
            .query_opt("status", status.map(|s| s.as_str().to_owned()))
            .query("limit", limit.to_string())
            .query("offset", offset.to_string());
        self.json(Call::get(target)).await
    }

    /// `GET /tasks/{id}`: the full task row.
    pub async fn get_task(&self, id: &TaskId) -> Result<Value, RemoteFailure> {
        self.json(Call::get(Self::tasks(id))).await
    }

    /// `POST /tasks/{id}/claim?expected_version=&claimed_by_session=` (each query parameter only
    /// when given); the claimed task row.
    pub async fn claim_task(
        &self,
        id: &TaskId,
        expected_version: Option<u64>,
        claimed_by_session: Option<&str>,
    ) -> Result<Value, RemoteFailure> {
        let target = Self::tasks(id)
            .then("claim")
            .query_opt("expected_version", expected_version.map(|v| v.to_string()))
            .query_opt("claimed_by_session", claimed_by_session);
        self.json(Call::post(target, None)).await
    }

    /// `POST /tasks/{id}/complete {"result_summary"}`; the completed task row.
    pub async fn complete_task(
        &self,
        id: &TaskId,
        result_summary: &str,
    ) -> Result<Value, RemoteFailure> {
        let body = Object::new().with("result_summary", result_summary);
        self.json(Call::post(
            Self::tasks(id).then("complete"),
            Some(Value::Object(body)),
        ))
        .await
    }

    /// `POST /tasks/{id}/fail {"reason"}`; the failed task row.
    pub async fn fail_task(&self, id: &TaskId, reason: &str) -> Result<Value, RemoteFailure> {
        let body = Object::new().with("reason", reason);
        self.json(Call::post(
            Self::tasks(id).then("fail"),
            Some(Value::Object(body)),
        ))
        .await
    }

    /// `POST /tasks/{id}/cancel {"reason"}`; the cancelled root task row (descendants are
    /// cancelled by the server's cascade).
    pub async fn cancel_task(&self, id: &TaskId, reason: &str) -> Result<Value, RemoteFailure> {
        let body = Object::new().with("reason", reason);
        self.json(Call::post(
            Self::tasks(id).then("cancel"),
            Some(Value::Object(body)),
        ))
        .await
    }

    /// `GET /tasks/{id}/progress`: the task's progress vector.
    pub async fn task_progress(&self, id: &TaskId) -> Result<Value, RemoteFailure> {
        self.json(Call::get(Self::tasks(id).then("progress"))).await
    }

    /// `POST /tasks/claim-receipt` with `body` (`{claimer_id, completed_ids, …}`); the signed
    /// claim receipt, granted or refused.
    pub async fn claim_receipt(&self, body: &Object) -> Result<Value, RemoteFailure> {
        self.json(Call::post(
            Target::route("tasks").then("claim-receipt"),
            Some(Value::Object(body.clone())),
        ))
        .await
    }

    /// `POST /tasks/{id}/messages` with `body` (`{sender, kind, body, …}`); the signed mailbox
    /// entry.
    pub async fn post_message(&self, id: &TaskId, body: &Object) -> Result<Value, RemoteFailure> {
        self.json(Call::post(
            Self::tasks(id).then("messages"),
            Some(Value::Object(body.clone())),
        ))
        .await
    }

    /// `GET /tasks/{id}/messages[?since_seq=]`: the task's mailbox entries.
    pub async fn list_messages(
        &self,
        id: &TaskId,
        since_seq: Option<u64>,
    ) -> Result<Value, RemoteFailure> {
        let target = Self::tasks(id)
            .then("messages")
            .query_opt("since_seq", since_seq.map(|s| s.to_string()));
        self.json(Call::get(target)).await
    }

    /// `POST /tasks/{id}/artifacts` with `body`, sent as agent `agent_id` (the
    /// [`AGENT_ID_HEADER`] the server checks against the claim holder); the artifact record.
    pub async fn post_artifact(
        &self,
        id: &TaskId,
        agent_id: &str,
        body: &Object,
    ) -> Result<Value, RemoteFailure> {
        let agent = HeaderValue::from_str(agent_id).map_err(|_| {
            RemoteFailure::invalid_argument(format!(
                "the poster {agent_id:?} cannot be sent as the {AGENT_ID_HEADER} header (it \
                 must be visible ASCII)"
            ))
        })?;
        let call = Call::post(
            Self::tasks(id).then("artifacts"),
            Some(Value::Object(body.clone())),
        )
        .header(HeaderName::from_static(AGENT_ID_HEADER), agent);
        self.json(call).await
    }

    /// `GET /tasks/{id}/artifacts`: the task's artifact records.
    pub async fn list_artifacts(&self, id: &TaskId) -> Result<Value, RemoteFailure> {
        self.json(Call::get(Self::tasks(id).then("artifacts")))
            .await
    }

    /// `GET /status`: the server's status document (task counts, `per_role`,
    /// `total_cost_usd`, and much more the MCP layer does not read).
    pub async fn status(&self) -> Result<Value, RemoteFailure> {
        self.json(Call::get(Target::route("status"))).await
    }

    /// `GET /costs/current`: the current spend snapshot.
    pub async fn costs_current(&self) -> Result<Value, RemoteFailure> {
        self.json(Call::get(Target::route("costs").then("current")))
            .await
    }

    /// `GET /plans[?status=]`: every plan document. A server without plan mode answers 404
    /// `Plan mode is not enabled on this server`.
    pub async fn list_plans(&self, status: Option<&str>) -> Result<Value, RemoteFailure> {
        let target = Target::route("plans").query_opt("status", status);
        self.json(Call::get(target)).await
    }

    /// `GET /plans/{plan_id}`: one plan document.
    pub async fn get_plan(&self, plan_id: &str) -> Result<Value, RemoteFailure> {
        let target = Target::route("plans").segment(checked_id("plan id", plan_id)?);
        self.json(Call::get(target)).await
    }

    /// `POST /plans/{plan_id}/approve {"reason"}`: `{plan_id, status, tasks_promoted,
    /// promoted_task_ids}`.
    pub async fn approve_plan(&self, plan_id: &str, reason: &str) -> Result<Value, RemoteFailure> {
        self.decide_plan(plan_id, "approve", reason).await
    }

    /// `POST /plans/{plan_id}/reject {"reason"}`: `{plan_id, status, tasks_cancelled,
    /// cancelled_task_ids}`.
    pub async fn reject_plan(&self, plan_id: &str, reason: &str) -> Result<Value, RemoteFailure> {
        self.decide_plan(plan_id, "reject", reason).await
    }

    async fn decide_plan(
        &self,
        plan_id: &str,
        decision: &'static str,
        reason: &str,
    ) -> Result<Value, RemoteFailure> {
        let target = Target::route("plans")
            .segment(checked_id("plan id", plan_id)?)
            .then(decision);
        let body = Object::new().with("reason", reason);
        self.json(Call::post(target, Some(Value::Object(body))))
            .await
    }

    /// `POST /administrative-runs {"goal"}`: the new administrative run (`runId`
    /// `admin-<32 hex>`, `chainHead`, `receiptHash`, …).
    pub async fn create_administrative_run(&self, goal: &str) -> Result<Value, RemoteFailure> {
        let body = Object::new().with("goal", goal);
        self.json(Call::post(
            Target::route("administrative-runs"),
            Some(Value::Object(body)),
        ))
        .await
    }

    /// `GET /administrative-runs/{run_id}`: the administrative run's status document.
    pub async fn get_administrative_run(&self, run_id: &str) -> Result<Value, RemoteFailure> {
        let target = Target::route("administrative-runs").segment(checked_id("run id", run_id)?);
        self.json(Call::get(target)).await
    }

    /// `GET /events/tasks?role=` (server-sent events): waits for the first `task.created`
    /// notification for `role`, for at most `deadline` in total (connecting included).
    ///
    /// The role must match `^[a-zA-Z0-9_-]{1,64}$`, as the route requires; it is checked before
    /// anything is sent. A refused status, a broken stream or a notification whose data is not
    /// JSON is a [`RemoteFailure`].
    pub async fn subscribe(
        &self,
        role: &str,
        deadline: Duration,
    ) -> Result<SubscribeOutcome, RemoteFailure> {
        let role_ok = !role.is_empty()
            && role.chars().count() <= MAX_ROLE_CHARS
            && role
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !role_ok {
            return Err(RemoteFailure::invalid_argument(format!(
                "role {role:?} must be 1 to 64 characters from A-Z, a-z, 0-9, '_' and '-'"
            )));
        }
        let mut call = Call::get(Target::route("events").then("tasks").query("role", role));
        for (name, value) in &self.trace {
            call = call.header(name.clone(), value.clone());
        }
        match tokio::time::timeout(deadline, self.read_first_notification(call)).await {
            Ok(result) => result,
            Err(_) => Ok(SubscribeOutcome::TimedOut),
        }
    }

    async fn read_first_notification(&self, call: Call) -> Result<SubscribeOutcome, RemoteFailure> {
        let method = call.method.clone();
        let (url, response) = self.http.open_stream(call).await?;
        let status = super::client::status_line(&response);
        let mut body = response.into_body();
        let mut splitter = LineSplitter::default();
        let mut scanner = EventScanner::default();
        let too_long = |_: LineTooLong| {
            RemoteFailure::malformed(
                method.as_str(),
                &url,
                status.clone(),
                format!(
                    "an event-stream line is longer than {} bytes",
                    super::sse::MAX_LINE_BYTES
                ),
            )
        };
        let found = |result: Result<Value, _>| match result {
            Ok(value) => Ok(SubscribeOutcome::Notification(value)),
            Err(e) => Err(RemoteFailure::malformed(
                method.as_str(),
                &url,
                status.clone(),
                format!("the task.created data is not JSON: {e}"),
            )),
        };
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                RemoteFailure::transport(
                    method.as_str(),
                    &url,
                    format!("the event stream broke: {e}"),
                )
            })?;
            let Ok(data) = frame.into_data() else {
                // Trailers carry no events.
                continue;
            };
            for line in splitter.push(&data).map_err(too_long)? {
                if let Some(result) = scanner.line(&line) {
                    return found(result);
                }
            }
        }
        if let Some(line) = splitter.finish()
            && let Some(result) = scanner.line(&line)
        {
            return found(result);
        }
        Ok(SubscribeOutcome::StreamEnded)
    }
}

/// Checks a plan or run id against the task-id alphabet (`^[A-Za-z0-9_.:-]{1,256}$`, not `.` or
/// `..`) before it becomes a path segment.
fn checked_id<'a>(what: &str, id: &'a str) -> Result<&'a str, RemoteFailure> {
    match TaskId::parse(id) {
        Ok(_) => Ok(id),
        Err(crate::Error::InvalidTaskId { reason, .. }) => Err(RemoteFailure::invalid_argument(
            format!("invalid {what} {id:?}: {reason}"),
        )),
        Err(other) => Err(RemoteFailure::invalid_argument(format!(
            "invalid {what} {id:?}: {other}"
        ))),
    }
}
