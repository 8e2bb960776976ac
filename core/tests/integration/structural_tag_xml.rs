//! Structural tags in XGrammar's XML argument styles (`json_schema` with `style:
//! "qwen_xml"`, …): grammask's verdicts against XGrammar 0.2.8's on the texts of
//! `tests/data/structural_tag_xml_styles.json` (written by
//! `benches/structural_tag/xml_styles_fixture.py`), masks against the brute-force oracle on
//! a real tokenizer, typed errors, and the argument reader's round trip.

use crate::common;

use common::{byte_compiler, check_masks_along};
use grammask::structural_tag::{
    read_xml_arguments, structural_tag_to_grammar, StructuralTagErrorKind as Kind, XmlStyle,
};
use grammask::{GrammarMatcher, GrammarSpec};
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn accepts(compiled: &std::sync::Arc<grammask::CompiledGrammar>, text: &str) -> bool {
    let mut m = GrammarMatcher::new(compiled.clone());
    m.accept_string(text).is_ok() && m.can_terminate()
}

/// Every text gets XGrammar's verdict, except where grammask rejects on purpose
/// (structural_tag::xml module docs, "Deliberate differences"): the `any_order` texts the
/// fixture marks with a `note` (a repeated argument, a required one missing), and texts
/// whose arguments, read as the family's parser reads them, the `jsonschema` crate refuses
/// (whitespace XGrammar allows around a constrained string, which the parsers keep:
/// `<parameter=unit>celsius </parameter>` for an `enum`).
#[test]
fn agrees_with_xgrammar() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/structural_tag_xml_styles.json");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("fixture JSON");
    let mut tally: BTreeMap<String, (usize, usize, usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    for case in doc["cases"].as_array().expect("cases") {
        let style = case["style"].as_str().expect("style");
        let name = case["name"].as_str().expect("name");
        let tag = case["tag"].as_str().expect("tag");
        if let Some(why) = case.get("xgrammar_error") {
            // XGrammar refuses the schema in this style; so must grammask.
            let got = structural_tag_to_grammar(tag);
            assert!(got.is_err(), "{style}/{name}: XGrammar refuses it ({why}), grammask converts it");
            tally.entry(style.to_string()).or_default().3 += 1;
            continue;
        }
        let compiled = byte_compiler()
            .compile(&GrammarSpec::StructuralTag(tag.into()))
            .unwrap_or_else(|e| panic!("{style}/{name}: {e}"));
        for t in case["texts"].as_array().expect("texts") {
            let text = t["text"].as_str().expect("text");
            let want = t["xgrammar"].as_bool().expect("verdict");
            let got = accepts(&compiled, text);
            let entry = tally.entry(style.to_string()).or_default();
            entry.1 += 1;
            if got == want {
                entry.0 += 1;
            } else if want && !got && (t.get("note").is_some() || arguments_invalid(tag, text)) {
                entry.2 += 1;
            } else {
                failures.push(format!("{style}/{name}: xgrammar {want}, grammask {got}: {text:?}"));
            }
        }
    }
    for (style, (agree, total, deliberate, refused)) in &tally {
        eprintln!("{style}: {agree}/{total} texts agree, {deliberate} deliberate differences, {refused} schemas refused by both");
    }
    assert!(failures.is_empty(), "{} disagreements:\n{}", failures.len(), failures.join("\n"));
}

/// Whether `text`, under a `tag` whose content is an XML-style `json_schema`, holds
/// arguments (read as the family's parser reads them) that its schema refuses.
fn arguments_invalid(tag: &str, text: &str) -> bool {
    let tag: Value = serde_json::from_str(tag).expect("tag JSON");
    let f = &tag["format"];
    let (Some(begin), Some(end)) = (f["begin"].as_str(), f["end"].as_str()) else { return false };
    let Some(style) = f["content"]["style"].as_str().and_then(XmlStyle::from_name) else { return false };
    let schema = &f["content"]["json_schema"];
    let Some(body) = text.strip_prefix(begin).and_then(|b| b.strip_suffix(end)) else { return false };
    let Ok((args, _)) = read_xml_arguments(style, schema, body) else { return false };
    !jsonschema::validator_for(schema).expect("schema").is_valid(&Value::Object(args))
}

