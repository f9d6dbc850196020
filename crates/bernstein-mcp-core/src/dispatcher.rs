//! The dispatcher: one type that answers MCP JSON-RPC messages for any transport.
//!
//! A transport parses one message, hands it to [`Dispatcher::handle`] with the stream's
//! [`CallScope`] and a [`NotificationSink`], and writes back whatever comes out. The answer
//! depends only on the message (its body and per-request `_meta`), the dispatcher's
//! configuration and the project's evidence on disk, never on earlier messages: `initialize`
//! negotiates a version but nothing is remembered, so consecutive requests may be served by
//! different processes with identical results.
//!
//! Two lifecycles are answered side by side:
//!
//! * legacy (2024-11-05 .. 2025-11-25): `initialize`, then plain requests;
//! * 2026-07-28 (stateless): `server/discover`, and requests carrying
//!   `io.modelcontextprotocol/protocolVersion` and `/clientCapabilities` in `_meta`. Their results
//!   carry `resultType`, lists and reads also `ttlMs`/`cacheScope`, and every result names the
//!   server in `_meta`; `ping` is gone (-32601) and resource-not-found is -32602.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bernstein_journal::dlp::DlpMode;
use bernstein_journal::key::AuditKey;
use bernstein_journal::lineage_log::LineageLog;
use bernstein_protocol::SPEC_REVISION;
use bernstein_tasks::remote::{RemoteBackend, RemoteConfig};
use bernstein_tools::{
    Backend, CallMeta, Catalogue, PreparedCall, ProgressSink, ProgressTick, TaskSupport, Tier,
    ToolConfig, ToolContext, ToolOutcome,
};
use rmcp::model::{ProtocolVersion, RequestMetaObject, TASKS_EXTENSION_ID};
use serde_json::{Map, Value as JsonValue, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::anchor::{Anchor, AnchoredCall};
use crate::card::{AuthPosture, CardInputs, ServerIdentity, TransportInfo, capability_card_text};
use crate::completion;
use crate::error::{Error, Result};
use crate::extension::{Extension, ExtensionCall, Installed};
use crate::ids::request_span_id;
use crate::instructions::instructions;
use crate::jsonrpc::{
    self, INVALID_REQUEST, INVALID_REQUEST_META, Incoming, MISSING_REQUIRED_CLIENT_CAPABILITY,
    RESOURCE_NOT_FOUND, RequestId, RpcError, UNSUPPORTED_PROTOCOL_VERSION,
};
use crate::limits::Limits;
use crate::logging::{LogLevel, META_LOG_LEVEL, RequestLog};
use crate::prompts;
use crate::scope::{CallScope, InFlightCall, NotificationSink, Refusal};
use crate::storage_fault::storage_fault;
use crate::tasks::{self, TASK_LIST_PAGE, TaskView};
use crate::telemetry;

/// The URI of the capability card resource.
pub const CAPABILITY_URI: &str = "bernstein://capability";
/// The URI of the skill index resource.
pub const SKILL_INDEX_URI: &str = "bernstein://skills/index";
/// The lineage statistics resource (served while lineage is enabled).
pub const LINEAGE_STATS_URI: &str = "lineage://stats";
/// The prefix of the per-artefact lineage resources: `lineage://artefact/<repo-relative path>`.
pub const LINEAGE_ARTEFACT_PREFIX: &str = "lineage://artefact/";
/// The most resources one stream may be subscribed to at once (`resources/subscribe` beyond it
/// is -32602): every subscription is re-read after each of the stream's calls.
pub const MAX_SUBSCRIPTIONS_PER_STREAM: usize = 64;
/// The anchoring run when none is configured.
pub const DEFAULT_ANCHOR_RUN_ID: &str = "mcp-calls";
/// The tool that may be task-augmented.
const RUN_TOOL: &str = "bernstein_run";

const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// Which task backend a built dispatcher drives. Its `Debug` output redacts the bearer token.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// The durable store under `<workdir>/.sdd/` (no task server needed).
    #[default]
    Embedded,
    /// A running `bernstein serve` at `url`, authenticated with `bearer_token`.
    Remote {
        /// The task server's base URL, e.g. `http://127.0.0.1:8052`.
        url: String,
        /// The bearer the task server requires (`BERNSTEIN_AUTH_TOKEN`).
        bearer_token: Option<String>,
    },
}

impl std::fmt::Debug for BackendChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendChoice::Embedded => f.write_str("Embedded"),
            BackendChoice::Remote { url, bearer_token } => f
                .debug_struct("Remote")
                .field("url", url)
                .field("bearer_token", &bearer_token.as_ref().map(|_| "<redacted>"))
                .finish(),
        }
    }
}

/// Builds a [`Dispatcher`]: the embedding API.
#[derive(Debug)]
pub struct DispatcherBuilder {
    workdir: PathBuf,
    backend: BackendChoice,
    backend_instance: Option<Arc<Backend>>,
    audit_key: Option<AuditKey>,
    home_dir: Option<String>,
    dlp_mode: DlpMode,
    tool_config: ToolConfig,
    anchor_run_id: Option<String>,
    identity: ServerIdentity,
    auth: AuthPosture,
    transports: Vec<TransportInfo>,
    limits: Limits,
    confine_workdirs: bool,
    allowed_roots: Vec<PathBuf>,
    extension: Option<Arc<dyn Extension>>,
    default_log_level: Option<LogLevel>,
}

impl DispatcherBuilder {
    /// A builder for the project rooted at `workdir`: embedded backend, default tool
    /// configuration, stdio as the only listed transport, no anchoring until an audit key is
    /// given.
    pub fn new(workdir: impl Into<PathBuf>) -> DispatcherBuilder {
        DispatcherBuilder {
            workdir: workdir.into(),
            backend: BackendChoice::Embedded,
            backend_instance: None,
            audit_key: None,
            home_dir: None,
            dlp_mode: DlpMode::default(),
            tool_config: ToolConfig::default(),
            anchor_run_id: None,
            identity: ServerIdentity::default(),
            auth: AuthPosture::default(),
            transports: vec![TransportInfo::Stdio {
                command: "bernstein-mcp".to_owned(),
                default: true,
            }],
            limits: Limits::default(),
            confine_workdirs: false,
            allowed_roots: Vec::new(),
            extension: None,
            default_log_level: None,
        }
    }

    /// Extra tools, prompts and resources served beside the built-in ones, through this same
    /// dispatcher (see [`Extension`]). A name or URI that shadows a built-in one is refused by
    /// [`DispatcherBuilder::build`].
    #[must_use]
    pub fn extension(mut self, extension: Arc<dyn Extension>) -> DispatcherBuilder {
        self.extension = Some(extension);
        self
    }

    /// The log level of a legacy stream whose client never sent `logging/setLevel` (default
    /// `None`: such a stream gets no `notifications/message`). 2026-07-28 requests always use
    /// their own `_meta` level.
    #[must_use]
    pub fn default_log_level(mut self, level: Option<LogLevel>) -> DispatcherBuilder {
        self.default_log_level = level;
        self
    }

    /// Workdir confinement. Off (the default, right for stdio, where the client is the local
    /// user), a tool's `workdir` argument may name any project root on the machine. On (the
    /// HTTP transport turns it on), it must resolve inside the served root or one of
    /// [`DispatcherBuilder::allowed_roots`]; the capability card says which. Inside the root it
    /// names, containment holds either way.
    #[must_use]
    pub fn confine_workdirs(mut self, confine: bool) -> DispatcherBuilder {
        self.confine_workdirs = confine;
        self
    }

    /// Roots besides the served one that a confined `workdir` may name (`--allow-root`). Each
    /// must be an existing directory when the dispatcher is built.
    #[must_use]
    pub fn allowed_roots(mut self, roots: Vec<PathBuf>) -> DispatcherBuilder {
        self.allowed_roots = roots;
        self
    }

