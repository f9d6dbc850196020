//! JSON-RPC 2.0 framing rules: classifying an incoming message, and building responses and
//! error payloads.
//!
//! Every message is answered from its own content. A line that is not JSON is a parse error
//! (-32700, `id: null`); JSON that is not a single request object is an invalid request
//! (-32600). Batches were removed from MCP and are refused as invalid requests. Neither stops
//! the server.
//!
//! A message is read exactly as sent or refused, never repaired: bytes that are not UTF-8 are a
//! parse error (RFC 8259 requires UTF-8; a lossy decode would sign U+FFFD into the evidence),
//! and an object that names one key twice anywhere in the message is refused (-32600, or
//! -32602 inside a tool's `arguments`), because parsers disagree about which copy wins and a
//! gateway that reads the first key would see a different request than this server.

use std::collections::HashSet;

use rmcp::model::ErrorCode;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value as JsonValue, json};

/// JSON-RPC parse error.
pub const PARSE_ERROR: i32 = ErrorCode::PARSE_ERROR.0;
/// JSON-RPC invalid request.
pub const INVALID_REQUEST: i32 = ErrorCode::INVALID_REQUEST.0;
/// JSON-RPC method not found.
pub const METHOD_NOT_FOUND: i32 = ErrorCode::METHOD_NOT_FOUND.0;
/// JSON-RPC invalid params.
pub const INVALID_PARAMS: i32 = ErrorCode::INVALID_PARAMS.0;
/// JSON-RPC internal error.
pub const INTERNAL_ERROR: i32 = ErrorCode::INTERNAL_ERROR.0;
/// MCP resource not found (protocol revisions before 2026-07-28; later ones use invalid params).
pub const RESOURCE_NOT_FOUND: i32 = ErrorCode::RESOURCE_NOT_FOUND.0;
/// MCP unsupported protocol version (2026-07-28).
pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = ErrorCode::UNSUPPORTED_PROTOCOL_VERSION.0;
/// MCP missing required client capability (2026-07-28).
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i32 = -32021;

/// How the -32602 refusal of a 2026-07-28 request whose `_meta` lacks a required key (or holds a
/// malformed one) begins, as rmcp words it. The HTTP transport answers it with status 400.
pub const INVALID_REQUEST_META: &str = "request _meta is missing or has malformed required fields";

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The code.
    pub code: i32,
    /// The message.
    pub message: String,
    /// Optional structured data.
    pub data: Option<JsonValue>,
}

impl RpcError {
    /// An error with no data.
    pub fn new(code: i32, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The same error with `data`.
    pub fn with_data(mut self, data: JsonValue) -> RpcError {
        self.data = Some(data);
        self
    }

    /// `-32602` with `message`.
    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }

    /// `-32601 Method not found: <method>`.
    pub fn method_not_found(method: &str) -> RpcError {
        RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    /// `-32603` with `message`.
    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(INTERNAL_ERROR, message)
    }

    /// The error object.
    pub fn to_json(&self) -> JsonValue {
        let mut object = Map::new();
        object.insert("code".to_owned(), JsonValue::from(self.code));
        object.insert("message".to_owned(), JsonValue::from(self.message.clone()));
        if let Some(data) = &self.data {
            object.insert("data".to_owned(), data.clone());
        }
        JsonValue::Object(object)
    }
}

/// A JSON-RPC request id: a string or an integer (MCP forbids `null`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl RequestId {
    /// Reads an id; `None` for anything but a string or an integer.
    pub fn from_json(value: &JsonValue) -> Option<RequestId> {
        match value {
            JsonValue::String(s) => Some(RequestId::String(s.clone())),
            JsonValue::Number(n) => n.as_i64().map(RequestId::Number),
            _ => None,
        }
    }

    /// The id as JSON.
    pub fn to_json(&self) -> JsonValue {
        match self {
            RequestId::Number(n) => JsonValue::from(*n),
            RequestId::String(s) => JsonValue::from(s.clone()),
        }
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// What an incoming message is.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request: answered with a response.
    Request {
        /// Its id.
        id: RequestId,
        /// The method.
        method: String,
        /// The params, when present.
        params: Option<JsonValue>,
    },
    /// A notification: never answered.
    Notification {
        /// The method.
        method: String,
        /// The params, when present.
        params: Option<JsonValue>,
    },
    /// A response or error from the client. The server sends no requests, so it is ignored.
    Response,
    /// Not a valid message: answered with this error, with the id when one could be read.
    Invalid {
        /// The request id, when the message had a usable one.
        id: Option<RequestId>,
        /// The error to answer with.
        error: RpcError,
    },
}

