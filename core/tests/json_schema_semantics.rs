//! Object-keyword semantics that are easy to get subtly wrong, each instance checked
//! twice: the `jsonschema` crate must agree with the expected verdict (so the test's own
//! expectations are validated by an independent implementation), and grammask must accept
//! exactly the valid instances (small objects in any order; objects with more members
//! than `any_order_max` in schema order, the order grammask generates).

use grammask::json_schema::{json_schema_str_to_grammar, JsonSchemaOptions, SchemaErrorKind};
use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo, TokenizerOptions};
use std::sync::Arc;

fn compiler() -> GrammarCompiler {
    let bytes: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
    GrammarCompiler::new(Arc::new(
        TokenizerInfo::from_byte_tokens(bytes, &TokenizerOptions::default()).unwrap(),
    ))
}

fn accepts(c: &GrammarCompiler, schema: &str, opts: &JsonSchemaOptions, text: &str) -> bool {
    let g = json_schema_str_to_grammar(schema, opts).unwrap_or_else(|e| panic!("{schema}: {e}"));
    let mut m = GrammarMatcher::new(c.compile(&GrammarSpec::Grammar(g)).unwrap());
    m.accept_string(text).is_ok() && m.can_terminate()
}

/// `cases`: (instance as compact JSON with `", "`/`": "` separators, valid?).
fn check(schema: &str, opts: &JsonSchemaOptions, cases: &[(&str, bool)]) {
    let c = compiler();
    let v: serde_json::Value = serde_json::from_str(schema).unwrap();
    let validator = jsonschema::options().should_validate_formats(true).build(&v).unwrap();
    for &(text, valid) in cases {
        let inst: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(validator.is_valid(&inst), valid, "oracle disagrees with the test on {text} for {schema}");
        assert_eq!(accepts(&c, schema, opts, text), valid, "{text} for {schema}");
    }
}

fn json_semantics() -> JsonSchemaOptions {
    JsonSchemaOptions { strict: false, ..Default::default() }
}

