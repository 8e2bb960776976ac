//! Object-keyword semantics that are easy to get subtly wrong, each instance checked
//! twice: the `jsonschema` crate must agree with the expected verdict (so the test's own
//! expectations are validated by an independent implementation), and grammask must accept
//! exactly the valid instances (object members in any order, each at most once).

use crate::common;

use common::Rng;
use grammask::json_schema::{json_schema_str_to_grammar, JsonSchemaOptions, PropertyOrder, SchemaErrorKind};
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
fn one_of_with_disjoint_values_is_exact() {
    // Enumerations that share no value (numbers compare by value), and required
    // discriminators reached through `$ref`: exact with JSON semantics too.
    let s = r##"{"type":"object","properties":{"m":{"oneOf":[{"const":"a"},{"enum":["b",1.0]},{"enum":[2]}]},
        "v":{"oneOf":[{"$ref":"#/$defs/circle"},{"$ref":"#/$defs/square"}]}},
        "$defs":{"circle":{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind"]},
                 "square":{"type":"object","properties":{"kind":{"$ref":"#/$defs/sq"},"side":{"type":"number"}},"required":["kind"]},
                 "sq":{"enum":["square"]}}}"##;
    let cases: &[(&str, bool)] = &[
        (r#"{"m": "a"}"#, true),
        (r#"{"m": 1}"#, true),
        (r#"{"m": 2}"#, true),
        (r#"{"m": "c"}"#, false),
        (r#"{"v": {"kind": "circle", "r": 1}}"#, true),
        (r#"{"v": {"kind": "square", "side": 2}}"#, true),
        (r#"{"v": {"kind": "oval"}}"#, false),
    ];
    check(s, &JsonSchemaOptions::default(), cases);
    check(s, &json_semantics(), cases);
    // Overlapping values are decided per value (issue 27: finite values): a value in two
    // branches is not valid, the others are.
    check(
        r#"{"oneOf":[{"enum":["a","b"]},{"enum":["b",1]}]}"#,
        &JsonSchemaOptions::default(),
        &[(r#""a""#, true), (r#""b""#, false), ("1", true)],
    );
    let e = json_schema_str_to_grammar(
        r#"{"oneOf":[{"const":1},{"enum":[1.0]}]}"#,
        &JsonSchemaOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e.kind, SchemaErrorKind::Unsatisfiable(_)), "{e}");
}

#[test]
fn one_of_closed_objects_meeting_on_the_empty_object_is_exact() {
    // Two closed objects with no member in common: they share only `{}`, which is then
    // valid against both, so not against the `oneOf`. A third branch of another type.
    let s = r#"{"oneOf":[
        {"type":"object","additionalProperties":false,"properties":{"dest":{"type":"string"},"n":{"type":"integer"}}},
        {"type":"object","additionalProperties":false,"properties":{"x86":{"type":"string"},"arm":{"type":"string"}}},
        {"type":"string"}]}"#;
    let cases: &[(&str, bool)] = &[
        (r#"{"dest": "a"}"#, true),
        (r#"{"n": 1, "dest": "b"}"#, true),
        (r#"{"x86": "c", "arm": "d"}"#, true),
        (r#""text""#, true),
        (r#"{}"#, false),
        (r#"{"dest": "a", "x86": "c"}"#, false),
        (r#"{"n": "1"}"#, false),
    ];
    check(s, &JsonSchemaOptions::default(), cases);
    check(s, &json_semantics(), cases);
    // When one branch alone accepts `{}`, it keeps it.
    let s = r#"{"oneOf":[
        {"type":"object","additionalProperties":false,"properties":{"a":{"type":"string"}}},
        {"type":"object","additionalProperties":false,"properties":{"b":{"type":"string"}},"required":["b"]}]}"#;
    let cases: &[(&str, bool)] = &[
        (r#"{}"#, true),
        (r#"{"a": "x"}"#, true),
        (r#"{"b": "x"}"#, true),
        (r#"{"a": "x", "b": "y"}"#, false),
    ];
    check(s, &JsonSchemaOptions::default(), cases);
    check(s, &json_semantics(), cases);
}

#[test]
fn strict_one_of_requires_a_separating_property() {
    // Neither branch requires `kind`; `{}` (and `{"x": 1}`) satisfy both, so the `oneOf`
    // rejects them. Strict mode builds each branch with `kind` required: every generated
    // object fails the other branch, and the objects without `kind` are left out.
    let tagged = r#"{"type":"object","oneOf":[
        {"properties":{"kind":{"const":"a"},"x":{"type":"integer"}}},
        {"properties":{"kind":{"enum":["b","c"]},"y":{"type":"string"}}}]}"#;
    check(
        tagged,
        &JsonSchemaOptions::default(),
        &[
            (r#"{"kind": "a", "x": 1}"#, true),
            (r#"{"kind": "c"}"#, true),
            (r#"{"kind": "d"}"#, false),
            (r#"{}"#, false),
            (r#"{"x": 1}"#, false),
        ],
    );
    let (_, warnings) = grammask::json_schema::json_schema_to_grammar_with_warnings(
        &serde_json::from_str(tagged).unwrap(),
        &JsonSchemaOptions::default(),
    )
    .unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings.iter().all(|w| w.keyword == "oneOf"), "{warnings:?}");
    // With JSON semantics the narrowing would reject valid objects: still an error.
    let e = json_schema_str_to_grammar(tagged, &json_semantics()).unwrap_err();
    assert!(matches!(e.kind, SchemaErrorKind::Unsupported { .. }), "{e}");
    // Open branches that declare different members are not separated: `{"foo": 1}`
    // would satisfy the second one too. (Leaving the other branch out of each needs "not
    // an integer", which includes the non-integer numbers, which have no grammar here.)
    let open =
        r#"{"type":"object","oneOf":[{"properties":{"foo":{"type":"integer"}}},{"properties":{"bar":{}}}]}"#;
    assert!(json_schema_str_to_grammar(open, &JsonSchemaOptions::default()).is_err());
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
            r#"{"type":"object","properties":{"s":{"type":"string","format":"regex"}}}"#,
            "format",
            "/properties/s",
        ),
        // A hundred words in 5,000 characters: the intersection would be too large.
        (
            r#"{"type":"string","pattern":"^(?:\\S+\\s+){0,99}\\S+$","maxLength":5000}"#,
            "minLength/maxLength",
            "",
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
fn unknown_formats_are_annotations() {
    let s = r#"{"type":"object","properties":{"s":{"type":"string","format":"no-such-format"}}}"#;
    let opts = JsonSchemaOptions::default();
    check(s, &opts, &[(r#"{"s": "anything at all"}"#, true), (r#"{"s": 1}"#, false)]);
    let (_, warnings) =
        grammask::json_schema::json_schema_to_grammar_with_warnings(&serde_json::from_str(s).unwrap(), &opts)
            .unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!((warnings[0].keyword.as_str(), warnings[0].pointer.as_str()), ("format", "/properties/s"));
    assert!(warnings[0].approximation.contains("no-such-format"));
}

#[test]
fn required_names_without_declarations_take_any_value_in_strict_mode() {
    // Strict mode closes what the schema is silent about; `required` speaks about "id".
    let s = r#"{"type":"object","properties":{"name":{"type":"string"}},"required":["id","name"]}"#;
    let cases: &[(&str, bool)] = &[
        (r#"{"name": "x", "id": [1, {"k": null}]}"#, true),
        (r#"{"name": "x", "id": 3}"#, true),
        (r#"{"name": "x"}"#, false),
        (r#"{"id": 3}"#, false),
    ];
    check(s, &JsonSchemaOptions::default(), cases);
    assert!(!accepts(&compiler(), s, &JsonSchemaOptions::default(), r#"{"name": "x", "id": 3, "z": 1}"#));
    // A name listed twice (not a valid schema, but seen in the wild) is still one member.
    let twice = r#"{"type":"object","properties":{"name":{"type":"string"}},"required":["id","name","id"]}"#;
    assert!(accepts(&compiler(), twice, &JsonSchemaOptions::default(), r#"{"name": "x", "id": 3}"#));
    assert!(!accepts(
        &compiler(),
        twice,
        &JsonSchemaOptions::default(),
        r#"{"name": "x", "id": 3, "id": 3}"#
    ));
    // An explicit `additionalProperties: false` makes the same listing unsatisfiable.
    let closed = r#"{"type":"object","properties":{"name":{"type":"string"}},"required":["id"],
        "additionalProperties":false}"#;
    let e = json_schema_str_to_grammar(closed, &JsonSchemaOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no value"), "{e}");
}

#[test]
fn integer_enums_are_written_without_a_fraction() {
    // Draft-04 validators reject `0.0` for an integer; a number enum still takes it.
    let s = r#"{"$schema":"http://json-schema.org/draft-04/schema#","type":"object",
        "properties":{"i":{"type":"integer","enum":[0,30]},"n":{"type":"number","enum":[1]}}}"#;
    check(
        s,
        &JsonSchemaOptions::default(),
        &[
            (r#"{"i": 30}"#, true),
            (r#"{"i": 30.0}"#, false),
            (r#"{"i": 0.0}"#, false),
            (r#"{"n": 1.0}"#, true),
            (r#"{"n": 1}"#, true),
        ],
    );
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
fn long_strings_share_their_blocks() {
    // Strings longer than the exact-length limit are blocks of 256 characters: every such
    // string of a schema uses the same block rule (and the same runs of up to 255), so a
    // second one costs only the run of its own remainder (`maxLength` mod 256), not
    // another ~11,000 states.
    let states = |members: &[&str]| {
        let props: Vec<String> =
            members.iter().enumerate().map(|(i, m)| format!(r#""m{i}":{{"type":"string",{m}}}"#)).collect();
        let s = format!(r#"{{"type":"object","properties":{{{}}}}}"#, props.join(","));
        let g = json_schema_str_to_grammar(&s, &JsonSchemaOptions::default()).unwrap();
        compiler().compile(&GrammarSpec::Grammar(g)).unwrap().automata().num_states()
    };
    let one = states(&[r#""maxLength":32767"#]);
    let three =
        states(&[r#""maxLength":32767"#, r#""maxLength":40000"#, r#""minLength":5,"maxLength":20000"#]);
    assert!(three < one + one / 3, "one long string: {one} states; three: {three}");
    // And each is exact at its own bounds, also when the exact-length limit is set below
    // the chain's length.
    let c = compiler();
    let mut low = JsonSchemaOptions::default();
    low.limits.max_exact_length = 500;
    let cases = [
        (r#"{"type":"string","minLength":3,"maxLength":10260}"#, JsonSchemaOptions::default(), 3, 10_260),
        (r#"{"type":"string","maxLength":800}"#, low, 0, 800),
    ];
    for (s, opts, min, max) in cases {
        for n in [min.max(1) - 1, min, min + 259, max - 1, max, max + 1] {
            let text = format!("\"{}\"", "a".repeat(n));
            assert_eq!(accepts(&c, s, &opts, &text), (min..=max).contains(&n), "length {n} for {s}");
        }
    }
}

#[test]
fn members_come_in_any_order() {
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
    // Extras (JSON Schema semantics) anywhere among the declared members.
    check(
        s,
        &json_semantics(),
        &[
            (r#"{"c": true, "a": 1, "z": null}"#, true),
            (r#"{"z": null, "c": true, "y": [1], "a": 1}"#, true),
            (r#"{"z": null, "c": true}"#, false),
        ],
    );
    // A repeated member is never accepted (the parse would take the last; a generator
    // must not produce it).
    assert!(!accepts(&compiler(), s, &JsonSchemaOptions::default(), r#"{"a": 1, "c": true, "a": 2}"#));
    assert!(!accepts(&compiler(), s, &json_semantics(), r#"{"a": 1, "z": 0, "c": true, "a": 2}"#));
    // With minProperties / maxProperties counted across orders.
    let s = r#"{"type":"object","properties":{"a":{},"b":{},"c":{}},"minProperties":2,"maxProperties":2}"#;
    check(
        s,
        &JsonSchemaOptions::default(),
        &[(r#"{"b": 1, "a": 2}"#, true), (r#"{"c": 1}"#, false), (r#"{"c": 1, "b": 2, "a": 3}"#, false)],
    );
    // Extra members count too.
    check(
        s,
        &json_semantics(),
        &[
            (r#"{"z": 1, "a": 2}"#, true),
            (r#"{"z": 1, "y": 2}"#, true),
            (r#"{"c": 1, "z": 2, "a": 3}"#, false),
        ],
    );
    // `PropertyOrder::Schema`: the schema's order only.
    let opts = JsonSchemaOptions { property_order: PropertyOrder::Schema, ..Default::default() };
    let s = r#"{"type":"object","properties":{"a":{},"b":{},"c":{}}}"#;
    assert!(accepts(&compiler(), s, &opts, r#"{"a": 1, "c": 2}"#));
    assert!(!accepts(&compiler(), s, &opts, r#"{"c": 1, "a": 2}"#));
}

#[test]
fn large_objects_accept_every_order_exactly() {
    // Ten declared members, three required, counts bounded, extras allowed (JSON Schema
    // semantics) and restricted by a pattern: random subsets in random orders, with
    // random good and bad values, judged by the `jsonschema` crate.
    let names = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"];
    let props: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!(r#""{n}":{{"type":"{}"}}"#, if i % 2 == 0 { "integer" } else { "string" }))
        .collect();
    let s = format!(
        r#"{{"type":"object","properties":{{{}}},"required":["theta","beta","alpha"],
        "patternProperties":{{"^x_":{{"type":"boolean"}}}},"minProperties":4,"maxProperties":8}}"#,
        props.join(",")
    );
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    let validator = jsonschema::validator_for(&v).unwrap();
    let c = compiler();
    let g = json_schema_str_to_grammar(&s, &json_semantics()).unwrap();
    let compiled = c.compile(&GrammarSpec::Grammar(g)).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut valid, mut invalid) = (0, 0);
    for _ in 0..3000 {
        let mut order: Vec<usize> = (0..names.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        // Mostly with the required members (alpha, beta, theta) in, so that both verdicts
        // are common.
        if rng.below(4) != 0 {
            order.retain(|&i| ![0, 1, 7].contains(&i));
            for r in [0, 1, 7] {
                order.insert(rng.below(3), r);
            }
        }
        let take = rng.below(names.len() + 1).max(if order[..3].contains(&7) { 3 } else { 0 });
        order[..take].sort_by_key(|_| rng.next());
        let bad_odds = 30;
        let mut members: Vec<String> = order[..take]
            .iter()
            .map(|&i| {
                let good = rng.below(bad_odds) != 0;
                let value = match (i % 2 == 0, good) {
                    (true, true) => "7",
                    (false, true) => "\"s\"",
                    (true, false) => "\"7\"",
                    (false, false) => "7",
                };
                format!("\"{}\": {value}", names[i])
            })
            .collect();
        for k in 0..rng.below(3) {
            let at = rng.below(members.len() + 1);
            let value = if rng.below(10) == 0 { "1" } else { "true" };
            members.insert(at, format!("\"x_{k}\": {value}"));
        }
        let text = format!("{{{}}}", members.join(", "));
        let inst: serde_json::Value = serde_json::from_str(&text).unwrap();
        let want = validator.is_valid(&inst);
        let mut m = GrammarMatcher::new(compiled.clone());
        let got = m.accept_string(&text).is_ok() && m.can_terminate();
        assert_eq!(got, want, "{text}");
        if want {
            valid += 1;
        } else {
            invalid += 1;
        }
    }
    // Both verdicts are well represented.
    assert!(valid > 300 && invalid > 300, "{valid} valid, {invalid} invalid");
    // A repeated member: rejected at the end of the repeated key (`alphabet` would be an
    // extra member), however far apart.
    let mut m = GrammarMatcher::new(compiled);
    m.accept_string(r#"{"alpha": 1, "beta": "b", "gamma": 3, "theta": "t", "alpha"#).unwrap();
    assert!(m.accept_string("\"").is_err());
    assert!(m.accept_string("bet\": true, \"").is_ok());
    assert!(m.accept_string("zeta\": \"z\"}").is_ok() && m.can_terminate());
}

#[test]
fn ref_siblings_are_ignored_before_draft_2019() {
    // Draft 4–7: `$ref` stands alone, its siblings are ignored; 2020-12: both apply.
    let body = r##""definitions":{"obj":{"type":"object"}},"properties":{"x":{"$ref":"#/definitions/obj","type":"string"}}"##;
    let draft7 = format!(r#"{{"$schema":"http://json-schema.org/draft-07/schema#",{body}}}"#);
    let draft4 = format!(r#"{{"$schema":"http://json-schema.org/draft-04/schema#",{body}}}"#);
    let current = format!(r#"{{{body}}}"#);
    let c = compiler();
    let opts = json_semantics();
    for s in [&draft7, &draft4] {
        let v: serde_json::Value = serde_json::from_str(s).unwrap();
        let validator = jsonschema::validator_for(&v).unwrap();
        for (text, valid) in [(r#"{"x": {}}"#, true), (r#"{"x": "s"}"#, false)] {
            assert_eq!(validator.is_valid(&serde_json::from_str(text).unwrap()), valid, "oracle: {text} {s}");
            assert_eq!(accepts(&c, s, &opts, text), valid, "{text} for {s}");
        }
    }
    // 2020-12: an object that must also be a string: unsatisfiable for `x`.
    assert!(!accepts(&c, &current, &opts, r#"{"x": {}}"#));
    assert!(accepts(&c, &current, &opts, r#"{}"#));
}

#[test]
fn schema_order_members_are_built_once() {
    // In schema order a member is written after each member that may precede it (the
    // object's first member is any of them); inlined, each place determinized its own copy
    // of the member's key and value. One rule each keeps the object near the sum of its
    // members.
    let members: Vec<String> = (0..8)
        .map(|i| {
            format!(r#""member_{i}":{{"enum":["first-value-{i}","second-value-{i}","third-value-{i}"]}}"#)
        })
        .collect();
    let states = |members: &[String]| {
        let s = format!(r#"{{"type":"object","properties":{{{}}}}}"#, members.join(","));
        let g = json_schema_str_to_grammar(&s, &JsonSchemaOptions::default()).unwrap();
        compiler().compile(&GrammarSpec::Grammar(g)).unwrap().automata().num_states()
    };
    let whole = states(&members);
    let alone: usize = members.iter().map(|m| states(std::slice::from_ref(m))).sum();
    assert!(whole < alone + alone / 2, "8 members: {whole} states; each alone: {alone} in all");
}

#[test]
fn any_order_members_are_built_once() {
    // Each member is written in up to 2^(n-1) places of the any-order lattice; its value
    // must be one rule there, not a copy per place (copies multiplied a Kubernetes
    // object's automaton states and compile time).
    let s = r#"{"type":"object","properties":{
        "alpha":{"enum":["first-long-value","second-long-value","third-long-value"]},
        "beta":{"enum":["fourth-long-value","fifth-long-value","sixth-long-value"]},
        "gamma":{"enum":["seventh-long-value","eighth-long-value","ninth-long-value"]},
        "delta":{"enum":["tenth-long-value","eleventh-long-value","twelfth-long-value"]}}}"#;
    let states = |property_order: PropertyOrder| {
        let opts = JsonSchemaOptions { property_order, ..Default::default() };
        let g = json_schema_str_to_grammar(s, &opts).unwrap();
        compiler().compile(&GrammarSpec::Grammar(g)).unwrap().automata().num_states()
    };
    let (ordered, any) = (states(PropertyOrder::Schema), states(PropertyOrder::Any));
    assert!(any < 2 * ordered, "schema order: {ordered} states, any order: {any}");
}

/// A compiled schema, to run many instances through one compile.
fn compiled(c: &GrammarCompiler, schema: &str) -> Arc<grammask::CompiledGrammar> {
    let g = json_schema_str_to_grammar(schema, &JsonSchemaOptions::default())
        .unwrap_or_else(|e| panic!("{schema}: {e}"));
    c.compile(&GrammarSpec::Grammar(g)).unwrap()
}

fn accepted_by(g: &Arc<grammask::CompiledGrammar>, text: &str) -> bool {
    let mut m = GrammarMatcher::new(g.clone());
    m.accept_string(text).is_ok() && m.can_terminate()
}

/// Random strings over `alphabet`, up to `max_len` characters, with `seeds` among them.
fn random_strings(alphabet: &str, max_len: usize, seeds: &[&str], n: usize) -> Vec<String> {
    let alphabet: Vec<char> = alphabet.chars().collect();
    let mut rng = Rng(0x5EED ^ max_len as u64);
    let mut out: Vec<String> = seeds.iter().map(|s| s.to_string()).collect();
    for _ in 0..n {
        let len = rng.below(max_len + 1);
        out.push((0..len).map(|_| alphabet[rng.below(alphabet.len())]).collect());
    }
    out
}

#[test]
fn patterns_under_lengths_they_cannot_carry_are_intersected() {
    // Patterns with several variable-length parts (MaskBench schemas), under lengths:
    // exact on random strings around the bounds, against the `jsonschema` crate.
    let c = compiler();
    let cases = [
        (
            r#"{"type":"string","pattern":"^([a-z0-9-]+):([a-z0-9\\.-]+):([a-z0-9-]+)?:([a-z0-9-]+)$","maxLength":12}"#,
            "a:-.9:::",
            15,
            &["a:b::c", "ab:cd:ef:ghij", "ab:cd:ef:ghi", "a:b:c:d", "a::b:c"][..],
        ),
        (
            r#"{"type":"string","pattern":"[A-z]+","minLength":3,"maxLength":6}"#,
            "aZ_1 é",
            8,
            &["__", "1a1"][..],
        ),
        (
            r#"{"type":"string","pattern":"^[A-Za-z0-9]+(-[A-Za-z0-9]+)*$","minLength":2,"maxLength":7}"#,
            "a0-Z",
            9,
            &["a-b-c-d", "a-b-c-dd", "ab", "a-"][..],
        ),
        (
            r#"{"type":"string","pattern":"^(?:\\S+\\s+){0,3}\\S+$","maxLength":9}"#,
            "ab \t",
            11,
            &["a b c d", "a b c d e"][..],
        ),
    ];
    for (schema, alphabet, max_len, seeds) in cases {
        let (valid, invalid) =
            strings_agree_with_validator(&c, schema, random_strings(alphabet, max_len, seeds, 600));
        assert!(valid >= 5 && invalid >= 5, "{schema}: {valid} valid, {invalid} invalid instances");
    }
}

/// Every string of `strings`, as a JSON document, is accepted by `schema`'s grammar
/// exactly when the `jsonschema` crate says it is valid; returns (valid, invalid) counts.
fn strings_agree_with_validator(
    c: &GrammarCompiler,
    schema: &str,
    strings: impl IntoIterator<Item = String>,
) -> (usize, usize) {
    let g = compiled(c, schema);
    let v: serde_json::Value = serde_json::from_str(schema).unwrap();
    let validator = jsonschema::validator_for(&v).unwrap();
    let (mut valid, mut invalid) = (0, 0);
    for s in strings {
        let inst = serde_json::Value::String(s);
        let text = serde_json::to_string(&inst).unwrap();
        let want = validator.is_valid(&inst);
        *(if want { &mut valid } else { &mut invalid }) += 1;
        assert_eq!(accepted_by(&g, &text), want, "{text} for {schema}");
    }
    (valid, invalid)
}

#[test]
fn unicode_escapes_decode_to_characters() {
    // Any `\uXXXX` but a lone surrogate: such a document does not parse (`serde_json`).
    let c = compiler();
    let opts = JsonSchemaOptions::default();
    for schema in [r#"{"type":"string"}"#, r#"{"type":"array"}"#] {
        let wrap = |s: &str| if schema.contains("array") { format!("[{s}]") } else { s.to_string() };
        for (text, ok) in [
            (r#""\u00e9\uD7FF\ue000\uFFFF""#, true),
            (r#""\ud83d\ude00""#, true),
            (r#""\uD83D\uDE00x""#, true),
            (r#""\ud83d""#, false),
            (r#""\ud83dx""#, false),
            (r#""\ude00""#, false),
            (r#""\ud83d\u0041""#, false),
        ] {
            let text = wrap(text);
            assert_eq!(accepts(&c, schema, &opts, &text), ok, "{text} for {schema}");
            assert_eq!(serde_json::from_str::<serde_json::Value>(&text).is_ok(), ok, "serde_json on {text}");
        }
    }
}

#[test]
fn not_of_values_excludes_them() {
    let opts = JsonSchemaOptions::default();
    // Strings: every other string, including the prefixes and extensions of the words.
    check(
        r#"{"type":"string","not":{"enum":["intramural","in"]}}"#,
        &opts,
        &[
            (r#""intramural""#, false),
            (r#""in""#, false),
            (r#""intramurals""#, true),
            (r#""intramura""#, true),
            (r#""i""#, true),
            (r#""""#, true),
            (r#""inx""#, true),
            (r#""\n""#, true),
            (r#""intramurä""#, true),
        ],
    );
    // No type: the values go, every other value of every type stays.
    check(
        r#"{"not":{"enum":[null,true,"x"]}}"#,
        &opts,
        &[
            ("null", false),
            ("true", false),
            (r#""x""#, false),
            ("false", true),
            (r#""y""#, true),
            ("1", true),
            ("[]", true),
        ],
    );
    // An `enum` loses the values equal to the excluded ones (`1.0` is `1`).
    check(r#"{"enum":[1,2,"a"],"not":{"const":1.0}}"#, &opts, &[("1", false), ("2", true), (r#""a""#, true)]);
    // `anyOf` of types and values.
    check(
        r#"{"type":["string","integer"],"not":{"anyOf":[{"type":"integer"},{"const":"a"}]}}"#,
        &opts,
        &[("1", false), (r#""a""#, false), (r#""b""#, true), (r#""aa""#, true)],
    );
    check(r#"{"type":"boolean","not":{"const":false}}"#, &opts, &[("true", true), ("false", false)]);
    // Numbers by value: the ranges around them.
    check(
        r#"{"type":"integer","not":{"enum":[3,5]}}"#,
        &opts,
        &[("3", false), ("4", true), ("-7", true), ("5", false), ("50", true)],
    );
    check(
        r#"{"type":"number","not":{"const":0.5}}"#,
        &opts,
        &[("0.5", false), ("0.25", true), ("0.51", true), ("1", true)],
    );
    // Containers by value are only excluded from an enumeration.
    let e = json_schema_str_to_grammar(r#"{"type":"array","not":{"const":[1]}}"#, &opts).unwrap_err();
    assert!(matches!(&e.kind, SchemaErrorKind::Unsupported { keyword, .. } if keyword == "not"), "{e}");
    assert_eq!(e.pointer, "/not");
    // A type the schema does not allow anyway needs nothing.
    check(r#"{"type":"string","not":{"enum":[3,"b"]}}"#, &opts, &[(r#""b""#, false), (r#""3""#, true)]);
}

#[test]
fn not_of_strings_under_patterns_and_lengths_is_exact() {
    // Github_medium o24621: names with a pattern and lengths, minus reserved words;
    // random strings around the words, against the `jsonschema` crate.
    let c = compiler();
    let schema = r#"{"type":"string","pattern":"^[a-z]+[a-z0-9-]*$","minLength":2,"maxLength":8,
        "not":{"enum":["test","source","yotta","include","t"]}}"#;
    let g = compiled(&c, schema);
    let v: serde_json::Value = serde_json::from_str(schema).unwrap();
    let validator = jsonschema::validator_for(&v).unwrap();
    let seeds =
        ["test", "tests", "tes", "source", "sourc", "yotta", "yott-", "include", "includes", "t", "te"];
    let (mut valid, mut invalid) = (0, 0);
    for s in random_strings("tesu-1", 5, &seeds, 1500) {
        let inst = serde_json::Value::String(s);
        let text = serde_json::to_string(&inst).unwrap();
        let want = validator.is_valid(&inst);
        *(if want { &mut valid } else { &mut invalid }) += 1;
        assert_eq!(accepted_by(&g, &text), want, "{text} for {schema}");
    }
    assert!(valid >= 100 && invalid >= 100, "{valid} valid, {invalid} invalid instances");
}

#[test]
fn several_nots_and_wide_one_of_are_exact() {
    // Github_easy o65510: `oneOf` of five unanchored patterns (each branch less the
    // other four: an `allOf` of four `not`s) was the empty language — three or more
    // `not`s merged into a nested `anyOf` whose rewrite referred to itself. Random
    // strings around the words, against the `jsonschema` crate.
    let c = compiler();
    let schemas = [
        r#"{"type":"string","oneOf":[{"pattern":"ab"},{"pattern":"ba"},{"pattern":"bb"},{"pattern":"aa"},{"pattern":"c"}]}"#,
        r#"{"type":"string","oneOf":[{"pattern":"ab"},{"pattern":"ba"},{"pattern":"c"},{"pattern":"^a"}]}"#,
        r#"{"type":"string","allOf":[{"not":{"pattern":"ab"}},{"not":{"pattern":"ba"}},{"not":{"pattern":"cc"}}]}"#,
        r#"{"allOf":[{"not":{"pattern":"ab"}},{"not":{"type":"string","maxLength":1}},{"not":{"enum":["bbb"]}},{"not":{"pattern":"c$"}}]}"#,
        r#"{"type":"string","pattern":"a","allOf":[{"not":{"anyOf":[{"pattern":"b"},{"pattern":"cc"}]}},{"not":{"pattern":"^c"}}]}"#,
    ];
    for schema in schemas {
        let strings = random_strings("abc", 5, &["ab", "c", "a", "aa", "bbb", ""], 1500);
        let (valid, invalid) = strings_agree_with_validator(&c, schema, strings);
        assert!(valid >= 20 && invalid >= 20, "{valid} valid, {invalid} invalid instances for {schema}");
    }
}

#[test]
fn not_of_lengths_no_string_has_excludes_nothing() {
    // `minLength: 1, maxLength: 0` holds for no string: its `not` allows every string
    // (found by the widened fuzz below; the strings were all refused).
    let s = r#"{"type":"string","not":{"minLength":1,"maxLength":0}}"#;
    check(s, &json_semantics(), &[(r#""b""#, true), (r#""""#, true), (r#""abc""#, true)]);
    let s = r#"{"oneOf":[{"minLength":1,"maxLength":0},{"contains":{"maxItems":3},"minItems":3}]}"#;
    check(s, &json_semantics(), &[(r#""b""#, true), ("[[1],2,3]", false), ("[1]", true)]);
}

#[test]
fn empty_intersections_are_pruned_branches() {
    // No string of at most 2 characters matches `(a|aa)aa`: that `anyOf` branch is the
    // empty set and the other one stays (an empty root would be a typed error instead).
    let s = r#"{"anyOf":[{"type":"string","pattern":"^(?:a|aa)aa$","maxLength":2},
        {"type":"string","pattern":"^b+$","maxLength":2}]}"#;
    check(
        s,
        &JsonSchemaOptions::default(),
        &[(r#""b""#, true), (r#""bb""#, true), (r#""aa""#, false), (r#""aaa""#, false)],
    );
}

#[test]
fn formats_with_patterns_are_intersected() {
    // A `format` and a `pattern` together (and lengths a format regex cannot carry): each
    // string is accepted exactly when the schemas of each keyword alone accept it.
    let c = compiler();
    let cases = [
        (
            r#""format":"ipv4","pattern":"^10\\.""#,
            vec![r#""format":"ipv4""#, r#""pattern":"^10\\.""#],
            "10.2.5",
            13,
            &["10.0.0.1", "10.25.5.1", "10.2.0.52", "10.300.0.1", "11.0.0.1"][..],
        ),
        (
            r#""format":"duration","maxLength":6"#,
            vec![r#""format":"duration""#, r#""maxLength":6"#],
            "P1DTM2H",
            8,
            &["P1D", "PT12H", "P1DT2H", "P1DT12H", "P1Y2M3D"][..],
        ),
        (
            r#""format":"date","pattern":"-02-""#,
            vec![r#""format":"date""#, r#""pattern":"-02-""#],
            "2019-0",
            11,
            &["2019-02-28", "2020-02-01", "1999-02-10", "2019-12-02"][..],
        ),
    ];
    for (both, alone, alphabet, max_len, seeds) in cases {
        let schema = |kw: &str| format!(r#"{{"type":"string",{kw}}}"#);
        let g = compiled(&c, &schema(both));
        let parts: Vec<_> = alone.iter().map(|kw| compiled(&c, &schema(kw))).collect();
        let mut accepted = 0;
        for s in random_strings(alphabet, max_len, seeds, 1500) {
            let text = serde_json::to_string(&s).unwrap();
            let want = parts.iter().all(|p| accepted_by(p, &text));
            accepted += want as usize;
            assert_eq!(accepted_by(&g, &text), want, "{text} for {}", schema(both));
        }
        assert!(accepted >= 2, "{both}: only {accepted} strings accepted");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]
    /// `not` of random string sets, with and without lengths and a pattern: a string is
    /// accepted exactly when it is none of the words and meets the rest.
    #[test]
    fn not_of_random_string_sets(
        words in proptest::collection::vec("[ab\"é]{0,3}", 0..5),
        lengths in proptest::option::of((0u32..3, 0u32..3)),
        pattern in proptest::option::of(proptest::sample::select(vec!["^a", "b$", "^[ab]*$"])),
        inputs in proptest::collection::vec("[ab\"é]{0,4}", 32),
    ) {
        let mut schema = serde_json::json!({"type": "string", "not": {"enum": words}});
        if let Some((min, span)) = lengths {
            schema["minLength"] = min.into();
            schema["maxLength"] = (min + span).into();
        }
        if let Some(p) = pattern {
            schema["pattern"] = p.into();
        }
        let validator = jsonschema::validator_for(&schema).unwrap();
        let c = compiler();
        let g = match grammask::json_schema::json_schema_to_grammar(&schema, &JsonSchemaOptions::default()) {
            Ok(g) => c.compile(&GrammarSpec::Grammar(g)).unwrap(),
            Err(e) => {
                // Only when nothing is left: e.g. every string of the lengths excluded.
                proptest::prop_assert!(matches!(e.kind, SchemaErrorKind::Unsatisfiable(_)), "{}", e);
                for s in &inputs {
                    proptest::prop_assert!(!validator.is_valid(&serde_json::json!(s)), "{} valid for {}", s, schema);
                }
                return Ok(());
            }
        };
        for s in inputs.iter().chain(&words) {
            let inst = serde_json::Value::String(s.clone());
            let text = serde_json::to_string(&inst).unwrap();
            let mut m = GrammarMatcher::new(g.clone());
            let got = m.accept_string(&text).is_ok() && m.can_terminate();
            proptest::prop_assert_eq!(got, validator.is_valid(&inst), "{} for {}", text, schema);
        }
    }
}

/// Issue 27: `propertyNames` behind a `$ref` beside `patternProperties` was skipped as an
/// unknown keyword, so `{"zzz": 1}` was accepted. Every spelling of the same constraint
/// (inline, `$ref`, `allOf`, `$ref` to a `$ref`) must give the same verdicts.
#[test]
fn property_names_behind_a_ref_constrain_pattern_keys() {
    let spellings = [
        r##"{"enum": ["a", "b"]}"##,
        r##"{"$ref": "#/definitions/k"}"##,
        r##"{"allOf": [{"$ref": "#/definitions/k"}]}"##,
        r##"{"$ref": "#/definitions/k2"}"##,
        r##"{"$ref": "#/definitions/k", "maxLength": 1}"##,
    ];
    for sp in spellings {
        let mut s: serde_json::Value = serde_json::from_str(
            r##"{"definitions": {"k": {"enum": ["a", "b"]}, "k2": {"$ref": "#/definitions/k"}},
                "type": "object", "patternProperties": {".*": {"type": "number"}}}"##,
        )
        .unwrap();
        s["propertyNames"] = serde_json::from_str(sp).unwrap();
        let s = s.to_string();
        for opts in [JsonSchemaOptions::default(), json_semantics()] {
            check(
                &s,
                &opts,
                &[
                    (r#"{"zzz": 1}"#, false),
                    (r#"{"a": 1}"#, true),
                    (r#"{"a": 1, "b": 2.5}"#, true),
                    (r#"{"b": "x"}"#, false),
                ],
            );
        }
    }
}

/// A `propertyNames` too general for the key automaton cannot check the keys a pattern or
/// a declared name admits: a typed error, never a silent acceptance.
#[test]
fn property_names_beyond_the_key_automaton_beside_patterns_is_an_error() {
    let s = r#"{"type": "object", "patternProperties": {".*": {"type": "number"}},
        "propertyNames": {"anyOf": [{"const": "a"}, {"format": "email"}]}}"#;
    let e = json_schema_str_to_grammar(s, &JsonSchemaOptions::default()).unwrap_err();
    assert!(matches!(e.kind, SchemaErrorKind::Unsupported { .. }), "{e}");
    assert_eq!(e.pointer, "/propertyNames");
}

/// `not` reads its subschema keyword by keyword: behind a `$ref` it means the same.
#[test]
fn not_behind_a_ref_is_enforced() {
    let nots = [
        (r##"{"$ref": "#/$defs/ab"}"##, true),
        (r##"{"allOf": [{"$ref": "#/$defs/ab"}]}"##, true),
        (r##"{"anyOf": [{"$ref": "#/$defs/ab"}, {"const": "c"}]}"##, false),
    ];
    for (n, c_ok) in nots {
        let s = format!(
            r#"{{"$defs": {{"ab": {{"enum": ["a", "b"]}}}}, "type": "string", "maxLength": 1, "not": {n}}}"#
        );
        check(
            &s,
            &JsonSchemaOptions::default(),
            &[(r#""a""#, false), (r#""b""#, false), (r#""z""#, true), (r#""c""#, c_ok)],
        );
    }
}

/// Issue 27 §2: finitely many values decide every keyword beside them, per value, with a
/// full validator — exact where the keyword-level path would refuse or ignore.
#[test]
fn finite_values_decide_every_keyword() {
    let opts = JsonSchemaOptions::default();
    // The issue's synthetic schema (refused before by grammask and llguidance).
    check(
        r#"{"allOf": [{"enum": [[1,2,3,4,5]]}, {"not": {"not": {"additionalItems": false}}}]}"#,
        &opts,
        &[("[1, 2, 3, 4, 5]", true), ("[1, 2, 3, 4]", false)],
    );
    // `not` of a structured schema, `if`/`then`/`else`, `oneOf` of overlapping branches,
    // `uniqueItems`, formats, `multipleOf` on floats and a `pattern` beside an enum.
    let cases: &[(&str, &[(&str, bool)])] = &[
        (
            r#"{"enum": [{"a": 1}, {"a": 2}, {"b": 1}], "not": {"required": ["b"]}}"#,
            &[(r#"{"a": 1}"#, true), (r#"{"a": 2}"#, true), (r#"{"b": 1}"#, false)],
        ),
        (
            r#"{"enum": [1, 2, 3, 4], "if": {"minimum": 3}, "then": {"multipleOf": 2}, "else": {"const": 1}}"#,
            &[("1", true), ("2", false), ("3", false), ("4", true)],
        ),
        (
            r#"{"enum": [1, 2, 3], "oneOf": [{"minimum": 2}, {"maximum": 2}]}"#,
            &[("1", true), ("2", false), ("3", true)],
        ),
        (r#"{"enum": [[1, 1], [1, 2]], "uniqueItems": true}"#, &[("[1, 2]", true), ("[1, 1]", false)]),
        (
            r#"{"enum": ["a@b.co", "nope"], "format": "email"}"#,
            &[(r#""a@b.co""#, true), (r#""nope""#, false)],
        ),
        (r#"{"enum": [0.3, 0.35], "multipleOf": 0.1}"#, &[("0.3", true), ("0.35", false)]),
        (r#"{"enum": ["ab", "c1"], "pattern": "^[a-z]+$"}"#, &[(r#""ab""#, true), (r#""c1""#, false)]),
        (
            r##"{"$defs": {"v": {"enum": ["x", "y", "z"]}}, "allOf": [{"$ref": "#/$defs/v"}], "not": {"const": "y"}}"##,
            &[(r#""x""#, true), (r#""y""#, false), (r#""z""#, true)],
        ),
        (
            r#"{"anyOf": [{"const": 1}, {"enum": [2, 3]}], "not": {"enum": [3]}, "dependentSchemas": {}}"#,
            &[("1", true), ("2", true), ("3", false)],
        ),
    ];
    for (schema, instances) in cases {
        check(schema, &opts, instances);
    }
    // Nothing survives: unsatisfiable, as a typed error.
    let e = json_schema_str_to_grammar(
        r#"{"enum": [1, 2], "not": {"enum": [1, 2]}, "uniqueItems": true}"#,
        &opts,
    )
    .unwrap_err();
    assert!(matches!(e.kind, SchemaErrorKind::Unsatisfiable(_)), "{e}");
}

/// Random schemas for [`structured_not_matches_the_validator`]: `not` and `oneOf` over a
/// small universe of keywords (every form `json_schema::not` negates, and some it does
/// not), nested up to `depth`.
fn random_schema(rng: &mut Rng, depth: u32) -> serde_json::Value {
    use serde_json::json;
    let mut s = serde_json::Map::new();
    let atoms = 1 + rng.below(2);
    for _ in 0..atoms {
        let k = rng.below(if depth == 0 { 17 } else { 24 }) as i64;
        let n = rng.below(4) as i64;
        let (key, value) = match k {
            0 => (
                "type",
                json!(["null", "boolean", "integer", "number", "string", "array", "object"][rng.below(7)]),
            ),
            1 => ("type", json!(["string", "integer"])),
            2 => ("minimum", json!(n)),
            3 => ("maximum", json!(n + 1)),
            4 => ("exclusiveMinimum", json!(n)),
            5 => ("minLength", json!(n)),
            6 => ("maxLength", json!(n)),
            7 => ("pattern", json!(["^a", "b$", "^[ab]*$", "ba"][rng.below(4)])),
            8 => ("minItems", json!(n)),
            9 => ("maxItems", json!(n)),
            10 => ("required", [json!(["a"]), json!(["a", "b"]), json!(["c"])][rng.below(3)].clone()),
            11 => ("minProperties", json!(n)),
            12 => ("maxProperties", json!(n)),
            13 => (
                "enum",
                [json!([1, "a", null]), json!([true, 2.5]), json!(["ab", "b"])][rng.below(3)].clone(),
            ),
            14 => ("const", [json!(1), json!("a"), json!(false)][rng.below(3)].clone()),
            15 => ("items", json!(false)),
            16 => ("properties", json!({"a": {"type": "integer"}, "b": {"type": "string"}})),
            17 => ("items", random_schema(rng, depth - 1)),
            18 => ("contains", random_schema(rng, depth - 1)),
            19 => ("properties", json!({ ["a", "b"][rng.below(2)]: random_schema(rng, depth - 1) })),
            20 => ("not", random_schema(rng, depth - 1)),
            21 => ("anyOf", json!([random_schema(rng, depth - 1), random_schema(rng, depth - 1)])),
            22 => ("additionalProperties", json!(false)),
            _ => ("format", json!("ipv4")),
        };
        s.insert(key.into(), value);
    }
    serde_json::Value::Object(s)
}

/// Random JSON values around the universe of [`random_schema`].
fn random_instance(rng: &mut Rng, depth: u32) -> serde_json::Value {
    use serde_json::json;
    match rng.below(if depth == 0 { 6 } else { 8 }) {
        0 => json!(null),
        1 => json!(rng.below(2) == 0),
        2 => json!(rng.below(7) as i64 - 1),
        3 => json!([2.5, -0.5, 1.5, 4.25][rng.below(4)]),
        4 | 5 => {
            let pick = ["", "a", "b", "ab", "ba", "aab", "bab", "abab", "1.2.3.4", "x"];
            json!(pick[rng.below(pick.len())])
        }
        6 => serde_json::Value::Array((0..rng.below(4)).map(|_| random_instance(rng, depth - 1)).collect()),
        _ => {
            let mut o = serde_json::Map::new();
            for _ in 0..rng.below(4) {
                o.insert(["a", "b", "c"][rng.below(3)].into(), random_instance(rng, depth - 1));
            }
            serde_json::Value::Object(o)
        }
    }
}

/// Issue 27 §3: `not` of structured schemas, and `oneOf` of overlapping branches (each
/// less the others), against the `jsonschema` crate on generated instances: a schema
/// that converts must accept exactly the valid ones; one that does not must be a typed
/// error (an unsupported keyword, or unsatisfiable when nothing is valid).
#[test]
fn structured_not_matches_the_validator() {
    use grammask::json_schema::{json_schema_to_grammar, to_python_json, Whitespace};
    let c = compiler();
    let mut rng = Rng(0x0027_0003);
    let (mut converted, mut refused, mut checked, mut valid) = (0, 0, 0, 0);
    let mut unsatisfiable = 0;
    const SCHEMAS: usize = 2000;
    const INSTANCES: usize = 48;
    for i in 0..SCHEMAS {
        let sibling = random_schema(&mut rng, 0);
        let mut schema = serde_json::Map::new();
        if let serde_json::Value::Object(sib) = sibling {
            // Half the schemas have siblings beside the `not`/`oneOf`.
            if i % 2 == 0 {
                schema.extend(sib.into_iter().filter(|(k, _)| k != "not"));
            }
        }
        // Two to four branches or `not`s: three or more `not`s merge differently.
        let parts = 2 + rng.below(3);
        if i % 4 == 3 {
            let branches: Vec<serde_json::Value> = (0..parts).map(|_| random_schema(&mut rng, 1)).collect();
            schema.insert("oneOf".into(), serde_json::Value::Array(branches));
        } else if i % 4 == 1 {
            let nots: Vec<serde_json::Value> =
                (0..parts).map(|_| serde_json::json!({ "not": random_schema(&mut rng, 1) })).collect();
            schema.insert("allOf".into(), serde_json::Value::Array(nots));
        } else {
            schema.insert("not".into(), random_schema(&mut rng, 2));
        }
        let schema = serde_json::Value::Object(schema);
        let validator = jsonschema::options().should_validate_formats(true).build(&schema).unwrap();
        let instances: Vec<serde_json::Value> =
            (0..INSTANCES).map(|_| random_instance(&mut rng, 2)).collect();
        let g = match json_schema_to_grammar(&schema, &json_semantics()) {
            Ok(g) => g,
            Err(e) => {
                refused += 1;
                match e.kind {
                    SchemaErrorKind::Unsupported { .. } => {}
                    SchemaErrorKind::Unsatisfiable(_) => {
                        unsatisfiable += 1;
                        for inst in &instances {
                            assert!(
                                !validator.is_valid(inst),
                                "{inst} is valid for {schema}, refused as {e}"
                            );
                        }
                    }
                    _ => panic!("{schema}: {e}"),
                }
                continue;
            }
        };
        converted += 1;
        let g = c.compile(&GrammarSpec::Grammar(g)).unwrap();
        for inst in &instances {
            let text = to_python_json(inst, Whitespace::Compact);
            let want = validator.is_valid(inst);
            valid += want as usize;
            checked += 1;
            assert_eq!(accepted_by(&g, &text), want, "{text} for {schema}");
        }
    }
    eprintln!(
        "{converted} schemas converted, {refused} refused ({unsatisfiable} as unsatisfiable); \
         {checked} instances checked, {valid} valid"
    );
    // The test must test something: most schemas are decided (converted, or found
    // unsatisfiable: checked above), and both verdicts occur often. (Several `not`s or
    // `oneOf` branches are often unsatisfiable or overlapping: a typed refusal.)
    assert!(converted * 10 >= SCHEMAS * 4, "only {converted} of {SCHEMAS} schemas converted");
    assert!((converted + unsatisfiable) * 10 >= SCHEMAS * 7, "only {converted} + {unsatisfiable} decided");
    assert!(valid * 10 >= checked && (checked - valid) * 10 >= checked, "{valid} valid of {checked}");
}

/// Issue 27 §3: what `not` cannot negate exactly stays a typed error at the `not`'s
/// pointer, whatever the nesting.
#[test]
fn inexact_not_is_a_typed_error_at_its_pointer() {
    let cases = [
        (r#"{"type":"object","not":{"patternProperties":{"^a":{"type":"string"}}}}"#, "/not"),
        (r#"{"type":"array","not":{"uniqueItems":true}}"#, "/not"),
        (r#"{"properties":{"x":{"not":{"type":"integer"}}}}"#, "/properties/x/not"),
        (r#"{"type":"integer","not":{"multipleOf":3}}"#, "/not"),
    ];
    for (s, ptr) in cases {
        let e = json_schema_str_to_grammar(s, &JsonSchemaOptions::default()).unwrap_err();
        assert!(
            matches!(&e.kind, SchemaErrorKind::Unsupported { keyword, .. } if keyword == "not"),
            "{s}: {e}"
        );
        assert_eq!(e.pointer, ptr, "{s}");
    }
}

/// `allOf` parts merged keyword by keyword must mean what they meant apart: a name one
/// part declares is still an additional (or pattern) property of the other, a prefix
/// position still an `items` position of the other, and two `contains` are two items.
/// (Each was silently wrong before, found by the `not` rewrite, which merges its
/// branches into the keywords beside them.) Non-strict: these are JSON Schema's verdicts.
#[test]
fn all_of_parts_keep_their_meaning_when_merged() {
    let opts = json_semantics();
    check(
        r#"{"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}}}]}"#,
        &opts,
        &[(r#"{"a": 1}"#, true), (r#"{"b": 1}"#, false), ("{}", true)],
    );
    check(
        r#"{"allOf":[{"patternProperties":{"^x":{"type":"integer"}}},{"additionalProperties":{"minimum":3}}]}"#,
        &opts,
        &[(r#"{"x1": 4}"#, true), (r#"{"x1": 2}"#, false), (r#"{"x1": 4.5}"#, false), (r#"{"y": 2}"#, false)],
    );
    check(
        r#"{"allOf":[{"prefixItems":[{"type":"integer"}]},{"items":{"type":"number"}}]}"#,
        &opts,
        &[("[1, 2.5]", true), (r#"["a"]"#, false), (r#"[1, "a"]"#, false)],
    );
    check(
        r#"{"allOf":[{"prefixItems":[{"type":"integer"}]},{"prefixItems":[{},{},{"type":"string"}], "items":false}]}"#,
        &opts,
        &[("[1, 2]", true), (r#"[1, 2, "c"]"#, true), (r#"[1, 2, 3]"#, false), (r#"[1, 2, "c", 4]"#, false)],
    );
    let e = json_schema_str_to_grammar(
        r#"{"allOf":[{"contains":{"type":"integer"}},{"contains":{"type":"string"}}]}"#,
        &opts,
    )
    .unwrap_err();
    assert!(matches!(&e.kind, SchemaErrorKind::Unsupported { keyword, .. } if keyword == "contains"), "{e}");
}

/// A number range above `x.0` and at most `x.0` (`exclusiveMinimum: 1, maximum: 1`,
/// which the `not` of `{enum: [1]}` beside `maximum: 1` produces) recurred forever.
#[test]
fn empty_real_ranges_are_empty() {
    let s = r#"{"anyOf":[{"type":"number","exclusiveMinimum":1,"maximum":1},{"const":"x"}]}"#;
    check(s, &JsonSchemaOptions::default(), &[("1", false), ("1.5", false), (r#""x""#, true)]);
}

/// Issue 27 §3 by example: `not` of structured schemas and `oneOf` of overlapping
/// branches from the JSON-Schema-Test-Suite and around it.
#[test]
fn structured_not_by_example() {
    let opts = json_semantics();
    check(
        r#"{"not":{"type":"object","properties":{"foo":{"type":"string"}}}}"#,
        &opts,
        &[("1", true), (r#"{"foo": 1}"#, true), (r#"{"foo": "x"}"#, false), ("{}", false)],
    );
    check(
        r#"{"type":"string","not":{"pattern":"^a","maxLength":3}}"#,
        &opts,
        &[(r#""abc""#, false), (r#""abcd""#, true), (r#""b""#, true), (r#""""#, true)],
    );
    check(
        r#"{"type":"string","format":"ipv4","not":{"pattern":"^10\\."}}"#,
        &opts,
        &[(r#""10.0.0.1""#, false), (r#""11.0.0.1""#, true), (r#""10.0.0""#, false)],
    );
    check(
        r#"{"type":"array","not":{"contains":{"type":"string"}}}"#,
        &opts,
        &[("[1]", true), (r#"["a", null]"#, false), ("[]", true)],
    );
    check(
        r#"{"type":"object","not":{"properties":{"a":{}},"additionalProperties":false}}"#,
        &opts,
        &[(r#"{"a": 1}"#, false), ("{}", false), (r#"{"b": 1}"#, true), (r#"{"a": 1, "b": 2}"#, true)],
    );
    check(r#"{"not":{"not":{"type":"string"}}}"#, &opts, &[(r#""x""#, true), ("1", false)]);
    check(
        r#"{"type":"string","oneOf":[{"minLength":2},{"maxLength":4}]}"#,
        &opts,
        &[(r#""a""#, true), (r#""abc""#, false), (r#""abcde""#, true)],
    );
    // Overlapping `oneOf` branches, each less the other: `{}` satisfies both.
    check(
        r#"{"type":"object","oneOf":[{"properties":{"foo":{"type":"string"}}},{"properties":{"bar":{"type":"string"}}}]}"#,
        &opts,
        &[
            ("{}", false),
            (r#"{"foo": 1}"#, true),
            (r#"{"foo": 1, "bar": 2}"#, false),
            (r#"{"foo": "x", "bar": 2}"#, true),
        ],
    );
    // Strict mode: a complement that declares members leaves an open object open.
    check(
        r#"{"type":"object","not":{"required":["a"]}}"#,
        &JsonSchemaOptions::default(),
        &[(r#"{"a": 1}"#, false), (r#"{"b": 1}"#, true), ("{}", true)],
    );
}