/// Reads one framed message given as bytes: UTF-8 is checked first (invalid bytes are a parse
/// error, never replaced), then as [`read`].
pub fn read_bytes(bytes: &[u8]) -> Incoming {
    match std::str::from_utf8(bytes) {
        Ok(text) => read(text),
        Err(err) => Incoming::Invalid {
            id: None,
            error: parse_error(&format!(
                "message is not valid UTF-8 (invalid byte at offset {})",
                err.valid_up_to()
            )),
        },
    }
}

/// Reads one framed message: parses it, refuses an object with a repeated key anywhere in it,
/// and classifies it.
///
/// A repeated top-level `id` leaves the message without a trustworthy id, so it is answered
/// with `id: null`; any other repeated key is answered with the message's id. A repeated key
/// inside `params.arguments` of a `tools/call` is invalid params (-32602), anywhere else an
/// invalid request (-32600).
pub fn read(text: &str) -> Incoming {
    let message: JsonValue = match serde_json::from_str(text) {
        Ok(message) => message,
        Err(err) => {
            return Incoming::Invalid {
                id: None,
                error: parse_error(&err.to_string()),
            };
        }
    };
    let Some(path) = repeated_key(text) else {
        return classify(message);
    };
    let id = match path.as_slice() {
        [only] if only == "id" => None,
        _ => message.get("id").and_then(RequestId::from_json),
    };
    let in_arguments = message.get("method").and_then(JsonValue::as_str) == Some("tools/call")
        && path.len() > 2
        && path[0] == "params"
        && path[1] == "arguments";
    let error = if in_arguments {
        RpcError::invalid_params(format!(
            "Invalid params: duplicate key {:?} in the tool arguments at {}",
            path[path.len() - 1],
            render_path(&path[2..path.len() - 1], "arguments"),
        ))
    } else {
        RpcError::new(
            INVALID_REQUEST,
            format!(
                "Invalid Request: duplicate key {:?} at {}",
                path[path.len() - 1],
                render_path(&path[..path.len() - 1], "the top level"),
            ),
        )
    };
    if matches!(classify(message), Incoming::Response) {
        // A client's response to us (we send no requests) is ignored, repeated keys or not.
        return Incoming::Response;
    }
    Incoming::Invalid { id, error }
}

fn parse_error(detail: &str) -> RpcError {
    RpcError::new(PARSE_ERROR, "Parse error").with_data(json!({"detail": detail}))
}

fn render_path(path: &[String], root: &str) -> String {
    if path.is_empty() {
        root.to_owned()
    } else {
        path.join(".")
    }
}

/// The path (object keys and array indices) of the first key that an object of `text` repeats,
/// ending with that key. `text` must already be known to parse.
fn repeated_key(text: &str) -> Option<Vec<String>> {
    let mut found = None;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let check = UniqueKeys {
        path: &mut Vec::new(),
        found: &mut found,
    };
    // The text parses, so the only error this pass can raise is the repeated key it records.
    let _ = check.deserialize(&mut deserializer);
    found
}

/// A validating pass over a JSON document that stops at the first object key seen twice in one
/// object. serde_json's own `Value` keeps the last copy silently, so this runs beside it.
struct UniqueKeys<'a> {
    path: &'a mut Vec<String>,
    found: &'a mut Option<Vec<String>>,
}

impl UniqueKeys<'_> {
    fn nested(&mut self) -> UniqueKeys<'_> {
        UniqueKeys {
            path: self.path,
            found: self.found,
        }
    }
}

impl<'de> DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            self.path.push(index.to_string());
            let more = seq.next_element_seed(self.nested())?.is_some();
            self.path.pop();
            if !more {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            self.path.push(key.clone());
            if !seen.insert(key) {
                *self.found = Some(self.path.clone());
                return Err(de::Error::custom("repeated object key"));
            }
            map.next_value_seed(self.nested())?;
            self.path.pop();
        }
        Ok(())
    }
}