#[test]
fn declared_property_matching_a_pattern_satisfies_both() {
    let s = r#"{"type":"object","properties":{"id":{"type":"string","pattern":"^[0-9a-f]{4}$"}},
        "patternProperties":{"^[a-z]+$":{"type":"string"}}}"#;
    for opts in [JsonSchemaOptions::default(), json_semantics()] {
        check(
            s,
            &opts,
            &[
                (r#"{"id": "00ff"}"#, true),
                (r#"{"id": "00f"}"#, false),
                (r#"{"id": "00ff", "name": "x"}"#, true),
                (r#"{"name": 1}"#, false),
                (r#"{"id": 7}"#, false),
            ],
        );
    }
    check(s, &json_semantics(), &[(r#"{"X1": 1}"#, true)]);
    // Strict mode (the default) goes beyond the schema here: no undeclared extras.
    assert!(!accepts(&compiler(), s, &JsonSchemaOptions::default(), r#"{"X1": 1}"#));
}

#[test]
fn additional_properties_skip_keys_any_pattern_matches() {
    // "" matches every key, so every member must satisfy the pattern schema.
    let s = r#"{"type":"object","patternProperties":{"":{"type":"object","properties":{"href":{"type":"string"}}}}}"#;
    check(s, &json_semantics(), &[(r#"{"a": {"href": "x"}}"#, true), (r#"{"a": {"href": 1}}"#, false)]);
    // Keys matched by two patterns satisfy both.
    let s = r#"{"type":"object","additionalProperties":false,
        "patternProperties":{"^a":{"type":"integer"},"b$":{"minimum":10}}}"#;
    check(
        s,
        &json_semantics(),
        &[
            (r#"{"ab": 12}"#, true),
            (r#"{"ab": 3}"#, false),
            (r#"{"ax": 3}"#, true),
            (r#"{"xb": 3.5}"#, false),
            (r#"{"xb": 30.5}"#, true),
            (r#"{"zz": 1}"#, false),
        ],
    );
}

#[test]
fn property_names_constrain_every_key() {
    let s = r#"{"type":"object","properties":{"ok":{"type":"integer"},"TOO_LONG":{"type":"integer"}},
        "propertyNames":{"pattern":"^[a-z_]+$","maxLength":4}}"#;
    check(
        s,
        &json_semantics(),
        &[
            (r#"{"ok": 1}"#, true),
            (r#"{"TOO_LONG": 1}"#, false),
            (r#"{"ok": 1, "abcd": null}"#, true),
            (r#"{"abcde": null}"#, false),
            (r#"{"Ab": null}"#, false),
        ],
    );
}

#[test]
fn dependencies_are_enforced() {
    let s = r#"{"type":"object","properties":{"card":{"type":"string"},"billing":{"type":"string"},"name":{"type":"string"}},
        "dependentRequired":{"card":["billing"]},
        "dependentSchemas":{"name":{"properties":{"card":{"maxLength":2}}}}}"#;
    check(
        s,
        &JsonSchemaOptions::default(),
        &[
            (r#"{"card": "1", "billing": "b"}"#, true),
            (r#"{"card": "1"}"#, false),
            (r#"{"billing": "b"}"#, true),
            (r#"{"card": "123", "billing": "b", "name": "n"}"#, false),
            (r#"{"card": "12", "billing": "b", "name": "n"}"#, true),
        ],
    );
    // Draft-07 spelling, both forms.
    let s = r#"{"type":"object","properties":{"a":{},"b":{},"c":{"type":"integer"}},
        "dependencies":{"a":["b"],"b":{"required":["c"]}}}"#;
    check(
        s,
        &JsonSchemaOptions::default(),
        &[
            (r#"{"a": 1, "b": 2, "c": 3}"#, true),
            (r#"{"a": 1, "b": 2}"#, false),
            (r#"{"a": 1}"#, false),
            (r#"{}"#, true),
        ],
    );
}

#[test]
fn one_of_required_names_is_exclusive() {
    let s = r#"{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"n":{"type":"number"}},
        "required":["n"],"oneOf":[{"required":["a"]},{"required":["b"]}]}"#;
    check(
        s,
        &JsonSchemaOptions::default(),
        &[
            (r#"{"a": "x", "n": 1}"#, true),
            (r#"{"b": "x", "n": 1}"#, true),
            (r#"{"a": "x", "b": "y", "n": 1}"#, false),
            (r#"{"n": 1}"#, false),
        ],
    );
}

#[test]
fn one_of_required_name_sets_is_exclusive() {
    let s = r#"{"type":"object","properties":{"series":{"type":"integer"},"index":{"type":"integer"},"id":{"type":"string"}},
        "oneOf":[{"required":["series","index"]},{"required":["id"]}]}"#;
    check(
        s,
        &JsonSchemaOptions::default(),
        &[
            (r#"{"series": 0, "index": 1}"#, true),
            (r#"{"id": "p"}"#, true),
            (r#"{"series": 0, "id": "p"}"#, true),
            (r#"{"series": 0, "index": 1, "id": "p"}"#, false),
            (r#"{"series": 0}"#, false),
        ],
    );
}

#[test]
fn allof_merging_keeps_property_order() {
    let s = r#"{"allOf":[{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{}}},
        {"properties":{"a":{"minimum":0}}}],"required":["a","b","c"]}"#;
    check(
        s,
        &JsonSchemaOptions::default(),
        &[(r#"{"a": 1, "b": 2, "c": 3}"#, true), (r#"{"a": -1, "b": 2, "c": 3}"#, false)],
    );
}

#[test]
fn unenforceable_forms_are_typed_errors_unless_lenient() {
    let cases = [
        (r#"{"oneOf":[{"type":"integer"},{"minimum":2}]}"#, "oneOf", ""),
        (
            r#"{"type":"object","properties":{"s":{"type":"string","format":"no-such-format"}}}"#,
            "format",
            "/properties/s",
        ),
    ];
    for (schema, keyword, pointer) in cases {
        let e = json_schema_str_to_grammar(schema, &JsonSchemaOptions::default()).unwrap_err();
        match &e.kind {
            SchemaErrorKind::Unsupported { keyword: k, .. } => assert_eq!(k, keyword, "{schema}"),
            other => panic!("{schema}: {other:?}"),
        }
        assert_eq!(e.pointer, pointer);
        let lenient = JsonSchemaOptions { lenient: true, ..Default::default() };
        assert!(json_schema_str_to_grammar(schema, &lenient).is_ok(), "{schema}");
    }
}

#[test]
fn free_form_objects_stay_open_in_strict_mode() {
    let s = r#"{"type":"object","properties":{"meta":{"type":"object"}}}"#;
    check(
        s,
        &JsonSchemaOptions::default(),
        &[(r#"{"meta": {"any": [1, 2], "thing": null}}"#, true), (r#"{"meta": {}}"#, true)],
    );
}

#[test]
fn long_max_length_is_exact() {
    let s = r#"{"type":"string","minLength":2,"maxLength":20000}"#;
    let c = compiler();
    let opts = JsonSchemaOptions::default();
    for (n, ok) in
        [(0usize, false), (1, false), (2, true), (300, true), (19_999, true), (20_000, true), (20_001, false)]
    {
        let text = format!("\"{}\"", "é".repeat(n));
        assert_eq!(accepts(&c, s, &opts, &text), ok, "length {n}");
    }
}

#[test]
fn small_objects_accept_members_in_any_order() {
    let s = r#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
        "c":{"type":"boolean"}},"required":["a","c"]}"#;
    let cases: &[(&str, bool)] = &[
        (r#"{"a": 1, "b": "x", "c": true}"#, true),
        (r#"{"c": true, "a": 1}"#, true),
        (r#"{"b": "x", "c": false, "a": 2}"#, true),
        (r#"{"c": true, "b": "x", "a": 2}"#, true),
        (r#"{"c": true, "b": "x"}"#, false),
        (r#"{"b": "x"}"#, false),
        (r#"{"c": 1, "a": 1}"#, false),
    ];
    check(s, &JsonSchemaOptions::default(), cases);
    check(s, &json_semantics(), cases);
    // Extras (JSON Schema semantics) come after the declared members.
    check(s, &json_semantics(), &[(r#"{"c": true, "a": 1, "z": null}"#, true)]);
    // A repeated member is never accepted (the parse would take the last; a generator
    // must not produce it).
    assert!(!accepts(&compiler(), s, &JsonSchemaOptions::default(), r#"{"a": 1, "c": true, "a": 2}"#));
    // With minProperties / maxProperties counted across orders.
    let s = r#"{"type":"object","properties":{"a":{},"b":{},"c":{}},"minProperties":2,"maxProperties":2}"#;
    check(
        s,
        &JsonSchemaOptions::default(),
        &[(r#"{"b": 1, "a": 2}"#, true), (r#"{"c": 1}"#, false), (r#"{"c": 1, "b": 2, "a": 3}"#, false)],
    );
    // Above `any_order_max`, schema order only.
    let opts = JsonSchemaOptions { any_order_max: 2, ..Default::default() };
    let s = r#"{"type":"object","properties":{"a":{},"b":{},"c":{}}}"#;
    assert!(accepts(&compiler(), s, &opts, r#"{"a": 1, "c": 2}"#));
    assert!(!accepts(&compiler(), s, &opts, r#"{"c": 1, "a": 2}"#));
}
