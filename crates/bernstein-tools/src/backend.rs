//! The task backend the tools drive: the embedded store or a remote task server, plus the
//! worker-loop evidence operations the [`bernstein_tasks::TaskBackend`] trait does not cover.
//!
//! Every operation speaks the task server's JSON: it takes the request body a tool would send
//! and returns the body the server would answer, as a [`Value`] with the reference's key order.
//! So a handler is written once and cannot tell the backends apart:
//!
//! * **Remote** ([`RemoteBackend`]): each operation is the route the reference MCP server calls,
//!   through the raw [`bernstein_tasks::remote::TaskServerClient`], and its answer is passed on
//!   verbatim (claim receipts, mailbox entries and artifact records carry hashes and signatures
//!   over their exact bytes). Gates are read-then-write, as in the reference.
//! * **Embedded** ([`EmbeddedStore`] under the project's `.sdd/`): task operations go to the
//!   store, whose completion and approval check the status and transition under one lock.
//!   Claims, mailbox posts and artifacts are written with `bernstein-journal` exactly as the
//!   reference task server writes them: the claim receipt over `.sdd/runtime/task-backlog.json`
//!   (which the store keeps in step and adopts claims from), the signed mailbox with its
//!   `task.mailbox_message` audit mirror, and the artifact blob, spine entry, journal row and
//!   `run.artifact` event. Administrative runs need a task server and are refused.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bernstein_journal::artifacts::{
    ArtifactContent, ArtifactFields, FindingProvenance, PostRequest, post_run_artifact,
    read_artifact_rows,
};
use bernstein_journal::audit::AuditChain;
use bernstein_journal::claim::{
    ClaimFilter, ClaimOutcome, ClaimReceipt, ClaimRequest as BacklogClaimRequest, backlog_path,
    claim_on_entries, entries_from_rows, read_backlog,
};
use bernstein_journal::dlp::{DlpMode, RedactionContext};
use bernstein_journal::handle;
use bernstein_journal::identity::SigningIdentity;
use bernstein_journal::key::AuditKey;
use bernstein_journal::mailbox::{
    Authority, MAILBOX_IDENTITY_NAME, Mailbox, NewMessage, UNREGISTERED_FINGERPRINT,
};
use bernstein_protocol::pyjson::{Object, Value};
use bernstein_tasks::backend::ListQuery;
use bernstein_tasks::embedded::EmbeddedStore;
use bernstein_tasks::remote::{RemoteBackend, SubscribeOutcome, TraceContext};
use bernstein_tasks::{Complexity, NewTask, Scope, TaskId, TaskStatus};

use crate::error::Error;
use crate::opening::OpeningStore;

/// How often the embedded store is re-read while a subscription waits for a new task.
const SUBSCRIBE_POLL: Duration = Duration::from_millis(200);

/// The two task backends.
#[derive(Debug, Clone)]
pub enum BackendKind {
    /// The durable store under the project's `.sdd/`.
    Embedded(OpeningStore),
    /// A running `bernstein serve` (boxed: its client is much larger than the store handle).
    Remote(Box<RemoteBackend>),
}

/// The task backend plus what the evidence operations need: the audit key (HMAC key of the
/// audit chain and the mailbox), the home directory the mailbox redaction collapses to `~`
/// and the mailbox's DLP rule set.
pub struct Backend {
    kind: BackendKind,
    audit_key: Option<AuditKey>,
    home_dir: Option<String>,
    dlp_mode: DlpMode,
    mailbox: OnceLock<Arc<Mailbox>>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("kind", &self.kind)
            .field("audit_key", &self.audit_key)
            .field("home_dir", &self.home_dir)
            .field("dlp_mode", &self.dlp_mode)
            .finish_non_exhaustive()
    }
}

/// What a gated write (completion, approval) did.
#[derive(Debug, Clone, PartialEq)]
pub enum GateAnswer {
    /// The write happened: the task row it returned, and the status the gate read before it.
    Passed {
        /// The task row after the write.
        row: Object,
        /// The status the task was in when the gate let the write through.
        prior_status: String,
    },
    /// The gate refused; nothing was written. `reported_status` is the status it read (`""`
    /// when the row had none).
    Refused {
        /// The status the gate read.
        reported_status: String,
    },
}

/// What a cancel did.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelAnswer {
    /// No task has this id; nothing was cancelled.
    UnknownTask,
    /// The task is in a status the MCP cancel does not act on; nothing was cancelled.
    NotCancellable {
        /// The status the pre-check read.
        reported_status: String,
    },
    /// The task and its cancellable descendants were cancelled.
    Cancelled {
        /// The root's row after the cancel.
        row: Object,
        /// How many cancelled tasks have the root in their parent chain.
        cancelled_descendants: u64,
    },
}

impl Backend {
    /// The embedded store, with the audit key its evidence is authenticated with.
    pub fn embedded(store: EmbeddedStore, audit_key: AuditKey) -> Backend {
        Backend {
            kind: BackendKind::Embedded(OpeningStore::ready(store)),
            audit_key: Some(audit_key),
            home_dir: None,
            dlp_mode: DlpMode::default(),
            mailbox: OnceLock::new(),
        }
    }

    /// The embedded store of `workdir`, opened on a background thread: this returns at once,
    /// and the first call that needs the store waits for the open to end and gets its refusal
    /// (such as a corrupt task log) as its error. Calls that need no store do not wait.
    pub fn embedded_in_background(workdir: PathBuf, audit_key: AuditKey) -> Backend {
        Backend {
            kind: BackendKind::Embedded(OpeningStore::in_background(
                workdir,
                Some(audit_key.clone()),
            )),
            audit_key: Some(audit_key),
            home_dir: None,
            dlp_mode: DlpMode::default(),
            mailbox: OnceLock::new(),
        }
    }

    /// A remote task server. Without an audit key, capsule verification and lineage
    /// verification report that the key is missing.
    pub fn remote(remote: RemoteBackend) -> Backend {
        Backend {
            kind: BackendKind::Remote(Box::new(remote)),
            audit_key: None,
            home_dir: None,
            dlp_mode: DlpMode::default(),
            mailbox: OnceLock::new(),
        }
    }

    /// The same backend with `key` as the audit key (for a remote backend: used by the tools
    /// that verify local evidence).
    #[must_use]
    pub fn with_audit_key(mut self, key: AuditKey) -> Backend {
        self.audit_key = Some(key);
        self
    }

