//! The properties the fuzz targets check, one public function per target, each taking the raw
//! input and panicking when the property fails.
//!
//! This file is compiled twice: as the library of the cargo-fuzz crate (nightly, coverage
//! guided, `cargo xtask fuzz`), and inside `crates/bernstein-stdio/tests/it/fuzz_twins.rs`,
//! where bounded proptest twins feed it mutated seeds on stable and replay every input a
//! fuzzer ever failed on (`fuzz/regressions/<target>/`).
//!
//! Every property holds for any bytes: no panic, no hang, and the agreement a target names.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bernstein_http::{HttpConfig, McpHttp, MetricsRenderer};
use bernstein_journal::audit;
use bernstein_journal::claim::{
    ClaimFilter, ClaimOutcome, ClaimRequest, claim_on_entries, entries_from_rows,
};
use bernstein_journal::dlp::{self, DlpMode};
use bernstein_journal::key::AuditKey;
use bernstein_journal::run_journal;
use bernstein_mcp_core::{CallScope, DiscardNotifications, Dispatcher, TransportInfo};
use bernstein_protocol::pyjson::{Dialect, Value};
use bernstein_tasks::NewTask;
use bernstein_tasks::backend::ListQuery;
use bernstein_tasks::embedded::EmbeddedStore;
use bernstein_tools::{Catalogue, ToolConfig, firewall};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::Value as JsonValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::Service;

/// How long one input may keep the dispatcher or the stdio server busy before it counts as a
/// hang.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// The key the audit vectors were written under, so seeds taken from them verify.
const AUDIT_KEY: &[u8] = include_bytes!("../../fixtures/vectors/_keys/audit.key");

/// Separates the segments of an `audit_verify` input, and a `task_store` input's task log from
/// its backlog file.
const SEGMENT_SEPARATOR: u8 = 0x1e;

/// A dispatcher on a scratch workdir and the runtime it answers on, built once per process.
struct Scratch {
    _workdir: tempfile::TempDir,
    runtime: tokio::runtime::Runtime,
    dispatcher: Dispatcher,
}

fn scratch() -> &'static Scratch {
    static SCRATCH: OnceLock<Scratch> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let workdir = tempfile::tempdir().expect("scratch workdir");
        // The embedded backend needs a key; a fixed one keeps runs reproducible.
        let dispatcher = Dispatcher::builder(workdir.path())
            .audit_key(AuditKey::from_master_bytes(AUDIT_KEY.trim_ascii().to_vec()))
            .build()
            .expect("dispatcher on a scratch workdir");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        Scratch {
            _workdir: workdir,
            runtime,
            dispatcher,
        }
    })
}

/// A JSON-RPC 2.0 response: `jsonrpc`, and exactly one of `result` and a well-formed `error`.
fn check_response(answer: &JsonValue) {
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    let result = answer.get("result").is_some();
    let error = answer.get("error");
    assert!(result != error.is_some(), "{answer}");
    if let Some(error) = error {
        assert!(error["code"].is_i64(), "{answer}");
        assert!(error["message"].is_string(), "{answer}");
    }
}

/// JSON-RPC decoding and dispatch: any bytes are accepted and, when they call for an answer,
/// answered with a well-formed response within [`ANSWER_WITHIN`].
pub fn jsonrpc_dispatch(data: &[u8]) {
    let scratch = scratch();
    let scope = CallScope::new();
    let accepted = scratch.dispatcher.accept_bytes(data, &scope);
    let expects = accepted.expects_response();
    let answer = scratch
        .runtime
        .block_on(async {
            tokio::time::timeout(
                ANSWER_WITHIN,
                accepted.respond(Arc::new(DiscardNotifications)),
            )
            .await
        })
        .expect("the dispatcher answers in time");
    assert_eq!(answer.is_some(), expects, "{answer:?}");
    if let Some(answer) = answer {
        check_response(&answer);
    }
}

