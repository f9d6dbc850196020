//! The catalogue: which tools are advertised and callable under a configuration, and how one
//! call is answered (firewall, handler, timeout, cancellation, alias wrapper, envelope).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bernstein_journal::audit::Timestamp;
use bernstein_journal::handle::ProgressVector;
use bernstein_protocol::pyjson::{Dialect, Object, Value as PyValue};

use crate::config::{ToolConfig, Validation};
use crate::context::ToolContext;
use crate::envelope::{Meter, alias_wrapper, envelope_of, parsed_or_raw};
use crate::error::Error;
use crate::firewall;
use crate::outcome::ToolOutcome;
use crate::output;
use crate::registry::{ALIASES, AliasDef, TOOLS, ToolDef};
use crate::spec::ToolSpec;
use crate::tools::{self, Payload};

/// What a callable name runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    /// A tool.
    Tool(&'static ToolDef),
    /// A deprecated alias.
    Alias(&'static AliasDef),
}

/// One callable name.
struct Entry {
    target: Target,
    /// The input schema's validator, compiled at the name's first call rather than for every
    /// name when the server starts: compiling them all was about a third of building the
    /// catalogue, itself the largest part of start-up after loading the binary.
    validator: OnceLock<Result<jsonschema::Validator, Error>>,
    schema: serde_json::Value,
    /// `timeoutSeconds` of the schema: the value as written (for the overrun message) and as
    /// seconds.
    timeout: Option<(PyValue, f64)>,
}

/// A `tools/call` whose arguments went through the input firewall once
/// ([`Catalogue::prepare`]): the arguments as the handler will see them and the firewall's
/// verdict on them.
pub struct PreparedCall<'c> {
    name: &'c str,
    entry: &'c Entry,
    permissive: bool,
    arguments: serde_json::Value,
    refusal: Option<firewall::Refusal>,
}

impl PreparedCall<'_> {
    /// Whether the call reaches its handler: the firewall passed the arguments, or only warns
    /// about them because validation is permissive.
    pub fn admitted(&self) -> bool {
        self.refusal.is_none() || self.permissive
    }
}

/// The tool catalogue of one server configuration.
pub struct Catalogue {
    config: ToolConfig,
    tools: Vec<ToolSpec>,
    entries: HashMap<&'static str, Entry>,
    registered: Vec<String>,
    /// The last progress vector notified per resolved run id: ticks are sent only when the
    /// journal fold strictly advances past it.
    pub(crate) ticks: Mutex<HashMap<String, ProgressVector>>,
}

impl std::fmt::Debug for Catalogue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalogue")
            .field("config", &self.config)
            .field("registered", &self.registered)
            .finish_non_exhaustive()
    }
}

fn parse_schema(name: &str, text: &str) -> Result<PyValue, Error> {
    PyValue::parse(text).map_err(|e| Error::InvalidSchema {
        tool: name.to_owned(),
        reason: format!("not JSON: {e:?}"),
    })
}

fn compile(name: &str, schema: &serde_json::Value) -> Result<jsonschema::Validator, Error> {
    jsonschema::draft7::new(schema).map_err(|e| Error::InvalidSchema {
        tool: name.to_owned(),
        reason: e.to_string(),
    })
}

impl Entry {
    /// The validator of `name`'s input schema, compiled on first use.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSchema`] when the schema does not compile (the test
    /// `every_schema_compiles` holds every tool and alias of every tier to compiling).
    fn validator(&self, name: &str) -> Result<&jsonschema::Validator, &Error> {
        self.validator
            .get_or_init(|| compile(name, &self.schema))
            .as_ref()
    }

    /// Whether `arguments` pass the input firewall; a schema that does not compile refuses
    /// every call, saying so, rather than letting an unchecked one through.
    fn check(&self, name: &str, arguments: &serde_json::Value) -> Result<(), firewall::Refusal> {
        match self.validator(name) {
            Ok(validator) => firewall::check(name, arguments, validator, &self.schema),
            Err(e) => Err(firewall::Refusal {
                tool: name.to_owned(),
                code: firewall::INVALID_PARAMS,
                message: e.to_string(),
                errors: Vec::new(),
            }),
        }
    }
}

fn timeout_of(schema: &PyValue) -> Option<(PyValue, f64)> {
    let value = schema.as_object()?.get("timeoutSeconds")?;
    let seconds = value.as_f64()?;
    (seconds.is_finite() && seconds > 0.0).then(|| (value.clone(), seconds))
}