    /// The same backend collapsing `home` to `~` in mailbox bodies (the reference's
    /// `$HOME` redaction step); `None` skips that step.
    #[must_use]
    pub fn with_home_dir(mut self, home: Option<String>) -> Backend {
        self.home_dir = home;
        self
    }

    /// The same backend redacting mailbox bodies with `mode` (default: extended). A remote
    /// backend's mailbox is the task server's, which redacts with its own rules.
    #[must_use]
    pub fn with_dlp_mode(mut self, mode: DlpMode) -> Backend {
        self.dlp_mode = mode;
        self
    }

    /// Which backend this is.
    pub fn kind(&self) -> &BackendKind {
        &self.kind
    }

    /// The audit key, when one was given.
    pub fn audit_key(&self) -> Option<&AuditKey> {
        self.audit_key.as_ref()
    }

    /// Whether this is the embedded store.
    pub fn is_embedded(&self) -> bool {
        matches!(self.kind, BackendKind::Embedded(_))
    }

    fn require_key(&self, purpose: &str) -> Result<&AuditKey, Error> {
        self.audit_key.as_ref().ok_or_else(|| {
            Error::Unsupported(format!(
                "{purpose} needs the install audit key, and none was configured"
            ))
        })
    }

    fn remote_with_trace(
        remote: &RemoteBackend,
        trace: &TraceContext,
    ) -> Result<RemoteBackend, Error> {
        if trace.is_empty() {
            Ok(remote.clone())
        } else {
            Ok(remote.with_trace(trace)?)
        }
    }

    /// `POST /tasks` with `body`: the created task row. `trace` is forwarded as W3C headers to
    /// a remote server.
    ///
    /// # Errors
    ///
    /// The store's or the server's refusal.
    pub async fn create_task(&self, body: &Object, trace: &TraceContext) -> Result<Object, Error> {
        match &self.kind {
            BackendKind::Remote(remote) => {
                let remote = Self::remote_with_trace(remote, trace)?;
                object_answer(remote.client().create_task(body).await?, "a task row")
            }
            BackendKind::Embedded(store) => {
                let request = new_task_from_body(body)?;
                let store = store.store().await?;
                let task = run_blocking(move || store.create_task(request)).await??;
                Ok(task.to_object())
            }
        }
    }

    /// `POST /tasks/self-create` with `body` (naming `parent_task_id`): the created subtask row.
    ///
    /// # Errors
    ///
    /// The store's or the server's refusal (an unknown parent is not found).
    pub async fn create_subtask(
        &self,
        body: &Object,
        trace: &TraceContext,
    ) -> Result<Object, Error> {
        match &self.kind {
            BackendKind::Remote(remote) => {
                let remote = Self::remote_with_trace(remote, trace)?;
                object_answer(remote.client().create_subtask(body).await?, "a task row")
            }
            BackendKind::Embedded(store) => {
                let mut request = new_task_from_body(body)?;
                let parent = request.parent_task_id.take().ok_or_else(|| {
                    Error::Task(bernstein_tasks::Error::InvalidRequest(
                        "a subtask needs parent_task_id".to_owned(),
                    ))
                })?;
                let store = store.store().await?;
                let task = run_blocking(move || store.create_subtask(&parent, request)).await??;
                Ok(task.to_object())
            }
        }
    }

    /// `GET /tasks/{id}`: the task row.
    ///
    /// # Errors
    ///
    /// Not found, or the backend's failure.
    pub async fn get_task(&self, id: &str) -> Result<Object, Error> {
        let id = TaskId::parse(id)?;
        match &self.kind {
            BackendKind::Remote(remote) => {
                object_answer(remote.client().get_task(&id).await?, "a task row")
            }
            BackendKind::Embedded(store) => {
                let store = store.store().await?;
                // Answered on this thread unless it would wait for a lock (see `poll_run`).
                let task = match store.get_task_now(&id) {
                    Some(task) => task?,
                    None => run_blocking(move || store.get_task(&id)).await??,
                };
                Ok(task.to_object())
            }
        }
    }

    /// `GET /tasks[?status=]`: every task row (in the status, when given), oldest first.
    ///
    /// # Errors
    ///
    /// The backend's failure; an unknown status is refused.
    pub async fn list_tasks(&self, status: Option<&str>) -> Result<Vec<Value>, Error> {
        let status = match status {
            None => None,
            Some(text) => Some(
                TaskStatus::parse(text)
                    .ok_or_else(|| bernstein_tasks::Error::UnknownStatus(text.to_owned()))?,
            ),
        };
        match &self.kind {
            BackendKind::Remote(remote) => {
                let answer = remote.client().list_tasks(status).await?;
                match answer {
                    Value::Array(rows) => Ok(rows),
                    _ => Err(Error::UnexpectedAnswer(
                        "the task server's task list is not a JSON array".to_owned(),
                    )),
                }
            }
            BackendKind::Embedded(store) => {
                let store = store.store().await?;
                let query = ListQuery {
                    status,
                    ..ListQuery::all()
                };
                let page = run_blocking(move || store.list_tasks(&query)).await??;
                Ok(page
                    .tasks
                    .iter()
                    .map(|task| Value::Object(task.to_object()))
                    .collect())
            }
        }
    }

    /// One page of the tasks in `status`, oldest first: at most `limit` rows after the task
    /// `cursor` names (from the first task without one), and the cursor of the next page when
    /// more remain. The embedded store reads only the page's records; a task server's list is
    /// paged here, as its route has no paging.
    ///
    /// # Errors
    ///
    /// The backend's failure; an unknown status or a cursor naming no listed task is refused.
    pub async fn list_tasks_page(
        &self,
        status: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Value>, Option<String>), Error> {
        let limit = limit.max(1);
        match &self.kind {
            BackendKind::Remote(_) => {
                let rows = self.list_tasks(Some(status)).await?;
                let start = match cursor {
                    None => 0,
                    Some(cursor) => {
                        rows.iter()
                            .position(|row| row_id(row).as_deref() == Some(cursor))
                            .ok_or_else(|| {
                                bernstein_tasks::Error::InvalidCursor(cursor.to_owned())
                            })?
                            + 1
                    }
                };
                let page: Vec<Value> = rows.iter().skip(start).take(limit).cloned().collect();
                let next = (rows.len() > start + page.len())
                    .then(|| page.last().and_then(row_id))
                    .flatten();
                Ok((page, next))
            }
            BackendKind::Embedded(store) => {
                let status = TaskStatus::parse(status)
                    .ok_or_else(|| bernstein_tasks::Error::UnknownStatus(status.to_owned()))?;
                let store = store.store().await?;
                let query = ListQuery {
                    status: Some(status),
                    cursor: cursor.map(str::to_owned),
                    limit: Some(limit),
                };
                let page = run_blocking(move || store.list_tasks(&query)).await??;
                let rows = page
                    .tasks
                    .iter()
                    .map(|task| Value::Object(task.to_object()))
                    .collect();
                Ok((rows, page.next_cursor))
            }
        }
    }

