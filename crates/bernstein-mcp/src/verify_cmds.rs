//! The offline verification commands: `audit verify`, `journal verify`, `journal handle`,
//! `backlog verify-claim`, `capsule verify` and `verify` (the whole project).
//!
//! Each renders a library report either for people (default) or as one stable JSON object on
//! stdout (`--json`). The JSON shapes are part of the interface: scripts depend on them, and the
//! integration tests snapshot them.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use bernstein_journal::audit::{self, AuditChain, Finding, Tear, VerifyReport};
use bernstein_journal::capsule::verify_context_capsule;
use bernstein_journal::claim::{
    ClaimReceipt, backlog_path, read_backlog, verify_claim_receipt_against_backlog,
    verify_task_store_claim_receipt,
};
use bernstein_journal::handle;
use bernstein_journal::run_journal::{self, JournalVerification};
use bernstein_protocol::pyjson::{Dialect, Object, Value as PyValue};
use serde_json::{Value, json};

use crate::Outcome;
use crate::cli::{AuditVerifyArgs, JournalHandleArgs, JournalVerifyArgs, load_audit_key};
use crate::progress::Progress;

pub(crate) fn sdd_dir(workdir: &Path) -> anyhow::Result<PathBuf> {
    let sdd = workdir.join(".sdd");
    anyhow::ensure!(
        sdd.is_dir(),
        "{} is not a Bernstein project root (no .sdd directory)",
        workdir.display()
    );
    Ok(sdd)
}

pub(crate) fn audit_verify(args: AuditVerifyArgs) -> anyhow::Result<Outcome> {
    let audit_dir = sdd_dir(&args.project.workdir)?.join("audit");
    // Verification reads the key and never creates one: a missing key is a setup error.
    let key = load_audit_key(args.key_file)?;
    let bar = Progress::bytes(!args.json, "verifying the audit chain");
    let report = audit::verify_with_progress(&audit_dir, &key, &mut |p| bar.bytes_done(p));
    drop(bar);
    if args.json {
        print_json(&audit_report_json(&report))?;
    } else {
        print_text(&audit_report_text(&report))?;
    }
    Ok(if report.ok() {
        Outcome::Verified
    } else {
        Outcome::Failed
    })
}

pub(crate) fn journal_verify(args: JournalVerifyArgs) -> anyhow::Result<Outcome> {
    let root = &args.project.workdir;
    sdd_dir(root)?;
    let path = run_journal::run_journal_path(root, &args.run_id)?;
    anyhow::ensure!(path.is_file(), "no run journal at {}", path.display());
    let report = run_journal::verify_journal(&path)?;
    if args.json {
        print_json(&journal_report_json(&report))?;
    } else {
        print_text(&journal_report_text(&args.run_id, &report))?;
    }
    Ok(if report.ok() {
        Outcome::Verified
    } else {
        Outcome::Failed
    })
}

pub(crate) fn journal_handle(args: JournalHandleArgs) -> anyhow::Result<Outcome> {
    let root = &args.project.workdir;
    sdd_dir(root)?;
    if args.verify {
        return journal_handle_verify(&args).inspect_err(|err| {
            // A script reading --json gets the refusal as data too (exit status 2 still).
            if args.json {
                let _ = print_json(&json!({
                    "verified": false,
                    "run_id": args.run_or_task_id,
                    "error": format!("{err:#}"),
                }));
            }
        });
    }
    // `bernstein_run_status` embeds the run's chain head: the newest audit entry naming the
    // run, read without a MAC check (so it needs no key). Printing never seals.
    let (handle, _) = handle::poll_run_handle(root, &args.run_or_task_id, None)?;
    print_text(&handle.render_run_status_body())?;
    Ok(Outcome::Verified)
}

fn journal_handle_verify(args: &JournalHandleArgs) -> anyhow::Result<Outcome> {
    let root = &args.project.workdir;
    let id = &args.run_or_task_id;
    let presented = match &args.handle {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the handle {}", path.display()))?;
            let value = PyValue::parse(&text)
                .map_err(|e| anyhow::anyhow!("the handle {} is not JSON: {e}", path.display()))?;
            handle::PresentedHandle::from_wire(&value)?
        }
        None => {
            let resolved = handle::resolve_run_journal(root, id)?;
            anyhow::ensure!(
                resolved.resolution.journal_exists(),
                "unknown run {id:?}: no run journal under {}",
                root.join(".sdd").join("runs").display()
            );
            let (projected, _) = handle::poll_run_handle(root, id, None)?;
            handle::PresentedHandle::from_wire(&PyValue::Object(projected.to_wire_object()))?
        }
    };
    let key = load_audit_key(args.key_file.clone())?;
    let report = handle::verify_handle_chain(root, &key, &presented)?;
    if args.json {
        print_json(&handle_report_json(&report))?;
    } else {
        print_text(&handle_report_text(&report))?;
    }
    Ok(if report.verified() {
        Outcome::Verified
    } else {
        Outcome::Failed
    })
}