/// One tool call in `qwen_xml` after free text: a raw string value (with a near miss of
/// the closing marker inside), an enum written raw, a JSON integer. The oracle is slow
/// (a brute-force Earley walk over the whole vocabulary), so the text is short.
#[test]
fn oracle_masks_on_a_real_tokenizer() {
    let schema = json!({"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}, "days": {"type": "integer"}},
        "required": ["city"]});
    let tag = json!({"type": "structural_tag", "format": {"type": "triggered_tags",
        "triggers": ["<function="],
        "tags": [{"begin": "<function=w>\n", "end": "\n</function>",
                  "content": {"type": "json_schema", "json_schema": schema, "style": "qwen_xml"}}]}})
    .to_string();
    let text = "Ok <function=w>\n<parameter=city>Rome </param</parameter>\n<parameter=days> 3\n</parameter>\n</function>";
    let grammar = structural_tag_to_grammar(&tag).unwrap_or_else(|e| panic!("{e}"));
    let spec = GrammarSpec::StructuralTag(tag.clone());
    check_masks_along("qwen_xml", &grammar, &spec, text, |t| if t == "llama2" { 3 } else { 7 });
}

#[test]
fn unknown_style_is_a_typed_error() {
    let tag = json!({"type": "structural_tag", "format": {"type": "tag", "begin": "<a>", "end": "</a>",
        "content": {"type": "json_schema", "json_schema": {"type": "object"}, "style": "qwen_yaml"}}})
    .to_string();
    let err = structural_tag_to_grammar(&tag).unwrap_err();
    assert_eq!(err.pointer, "/format/content/style");
    assert!(matches!(&err.kind, Kind::InvalidValue(s) if s.contains("qwen_yaml")), "{err}");

    let tag = json!({"type": "structural_tag", "format":
        {"type": "json_schema", "json_schema": {"type": "object"}, "style": 3}})
    .to_string();
    let err = structural_tag_to_grammar(&tag).unwrap_err();
    assert_eq!(err.pointer, "/format/style");
    assert!(matches!(err.kind, Kind::WrongType { .. }), "{err}");
}

#[test]
fn unconverted_styles_and_keywords_are_typed_errors() {
    let with = |style: &str, schema: Value, extra: Value| {
        let mut f = json!({"type": "json_schema", "json_schema": schema, "style": style});
        if let (Some(f), Some(e)) = (f.as_object_mut(), extra.as_object()) {
            f.extend(e.clone());
        }
        structural_tag_to_grammar(&json!({"type": "structural_tag", "format": f}).to_string())
    };
    let obj = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let err = with("cohere_xml", obj.clone(), json!({})).unwrap_err();
    assert_eq!(err.pointer, "/format/style", "{err}");
    assert!(matches!(err.kind, Kind::Unsupported { .. }), "{err}");
    // MiniMax-M3 refuses what XGrammar refuses, pointing at it.
    let err = with(
        "minimax_m3_xml",
        json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}),
        json!({}),
    )
    .unwrap_err();
    assert_eq!(err.pointer, "/format/json_schema/properties/a/pattern", "{err}");
    let err =
        with("minimax_m3_xml", json!({"type": "object", "properties": {"a": {}}}), json!({})).unwrap_err();
    assert_eq!(err.pointer, "/format/json_schema/properties/a", "{err}");
    let err = with("qwen_xml", json!({"type": "string"}), json!({})).unwrap_err();
    assert_eq!(err.pointer, "/format/json_schema/type", "{err}");
    let err = with("qwen_xml", json!({"type": "object", "properties": {}, "minProperties": 1}), json!({}))
        .unwrap_err();
    assert_eq!(err.pointer, "/format/json_schema/minProperties", "{err}");
    assert!(matches!(err.kind, Kind::Unsupported { .. }), "{err}");
    let err = with(
        "glm_xml",
        json!({"type": "object", "properties": {"a": {"allOf": [{"type": "string"}]}}}),
        json!({}),
    )
    .unwrap_err();
    assert_eq!(err.pointer, "/format/json_schema/properties/a/allOf", "{err}");
    let err = with("qwen_xml", obj.clone(), json!({"excludes": ["x"]})).unwrap_err();
    assert_eq!(err.pointer, "/format/excludes", "{err}");
    // An embedded JSON value's schema error keeps its place.
    let err = with(
        "qwen_xml",
        json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": "x"}}}),
        json!({}),
    )
    .unwrap_err();
    assert_eq!(err.pointer, "/format/json_schema/properties/a", "{err}");
    assert!(matches!(err.kind, Kind::Schema(_)), "{err}");
}

// ---------------------------------------------------------------------------------------
// The reader
// ---------------------------------------------------------------------------------------

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "loc": {"type": "object", "properties": {"lat": {"type": "number"}}},
        "maybe": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}}},
        "additionalProperties": true})
}

