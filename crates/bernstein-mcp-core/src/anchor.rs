//! Anchoring: every served `tools/call` becomes an ordered `mcp.stateless_call` row in the
//! anchoring run's journal and a matching audit-chain entry, before the call runs.
//!
//! There is no session to remember call order, so the order lives in the evidence:
//!
//! 1. Under the run journal's exclusive lock, the call index is the number of
//!    `mcp.stateless_call` rows already in the journal, so several server processes sharing
//!    one project produce one gap-free order. A `baggage` member `mcp.call_index=<n>` that
//!    disagrees refuses the call (nothing is written for it).
//! 2. The trace and span ids are content-derived ([`crate::ids`]): the trace from the run id,
//!    the span from the request content (params without `_meta`) and the call index. A
//!    well-formed client `traceparent` wins over both.
//! 3. The row `{method, call_index, trace_id, span_id}` is appended, then the audit entry
//!    (`mcp.stateless_call`, actor `mcp_stateless_core`, resource the span id, details
//!    `{run_id, method, call_index, trace_id, span_id, journal_head, cache_content_hash}` plus the
//!    chain's `prev_chain_digest`) is appended and fsynced (FORMATS §2.6), still under the
//!    journal's lock, while the row's fsync runs beside it on the journal writer's helper
//!    thread; the call is answered after both. When the audit append fails the call is refused
//!    and the journal row is taken back, so the refused call does not use up its call index
//!    (which [`reconstruct_call_order`] would otherwise report missing for ever).
//! 4. A process killed between the two appends leaves rows without entries; those calls were
//!    never answered, so they never ran. Before the next calls are counted, still under the
//!    journal's lock, the journal's trailing call rows are settled: unless the last one is the
//!    row this anchor itself completed, the chain is searched from its end for the run's newest
//!    entry, and every row after that entry's index gets an `mcp.stateless_call_abandoned`
//!    entry (same actor and resource, the row's ids and `journal_head`) recording that its index
//!    was used up by a call that never ran. Only the rows after the newest entry need it: every
//!    earlier row was settled by some later group under the same lock. Each is written once,
//!    since the search finds it next time. This event type is our extension (see
//!    `docs/ARCHITECTURE.md`).
//! 5. A power cut while the two fsyncs run can keep entries and lose their rows. The same
//!    settle step then finds an entry past the journal's call rows and writes each lost row
//!    again from its entry (the entry holds the whole payload, and the row's `event_hash` does
//!    not cover `ts` or `elapsed_s`, so it hashes the same), checked against the entry's
//!    `journal_head`, ahead of the group's rows.
//!
//! **Group commit.** Calls that arrive while a group is being committed wait for it, and the
//! anchor's committer thread (for [`Anchor::anchor_queued`]) or the next thread of
//! [`Anchor::anchor`] to find no commit in progress takes every waiting call (up to [`MAX_GROUP`])
//! as one group: its rows go out in one write to the journal, then the settling entries and the
//! group's entries in one write and one fsync of the chain while the journal's one fsync runs
//! beside it, so a burst of `n` concurrent calls costs two fsyncs per group instead of `2n`. Nothing changes in what is written:
//! each row and entry is byte for byte the one a lone call would write, call indexes are given in
//! arrival order, and the chain holds the entries in call-index order. No call is answered before
//! both fsyncs of its group succeeded; when the entries cannot be written, every call of the group
//! gets the error and all its rows are taken back. A process killed between a group's two writes
//! leaves up to [`MAX_GROUP`] rows without entries, which step 4 records as abandoned; the journal
//! writer keeps that many recent rows of each event for it. After a group of several calls the
//! committer thread gives the next group up to [`GATHER_WINDOW`] to grow as large; after a group
//! of one it waits for nothing.
//!
//! [`reconstruct_call_order`] reads the order back from the audit chain alone, counting an
//! abandoned index as used (reported, not a gap).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use bernstein_journal::audit::{self, AuditChain, AuditEvent, Finding, Tear, VerifyReport};
use bernstein_journal::key::AuditKey;
use bernstein_journal::run_journal::{
    CatchUpStats, HashProfile, JournalSummary, JournalWriter, RECENT_ROWS_PER_EVENT,
    validate_run_id,
};
use bernstein_protocol::pyjson::{Object, Value as PyValue};
use serde_json::Value as JsonValue;

use crate::error::{Error, Result};
use crate::ids::{
    TraceParent, baggage_call_index, params_content_hash, parse_traceparent, span_id_for_call,
    trace_id_for_run,
};
use crate::telemetry;

/// The journal event and audit event type of an anchored call.
pub const STATELESS_CALL_EVENT: &str = "mcp.stateless_call";
/// The audit actor of an anchored call.
pub const ANCHOR_ACTOR: &str = "mcp_stateless_core";
/// The audit resource type of an anchored call.
pub const ANCHOR_RESOURCE_TYPE: &str = "mcp_stateless_call";
/// The audit event type recording that a call index was used up by a journal row whose call
/// never ran (its process stopped before the row's audit entry). Our extension: the reference
/// has no such event, and its chain verifier accepts any event type.
pub const ABANDONED_CALL_EVENT: &str = "mcp.stateless_call_abandoned";
/// The `reason` detail of an [`ABANDONED_CALL_EVENT`] entry.
pub const ABANDONED_CALL_REASON: &str = "the anchoring process stopped after the journal row \
     and before its audit entry; the call was never answered and never ran";

/// What anchoring one call wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnchoredCall {
    /// The anchoring run.
    pub run_id: String,
    /// The call's position in the run's MCP call order (0-based).
    pub call_index: u64,
    /// The W3C trace id (32 hex).
    pub trace_id: String,
    /// The W3C span id (16 hex); also the call's `_meter.call_id`.
    pub span_id: String,
    /// The run journal's head after the row was appended.
    pub journal_head: String,
    /// The audit entry's `hmac`, the chain head after the entry was appended.
    pub chain_head: String,
}

/// The most calls one group commit anchors. A group's rows must all be within the rows the
/// journal writer keeps for looking back ([`RECENT_ROWS_PER_EVENT`]), so that a process killed
/// between a group's rows and its audit entries leaves rows the next group can settle.
pub const MAX_GROUP: usize = RECENT_ROWS_PER_EVENT;

/// How long the committer thread waits, at most, for a group to fill up once calls are
/// arriving together (see [`commit_queued`]). Each group costs two fsyncs whatever its size;
/// under load the groups alternated between dozens of calls and a single one, whose two fsyncs
/// anchored one call. Waiting this long for the calls already on their way costs a lone call
/// nothing (nothing is waited for after a group of one) and a loaded server at most this much
/// latency per group.
pub const GATHER_WINDOW: std::time::Duration = std::time::Duration::from_micros(200);

/// The anchoring run of a dispatcher: its journal writer and the audit chain.
#[derive(Debug)]
pub struct Anchor {
    run_id: String,
    /// The trace id every anchored call without a client `traceparent` carries: it depends on
    /// the run id alone, so it is worked out (two SHA-256 digests) once, not per call.
    trace_id: String,
    audit: AuditChain,
    // One writer per dispatcher: `elapsed_s` in the rows then counts from the server's start,
    // as the reference's long-lived journal object does.
    writer: Mutex<AnchorWriter>,
    /// The group-commit queue, shared with the committer thread.
    shared: Arc<Shared>,
    /// Whether the committer thread that serves [`Anchor::anchor_queued`] started, once tried
    /// (a failure is kept, so no call is ever queued with nobody to commit it).
    committer: std::sync::OnceLock<std::result::Result<(), String>>,
}

/// What an [`Anchor`] shares with its committer thread: the thread holds this and only a weak
/// reference to the anchor, so dropping the anchor ends the thread.
#[derive(Debug)]
struct Shared {
    /// The calls waiting for the next group commit, and the results of committed groups.
    queue: Mutex<GroupQueue>,
    /// Signalled whenever a group is committed.
    committed: Condvar,
    /// Signalled when a call is queued by [`Anchor::anchor_queued`] or left waiting after a
    /// commit, and when the anchor is dropped: wakes the committer thread.
    work: Condvar,
    /// [`GATHER_WINDOW`], or what a test sets instead.
    gather_window: std::time::Duration,
}

/// Who waits for a queued call's result.
#[derive(Debug)]
enum Waiter {
    /// A thread blocked in [`Anchor::anchor`], which finds its result in
    /// [`GroupQueue::finished`] under this ticket. Only threads need one: a task's result goes
    /// straight to its channel.
    Thread(u64),
    /// A task awaiting [`Anchor::anchor_queued`]. It may have gone (cancelled or timed out):
    /// the call is still committed, and its result dropped.
    Task(oneshot::Sender<Result<AnchoredCall>>),
}

/// The group-commit queue of an [`Anchor`].
#[derive(Debug, Default)]
struct GroupQueue {
    /// Calls not yet taken into a group, in arrival order.
    waiting: VecDeque<(PendingCall, Waiter)>,
    /// Results of committed calls whose threads have not picked them up yet.
    finished: HashMap<u64, Result<AnchoredCall>>,
    /// Whether some thread is committing a group now.
    committing: bool,
    /// Set when the anchor is dropped: the committer thread ends.
    closed: bool,
    /// The ticket the next [`Waiter::Thread`] gets.
    next_ticket: u64,
    stats: GroupStats,
}

/// How an [`Anchor`]'s calls were grouped so far (a probe for tests and benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Group commits made (each one journal write and fsync, and one audit write and fsync).
    pub groups: u64,
    /// Calls anchored or refused by those groups.
    pub calls: u64,
    /// The most calls one group held.
    pub largest: u64,
    /// Calls waiting for the next group now.
    pub waiting: u64,
}

/// What anchoring one call needs from its request, read before it waits for a group.
#[derive(Debug)]
struct PendingCall {
    method: String,
    traceparent: Option<TraceParent>,
    claim: Option<std::result::Result<u64, String>>,
    content_hash: String,
}

impl PendingCall {
    fn read(method: &str, params: Option<&JsonValue>) -> PendingCall {
        let meta = params.and_then(|p| p.get("_meta"));
        let meta_str = |key: &str| meta.and_then(|m| m.get(key)).and_then(JsonValue::as_str);
        PendingCall {
            method: method.to_owned(),
            traceparent: meta_str("traceparent").and_then(parse_traceparent),
            claim: meta_str("baggage").and_then(baggage_call_index),
            content_hash: params_content_hash(method, params),
        }
    }
}

