//! Validators independent of the matcher that produced an output: the `jsonschema` crate
//! for JSON, the `regex` crate for regexes, grammask's brute-force Earley recognizer for
//! grammars (it shares nothing with the automata or the matcher), and for tool calls the
//! output parser plus `jsonschema` on every call's arguments.

use grammask::grammar::Grammar;
use grammask::tool_calling::{Family, PresetOptions, Tool};
use grammask::tool_calling::{OutputParser, ToolChoice};
use serde_json::Value;
use std::collections::HashMap;

#[path = "../../core/tests/integration/common/oracle.rs"]
#[allow(dead_code, missing_docs, clippy::all)]
mod oracle;

/// Judges an output's text.
pub enum Validator {
    /// A JSON document valid against a schema.
    Json(Box<jsonschema::Validator>),
    /// A fixed prefix, then JSON valid against a schema.
    PrefixedJson(String, Box<jsonschema::Validator>),
    /// A whole-string regex match.
    Regex(regex::Regex),
    /// A string of the grammar's language (brute-force Earley).
    Grammar(Box<oracle::Bnf>),
    /// A tool-calling output: read back by the preset's parser; every call names a tool
    /// and its arguments are valid against the tool's parameters; the choice holds.
    Tools {
        /// Reads outputs back (`None`: `tool_choice: none`, free text).
        parser: Option<Box<OutputParser>>,
        /// Each tool's parameter schema.
        schemas: HashMap<String, jsonschema::Validator>,
        /// The choice.
        choice: ToolChoice,
    },
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Validator::Json(_) => "Json",
            Validator::PrefixedJson(..) => "PrefixedJson",
            Validator::Regex(_) => "Regex",
            Validator::Grammar(_) => "Grammar",
            Validator::Tools { .. } => "Tools",
        })
    }
}

fn json_doc(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}

/// OpenAI `tools` and `tool_choice` as grammask's tool types and preset options.
pub fn tool_request(tools: &[Value], tool_choice: &Value) -> Result<(Vec<Tool>, PresetOptions), String> {
    let tools =
        grammask::tool_calling::tools_from_json(&Value::Array(tools.to_vec())).map_err(|e| e.to_string())?;
    let choice = grammask::tool_calling::ToolChoice::from_json(tool_choice).map_err(|e| e.to_string())?;
    Ok((tools, PresetOptions { tool_choice: choice, ..PresetOptions::default() }))
}

impl Validator {
    /// JSON valid against `schema`.
    pub fn json(schema: &Value) -> Result<Self, String> {
        let v = jsonschema::validator_for(schema).map_err(|e| format!("schema: {e}"))?;
        Ok(Validator::Json(Box::new(v)))
    }

    /// `prefix` then JSON valid against `schema`.
    pub fn prefixed_json(prefix: &str, schema: &Value) -> Result<Self, String> {
        let v = jsonschema::validator_for(schema).map_err(|e| format!("schema: {e}"))?;
        Ok(Validator::PrefixedJson(prefix.into(), Box::new(v)))
    }

    /// A whole-string match of `pattern`.
    pub fn regex(pattern: &str) -> Result<Self, String> {
        regex::Regex::new(&format!("^(?:{pattern})$")).map(Validator::Regex).map_err(|e| e.to_string())
    }

    /// The language of EBNF `text`.
    pub fn ebnf(text: &str) -> Result<Self, String> {
        let g = Grammar::from_ebnf(text).map_err(|e| e.to_string())?;
        Ok(Validator::Grammar(Box::new(oracle::Bnf::new(&g))))
    }

    /// The language of Lark `text`.
    pub fn lark(text: &str) -> Result<Self, String> {
        let g = grammask::lark::lark_to_grammar(text).map_err(|e| e.to_string())?;
        Ok(Validator::Grammar(Box::new(oracle::Bnf::new(&g))))
    }

    /// Tool-call outputs of a request with OpenAI `tools` and `tool_choice`, for a model
    /// of `family` (the pieces of a `Constraint::Tools`).
    pub fn tools(family: &Family, tools: &[Value], tool_choice: &Value) -> Result<Self, String> {
        let (parsed, options) = tool_request(tools, tool_choice)?;
        let mut schemas = HashMap::new();
        for t in tools {
            let f = &t["function"];
            let name = f["name"].as_str().ok_or("a tool without a name")?.to_string();
            let params = f.get("parameters").cloned().unwrap_or(serde_json::json!({"type": "object"}));
            schemas.insert(name, jsonschema::validator_for(&params).map_err(|e| e.to_string())?);
        }
        let parser = match grammask::tool_calling::chat_constraint(Some(*family), &parsed, &options, None)
            .map_err(|e| e.to_string())?
        {
            grammask::tool_calling::ChatConstraint::Tools { preset, .. } => {
                Some(Box::new(OutputParser::new(&preset).map_err(|e| e.to_string())?))
            }
            _ => None,
        };
        Ok(Validator::Tools { parser, schemas, choice: options.tool_choice })
    }

    /// Checks `text`, and for tool calling the calls an API reported (`calls`: name and
    /// arguments text, e.g. OpenAI's `tool_calls`; `None` to read them from `text`).
    pub fn check(&self, text: &str, calls: Option<&[(String, String)]>) -> Result<(), String> {
        match self {
            Validator::Json(v) => v.validate(&json_doc(text)?).map_err(|e| format!("schema: {e}")),
            Validator::PrefixedJson(prefix, v) => {
                let rest = text.strip_prefix(prefix.as_str()).ok_or("the prefix is missing")?;
                v.validate(&json_doc(rest)?).map_err(|e| format!("schema: {e}"))
            }
            Validator::Regex(r) => {
                r.is_match(text).then_some(()).ok_or_else(|| "the regex does not match".into())
            }
            Validator::Grammar(bnf) => {
                let mut r = oracle::Recognizer::new(bnf);
                let viable = text.bytes().all(|b| r.push(b));
                (viable && r.accepts()).then_some(()).ok_or_else(|| "not in the grammar's language".into())
            }
            Validator::Tools { parser, schemas, choice } => {
                let read: Vec<(String, String)> = match (calls, parser) {
                    (Some(c), _) => c.to_vec(),
                    (None, Some(p)) => p
                        .parse(text)
                        .map_err(|e| format!("tool output: {e}"))?
                        .tool_calls
                        .into_iter()
                        .map(|c| (c.name, c.arguments))
                        .collect(),
                    (None, None) => Vec::new(),
                };
                for (name, args) in &read {
                    let v = schemas.get(name).ok_or_else(|| format!("a call of unknown tool `{name}`"))?;
                    let doc = json_doc(args)?;
                    v.validate(&doc).map_err(|e| format!("arguments of {name}: {e}"))?;
                }
                match choice {
                    ToolChoice::None if !read.is_empty() => Err("a call under tool_choice none".into()),
                    ToolChoice::Required if read.is_empty() => {
                        Err("no call under tool_choice required".into())
                    }
                    ToolChoice::Function { name }
                        if read.is_empty() || read.iter().any(|(n, _)| n != name) =>
                    {
                        Err(format!("tool_choice names {name}; calls: {read:?}"))
                    }
                    _ => Ok(()),
                }
            }
        }
    }
}
