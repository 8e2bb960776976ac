//! Structural tags (XGrammar's format): masks against the brute-force oracle on the real
//! tokenizers, accepted and rejected texts per format type against independent
//! expectations, typed errors for bad input, and no panics on random documents.
//!
//! Set `GRAMMASK_ORACLE_STRIDE=N` to check the oracle after every N-th byte (default: 1
//! on Llama-2, 3 on the others).

use crate::common;

use common::check_masks_along;
use grammask::structural_tag::{structural_tag_to_grammar, StructuralTagErrorKind as Kind};
use grammask::{Error, GrammarCompiler, GrammarMatcher, GrammarSpec};
use serde_json::{json, Value};
use std::sync::Arc;

fn doc(format: Value) -> String {
    json!({"type": "structural_tag", "format": format}).to_string()
}

/// A tool-call tag: `begin`, a JSON object with the given schema, `end`.
fn tool_tag(begin: &str, schema: Value, end: &str) -> Value {
    json!({"type": "tag", "begin": begin, "content": {"type": "json_schema", "json_schema": schema}, "end": end})
}

fn call_schema() -> Value {
    json!({"type": "object", "properties": {
        "name": {"const": "f"},
        "arguments": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}},
        "required": ["name", "arguments"]})
}

// ---------------------------------------------------------------------------------------
// (a) masks against the oracle
// ---------------------------------------------------------------------------------------

/// After every `stride`-th byte of `text`, the matcher's mask equals the oracle's for
/// the same grammar (the oracle shares nothing with the automata, the mask cache or the
/// matcher); `text` must be accepted in full.
fn check_along(name: &str, tag: &str, text: &str) {
    let grammar = structural_tag_to_grammar(tag).unwrap_or_else(|e| panic!("{name}: {e}"));
    let spec = GrammarSpec::StructuralTag(tag.into());
    check_masks_along(name, &grammar, &spec, text, |t| if t == "llama2" { 1 } else { 3 });
}

#[test]
fn oracle_tool_call_between_free_text() {
    let tag = doc(json!({"type": "triggered_tags", "triggers": ["<tool_call>"],
        "tags": [tool_tag("<tool_call>", call_schema(), "</tool_call>")]}));
    check_along(
        "tool_call",
        &tag,
        r#"Hello <tool <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call> bye <tool_cal"#,
    );
}

