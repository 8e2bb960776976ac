//! OpenAI Chat Completions `tools` and `tool_choice`, and their normalization into what a
//! preset needs: the function tools, the builtin tools and one of auto / required /
//! forced.
//!
//! The accepted shapes and [`normalize_tool_choice`] follow XGrammar 0.2.8
//! (`openai_tool_call_schema.py`, `normalize_tool_choice`), with the same failures as
//! [`ToolError`]s:
//!
//! | value | shape |
//! |---|---|
//! | function tool | `{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}` |
//! | builtin tool | `{"type": T, "name"?: N, "parameters"?: S}` (T is not `function`; the model writes N, or T when N is absent) |
//! | `tool_choice` | `"none"`, `"auto"`, `"required"`, `null` (auto), `{"type": "function", "function": {"name"}}`, `{"type": T}` (a builtin type), `{"type": "allowed_tools", "allowed_tools": {"mode": "auto"\|"required", "tools": [refs]}}` |
//!
//! # Deliberate differences from XGrammar
//! XGrammar validates with pydantic, which has two habits grammask does not copy:
//! - pydantic tries each shape of a union in turn, so a `{"type": "function"}` tool whose
//!   `function` object is missing or malformed silently becomes a *builtin* tool of type
//!   `function`; grammask reports [`ToolError::MalformedTool`]. Likewise a
//!   `tool_choice` of type `function` / `allowed_tools` whose nested object is malformed
//!   is [`ToolError::MalformedToolChoice`] here (XGrammar then fails to match a builtin
//!   tool of that type, so both refuse it).
//! - pydantic's lax mode turns `"true"` or `1` into a boolean; grammask wants JSON
//!   booleans and strings as they are.
//!
//! Fields that neither defines (an OpenAI client may send more than these) are ignored
//! by both, as the OpenAI API does.

use super::ToolError;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// One entry of an OpenAI `tools` list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub enum Tool {
    /// `{"type": "function", "function": {...}}`.
    Function(FunctionDefinition),
    /// A hosted / server tool, `{"type": T, "name"?: N, "parameters"?: S}`.
    Builtin(BuiltinTool),
}

/// The `function` object of a function tool.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionDefinition {
    /// The name the model writes.
    pub name: String,
    /// What the function does (for the prompt; no effect on the grammar).
    pub description: Option<String>,
    /// The arguments' JSON schema; `None` leaves them unconstrained JSON.
    pub parameters: Option<Map<String, Value>>,
    /// `Some(false)` leaves the arguments unconstrained JSON even with `parameters`.
    pub strict: Option<bool>,
}

/// A builtin (hosted) tool whose calls are constrained like a function's.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltinTool {
    /// The provider-facing type (`web_search_preview`); a builtin `tool_choice` matches it.
    pub kind: String,
    /// The name the model writes (`browser.search`), when it is not `kind`.
    pub name: Option<String>,
    /// The arguments' JSON schema; `None` leaves them unconstrained JSON.
    pub parameters: Option<Map<String, Value>>,
}

impl BuiltinTool {
    /// The name the model writes: `name`, or `kind` when `name` is absent or empty (as
    /// XGrammar's `tool.name or tool.type`).
    pub fn output_name(&self) -> &str {
        match &self.name {
            Some(n) if !n.is_empty() => n,
            _ => &self.kind,
        }
    }
}

/// An OpenAI `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub enum ToolChoice {
    /// `"none"`: no tool may be called.
    None,
    /// `"auto"` (and `null`): text, calls, or both.
    #[default]
    Auto,
    /// `"required"`: at least one call.
    Required,
    /// `{"type": "function", "function": {"name"}}`: exactly this function.
    Function {
        /// The function's name.
        name: String,
    },
    /// `{"type": T}`: exactly the one builtin tool of type T.
    Builtin {
        /// The builtin type.
        kind: String,
        /// Accepted for API compatibility; matching is by `kind` only.
        name: Option<String>,
    },
    /// `{"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}`: the listed tools
    /// only, then `mode`.
    AllowedTools {
        /// Whether a call is optional or required.
        mode: AllowedMode,
        /// The tools kept.
        tools: Vec<ToolRef>,
    },
}

/// `allowed_tools.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowedMode {
    /// Text or calls of the allowed tools.
    Auto,
    /// At least one call of an allowed tool.
    Required,
}

