//! Model presets (`tool_calling::model_structural_tag`): the same structural tags as
//! XGrammar 0.2.8 for every case of `tests/data/xgrammar_presets.json` (written by
//! `benches/structural_tag/xgrammar_presets.py`), failures where XGrammar fails, complete
//! roles, tags that compile, and the languages of the Hermes and Mistral presets.

use crate::common;

use grammask::tool_calling::{
    model_structural_tag, normalize_tool_choice, tools_from_json, Family, Preset, PresetOptions,
    ReasoningMode, Role, Tool, ToolChoice, ToolError,
};
use grammask::{Error, GrammarMatcher, GrammarSpec};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// Presets that may fail to compile, by family, and the one typed error each may fail with
/// (a substring of its message):
/// - Cohere: the `cohere_xml` argument style is not lowered yet.
/// - Kimi K3 with `exclude_special_tokens`: `excludes` on its arguments' `json_schema` is
///   not lowered yet.
/// - MiniMax M3 with a tool whose arguments are unconstrained (no `parameters`, or
///   `strict: false`): its XML layout needs a type for every value; XGrammar refuses these
///   too (see its `get_model_structural_tag` notes).
const EXPECTED_REFUSALS: &[(Family, &str)] = &[
    (Family::Cohere, "style `cohere_xml`"),
    (Family::KimiK3, "`excludes` in `json_schema`"),
    (Family::MinimaxM3, "`minimax_m3_xml` needs a type for every value"),
];

fn fixture() -> &'static Value {
    static F: OnceLock<Value> = OnceLock::new();
    F.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/xgrammar_presets.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

/// A fixture case's arguments, parsed as a grammask user would.
fn arguments(case: &Value) -> Result<(Family, Vec<Tool>, PresetOptions), ToolError> {
    let family = Family::from_name(case["family"].as_str().expect("family"))?;
    let tools = tools_from_json(&fixture()["tools"][case["tools"].as_str().expect("tools key")])?;
    let reasoning: ReasoningMode = serde_json::from_value(case["reasoning"].clone()).expect("reasoning");
    let options = PresetOptions {
        tool_choice: ToolChoice::from_json(&case["tool_choice"])?,
        reasoning,
        any_order: case["any_order"].as_bool().expect("any_order"),
        exclude_special_tokens: case["exclude_special_tokens"].as_bool().expect("exclude_special_tokens"),
        max_whitespace_cnt: case["max_whitespace_cnt"].as_u64().map(|n| n as u32),
        parallel_tool_calls: case["parallel_tool_calls"].as_bool().expect("parallel_tool_calls"),
    };
    Ok((family, tools, options))
}

fn build(case: &Value) -> Result<Preset, ToolError> {
    let (family, tools, options) = arguments(case)?;
    model_structural_tag(family, &tools, &options)
}

/// The JSON pointer of the first difference between `a` and `b`, with both values there.
fn first_diff(a: &Value, b: &Value, at: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                first_diff(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    format!("{at}/{k}"),
                )
                .or_else(|| {
                    (x.contains_key(k) != y.contains_key(k)).then(|| format!("{at}/{k}: key on one side"))
                })
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (p, q))| first_diff(p, q, format!("{at}/{i}")))
        }
        _ if a == b => None,
        _ => Some(format!("{at}: grammask {a} / xgrammar {b}")),
    }
}

/// Cases where grammask's preset differs from XGrammar's on purpose: Harmony under
/// `required` or a named tool, where XGrammar's tag lets the turn end without a call
/// (see `preset/harmony.rs`).
fn deviates_on_purpose(case: &Value) -> bool {
    let Ok((family, tools, options)) = arguments(case) else { return false };
    family == Family::Harmony
        && normalize_tool_choice(&tools, &options.tool_choice)
            .is_ok_and(|n| n.choice != grammask::tool_calling::ChoiceMode::Auto)
}

