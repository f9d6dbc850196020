//! The input firewall every tool call passes before its handler runs (`MCP_SURFACE.md` §5).
//!
//! In order:
//!
//! 1. the arguments must be a JSON object (`params must be a JSON object`);
//! 2. deny-by-default rules (`payload rejected by deny-by-default rules`): the payload, written
//!    as `json.dumps(payload, ensure_ascii=False)` writes it, may be at most 65 536 UTF-8
//!    bytes; nothing may sit deeper than 10 levels below the payload object; no string, and
//!    (beyond the reference) no object key, may hold a C0 control character other than TAB, LF
//!    and CR, nor DEL, nor U+0080..U+009F;
//! 3. the tool's draft-07 schema (`payload failed schema validation`), one entry per violation,
//!    sorted by path, with the reason worded as Python's `jsonschema` words it (so
//!    `'huge' is not one of ['small', 'medium', 'large']`).
//!
//! Unlike the reference's stdio server, which silently drops unknown keys and coerces `"2"` to
//! `2` before its firewall sees them, the schema here sees exactly what the client sent:
//! `additionalProperties: false` and the declared types are enforced.
//!
//! Top-level `null` values are dropped before any check, as the reference handlers drop `None`
//! arguments.

use std::fmt::Write as _;

use bernstein_protocol::pyjson::{Dialect, Object, Value as PyValue};
use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde_json::Value;

/// The largest payload accepted, in UTF-8 bytes of its `json.dumps(ensure_ascii=False)` form.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// The deepest nesting accepted below the payload object.
pub const MAX_DEPTH: usize = 10;
/// JSON-RPC "invalid params".
pub const INVALID_PARAMS: i64 = -32602;

/// The message of a deny-rule refusal.
pub const DENY_MESSAGE: &str = "payload rejected by deny-by-default rules";
/// The message of a schema refusal.
pub const SCHEMA_MESSAGE: &str = "payload failed schema validation";
/// The message of a non-object payload.
pub const NOT_OBJECT_MESSAGE: &str = "params must be a JSON object";

/// One violation: a JSON pointer (`""` for the payload itself) and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Where, as `/key/0/sub`.
    pub path: String,
    /// Why.
    pub reason: String,
}

