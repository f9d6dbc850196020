//! Several OS processes writing one evidence store at once: the start barrier every
//! cross-process test uses, the check that the writers really interleaved, and the concurrency
//! tests of backlog claim receipts, artifact spines and the lineage log.
//!
//! A race test proves nothing when its writers run one after the other, which they do when one
//! child finishes before the next has started. So each child announces itself with a ready file
//! and waits for a go-file the parent creates once every child is ready, and each test then
//! checks that the records of different writers interleave.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bernstein_journal::artifacts::{
    ArtifactContent, LineageSpine, PostRequest, TraceContext, post_run_artifact,
    verify_run_artifacts,
};
use bernstein_journal::audit::{self, AuditChain};
use bernstein_journal::claim::{
    BacklogEntry, ClaimFilter, ClaimRequest, ClaimTime, backlog_path, claim_in_project,
    read_backlog, write_backlog,
};
use bernstein_journal::key::AuditKey;
use bernstein_journal::lineage_log::{LineageLog, verify_lineage};
use bernstein_journal::run_journal::task_run_id;
use bernstein_protocol::pyjson::Value;

const GO_VAR: &str = "BERNSTEIN_JOURNAL_TEST_GO";
const MODE_VAR: &str = "BERNSTEIN_JOURNAL_TEST_RACE_MODE";
const ROOT_VAR: &str = "BERNSTEIN_JOURNAL_TEST_RACE_ROOT";
const ID_VAR: &str = "BERNSTEIN_JOURNAL_TEST_RACE_ID";
const WRITERS: usize = 3;
const POSTS_PER_WRITER: usize = 8;
const LINEAGE_PER_WRITER: usize = 12;
const BACKLOG_ROWS: usize = 36;
const TASK: &str = "race-1";
const SHARED_ARTEFACT: &str = "src/shared.txt";

/// Child side of the barrier: announces this process with a ready file next to the go-file,
/// then waits (at most a minute) for the parent to create the go-file.
pub(crate) fn wait_for_go() {
    let go = PathBuf::from(std::env::var(GO_VAR).expect("a race child needs its go-file"));
    let ready = go.with_extension(format!("ready.{}", std::process::id()));
    std::fs::write(ready, b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !go.exists() {
        assert!(Instant::now() < deadline, "no go-file within 60 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Parent side: spawns every command with the go-file path in `scratch`, waits until all have
/// announced themselves, then lets them go at once.
pub(crate) fn start_together(scratch: &Path, commands: Vec<Command>) -> Vec<Child> {
    let go = scratch.join("go");
    let mut children: Vec<Child> = commands
        .into_iter()
        .map(|mut command| command.env(GO_VAR, &go).spawn().unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = std::fs::read_dir(scratch)
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with("go.ready.")
            })
            .count();
        if ready == children.len() {
            break;
        }
        let exited = children.iter_mut().any(|c| c.try_wait().unwrap().is_some());
        if exited || Instant::now() > deadline {
            for child in &mut children {
                let _ = child.kill();
                let _ = child.wait();
            }
            panic!("only {ready} of {} children became ready", children.len());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    std::fs::write(&go, b"").unwrap();
    children
}

/// Asserts that the writers' records, in store order, interleave: some writer's records are
/// split by another's, which cannot happen when the writers ran one after the other.
pub(crate) fn assert_interleaved(writers: &[String]) {
    let distinct: BTreeSet<&String> = writers.iter().collect();
    let runs = 1 + writers.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        distinct.len() > 1 && runs > distinct.len(),
        "the writers never interleaved ({runs} runs of {} writers): {writers:?}",
        distinct.len()
    );
}

fn audit_key() -> AuditKey {
    AuditKey::from_master_bytes(
        b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".to_vec(),
    )
}

/// A command that re-runs this binary as the race child in `mode`.
fn child_command(mode: &str, root: &Path, id: usize) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "races::race_child",
            "--exact",
            "--ignored",
            "--test-threads=1",
        ])
        .env(MODE_VAR, mode)
        .env(ROOT_VAR, root)
        .env(ID_VAR, id.to_string())
        .stdout(Stdio::null());
    command
}