/// Qwen 3.5 / Qwen 3 Coder trigger on `<tool_call>` where XGrammar triggers on
/// `<tool_call>\n<function=` (see `preset/xml_calls.rs`): the tag with XGrammar's trigger
/// put back, so that everything else is still compared with XGrammar's.
fn with_xgrammars_qwen_trigger(tag: &Value) -> Value {
    match tag {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| match (k.as_str(), v) {
                    ("triggers", Value::Array(a)) => (
                        k.clone(),
                        Value::Array(
                            a.iter()
                                .map(|t| {
                                    if t == "<tool_call>" {
                                        json!("<tool_call>\n<function=")
                                    } else {
                                        t.clone()
                                    }
                                })
                                .collect(),
                        ),
                    ),
                    _ => (k.clone(), with_xgrammars_qwen_trigger(v)),
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(with_xgrammars_qwen_trigger).collect()),
        v => v.clone(),
    }
}

#[test]
fn same_structural_tags_as_xgrammar() {
    let cases = fixture()["cases"].as_array().expect("cases");
    let outputs = fixture()["outputs"].as_array().expect("outputs");
    let mut failures = Vec::new();
    let mut deviations = 0;
    let mut qwen_triggers = 0;
    for case in cases {
        let mut got = build(case);
        if let (Ok((Family::Qwen3Coder | Family::Qwen3_5, ..)), Ok(p)) = (arguments(case), &mut got) {
            let theirs = with_xgrammars_qwen_trigger(&p.structural_tag);
            if theirs != p.structural_tag {
                qwen_triggers += 1;
            }
            p.structural_tag = theirs;
        }
        if deviates_on_purpose(case) {
            // The language differs on purpose; `tool_calling.rs` checks that a call is
            // required. That it still differs keeps this list honest.
            if let (Some(i), Ok(p)) = (case.get("output"), &got) {
                let want = &outputs[i.as_u64().expect("output index") as usize];
                assert!(
                    first_diff(&p.structural_tag, want, String::new()).is_some(),
                    "{case}: no longer deviates"
                );
                deviations += 1;
                continue;
            }
        }
        let problem = match (&case.get("output"), &case.get("error"), &got) {
            (Some(i), _, Ok(p)) => {
                let want = &outputs[i.as_u64().expect("output index") as usize];
                first_diff(&p.structural_tag, want, String::new())
            }
            (Some(_), _, Err(e)) => Some(format!("grammask fails ({e}), XGrammar does not")),
            (None, Some(err), Ok(_)) => Some(format!("XGrammar fails ({err}), grammask does not")),
            (None, Some(err), Err(e)) => {
                let msg = err["message"].as_str().expect("message");
                // Where both fail in a step XGrammar does by hand (not pydantic, not an
                // assertion), grammask's message starts with XGrammar's.
                let comparable = err["type"] == "ValueError" && !msg.starts_with("Unknown format type");
                (comparable && !e.to_string().starts_with(msg))
                    .then(|| format!("message: grammask {e:?} / xgrammar {msg:?}"))
            }
            (None, None, _) => panic!("case with neither output nor error: {case}"),
        };
        if let Some(p) = problem {
            failures.push(format!("{case}\n    {p}"));
        }
    }
    let agree = cases.len() - failures.len() - deviations;
    eprintln!(
        "{agree} of {} XGrammar preset cases agree ({qwen_triggers} of them with Qwen's trigger put back), {deviations} deviate on purpose",
        cases.len()
    );
    assert!(qwen_triggers > 0, "the Qwen 3.5 / Qwen 3 Coder trigger is no longer exercised");
    assert!(
        failures.is_empty(),
        "{} disagree:\n{}",
        failures.len(),
        failures[..failures.len().min(15)].join("\n")
    );
}