impl Violation {
    fn new(path: impl Into<String>, reason: impl Into<String>) -> Violation {
        Violation {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// A refused payload: the reference's `ValidationError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The tool the payload was for.
    pub tool: String,
    /// The JSON-RPC code (always -32602 here: unknown tools never reach the firewall).
    pub code: i64,
    /// The one-line message.
    pub message: String,
    /// Every violation.
    pub errors: Vec<Violation>,
}

impl Refusal {
    /// The tool payload: `{"error": message, "jsonrpc_error": {"code", "message", "data":
    /// {"tool", "errors": [{"path", "reason"}]}}}`.
    pub fn payload(&self) -> Object {
        let errors: Vec<PyValue> = self
            .errors
            .iter()
            .map(|v| {
                PyValue::Object(
                    Object::new()
                        .with("path", v.path.as_str())
                        .with("reason", v.reason.as_str()),
                )
            })
            .collect();
        Object::new().with("error", self.message.as_str()).with(
            "jsonrpc_error",
            Object::new()
                .with("code", self.code)
                .with("message", self.message.as_str())
                .with(
                    "data",
                    Object::new()
                        .with("tool", self.tool.as_str())
                        .with("errors", errors),
                ),
        )
    }

    /// The payload as the reference's handlers return it: `json.dumps(payload)`.
    pub fn payload_text(&self) -> String {
        PyValue::Object(self.payload()).dumps(Dialect::PY_ROW)
    }
}

/// Drops the top-level `null` values of an argument object (the reference handlers drop `None`
/// arguments before validating and never send them on).
pub fn drop_nulls(arguments: Value) -> Value {
    match arguments {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    }
}

/// Runs the whole firewall for `tool` over `payload` (nulls already dropped); `schema` is the
/// document `validator` was compiled from.
pub fn check(
    tool: &str,
    payload: &Value,
    validator: &jsonschema::Validator,
    schema: &Value,
) -> Result<(), Refusal> {
    let refuse = |message: &str, errors: Vec<Violation>| Refusal {
        tool: tool.to_owned(),
        code: INVALID_PARAMS,
        message: message.to_owned(),
        errors,
    };
    if !payload.is_object() {
        return Err(refuse(
            NOT_OBJECT_MESSAGE,
            vec![Violation::new("", "expected object payload")],
        ));
    }
    let denied = deny_rules(payload);
    if !denied.is_empty() {
        return Err(refuse(DENY_MESSAGE, denied));
    }
    let violations = schema_violations(payload, validator, schema);
    if violations.is_empty() {
        Ok(())
    } else {
        Err(refuse(SCHEMA_MESSAGE, violations))
    }
}

/// The deny-by-default rules, every violation listed.
pub fn deny_rules(payload: &Value) -> Vec<Violation> {
    let mut violations = Vec::new();
    let size = python_dumps_utf8_len(payload);
    if size > MAX_PAYLOAD_BYTES {
        violations.push(Violation::new(
            "",
            format!("payload exceeds {MAX_PAYLOAD_BYTES} bytes (got {size})"),
        ));
    }
    if let Some(depth) = depth_breach(payload, 0) {
        violations.push(Violation::new(
            "",
            format!("payload nesting exceeds depth {MAX_DEPTH} (got {depth})"),
        ));
    }
    control_characters(payload, "", &mut violations);
    violations
}

/// The UTF-8 length of `json.dumps(value, ensure_ascii=False)`.
fn python_dumps_utf8_len(value: &Value) -> usize {
    let dialect = Dialect {
        sort_keys: false,
        compact: false,
        ensure_ascii: false,
    };
    PyValue::from(value).dumps(dialect).len()
}

/// The first depth below the payload at which the limit is exceeded (leaves count too), in
/// document order, as the reference reports it.
fn depth_breach(value: &Value, depth: usize) -> Option<usize> {
    if depth > MAX_DEPTH {
        return Some(depth);
    }
    match value {
        Value::Object(map) => map.values().find_map(|v| depth_breach(v, depth + 1)),
        Value::Array(items) => items.iter().find_map(|v| depth_breach(v, depth + 1)),
        _ => None,
    }
}

fn is_disallowed_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r')
        && (c <= '\u{1f}' || c == '\u{7f}' || ('\u{80}'..='\u{9f}').contains(&c))
}

fn control_characters(value: &Value, path: &str, out: &mut Vec<Violation>) {
    match value {
        Value::String(text) if text.chars().any(is_disallowed_control) => {
            let path = if path.is_empty() { "/" } else { path };
            out.push(Violation::new(
                path,
                "string contains disallowed control character",
            ));
        }
        Value::Object(map) => {
            for (key, item) in map {
                // A key is text a consumer stores and prints just like a value (a SARIF
                // result's keys are sealed into a blob). The finding names the object that
                // holds the key rather than echoing the key's control characters back.
                if key.chars().any(is_disallowed_control) {
                    out.push(Violation::new(
                        if path.is_empty() { "/" } else { path },
                        "object key contains disallowed control character",
                    ));
                }
                control_characters(item, &format!("{path}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                control_characters(item, &format!("{path}/{index}"), out);
            }
        }
        _ => {}
    }
}

/// One path component, ordered as Python orders the components of `absolute_path` lists of
/// one payload (keys among keys, indexes among indexes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Component {
    Index(usize),
    Key(String),
}

fn components(path: &jsonschema::paths::Location) -> Vec<Component> {
    path.segments()
        .map(|segment| match segment {
            jsonschema::paths::LocationSegment::Index(i) => Component::Index(i),
            jsonschema::paths::LocationSegment::Property(p) => Component::Key(p.into_owned()),
        })
        .collect()
}

fn pointer(components: &[Component]) -> String {
    let mut out = String::new();
    for component in components {
        out.push('/');
        match component {
            Component::Index(i) => {
                let _ = write!(out, "{i}");
            }
            Component::Key(key) => out.push_str(key),
        }
    }
    out
}

/// Every schema violation, sorted by path (stable, so violations at one path keep the
/// validator's order). `schema` is the document `validator` was compiled from; it names the
/// property a failed `dependencies` entry belongs to.
pub fn schema_violations(
    payload: &Value,
    validator: &jsonschema::Validator,
    schema: &Value,
) -> Vec<Violation> {
    let mut found: Vec<(Vec<Component>, String)> = validator
        .iter_errors(payload)
        .map(|error| {
            let path = components(error.instance_path());
            let owner = dependency_owner(
                schema,
                error.schema_path().as_str(),
                error.kind(),
                error.instance(),
            );
            let keyword = schema.pointer(error.schema_path().as_str());
            let reason = python_message(error.kind(), error.instance(), owner.as_deref(), keyword);
            (path, reason)
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
        .into_iter()
        .map(|(path, reason)| Violation::new(pointer(&path), reason))
        .collect()
}

/// The reason as Python's `jsonschema` (4.x) words it.
///
/// `dependency_of` names the property a failed `dependencies` entry belongs to; `keyword` is
/// the failing keyword's value in the schema, which keeps the declared order of a `type` list.
fn python_message(
    kind: &ValidationErrorKind,
    instance: &Value,
    dependency_of: Option<&str>,
    keyword: Option<&Value>,
) -> String {
    let it = python_repr(instance);
    match kind {
        ValidationErrorKind::Type { kind } => {
            let declared: Option<Vec<String>> = keyword.and_then(Value::as_array).map(|types| {
                types
                    .iter()
                    .filter_map(Value::as_str)
                    .map(python_str_repr)
                    .collect()
            });
            let names: Vec<String> = match (declared, kind) {
                (Some(declared), _) => declared,
                (None, TypeKind::Single(t)) => vec![python_str_repr(&t.to_string())],
                (None, TypeKind::Multiple(set)) => set
                    .iter()
                    .map(|t| python_str_repr(&t.to_string()))
                    .collect(),
            };
            format!("{it} is not of type {}", names.join(", "))
        }
        ValidationErrorKind::Enum { options } => {
            format!("{it} is not one of {}", python_repr(options))
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!("{} was expected", python_repr(expected_value))
        }
        ValidationErrorKind::MinLength { limit } | ValidationErrorKind::MinItems { limit } => {
            if *limit == 1 {
                format!("{it} should be non-empty")
            } else {
                format!("{it} is too short")
            }
        }
        ValidationErrorKind::MaxLength { limit } | ValidationErrorKind::MaxItems { limit } => {
            if *limit == 0 {
                format!("{it} is expected to be empty")
            } else {
                format!("{it} is too long")
            }
        }
        ValidationErrorKind::Minimum { limit } => {
            format!("{it} is less than the minimum of {}", python_repr(limit))
        }
        ValidationErrorKind::Maximum { limit } => {
            format!("{it} is greater than the maximum of {}", python_repr(limit))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => format!(
            "{it} is less than or equal to the minimum of {}",
            python_repr(limit)
        ),
        ValidationErrorKind::ExclusiveMaximum { limit } => format!(
            "{it} is greater than or equal to the maximum of {}",
            python_repr(limit)
        ),
        ValidationErrorKind::Pattern { pattern } => {
            format!("{it} does not match {}", python_str_repr(pattern))
        }
        ValidationErrorKind::Required { property } => {
            let missing = python_repr(property);
            match dependency_of {
                Some(owner) => format!("{missing} is a dependency of {}", python_str_repr(owner)),
                None => format!("{missing} is a required property"),
            }
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let mut names = unexpected.clone();
            names.sort();
            let verb = if names.len() == 1 { "was" } else { "were" };
            let listed: Vec<String> = names.iter().map(|n| python_str_repr(n)).collect();
            format!(
                "Additional properties are not allowed ({} {verb} unexpected)",
                listed.join(", ")
            )
        }
        ValidationErrorKind::AnyOf { .. } => {
            format!("{it} is not valid under any of the given schemas")
        }
        ValidationErrorKind::OneOfNotValid { .. } => {
            format!("{it} is not valid under any of the given schemas")
        }
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            format!("{it} is valid under each of the given schemas")
        }
        ValidationErrorKind::Not { schema } => {
            format!("{} should not be valid under {}", it, python_repr(schema))
        }
        ValidationErrorKind::FalseSchema => format!("False schema does not allow {it}"),
        ValidationErrorKind::UniqueItems => format!("{it} has non-unique elements"),
        ValidationErrorKind::MinProperties { .. } => {
            format!("{it} does not have enough properties")
        }
        ValidationErrorKind::MaxProperties { .. } => format!("{it} has too many properties"),
        other => format!("{it} failed the {} check", other.keyword()),
    }
}

/// For a `required` failure raised by a `dependencies` keyword, the property whose dependency
/// list names the missing one. The validator reports the `dependencies` keyword's location
/// without the property, so it is found again in the schema: the first property, in schema
/// order, that is present in the instance and lists the missing name.
fn dependency_owner(
    schema: &Value,
    schema_path: &str,
    kind: &ValidationErrorKind,
    instance: &Value,
) -> Option<String> {
    let ValidationErrorKind::Required { property } = kind else {
        return None;
    };
    let at = schema_path.rfind("/dependencies")?;
    let parent = schema.pointer(&schema_path[..at])?;
    let dependencies = parent.get("dependencies")?.as_object()?;
    let present = instance.as_object()?;
    dependencies
        .iter()
        .find(|(owner, needs)| {
            present.contains_key(owner.as_str())
                && needs
                    .as_array()
                    .is_some_and(|list| list.iter().any(|n| n == property))
        })
        .map(|(owner, _)| owner.clone())
}

/// Python's `repr(str)`.
pub(crate) use bernstein_protocol::pyrepr::python_str_repr;

/// Python's `repr` of the value `json.loads` would produce for a wire value.
pub(crate) fn python_repr(value: &Value) -> String {
    bernstein_protocol::pyrepr::python_repr(&PyValue::from(value))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn validator(schema: &Value) -> jsonschema::Validator {
        jsonschema::draft7::new(schema).unwrap()
    }

    #[test]
    fn python_reprs() {
        let check = |value: Value, expect: &str| assert_eq!(python_repr(&value), expect);
        check(json!(null), "None");
        check(json!(true), "True");
        check(json!(120.0), "120.0");
        check(json!(9), "9");
        check(json!("it's"), "\"it's\"");
        check(json!(["a", 1, null]), "['a', 1, None]");
        check(json!({"k": [false]}), "{'k': [False]}");
    }

    #[test]
    fn depth_counts_leaves_below_the_payload() {
        let mut value = json!("leaf");
        for _ in 0..10 {
            value = json!([value]);
        }
        // Ten arrays: the leaf sits at depth 10 under {"a": ...} plus one = 11.
        let payload = json!({ "a": value });
        assert_eq!(depth_breach(&payload, 0), Some(11));
        let shallow = json!({"a": [[[[[[[[["x"]]]]]]]]]});
        assert_eq!(depth_breach(&shallow, 0), None);
    }

    #[test]
    fn control_characters_are_located() {
        let payload = json!({"a": "ok\ttab", "b": ["x", "bell\u{7}"], "c": "\u{85}"});
        let mut found = Vec::new();
        control_characters(&payload, "", &mut found);
        let paths: Vec<&str> = found.iter().map(|v| v.path.as_str()).collect();
        assert_eq!(paths, ["/b/1", "/c"]);
        let mut root = Vec::new();
        control_characters(&json!("\u{1b}"), "", &mut root);
        assert_eq!(root[0].path, "/");
    }

    #[test]
    fn control_characters_in_keys_are_refused_like_values() {
        let payload = json!({
            "sarif_result": {"ok": 1, "\u{1b}]0;pwned\u{7}\u{0}": "v"},
            "tab\tkey": "tabs are allowed",
            "\u{85}": 1
        });
        let mut found = Vec::new();
        control_characters(&payload, "", &mut found);
        let got: Vec<(&str, &str)> = found
            .iter()
            .map(|v| (v.path.as_str(), v.reason.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "/sarif_result",
                    "object key contains disallowed control character"
                ),
                ("/", "object key contains disallowed control character"),
            ]
        );
    }

    #[test]
    fn messages_match_python_jsonschema() {
        let schema = json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["id"],
            "dependencies": {"reference": ["name"]},
            "properties": {
                "id": {"type": "string", "minLength": 1, "pattern": "^[a-z]+$"},
                "n": {"type": "integer", "maximum": 3},
                "scope": {"enum": ["small", "large"]},
                "name": {"type": "string"},
                "reference": {"type": ["string", "null"]},
                "tag": {"type": "string", "maxLength": 3},
                "none": {"type": "array", "maxItems": 0}
            }
        });
        let v = validator(&schema);
        let check = |payload: Value, expect: &[(&str, &str)]| {
            let got: Vec<(String, String)> = schema_violations(&payload, &v, &schema)
                .into_iter()
                .map(|x| (x.path, x.reason))
                .collect();
            let expect: Vec<(String, String)> = expect
                .iter()
                .map(|(p, r)| ((*p).to_owned(), (*r).to_owned()))
                .collect();
            assert_eq!(got, expect, "{payload}");
        };
        check(json!({"id": "ok"}), &[]);
        check(
            json!({"id": ""}),
            &[
                ("/id", "'' should be non-empty"),
                ("/id", "'' does not match '^[a-z]+$'"),
            ],
        );
        check(
            json!({"id": "A/b"}),
            &[("/id", "'A/b' does not match '^[a-z]+$'")],
        );
        check(
            json!({"id": "a", "n": 9, "scope": "huge"}),
            &[
                ("/n", "9 is greater than the maximum of 3"),
                ("/scope", "'huge' is not one of ['small', 'large']"),
            ],
        );
        check(json!({}), &[("", "'id' is a required property")]);
        check(
            json!({"id": "a", "evil": 1}),
            &[(
                "",
                "Additional properties are not allowed ('evil' was unexpected)",
            )],
        );
        check(
            json!({"id": "a", "reference": "x"}),
            &[("", "'name' is a dependency of 'reference'")],
        );
        check(json!({"id": 5}), &[("/id", "5 is not of type 'string'")]);
        // Python words a limit of zero apart from any other upper limit.
        check(
            json!({"id": "a", "tag": "abcd"}),
            &[("/tag", "'abcd' is too long")],
        );
        check(
            json!({"id": "a", "none": [1]}),
            &[("/none", "[1] is expected to be empty")],
        );
        check(
            json!({"id": "a", "reference": 1}),
            &[
                ("", "'name' is a dependency of 'reference'"),
                ("/reference", "1 is not of type 'string', 'null'"),
            ],
        );
    }

    /// When two properties list the same missing name, the refusal names the one the payload
    /// holds, even where another that it does not hold comes first in the schema.
    #[test]
    fn a_dependency_is_named_by_the_property_present() {
        let schema = json!({
            "type": "object",
            "dependencies": {"alias": ["name"], "reference": ["name"]}
        });
        let v = validator(&schema);
        let reasons: Vec<String> = schema_violations(&json!({"reference": "x"}), &v, &schema)
            .into_iter()
            .map(|x| x.reason)
            .collect();
        assert_eq!(reasons, ["'name' is a dependency of 'reference'"]);
    }

    /// The size rule counts the bytes of `json.dumps(payload, ensure_ascii=False)`: Python's
    /// separators with their spaces, and a non-ASCII character as its UTF-8 bytes rather than
    /// as a `\u` escape. A payload of exactly the limit passes, one byte more is refused.
    #[test]
    fn the_size_limit_is_inclusive_and_counts_utf8_bytes() {
        let check = |payload: Value, refused_at: Option<usize>| {
            let expect: Vec<Violation> = refused_at
                .map(|size| Violation::new("", format!("payload exceeds 65536 bytes (got {size})")))
                .into_iter()
                .collect();
            assert_eq!(deny_rules(&payload), expect);
        };
        // `{"a": "` and `"}` are nine bytes around the string.
        check(json!({ "a": "x".repeat(MAX_PAYLOAD_BYTES - 9) }), None);
        check(
            json!({ "a": "x".repeat(MAX_PAYLOAD_BYTES - 8) }),
            Some(MAX_PAYLOAD_BYTES + 1),
        );
        // `é` is two bytes, not the six of `\u00e9`.
        check(
            json!({ "a": format!("é{}", "x".repeat(MAX_PAYLOAD_BYTES - 11)) }),
            None,
        );
        check(
            json!({ "a": format!("é{}", "x".repeat(MAX_PAYLOAD_BYTES - 10)) }),
            Some(MAX_PAYLOAD_BYTES + 1),
        );
        // `{"a": 1, "b": "` and `"}` are seventeen bytes, the spaces after `:` and `,` counted.
        check(
            json!({ "a": 1, "b": "x".repeat(MAX_PAYLOAD_BYTES - 17) }),
            None,
        );
        check(
            json!({ "a": 1, "b": "x".repeat(MAX_PAYLOAD_BYTES - 16) }),
            Some(MAX_PAYLOAD_BYTES + 1),
        );
    }

    #[test]
    fn the_whole_firewall_reports_in_order() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let v = validator(&schema);
        let refusal = check("t", &json!([1]), &v, &schema).unwrap_err();
        assert_eq!(refusal.message, NOT_OBJECT_MESSAGE);
        let big = "x".repeat(MAX_PAYLOAD_BYTES);
        let refusal = check("t", &json!({ "a": big }), &v, &schema).unwrap_err();
        assert_eq!(refusal.message, DENY_MESSAGE);
        assert_eq!(
            refusal.errors[0].reason,
            format!(
                "payload exceeds 65536 bytes (got {})",
                MAX_PAYLOAD_BYTES + 9
            )
        );
        assert!(check("t", &json!({"a": "fine"}), &v, &schema).is_ok());
        assert_eq!(
            Refusal {
                tool: "t".into(),
                code: INVALID_PARAMS,
                message: SCHEMA_MESSAGE.into(),
                errors: vec![Violation::new("/a", "r")],
            }
            .payload_text(),
            r#"{"error": "payload failed schema validation", "jsonrpc_error": {"code": -32602, "message": "payload failed schema validation", "data": {"tool": "t", "errors": [{"path": "/a", "reason": "r"}]}}}"#
        );
    }