impl Catalogue {
    /// Builds the catalogue for `config`: the tools of its tier (and `bernstein_verify_lineage`
    /// only with lineage enabled), then the aliases whose replacement survived, when aliases are
    /// enabled.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSchema`] when a packaged schema does not compile (a build defect; the
    /// crate's tests compile every schema).
    pub fn new(config: &ToolConfig) -> Result<Catalogue, Error> {
        let mut tools = Vec::new();
        let mut entries = HashMap::new();
        let mut registered = Vec::new();
        for def in &TOOLS {
            if def.tier > config.tier || (def.needs_lineage && !config.lineage_enabled) {
                continue;
            }
            let ordered = parse_schema(def.name, def.schema)?;
            let schema = ordered.to_serde();
            let ordered_object = ordered.as_object().cloned().unwrap_or_default();
            let description = ordered_object
                .get("description")
                .and_then(PyValue::as_str)
                .unwrap_or_default()
                .to_owned();
            let ordered_output = output::output_schema(def, config.cost_meter);
            tools.push(ToolSpec {
                name: def.name.to_owned(),
                title: None,
                description,
                input_schema: schema.clone(),
                output_schema: Some(ordered_output.to_serde()),
                task_support: def.task_support,
                annotations: def.annotations,
                timeout_seconds: timeout_of(&ordered).map(|(_, s)| s),
                ordered_input_schema: ordered_object,
                ordered_output_schema: Some(ordered_output),
            });
            entries.insert(
                def.name,
                Entry {
                    target: Target::Tool(def),
                    validator: OnceLock::new(),
                    schema: schema.clone(),
                    timeout: timeout_of(&ordered),
                },
            );
            registered.push(def.name.to_owned());
        }
        if config.aliases_enabled {
            for alias in &ALIASES {
                if !entries.contains_key(alias.replacement) {
                    continue;
                }
                let ordered = parse_schema(alias.name, alias.schema)?;
                let schema = ordered.to_serde();
                entries.insert(
                    alias.name,
                    Entry {
                        target: Target::Alias(alias),
                        validator: OnceLock::new(),
                        schema,
                        timeout: timeout_of(&ordered),
                    },
                );
                registered.push(alias.name.to_owned());
            }
        }
        Ok(Catalogue {
            config: *config,
            tools,
            entries,
            registered,
            ticks: Mutex::new(HashMap::new()),
        })
    }