#[test]
fn unknown_family_fails_like_xgrammar() {
    let case = fixture()["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["family"] == "gpt_5")
        .expect("the unknown-family case");
    let err = build(case).unwrap_err();
    assert_eq!(err, ToolError::UnknownFamily { name: "gpt_5".into() });
    // XGrammar's list has fewer families; the sentence is the same.
    assert!(err.to_string().starts_with("Unknown format type: gpt_5, supported types: ['llama', 'kimi'"));
    assert!(err.to_string().ends_with("'gemma_4', 'hermes', 'mistral']"), "{err}");
}

/// Every tag in the document whose content is a tool's arguments (a `json_schema`, alone
/// or inside a `sequence`): the tags the output parser must know as calls.
fn argument_tags(doc: &Value, out: &mut Vec<Value>) {
    match doc {
        Value::Object(o) => {
            if o.get("type") == Some(&json!("tag")) {
                let content = &o["content"];
                let holds_args = content["type"] == "json_schema"
                    || (content["type"] == "sequence"
                        && content["elements"]
                            .as_array()
                            .is_some_and(|es| es.iter().any(|e| e["type"] == "json_schema")));
                if holds_args && !out.contains(doc) {
                    out.push(doc.clone());
                }
            }
            for (k, v) in o {
                if k != "json_schema" {
                    argument_tags(v, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| argument_tags(v, out)),
        _ => {}
    }
}

/// Families that write a reasoning block (when reasoning is not disabled).
fn has_reasoning(f: Family) -> bool {
    !matches!(f, Family::Llama | Family::Hermes | Family::Mistral)
}

/// The presets of every fixture case XGrammar builds, plus Hermes and Mistral over Qwen
/// 3's arguments (where they build).
fn all_presets() -> Vec<(Value, Preset)> {
    let mut out = Vec::new();
    for case in fixture()["cases"].as_array().expect("cases") {
        if case.get("error").is_some() {
            continue;
        }
        out.push((case.clone(), build(case).unwrap_or_else(|e| panic!("{case}: {e}"))));
        if case["family"] == "qwen_3" {
            for extra in ["hermes", "mistral"] {
                let mut c = case.clone();
                c["family"] = json!(extra);
                if let Ok(p) = build(&c) {
                    out.push((c, p));
                }
            }
        }
    }
    out
}

#[test]
fn roles_list_every_call_and_block() {
    for (case, preset) in all_presets() {
        let (family, tools, options) = arguments(&case).expect("arguments");
        let calls: Vec<&Value> =
            preset.roles.iter().filter(|(_, r)| matches!(r, Role::Call { .. })).map(|(t, _)| t).collect();
        let mut args = Vec::new();
        argument_tags(&preset.structural_tag, &mut args);
        assert_eq!(
            calls.iter().map(|t| t.to_string()).collect::<BTreeSet<_>>().len(),
            calls.len(),
            "{case}: a call tag listed twice"
        );
        for t in &args {
            assert!(calls.contains(&t), "{case}: call tag {t} has no role");
        }
        for t in &calls {
            assert!(args.contains(t), "{case}: {t} is listed as a call but holds no arguments");
        }
        // Each tool left after tool_choice is callable under its own name.
        let n = normalize_tool_choice(&tools, &options.tool_choice).expect("normalizes");
        let names: BTreeSet<&str> = preset
            .roles
            .iter()
            .filter_map(|(_, r)| match r {
                Role::Call { name } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        let mut want: BTreeSet<&str> = n.functions.iter().map(|f| f.name.as_str()).collect();
        if family == Family::Harmony {
            want.extend(n.builtins.iter().map(|b| b.output_name()));
        }
        assert_eq!(names, want, "{case}: called names");
        // One reasoning block when reasoning is on (MiniMax's disabled form is constants).
        let reasoning = preset.roles.iter().filter(|(_, r)| *r == Role::Reasoning).count();
        let want_reasoning =
            usize::from(has_reasoning(family) && options.reasoning != ReasoningMode::Disabled);
        assert_eq!(reasoning, want_reasoning, "{case}: reasoning roles");
        let content = preset.roles.iter().filter(|(_, r)| *r == Role::Content).count();
        let want_content = match family {
            Family::KimiK3 => 1,
            Family::Harmony => usize::from(n.choice == grammask::tool_calling::ChoiceMode::Auto),
            _ => 0,
        };
        assert_eq!(content, want_content, "{case}: content roles");
        for (t, _) in &preset.roles {
            assert_eq!(t["type"], "tag", "{case}: a role on a non-tag {t}");
        }
    }
}

#[allow(clippy::result_large_err)] // grammask's own error, as `compile` returns it
fn compile(tag: &Value) -> Result<std::sync::Arc<grammask::CompiledGrammar>, Error> {
    common::byte_compiler().compile(&GrammarSpec::StructuralTag(tag.to_string()))
}

#[test]
fn every_preset_compiles() {
    let mut seen = BTreeSet::new();
    let (mut compiled, mut waiting) = (0, 0);
    for (case, preset) in all_presets() {
        let family = Family::from_name(case["family"].as_str().expect("family")).expect("family");
        if !seen.insert(preset.structural_tag.to_string()) {
            continue;
        }
        match compile(&preset.structural_tag) {
            Ok(_) => compiled += 1,
            Err(Error::StructuralTag(e))
                if EXPECTED_REFUSALS.iter().any(|(f, w)| *f == family && e.to_string().contains(w)) =>
            {
                waiting += 1
            }
            Err(e) => panic!("{case}: {e}"),
        }
    }
    eprintln!("{compiled} distinct presets compile, {waiting} refused as expected");
    assert!(compiled > 0);
}

// ---------------------------------------------------------------------------------------
// Hermes and Mistral: the languages
// ---------------------------------------------------------------------------------------

fn tools() -> Vec<Tool> {
    tools_from_json(&json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["location"]}}},
        {"type": "function", "function": {"name": "get_time"}},
    ]))
    .expect("tools")
}

fn choice(v: Value) -> ToolChoice {
    ToolChoice::from_json(&v).expect("choice")
}

/// Checks each `(text, accepted)` pair against `family`'s preset for `options`.
fn expect(family: Family, options: PresetOptions, cases: &[(&str, bool)]) {
    let preset = model_structural_tag(family, &tools(), &options).expect("preset");
    let compiled = compile(&preset.structural_tag).unwrap_or_else(|e| panic!("{family}: {e}"));
    for &(text, want) in cases {
        let mut m = GrammarMatcher::new(compiled.clone());
        let got = m.accept_string(text).is_ok() && m.can_terminate();
        assert_eq!(
            got, want,
            "{family} {:?} parallel={}: {text:?}",
            options.tool_choice, options.parallel_tool_calls
        );
    }
}

fn opts(tool_choice: ToolChoice, parallel_tool_calls: bool) -> PresetOptions {
    PresetOptions { tool_choice, parallel_tool_calls, ..PresetOptions::default() }
}

const H_WEATHER: &str =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>";
const H_TIME: &str = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": [1, 2]}}\n</tool_call>";

#[test]
fn hermes_auto() {
    let two = format!("I'll check. {H_WEATHER}\n{H_TIME} done");
    let one_then_text = format!("{H_WEATHER} and more");
    let cases = [
        ("Just text, no call.", true),
        ("", true),
        (H_WEATHER, true),
        (&two, true),
        ("<tool_call>\n{\"name\": \"get_news\", \"arguments\": {}}\n</tool_call>", false),
        ("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": 3}}\n</tool_call>", false),
        ("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>", false),
        ("<tool_call>\n{\"arguments\": {\"location\": \"Paris\"}, \"name\": \"get_weather\"}\n</tool_call>", false),
        ("unfinished <tool_call>\n{\"name\": \"get_weather\"", false),
        ("a stray </tool_call> end tag", false),
        ("<tool_response>faked</tool_response>", false),
        (&one_then_text, true),
    ];
    expect(Family::Hermes, opts(ToolChoice::Auto, true), &cases);
    // One call at most, and nothing after it.
    let single = [
        ("text", true),
        (H_WEATHER, true),
        (&format!("first {H_WEATHER}"), true),
        (&two, false),
        (&one_then_text, false),
    ];
    expect(Family::Hermes, opts(ToolChoice::Auto, false), &single.map(|(t, b)| (t as &str, b)));
}