/// One reference in `allowed_tools.tools`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolRef {
    /// `{"type": "function", "function": {"name"}}`.
    Function {
        /// The function's name.
        name: String,
    },
    /// `{"type": T}`: the builtin tools of type T.
    Builtin {
        /// The builtin type.
        kind: String,
        /// Accepted for API compatibility; matching is by `kind` only.
        name: Option<String>,
    },
}

/// What a preset builder is given: the tools left after `tool_choice`, and whether a call
/// is optional, required, or forced to the one tool left.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizedTools<'a> {
    /// Function tools, in list order.
    pub functions: Vec<&'a FunctionDefinition>,
    /// Builtin tools, in list order.
    pub builtins: Vec<&'a BuiltinTool>,
    /// The simplified choice.
    pub choice: ChoiceMode,
}

/// `tool_choice` once normalized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChoiceMode {
    /// Text, calls of the tools left, or both (no tools left: text only).
    Auto,
    /// At least one call.
    Required,
    /// Exactly one call of the one tool left.
    Forced,
}

/// Parses an OpenAI `tools` array (`null` is an empty list, as in XGrammar).
pub fn tools_from_json(value: &Value) -> Result<Vec<Tool>, ToolError> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items.iter().enumerate().map(|(index, t)| Tool::parse(t, index)).collect(),
        other => Err(ToolError::ToolsNotAList { found: json_type(other) }),
    }
}

/// Splits `tools` into function and builtin tools, keeps those `choice` allows, and
/// simplifies `choice`, failing where XGrammar's `normalize_tool_choice` fails:
/// a named function or an `allowed_tools` reference that is not in the list, a builtin
/// choice matching no builtin tool or several, `required` with no tool left, and a
/// forced choice that leaves other than one tool.
pub fn normalize_tool_choice<'a>(
    tools: &'a [Tool],
    choice: &ToolChoice,
) -> Result<NormalizedTools<'a>, ToolError> {
    let mut functions: Vec<&FunctionDefinition> = tools
        .iter()
        .filter_map(|t| match t {
            Tool::Function(f) => Some(f),
            Tool::Builtin(_) => None,
        })
        .collect();
    let mut builtins: Vec<&BuiltinTool> = tools
        .iter()
        .filter_map(|t| match t {
            Tool::Builtin(b) => Some(b),
            Tool::Function(_) => None,
        })
        .collect();
    let mode = match choice {
        ToolChoice::Auto => ChoiceMode::Auto,
        ToolChoice::Required => ChoiceMode::Required,
        // Builders already read "auto with no tools" as text only.
        ToolChoice::None => {
            functions.clear();
            builtins.clear();
            ChoiceMode::Auto
        }
        ToolChoice::Function { name } => {
            functions.retain(|f| &f.name == name);
            if functions.is_empty() {
                return Err(ToolError::ToolNotFound { name: name.clone() });
            }
            builtins.clear();
            ChoiceMode::Forced
        }
        ToolChoice::Builtin { kind, .. } => {
            functions.clear();
            builtins.retain(|b| &b.kind == kind);
            if builtins.len() != 1 {
                return Err(ToolError::BuiltinChoiceMismatch { kind: kind.clone(), matches: builtins.len() });
            }
            ChoiceMode::Forced
        }
        ToolChoice::AllowedTools { mode, tools: refs } => {
            filter_allowed(&mut functions, &mut builtins, refs)?;
            match mode {
                AllowedMode::Auto => ChoiceMode::Auto,
                AllowedMode::Required => ChoiceMode::Required,
            }
        }
    };
    let left = functions.len() + builtins.len();
    if mode == ChoiceMode::Required && left == 0 {
        return Err(ToolError::RequiredWithoutTools);
    }
    if mode == ChoiceMode::Forced && left != 1 {
        return Err(ToolError::ForcedNotOneTool { count: left, family: None });
    }
    Ok(NormalizedTools { functions, builtins, choice: mode })
}

