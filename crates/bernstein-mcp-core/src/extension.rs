//! The extension point: tools, prompts and resources a host adds beside Bernstein's own.
//!
//! A host that embeds the dispatcher (the conformance server serves the official suite's
//! fixtures this way) passes an [`Extension`] to [`crate::DispatcherBuilder::extension`]. Its
//! entries are listed after the built-in ones and served through the same dispatcher as them:
//! the same lifecycles and result stamping, the same per-stream limits and hard timeouts, the
//! same cancellation, progress and logging, and every `tools/call` of an extension tool is
//! anchored like any other call. A name or URI the extension shares with a built-in one is
//! refused when the dispatcher is built, so an extension can add but never replace.
//!
//! Every method has a default that adds nothing, so an extension implements only what it adds.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Map, Value as JsonValue, json};
use tokio_util::sync::CancellationToken;

use crate::jsonrpc::{self, RpcError};
use crate::logging::{LogLevel, RequestLog};
use crate::scope::NotificationSink;

/// A boxed, sendable future (what an extension's tool call returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What an extension answers for one request: a result object, or a JSON-RPC error.
pub type ExtensionAnswer = Result<JsonValue, RpcError>;

/// One `tools/call` handed to an extension.
pub struct ExtensionCall {
    /// The call's arguments (an empty object when the client sent none).
    pub arguments: Map<String, JsonValue>,
    /// Cancelled when the client cancels the request; the tool should then answer what it has.
    pub cancel: CancellationToken,
    /// The call's `_meter.call_id`-style span id (the anchoring row's span when anchored).
    pub call_id: String,
    progress_token: Option<JsonValue>,
    notify: Arc<dyn NotificationSink>,
    log: RequestLog,
}

impl std::fmt::Debug for ExtensionCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtensionCall")
            .field("arguments", &self.arguments)
            .field("call_id", &self.call_id)
            .field("progress_token", &self.progress_token)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl ExtensionCall {
    pub(crate) fn new(
        arguments: Map<String, JsonValue>,
        cancel: CancellationToken,
        call_id: String,
        progress_token: Option<JsonValue>,
        notify: Arc<dyn NotificationSink>,
        log: RequestLog,
    ) -> ExtensionCall {
        ExtensionCall {
            arguments,
            cancel,
            call_id,
            progress_token,
            notify,
            log,
        }
    }

    /// Whether the client asked for progress (sent a `progressToken`).
    pub fn wants_progress(&self) -> bool {
        self.progress_token.is_some()
    }

    /// Sends `notifications/progress` for this call; a no-op when the client sent no token.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut params = Map::new();
        params.insert("progressToken".to_owned(), token.clone());
        params.insert("progress".to_owned(), json!(progress));
        if let Some(total) = total {
            params.insert("total".to_owned(), json!(total));
        }
        if let Some(message) = message {
            params.insert("message".to_owned(), json!(message));
        }
        self.notify.send(jsonrpc::notification(
            "notifications/progress",
            JsonValue::Object(params),
        ));
    }

    /// Sends `notifications/message` when `level` passes the threshold the client set.
    pub fn log(&self, level: LogLevel, logger: &str, data: JsonValue) {
        self.log.log(level, logger, data);
    }
}

/// Extra tools, prompts and resources served beside the built-in ones.
///
/// List entries are the MCP wire objects (`Tool`, `Prompt`, `Resource`, `ResourceTemplate`);
/// answers are result objects. The dispatcher adds what the lifecycle needs (`resultType`,
/// cache hints, the server's identity) to them, as it does to its own.
pub trait Extension: Send + Sync + std::fmt::Debug + 'static {
    /// `tools/list` entries, each with at least `name` and `inputSchema`.
    fn tools(&self) -> Vec<JsonValue> {
        Vec::new()
    }

    /// Runs the listed tool `name`; answers a `CallToolResult` object.
    fn call_tool<'a>(
        &'a self,
        name: &'a str,
        call: ExtensionCall,
    ) -> BoxFuture<'a, ExtensionAnswer> {
        Box::pin(async move {
            let _ = call;
            Err(RpcError::invalid_params(format!("Unknown tool: {name}")))
        })
    }

    /// `prompts/list` entries.
    fn prompts(&self) -> Vec<JsonValue> {
        Vec::new()
    }

    /// Renders the listed prompt `name`; answers a `GetPromptResult` object.
    fn get_prompt(&self, name: &str, arguments: &Map<String, JsonValue>) -> ExtensionAnswer {
        let _ = arguments;
        Err(RpcError::invalid_params(format!("Unknown prompt: {name}")))
    }

    /// `resources/list` entries.
    fn resources(&self) -> Vec<JsonValue> {
        Vec::new()
    }

    /// `resources/templates/list` entries.
    fn resource_templates(&self) -> Vec<JsonValue> {
        Vec::new()
    }

    /// Reads `uri`: `None` when the extension serves no such resource (a listed one or one of
    /// its templates), else a `ReadResourceResult` object or an error.
    fn read_resource(&self, uri: &str) -> Option<ExtensionAnswer> {
        let _ = uri;
        None
    }

    /// Completion values for `argument` (its current `value`) of the prompt or resource
    /// template `reference` (the request's `ref` object) this extension serves; `None` when the
    /// reference is not the extension's.
    fn complete(
        &self,
        reference: &JsonValue,
        argument: &str,
        value: &str,
    ) -> Option<Result<Vec<String>, RpcError>> {
        let _ = (reference, argument, value);
        None
    }
}

