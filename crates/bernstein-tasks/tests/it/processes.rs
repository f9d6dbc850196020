//! Several processes on one project: crash safety under SIGKILL, and concurrent writers.
//!
//! Both tests re-run this test binary as a child process. The child entry points are ignored
//! tests, run with `--ignored` and `BERNSTEIN_TASKS_CHILD` set; run any other way they fail.
//! Children print one `ack <kind> <id>` line to stdout after each call
//! returns, i.e. after the store acknowledged it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bernstein_journal::audit::{self, TearClass};
use bernstein_journal::handle::{TaskStatus as RunStatus, project_task_status};
use bernstein_journal::run_journal::{load_run_journal, task_run_id};
use bernstein_tasks::backend::{ClaimRequest, ListQuery};
use bernstein_tasks::embedded::{CrashPoint, EmbeddedStore};
use bernstein_tasks::{Error, TaskId, TaskStatus};
use ring::rand::{SecureRandom, SystemRandom};

use crate::embedded::test_key;
use crate::suite::request;

const CHILD_ENV: &str = "BERNSTEIN_TASKS_CHILD";

fn ack(kind: &str, id: &TaskId) {
    let mut out = std::io::stdout().lock();
    // A closed pipe means the parent is gone; the child has nothing left to report to.
    let _ = writeln!(out, "ack {kind} {id}");
    let _ = out.flush();
}

/// Ends the line libtest started (`test name ... `) so the first `ack` is a line of its own.
fn begin_acks() {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out);
    let _ = out.flush();
}

fn spawn_child(test_name: &str, mode: &str) -> Child {
    spawn_child_with_stderr(test_name, mode, Stdio::null())
}

/// A child whose stderr goes to `stderr` (a file), so a child that dies before it is ready
/// (a panic in its open, say) is told apart from a slow one.
fn spawn_child_with_stderr(test_name: &str, mode: &str, stderr: Stdio) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            test_name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, mode)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// Reads a child's stdout on a thread, forwarding each `ack` line.
fn read_acks(child: &mut Child) -> mpsc::Receiver<(String, String)> {
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let mut words = line.split(' ');
            if let (Some("ack"), Some(kind), Some(id)) = (words.next(), words.next(), words.next())
                && sender.send((kind.to_owned(), id.to_owned())).is_err()
            {
                return;
            }
        }
    });
    receiver
}

fn random_below(random: &SystemRandom, bound: u64) -> u64 {
    let mut bytes = [0u8; 8];
    random.fill(&mut bytes).unwrap();
    u64::from_le_bytes(bytes) % bound
}

/// The crash child: forever, a subtask split completed through its children, then a cancelled
/// subtree. Each step is acknowledged once the store returned.
#[test]
#[ignore = "child process of acknowledged_changes_survive_sigkill"]
fn crash_child() {
    let mode = std::env::var(CHILD_ENV).unwrap_or_default();
    let Some(dir) = mode.strip_prefix("crash:") else {
        panic!("run only as a child process of acknowledged_changes_survive_sigkill");
    };
    let store = EmbeddedStore::open(dir, Some(test_key())).unwrap();
    begin_acks();
    ack("ready", &TaskId::parse("start").unwrap());
    let worker = ClaimRequest {
        claimer: Some("worker-crash".into()),
        ..ClaimRequest::default()
    };
    loop {
        let parent = store.create_task(request("parent")).unwrap();
        ack("create", &parent.id);
        let first = store.create_subtask(&parent.id, request("a")).unwrap();
        ack("subtask", &first.id);
        ack("waiting", &parent.id);
        let second = store.create_subtask(&parent.id, request("b")).unwrap();
        ack("subtask", &second.id);
        store.claim_task(&first.id, &worker).unwrap();
        ack("claim", &first.id);
        store.complete_task(&first.id, "a done").unwrap();
        ack("done", &first.id);
        store.complete_task(&second.id, "b done").unwrap();
        ack("done", &second.id);
        ack("done", &parent.id);
        let root = store.create_task(request("root")).unwrap();
        ack("create", &root.id);
        let leaf = store.create_subtask(&root.id, request("leaf")).unwrap();
        ack("subtask", &leaf.id);
        store.cancel_task(&root.id, "stop").unwrap();
        ack("cancelled", &root.id);
        ack("cancelled", &leaf.id);
    }
}