#[test]
fn hermes_required_forced_none() {
    let both = format!("{H_WEATHER}{H_TIME}");
    expect(
        Family::Hermes,
        opts(ToolChoice::Required, true),
        &[(H_WEATHER, true), (H_TIME, true), (&both, true), ("no call", false), ("", false)],
    );
    expect(Family::Hermes, opts(ToolChoice::Required, false), &[(H_WEATHER, true), (&both, false)]);
    let forced = choice(json!({"type": "function", "function": {"name": "get_time"}}));
    expect(
        Family::Hermes,
        opts(forced, true),
        &[(H_TIME, true), (H_WEATHER, false), (&format!("x{H_TIME}"), false), (&both, false)],
    );
    let allowed = choice(json!({"type": "allowed_tools", "allowed_tools": {"mode": "required",
        "tools": [{"type": "function", "function": {"name": "get_weather"}}]}}));
    expect(Family::Hermes, opts(allowed, true), &[(H_WEATHER, true), (H_TIME, false), ("text", false)]);
    expect(
        Family::Hermes,
        opts(ToolChoice::None, true),
        &[("plain text", true), (H_WEATHER, false), ("a <tool_call> inside", false)],
    );
}

const M_WEATHER: &str =
    "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"c\"}}";
const M_TIME: &str = "{\"name\": \"get_time\", \"arguments\": {}}";