    /// `GET /status`: the status document (`total, open, claimed, done, failed, per_role,
    /// total_cost_usd`, and, from a server, much more).
    ///
    /// # Errors
    ///
    /// The backend's failure.
    pub async fn status_document(&self) -> Result<Object, Error> {
        match &self.kind {
            BackendKind::Remote(remote) => {
                object_answer(remote.client().status().await?, "a status document")
            }
            BackendKind::Embedded(store) => {
                let store = store.store().await?;
                let summary = match store.status_summary_now() {
                    Some(summary) => summary?,
                    None => run_blocking(move || store.status_summary()).await??,
                };
                Ok(summary.to_object())
            }
        }
    }

    /// The worker's completion (`POST /tasks/{id}/complete`) behind the completion gate.
    ///
    /// # Errors
    ///
    /// Not found, an empty summary, or the backend's failure. A gate refusal is an answer.
    pub async fn complete_task(&self, id: &str, result_summary: &str) -> Result<GateAnswer, Error> {
        let task_id = TaskId::parse(id)?;
        match &self.kind {
            BackendKind::Remote(remote) => {
                let row = object_answer(remote.client().get_task(&task_id).await?, "a task row")?;
                let status = row_status(&row);
                if !bernstein_gate::approval::is_worker_completable(&status) {
                    return Ok(GateAnswer::Refused {
                        reported_status: status,
                    });
                }
                let answer = remote
                    .client()
                    .complete_task(&task_id, result_summary)
                    .await?;
                Ok(GateAnswer::Passed {
                    row: object_answer(answer, "a task row")?,
                    prior_status: status,
                })
            }
            BackendKind::Embedded(store) => {
                let store = store.store().await?;
                let summary = result_summary.to_owned();
                let before = {
                    let store = store.clone();
                    let task_id = task_id.clone();
                    run_blocking(move || store.get_task(&task_id)).await??
                };
                match run_blocking(move || store.complete_task(&task_id, &summary)).await? {
                    Ok(task) => Ok(GateAnswer::Passed {
                        row: task.to_object(),
                        prior_status: before.status.as_str().to_owned(),
                    }),
                    Err(
                        bernstein_tasks::Error::NotCompletable { status, .. }
                        | bernstein_tasks::Error::IllegalTransition { from: status, .. },
                    ) => Ok(GateAnswer::Refused {
                        reported_status: status.as_str().to_owned(),
                    }),
                    Err(other) => Err(other.into()),
                }
            }
        }
    }

    /// The sign-off of a held result (`POST /tasks/{id}/complete` with the note as summary)
    /// behind the approval gate.
    ///
    /// # Errors
    ///
    /// Not found, or the backend's failure. A gate refusal is an answer.
    pub async fn approve_task(&self, id: &str, note: &str) -> Result<GateAnswer, Error> {
        let task_id = TaskId::parse(id)?;
        match &self.kind {
            BackendKind::Remote(remote) => {
                let row = object_answer(remote.client().get_task(&task_id).await?, "a task row")?;
                let status = row_status(&row);
                if !bernstein_gate::approval::is_approvable(&status) {
                    return Ok(GateAnswer::Refused {
                        reported_status: status,
                    });
                }
                let answer = remote.client().complete_task(&task_id, note).await?;
                Ok(GateAnswer::Passed {
                    row: object_answer(answer, "a task row")?,
                    prior_status: status,
                })
            }
            BackendKind::Embedded(store) => {
                let store = store.store().await?;
                let note = note.to_owned();
                match run_blocking(move || store.approve_task(&task_id, &note)).await? {
                    Ok(outcome) => Ok(GateAnswer::Passed {
                        row: outcome.task.to_object(),
                        prior_status: outcome.approved_from.as_str().to_owned(),
                    }),
                    Err(bernstein_tasks::Error::NotApprovable { status, .. }) => {
                        Ok(GateAnswer::Refused {
                            reported_status: status.as_str().to_owned(),
                        })
                    }
                    Err(other) => Err(other.into()),
                }
            }
        }
    }

    /// Cancels a task and its subtask tree behind the MCP pre-check (read first; unknown and
    /// non-cancellable tasks are answered without a write).
    ///
    /// # Errors
    ///
    /// The backend's failure.
    pub async fn cancel_task(&self, id: &str, reason: &str) -> Result<CancelAnswer, Error> {
        let task_id = TaskId::parse(id)?;
        let row = match self.get_task(id).await {
            Ok(row) => row,
            Err(e) if e.is_not_found() => return Ok(CancelAnswer::UnknownTask),
            Err(e) => return Err(e),
        };
        let status = row_status(&row);
        if !bernstein_gate::cancel::is_cancellable(&status) {
            return Ok(CancelAnswer::NotCancellable {
                reported_status: status,
            });
        }
        match &self.kind {
            BackendKind::Remote(remote) => {
                let answer = match remote.client().cancel_task(&task_id, reason).await {
                    Ok(answer) => answer,
                    Err(failure) if failure.status_code() == Some(409) => {
                        let again = self.get_task(id).await?;
                        return Ok(CancelAnswer::NotCancellable {
                            reported_status: row_status(&again),
                        });
                    }
                    Err(failure) => return Err(failure.into()),
                };
                let row = object_answer(answer, "a task row")?;
                // Counting the cascade is best effort, as in the reference: the cancel has
                // happened, so a failed follow-up listing reports no descendants.
                let cancelled = self.list_tasks(Some("cancelled")).await.unwrap_or_default();
                Ok(CancelAnswer::Cancelled {
                    row,
                    cancelled_descendants: count_descendants(&cancelled, id),
                })
            }
            BackendKind::Embedded(store) => {
                let store = store.store().await?;
                let reason = reason.to_owned();
                match run_blocking(move || store.cancel_task(&task_id, &reason)).await? {
                    Ok(outcome) => Ok(CancelAnswer::Cancelled {
                        row: outcome.task.to_object(),
                        cancelled_descendants: outcome.cancelled_descendants as u64,
                    }),
                    Err(bernstein_tasks::Error::NotCancellable { status, .. }) => {
                        Ok(CancelAnswer::NotCancellable {
                            reported_status: status.as_str().to_owned(),
                        })
                    }
                    Err(other) => Err(other.into()),
                }
            }
        }
    }