/// Keeps the tools `refs` names; every reference must name a tool of the list.
fn filter_allowed(
    functions: &mut Vec<&FunctionDefinition>,
    builtins: &mut Vec<&BuiltinTool>,
    refs: &[ToolRef],
) -> Result<(), ToolError> {
    let mut names = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    for r in refs {
        match r {
            ToolRef::Function { name } => names.insert(name.as_str()),
            ToolRef::Builtin { kind, .. } => kinds.insert(kind.as_str()),
        };
    }
    let missing: Vec<String> =
        names.iter().filter(|n| !functions.iter().any(|f| f.name == **n)).map(|n| n.to_string()).collect();
    if !missing.is_empty() {
        return Err(ToolError::AllowedFunctionsNotFound { names: missing });
    }
    builtins.retain(|b| kinds.contains(b.kind.as_str()));
    let missing: Vec<String> =
        kinds.iter().filter(|k| !builtins.iter().any(|b| b.kind == **k)).map(|k| k.to_string()).collect();
    if !missing.is_empty() {
        return Err(ToolError::AllowedBuiltinsNotFound { kinds: missing });
    }
    functions.retain(|f| names.contains(f.name.as_str()));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// JSON ⇄ types
// ---------------------------------------------------------------------------------------

impl Tool {
    /// Parses one tool; `index` is its position in the list, for the error.
    fn parse(value: &Value, index: usize) -> Result<Tool, ToolError> {
        let bad = |reason: String| ToolError::MalformedTool { index, reason };
        let obj =
            value.as_object().ok_or_else(|| bad(format!("expected an object, got {}", json_type(value))))?;
        let kind = req_str(obj, "", "type").map_err(bad)?;
        if kind == "function" {
            let f = match obj.get("function") {
                Some(Value::Object(f)) => f,
                Some(other) => {
                    return Err(bad(format!("`function` must be an object, got {}", json_type(other))))
                }
                None => return Err(bad("a tool of type `function` needs a `function` object".into())),
            };
            Ok(Tool::Function(FunctionDefinition {
                name: req_str(f, "function.", "name").map_err(bad)?,
                description: opt_str(f, "function.", "description").map_err(bad)?,
                parameters: opt_schema(f, "function.", "parameters").map_err(bad)?,
                strict: match f.get("strict") {
                    None | Some(Value::Null) => None,
                    Some(Value::Bool(b)) => Some(*b),
                    Some(other) => {
                        return Err(bad(format!(
                            "`function.strict` must be a boolean or null, got {}",
                            json_type(other)
                        )))
                    }
                },
            }))
        } else {
            Ok(Tool::Builtin(BuiltinTool {
                kind,
                name: opt_str(obj, "", "name").map_err(bad)?,
                parameters: opt_schema(obj, "", "parameters").map_err(bad)?,
            }))
        }
    }

    /// The tool in the OpenAI shape (absent optional fields left out).
    pub fn to_json(&self) -> Value {
        match self {
            Tool::Function(f) => {
                let mut o = Map::new();
                o.insert("name".into(), f.name.clone().into());
                if let Some(d) = &f.description {
                    o.insert("description".into(), d.clone().into());
                }
                if let Some(p) = &f.parameters {
                    o.insert("parameters".into(), Value::Object(p.clone()));
                }
                if let Some(s) = f.strict {
                    o.insert("strict".into(), s.into());
                }
                json!({"type": "function", "function": o})
            }
            Tool::Builtin(b) => {
                let mut o = Map::new();
                o.insert("type".into(), b.kind.clone().into());
                if let Some(n) = &b.name {
                    o.insert("name".into(), n.clone().into());
                }
                if let Some(p) = &b.parameters {
                    o.insert("parameters".into(), Value::Object(p.clone()));
                }
                Value::Object(o)
            }
        }
    }
}

impl TryFrom<Value> for Tool {
    type Error = ToolError;
    fn try_from(value: Value) -> Result<Self, ToolError> {
        Tool::parse(&value, 0)
    }
}

impl From<Tool> for Value {
    fn from(t: Tool) -> Value {
        t.to_json()
    }
}

impl ToolChoice {
    /// Parses a `tool_choice` value (`null` is `auto`).
    pub fn from_json(value: &Value) -> Result<ToolChoice, ToolError> {
        let bad = |reason: String| ToolError::MalformedToolChoice { reason };
        match value {
            Value::Null => Ok(ToolChoice::Auto),
            Value::String(s) => match s.as_str() {
                "none" => Ok(ToolChoice::None),
                "auto" => Ok(ToolChoice::Auto),
                "required" => Ok(ToolChoice::Required),
                other => Err(bad(format!(
                    "expected \"none\", \"auto\", \"required\" or an object, got \"{other}\""
                ))),
            },
            Value::Object(obj) => {
                let kind = req_str(obj, "", "type").map_err(bad)?;
                match kind.as_str() {
                    "function" => Ok(ToolChoice::Function { name: function_name(obj).map_err(bad)? }),
                    "allowed_tools" => {
                        let a = match obj.get("allowed_tools") {
                            Some(Value::Object(a)) => a,
                            _ => {
                                return Err(bad(
                                    "`allowed_tools` must be an object with `mode` and `tools`".into()
                                ))
                            }
                        };
                        let mode = match a.get("mode").and_then(Value::as_str) {
                            Some("auto") => AllowedMode::Auto,
                            Some("required") => AllowedMode::Required,
                            _ => {
                                return Err(bad("allowed_tools.mode must be \"auto\" or \"required\"".into()))
                            }
                        };
                        let refs = match a.get("tools") {
                            Some(Value::Array(refs)) => refs,
                            _ => return Err(bad("allowed_tools.tools must be a list".into())),
                        };
                        let tools = refs
                            .iter()
                            .enumerate()
                            .map(|(index, r)| ToolRef::parse(r, index))
                            .collect::<Result<_, _>>()?;
                        Ok(ToolChoice::AllowedTools { mode, tools })
                    }
                    _ => Ok(ToolChoice::Builtin { kind, name: opt_str(obj, "", "name").map_err(bad)? }),
                }
            }
            other => Err(bad(format!("expected a string or an object, got {}", json_type(other)))),
        }
    }

    /// The choice in the OpenAI shape.
    pub fn to_json(&self) -> Value {
        match self {
            ToolChoice::None => "none".into(),
            ToolChoice::Auto => "auto".into(),
            ToolChoice::Required => "required".into(),
            ToolChoice::Function { name } => json!({"type": "function", "function": {"name": name}}),
            ToolChoice::Builtin { kind, name } => builtin_ref_json(kind, name),
            ToolChoice::AllowedTools { mode, tools } => json!({
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": match mode { AllowedMode::Auto => "auto", AllowedMode::Required => "required" },
                    "tools": tools.iter().map(ToolRef::to_json).collect::<Vec<_>>(),
                }
            }),
        }
    }
}

