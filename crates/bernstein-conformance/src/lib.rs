//! `bernstein-conformance`: the official MCP conformance suite's fixtures, served through the
//! bernstein-mcp dispatcher and its transports.
//!
//! `@modelcontextprotocol/conformance` (`server --url …`) calls fixed tools, prompts and
//! resources (the "everything server" set: `test_simple_text`, `test://static-text`,
//! `test_simple_prompt`, …). [`Fixtures`] is an [`Extension`] that adds them beside Bernstein's
//! own catalogue, so the suite exercises the one dispatcher (its lifecycles, stamping, limits,
//! cancellation, progress, logging, completion and subscriptions) rather than a separate
//! server. [`dispatcher`] builds that dispatcher over a scratch project.
//!
//! Fixtures the dispatcher cannot serve are not listed; `expected-failures/*.yml` names each
//! scenario that fails for it, with the reason.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bernstein_journal::key::{AuditKey, KeyLocator};
use bernstein_mcp_core::extension::{BoxFuture, Extension, ExtensionAnswer, ExtensionCall};
use bernstein_mcp_core::jsonrpc::RpcError;
use bernstein_mcp_core::{Dispatcher, DispatcherBuilder, LogLevel};
use serde_json::{Map, Value, json};

/// A 1×1 red PNG (the image the fixtures return).
const RED_PIXEL_PNG: [u8; 69] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x08, 0xd7, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0x18, 0xdd, 0x8d, 0xb0, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// The `$schema` the JSON Schema 2020-12 fixture declares.
pub const JSON_SCHEMA_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// The image fixture, base64.
pub fn png_base64() -> String {
    STANDARD.encode(RED_PIXEL_PNG)
}

/// The audio fixture: a 0.1 s, 8 kHz, 8-bit mono WAV of a 440 Hz square wave, base64.
pub fn wav_base64() -> String {
    const RATE: u32 = 8_000;
    let samples: Vec<u8> = (0..RATE / 10)
        .map(|i| {
            if (i * 440 * 2 / RATE).is_multiple_of(2) {
                0xc0
            } else {
                0x40
            }
        })
        .collect();
    let data_len = u32::try_from(samples.len()).unwrap_or(0);
    let mut wav = Vec::with_capacity(44 + samples.len());
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data_len).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&RATE.to_le_bytes());
    wav.extend_from_slice(&RATE.to_le_bytes()); // byte rate: 1 byte per sample
    wav.extend_from_slice(&1u16.to_le_bytes()); // block align
    wav.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&data_len.to_le_bytes());
    wav.extend_from_slice(&samples);
    STANDARD.encode(wav)
}

/// The suite's fixture tools, prompts and resources as an [`Extension`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Fixtures;

/// The text of the `test://static-text` resource.
pub const STATIC_TEXT: &str = "This is the content of the static text resource.";

fn tool(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description, "inputSchema": {"type": "object", "properties": {}}})
}

fn text(text: impl Into<String>) -> Value {
    json!({"type": "text", "text": text.into()})
}

fn embedded(uri: &str, body: &str) -> Value {
    json!({"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain", "text": body}})
}

fn image() -> Value {
    json!({"type": "image", "data": png_base64(), "mimeType": "image/png"})
}

/// Values `completion/complete` offers for `test_prompt_with_arguments`'s arguments.
const ARGUMENT_VALUES: [&str; 4] = ["paris", "park", "party", "test-value"];

impl Extension for Fixtures {
    fn tools(&self) -> Vec<Value> {
        vec![
            tool("test_simple_text", "Returns one text block."),
            tool("test_image_content", "Returns one PNG image block."),
            tool("test_audio_content", "Returns one WAV audio block."),
            tool(
                "test_embedded_resource",
                "Returns one embedded text resource.",
            ),
            tool(
                "test_multiple_content_types",
                "Returns a text, an image and an embedded resource block.",
            ),
            tool(
                "test_tool_with_logging",
                "Sends three info log messages while it runs.",
            ),
            tool("test_error_handling", "Always answers a tool error."),
            tool(
                "test_tool_with_progress",
                "Reports progress 0, 50 and 100 of 100 while it runs.",
            ),
            json!({
                "name": "json_schema_2020_12_tool",
                "description": "Tool with JSON Schema 2020-12 features",
                "inputSchema": {
                    "$schema": JSON_SCHEMA_2020_12,
                    "type": "object",
                    "$defs": {"address": {"$anchor": "address", "type": "object", "properties": {
                        "street": {"type": "string"}, "city": {"type": "string"}}}},
                    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
                    "allOf": [{"anyOf": [{"required": ["name"]}, {"required": ["address"]}, {"maxProperties": 0}]}],
                    "if": {"properties": {"name": {"const": "with-address"}}},
                    "then": {"required": ["address"]},
                    "else": {},
                    "additionalProperties": false,
                },
            }),
        ]
    }