/// What became of one call of a group.
enum Outcome {
    /// Its baggage claimed another index: nothing was written for it.
    Refused { claimed: String, actual: u64 },
    /// It has a row (and, once the group's entries are written, an audit entry).
    Anchored {
        method: String,
        call_index: u64,
        trace_id: String,
        span_id: String,
    },
}

/// The same failure for each of `calls` calls of a group: the error itself for a group of
/// one, and shared otherwise.
fn group_failure(err: Error, calls: usize) -> Vec<Result<AnchoredCall>> {
    if calls == 1 {
        return vec![Err(err)];
    }
    let shared = Arc::new(err);
    (0..calls)
        .map(|_| Err(Error::Group(Arc::clone(&shared))))
        .collect()
}

/// What settling the journal's call rows against the chain found ([`Anchor::settle`]).
enum Settlement {
    /// The entries owed for rows whose process stopped before their entries (maybe none).
    Abandoned(Vec<AuditEvent>),
    /// The details of the entries whose rows a crash lost, oldest first.
    Lost(Vec<Object>),
}

/// The payload of a `mcp.stateless_call` row: every key it hashes is also in the call's audit
/// entry, so a row lost in a crash is rebuilt from the entry and hashes the same.
fn call_row_payload(method: &str, call_index: PyValue, trace_id: &str, span_id: &str) -> Object {
    Object::new()
        .with("method", method)
        .with("call_index", call_index)
        .with("trace_id", trace_id)
        .with("span_id", span_id)
}

/// Whether `record` is a call or abandonment entry of run `run_id`.
fn is_call_entry_of(record: &Object, run_id: &str) -> bool {
    let kind = record.get("event_type").and_then(PyValue::as_str);
    matches!(kind, Some(STATELESS_CALL_EVENT | ABANDONED_CALL_EVENT))
        && record
            .get("details")
            .and_then(PyValue::as_object)
            .and_then(|details| details.get("run_id"))
            .and_then(PyValue::as_str)
            == Some(run_id)
}

/// The `details.call_index` of an entry.
fn call_index_of(record: &Object) -> Option<u64> {
    match record
        .get("details")
        .and_then(PyValue::as_object)
        .and_then(|details| details.get("call_index"))
    {
        Some(PyValue::Int(i)) => i.as_u64(),
        _ => None,
    }
}

/// The journal writer and what this anchor knows about the journal's last call row.
#[derive(Debug)]
struct AnchorWriter {
    journal: JournalWriter,
    /// The `event_hash` of the last `mcp.stateless_call` row known to be settled (its audit
    /// entry, or an abandonment entry, is in the chain). While the journal's last call row is
    /// this one, no search of the chain is needed. An empty string: the journal held no call
    /// row when the chain was last searched.
    settled: Option<String>,
}

impl Anchor {
    /// Anchors calls into `<project_root>/.sdd/runs/<run_id>/journal.jsonl` and the chain in
    /// `<project_root>/.sdd/audit`, authenticated with `key`. Nothing is written until the first
    /// call.
    ///
    /// # Errors
    ///
    /// [`Error::Journal`] when `run_id` cannot name a journal inside the project.
    pub fn open(project_root: &Path, run_id: &str, key: AuditKey) -> Result<Anchor> {
        validate_run_id(run_id)?;
        let writer = JournalWriter::open(project_root, run_id, HashProfile::PyJsonV1)?;
        Ok(Anchor {
            run_id: run_id.to_owned(),
            trace_id: trace_id_for_run(run_id),
            audit: AuditChain::open(project_root.join(".sdd").join("audit"), key),
            writer: Mutex::new(AnchorWriter {
                journal: writer,
                settled: None,
            }),
            shared: Arc::new(Shared {
                queue: Mutex::default(),
                committed: Condvar::new(),
                work: Condvar::new(),
                gather_window: GATHER_WINDOW,
            }),
            committer: std::sync::OnceLock::new(),
        })
    }

    /// The anchoring run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The audit chain calls are anchored in.
    pub fn audit_chain(&self) -> &AuditChain {
        &self.audit
    }

    /// How the anchoring journal's writer has caught up on other servers' rows so far (a
    /// probe for tests and benchmarks: catching up reads only what was appended).
    pub fn journal_catch_up_stats(&self) -> CatchUpStats {
        self.writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .journal
            .catch_up_stats()
    }

    /// Reads the anchoring journal ahead of the first call ([`JournalWriter::read_ahead`]), so
    /// that call does not wait on a long-lived journal's whole read (about a third of a second
    /// at 100,000 calls). Best effort: a failure is logged, and the first call reads the
    /// journal again and answers with the error.
    pub fn read_ahead(&self) {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(err) = writer.journal.read_ahead() {
            tracing::debug!(
                run_id = %self.run_id,
                "the anchoring journal was not read ahead (the first call reads it): {err}"
            );
        }
    }

    /// How this anchor's calls were grouped so far.
    pub fn group_stats(&self) -> GroupStats {
        let queue = self.shared.lock();
        GroupStats {
            waiting: queue.waiting.len() as u64,
            ..queue.stats
        }
    }

