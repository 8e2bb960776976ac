//! Validators independent of the matcher that produced an output: the `jsonschema` crate
//! for JSON, the `regex` crate for regexes, grammask's brute-force Earley recognizer for
//! grammars (it shares nothing with the automata or the matcher; it judges prefixes
//! too), and for tool calls the suite's own reader of each family's published format
//! ([`crate::tool_reader`], not grammask's `OutputParser`) plus `jsonschema` on every
//! call's arguments.

use crate::tool_reader::ReadCall;
use grammask::grammar::Grammar;
use grammask::tool_calling::ToolChoice;
use grammask::tool_calling::{Family, PresetOptions, Tool};
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
    /// A tool-calling output: read back by the suite's reader of the family's format;
    /// every call names a tool and its arguments are valid against the tool's
    /// parameters; the choice holds.
    Tools {
        /// Whose format the calls are in.
        family: Family,
        /// The tools as OpenAI sends them (their parameter schemas type the arguments of
        /// formats that do not write types).
        tools: Vec<Value>,
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
        let (_, options) = tool_request(tools, tool_choice)?;
        let mut schemas = HashMap::new();
        for t in tools {
            let f = &t["function"];
            let name = f["name"].as_str().ok_or("a tool without a name")?.to_string();
            let params = f.get("parameters").cloned().unwrap_or(serde_json::json!({"type": "object"}));
            schemas.insert(name, jsonschema::validator_for(&params).map_err(|e| e.to_string())?);
        }
        Ok(Validator::Tools { family: *family, tools: tools.to_vec(), schemas, choice: options.tool_choice })
    }

    /// The oracle's name, for the report.
    pub fn oracle(&self) -> &'static str {
        match self {
            Validator::Json(_) | Validator::PrefixedJson(..) => "jsonschema",
            Validator::Regex(_) => "regex",
            Validator::Grammar(_) => "earley",
            Validator::Tools { .. } => "tool_reader+jsonschema",
        }
    }

    /// Judges a cut-off output as a prefix where this validator can: grammars (the Earley
    /// recognizer: every byte keeps an item alive) and tool calls read from the text
    /// (calls closed before the cut valid, the rest a beginning of the format). `None`:
    /// it cannot (JSON and regexes: llguidance judges their prefixes).
    pub fn check_prefix(&self, text: &str, calls: Option<&[(String, String)]>) -> Option<Result<(), String>> {
        match self {
            Validator::Grammar(bnf) => {
                let mut r = oracle::Recognizer::new(bnf);
                let dead = text.bytes().position(|b| !r.push(b));
                Some(match dead {
                    None => Ok(()),
                    Some(at) => Err(format!("earley: no sentence of the grammar starts with byte {at}")),
                })
            }
            Validator::Tools { choice: ToolChoice::None, .. } if calls.is_none() => Some(Ok(())),
            Validator::Tools { family, tools, schemas, choice } if calls.is_none() => {
                Some(crate::tool_reader::read_with_tools(*family, text, false, tools).and_then(|out| {
                    check_calls(schemas, &out.calls)?;
                    match choice {
                        ToolChoice::Function { name } if out.calls.iter().any(|c| &c.name != name) => {
                            Err(format!("tool_choice names {name}; calls: {:?}", out.calls))
                        }
                        _ => Ok(()),
                    }
                }))
            }
            _ => None,
        }
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
            Validator::Tools { family, tools, schemas, choice } => {
                let read: Vec<ReadCall> = match calls {
                    Some(c) => c
                        .iter()
                        .map(|(name, args)| Ok(ReadCall { name: name.clone(), arguments: json_doc(args)? }))
                        .collect::<Result<_, String>>()?,
                    // Under `none` the output is free text, whatever it holds.
                    None if *choice == ToolChoice::None => Vec::new(),
                    None => {
                        crate::tool_reader::read_with_tools(*family, text, true, tools)
                            .map_err(|e| format!("tool output: {e}"))?
                            .calls
                    }
                };
                check_calls(schemas, &read)?;
                match choice {
                    ToolChoice::None if !read.is_empty() => Err("a call under tool_choice none".into()),
                    ToolChoice::Required if read.is_empty() => {
                        Err("no call under tool_choice required".into())
                    }
                    ToolChoice::Function { name }
                        if read.is_empty() || read.iter().any(|c| &c.name != name) =>
                    {
                        Err(format!("tool_choice names {name}; calls: {read:?}"))
                    }
                    _ => Ok(()),
                }
            }
        }
    }
}

/// Every call names a tool, with arguments valid against its parameters.
fn check_calls(schemas: &HashMap<String, jsonschema::Validator>, calls: &[ReadCall]) -> Result<(), String> {
    for c in calls {
        let v = schemas.get(&c.name).ok_or_else(|| format!("a call of unknown tool `{}`", c.name))?;
        v.validate(&c.arguments).map_err(|e| format!("arguments of {}: {e}", c.name))?;
    }
    Ok(())
}
