//! The remote task backend: an HTTP/1.1 client for a running Bernstein task server
//! (`bernstein serve`).
//!
//! Two layers:
//!
//! * [`TaskServerClient`] has one method per route the MCP tools call and returns the server's
//!   JSON untouched ([`bernstein_protocol::pyjson::Value`]: unbounded integers, Python float
//!   spellings and key order survive), for tools that hand the server's answer on verbatim
//!   (claim receipts, mailbox entries, artifact records, full task rows, administrative runs,
//!   the `GET /status` document) and for routes the trait has no operation for (messages,
//!   artifacts, claim receipts, progress, costs, the `task.created` event stream,
//!   administrative runs). Its failures are [`RemoteFailure`] values that keep the URL, the
//!   status line, the server's `detail` and httpx's wording of the error
//!   ([`RemoteFailure::reference_text`]).
//! * [`RemoteBackend`] implements [`crate::TaskBackend`] on top of it, mapping rows to
//!   [`crate::Task`] and refusals to the [`crate::Error`] variants the embedded store returns
//!   for the same situation.
//!
//! # Configuration
//!
//! [`RemoteConfig`] takes the base URL, an optional bearer token and a timeout (default 5 s, as
//! the reference). Only `http://` URLs are accepted: this crate has no TLS stack, and an
//! `https://` URL is refused with an error that says so rather than being sent in clear. The
//! token is passed in by the caller (the binary reads `BERNSTEIN_AUTH_TOKEN`; library code reads
//! no environment). Each request sends `Authorization: Bearer <token>` when a non-empty token
//! is configured, `accept`, a `user-agent`, and, for clones made with
//! [`RemoteBackend::with_trace`], the W3C `traceparent` / `tracestate` / `baggage` headers of the
//! call being served. Every exchange (connect, send, read the whole body) is bounded by the
//! timeout; subscriptions are bounded by their own deadline instead.
//!
//! # Errors
//!
//! | what happened | [`FailureKind`] | [`crate::Error`] |
//! |---|---|---|
//! | connection refused, server down | `Unreachable` (reference text `All connection attempts failed`) | `Unavailable` |
//! | no answer within the timeout | `Timeout` | `Unavailable` |
//! | connection broke mid-answer | `Transport` | `Unavailable` |
//! | 401 `Missing or invalid Authorization header` | `Unauthorized` | `Remote { 401, "… set BERNSTEIN_AUTH_TOKEN …" }` |
//! | 404 `Task 'x' not found` | `NotFound` | `NotFound { Task, x }` |
//! | 404 `Plan mode is not enabled on this server` | `NotFound` | `PlanModeDisabled` |
//! | 409 `Illegal task transition: …` | `Conflict` | `IllegalTransition` (same text) |
//! | 409 `Task 'x' cannot be cancelled from status 'y'` | `Conflict` | `NotCancellable` (same text) |
//! | 409 `Version conflict: task x is at version n, expected m` | `Conflict` | `VersionConflict` |
//! | 409 `task x is not open (status=…); cannot claim (…)` | `Conflict` | `NotClaimable` (same text) |
//! | 404 `Parent task 'x' not found` (subtask creation) | `NotFound` | `NotFound { ParentTask, x }` |
//! | 409 `Plan already approved`, hash mismatch | `Conflict` | `PlanAlreadyDecided`, `PlanHashMismatch` |
//! | other 409 | `Conflict` | `Remote { 409, <server detail verbatim> }` |
//! | 422 `empty_result_summary` | `Validation` | `EmptyResultSummary` |
//! | other 4xx, 5xx | by status | `Remote { status, <server detail> }` |
//! | 2xx body that is not the promised JSON | `MalformedBody` | `Remote { 502, … }` |
//! | id, role or header value that cannot be sent | `InvalidArgument` | `InvalidRequest` |
//!
//! No body, however malformed, can make this module panic.
//!
//! # Where the remote backend differs from the embedded store
//!
//! The server is the authority, and it does not do everything the trait describes:
//!
//! * **Plans.** `bernstein serve` never enables plan mode, so every plan route answers 404
//!   `Plan mode is not enabled on this server` ([`crate::Error::PlanModeDisabled`]). With plan
//!   mode on (an in-process `create_app(plan_mode=True)`), get, list, approve and reject work;
//!   the server has no route that *creates* a plan, so [`crate::TaskBackend::create_plan`]
//!   always fails with [`crate::Error::InvalidRequest`].
//! * **Read-then-write gates.** Completion and approval are gated by a `GET /tasks/{id}` read
//!   followed by the `POST`, exactly as the reference MCP layer does; another client can move
//!   the task between the two. The embedded store checks and writes under one lock. The server
//!   still refuses illegal transitions, so the race can only let a completion through from a
//!   status the server itself accepts (for example a task that moved to `waiting_for_subtasks`
//!   in between).
//! * **Completing a `done` task** is refused after the read with the reference server's own
//!   [`crate::Error::IllegalTransition`] (`'done' -> 'done'`), as the trait documents; the
//!   embedded store answers [`crate::Error::NotCompletable`] there. Both are conflicts. An
//!   empty approval note is refused before sending, because the server would treat it as an
//!   empty completion and fail the task.
//! * **Cancellation** is not pre-read: the server's 409 is the refusal, and its detail names the
//!   status. `cancelled_descendants` is counted afterwards from `GET /tasks?status=cancelled`
//!   by walking `parent_task_id` chains, as the reference does, so it also counts descendants
//!   that were already cancelled before this call; `blocked_dependents` are the tasks now in
//!   `blocked_by_failed_dep` that depend on a cancelled task. Both are best effort: if the
//!   follow-up listing fails after the cancel succeeded, they are reported as empty rather
//!   than failing a cancel that happened.
//! * **Claims.** The server checks dependencies itself and ignores
//!   [`crate::backend::ClaimRequest::completed_ids`], so a dependency the caller lists as
//!   complete but the server holds as not `done`/`closed` still blocks the claim. The unmet
//!   list of [`crate::Error::DependenciesUnmet`] is rebuilt with one read per dependency. The
//!   `holder` of [`crate::Error::NotClaimable`] is the session the server names in its 409
//!   text (the claim's `claimed_by_session`), which the task rows themselves never show.
//! * **Status counts.** The server's `GET /status` counts tasks from its by-status index, and
//!   in 3.23.0 a refused transition drops the task from that index without putting it back
//!   (observed: after a 409 `'done' -> 'done'` completion the task no longer counts as `done`;
//!   after a refused second `fail` it no longer counts as `failed`). So
//!   [`crate::TaskBackend::status_summary`] folds the counts from the task listing, as the
//!   embedded store does, and takes only the spend (`total_cost_usd`, per-role `cost_usd`) from
//!   `GET /status`. The raw [`TaskServerClient::status`] document keeps the server's own figures
//!   for tools that show them.
//! * **Task rows** carry no claimer, attempt count or per-task cost, so tasks read from a
//!   server have `claimed_by: None`, `attempts: 0` and `cost_usd: 0.0`; per-role costs come
//!   from `GET /status` as the server reports them. Field rules are not re-applied to rows the
//!   server stored (it accepts an empty title, for example).
//! * **Validation** of a new task is the server's (pydantic); a refused body is a 422 or 400
//!   [`crate::Error::Remote`] with the server's detail, not [`crate::Error::InvalidTask`].
//! * **Listing.** The server's `GET /tasks?status=open` hides open tasks whose dependencies
//!   have not delivered (only claimable ones are "open" to it), and every `?status=` listing is
//!   ordered by when each task entered that status. The trait lists every task in the status,
//!   in creation order, so [`crate::TaskBackend::list_tasks`] reads the unfiltered listing and
//!   filters here (the raw [`TaskServerClient::list_tasks`] keeps the server's semantics for
//!   tools that show its answer). Pages come from `GET /tasks?limit=&offset=` (the unpaginated
//!   form is capped at 500 rows); cursors are decimal positions in the unfiltered listing, so
//!   a page can shift if tasks are created while a caller pages.
//! * **Capacity.** The reference server refuses a 101st task in a tenant (429 `Tenant default
//!   has reached max_tasks limit (100)`, an [`crate::Error::Remote`]); the embedded store has
//!   no such cap.
//! * **Evidence** (audit events) is written by the server into its own `.sdd/`, not by this
//!   client. The server writes no run-journal rows for task transitions, so on its own a run
//!   handle polled over this backend would stay `working` for ever; see the next section.
//!
//! # Run journals and seals over this backend: what is journalled, and by whom
//!
//! This crate stays a plain HTTP client: it never writes the MCP server's project. The MCP
//! layer (`bernstein_tools::Backend`) journals, in the MCP server's own `<workdir>/.sdd/`, what
//! the run handle needs, with the same rows and seals the embedded store leads to:
//!
//! * **Transitions this server performs** (`bernstein_complete`, `bernstein_approve`,
//!   `bernstein_cancel`, `tasks/cancel`): once the server has answered, the lifecycle row
//!   (`task_completed`, `task_failed` or `task_cancelled`, payload `task_id, status,
//!   task_version[, reason]`) is appended to `.sdd/runs/task-<id>/journal.jsonl` for the task
//!   and, after a cancel, for each cancelled descendant; then each run gets its
//!   `mcp.task_handle` seal (with an audit key). Both are fsynced before the tool answers.
//! * **Transitions made elsewhere** (the bernstein CLI, REST, another MCP instance): a poll
//!   (`bernstein_run_status`, `tasks/get`) whose journal fold is not terminal reads the task
//!   (`GET /tasks/{id}`); when the server says `done`/`closed`, `failed`/`abandoned`/`refused`
//!   or `cancelled`, the matching row and the seal are appended then.
//!
//! Both steps are re-checked under the run journal's lock (the row: "does the journal already
//! hold a terminal row?"; the seal: "does the run's newest seal already bind this status and
//! journal head?"), so any number of instances polling one task converge on one terminal row
//! and one seal, and a host's poll loop always ends.