/// Classifies a parsed message.
pub fn classify(message: JsonValue) -> Incoming {
    let invalid = |id: Option<RequestId>, message: &str| Incoming::Invalid {
        id,
        error: RpcError::new(INVALID_REQUEST, format!("Invalid Request: {message}")),
    };
    let mut object = match message {
        JsonValue::Object(object) => object,
        JsonValue::Array(_) => {
            return invalid(
                None,
                "JSON-RPC batching was removed from MCP; send one message per line",
            );
        }
        _ => return invalid(None, "a message must be a JSON object"),
    };
    let id = object.get("id").and_then(RequestId::from_json);
    if object.get("jsonrpc").and_then(JsonValue::as_str) != Some("2.0") {
        return invalid(id, "jsonrpc must be \"2.0\"");
    }
    let params = object.remove("params");
    match (object.remove("method"), object.get("id")) {
        (Some(JsonValue::String(method)), None) => Incoming::Notification { method, params },
        (Some(JsonValue::String(method)), Some(_)) => match id {
            Some(id) => match &params {
                None | Some(JsonValue::Object(_)) => Incoming::Request { id, method, params },
                Some(_) => Incoming::Invalid {
                    id: Some(id),
                    error: RpcError::new(
                        INVALID_REQUEST,
                        "Invalid Request: params must be an object",
                    ),
                },
            },
            None => invalid(None, "id must be a string or an integer"),
        },
        (Some(_), _) => invalid(id, "method must be a string"),
        (None, Some(_)) if object.contains_key("result") || object.contains_key("error") => {
            Incoming::Response
        }
        (None, _) => invalid(id, "missing method"),
    }
}

/// `{"jsonrpc": "2.0", "id": <id>, "result": <result>}`.
pub fn result_response(id: &RequestId, result: JsonValue) -> JsonValue {
    json!({"jsonrpc": "2.0", "id": id.to_json(), "result": result})
}

/// `{"jsonrpc": "2.0", "id": <id or null>, "error": <error>}`.
pub fn error_response(id: Option<&RequestId>, error: &RpcError) -> JsonValue {
    crate::telemetry::jsonrpc_error(error);
    json!({
        "jsonrpc": "2.0",
        "id": id.map_or(JsonValue::Null, RequestId::to_json),
        "error": error.to_json(),
    })
}

