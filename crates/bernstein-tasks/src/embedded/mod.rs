//! The embedded task store: a durable, multi-process task coordinator under `<workdir>/.sdd/`.
//!
//! # Files
//!
//! | path | what |
//! |---|---|
//! | `.sdd/runtime/tasks.jsonl` | the task log: one full task snapshot per line (module `record`), plus the evidence each transaction owes and markers once it is written (module `log`) |
//! | `.sdd/runtime/tasks.jsonl.lock` | the store lock (`flock`), separate from the log because compaction replaces the log's inode |
//! | `.sdd/runtime/task-backlog.json` (+ `.lock`) | the claimable backlog: claims on it adopted by every mutation, the file brought in step before a claim on it (module `backlog`) |
//! | `.sdd/runtime/plans/<id>.json` | plan documents (module `plans`) |
//! | `.sdd/runs/task-<slug>/journal.jsonl` | run-journal rows the run handle projects its status from |
//! | `.sdd/audit/*.jsonl` | the HMAC audit chain, when the caller passes an audit key |
//!
//! # Format decision: the reference's own task log
//!
//! The store writes the reference server's `.sdd/runtime/tasks.jsonl` format: every line is
//! `json.dumps(record, default=str)` of the 41-key `TaskRecord` the reference's
//! `TaskStore._task_to_record` writes, followed by the fields the reference's `Task.from_dict`
//! also reads (`created_at`, `model`, `effort`) and two bookkeeping keys it ignores (`attempts`,
//! `cost_usd`). So `bernstein serve` started in the same project replays our tasks, and this
//! store reads a log `bernstein serve` wrote (its lines are full snapshots too). Keys we do not
//! model are carried through unchanged. Two additions keep the log exact for us without
//! breaking the reference reader, which ignores unknown keys and skips unparsable lines:
//!
//! * a mutation that changes several tasks (a cascade, a subtask split) marks its lines
//!   `"batch": [k, n]`, and the group is applied all-or-nothing (module `log`);
//! * the reference replays a re-seen id by updating only its status, summary and agent; this
//!   store takes the whole last snapshot, which is what every line holds.
//!
//! The reference writes neither `created_at` nor `model`/`effort` to its log; a record without
//! `created_at` reads as time 0 here (the reference substitutes its load time).
//!
//! # One mutation
//!
//! Under the exclusive store lock, in this order:
//!
//! 1. catch up on records other processes appended since this process last read;
//! 2. write the evidence earlier transactions still owe (a crash or a failed write left it
//!    unwritten; module `evidence`), idempotently;
//! 3. when the backlog file changed since this process last saw it, read it under its lock and
//!    adopt claims made on it (a row whose claim breaks the task rules is reported and skipped);
//! 4. decide: look up, gate, transition, cascade (module `ops`) — the gate check and the transition
//!    see the same snapshot, so for example a completion refuses a task that is
//!    `waiting_for_subtasks` at the moment of writing;
//! 5. append every changed snapshot in one write, the last one carrying the evidence the change
//!    owes (journal rows, audit events, plan document), and `fdatasync` — the operation is
//!    acknowledged only after this;
//! 6. note that the backlog file is behind (it is brought in step before the next claim on it,
//!    module `backlog`, not rewritten here);
//! 7. write the plan document, the run-journal rows, then the audit events (each fsynced), and
//!    append a marker line saying the evidence is written;
//! 8. compact the log when it holds `COMPACT_RECORDS_PER_TASK` records per task (amortized:
//!    the rewrite costs the log's size and happens once per that many records).
//!
//! Mutations of one process that arrive while the store is held are committed together as one
//! group (`EmbeddedStore::commit_group`): steps 3 to 5 run for each in turn, each its own
//! transaction, with one `fdatasync` for the group at the end of step 5; steps 6 to 8 then run
//! once for the group, in transaction order. No mutation is answered before that `fdatasync`.
//!
//! The in-memory state is an index of the log (module `index`): the fields decisions need and
//! where each task's current line is; full records are read back on demand. No step above
//! parses or rewrites a whole file under the lock, except that rare compaction and a backlog
//! file another process changed.
//!
//! The task log is the source of truth and is written first, so a crash can leave evidence
//! missing for a change, but never evidence of a change the log does not hold; and since the log
//! line says what is owed, the next process that opens the store (or this one, before its next
//! mutation) writes what is missing. The reference server orders its writes the same way (the
//! receipts are written after the transition, best effort), without the replay. Evidence that
//! fails after the log holds the change is reported through
//! [`EmbeddedStore::evidence_failures`] and the `tracing` log, not as an error of the operation,
//! because the operation did happen; it stays owed, and [`verify_task_log`] (run by
//! `bernstein-mcp verify`) lists every gap with its file, line and kind.
//!
//! The backlog is never trusted for a claim: [`EmbeddedStore::claim_on_backlog`] brings it in
//! step under the store lock before a claim on the file, and refuses the claim when it cannot.
//!
//! Crash tests stop a mutation at a [`CrashPoint`] (steps 5, 6 and 7 above).
//!
//! Reads take the lock shared and catch up, so they see every acknowledged change of every
//! process.
//!
//! # Audit events and journal rows
//!
//! The audit events are the ones the reference task server writes for the same requests
//! (checked against `fixtures/vectors/server_probe/.sdd/audit/`): `task.created` on create (not
//! on subtask creation or plan tasks, as in the reference), `task.claim_receipt` with
//! `claim_path: "by_id"` on a claim by id (not on the auto-claim of a completion), and
//! `task.release_receipt` with `release_path` `fail`, `fail_empty_completion`, `cancel_cascade`
//! or `failed_dependency_cascade` when the task held a claim. Completion and unclaimed cancels
//! write no audit event, as in the reference. The audit key is given by the caller; the store
//! never reads the environment.
//!
//! The reference server writes no run-journal rows for task transitions at all (its only
//! server-side row is `artifact_posted`), so a reference run handle stays `working` forever.
//! This store appends the rows the status projection reads, so the handle follows the task:
//! `task_claimed` (payload `task_id, status, task_version, claimed_by`), `task_completed`
//! (`task_id, status, task_version`), `task_failed` and `task_cancelled` (plus `reason`).
//!
//! # Deliberate differences from the reference
//!
//! * A completion with an empty summary strands the task's dependents like any failure (the
//!   reference's empty-completion path forgets to).
//! * Plan mode needs no launch flag.
//! * A claim or completion is gated on the dependencies: each must be `done`/`closed` here or
//!   named in the caller's completed ids.

mod backlog;
mod evidence;
mod fsio;
mod index;
mod log;
mod ops;
mod plans;
mod record;
mod scan;
mod txn;

use std::any::Any;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bernstein_journal::audit::AuditChain;
use bernstein_journal::handle::BRIEF_CATCH_UP_BYTES;
use bernstein_journal::key::AuditKey;
use bernstein_protocol::pyjson::Object;
use ring::rand::SystemRandom;

pub use evidence::{EvidenceFailure, EvidenceGap};
pub use log::{LogReadStats, MAX_LINE_BYTES, TornTail};

use self::evidence::{Owed, OwedRow};

use self::backlog::BacklogTracker;
use self::fsio::LockFile;
use self::log::TaskLog;
use self::ops::Completion;
use self::txn::Txn;
use crate::backend::{
    ApprovalOutcome, CancelOutcome, ClaimRequest, ListQuery, PlanDecision, PlanRecord, PlanStatus,
    StatusSummary, TaskBackend, TaskPage,
};
use crate::error::Error;
use crate::lifecycle::TaskStatus;
use crate::model::{NewTask, Task, TaskId};

/// The project state directory inside a workdir.
pub const SDD_DIR: &str = ".sdd";
/// The task log, inside `.sdd/runtime/`.
pub const TASK_LOG_FILE: &str = "tasks.jsonl";
/// The store lock file, inside `.sdd/runtime/`.
pub const TASK_LOG_LOCK_FILE: &str = "tasks.jsonl.lock";
/// The backlog file, inside `.sdd/runtime/`.
pub const BACKLOG_FILE: &str = backlog::BACKLOG_FILE;