    /// Anchors one call of `method` with `params` (including `_meta`, which is read for
    /// `traceparent` and `baggage` and left out of the content hash). Blocks on file locks and
    /// fsync; async callers use [`Anchor::anchor_queued`].
    ///
    /// Calls made while another group is being committed wait and are then committed together
    /// (see the module documentation, "Group commit"); the answer comes only once the call's
    /// own row and audit entry are durable.
    ///
    /// # Errors
    ///
    /// [`Error::CallIndexClaim`] when a baggage claim disagrees (nothing is written for the
    /// call; an earlier abandoned call may still be recorded);
    /// [`Error::Journal`] when the journal or the chain cannot be appended to, or the chain
    /// cannot be searched for the last call's entry ([`Error::Group`] around it when the
    /// failure was shared by several calls of one group).
    pub fn anchor(&self, method: &str, params: Option<&JsonValue>) -> Result<AnchoredCall> {
        let call = PendingCall::read(method, params);
        let mut queue = self.shared.lock();
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.waiting.push_back((call, Waiter::Thread(ticket)));
        loop {
            if let Some(result) = queue.finished.remove(&ticket) {
                return result;
            }
            if queue.committing {
                queue = self
                    .shared
                    .committed
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            // Nobody is committing: this thread commits everything waiting (its own call
            // included, unless an earlier group took it), up to one group's bound.
            queue = self.commit_front(&self.shared, queue);
        }
    }

    /// [`Anchor::anchor`] for async callers: the call is queued and the task waits for its
    /// result without holding a thread. The groups are committed by one committer thread per
    /// anchor (started by the first such call), so concurrent calls do not each take a
    /// thread into the file locks and fsyncs; only the group's committer blocks.
    ///
    /// Dropping the returned future does not take the call back: it is committed with its
    /// group and its result discarded (as a process killed after the audit entry leaves an
    /// anchored call that never ran).
    ///
    /// # Errors
    ///
    /// As [`Anchor::anchor`]; [`Error::AnchorTask`] when the committer thread is gone.
    pub async fn anchor_queued(
        self: &Arc<Self>,
        method: &str,
        params: Option<&JsonValue>,
    ) -> Result<AnchoredCall> {
        self.start_committer()?;
        let call = PendingCall::read(method, params);
        let (reply, answer) = oneshot::channel();
        {
            let mut queue = self.shared.lock();
            queue.waiting.push_back((call, Waiter::Task(reply)));
        }
        self.shared.work.notify_one();
        answer.await.unwrap_or_else(|_| {
            Err(Error::AnchorTask(
                "the anchor's committer thread stopped".to_owned(),
            ))
        })
    }

    /// Starts the committer thread once.
    fn start_committer(self: &Arc<Self>) -> Result<()> {
        let started = self.committer.get_or_init(|| {
            let shared = Arc::clone(&self.shared);
            let anchor = Arc::downgrade(self);
            std::thread::Builder::new()
                .name("anchor-commit".to_owned())
                .spawn(move || commit_queued(&shared, &anchor))
                .map(drop)
                .map_err(|err| format!("cannot start the committer: {err}"))
        });
        started.clone().map_err(Error::AnchorTask)
    }

    /// Commits one group from the front of the queue: sets `committing`, takes up to
    /// [`MAX_GROUP`] calls, commits them with the queue unlocked, delivers every result, then
    /// clears `committing` and wakes whoever waits (the threads of [`Anchor::anchor`], and the
    /// committer thread when calls are still queued).
    fn commit_front<'q>(
        &self,
        shared: &'q Shared,
        mut queue: MutexGuard<'q, GroupQueue>,
    ) -> MutexGuard<'q, GroupQueue> {
        queue.committing = true;
        let take = queue.waiting.len().min(MAX_GROUP);
        let taken: Vec<(PendingCall, Waiter)> = queue.waiting.drain(..take).collect();
        drop(queue);
        let calls: Vec<&PendingCall> = taken.iter().map(|(call, _)| call).collect();
        let results = std::panic::catch_unwind(AssertUnwindSafe(|| self.anchor_group(&calls)))
            .unwrap_or_else(|_| {
                group_failure(
                    Error::AnchorTask("anchoring a group of calls panicked".to_owned()),
                    calls.len(),
                )
            });
        telemetry::group_committed(calls.len());
        let mut queue = shared.lock();
        queue.committing = false;
        let size = taken.len() as u64;
        queue.stats.groups += 1;
        queue.stats.calls += size;
        queue.stats.largest = queue.stats.largest.max(size);
        for ((_, waiter), result) in taken.into_iter().zip(results) {
            match waiter {
                Waiter::Thread(ticket) => {
                    queue.finished.insert(ticket, result);
                }
                Waiter::Task(reply) => {
                    // A task that gave up waiting dropped its receiver; nothing to tell it.
                    let _ = reply.send(result);
                }
            }
        }
        shared.committed.notify_all();
        if queue
            .waiting
            .iter()
            .any(|(_, waiter)| matches!(waiter, Waiter::Task(_)))
        {
            shared.work.notify_one();
        }
        queue
    }

    /// Anchors one group of calls under the journal's lock: settles the rows another process
    /// left without audit entries, gives each call its index (refusing a call whose baggage
    /// claim disagrees, which uses up no index), appends every row (the rebuilt ones first) in
    /// one write, then every audit entry (the settling ones first) in one write and fsync while
    /// the rows' fsync runs beside it. Returns one result per call, in order.
    fn anchor_group(&self, calls: &[&PendingCall]) -> Vec<Result<AnchoredCall>> {
        let outcomes: RefCell<Vec<Outcome>> = RefCell::new(Vec::with_capacity(calls.len()));
        let abandoned: RefCell<Vec<AuditEvent>> = RefCell::new(Vec::new());
        let settle_failure: RefCell<Option<bernstein_journal::Error>> = RefCell::new(None);
        let settled_head: RefCell<Option<String>> = RefCell::new(None);
        // The call rows rebuilt from their audit entries (a crash kept the entries and lost
        // the rows), each with the `journal_head` its entry names; they lead the group.
        let rebuilt: RefCell<Vec<String>> = RefCell::new(Vec::new());
        // A poisoned lock only means another group panicked mid-append; the journal itself is
        // re-read under its file lock, so the writer is still sound to use.
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let AnchorWriter { journal, settled } = &mut *writer;
        let appended = journal.append_group_overlapping_then(
            STATELESS_CALL_EVENT,
            |journal| {
                let rows_held = journal.count_of(STATELESS_CALL_EVENT);
                let mut payloads = Vec::with_capacity(calls.len());
                // Settle the rows before this group's: they concern earlier calls, so this is
                // done even when every call of the group is then refused. The chain is
                // searched only when the last row is not the one this anchor itself
                // completed (or settled) last time; with no row yet, only once.
                let last = journal.last_of(STATELESS_CALL_EVENT);
                let head = last.and_then(|last| last.get("event_hash").and_then(PyValue::as_str));
                let unsettled = match last {
                    Some(_) => head.is_none() || head != settled.as_deref(),
                    None => settled.is_none(),
                };
                if unsettled {
                    match self.settle(journal, rows_held) {
                        Ok(Settlement::Abandoned(events)) => *abandoned.borrow_mut() = events,
                        Ok(Settlement::Lost(entries)) => {
                            let mut rebuilt = rebuilt.borrow_mut();
                            for details in entries {
                                let text = |key: &str| {
                                    details
                                        .get(key)
                                        .and_then(PyValue::as_str)
                                        .unwrap_or_default()
                                };
                                rebuilt.push(text("journal_head").to_owned());
                                payloads.push(call_row_payload(
                                    text("method"),
                                    details.get("call_index").cloned().unwrap_or(PyValue::Null),
                                    text("trace_id"),
                                    text("span_id"),
                                ));
                            }
                        }
                        Err(err) => {
                            *settle_failure.borrow_mut() = Some(err);
                            return Vec::new();
                        }
                    }
                    *settled_head.borrow_mut() = Some(head.unwrap_or_default().to_owned());
                }
                let first_index = rows_held + payloads.len() as u64;
                let mut outcomes = outcomes.borrow_mut();
                let mut next = first_index;
                for call in calls {
                    let refused = match &call.claim {
                        Some(Ok(claimed)) if *claimed != next => Some(claimed.to_string()),
                        Some(Err(text)) => Some(text.clone()),
                        _ => None,
                    };
                    if let Some(claimed) = refused {
                        outcomes.push(Outcome::Refused {
                            claimed,
                            actual: next,
                        });
                        continue;
                    }
                    let (trace_id, span_id) = match &call.traceparent {
                        Some(parent) => (parent.trace_id.clone(), parent.parent_id.clone()),
                        None => (
                            self.trace_id.clone(),
                            span_id_for_call(&call.content_hash, next),
                        ),
                    };
                    payloads.push(call_row_payload(
                        call.method.as_str(),
                        PyValue::from(next),
                        trace_id.as_str(),
                        span_id.as_str(),
                    ));
                    outcomes.push(Outcome::Anchored {
                        method: call.method.clone(),
                        call_index: next,
                        trace_id,
                        span_id,
                    });
                    next += 1;
                }
                payloads
            },
            |rows| {
                if settle_failure.borrow().is_some() {
                    return Ok(Vec::new());
                }
                // A rebuilt row must hash as the row its entry names did, or it is not that
                // row: the group is refused and its rows taken back.
                let rebuilt = rebuilt.borrow();
                for (row, named) in rows.iter().zip(rebuilt.iter()) {
                    if row.event_hash != *named {
                        return Err(bernstein_journal::Error::JournalUnusable {
                            path: self.journal_path(),
                            reason: format!(
                                "the audit entry of the call row at index {} names journal head \
                                 {named}, but the row rebuilt from that entry hashes to {}",
                                row.index, row.event_hash
                            ),
                        });
                    }
                }
                let rows = &rows[rebuilt.len().min(rows.len())..];
                // The settling entries go first: they hold lower call indexes, and entries of
                // one run are written in call-index order.
                let mut events = abandoned.borrow().clone();
                let anchored = outcomes.borrow();
                let calls = anchored.iter().filter_map(|outcome| match outcome {
                    Outcome::Anchored {
                        method,
                        call_index,
                        trace_id,
                        span_id,
                    } => Some((method, call_index, trace_id, span_id)),
                    Outcome::Refused { .. } => None,
                });
                for (row, (method, call_index, trace_id, span_id)) in rows.iter().zip(calls) {
                    let details = Object::new()
                        .with("run_id", self.run_id.as_str())
                        .with("method", method.as_str())
                        .with("call_index", *call_index)
                        .with("trace_id", trace_id.as_str())
                        .with("span_id", span_id.as_str())
                        .with("journal_head", row.event_hash.as_str())
                        .with("cache_content_hash", "");
                    events.push(AuditEvent::new(
                        STATELESS_CALL_EVENT,
                        ANCHOR_ACTOR,
                        ANCHOR_RESOURCE_TYPE,
                        span_id.as_str(),
                        details,
                    ));
                }
                self.audit.append_many(&events)
            },
        );
        if let Some(err) = settle_failure.into_inner() {
            return group_failure(Error::Journal(err), calls.len());
        }
        let (rows, records) = match appended {
            Ok(appended) => appended,
            Err(err) => return group_failure(Error::Journal(err), calls.len()),
        };
        if let Some(head) = settled_head.into_inner() {
            *settled = Some(head);
        }
        if let Some(last) = rows.last() {
            *settled = Some(last.event_hash.clone());
        }
        drop(writer);
        let new_rows = &rows[rebuilt.into_inner().len().min(rows.len())..];
        let first_call_record = records.len() - new_rows.len();
        let mut anchored = new_rows.iter().zip(&records[first_call_record..]);
        outcomes
            .into_inner()
            .into_iter()
            .map(|outcome| match outcome {
                Outcome::Refused { claimed, actual } => Err(Error::CallIndexClaim {
                    claimed,
                    actual,
                    run_id: self.run_id.clone(),
                }),
                Outcome::Anchored {
                    call_index,
                    trace_id,
                    span_id,
                    ..
                } => {
                    let (row, record) = anchored
                        .next()
                        .expect("one row and one audit entry per anchored call");
                    Ok(AnchoredCall {
                        run_id: self.run_id.clone(),
                        call_index,
                        trace_id,
                        span_id,
                        journal_head: row.event_hash.clone(),
                        chain_head: record.hmac.clone(),
                    })
                }
            })
            .collect()
    }

    /// The anchoring journal's path, for error messages: `<.sdd>/runs/<run_id>/journal.jsonl`
    /// beside the audit directory.
    fn journal_path(&self) -> PathBuf {
        let sdd = self.audit.dir().parent().unwrap_or(self.audit.dir());
        sdd.join("runs").join(&self.run_id).join("journal.jsonl")
    }

    /// What the chain says of the journal's call rows (`call_rows` of them, read under the
    /// journal's lock the caller holds). Entries of one run are written in call-index order,
    /// so the run's newest entry in the chain tells which rows have theirs:
    /// * every row after it was written by a process that stopped before its group's audit
    ///   entries, so those calls were never answered and never ran: they are owed
    ///   `mcp.stateless_call_abandoned` entries ([`Settlement::Abandoned`]);
    /// * when it names a call index the journal does not hold, a crash (a power cut: rows and
    ///   entries are fsynced side by side) kept the entries and lost the rows, and the entries
    ///   of the lost rows, oldest first, are returned to rebuild them ([`Settlement::Lost`]).
    fn settle(
        &self,
        journal: &JournalSummary<'_>,
        call_rows: u64,
    ) -> std::result::Result<Settlement, bernstein_journal::Error> {
        let newest = self.newest_entry_index(call_rows.saturating_sub(1))?;
        match newest {
            None => self
                .abandoned_entries(journal, call_rows, 0)
                .map(Settlement::Abandoned),
            Some(newest) if newest < call_rows => self
                .abandoned_entries(journal, call_rows, newest + 1)
                .map(Settlement::Abandoned),
            Some(newest) => {
                tracing::warn!(
                    run_id = self.run_id.as_str(),
                    from = call_rows,
                    to = newest,
                    "the audit chain records calls whose journal rows a crash lost; rebuilding \
                     the rows from their audit entries"
                );
                (call_rows..=newest)
                    .map(|call_index| self.entry_of_call(call_index))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map(Settlement::Lost)
            }
        }
    }

    /// The details of this run's entry for `call_index` (a call or an abandonment), which the
    /// chain must hold: entries of one run are written in call-index order, and a newer one
    /// is there.
    fn entry_of_call(
        &self,
        call_index: u64,
    ) -> std::result::Result<Object, bernstein_journal::Error> {
        let run_id = self.run_id.as_str();
        let wanted = |record: &Object| {
            is_call_entry_of(record, run_id) && call_index_of(record) == Some(call_index)
        };
        self.newest_entry_where(&wanted, |_| true)?
            .as_ref()
            .and_then(|record| record.get("details"))
            .and_then(PyValue::as_object)
            .cloned()
            .ok_or_else(|| bernstein_journal::Error::JournalUnusable {
                path: self.journal_path(),
                reason: format!(
                    "the audit chain holds entries of run {run_id} past its journal's call rows \
                     but none for call index {call_index}, so the lost rows cannot be rebuilt"
                ),
            })
    }

    /// The newest locally MAC-valid entry for which `wanted` holds: today's segment is read
    /// backwards first, with no directory listing, and its answer stands when `enough` says
    /// so; otherwise the whole chain is searched from its end.
    fn newest_entry_where(
        &self,
        wanted: &dyn Fn(&Object) -> bool,
        enough: impl Fn(&Object) -> bool,
    ) -> std::result::Result<Option<Object>, bernstein_journal::Error> {
        let search_failed = |path: &Path, source| bernstein_journal::Error::Io {
            op: "search",
            path: path.to_path_buf(),
            source,
        };
        let today = self.audit.current_segment_path();
        let recent = audit::newest_record_in_segment_where(&today, self.audit.key(), wanted)
            .map_err(|source| search_failed(&today, source))?;
        if let Some(record) = recent
            && enough(&record)
        {
            return Ok(Some(record));
        }
        audit::newest_record_where(self.audit.dir(), self.audit.key(), wanted)
            .map_err(|source| search_failed(self.audit.dir(), source))
    }

    /// The call index of the run's newest call or abandoned entry in the chain. Another
    /// server's entry for the last row is normally the last line of today's segment, so that
    /// segment is read backwards first, with no directory listing; only when it cannot show
    /// the row at `last_index` settled is the whole chain searched from its end.
    fn newest_entry_index(
        &self,
        last_index: u64,
    ) -> std::result::Result<Option<u64>, bernstein_journal::Error> {
        let run_id = self.run_id.as_str();
        let newest = self
            .newest_entry_where(&|record| is_call_entry_of(record, run_id), |record| {
                call_index_of(record).is_some_and(|index| index >= last_index)
            })?;
        Ok(newest.as_ref().and_then(call_index_of))
    }

    /// One abandonment entry for each call row from call index `from` to the last
    /// (`call_rows - 1`), built from the rows the writer keeps
    /// ([`bernstein_journal::run_journal::RECENT_ROWS_PER_EVENT`] of them). Rows older than
    /// that cannot have been left by one group of this server; should an outside writer have
    /// left more, the ones out of reach are logged and stay gaps `verify` reports.
    fn abandoned_entries(
        &self,
        journal: &JournalSummary<'_>,
        call_rows: u64,
        from: u64,
    ) -> std::result::Result<Vec<AuditEvent>, bernstein_journal::Error> {
        let run_id = self.run_id.as_str();
        let recent: Vec<&Object> = journal.recent_of(STATELESS_CALL_EVENT).collect();
        let oldest_known = call_rows - recent.len() as u64;
        if from < oldest_known {
            tracing::error!(
                run_id,
                from,
                oldest_known,
                "call rows without audit entries lie beyond the rows this writer keeps; they \
                 cannot be recorded as abandoned and stay gaps in the call order"
            );
        }
        let mut events = Vec::new();
        for (offset, last) in recent.into_iter().enumerate() {
            let call_index = oldest_known + offset as u64;
            if call_index < from {
                continue;
            }
            let text = |key: &str| last.get(key).and_then(PyValue::as_str).unwrap_or_default();
            let span_id = text("span_id");
            let journal_index = match last.get("index") {
                Some(PyValue::Int(i)) => i.as_u64().unwrap_or_default(),
                _ => 0,
            };
            tracing::warn!(
                run_id,
                call_index,
                span_id,
                "recording an anchored call whose process stopped before its audit entry as \
                 abandoned"
            );
            let details = Object::new()
                .with("run_id", run_id)
                .with("method", text("method"))
                .with("call_index", call_index)
                .with("trace_id", text("trace_id"))
                .with("span_id", span_id)
                .with("journal_head", text("event_hash"))
                .with("journal_index", journal_index)
                .with("reason", ABANDONED_CALL_REASON);
            events.push(AuditEvent::new(
                ABANDONED_CALL_EVENT,
                ANCHOR_ACTOR,
                ANCHOR_RESOURCE_TYPE,
                span_id,
                details,
            ));
        }
        Ok(events)
    }
}

