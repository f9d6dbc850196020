//! `json.dumps(value, indent=2)`: the text the reference `bernstein_run_status` tool returns.
//!
//! With `indent` set, Python separates items with `",\n"` plus indentation and keys from values
//! with `": "`, keeps insertion order (no `sort_keys`), escapes non-ASCII (`ensure_ascii=True`)
//! and writes empty containers as `[]` / `{}`. Scalars are written exactly as in the other
//! Python dialects, so they are delegated to [`Value::dumps`].

use bernstein_protocol::pyjson::{Dialect, Object, Value, dumps_str_into};

/// Python's `json.dumps(value, indent=2)`.
pub fn render_indent2(value: &Value) -> String {
    let mut out = String::new();
    write_indented(&mut out, value, 0);
    out
}

/// Python's `json.dumps(rows, indent=2)` for a list of objects, without first moving them
/// into one [`Value`] (a backlog of thousands of rows is rendered on every claim).
pub fn render_indent2_objects(rows: &[Object]) -> String {
    write_indent2_array(rows, |out, row| write_indented_object(out, row, 1))
}

/// The text `json.dumps(rows, indent=2)` writes for `object` as one item of the top-level
/// array `rows`. A caller that keeps these texts beside its rows renders the whole array again
/// with [`join_indent2_items`], without walking the rows that did not change.
pub fn render_indent2_item(object: &Object) -> String {
    let mut out = String::new();
    write_indented_object(&mut out, object, 1);
    out
}

/// `json.dumps(rows, indent=2)` from the item texts of `rows` ([`render_indent2_item`]), in
/// order.
pub fn join_indent2_items(items: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    write_indent2_array(items, |out, item| out.push_str(item.as_ref()))
}

/// A top-level array as `indent=2` frames it, each item written in place by `write_item`:
/// the one framing [`render_indent2_objects`] and [`join_indent2_items`] share.
fn write_indent2_array<T>(
    items: impl IntoIterator<Item = T>,
    mut write_item: impl FnMut(&mut String, T),
) -> String {
    let mut out = String::new();
    out.push('[');
    let mut empty = true;
    for item in items {
        if !empty {
            out.push(',');
        }
        empty = false;
        push_newline_indent(&mut out, 1);
        write_item(&mut out, item);
    }
    if empty {
        return "[]".to_owned();
    }
    push_newline_indent(&mut out, 0);
    out.push(']');
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
        Value::Object(object) => write_indented_object(out, object, level),
        scalar_or_empty => scalar_or_empty.dumps_into(out, Dialect::PY_ROW),
    }
}

fn write_indented_object(out: &mut String, object: &Object, level: usize) {
    if object.is_empty() {
        out.push_str("{}");
        return;
    }
    out.push('{');
    for (n, (key, item)) in object.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        push_newline_indent(out, level + 1);
        dumps_str_into(out, key, Dialect::PY_ROW);
        out.push_str(": ");
        write_indented(out, item, level + 1);
    }
    push_newline_indent(out, level);
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use bernstein_protocol::pyjson::Object;

    #[test]
    fn objects_render_as_the_array_of_them_does() {
        let rows = [
            Object::new()
                .with("id", "a")
                .with("claimer", Value::Null)
                .with(
                    "metadata",
                    Object::new()
                        .with("version", 3)
                        .with("tags", Value::Array(vec![])),
                ),
            Object::new(),
            Object::new().with("x", 1.5).with("y", "caf\u{e9}"),
        ];
        for n in 0..=rows.len() {
            let slice = &rows[..n];
            let whole = render_indent2(&Value::Array(
                slice.iter().cloned().map(Value::Object).collect(),
            ));
            assert_eq!(render_indent2_objects(slice), whole, "{n} rows");
            assert_eq!(
                join_indent2_items(slice.iter().map(render_indent2_item)),
                whole,
                "{n} rows joined from their items"
            );
        }
    }

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