/// `{verified, stale, run_id, status, journal_head, chain_head, chain_head_entry,
/// later_entries, seals, chain: {ok, entries, verified_entries}, problems}`.
pub(crate) fn handle_report_json(report: &handle::HandleChainReport) -> Value {
    let h = &report.handle;
    json!({
        "verified": report.verified(),
        "stale": report.stale(),
        "run_id": h.run_id,
        "status": h.status.as_str(),
        "journal_head": h.journal_head,
        "chain_head": h.chain_head,
        "chain_head_entry": report.chain_head_entry.as_ref().map(|e| json!({
            "segment": e.segment,
            "line": e.line,
            "event_type": e.event_type,
            "seal": e.seal,
        })),
        "later_entries": report.later_entries,
        "seals": report.seals,
        "chain": {
            "ok": report.chain.ok(),
            "entries": report.chain.entries,
            "verified_entries": report.chain.verified_entries,
        },
        "problems": report.problems,
    })
}

fn handle_report_text(report: &handle::HandleChainReport) -> String {
    let h = &report.handle;
    let verdict = if report.verified() { "OK" } else { "FAILED" };
    let mut out = format!(
        "run handle {}: {verdict} (status {}, journal head {}, chain head {})\n",
        h.run_id,
        h.status,
        if h.journal_head.is_empty() {
            "-"
        } else {
            &h.journal_head
        },
        if h.chain_head.is_empty() {
            "-"
        } else {
            &h.chain_head
        },
    );
    if let Some(entry) = &report.chain_head_entry {
        out.push_str(&format!(
            "  chain head entry: {}:{} {}{}\n",
            entry.segment,
            entry.line,
            entry.event_type,
            if entry.seal { " (terminal seal)" } else { "" }
        ));
    }
    if report.stale() {
        out.push_str(&format!(
            "  stale: {} later audit entr{} name the run\n",
            report.later_entries,
            if report.later_entries == 1 {
                "y"
            } else {
                "ies"
            }
        ));
    }
    for problem in &report.problems {
        out.push_str(&format!("  problem: {problem}\n"));
    }
    out
}

fn finding_json(f: &Finding) -> Value {
    json!({
        "file": f.file,
        "line": f.line,
        "offset": f.offset,
        "kind": f.kind.as_str(),
        "message": f.message,
    })
}

fn tear_json(t: &Tear) -> Value {
    json!({
        "file": t.segment,
        "line": t.line,
        "offset": t.byte_offset,
        "kind": t.class.as_str(),
        "sealed": t.sealed,
        "acknowledged": t.acknowledged,
        "verified_prefix_offset": t.verified_prefix_offset,
        "errors": t.raw_errors.iter().map(finding_json).collect::<Vec<_>>(),
    })
}

/// `{"ok", "errors", "tears", "entries", "head"}` plus the walked `files`.
pub(crate) fn audit_report_json(report: &VerifyReport) -> Value {
    json!({
        "ok": report.ok(),
        "errors": report.errors.iter().map(finding_json).collect::<Vec<_>>(),
        "tears": report.tears.iter().map(tear_json).collect::<Vec<_>>(),
        "entries": report.entries,
        "verified_entries": report.verified_entries,
        "head": report.head,
        "files": report.files,
    })
}

fn audit_report_text(report: &VerifyReport) -> String {
    let mut out = String::new();
    let verdict = if report.ok() { "OK" } else { "FAILED" };
    out.push_str(&format!(
        "audit chain: {verdict} ({} entries in {} segment(s), {} verified; head {})\n",
        report.entries,
        report.files.len(),
        report.verified_entries,
        report.head
    ));
    for f in &report.errors {
        let at = match (f.line, f.offset) {
            (Some(line), Some(offset)) => format!(" [line {line}, byte {offset}]"),
            _ => String::new(),
        };
        out.push_str(&format!("  error {}: {}{at}\n", f.kind, f.message));
    }
    for t in &report.tears {
        out.push_str(&format!("  tear: {}\n", t.describe()));
        for f in &t.raw_errors {
            out.push_str(&format!("    {}\n", f.message));
        }
    }
    out
}

/// `{"ok", "divergent_index", "errors", "discarded", "head"}` plus detail fields.
pub(crate) fn journal_report_json(report: &JournalVerification) -> Value {
    json!({
        "ok": report.ok(),
        "divergent_index": report.divergent_index,
        "errors": report.errors,
        "discarded": report.discarded(),
        "discarded_lines": report.discarded_lines,
        "head": report.journal_head,
        "verified_head": report.head,
        "entries": report.count,
        "hash_profile": report.hash_profile.map(|p| p.as_str()),
        "expected_hash": report.expected_hash,
        "actual_hash": report.actual_hash,
    })
}

fn journal_report_text(run_id: &str, report: &JournalVerification) -> String {
    let mut out = format!(
        "run journal {run_id}: {} ({} rows, {} discarded; head {})\n",
        if report.ok() { "OK" } else { "FAILED" },
        report.count,
        report.discarded(),
        report.journal_head
    );
    for error in &report.errors {
        out.push_str(&format!("  {error}\n"));
    }
    out
}

pub(crate) fn print_json(value: &Value) -> anyhow::Result<()> {
    print_text(&format!("{}\n", serde_json::to_string(value)?))
}