/// Checks that everything acknowledged survived, and that the audit chain holds no hard error.
/// Task states and audit events are checked for every acknowledgement; run journals (the
/// slowest to read) only for those from `fresh` on, since no later child touches older tasks.
fn check_acknowledged(dir: &Path, acks: &[(String, String)], fresh: usize) {
    let store = EmbeddedStore::open(dir, Some(test_key())).unwrap();
    let key = test_key();
    let audit_dir = dir.join(".sdd").join("audit");
    let mut walk = audit::verified_records(&audit_dir, &key);
    let mut audited: BTreeSet<(String, String)> = BTreeSet::new();
    for record in walk.by_ref() {
        audited.insert((record.event_type, record.resource_id));
    }
    let report = walk.finish();
    assert!(report.errors.is_empty(), "{:?}", report.verify_messages());
    for tear in &report.tears {
        assert!(
            matches!(
                tear.class,
                TearClass::PartialRecord | TearClass::UnterminatedRecord
            ),
            "a tear that is not crash-shaped: {}",
            tear.describe()
        );
    }
    for (position, (kind, id)) in acks.iter().enumerate() {
        if kind == "ready" {
            continue;
        }
        let read_journal = position >= fresh;
        let task_id = TaskId::parse(id).unwrap();
        let task = store
            .get_task(&task_id)
            .unwrap_or_else(|e| panic!("acknowledged {kind} {id} lost: {e}"));
        let journal = || load_run_journal(dir, &task_run_id(id)).unwrap().rows;
        let has = |event: &str| audited.contains(&(event.to_owned(), id.clone()));
        match kind.as_str() {
            "create" => assert!(has("task.created"), "task.created of {id} lost"),
            "subtask" => {}
            "waiting" => assert!(
                matches!(
                    task.status,
                    TaskStatus::WaitingForSubtasks | TaskStatus::Done
                ),
                "{id} is {}",
                task.status
            ),
            "claim" => {
                assert!(matches!(
                    task.status,
                    TaskStatus::Claimed | TaskStatus::Done
                ));
                assert!(has("task.claim_receipt"), "claim receipt of {id} lost");
                assert!(
                    !read_journal
                        || journal().iter().any(
                            |r| r.get("event").and_then(|e| e.as_str()) == Some("task_claimed")
                        )
                );
            }
            "done" => {
                assert_eq!(task.status, TaskStatus::Done, "{id}");
                assert_eq!(
                    project_task_status(&journal()),
                    RunStatus::Completed,
                    "{id}"
                );
            }
            "cancelled" => {
                assert_eq!(task.status, TaskStatus::Cancelled, "{id}");
                assert_eq!(
                    project_task_status(&journal()),
                    RunStatus::Cancelled,
                    "{id}"
                );
            }
            other => panic!("unknown acknowledgement {other}"),
        }
    }
}

/// 200 children, each killed with SIGKILL at a random moment of its work; after each, every
/// acknowledged change is present and the audit chain shows no hard error (a torn tail may show
/// as a crash-shaped tear, which the next child's append seals).
#[test]
fn acknowledged_changes_survive_sigkill() {
    const KILLS: usize = 200;
    const KILLS_PER_PROJECT: usize = 25;
    let random = SystemRandom::new();
    let mut projects = Vec::new();
    let mut acks: Vec<(String, String)> = Vec::new();
    let mut killed_mid_work = 0;
    for kill in 0..KILLS {
        if kill % KILLS_PER_PROJECT == 0 {
            projects.push(tempfile::tempdir().unwrap());
            acks.clear();
        }
        let dir = projects.last().unwrap().path();
        let stderr = tempfile::NamedTempFile::new().unwrap();
        let mut child = spawn_child_with_stderr(
            "processes::crash_child",
            &format!("crash:{}", dir.display()),
            Stdio::from(stderr.reopen().unwrap()),
        );
        let receiver = read_acks(&mut child);
        // Wait for the child to be ready, so the kill lands in its work, not its start-up. The
        // bound only turns a hang into a failure: on a loaded 2-core machine a child's start
        // (exec of this binary, the open's replay and recovery) may take seconds, so it is
        // generous; a child that died instead says why through its stderr below.
        let ready = receiver.recv_timeout(Duration::from_secs(120));
        if ready.is_ok() {
            std::thread::sleep(Duration::from_micros(random_below(&random, 80_000)));
        }
        // Killed before any assertion, so a failing run leaves no child looping behind.
        child.kill().unwrap();
        if let Err(waited) = ready {
            let _ = child.wait();
            panic!(
                "child {kill} never became ready ({waited:?}); its stderr:\n{}",
                std::fs::read_to_string(stderr.path()).unwrap_or_default()
            );
        }
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        if status.signal() == Some(9) {
            killed_mid_work += 1;
        }
        let fresh = acks.len();
        acks.extend(receiver.iter());
        check_acknowledged(dir, &acks, fresh);
    }
    assert_eq!(killed_mid_work, KILLS, "every child must die by SIGKILL");
    assert!(
        acks.len() > KILLS_PER_PROJECT,
        "children did too little work"
    );
}