    /// The names `config` advertises, in `tools/list` order, without building the catalogue
    /// (no schema is parsed or compiled): what the capability card lists per tier.
    pub fn advertised_names(config: &ToolConfig) -> Vec<&'static str> {
        TOOLS
            .iter()
            .filter(|def| def.tier <= config.tier && (!def.needs_lineage || config.lineage_enabled))
            .map(|def| def.name)
            .collect()
    }

    /// The configuration the catalogue was built with.
    pub fn config(&self) -> &ToolConfig {
        &self.config
    }

    /// The advertised tools, in `tools/list` order. Aliases are never advertised.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// Whether `name` can be called (an advertised tool or an enabled alias).
    pub fn is_callable(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Every callable name: the tools in registration order, then the enabled aliases.
    pub fn registered_names(&self) -> &[String] {
        &self.registered
    }

    /// The skill index served as `bernstein://skills/index` (the same bytes `load_skill`
    /// answers without a name). The skill packs are compiled into this crate, so the index does
    /// not depend on `_project_root`; the parameter keeps the call site stable for
    /// project-local packs.
    ///
    /// # Errors
    ///
    /// None today: the packaged index is always available.
    pub fn skill_index_text(&self, _project_root: &std::path::Path) -> Result<String, Error> {
        Ok(crate::tools::skills::skill_index_text())
    }

    /// The advertised spec of `name`, when it is an advertised tool.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|spec| spec.name == name)
    }

    /// A `tools/call` of `name` passed through the input firewall once, to be asked whether it
    /// is admitted ([`PreparedCall::admitted`]: the firewall passes the arguments, or only warns
    /// in permissive mode) and then run ([`Catalogue::call_prepared`]) without checking the
    /// arguments a second time. The dispatcher anchors only admitted calls: bad input changes
    /// nothing on disk, not even the call journal. `None` for a name the catalogue does not
    /// serve, which [`Catalogue::unknown_tool`] answers.
    pub fn prepare(&self, name: &str, arguments: serde_json::Value) -> Option<PreparedCall<'_>> {
        let (name, entry) = self.entries.get_key_value(name)?;
        let arguments = drop_unsupplied(name, firewall::drop_nulls(arguments));
        let refusal = entry.check(name, &arguments).err();
        Some(PreparedCall {
            name,
            entry,
            permissive: self.config.validation == Validation::Permissive,
            arguments,
            refusal,
        })
    }

    /// The structured content of a task-augmented `bernstein_run` once its task has settled,
    /// shaped by `bernstein_run`'s `outputSchema`: the run payload (`task_id`, `title`, current
    /// `status`, `run_id`, `poll_after_ms`), inside the `_meter` envelope when the meter is on
    /// (`call_id` is the span id of the request asking for the result). A host that validates
    /// `structuredContent` against the advertised schema therefore accepts the task's result.
    pub fn settled_run_result(&self, payload: Object, call_id: &str) -> serde_json::Value {
        if !self.config.cost_meter {
            return PyValue::Object(payload).to_serde();
        }
        let meter = crate::envelope::Meter {
            tool: "bernstein_run".to_owned(),
            call_id: call_id.to_owned(),
            latency_ms: 0.0,
            started: bernstein_journal::audit::Timestamp::now(),
            ok: true,
        };
        PyValue::Object(
            Object::new()
                .with("result", payload)
                .with("_meter", meter.to_object()),
        )
        .to_serde()
    }

    /// Answers one `tools/call`.
    ///
    /// An unknown (or out-of-tier, or disabled alias) name answers `Unknown tool: <name>` with
    /// `isError` (the dispatcher answers such a call with the JSON-RPC error -32602 before it
    /// gets here). Otherwise the arguments pass the input firewall; a refusal is the tool's
    /// payload (strict) or a logged warning (permissive). The handler's payload is wrapped for
    /// aliases, then enveloped with `_meter` when the meter is on. A declared timeout that
    /// runs out answers the reference's timeout object; a cancelled call answers its partial
    /// work with `cancelled: true`. A refusal, an error payload (a top-level `error` string)
    /// and a timeout set `isError: true` and `_meter.ok: false`; the payload bytes are kept.
    pub async fn call(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: serde_json::Value,
    ) -> ToolOutcome {
        match self.prepare(name, arguments) {
            Some(prepared) => self.call_prepared(ctx, prepared).await,
            None => Catalogue::unknown_tool(name),
        }
    }

    /// The answer to a `tools/call` of a name the catalogue does not serve (unknown, out of
    /// tier, or a disabled alias): the reference's `Unknown tool: <name>` tool error.
    pub fn unknown_tool(name: &str) -> ToolOutcome {
        ToolOutcome::error_text(format!("Unknown tool: {name}"))
    }

    /// [`Catalogue::call`] for a call already through the firewall ([`Catalogue::prepare`]).
    pub async fn call_prepared(
        &self,
        ctx: &ToolContext,
        prepared: PreparedCall<'_>,
    ) -> ToolOutcome {
        let PreparedCall {
            name,
            entry,
            arguments,
            refusal,
            ..
        } = prepared;
        let started = Timestamp::now();
        let clock = Instant::now();
        let args = match &arguments {
            serde_json::Value::Object(_) => match PyValue::from(&arguments) {
                PyValue::Object(object) => object,
                _ => Object::new(),
            },
            _ => Object::new(),
        };
        // Each arm yields the payload, whether it reports a refusal or an error, and the
        // payload parsed when it was parsed to find that out and left unchanged since. A
        // success a handler answered as a value stays a value: the envelope takes it as it is.
        let work = async {
            if let Some(refusal) = &refusal {
                match self.config.validation {
                    Validation::Strict => {
                        return (
                            Payload::Text(refusal_text(entry.target, refusal)),
                            true,
                            None,
                        );
                    }
                    Validation::Permissive => tracing::warn!(
                        tool = name,
                        "input validation failed (permissive mode, call goes ahead): {}",
                        refusal.payload_text()
                    ),
                }
            }
            match entry.target {
                Target::Tool(def) => match tools::run_tool(self, ctx, def.name, &args).await {
                    Payload::Value(value) if !reports_failure(&value) => {
                        (Payload::Value(value), false, None)
                    }
                    payload => {
                        let payload = payload.into_text();
                        let (failed, parsed) = inspect_payload(&payload);
                        let parsed = (!failed).then_some(parsed).flatten();
                        let payload = relative_if(failed, payload, &ctx.workdir);
                        (Payload::Text(payload), failed, parsed)
                    }
                },
                Target::Alias(alias) => {
                    let payload = tools::run_alias(self, ctx, alias.name, &args).await;
                    let (failed, _) = inspect_payload(&payload);
                    let payload = relative_if(failed, payload, &ctx.workdir);
                    (
                        Payload::Text(alias_wrapper(alias.name, alias.replacement, &payload)),
                        failed,
                        None,
                    )
                }
            }
        };
        let bounded = async {
            match &entry.timeout {
                Some((declared, seconds)) => {
                    match tokio::time::timeout(Duration::from_secs_f64(*seconds), work).await {
                        Ok(payload) => Ok(payload),
                        Err(_) => Err(declared.clone()),
                    }
                }
                None => Ok(work.await),
            }
        };
        let result = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => None,
            result = bounded => Some(result),
        };
        let failed = matches!(result, Some(Ok((_, true, _))));
        let meter = Meter {
            tool: name.to_owned(),
            call_id: ctx.meta.call_id.clone(),
            latency_ms: clock.elapsed().as_secs_f64() * 1000.0,
            started,
            ok: !failed,
        };
        let meter_value = PyValue::Object(meter.to_object()).to_serde();
        match result {
            None => cancelled_outcome(name, meter_value),
            Some(Err(declared)) => timeout_outcome(name, &declared),
            Some(Ok((payload, _, parsed))) => {
                let text = if self.config.cost_meter {
                    let result = match payload {
                        Payload::Value(value) => value,
                        Payload::Text(text) => parsed.unwrap_or_else(|| parsed_or_raw(&text)),
                    };
                    envelope_of(result, &meter)
                } else {
                    payload.into_text()
                };
                let structured = match entry.target {
                    Target::Tool(def) if def.structured => {
                        serde_json::from_str(&text).unwrap_or_else(|_| wrapper_structure(&text))
                    }
                    _ => wrapper_structure(&text),
                };
                ToolOutcome {
                    text,
                    structured: Some(structured),
                    is_error: failed,
                    cancelled: false,
                    partial: Vec::new(),
                    meter: self.config.cost_meter.then_some(meter_value),
                }
            }
        }
    }
}