/// stdio framing: the server reads any byte stream to its end, writes only whole lines of
/// JSON-RPC objects, and ends cleanly.
pub fn stdio_framing(data: &[u8]) {
    let scratch = scratch();
    let output = scratch.runtime.block_on(async {
        let (mut client_read, server_write) = tokio::io::duplex(1 << 16);
        let (server_read, mut client_write) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(bernstein_stdio::serve(
            scratch.dispatcher.clone(),
            server_read,
            server_write,
        ));
        let write = async move {
            // The server may stop reading (a client that went away is not an error for it).
            let _ = client_write.write_all(data).await;
            let _ = client_write.shutdown().await;
        };
        let read = async {
            let mut out = Vec::new();
            client_read
                .read_to_end(&mut out)
                .await
                .expect("read the server's output");
            out
        };
        let (_, out) = tokio::time::timeout(ANSWER_WITHIN, async { tokio::join!(write, read) })
            .await
            .expect("the server drains in time");
        let ended = tokio::time::timeout(ANSWER_WITHIN, server)
            .await
            .expect("the server ends in time")
            .expect("the server task does not panic");
        assert!(ended.is_ok(), "{ended:?}");
        out
    });
    assert!(output.is_empty() || output.ends_with(b"\n"), "partial line");
    for line in output.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let message: JsonValue = serde_json::from_slice(line).expect("each line is JSON");
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
        if message.get("method").is_none() {
            check_response(&message);
        }
    }
}

/// The Python-JSON parser and the canonical encoders: what parses is re-encoded by every
/// dialect into text that parses back to the same value (the encodings agree), re-encoding is
/// stable, and the JCS form, when there is one, is strict JSON and a fixed point.
pub fn pyjson(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(value) = Value::parse(text) else {
        return;
    };
    let spaced = value.dumps(Dialect::PY_SPACED);
    for dialect in [
        Dialect::PY_SPACED,
        Dialect::PY_COMPACT_ASCII,
        Dialect::PY_COMPACT_UTF8,
        Dialect::PY_ROW,
    ] {
        let dumped = value.dumps(dialect);
        let again = Value::parse(&dumped)
            .unwrap_or_else(|err| panic!("encoder output must parse ({err:?}): {dumped}"));
        assert_eq!(again.dumps(dialect), dumped, "round trip");
        assert_eq!(again.dumps(Dialect::PY_SPACED), spaced, "dialects agree");
    }
    if let Ok(jcs) = value.to_jcs() {
        // Strict JSON grammar, numbers of any size: serde_json refuses integers beyond the f64
        // range when it builds a `Value` (an implementation limit, not JSON's), so the text is
        // only scanned (`fuzz/regressions/pyjson/jcs-integer-beyond-f64`).
        serde_json::from_str::<serde::de::IgnoredAny>(&jcs)
            .unwrap_or_else(|err| panic!("JCS output must be strict JSON ({err}): {jcs}"));
        let again = Value::parse(&jcs).expect("JCS output parses");
        assert_eq!(
            again.to_jcs().as_deref(),
            Ok(jcs.as_str()),
            "JCS is a fixed point"
        );
    }
}

/// Writes an `audit_verify` input as an audit directory: the first byte chooses whether the
/// first segment is an archive (bit 0) and whether its bytes are written as they are, as a
/// (probably broken) gzip file, instead of compressed (bit 1); the rest is split into
/// segments at [`SEGMENT_SEPARATOR`].
fn write_audit_dir(dir: &Path, data: &[u8]) {
    use std::io::Write;
    let (flags, rest) = data.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
    let archive = dir.join(audit::ARCHIVE_DIR);
    std::fs::create_dir_all(&archive).expect("archive dir");
    for (index, segment) in rest.split(|&b| b == SEGMENT_SEPARATOR).take(8).enumerate() {
        let name = format!("2026-07-{:02}.jsonl", index + 1);
        if index == 0 && flags & 1 == 1 {
            let bytes = if flags & 2 == 2 {
                segment.to_vec()
            } else {
                let mut encoder =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                encoder.write_all(segment).expect("compress");
                encoder.finish().expect("compress")
            };
            std::fs::write(archive.join(format!("{name}.gz")), bytes).expect("write archive");
        } else {
            std::fs::write(dir.join(name), segment).expect("write segment");
        }
    }
}

