//! The output reader on hand-built tags: splitting, typed errors on text that did not come
//! from the tag, and streaming that holds back undecided text.

use grammask::tool_calling::{Delta, OutputError, OutputParser, Preset, Role};
use serde_json::{json, Value};

fn call_tag(name: &str) -> Value {
    json!({"type": "tag", "begin": format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": "),
           "content": {"type": "json_schema", "json_schema": {"type": "object",
               "properties": {"n": {"type": "integer", "maximum": 9}}, "required": ["n"]}},
           "end": "}\n</tool_call>"})
}

/// Qwen-3-like: a reasoning block the prompt opened, then text and calls.
fn qwen_like() -> Preset {
    let think = json!({"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": "</think>"});
    let (a, ab) = (call_tag("a"), call_tag("ab"));
    Preset {
        structural_tag: json!({"type": "structural_tag", "format": {"type": "sequence", "elements": [
            think.clone(),
            {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [a.clone(), ab.clone()]}]}}),
        roles: vec![
            (think, Role::Reasoning),
            (a, Role::Call { name: "a".into() }),
            (ab, Role::Call { name: "ab".into() }),
        ],
    }
}

/// Kimi-like: calls in a section, each with an index the model writes (a regex).
fn sectioned() -> Preset {
    let call = |name: &str| {
        json!({"type": "tag", "begin": format!("<call>{name}:"), "content": {"type": "sequence", "elements": [
            {"type": "regex", "pattern": "\\d+"}, {"type": "const_string", "value": "|"},
            {"type": "json_schema", "json_schema": {"type": "object"}}]}, "end": "</call>"})
    };
    let (x, y) = (call("x"), call("y"));
    Preset {
        structural_tag: json!({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<calls>"],
            "tags": [{"type": "tag", "begin": "<calls>", "end": "</calls>", "content": {
                "type": "tags_with_separator", "tags": [x.clone(), y.clone()], "separator": ",", "at_least_one": true}}]}}),
        roles: vec![(x, Role::Call { name: "x".into() }), (y, Role::Call { name: "y".into() })],
    }
}

#[test]
fn splits_reasoning_content_and_calls() {
    let p = OutputParser::new(&qwen_like()).unwrap();
    let text = "plan</think>Hi <tool_call>\n{\"name\": \"ab\", \"arguments\": {\"n\": 1}}\n</tool_call> and \
                <tool_call>\n{\"name\": \"a\", \"arguments\": {\"n\": 2}}\n</tool_call>";
    let out = p.parse(text).unwrap();
    assert_eq!(out.reasoning, "plan");
    assert_eq!(out.content, "Hi  and ");
    let calls: Vec<(&str, &str, &str)> =
        out.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str())).collect();
    assert_eq!(calls, [("call_0", "ab", "{\"n\": 1}"), ("call_1", "a", "{\"n\": 2}")]);

    let p = OutputParser::new(&sectioned()).unwrap().with_id_prefix("req7-");
    let out = p.parse("ok <calls><call>y:12|{\"k\": [1]}</call>,<call>x:0|{}</call></calls> done").unwrap();
    assert_eq!(out.content, "ok  done");
    assert_eq!(out.tool_calls.len(), 2);
    assert_eq!((out.tool_calls[0].id.as_str(), out.tool_calls[0].name.as_str()), ("req7-0", "y"));
    assert_eq!(out.tool_calls[0].arguments, "{\"k\": [1]}");
    assert_eq!(out.tool_calls[1].name, "x");
}

#[test]
fn text_that_did_not_come_from_the_tag_is_a_typed_error() {
    let p = OutputParser::new(&qwen_like()).unwrap();
    // No `</think>`: the reasoning block never closes.
    assert!(matches!(p.parse("just text"), Err(OutputError::Format { .. })));
    // A call of a tool the tag does not have.
    let e = p
        .parse("</think><tool_call>\n{\"name\": \"zz\", \"arguments\": {\"n\": 1}}\n</tool_call>")
        .unwrap_err();
    assert!(
        matches!(e, OutputError::Format { offset } if offset >= "</think><tool_call>\n{\"name\": \"".len()),
        "{e}"
    );
    // Truncated inside the arguments: not a whole output, but a valid prefix.
    let cut = "</think><tool_call>\n{\"name\": \"a\", \"arguments\": {\"n\": ";
    assert!(p.parse(cut).is_err());
    let prefix = p.parse_prefix(cut).unwrap();
    assert_eq!(prefix.tool_calls.len(), 1);
    assert_eq!(prefix.tool_calls[0].arguments, "{\"n\":");
    // Arguments that break the tool's schema (n ≤ 9).
    let e = p
        .parse("</think><tool_call>\n{\"name\": \"a\", \"arguments\": {\"n\": 12}}\n</tool_call>")
        .unwrap_err();
    assert!(matches!(&e, OutputError::Arguments { index: 0, name, .. } if name == "a"), "{e}");
}