    /// `POST /tasks/claim-receipt` with `body` (`{claimer_id, completed_ids, role?, project?,
    /// capability?, claimer_card_fingerprint?, max_attempts?}`): the signed claim receipt,
    /// granted or refused.
    ///
    /// # Errors
    ///
    /// An unsafe claimer id, a missing audit key (embedded), or the backend's failure.
    pub async fn claim_receipt(&self, body: &Object) -> Result<Value, Error> {
        match &self.kind {
            BackendKind::Remote(remote) => Ok(remote.client().claim_receipt(body).await?),
            BackendKind::Embedded(store) => {
                let key = self.require_key("a claim receipt")?.clone();
                let request = claim_request_from_body(body);
                let root = store.workdir().to_path_buf();
                let store = store.store().await?;
                // The claim runs under the store lock, on a backlog the store has just brought
                // in step with its task log, and the store adopts a granted claim before we
                // answer: a stale backlog can never grant a task twice.
                let outcome = run_blocking(move || {
                    store.claim_on_backlog(
                        |rows| {
                            let origin = backlog_path(&root).display().to_string();
                            let entries = entries_from_rows(rows.iter().copied(), &origin)?;
                            claim_on_entries(&root, key, &request, entries, None)
                                .map(DecidedClaim::from)
                        },
                        |decided| decided.granted.then_some(decided.rows.as_slice()),
                    )
                })
                .await???;
                // The embedded store rewrites the backlog file whenever its tasks change, so a
                // receipt checked against the file would stop verifying at the next unrelated
                // task. Like the reference server's claims on its task store, the receipt
                // carries the snapshot its backlogHead was computed over (`backlogSource:
                // "task_store"`), and verifies against that, offline, for as long as the chain
                // holds its claim event.
                let mut receipt = outcome.receipt;
                receipt.backlog_snapshot = Some(outcome.rows);
                Ok(Value::Object(receipt.into_wire()))
            }
        }
    }

    fn mailbox(&self, root: &Path) -> Result<Arc<Mailbox>, Error> {
        if let Some(mailbox) = self.mailbox.get() {
            return Ok(Arc::clone(mailbox));
        }
        let key = self.require_key("the task mailbox")?;
        let sdd = root.join(".sdd");
        let signer = SigningIdentity::load_or_create(&sdd.join("identity"), MAILBOX_IDENTITY_NAME)?;
        let mailbox = Arc::new(Mailbox::open(&sdd, key.master(), signer));
        // Another call may have opened it first; both are equivalent, keep the stored one.
        Ok(Arc::clone(self.mailbox.get_or_init(|| mailbox)))
    }

    /// `POST /tasks/{id}/messages` with `body` (`{sender, kind, body,
    /// sender_card_fingerprint?}`): the signed mailbox entry, mirrored to the audit chain.
    ///
    /// # Errors
    ///
    /// Not found, a refused message (kind, size, full mailbox), or the backend's failure.
    pub async fn post_message(&self, id: &str, body: &Object) -> Result<Value, Error> {
        let task_id = TaskId::parse(id)?;
        match &self.kind {
            BackendKind::Remote(remote) => Ok(remote.client().post_message(&task_id, body).await?),
            BackendKind::Embedded(store) => {
                // The route answers 404 for an unknown recipient before touching the mailbox.
                self.get_task(id).await?;
                let root = store.workdir().to_path_buf();
                let mailbox = self.mailbox(&root)?;
                let chain = AuditChain::open(
                    root.join(".sdd").join("audit"),
                    self.require_key("the task mailbox")?.clone(),
                );
                let home = self.home_dir.clone();
                let mode = self.dlp_mode;
                let body = body.clone();
                let id = id.to_owned();
                run_blocking(move || {
                    let redaction = RedactionContext {
                        home: home.as_deref(),
                        secrets: &[],
                        mode,
                    };
                    post_message_blocking(&mailbox, &chain, &id, &body, &redaction)
                })
                .await?
            }
        }
    }

    /// `GET /tasks/{id}/messages[?since_seq=]`: the task's mailbox entries after `since_seq`.
    ///
    /// # Errors
    ///
    /// Not found, or the backend's failure.
    pub async fn list_messages(&self, id: &str, since_seq: Option<i64>) -> Result<Value, Error> {
        let task_id = TaskId::parse(id)?;
        match &self.kind {
            BackendKind::Remote(remote) => Ok(remote
                .client()
                .list_messages(&task_id, since_seq.and_then(|s| u64::try_from(s).ok()))
                .await?),
            BackendKind::Embedded(store) => {
                self.get_task(id).await?;
                let mailbox = self.mailbox(store.workdir())?;
                let id = id.to_owned();
                let entries =
                    run_blocking(move || mailbox.pending(&id, since_seq.unwrap_or(-1))).await??;
                Ok(Value::Array(
                    entries.iter().map(|e| Value::Object(e.to_wire())).collect(),
                ))
            }
        }
    }

    /// `POST /tasks/{id}/artifacts` with `body` (every artifact field but `task_id`), posted as
    /// `poster`, which must hold the task's claim: the chain-anchored artifact record.
    ///
    /// # Errors
    ///
    /// Not found, a refused post (not the holder, invalid content), or the backend's failure.
    pub async fn post_artifact(
        &self,
        id: &str,
        poster: &str,
        body: &Object,
        trace: &TraceContext,
    ) -> Result<Value, Error> {
        let task_id = TaskId::parse(id)?;
        match &self.kind {
            BackendKind::Remote(remote) => {
                let remote = Self::remote_with_trace(remote, trace)?;
                Ok(remote
                    .client()
                    .post_artifact(&task_id, poster, body)
                    .await?)
            }
            BackendKind::Embedded(store) => {
                let row = self.get_task(id).await?;
                let key = self.require_key("an artifact post")?.clone();
                let root = store.workdir().to_path_buf();
                let store = store.store().await?;
                let body = body.clone();
                let poster = poster.to_owned();
                let id = id.to_owned();
                let trace = trace.clone();
                let status = row_status(&row);
                run_blocking(move || {
                    // The store's claim holder, or a claim receipt's claimer the store has not
                    // adopted yet.
                    let holder = store
                        .get_task(&task_id)
                        .ok()
                        .and_then(|task| task.claimed_by)
                        .or_else(|| pending_backlog_claimer(&root, &id, &status));
                    post_artifact_blocking(
                        &root,
                        key,
                        &id,
                        &poster,
                        holder.as_deref(),
                        &body,
                        trace,
                    )
                })
                .await?
            }
        }
    }