/// The audit-line parser and the verifier: any segment bytes get a report, the parallel
/// verifier's equals the sequential one, the verified-records walk ends with the same report
/// and yields exactly the verified entries, and the head readings answer.
pub fn audit_verify(data: &[u8]) {
    let dir = tempfile::tempdir().expect("scratch dir");
    write_audit_dir(dir.path(), data);
    let key = AuditKey::from_master_bytes(AUDIT_KEY.trim_ascii().to_vec());
    let sequential = audit::verify_sequential(dir.path(), &key);
    assert_eq!(audit::verify(dir.path(), &key), sequential);
    assert!(sequential.verified_entries <= sequential.entries);
    let mut records = audit::verified_records(dir.path(), &key);
    let yielded = records.by_ref().count() as u64;
    assert_eq!(yielded, sequential.verified_entries);
    assert_eq!(records.finish(), sequential);
    let _ = audit::recovered_head(dir.path(), &key);
    let _ = audit::keyless_newest_segment_head(dir.path());
}

/// The run-journal reader: any bytes load (tolerantly) to the same rows from memory and from
/// a file, and the loaded journal verifies or fails without panicking.
pub fn run_journal(data: &[u8]) {
    let loaded = run_journal::parse_journal_bytes(data);
    let file = tempfile::NamedTempFile::new().expect("scratch file");
    std::fs::write(file.path(), data).expect("write journal");
    let from_file = run_journal::load_journal(file.path()).expect("a regular file loads");
    assert_eq!(from_file.rows, loaded.rows);
    assert_eq!(from_file.discarded_lines, loaded.discarded_lines);
    let verification = run_journal::verify_loaded(&loaded);
    let _ = verification.ok();
    let _ = run_journal::journal_head(&loaded.rows);
}

/// The DLP redactor: any text is redacted without panicking, and a pass that reports no
/// redaction leaves the text as it was.
pub fn dlp(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let unchanged_unless_counted = |(out, count): (String, usize)| {
        if count == 0 {
            assert_eq!(out, text, "nothing redacted, yet the text changed");
        }
    };
    unchanged_unless_counted(dlp::redact_secrets(&text));
    unchanged_unless_counted(dlp::redact_extended(&text));
    unchanged_unless_counted(dlp::redact_secrets_in(DlpMode::Reference, &text));
    unchanged_unless_counted(dlp::redact_secrets_in(DlpMode::Extended, &text));
    let _ = dlp::redact_text(&text, Some("/home/fuzz"));
    let _ = dlp::extended_findings(&text);
    let registered: String = text.chars().take(12).collect();
    let _ = dlp::scrub_registered_secrets(&text, &[registered]);
}

fn catalogue() -> &'static Catalogue {
    static CATALOGUE: OnceLock<Catalogue> = OnceLock::new();
    CATALOGUE.get_or_init(|| Catalogue::new(&ToolConfig::default()).expect("default catalogue"))
}

/// The JSON Schema firewall: the first byte picks a tool, the rest is its arguments; any
/// arguments get a verdict without panicking, the same verdict every time.
pub fn firewall(data: &[u8]) {
    let Some((pick, rest)) = data.split_first() else {
        return;
    };
    let catalogue = catalogue();
    let tools = catalogue.tools();
    let name = &tools[usize::from(*pick) % tools.len()].name;
    let Ok(arguments) = serde_json::from_slice::<JsonValue>(rest) else {
        return;
    };
    let admits = |arguments: &JsonValue| {
        catalogue
            .prepare(name, arguments.clone())
            .is_some_and(|prepared| prepared.admitted())
    };
    let admitted = admits(&arguments);
    assert_eq!(admits(&arguments), admitted, "{name}");
    let denied = firewall::deny_rules(&firewall::drop_nulls(arguments.clone()));
    assert_eq!(
        firewall::deny_rules(&firewall::drop_nulls(arguments)),
        denied
    );
}

