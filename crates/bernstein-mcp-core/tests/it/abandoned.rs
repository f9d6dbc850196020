//! A server killed after its anchoring row and before the row's audit entry: the call never
//! ran, and the next call of any server records the index as abandoned, so the order has no
//! gap and the abandoned call is reported as such.
//!
//! The kill is real: a child process (this test binary, running the ignored helper test)
//! anchors a call while the parent holds the audit chain's lock, so the child blocks after the
//! row's fsync, in the audit append; the parent kills it there.

use std::path::Path;
use std::time::{Duration, Instant};

use bernstein_journal::audit::{self, LOCK_FILE_NAME};
use bernstein_journal::run_journal::{load_run_journal, verify_run_journal};
use bernstein_mcp_core::{
    ABANDONED_CALL_EVENT, Anchor, DEFAULT_ANCHOR_RUN_ID, reconstruct_call_order,
};
use bernstein_protocol::pyjson::Value as PyValue;
use serde_json::json;

use crate::support::key;

const CHILD_ROOT_VAR: &str = "BERNSTEIN_ANCHOR_KILL_CHILD_ROOT";

fn params(n: u64) -> serde_json::Value {
    json!({"name": "bernstein_health", "arguments": {"n": n}})
}

/// Child-process half of `a_call_killed_between_row_and_audit_entry_is_recorded_abandoned`;
/// does nothing unless that test launched it.
#[test]
#[ignore = "helper: run as a child process by a_call_killed_between_row_and_audit_entry_is_recorded_abandoned"]
fn anchor_then_get_killed_child() {
    let Ok(root) = std::env::var(CHILD_ROOT_VAR) else {
        return;
    };
    let anchor = Anchor::open(Path::new(&root), DEFAULT_ANCHOR_RUN_ID, key()).unwrap();
    // Blocks in the audit append (the parent holds the chain lock) until the parent kills us.
    let _ = anchor.anchor("tools/call", Some(&params(1)));
}

fn journal_rows(root: &Path) -> usize {
    load_run_journal(root, DEFAULT_ANCHOR_RUN_ID)
        .map(|journal| journal.rows.len())
        .unwrap_or(0)
}

fn abandoned_entries(audit_dir: &Path) -> usize {
    let key = key();
    let mut records = audit::verified_records(audit_dir, &key);
    let count = records
        .by_ref()
        .filter(|r| r.event_type == ABANDONED_CALL_EVENT)
        .count();
    assert!(records.finish().ok());
    count
}

#[test]
fn a_call_killed_between_row_and_audit_entry_is_recorded_abandoned() {
    let project = tempfile::tempdir().unwrap();
    let root = project.path();
    let audit_dir = root.join(".sdd/audit");
    let anchor = Anchor::open(root, DEFAULT_ANCHOR_RUN_ID, key()).unwrap();
    assert_eq!(
        anchor
            .anchor("tools/call", Some(&params(0)))
            .unwrap()
            .call_index,
        0
    );

    // Hold the chain lock, so the child's audit append waits after its row is fsynced.
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(audit_dir.join(LOCK_FILE_NAME))
        .unwrap();
    lock.lock().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "abandoned::anchor_then_get_killed_child",
            "--ignored",
            "--test-threads=1",
        ])
        .env(CHILD_ROOT_VAR, root)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while journal_rows(root) < 2 {
        assert!(
            Instant::now() < deadline,
            "the child never wrote its anchoring row"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child exited before it was killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    lock.unlock().unwrap();
    drop(lock);

    // The killed call's row stands without an audit entry.
    assert_eq!(journal_rows(root), 2);
    let before = reconstruct_call_order(&audit_dir, &key(), DEFAULT_ANCHOR_RUN_ID);
    assert_eq!(before.calls.len(), 1);
    assert!(before.abandoned.is_empty());

    // The next call, from the server that anchored call 0, settles the row: index 1 is
    // recorded as abandoned and this call gets index 2.
    let next = anchor.anchor("tools/call", Some(&params(2))).unwrap();
    assert_eq!(next.call_index, 2);
    // Another process (a fresh anchor) settles nothing twice.
    let other = Anchor::open(root, DEFAULT_ANCHOR_RUN_ID, key()).unwrap();
    assert_eq!(
        other
            .anchor("tools/call", Some(&params(3)))
            .unwrap()
            .call_index,
        3
    );

    let order = reconstruct_call_order(&audit_dir, &key(), DEFAULT_ANCHOR_RUN_ID);
    assert!(order.problems.is_empty(), "{:?}", order.problems);
    assert!(order.ok());
    let indices: Vec<u64> = order.calls.iter().map(|c| c.call_index).collect();
    assert_eq!(indices, vec![0, 2, 3]);
    let abandoned: Vec<u64> = order.abandoned.iter().map(|c| c.call_index).collect();
    assert_eq!(abandoned, vec![1]);
    assert_eq!(abandoned_entries(&audit_dir), 1);

    // The abandoned entry names the killed call's row: its span id and its event hash.
    let journal = load_run_journal(root, DEFAULT_ANCHOR_RUN_ID).unwrap();
    let row = &journal.rows[1];
    let field = |key: &str| row.get(key).and_then(PyValue::as_str).unwrap().to_owned();
    assert_eq!(order.abandoned[0].span_id, field("span_id"));
    assert_eq!(order.abandoned[0].journal_head, field("event_hash"));
    assert_eq!(order.abandoned[0].method, "tools/call");
    assert!(
        verify_run_journal(root, DEFAULT_ANCHOR_RUN_ID)
            .unwrap()
            .ok()
    );
}

/// The abandoned row is the journal's last call row, but other events follow it (a host run
/// anchoring into a journal other writers append to): it is still found and settled once.
#[test]
fn an_unanswered_row_followed_by_other_events_is_still_settled() {
    let project = tempfile::tempdir().unwrap();
    let root = project.path();
    let audit_dir = root.join(".sdd/audit");
    let anchor = Anchor::open(root, "host-run", key()).unwrap();
    anchor.anchor("tools/call", Some(&params(0))).unwrap();

    // A row appended the way a killed anchor leaves it: no audit entry follows.
    let mut writer = bernstein_journal::run_journal::JournalWriter::open(
        root,
        "host-run",
        bernstein_journal::run_journal::HashProfile::PyJsonV1,
    )
    .unwrap();
    let orphan = bernstein_protocol::pyjson::Object::new()
        .with("method", "tools/call")
        .with("call_index", 1u64)
        .with("trace_id", "0123456789abcdef0123456789abcdef")
        .with("span_id", "0123456789abcdef");
    writer.append("mcp.stateless_call", &orphan).unwrap();
    writer
        .append(
            "run_note",
            &bernstein_protocol::pyjson::Object::new().with("note", "x"),
        )
        .unwrap();

    assert_eq!(
        anchor
            .anchor("tools/call", Some(&params(2)))
            .unwrap()
            .call_index,
        2
    );
    assert_eq!(
        anchor
            .anchor("tools/call", Some(&params(3)))
            .unwrap()
            .call_index,
        3
    );
    let order = reconstruct_call_order(&audit_dir, &key(), "host-run");
    assert!(order.ok(), "{:?}", order.problems);
    let abandoned: Vec<(u64, &str)> = order
        .abandoned
        .iter()
        .map(|c| (c.call_index, c.span_id.as_str()))
        .collect();
    assert_eq!(abandoned, vec![(1, "0123456789abcdef")]);
    assert_eq!(abandoned_entries(&audit_dir), 1);
}