/// The arguments as `style` writes them (string values raw, others JSON), by hand.
fn write(style: XmlStyle, args: &[(&str, Value)]) -> String {
    let mut out = String::from("\n");
    for (k, v) in args {
        let (raw, body) = match v {
            Value::String(s) => (true, s.clone()),
            v => (false, format!(" {v}\n")),
        };
        out += &match style {
            // The template's newlines around a string, which the reader strips.
            XmlStyle::Qwen if raw => format!("<parameter={k}>\n{body}\n</parameter>"),
            XmlStyle::Qwen => format!("<parameter={k}>{body}</parameter>"),
            XmlStyle::Minimax => format!("<parameter name=\"{k}\">{body}</parameter>"),
            XmlStyle::Glm => format!("<arg_key>{k}</arg_key>\n<arg_value>{body}</arg_value>"),
            XmlStyle::KimiK3 => {
                let t = match v {
                    Value::String(_) => "string",
                    Value::Number(_) => "number",
                    Value::Null => "null",
                    Value::Array(_) => "array",
                    _ => "object",
                };
                format!("<|open|>argument key=\"{k}\" type=\"{t}\"<|sep|>{body}<|close|>argument<|sep|>")
            }
            XmlStyle::Deepseek | XmlStyle::DeepseekV4_1 => {
                let sp = if style == XmlStyle::DeepseekV4_1 { " " } else { "" };
                format!("<｜DSML｜{sp}parameter name=\"{k}\" string=\"{raw}\">{body}</｜DSML｜{sp}parameter>")
            }
            XmlStyle::MinimaxM3 | XmlStyle::Cohere => unreachable!("not written"),
        };
        out += "\n";
    }
    out
}

const FLAT: [XmlStyle; 6] = [
    XmlStyle::Qwen,
    XmlStyle::Minimax,
    XmlStyle::Glm,
    XmlStyle::KimiK3,
    XmlStyle::Deepseek,
    XmlStyle::DeepseekV4_1,
];

#[test]
fn reader_round_trip() {
    let cases: Vec<Vec<(&str, Value)>> = vec![
        vec![],
        vec![("city", json!(" São Paulo <b>\n"))],
        vec![("city", json!("")), ("days", json!(-3)), ("unit", json!("f"))],
        vec![("loc", json!({"lat": 1.5})), ("maybe", json!(null)), ("tags", json!(["a</parameter>", "b"]))],
        vec![("maybe", json!("null-ish")), ("extra", json!({"k": [1, 2]})), ("free", json!("text"))],
        vec![("extra", json!(12)), ("city", json!("12"))],
    ];
    for style in FLAT {
        for args in &cases {
            let end = "</end>";
            let text = write(style, args) + end;
            let (got, used) = read_xml_arguments(style, &schema(), &text)
                .unwrap_or_else(|e| panic!("{style:?}: {e}: {text:?}"));
            let want: serde_json::Map<String, Value> =
                args.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
            assert_eq!(got, want, "{style:?}: {text:?}");
            assert_eq!(text[used..].trim_start(), end, "{style:?}: {text:?}");
            // What the reader reads, the constraint accepts.
            let tag = json!({"type": "structural_tag", "format": {"type": "tag", "begin": "<b>", "end": end,
                "content": {"type": "json_schema", "json_schema": schema(), "style": style.name()}}})
            .to_string();
            let compiled = byte_compiler().compile(&GrammarSpec::StructuralTag(tag)).expect("compiles");
            assert!(accepts(&compiled, &format!("<b>{text}")), "{style:?}: {text:?}");
        }
    }
}

#[test]
fn reader_errors_point() {
    let err = read_xml_arguments(XmlStyle::Qwen, &schema(), "<parameter=city>Rome").unwrap_err();
    assert_eq!(err.offset, 20);
    assert!(err.expected.contains("</parameter>"), "{err}");
    let err = read_xml_arguments(XmlStyle::Qwen, &schema(), "<parameter=city").unwrap_err();
    assert_eq!(err.offset, 11, "{err}");
    let text = "<｜DSML｜parameter name=\"days\" string=\"false\">x</｜DSML｜parameter>";
    let err = read_xml_arguments(XmlStyle::Deepseek, &schema(), text).unwrap_err();
    assert!(err.expected.contains("JSON"), "{err}");
    // Not arguments at all: nothing read.
    let (args, used) = read_xml_arguments(XmlStyle::Glm, &schema(), "hello").expect("reads");
    assert!(args.is_empty());
    assert_eq!(used, 0);
    assert_eq!(XmlStyle::from_name("kimi_k3_xml"), Some(XmlStyle::KimiK3));
    assert_eq!(XmlStyle::from_name("json"), None);
    for s in FLAT {
        assert_eq!(XmlStyle::from_name(s.name()), Some(s));
    }
}

