//! The tool handlers. Each one takes its validated arguments (top-level nulls dropped) and
//! returns its JSON payload text as the reference's handler returns it: pretty-printed with
//! indent 2 for most answers, `json.dumps` defaults for errors and a few compact answers. A
//! handler whose answer is large may return the value whose indent-2 text that is instead
//! ([`Payload`]).
//! Handlers never fail: a failure is rendered into the payload with the reference's error shape.

mod local;
mod query;
pub(crate) mod scenarios;
pub(crate) mod skills;
mod worker;

use std::fmt::Display;
use std::path::{Path, PathBuf};

use bernstein_journal::handle::render_indent2;
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use bernstein_tasks::remote::TraceContext;

use crate::catalogue::Catalogue;
use crate::context::ToolContext;

/// A handler's answer: its payload text, or the value whose `json.dumps(value, indent=2)` is
/// the payload. A handler that holds its answer as a value hands the value over, so the
/// catalogue does not render it only to parse it back for the `_meter` envelope (a claim's
/// answer carries every open row of the backlog).
#[derive(Debug)]
pub(crate) enum Payload {
    /// The payload text.
    Text(String),
    /// The payload as a value, rendered with indent 2 when its text is needed.
    Value(Value),
}

impl Payload {
    /// The payload text.
    pub(crate) fn into_text(self) -> String {
        match self {
            Payload::Text(text) => text,
            Payload::Value(value) => render_indent2(&value),
        }
    }
}

impl From<String> for Payload {
    fn from(text: String) -> Payload {
        Payload::Text(text)
    }
}

/// The hint of a task-backend failure.
pub(crate) const SERVER_HINT: &str = "Task server may be restarting";

/// `json.dumps(value, indent=2)`.
pub(crate) fn indent2(object: Object) -> String {
    render_indent2(&Value::Object(object))
}

/// `json.dumps(value)`.
pub(crate) fn plain(object: Object) -> String {
    Value::Object(object).dumps(Dialect::PY_ROW)
}

/// The reference's generic error: `{"error": str(exc), "hint": hint}`.
pub(crate) fn generic_error(error: impl Display, hint: &str) -> String {
    let message = error.to_string();
    tracing::warn!("MCP tool error: {message}");
    plain(Object::new().with("error", message).with("hint", hint))
}

/// A string argument.
pub(crate) fn arg_str<'a>(args: &'a Object, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// An integer argument (a float with no fraction counts, as pydantic's lax mode accepts it).
pub(crate) fn arg_i64(args: &Object, key: &str) -> Option<i64> {
    match args.get(key)? {
        Value::Int(i) => i.as_i64(),
        #[allow(clippy::cast_possible_truncation)]
        Value::Float(f) if f.fract() == 0.0 && f.is_finite() => Some(*f as i64),
        _ => None,
    }
}

/// A boolean argument.
pub(crate) fn arg_bool(args: &Object, key: &str) -> Option<bool> {
    match args.get(key)? {
        Value::Bool(b) => Some(*b),
        _ => None,
    }
}

/// The W3C trace context of the call, for forwarding.
pub(crate) fn trace(ctx: &ToolContext) -> TraceContext {
    TraceContext {
        traceparent: ctx.meta.traceparent.clone(),
        tracestate: ctx.meta.tracestate.clone(),
        baggage: ctx.meta.baggage.clone(),
    }
}

/// A `workdir` argument resolved against the project root: absolute paths are kept, relative
/// ones (the default `"."`) are taken from the project root, as the reference takes them from
/// its working directory. Under workdir confinement, [`run_tool`] has already refused one that
/// resolves outside the allowed roots; inside the root it names, every path built from an id
/// still goes through the journal's containment check on every transport.
pub(crate) fn workdir_path(ctx: &ToolContext, workdir: &str) -> PathBuf {
    let path = Path::new(workdir);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        ctx.workdir.join(path)
    }
}