    /// `GET /tasks/{id}/artifacts`: the task's artifact records, in journal order.
    ///
    /// # Errors
    ///
    /// Not found, or the backend's failure.
    pub async fn list_artifacts(&self, id: &str) -> Result<Value, Error> {
        let task_id = TaskId::parse(id)?;
        match &self.kind {
            BackendKind::Remote(remote) => Ok(remote.client().list_artifacts(&task_id).await?),
            BackendKind::Embedded(store) => {
                self.get_task(id).await?;
                let root = store.workdir().to_path_buf();
                let id = id.to_owned();
                let records = run_blocking(move || read_artifact_rows(&root, &id)).await??;
                Ok(Value::Array(
                    records
                        .iter()
                        .map(|r| Value::Object(r.to_object()))
                        .collect(),
                ))
            }
        }
    }

    /// Waits for the first task created for `role` (`GET /events/tasks?role=`), at most
    /// `deadline`. The embedded store is re-read every 200 ms for a task it did not hold when
    /// the wait began.
    ///
    /// # Errors
    ///
    /// The backend's failure.
    pub async fn subscribe(
        &self,
        role: &str,
        deadline: Duration,
    ) -> Result<SubscribeOutcome, Error> {
        match &self.kind {
            BackendKind::Remote(remote) => Ok(remote.client().subscribe(role, deadline).await?),
            BackendKind::Embedded(_) => {
                let known: BTreeSet<String> = self
                    .list_tasks(None)
                    .await?
                    .iter()
                    .filter_map(row_id)
                    .collect();
                let wait = async {
                    loop {
                        tokio::time::sleep(SUBSCRIBE_POLL).await;
                        for row in self.list_tasks(None).await? {
                            let Some(object) = row.as_object() else {
                                continue;
                            };
                            let Some(id) = row_id(&row) else { continue };
                            if known.contains(&id)
                                || object.get("role").and_then(Value::as_str) != Some(role)
                            {
                                continue;
                            }
                            let title = object
                                .get("title")
                                .cloned()
                                .unwrap_or(Value::Str(String::new()));
                            return Ok::<_, Error>(SubscribeOutcome::Notification(Value::Object(
                                Object::new().with("task_id", id).with("title", title),
                            )));
                        }
                    }
                };
                match tokio::time::timeout(deadline, wait).await {
                    Ok(result) => result,
                    Err(_) => Ok(SubscribeOutcome::TimedOut),
                }
            }
        }
    }

    /// `POST /administrative-runs {"goal"}`: a new administrative run (task server only).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] on the embedded store; the server's failure otherwise.
    pub async fn create_administrative_run(
        &self,
        goal: &str,
        trace: &TraceContext,
    ) -> Result<Value, Error> {
        match &self.kind {
            BackendKind::Remote(remote) => {
                let remote = Self::remote_with_trace(remote, trace)?;
                Ok(remote.client().create_administrative_run(goal).await?)
            }
            BackendKind::Embedded(_) => Err(administrative_unsupported()),
        }
    }

    /// `GET /administrative-runs/{run_id}` (task server only).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] on the embedded store; the server's failure otherwise.
    pub async fn get_administrative_run(&self, run_id: &str) -> Result<Value, Error> {
        match &self.kind {
            BackendKind::Remote(remote) => {
                Ok(remote.client().get_administrative_run(run_id).await?)
            }
            BackendKind::Embedded(_) => Err(administrative_unsupported()),
        }
    }
}

/// Which transition of this server ended runs (see [`Backend::record_settled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// A completion or an approval (or a completion refused as empty, which fails the task):
    /// the task, and the ancestors the store completed with it.
    Completion,
    /// A cancel: the task and its cancelled descendants.
    Cancellation,
}

/// The lifecycle event a task-store status settles a run with, when it is terminal.
pub(crate) fn settled_event(store_status: &str) -> Option<&'static str> {
    match store_status {
        "done" | "closed" => Some("task_completed"),
        "failed" | "abandoned" | "refused" => Some("task_failed"),
        "cancelled" => Some("task_cancelled"),
        _ => None,
    }
}

impl Backend {
    /// Records the end of the runs a transition of this server settled, before the tool
    /// answers: for each task it ended, the lifecycle journal row (on the remote backend; the
    /// embedded store appends its own rows) and then the run's terminal seal
    /// ([`bernstein_journal::handle::seal_terminal_run`], when an audit key is configured).
    ///
    /// Both steps are exactly-once per run and run state, so the candidate set may be generous
    /// (every ancestor after a completion, every descendant after a cancel): a task that did
    /// not end is left alone. A failure is logged and left for the next poll, which journals
    /// and seals whatever is missing: the transition itself has happened.
    pub async fn record_settled(&self, project_root: &Path, task_id: &str, settled: Settled) {
        // What was gathered before a read failed is settled all the same: the transition's own
        // task is read first, so a parent or a listing that cannot be read costs only the runs
        // it would have named (the next poll settles those), never the task that did end.
        let mut rows = Vec::new();
        if let Err(e) = self.settled_candidates(task_id, settled, &mut rows).await {
            tracing::warn!(
                task_id,
                "could not list every run the transition ended: {e}"
            );
        }
        for (id, row) in rows {
            if let Err(e) = self.settle_run(project_root, &id, &row).await {
                tracing::warn!(task_id = %id, "terminal journal row or seal not written: {e}");
            }
        }
    }

    /// Journals (on the remote backend) and seals the run of `task_id` when `row`, the task's
    /// row in the store, is terminal. Returns whether a journal row or a seal was written.
    ///
    /// # Errors
    ///
    /// The journal's and the chain's errors.
    pub async fn settle_run(
        &self,
        project_root: &Path,
        task_id: &str,
        row: &Object,
    ) -> Result<bool, Error> {
        let Some(event) = settled_event(&row_status(row)) else {
            return Ok(false);
        };
        let journal = !self.is_embedded();
        let chain = self
            .audit_key
            .clone()
            .map(|key| AuditChain::open(project_root.join(".sdd").join("audit"), key));
        let root = project_root.to_path_buf();
        let id = task_id.to_owned();
        let reason = row
            .get("result_summary")
            .and_then(Value::as_str)
            .filter(|_| event != "task_completed")
            .map(str::to_owned);
        let payload = handle::lifecycle_payload(task_id, row, reason.as_deref());
        run_blocking(move || -> Result<bool, Error> {
            let mut wrote = false;
            // The embedded store journals its own transitions; a row missing there (a crash
            // between the task log and the journal) is filled in the same way.
            if journal || !handle::project_task_status(&load_task_rows(&root, &id)?).is_terminal() {
                wrote |= handle::append_terminal_row(&root, &id, event, &payload)?;
            }
            if let Some(chain) = &chain {
                wrote |= matches!(
                    handle::seal_terminal_run(&root, chain, &id)?,
                    handle::SealOutcome::Sealed(_)
                );
            }
            Ok(wrote)
        })
        .await?
    }

