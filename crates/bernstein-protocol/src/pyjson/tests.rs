//! Golden cases from CPython's `json` module and Bernstein's `canonicalize_jcs`, plus
//! property tests for the invariants the evidence formats rely on.

use super::*;
use proptest::prelude::*;

fn fixture(name: &str) -> serde_json::Value {
    let path = format!(
        "{}/../../fixtures/pyjson/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

#[track_caller]
fn check(input: &str, dialect: Dialect, expect: &str) {
    let value = Value::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
    assert_eq!(value.dumps(dialect), expect, "input {input:?}");
}

#[track_caller]
fn check_error(input: &str, expect_message: &str) {
    let err = Value::parse(input).expect_err(input);
    assert_eq!(err.message, expect_message, "input {input:?}");
}

#[test]
fn float_repr_matches_cpython() {
    let cases = fixture("python_json_cases.json");
    let cases = cases["floats"].as_array().unwrap();
    assert!(cases.len() > 500);
    for case in cases {
        let x = f64::from_bits(case["float_bits"].as_u64().unwrap());
        assert_eq!(
            python_float_repr(x),
            case["repr"].as_str().unwrap(),
            "bits {x:e}"
        );
        assert_eq!(
            Value::Float(x).dumps(Dialect::PY_ROW),
            case["json"].as_str().unwrap()
        );
        // The text parses back to the same double and is therefore canonical.
        check(
            case["json"].as_str().unwrap(),
            Dialect::PY_ROW,
            case["json"].as_str().unwrap(),
        );
    }
}

#[test]
fn string_escaping_matches_cpython() {
    let cases = fixture("python_json_cases.json");
    for case in cases["strings"].as_array().unwrap() {
        let text = Value::Str(case["text"].as_str().unwrap().to_owned());
        assert_eq!(
            text.dumps(Dialect::PY_SPACED),
            case["ascii"].as_str().unwrap()
        );
        assert_eq!(
            text.dumps(Dialect::PY_COMPACT_UTF8),
            case["utf8"].as_str().unwrap()
        );
    }
}

#[test]
fn documents_match_cpython_in_every_dialect() {
    let cases = fixture("python_json_cases.json");
    for case in cases["documents"].as_array().unwrap() {
        let input = case["doc_py_row"].as_str().unwrap();
        check(input, Dialect::PY_ROW, case["py_row"].as_str().unwrap());
        check(input, Dialect::PY_SPACED, case["spaced"].as_str().unwrap());
        check(
            input,
            Dialect::PY_COMPACT_ASCII,
            case["compact_ascii"].as_str().unwrap(),
        );
        check(
            input,
            Dialect::PY_COMPACT_UTF8,
            case["compact_utf8"].as_str().unwrap(),
        );
    }
}

#[test]
fn jcs_matches_bernstein() {
    let cases = fixture("jcs_cases.json");
    let cases = cases["cases"].as_array().unwrap();
    assert!(cases.len() > 100);
    for case in cases {
        let value = Value::parse(case["py_row"].as_str().unwrap()).unwrap();
        assert_eq!(value.to_jcs().unwrap(), case["jcs"].as_str().unwrap());
    }
    assert!(Value::Float(f64::NAN).to_jcs().is_err());
}

#[test]
fn parser_follows_json_loads() {
    check(
        "  {\"a\" : 1 , \"a\": 2, \"b\": [ ] }\n",
        Dialect::PY_ROW,
        "{\"a\": 2, \"b\": []}",
    );
    check("-0", Dialect::PY_ROW, "0");
    check("-0.0", Dialect::PY_ROW, "-0.0");
    check("1E400", Dialect::PY_ROW, "Infinity");
    check(
        "[NaN, -Infinity, Infinity]",
        Dialect::PY_ROW,
        "[NaN, -Infinity, Infinity]",
    );
    check(
        "1000000000000000000000000000000",
        Dialect::PY_ROW,
        "1000000000000000000000000000000",
    );
    check(
        "\"\\ud834\\udd1e\\/\"",
        Dialect::PY_COMPACT_UTF8,
        "\"\u{1d11e}/\"",
    );
    check("1.5e3", Dialect::PY_ROW, "1500.0");
    check_error("", "Expecting value");
    check_error("{} x", "Extra data");
    check_error("01", "Extra data");
    check_error("\"a\nb\"", "Invalid control character at");
    check_error("\"\\ud800\"", "Lone surrogate in \\u escape");
    check_error("{\"a\" 1}", "Expecting ':' delimiter");
    check_error(
        "{1: 2}",
        "Expecting property name enclosed in double quotes",
    );
    check_error(&"[".repeat(10_000), "Nesting too deep");
    check_error(
        &"9".repeat(4301),
        "Exceeds the limit (4300 digits) for integer string conversion",
    );
}

#[test]
fn parse_error_positions_count_characters() {
    let err = Value::parse("{\"é\": 1,\n  x}").unwrap_err();
    assert_eq!((err.line, err.column, err.char_index), (2, 3, 11));
}

fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "-?[1-9][0-9]{18,40}".prop_map(|s| Value::Int(Int::parse(&s).unwrap())),
        any::<f64>().prop_map(Value::Float),
        any::<String>().prop_map(Value::Str),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((any::<String>(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// NaN never equals itself, so compare values by their PY-ROW bytes.
fn same(a: &Value, b: &Value) -> bool {
    a.dumps(Dialect::PY_ROW) == b.dumps(Dialect::PY_ROW)
}

proptest! {
    #[test]
    fn every_dialect_round_trips(value in arb_value()) {
        for dialect in [Dialect::PY_SPACED, Dialect::PY_COMPACT_ASCII, Dialect::PY_COMPACT_UTF8, Dialect::PY_ROW] {
            let text = value.dumps(dialect);
            let back = Value::parse(&text).unwrap();
            prop_assert_eq!(back.dumps(dialect), text);
            if !dialect.sort_keys {
                prop_assert!(same(&back, &value));
            }
        }
    }

    #[test]
    fn ascii_dialects_emit_only_printable_ascii(value in arb_value()) {
        let text = value.dumps(Dialect::PY_SPACED);
        prop_assert!(text.bytes().all(|b| (0x20..0x7f).contains(&b)));
    }

    #[test]
    fn float_repr_round_trips(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
        let text = python_float_repr(x);
        prop_assert_eq!(text.parse::<f64>().unwrap().to_bits(), x.to_bits());
        prop_assert!(text.contains('.') || text.contains('e'));
    }

    #[test]
    fn parser_never_panics(text in any::<String>()) {
        let _ = Value::parse(&text);
    }
}