/// The bearer token of the `http_request` server; seeds that should pass auth send it.
const HTTP_TOKEN: &str = "dev-token";

/// The request body limit of the `http_request` server, small so that 413 is reachable.
const HTTP_BODY_LIMIT: usize = 64 * 1024;

/// The methods an `http_request` input picks from when its method token is not one `http`
/// accepts.
const HTTP_METHODS: [http::Method; 7] = [
    http::Method::GET,
    http::Method::POST,
    http::Method::DELETE,
    http::Method::OPTIONS,
    http::Method::HEAD,
    http::Method::PUT,
    http::Method::PATCH,
];

/// The paths an `http_request` input picks from when its path is not a valid request target.
const HTTP_PATHS: [&str; 8] = [
    "/mcp",
    "/sse",
    "/messages",
    "/healthz",
    "/readyz",
    "/metrics",
    "/.well-known/oauth-protected-resource",
    "/",
];

/// The headers an `http_request` input sets; a header line naming another maps onto one of
/// these, so mutated names still exercise the checks.
const HTTP_HEADERS: [&str; 12] = [
    "host",
    "origin",
    "content-type",
    "accept",
    "authorization",
    "mcp-protocol-version",
    "mcp-session-id",
    "mcp-method",
    "mcp-name",
    "x-forwarded-proto",
    "last-event-id",
    "access-control-request-method",
];

/// The statuses `docs/http.md` documents for the HTTP transports (200 and 204 include the CORS
/// preflight answers).
const HTTP_STATUSES: [u16; 15] = [
    200, 202, 204, 400, 401, 403, 404, 405, 406, 408, 413, 415, 421, 429, 503,
];

/// A fresh scratch project per `http_request` input: the transport keeps nothing between
/// requests that an answer depends on, and a project of its own lets the property see exactly
/// what one request wrote under `.sdd/`.
struct HttpScratch {
    project: tempfile::TempDir,
    service: McpHttp,
}

fn http_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

async fn http_scratch() -> HttpScratch {
    let project = tempfile::tempdir().expect("scratch project");
    // As the HTTP binary builds it: workdirs confined to the project, both transports listed.
    let dispatcher = Dispatcher::builder(project.path())
        .audit_key(AuditKey::from_master_bytes(AUDIT_KEY.trim_ascii().to_vec()))
        .confine_workdirs(true)
        .transports(vec![
            TransportInfo::Http {
                path: "/mcp".to_owned(),
                default: true,
            },
            TransportInfo::Sse {
                command: "bernstein-mcp --transport http".to_owned(),
                default: false,
            },
        ])
        .build()
        .expect("dispatcher on a scratch project");
    // The embedded store opens on a thread of its own, creating its lock files under
    // `.sdd/runtime/` while the first request may already run; the readiness probe waits for
    // that open (and writes nothing), so what the request writes is all that changes after
    // it (`fuzz/regressions/http_request/store-open-races-the-request`).
    let ready = dispatcher.readiness().await;
    assert!(ready.is_ok(), "the scratch project is not ready: {ready:?}");
    let metrics: MetricsRenderer = Arc::new(|| "# fuzz\n".to_owned());
    let config = HttpConfig::builder(([127, 0, 0, 1], 8053).into())
        .auth_type("bearer")
        .bearer_token(Some(HTTP_TOKEN.to_owned()))
        .oauth_issuer(Some("https://idp.example.com".to_owned()))
        .body_limit(HTTP_BODY_LIMIT)
        .metrics(Some(metrics))
        .build()
        .expect("HTTP configuration");
    HttpScratch {
        project,
        service: McpHttp::new(dispatcher, config),
    }
}