#[test]
fn streaming_holds_back_what_may_be_a_marker() {
    let p = OutputParser::new(&qwen_like()).unwrap();
    let mut s = p.stream();
    assert_eq!(s.push("think</thi").unwrap(), vec![Delta::Reasoning("think".into())]);
    assert_eq!(s.push("nk>Hello <tool").unwrap(), vec![Delta::Content("Hello ".into())]);
    // `<tool_call>` and the shared start of both tags' `begin`: no call yet.
    assert_eq!(s.push("_call>\n{\"name\": \"a").unwrap(), vec![]);
    // `"a"` vs `"ab"` is decided only when the arguments start.
    assert_eq!(
        s.push("b\", \"arguments\": {\"n\"").unwrap(),
        vec![
            Delta::ToolCallStart { index: 0, id: "call_0".into(), name: "ab".into() },
            Delta::ToolCallArguments { index: 0, arguments: "{\"n\"".into() }
        ]
    );
    assert_eq!(
        s.push(": 3}").unwrap(),
        vec![Delta::ToolCallArguments { index: 0, arguments: ": 3}".into() }]
    );
    assert_eq!(s.push("}\n</tool_call> bye").unwrap(), vec![Delta::Content(" bye".into())]);
    let (out, last) = s.finish().unwrap();
    assert!(last.is_empty());
    assert_eq!(out.content, "Hello  bye");
    assert_eq!(out.tool_calls[0].arguments, "{\"n\": 3}");
}

#[test]
fn a_tag_that_is_not_valid_is_refused() {
    let bad = Preset {
        structural_tag: json!({"type": "structural_tag", "format": {"type": "nope"}}),
        roles: vec![],
    };
    assert!(matches!(OutputParser::new(&bad), Err(OutputError::Tag(_))));
    let bad_regex = Preset {
        structural_tag: json!({"type": "structural_tag", "format": {"type": "regex", "pattern": "("}}),
        roles: vec![],
    };
    assert!(matches!(OutputParser::new(&bad_regex), Err(OutputError::Tag(_) | OutputError::Compile { .. })));
}

mod garbage {
    use super::*;
    use proptest::prelude::*;

    /// Pieces of markers, JSON and multi-byte text: garbage that gets far into a reading.
    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("<tool_call>\n{\"name\": \"a".to_string()),
            Just("b\", \"arguments\": ".to_string()),
            Just("{\"n\": 1}".to_string()),
            Just("}\n</tool_call>".to_string()),
            Just("</think>".to_string()),
            Just("<calls><call>x:".to_string()),
            Just("12|".to_string()),
            Just("</call>,".to_string()),
            Just("</calls>".to_string()),
            Just("<".to_string()),
            Just("é漢".to_string()),
            "[ -~]{0,6}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Any text: a reading or a typed error, whole or streamed, never a panic or a hang.
        #[test]
        fn any_text_reads_or_errs(pieces in prop::collection::vec(piece(), 0..12)) {
            let text: String = pieces.concat();
            for preset in [qwen_like(), sectioned()] {
                let p = OutputParser::new(&preset).unwrap();
                let whole = p.parse(&text);
                let _ = p.parse_prefix(&text);
                let mut s = p.stream();
                let mut ok = true;
                for piece in &pieces {
                    ok &= s.push(piece).is_ok();
                }
                if ok {
                    // A text read whole was a valid prefix at every step.
                    let finished = s.finish();
                    prop_assert_eq!(finished.is_ok(), whole.is_ok());
                } else {
                    prop_assert!(whole.is_err());
                }
            }
        }
    }
}

/// Found by the conformance suite: a streamed prefix that stops inside a number (`-`,
/// `1.`, `2e`, `2e-`) is still a prefix of the output (serde calls it an invalid number,
/// not the end of its input). Every byte prefix of valid outputs must read.
#[test]
fn every_prefix_of_numbers_being_written_reads() {
    let call = json!({"type": "tag", "begin": "<tool_call>\n{\"name\": \"f\", \"arguments\": ",
        "content": {"type": "json_schema", "json_schema": {"type": "object"}}, "end": "}\n</tool_call>"});
    let preset = Preset {
        structural_tag: json!({"type": "structural_tag", "format":
            {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [call.clone()]}}),
        roles: vec![(call, Role::Call { name: "f".into() })],
    };
    let p = OutputParser::new(&preset).unwrap();
    for args in [r#"{"x": -6}"#, r#"{"x": 1.5}"#, r#"{"x": 2e-3, "y": [-0.5E+2]}"#, r#"{"x":-1}"#] {
        let text = format!("hi <tool_call>\n{{\"name\": \"f\", \"arguments\": {args}}}\n</tool_call>");
        for end in 0..=text.len() {
            p.parse_prefix(&text[..end]).unwrap_or_else(|e| panic!("{:?}: {e}", &text[..end]));
        }
        let mut s = p.stream();
        let mut streamed = String::new();
        for ch in text.chars() {
            for d in s.push(&ch.to_string()).unwrap() {
                if let Delta::ToolCallArguments { arguments, .. } = d {
                    streamed.push_str(&arguments);
                }
            }
        }
        let (out, rest) = s.finish().unwrap();
        for d in rest {
            if let Delta::ToolCallArguments { arguments, .. } = d {
                streamed.push_str(&arguments);
            }
        }
        assert_eq!(out.tool_calls[0].arguments, args);
        assert_eq!(streamed, args);
    }
    // Not every number-like end is a prefix: `1.e` is no number.
    assert!(p.parse_prefix("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1.e").is_err());
}