impl Drop for Anchor {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, GroupQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The committer thread of [`Anchor::anchor_queued`]: commits a group whenever calls wait and
/// no thread of [`Anchor::anchor`] is committing one, until the anchor is dropped.
///
/// After a group of several calls, the next group is given up to the shared gather window
/// ([`GATHER_WINDOW`]) to grow to that size before it is committed: calls that arrived together
/// are answered together and come back together, so the first to return would otherwise take
/// two fsyncs alone while the rest queue behind it. After a group of one nothing is waited for,
/// so a lone client's calls are committed as soon as they arrive.
fn commit_queued(shared: &Shared, anchor: &std::sync::Weak<Anchor>) {
    let mut last_group = 0usize;
    let mut queue = shared.lock();
    loop {
        if queue.closed {
            return;
        }
        if queue.waiting.is_empty() || queue.committing {
            queue = shared
                .work
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        queue = gather(shared, queue, last_group.min(MAX_GROUP));
        drop(queue);
        // The anchor is held only while a group is committed, so dropping it ends the thread.
        let Some(anchor) = anchor.upgrade() else {
            return;
        };
        let queue_again = shared.lock();
        if !queue_again.waiting.is_empty() && !queue_again.committing {
            last_group = queue_again.waiting.len().min(MAX_GROUP);
            drop(anchor.commit_front(shared, queue_again));
        } else {
            drop(queue_again);
        }
        // Released before the lock is taken again: when this was the last reference, the
        // anchor's drop runs here and takes the lock itself.
        drop(anchor);
        queue = shared.lock();
    }
}

/// Waits until `want` calls are queued, the gather window has passed, or the anchor is dropped,
/// whichever comes first; returns at once when `want` is one or fewer.
fn gather<'q>(
    shared: &'q Shared,
    mut queue: MutexGuard<'q, GroupQueue>,
    want: usize,
) -> MutexGuard<'q, GroupQueue> {
    if want <= 1 {
        return queue;
    }
    let deadline = std::time::Instant::now() + shared.gather_window;
    while !queue.closed && queue.waiting.len() < want {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        queue = shared
            .work
            .wait_timeout(queue, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    queue
}

/// One anchored call as the audit chain records it (or one abandoned call: its index was used
/// up by a journal row whose process stopped before the call's audit entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    /// The call's position in the run's order.
    pub call_index: u64,
    /// The JSON-RPC method (`tools/call`).
    pub method: String,
    /// The W3C trace id.
    pub trace_id: String,
    /// The W3C span id.
    pub span_id: String,
    /// The run journal head right after the call's row.
    pub journal_head: String,
    /// The audit entry's timestamp.
    pub timestamp: String,
    /// The audit entry's segment file name.
    pub segment: String,
    /// The audit entry's 1-based line in the segment.
    pub line: u64,
    /// The audit entry's `hmac`.
    pub hmac: String,
}

/// Something wrong with a run's reconstructed call order, beyond the chain's own findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderProblem {
    /// No verified entry (call or abandoned) carries this call index, though a later one
    /// exists.
    Missing {
        /// The absent index.
        call_index: u64,
    },
    /// Several verified entries (calls or abandoned) carry this call index.
    Duplicate {
        /// The repeated index.
        call_index: u64,
        /// Where each entry sits, as `segment:line`.
        locations: Vec<String>,
    },
    /// A verified entry of the run whose details cannot be read as a call.
    Malformed {
        /// Where the entry sits, as `segment:line`.
        location: String,
        /// What is wrong.
        reason: String,
    },
}

impl std::fmt::Display for OrderProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrderProblem::Missing { call_index } => {
                write!(f, "call_index {call_index} has no verified entry")
            }
            OrderProblem::Duplicate {
                call_index,
                locations,
            } => write!(
                f,
                "call_index {call_index} is recorded more than once ({})",
                locations.join(", ")
            ),
            OrderProblem::Malformed { location, reason } => {
                write!(f, "{location}: not a readable call entry: {reason}")
            }
        }
    }
}

/// A run's MCP call order as reconstructed from the audit chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOrder {
    /// The run.
    pub run_id: String,
    /// The verified entries of the run, sorted by call index.
    pub calls: Vec<RecordedCall>,
    /// The verified `mcp.stateless_call_abandoned` entries of the run, sorted by call index:
    /// indices used up by calls that never ran. They fill their place in the order (no gap)
    /// and are reported apart from the calls.
    pub abandoned: Vec<RecordedCall>,
    /// The chain verification the reconstruction stood on.
    pub chain: VerifyReport,
    /// Problems with the order itself (gaps, duplicates, unreadable entries).
    pub problems: Vec<OrderProblem>,
}

impl CallOrder {
    /// The verdict: the chain verifies and the calls and abandoned indices together are
    /// exactly `0..n-1`, each once.
    pub fn ok(&self) -> bool {
        self.chain.ok() && self.problems.is_empty()
    }

    /// The chain findings, hard errors first, then unacknowledged tears.
    pub fn chain_findings(&self) -> (Vec<&Finding>, Vec<&Tear>) {
        (
            self.chain.errors.iter().collect(),
            self.chain.unacknowledged_tears().collect(),
        )
    }
}

/// Reconstructs the MCP call order of `run_id` from the audit chain in `audit_dir` alone (the
/// reference's `reconstruct_mcp_call_order`): verifies the chain, keeps the verified
/// `mcp.stateless_call` entries whose `details.run_id` is the run, sorts them by `call_index`
/// and requires exactly `0..n-1`. Every problem is reported, not only the first.
///
/// Our extension: the run's `mcp.stateless_call_abandoned` entries take their index's place
/// in the order and are returned apart, in [`CallOrder::abandoned`].
pub fn reconstruct_call_order(audit_dir: &Path, key: &AuditKey, run_id: &str) -> CallOrder {
    let mut records = audit::verified_records(audit_dir, key);
    let mut calls = Vec::new();
    let mut abandoned = Vec::new();
    let mut problems = Vec::new();
    for record in records.by_ref() {
        let into = match record.event_type.as_str() {
            STATELESS_CALL_EVENT => &mut calls,
            ABANDONED_CALL_EVENT => &mut abandoned,
            _ => continue,
        };
        let details = &record.details;
        if details.get("run_id").and_then(PyValue::as_str) != Some(run_id) {
            continue;
        }
        let location = format!("{}:{}", record.segment, record.line);
        let text = |key: &str| {
            details
                .get(key)
                .and_then(PyValue::as_str)
                .map(str::to_owned)
        };
        let index = match details.get("call_index") {
            Some(PyValue::Int(i)) => i.as_u64(),
            _ => None,
        };
        match (
            index,
            text("method"),
            text("trace_id"),
            text("span_id"),
            text("journal_head"),
        ) {
            (Some(call_index), Some(method), Some(trace_id), Some(span_id), Some(journal_head)) => {
                into.push(RecordedCall {
                    call_index,
                    method,
                    trace_id,
                    span_id,
                    journal_head,
                    timestamp: record.timestamp.clone(),
                    segment: record.segment.clone(),
                    line: record.line,
                    hmac: record.hmac.clone(),
                })
            }
            _ => problems.push(OrderProblem::Malformed {
                location,
                reason: format!(
                    "{}: call_index must be a non-negative integer and method, trace_id, \
                     span_id, journal_head strings",
                    record.event_type
                ),
            }),
        }
    }
    let chain = records.finish();
    calls.sort_by_key(|call| call.call_index);
    abandoned.sort_by_key(|call| call.call_index);

    let mut by_index: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for call in calls.iter().chain(&abandoned) {
        by_index
            .entry(call.call_index)
            .or_default()
            .push(format!("{}:{}", call.segment, call.line));
    }
    if let Some((&last, _)) = by_index.last_key_value() {
        for call_index in 0..=last {
            match by_index.get(&call_index) {
                None => problems.push(OrderProblem::Missing { call_index }),
                Some(locations) if locations.len() > 1 => problems.push(OrderProblem::Duplicate {
                    call_index,
                    locations: locations.clone(),
                }),
                Some(_) => {}
            }
        }
    }
    CallOrder {
        run_id: run_id.to_owned(),
        calls,
        abandoned,
        chain,
        problems,
    }
}