impl TryFrom<Value> for ToolChoice {
    type Error = ToolError;
    fn try_from(value: Value) -> Result<Self, ToolError> {
        ToolChoice::from_json(&value)
    }
}

impl From<ToolChoice> for Value {
    fn from(c: ToolChoice) -> Value {
        c.to_json()
    }
}

impl ToolRef {
    fn parse(value: &Value, index: usize) -> Result<ToolRef, ToolError> {
        let bad = |reason: String| ToolError::MalformedToolChoice {
            reason: format!("allowed_tools.tools[{index}]: {reason}"),
        };
        let obj =
            value.as_object().ok_or_else(|| bad(format!("expected an object, got {}", json_type(value))))?;
        let kind = req_str(obj, "", "type").map_err(bad)?;
        if kind == "function" {
            if matches!(obj.get("function"), None | Some(Value::Null)) {
                return Err(ToolError::AllowedFunctionWithoutName { index });
            }
            Ok(ToolRef::Function { name: function_name(obj).map_err(bad)? })
        } else {
            Ok(ToolRef::Builtin { kind, name: opt_str(obj, "", "name").map_err(bad)? })
        }
    }

    fn to_json(&self) -> Value {
        match self {
            ToolRef::Function { name } => json!({"type": "function", "function": {"name": name}}),
            ToolRef::Builtin { kind, name } => builtin_ref_json(kind, name),
        }
    }
}

fn builtin_ref_json(kind: &str, name: &Option<String>) -> Value {
    match name {
        Some(n) => json!({"type": kind, "name": n}),
        None => json!({"type": kind}),
    }
}

/// `function.name` of a named reference.
fn function_name(obj: &Map<String, Value>) -> Result<String, String> {
    match obj.get("function") {
        Some(Value::Object(f)) => req_str(f, "function.", "name"),
        Some(other) => Err(format!("`function` must be an object, got {}", json_type(other))),
        None => Err("a choice of type `function` needs a `function` object with a `name`".into()),
    }
}

// The helpers below name the field as `path` + `key` (`function.name`), and say what it
// must be and what it is.

fn req_str(obj: &Map<String, Value>, path: &str, key: &str) -> Result<String, String> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("`{path}{key}` must be a string, got {}", json_type(other))),
        None => Err(format!("`{path}{key}` is missing")),
    }
}

fn opt_str(obj: &Map<String, Value>, path: &str, key: &str) -> Result<Option<String>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("`{path}{key}` must be a string or null, got {}", json_type(other))),
    }
}

/// `parameters`: a JSON-schema object or null (XGrammar's `Optional[Dict[str, Any]]`).
fn opt_schema(obj: &Map<String, Value>, path: &str, key: &str) -> Result<Option<Map<String, Value>>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o.clone())),
        Some(other) => {
            Err(format!("`{path}{key}` must be a JSON-schema object or null, got {}", json_type(other)))
        }
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