/// `{"jsonrpc": "2.0", "method": <method>, "params": <params>}`.
pub fn notification(method: &str, params: JsonValue) -> JsonValue {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let check = |text: &str, expect: &str| {
            let got = match classify(serde_json::from_str(text).unwrap()) {
                Incoming::Request { id, method, .. } => format!("request {id} {method}"),
                Incoming::Notification { method, .. } => format!("notification {method}"),
                Incoming::Response => "response".to_owned(),
                Incoming::Invalid { id, error } => format!(
                    "invalid {} {} {}",
                    id.map_or("-".to_owned(), |i| i.to_string()),
                    error.code,
                    error.message
                ),
            };
            assert_eq!(got, expect, "{text}");
        };
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            "request 1 ping",
        );
        check(
            r#"{"jsonrpc":"2.0","id":"a","method":"ping","params":{}}"#,
            "request \"a\" ping",
        );
        check(
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "notification notifications/initialized",
        );
        check(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, "response");
        check(
            r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#,
            "invalid 3 -32600 Invalid Request: jsonrpc must be \"2.0\"",
        );
        check(
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            "invalid - -32600 Invalid Request: id must be a string or an integer",
        );
        check(
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            "invalid - -32600 Invalid Request: id must be a string or an integer",
        );
        check(
            r#"{"jsonrpc":"2.0","id":4,"method":7}"#,
            "invalid 4 -32600 Invalid Request: method must be a string",
        );
        check(
            r#"{"jsonrpc":"2.0","id":5}"#,
            "invalid 5 -32600 Invalid Request: missing method",
        );
        check(
            r#"{"jsonrpc":"2.0","id":6,"method":"x","params":[1]}"#,
            "invalid 6 -32600 Invalid Request: params must be an object",
        );
        check(
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            "invalid - -32600 Invalid Request: JSON-RPC batching was removed from MCP; send one message per line",
        );
        check(
            "42",
            "invalid - -32600 Invalid Request: a message must be a JSON object",
        );
    }

    /// How `read` answers `text`: the refusal's id, code and message, or what it accepted.
    fn refusal(text: &str) -> String {
        match read(text) {
            Incoming::Invalid { id, error } => format!(
                "{} {} {}",
                id.map_or("-".to_owned(), |i| i.to_string()),
                error.code,
                error.message
            ),
            other => format!("accepted: {other:?}"),
        }
    }

    #[test]
    fn repeated_keys_are_found_at_any_depth_and_answered_by_place() {
        assert_eq!(
            repeated_key(r#"{"a":1,"b":{"c":[{"d":1,"d":2}]}}"#).unwrap(),
            ["b", "c", "0", "d"]
        );
        // Keys are compared after unescaping.
        assert_eq!(repeated_key(r#"{"a":1,"\u0061":2}"#).unwrap(), ["a"]);
        assert_eq!(
            repeated_key(r#"{"a":{"x":1},"b":{"x":1},"c":[{"x":1},{"x":1}]}"#),
            None
        );
        assert_eq!(
            refusal(r#"{"jsonrpc":"2.0","id":10,"method":"ping","id":11}"#),
            r#"- -32600 Invalid Request: duplicate key "id" at the top level"#
        );
        assert_eq!(
            refusal(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}"#
            ),
            r#"1 -32600 Invalid Request: duplicate key "name" at params"#
        );
        assert_eq!(
            refusal(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":1,"x":2}}}"#
            ),
            r#"1 -32602 Invalid params: duplicate key "x" in the tool arguments at arguments"#
        );
        assert_eq!(
            refusal(
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"requestId":2}}"#
            ),
            r#"- -32600 Invalid Request: duplicate key "requestId" at params"#
        );
        assert!(matches!(
            read(r#"{"jsonrpc":"2.0","id":1,"result":{"a":1,"a":2}}"#),
            Incoming::Response
        ));
    }

    #[test]
    fn repeated_keys_are_placed_by_their_own_path() {
        // The path names each array element by its own index, so a repeat in a later element
        // is found there and not only in the first one.
        let path = |text: &str, expect: &[&str]| {
            assert_eq!(repeated_key(text).unwrap(), expect, "{text}");
        };
        path(r#"{"a":[1,{"k":1,"k":2}]}"#, &["a", "1", "k"]);
        path(
            r#"[{"k":1},[],{"k":1},{"x":[0,0,{"y":1,"y":1}]}]"#,
            &["3", "x", "2", "y"],
        );
        let check = |text: &str, expect: &str| assert_eq!(refusal(text), expect, "{text}");
        // Only a repeated `id` costs the message its id; another repeated top-level key keeps it.
        check(
            r#"{"jsonrpc":"2.0","id":7,"method":"ping","method":"ping"}"#,
            r#"7 -32600 Invalid Request: duplicate key "method" at the top level"#,
        );
        // A repeated `arguments` key is a flaw of the params, not of the tool arguments.
        check(
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"a","arguments":{},"arguments":{}}}"#,
            r#"8 -32600 Invalid Request: duplicate key "arguments" at params"#,
        );
        // Only a `tools/call` has tool arguments; a prompt's arguments are request params.
        check(
            r#"{"jsonrpc":"2.0","id":9,"method":"prompts/get","params":{"name":"p","arguments":{"x":"1","x":"2"}}}"#,
            r#"9 -32600 Invalid Request: duplicate key "x" at params.arguments"#,
        );
        // An `arguments` object outside `params` is not the tool arguments either.
        check(
            r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","extra":{"arguments":{"x":1,"x":2}}}"#,
            r#"10 -32600 Invalid Request: duplicate key "x" at extra.arguments"#,
        );
        check(
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"a","arguments":{"o":[{"y":1,"y":2}]}}}"#,
            r#"11 -32602 Invalid params: duplicate key "y" in the tool arguments at o.0"#,
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_a_parse_error() {
        match read_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"ping\"}") {
            Incoming::Invalid { id: None, error } => {
                assert_eq!(error.code, PARSE_ERROR);
                assert_eq!(
                    error.data.unwrap()["detail"],
                    "message is not valid UTF-8 (invalid byte at offset 23)"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_bytes(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Incoming::Request { .. }
        ));
    }

    #[test]
    fn parse_errors_answer_with_a_null_id() {
        match read("{not json") {
            Incoming::Invalid { id: None, error } => {
                assert_eq!(error.code, PARSE_ERROR);
                assert_eq!(error.message, "Parse error");
                assert!(error.data.is_some());
            }
            other => panic!("{other:?}"),
        }
    }
}