/// Whether a handler's payload reports a refusal or an error: a JSON object whose top-level
/// `error` is a non-empty string (the shape of every error and gate refusal the handlers
/// answer; `load_skill` carries `"error": null` on success). Also returns the payload parsed
/// (`None` when it is not JSON), so the envelope reuses this one parse.
fn inspect_payload(payload: &str) -> (bool, Option<PyValue>) {
    match PyValue::parse(payload) {
        Ok(value) => (reports_failure(&value), Some(value)),
        Err(_) => (false, None),
    }
}

/// Whether a payload's value reports a refusal or an error (see [`inspect_payload`]).
fn reports_failure(value: &PyValue) -> bool {
    value
        .as_object()
        .and_then(|object| object.get("error"))
        .and_then(PyValue::as_str)
        .is_some_and(|error| !error.is_empty())
}

/// An error payload with the project root's absolute path taken out, so an error text (the
/// journal's `{op} {path}: {source}`, a filesystem message) names files relative to the root
/// and does not tell a remote client how the host is laid out. Both spellings of the root are
/// replaced, as configured and canonical; a success payload is left as it is.
fn relative_if(failed: bool, payload: String, root: &std::path::Path) -> String {
    if !failed {
        return payload;
    }
    relative_to_root(payload, root)
}

/// `text` with the project root's absolute path taken out (both its configured and canonical
/// spellings): paths under the root read relative to it, the root itself reads as `.`. Every
/// error text a client can see goes through this, whichever part of the server produced it.
pub fn relative_to_root(text: String, root: &std::path::Path) -> String {
    let mut roots = vec![root.to_path_buf()];
    if let Ok(canonical) = std::fs::canonicalize(root)
        && canonical != root
    {
        roots.push(canonical);
    }
    let mut text = text;
    for root in roots {
        let Some(root) = root.to_str().map(|r| r.trim_end_matches('/')) else {
            continue;
        };
        if root.is_empty() {
            continue;
        }
        text = text.replace(&format!("{root}/"), "");
        // The root itself, where it ends a path (before a quote, a colon, a space or the end
        // of a string), reads as `.`; a longer sibling such as `<root>-old` is left alone.
        for end in [':', '"', '\'', ' ', ')', ','] {
            text = text.replace(&format!("{root}{end}"), &format!(".{end}"));
        }
    }
    text
}

/// The hint a firewall refusal carries for the tools whose refusals are promised as the
/// structured tool error `{error, hint}`.
fn firewall_hint(tool: &str) -> Option<&'static str> {
    match tool {
        "bernstein_shutdown_orchestrator" | "bernstein_stop" => {
            Some(bernstein_gate::shutdown::REFUSAL_HINT)
        }
        "bernstein_approve"
        | "bernstein_complete"
        | "bernstein_cancel"
        | "bernstein_post_artifact" => Some(FIREWALL_HINT),
        _ => None,
    }
}

/// The hint of a firewall refusal that names no tool-specific remedy.
const FIREWALL_HINT: &str =
    "the arguments were refused before the call ran; fix those listed in jsonrpc_error.data.errors";

/// The payload of a firewall refusal: the reference's `{error, jsonrpc_error}`, with a `hint`
/// after `error` for the tools whose every refusal is the structured tool error (so a NUL or an
/// over-long `workdir` answers in the same shape as the shutdown barrier's own refusals).
fn refusal_text(target: Target, refusal: &firewall::Refusal) -> String {
    let name = match target {
        Target::Tool(def) => def.name,
        Target::Alias(alias) => alias.name,
    };
    let Some(hint) = firewall_hint(name) else {
        return refusal.payload_text();
    };
    let mut shaped = Object::new();
    for (key, value) in refusal.payload().iter() {
        shaped.insert(key, value.clone());
        if key == "error" {
            shaped.insert("hint", hint);
        }
    }
    PyValue::Object(shaped).dumps(Dialect::PY_ROW)
}