#[test]
fn reader_round_trip_minimax_m3() {
    let schema = json!({"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "maybe": {"type": ["string", "null"]},
        "loc": {"type": "object", "properties": {"lat": {"type": "number"}, "name": {"type": "string"}}},
        "stops": {"type": "array", "items": {"type": "object", "properties": {"at": {"type": "string"}}}},
        "nums": {"type": "array", "items": {"type": "integer"}}}});
    let ns = "]<]minimax[>[";
    let text = format!(
        "\n{ns}<city> São <b>Paulo</b>{ns}</city>\n{ns}<days>3{ns}</days>{ns}<maybe>null{ns}</maybe>\
         {ns}<loc>\n {ns}<lat>-1.5{ns}</lat>{ns}<name>x{ns}</name>\n{ns}</loc>\
         {ns}<stops>{ns}<item>\n{ns}<at>9{ns}</at>{ns}</item>\n{ns}<item>{ns}</item>{ns}</stops>\
         {ns}<nums>{ns}</nums>\n{ns}</invoke>"
    );
    let (args, used) =
        read_xml_arguments(XmlStyle::MinimaxM3, &schema, &text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        Value::Object(args),
        json!({"city": " São <b>Paulo</b>", "days": 3, "maybe": null, "loc": {"lat": -1.5, "name": "x"},
               "stops": [{"at": "9"}, {}], "nums": []})
    );
    assert_eq!(text[used..].trim_start(), format!("{ns}</invoke>"));
    let tag = json!({"type": "structural_tag", "format": {"type": "tag", "begin": "<b>", "end": format!("{ns}</invoke>"),
        "content": {"type": "json_schema", "json_schema": schema, "style": "minimax_m3_xml"}}})
    .to_string();
    let compiled = byte_compiler().compile(&GrammarSpec::StructuralTag(tag)).expect("compiles");
    assert!(accepts(&compiled, &format!("<b>{text}")));
}

/// A constrained string's text is accepted exactly when its value, as the family's parser
/// reads it, is valid: vLLM's `qwen3_coder` strips one newline on each side, GLM's and
/// MiniMax's readers nothing. Every text of up to 5 characters over `a`, a newline and a
/// space, for length-bounded strings (written directly), a pattern that may end in a
/// newline and an `enum` holding newlines (both intersected), against the `jsonschema`
/// crate on that value.
#[test]
fn constrained_strings_are_read_as_the_parsers_read_them() {
    let schema = json!({"type": "object", "properties": {
        "s": {"type": "string", "minLength": 1, "maxLength": 3},
        "t": {"type": "string", "maxLength": 1},
        "u": {"type": "string", "minLength": 2},
        "p": {"type": "string", "pattern": "^a\\s?$"},
        "e": {"enum": ["a", "a\n", "\n "]}}});
    let alphabet = ['a', '\n', ' '];
    let mut texts = vec![String::new()];
    let mut frontier = vec![String::new()];
    for _ in 0..5 {
        frontier = frontier.iter().flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}"))).collect();
        texts.extend(frontier.iter().cloned());
    }
    for (style, open, close) in [
        (XmlStyle::Qwen, "<parameter=KEY>", "</parameter>"),
        (XmlStyle::Glm, "<arg_key>KEY</arg_key><arg_value>", "</arg_value>"),
        (XmlStyle::Minimax, "<parameter name=\"KEY\">", "</parameter>"),
    ] {
        let tag = json!({"type": "structural_tag", "format": {"type": "tag", "begin": "<b>", "end": "</end>",
            "content": {"type": "json_schema", "json_schema": schema, "style": style.name()}}})
        .to_string();
        let compiled = byte_compiler().compile(&GrammarSpec::StructuralTag(tag)).expect("compiles");
        let (mut accepted, mut rejected) = (0, 0);
        for key in ["s", "t", "u", "p", "e"] {
            let validator = jsonschema::validator_for(&schema["properties"][key]).expect("schema");
            for t in &texts {
                let value = match style {
                    XmlStyle::Qwen => {
                        let v = t.strip_prefix('\n').unwrap_or(t);
                        v.strip_suffix('\n').unwrap_or(v)
                    }
                    _ => t.as_str(),
                };
                let want = validator.is_valid(&json!(value));
                let text = format!("<b>{}{t}{close}</end>", open.replace("KEY", key));
                assert_eq!(accepts(&compiled, &text), want, "{style:?}: {text:?} (value {value:?})");
                if want {
                    accepted += 1;
                } else {
                    rejected += 1;
                }
            }
        }
        assert!(accepted > 40 && rejected > 40, "{style:?}: {accepted} accepted, {rejected} rejected");
    }
}