fn run_children(scratch: &Path, mode: &str, root: &Path) {
    let commands = (0..WRITERS)
        .map(|id| child_command(mode, root, id))
        .collect();
    for mut child in start_together(scratch, commands) {
        assert!(child.wait().unwrap().success(), "a {mode} child failed");
    }
}

/// The child processes of the tests below, chosen by `BERNSTEIN_JOURNAL_TEST_RACE_MODE`.
#[test]
#[ignore = "child process of the races:: tests"]
fn race_child() {
    let mode = std::env::var(MODE_VAR).expect("run only as a child of a races:: test");
    let root = PathBuf::from(std::env::var(ROOT_VAR).unwrap());
    let id: usize = std::env::var(ID_VAR).unwrap().parse().unwrap();
    let writer = format!("w{id}");
    wait_for_go();
    match mode.as_str() {
        // Each worker takes its share and no more, so a worker the scheduler starts late
        // still finds its rows: the test asserts every worker's share, not who was fastest.
        "backlog" => {
            for n in 0..BACKLOG_ROWS / WRITERS {
                let request = ClaimRequest::new(writer.as_str(), ClaimFilter::default());
                let outcome =
                    claim_in_project(&root, audit_key(), &request, ClaimTime::now()).unwrap();
                assert!(outcome.granted(), "{writer}'s claim {n} was refused");
            }
        }
        "spine" => {
            let chain = AuditChain::open(root.join(".sdd/audit"), audit_key());
            for n in 0..POSTS_PER_WRITER {
                for key in [writer.as_str(), "shared"] {
                    let content = ArtifactContent::report(&format!("{writer} {n}")).unwrap();
                    let request = PostRequest {
                        task_id: TASK,
                        key,
                        content: &content,
                        holder: Some("worker"),
                        poster: "worker",
                        trace: TraceContext::default(),
                        spine_timestamp: None,
                        audit_timestamp: None,
                    };
                    post_run_artifact(&root, &chain, &request).unwrap();
                }
            }
        }
        "lineage" => {
            let log = LineageLog::for_project(&root);
            for n in 0..LINEAGE_PER_WRITER {
                let entry = crate::lineage_log::write(
                    SHARED_ARTEFACT,
                    format!("{writer} {n}").as_bytes(),
                    &format!("{writer}-{n}"),
                    "span",
                    n as u64 + 1,
                );
                log.append(
                    &entry,
                    &crate::lineage_log::operator_key(),
                    &crate::lineage_log::signer(),
                )
                .unwrap();
            }
        }
        other => panic!("unknown race mode {other}"),
    }
}

/// Three processes drain one backlog through `claim_in_project`, each claiming its third: every
/// row is claimed exactly once, by the worker its receipt event names, no claim is refused
/// while rows remain, and the grants interleave on the audit chain, which verifies.
#[test]
fn concurrent_backlog_claims_grant_each_row_once() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("project");
    let rows: Vec<BacklogEntry> = (0..BACKLOG_ROWS)
        .map(|n| BacklogEntry::new(format!("t-{n}")))
        .collect();
    write_backlog(&backlog_path(&root), &rows).unwrap();
    run_children(scratch.path(), "backlog", &root);
    let drained = ClaimRequest::new("late-worker", ClaimFilter::default());
    let outcome = claim_in_project(&root, audit_key(), &drained, ClaimTime::now()).unwrap();
    assert!(
        !outcome.granted(),
        "a row was left after every share was claimed"
    );

    let after = read_backlog(&backlog_path(&root)).unwrap();
    assert_eq!(after.len(), BACKLOG_ROWS);
    let audit_dir = root.join(".sdd/audit");
    let key = audit_key();
    let mut walk = audit::verified_records(&audit_dir, &key);
    let records: Vec<_> = walk.by_ref().collect();
    let report = walk.finish();
    assert!(report.ok(), "{:?}", report.verify_messages());
    assert_eq!(records.len(), BACKLOG_ROWS, "one receipt event per row");
    let mut claimed_by = BTreeMap::new();
    let mut order = Vec::new();
    for record in &records {
        let by = record.details.get("claimed_by").and_then(Value::as_str);
        let task = record.details.get("task_id").and_then(Value::as_str);
        let (Some(by), Some(task)) = (by, task) else {
            panic!("not a claim event: {record:?}");
        };
        assert!(
            claimed_by.insert(task.to_owned(), by.to_owned()).is_none(),
            "{task} claimed twice"
        );
        order.push(by.to_owned());
    }
    for row in &after {
        assert_eq!(row.status, "in_progress", "{}", row.id);
        assert_eq!(row.attempts, 1, "{}", row.id);
        assert_eq!(row.claimer.as_ref(), claimed_by.get(&row.id), "{}", row.id);
    }
    let mut per_worker: BTreeMap<&String, usize> = BTreeMap::new();
    for by in claimed_by.values() {
        *per_worker.entry(by).or_default() += 1;
    }
    let shares: Vec<usize> = per_worker.values().copied().collect();
    assert_eq!(
        shares,
        vec![BACKLOG_ROWS / WRITERS; WRITERS],
        "every worker was granted its share"
    );
    assert_interleaved(&order);
}