/// Most evidence failures kept for [`EmbeddedStore::evidence_failures`]; older ones are dropped
/// (they were logged when they happened).
const MAX_KEPT_FAILURES: usize = 1024;
/// Compact automatically once the log holds this many records...
const COMPACT_MIN_RECORDS: u64 = 4096;
/// ...and at least this many records per task.
const COMPACT_RECORDS_PER_TASK: u64 = 8;

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// Log size before, in bytes.
    pub bytes_before: u64,
    /// Log size after, in bytes.
    pub bytes_after: u64,
    /// Tasks in the rewritten log (one line each).
    pub tasks: usize,
}

/// A point inside a mutation where a crash test can stop it, as if the process died there:
/// the mutation returns [`Error::Storage`] and nothing after the point is written. The next
/// process to open the store, or this one at its next mutation, finishes the work from the
/// task log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrashPoint {
    /// The task log holds the change; backlog, plan, journal rows and audit events are not
    /// written.
    AfterLogAppend,
    /// The backlog bookkeeping is done too (claims adopted, the file noted behind); the plan
    /// document, journal rows and audit events are not.
    AfterBacklog,
    /// The plan document and journal rows are written too; the audit events are not.
    AfterJournalRows,
}

/// The embedded task store of one project.
///
/// Cloning is cheap and clones share one in-process state. Every method is synchronous and
/// blocking (file locks and fsyncs); the [`TaskBackend`] implementation runs them on Tokio's
/// blocking pool. Note that the inherent methods share their names with the trait's: on a
/// concrete `EmbeddedStore` the synchronous ones are called; generic code over
/// `B: TaskBackend` gets the async ones.
#[derive(Debug, Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    workdir: PathBuf,
    runtime: PathBuf,
    plans: PathBuf,
    lock: LockFile,
    backlog_lock: LockFile,
    log: Mutex<TaskLog>,
    /// Mutations waiting for the next group commit; locked alone, never while waiting for
    /// `log`.
    queue: MutationQueue,
    /// What this process knows of the backlog file; locked after `log`, never before it.
    backlog: Mutex<BacklogTracker>,
    evidence: evidence::EvidenceSinks,
    failures: Mutex<Vec<EvidenceFailure>>,
    random: SystemRandom,
    crash_point: Mutex<Option<CrashPoint>>,
}

/// A mutation's result, type-erased so that mutations of different kinds share one group.
type Outcome = Result<Box<dyn Any + Send>, Error>;

/// Where a queued mutation's outcome is left for its caller.
type Answer = Arc<Mutex<Option<Outcome>>>;

/// A mutation's decision over its transaction.
type Decide<'a> = Box<dyn FnOnce(&mut Txn<'_>, &EmbeddedStore) -> Outcome + Send + 'a>;

/// What names the plan document a mutation's result moves to.
type PlanOf<'a> = Box<dyn FnOnce(&(dyn Any + Send)) -> Option<Object> + Send + 'a>;

/// One mutation of a group: its decision over a transaction, and the plan document its result
/// moves to.
struct Mutation<'a> {
    decide: Decide<'a>,
    plan_of: PlanOf<'a>,
}

impl<'a> Mutation<'a> {
    fn new<T: Send + 'static>(
        decide: impl FnOnce(&mut Txn<'_>, &EmbeddedStore) -> Result<T, Error> + Send + 'a,
        plan_of: impl FnOnce(&T) -> Option<Object> + Send + 'a,
    ) -> Mutation<'a> {
        Mutation {
            decide: Box::new(move |txn, store| {
                decide(txn, store).map(|value| Box::new(value) as Box<dyn Any + Send>)
            }),
            plan_of: Box::new(move |value| {
                let value: &dyn Any = value;
                value.downcast_ref::<T>().and_then(plan_of)
            }),
        }
    }
}

/// Whether a commit may read the backlog file for claims to adopt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backlog {
    /// Read it when it changed, and adopt the claims on it.
    Adopt,
    /// The caller holds the backlog lock and adopts what it claimed itself: leave the file.
    Held,
}

/// A mutation waiting for the next group commit.
struct Queued {
    mutation: Mutation<'static>,
    answer: Answer,
}

/// The mutations waiting for the next group commit, in arrival order.
#[derive(Default)]
struct MutationQueue(Mutex<Vec<Queued>>);

impl std::fmt::Debug for MutationQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutationQueue")
            .field("queued", &lock_mutex(&self.0).len())
            .finish()
    }
}

/// A transaction of a group that reached the log, waiting for the group's sync and evidence.
struct Committed {
    /// Its mutation's place in the group.
    at: usize,
    value: Box<dyn Any + Send>,
    owed: Owed,
    /// Its end offset, when it owes evidence.
    end: Option<u64>,
}

/// The error of a mutation a group left without an outcome (which only a panic inside the group
/// can do).
fn unanswered(path: &Path) -> Error {
    Error::Storage {
        operation: "commit a change to",
        path: path.to_path_buf(),
        kind: std::io::ErrorKind::Interrupted,
        message: "the group commit holding this change stopped before answering it".to_owned(),
    }
}

/// The same failure for each of `count` mutations.
fn failed_all(error: &Error, count: usize) -> Vec<Outcome> {
    (0..count).map(|_| Err(error.clone())).collect()
}

/// Every mutation's outcome, in order.
fn finish(outcomes: Vec<Option<Outcome>>, path: &Path) -> Vec<Outcome> {
    outcomes
        .into_iter()
        .map(|outcome| outcome.unwrap_or_else(|| Err(unanswered(path))))
        .collect()
}

/// A mutation's result as the type its decision returned.
fn downcast<T: 'static>(value: Box<dyn Any + Send>, path: &Path) -> Result<T, Error> {
    value
        .downcast::<T>()
        .map(|value| *value)
        .map_err(|_| unanswered(path))
}

/// The task `id` of the caught-up `log`, or not found.
fn task_in(log: &TaskLog, id: &TaskId) -> Result<Task, Error> {
    log.load(id)?
        .map(|stored| stored.task)
        .ok_or_else(|| Error::NotFound {
            resource: crate::error::Resource::Task,
            id: id.to_string(),
        })
}