    fn call_tool<'a>(
        &'a self,
        name: &'a str,
        call: ExtensionCall,
    ) -> BoxFuture<'a, ExtensionAnswer> {
        Box::pin(async move {
            let pause = Duration::from_millis(50);
            let content = match name {
                "test_simple_text" => vec![text("This is a simple text response for testing.")],
                "test_image_content" => vec![image()],
                "test_audio_content" => {
                    vec![json!({"type": "audio", "data": wav_base64(), "mimeType": "audio/wav"})]
                }
                "test_embedded_resource" => vec![embedded(
                    "test://embedded-resource",
                    "This is an embedded resource content.",
                )],
                "test_multiple_content_types" => vec![
                    text("Multiple content types test:"),
                    image(),
                    embedded(
                        "test://mixed-content-resource",
                        "{\"test\": \"data\", \"value\": 123}",
                    ),
                ],
                "test_tool_with_logging" => {
                    for (i, message) in [
                        "Tool execution started",
                        "Tool processing data",
                        "Tool execution completed",
                    ]
                    .into_iter()
                    .enumerate()
                    {
                        if i > 0 {
                            tokio::time::sleep(pause).await;
                        }
                        call.log(LogLevel::Info, "conformance", json!(message));
                    }
                    vec![text("Tool with logging executed successfully")]
                }
                "test_error_handling" => {
                    return Ok(json!({
                        "content": [text("This tool intentionally returns an error for testing")],
                        "isError": true,
                    }));
                }
                "test_tool_with_progress" => {
                    for (i, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                        if i > 0 {
                            tokio::select! {
                                () = call.cancel.cancelled() => {
                                    return Ok(json!({
                                        "content": [text(format!("cancelled at {progress}"))],
                                        "cancelled": true,
                                        "partial": [format!("progress {progress}")],
                                    }));
                                }
                                () = tokio::time::sleep(pause) => {}
                            }
                        }
                        call.progress(progress, Some(100.0), Some(&format!("step {}", i + 1)));
                    }
                    vec![text(format!("Progress tool completed ({})", call.call_id))]
                }
                "json_schema_2020_12_tool" => {
                    vec![text(format!(
                        "Received: {}",
                        Value::Object(call.arguments.clone())
                    ))]
                }
                other => return Err(RpcError::invalid_params(format!("Unknown tool: {other}"))),
            };
            Ok(json!({"content": content, "isError": false}))
        })
    }

    fn prompts(&self) -> Vec<Value> {
        vec![
            json!({"name": "test_simple_prompt", "description": "A prompt without arguments."}),
            json!({"name": "test_prompt_with_arguments", "description": "A prompt with two required arguments.",
            "arguments": [
                {"name": "arg1", "description": "First test argument", "required": true},
                {"name": "arg2", "description": "Second test argument", "required": true},
            ]}),
            json!({"name": "test_prompt_with_embedded_resource", "description": "A prompt that embeds a resource.",
                "arguments": [{"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]}),
            json!({"name": "test_prompt_with_image", "description": "A prompt with an image."}),
        ]
    }

    fn get_prompt(&self, name: &str, arguments: &Map<String, Value>) -> ExtensionAnswer {
        let required = |key: &str| {
            arguments
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    RpcError::invalid_params(format!("Missing required argument: {key}"))
                })
        };
        let user = |content: Value| json!({"role": "user", "content": content});
        let messages = match name {
            "test_simple_prompt" => vec![user(text("This is a simple prompt for testing."))],
            "test_prompt_with_arguments" => {
                let (arg1, arg2) = (required("arg1")?, required("arg2")?);
                vec![user(text(format!(
                    "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
                )))]
            }
            "test_prompt_with_embedded_resource" => {
                let uri = required("resourceUri")?;
                vec![
                    user(embedded(&uri, "Embedded resource content for testing.")),
                    user(text("Please process the embedded resource above.")),
                ]
            }
            "test_prompt_with_image" => {
                vec![user(image()), user(text("Please analyze the image above."))]
            }
            other => return Err(RpcError::invalid_params(format!("Unknown prompt: {other}"))),
        };
        Ok(json!({"messages": messages}))
    }

    fn resources(&self) -> Vec<Value> {
        vec![
            json!({"uri": "test://static-text", "name": "static-text", "mimeType": "text/plain"}),
            json!({"uri": "test://static-binary", "name": "static-binary", "mimeType": "image/png"}),
            json!({"uri": "test://watched-resource", "name": "watched-resource", "mimeType": "text/plain"}),
        ]
    }

    fn resource_templates(&self) -> Vec<Value> {
        vec![json!({
            "uriTemplate": "test://template/{id}/data",
            "name": "template",
            "description": "A resource whose content names its id.",
            "mimeType": "application/json",
        })]
    }

    fn read_resource(&self, uri: &str) -> Option<ExtensionAnswer> {
        let contents = match uri {
            "test://static-text" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": STATIC_TEXT})
            }
            "test://static-binary" => {
                json!({"uri": uri, "mimeType": "image/png", "blob": png_base64()})
            }
            "test://watched-resource" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "A resource clients may subscribe to."})
            }
            _ => {
                let id = uri
                    .strip_prefix("test://template/")?
                    .strip_suffix("/data")
                    .filter(|id| !id.is_empty() && !id.contains('/'))?;
                let body =
                    json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                json!({"uri": uri, "mimeType": "application/json", "text": body.to_string()})
            }
        };
        Some(Ok(json!({"contents": [contents]})))
    }

    fn complete(
        &self,
        reference: &Value,
        argument: &str,
        _value: &str,
    ) -> Option<Result<Vec<String>, RpcError>> {
        let values = |list: &[&str]| Ok(list.iter().map(|v| (*v).to_owned()).collect());
        match (reference.get("type")?.as_str()?, argument) {
            ("ref/prompt", "arg1" | "arg2")
                if reference.get("name")? == "test_prompt_with_arguments" =>
            {
                Some(values(&ARGUMENT_VALUES))
            }
            ("ref/resource", "id") if reference.get("uri")? == "test://template/{id}/data" => {
                Some(values(&["1", "42", "123"]))
            }
            _ => None,
        }
    }
}