/// Three processes post artifacts to one task's spine: each to its own key and all to one
/// shared key. The spine and the journal verify, the shared key's versions are 1..=n with no
/// gap or repeat, and the writers' entries interleave.
#[test]
fn concurrent_artifact_posts_extend_one_spine() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("project");
    std::fs::create_dir_all(root.join(".sdd")).unwrap();
    run_children(scratch.path(), "spine", &root);

    let report = verify_run_artifacts(&root, TASK, &audit_key()).unwrap();
    assert!(report.ok(), "{report:#?}");
    let total = WRITERS * POSTS_PER_WRITER * 2;
    assert_eq!(report.results.len(), total);
    let spine = LineageSpine::open(&root, &task_run_id(TASK), &audit_key()).unwrap();
    assert!(spine.verify().unwrap().ok());
    let entries = spine.entries().unwrap();
    assert_eq!(entries.len(), total);
    let mut shared_versions = Vec::new();
    let mut writers = Vec::new();
    for entry in &entries {
        // `step_id` is `artifact:<key>:v<version>`.
        let mut parts = entry.step_id.split(':').skip(1);
        let (key, version) = (parts.next().unwrap(), parts.next().unwrap());
        if key == "shared" {
            shared_versions.push(version.trim_start_matches('v').parse::<usize>().unwrap());
        } else {
            writers.push(key.to_owned());
        }
    }
    let expected: Vec<usize> = (1..=WRITERS * POSTS_PER_WRITER).collect();
    assert_eq!(shared_versions, expected);
    assert_interleaved(&writers);
    assert!(audit::verify(&root.join(".sdd/audit"), &audit_key()).ok());
}

/// Three processes seal writes of one artefact into the lineage log: every write is there,
/// each names the previous one as its parent (one linear history, no fork from a lost
/// update), the log verifies, and the writers interleave.
#[test]
fn concurrent_lineage_writes_stay_one_history() {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("project");
    std::fs::create_dir_all(root.join(".sdd")).unwrap();
    run_children(scratch.path(), "lineage", &root);

    let entries = LineageLog::for_project(&root).read_entries().unwrap();
    assert_eq!(entries.len(), WRITERS * LINEAGE_PER_WRITER);
    let verification = verify_lineage(
        &root,
        SHARED_ARTEFACT,
        &crate::lineage_log::operator_key(),
        &crate::lineage_log::cards(),
    )
    .unwrap();
    assert!(verification.ok, "{verification:?}");
    assert_eq!(verification.artefact_entries.len(), entries.len());
    let mut previous: Option<&String> = None;
    let mut writers = Vec::new();
    for (entry, hash) in entries.iter().zip(&verification.artefact_entries) {
        let parents = entry.get("parent_hashes").unwrap();
        let expected = previous.map_or(Value::Array(vec![]), |p| {
            Value::Array(vec![Value::from(p.as_str())])
        });
        assert_eq!(parents, &expected);
        previous = Some(hash);
        let call = entry.get("tool_call_id").and_then(Value::as_str).unwrap();
        writers.push(call.split('-').next().unwrap().to_owned());
    }
    assert_interleaved(&writers);
}