    /// The task backend to build.
    #[must_use]
    pub fn backend(mut self, backend: BackendChoice) -> DispatcherBuilder {
        self.backend = backend;
        self
    }

    /// A backend the host built itself; wins over [`DispatcherBuilder::backend`].
    #[must_use]
    pub fn backend_instance(mut self, backend: Arc<Backend>) -> DispatcherBuilder {
        self.backend_instance = Some(backend);
        self
    }

    /// The install audit key. It authenticates the evidence the embedded store and the tools
    /// write, and it switches call anchoring on.
    #[must_use]
    pub fn audit_key(mut self, key: AuditKey) -> DispatcherBuilder {
        self.audit_key = Some(key);
        self
    }

    /// The home directory mailbox redaction collapses to `~`.
    #[must_use]
    pub fn home_dir(mut self, home: Option<String>) -> DispatcherBuilder {
        self.home_dir = home;
        self
    }

    /// The rule set mailbox redaction runs (default: extended; `reference` for the reference's
    /// exact bytes). Applies to a backend the builder opens, not to a `backend_instance`.
    #[must_use]
    pub fn dlp_mode(mut self, mode: DlpMode) -> DispatcherBuilder {
        self.dlp_mode = mode;
        self
    }

    /// Tier, aliases, meter, validation, lineage.
    #[must_use]
    pub fn tool_config(mut self, config: ToolConfig) -> DispatcherBuilder {
        self.tool_config = config;
        self
    }

    /// The run whose journal anchors every call (default [`DEFAULT_ANCHOR_RUN_ID`]).
    #[must_use]
    pub fn anchor_run_id(mut self, run_id: impl Into<String>) -> DispatcherBuilder {
        self.anchor_run_id = Some(run_id.into());
        self
    }

    /// `serverInfo` and the card's identity fields.
    #[must_use]
    pub fn identity(mut self, identity: ServerIdentity) -> DispatcherBuilder {
        self.identity = identity;
        self
    }

    /// The auth configuration the capability card reports.
    #[must_use]
    pub fn auth(mut self, auth: AuthPosture) -> DispatcherBuilder {
        self.auth = auth;
        self
    }

    /// The transports the capability card lists.
    #[must_use]
    pub fn transports(mut self, transports: Vec<TransportInfo>) -> DispatcherBuilder {
        self.transports = transports;
        self
    }

    /// The resource limits (params size, requests in flight, timeouts, transport queues).
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> DispatcherBuilder {
        self.limits = limits;
        self
    }

    /// Builds the dispatcher: opens the backend and the anchoring run, builds the catalogue.
    /// The embedded store is opened on a background thread (see
    /// [`Backend::embedded_in_background`]): its refusal reaches the first call that needs it.
    ///
    /// # Errors
    ///
    /// [`Error::Project`] when the workdir is not a directory; [`Error::Tasks`] when the
    /// remote backend cannot be configured; [`Error::Tools`] when the catalogue cannot be built;
    /// [`Error::Journal`] when the anchoring run id cannot name a journal;
    /// [`Error::Extension`] when the extension's lists name nothing or shadow a built-in.
    pub fn build(self) -> Result<Dispatcher> {
        if !self.workdir.is_dir() {
            return Err(Error::Project {
                path: self.workdir.clone(),
                reason: "not a directory".to_owned(),
            });
        }
        let backend = match self.backend_instance {
            Some(backend) => backend,
            None => Arc::new(
                open_backend(
                    &self.workdir,
                    &self.backend,
                    self.audit_key.clone(),
                    self.home_dir.clone(),
                )?
                .with_dlp_mode(self.dlp_mode),
            ),
        };
        let catalogue = Catalogue::new(&self.tool_config)?;
        let mut tier_tools = Vec::new();
        for tier in Tier::ALL {
            let config = ToolConfig {
                tier,
                ..self.tool_config
            };
            let names = Catalogue::advertised_names(&config)
                .into_iter()
                .map(str::to_owned)
                .collect();
            tier_tools.push((tier.as_str().to_owned(), names));
        }
        let registered: BTreeSet<String> = catalogue
            .tools()
            .iter()
            .map(|spec| spec.name.clone())
            .collect();
        let anchor = match &self.audit_key {
            Some(key) => Some(Arc::new(Anchor::open(
                &self.workdir,
                self.anchor_run_id
                    .as_deref()
                    .unwrap_or(DEFAULT_ANCHOR_RUN_ID),
                key.clone(),
            )?)),
            None => None,
        };
        if let Some(anchor) = &anchor {
            read_ahead_in_background(anchor);
        }
        let workdir_roots = if self.confine_workdirs {
            let mut roots = Vec::new();
            for root in std::iter::once(&self.workdir).chain(&self.allowed_roots) {
                let real = std::fs::canonicalize(root).map_err(|err| Error::Project {
                    path: root.clone(),
                    reason: format!("an allowed workdir root must be an existing directory: {err}"),
                })?;
                roots.push(real);
            }
            Some(Arc::from(roots))
        } else {
            None
        };
        let instructions = instructions(&|name| registered.contains(name));
        let extension = match self.extension {
            Some(extension) => Some(
                Installed::new(
                    extension,
                    &|name| catalogue.is_callable(name) || registered.contains(name),
                    &|name| prompts::PROMPT_NAMES.contains(&name),
                    &|uri| {
                        [CAPABILITY_URI, SKILL_INDEX_URI, LINEAGE_STATS_URI].contains(&uri)
                            || uri.starts_with(LINEAGE_ARTEFACT_PREFIX)
                    },
                )
                .map_err(Error::Extension)?,
            ),
            None => None,
        };
        Ok(Dispatcher {
            shared: Arc::new(Shared {
                workdir: self.workdir,
                backend,
                catalogue,
                tool_config: self.tool_config,
                anchor,
                identity: self.identity,
                auth: self.auth,
                transports: self.transports,
                tier_tools,
                registered,
                instructions,
                slots: Arc::new(Semaphore::new(
                    self.limits.max_in_flight.min(Semaphore::MAX_PERMITS),
                )),
                limits: self.limits,
                workdir_roots,
                extension,
                default_log_level: self.default_log_level,
            }),
        })
    }
}

/// Reads the anchoring journal on a thread of its own, so that a long-lived project's first
/// call does not wait on it ([`Anchor::read_ahead`]). The thread holds the anchor only while it
/// reads; when no thread can be started, the first call reads the journal as before.
fn read_ahead_in_background(anchor: &Arc<Anchor>) {
    let anchor = Arc::downgrade(anchor);
    let spawned = std::thread::Builder::new()
        .name("bernstein-anchor-read-ahead".to_owned())
        .spawn(move || {
            if let Some(anchor) = anchor.upgrade() {
                anchor.read_ahead();
            }
        });
    if let Err(err) = spawned {
        tracing::debug!("the anchoring journal is not read ahead (no thread): {err}");
    }
}

fn open_backend(
    workdir: &Path,
    choice: &BackendChoice,
    audit_key: Option<AuditKey>,
    home_dir: Option<String>,
) -> Result<Backend> {
    let backend = match choice {
        // The store is opened on a thread of its own, so `initialize`, `ping` and `tools/list`
        // answer while a large task log is replayed; the first call that needs the store waits
        // for the open and gets its refusal (a corrupt log, say) as a structured error.
        BackendChoice::Embedded => match audit_key {
            Some(key) => Backend::embedded_in_background(workdir.to_path_buf(), key),
            None => {
                return Err(Error::Project {
                    path: workdir.to_path_buf(),
                    reason: "the embedded backend needs the install audit key".to_owned(),
                });
            }
        },
        BackendChoice::Remote { url, bearer_token } => {
            let remote = RemoteBackend::new(
                RemoteConfig::new(url.clone()).with_bearer_token(bearer_token.clone()),
            )?;
            let backend = Backend::remote(remote);
            match audit_key {
                Some(key) => backend.with_audit_key(key),
                None => backend,
            }
        }
    };
    Ok(backend.with_home_dir(home_dir))
}

