//! `bernstein-mcp audit calls RUN_ID`: a run's MCP call order, reconstructed from the audit
//! chain alone.
//!
//! The verdict is the library's ([`bernstein_mcp_core::reconstruct_call_order`]): the chain
//! verifies and the run's `mcp.stateless_call` entries carry exactly the call indices
//! `0..n-1`. A tampered entry fails the chain at that entry's file and line, and its call is
//! missing from the order, so both are printed. An index used up by a call that never ran (its
//! server stopped between the journal row and the audit entry, and a later call recorded it as
//! `mcp.stateless_call_abandoned`) fills its place in the order and is listed as abandoned.

use bernstein_mcp_core::{CallOrder, RecordedCall, reconstruct_call_order};
use serde_json::{Value, json};

use crate::Outcome;
use crate::cli::{AuditCallsArgs, load_audit_key};
use crate::verify_cmds::{audit_report_json, print_json, print_text, sdd_dir};

pub(crate) fn audit_calls(args: AuditCallsArgs) -> anyhow::Result<Outcome> {
    let audit_dir = sdd_dir(&args.project.workdir)?.join("audit");
    // Reading the order never creates a key: a missing key is a setup error.
    let key = load_audit_key(args.key_file)?;
    let order = reconstruct_call_order(&audit_dir, &key, &args.run_id);
    if args.json {
        print_json(&order_json(&order))?;
    } else {
        print_text(&order_text(&order))?;
    }
    Ok(if order.ok() {
        Outcome::Verified
    } else {
        Outcome::Failed
    })
}

fn call_json(call: &RecordedCall) -> Value {
    json!({
        "call_index": call.call_index,
        "method": call.method,
        "trace_id": call.trace_id,
        "span_id": call.span_id,
        "journal_head": call.journal_head,
        "timestamp": call.timestamp,
        "file": call.segment,
        "line": call.line,
        "hmac": call.hmac,
    })
}

/// `{"ok", "run_id", "calls", "abandoned", "problems", "chain"}`; `abandoned` lists the indices
/// used up by calls that never ran, in the shape of `calls`; `chain` is the `audit verify
/// --json` shape.
fn order_json(order: &CallOrder) -> Value {
    json!({
        "ok": order.ok(),
        "run_id": order.run_id,
        "calls": order.calls.iter().map(call_json).collect::<Vec<_>>(),
        "abandoned": order.abandoned.iter().map(call_json).collect::<Vec<_>>(),
        "problems": order.problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "chain": audit_report_json(&order.chain),
    })
}

fn order_text(order: &CallOrder) -> String {
    let abandoned = if order.abandoned.is_empty() {
        String::new()
    } else {
        format!(", {} abandoned", order.abandoned.len())
    };
    let mut out = format!(
        "mcp call order of run {}: {} ({} call(s){abandoned}; chain {})\n",
        order.run_id,
        if order.ok() { "OK" } else { "FAILED" },
        order.calls.len(),
        if order.chain.ok() {
            "verified"
        } else {
            "FAILED"
        },
    );
    // Calls and abandoned indices interleaved in index order.
    let mut lines: Vec<(&RecordedCall, bool)> = order
        .calls
        .iter()
        .map(|call| (call, false))
        .chain(order.abandoned.iter().map(|call| (call, true)))
        .collect();
    lines.sort_by_key(|(call, _)| call.call_index);
    for (call, abandoned) in lines {
        let what = if abandoned {
            format!("{} ABANDONED (never ran)", call.method)
        } else {
            call.method.clone()
        };
        out.push_str(&format!(
            "  {:>4}  {what}  span {}  trace {}  at {}:{}\n",
            call.call_index, call.span_id, call.trace_id, call.segment, call.line
        ));
    }
    let (errors, tears) = order.chain_findings();
    for finding in errors {
        out.push_str(&format!(
            "  chain error {}: {}\n",
            finding.kind, finding.message
        ));
    }
    for tear in tears {
        out.push_str(&format!("  chain tear: {}\n", tear.describe()));
        for finding in &tear.raw_errors {
            out.push_str(&format!("    {}\n", finding.message));
        }
    }
    for problem in &order.problems {
        out.push_str(&format!("  order: {problem}\n"));
    }
    out
}