/// The tools and aliases whose `workdir` argument names a project root.
const WORKDIR_TOOLS: [&str; 6] = [
    "bernstein_run_status",
    "bernstein_task_capsule",
    "bernstein_shutdown_orchestrator",
    "bernstein_task_handle",
    "bernstein_context",
    "bernstein_stop",
];

/// The hint of a `workdir` refused by confinement.
pub(crate) const CONFINEMENT_HINT: &str = "workdir must be the served project root, a directory inside it, or a root the operator allowed";

/// What workdir confinement decided for one call (see [`ToolContext::workdir_roots`]).
enum Confinement {
    /// Confinement is off, or the tool names no workdir it checks.
    NotChecked,
    /// The workdir resolved (symlinks followed) to this existing directory inside an allowed
    /// root. A tool that resolves its workdir the same way takes it from here instead of
    /// resolving it again.
    Inside(PathBuf),
    /// The structured tool error refusing the workdir.
    Refused(String),
}

/// Workdir confinement: with confinement on, the `workdir` of `name` must resolve (symlinks
/// followed) to an existing directory inside one of the allowed roots.
fn confine(ctx: &ToolContext, name: &str, args: &Object) -> Confinement {
    let Some(roots) = ctx.workdir_roots.as_ref() else {
        return Confinement::NotChecked;
    };
    if !WORKDIR_TOOLS.contains(&name) {
        return Confinement::NotChecked;
    }
    // A workdir that is not text is the firewall's or the barrier's to refuse.
    let raw = match args.get("workdir") {
        None => ".",
        Some(Value::Str(text)) => text.as_str(),
        Some(_) => return Confinement::NotChecked,
    };
    let named = workdir_path(ctx, raw);
    // One `openat2` when no component of the path is a symlink (then it is its own canonical
    // form, and `O_DIRECTORY` proves it a directory), the full resolution otherwise: this runs
    // on every call the HTTP transport serves.
    match bernstein_journal::run_journal::canonicalize_directory_cheaply(&named) {
        Ok(real) if roots.iter().any(|root| real.starts_with(root)) => Confinement::Inside(real),
        _ => Confinement::Refused(generic_error(
            format!(
                "workdir {} is outside the roots this server may serve",
                bernstein_protocol::pyrepr::python_str_repr(raw)
            ),
            CONFINEMENT_HINT,
        )),
    }
}

/// Runs tool `name`.
pub(crate) async fn run_tool(
    cat: &Catalogue,
    ctx: &ToolContext,
    name: &str,
    args: &Object,
) -> Payload {
    let workdir = match confine(ctx, name, args) {
        Confinement::Refused(refusal) => return refusal.into(),
        Confinement::Inside(real) => Some(real),
        Confinement::NotChecked => None,
    };
    let text = match name {
        "bernstein_run" => query::run(ctx, args).await,
        "bernstein_status" => query::status(ctx, args).await,
        "bernstein_run_status" => {
            return query::run_status(cat, ctx, args, true, workdir).await;
        }
        "bernstein_subscribe" => query::subscribe(ctx, args).await,
        "bernstein_claim" => return worker::claim(ctx, args).await,
        "bernstein_create_task" => worker::create_task(ctx, args).await,
        "bernstein_post_message" => worker::post_message(ctx, args).await,
        "bernstein_post_artifact" => worker::post_artifact(ctx, args).await,
        "bernstein_cancel" => worker::cancel(ctx, args).await,
        "bernstein_approve" => worker::approve(ctx, args).await,
        "bernstein_complete" => worker::complete(ctx, args).await,
        "bernstein_shutdown_orchestrator" => local::shutdown(ctx, args),
        "bernstein_task_capsule" => local::task_capsule(ctx, args).await,
        "load_skill" => skills::load_skill_tool(args),
        "bernstein_scenario" => scenarios::scenario_tool(ctx, args).await,
        "bernstein_verify_lineage" => local::verify_lineage(ctx, args).await,
        // The catalogue routes only registered names here; an unrouted one is a table defect,
        // answered like an unknown tool rather than with a panic.
        other => plain(Object::new().with("error", format!("Unknown tool: {other}"))),
    };
    text.into()
}