/// The concurrency child: races for the shared tasks, then creates and completes its own.
#[test]
#[ignore = "child process of two_processes_mutating_concurrently_stay_consistent"]
fn concurrent_child() {
    let mode = std::env::var(CHILD_ENV).unwrap_or_default();
    let rest = mode.strip_prefix("concurrent:").unwrap_or_default();
    let mut parts = rest.splitn(3, ';');
    let (Some(dir), Some(worker), Some(shared)) = (parts.next(), parts.next(), parts.next()) else {
        panic!(
            "run only as a child process of two_processes_mutating_concurrently_stay_consistent"
        );
    };
    let store = EmbeddedStore::open(dir, Some(test_key())).unwrap();
    begin_acks();
    // Both workers start together: each says it is ready, then waits for the parent's go-file.
    ack("ready", &TaskId::parse("start").unwrap());
    let go = Path::new(dir).join("go");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !go.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no go-file within 60 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let claim = ClaimRequest {
        claimer: Some(worker.to_owned()),
        ..ClaimRequest::default()
    };
    let mut shared: Vec<TaskId> = shared
        .split(',')
        .map(|id| TaskId::parse(id).unwrap())
        .collect();
    // The second worker walks the tasks from the other end, so the two meet in the middle
    // whatever their relative speed: each wins the tasks it reaches first and loses the rest.
    if worker.ends_with("-b") {
        shared.reverse();
    }
    for id in shared {
        match store.claim_task(&id, &claim) {
            Ok(_) => ack("won", &id),
            Err(Error::NotClaimable { .. }) => ack("lost", &id),
            Err(other) => panic!("unexpected claim error: {other}"),
        }
        let own = store.create_task(request(worker)).unwrap();
        store.complete_task(&own.id, "mine").unwrap();
        ack("made", &own.id);
    }
}