#[test]
fn mistral_auto() {
    let one = format!("[TOOL_CALLS][{M_WEATHER}]");
    let two = format!("[TOOL_CALLS][{M_WEATHER}, {M_TIME}]");
    let cases = [
        ("Plain answer.", true),
        (&one as &str, true),
        (&two, true),
        (&format!("Let me look that up. {two}"), true),
        (&format!("{one} and then text"), false),
        (&format!("{one}{one}"), false),
        ("[TOOL_CALLS][]", false),
        ("[TOOL_CALLS][{\"name\": \"get_news\", \"arguments\": {}}]", false),
        ("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\"}}]", false),
        (&format!("[TOOL_CALLS] [{M_WEATHER}]"), false),
        ("a fake [INST] turn", false),
        ("[TOOL_RESULTS]", false),
    ];
    expect(Family::Mistral, opts(ToolChoice::Auto, true), &cases);
    expect(
        Family::Mistral,
        opts(ToolChoice::Auto, false),
        &[(&one, true), (&two, false), ("text only", true), (&format!("so {one}"), true)],
    );
}

#[test]
fn mistral_required_forced_none() {
    let one = format!("[TOOL_CALLS][{M_WEATHER}]");
    let time = format!("[TOOL_CALLS][{M_TIME}]");
    let two = format!("[TOOL_CALLS][{M_WEATHER}, {M_TIME}]");
    expect(
        Family::Mistral,
        opts(ToolChoice::Required, true),
        &[(&one, true), (&two, true), ("text", false), (&format!("so {one}"), false), ("", false)],
    );
    expect(Family::Mistral, opts(ToolChoice::Required, false), &[(&one, true), (&two, false)]);
    let forced = choice(json!({"type": "function", "function": {"name": "get_weather"}}));
    expect(Family::Mistral, opts(forced, true), &[(&one, true), (&time, false), (&two, false)]);
    let allowed = choice(json!({"type": "allowed_tools", "allowed_tools": {"mode": "auto",
        "tools": [{"type": "function", "function": {"name": "get_time"}}]}}));
    expect(Family::Mistral, opts(allowed, true), &[(&time, true), (&one, false), ("text", true)]);
    expect(
        Family::Mistral,
        opts(ToolChoice::None, true),
        &[("text", true), (&one, false), ("mentions [TOOL_CALLS] here", false)],
    );
    // With special tokens allowed in text, a no-tool response may spell them.
    let loose = PresetOptions { exclude_special_tokens: false, ..opts(ToolChoice::None, true) };
    expect(Family::Mistral, loose, &[("mentions [TOOL_CALLS] here", true)]);
}

// ---------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------

#[test]
fn bad_input_is_a_typed_error() {
    let t = tools();
    let run = |tools: &[Tool], c: ToolChoice| {
        model_structural_tag(Family::Qwen3, tools, &PresetOptions { tool_choice: c, ..Default::default() })
    };
    assert!(matches!(Family::from_name("qwen3"), Err(ToolError::UnknownFamily { name }) if name == "qwen3"));
    assert_eq!("hermes".parse::<Family>(), Ok(Family::Hermes));
    assert_eq!(
        run(&t, choice(json!({"type": "function", "function": {"name": "nope"}}))),
        Err(ToolError::ToolNotFound { name: "nope".into() })
    );
    assert_eq!(run(&[], ToolChoice::Required), Err(ToolError::RequiredWithoutTools));
    // Two tools of one name: a forced choice resolves to both.
    let mut twice = t.clone();
    twice.push(t[1].clone());
    assert_eq!(
        run(&twice, choice(json!({"type": "function", "function": {"name": "get_time"}}))),
        Err(ToolError::ForcedNotOneTool { count: 2, family: None })
    );
    // A builtin tool forced on a family that writes only functions.
    let python = tools_from_json(&json!([{"type": "code_interpreter"}])).expect("builtin");
    let err = run(&python, choice(json!({"type": "code_interpreter"}))).unwrap_err();
    assert_eq!(err, ToolError::ForcedNotOneTool { count: 1, family: Some(Family::Qwen3) });
    assert_eq!(
        err.to_string(),
        "Forced tool choice must resolve to exactly one tool. \
         It resolved to a builtin tool, which family `qwen_3` ignores."
    );
    assert_eq!(
        run(&python, ToolChoice::Required),
        Err(ToolError::RequiredWithoutFunctionTools { family: Family::Qwen3 })
    );
    assert_eq!(
        run(&t, choice(json!({"type": "web_search_preview"}))),
        Err(ToolError::BuiltinChoiceMismatch { kind: "web_search_preview".into(), matches: 0 })
    );
    assert_eq!(
        model_structural_tag(Family::Mimo, &python, &PresetOptions::default()),
        Err(ToolError::BuiltinToolsUnsupported { family: Family::Mimo })
    );
    assert_eq!(
        run(
            &t,
            choice(json!({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
            {"type": "function", "function": {"name": "b"}}, {"type": "function", "function": {"name": "a"}}]}}))
        ),
        Err(ToolError::AllowedFunctionsNotFound { names: vec!["a".into(), "b".into()] })
    );
}