pub(crate) fn print_text(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        stdout.write_all(b"\n")?;
    }
    stdout.flush()?;
    Ok(())
}

/// Reads a JSON object from `path`, unwrapping a tool-result envelope (`{"result": …}`).
fn read_wire_object(path: &Path) -> anyhow::Result<Object> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value = PyValue::parse(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let object = value
        .as_object()
        .cloned()
        .with_context(|| format!("{} is not a JSON object", path.display()))?;
    Ok(match object.get("result").and_then(PyValue::as_object) {
        Some(inner) => inner.clone(),
        None => object,
    })
}

/// `backlog verify-claim`: checks a claim receipt offline against the on-disk backlog (or the
/// snapshot a task-store receipt carries) and the audit chain.
pub(crate) fn backlog_verify_claim(
    receipt_path: &Path,
    backlog: Option<PathBuf>,
    audit_dir: Option<PathBuf>,
    workdir: &Path,
    key_file: Option<PathBuf>,
    as_json: bool,
) -> anyhow::Result<Outcome> {
    let wire = read_wire_object(receipt_path)?;
    let receipt = ClaimReceipt::from_wire(&wire)?;
    let key = load_audit_key(key_file)?;
    let sdd = workdir.join(".sdd");
    let chain = AuditChain::open(audit_dir.unwrap_or_else(|| sdd.join("audit")), key);
    let report = if receipt.backlog_snapshot.is_some() {
        verify_task_store_claim_receipt(&receipt, &chain)
    } else {
        let backlog = backlog.unwrap_or_else(|| backlog_path(workdir));
        let entries = read_backlog(&backlog)?;
        verify_claim_receipt_against_backlog(&receipt, &entries, &chain)
    };
    if as_json {
        print_text(&PyValue::Object(report.to_object()).dumps(Dialect::PY_SPACED))?;
    } else {
        let verdict = if report.ok() { "OK" } else { "FAILED" };
        let mut out = format!(
            "claim receipt {}: {verdict} ({})\n",
            if report.task_id.is_empty() {
                "(refusal)"
            } else {
                report.task_id.as_str()
            },
            if report.granted { "granted" } else { "refused" }
        );
        for finding in &report.findings {
            out.push_str(&format!(
                "  {}: {}\n",
                finding.check.as_str(),
                finding.message
            ));
        }
        print_text(&out)?;
    }
    Ok(if report.ok() {
        Outcome::Verified
    } else {
        Outcome::Failed
    })
}

/// `capsule verify`: checks a task's signed context capsule (signature, chain anchor, journal).
pub(crate) fn capsule_verify(
    task_id: &str,
    workdir: &Path,
    key_file: Option<PathBuf>,
    as_json: bool,
) -> anyhow::Result<Outcome> {
    let sdd = sdd_dir(workdir)?;
    let key = load_audit_key(key_file)?;
    let chain = AuditChain::open(sdd.join("audit"), key);
    let report = verify_context_capsule(workdir, &chain, task_id)?;
    if as_json {
        print_text(&PyValue::Object(report.to_wire()).dumps(Dialect::PY_SPACED))?;
    } else {
        let mut out = format!(
            "context capsule {task_id}: {}{}\n",
            if report.ok { "OK" } else { "FAILED" },
            if report.is_mock {
                " (mock capsule: never OK)"
            } else {
                ""
            }
        );
        if !report.reason.is_empty() {
            out.push_str(&format!("  {}\n", report.reason));
        }
        print_text(&out)?;
    }
    Ok(if report.ok {
        Outcome::Verified
    } else {
        Outcome::Failed
    })
}

/// `verify`: every verifier over the project, one report.
pub(crate) fn project_verify(
    workdir: &Path,
    receipts: &[PathBuf],
    key_file: Option<PathBuf>,
    as_json: bool,
) -> anyhow::Result<Outcome> {
    sdd_dir(workdir)?;
    let key = load_audit_key(key_file)?;
    let sections = {
        let bar = Progress::steps(!as_json, crate::project_verify::SECTION_COUNT as u64);
        crate::project_verify::verify_project(workdir, &key, receipts, &mut |name| bar.step(name))
    };
    let ok = sections.iter().all(|s| s.ok);
    if as_json {
        let report = crate::project_verify::report_object(&sections);
        print_text(&PyValue::Object(report).dumps(Dialect::PY_ROW))?;
    } else {
        let mut out = format!(
            "project {}: {}\n",
            workdir.display(),
            if ok { "OK" } else { "FAILED" }
        );
        for section in &sections {
            let state = match (section.ok, section.present) {
                (true, true) => "ok",
                (true, false) => "ok (nothing to check)",
                (false, _) => "FAILED",
            };
            out.push_str(&format!("  {:<12} {state}\n", section.name));
            for problem in &section.problems {
                out.push_str(&format!("    {problem}\n"));
            }
            for note in &section.notes {
                out.push_str(&format!("    note: {note}\n"));
            }
        }
        print_text(&out)?;
    }
    Ok(if ok {
        Outcome::Verified
    } else {
        Outcome::Failed
    })
}