#[test]
fn two_processes_mutating_concurrently_stay_consistent() {
    const SHARED: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    let shared: Vec<TaskId> = (0..SHARED)
        .map(|n| {
            store
                .create_task(request(&format!("shared {n}")))
                .unwrap()
                .id
        })
        .collect();
    let list = shared
        .iter()
        .map(TaskId::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut children: Vec<(String, Child)> = ["worker-a", "worker-b"]
        .iter()
        .map(|worker| {
            let mode = format!("concurrent:{};{worker};{list}", dir.path().display());
            (
                (*worker).to_owned(),
                spawn_child("processes::concurrent_child", &mode),
            )
        })
        .collect();
    let receivers: Vec<_> = children
        .iter_mut()
        .map(|(_, child)| read_acks(child))
        .collect();
    let ready = receivers.iter().all(|r| {
        r.recv_timeout(Duration::from_secs(60))
            .is_ok_and(|(kind, _)| kind == "ready")
    });
    if !ready {
        for (_, child) in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("a worker never became ready");
    }
    std::fs::write(dir.path().join("go"), b"").unwrap();
    let mut outcomes: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for ((worker, child), receiver) in children.iter_mut().zip(receivers) {
        let status = child.wait().unwrap();
        assert!(status.success(), "{worker} failed: {status}");
        outcomes.insert(worker.clone(), receiver.iter().collect());
    }

    // The race happened: each worker won some shared tasks and lost others.
    for (worker, acks) in &outcomes {
        let count = |kind: &str| acks.iter().filter(|(k, _)| k == kind).count();
        assert!(
            count("won") >= 1 && count("lost") >= 1,
            "{worker} won {} and lost {}: the workers did not race",
            count("won"),
            count("lost")
        );
    }

    // Every shared task was won exactly once, by the worker the store names.
    let mut winners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut made = Vec::new();
    for (worker, acks) in &outcomes {
        for (kind, id) in acks {
            match kind.as_str() {
                "won" => winners.entry(id.clone()).or_default().push(worker.clone()),
                "lost" => {}
                "made" => made.push(id.clone()),
                other => panic!("unknown acknowledgement {other}"),
            }
        }
    }
    for id in &shared {
        if !winners.contains_key(id.as_str()) {
            let task = store.get_task(id).unwrap();
            panic!("nobody won {id}: {task:?}\n{outcomes:?}");
        }
    }
    assert_eq!(winners.len(), SHARED);
    for id in &shared {
        let won_by = &winners[id.as_str()];
        assert_eq!(won_by.len(), 1, "{id} claimed by {won_by:?}");
        let task = store.get_task(id).unwrap();
        assert_eq!(task.status, TaskStatus::Claimed);
        assert_eq!(task.claimed_by.as_deref(), Some(won_by[0].as_str()));
        assert_eq!(task.version, 2);
    }
    assert_eq!(made.len(), 2 * SHARED);
    for id in &made {
        let task = store.get_task(&TaskId::parse(id).unwrap()).unwrap();
        assert_eq!(task.status, TaskStatus::Done);
    }
    let all = store.list_tasks(&ListQuery::all()).unwrap().tasks;
    assert_eq!(all.len(), 3 * SHARED);
    // A fresh reader folds the same state, the log has no tear, the chain verifies cleanly.
    let fresh = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    assert_eq!(fresh.list_tasks(&ListQuery::all()).unwrap().tasks, all);
    assert_eq!(fresh.torn_tails(), []);
    let report = audit::verify(&dir.path().join(".sdd").join("audit"), &test_key());
    assert!(report.ok(), "{:?}", report.verify_messages());
    let summary = store.status_summary().unwrap();
    assert_eq!(summary.claimed, SHARED as u64);
    assert_eq!(summary.done, 2 * SHARED as u64);
    // One task.created per task and one claim receipt per granted claim (completions auto-claim
    // without a receipt, as in the reference): no evidence lost or duplicated by the race.
    assert_eq!(report.entries, (3 * SHARED + SHARED) as u64);
    // The workers' own tasks were created interleaved on the one chain.
    let maker: BTreeMap<&str, &str> = outcomes
        .iter()
        .flat_map(|(worker, acks)| {
            acks.iter()
                .filter(|(kind, _)| kind == "made")
                .map(move |(_, id)| (id.as_str(), worker.as_str()))
        })
        .collect();
    let key = test_key();
    let mut walk = audit::verified_records(&dir.path().join(".sdd").join("audit"), &key);
    let order: Vec<&str> = walk
        .by_ref()
        .filter(|r| r.event_type == "task.created")
        .filter_map(|r| maker.get(r.resource_id.as_str()).copied())
        .collect();
    let switches = order.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        switches >= 2,
        "the workers' writes never interleaved: {order:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// compaction under SIGKILL and beside another process's appends
// ---------------------------------------------------------------------------------------------

/// The compaction children: `compact:<dir>` creates a task, then compacts, forever, and
/// acknowledges each; `append:<dir>` creates and completes `APPENDS` tasks, acknowledging each.
#[test]
#[ignore = "child process of the compaction tests"]
fn compaction_child() {
    const APPENDS: usize = 60;
    let mode = std::env::var(CHILD_ENV).unwrap_or_default();
    let (kind, dir) = mode
        .split_once(':')
        .expect("run only as a child process of the compaction tests");
    let store = EmbeddedStore::open(dir, Some(test_key())).unwrap();
    begin_acks();
    ack("ready", &TaskId::parse("start").unwrap());
    match kind {
        "compact" => loop {
            let task = store.create_task(request("before compaction")).unwrap();
            ack("create", &task.id);
            store.compact().unwrap();
            ack("compacted", &task.id);
        },
        "append" => {
            for n in 0..APPENDS {
                let task = store.create_task(request(&format!("append {n}"))).unwrap();
                store.complete_task(&task.id, "appended").unwrap();
                ack("done", &task.id);
            }
        }
        other => panic!("unknown compaction child {other}"),
    }
}

/// 40 children killed with SIGKILL while they alternate appends and compactions: after each,
/// the store opens, every acknowledged task is there, no temporary file of a compaction is
/// mistaken for the log, and the audit chain holds no hard error.
#[test]
fn sigkill_during_compaction_loses_no_acknowledged_task() {
    const KILLS: usize = 40;
    let random = SystemRandom::new();
    let dir = tempfile::tempdir().unwrap();
    let mut acked: Vec<String> = Vec::new();
    let mut compactions = 0;
    for _ in 0..KILLS {
        let mut child = spawn_child(
            "processes::compaction_child",
            &format!("compact:{}", dir.path().display()),
        );
        let receiver = read_acks(&mut child);
        let ready = receiver.recv_timeout(Duration::from_secs(30));
        if ready.is_ok() {
            std::thread::sleep(Duration::from_micros(random_below(&random, 60_000)));
        }
        child.kill().unwrap();
        assert!(ready.is_ok(), "the child never became ready");
        child.wait().unwrap();
        for (kind, id) in receiver.iter() {
            match kind.as_str() {
                "create" => acked.push(id),
                "compacted" => compactions += 1,
                other => panic!("unknown acknowledgement {other}"),
            }
        }
        let store = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
        for id in &acked {
            let task = store
                .get_task(&TaskId::parse(id).unwrap())
                .unwrap_or_else(|e| panic!("acknowledged task {id} lost: {e}"));
            assert_eq!(task.status, TaskStatus::Open);
        }
        let report = audit::verify(&dir.path().join(".sdd").join("audit"), &test_key());
        assert!(report.errors.is_empty(), "{:?}", report.verify_messages());
    }
    assert!(compactions > 0, "no compaction completed before a kill");
    let store = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    let listed = store.list_tasks(&ListQuery::all()).unwrap().tasks;
    // A task created but killed before its acknowledgement may be there too; none is lost.
    assert!(listed.len() >= acked.len());
    // A later compaction of the survivor state still works and keeps every task.
    assert_eq!(store.compact().unwrap().tasks, listed.len());
}

/// One process appends and completes tasks while this one compacts the log again and again:
/// every acknowledged change survives, a fresh reader folds the same state, and at least one
/// compaction ran while the other process was part-way through its appends.
#[test]
fn compaction_while_another_process_appends_keeps_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    for n in 0..20 {
        let task = store.create_task(request(&format!("seed {n}"))).unwrap();
        store.complete_task(&task.id, "seeded").unwrap();
    }
    let mut child = spawn_child(
        "processes::compaction_child",
        &format!("append:{}", dir.path().display()),
    );
    let receiver = read_acks(&mut child);
    let ready = receiver.recv_timeout(Duration::from_secs(30));
    if ready.is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the appending child never became ready");
    }
    let mut done: Vec<String> = Vec::new();
    let mut compacted_mid_way = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the child did not finish"
        );
        done.extend(receiver.try_iter().map(|(_, id)| id));
        store.compact().unwrap();
        if !done.is_empty() && child.try_wait().unwrap().is_none() {
            compacted_mid_way += 1;
        }
    }
    assert!(child.wait().unwrap().success());
    done.extend(receiver.iter().map(|(_, id)| id));
    assert_eq!(done.len(), 60);
    assert!(
        compacted_mid_way > 0,
        "no compaction ran while the other process was appending"
    );
    let fresh = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    for id in &done {
        let task = fresh.get_task(&TaskId::parse(id).unwrap()).unwrap();
        assert_eq!(task.status, TaskStatus::Done, "{id}");
    }
    let all = fresh.list_tasks(&ListQuery::all()).unwrap().tasks;
    assert_eq!(all.len(), 80);
    assert_eq!(store.list_tasks(&ListQuery::all()).unwrap().tasks, all);
    assert_eq!(fresh.torn_tails(), []);
    let report = audit::verify(&dir.path().join(".sdd").join("audit"), &test_key());
    assert!(report.ok(), "{:?}", report.verify_messages());
}

