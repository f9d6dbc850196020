//! The tool layer checked against the reference's own recordings: every call in
//! `fixtures/vectors/http/mcp_tools.json` (Bernstein 3.23's MCP server over a live task server,
//! project `fixtures/vectors/server_probe/`) is replayed on the store state it was made in, and
//! its `result` is compared byte for byte with ours.
//!
//! The state of each call is rebuilt from the reference's own evidence: the probe's `.sdd/` with
//! the time-ordered logs (task log, audit chain, mailbox) cut back to the lines that existed
//! when the call was made (the recording's `_meter.ts` and the audit time stamps order them).
//! The audit key is the vectors' key, and the signing identities are the probe's, so
//! signatures over equal bytes are equal.
//!
//! Results are compared as the reference's `json.dumps` writes them (spaced, ASCII, keys in
//! the server's order). Five recordings kept the server's text and so its key order; the other
//! four (`bernstein_run`, both `bernstein_run_status` polls, `bernstein_status`) were stored as
//! parsed objects whose keys the recorder sorted, so those are compared with keys sorted on
//! both sides.
//!
//! `_meter` is never compared (latency, time stamp and call id are per call). Everything else
//! is, except:
//!
//! * [`NORMALISATIONS`]: fields the reference itself makes random or time-dependent, each
//!   replaced by a named placeholder on both sides. One more is textual: the claim is replayed
//!   after our own replay of the recorded `bernstein_run` (see `replay`), and the task id our
//!   run minted is read as the recorded one everywhere in the claim's answer;
//! * [`DEPARTURES`]: fields where we differ on purpose, each naming its ARCHITECTURE note. A
//!   departure that no longer departs fails the test, so the list cannot go stale.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bernstein_journal::key::AuditKey;
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use bernstein_tasks::embedded::EmbeddedStore;
use bernstein_tools::{Backend, Catalogue, ToolContext};

use crate::common::config;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// A field the reference makes random: `path` (keys from the result's root) is replaced by
/// `<name>` on both sides before comparing.
struct Normalisation {
    tool: &'static str,
    path: &'static [&'static str],
    name: &'static str,
}

/// Fields the reference makes random, so no implementation can reproduce them from the state.
const NORMALISATIONS: &[Normalisation] = &[
    // The mailbox entry's wall-clock time of posting (`time.time()`), and the two values
    // computed over it: the entry's HMAC chain tag and its Ed25519 signature.
    Normalisation {
        tool: "bernstein_post_message",
        path: &["timestamp"],
        name: "posting-time",
    },
    Normalisation {
        tool: "bernstein_post_message",
        path: &["entry_hash"],
        name: "hmac-over-posting-time",
    },
    Normalisation {
        tool: "bernstein_post_message",
        path: &["signature"],
        name: "signature-over-posting-time",
    },
    // The claim is replayed after our own replay of the recorded `bernstein_run` (see
    // `replay`): the chain head is then the hash of that run's `task.created` audit entry,
    // which carries its wall-clock time stamp.
    Normalisation {
        tool: "bernstein_claim",
        path: &["chainHead"],
        name: "head-over-the-replayed-run",
    },
    // `bernstein_run` mints a fresh random task id (and the run id derived from it).
    Normalisation {
        tool: "bernstein_run",
        path: &["task_id"],
        name: "minted-task-id",
    },
    Normalisation {
        tool: "bernstein_run",
        path: &["run_id"],
        name: "minted-run-id",
    },
];

/// A field where we depart from the reference on purpose: replaced by `<departure>` on both
/// sides, and required to differ. `call` is a tool name, or a recording's full label
/// (`tool:arguments`) when only that call departs.
struct Departure {
    call: &'static str,
    path: &'static [&'static str],
    why: &'static str,
}

/// The poll of the run by its bare task id (the `task-` form matches the reference exactly).
const BARE_ID_POLL: &str = r#"bernstein_run_status:{"run_id": "f6e4301edd4e", "workdir": "."}"#;

const HANDLE_ID_FORMS: &str = "both id forms of a run project the one handle `task-<id>` \
    before its journal exists; the reference answers with the id as given (ARCHITECTURE, \
    bernstein-tools: departures from the recordings; bernstein-journal src/handle/mod.rs)";
const STATUS_COUNTS: &str = "status counts are folded from the tasks themselves; the \
    reference counts from a by-status index that loses a task after a refused transition \
    (ARCHITECTURE, bernstein-tasks: `/status` counts that drift; src/remote/mod.rs)";
const CLAIM_BACKLOG: &str = "the embedded store claims rows of the backlog file it keeps \
    projected from the store (claimable and held tasks, plus rows it does not own, such as \
    the probe's b-1 and b-2); the reference's task-store claim hashes a snapshot of every \
    task. The snapshot, its hash and everything over that hash differ (ARCHITECTURE, \
    bernstein-tasks: the embedded store rewrites the backlog file)";