/// Every file under `dir` with its length, sorted.
fn files_under(dir: &Path) -> Vec<(std::path::PathBuf, u64)> {
    fn walk(dir: &Path, out: &mut Vec<(std::path::PathBuf, u64)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push((path, entry.metadata().map_or(0, |m| m.len())));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// Decodes an `http_request` input, which reads like an HTTP/1.1 request: a first line
/// `METHOD PATH`, header lines `name: value`, an empty line, then the body (all of it bytes).
/// A method token `http` refuses becomes one of [`HTTP_METHODS`], a path that is no valid
/// request target one of [`HTTP_PATHS`] (both chosen by the token's length), a header name
/// not in [`HTTP_HEADERS`] one of those, and a header value `http` refuses is dropped: what
/// hyper would never hand the service is not a request the service can get.
fn http_request_from(data: &[u8]) -> http::Request<Full<Bytes>> {
    let split = data
        .windows(2)
        .position(|w| w == b"\n\n")
        .map_or((data, &[][..]), |at| (&data[..at], &data[at + 2..]));
    let (head, body) = split;
    let mut lines = head.split(|&b| b == b'\n').map(|l| l.trim_ascii());
    let first = lines.next().unwrap_or_default();
    let mut words = first.splitn(2, |&b| b == b' ');
    let method_token = words.next().unwrap_or_default();
    let path_token = words.next().unwrap_or_default().trim_ascii();
    let method = http::Method::from_bytes(method_token)
        .unwrap_or_else(|_| HTTP_METHODS[method_token.len() % HTTP_METHODS.len()].clone());
    let uri = http::Uri::try_from(path_token)
        .ok()
        .filter(|uri| uri.path().starts_with('/'))
        .unwrap_or_else(|| http::Uri::from_static(HTTP_PATHS[path_token.len() % HTTP_PATHS.len()]));
    let mut request = http::Request::builder().method(method).uri(uri);
    for line in lines.take(16) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = line[..colon].trim_ascii().to_ascii_lowercase();
        let name = HTTP_HEADERS
            .iter()
            .find(|known| known.as_bytes() == name.as_slice())
            .unwrap_or(&HTTP_HEADERS[name.len() % HTTP_HEADERS.len()]);
        if let Ok(value) = http::HeaderValue::from_bytes(line[colon + 1..].trim_ascii()) {
            request = request.header(*name, value);
        }
    }
    request
        .body(Full::new(Bytes::copy_from_slice(body)))
        .expect("a request of valid parts")
}

/// HTTP request handling through the tower service: any method, path, headers and body get an
/// answer within [`ANSWER_WITHIN`], with a status `docs/http.md` documents, a body that is
/// JSON wherever the content type says so (and SSE events of JSON where it says
/// `text/event-stream`), an empty body for 202, and a refused request (status 400 or more)
/// writes nothing under the project's `.sdd/`.
pub fn http_request(data: &[u8]) {
    let request = http_request_from(data);
    let described = format!("{} {}", request.method(), request.uri());
    let opens_stream = request.uri().path() == "/sse";
    http_runtime().block_on(async {
        let HttpScratch {
            project,
            mut service,
        } = http_scratch().await;
        let sdd = project.path().join(".sdd");
        let before = files_under(&sdd);
        let answered = tokio::time::timeout(ANSWER_WITHIN, async {
            let response = service
                .call(request)
                .await
                .expect("the service is infallible");
            let (parts, mut body) = response.into_parts();
            let mut bytes = Vec::new();
            // The SSE stream never ends by itself: its first event is enough.
            while let Some(frame) = body.frame().await {
                let frame = frame.expect("a response body does not fail");
                if let Ok(data) = frame.into_data() {
                    bytes.extend_from_slice(&data);
                    if opens_stream && !bytes.is_empty() {
                        break;
                    }
                }
            }
            (parts, bytes)
        })
        .await;
        let (parts, bytes) = answered.unwrap_or_else(|_| panic!("{described}: no answer in time"));
        let status = parts.status.as_u16();
        assert!(
            HTTP_STATUSES.contains(&status),
            "{described}: undocumented status {status}"
        );
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.to_str().expect("an ASCII content type").to_owned())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        if content_type.starts_with("application/json") {
            serde_json::from_slice::<JsonValue>(&bytes).unwrap_or_else(|err| {
                panic!("{described}: {status} body is not JSON ({err}): {text}")
            });
        } else if content_type.starts_with("text/event-stream") {
            for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
                for data in block.lines().filter_map(|l| l.strip_prefix("data: ")) {
                    if !data.starts_with('/') {
                        serde_json::from_str::<JsonValue>(data).unwrap_or_else(|err| {
                            panic!("{described}: an SSE event is not JSON ({err}): {text}")
                        });
                    }
                }
            }
        }
        if status == 202 {
            assert!(bytes.is_empty(), "{described}: 202 with a body: {text}");
        }
        if status >= 400 {
            assert_eq!(
                files_under(&sdd),
                before,
                "{described}: refused with {status}, yet .sdd/ changed"
            );
        }
    });
}

