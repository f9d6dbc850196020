//! A run handle before and after its terminal seal, in deterministic bytes, and the verifier's
//! findings on a busy chain, an edited seal and a journal row removed after sealing.
//!
//! The handle's `chainHead` departs from the reference's bytes: the reference embeds the last
//! line of the newest segment (reading 2); this server embeds the newest entry naming the run,
//! so the snapshots below pin a `chainHead` that is the run's `task.created` entry and then its
//! `mcp.task_handle` seal, although anchors of other calls come later in the chain.

use bernstein_journal::audit::{AuditChain, AuditEvent, Timestamp};
use bernstein_journal::handle::{
    HandleChainReport, PresentedHandle, RunHandle, SealOutcome, TaskStatus, append_terminal_row,
    lifecycle_payload, poll_run_handle, poll_run_handle_brief, seal_event, seal_terminal_run_at,
    terminal_event, verify_handle_chain,
};
use bernstein_journal::key::AuditKey;
use bernstein_journal::run_journal::{HashProfile, JournalWriter, load_journal};
use bernstein_protocol::pyjson::{Dialect, Object, Value};

/// Recorded in the header of every snapshot that pins handle bytes.
const DEPARTURE: &str = "chainHead departs from the reference's bytes: the reference embeds the \
last hmac-bearing line of the newest audit segment (usually another call's anchor); this server \
embeds the hmac of the newest entry naming the run (details.run_id, or task_run_id(details.task_id)), \
and after a terminal transition that entry is the run's mcp.task_handle seal. Reason: polls of an \
unchanged run must be byte-identical under call anchoring (docs/ARCHITECTURE.md, Run handles).";

fn key() -> AuditKey {
    AuditKey::from_master_bytes(b"0123456789abcdef".repeat(4))
}

fn at(n: i64) -> Timestamp {
    Timestamp::from_unix_micros(1_796_003_208_000_000 + n * 1_000_000).unwrap()
}

fn anchor(chain: &AuditChain, index: i64, n: i64) {
    chain
        .append_at(
            &AuditEvent::new(
                "mcp.stateless_call",
                "mcp_stateless_core",
                "mcp_stateless_call",
                format!("span{index}"),
                Object::new()
                    .with("run_id", "mcp-calls")
                    .with("method", "tools/call")
                    .with("call_index", index),
            ),
            at(n),
        )
        .unwrap();
}

struct Fixture {
    dir: tempfile::TempDir,
    chain: AuditChain,
}

