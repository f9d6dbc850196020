//! The tools that work on local project files only: the shutdown signal, context capsules and
//! the lineage log.

use std::path::Path;

use bernstein_gate::Workdir;
use bernstein_gate::shutdown::{STDIO_SIGNAL_CONTENT, send_shutdown_signal_from, signal_sent};
use bernstein_journal::audit::AuditChain;
use bernstein_journal::capsule::{
    CapsuleRecord, read_capsule_record, task_capsule_body, verify_context_capsule,
};
use bernstein_journal::lineage_log::{AgentCards, verify_lineage as verify_lineage_log};
use bernstein_protocol::pyjson::{Object, Value};

use super::{arg_bool, arg_str, generic_error, indent2, plain, workdir_path};
use crate::context::ToolContext;

/// `bernstein_shutdown_orchestrator` (and the deprecated `bernstein_stop`): the containment
/// barrier of `bernstein-gate`, then the write of `mcp-stop\n`, which the gate makes relative
/// to a directory handle on the resolved root without following any link, so a symlink swapped
/// in after the check cannot redirect it. A refusal writes nothing.
pub(super) fn shutdown(ctx: &ToolContext, args: &Object) -> String {
    let raw = args.get("workdir").cloned().unwrap_or(Value::from("."));
    // A relative workdir names a directory below the project root (the server's working
    // directory in the reference); the barrier needs that base absolute and symlink-free.
    let base = std::fs::canonicalize(&ctx.workdir).unwrap_or_else(|_| ctx.workdir.clone());
    match send_shutdown_signal_from(Workdir::from_value(&raw), &base, STDIO_SIGNAL_CONTENT) {
        Ok(path) => plain(signal_sent(&path)),
        Err(refusal) => {
            tracing::warn!("MCP tool error: {refusal}");
            plain(refusal.refusal_payload())
        }
    }
}

/// `bernstein_task_capsule` (and the deprecated `bernstein_context`).
pub(super) async fn task_capsule(ctx: &ToolContext, args: &Object) -> String {
    let task_id = arg_str(args, "task_id").unwrap_or("").to_owned();
    let base = workdir_path(ctx, arg_str(args, "workdir").unwrap_or("."));
    let base = std::fs::canonicalize(&base).unwrap_or(base);
    let verify = arg_bool(args, "verify").unwrap_or(false);
    let key = ctx.backend.audit_key().cloned();
    let worked =
        tokio::task::spawn_blocking(move || capsule_body(&base, &task_id, verify, key)).await;
    match worked {
        Ok(text) => text,
        Err(e) => generic_error(e, "Context capsule not found"),
    }
}

fn capsule_body(
    base: &Path,
    task_id: &str,
    verify: bool,
    key: Option<bernstein_journal::key::AuditKey>,
) -> String {
    let signed = match read_capsule_record(base, task_id) {
        Ok(CapsuleRecord::Loaded(signed)) => signed,
        Ok(CapsuleRecord::Missing | CapsuleRecord::Malformed { .. }) => {
            return generic_error(
                format!("no context capsule for task {task_id}"),
                "Capsule not found",
            );
        }
        Err(e) => return generic_error(e, "Context capsule not found"),
    };
    let report = if verify {
        let Some(key) = key else {
            return generic_error(
                "verifying a capsule needs the install audit key, and none was configured",
                "Context capsule not found",
            );
        };
        let chain = AuditChain::open(base.join(".sdd").join("audit"), key);
        match verify_context_capsule(base, &chain, task_id) {
            Ok(report) => Some(report),
            Err(e) => return generic_error(e, "Context capsule not found"),
        }
    } else {
        None
    };
    indent2(task_capsule_body(&signed, report.as_ref()))
}

/// `bernstein_verify_lineage` (and the deprecated `verify_chain`): `{"ok", "reason"}` for one
/// artefact path, over the whole project log. Working here, unlike in the reference 3.23.0.
pub(super) async fn verify_lineage(ctx: &ToolContext, args: &Object) -> String {
    let artefact_path = arg_str(args, "artefact_path").unwrap_or("").to_owned();
    let Some(key) = ctx.backend.audit_key().cloned() else {
        return plain(Object::new().with(
            "error",
            "verifying lineage needs the install audit key (the operator HMAC secret), and none \
             was configured",
        ));
    };
    let root = std::fs::canonicalize(&ctx.workdir).unwrap_or_else(|_| ctx.workdir.clone());
    let worked = tokio::task::spawn_blocking(move || {
        let cards = AgentCards::load_dir(&root.join(".sdd").join("agents"))?;
        verify_lineage_log(&root, &artefact_path, key.master(), &cards)
    })
    .await;
    match worked {
        Ok(Ok(report)) => plain(report.to_tool_result()),
        Ok(Err(e)) => plain(Object::new().with("error", e.to_string())),
        Err(e) => plain(Object::new().with("error", e.to_string())),
    }
}