/// Optional text arguments the reference treats as "not supplied" when empty: they are left
/// out of validation and of the request, so an empty `reason` or `body` is not refused by a
/// `minLength` meant for supplied values.
const EMPTY_MEANS_ABSENT: [(&str, &[&str]); 3] = [
    (
        "bernstein_post_artifact",
        &[
            "body",
            "url",
            "link_kind",
            "tool",
            "tool_version",
            "pinned_ruleset_or_feed_digest",
            "invocation_argv_hash",
            "target",
        ],
    ),
    ("bernstein_cancel", &["reason"]),
    ("bernstein_scenario", &["context"]),
];

fn drop_unsupplied(tool: &str, arguments: serde_json::Value) -> serde_json::Value {
    let Some((_, keys)) = EMPTY_MEANS_ABSENT.iter().find(|(name, _)| *name == tool) else {
        return arguments;
    };
    match arguments {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.into_iter()
                .filter(|(key, value)| {
                    !(keys.contains(&key.as_str()) && value.as_str() == Some(""))
                })
                .collect(),
        ),
        other => other,
    }
}

/// FastMCP's structured content for a plain-text tool: `{"result": <text>}`.
fn wrapper_structure(text: &str) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    map.insert(
        "result".to_owned(),
        serde_json::Value::String(text.to_owned()),
    );
    serde_json::Value::Object(map)
}

/// The reference's declared-timeout answer: not enveloped, and (beyond the reference) an error
/// result.
fn timeout_outcome(name: &str, declared: &PyValue) -> ToolOutcome {
    let text = PyValue::Object(
        Object::new()
            .with(
                "error",
                format!(
                    "tool {name} exceeded its declared timeout of {}s",
                    declared.dumps(Dialect::PY_ROW)
                ),
            )
            .with("tool", name)
            .with("timeoutSeconds", declared.clone())
            .with("timeout", true),
    )
    .dumps(Dialect::PY_ROW);
    ToolOutcome {
        text,
        structured: None,
        is_error: true,
        cancelled: false,
        partial: Vec::new(),
        meter: None,
    }
}