/// A scratch directory on a memory file system when the machine has one: the task store
/// fsyncs every mutation, which would otherwise bound the inputs per second by the disk.
fn memory_scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("scratch dir")
}

/// The embedded task store on a hostile `.sdd/runtime/`: the input is a `tasks.jsonl`, then,
/// after the separator byte, a `task-backlog.json` (absent without one). Opening the store,
/// reading it twice, counting statuses, bringing the backlog in step, claiming from it,
/// creating a task and completing tasks never panic, whatever the files hold: a store that
/// cannot use them refuses with an error. Two reads with nothing between them agree, and no
/// file appears outside the project's `.sdd/` (a task id taken from the log names a run
/// directory, so a hostile id must not lead a write elsewhere).
pub fn task_store(data: &[u8]) {
    let mut parts = data.splitn(2, |&b| b == SEGMENT_SEPARATOR);
    let log = parts.next().unwrap_or_default();
    let backlog = parts.next();
    let outer = memory_scratch_dir();
    let project = outer.path().join("project");
    let runtime = project.join(".sdd/runtime");
    std::fs::create_dir_all(&runtime).expect("runtime dir");
    std::fs::write(runtime.join("tasks.jsonl"), log).expect("write the task log");
    if let Some(backlog) = backlog {
        std::fs::write(runtime.join("task-backlog.json"), backlog).expect("write the backlog");
    }
    let key = AuditKey::from_master_bytes(AUDIT_KEY.trim_ascii().to_vec());
    if let Ok(store) = EmbeddedStore::open(&project, Some(key.clone())) {
        exercise_task_store(&store, &project, &key);
    }
    let names = |dir: &Path| -> Vec<std::ffi::OsString> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .expect("a scratch directory lists")
            .map(|entry| entry.expect("an entry").file_name())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(outer.path()),
        ["project"],
        "a file outside the project"
    );
    assert_eq!(
        names(&project),
        [".sdd"],
        "a file outside the project's .sdd/"
    );
}

/// Every call [`task_store`] makes on a store that opened.
fn exercise_task_store(store: &EmbeddedStore, project: &Path, key: &AuditKey) {
    let listed = store.list_tasks(&ListQuery::all());
    let again = store.list_tasks(&ListQuery::all());
    assert_eq!(
        format!("{listed:?}"),
        format!("{again:?}"),
        "two reads with nothing between them disagree"
    );
    let _ = store.status_summary();
    let known: Vec<_> = listed
        .map(|page| page.tasks.into_iter().map(|task| task.id).take(4).collect())
        .unwrap_or_default();
    for id in &known {
        let _ = store.get_task(id);
    }
    let _ = store.sync_backlog();
    let request = ClaimRequest::new("fuzz-worker", ClaimFilter::default());
    let _ = store.claim_on_backlog(
        |rows| {
            let entries = entries_from_rows(rows.iter().copied(), "task-backlog.json")?;
            claim_on_entries(project, key.clone(), &request, entries, None)
        },
        |outcome: &ClaimOutcome| {
            outcome
                .granted()
                .then_some(outcome.normalised_rows.as_slice())
        },
    );
    if let Ok(created) = store.create_task(NewTask::new("fuzz", "made after a hostile log")) {
        let _ = store.complete_task(&created.id, "done");
    }
    for id in &known {
        let _ = store.complete_task(id, "done");
    }
}