#[test]
fn oracle_several_triggers_and_reasoning() {
    let weather = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let tag = doc(json!({"type": "sequence", "elements": [
        {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"},
        {"type": "triggered_tags", "triggers": ["<function=", "[TOOL"], "tags": [
            tool_tag("<function=get_weather>", weather.clone(), "</function>"),
            tool_tag("<function=f>", call_schema(), "</function>"),
            tool_tag("[TOOL_CALLS]", weather, "[/TOOL]"),
        ]}
    ]}));
    check_along(
        "function",
        &tag,
        r#"<think>a <b>c</b> </thin x</think>See <func [TOO <function=get_weather>{"city": "Paris"}</function> and [TOOL_CALLS]{"city": "Rome"}[/TOOL]."#,
    );
}

#[test]
fn oracle_at_least_one_and_stop_after_first() {
    let tag = doc(json!({"type": "triggered_tags", "triggers": ["<tool_call>"], "at_least_one": true,
        "stop_after_first": true, "tags": [tool_tag("<tool_call>", call_schema(), "</tool_call>")]}));
    check_along("forced call", &tag, r#"<tool_call>{"name": "f", "arguments": {"a": -12}}</tool_call>"#);
}

// ---------------------------------------------------------------------------------------
// (b) accepted and rejected texts per format type
// ---------------------------------------------------------------------------------------

fn compiler() -> &'static GrammarCompiler {
    common::byte_compiler()
}

/// Whether the tag accepts `text` as a complete output.
fn accepts(tag: &str, text: &str) -> bool {
    let compiled =
        compiler().compile(&GrammarSpec::StructuralTag(tag.into())).unwrap_or_else(|e| panic!("{e}"));
    let mut m = GrammarMatcher::new(compiled);
    m.accept_string(text).is_ok() && m.can_terminate()
}

/// Each `(text, expected)` pair.
fn expect(tag: &str, cases: &[(&str, bool)]) {
    for &(text, want) in cases {
        assert_eq!(accepts(tag, text), want, "{text:?} under {tag}");
    }
}

#[test]
fn const_string_sequence_or_repeats() {
    expect(
        &doc(json!({"type": "const_string", "value": "abc"})),
        &[("abc", true), ("ab", false), ("abcd", false)],
    );
    let seq = doc(json!({"type": "sequence", "elements": [
        {"type": "const_string", "value": "a"},
        {"type": "or", "elements": [{"type": "const_string", "value": "b"}, {"type": "const_string", "value": "c"}]},
        {"type": "optional", "content": {"type": "const_string", "value": "d"}},
        {"type": "star", "content": {"type": "const_string", "value": "e"}},
        {"type": "plus", "content": {"type": "const_string", "value": "f"}},
        {"type": "repeat", "min": 1, "max": 2, "content": {"type": "const_string", "value": "g"}},
        {"type": "repeat", "min": 2, "max": -1, "content": {"type": "const_string", "value": "h"}},
    ]}));
    expect(
        &seq,
        &[
            ("abfghh", true),
            ("acdeeefffgghhhh", true),
            ("abfgh", false),
            ("abghh", false),
            ("abfhh", false),
            ("abfggghh", false),
            ("adfghh", false),
            ("abddfghh", false),
        ],
    );
}

#[test]
fn json_schema_content_is_validated() {
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 5},
        "n": {"type": "integer", "minimum": 0}}, "required": ["name"]});
    let validator = jsonschema::validator_for(&schema).unwrap();
    let texts = [
        r#"{"name": "ab"}"#,
        r#"{"name":"ab","n":3}"#,
        "{\n  \"name\" : \"abcde\" ,\n  \"n\": 0\n}",
        r#"{"name": "abcdef"}"#,
        r#"{"n": 3}"#,
        r#"{"name": "a", "n": -1}"#,
        r#"{"name": "a", "n": 1.5}"#,
        r#"{"name": "a", "x": 1}"#,
        r#"{"n": 1, "name": "a"}"#,
        r#"{"name": "a"} "#,
        r#"["name"]"#,
    ];
    let keys_in_order = |v: &Value, order: &[&str]| {
        let keys: Vec<&str> =
            v.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
        let pos: Vec<usize> = keys.iter().filter_map(|k| order.iter().position(|o| o == k)).collect();
        pos.windows(2).all(|w| w[0] < w[1])
    };
    for any_order in [false, true] {
        let tag = doc(json!({"type": "json_schema", "json_schema": schema, "any_order": any_order}));
        for text in texts {
            let parsed: Option<Value> = serde_json::from_str(text).ok();
            // A trailing space is JSON whitespace after the value: not part of the
            // grammar's language (XGrammar ends the value at its last token).
            let want = !text.ends_with(' ')
                && parsed.as_ref().is_some_and(|v| {
                    validator.is_valid(v)
                        // Strict mode: no undeclared members.
                        && v.as_object().is_some_and(|o| o.keys().all(|k| k == "name" || k == "n"))
                        && (any_order || keys_in_order(v, &["name", "n"]))
                });
            assert_eq!(accepts(&tag, text), want, "any_order {any_order}: {text:?}");
        }
    }
    // `max_whitespace_cnt` bounds each gap.
    let tight = doc(json!({"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": 1}));
    expect(&tight, &[(r#"{ "name": "a"}"#, true), (r#"{  "name": "a"}"#, false)]);
}

#[test]
fn regex_and_grammar_formats() {
    for pattern in [r"a+b", r"[0-9]{2,3}(-x)?", r"(ab|c)*"] {
        let tag = doc(json!({"type": "regex", "pattern": pattern}));
        let re = regex::Regex::new(&format!("^(?:{pattern})$")).unwrap();
        for text in ["", "ab", "aab", "b", "12", "123-x", "1234", "abcab", "abca"] {
            assert_eq!(accepts(&tag, text), re.is_match(text), "{pattern} on {text:?}");
        }
    }
    let tag = doc(json!({"type": "grammar", "grammar": "root ::= \"(\" root \")\" | x\nx ::= [0-9]+"}));
    expect(&tag, &[("7", true), ("((42))", true), ("((4)", false), ("()", false)]);
}

#[test]
fn any_text_and_tags() {
    let free = doc(json!({"type": "any_text"}));
    expect(&free, &[("", true), ("anything <at> all ✓", true)]);
    let excl = doc(json!({"type": "any_text", "excludes": ["ab", "ba"]}));
    for text in ["", "aa", "ab", "xbay", "a b", "bba"] {
        assert_eq!(accepts(&excl, text), !text.contains("ab") && !text.contains("ba"), "{text:?}");
    }
    // Free text in a tag stops at the tag's end (any of them).
    let tag = doc(json!({"type": "tag", "begin": "<a>", "content": {"type": "any_text", "excludes": ["zz"]},
        "end": ["</a>", "</b>"]}));
    let ends = ["</a>", "</b>"];
    for text in [
        "<a></a>",
        "<a>x</b>",
        "<a><a> </a",
        "<a>x</a></a>",
        "<a>x</b>y</a>",
        "<a>zz</a>",
        "<a>z z</a>",
        "<a>x",
    ] {
        let want = text.starts_with("<a>")
            && ends.iter().any(|e| {
                text.strip_prefix("<a>")
                    .and_then(|t| t.strip_suffix(e))
                    .is_some_and(|mid| !ends.iter().any(|e| mid.contains(e)) && !mid.contains("zz"))
            });
        assert_eq!(accepts(&tag, text), want, "{text:?}");
    }
    // The innermost tag's end is what free text avoids.
    let nested = doc(json!({"type": "tag", "begin": "<a>", "end": "</a>", "content":
        {"type": "tag", "begin": "<b>", "content": {"type": "any_text"}, "end": "</b>"}}));
    expect(&nested, &[("<a><b>x</a>y</b></a>", true), ("<a><b>x</b>y</b></a>", false)]);
}

/// An independent reading of `triggered_tags` with tool tags `<f=NAME>` … `</f>` whose
/// content is a digit string: free text up to the first `<f=`, then a tag, repeatedly.
fn triggered_reference(text: &str, at_least_one: bool, stop_after_first: bool) -> bool {
    let names = ["a", "bb"];
    let mut rest = text;
    let mut count = 0;
    loop {
        if stop_after_first && count == 1 {
            return rest.is_empty();
        }
        let Some(i) = rest.find("<f=") else { return !(at_least_one && count == 0) };
        if at_least_one && count == 0 && i != 0 {
            return false;
        }
        let after = &rest[i + 3..];
        let Some(name) = names.iter().find(|n| after.starts_with(&format!("{n}>"))) else { return false };
        let body = &after[name.len() + 1..];
        let digits = body.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 || !body[digits..].starts_with("</f>") {
            return false;
        }
        rest = &body[digits + 4..];
        count += 1;
    }
}

#[test]
fn triggered_tags_follow_the_reference() {
    let digits = json!({"type": "regex", "pattern": "[0-9]+"});
    let texts = [
        "",
        "plain text",
        "<f=a>1</f>",
        "hi <f=a>12</f> then <f=bb>3</f> end",
        "<f=a>1</f><f=bb>2</f>",
        "x <f=c>1</f>",
        "x <f=a>1</f",
        "x <f=a></f>",
        "x <f <f= ",
        "x <f",
        "<f=a>1</f> tail",
        "a<<f=a>1</f>",
    ];
    for (at_least_one, stop_after_first) in [(false, false), (true, false), (false, true), (true, true)] {
        let tag = doc(json!({"type": "triggered_tags", "triggers": ["<f="],
            "at_least_one": at_least_one, "stop_after_first": stop_after_first, "tags": [
                {"begin": "<f=a>", "content": digits, "end": "</f>"},
                {"type": "tag", "begin": "<f=bb>", "content": digits, "end": "</f>"}]}));
        for text in texts {
            let want = triggered_reference(text, at_least_one, stop_after_first);
            assert_eq!(
                accepts(&tag, text),
                want,
                "{text:?} at_least_one {at_least_one} stop {stop_after_first}"
            );
        }
    }
    // Excludes keep strings out of the free text (not out of the tags).
    let tag = doc(json!({"type": "triggered_tags", "triggers": ["<f="], "excludes": ["bad"],
        "tags": [{"begin": "<f=a>", "content": {"type": "const_string", "value": "bad"}, "end": "</f>"}]}));
    expect(&tag, &[("ok <f=a>bad</f> ok", true), ("ba d", true), ("bad", false), ("<f=a>bad</f>bad", false)]);
}

#[test]
fn tags_with_separator_and_dispatch() {
    let c = |v: &str| json!({"type": "const_string", "value": v});
    let tags = json!([{"begin": "<a>", "content": c("1"), "end": "</a>"}, {"begin": "<b>", "content": c("2"), "end": "</b>"}]);
    let sep = |alo: bool, saf: bool| {
        doc(
            json!({"type": "tags_with_separator", "separator": ",", "tags": tags, "at_least_one": alo, "stop_after_first": saf}),
        )
    };
    let texts = ["", "<a>1</a>", "<a>1</a>,<b>2</b>", "<a>1</a>,", "x<a>1</a>", "<a>1</a><b>2</b>"];
    let expected = |alo: bool, saf: bool| -> [bool; 6] { [!alo, true, !saf, false, false, false] };
    for (alo, saf) in [(false, false), (true, false), (false, true), (true, true)] {
        let tag = sep(alo, saf);
        for (text, want) in texts.iter().zip(expected(alo, saf)) {
            assert_eq!(accepts(&tag, text), want, "{text:?} {alo} {saf}");
        }
    }
    for repeat in [true, false] {
        let tag = doc(json!({"type": "dispatch", "loop": repeat, "excludes": ["no"],
            "rules": [["<x", c(">1")], ["<y", {"type": "regex", "pattern": "[0-9]"}]]}));
        expect(
            &tag,
            &[
                ("", true),
                ("text <x>1", true),
                // Without `loop` the format ends after the first dispatched format.
                ("text <x>1 more", repeat),
                ("<x>1<y5", repeat),
                ("<x>2", false),
                ("a no", false),
                ("<x", false),
                ("<", true),
            ],
        );
    }
}

#[test]
fn legacy_form_is_triggered_json_tags() {
    let tag = json!({"type": "structural_tag", "triggers": ["<function="], "structures": [
        {"begin": "<function=f>", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, "end": "</function>"},
        {"begin": "<function=g>", "schema": "{\"type\": \"string\"}", "end": "</function>"}]})
    .to_string();
    expect(
        &tag,
        &[
            ("text", true),
            (r#"x <function=f>{"a": 1}</function> y <function=g>"s"</function>"#, true),
            (r#"<function=f>{"a": "1"}</function>"#, false),
            (r#"<function=h>{}</function>"#, false),
        ],
    );
}

#[test]
fn compiles_through_the_cache() {
    let tag = doc(json!({"type": "const_string", "value": "x"}));
    let a = compiler().compile(&GrammarSpec::StructuralTag(tag.clone())).unwrap();
    let b = compiler().compile(&GrammarSpec::StructuralTag(tag)).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
}

// ---------------------------------------------------------------------------------------
// (c) typed errors
// ---------------------------------------------------------------------------------------

fn error_of(text: &str) -> (Kind, String) {
    match compiler().compile(&GrammarSpec::StructuralTag(text.into())) {
        Err(Error::StructuralTag(e)) => {
            // The message names the pointer.
            assert!(e.to_string().contains("structural tag at"), "{e}");
            (e.kind, e.pointer)
        }
        Err(e) => panic!("not a structural tag error: {e}"),
        Ok(_) => panic!("accepted: {text}"),
    }
}

#[test]
fn bad_input_gives_typed_errors() {
    let tag_a = json!({"begin": "<a>", "content": {"type": "const_string", "value": "x"}, "end": "</a>"});
    let tt = |triggers: Value, tags: Value| {
        doc(json!({"type": "triggered_tags", "triggers": triggers, "tags": tags}))
    };

    let (k, p) = error_of("{\"type\": \"structural_tag\", ");
    assert!(matches!(k, Kind::InvalidJson { line: 1, .. }), "{k:?}");
    assert_eq!(p, "");
    let (k, p) = error_of(&doc(json!({"type": "any_txt"})));
    assert_eq!((k, p.as_str()), (Kind::UnknownFormat("any_txt".into()), "/format/type"));
    let (k, p) = error_of(&doc(json!({"type": "const_string"})));
    assert_eq!((k, p.as_str()), (Kind::MissingField("value".into()), "/format"));
    let (k, p) = error_of(&doc(json!({"type": "const_string", "value": "a", "valeu": 1})));
    assert_eq!((k, p.as_str()), (Kind::UnknownField("valeu".into()), "/format/valeu"));
    let (k, p) = error_of(&doc(json!({"type": "const_string", "value": 3})));
    assert!(matches!(k, Kind::WrongType { .. }) && p == "/format/value", "{k:?} {p}");
    let (k, p) = error_of(&json!({"type": "structural_tag"}).to_string());
    assert_eq!((k, p.as_str()), (Kind::MissingField("format".into()), ""));
    let (k, p) = error_of(&json!({"type": "regex", "format": {"type": "any_text"}}).to_string());
    assert!(matches!(k, Kind::InvalidValue(_)) && p == "/type", "{k:?} {p}");

    let (k, p) = error_of(&tt(json!([]), json!([tag_a])));
    assert_eq!((k, p.as_str()), (Kind::EmptyTriggers, "/format/triggers"));
    let (k, p) = error_of(&tt(json!(["<a", "<a>"]), json!([tag_a])));
    assert_eq!(
        (k, p.as_str()),
        (Kind::TriggerIsPrefix { trigger: "<a".into(), of: "<a>".into() }, "/format/triggers/0")
    );
    let (k, p) = error_of(&tt(json!(["<b"]), json!([tag_a])));
    assert_eq!((k, p.as_str()), (Kind::TagWithoutTrigger { begin: "<a>".into() }, "/format/tags/0/begin"));
    let (k, p) = error_of(&tt(json!(["<a", "<c"]), json!([tag_a])));
    assert_eq!((k, p.as_str()), (Kind::TriggerWithoutTag { trigger: "<c".into() }, "/format/triggers/1"));
    let (k, _) = error_of(&tt(json!(["<a"]), json!([])));
    assert!(matches!(k, Kind::InvalidValue(_)));
    let (k, p) = error_of(&doc(json!({"type": "sequence", "elements": []})));
    assert!(matches!(k, Kind::InvalidValue(_)) && p == "/format/elements");
    let (k, p) =
        error_of(&doc(json!({"type": "repeat", "min": 3, "max": 2, "content": {"type": "any_text"}})));
    assert!(matches!(k, Kind::InvalidValue(_)) && p == "/format/max");
    let (k, p) =
        error_of(&doc(json!({"type": "tag", "begin": "<a>", "content": {"type": "any_text"}, "end": ""})));
    assert_eq!((k, p.as_str()), (Kind::UnlimitedContentWithoutEnd, "/format/end"));
    let (k, p) =
        error_of(&doc(json!({"type": "tag", "begin": "<a>", "content": {"type": "any_text"}, "end": []})));
    assert!(matches!(k, Kind::InvalidValue(_)) && p == "/format/end");

    // Embedded errors keep their own location.
    let bad_schema =
        tool_tag("<a>", json!({"type": "object", "properties": {"x": {"type": "strnig"}}}), "</a>");
    let (k, p) = error_of(&tt(json!(["<a"]), json!([bad_schema])));
    assert_eq!(p, "/format/tags/0/content/json_schema");
    match k {
        Kind::Schema(e) => assert_eq!(e.pointer, "/properties/x"),
        k => panic!("{k:?}"),
    }
    let (k, p) = error_of(&doc(json!({"type": "regex", "pattern": "a(?=b)"})));
    assert_eq!(p, "/format/pattern");
    assert!(matches!(k, Kind::Regex(ref e) if e.offset == 1), "{k:?}");
    let (k, p) = error_of(&doc(json!({"type": "sequence", "elements": [{"type": "any_text"},
        {"type": "grammar", "grammar": "root ::= \"a\"\n  | b c"}]})));
    assert_eq!(p, "/format/elements/1/grammar");
    assert!(matches!(k, Kind::Grammar(ref e) if e.line == 2 && e.column == 5), "{k:?}");

    // Valid in XGrammar, refused here with a precise error.
    for (format, at) in [
        (json!({"type": "token", "token": "<|python_tag|>"}), "/format/type"),
        (json!({"type": "any_tokens"}), "/format/type"),
        (json!({"type": "exclude_token", "exclude_tokens": [1]}), "/format/type"),
        (json!({"type": "token_triggered_tags", "trigger_tokens": [1], "tags": []}), "/format/type"),
        (json!({"type": "token_dispatch", "rules": []}), "/format/type"),
        (json!({"type": "json_schema", "json_schema": {}, "style": "cohere_xml"}), "/format/style"),
        (json!({"type": "json_schema", "json_schema": {}, "excludes": ["x"]}), "/format/excludes"),
        (json!({"type": "any_text", "max_tokens": 5}), "/format/max_tokens"),
        (json!({"type": "any_text", "max_chars": 5}), "/format/max_chars"),
        (
            json!({"type": "tag", "begin": {"type": "token", "token": 5}, "content": {"type": "any_text"}, "end": "x"}),
            "/format/begin",
        ),
    ] {
        let (k, p) = error_of(&doc(format.clone()));
        assert!(matches!(k, Kind::Unsupported { .. }), "{format}: {k:?}");
        assert_eq!(p, at, "{format}");
    }
    // The message of a refused format names it.
    let (k, _) = error_of(&doc(json!({"type": "token", "token": 1})));
    assert_eq!(k.to_string().split(':').next().unwrap(), "format `token` is not supported yet");
}

// ---------------------------------------------------------------------------------------
// (d) random documents never panic
// ---------------------------------------------------------------------------------------

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// JSON built from the words of structural tags, so that random documents reach
    /// deep into the parser and the lowering.
    fn value() -> impl Strategy<Value = Value> {
        let word = prop::sample::select(vec![
            "type",
            "format",
            "const_string",
            "json_schema",
            "regex",
            "grammar",
            "any_text",
            "sequence",
            "or",
            "optional",
            "star",
            "plus",
            "repeat",
            "tag",
            "triggered_tags",
            "tags_with_separator",
            "dispatch",
            "value",
            "pattern",
            "elements",
            "content",
            "begin",
            "end",
            "triggers",
            "tags",
            "excludes",
            "min",
            "max",
            "rules",
            "loop",
            "separator",
            "at_least_one",
            "stop_after_first",
            "<a",
            "<a>",
            "</a>",
            "a",
            "",
            "root ::= \"x\"",
            "structural_tag",
            "structures",
            "schema",
            "style",
            "any_order",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..20).prop_map(|n| json!(n)),
            word.clone().prop_map(|w| json!(w)),
        ];
        leaf.prop_recursive(6, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((word.clone(), inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        #[test]
        fn random_documents_never_panic(v in value(), wrap in any::<bool>(), cut in 0usize..64) {
            let text = if wrap { json!({"type": "structural_tag", "format": v}).to_string() } else { v.to_string() };
            let _ = structural_tag_to_grammar(&text);
            // Truncated text too (malformed JSON).
            let _ = structural_tag_to_grammar(text.get(..cut.min(text.len())).unwrap_or(""));
            if structural_tag_to_grammar(&text).is_ok() {
                let _ = compiler().compile(&GrammarSpec::StructuralTag(text));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// CLI
// ---------------------------------------------------------------------------------------

#[test]
fn cli_takes_a_structural_tag_file() {
    let dir = std::env::temp_dir().join(format!("grammask-st-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tag.json");
    let tag = doc(json!({"type": "triggered_tags", "triggers": ["<tool_call>"],
        "tags": [tool_tag("<tool_call>", call_schema(), "</tool_call>")]}));
    std::fs::write(&file, &tag).unwrap();
    let tok = common::data_dir().join("tokenizers/llama3_1");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_grammask"))
            .args(args)
            .arg("--structural-tag")
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let text = r#"Sure. <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>"#;
    let masks = run(&["masks", "--tokenizer", tok.to_str().unwrap(), "--text", text]);
    assert_eq!(masks.lines().last().unwrap(), r#"{"accepted":true,"can_terminate":true}"#);
    let inspect = run(&["inspect"]);
    assert!(inspect.contains("root ::="), "{inspect}");
    std::fs::remove_dir_all(&dir).ok();
}