/// A call stopped by its cancellation token: the one chunk of work every call has done (it was
/// running), as the reference's remote transport seeds it. The meter is always attached, both
/// as [`ToolOutcome::meter`] and as `structured["_meter"]`, for the transport's envelope.
fn cancelled_outcome(name: &str, meter: serde_json::Value) -> ToolOutcome {
    let chunk = PyValue::Object(Object::new().with("status", "running").with("tool", name))
        .dumps(Dialect::PY_ROW);
    ToolOutcome {
        text: chunk.clone(),
        structured: Some(serde_json::json!({ "_meter": meter.clone() })),
        is_error: false,
        cancelled: true,
        partial: vec![chunk],
        meter: Some(meter),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bernstein_journal::key::AuditKey;
    use bernstein_tasks::embedded::EmbeddedStore;
    use serde_json::json;

    use super::*;
    use crate::{Backend, Tier};

    /// Validators are compiled at a name's first call, so a schema that did not compile would
    /// no longer stop the server from starting: this holds every tool and alias of every tier
    /// to compiling, and a broken schema to refusing its calls instead of letting them through.
    #[test]
    fn every_schema_compiles() {
        let mut compiled = 0;
        for tier in Tier::ALL {
            let config = ToolConfig {
                tier,
                aliases_enabled: true,
                lineage_enabled: true,
                ..ToolConfig::default()
            };
            let catalogue = Catalogue::new(&config).unwrap();
            for (name, entry) in &catalogue.entries {
                assert!(
                    entry.validator.get().is_none(),
                    "{name} compiled before its call"
                );
                entry
                    .validator(name)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                compiled += 1;
            }
        }
        assert!(compiled > 50, "only {compiled} schemas");
        let broken = Entry {
            target: Target::Tool(&TOOLS[0]),
            validator: OnceLock::new(),
            schema: serde_json::json!({"type": "object", "properties": {"x": {"type": 7}}}),
            timeout: None,
        };
        let refusal = broken
            .check("bernstein_run", &serde_json::json!({"x": 1}))
            .unwrap_err();
        assert!(
            refusal.message.contains("bernstein_run"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn timeout_answers_name_the_declared_value_as_written() {
        let check = |name: &str, declared: &str, expect: &str| {
            let value = PyValue::parse(declared).unwrap();
            let outcome = timeout_outcome(name, &value);
            assert_eq!(outcome.text, expect);
            assert!(outcome.is_error);
            assert!(outcome.structured.is_none());
        };
        check(
            "bernstein_subscribe",
            "65",
            r#"{"error": "tool bernstein_subscribe exceeded its declared timeout of 65s", "tool": "bernstein_subscribe", "timeoutSeconds": 65, "timeout": true}"#,
        );
        check(
            "load_skill",
            "30.0",
            r#"{"error": "tool load_skill exceeded its declared timeout of 30.0s", "tool": "load_skill", "timeoutSeconds": 30.0, "timeout": true}"#,
        );
    }

    #[test]
    fn error_payloads_name_paths_relative_to_the_root() {
        let root = std::path::Path::new("/srv/proj");
        let error = r#"{"error": "read /srv/proj/.sdd/x.json: gone; list /srv/proj: no; /srv/proj-old/a", "hint": "h"}"#;
        assert_eq!(
            relative_if(true, error.to_owned(), root),
            r#"{"error": "read .sdd/x.json: gone; list .: no; /srv/proj-old/a", "hint": "h"}"#
        );
        let success = r#"{"path": "/srv/proj/.sdd/runtime/signals/SHUTDOWN"}"#;
        assert_eq!(relative_if(false, success.to_owned(), root), success);
    }

    #[test]
    fn declared_timeouts_come_from_the_schema_files() {
        let catalogue = Catalogue::new(&ToolConfig::default()).unwrap();
        let timeouts: Vec<(&str, f64)> = catalogue
            .tools()
            .iter()
            .filter_map(|t| t.timeout_seconds.map(|s| (t.name.as_str(), s)))
            .collect();
        assert_eq!(
            timeouts,
            [
                ("bernstein_subscribe", 65.0),
                ("bernstein_create_task", 30.0),
                ("bernstein_post_artifact", 30.0),
                ("load_skill", 30.0)
            ]
        );
    }

    /// Every setting differs from the default, so a catalogue that forgot its configuration
    /// would show it.
    const UNUSUAL: ToolConfig = ToolConfig {
        tier: Tier::Core,
        aliases_enabled: false,
        cost_meter: false,
        validation: Validation::Permissive,
        lineage_enabled: false,
    };

    #[test]
    fn the_catalogue_keeps_its_configuration_and_shows_it_with_its_names() {
        let catalogue = Catalogue::new(&UNUSUAL).unwrap();
        assert_eq!(*catalogue.config(), UNUSUAL);
        // The debug form is what a log line shows of the catalogue: the configuration and the
        // callable names, the schemas and validators left out.
        assert_eq!(
            format!("{catalogue:?}"),
            format!(
                "Catalogue {{ config: {UNUSUAL:?}, registered: {:?}, .. }}",
                ["bernstein_run", "bernstein_status", "bernstein_run_status"]
            )
        );
    }

    /// Only an advertised tool has a spec: an alias is callable but never listed, and a tool of
    /// a higher tier is neither.
    #[test]
    fn a_spec_is_found_for_advertised_tools_only() {
        let catalogue = Catalogue::new(&ToolConfig::default()).unwrap();
        let check = |name: &str, advertised: bool| {
            let found = catalogue.spec(name).map(|spec| spec.name.as_str());
            assert_eq!(found, advertised.then_some(name), "{name}");
        };
        check("bernstein_status", true);
        check("load_skill", true);
        check("bernstein_health", false);
        check("bernstein_scenario", false);
        check("no_such_tool", false);
        assert!(catalogue.is_callable("bernstein_health"));
    }

    /// The dispatcher anchors a call only when it is admitted: the name is callable and the
    /// firewall passes the arguments, or only warns about them in permissive mode.
    #[test]
    fn admission_is_the_firewall_verdict_unless_validation_is_permissive() {
        let strict = Catalogue::new(&ToolConfig::default()).unwrap();
        let permissive = Catalogue::new(&ToolConfig {
            validation: Validation::Permissive,
            ..ToolConfig::default()
        })
        .unwrap();
        let check = |catalogue: &Catalogue, name: &str, arguments: serde_json::Value, expect| {
            assert_eq!(
                catalogue
                    .prepare(name, arguments.clone())
                    .is_some_and(|prepared| prepared.admitted()),
                expect,
                "{:?} {name} {arguments}",
                catalogue.config().validation
            );
        };
        check(&strict, "bernstein_status", json!({}), true);
        // A top-level null is dropped before the schema sees it.
        check(&strict, "bernstein_status", json!({"status": null}), true);
        check(&strict, "bernstein_status", json!({"extra": 1}), false);
        check(&strict, "bernstein_status", json!(["status"]), false);
        check(&strict, "no_such_tool", json!({}), false);
        check(&permissive, "bernstein_status", json!({"extra": 1}), true);
        check(&permissive, "bernstein_status", json!({}), true);
        check(&permissive, "no_such_tool", json!({}), false);
        // The firewall's verdict is taken once, when the call is prepared, and a name the
        // catalogue does not serve prepares nothing.
        assert!(strict.prepare("no_such_tool", json!({})).is_none());
        let refused = strict
            .prepare("bernstein_status", json!({"extra": 1}))
            .unwrap();
        assert!(!refused.admitted() && refused.refusal.is_some());
        let warned = permissive
            .prepare("bernstein_status", json!({"extra": 1}))
            .unwrap();
        assert!(warned.admitted() && warned.refusal.is_some());
    }

    /// A settled task-augmented `bernstein_run` is shaped by its output schema: the bare
    /// payload with the meter off, inside a `_meter` envelope that names the asking request
    /// with it on.
    #[test]
    fn a_settled_run_result_is_enveloped_only_with_the_meter_on() {
        let payload = || {
            Object::new()
                .with("task_id", "3f2a9c1b7d0e")
                .with("status", "done")
        };
        let bare = Catalogue::new(&ToolConfig {
            cost_meter: false,
            ..ToolConfig::default()
        })
        .unwrap()
        .settled_run_result(payload(), "0af4fa795b5c839a");
        assert_eq!(bare, json!({"task_id": "3f2a9c1b7d0e", "status": "done"}));
        let mut enveloped = Catalogue::new(&ToolConfig::default())
            .unwrap()
            .settled_run_result(payload(), "0af4fa795b5c839a");
        // The time stamp is the settling time, so only its form is checked.
        let ts = enveloped["_meter"]["ts"].take();
        assert!(ts.as_str().is_some_and(|ts| ts.ends_with('Z')), "{ts}");
        assert_eq!(
            enveloped,
            json!({
                "result": {"task_id": "3f2a9c1b7d0e", "status": "done"},
                "_meter": {
                    "tool": "bernstein_run",
                    "call_id": "0af4fa795b5c839a",
                    "latency_ms": 0.0,
                    "cost_usd": 0.0,
                    "ok": true,
                    "ts": null
                }
            })
        );
    }

    /// A project directory with an embedded store, and a context whose workdir is its root.
    fn project() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_master_bytes(b"0123456789abcdef0123456789abcdef".to_vec());
        let store = EmbeddedStore::open(dir.path(), Some(key.clone())).unwrap();
        let ctx = ToolContext::new(dir.path(), Arc::new(Backend::embedded(store, key)));
        (dir, ctx)
    }

    /// `bernstein://skills/index` serves the bytes `load_skill` answers without a name.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_skill_index_is_what_load_skill_answers_without_a_name() {
        let (dir, ctx) = project();
        let catalogue = Catalogue::new(&ToolConfig {
            cost_meter: false,
            ..ToolConfig::default()
        })
        .unwrap();
        let answered = catalogue.call(&ctx, "load_skill", json!({})).await;
        assert!(!answered.is_error, "{}", answered.text);
        assert!(answered.text.contains("content_hash"), "{}", answered.text);
        assert_eq!(
            catalogue.skill_index_text(dir.path()).unwrap(),
            answered.text
        );
    }

    /// `timeoutSeconds` bounds a call only when it is a positive finite number; zero, a
    /// negative or non-finite value, or a string, declares no timeout (a zero bound would
    /// stop every call at once, and a negative or infinite one cannot be a `Duration`).
    #[test]
    fn only_a_positive_finite_timeout_is_declared() {
        let check = |schema: &str, expect: Option<f64>| {
            let got = timeout_of(&PyValue::parse(schema).unwrap()).map(|(_, seconds)| seconds);
            assert_eq!(got, expect, "{schema}");
        };
        check(r#"{"timeoutSeconds": 65}"#, Some(65.0));
        check(r#"{"timeoutSeconds": 0.5}"#, Some(0.5));
        check(r#"{"timeoutSeconds": 0}"#, None);
        check(r#"{"timeoutSeconds": 0.0}"#, None);
        check(r#"{"timeoutSeconds": -1}"#, None);
        check(r#"{"timeoutSeconds": Infinity}"#, None);
        check(r#"{"timeoutSeconds": NaN}"#, None);
        check(r#"{"timeoutSeconds": "30"}"#, None);
        check(r#"{"type": "object"}"#, None);
        check("[]", None);
    }

    /// With the meter on, an error payload is enveloped as it reads after the root's path was
    /// taken out, not as the handler first wrote it.
    #[tokio::test(flavor = "multi_thread")]
    async fn an_enveloped_error_names_paths_relative_to_the_root() {
        let (dir, ctx) = project();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let catalogue = Catalogue::new(&ToolConfig::default()).unwrap();
        let workdir = dir.path().join("sub");
        let outcome = catalogue
            .call(
                &ctx,
                "bernstein_shutdown_orchestrator",
                json!({ "workdir": workdir.to_str().unwrap() }),
            )
            .await;
        assert!(outcome.is_error, "{}", outcome.text);
        let root = dir.path().to_str().unwrap();
        assert!(!outcome.text.contains(root), "{}", outcome.text);
        let body: serde_json::Value = serde_json::from_str(&outcome.text).unwrap();
        assert_eq!(
            body["result"]["error"],
            "workdir is not an existing Bernstein project root (no .sdd directory): 'sub'"
        );
    }

    /// `_meter.latency_ms` is the call's own time in milliseconds: more than nothing, and no
    /// more than the time the test saw pass around the call.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_meter_counts_the_call_time_in_milliseconds() {
        let (_dir, ctx) = project();
        let catalogue = Catalogue::new(&ToolConfig::default()).unwrap();
        let clock = Instant::now();
        let outcome = catalogue.call(&ctx, "bernstein_status", json!({})).await;
        let around_ms = clock.elapsed().as_secs_f64() * 1000.0;
        let latency_ms = outcome.meter.unwrap()["latency_ms"].as_f64().unwrap();
        // The meter rounds to three places, so it may read up to half a microsecond over.
        assert!(
            latency_ms > 0.0 && latency_ms <= around_ms + 0.0005,
            "{latency_ms} ms metered, {around_ms} ms around the call"
        );
    }

    /// A root reached through a symlink is taken out of an error text in both spellings: as
    /// configured and as the file system resolves it.
    #[test]
    fn a_symlinked_root_is_taken_out_in_both_spellings() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let text = format!(
            "read {}/a.json: gone; read {}/b.json: gone",
            link.display(),
            real.display()
        );
        assert_eq!(
            relative_to_root(text, &link),
            "read a.json: gone; read b.json: gone"
        );
    }

    /// A firewall refusal of the tools whose refusals are promised as `{error, hint}` carries
    /// its hint right after `error`, aliases included; other tools answer the bare refusal.
    #[test]
    fn firewall_refusals_carry_the_promised_hints() {
        let refusal = firewall::Refusal {
            tool: "t".to_owned(),
            code: firewall::INVALID_PARAMS,
            message: firewall::SCHEMA_MESSAGE.to_owned(),
            errors: Vec::new(),
        };
        let check = |name: &str, hint: Option<&str>| {
            let target = TOOLS
                .iter()
                .find(|def| def.name == name)
                .map(Target::Tool)
                .or_else(|| {
                    ALIASES
                        .iter()
                        .find(|alias| alias.name == name)
                        .map(Target::Alias)
                })
                .unwrap();
            let text = refusal_text(target, &refusal);
            let parsed = PyValue::parse(&text).unwrap();
            let body = parsed.as_object().unwrap();
            let keys: Vec<&str> = body.keys().collect();
            match hint {
                Some(hint) => {
                    assert_eq!(keys, ["error", "hint", "jsonrpc_error"], "{name}");
                    assert_eq!(body.get("hint").and_then(PyValue::as_str), Some(hint));
                }
                None => assert_eq!(text, refusal.payload_text(), "{name}"),
            }
        };
        let shutdown = bernstein_gate::shutdown::REFUSAL_HINT;
        check("bernstein_shutdown_orchestrator", Some(shutdown));
        check("bernstein_stop", Some(shutdown));
        for name in [
            "bernstein_approve",
            "bernstein_complete",
            "bernstein_cancel",
            "bernstein_post_artifact",
        ] {
            check(name, Some(FIREWALL_HINT));
        }
        check("bernstein_status", None);
        check("bernstein_health", None);
    }

    /// An empty string stands for an argument not supplied only for the listed optional
    /// arguments of the listed tools; a non-empty one, another argument or another tool's is
    /// kept.
    #[test]
    fn only_listed_empty_arguments_are_taken_as_unsupplied() {
        let check = |tool: &str, arguments: serde_json::Value, expect: serde_json::Value| {
            assert_eq!(
                drop_unsupplied(tool, arguments.clone()),
                expect,
                "{tool} {arguments}"
            );
        };
        check(
            "bernstein_cancel",
            json!({"task_id": "a", "reason": ""}),
            json!({"task_id": "a"}),
        );
        check(
            "bernstein_cancel",
            json!({"task_id": "a", "reason": "why"}),
            json!({"task_id": "a", "reason": "why"}),
        );
        check(
            "bernstein_cancel",
            json!({"task_id": ""}),
            json!({"task_id": ""}),
        );
        check(
            "bernstein_post_artifact",
            json!({"key": "", "body": "", "url": "", "target": "t"}),
            json!({"key": "", "target": "t"}),
        );
        check("bernstein_scenario", json!({"context": ""}), json!({}));
        check(
            "bernstein_status",
            json!({"reason": ""}),
            json!({"reason": ""}),
        );
        check("bernstein_cancel", json!(["reason"]), json!(["reason"]));
    }
}