/// The MCP dispatcher. Cheap to clone; every clone serves the same configuration.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    workdir: PathBuf,
    backend: Arc<Backend>,
    catalogue: Catalogue,
    tool_config: ToolConfig,
    anchor: Option<Arc<Anchor>>,
    identity: ServerIdentity,
    auth: AuthPosture,
    transports: Vec<TransportInfo>,
    tier_tools: Vec<(String, Vec<String>)>,
    registered: BTreeSet<String>,
    instructions: String,
    limits: Limits,
    /// One permit per request in flight, over every stream ([`Limits::max_in_flight`]).
    slots: Arc<Semaphore>,
    /// The canonical roots a `workdir` may name, when confinement is on.
    workdir_roots: Option<Arc<[PathBuf]>>,
    /// The host's extra tools, prompts and resources.
    extension: Option<Installed>,
    /// The log level of a legacy stream that set none.
    default_log_level: Option<LogLevel>,
}

/// Which lifecycle a request is served under.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Era {
    /// The `initialize` lifecycle (no per-request protocol version, or one before 2026-07-28).
    Legacy,
    /// The stateless 2026-07-28 lifecycle.
    Stateless {
        /// The version the request declared.
        version: String,
        /// Whether the client declared the tasks extension.
        tasks_extension: bool,
    },
}

/// One request being answered.
struct Request<'a> {
    id: RequestId,
    method: &'a str,
    /// Shared, so anchoring on the blocking pool can read the params without a copy.
    params: Option<Arc<JsonValue>>,
    era: Era,
}

impl Request<'_> {
    fn param(&self, key: &str) -> Option<&JsonValue> {
        self.params.as_deref().and_then(|p| p.get(key))
    }

    fn is_stateless(&self) -> bool {
        matches!(self.era, Era::Stateless { .. })
    }
}

/// What one method answers: a result object or a JSON-RPC error.
type Answer = std::result::Result<JsonValue, RpcError>;

impl Dispatcher {
    /// A builder for the project at `workdir`.
    pub fn builder(workdir: impl Into<PathBuf>) -> DispatcherBuilder {
        DispatcherBuilder::new(workdir)
    }

    /// The project root.
    pub fn workdir(&self) -> &Path {
        &self.shared.workdir
    }

    /// The anchoring run, when calls are anchored.
    pub fn anchor(&self) -> Option<&Anchor> {
        self.shared.anchor.as_deref()
    }

    /// The connect-time instructions.
    pub fn instructions(&self) -> &str {
        &self.shared.instructions
    }

    /// The resource limits transports and the dispatcher apply.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// The task backend (for [`Dispatcher::readiness`]).
    pub(crate) fn backend(&self) -> &Arc<Backend> {
        &self.shared.backend
    }

