//! MaskBench's protocol with Glaive function-calling schemas as tool parameters: each
//! instance of the Glaiveai2K dev split, written as a call inside a preset's structural
//! tag, must get the same verdict as the bare instance under the same schema compiled
//! directly — a tag must not change what the arguments may be — and valid instances that
//! the bare schema accepts must read back as that call with those arguments.
//!
//! CI runs every 25th file; `GRAMMASK_FULL_GLAIVE=1` runs all of them.

use crate::common;

use common::tokenizer;
use grammask::json_schema::{to_python_json, PropertyOrder, Whitespace};
use grammask::tool_calling::{model_structural_tag, tools_from_json, Family, OutputParser, PresetOptions};
use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, JsonSchemaOptions};
use serde_json::{json, Value};

fn accepts(compiler: &GrammarCompiler, spec: &GrammarSpec, text: &str) -> Option<bool> {
    let compiled = compiler.compile(spec).ok()?;
    let mut m = GrammarMatcher::new(compiled);
    Some(m.accept_string(text).is_ok() && m.can_terminate())
}

/// The call as each family writes it (Python's `json.dumps` separators).
fn call_text(family: &str, name: &str, args: &str) -> String {
    match family {
        "qwen_3" => format!("</think>\n\n<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {args}}}\n</tool_call>"),
        "llama" => format!("{{\"name\": \"{name}\", \"parameters\": {args}}}"),
        "deepseek_v3_1" => format!(
            "</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
        ),
        _ => unreachable!(),
    }
}

#[test]
fn glaive_schemas_inside_tags_match_the_bare_schema() {
    let full = std::env::var_os("GRAMMASK_FULL_GLAIVE").is_some();
    let dir = common::data_dir().join("jsonschemabench/dev/Glaiveai2K");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let compiler = GrammarCompiler::new(tokenizer("qwen3"));
    let bare_options = JsonSchemaOptions {
        whitespace: Whitespace::Any { max: u32::MAX },
        property_order: PropertyOrder::Schema,
        ..JsonSchemaOptions::default()
    };
    let (mut instances, mut agreed, mut read_back, mut refused) = (0, 0, 0, 0);
    for (i, path) in files.iter().enumerate() {
        if !full && i % 25 != 0 {
            continue;
        }
        let d: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let stem = path.file_stem().unwrap().to_str().unwrap();
        let name = stem.split("---").nth(1).unwrap().rsplit_once('_').unwrap().0;
        let schema = &d["schema"];
        let bare = GrammarSpec::JsonSchema { schema: schema.to_string(), options: bare_options.clone() };
        let tools =
            tools_from_json(&json!([{"type": "function", "function": {"name": name, "parameters": schema}}]))
                .unwrap();
        for family in ["qwen_3", "llama", "deepseek_v3_1"] {
            let preset =
                model_structural_tag(Family::from_name(family).unwrap(), &tools, &PresetOptions::default())
                    .unwrap();
            let tag = GrammarSpec::StructuralTag(preset.structural_tag.to_string());
            let parser = OutputParser::new(&preset).unwrap();
            for t in d["tests"].as_array().unwrap() {
                let args = to_python_json(&t["data"], Whitespace::Compact);
                let Some(want) = accepts(&compiler, &bare, &args) else {
                    // The bare schema is refused (a typed error); the tag must be too.
                    assert!(
                        compiler.compile(&tag).is_err(),
                        "{stem}: the tag compiles where the schema does not"
                    );
                    refused += 1;
                    continue;
                };
                instances += 1;
                let text = call_text(family, name, &args);
                let got = accepts(&compiler, &tag, &text).unwrap();
                assert_eq!(got, want, "{stem} in {family}: {text}");
                agreed += 1;
                if got && t["valid"] == json!(true) {
                    let out = parser.parse(&text).unwrap_or_else(|e| panic!("{stem} {family}: {e}"));
                    assert_eq!(out.tool_calls.len(), 1);
                    assert_eq!(out.tool_calls[0].name, name);
                    let back: Value = serde_json::from_str(&out.tool_calls[0].arguments).unwrap();
                    assert_eq!(back, t["data"], "{stem} {family}");
                    read_back += 1;
                }
            }
        }
    }
    eprintln!("{instances} instances agree ({agreed}), {read_back} valid calls read back, {refused} refused with the schema");
    assert!(instances > 100 && read_back > 50, "too few cases ran: {instances}, {read_back}");
}