/// `<project_root>/.sdd/audit`.
pub fn audit_dir(project_root: &Path) -> PathBuf {
    project_root.join(".sdd").join("audit")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bernstein_journal::run_journal::{load_run_journal, verify_run_journal};
    use serde_json::json;

    fn key() -> AuditKey {
        AuditKey::from_master_bytes(b"a".repeat(64))
    }

    /// A project whose anchor has made one call, and the params of that call, for tests of
    /// what a server restarted on it reads.
    fn a_project_with_one_call() -> (tempfile::TempDir, serde_json::Value) {
        let dir = tempfile::tempdir().unwrap();
        let params = json!({"name": "bernstein_health", "arguments": {}});
        Anchor::open(dir.path(), "mcp-calls", key())
            .unwrap()
            .anchor("tools/call", Some(&params))
            .unwrap();
        (dir, params)
    }

    /// Every problem of an order written by hand is reported, each in its own words: a call
    /// index held twice, one never recorded, and an entry that is not a call.
    #[test]
    fn a_hand_written_order_reports_duplicates_gaps_and_malformed_entries() {
        let dir = tempfile::tempdir().unwrap();
        let chain = AuditChain::open(audit_dir(dir.path()), key());
        let call = |call_index: u64| {
            AuditEvent::new(
                STATELESS_CALL_EVENT,
                ANCHOR_ACTOR,
                ANCHOR_RESOURCE_TYPE,
                "0123456789abcdef",
                Object::new()
                    .with("run_id", "r")
                    .with("method", "tools/call")
                    .with("call_index", call_index)
                    .with("trace_id", "t")
                    .with("span_id", "0123456789abcdef")
                    .with("journal_head", "h"),
            )
        };
        for index in [0, 2, 2] {
            chain.append(&call(index)).unwrap();
        }
        let mut malformed = call(3);
        malformed.details.remove("method");
        chain.append(&malformed).unwrap();
        let mut other_run = call(7);
        other_run.details.insert("run_id", "other");
        chain.append(&other_run).unwrap();

        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "r");
        let today = chain
            .current_segment_path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let problems: Vec<String> = order.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                format!(
                    "{today}:4: not a readable call entry: mcp.stateless_call: call_index must \
                     be a non-negative integer and method, trace_id, span_id, journal_head strings"
                ),
                "call_index 1 has no verified entry".to_owned(),
                format!("call_index 2 is recorded more than once ({today}:2, {today}:3)"),
            ]
        );
        let indices: Vec<u64> = order.calls.iter().map(|c| c.call_index).collect();
        assert_eq!(indices, [0, 2, 2]);
        assert!(order.chain.ok());
        assert!(!order.ok(), "the chain verifies but the order does not");
        assert_eq!(order.chain_findings(), (Vec::new(), Vec::new()));

        // A chain that does not verify fails the order even when the order is whole, and its
        // findings are the ones reported.
        let whole = tempfile::tempdir().unwrap();
        let chain = AuditChain::open(audit_dir(whole.path()), key());
        chain.append(&call(0)).unwrap();
        let segment = chain.current_segment_path();
        let text = std::fs::read_to_string(&segment).unwrap();
        std::fs::write(&segment, text.replace("tools/call", "tools/list")).unwrap();
        let order = reconstruct_call_order(&audit_dir(whole.path()), &key(), "r");
        assert!(order.problems.is_empty() && !order.chain.ok());
        assert!(!order.ok());
        let (errors, tears) = order.chain_findings();
        assert_eq!(errors.len(), order.chain.errors.len());
        assert!(!errors.is_empty() && tears.is_empty());
    }

    #[test]
    fn calls_are_anchored_in_order_and_reconstructed() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        let params = json!({"name": "bernstein_health", "arguments": {}});
        let first = anchor.anchor("tools/call", Some(&params)).unwrap();
        assert_eq!(first.call_index, 0);
        assert_eq!(first.trace_id, trace_id_for_run("mcp-calls"));
        assert_eq!(
            first.span_id,
            span_id_for_call(&params_content_hash("tools/call", Some(&params)), 0)
        );
        let traced = json!({"name": "x", "arguments": {}, "_meta": {
            "traceparent": "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01",
            "baggage": "mcp.method=tools/call,mcp.call_index=1"}});
        let second = anchor.anchor("tools/call", Some(&traced)).unwrap();
        assert_eq!(
            (
                second.call_index,
                second.trace_id.as_str(),
                second.span_id.as_str()
            ),
            (1, "0123456789abcdef0123456789abcdef", "0123456789abcdef")
        );
        let wrong = json!({"name": "x", "_meta": {"baggage": "mcp.call_index=7"}});
        let err = anchor.anchor("tools/call", Some(&wrong)).unwrap_err();
        assert!(
            matches!(&err, Error::CallIndexClaim { actual: 2, .. }),
            "{err}"
        );
        // A claim that is not a number is refused as well, and uses up no index either.
        let garbled = json!({"name": "x", "_meta": {"baggage": "mcp.call_index=two"}});
        let err = anchor.anchor("tools/call", Some(&garbled)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "baggage claims mcp.call_index=two but the next call of run mcp-calls is 2"
        );
        assert_eq!(anchor.run_id(), "mcp-calls");
        let third = anchor.anchor("tools/call", Some(&params)).unwrap();
        assert_eq!(third.call_index, 2);

        let journal = load_run_journal(dir.path(), "mcp-calls").unwrap();
        assert_eq!(journal.rows.len(), 3);
        assert!(verify_run_journal(dir.path(), "mcp-calls").unwrap().ok());

        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{order:?}");
        let indices: Vec<u64> = order.calls.iter().map(|c| c.call_index).collect();
        assert_eq!(indices, vec![0, 1, 2]);
        assert_eq!(order.calls[2].journal_head, third.journal_head);
        assert_eq!(order.calls[2].hmac, third.chain_head);
        // Another run's order is empty, and still verified.
        let other = reconstruct_call_order(&audit_dir(dir.path()), &key(), "other");
        assert!(other.ok() && other.calls.is_empty());
    }

    /// Fault seam: the chain's lock file replaced by a directory makes every audit append
    /// fail (EISDIR) while the journal stays writable.
    #[test]
    fn a_call_refused_for_a_failed_audit_append_uses_up_no_call_index() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        let params = json!({"name": "bernstein_health", "arguments": {}});
        assert_eq!(
            anchor
                .anchor("tools/call", Some(&params))
                .unwrap()
                .call_index,
            0
        );

        let lock = audit_dir(dir.path()).join(audit::LOCK_FILE_NAME);
        std::fs::remove_file(&lock).unwrap();
        std::fs::create_dir(&lock).unwrap();
        let err = anchor.anchor("tools/call", Some(&params)).unwrap_err();
        assert!(matches!(err, Error::Journal(_)), "{err}");
        // The refused call left no row behind.
        let journal = load_run_journal(dir.path(), "mcp-calls").unwrap();
        assert_eq!(journal.rows.len(), 1);

        std::fs::remove_dir(&lock).unwrap();
        // Another writer (a fresh process) and the same one both continue the order.
        let again = anchor.anchor("tools/call", Some(&params)).unwrap();
        assert_eq!(again.call_index, 1);
        let other = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        assert_eq!(
            other
                .anchor("tools/call", Some(&params))
                .unwrap()
                .call_index,
            2
        );
        assert!(verify_run_journal(dir.path(), "mcp-calls").unwrap().ok());
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        let indices: Vec<u64> = order.calls.iter().map(|c| c.call_index).collect();
        assert_eq!(indices, vec![0, 1, 2]);
    }

    /// Holds `.chain.lock` from outside (as another process's append would) until dropped.
    fn hold_chain_lock(root: &Path) -> std::fs::File {
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(audit_dir(root).join(audit::LOCK_FILE_NAME))
            .unwrap();
        lock.lock().unwrap();
        lock
    }

    /// Waits, bounded, until some thread is blocked in `flock` on `path` (a `->` waiter line
    /// of `/proc/locks` naming the file's inode): the group being committed has opened that
    /// lock file and waits on it.
    fn wait_for_lock_waiter(path: &Path) {
        use std::os::unix::fs::MetadataExt;
        let inode = format!(":{} ", std::fs::metadata(path).unwrap().ino());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let locks = std::fs::read_to_string("/proc/locks").unwrap();
            if locks
                .lines()
                .any(|line| line.contains("->") && line.contains(&inode))
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no call ever waited on {}",
                path.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Starts a thread anchoring one call with `params`.
    fn anchor_in_thread(
        anchor: &Arc<Anchor>,
        params: JsonValue,
    ) -> std::thread::JoinHandle<Result<AnchoredCall>> {
        let anchor = Arc::clone(anchor);
        std::thread::spawn(move || anchor.anchor("tools/call", Some(&params)))
    }

    /// Waits, bounded, until `waiting` calls queue behind the group being committed.
    fn wait_for_queue(anchor: &Anchor, waiting: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while anchor.group_stats().waiting < waiting {
            assert!(
                std::time::Instant::now() < deadline,
                "calls never queued: {:?}",
                anchor.group_stats()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Calls arriving while a group is committed are committed together, as one group, and
    /// each is answered with its own durable row and entry, in one gap-free order that the
    /// chain holds in call-index order.
    #[test]
    fn calls_waiting_for_a_commit_are_anchored_together_in_one_order() {
        const CALLS: u64 = 12;
        let dir = tempfile::tempdir().unwrap();
        let anchor = Arc::new(Anchor::open(dir.path(), "mcp-calls", key()).unwrap());
        let params = |n: u64| json!({"name": "bernstein_health", "arguments": {"n": n}});
        anchor.anchor("tools/call", Some(&params(0))).unwrap();
        // The first call blocks in its audit append; the rest then queue behind its group.
        let lock = hold_chain_lock(dir.path());
        let mut threads = vec![anchor_in_thread(&anchor, params(1))];
        wait_for_lock_waiter(&audit_dir(dir.path()).join(audit::LOCK_FILE_NAME));
        threads.extend((2..=CALLS).map(|n| anchor_in_thread(&anchor, params(n))));
        wait_for_queue(&anchor, CALLS - 1);
        lock.unlock().unwrap();
        let anchored: Vec<AnchoredCall> = threads
            .into_iter()
            .map(|t| t.join().unwrap().unwrap())
            .collect();

        let stats = anchor.group_stats();
        assert_eq!(stats.calls, CALLS + 1);
        assert_eq!(stats.groups, 3, "{stats:?}");
        assert_eq!(stats.largest, CALLS - 1, "{stats:?}");
        let mut indices: Vec<u64> = anchored.iter().map(|c| c.call_index).collect();
        indices.sort_unstable();
        assert_eq!(indices, (1..=CALLS).collect::<Vec<_>>());
        // Every answer names its own row and entry, and the chain holds them in order.
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        let chain_indices: Vec<u64> = order.calls.iter().map(|c| c.call_index).collect();
        assert_eq!(chain_indices, (0..=CALLS).collect::<Vec<_>>());
        for call in &anchored {
            let recorded = &order.calls[call.call_index as usize];
            assert_eq!(recorded.span_id, call.span_id);
            assert_eq!(recorded.journal_head, call.journal_head);
            assert_eq!(recorded.hmac, call.chain_head);
        }
        let journal = load_run_journal(dir.path(), "mcp-calls").unwrap();
        assert_eq!(journal.rows.len() as u64, CALLS + 1);
        assert!(verify_run_journal(dir.path(), "mcp-calls").unwrap().ok());
        assert!(anchor.audit_chain().verify().ok());
    }

    /// An anchor whose committer gathers for `window` instead of [`GATHER_WINDOW`].
    fn anchor_gathering_for(root: &Path, window: std::time::Duration) -> Arc<Anchor> {
        let mut anchor = Anchor::open(root, "mcp-calls", key()).unwrap();
        Arc::get_mut(&mut anchor.shared)
            .expect("no committer shares the queue yet")
            .gather_window = window;
        Arc::new(anchor)
    }

    /// Queues one call from a task.
    fn anchor_in_task(
        anchor: &Arc<Anchor>,
        n: u64,
    ) -> tokio::task::JoinHandle<Result<AnchoredCall>> {
        let anchor = Arc::clone(anchor);
        let params = json!({"name": "bernstein_health", "arguments": {"n": n}});
        tokio::spawn(async move { anchor.anchor_queued("tools/call", Some(&params)).await })
    }

    /// After a group of two, the committer waits for the next group to hold two calls before it
    /// commits it: a lone call stays queued (here the window is a minute) until a second one
    /// joins it, and then both are committed in one group, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_a_group_of_several_the_next_group_gathers_as_many() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = anchor_gathering_for(dir.path(), std::time::Duration::from_secs(60));
        let next = commit_a_pair(&anchor, dir.path()).await;
        let before = anchor.group_stats();

        let lone = anchor_in_task(&anchor, next);
        while !lone.is_finished() && anchor.group_stats().waiting == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(
            !lone.is_finished(),
            "a lone call after a group of two was not gathered"
        );
        assert_eq!(anchor.group_stats().groups, before.groups);
        // The group is full once the second call joins: it is committed then, not when the
        // minute-long window closes.
        let second = anchor_in_task(&anchor, next + 1);
        let full = std::time::Duration::from_secs(20);
        let lone = tokio::time::timeout(full, lone)
            .await
            .expect("a full group waited for the gather window to close");
        assert_eq!(lone.unwrap().unwrap().call_index, next);
        let second = tokio::time::timeout(full, second).await.unwrap();
        assert_eq!(second.unwrap().unwrap().call_index, next + 1);
        let after = anchor.group_stats();
        assert_eq!(after.groups, before.groups + 1, "{after:?}");
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        let indices: Vec<u64> = order.calls.iter().map(|c| c.call_index).collect();
        assert_eq!(indices, (0..=next + 1).collect::<Vec<_>>());
    }

    /// Makes the anchor's last group one of two calls: both queue while the group before them
    /// waits for the chain lock. Returns the next call index.
    async fn commit_a_pair(anchor: &Arc<Anchor>, root: &Path) -> u64 {
        anchor_in_task(anchor, 0).await.unwrap().unwrap();
        let lock = hold_chain_lock(root);
        let first = anchor_in_task(anchor, 1);
        wait_for_lock_waiter(&audit_dir(root).join(audit::LOCK_FILE_NAME));
        let pair = [anchor_in_task(anchor, 2), anchor_in_task(anchor, 3)];
        wait_for_queue(anchor, 2);
        lock.unlock().unwrap();
        assert_eq!(first.await.unwrap().unwrap().call_index, 1);
        let mut indices = Vec::new();
        for task in pair {
            indices.push(task.await.unwrap().unwrap().call_index);
        }
        indices.sort_unstable();
        assert_eq!(indices, [2, 3]);
        let stats = anchor.group_stats();
        assert_eq!((stats.groups, stats.largest), (3, 2), "{stats:?}");
        indices[1] + 1
    }

    /// The gather window bounds the wait: after a group of two, a lone call that nobody joins
    /// is committed alone once the window (here 50 ms) has passed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_gathering_group_is_committed_alone_when_the_window_closes() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = anchor_gathering_for(dir.path(), std::time::Duration::from_millis(50));
        let next = commit_a_pair(&anchor, dir.path()).await;
        let lone = anchor_in_task(&anchor, next);
        let answered = tokio::time::timeout(std::time::Duration::from_secs(30), lone)
            .await
            .expect("a lone call was held past the gather window");
        assert_eq!(answered.unwrap().unwrap().call_index, next);
        let stats = anchor.group_stats();
        assert_eq!(stats.groups, 4, "{stats:?}");
    }

    /// A lone client is never kept waiting: after a group of one nothing is gathered, so one
    /// call after another is answered at once even with a gather window of a minute.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lone_client_is_never_kept_waiting_for_a_group() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = anchor_gathering_for(dir.path(), std::time::Duration::from_secs(60));
        for n in 0..5 {
            let answered = tokio::time::timeout(
                std::time::Duration::from_secs(20),
                anchor_in_task(&anchor, n),
            )
            .await
            .expect("a lone call waited for a group to gather");
            assert_eq!(answered.unwrap().unwrap().call_index, n);
        }
        let stats = anchor.group_stats();
        assert_eq!((stats.groups, stats.largest), (5, 1), "{stats:?}");
    }

    /// Calls queued by tasks ([`Anchor::anchor_queued`]) are committed by the committer thread
    /// in groups, together with a thread's call queued beside them; none is answered while its
    /// group's audit entries cannot be written, and the order stays gap-free and chain-ordered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_queued_behind_a_commit_are_answered_only_after_their_group() {
        const TASKS: u64 = 10;
        let dir = tempfile::tempdir().unwrap();
        let anchor = Arc::new(Anchor::open(dir.path(), "mcp-calls", key()).unwrap());
        let params = |n: u64| json!({"name": "bernstein_health", "arguments": {"n": n}});
        anchor
            .anchor_queued("tools/call", Some(&params(0)))
            .await
            .unwrap();
        let lock = hold_chain_lock(dir.path());
        let first = {
            let anchor = Arc::clone(&anchor);
            tokio::spawn(async move { anchor.anchor_queued("tools/call", Some(&params(1))).await })
        };
        wait_for_lock_waiter(&audit_dir(dir.path()).join(audit::LOCK_FILE_NAME));
        let mut tasks: Vec<_> = (2..=TASKS)
            .map(|n| {
                let anchor = Arc::clone(&anchor);
                tokio::spawn(
                    async move { anchor.anchor_queued("tools/call", Some(&params(n))).await },
                )
            })
            .collect();
        let thread = anchor_in_thread(&anchor, params(TASKS + 1));
        wait_for_queue(&anchor, TASKS);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            !first.is_finished() && tasks.iter().all(|task| !task.is_finished()),
            "a call was answered while its group's entries could not be written"
        );
        lock.unlock().unwrap();
        tasks.insert(0, first);
        let mut indices = Vec::new();
        for task in tasks {
            indices.push(task.await.unwrap().unwrap().call_index);
        }
        indices.push(thread.join().unwrap().unwrap().call_index);
        indices.sort_unstable();
        assert_eq!(indices, (1..=TASKS + 1).collect::<Vec<_>>());
        let stats = anchor.group_stats();
        assert_eq!(stats.calls, TASKS + 2);
        assert!(
            stats.groups <= 4,
            "the queued calls were not grouped: {stats:?}"
        );
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        let chain_indices: Vec<u64> = order.calls.iter().map(|c| c.call_index).collect();
        assert_eq!(chain_indices, (0..=TASKS + 1).collect::<Vec<_>>());
        assert!(verify_run_journal(dir.path(), "mcp-calls").unwrap().ok());
    }

    /// A task that stops waiting does not take its call back: the call is committed with its
    /// group, and the next call takes the next index.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queued_call_whose_task_gave_up_is_still_committed_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = Arc::new(Anchor::open(dir.path(), "mcp-calls", key()).unwrap());
        let params = json!({"name": "bernstein_health", "arguments": {}});
        anchor
            .anchor_queued("tools/call", Some(&params))
            .await
            .unwrap();
        let lock = hold_chain_lock(dir.path());
        let gave_up = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            anchor.anchor_queued("tools/call", Some(&params)),
        )
        .await;
        assert!(gave_up.is_err(), "answered while the chain was locked");
        lock.unlock().unwrap();
        let next = anchor
            .anchor_queued("tools/call", Some(&params))
            .await
            .unwrap();
        assert_eq!(next.call_index, 2);
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        assert_eq!(order.calls.len(), 3);
    }

    /// A group whose audit entries cannot be written acknowledges none of its calls: each gets
    /// the error, and every row of the group is taken back, so the order goes on gap-free.
    #[test]
    fn a_group_whose_entries_fail_acknowledges_none_and_leaves_no_row() {
        const CALLS: u64 = 6;
        let dir = tempfile::tempdir().unwrap();
        let anchor = Arc::new(Anchor::open(dir.path(), "mcp-calls", key()).unwrap());
        let params = json!({"name": "bernstein_health", "arguments": {}});
        anchor.anchor("tools/call", Some(&params)).unwrap();
        let lock_path = audit_dir(dir.path()).join(audit::LOCK_FILE_NAME);
        let lock = hold_chain_lock(dir.path());
        // The first call's group opens the lock file and waits on it; the rest queue.
        let mut threads = vec![anchor_in_thread(&anchor, params.clone())];
        wait_for_lock_waiter(&lock_path);
        threads.extend((0..CALLS).map(|_| anchor_in_thread(&anchor, params.clone())));
        wait_for_queue(&anchor, CALLS);
        // The first group holds the old lock file open and gets it; the queued group then
        // finds no usable lock and cannot write its entries.
        std::fs::remove_file(&lock_path).unwrap();
        std::fs::create_dir(&lock_path).unwrap();
        lock.unlock().unwrap();
        let results: Vec<Result<AnchoredCall>> =
            threads.into_iter().map(|t| t.join().unwrap()).collect();
        let anchored: Vec<&AnchoredCall> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(
            anchored.len(),
            1,
            "only the group that held the lock is answered"
        );
        assert_eq!(anchored[0].call_index, 1);
        let refused: Vec<&Error> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        assert_eq!(refused.len() as u64, CALLS);
        for err in &refused {
            assert!(matches!(err, Error::Group(_)), "{err}");
        }
        let journal = load_run_journal(dir.path(), "mcp-calls").unwrap();
        assert_eq!(
            journal.rows.len(),
            2,
            "the failed group's rows were taken back"
        );

        std::fs::remove_dir(&lock_path).unwrap();
        assert_eq!(
            anchor
                .anchor("tools/call", Some(&params))
                .unwrap()
                .call_index,
            2
        );
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        assert_eq!(order.calls.len(), 3);
        assert!(order.abandoned.is_empty());
    }

    /// A process killed after a whole group's rows were fsynced and before their entries
    /// leaves several call rows without entries; the next call records every one of them as
    /// abandoned, so the order has no gap.
    #[test]
    fn every_row_of_a_group_killed_before_its_entries_is_recorded_abandoned() {
        const LEFT: u64 = 5;
        let dir = tempfile::tempdir().unwrap();
        let anchor = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        let params = json!({"name": "bernstein_health", "arguments": {}});
        anchor.anchor("tools/call", Some(&params)).unwrap();
        // What the killed process left: its group's rows, durable, and no audit entry.
        let mut killed =
            JournalWriter::open(dir.path(), "mcp-calls", HashProfile::PyJsonV1).unwrap();
        let (rows, ()) = killed
            .append_group_then(
                STATELESS_CALL_EVENT,
                |journal| {
                    let first = journal.count_of(STATELESS_CALL_EVENT);
                    (first..first + LEFT)
                        .map(|call_index| {
                            Object::new()
                                .with("method", "tools/call")
                                .with("call_index", call_index)
                                .with("trace_id", trace_id_for_run("mcp-calls"))
                                .with("span_id", format!("{call_index:016x}"))
                        })
                        .collect()
                },
                |_| Ok(()),
            )
            .unwrap();
        assert_eq!(rows.len() as u64, LEFT);

        let next = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        let call = next.anchor("tools/call", Some(&params)).unwrap();
        assert_eq!(call.call_index, LEFT + 1);
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        let abandoned: Vec<u64> = order.abandoned.iter().map(|c| c.call_index).collect();
        assert_eq!(abandoned, (1..=LEFT).collect::<Vec<_>>());
        let spans: Vec<&str> = order.abandoned.iter().map(|c| c.span_id.as_str()).collect();
        let expected: Vec<String> = (1..=LEFT).map(|i| format!("{i:016x}")).collect();
        assert_eq!(spans, expected);
        // Each abandonment names the journal row that used the index up, by its row index:
        // the killed group's rows hold call indices 1 to LEFT, in order.
        let row_index_of_call = |call_index: u64| rows[(call_index - 1) as usize].index;
        let index_in = |details: &Object, key: &str| match details.get(key) {
            Some(PyValue::Int(i)) => i.as_u64(),
            _ => None,
        };
        let named: Vec<(u64, Option<u64>)> = next
            .audit_chain()
            .verified_records()
            .filter(|record| record.event_type == ABANDONED_CALL_EVENT)
            .map(|record| {
                let call_index = index_in(&record.details, "call_index").unwrap();
                (call_index, index_in(&record.details, "journal_index"))
            })
            .collect();
        assert_eq!(named.len() as u64, LEFT);
        for (call_index, journal_index) in named {
            assert_eq!(
                journal_index,
                Some(row_index_of_call(call_index)),
                "{call_index}"
            );
        }
        // Settled once: the first anchor's next call finds nothing more to record.
        anchor.anchor("tools/call", Some(&params)).unwrap();
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        assert_eq!(order.abandoned.len() as u64, LEFT);
        assert_eq!(order.calls.len(), 3);
    }

    /// Cuts the anchoring journal of the project at `dir` back to its first `keep` lines, as a
    /// power cut does to rows whose fsync had not returned, and returns the lines cut.
    fn lose_rows_after(dir: &Path, keep: usize) -> Vec<String> {
        let path = dir.join(".sdd/runs/mcp-calls/journal.jsonl");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let kept: String = lines[..keep]
            .iter()
            .map(|line| format!("{line}\n"))
            .collect();
        std::fs::write(&path, kept).unwrap();
        lines[keep..].to_vec()
    }

    fn event_hash_of(line: &str) -> String {
        let row = PyValue::parse(line).unwrap();
        let row = row.as_object().unwrap();
        row.get("event_hash")
            .and_then(PyValue::as_str)
            .unwrap()
            .to_owned()
    }

    /// Rows and entries are fsynced side by side, so a power cut can keep a group's audit
    /// entries and lose its rows. The next server rebuilds each lost row from its entry (the
    /// same payload at the same place hashes the same) before counting its own call, so no
    /// call index is used twice and the journal's head is the one the entry named.
    #[test]
    fn call_rows_lost_in_a_crash_are_rebuilt_from_their_audit_entries() {
        let dir = tempfile::tempdir().unwrap();
        let params = json!({"name": "bernstein_health", "arguments": {}});
        {
            let anchor = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
            for _ in 0..3 {
                anchor.anchor("tools/call", Some(&params)).unwrap();
            }
        }
        let lost = lose_rows_after(dir.path(), 1);
        assert_eq!(lost.len(), 2);

        let restarted = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        let call = restarted.anchor("tools/call", Some(&params)).unwrap();
        assert_eq!(call.call_index, 3, "the lost rows' call indexes stay used");
        let journal = load_run_journal(dir.path(), "mcp-calls").unwrap();
        assert_eq!(journal.rows.len(), 4);
        assert!(verify_run_journal(dir.path(), "mcp-calls").unwrap().ok());
        let text =
            std::fs::read_to_string(dir.path().join(".sdd/runs/mcp-calls/journal.jsonl")).unwrap();
        let rebuilt: Vec<&str> = text.lines().skip(1).take(2).collect();
        let without_times = |line: &str| {
            let mut row = PyValue::parse(line).unwrap().as_object().unwrap().clone();
            row.remove("ts");
            row.remove("elapsed_s");
            row
        };
        for (offset, (was, now)) in lost.iter().zip(rebuilt).enumerate() {
            assert_eq!(without_times(now), without_times(was));
            let row = without_times(now);
            let text = |key: &str| row.get(key).and_then(PyValue::as_str).unwrap().to_owned();
            assert_eq!(text("method"), "tools/call");
            assert_eq!(
                row.get("call_index"),
                Some(&PyValue::from(1 + offset as u64))
            );
            assert_eq!(text("span_id").len(), 16);
            assert_eq!(text("trace_id"), trace_id_for_run("mcp-calls"));
        }
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        let indices: Vec<u64> = order.calls.iter().map(|c| c.call_index).collect();
        assert_eq!(indices, vec![0, 1, 2, 3]);
        assert!(order.abandoned.is_empty());
        let heads: Vec<&str> = order
            .calls
            .iter()
            .map(|c| c.journal_head.as_str())
            .collect();
        let rows: Vec<String> = text.lines().map(event_hash_of).collect();
        assert_eq!(heads, rows.iter().map(String::as_str).collect::<Vec<_>>());
        // Settled once: the next call searches nothing and rebuilds nothing.
        let next = restarted.anchor("tools/call", Some(&params)).unwrap();
        assert_eq!(next.call_index, 4);
        assert_eq!(
            load_run_journal(dir.path(), "mcp-calls")
                .unwrap()
                .rows
                .len(),
            5
        );
    }

    /// A journal that lost every call row (its first group's rows) is rebuilt too: an empty
    /// journal is checked against the chain once.
    #[test]
    fn a_journal_that_lost_every_call_row_is_rebuilt_from_the_chain() {
        let (dir, params) = a_project_with_one_call();
        let lost = lose_rows_after(dir.path(), 0);
        assert_eq!(lost.len(), 1);

        let restarted = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        let call = restarted.anchor("tools/call", Some(&params)).unwrap();
        assert_eq!(call.call_index, 1);
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        assert_eq!(order.calls.len(), 2);
        assert_eq!(order.calls[0].journal_head, event_hash_of(&lost[0]));
        assert!(verify_run_journal(dir.path(), "mcp-calls").unwrap().ok());
    }

    /// A row rebuilt from its entry must hash as the entry says, or it is not the row the
    /// entry attests: the call is refused and neither the journal nor the chain changes.
    #[test]
    fn a_lost_row_that_its_entry_cannot_rebuild_refuses_the_call() {
        let dir = tempfile::tempdir().unwrap();
        let params = json!({"name": "bernstein_health", "arguments": {}});
        {
            let anchor = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
            anchor.anchor("tools/call", Some(&params)).unwrap();
            anchor.anchor("tools/call", Some(&params)).unwrap();
        }
        lose_rows_after(dir.path(), 1);
        // Another row took the lost row's place, so the rebuilt one would follow it and hash
        // differently.
        JournalWriter::open(dir.path(), "mcp-calls", HashProfile::PyJsonV1)
            .unwrap()
            .append(
                "operator.note",
                &Object::new().with("text", "after the crash"),
            )
            .unwrap();
        let journal = dir.path().join(".sdd/runs/mcp-calls/journal.jsonl");
        let journal_before = std::fs::read(&journal).unwrap();
        let segment = AuditChain::open(audit_dir(dir.path()), key()).current_segment_path();
        let chain_before = std::fs::read(&segment).unwrap();

        let restarted = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        let err = restarted.anchor("tools/call", Some(&params)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("the row rebuilt from that entry hashes to"),
            "{text}"
        );
        assert!(
            text.contains(".sdd/runs/mcp-calls/journal.jsonl"),
            "the error names the journal: {text}"
        );
        assert_eq!(std::fs::read(&journal).unwrap(), journal_before);
        assert_eq!(std::fs::read(&segment).unwrap(), chain_before);
    }

    /// A server killed after its very first group's rows, before any entry of the run was
    /// written: the chain holds nothing of the run, and every row is recorded abandoned.
    #[test]
    fn a_first_group_killed_before_any_entry_is_recorded_abandoned() {
        let dir = tempfile::tempdir().unwrap();
        let mut killed =
            JournalWriter::open(dir.path(), "mcp-calls", HashProfile::PyJsonV1).unwrap();
        killed
            .append_group_then(
                STATELESS_CALL_EVENT,
                |_| {
                    (0..2u64)
                        .map(|call_index| {
                            call_row_payload(
                                "tools/call",
                                PyValue::from(call_index),
                                &trace_id_for_run("mcp-calls"),
                                &format!("{call_index:016x}"),
                            )
                        })
                        .collect()
                },
                |_| Ok(()),
            )
            .unwrap();
        let anchor = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        let params = json!({"name": "bernstein_health", "arguments": {}});
        let call = anchor.anchor("tools/call", Some(&params)).unwrap();
        assert_eq!(call.call_index, 2);
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        let abandoned: Vec<u64> = order.abandoned.iter().map(|c| c.call_index).collect();
        assert_eq!(abandoned, vec![0, 1]);
    }

    /// A server killed mid-row leaves half a row in the shared anchoring journal; every later
    /// call of every server sharing it must still be served.
    #[test]
    fn a_torn_anchoring_row_does_not_refuse_every_later_call() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        let params = json!({"name": "bernstein_health", "arguments": {}});
        anchor.anchor("tools/call", Some(&params)).unwrap();
        let path = dir.path().join(".sdd/runs/mcp-calls/journal.jsonl");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"ts\": 1780000000.5, \"elapsed_s\": 0.0, \"index\": 1, \"ev");
        std::fs::write(&path, bytes).unwrap();
        let other = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        assert_eq!(
            other
                .anchor("tools/call", Some(&params))
                .unwrap()
                .call_index,
            1
        );
        assert_eq!(
            anchor
                .anchor("tools/call", Some(&params))
                .unwrap()
                .call_index,
            2
        );
        assert!(verify_run_journal(dir.path(), "mcp-calls").unwrap().ok());
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok(), "{:?}", order.problems);
        let tears = bernstein_journal::durable::read_tear_log(dir.path()).unwrap();
        assert_eq!(tears.tears.len(), 1);
    }

    /// The settle search reads the chain from its end and stops at the run's newest entry, so
    /// an old segment it cannot read does not matter while a newer entry answers; when the
    /// search would have to read it, the call is refused (nothing written) rather than guessed.
    #[test]
    fn settling_searches_only_as_far_as_it_must_and_never_guesses() {
        let dir = tempfile::tempdir().unwrap();
        let params = json!({"name": "bernstein_health", "arguments": {}});
        let anchor = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        anchor.anchor("tools/call", Some(&params)).unwrap();
        // An archived segment that cannot be read (a directory where a file belongs).
        let unreadable = audit_dir(dir.path())
            .join(audit::ARCHIVE_DIR)
            .join("2000-01-01.jsonl.gz");
        std::fs::create_dir_all(&unreadable).unwrap();
        // A fresh server must search; the live segment answers first.
        let fresh = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        assert_eq!(
            fresh
                .anchor("tools/call", Some(&params))
                .unwrap()
                .call_index,
            1
        );

        // Another run whose last row has no entry anywhere in the readable chain: the search
        // reaches the unreadable segment, and the call is refused with nothing written.
        let mut writer =
            JournalWriter::open(dir.path(), "other-run", HashProfile::PyJsonV1).unwrap();
        let orphan = Object::new()
            .with("method", "tools/call")
            .with("call_index", 0u64)
            .with("trace_id", "0123456789abcdef0123456789abcdef")
            .with("span_id", "0123456789abcdef");
        writer.append(STATELESS_CALL_EVENT, &orphan).unwrap();
        let other = Anchor::open(dir.path(), "other-run", key()).unwrap();
        let chain_before = audit::verify(&audit_dir(dir.path()), &key()).entries;
        let err = other.anchor("tools/call", Some(&params)).unwrap_err();
        assert!(matches!(err, Error::Journal(_)), "{err}");
        assert_eq!(
            audit::verify(&audit_dir(dir.path()), &key()).entries,
            chain_before
        );
        assert_eq!(
            load_run_journal(dir.path(), "other-run")
                .unwrap()
                .rows
                .len(),
            1
        );

        std::fs::remove_dir(&unreadable).unwrap();
        assert_eq!(
            other
                .anchor("tools/call", Some(&params))
                .unwrap()
                .call_index,
            1
        );
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "other-run");
        assert!(order.ok(), "{:?}", order.problems);
        let abandoned: Vec<u64> = order.abandoned.iter().map(|c| c.call_index).collect();
        assert_eq!(abandoned, vec![0]);
    }

    /// Two servers alternating on one project: each call makes exactly two fsyncs (the row
    /// and the entry), and each catches up on the other's row and entry by reading only what
    /// was appended, however long the journal is.
    #[test]
    fn alternating_servers_read_only_what_the_other_appended() {
        let dir = tempfile::tempdir().unwrap();
        let params = json!({"name": "bernstein_health", "arguments": {}});
        let first = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        for _ in 0..60 {
            first.anchor("tools/call", Some(&params)).unwrap();
        }
        let second = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        second.anchor("tools/call", Some(&params)).unwrap();
        first.anchor("tools/call", Some(&params)).unwrap();
        let journal_len = std::fs::metadata(dir.path().join(".sdd/runs/mcp-calls/journal.jsonl"))
            .unwrap()
            .len();
        let stats = |anchor: &Anchor| {
            (
                anchor.journal_catch_up_stats(),
                anchor.audit_chain().append_stats(),
            )
        };
        let (first_before, second_before) = (stats(&first), stats(&second));
        let fsyncs = bernstein_journal::durable::thread_fsync_count();
        for n in 0..20 {
            let anchor = if n % 2 == 0 { &second } else { &first };
            let call = anchor.anchor("tools/call", Some(&params)).unwrap();
            assert_eq!(call.call_index, 62 + n);
        }
        assert_eq!(
            bernstein_journal::durable::thread_fsync_count() - fsyncs,
            40
        );
        for (anchor, before) in [(&first, first_before), (&second, second_before)] {
            let (journal, chain) = stats(anchor);
            assert_eq!(journal.full_reads, before.0.full_reads, "{journal:?}");
            assert_eq!(journal.incremental_reads - before.0.incremental_reads, 10);
            // Per call: the check of its own last row and the other's row, a few hundred bytes.
            let read = journal.bytes_read - before.0.bytes_read;
            assert!(
                read < 10 * 1024 && read * 2 < journal_len,
                "{read} of {journal_len}"
            );
            assert_eq!(chain.tail_scans - before.1.tail_scans, 10, "{chain:?}");
            assert!(
                chain.bytes_read - before.1.bytes_read < 20 * 1024,
                "{chain:?}"
            );
        }
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "mcp-calls");
        assert!(order.ok() && order.calls.len() == 82 && order.abandoned.is_empty());
    }

    /// Reading ahead reads a journal another server left once, whole, on the caller's thread,
    /// so the first call reads it no more: the dispatcher's own check of this waits on a
    /// background thread, and a read ahead that reads nothing would only show there at its
    /// deadline.
    #[test]
    fn reading_ahead_reads_the_journal_once_before_the_first_call() {
        let (dir, params) = a_project_with_one_call();
        let restarted = Anchor::open(dir.path(), "mcp-calls", key()).unwrap();
        assert_eq!(restarted.journal_catch_up_stats().full_reads, 0);
        restarted.read_ahead();
        assert_eq!(restarted.journal_catch_up_stats().full_reads, 1);
        let call = restarted.anchor("tools/call", Some(&params)).unwrap();
        assert_eq!(call.call_index, 1);
        assert_eq!(
            restarted.journal_catch_up_stats().full_reads,
            1,
            "the first call read the journal again"
        );
    }

    #[test]
    fn a_tampered_entry_fails_at_that_entry() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = Anchor::open(dir.path(), "r1", key()).unwrap();
        for n in 0..4 {
            anchor
                .anchor(
                    "tools/call",
                    Some(&json!({"name": "t", "arguments": {"n": n}})),
                )
                .unwrap();
        }
        let segment = std::fs::read_dir(audit_dir(dir.path()))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .unwrap();
        let text = std::fs::read_to_string(&segment).unwrap();
        let tampered: Vec<String> = text
            .lines()
            .enumerate()
            .map(|(i, line)| {
                if i == 1 {
                    line.replace("\"method\": \"tools/call\"", "\"method\": \"tools/list\"")
                } else {
                    line.to_owned()
                }
            })
            .collect();
        std::fs::write(&segment, tampered.join("\n") + "\n").unwrap();
        let order = reconstruct_call_order(&audit_dir(dir.path()), &key(), "r1");
        assert!(!order.ok());
        let lines: Vec<Option<u64>> = order.chain.errors.iter().map(|f| f.line).collect();
        assert_eq!(lines, vec![Some(2)], "{:?}", order.chain.errors);
        assert_eq!(
            order.problems,
            vec![OrderProblem::Missing { call_index: 1 }]
        );
    }
}