/// The names an extension lists, and the checks that keep it from shadowing built-ins.
#[derive(Debug, Clone)]
pub(crate) struct Installed {
    pub(crate) extension: Arc<dyn Extension>,
    pub(crate) tool_names: std::collections::BTreeSet<String>,
    pub(crate) prompt_names: std::collections::BTreeSet<String>,
}

impl Installed {
    /// Records what `extension` lists, refusing a name that is missing, repeated, or already
    /// taken by `taken_tools` / `taken_prompts`.
    pub(crate) fn new(
        extension: Arc<dyn Extension>,
        taken_tools: &dyn Fn(&str) -> bool,
        taken_prompts: &dyn Fn(&str) -> bool,
        taken_uri: &dyn Fn(&str) -> bool,
    ) -> Result<Installed, String> {
        for resource in extension.resources() {
            let uri = resource
                .get("uri")
                .and_then(JsonValue::as_str)
                .ok_or_else(|| format!("an extension resource has no string uri: {resource}"))?;
            if taken_uri(uri) {
                return Err(format!(
                    "the extension resource {uri:?} shadows a built-in one"
                ));
            }
        }
        let names = |entries: Vec<JsonValue>, what: &str, taken: &dyn Fn(&str) -> bool| {
            let mut names = std::collections::BTreeSet::new();
            for entry in entries {
                let name = entry
                    .get("name")
                    .and_then(JsonValue::as_str)
                    .ok_or_else(|| format!("an extension {what} has no string name: {entry}"))?;
                if taken(name) {
                    return Err(format!(
                        "the extension {what} {name:?} shadows a built-in one"
                    ));
                }
                if !names.insert(name.to_owned()) {
                    return Err(format!("the extension lists the {what} {name:?} twice"));
                }
            }
            Ok(names)
        };
        let tool_names = names(extension.tools(), "tool", taken_tools)?;
        let prompt_names = names(extension.prompts(), "prompt", taken_prompts)?;
        Ok(Installed {
            extension,
            tool_names,
            prompt_names,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// An extension that overrides nothing, so every answer is a trait default.
    #[derive(Debug)]
    struct Bare;

    impl Extension for Bare {}

    /// A call of `arguments` whose notifications are kept in `sent`.
    fn call(
        arguments: JsonValue,
        progress_token: Option<JsonValue>,
        sent: &Arc<Mutex<Vec<JsonValue>>>,
    ) -> ExtensionCall {
        let sent = Arc::clone(sent);
        let notify: Arc<dyn NotificationSink> =
            Arc::new(move |note: JsonValue| sent.lock().unwrap().push(note));
        ExtensionCall::new(
            arguments.as_object().unwrap().clone(),
            CancellationToken::new(),
            "span-1".to_owned(),
            progress_token,
            Arc::clone(&notify),
            RequestLog::new(Some(LogLevel::Info), notify),
        )
    }

    #[test]
    fn a_call_wants_progress_exactly_when_the_client_sent_a_token() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let check = |progress_token: Option<JsonValue>, expect: bool| {
            let call = call(json!({}), progress_token.clone(), &sent);
            assert_eq!(call.wants_progress(), expect, "{progress_token:?}");
        };
        check(None, false);
        check(Some(json!("p")), true);
        check(Some(json!(-2)), true);
    }

    #[test]
    fn progress_without_a_token_sends_nothing_and_with_one_sends_what_was_given() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        call(json!({}), None, &sent).progress(1.0, Some(2.0), Some("half"));
        assert_eq!(*sent.lock().unwrap(), Vec::<JsonValue>::new());
        let with_token = call(json!({}), Some(json!("p")), &sent);
        with_token.progress(1.0, Some(2.0), Some("half"));
        with_token.progress(2.0, None, None);
        let params: Vec<JsonValue> = sent
            .lock()
            .unwrap()
            .iter()
            .map(|note| note["params"].clone())
            .collect();
        assert_eq!(
            params,
            [
                json!({"progressToken": "p", "progress": 1.0, "total": 2.0, "message": "half"}),
                json!({"progressToken": "p", "progress": 2.0}),
            ]
        );
    }

    #[test]
    fn a_call_debug_form_names_its_fields_but_not_its_sink() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let call = call(json!({"text": "ab"}), Some(json!("p")), &sent);
        assert_eq!(
            format!("{call:?}"),
            "ExtensionCall { arguments: {\"text\": String(\"ab\")}, call_id: \"span-1\", \
             progress_token: Some(String(\"p\")), log: RequestLog { threshold: Some(Info), .. }, \
             .. }"
        );
    }

    #[tokio::test]
    async fn an_extension_that_overrides_nothing_adds_nothing_and_refuses_every_name() {
        let bare = Bare;
        assert_eq!(bare.tools(), Vec::<JsonValue>::new());
        assert_eq!(bare.prompts(), Vec::<JsonValue>::new());
        assert_eq!(bare.resources(), Vec::<JsonValue>::new());
        assert_eq!(bare.resource_templates(), Vec::<JsonValue>::new());
        assert_eq!(bare.read_resource("fixture://one"), None);
        assert_eq!(
            bare.complete(&json!({"type": "ref/prompt", "name": "p"}), "arg", "a"),
            None
        );
        assert_eq!(
            bare.get_prompt("p", &Map::new()),
            Err(RpcError::invalid_params("Unknown prompt: p"))
        );
        let sent = Arc::new(Mutex::new(Vec::new()));
        assert_eq!(
            bare.call_tool("t", call(json!({}), None, &sent)).await,
            Err(RpcError::invalid_params("Unknown tool: t"))
        );
    }
}