    fn arbitrary_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[ -~\\u{0}-\\u{1f}\\u{7f}-\\u{a0}é]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(14, 64, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A value nested a chosen 0 to 15 levels deep: each level is an array or an object that
    /// also holds an arbitrary sibling, and the innermost value is arbitrary too (mostly a
    /// scalar, so the depth lands on every count, the rule's boundary included). The random
    /// recursion of [`arbitrary_json`] alone almost never goes past five levels.
    fn nested_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let part = || prop_oneof![3 => Just(Value::Null), 1 => arbitrary_json()];
        (
            0usize..=15,
            part(),
            proptest::collection::vec((any::<bool>(), part()), 15),
        )
            .prop_map(|(levels, innermost, wrappers)| {
                wrappers
                    .into_iter()
                    .take(levels)
                    .fold(innermost, |inner, (as_array, sibling)| {
                        if as_array {
                            Value::Array(vec![sibling, inner])
                        } else {
                            json!({ "k": inner, "s": sibling })
                        }
                    })
            })
    }

    /// How far below `value` its deepest member sits (0 for a leaf or an empty container).
    fn max_depth(value: &Value) -> usize {
        match value {
            Value::Object(map) => map.values().map(|v| 1 + max_depth(v)).max().unwrap_or(0),
            Value::Array(items) => items.iter().map(|v| 1 + max_depth(v)).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// Any payload gets an answer (no panic), the depth rule fires exactly when something sits
    /// deeper than ten levels, and a refusal always renders as the payload shape. The run must
    /// see both outcomes, and payloads exactly at the limit and one past it.
    #[test]
    fn the_firewall_answers_every_payload() {
        use proptest::test_runner::{Config, TestRunner};
        use std::cell::RefCell;
        let schema = json!({"type": "object"});
        let v = validator(&schema);
        let depths = RefCell::new(std::collections::BTreeMap::<usize, usize>::new());
        let mut runner = TestRunner::new(Config {
            cases: 512,
            ..Config::default()
        });
        runner
            .run(&nested_json(), |inner| {
                let payload = json!({ "a": inner });
                let depth = max_depth(&payload);
                *depths.borrow_mut().entry(depth).or_default() += 1;
                let denied = deny_rules(&payload);
                proptest::prop_assert_eq!(
                    denied
                        .iter()
                        .any(|d| d.reason.starts_with("payload nesting exceeds depth 10")),
                    depth > MAX_DEPTH,
                    "depth {}",
                    depth
                );
                if let Err(refusal) = check("t", &payload, &v, &schema) {
                    let text = refusal.payload_text();
                    proptest::prop_assert!(text.starts_with("{\"error\": \"payload"), "{}", text);
                }
                Ok(())
            })
            .unwrap();
        let depths = depths.into_inner();
        for depth in [1, MAX_DEPTH, MAX_DEPTH + 1, 16] {
            assert!(
                depths.contains_key(&depth),
                "no payload of depth {depth}: {depths:?}"
            );
        }
    }

    #[test]
    fn nulls_are_dropped_at_the_top_only() {
        assert_eq!(
            drop_nulls(json!({"a": null, "b": {"c": null}})),
            json!({"b": {"c": null}})
        );
    }
}