/// Where we differ on purpose (see the reasons and their ARCHITECTURE notes).
const DEPARTURES: &[Departure] = &[
    Departure {
        call: BARE_ID_POLL,
        path: &["runId"],
        why: HANDLE_ID_FORMS,
    },
    Departure {
        call: BARE_ID_POLL,
        path: &["taskId"],
        why: HANDLE_ID_FORMS,
    },
    Departure {
        call: BARE_ID_POLL,
        path: &["pollToken"],
        why: HANDLE_ID_FORMS,
    },
    Departure {
        call: BARE_ID_POLL,
        path: &["receiptHash"],
        why: HANDLE_ID_FORMS,
    },
    Departure {
        call: "bernstein_status",
        path: &["counts", "done"],
        why: STATUS_COUNTS,
    },
    Departure {
        call: "bernstein_claim",
        path: &["backlogHead"],
        why: CLAIM_BACKLOG,
    },
    Departure {
        call: "bernstein_claim",
        path: &["receiptHash"],
        why: CLAIM_BACKLOG,
    },
    Departure {
        call: "bernstein_claim",
        path: &["signature"],
        why: CLAIM_BACKLOG,
    },
    Departure {
        call: "bernstein_claim",
        path: &["pollToken"],
        why: CLAIM_BACKLOG,
    },
    Departure {
        call: "bernstein_claim",
        path: &["backlogSnapshot"],
        why: CLAIM_BACKLOG,
    },
];

/// One recorded call.
struct Recorded {
    /// `tool:arguments`, as the recording names the call.
    label: String,
    tool: String,
    arguments: serde_json::Value,
    /// The recorded `result`.
    result: Value,
    /// Whether the recording kept the server's key order (a JSON text) or only the parsed
    /// object, whose keys the recorder sorted.
    ordered: bool,
}

fn recordings() -> Vec<Recorded> {
    let raw = fs::read_to_string(fixtures().join("vectors/http/mcp_tools.json")).unwrap();
    let doc = Value::parse(&raw).unwrap();
    let mut calls = Vec::new();
    for (label, call) in doc.as_object().unwrap().iter() {
        let Some((tool, arguments)) = label.split_once(':') else {
            continue;
        };
        let structured = call.as_object().unwrap().get("structured").unwrap();
        let (envelope, ordered) = match structured.as_object().unwrap().get("result") {
            Some(Value::Str(text)) => (Value::parse(text).unwrap(), true),
            _ => (structured.clone(), false),
        };
        let result = envelope.as_object().unwrap().get("result").unwrap().clone();
        calls.push(Recorded {
            label: label.to_owned(),
            tool: tool.to_owned(),
            arguments: serde_json::from_str(arguments).unwrap(),
            result,
            ordered,
        });
    }
    calls
}

/// How many lines of the probe's task log, audit segment and mailbox existed when `tool` was
/// called (from the recording's `_meter.ts` against the audit's time stamps).
fn state_before(tool: &str) -> (usize, usize, usize) {
    match tool {
        // Before the task `bernstein_run` created (`task.created f6e4301edd4e`, 02:01:44.478).
        "bernstein_run" => (14, 13, 1),
        // After it, before the claim receipt (02:01:44.752).
        "bernstein_run_status" | "bernstein_status" | "bernstein_claim" => (15, 14, 1),
        // After the claim, before the message (02:01:44.791).
        "bernstein_post_message" => (16, 15, 1),
        // After the message, before completion.
        "bernstein_approve" | "bernstein_complete" => (16, 16, 2),
        // After completion.
        "bernstein_cancel" => (17, 16, 2),
        other => panic!("no recorded state for {other}"),
    }
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn keep_lines(path: &Path, count: usize) {
    let text = fs::read_to_string(path).unwrap();
    let kept: String = text.split_inclusive('\n').take(count).collect();
    assert_eq!(kept.lines().count(), count, "{}", path.display());
    fs::write(path, kept).unwrap();
}

fn audit_key() -> AuditKey {
    let raw = fs::read_to_string(fixtures().join("vectors/_keys/audit.key")).unwrap();
    AuditKey::from_master_bytes(raw.trim().as_bytes().to_vec())
}

/// A scratch project holding the probe's state as it stood before `tool` was called.
fn project_before(tool: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let sdd = dir.path().join(".sdd");
    copy_tree(&fixtures().join("vectors/server_probe/.sdd"), &sdd);
    let (tasks, audit, mailbox) = state_before(tool);
    keep_lines(&sdd.join("runtime/tasks.jsonl"), tasks);
    keep_lines(&sdd.join("audit/2026-11-30.jsonl"), audit);
    keep_lines(&sdd.join("runtime/mailbox.jsonl"), mailbox);
    // Git does not keep file modes; the identities are private keys, which we refuse to use
    // when group or world can read them.
    for entry in fs::read_dir(sdd.join("identity")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "pem") {
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        }
    }
    dir
}