mod api;
mod client;
mod convert;
mod endpoint;
mod failure;
mod sse;

#[cfg(test)]
mod tests;

use std::fmt;
use std::time::Duration;

use bernstein_protocol::pyjson::Value;
use hyper::header::HeaderValue;

pub use api::{AGENT_ID_HEADER, SubscribeOutcome, TaskServerClient, TraceContext};
pub use client::{BACKEND_ROUND_TRIP_METRIC, describe_metrics};
pub use failure::{FailureKind, RemoteFailure, StatusLine};

use crate::backend::{
    ApprovalOutcome, CancelOutcome, ClaimRequest, ListQuery, PlanDecision, PlanRecord,
    StatusSummary, TaskBackend, TaskPage,
};
use crate::error::Error;
use crate::lifecycle::{SUCCESSFUL_TASK_STATUSES, TaskStatus, WORKER_COMPLETABLE_TASK_STATUSES};
use crate::model::{NewTask, Task, TaskId};
use client::HttpClient;
use endpoint::BaseUrl;

/// The reference's per-request timeout (`_HTTP_TIMEOUT = 5.0`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most rows the server returns per page (`_LIST_TASKS_HARD_CAP`).
pub const MAX_PAGE_SIZE: usize = 500;

/// How to reach a task server.
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteConfig {
    /// `http://host[:port][/prefix]` of the task server (for example `http://127.0.0.1:8052`).
    pub base_url: String,
    /// The bearer token the server was started with; `None` or empty sends no
    /// `Authorization` header.
    pub bearer_token: Option<String>,
    /// The deadline of each request.
    pub timeout: Duration,
}

