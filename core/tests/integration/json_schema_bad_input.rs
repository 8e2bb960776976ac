//! Hostile and malformed JSON Schemas: every failure is a typed error with a pointer, every
//! conversion is bounded, nothing panics.

use grammask::json_schema::{
    json_schema_str_to_grammar, json_schema_to_grammar, JsonSchemaOptions, SchemaErrorKind,
};
use serde_json::json;

fn opts() -> JsonSchemaOptions {
    JsonSchemaOptions::default()
}

#[test]
fn invalid_json_has_a_position() {
    let e = json_schema_str_to_grammar("{\"type\": \n  \"string\",,}", &opts()).unwrap_err();
    match e.kind {
        SchemaErrorKind::InvalidJson { line, column, .. } => assert_eq!((line, column), (2, 12)),
        k => panic!("{k:?}"),
    }
    assert!(json_schema_str_to_grammar("", &opts()).is_err());
}

#[test]
fn not_a_schema() {
    for s in [
        json!(3),
        json!("string"),
        json!(null),
        json!([1]),
        json!({"type": "strin"}),
        json!({"properties": 3}),
        json!({"items": "x"}),
        json!({"minLength": -1}),
        json!({"required": [1]}),
    ] {
        let e = json_schema_to_grammar(&s, &opts()).unwrap_err();
        assert!(matches!(e.kind, SchemaErrorKind::NotASchema(_)), "{s}: {e}");
    }
    let e = json_schema_to_grammar(&json!({"properties": {"a": {"type": 7}}}), &opts()).unwrap_err();
    assert_eq!(e.pointer, "/properties/a");
}

#[test]
fn unresolvable_refs() {
    // `#/%aé`: a `%` before a multi-byte character (a panic once, in percent-decoding).
    for r in ["#/$defs/missing", "other.json", "http://localhost:1234/x.json", "#nope", "#/%aé"] {
        let e = json_schema_to_grammar(&json!({"properties": {"a": {"$ref": r}}}), &opts()).unwrap_err();
        assert!(matches!(e.kind, SchemaErrorKind::UnresolvableRef(_)), "{r}: {e}");
        assert_eq!(e.pointer, "/properties/a");
    }
}

#[test]
fn contradictions() {
    for s in [
        json!({"type": "integer", "minimum": 5, "maximum": 1}),
        json!({"type": "string", "minLength": 5, "maxLength": 1}),
        json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
        json!({"const": 1, "type": "string"}),
        json!(false),
        json!({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "required": ["x"]}}, "$ref": "#/$defs/a"}),
        // Every match of the pattern has at least 2 characters (an empty intersection).
        json!({"type": "string", "pattern": "^(?:a|aa)a$", "maxLength": 1}),
        json!({"type": "object", "properties": {"x": {"type": "string", "pattern": "(?:a|aa)a", "maxLength": 1}}, "required": ["x"]}),
    ] {
        let e = json_schema_to_grammar(&s, &opts()).unwrap_err();
        assert!(matches!(e.kind, SchemaErrorKind::Unsatisfiable(_)), "{s}: {e}");
    }
}

#[test]
fn unsupported_keywords_name_keyword_and_pointer() {
    let s = json!({"properties": {"a": {"type": "array", "uniqueItems": true}}});
    let e = json_schema_to_grammar(&s, &opts()).unwrap_err();
    assert_eq!(e.pointer, "/properties/a");
    assert!(
        matches!(&e.kind, SchemaErrorKind::Unsupported { keyword, .. } if keyword == "uniqueItems"),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "schema at `/properties/a`: unsupported keyword `uniqueItems`: not enforced by the grammar"
    );
    // Lenient: a warning and an approximation.
    let lenient = JsonSchemaOptions { lenient: true, ..opts() };
    let (_, w) = grammask::json_schema::json_schema_to_grammar_with_warnings(&s, &lenient).unwrap();
    assert_eq!(w[0].keyword, "uniqueItems");
    assert_eq!(w[0].pointer, "/properties/a");
}

#[test]
fn size_limits() {
    let big: Vec<i64> = (0..20_000).collect();
    let e = json_schema_to_grammar(&json!({"enum": big}), &opts()).unwrap_err();
    assert!(matches!(e.kind, SchemaErrorKind::Limit { what: "enum values", .. }), "{e}");
    // Deep nesting.
    let mut s = json!({"type": "integer"});
    for _ in 0..500 {
        s = json!({"type": "array", "items": s});
    }
    let e = json_schema_to_grammar(&s, &opts()).unwrap_err();
    assert!(matches!(e.kind, SchemaErrorKind::Limit { .. }), "{e}");
    // Pathological patterns.
    let e = json_schema_to_grammar(&json!({"type": "string", "pattern": "(a{1000}){1000}"}), &opts())
        .unwrap_err();
    assert!(matches!(e.kind, SchemaErrorKind::Regex(_)), "{e}");
    assert_eq!(e.pointer, "/pattern");
    let e = json_schema_to_grammar(&json!({"type": "string", "pattern": "a(?=b)"}), &opts()).unwrap_err();
    assert!(matches!(e.kind, SchemaErrorKind::Regex(_)), "{e}");
    // Recursion through $ref terminates.
    let s = json!({"$defs": {"t": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}}, "$ref": "#/$defs/t"});
    json_schema_to_grammar(&s, &opts()).unwrap();
    let s = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"});
    assert!(json_schema_to_grammar(&s, &opts()).is_err());
    let s = json!({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"});
    assert!(json_schema_to_grammar(&s, &opts()).is_err());
}