/// The task id `bernstein_run` minted in the recording.
const RECORDED_TASK_ID: &str = "f6e4301edd4e";

async fn replay(call: &Recorded, run: &Recorded) -> Value {
    // Our store claims rows of the backlog file it projects on every write, so a claim on the
    // reference's state must follow a write by our store: the claim is replayed on the state
    // before the recorded `bernstein_run`, after replaying that run. Our run mints its own
    // task id, which is then read as the recorded one (normalisation "minted-task-id").
    let setup = call.tool == "bernstein_claim";
    let dir = project_before(if setup { &run.tool } else { &call.tool });
    let store = EmbeddedStore::open(dir.path(), Some(audit_key())).unwrap();
    let backend = Backend::embedded(store, audit_key());
    let ctx = ToolContext::new(dir.path(), Arc::new(backend));
    let catalogue = Catalogue::new(&config(true)).unwrap();
    let mut minted = None;
    if setup {
        let outcome = catalogue.call(&ctx, &run.tool, run.arguments.clone()).await;
        let envelope: serde_json::Value = serde_json::from_str(&outcome.text).unwrap();
        minted = Some(envelope["result"]["task_id"].as_str().unwrap().to_owned());
    }
    let outcome = catalogue
        .call(&ctx, &call.tool, call.arguments.clone())
        .await;
    let text = match &minted {
        Some(id) => outcome.text.replace(id.as_str(), RECORDED_TASK_ID),
        None => outcome.text.clone(),
    };
    let envelope = Value::parse(&text)
        .unwrap_or_else(|e| panic!("{}: not JSON ({e:?}): {}", call.tool, outcome.text));
    envelope
        .as_object()
        .and_then(|o| o.get("result"))
        .unwrap_or_else(|| panic!("{}: no result in {}", call.tool, outcome.text))
        .clone()
}

/// Replaces the value at `path` with `placeholder` (key order kept); returns the value it
/// replaced.
fn replace_at(value: &mut Value, path: &[&str], placeholder: &str) -> Option<Value> {
    let (first, rest) = path.split_first()?;
    let Value::Object(object) = value else {
        return None;
    };
    let mut inner = object.get(first)?.clone();
    let old = if rest.is_empty() {
        Some(std::mem::replace(&mut inner, Value::from(placeholder)))
    } else {
        replace_at(&mut inner, rest, placeholder)
    };
    object.insert(*first, inner);
    old
}

/// `value` with every object's keys sorted, for recordings that did not keep the key order.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(object) => {
            let mut entries: Vec<(&str, &Value)> = object.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let mut out = Object::new();
            for (key, inner) in entries {
                out.insert(key, sorted(inner));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_recorded_tool_call_replays_to_the_reference_result() {
    let calls = recordings();
    assert_eq!(calls.len(), 9, "the recording holds 9 tool calls");
    assert_eq!(calls.iter().filter(|c| c.ordered).count(), 5);
    let run = calls.iter().find(|c| c.tool == "bernstein_run").unwrap();
    let mut mismatches = Vec::new();
    for call in &calls {
        let mut ours = replay(call, run).await;
        let mut theirs = call.result.clone();
        for n in NORMALISATIONS.iter().filter(|n| n.tool == call.tool) {
            let placeholder = format!("<{}>", n.name);
            let a = replace_at(&mut ours, n.path, &placeholder);
            let b = replace_at(&mut theirs, n.path, &placeholder);
            if a.is_none() || b.is_none() {
                mismatches.push(format!(
                    "{}: normalisation {} names a field missing from {}",
                    call.tool,
                    n.name,
                    if a.is_none() {
                        "ours"
                    } else {
                        "the reference's"
                    }
                ));
            }
        }
        for d in DEPARTURES
            .iter()
            .filter(|d| d.call == call.tool || d.call == call.label)
        {
            let a = replace_at(&mut ours, d.path, "<departure>");
            let b = replace_at(&mut theirs, d.path, "<departure>");
            if a == b {
                mismatches.push(format!(
                    "{}: departure {:?} no longer departs ({a:?}); remove it: {}",
                    call.tool, d.path, d.why
                ));
            }
        }
        let (ours, theirs) = if call.ordered {
            (ours, theirs)
        } else {
            (sorted(&ours), sorted(&theirs))
        };
        let ours = ours.dumps(Dialect::PY_ROW);
        let theirs = theirs.dumps(Dialect::PY_ROW);
        if ours != theirs {
            mismatches.push(format!(
                "{} {}\n  reference: {theirs}\n  ours:      {ours}",
                call.tool, call.arguments
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