    /// A poll of run `id` under `project_root` (`bernstein_run_status`, `tasks/get`): the run
    /// handle, with the run's chain head, after settling what the task store already settled.
    ///
    /// When the journal does not fold to a terminal status but the task store (either
    /// backend) reports the run's task `done`, `failed` or `cancelled` (finished through the
    /// bernstein CLI, REST, or another instance), the matching lifecycle row and the seal are
    /// appended first, exactly once across processes, so a host's poll loop always ends. A
    /// terminal run that is not sealed yet is sealed. Settling is best effort: a failure is
    /// logged and the handle projects what the journal holds.
    ///
    /// # Errors
    ///
    /// The journal's refusal of the id ([`bernstein_journal::Error::InvalidRunId`],
    /// [`bernstein_journal::Error::Containment`]) or a read failure.
    pub async fn poll_run(
        &self,
        project_root: &Path,
        id: &str,
    ) -> Result<(handle::RunHandle, handle::ResolvedRun), bernstein_journal::Error> {
        let poll = || {
            let root = project_root.to_path_buf();
            let id = id.to_owned();
            let sealer = self
                .audit_key
                .clone()
                .map(|key| AuditChain::open(root.join(".sdd").join("audit"), key));
            run_blocking(move || handle::poll_run_handle(&root, &id, sealer.as_ref()))
        };
        let joined = |e: Error| bernstein_journal::Error::Malformed {
            what: "run poll",
            reason: e.to_string(),
        };
        // An ordinary poll is a few reads this process mostly has cached: it is answered on
        // this thread, as handing it to another thread and back costs more than the poll.
        let brief = handle::poll_run_handle_brief(project_root, id, self.audit_key.is_some())?;
        let (run_handle, resolved) = match brief {
            Some(polled) => polled,
            None => poll().await.map_err(joined)??,
        };
        if run_handle.is_terminal() {
            return Ok((run_handle, resolved));
        }
        let Some(task_id) = handle::task_id_of_run(&resolved.run_id) else {
            return Ok((run_handle, resolved));
        };
        let row = match self.get_task(task_id).await {
            Ok(row) => row,
            Err(e) => {
                if !e.is_not_found() {
                    tracing::debug!(task_id, "task store not consulted for the poll: {e}");
                }
                return Ok((run_handle, resolved));
            }
        };
        if settled_event(&row_status(&row)).is_none() {
            return Ok((run_handle, resolved));
        }
        // Another poller may have journalled it in between (then nothing is written here):
        // either way the journal now ends, so project it again.
        match self.settle_run(project_root, task_id, &row).await {
            Ok(_) => poll().await.map_err(joined)?,
            Err(e) => {
                tracing::warn!(
                    task_id,
                    "could not journal the store's terminal status: {e}"
                );
                Ok((run_handle, resolved))
            }
        }
    }

    /// Pushes onto `out` the tasks a transition may have ended, with their rows, the
    /// transition's own task first; on a failed read, `out` keeps what was gathered before it.
    async fn settled_candidates(
        &self,
        task_id: &str,
        settled: Settled,
        out: &mut Vec<(String, Object)>,
    ) -> Result<(), Error> {
        match settled {
            Settled::Completion => {
                let mut seen = BTreeSet::new();
                let mut current = Some(task_id.to_owned());
                while let Some(id) = current.take() {
                    if !seen.insert(id.clone()) {
                        break;
                    }
                    let row = self.get_task(&id).await?;
                    current = row
                        .get("parent_task_id")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    let terminal = settled_event(&row_status(&row)).is_some();
                    out.push((id, row));
                    if !terminal {
                        break;
                    }
                }
            }
            Settled::Cancellation => {
                out.push((task_id.to_owned(), self.get_task(task_id).await?));
                if let BackendKind::Embedded(store) = &self.kind {
                    // The store walks the cancelled subtree on its index; listing every
                    // cancelled task would make each cancellation cost the project's history.
                    let store = store.store().await?;
                    let root = TaskId::parse(task_id)?;
                    let below = run_blocking(move || store.cancelled_descendants(&root)).await??;
                    for task in below {
                        out.push((task.id.to_string(), task.to_object()));
                    }
                    return Ok(());
                }
                let cancelled = self.list_tasks(Some("cancelled")).await?;
                for row in &cancelled {
                    let Some(id) = row_id(row) else { continue };
                    if id != task_id
                        && descends_from(&cancelled, &id, task_id)
                        && let Some(object) = row.as_object()
                    {
                        out.push((id, object.clone()));
                    }
                }
            }
        }
        Ok(())
    }
}

/// What a claim on the embedded store's backlog answers with: its receipt, the rows its
/// `backlogHead` hashed (the file's rows after the claim, and the receipt's snapshot), and
/// whether it was granted. The hydrated entries the claim chose from are dropped as soon as
/// it is decided: on a large backlog they are one more copy of every open row, and they would
/// otherwise be held through the store's projection after the claim, the call's memory peak.
struct DecidedClaim {
    receipt: ClaimReceipt,
    rows: Vec<Object>,
    granted: bool,
}

impl From<ClaimOutcome> for DecidedClaim {
    fn from(outcome: ClaimOutcome) -> DecidedClaim {
        DecidedClaim {
            granted: outcome.granted(),
            receipt: outcome.receipt,
            rows: outcome.normalised_rows,
        }
    }
}

/// The rows of the run journal of `task_id`, read tolerantly (empty when it does not exist).
fn load_task_rows(root: &Path, task_id: &str) -> Result<Vec<Object>, Error> {
    let run_id = bernstein_journal::run_journal::task_run_id(task_id);
    Ok(bernstein_journal::run_journal::load_run_journal(root, &run_id)?.rows)
}

/// Whether `id` has `root` in its parent chain among `rows`.
fn descends_from(rows: &[Value], id: &str, root: &str) -> bool {
    chain_reaches(&parent_map(rows), id, root)
}