    /// The names of the tools `tools/list` advertises.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.shared.registered.iter().map(String::as_str)
    }

    /// Answers one framed message: parses it, dispatches it, and serialises the response.
    /// `None` when nothing is to be sent (a notification, or a client's response).
    pub async fn handle_text(
        &self,
        text: &str,
        scope: &CallScope,
        notify: Arc<dyn NotificationSink>,
    ) -> Option<String> {
        self.accept_text(text, scope).respond_text(notify).await
    }

    /// Answers one parsed message. `None` when nothing is to be sent.
    pub async fn handle(
        &self,
        message: JsonValue,
        scope: &CallScope,
        notify: Arc<dyn NotificationSink>,
    ) -> Option<JsonValue> {
        self.accept(message, scope).respond(notify).await
    }

    /// The synchronous first half of [`Dispatcher::handle_text`]: reads and accepts a framed
    /// message (see [`jsonrpc::read`] for what is refused before dispatch, and
    /// [`Dispatcher::accept`] for the rest).
    pub fn accept_text(&self, text: &str, scope: &CallScope) -> Accepted {
        self.accept_incoming(jsonrpc::read(text), scope)
    }

    /// [`Dispatcher::accept_text`] for a message given as bytes: bytes that are not UTF-8 are
    /// answered with a parse error, never decoded lossily.
    pub fn accept_bytes(&self, bytes: &[u8], scope: &CallScope) -> Accepted {
        self.accept_incoming(jsonrpc::read_bytes(bytes), scope)
    }

    /// The synchronous first half of [`Dispatcher::handle`]: classifies the message, acts on
    /// notifications at once (a `notifications/cancelled` reaches its call here), and admits a
    /// request to `scope` so that a cancel arriving after this returns always finds it.
    /// A transport that reads messages in order calls this in its read loop and awaits
    /// [`Accepted::respond`] concurrently.
    ///
    /// A request is refused here, answered without running, when its `params` exceed
    /// [`Limits::max_params_bytes`] (-32602), when its id is already in flight on `scope`
    /// (-32600, the running call untouched), or when the stream or the process already has as
    /// many requests in flight as the limits allow (-32603 "server busy").
    ///
    /// A parsed value cannot show repeated keys any more; transports accept text or bytes.
    pub fn accept(&self, message: JsonValue, scope: &CallScope) -> Accepted {
        self.accept_incoming(jsonrpc::classify(message), scope)
    }

    /// Accepts a classified message. Params are always measured, however short the framed
    /// message was: the limit is on their compact form, which can be the longer one (a number
    /// written `1e9` on the line is `1000000000.0` compacted).
    fn accept_incoming(&self, incoming: Incoming, scope: &CallScope) -> Accepted {
        let limits = &self.shared.limits;
        let work = match incoming {
            Incoming::Request { id, method, params } => {
                let oversized = params
                    .as_ref()
                    .and_then(|params| compact_len_over(params, limits.max_params_bytes));
                if let Some(size) = oversized {
                    let error = RpcError::invalid_params(format!(
                        "params exceed {} bytes (got at least {size})",
                        limits.max_params_bytes
                    ))
                    .with_data(json!({"maxParamsBytes": limits.max_params_bytes}));
                    Work::Ready(Some(jsonrpc::error_response(Some(&id), &error)))
                } else {
                    self.admit(id, method, params, scope)
                }
            }
            Incoming::Notification { method, params } => {
                self.on_notification(&method, params.as_ref(), scope);
                Work::Ready(None)
            }
            Incoming::Response => Work::Ready(None),
            Incoming::Invalid { id, error } => {
                Work::Ready(Some(jsonrpc::error_response(id.as_ref(), &error)))
            }
        };
        Accepted {
            dispatcher: self.clone(),
            scope: scope.clone(),
            work,
        }
    }

    /// Admits a request to its stream and to the process, or answers why not.
    fn admit(
        &self,
        id: RequestId,
        method: String,
        params: Option<JsonValue>,
        scope: &CallScope,
    ) -> Work {
        let limits = &self.shared.limits;
        let busy = |what: &str| {
            let error = RpcError::internal(format!(
                "server busy: {what} already has the most requests in flight allowed; retry after one settles"
            ));
            Work::Ready(Some(jsonrpc::error_response(Some(&id), &error)))
        };
        let in_flight = match scope.admit(id.clone(), limits.max_in_flight_per_stream) {
            Ok(in_flight) => in_flight,
            Err(Refusal::DuplicateId) => {
                let error = RpcError::new(
                    INVALID_REQUEST,
                    format!("Invalid Request: a request with id {id} is already in flight"),
                );
                return Work::Ready(Some(jsonrpc::error_response(Some(&id), &error)));
            }
            Err(Refusal::Busy) => return busy("this stream"),
        };
        let Ok(slot) = Arc::clone(&self.shared.slots).try_acquire_owned() else {
            return busy("the server");
        };
        Work::Request {
            id,
            method,
            params,
            in_flight,
            slot,
        }
    }

    async fn respond_request(
        &self,
        id: RequestId,
        method: String,
        params: Option<JsonValue>,
        in_flight: InFlightCall,
        notify: Arc<dyn NotificationSink>,
    ) -> JsonValue {
        let answer = match request_era(&method, params.as_ref()) {
            Ok(era) => {
                let request = Request {
                    id: id.clone(),
                    method: &method,
                    params: params.map(Arc::new),
                    era,
                };
                self.answer(&request, in_flight, notify)
                    .await
                    .map(|result| stamp(result, &request, &self.shared.identity))
            }
            Err(error) => Err(error),
        };
        match answer {
            Ok(result) => jsonrpc::result_response(&id, result),
            Err(error) => jsonrpc::error_response(Some(&id), &error),
        }
    }

    fn on_notification(&self, method: &str, params: Option<&JsonValue>, scope: &CallScope) {
        if method == "notifications/cancelled" {
            let id = params
                .and_then(|p| p.get("requestId"))
                .and_then(RequestId::from_json);
            match id {
                Some(id) => {
                    let found = scope.cancel(&id);
                    tracing::debug!(request_id = %id, found, "cancel requested");
                }
                None => tracing::debug!("notifications/cancelled without a usable requestId"),
            }
        }
        // Every other notification (initialized, progress, roots) needs no action.
    }

    async fn answer(
        &self,
        request: &Request<'_>,
        in_flight: InFlightCall,
        notify: Arc<dyn NotificationSink>,
    ) -> Answer {
        let scope = in_flight.scope().clone();
        match request.method {
            "initialize" => Ok(self.initialize(request)),
            "server/discover" => Ok(self.discover()),
            "ping" if !request.is_stateless() => Ok(json!({})),
            "tools/list" => Ok(self.list_tools()),
            "tools/call" => {
                let served = request
                    .param("name")
                    .and_then(JsonValue::as_str)
                    .filter(|name| self.shared.catalogue.is_callable(name));
                let mut measured = telemetry::ToolCallMetrics::start(served);
                let answer = self
                    .call_tool(request, in_flight, &scope, &notify, &mut measured)
                    .await;
                measured.finish(&answer);
                self.notify_updated_subscriptions(&scope, &notify).await;
                answer
            }
            "prompts/list" => Ok(self.list_prompts()),
            "prompts/get" => self.get_prompt(request),
            "completion/complete" => self.complete(request).await,
            "logging/setLevel" if !request.is_stateless() => {
                let level = LogLevel::from_param(request.param("level"), "level")?;
                scope.set_log_level(level);
                Ok(json!({}))
            }
            "resources/subscribe" if !request.is_stateless() => {
                self.subscribe(request, &scope).await
            }
            "resources/unsubscribe" if !request.is_stateless() => {
                let uri = Self::uri_param(request)?;
                scope.unsubscribe(uri);
                Ok(json!({}))
            }
            "resources/list" => Ok(self.list_resources()),
            "resources/templates/list" => Ok(self.list_resource_templates()),
            "resources/read" => self.read_resource(request).await,
            "tasks/get" => self.task_get(request).await,
            "tasks/cancel" => self.task_cancel(request).await,
            "tasks/result" if !request.is_stateless() => self.task_result(request).await,
            "tasks/list" if !request.is_stateless() => self.task_list(request).await,
            other => Err(RpcError::method_not_found(other)),
        }
    }

    fn server_info(&self) -> JsonValue {
        json!({"name": self.shared.identity.name, "version": self.shared.identity.version})
    }

    fn initialize(&self, request: &Request<'_>) -> JsonValue {
        let requested = request
            .param("protocolVersion")
            .and_then(JsonValue::as_str)
            .unwrap_or("");
        let version = ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .find(|v| v.as_str() == requested && v.has_initialize())
            .unwrap_or(&ProtocolVersion::LATEST_WITH_INITIALIZE);
        json!({
            "protocolVersion": version.as_str(),
            "capabilities": {
                "experimental": {},
                "completions": {},
                "logging": {},
                "prompts": {"listChanged": false},
                "resources": {"subscribe": true, "listChanged": false},
                "tools": {"listChanged": false},
                "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
            },
            "serverInfo": self.server_info(),
            "instructions": self.shared.instructions,
        })
    }

    fn discover(&self) -> JsonValue {
        let versions: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .map(ProtocolVersion::as_str)
            .collect();
        let mut extensions = Map::new();
        extensions.insert(TASKS_EXTENSION_ID.to_owned(), json!({}));
        json!({
            "supportedVersions": versions,
            "capabilities": {
                "completions": {},
                "logging": {},
                "prompts": {"listChanged": false},
                "resources": {"subscribe": false, "listChanged": false},
                "tools": {"listChanged": false},
                "extensions": extensions,
            },
            "instructions": self.shared.instructions,
            "ttlMs": 0,
            "cacheScope": "private",
        })
    }

    fn list_tools(&self) -> JsonValue {
        let tools: Vec<JsonValue> = self
            .shared
            .catalogue
            .tools()
            .iter()
            .map(|spec| {
                bernstein_protocol::pyjson::Value::to_serde(
                    &bernstein_protocol::pyjson::Value::Object(spec.to_list_entry()),
                )
            })
            .collect();
        let mut tools = tools;
        if let Some(installed) = &self.shared.extension {
            tools.extend(installed.extension.tools());
        }
        json!({"tools": tools})
    }

    fn list_prompts(&self) -> JsonValue {
        let mut listed: Vec<JsonValue> = prompts::list()
            .into_iter()
            .filter_map(|prompt| serde_json::to_value(prompt).ok())
            .collect();
        if let Some(installed) = &self.shared.extension {
            listed.extend(installed.extension.prompts());
        }
        json!({"prompts": listed})
    }

    fn is_registered(&self, name: &str) -> bool {
        self.shared.registered.contains(name)
    }

    fn get_prompt(&self, request: &Request<'_>) -> Answer {
        let name = request
            .param("name")
            .and_then(JsonValue::as_str)
            .ok_or_else(|| RpcError::invalid_params("prompts/get needs a string name"))?;
        let arguments = match request.param("arguments") {
            None | Some(JsonValue::Null) => None,
            Some(JsonValue::Object(map)) => Some(map),
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "prompt arguments must be an object",
                ));
            }
        };
        if let Some(installed) = &self.shared.extension
            && installed.prompt_names.contains(name)
        {
            return installed
                .extension
                .get_prompt(name, arguments.unwrap_or(&Map::new()));
        }
        let rendered = prompts::render(name, arguments, &|tool| self.is_registered(tool))
            .map_err(|err| RpcError::invalid_params(err.to_string()))?;
        serde_json::to_value(rendered).map_err(|err| RpcError::internal(err.to_string()))
    }

    fn list_resource_templates(&self) -> JsonValue {
        let mut templates = Vec::new();
        if self.shared.tool_config.lineage_enabled {
            templates.push(json!({
                "uriTemplate": format!("{LINEAGE_ARTEFACT_PREFIX}{{artefact_path}}"),
                "name": "lineage_artefact",
                "description": "The lineage log entries of one artefact (a repo-relative path), one canonical JSON object per line.",
                "mimeType": "application/x-ndjson",
            }));
        }
        if let Some(installed) = &self.shared.extension {
            templates.extend(installed.extension.resource_templates());
        }
        json!({"resourceTemplates": templates})
    }

    fn list_resources(&self) -> JsonValue {
        let mut listed = self.fixed_resources();
        if self.shared.tool_config.lineage_enabled
            && let Some(resources) = listed["resources"].as_array_mut()
        {
            resources.push(json!({
                "uri": LINEAGE_STATS_URI,
                "name": "lineage_stats",
                "description": "Counts over the project's lineage log: entries, artefacts, open forks, agents seen, entries in the last 24 hours.",
                "mimeType": "application/json",
            }));
        }
        if let Some(installed) = &self.shared.extension
            && let Some(resources) = listed["resources"].as_array_mut()
        {
            resources.extend(installed.extension.resources());
        }
        listed
    }

    fn fixed_resources(&self) -> JsonValue {
        json!({"resources": [
            {
                "uri": CAPABILITY_URI,
                "name": "bernstein_capability",
                "description": "Runtime capability card: transports, auth modes, tool tiers, cost meter, spec revision, prompts.",
                "mimeType": "application/json",
            },
            {
                "uri": SKILL_INDEX_URI,
                "name": "skill_index",
                "description": "Index of the skill packs load_skill serves, with their content hashes.",
                "mimeType": "application/json",
            },
        ]})
    }

    /// The capability card text as served for a request in `era`.
    fn card_text(&self, spec_revision: &str) -> String {
        let advertised: Vec<String> = self.shared.registered.iter().cloned().collect();
        capability_card_text(&CardInputs {
            identity: &self.shared.identity,
            spec_revision,
            transports: &self.shared.transports,
            auth: &self.shared.auth,
            active_tier: self.shared.tool_config.tier.as_str(),
            advertised,
            tiers: self.shared.tier_tools.clone(),
            cost_meter: self.shared.tool_config.cost_meter,
            workdir_confined: self.shared.workdir_roots.is_some(),
        })
    }

    /// The capability card for a request that names no protocol version.
    pub fn capability_card(&self) -> String {
        self.card_text(SPEC_REVISION)
    }

    /// `err` with the project root taken out of its message, so a remote client never learns
    /// the host's layout from a failed read.
    fn relative_error(&self, mut err: RpcError) -> RpcError {
        err.message = bernstein_tools::relative_to_root(err.message, &self.shared.workdir);
        err
    }

    fn uri_param<'r>(request: &'r Request<'_>) -> std::result::Result<&'r str, RpcError> {
        request
            .param("uri")
            .and_then(JsonValue::as_str)
            .ok_or_else(|| {
                RpcError::invalid_params(format!("{} needs a string uri", request.method))
            })
    }

    async fn read_resource(&self, request: &Request<'_>) -> Answer {
        let uri = Self::uri_param(request)?;
        self.read_uri(uri, &request.era).await
    }

    async fn read_uri(&self, uri: &str, era: &Era) -> Answer {
        let stateless = matches!(era, Era::Stateless { .. });
        let text = match uri {
            CAPABILITY_URI => {
                let revision = match era {
                    Era::Stateless { version, .. } => version.as_str(),
                    Era::Legacy => SPEC_REVISION,
                };
                self.card_text(revision)
            }
            SKILL_INDEX_URI => bernstein_tools::skill_index_text(),
            LINEAGE_STATS_URI if self.shared.tool_config.lineage_enabled => {
                let now_ns = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let log = LineageLog::for_project(&self.shared.workdir);
                let body = on_blocking_pool(move || log.stats_resource_body(now_ns))
                    .await
                    .map_err(|err| self.relative_error(err))?;
                return Ok(
                    json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": body}]}),
                );
            }
            artefact
                if self.shared.tool_config.lineage_enabled
                    && artefact.len() > LINEAGE_ARTEFACT_PREFIX.len()
                    && artefact.starts_with(LINEAGE_ARTEFACT_PREFIX) =>
            {
                let path = artefact[LINEAGE_ARTEFACT_PREFIX.len()..].to_owned();
                let log = LineageLog::for_project(&self.shared.workdir);
                let body = on_blocking_pool(move || log.artefact_resource_body(&path))
                    .await
                    .map_err(|err| self.relative_error(err))?;
                return Ok(
                    json!({"contents": [{"uri": uri, "mimeType": "application/x-ndjson", "text": body}]}),
                );
            }
            other => {
                if let Some(answer) = self
                    .shared
                    .extension
                    .as_ref()
                    .and_then(|installed| installed.extension.read_resource(other))
                {
                    return answer;
                }
                let code = if stateless {
                    jsonrpc::INVALID_PARAMS
                } else {
                    RESOURCE_NOT_FOUND
                };
                return Err(RpcError::new(code, format!("Resource not found: {other}"))
                    .with_data(json!({"uri": other})));
            }
        };
        Ok(json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": text}]}))
    }

    async fn call_tool(
        &self,
        request: &Request<'_>,
        in_flight: InFlightCall,
        scope: &CallScope,
        notify: &Arc<dyn NotificationSink>,
        measured: &mut telemetry::ToolCallMetrics,
    ) -> Answer {
        let name = request
            .param("name")
            .and_then(JsonValue::as_str)
            .ok_or_else(|| RpcError::invalid_params("tools/call needs a string name"))?;
        let log = self.request_log(request, scope, notify)?;
        // An unknown name (or one outside the tier, or a disabled alias) is a protocol error,
        // as the MCP spec words it, not a tool result; nothing is anchored for it.
        if !self.shared.catalogue.is_callable(name) {
            if let Some(installed) = &self.shared.extension
                && installed.tool_names.contains(name)
            {
                return self
                    .call_extension_tool(request, name, in_flight, notify, log)
                    .await;
            }
            return Err(RpcError::invalid_params(format!("Unknown tool: {name}")));
        }
        let arguments = match request.param("arguments") {
            None | Some(JsonValue::Null) => JsonValue::Object(Map::new()),
            Some(object @ JsonValue::Object(_)) => object.clone(),
            Some(_) => return Err(RpcError::invalid_params("tool arguments must be an object")),
        };
        let spec = self
            .shared
            .catalogue
            .tools()
            .iter()
            .find(|s| s.name == name);
        let wants_task = match &request.era {
            Era::Legacy => request.param("task").is_some_and(|t| !t.is_null()),
            Era::Stateless {
                tasks_extension, ..
            } => *tasks_extension && name == RUN_TOOL,
        };
        if wants_task {
            match spec.and_then(|s| s.task_support) {
                Some(TaskSupport::Optional) => {}
                _ => {
                    return Err(RpcError::invalid_params(format!(
                        "tool {name} cannot be called as a task (execution.taskSupport is not optional)"
                    )));
                }
            }
        }
        if request.is_stateless() && request.param("task").is_some() && !wants_task {
            return Err(RpcError::new(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                "a task-augmented call needs the io.modelcontextprotocol/tasks extension in clientCapabilities",
            )
            .with_data(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION_ID: {}}}})));
        }

        // Anchor first: the span id is the call's `_meter.call_id`, and a call that cannot be
        // anchored must not run unrecorded. A call the catalogue refuses outright (unknown tool,
        // arguments the firewall rejects) runs nothing, so it is answered without writing.
        let prepared = self.shared.catalogue.prepare(name, arguments);
        let anchored = if prepared.as_ref().is_some_and(PreparedCall::admitted) {
            self.anchor_call(request).await?
        } else {
            measured.firewall_refused();
            None
        };
        let meta = request.param("_meta");
        let meta_str = |key: &str| {
            meta.and_then(|m| m.get(key))
                .and_then(JsonValue::as_str)
                .map(str::to_owned)
        };
        let progress_token = meta
            .and_then(|m| m.get("progressToken"))
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .cloned();
        let call_id = match &anchored {
            Some(call) => call.span_id.clone(),
            None => Self::span_of(request),
        };
        notify.call_id(&call_id);
        let progress: Option<ProgressSink> = progress_token.as_ref().map(|_| {
            let notify = Arc::clone(notify);
            let sink: ProgressSink = Arc::new(move |tick: ProgressTick| {
                let mut params = Map::new();
                params.insert("progressToken".to_owned(), tick.progress_token);
                params.insert("progress".to_owned(), json!(tick.progress));
                if let Some(total) = tick.total {
                    params.insert("total".to_owned(), json!(total));
                }
                params.insert("message".to_owned(), json!(tick.message));
                notify.send(jsonrpc::notification(
                    "notifications/progress",
                    JsonValue::Object(params),
                ));
            });
            sink
        });
        let context = ToolContext {
            workdir: self.shared.workdir.clone(),
            backend: Arc::clone(&self.shared.backend),
            meta: CallMeta {
                traceparent: meta_str("traceparent"),
                tracestate: meta_str("tracestate"),
                baggage: meta_str("baggage"),
                progress_token,
                call_id,
            },
            progress,
            cancel: in_flight.token(),
            workdir_roots: self.shared.workdir_roots.clone(),
        };
        // The messages are built only when the request's log level lets them out: most calls
        // carry none, and every call would otherwise format two messages for nobody.
        if log.enabled(LogLevel::Debug) {
            log.log(
                LogLevel::Debug,
                name,
                json!({"message": format!("calling {name}"), "callId": context.meta.call_id, "anchored": anchored.is_some()}),
            );
        }
        let outcome = match prepared {
            Some(prepared) => {
                self.shared
                    .catalogue
                    .call_prepared(&context, prepared)
                    .await
            }
            // `is_callable` passed above, so the catalogue serves the name; answered as the
            // catalogue answers a name it does not serve all the same.
            None => Catalogue::unknown_tool(name),
        };
        drop(in_flight);
        let (level, said) = if outcome.cancelled {
            (
                LogLevel::Notice,
                "was cancelled; answering its partial work",
            )
        } else if outcome.is_error {
            (LogLevel::Warning, "answered an error")
        } else {
            (LogLevel::Info, "answered")
        };
        if log.enabled(level) {
            log.log(
                level,
                name,
                json!({"message": format!("{name} {said}"), "callId": context.meta.call_id}),
            );
        }
        // A tool that could not write its evidence (full or read-only disk) changed nothing:
        // the client gets a protocol error that says so, not a tool result.
        if outcome.is_error
            && let Some(err) = storage_fault(&outcome.text, anchored.is_some())
        {
            tracing::error!("{name}: {}: {}", err.message, outcome.text);
            return Err(err);
        }

        if wants_task
            && !outcome.is_error
            && !outcome.cancelled
            && let Some(task_id) = created_task_id(&outcome)
        {
            let view = tasks::project(&self.shared.backend, &self.shared.workdir, &task_id).await?;
            return Ok(match &request.era {
                Era::Legacy => json!({"task": view.legacy_row()}),
                Era::Stateless { .. } => task_json(&view, "task"),
            });
        }
        Ok(call_result(&outcome))
    }

    /// The log a request's `notifications/message` go through: filtered by its `_meta` level
    /// (2026-07-28) or its stream's (legacy). A malformed `_meta` level is -32602.
    fn request_log(
        &self,
        request: &Request<'_>,
        scope: &CallScope,
        notify: &Arc<dyn NotificationSink>,
    ) -> std::result::Result<RequestLog, RpcError> {
        let threshold = match &request.era {
            Era::Legacy => scope.log_level().or(self.shared.default_log_level),
            Era::Stateless { .. } => match request
                .param("_meta")
                .and_then(|meta| meta.get(META_LOG_LEVEL))
            {
                None | Some(JsonValue::Null) => None,
                level => Some(LogLevel::from_param(level, META_LOG_LEVEL)?),
            },
        };
        Ok(RequestLog::new(threshold, Arc::clone(notify)))
    }

    /// Runs an extension's tool: anchored first like a built-in call, bounded by the same hard
    /// timeout (the caller's), stopped by the same cancel.
    async fn call_extension_tool(
        &self,
        request: &Request<'_>,
        name: &str,
        in_flight: InFlightCall,
        notify: &Arc<dyn NotificationSink>,
        log: RequestLog,
    ) -> Answer {
        let arguments = match request.param("arguments") {
            None | Some(JsonValue::Null) => Map::new(),
            Some(JsonValue::Object(object)) => object.clone(),
            Some(_) => return Err(RpcError::invalid_params("tool arguments must be an object")),
        };
        if request.param("task").is_some_and(|t| !t.is_null()) {
            return Err(RpcError::invalid_params(format!(
                "tool {name} cannot be called as a task (execution.taskSupport is not optional)"
            )));
        }
        let call_id = match self.anchor_call(request).await? {
            Some(call) => call.span_id,
            None => Self::span_of(request),
        };
        let progress_token = request
            .param("_meta")
            .and_then(|m| m.get("progressToken"))
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .cloned();
        let Some(installed) = &self.shared.extension else {
            return Err(RpcError::invalid_params(format!("Unknown tool: {name}")));
        };
        let call = ExtensionCall::new(
            arguments,
            in_flight.token(),
            call_id,
            progress_token,
            Arc::clone(notify),
            log,
        );
        let answer = installed.extension.call_tool(name, call).await;
        drop(in_flight);
        answer
    }

    async fn complete(&self, request: &Request<'_>) -> Answer {
        let query = completion::Query::from_params(request.params.as_deref())?;
        if let Some(installed) = &self.shared.extension
            && let Some(values) =
                installed
                    .extension
                    .complete(&query.raw_reference, &query.argument, &query.value)
        {
            return Ok(completion::result(values?, &query.value));
        }
        let candidates = match &query.reference {
            completion::Reference::Prompt(name) => {
                completion::prompt_candidates(name, &query.argument).unwrap_or_else(|| {
                    Err(RpcError::invalid_params(format!("Unknown prompt: {name}")))
                })?
            }
            completion::Reference::Resource(uri)
                if self.shared.tool_config.lineage_enabled
                    && uri == &format!("{LINEAGE_ARTEFACT_PREFIX}{{artefact_path}}") =>
            {
                if query.argument != "artefact_path" {
                    return Err(RpcError::invalid_params(format!(
                        "resource template {uri} has no argument {:?}",
                        query.argument
                    )));
                }
                let log = LineageLog::for_project(&self.shared.workdir);
                let entries = on_blocking_pool(move || log.read_entries())
                    .await
                    .map_err(|err| self.relative_error(err))?;
                let paths: BTreeSet<String> = entries
                    .iter()
                    .filter_map(|entry| entry.get("artefact_path")?.as_str().map(str::to_owned))
                    .collect();
                paths.into_iter().collect()
            }
            completion::Reference::Resource(uri) => {
                return Err(RpcError::invalid_params(format!(
                    "no resource template to complete: {uri}"
                )));
            }
        };
        Ok(completion::result(candidates, &query.value))
    }

    /// Subscribes the stream to a resource; its current content is remembered so a change can
    /// be told ([`Dispatcher::notify_updated_subscriptions`]). Any URI is accepted: one that
    /// cannot be read now may be served later (an artefact not yet in the lineage log).
    async fn subscribe(&self, request: &Request<'_>, scope: &CallScope) -> Answer {
        let uri = Self::uri_param(request)?;
        let content = self.resource_content(uri).await;
        scope
            .subscribe(uri, content, MAX_SUBSCRIPTIONS_PER_STREAM)
            .map_err(|_| {
                RpcError::invalid_params(format!(
                    "a stream may subscribe to at most {} resources; unsubscribe from one first",
                    MAX_SUBSCRIPTIONS_PER_STREAM
                ))
                .with_data(json!({"maxSubscriptions": MAX_SUBSCRIPTIONS_PER_STREAM}))
            })?;
        Ok(json!({}))
    }

    /// The served content of `uri` as the legacy lifecycle reads it, `None` when unreadable.
    async fn resource_content(&self, uri: &str) -> Option<String> {
        let read = self.read_uri(uri, &Era::Legacy).await.ok()?;
        serde_json::to_string(&read).ok()
    }

    /// After a `tools/call`: re-reads the stream's subscribed resources and sends
    /// `notifications/resources/updated` for each whose content changed since it was last seen.
    /// A change made by another stream or process is told at this stream's next call.
    async fn notify_updated_subscriptions(
        &self,
        scope: &CallScope,
        notify: &Arc<dyn NotificationSink>,
    ) {
        for uri in scope.subscriptions() {
            let content = self.resource_content(&uri).await;
            if scope.observe(&uri, content) {
                notify.send(jsonrpc::notification(
                    "notifications/resources/updated",
                    json!({"uri": uri}),
                ));
            }
        }
    }

    async fn anchor_call(
        &self,
        request: &Request<'_>,
    ) -> std::result::Result<Option<AnchoredCall>, RpcError> {
        let Some(anchor) = &self.shared.anchor else {
            return Ok(None);
        };
        let started = std::time::Instant::now();
        let anchored = anchor
            .anchor_queued(request.method, request.params.as_deref())
            .await;
        if anchored.is_ok() {
            telemetry::anchor_committed(started);
        }
        match anchored {
            Ok(call) => Ok(Some(call)),
            Err(err @ Error::CallIndexClaim { .. }) => {
                Err(RpcError::invalid_params(err.to_string()))
            }
            Err(err) => {
                tracing::error!("cannot anchor {}: {err}", request.method);
                if let Some(fault) = storage_fault(&err.to_string(), false) {
                    return Err(fault);
                }
                Err(RpcError::internal(format!(
                    "the call could not be anchored: {err}"
                )))
            }
        }
    }

    /// The hard timeout of a request: the configured one, or a tool's declared timeout plus
    /// grace when that is longer.
    fn hard_timeout(&self, method: &str, params: Option<&JsonValue>) -> std::time::Duration {
        let declared = (method == "tools/call")
            .then(|| params?.get("name")?.as_str())
            .flatten()
            .and_then(|name| {
                self.shared
                    .catalogue
                    .tools()
                    .iter()
                    .find(|spec| spec.name == name)?
                    .timeout_seconds
            });
        self.shared.limits.timeout_for(declared)
    }

    /// The content-derived span id of a request that is not anchored.
    fn span_of(request: &Request<'_>) -> String {
        request_span_id(&json!({
            "jsonrpc": "2.0",
            "id": request.id.to_json(),
            "method": request.method,
            "params": request.params.as_deref(),
        }))
    }

    fn task_id_param(request: &Request<'_>) -> std::result::Result<String, RpcError> {
        request
            .param("taskId")
            .and_then(JsonValue::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                RpcError::invalid_params(format!("{} needs a string taskId", request.method))
            })
    }

    async fn task_get(&self, request: &Request<'_>) -> Answer {
        let task_id = Self::task_id_param(request)?;
        let view = tasks::project(&self.shared.backend, &self.shared.workdir, &task_id).await?;
        Ok(match request.era {
            Era::Legacy => view.legacy_row(),
            Era::Stateless { .. } => {
                let mut row = task_json(&view, "complete");
                if view.task.status == rmcp::model::TaskStatus::Completed
                    && let Some(object) = row.as_object_mut()
                {
                    let call_id = Self::span_of(request);
                    object.insert(
                        "result".to_owned(),
                        view.tool_result(&self.shared.catalogue, &call_id),
                    );
                }
                if view.task.status == rmcp::model::TaskStatus::Failed
                    && let Some(object) = row.as_object_mut()
                {
                    let message = view.task.status_message.clone().unwrap_or_default();
                    object.insert(
                        "error".to_owned(),
                        json!({"code": jsonrpc::INTERNAL_ERROR, "message": message}),
                    );
                }
                row
            }
        })
    }

    async fn task_result(&self, request: &Request<'_>) -> Answer {
        let task_id = Self::task_id_param(request)?;
        let view = tasks::project(&self.shared.backend, &self.shared.workdir, &task_id).await?;
        Ok(view.tool_result(&self.shared.catalogue, &Self::span_of(request)))
    }

    async fn task_list(&self, request: &Request<'_>) -> Answer {
        let offset = match request.param("cursor") {
            None | Some(JsonValue::Null) => 0,
            Some(JsonValue::String(cursor)) => tasks::decode_cursor(cursor).ok_or_else(|| {
                RpcError::invalid_params(format!("Invalid pagination cursor: {cursor:?}"))
            })?,
            Some(_) => return Err(RpcError::invalid_params("cursor must be a string")),
        };
        // A forged cursor may name any offset; the next page's must not wrap.
        let next = offset.checked_add(TASK_LIST_PAGE).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "Invalid pagination cursor: offset {offset} is out of range"
            ))
        })?;
        let ids = tasks::all_task_ids(&self.shared.backend).await?;
        let mut rows = Vec::new();
        for task_id in ids.iter().skip(offset).take(TASK_LIST_PAGE) {
            rows.push(
                tasks::project(&self.shared.backend, &self.shared.workdir, task_id)
                    .await?
                    .legacy_row(),
            );
        }
        let mut result = Map::new();
        result.insert("tasks".to_owned(), JsonValue::Array(rows));
        if next < ids.len() {
            result.insert("nextCursor".to_owned(), json!(tasks::encode_cursor(next)));
        }
        Ok(JsonValue::Object(result))
    }

    async fn task_cancel(&self, request: &Request<'_>) -> Answer {
        let task_id = Self::task_id_param(request)?;
        let answer = self
            .shared
            .backend
            .cancel_task(&task_id, "cancelled by the MCP host (tasks/cancel)")
            .await
            .map_err(|err| tasks::lookup_error(&task_id, &err))?;
        match answer {
            bernstein_tools::CancelAnswer::UnknownTask => {
                return Err(RpcError::invalid_params(format!("Unknown task: {task_id}")));
            }
            bernstein_tools::CancelAnswer::NotCancellable { reported_status } => {
                let view =
                    tasks::project(&self.shared.backend, &self.shared.workdir, &task_id).await?;
                if !view.task.status.is_terminal() {
                    return Err(RpcError::invalid_params(format!(
                        "task {task_id} cannot be cancelled in status {reported_status:?}"
                    )));
                }
                // MCP 2025-11-25 has receivers reject the cancel of a task already in a
                // terminal status with -32602; the 2026-07-28 tasks extension acknowledges it,
                // as rmcp's task manager does.
                if request.era == Era::Legacy {
                    return Err(RpcError::invalid_params(format!(
                        "task {task_id} is already in the terminal status {}",
                        tasks::status_name(view.task.status)
                    )));
                }
            }
            bernstein_tools::CancelAnswer::Cancelled { .. } => {
                self.shared
                    .backend
                    .record_settled(
                        &self.shared.workdir,
                        &task_id,
                        bernstein_tools::Settled::Cancellation,
                    )
                    .await;
            }
        }
        let view = tasks::project(&self.shared.backend, &self.shared.workdir, &task_id).await?;
        Ok(match request.era {
            Era::Legacy => view.legacy_row(),
            Era::Stateless { .. } => json!({}),
        })
    }
}