// Kill points (issue 14): a child stops a mutation at a named point inside it and dies there by
// SIGKILL; the next open must finish the work from the task log.

const KILL_POINTS: [(&str, CrashPoint); 3] = [
    ("after_log_append", CrashPoint::AfterLogAppend),
    ("after_backlog", CrashPoint::AfterBacklog),
    ("after_journal_rows", CrashPoint::AfterJournalRows),
];

/// The kill-point child: `killpoint:<point>:<op>:<id>:<dir>`. It runs `op` (`claim` of task
/// `id`, or `approve` of plan `id`) stopped at `point`, acknowledges, and SIGKILLs itself, so
/// the files are exactly those of a process that died at that point.
#[test]
#[ignore = "child process of owed_evidence_survives_sigkill_at_each_kill_point"]
fn kill_point_child() {
    let mode = std::env::var(CHILD_ENV).unwrap_or_default();
    let Some(rest) = mode.strip_prefix("killpoint:") else {
        panic!("run only as a child process of owed_evidence_survives_sigkill_at_each_kill_point");
    };
    let mut parts = rest.splitn(4, ':');
    let (Some(point), Some(op), Some(id), Some(dir)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        panic!("malformed kill-point mode {mode:?}");
    };
    let point = KILL_POINTS
        .iter()
        .find(|(name, _)| *name == point)
        .unwrap()
        .1;
    let store = EmbeddedStore::open(dir, Some(test_key())).unwrap();
    begin_acks();
    store.set_crash_point(Some(point));
    let stopped = match op {
        "claim" => {
            let claim = ClaimRequest {
                claimer: Some("worker-kill".into()),
                ..ClaimRequest::default()
            };
            store
                .claim_task(&TaskId::parse(id).unwrap(), &claim)
                .is_err()
        }
        _ => store.approve_plan(id, "approved, then killed").is_err(),
    };
    assert!(stopped, "the crash point was not reached");
    ack("stopped", &TaskId::parse(id).unwrap());
    let _ = Command::new("kill")
        .args(["-9", &std::process::id().to_string()])
        .status();
    // The signal is on its way; never return (a return would look like a clean exit).
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Runs one kill-point child to its death; panics if it did not die by SIGKILL at the point.
fn die_at(dir: &Path, point: &str, op: &str, id: &str) {
    let mode = format!("killpoint:{point}:{op}:{id}:{}", dir.display());
    let mut child = spawn_child("processes::kill_point_child", &mode);
    let receiver = read_acks(&mut child);
    let stopped = receiver.recv_timeout(Duration::from_secs(60));
    if stopped.is_err() {
        // Killed before any assertion, so a failing run leaves no child behind.
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    assert!(
        stopped.is_ok(),
        "{point} {op}: the child never reached the point"
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{point} {op}: {status}");
}

/// A claim whose process is SIGKILLed at each kill point: the next open writes the missing
/// `task_claimed` row and claim receipt exactly once, the backlog names the claimer, and the
/// task log verifies against its evidence. A plan approval killed at each point is finished
/// too, so a later rejection is refused.
#[test]
fn owed_evidence_survives_sigkill_at_each_kill_point() {
    for (point, _) in KILL_POINTS {
        let dir = tempfile::tempdir().unwrap();
        let (task, plan) = {
            let store = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
            let task = store.create_task(request("killed mid-claim")).unwrap();
            let plan = store
                .create_plan("killed mid-approval", vec![request("planned")])
                .unwrap();
            (task, plan)
        };
        die_at(dir.path(), point, "claim", task.id.as_str());
        die_at(dir.path(), point, "approve", plan.id());

        let store = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
        assert_eq!(store.evidence_failures(), [], "{point}");
        let claimed = store.get_task(&task.id).unwrap();
        assert_eq!(claimed.status, TaskStatus::Claimed, "{point}");
        let rows = load_run_journal(dir.path(), &task_run_id(task.id.as_str()))
            .unwrap()
            .rows;
        let claimed_rows = rows
            .iter()
            .filter(|r| r.get("event").and_then(|e| e.as_str()) == Some("task_claimed"))
            .count();
        assert_eq!(claimed_rows, 1, "{point}");
        let audit_dir = dir.path().join(".sdd").join("audit");
        let receipts = audit::verified_records(&audit_dir, &test_key())
            .filter(|r| r.event_type == "task.claim_receipt" && r.resource_id == task.id.as_str())
            .count();
        assert_eq!(receipts, 1, "{point}");
        // The backlog is brought in step when a reader needs it (here, explicitly).
        store.sync_backlog().unwrap();
        let backlog = std::fs::read_to_string(
            dir.path()
                .join(".sdd/runtime")
                .join(bernstein_tasks::embedded::BACKLOG_FILE),
        )
        .unwrap();
        assert!(backlog.contains("worker-kill"), "{point}: {backlog}");
        assert!(matches!(
            store.reject_plan(plan.id(), "too late"),
            Err(Error::PlanAlreadyDecided { .. })
        ));
        let chain = bernstein_journal::audit::AuditChain::open(&audit_dir, test_key());
        assert_eq!(
            bernstein_tasks::embedded::verify_task_log(dir.path(), Some(&chain)).unwrap(),
            [],
            "{point}"
        );
        let report = audit::verify(&audit_dir, &test_key());
        assert!(report.ok(), "{point}: {:?}", report.verify_messages());
    }
}