impl RemoteConfig {
    /// A configuration for `base_url` with no token and the 5-second default timeout.
    pub fn new(base_url: impl Into<String>) -> RemoteConfig {
        RemoteConfig {
            base_url: base_url.into(),
            bearer_token: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same configuration sending `token` as the bearer (an empty token sends none).
    pub fn with_bearer_token(mut self, token: Option<String>) -> RemoteConfig {
        self.bearer_token = token;
        self
    }

    /// The same configuration with a per-request `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> RemoteConfig {
        self.timeout = timeout;
        self
    }
}

impl fmt::Debug for RemoteConfig {
    /// Shows whether a token is set, never the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("base_url", &self.base_url)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// [`crate::TaskBackend`] over a running Bernstein task server.
///
/// Cheap to clone. Its futures need a Tokio runtime (with the I/O and time drivers enabled).
#[derive(Debug, Clone)]
pub struct RemoteBackend {
    client: TaskServerClient,
}

impl RemoteBackend {
    /// Checks `config` and builds the backend. Nothing is sent yet; a server that is down is
    /// reported by the first call.
    ///
    /// Fails with [`Error::InvalidRequest`] for a URL that is not `http://host[:port][/path]`
    /// (including every `https://` URL), a token that cannot be sent in a header, or a zero
    /// timeout.
    pub fn new(config: RemoteConfig) -> Result<RemoteBackend, Error> {
        let base = BaseUrl::parse(&config.base_url).map_err(|problem| {
            Error::InvalidRequest(format!(
                "task server URL {:?} is not usable: {}",
                config.base_url,
                problem.describe()
            ))
        })?;
        let bearer = match config.bearer_token.as_deref() {
            None | Some("") => None,
            Some(token) => {
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                        Error::InvalidRequest(
                            "the bearer token contains characters that cannot be sent in an HTTP \
                         header (it must be visible ASCII)"
                                .to_owned(),
                        )
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        if config.timeout.is_zero() {
            return Err(Error::InvalidRequest(
                "the task-server timeout must be longer than zero".to_owned(),
            ));
        }
        Ok(RemoteBackend {
            client: TaskServerClient::from_http(HttpClient::new(base, bearer, config.timeout)),
        })
    }

    /// The raw HTTP API, for routes the trait does not cover and for bodies that must be passed
    /// on verbatim.
    pub fn client(&self) -> &TaskServerClient {
        &self.client
    }

    /// A clone that forwards `trace`'s W3C headers with every request it makes. Fails with
    /// [`Error::InvalidRequest`] when a value cannot be an HTTP header.
    pub fn with_trace(&self, trace: &TraceContext) -> Result<RemoteBackend, Error> {
        Ok(RemoteBackend {
            client: self.client.with_trace(trace)?,
        })
    }

    async fn read_task(&self, id: &TaskId) -> Result<Task, Error> {
        let row = self
            .client
            .get_task(id)
            .await
            .map_err(|f| convert::task_error(f, id))?;
        convert::task_from_row(&row)
    }

    /// Every row in `status` (all statuses for `None`) from `offset` on, page by page.
    async fn all_rows(
        &self,
        status: Option<TaskStatus>,
        mut offset: usize,
    ) -> Result<Vec<Value>, Error> {
        let mut rows = Vec::new();
        loop {
            let envelope = self
                .client
                .list_tasks_page(status, MAX_PAGE_SIZE, offset)
                .await?;
            let (page, total) = convert::page_from_envelope(&envelope)?;
            if page.is_empty() {
                return Ok(rows);
            }
            offset += page.len();
            rows.extend(page);
            if offset >= total {
                return Ok(rows);
            }
        }
    }

    /// The dependencies of `id` that are not `done` or `closed` on the server, for a claim the
    /// server refused with `has unresolved dependencies`. When none can be named (the server
    /// also refuses for dependencies that ended without delivering through lineage, or a read
    /// failed), every dependency is listed.
    async fn unmet_dependencies(&self, id: &TaskId) -> Error {
        let depends_on = match self.read_task(id).await {
            Ok(task) => task.depends_on,
            Err(_) => Vec::new(),
        };
        let mut unmet = Vec::new();
        for dependency in &depends_on {
            let delivered = match self.client.get_task(dependency).await {
                Ok(row) => convert::row_status(&row)
                    .is_some_and(|status| SUCCESSFUL_TASK_STATUSES.contains(&status)),
                Err(_) => false,
            };
            if !delivered {
                unmet.push(dependency.as_str().to_owned());
            }
        }
        if unmet.is_empty() {
            unmet = depends_on.iter().map(|d| d.as_str().to_owned()).collect();
        }
        Error::DependenciesUnmet {
            task_id: id.as_str().to_owned(),
            unmet,
        }
    }
}

impl TaskBackend for RemoteBackend {
    async fn create_task(&self, request: NewTask) -> Result<Task, Error> {
        let body = convert::create_body(&request);
        let row = self.client.create_task(&body).await.map_err(|failure| {
            match &request.parent_task_id {
                Some(parent) => convert::parent_error(failure, parent),
                None => Error::from(failure),
            }
        })?;
        convert::task_from_row(&row)
    }

    async fn create_subtask(&self, parent: &TaskId, request: NewTask) -> Result<Task, Error> {
        let body = convert::subtask_body(parent, &request);
        let row = self
            .client
            .create_subtask(&body)
            .await
            .map_err(|f| convert::parent_error(f, parent))?;
        convert::task_from_row(&row)
    }

    async fn get_task(&self, id: &TaskId) -> Result<Task, Error> {
        self.read_task(id).await
    }

    async fn list_tasks(&self, query: &ListQuery) -> Result<TaskPage, Error> {
        let offset = match &query.cursor {
            None => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .map_err(|_| Error::InvalidCursor(cursor.clone()))?,
        };
        // The status filter is applied here, to the unfiltered listing, rather than sent as
        // `?status=`: the server orders a filtered listing by when each task entered the
        // status and hides `open` tasks whose dependencies have not delivered, while the trait
        // lists every task in the status in creation order. Cursors are therefore positions in
        // the unfiltered listing.
        let wanted = |task: &Task| query.status.is_none_or(|status| task.status == status);
        match query.limit {
            None => {
                let rows = self.all_rows(None, offset).await?;
                let mut tasks = convert::tasks_from_rows(&rows)?;
                tasks.retain(wanted);
                Ok(TaskPage {
                    tasks,
                    next_cursor: None,
                })
            }
            Some(0) => Err(Error::InvalidRequest(
                "a task page must hold at least one task (limit 0)".to_owned(),
            )),
            Some(limit) => {
                let mut tasks = Vec::new();
                let mut position = offset;
                loop {
                    // Without a filter one page of `limit` rows is the answer; with one, read
                    // whole pages until `limit` tasks matched or the listing ended.
                    let size = if query.status.is_none() {
                        limit.min(MAX_PAGE_SIZE)
                    } else {
                        MAX_PAGE_SIZE
                    };
                    let envelope = self.client.list_tasks_page(None, size, position).await?;
                    let (rows, total) = convert::page_from_envelope(&envelope)?;
                    if rows.is_empty() {
                        return Ok(TaskPage {
                            tasks,
                            next_cursor: None,
                        });
                    }
                    for task in convert::tasks_from_rows(&rows)? {
                        position += 1;
                        if wanted(&task) {
                            tasks.push(task);
                            if tasks.len() == limit {
                                return Ok(TaskPage {
                                    tasks,
                                    next_cursor: (position < total).then(|| position.to_string()),
                                });
                            }
                        }
                    }
                    if position >= total {
                        return Ok(TaskPage {
                            tasks,
                            next_cursor: None,
                        });
                    }
                }
            }
        }
    }

    async fn claim_task(&self, id: &TaskId, claim: &ClaimRequest) -> Result<Task, Error> {
        match self
            .client
            .claim_task(id, claim.expected_version, claim.claimer.as_deref())
            .await
        {
            Ok(row) => convert::task_from_row(&row),
            Err(failure) if convert::is_unresolved_dependencies(&failure) => {
                Err(self.unmet_dependencies(id).await)
            }
            Err(failure) => Err(convert::claim_error(failure, id)),
        }
    }

    async fn complete_task(&self, id: &TaskId, result_summary: &str) -> Result<Task, Error> {
        let current = self.read_task(id).await?;
        if current.status == TaskStatus::Done {
            // The reference server's own answer to completing a finished task.
            return Err(Error::IllegalTransition {
                task_id: id.as_str().to_owned(),
                from: TaskStatus::Done,
                to: TaskStatus::Done,
            });
        }
        if !WORKER_COMPLETABLE_TASK_STATUSES.contains(&current.status) {
            return Err(Error::NotCompletable {
                task_id: id.as_str().to_owned(),
                status: current.status,
            });
        }
        let row = self
            .client
            .complete_task(id, result_summary)
            .await
            .map_err(|f| convert::task_error(f, id))?;
        convert::task_from_row(&row)
    }

    async fn approve_task(&self, id: &TaskId, note: &str) -> Result<ApprovalOutcome, Error> {
        let current = self.read_task(id).await?;
        if crate::lifecycle::approval_target(current.status).is_none() {
            return Err(Error::NotApprovable {
                task_id: id.as_str().to_owned(),
                status: current.status,
            });
        }
        if note.trim().is_empty() {
            // The server would treat an empty summary as a failed completion and fail the task;
            // an approval must never do that, so the note is refused before anything is sent.
            return Err(Error::InvalidRequest(
                "an approval note must not be empty".to_owned(),
            ));
        }
        let row = self
            .client
            .complete_task(id, note)
            .await
            .map_err(|f| convert::task_error(f, id))?;
        Ok(ApprovalOutcome {
            task: convert::task_from_row(&row)?,
            approved_from: current.status,
        })
    }

    async fn fail_task(&self, id: &TaskId, reason: &str) -> Result<Task, Error> {
        let row = self
            .client
            .fail_task(id, reason)
            .await
            .map_err(|f| convert::task_error(f, id))?;
        convert::task_from_row(&row)
    }

    async fn cancel_task(&self, id: &TaskId, reason: &str) -> Result<CancelOutcome, Error> {
        let row = match self.client.cancel_task(id, reason).await {
            Ok(row) => row,
            Err(failure) => {
                let error = convert::cancel_error(failure, id);
                if let Error::Remote { status: 409, .. } = error {
                    // A 409 whose detail did not name the status: read it, as the reference
                    // does after a refused cancel.
                    let task = self.read_task(id).await?;
                    return Err(Error::NotCancellable {
                        task_id: id.as_str().to_owned(),
                        status: task.status,
                    });
                }
                return Err(error);
            }
        };
        let task = convert::task_from_row(&row)?;
        // Counting what the cascade did is best effort, as in the reference: the cancel has
        // already happened, so a failed follow-up read must not turn it into an error.
        let cancelled = self
            .all_rows(Some(TaskStatus::Cancelled), 0)
            .await
            .unwrap_or_default();
        let descendants = convert::descendants(&cancelled, id.as_str());
        let mut cancelled_ids = descendants.clone();
        cancelled_ids.push(id.as_str().to_owned());
        let blocked = self
            .all_rows(Some(TaskStatus::BlockedByFailedDep), 0)
            .await
            .and_then(|rows| convert::tasks_from_rows(&rows))
            .unwrap_or_default();
        let blocked_dependents = blocked
            .into_iter()
            .filter(|t| {
                t.depends_on
                    .iter()
                    .any(|d| cancelled_ids.iter().any(|c| c == d.as_str()))
            })
            .map(|t| t.id)
            .collect();
        Ok(CancelOutcome {
            task,
            cancelled_descendants: descendants.len(),
            blocked_dependents,
        })
    }

    async fn status_summary(&self) -> Result<StatusSummary, Error> {
        // Spend comes from `GET /status`; the counts are folded from the task listing itself,
        // because the server counts from a by-status index that loses a task whenever a
        // transition on it is refused (see the module documentation).
        let document = self.client.status().await?;
        let server = convert::status_from_document(&document)?;
        let rows = self.all_rows(None, 0).await?;
        let tasks = convert::tasks_from_rows(&rows)?;
        let mut summary = StatusSummary::from_tasks(&tasks);
        summary.total_cost_usd = server.total_cost_usd;
        for row in &mut summary.per_role {
            row.cost_usd = server
                .per_role
                .iter()
                .find(|reported| reported.role == row.role)
                .and_then(|reported| reported.cost_usd);
        }
        Ok(summary)
    }

    async fn create_plan(&self, _goal: &str, _tasks: Vec<NewTask>) -> Result<PlanRecord, Error> {
        Err(Error::InvalidRequest(
            "the Bernstein task server has no route that creates a plan (its planner creates \
             plans when plan mode is on); create plans with the embedded backend"
                .to_owned(),
        ))
    }

    async fn get_plan(&self, plan_id: &str) -> Result<PlanRecord, Error> {
        let document = self
            .client
            .get_plan(plan_id)
            .await
            .map_err(|f| convert::plan_error(f, plan_id))?;
        convert::plan_from_document(&document)
    }

    async fn list_plans(&self) -> Result<Vec<PlanRecord>, Error> {
        let documents = self
            .client
            .list_plans(None)
            .await
            .map_err(|f| convert::plan_error(f, ""))?;
        let Some(documents) = documents.as_array() else {
            return Err(convert::unreadable(
                "a plan list",
                &[crate::FieldProblem::new("plans", "must be a list")],
            ));
        };
        documents.iter().map(convert::plan_from_document).collect()
    }

    async fn approve_plan(&self, plan_id: &str, reason: &str) -> Result<PlanDecision, Error> {
        let answer = self
            .client
            .approve_plan(plan_id, reason)
            .await
            .map_err(|f| convert::plan_error(f, plan_id))?;
        convert::decision_from_answer(&answer, plan_id)
    }

    async fn reject_plan(&self, plan_id: &str, reason: &str) -> Result<PlanDecision, Error> {
        let answer = self
            .client
            .reject_plan(plan_id, reason)
            .await
            .map_err(|f| convert::plan_error(f, plan_id))?;
        convert::decision_from_answer(&answer, plan_id)
    }
}