/// An accepted message, ready to be answered (see [`Dispatcher::accept`]).
#[derive(Debug)]
pub struct Accepted {
    dispatcher: Dispatcher,
    scope: CallScope,
    work: Work,
}

#[derive(Debug)]
enum Work {
    /// The answer is already known (a notification, an invalid message).
    Ready(Option<JsonValue>),
    /// A request to dispatch, admitted to its stream and holding a process-wide slot.
    Request {
        id: RequestId,
        method: String,
        params: Option<JsonValue>,
        in_flight: InFlightCall,
        slot: OwnedSemaphorePermit,
    },
}

impl Accepted {
    /// Whether a response will be sent (a request, or a message answered with an error).
    pub fn expects_response(&self) -> bool {
        matches!(self.work, Work::Request { .. } | Work::Ready(Some(_)))
    }

    /// The scope the message was accepted in.
    pub fn scope(&self) -> &CallScope {
        &self.scope
    }

    /// Whether the answer is already known, so responding runs nothing (a notification, a
    /// refused or invalid message). A transport may answer these inline in its read loop.
    pub fn is_ready(&self) -> bool {
        matches!(self.work, Work::Ready(_))
    }

    /// Dispatches the message; progress notifications go to `notify`. `None` when nothing is
    /// to be sent.
    ///
    /// The request runs as its own task, which is the call boundary: a panic in a handler is
    /// answered -32603 with the request's id, and a request still running after its hard
    /// timeout ([`Limits::timeout_for`]) is stopped and answered -32603. Either way the client
    /// gets an answer and the call leaves its stream. The task is what lets the timeout fire:
    /// work that blocks its thread in place (a store lock or an fsync behind `block_in_place`)
    /// never returns from its poll, so a timeout polled in the same future would wait with it.
    pub async fn respond(self, notify: Arc<dyn NotificationSink>) -> Option<JsonValue> {
        let (id, method, params, in_flight, slot) = match self.work {
            Work::Ready(answer) => return answer,
            Work::Request {
                id,
                method,
                params,
                in_flight,
                slot,
            } => (id, method, params, in_flight, slot),
        };
        let dispatcher = self.dispatcher;
        let limit = dispatcher.hard_timeout(&method, params.as_ref());
        let call_id = id.clone();
        let mut task = tokio::spawn(async move {
            let response = dispatcher
                .respond_request(call_id, method, params, in_flight, notify)
                .await;
            drop(slot);
            response
        });
        // Whoever stops waiting for the answer (the timeout below, or a transport dropping this
        // future) stops the work too, so it releases its stream entry and slot.
        let _stop_on_drop = AbortOnDrop(task.abort_handle());
        let error = match tokio::time::timeout(limit, &mut task).await {
            Ok(Ok(response)) => return Some(response),
            Ok(Err(err)) if err.is_panic() => {
                tracing::error!(request_id = %id, "a request handler panicked: {err}");
                RpcError::internal("Internal error: the request handler failed unexpectedly")
            }
            Ok(Err(err)) => {
                tracing::error!(request_id = %id, "a request handler did not complete: {err}");
                RpcError::internal("Internal error: the request handler did not complete")
            }
            Err(_) => {
                tracing::warn!(request_id = %id, "request timed out after {limit:?}");
                RpcError::internal(format!("request timed out after {} s", limit.as_secs_f64()))
                    .with_data(json!({"timeoutSeconds": limit.as_secs_f64()}))
            }
        };
        Some(jsonrpc::error_response(Some(&id), &error))
    }