/// Why the conformance server could not start.
#[derive(Debug)]
pub struct SetupError(pub String);

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SetupError {}

/// The builder of the dispatcher the conformance server runs: Bernstein's catalogue plus
/// [`Fixtures`], over the project at `workdir`, anchoring every call with an audit key kept in
/// that project (`.sdd/conformance-audit.key`, created on first use). A legacy stream that sets
/// no log level gets `info` and above, as the suite's reference server sends its messages
/// unasked (over stateless HTTP a `logging/setLevel` reaches only its own request).
///
/// # Errors
///
/// [`SetupError`] when the key cannot be loaded or created.
pub fn dispatcher_builder(workdir: &Path) -> Result<DispatcherBuilder, SetupError> {
    let key_path = workdir.join(".sdd").join("conformance-audit.key");
    let key = AuditKey::load_or_create(&KeyLocator::at(&key_path))
        .map_err(|err| SetupError(format!("audit key {}: {err}", key_path.display())))?;
    Ok(Dispatcher::builder(workdir)
        .audit_key(key)
        .extension(Arc::new(Fixtures))
        .default_log_level(Some(LogLevel::Info)))
}

/// [`dispatcher_builder`], built.
///
/// # Errors
///
/// [`SetupError`] when the key or the dispatcher cannot be built.
pub fn dispatcher(workdir: &Path) -> Result<Dispatcher, SetupError> {
    dispatcher_builder(workdir)?
        .build()
        .map_err(|err| SetupError(format!("dispatcher: {err}")))
}