fn lock_mutex<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the guard leaves the fold at a record boundary (records are applied
    // whole), and the next catch-up re-reads from disk anyway, so the state stays usable.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl EmbeddedStore {
    /// Opens the store of the project at `workdir` (an existing directory), creating
    /// `.sdd/runtime/` when needed, and reads the task log. With `audit_key`, mutations append
    /// the reference's audit events to `.sdd/audit/`.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] when the directory cannot be used, [`Error::CorruptStore`] when the
    /// log holds a line that is not crash debris.
    pub fn open(
        workdir: impl AsRef<Path>,
        audit_key: Option<AuditKey>,
    ) -> Result<EmbeddedStore, Error> {
        let workdir = workdir.as_ref().to_path_buf();
        let meta = std::fs::metadata(&workdir)
            .map_err(|e| Error::storage("open workdir", &workdir, &e))?;
        if !meta.is_dir() {
            return Err(Error::Storage {
                operation: "open workdir",
                path: workdir,
                kind: std::io::ErrorKind::NotADirectory,
                message: "not a directory".to_owned(),
            });
        }
        let sdd = workdir.join(SDD_DIR);
        let runtime = sdd.join("runtime");
        fsio::create_dir_all(&runtime)?;
        let lock = LockFile::open(&runtime.join(TASK_LOG_LOCK_FILE))?;
        let backlog_lock = LockFile::open(&runtime.join(backlog::BACKLOG_LOCK_FILE))?;
        let chain = audit_key.map(|key| AuditChain::open(sdd.join("audit"), key));
        let store = EmbeddedStore {
            inner: Arc::new(Inner {
                evidence: evidence::EvidenceSinks::new(&workdir, chain),
                plans: plans::plans_dir(&sdd),
                log: Mutex::new(TaskLog::new(runtime.join(TASK_LOG_FILE))),
                queue: MutationQueue::default(),
                backlog: Mutex::new(BacklogTracker::default()),
                workdir,
                runtime,
                lock,
                backlog_lock,
                failures: Mutex::new(Vec::new()),
                random: SystemRandom::new(),
                crash_point: Mutex::new(None),
            }),
        };
        store.recover()?;
        Ok(store)
    }

    /// Finishes what a crashed or failed mutation left undone, under the exclusive lock: the
    /// evidence every transaction still owes (journal rows, audit events, plan documents,
    /// written idempotently). Only a task log that cannot be read is an error; anything else is
    /// reported through [`EmbeddedStore::evidence_failures`]. The backlog is not touched here:
    /// claims made on it are adopted by the next mutation, and it is brought in step when a
    /// claim needs it (module `backlog`), so opening a large project costs one pass over the
    /// log.
    fn recover(&self) -> Result<(), Error> {
        let mut log = lock_mutex(&self.inner.log);
        let _guard = self.inner.lock.exclusive()?;
        log.catch_up()?;
        self.settle_owed(&mut log);
        Ok(())
    }

    /// Makes later mutations of this store stop at `point` as a crash would (see
    /// [`CrashPoint`]); `None` turns it off. A seam for crash tests: nothing else sets it.
    pub fn set_crash_point(&self, point: Option<CrashPoint>) {
        *lock_mutex(&self.inner.crash_point) = point;
    }

    fn crash_at(&self, point: CrashPoint) -> Result<(), Error> {
        if *lock_mutex(&self.inner.crash_point) == Some(point) {
            return Err(Error::Storage {
                operation: "continue past the injected crash point in",
                path: self.task_log_path(),
                kind: std::io::ErrorKind::Interrupted,
                message: format!("stopped at {point:?}"),
            });
        }
        Ok(())
    }

    /// The project directory.
    pub fn workdir(&self) -> &Path {
        &self.inner.workdir
    }

    /// The task log file.
    pub fn task_log_path(&self) -> PathBuf {
        self.inner.runtime.join(TASK_LOG_FILE)
    }

    /// The audit chain mutations append to, when the store was opened with a key.
    pub fn audit_chain(&self) -> Option<&AuditChain> {
        self.inner.evidence.chain()
    }

    /// Every torn log tail this store has seen (crash debris skipped by reads, and removed by
    /// the next append or compaction, which is then listed again with `removed: true`).
    pub fn torn_tails(&self) -> Vec<TornTail> {
        lock_mutex(&self.inner.log).tears_seen().to_vec()
    }

    /// What this store read from its task log so far: catch-ups read only what other processes
    /// appended, and a changed prefix makes them start over (see [`LogReadStats`]).
    pub fn log_read_stats(&self) -> LogReadStats {
        lock_mutex(&self.inner.log).stats()
    }

    /// How many times this store read and parsed `task-backlog.json` so far (a probe for tests
    /// and benchmarks: a mutation reads it only when another writer changed it in a way the
    /// task log does not already hold).
    pub fn backlog_reads(&self) -> u64 {
        lock_mutex(&self.inner.backlog).reads()
    }

    /// Evidence (journal rows, audit events, backlog rewrites) that could not be written after
    /// the task log already held the change, most recent last.
    pub fn evidence_failures(&self) -> Vec<EvidenceFailure> {
        lock_mutex(&self.inner.failures).clone()
    }

    fn record_failures(&self, failures: Vec<EvidenceFailure>) {
        if failures.is_empty() {
            return;
        }
        let mut kept = lock_mutex(&self.inner.failures);
        kept.extend(failures);
        let excess = kept.len().saturating_sub(MAX_KEPT_FAILURES);
        kept.drain(..excess);
    }

    /// Runs `f` over the caught-up fold under the shared store lock.
    fn read<T>(&self, f: impl FnOnce(&TaskLog) -> Result<T, Error>) -> Result<T, Error> {
        let mut log = lock_mutex(&self.inner.log);
        let _guard = self.inner.lock.shared()?;
        log.catch_up()?;
        f(&log)
    }

    /// [`EmbeddedStore::read`] if it can start without waiting and catch up briefly: `None`
    /// when another caller of this process holds the log (a mutation group between its append
    /// and its `fdatasync`, say), another process holds the store's lock exclusively, or
    /// catching up would read the log again from the start or read more than the brief bound
    /// every async read keeps ([`BRIEF_CATCH_UP_BYTES`]; another process compacted it, or
    /// appended much). What is read is the same.
    fn read_now<T>(
        &self,
        f: impl FnOnce(&TaskLog) -> Result<T, Error>,
    ) -> Option<Result<T, Error>> {
        let mut log = match self.inner.log.try_lock() {
            Ok(log) => log,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        let _guard = match self.inner.lock.try_shared() {
            Ok(Some(guard)) => guard,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        match log.catch_up_within(Some(BRIEF_CATCH_UP_BYTES)) {
            Ok(true) => Some(f(&log)),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Runs one mutation (see the module documentation for the steps). `plan_of` names the plan
    /// document the change moves to, if any; it is owed like the other evidence.
    ///
    /// **Group commit.** The mutation is queued; whichever caller next holds the log commits
    /// every queued mutation as one group ([`EmbeddedStore::commit_group`]): each decided and
    /// appended in queue order as its own transaction, then one `fdatasync` of the log for all
    /// of them, then their evidence. So concurrent mutations (HTTP requests, pipelined stdio
    /// calls) share the log's sync and the audit chain's, and none is answered before the sync
    /// that makes it durable. A lone mutation is a group of one.
    fn mutate<T: Send + 'static>(
        &self,
        decide: impl FnOnce(&mut Txn<'_>, &EmbeddedStore) -> Result<T, Error> + Send + 'static,
        plan_of: impl FnOnce(&T) -> Option<Object> + Send + 'static,
    ) -> Result<T, Error> {
        let answer: Answer = Arc::new(Mutex::new(None));
        lock_mutex(&self.inner.queue.0).push(Queued {
            mutation: Mutation::new(decide, plan_of),
            answer: Arc::clone(&answer),
        });
        {
            let mut log = lock_mutex(&self.inner.log);
            // The group that held the log while this mutation queued may have committed it.
            if lock_mutex(&answer).is_none() {
                let group = std::mem::take(&mut *lock_mutex(&self.inner.queue.0));
                let (mutations, answers): (Vec<_>, Vec<_>) = group
                    .into_iter()
                    .map(|queued| (queued.mutation, queued.answer))
                    .unzip();
                let results = self.commit_caught_up(&mut log, mutations);
                for (slot, result) in answers.iter().zip(results) {
                    *lock_mutex(slot) = Some(result);
                }
            }
        }
        let path = self.task_log_path();
        // Only a group that panicked after taking this mutation from the queue leaves it
        // unanswered; whether it reached the log is for the next reader to see.
        let result = lock_mutex(&answer)
            .take()
            .unwrap_or_else(|| Err(unanswered(&path)));
        result.and_then(|value| downcast(value, &path))
    }

    /// Takes the exclusive lock, catches up, writes owed evidence, and commits `mutations` as
    /// one group, answering each in order.
    fn commit_caught_up(&self, log: &mut TaskLog, mutations: Vec<Mutation<'_>>) -> Vec<Outcome> {
        let count = mutations.len();
        let _guard = match self.inner.lock.exclusive() {
            Ok(guard) => guard,
            Err(e) => return failed_all(&e, count),
        };
        if let Err(e) = log.catch_up() {
            return failed_all(&e, count);
        }
        self.settle_owed(log);
        self.commit_group(log, Backlog::Adopt, mutations)
    }

    /// Writes the evidence the log says is still owed (idempotently) and marks each
    /// transaction whose evidence is then complete. Call under the exclusive lock, caught up.
    fn settle_owed(&self, log: &mut TaskLog) {
        if !log.owes() {
            return;
        }
        let owed = match log.owed() {
            Ok(owed) => owed,
            Err(e) => {
                self.record_failures(vec![EvidenceFailure {
                    target: "owed evidence".to_owned(),
                    task_id: String::new(),
                    message: e.to_string(),
                }]);
                return;
            }
        };
        let mut failures = Vec::new();
        for entry in owed {
            match Owed::from_object(&entry.evidence) {
                Ok(owed) => {
                    let missed = self.inner.evidence.replay(&owed, &self.inner.plans);
                    if missed.is_empty() && self.inner.evidence.can_settle(&owed) {
                        if let Err(e) = log.mark_evidence_written(entry.end) {
                            failures.push(EvidenceFailure {
                                target: "evidence marker".to_owned(),
                                task_id: String::new(),
                                message: e.to_string(),
                            });
                        }
                    } else {
                        failures.extend(missed);
                    }
                }
                Err(problem) => failures.push(EvidenceFailure {
                    target: format!("owed evidence at line {}", entry.line),
                    task_id: String::new(),
                    message: problem,
                }),
            }
        }
        self.record_failures(failures);
    }

    /// One mutation under the held exclusive lock, after catching up: a group of one (see
    /// [`EmbeddedStore::commit_group`]), adopting claims made on the backlog file.
    fn commit<T: Send + 'static>(
        &self,
        log: &mut TaskLog,
        decide: impl FnOnce(&mut Txn<'_>, &EmbeddedStore) -> Result<T, Error> + Send,
        plan_of: impl FnOnce(&T) -> Option<Object> + Send,
    ) -> Result<T, Error> {
        self.commit_one(log, Backlog::Adopt, decide, plan_of)
    }

    /// [`EmbeddedStore::commit`], saying whether the backlog file may be read for claims to
    /// adopt.
    fn commit_one<T: Send + 'static>(
        &self,
        log: &mut TaskLog,
        backlog: Backlog,
        decide: impl FnOnce(&mut Txn<'_>, &EmbeddedStore) -> Result<T, Error> + Send,
        plan_of: impl FnOnce(&T) -> Option<Object> + Send,
    ) -> Result<T, Error> {
        let path = self.task_log_path();
        self.commit_group(log, backlog, vec![Mutation::new(decide, plan_of)])
            .pop()
            .unwrap_or_else(|| Err(unanswered(&path)))
            .and_then(|value| downcast(value, &path))
    }

    /// Mutations under the held exclusive lock, after catching up, as one group: with
    /// [`Backlog::Adopt`], adopt claims made on the backlog file (read only when it changed)
    /// with the first transaction that commits; decide and append each mutation in order as its own transaction (a mutation
    /// that fails changes nothing and does not stop the others); `fdatasync` the log once (the
    /// acknowledgement point of every transaction in the group); write the owed evidence of
    /// all of them (plan documents, then run-journal rows, then audit events, each in
    /// transaction order) and mark it written; and compact when the log has grown to
    /// `COMPACT_RECORDS_PER_TASK` times its tasks. Nothing here reads or rewrites a whole file
    /// except that rare compaction and a backlog another process changed. Returns each
    /// mutation's outcome, in order.
    fn commit_group(
        &self,
        log: &mut TaskLog,
        backlog: Backlog,
        mutations: Vec<Mutation<'_>>,
    ) -> Vec<Outcome> {
        let inner = &*self.inner;
        let count = mutations.len();
        let mut tracker = lock_mutex(&inner.backlog);
        let changed = match backlog {
            Backlog::Adopt => tracker.changed_claims(&inner.runtime, &inner.backlog_lock, |id| {
                log.index().status(id) == Some(TaskStatus::Open)
            }),
            Backlog::Held => Ok(None),
        };
        let changed = match changed {
            Ok(changed) => changed,
            Err(e) => return failed_all(&e, count),
        };
        let mut failures = Vec::new();
        if let Some(problem) = changed.as_ref().and_then(|changed| changed.problem.clone()) {
            failures.push(EvidenceFailure {
                target: "backlog".to_owned(),
                task_id: String::new(),
                message: format!("left unchanged because it cannot be read: {problem}"),
            });
        }
        let claims = changed
            .as_ref()
            .map_or(&[][..], |changed| &changed.claims[..]);
        // Where the group's first write began: a failed sync cuts the file back to it.
        let mut group_start = None;
        let mut outcomes: Vec<Option<Outcome>> = (0..count).map(|_| None).collect();
        let mut committed: Vec<Committed> = Vec::new();
        // The claims are adopted in the first transaction that commits; `None` until then.
        let mut all_adopted = None;
        let mut adoption_reported = false;
        let mut wrote = false;
        for (at, mutation) in mutations.into_iter().enumerate() {
            let mut txn = Txn::new(log, fsio::now_unix());
            let mut adopted = true;
            if all_adopted.is_none() {
                for claim in claims {
                    // A row this store cannot take over (a claim time of -1, NaN or Infinity,
                    // say) is reported and skipped: one hostile row must not stop every
                    // mutation.
                    let adoption = ops::adopt_backlog_claim(
                        &mut txn,
                        &claim.task_id,
                        claim.claimer.clone(),
                        claim.claimed_at,
                        claim.attempts,
                    );
                    if let Err(e) = adoption {
                        adopted = false;
                        if !adoption_reported {
                            tracing::warn!(
                                target: "bernstein_tasks::embedded",
                                task_id = %claim.task_id,
                                "backlog row skipped, its claim cannot be adopted: {e}"
                            );
                            failures.push(EvidenceFailure {
                                target: format!("backlog row {}", claim.task_id),
                                task_id: claim.task_id.to_string(),
                                message: format!("claim not adopted, row skipped: {e}"),
                            });
                        }
                    }
                }
                adoption_reported = true;
            }
            let value = match (mutation.decide)(&mut txn, self) {
                Ok(value) => value,
                Err(e) => {
                    outcomes[at] = Some(Err(e));
                    continue;
                }
            };
            let (records, journal, audit) = txn.into_parts();
            let owed = Owed {
                rows: journal.iter().map(OwedRow::from).collect(),
                // Without a chain no audit event is written, so none is owed.
                events: if inner.evidence.chain().is_some() {
                    audit
                } else {
                    Vec::new()
                },
                plan: (mutation.plan_of)(&*value),
            };
            let has_records = !records.is_empty();
            match log.append(records, (!owed.is_empty()).then(|| owed.to_object()), false) {
                Ok(end) => {
                    if has_records {
                        group_start.get_or_insert(log.last_write_from());
                    }
                    wrote |= has_records;
                    all_adopted.get_or_insert(adopted);
                    committed.push(Committed {
                        at,
                        value,
                        owed,
                        end,
                    });
                }
                Err(e) => outcomes[at] = Some(Err(e)),
            }
        }
        if wrote && let Err(e) = log.sync() {
            // No transaction of the group is durable: take them all back.
            if let Some(start) = group_start {
                log.take_back(start);
            }
            for transaction in &committed {
                outcomes[transaction.at] = Some(Err(e.clone()));
            }
            drop(tracker);
            self.record_failures(failures);
            return finish(outcomes, &self.task_log_path());
        }
        if let (Some(changed), Some(all_adopted)) = (changed, all_adopted) {
            tracker.adopted(&inner.runtime, changed, all_adopted);
        }
        if wrote {
            tracker.log_changed();
        }
        drop(tracker);
        let crashed = self
            .crash_at(CrashPoint::AfterLogAppend)
            .and_then(|()| self.crash_at(CrashPoint::AfterBacklog));
        if let Err(e) = crashed {
            for transaction in &committed {
                outcomes[transaction.at] = Some(Err(e.clone()));
            }
            self.record_failures(failures);
            return finish(outcomes, &self.task_log_path());
        }
        let mut plans_written = Vec::with_capacity(committed.len());
        for transaction in &committed {
            let mut written = Ok(());
            if let Some(plan) = &transaction.owed.plan
                && let Err(e) = plans::write_forward(&inner.plans, plan)
            {
                failures.push(evidence::plan_failure(plan, &e));
                written = Err(e);
            }
            plans_written.push(written);
        }
        let rows: Vec<OwedRow> = committed
            .iter_mut()
            .flat_map(|transaction| std::mem::take(&mut transaction.owed.rows))
            .collect();
        let missed_rows = inner.evidence.write_rows(&rows);
        if let Err(e) = self.crash_at(CrashPoint::AfterJournalRows) {
            for transaction in &committed {
                outcomes[transaction.at] = Some(Err(e.clone()));
            }
            self.record_failures(failures);
            return finish(outcomes, &self.task_log_path());
        }
        let events: Vec<_> = committed
            .iter_mut()
            .flat_map(|transaction| std::mem::take(&mut transaction.owed.events))
            .collect();
        let missed_events = inner.evidence.write_events(&events);
        let evidence_written = missed_rows.is_empty() && missed_events.is_empty();
        failures.extend(missed_rows);
        failures.extend(missed_events);
        for (transaction, plan_written) in committed.into_iter().zip(plans_written) {
            if evidence_written
                && plan_written.is_ok()
                && let Some(end) = transaction.end
                && let Err(e) = log.mark_evidence_written(end)
            {
                failures.push(EvidenceFailure {
                    target: "evidence marker".to_owned(),
                    task_id: String::new(),
                    message: e.to_string(),
                });
            }
            outcomes[transaction.at] = Some(plan_written.map(|()| transaction.value));
        }
        if !log.owes()
            && log.records() >= COMPACT_MIN_RECORDS
            && log.records() >= COMPACT_RECORDS_PER_TASK.saturating_mul(log.len() as u64)
            && let Err(e) = log.compact()
        {
            failures.push(EvidenceFailure {
                target: "compaction".to_owned(),
                task_id: String::new(),
                message: e.to_string(),
            });
        }
        self.record_failures(failures);
        finish(outcomes, &self.task_log_path())
    }

    /// Brings the backlog file in step with the task log under the held exclusive lock:
    /// adopts claims made on it, then writes the projection (module `backlog`).
    fn sync_backlog_locked(&self, log: &mut TaskLog) -> Result<(), Error> {
        self.commit(log, |_, _| Ok(()), |()| None)?;
        let inner = &*self.inner;
        let mut tracker = lock_mutex(&inner.backlog);
        let log = &*log;
        tracker.sync(&inner.runtime, &inner.backlog_lock, log.index(), |slot| {
            log.load_slot(slot, false).map(|stored| stored.task)
        })
    }

    /// Brings `.sdd/runtime/task-backlog.json` in step with the task log now (claims made on
    /// it are adopted first). The store does this by itself before every claim on the file and
    /// when its last handle is dropped; call it when another reader needs the file current
    /// (a reference `bernstein serve` about to start on the project, say).
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] when the backlog cannot be read or rewritten, and the store's errors.
    pub fn sync_backlog(&self) -> Result<(), Error> {
        let mut log = lock_mutex(&self.inner.log);
        let _guard = self.inner.lock.exclusive()?;
        log.catch_up()?;
        self.settle_owed(&mut log);
        self.sync_backlog_locked(&mut log)
    }

    /// Runs `claim` on the rows of `.sdd/runtime/task-backlog.json` under the store lock and
    /// the backlog lock, with the file brought in step with the task log first, so a claim is
    /// never granted from a stale backlog (one a crash left behind the log, or an older copy
    /// put back). For a grant, `claimed_rows` gives the rows the claim left (normalised
    /// `BacklogEntry.to_dict()` objects); the store adopts the claim on them into the task log
    /// (the truth) and then writes the file once, projected from the log, before the lock is
    /// released and the caller answers. `claim` is `bernstein-journal`'s `claim_on_entries`
    /// over the rows, say.
    ///
    /// The claim reads no file: it gets the rows the store already holds, so a claim parses
    /// the backlog at most once, and not at all when the file is as this process last left it.
    /// Adopting before writing the file rewrites it once per claim instead of twice (the
    /// claimed rows, then their projection at the task's new version on the next claim). A
    /// crash between the adoption and the write leaves the file behind the log, which the next
    /// claim's projection brings in step before it grants anything.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] when the backlog cannot be brought in step (then `claim` does not
    /// run), or when the adoption fails and the claimed rows cannot be written either (then
    /// the claim is in neither, and the caller must not answer it as granted); and the store's
    /// errors. A projection that fails after the adoption is reported through
    /// [`EmbeddedStore::evidence_failures`]: the claim is in the log, and the next claim brings
    /// the file in step.
    pub fn claim_on_backlog<T, E>(
        &self,
        claim: impl FnOnce(&[&Object]) -> Result<T, E>,
        claimed_rows: impl FnOnce(&T) -> Option<&[Object]>,
    ) -> Result<Result<T, E>, Error> {
        let mut log = lock_mutex(&self.inner.log);
        let _guard = self.inner.lock.exclusive()?;
        log.catch_up()?;
        self.settle_owed(&mut log);
        self.commit(&mut log, |_, _| Ok(()), |()| None)?;
        let inner = &*self.inner;
        let held = {
            let mut tracker = lock_mutex(&inner.backlog);
            let log = &*log;
            tracker.sync_and_hold(&inner.runtime, &inner.backlog_lock, log.index(), |slot| {
                log.load_slot(slot, false).map(|stored| stored.task)
            })
        };
        let held = held.map_err(|e| Error::Storage {
            operation: "bring the claimable backlog in step with the task log in",
            path: inner.runtime.join(BACKLOG_FILE),
            kind: std::io::ErrorKind::Other,
            message: format!("the backlog could not be read, so no claim is granted from it: {e}"),
        })?;
        let rows = Arc::clone(&held.rows);
        let objects: Vec<&Object> = rows.iter().map(|row| &row.object).collect();
        let value = claim(&objects);
        let claimed = match &value {
            Ok(value) => claimed_rows(value),
            Err(_) => None,
        };
        let Some(claimed) = claimed else {
            // Nothing was claimed: the file is only brought in step.
            lock_mutex(&inner.backlog)
                .finish_held(&inner.runtime, held)
                .map_err(|e| Error::Storage {
                    operation: "bring the claimable backlog in step with the task log in",
                    path: inner.runtime.join(BACKLOG_FILE),
                    kind: std::io::ErrorKind::Other,
                    message: format!("the backlog could not be rewritten: {e}"),
                })?;
            return Ok(value);
        };
        // Only the claims this call made: a claim already on the file that the store could not
        // adopt (a hostile row) was reported by the commit above and must not fail this one.
        let is_open = |id: &TaskId| log.index().status(id) == Some(TaskStatus::Open);
        let already: HashSet<TaskId> = backlog::claims_in(objects.iter().copied(), is_open)
            .into_iter()
            .map(|claim| claim.task_id)
            .collect();
        let claims: Vec<_> = backlog::claims_in(claimed, is_open)
            .into_iter()
            .filter(|claim| !already.contains(&claim.task_id))
            .collect();
        // The backlog lock is held (by `held`), so this commit must not read the file: taking
        // the lock again on the same descriptor would succeed, and dropping that inner guard
        // would release the claim's lock before its write.
        let adopted = self.commit_one(
            &mut log,
            Backlog::Held,
            |txn, _| {
                for claim in &claims {
                    ops::adopt_backlog_claim(
                        txn,
                        &claim.task_id,
                        claim.claimer.clone(),
                        claim.claimed_at,
                        claim.attempts,
                    )?;
                }
                Ok(())
            },
            |()| None,
        );
        let mut tracker = lock_mutex(&inner.backlog);
        match adopted {
            Ok(()) => {
                let log = &*log;
                let projected = tracker.project_held(&inner.runtime, held, log.index(), |slot| {
                    log.load_slot(slot, false).map(|stored| stored.task)
                });
                if let Err(e) = projected {
                    self.record_failures(vec![EvidenceFailure {
                        target: "backlog projection after a claim".to_owned(),
                        task_id: String::new(),
                        message: e.to_string(),
                    }]);
                }
            }
            Err(e) => {
                // The claim is not in the log: put it on the file, from which the next
                // mutation adopts it, so the task is never granted twice.
                tracker.write_held(held, claimed.to_vec())?;
                self.record_failures(vec![EvidenceFailure {
                    target: "backlog claim adoption".to_owned(),
                    task_id: String::new(),
                    message: e.to_string(),
                }]);
            }
        }
        Ok(value)
    }

    /// A fresh 12-hex id no task uses or depends on.
    fn fresh_id(&self, txn: &Txn<'_>) -> Result<TaskId, Error> {
        // 48 random bits collide with a few thousand tasks about once in 10^8 draws; a handful
        // of retries makes a failure here a broken random source, not bad luck.
        for _ in 0..8 {
            let id = TaskId::generate(&self.inner.random)?;
            if !txn.contains(&id) && !txn.is_referenced(&id) && !self.plan_exists(id.as_str()) {
                return Ok(id);
            }
        }
        Err(Error::Randomness)
    }

    fn plan_exists(&self, id: &str) -> bool {
        self.inner.plans.join(format!("{id}.json")).exists()
    }

    /// Rewrites the task log as one line per task (see [`Compaction`]). Other processes notice
    /// the new file and re-read it.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] when the rewrite fails (the old log is then untouched), when a
    /// transaction still owes evidence that cannot be written, or when bytes lie past the last
    /// complete record (crash debris, or a lockless writer's: the next append seals them); or
    /// [`Error::CorruptStore`].
    pub fn compact(&self) -> Result<Compaction, Error> {
        let mut log = lock_mutex(&self.inner.log);
        let _guard = self.inner.lock.exclusive()?;
        log.catch_up()?;
        self.settle_owed(&mut log);
        let (bytes_before, bytes_after) = log.compact()?;
        Ok(Compaction {
            bytes_before,
            bytes_after,
            tasks: log.len(),
        })
    }

    /// See [`TaskBackend::create_task`].
    pub fn create_task(&self, request: NewTask) -> Result<Task, Error> {
        self.mutate(
            |txn, store| {
                let id = store.fresh_id(txn)?;
                ops::create(txn, request, id)
            },
            |_| None,
        )
    }

    /// Creates every task of `requests` in one transaction: one append and one `fdatasync` for
    /// all of them, all-or-nothing, each with the `task.created` event [`Self::create_task`]
    /// writes. For filling large projects (benchmarks, imports); keep a call to a few thousand
    /// tasks, since a reader holds one transaction in memory at a time.
    ///
    /// # Errors
    ///
    /// The errors of [`Self::create_task`]; on any error no task is created.
    pub fn create_tasks(&self, requests: Vec<NewTask>) -> Result<Vec<Task>, Error> {
        self.mutate(
            |txn, store| {
                let mut created = Vec::with_capacity(requests.len());
                for request in requests {
                    let id = store.fresh_id(txn)?;
                    created.push(ops::create(txn, request, id)?);
                }
                Ok(created)
            },
            |_| None,
        )
    }

    /// See [`TaskBackend::create_subtask`].
    pub fn create_subtask(&self, parent: &TaskId, request: NewTask) -> Result<Task, Error> {
        let parent = parent.clone();
        self.mutate(
            move |txn, store| {
                let id = store.fresh_id(txn)?;
                ops::create_subtask(txn, &parent, request, id)
            },
            |_| None,
        )
    }

    /// See [`TaskBackend::get_task`].
    pub fn get_task(&self, id: &TaskId) -> Result<Task, Error> {
        self.read(|log| task_in(log, id))
    }

    /// [`EmbeddedStore::get_task`] if it can be answered without waiting for a lock: `None`
    /// while a mutation of this process holds the log or another process holds the store
    /// exclusively. An async caller answers a read this way on its own thread, and hands it to
    /// a blocking thread only when it would wait.
    pub fn get_task_now(&self, id: &TaskId) -> Option<Result<Task, Error>> {
        self.read_now(|log| task_in(log, id))
    }

    /// See [`TaskBackend::list_tasks`]. The cursor is the id of the last task of the previous
    /// page. The filter runs on the index; only the tasks of the page are read from the log.
    pub fn list_tasks(&self, query: &ListQuery) -> Result<TaskPage, Error> {
        if query.limit == Some(0) {
            return Err(Error::InvalidRequest("limit must be at least 1".to_owned()));
        }
        self.read(|log| {
            let index = log.index();
            let start = match &query.cursor {
                None => 0,
                Some(cursor) => {
                    let position = TaskId::parse(cursor)
                        .ok()
                        .and_then(|id| index.slot(&id))
                        .ok_or_else(|| Error::InvalidCursor(cursor.clone()))?;
                    position + 1
                }
            };
            let mut matching = (start..index.len())
                .filter(|&slot| query.status.is_none_or(|s| index.status_at(slot) == s));
            let limit = query.limit.unwrap_or(usize::MAX);
            let tasks = matching
                .by_ref()
                .take(limit)
                .map(|slot| log.load_slot(slot, false).map(|stored| stored.task))
                .collect::<Result<Vec<Task>, Error>>()?;
            let next_cursor = match (matching.next(), tasks.last()) {
                (Some(_), Some(last)) => Some(last.id.to_string()),
                _ => None,
            };
            Ok(TaskPage { tasks, next_cursor })
        })
    }

    /// The `cancelled` tasks below `root` in the subtask tree whose every ancestor up to `root`
    /// is `cancelled` as well (what cancelling `root` cascaded to), in creation order. Walks
    /// the index's children of each cancelled task, so the cost follows the subtree, not the
    /// number of tasks (or of cancelled tasks) in the project.
    pub fn cancelled_descendants(&self, root: &TaskId) -> Result<Vec<Task>, Error> {
        self.read(|log| {
            let index = log.index();
            let mut slots = Vec::new();
            let mut seen = HashSet::from([root.clone()]);
            let mut frontier = vec![root.clone()];
            while let Some(parent) = frontier.pop() {
                for child in index.children(&parent) {
                    if index.parent(child) != Some(&parent)
                        || index.status(child) != Some(TaskStatus::Cancelled)
                        || !seen.insert(child.clone())
                    {
                        continue;
                    }
                    if let Some(slot) = index.slot(child) {
                        slots.push(slot);
                    }
                    frontier.push(child.clone());
                }
            }
            slots.sort_unstable();
            slots
                .into_iter()
                .map(|slot| log.load_slot(slot, false).map(|stored| stored.task))
                .collect()
        })
    }

    /// See [`TaskBackend::claim_task`].
    pub fn claim_task(&self, id: &TaskId, claim: &ClaimRequest) -> Result<Task, Error> {
        let (id, claim) = (id.clone(), claim.clone());
        self.mutate(move |txn, _| ops::claim(txn, &id, &claim), |_| None)
    }

    /// See [`TaskBackend::complete_task`].
    pub fn complete_task(&self, id: &TaskId, result_summary: &str) -> Result<Task, Error> {
        let (id, summary) = (id.clone(), result_summary.to_owned());
        match self.mutate(move |txn, _| ops::complete(txn, &id, &summary), |_| None)? {
            Completion::Done(task) => Ok(task),
            Completion::FailedEmpty(task) => Err(Error::EmptyResultSummary {
                task_id: task.id.to_string(),
            }),
        }
    }

    /// See [`TaskBackend::approve_task`].
    pub fn approve_task(&self, id: &TaskId, note: &str) -> Result<ApprovalOutcome, Error> {
        let (id, note) = (id.clone(), note.to_owned());
        self.mutate(move |txn, _| ops::approve(txn, &id, &note), |_| None)
    }

    /// See [`TaskBackend::fail_task`].
    pub fn fail_task(&self, id: &TaskId, reason: &str) -> Result<Task, Error> {
        let (id, reason) = (id.clone(), reason.to_owned());
        self.mutate(move |txn, _| ops::fail(txn, &id, &reason), |_| None)
    }

    /// See [`TaskBackend::cancel_task`].
    pub fn cancel_task(&self, id: &TaskId, reason: &str) -> Result<CancelOutcome, Error> {
        let (id, reason) = (id.clone(), reason.to_owned());
        self.mutate(move |txn, _| ops::cancel(txn, &id, &reason), |_| None)
    }

    /// See [`TaskBackend::status_summary`].
    pub fn status_summary(&self) -> Result<StatusSummary, Error> {
        self.read(|log| Ok(log.index().summary()))
    }

    /// [`EmbeddedStore::status_summary`] if it can be answered without waiting for a lock, as
    /// [`EmbeddedStore::get_task_now`].
    pub fn status_summary_now(&self) -> Option<Result<StatusSummary, Error>> {
        self.read_now(|log| Ok(log.index().summary()))
    }

    /// See [`TaskBackend::create_plan`]. The tasks are logged with the plan document they owe,
    /// then the document is written (and, after a crash or a failed write, written on the next
    /// open or mutation).
    pub fn create_plan(&self, goal: &str, tasks: Vec<NewTask>) -> Result<PlanRecord, Error> {
        if tasks.is_empty() {
            return Err(Error::InvalidRequest(
                "a plan needs at least one task".to_owned(),
            ));
        }
        let goal = goal.to_owned();
        self.mutate(
            move |txn, store| {
                let mut planned = Vec::with_capacity(tasks.len());
                for request in tasks {
                    let id = store.fresh_id(txn)?;
                    planned.push(ops::create_planned(txn, request, id)?);
                }
                let plan_id = store.fresh_id(txn)?;
                Ok(plans::build(plan_id.to_string(), &goal, &planned, txn.now))
            },
            |plan| Some(plan.to_object()),
        )
    }

    /// See [`TaskBackend::get_plan`].
    pub fn get_plan(&self, plan_id: &str) -> Result<PlanRecord, Error> {
        plans::read(&self.inner.plans, plan_id)
    }

    /// See [`TaskBackend::list_plans`].
    pub fn list_plans(&self) -> Result<Vec<PlanRecord>, Error> {
        plans::list(&self.inner.plans)
    }

    /// See [`TaskBackend::approve_plan`].
    pub fn approve_plan(&self, plan_id: &str, reason: &str) -> Result<PlanDecision, Error> {
        self.decide_plan(plan_id, reason, PlanStatus::Approved)
    }

    /// See [`TaskBackend::reject_plan`].
    pub fn reject_plan(&self, plan_id: &str, reason: &str) -> Result<PlanDecision, Error> {
        self.decide_plan(plan_id, reason, PlanStatus::Rejected)
    }

    /// Moves the plan's `planned` tasks and records the decided plan document as owed evidence
    /// of the same log transaction, then writes the document. If the process dies (or the write
    /// fails) between the two, the next open or mutation writes the document from the log
    /// before anything else, so a later decision sees the plan decided.
    fn decide_plan(
        &self,
        plan_id: &str,
        reason: &str,
        decision: PlanStatus,
    ) -> Result<PlanDecision, Error> {
        let target = match decision {
            PlanStatus::Approved => TaskStatus::Open,
            _ => TaskStatus::Cancelled,
        };
        let (plan_id, reason) = (plan_id.to_owned(), reason.to_owned());
        self.mutate(
            move |txn, store| {
                let mut plan = plans::read(&store.inner.plans, &plan_id)?;
                plans::check_decidable(&plan)?;
                let moved = ops::decide_planned(txn, &plans::task_ids(&plan), target)?;
                plan.status = decision;
                plan.decided_at = Some(txn.now);
                plan.decision_reason = reason;
                Ok((plan, moved))
            },
            |(plan, _)| Some(plan.to_object()),
        )
        .map(|(plan, moved)| PlanDecision {
            plan_id: plan.id().to_owned(),
            status: decision,
            task_ids: moved,
        })
    }
}

impl Drop for EmbeddedStore {
    /// The last handle of a store that changed tasks brings the backlog file in step, so a
    /// reader that starts after this process (a reference `bernstein serve`) finds it current.
    /// Best effort: a failure is logged, and the next claim through any store syncs it anyway.
    fn drop(&mut self) {
        // A store stopped at a crash point stands for a dead process: it finishes nothing.
        if Arc::strong_count(&self.inner) != 1
            || !lock_mutex(&self.inner.backlog).is_behind()
            || lock_mutex(&self.inner.crash_point).is_some()
        {
            return;
        }
        if let Err(e) = self.sync_backlog() {
            tracing::warn!(
                target: "bernstein_tasks::embedded",
                "the claimable backlog was not brought in step on close: {e}"
            );
        }
    }
}

/// Checks the task log of the project at `workdir` against the evidence its transactions owe:
/// every run-journal row, every audit event (when `chain` is given) and every plan document.
/// Reads only: no lock is taken and nothing is written, so it can run beside a live server
/// (a transaction being written at that moment may then show as unwritten evidence). Crash
/// debris at the end of the log is reported too. Compaction drops the history, so only
/// transactions since the last compaction are checked.
///
/// # Errors
///
/// [`Error::CorruptStore`] or [`Error::Storage`] when the log cannot be read.
pub fn verify_task_log(
    workdir: &Path,
    chain: Option<&AuditChain>,
) -> Result<Vec<EvidenceGap>, Error> {
    let sdd = workdir.join(SDD_DIR);
    let path = sdd.join("runtime").join(TASK_LOG_FILE);
    let mut log = TaskLog::keeping_history(path.clone());
    log.catch_up()?;
    let mut gaps = evidence::check_history(
        &path,
        log.history(),
        &log.owed()?,
        workdir,
        chain,
        &plans::plans_dir(&sdd),
    );
    let backlog = backlog::read_unlocked(&sdd.join("runtime"))?;
    let backlog_path = sdd.join("runtime").join(BACKLOG_FILE);
    let is_open = |id: &TaskId| log.index().status(id) == Some(TaskStatus::Open);
    for (index, problem) in backlog.unadoptable(is_open) {
        gaps.push(EvidenceGap {
            file: backlog_path.clone(),
            line: index as u64 + 1,
            kind: "unadoptable_backlog_row",
            detail: format!("row {}: {problem}", index + 1),
        });
    }
    // A backlog behind the log is no gap: the store brings it in step when a claim needs it
    // (module `backlog`). One that cannot be read would refuse every claim.
    if let Some(problem) = backlog.problem() {
        gaps.push(EvidenceGap {
            file: backlog_path.clone(),
            line: 0,
            kind: "unreadable_backlog",
            detail: problem,
        });
    }
    for tear in log.tears_seen().iter().filter(|tear| !tear.removed) {
        gaps.push(EvidenceGap {
            file: path.clone(),
            line: log.lines() + 1,
            kind: "torn_tail",
            detail: format!(
                "{} byte(s) of an unfinished write at offset {}",
                tear.length, tear.offset
            ),
        });
    }
    Ok(gaps)
}

/// Runs `work` on Tokio's blocking pool when a runtime is present, inline otherwise.
async fn blocking<T: Send + 'static>(
    workdir: PathBuf,
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    crate::blocking::run_blocking(work)
        .await
        .unwrap_or_else(|lost| {
            Err(Error::Storage {
                operation: "run a task store operation in",
                path: workdir,
                kind: std::io::ErrorKind::Other,
                message: format!("the blocking task did not finish: {lost}"),
            })
        })
}

impl TaskBackend for EmbeddedStore {
    fn create_task(&self, request: NewTask) -> impl Future<Output = Result<Task, Error>> + Send {
        let store = self.clone();
        blocking(self.workdir().to_path_buf(), move || {
            store.create_task(request)
        })
    }

    fn create_subtask(
        &self,
        parent: &TaskId,
        request: NewTask,
    ) -> impl Future<Output = Result<Task, Error>> + Send {
        let (store, parent) = (self.clone(), parent.clone());
        blocking(self.workdir().to_path_buf(), move || {
            store.create_subtask(&parent, request)
        })
    }

    fn get_task(&self, id: &TaskId) -> impl Future<Output = Result<Task, Error>> + Send {
        let (store, id) = (self.clone(), id.clone());
        blocking(self.workdir().to_path_buf(), move || store.get_task(&id))
    }

    fn list_tasks(
        &self,
        query: &ListQuery,
    ) -> impl Future<Output = Result<TaskPage, Error>> + Send {
        let (store, query) = (self.clone(), query.clone());
        blocking(self.workdir().to_path_buf(), move || {
            store.list_tasks(&query)
        })
    }

    fn claim_task(
        &self,
        id: &TaskId,
        claim: &ClaimRequest,
    ) -> impl Future<Output = Result<Task, Error>> + Send {
        let (store, id, claim) = (self.clone(), id.clone(), claim.clone());
        blocking(self.workdir().to_path_buf(), move || {
            store.claim_task(&id, &claim)
        })
    }

    fn complete_task(
        &self,
        id: &TaskId,
        result_summary: &str,
    ) -> impl Future<Output = Result<Task, Error>> + Send {
        let (store, id, summary) = (self.clone(), id.clone(), result_summary.to_owned());
        blocking(self.workdir().to_path_buf(), move || {
            store.complete_task(&id, &summary)
        })
    }

    fn approve_task(
        &self,
        id: &TaskId,
        note: &str,
    ) -> impl Future<Output = Result<ApprovalOutcome, Error>> + Send {
        let (store, id, note) = (self.clone(), id.clone(), note.to_owned());
        blocking(self.workdir().to_path_buf(), move || {
            store.approve_task(&id, &note)
        })
    }

    fn fail_task(
        &self,
        id: &TaskId,
        reason: &str,
    ) -> impl Future<Output = Result<Task, Error>> + Send {
        let (store, id, reason) = (self.clone(), id.clone(), reason.to_owned());
        blocking(self.workdir().to_path_buf(), move || {
            store.fail_task(&id, &reason)
        })
    }

    fn cancel_task(
        &self,
        id: &TaskId,
        reason: &str,
    ) -> impl Future<Output = Result<CancelOutcome, Error>> + Send {
        let (store, id, reason) = (self.clone(), id.clone(), reason.to_owned());
        blocking(self.workdir().to_path_buf(), move || {
            store.cancel_task(&id, &reason)
        })
    }

    fn status_summary(&self) -> impl Future<Output = Result<StatusSummary, Error>> + Send {
        let store = self.clone();
        blocking(self.workdir().to_path_buf(), move || store.status_summary())
    }

    fn create_plan(
        &self,
        goal: &str,
        tasks: Vec<NewTask>,
    ) -> impl Future<Output = Result<PlanRecord, Error>> + Send {
        let (store, goal) = (self.clone(), goal.to_owned());
        blocking(self.workdir().to_path_buf(), move || {
            store.create_plan(&goal, tasks)
        })
    }

    fn get_plan(&self, plan_id: &str) -> impl Future<Output = Result<PlanRecord, Error>> + Send {
        let (store, plan_id) = (self.clone(), plan_id.to_owned());
        blocking(self.workdir().to_path_buf(), move || {
            store.get_plan(&plan_id)
        })
    }

    fn list_plans(&self) -> impl Future<Output = Result<Vec<PlanRecord>, Error>> + Send {
        let store = self.clone();
        blocking(self.workdir().to_path_buf(), move || store.list_plans())
    }

    fn approve_plan(
        &self,
        plan_id: &str,
        reason: &str,
    ) -> impl Future<Output = Result<PlanDecision, Error>> + Send {
        let (store, plan_id, reason) = (self.clone(), plan_id.to_owned(), reason.to_owned());
        blocking(self.workdir().to_path_buf(), move || {
            store.approve_plan(&plan_id, &reason)
        })
    }

    fn reject_plan(
        &self,
        plan_id: &str,
        reason: &str,
    ) -> impl Future<Output = Result<PlanDecision, Error>> + Send {
        let (store, plan_id, reason) = (self.clone(), plan_id.to_owned(), reason.to_owned());
        blocking(self.workdir().to_path_buf(), move || {
            store.reject_plan(&plan_id, &reason)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;

    fn store() -> (tempfile::TempDir, EmbeddedStore) {
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_master_bytes(b"group commit test key".to_vec());
        let store = EmbeddedStore::open(dir.path(), Some(key)).unwrap();
        (dir, store)
    }

    fn queued(store: &EmbeddedStore) -> usize {
        lock_mutex(&store.inner.queue.0).len()
    }

    /// Mutations that queue while a group holds the log are committed as the next group: one
    /// `fdatasync` of the log for all of them, and none answered before it.
    #[test]
    fn mutations_queued_behind_a_group_share_its_successors_sync() {
        let (_dir, store) = store();
        store.create_task(NewTask::new("warm", "warm")).unwrap();
        let before = store.log_read_stats().syncs;
        const WAITING: usize = 4;
        let (started, leading) = mpsc::channel();
        std::thread::scope(|scope| {
            let leader = scope.spawn(|| {
                let store_ref = &store;
                store_ref.mutate(
                    move |txn, store| {
                        started.send(()).unwrap();
                        // Hold the log until the others have queued behind this group.
                        let deadline = Instant::now() + Duration::from_secs(30);
                        while queued(store) < WAITING && Instant::now() < deadline {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        let id = store.fresh_id(txn)?;
                        ops::create(txn, NewTask::new("leader", "leader"), id)
                    },
                    |_| None,
                )
            });
            leading.recv().unwrap();
            let followers: Vec<_> = (0..WAITING)
                .map(|n| {
                    let store = &store;
                    scope.spawn(move || {
                        let task = store.create_task(NewTask::new(format!("f{n}"), "f"))?;
                        // Answered only once the sync that made it durable has happened.
                        Ok::<_, Error>((task, store.log_read_stats().syncs))
                    })
                })
                .collect();
            assert!(leader.join().unwrap().is_ok());
            for follower in followers {
                let (task, syncs_seen) = follower.join().unwrap().unwrap();
                assert_eq!(store.get_task(&task.id).unwrap().title, task.title);
                assert_eq!(syncs_seen, before + 2, "answered before its group's sync");
            }
        });
        assert_eq!(
            store.log_read_stats().syncs,
            before + 2,
            "the leader's group and one group for the four that queued behind it"
        );
        assert_eq!(
            store.status_summary().unwrap().total,
            1 + 1 + WAITING as u64
        );
        assert_eq!(store.evidence_failures(), []);
        let report = store.audit_chain().unwrap().verify();
        assert!(report.ok(), "{:?}", report.verify_messages());
    }

    /// A read that can start at once is answered in place; one that would wait, for a
    /// mutation of this process holding the log or another process holding the store's lock
    /// exclusively, declines (`None`) instead of blocking, and the waiting read still answers.
    #[test]
    fn reads_answered_now_decline_whenever_they_would_wait() {
        let (dir, store) = store();
        let task = store.create_task(NewTask::new("t", "d")).unwrap();
        let now = |store: &EmbeddedStore| store.get_task_now(&task.id).map(|t| t.unwrap().title);
        assert_eq!(now(&store), Some("t".to_owned()));
        assert_eq!(store.status_summary_now().unwrap().unwrap().total, 1);
        let missing = TaskId::parse("0123456789abcdef0123456789abcdef").unwrap();
        assert!(matches!(
            store.get_task_now(&missing),
            Some(Err(Error::NotFound { .. }))
        ));

        let held = lock_mutex(&store.inner.log);
        assert_eq!(now(&store), None, "waited for this process's log");
        assert!(store.status_summary_now().is_none());
        drop(held);

        let other = EmbeddedStore::open(dir.path(), None).unwrap();
        let exclusive = other.inner.lock.exclusive().unwrap();
        assert_eq!(
            now(&store),
            None,
            "waited for another holder's exclusive lock"
        );
        assert!(store.status_summary_now().is_none());
        drop(exclusive);
        assert_eq!(now(&store), Some("t".to_owned()));
        assert_eq!(store.get_task(&task.id).unwrap().title, "t");

        // More than the brief bound appended since the last look (a torn tail here, so the
        // test need not write a mebibyte of tasks): declined unread, and the waiting read
        // still answers.
        let log_path = dir.path().join(".sdd/runtime/tasks.jsonl");
        let length = std::fs::metadata(&log_path).unwrap().len();
        let tail = vec![b' '; BRIEF_CATCH_UP_BYTES as usize + 1];
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(&log_path)
            .unwrap();
        std::io::Write::write_all(&mut log, &tail).unwrap();
        assert_eq!(now(&store), None, "caught up more than the bound");
        log.set_len(length).unwrap();
        assert_eq!(now(&store), Some("t".to_owned()));

        // The log replaced behind this store's back (same bytes, a new file): it must be read
        // again from the start, which is not brief.
        let copy = dir.path().join(".sdd/runtime/tasks.jsonl.copy");
        std::fs::copy(&log_path, &copy).unwrap();
        std::fs::rename(&copy, &log_path).unwrap();
        assert_eq!(now(&store), None, "read the replaced log in place");
        assert_eq!(store.get_task(&task.id).unwrap().title, "t");
        assert_eq!(now(&store), Some("t".to_owned()));
    }

    /// A mutation of a group that fails changes nothing and does not stop the others.
    #[test]
    fn a_failing_mutation_leaves_the_rest_of_its_group_committed() {
        let (_dir, store) = store();
        let missing = TaskId::parse("0123456789ab").unwrap();
        let mut log = lock_mutex(&store.inner.log);
        let _guard = store.inner.lock.exclusive().unwrap();
        log.catch_up().unwrap();
        let outcomes = store.commit_group(
            &mut log,
            Backlog::Adopt,
            vec![
                Mutation::new(
                    |txn, store| {
                        let id = store.fresh_id(txn)?;
                        ops::create(txn, NewTask::new("first", "first"), id)
                    },
                    |_| None,
                ),
                Mutation::new(
                    move |txn, _| ops::fail(txn, &missing, "no such task"),
                    |_| None,
                ),
                Mutation::new(
                    |txn, store| {
                        let id = store.fresh_id(txn)?;
                        ops::create(txn, NewTask::new("third", "third"), id)
                    },
                    |_| None,
                ),
            ],
        );
        assert_eq!(outcomes.len(), 3);
        assert!(outcomes[0].is_ok());
        assert_eq!(outcomes[1].as_ref().unwrap_err().code(), "unknown_task");
        assert!(outcomes[2].is_ok());
        assert_eq!(log.stats().syncs, 1);
        assert_eq!(log.len(), 2);
    }
}