/// Each row's id and its `parent_task_id`.
fn parent_map(rows: &[Value]) -> HashMap<String, Option<String>> {
    rows.iter()
        .filter_map(|row| {
            let object = row.as_object()?;
            let id = object.get("id")?.as_str()?.to_owned();
            let parent = object
                .get("parent_task_id")
                .and_then(Value::as_str)
                .map(str::to_owned);
            Some((id, parent))
        })
        .collect()
}

/// Whether walking up from `id` through `parents` reaches `root`. A parent cycle in a
/// malformed listing ends the walk instead of looping forever.
fn chain_reaches(parents: &HashMap<String, Option<String>>, id: &str, root: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut current = parents.get(id).cloned().flatten();
    while let Some(parent) = current {
        if parent == root {
            return true;
        }
        if !seen.insert(parent.clone()) {
            return false;
        }
        current = parents.get(&parent).cloned().flatten();
    }
    false
}

fn administrative_unsupported() -> Error {
    Error::Unsupported(
        "administrative runs are served by a Bernstein task server; the embedded task store \
         does not support template=administrative"
            .to_owned(),
    )
}

/// Runs blocking store or evidence work on Tokio's blocking pool when a runtime is present.
async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    bernstein_tasks::blocking::run_blocking(work)
        .await
        .map_err(|lost| {
            Error::Unsupported(format!(
                "a blocking task store operation did not finish: {lost}"
            ))
        })
}

fn object_answer(value: Value, what: &str) -> Result<Object, Error> {
    match value {
        Value::Object(object) => Ok(object),
        _ => Err(Error::UnexpectedAnswer(format!(
            "the task server did not answer with {what}"
        ))),
    }
}

