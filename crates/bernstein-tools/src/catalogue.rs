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

    /// Whether a `tools/call` of `name` with `arguments` would reach its handler: the name is
    /// callable and the input firewall does not refuse the arguments (in permissive mode a
    /// refusal is only a warning, so the call is admitted). The dispatcher anchors only admitted
    /// calls: bad input changes nothing on disk, not even the call journal.
    pub fn admits(&self, name: &str, arguments: &serde_json::Value) -> bool {
        let Some(entry) = self.entries.get(name) else {
            return false;
        };
        let arguments = drop_unsupplied(name, firewall::drop_nulls(arguments.clone()));
        self.config.validation == Validation::Permissive || entry.check(name, &arguments).is_ok()
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
        let Some(entry) = self.entries.get(name) else {
            return ToolOutcome::error_text(format!("Unknown tool: {name}"));
        };
        let started = Timestamp::now();
        let clock = Instant::now();
        let arguments = drop_unsupplied(name, firewall::drop_nulls(arguments));
        let refusal = entry.check(name, &arguments).err();
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
    use super::*;
    use crate::Tier;

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
}