/// Runs alias `name` and returns its historical payload (the caller wraps it).
pub(crate) async fn run_alias(
    cat: &Catalogue,
    ctx: &ToolContext,
    name: &str,
    args: &Object,
) -> String {
    let workdir = match confine(ctx, name, args) {
        Confinement::Refused(refusal) => return refusal,
        Confinement::Inside(real) => Some(real),
        Confinement::NotChecked => None,
    };
    match name {
        "bernstein_health" => plain(Object::new().with("status", "ok")),
        "bernstein_tasks" => query::tasks_alias(ctx, args).await,
        "bernstein_cost" => query::cost_alias(ctx).await,
        "bernstein_create_subtask" => query::create_subtask_alias(ctx, args).await,
        "bernstein_task_handle" => query::run_status(cat, ctx, args, false, workdir)
            .await
            .into_text(),
        "bernstein_update" => worker::post_message(ctx, args).await,
        "bernstein_context" => local::task_capsule(ctx, args).await,
        "bernstein_stop" => local::shutdown(ctx, args),
        "bernstein_scenarios" => scenarios::list_text(),
        "bernstein_scenario_status" => scenarios::status_text(ctx, args).await,
        "verify_chain" => local::verify_lineage(ctx, args).await,
        other => plain(Object::new().with("error", format!("Unknown tool: {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use bernstein_protocol::pyjson::{Object, Value};

    use super::{arg_bool, arg_i64, arg_str};

    /// The arguments object `{"x": value}`, or `{}` for `None`.
    fn args(value: Option<Value>) -> Object {
        match value {
            Some(value) => Object::new().with("x", value),
            None => Object::new(),
        }
    }

    #[test]
    fn an_integer_argument_is_an_int_or_a_finite_float_without_a_fraction() {
        fn check(value: Option<Value>, expect: Option<i64>) {
            assert_eq!(arg_i64(&args(value.clone()), "x"), expect, "{value:?}");
        }
        check(Some(Value::from(7)), Some(7));
        check(Some(Value::from(-3)), Some(-3));
        check(Some(Value::from(i64::MAX)), Some(i64::MAX));
        // An integer no i64 holds is not an integer argument.
        check(Some(Value::from(u64::MAX)), None);
        // Pydantic's lax mode takes a float that is a whole number.
        check(Some(Value::Float(3.0)), Some(3));
        check(Some(Value::Float(-12.0)), Some(-12));
        check(Some(Value::Float(2.5)), None);
        check(Some(Value::Float(-0.25)), None);
        check(Some(Value::Float(f64::INFINITY)), None);
        check(Some(Value::Float(f64::NAN)), None);
        check(Some(Value::from("4")), None);
        check(Some(Value::from(true)), None);
        check(Some(Value::Null), None);
        check(None, None);
    }

    #[test]
    fn a_boolean_argument_is_a_json_boolean_only() {
        fn check(value: Option<Value>, expect: Option<bool>) {
            assert_eq!(arg_bool(&args(value.clone()), "x"), expect, "{value:?}");
        }
        check(Some(Value::from(true)), Some(true));
        check(Some(Value::from(false)), Some(false));
        check(Some(Value::from("true")), None);
        check(Some(Value::from(1)), None);
        check(None, None);
    }

    #[test]
    fn a_string_argument_is_a_json_string_only() {
        fn check(value: Option<Value>, expect: Option<&str>) {
            assert_eq!(arg_str(&args(value.clone()), "x"), expect, "{value:?}");
        }
        check(Some(Value::from("worker-1")), Some("worker-1"));
        check(Some(Value::from("")), Some(""));
        check(Some(Value::from(1)), None);
        check(Some(Value::Null), None);
        check(None, None);
    }
}