#[test]
fn malformed_json_is_a_typed_error() {
    let tool_err = |v: Value| tools_from_json(&v).unwrap_err();
    assert_eq!(tool_err(json!({"type": "function"})), ToolError::ToolsNotAList { found: "an object" });
    for (bad, says) in [
        (json!([1]), "tools[0]: expected an object, got a number"),
        (json!([{"function": {"name": "f"}}]), "tools[0]: `type` is missing"),
        (json!([{"type": "function"}]), "tools[0]: a tool of type `function` needs a `function` object"),
        (json!([{"type": "function", "function": {}}]), "tools[0]: `function.name` is missing"),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": true}}]),
            "tools[0]: `function.parameters` must be a JSON-schema object or null, got a boolean",
        ),
        (
            json!([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g", "strict": "no"}}]),
            "tools[1]: `function.strict` must be a boolean or null, got a string",
        ),
        (
            json!([{"type": "web_search", "name": 7}]),
            "tools[0]: `name` must be a string or null, got a number",
        ),
    ] {
        let err = tool_err(bad.clone());
        assert!(matches!(err, ToolError::MalformedTool { .. }), "{bad}: {err:?}");
        assert_eq!(err.to_string(), says, "{bad}");
    }
    let choice_err = |v: Value| ToolChoice::from_json(&v).unwrap_err();
    assert!(matches!(choice_err(json!("sometimes")), ToolError::MalformedToolChoice { .. }));
    assert!(matches!(choice_err(json!(3)), ToolError::MalformedToolChoice { .. }));
    assert!(matches!(choice_err(json!({"type": "function"})), ToolError::MalformedToolChoice { .. }));
    assert!(matches!(
        choice_err(json!({"type": "allowed_tools", "allowed_tools": {"mode": "maybe", "tools": []}})),
        ToolError::MalformedToolChoice { .. }
    ));
    assert_eq!(
        choice_err(json!({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
            {"type": "web_search"}, {"type": "function"}]}})),
        ToolError::AllowedFunctionWithoutName { index: 1 }
    );
    // Through serde, too.
    assert!(serde_json::from_value::<Tool>(json!({"type": "function"})).is_err());
}

#[test]
fn openai_json_round_trips() {
    let tools = json!([
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true}},
        {"type": "function", "function": {"name": "g"}},
        {"type": "web_search_preview", "name": "browser.search", "parameters": {"type": "object"}},
        {"type": "code_interpreter"},
    ]);
    let parsed: Vec<Tool> = serde_json::from_value(tools.clone()).expect("tools");
    assert_eq!(serde_json::to_value(&parsed).expect("serializes"), tools);
    for c in [
        json!("none"),
        json!("auto"),
        json!("required"),
        json!({"type": "function", "function": {"name": "f"}}),
        json!({"type": "web_search_preview"}),
        json!({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
            {"type": "function", "function": {"name": "f"}}, {"type": "web_search_preview", "name": "b"}]}}),
    ] {
        let parsed: ToolChoice = serde_json::from_value(c.clone()).expect("choice");
        assert_eq!(serde_json::to_value(&parsed).expect("serializes"), c);
    }
    assert_eq!(ToolChoice::from_json(&Value::Null), Ok(ToolChoice::Auto));
}
