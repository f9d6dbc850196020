//! `json.dumps(value, indent=2)`: the text the reference `bernstein_run_status` tool returns.
//!
//! With `indent` set, Python separates items with `",\n"` plus indentation and keys from values
//! with `": "`, keeps insertion order (no `sort_keys`), escapes non-ASCII (`ensure_ascii=True`)
//! and writes empty containers as `[]` / `{}`. Scalars are written exactly as in the other
//! Python dialects, so they are delegated to [`Value::dumps`].

use bernstein_protocol::pyjson::{Dialect, Value};

/// Python's `json.dumps(value, indent=2)`.
pub fn render_indent2(value: &Value) -> String {
    let mut out = String::new();
    write_indented(&mut out, value, 0);
    out
}

fn push_newline_indent(out: &mut String, level: usize) {
    out.push('\n');
    out.extend(std::iter::repeat_n(' ', level * 2));
}

fn write_indented(out: &mut String, value: &Value, level: usize) {
    match value {
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                push_newline_indent(out, level + 1);
                write_indented(out, item, level + 1);
            }
            push_newline_indent(out, level);
            out.push(']');
        }
        Value::Object(object) if !object.is_empty() => {
            out.push('{');
            for (n, (key, item)) in object.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                push_newline_indent(out, level + 1);
                out.push_str(&Value::Str(key.to_owned()).dumps(Dialect::PY_ROW));
                out.push_str(": ");
                write_indented(out, item, level + 1);
            }
            push_newline_indent(out, level);
            out.push('}');
        }
        scalar_or_empty => out.push_str(&scalar_or_empty.dumps(Dialect::PY_ROW)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bernstein_protocol::pyjson::Object;

    #[test]
    fn matches_python_indent_two() {
        let check = |value: Value, expect: &str| assert_eq!(render_indent2(&value), expect);
        check(Value::Null, "null");
        check(Value::Array(vec![]), "[]");
        check(Value::Object(Object::new()), "{}");
        // CPython 3.12: json.dumps({"b": [1, {"x": []}], "a": "caf\u00e9", "c": 1e-07}, indent=2)
        check(
            Value::Object(
                Object::new()
                    .with(
                        "b",
                        Value::Array(vec![
                            Value::from(1),
                            Value::Object(Object::new().with("x", Value::Array(vec![]))),
                        ]),
                    )
                    .with("a", "caf\u{e9}")
                    .with("c", 1e-7),
            ),
            "{\n  \"b\": [\n    1,\n    {\n      \"x\": []\n    }\n  ],\n  \"a\": \"caf\\u00e9\",\n  \"c\": 1e-07\n}",
        );
    }
}