impl Fixture {
    fn root(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn poll(&self, id: &str) -> RunHandle {
        poll_run_handle(self.root(), id, None).unwrap().0
    }

    fn verify(&self, handle: &RunHandle) -> HandleChainReport {
        let presented =
            PresentedHandle::from_wire(&Value::Object(handle.to_wire_object())).unwrap();
        verify_handle_chain(self.root(), &key(), &presented).unwrap()
    }
}

/// A run `task-t-42` created, claimed and (with `complete`) completed and sealed, with call
/// anchors of other calls between every step.
fn fixture(complete: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let chain = AuditChain::open(dir.path().join(".sdd/audit"), key());
    chain
        .append_at(
            &AuditEvent::new(
                "task.created",
                "task_server",
                "task",
                "t-42",
                Object::new().with("task_id", "t-42").with("title", "t"),
            ),
            at(1),
        )
        .unwrap();
    anchor(&chain, 0, 2);
    let mut tick = 1_796_003_208.0;
    let mut writer =
        JournalWriter::open_with_clock(dir.path(), "task-t-42", HashProfile::PyJsonV1, move || {
            tick += 0.5;
            tick
        })
        .unwrap();
    let row = |status: &str, version: i64| {
        Object::new()
            .with("task_id", "t-42")
            .with("status", status)
            .with("task_version", version)
    };
    writer.append("task_claimed", &row("claimed", 2)).unwrap();
    anchor(&chain, 1, 3);
    if complete {
        writer.append("task_completed", &row("done", 3)).unwrap();
        let sealed = seal_terminal_run_at(dir.path(), &chain, "t-42", Some(at(4))).unwrap();
        assert!(matches!(sealed, SealOutcome::Sealed(_)));
        anchor(&chain, 2, 5);
    }
    Fixture { dir, chain }
}

#[test]
fn a_handle_before_its_seal() {
    let fixture = fixture(false);
    let by_task = fixture.poll("t-42");
    assert_eq!(by_task, fixture.poll("task-t-42"));
    insta::with_settings!({description => DEPARTURE}, {
        insta::assert_snapshot!(by_task.render_run_status_body());
    });
    let report = fixture.verify(&by_task);
    assert!(report.verified(), "{:?}", report.problems);
    assert_eq!(report.chain_head_entry.unwrap().event_type, "task.created");
}

#[test]
fn a_handle_after_its_seal_verifies_after_unrelated_appends() {
    let fixture = fixture(true);
    let handle = fixture.poll("t-42");
    insta::with_settings!({description => DEPARTURE}, {
        insta::assert_snapshot!(handle.render_run_status_body());
    });
    let report = fixture.verify(&handle);
    assert!(report.verified(), "{:?}", report.problems);
    assert!(report.chain_head_entry.as_ref().unwrap().seal);
    assert_eq!(report.seals, 1);
    for n in 0..50 {
        anchor(&fixture.chain, 3 + n, 10 + n);
    }
    let later = fixture.verify(&handle);
    assert!(later.verified(), "{:?}", later.problems);
    assert!(!later.stale());
    assert_eq!(fixture.poll("task-t-42"), handle, "the poll holds still");
    // Sealing again is a no-op: the newest seal already binds this status and journal head.
    assert!(matches!(
        seal_terminal_run_at(fixture.root(), &fixture.chain, "t-42", Some(at(99))).unwrap(),
        SealOutcome::AlreadySealed { .. }
    ));
}

#[test]
fn an_edited_seal_is_reported_at_that_entry() {
    let fixture = fixture(true);
    let handle = fixture.poll("t-42");
    let segment = std::fs::read_dir(fixture.root().join(".sdd/audit"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let text = std::fs::read_to_string(&segment).unwrap();
    let (line_no, _) = text
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("mcp.task_handle"))
        .unwrap();
    let edited = text.replacen("\"status\": \"completed\"", "\"status\": \"failed\"", 1);
    assert_ne!(edited, text);
    std::fs::write(&segment, edited).unwrap();
    let report = fixture.verify(&handle);
    assert!(!report.verified());
    let name = segment.file_name().unwrap().to_str().unwrap();
    let at_entry = format!("{name}:{}:", line_no + 1);
    assert!(
        report.problems.iter().any(|p| p.starts_with(&at_entry)),
        "{at_entry} in {:?}",
        report.problems
    );
}

#[test]
fn a_journal_row_removed_after_sealing_is_named() {
    let fixture = fixture(true);
    let handle = fixture.poll("t-42");
    let journal = fixture.root().join(".sdd/runs/task-t-42/journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let first_row: String = text.lines().next().unwrap().to_owned() + "\n";
    std::fs::write(&journal, first_row).unwrap();
    let report = fixture.verify(&handle);
    assert!(!report.verified());
    assert_names_problem(
        &report,
        "status 'completed' does not match journal projection 'working'",
    );
    assert_names_problem(&report, "journal_head does not match");
    // The poll now projects the journal as it stands, whose head differs from the seal's.
    let now = fixture.poll("t-42");
    let again = fixture.verify(&now);
    assert_names_problem(&again, "seal status \"completed\" differs");
}

/// The brief poll an async worker answers in place projects the very handle of the full poll,
/// writes nothing, catches up on a few new entries itself, and declines (`None`) exactly when
/// the full poll must do more: build the chain's head index or catch it up by more than a
/// mebibyte, seal a terminal run its newest seal does not bind (by status or by journal head),
/// or parse a journal too large to keep parsed.
#[test]
fn a_brief_poll_is_the_full_poll_or_declines() {
    let brief = |fixture: &Fixture, may_seal: bool| {
        poll_run_handle_brief(fixture.root(), "t-42", may_seal)
            .unwrap()
            .map(|(handle, _)| handle)
    };
    for complete in [false, true] {
        let fixture = fixture(complete);
        // The process's first full poll of this chain builds its head index.
        let full = fixture.poll("t-42");
        let before = audit_bytes(&fixture);
        let answered = brief(&fixture, true);
        assert_eq!(
            audit_bytes(&fixture),
            before,
            "the brief poll wrote nothing"
        );
        assert_eq!(answered, Some(full), "complete: {complete}");
    }

    let unindexed = fixture(false);
    assert_eq!(
        brief(&unindexed, false),
        None,
        "a chain whose head index is not built yet declines"
    );
    let full = unindexed.poll("t-42");
    assert_eq!(brief(&unindexed, false), Some(full.clone()));
    // Another server's few calls since, far under the mebibyte, are caught up in place.
    for n in 0..3 {
        anchor(&unindexed.chain, 50 + n, 90 + n);
    }
    assert_eq!(
        brief(&unindexed, false),
        Some(full.clone()),
        "a small catch-up is answered briefly"
    );
    let note = "n".repeat(64 * 1024);
    for n in 0..17 {
        let event = AuditEvent::new(
            "mcp.stateless_call",
            "mcp_stateless_core",
            "mcp_stateless_call",
            format!("big{n}"),
            Object::new()
                .with("run_id", "mcp-calls")
                .with("note", note.as_str()),
        );
        unindexed.chain.append_at(&event, at(100 + n)).unwrap();
    }
    assert_eq!(
        brief(&unindexed, false),
        None,
        "over a mebibyte of chain to catch up declines"
    );
    assert_eq!(unindexed.poll("t-42"), full, "the full poll catches up");
    assert_eq!(brief(&unindexed, false), Some(full));

    let unsealed = fixture(false);
    unsealed.poll("t-42");
    let mut writer =
        JournalWriter::open(unsealed.root(), "task-t-42", HashProfile::PyJsonV1).unwrap();
    let done = Object::new()
        .with("task_id", "t-42")
        .with("status", "done")
        .with("task_version", 3);
    writer.append("task_completed", &done).unwrap();
    let chain_before = audit_bytes(&unsealed);
    assert_eq!(
        brief(&unsealed, true),
        None,
        "a terminal run to seal declines"
    );
    assert_eq!(brief(&unsealed, false), Some(unsealed.poll("t-42")));
    assert_eq!(
        audit_bytes(&unsealed),
        chain_before,
        "the brief poll sealed nothing"
    );

    // A row after the end keeps the status but moves the head: the seal binds no longer.
    let moved = fixture(true);
    moved.poll("t-42");
    let mut writer = JournalWriter::open(moved.root(), "task-t-42", HashProfile::PyJsonV1).unwrap();
    let late = Object::new()
        .with("task_id", "t-42")
        .with("note", "after the end");
    writer.append("task_progress", &late).unwrap();
    assert_eq!(
        brief(&moved, true),
        None,
        "a seal naming an older journal head declines"
    );

    let large = fixture(false);
    large.poll("t-42");
    let mut writer = JournalWriter::open(large.root(), "task-t-42", HashProfile::PyJsonV1).unwrap();
    let note = "n".repeat(64 * 1024);
    for _ in 0..17 {
        let progress = Object::new()
            .with("task_id", "t-42")
            .with("note", note.as_str());
        writer.append("task_progress", &progress).unwrap();
    }
    let journal = large.root().join(".sdd/runs/task-t-42/journal.jsonl");
    assert!(std::fs::metadata(journal).unwrap().len() > 1 << 20);
    assert_eq!(brief(&large, true), None, "a journal over 1 MiB declines");
    assert_eq!(
        large.poll("t-42"),
        large.poll("task-t-42"),
        "the full poll still answers"
    );
}

/// Entries that name the run after a handle's head leave the handle genuine but stale (and
/// before any, it is not); a seal of a status that is not terminal is a problem.
#[test]
fn later_entries_make_a_handle_stale_and_a_seal_must_be_terminal() {
    let fixture = fixture(true);
    let handle = fixture.poll("t-42");
    let fresh = fixture.verify(&handle);
    assert!(fresh.verified(), "{:?}", fresh.problems);
    assert!(!fresh.stale() && fresh.later_entries == 0, "{fresh:?}");

    let later = AuditEvent::new(
        "task.updated",
        "task_server",
        "task",
        "t-42",
        Object::new().with("task_id", "t-42").with("note", "later"),
    );
    for n in 0..2 {
        fixture.chain.append_at(&later, at(20 + n)).unwrap();
    }
    let stale = fixture.verify(&handle);
    assert!(stale.verified(), "{:?}", stale.problems);
    assert!(stale.stale() && stale.later_entries == 2, "{stale:?}");

    let mut unknown_head = handle.clone();
    unknown_head.chain_head = "0".repeat(64);
    let report = fixture.verify(&unknown_head);
    assert_names_problem(
        &report,
        "is not the hmac of a verified audit entry naming run task-t-42",
    );

    let mut working = handle.clone();
    working.status = TaskStatus::Working;
    fixture
        .chain
        .append_at(&seal_event("t-42", &working), at(30))
        .unwrap();
    let report = fixture.verify(&handle);
    assert_names_problem(&report, "seal status \"working\" is not a terminal status");
}

/// A task without a journal has nothing to seal; a journal that cannot be opened is an error,
/// not a journal that is missing.
#[test]
fn sealing_needs_a_journal_it_can_open() {
    let fixture = fixture(false);
    let nothing = seal_terminal_run_at(fixture.root(), &fixture.chain, "t-none", Some(at(9)));
    assert!(
        matches!(nothing, Ok(SealOutcome::NotTerminal)),
        "{nothing:?}"
    );
    // The run's directory is a plain file, so its journal's path cannot be opened.
    std::fs::write(fixture.root().join(".sdd/runs/task-t-file"), b"").unwrap();
    let refused = seal_terminal_run_at(fixture.root(), &fixture.chain, "t-file", Some(at(9)));
    assert!(refused.is_err(), "{refused:?}");
}

/// A terminal row is appended once: not over any row the status fold ends the run with, and
/// over anything else.
#[test]
fn a_terminal_row_is_appended_only_to_a_run_that_has_not_ended() {
    let events = |root: &std::path::Path| -> Vec<String> {
        load_journal(&root.join(".sdd/runs/task-t-7/journal.jsonl"))
            .unwrap()
            .rows
            .iter()
            .map(|row| row.get("event").and_then(Value::as_str).unwrap().to_owned())
            .collect()
    };
    let payload = Object::new().with("task_id", "t-7").with("status", "done");
    let check = |before: Option<&str>, expect: bool| {
        let dir = tempfile::tempdir().unwrap();
        let mut rows = Vec::new();
        if let Some(event) = before {
            let mut writer =
                JournalWriter::open(dir.path(), "task-t-7", HashProfile::PyJsonV1).unwrap();
            writer.append(event, &payload).unwrap();
            rows.push(event.to_owned());
        }
        let appended = append_terminal_row(dir.path(), "t-7", "task_completed", &payload).unwrap();
        assert_eq!(appended, expect, "after {before:?}");
        if expect {
            rows.push("task_completed".to_owned());
        }
        assert_eq!(events(dir.path()), rows, "after {before:?}");
    };
    check(None, true);
    check(Some("task_claimed"), true);
    check(Some("task_progress"), true);
    for terminal in [
        "task_completed",
        "run_completed",
        "task_failed",
        "run_failed",
        "task_cancelled",
        "run_cancelled",
    ] {
        check(Some(terminal), false);
    }
}

/// The payload of a lifecycle row: the task, the row's status and version (an empty status and
/// version 1 when the row has none), and the reason when there is one.
#[test]
fn a_lifecycle_payload_is_built_from_the_task_row() {
    let check = |row: &str, reason: Option<&str>, expect: &str| {
        let Value::Object(row) = Value::parse(row).unwrap() else {
            panic!("{row} is not an object");
        };
        let payload = lifecycle_payload("t-7", &row, reason);
        // The dump sorts the keys.
        assert_eq!(Value::Object(payload).dumps(Dialect::PY_SPACED), expect);
    };
    check(
        r#"{"status": "done", "version": 4, "title": "T"}"#,
        None,
        r#"{"status": "done", "task_id": "t-7", "task_version": 4}"#,
    );
    check(
        r#"{"status": "cancelled", "version": 2}"#,
        Some("plan rejected"),
        r#"{"reason": "plan rejected", "status": "cancelled", "task_id": "t-7", "task_version": 2}"#,
    );
    check(
        "{}",
        None,
        r#"{"status": "", "task_id": "t-7", "task_version": 1}"#,
    );
}

#[test]
fn each_terminal_status_has_its_lifecycle_event() {
    let check = |status: TaskStatus, expect: Option<&str>| {
        assert_eq!(terminal_event(status), expect, "{status:?}");
    };
    check(TaskStatus::Completed, Some("task_completed"));
    check(TaskStatus::Failed, Some("task_failed"));
    check(TaskStatus::Cancelled, Some("task_cancelled"));
    check(TaskStatus::Working, None);
    check(TaskStatus::InputRequired, None);
}

/// Asserts that one of `report`'s problems contains `text`.
fn assert_names_problem(report: &HandleChainReport, text: &str) {
    assert!(
        report.problems.iter().any(|p| p.contains(text)),
        "no problem names {text:?}: {:?}",
        report.problems
    );
}

/// Every file of the fixture's chain with its bytes, in name order.
fn audit_bytes(fixture: &Fixture) -> Vec<(std::ffi::OsString, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(fixture.root().join(".sdd/audit"))
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (entry.file_name(), std::fs::read(entry.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}
