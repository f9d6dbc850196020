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

use bernstein_journal::audit;
use bernstein_journal::dlp::{self, DlpMode};
use bernstein_journal::key::AuditKey;
use bernstein_journal::run_journal;
use bernstein_mcp_core::{CallScope, DiscardNotifications, Dispatcher};
use bernstein_protocol::pyjson::{Dialect, Value};
use bernstein_tools::{Catalogue, ToolConfig, firewall};
use serde_json::Value as JsonValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long one input may keep the dispatcher or the stdio server busy before it counts as a
/// hang.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// The key the audit vectors were written under, so seeds taken from them verify.
const AUDIT_KEY: &[u8] = include_bytes!("../../fixtures/vectors/_keys/audit.key");

/// Separates the segments of an `audit_verify` input.
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
    let admitted = catalogue.admits(name, &arguments);
    assert_eq!(catalogue.admits(name, &arguments), admitted, "{name}");
    let denied = firewall::deny_rules(&firewall::drop_nulls(arguments.clone()));
    assert_eq!(
        firewall::deny_rules(&firewall::drop_nulls(arguments)),
        denied
    );
}