/// A row's `status` as the gates read it: the string, or `""` when it has none.
pub(crate) fn row_status(row: &Object) -> String {
    row.get("status")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn row_id(row: &Value) -> Option<String> {
    row.as_object()?.get("id")?.as_str().map(str::to_owned)
}

/// How many `rows` have `root` in their parent chain (the reference's cascade count).
fn count_descendants(rows: &[Value], root: &str) -> u64 {
    let parents = parent_map(rows);
    parents
        .keys()
        .filter(|id| chain_reaches(&parents, id, root))
        .count() as u64
}

fn text_field(body: &Object, key: &str) -> Option<String> {
    body.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn int_field(body: &Object, key: &str) -> Option<i64> {
    body.get(key).and_then(Value::as_i64)
}

fn invalid(message: String) -> Error {
    Error::Task(bernstein_tasks::Error::InvalidRequest(message))
}

/// Reads a `TaskCreate` body into the store's request.
fn new_task_from_body(body: &Object) -> Result<NewTask, Error> {
    if body.get("run_id").is_some_and(|v| *v != Value::Null) {
        return Err(administrative_unsupported());
    }
    let mut request = NewTask::new(
        text_field(body, "title").unwrap_or_default(),
        text_field(body, "description").unwrap_or_default(),
    );
    if let Some(role) = text_field(body, "role") {
        request.role = role;
    }
    if let Some(priority) = int_field(body, "priority") {
        request.priority = u8::try_from(priority)
            .map_err(|_| invalid(format!("priority {priority} is out of range")))?;
    }
    if let Some(scope) = text_field(body, "scope") {
        request.scope = Scope::parse(&scope)?;
    }
    if let Some(complexity) = text_field(body, "complexity") {
        request.complexity = Complexity::parse(&complexity)?;
    }
    if let Some(minutes) = int_field(body, "estimated_minutes") {
        request.estimated_minutes = u32::try_from(minutes)
            .map_err(|_| invalid(format!("estimated_minutes {minutes} is out of range")))?;
    }
    if let Some(parent) = text_field(body, "parent_task_id") {
        request.parent_task_id = Some(TaskId::parse(&parent)?);
    }
    if let Some(Value::Array(ids)) = body.get("depends_on") {
        for id in ids {
            let text = id.as_str().ok_or_else(|| {
                invalid("depends_on holds a value that is not a string".to_owned())
            })?;
            request.depends_on.push(TaskId::parse(text)?);
        }
    }
    request.model = text_field(body, "model");
    request.effort = text_field(body, "effort");
    if let Some(Value::Object(metadata)) = body.get("metadata") {
        request.metadata = metadata.clone();
    }
    Ok(request)
}

fn claim_request_from_body(body: &Object) -> BacklogClaimRequest {
    let completed_ids = match body.get("completed_ids") {
        Some(Value::Array(ids)) => ids
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => BTreeSet::new(),
    };
    let filter = ClaimFilter {
        project: text_field(body, "project"),
        role: text_field(body, "role"),
        capability: text_field(body, "capability"),
        completed_ids,
        max_attempts: int_field(body, "max_attempts"),
        task_ids: None,
        admits: None,
    };
    BacklogClaimRequest {
        claimer_id: text_field(body, "claimer_id").unwrap_or_default(),
        claimer_card_fingerprint: text_field(body, "claimer_card_fingerprint"),
        filter,
    }
}

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn post_message_blocking(
    mailbox: &Mailbox,
    chain: &AuditChain,
    task_id: &str,
    body: &Object,
    redaction: &RedactionContext<'_>,
) -> Result<Value, Error> {
    let sender = text_field(body, "sender").unwrap_or_default();
    let kind = text_field(body, "kind").unwrap_or_else(|| "finding".to_owned());
    let text = text_field(body, "body").unwrap_or_default();
    let fingerprint = text_field(body, "sender_card_fingerprint")
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| UNREGISTERED_FINGERPRINT.to_owned());
    let message = NewMessage {
        task_id,
        sender: &sender,
        sender_card_fingerprint: &fingerprint,
        kind: &kind,
        body: &text,
        timestamp: now_unix(),
        authority: Authority::TrustedInternal,
    };
    // The mirror is written under the mailbox lock, after any mirror a killed writer owed.
    let (entry, mirror_error) = mailbox.post_mirrored(&message, redaction, chain)?;
    // As in the reference route, the mirror is best effort: the entry is already durable, and
    // the next post writes the missing mirror.
    if let Some(e) = mirror_error {
        tracing::warn!(task_id, "task_mailbox: audit chain mirror failed: {e}");
    }
    Ok(Value::Object(entry.to_wire()))
}

/// The claimer of `task_id`'s backlog row when a claim receipt took it and the store has not
/// adopted that claim yet (the store adopts it on its next write).
fn pending_backlog_claimer(root: &Path, task_id: &str, store_status: &str) -> Option<String> {
    if store_status != TaskStatus::Open.as_str() {
        return None;
    }
    let entries = read_backlog(&backlog_path(root)).ok()?;
    entries
        .into_iter()
        .find(|entry| entry.id == task_id && entry.status == "in_progress")
        .and_then(|entry| entry.claimer)
}

fn string_list(value: Option<&Value>) -> Vec<Value> {
    match value {
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

fn post_artifact_blocking(
    root: &Path,
    key: AuditKey,
    task_id: &str,
    poster: &str,
    holder: Option<&str>,
    body: &Object,
    trace: TraceContext,
) -> Result<Value, Error> {
    let rows = match body.get("rows") {
        Some(Value::Array(rows)) => rows.iter().map(|row| string_list(Some(row))).collect(),
        _ => Vec::new(),
    };
    let fields = ArtifactFields {
        body: text_field(body, "body").unwrap_or_default(),
        columns: string_list(body.get("columns")),
        rows,
        url: text_field(body, "url").unwrap_or_default(),
        link_kind: text_field(body, "link_kind").unwrap_or_default(),
        sarif_result: match body.get("sarif_result") {
            Some(Value::Object(result)) => result.clone(),
            _ => Object::new(),
        },
        provenance: FindingProvenance {
            tool: text_field(body, "tool").unwrap_or_default(),
            tool_version: text_field(body, "tool_version").unwrap_or_default(),
            pinned_ruleset_or_feed_digest: text_field(body, "pinned_ruleset_or_feed_digest")
                .unwrap_or_default(),
            invocation_argv_hash: text_field(body, "invocation_argv_hash").unwrap_or_default(),
            target: text_field(body, "target").unwrap_or_default(),
        },
    };
    let artifact_type = text_field(body, "artifact_type").unwrap_or_default();
    let content = ArtifactContent::build(&artifact_type, &fields)?;
    let artifact_key = text_field(body, "key").unwrap_or_default();
    let chain = AuditChain::open(root.join(".sdd").join("audit"), key);
    let request = PostRequest {
        task_id,
        key: &artifact_key,
        content: &content,
        holder,
        poster,
        trace,
        spine_timestamp: None,
        audit_timestamp: None,
    };
    let posted = post_run_artifact(root, &chain, &request)?;
    Ok(Value::Object(posted.to_wire()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, parent: Option<&str>) -> Value {
        Value::Object(
            Object::new()
                .with("id", id)
                .with("parent_task_id", parent.map(Value::from)),
        )
    }

    #[test]
    fn descendants_follow_parent_chains() {
        let rows = [
            row("root", None),
            row("a", Some("root")),
            row("b", Some("a")),
            row("c", Some("other")),
            row("x", Some("y")),
            row("y", Some("x")),
        ];
        assert_eq!(count_descendants(&rows, "root"), 2);
        assert_eq!(count_descendants(&rows, "a"), 1);
        assert_eq!(count_descendants(&rows, "none"), 0);
    }

    #[test]
    fn task_bodies_become_requests() {
        let body = Object::new()
            .with("title", "t")
            .with("description", "d")
            .with("role", "qa")
            .with("priority", 3)
            .with("scope", "small")
            .with("depends_on", vec![Value::from("abc")]);
        let request = new_task_from_body(&body).unwrap();
        assert_eq!(request.role, "qa");
        assert_eq!(request.priority, 3);
        assert_eq!(request.scope, Scope::Small);
        assert_eq!(request.depends_on.len(), 1);
        let admin = body.with("run_id", "admin-00");
        assert!(matches!(
            new_task_from_body(&admin),
            Err(Error::Unsupported(_))
        ));
    }

    #[test]
    fn the_debug_form_names_the_backend_and_redacts_the_key() {
        let config = bernstein_tasks::remote::RemoteConfig::new("http://127.0.0.1:9");
        let backend = Backend::remote(RemoteBackend::new(config).unwrap())
            .with_audit_key(AuditKey::from_master_bytes(vec![7; 32]))
            .with_home_dir(Some("/home/someone".to_owned()));
        let text = format!("{backend:?}");
        assert!(text.starts_with("Backend { kind: Remote("), "{text}");
        assert!(text.contains("<32 bytes redacted>"), "{text}");
        assert!(text.contains("/home/someone"), "{text}");
    }

    #[test]
    fn only_the_embedded_store_reports_itself_embedded() {
        let config = bernstein_tasks::remote::RemoteConfig::new("http://127.0.0.1:9");
        let remote = Backend::remote(RemoteBackend::new(config).unwrap());
        assert!(!remote.is_embedded());
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path(), None).unwrap();
        let embedded = Backend::embedded(store, AuditKey::from_master_bytes(vec![7; 32]));
        assert!(embedded.is_embedded());
    }

    #[test]
    fn every_terminal_store_status_settles_with_its_lifecycle_event() {
        for (status, event) in [
            ("done", Some("task_completed")),
            ("closed", Some("task_completed")),
            ("failed", Some("task_failed")),
            ("abandoned", Some("task_failed")),
            ("refused", Some("task_failed")),
            ("cancelled", Some("task_cancelled")),
            ("open", None),
            ("claimed", None),
            ("in_progress", None),
            ("", None),
        ] {
            assert_eq!(settled_event(status), event, "status {status:?}");
        }
    }

    #[test]
    fn a_pending_claimer_is_read_from_the_backlog_only_for_an_open_task() {
        let dir = tempfile::tempdir().unwrap();
        let path = backlog_path(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // Three rows: one claimed by a receipt, one still open, and another claimed row that a
        // lookup matching on the status alone would find first for the open task.
        std::fs::write(
            &path,
            r#"[
  {"id": "t-1", "status": "in_progress", "claimer": "w-1"},
  {"id": "t-2", "status": "open"},
  {"id": "t-3", "status": "in_progress", "claimer": "w-3"}
]"#,
        )
        .unwrap();
        let root = dir.path();
        assert_eq!(
            pending_backlog_claimer(root, "t-1", "open").as_deref(),
            Some("w-1")
        );
        assert_eq!(
            pending_backlog_claimer(root, "t-3", "open").as_deref(),
            Some("w-3")
        );
        // The store has already adopted (or ended) the claim: the backlog is not consulted.
        assert_eq!(pending_backlog_claimer(root, "t-1", "claimed"), None);
        // An unclaimed backlog row has no claimer to report.
        assert_eq!(pending_backlog_claimer(root, "t-2", "open"), None);
        assert_eq!(pending_backlog_claimer(root, "t-9", "open"), None);
    }
}