    /// [`Accepted::respond`], serialised.
    pub async fn respond_text(self, notify: Arc<dyn NotificationSink>) -> Option<String> {
        let response = self.respond(notify).await?;
        // Serialising a `serde_json::Value` cannot fail: its keys are strings.
        serde_json::to_string(&response).ok()
    }
}

/// Aborts a spawned request when dropped (a no-op once it finished). Work stuck inside a
/// blocking call stops at its next await.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs blocking file work on the blocking pool, so a slow or never-ending read (a FIFO where a
/// file should be) holds one pool thread and its own request, never an async worker.
async fn on_blocking_pool<T, F>(work: F) -> std::result::Result<T, RpcError>
where
    F: FnOnce() -> bernstein_journal::Result<T> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(RpcError::internal(err.to_string())),
        Err(err) => Err(RpcError::internal(format!(
            "the read did not complete: {err}"
        ))),
    }
}

/// The size of `value`'s compact JSON form when it exceeds `limit`, counting no further than
/// the first byte past it; `None` when it fits.
fn compact_len_over(value: &JsonValue, limit: usize) -> Option<usize> {
    /// Counts bytes and stops the serialiser once past the limit.
    struct Counter {
        count: usize,
        limit: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.count = self.count.saturating_add(buf.len());
            if self.count > self.limit {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { count: 0, limit };
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => None,
        Err(_) => Some(counter.count),
    }
}

/// The 2026-07-28 task object with `resultType`.
fn task_json(view: &TaskView, result_type: &str) -> JsonValue {
    let mut value = serde_json::to_value(&view.task).unwrap_or_else(|_| json!({}));
    if let Some(object) = value.as_object_mut() {
        object.insert("resultType".to_owned(), json!(result_type));
    }
    value
}

/// The task id a successful `bernstein_run` returned (inside the meter envelope or bare).
fn created_task_id(outcome: &ToolOutcome) -> Option<String> {
    let structured = outcome.structured.as_ref()?;
    let payload = match structured.get("_meter") {
        Some(_) => structured.get("result")?,
        None => structured,
    };
    payload
        .get("task_id")
        .and_then(JsonValue::as_str)
        .map(str::to_owned)
}

/// A `CallToolResult` from a tool outcome. A cancelled call keeps its partial work and is not
/// an error: `{content, cancelled: true, partial, _meter?}`.
fn call_result(outcome: &ToolOutcome) -> JsonValue {
    let mut result = Map::new();
    result.insert(
        "content".to_owned(),
        json!([{"type": "text", "text": outcome.text}]),
    );
    if outcome.cancelled {
        result.insert("cancelled".to_owned(), json!(true));
        result.insert("partial".to_owned(), json!(outcome.partial));
        if let Some(meter) = outcome.structured.as_ref().and_then(|s| s.get("_meter")) {
            result.insert("_meter".to_owned(), meter.clone());
        }
        return JsonValue::Object(result);
    }
    if let Some(structured) = &outcome.structured {
        result.insert("structuredContent".to_owned(), structured.clone());
    }
    result.insert("isError".to_owned(), json!(outcome.is_error));
    JsonValue::Object(result)
}

/// Works out the lifecycle of a request from its `_meta`, refusing a declared version this
/// server does not implement and 2026-07-28 requests missing their required `_meta` keys.
fn request_era(method: &str, params: Option<&JsonValue>) -> std::result::Result<Era, RpcError> {
    if method == "initialize" {
        return Ok(Era::Legacy);
    }
    let meta = params.and_then(|p| p.get("_meta"));
    let declared = meta.and_then(|m| m.get(META_PROTOCOL_VERSION));
    let version = match declared {
        None if method == "server/discover" => ProtocolVersion::LATEST.as_str().to_owned(),
        None => return Ok(Era::Legacy),
        Some(JsonValue::String(v)) => v.clone(),
        Some(_) => {
            return Err(RpcError::invalid_params(format!(
                "{INVALID_REQUEST_META}: {META_PROTOCOL_VERSION}"
            )));
        }
    };
    let supported: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .map(ProtocolVersion::as_str)
        .collect();
    if !supported.contains(&version.as_str()) {
        return Err(RpcError::new(
            UNSUPPORTED_PROTOCOL_VERSION,
            format!("Unsupported protocol version: {version}"),
        )
        .with_data(json!({"supported": supported, "requested": version})));
    }
    if version.as_str() < ProtocolVersion::NO_INITIALIZE.as_str() && method != "server/discover" {
        return Ok(Era::Legacy);
    }
    let meta_object: RequestMetaObject = meta
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default();
    let missing = meta_object.missing_required_keys(&ProtocolVersion::NO_INITIALIZE);
    if !missing.is_empty() {
        return Err(RpcError::invalid_params(format!(
            "{INVALID_REQUEST_META}: {}",
            missing.join(", ")
        )));
    }
    let tasks_extension = meta
        .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(TASKS_EXTENSION_ID))
        .is_some();
    Ok(Era::Stateless {
        version,
        tasks_extension,
    })
}

/// Methods whose 2026-07-28 results are cacheable lists or reads.
const CACHEABLE: [&str; 5] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// Shapes a result for the request's lifecycle: 2026-07-28 results gain `resultType` (unless
/// they are a task), cache hints on lists and reads, and the server's identity in `_meta`;
/// legacy results lose any `resultType` an rmcp model type carried.
fn stamp(mut result: JsonValue, request: &Request<'_>, identity: &ServerIdentity) -> JsonValue {
    let Some(object) = result.as_object_mut() else {
        return result;
    };
    match &request.era {
        Era::Legacy => {
            object.remove("resultType");
        }
        Era::Stateless { .. } => {
            object
                .entry("resultType")
                .or_insert_with(|| json!("complete"));
            if CACHEABLE.contains(&request.method) {
                object.entry("ttlMs").or_insert_with(|| json!(0));
                object
                    .entry("cacheScope")
                    .or_insert_with(|| json!("private"));
            }
            let meta = object
                .entry("_meta")
                .or_insert_with(|| JsonValue::Object(Map::new()));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert(
                    META_SERVER_INFO.to_owned(),
                    json!({"name": identity.name, "version": identity.version}),
                );
            }
        }
    }
    result
}
