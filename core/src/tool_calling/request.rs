//! An OpenAI chat request's `tools`, `tool_choice`, `parallel_tool_calls` and
//! `response_format` → the constraint that enforces exactly them.
//!
//! | request | constraint |
//! |---|---|
//! | no tools, or `tool_choice: "none"`; `response_format` absent or `text` | none |
//! | `response_format: json_object` | any JSON object |
//! | `response_format: json_schema {name, schema, strict}` | the schema, exactly; `strict: false` allows members the schema does not declare where JSON Schema allows them |
//! | `response_format: structural_tag` (vLLM's and SGLang's shape: `{"type": "structural_tag", "format": …}` or `structures` + `triggers`) | the tag |
//! | tools with `auto` | the family's preset: free text, calls, or both |
//! | tools with `required` | the preset: at least one call |
//! | tools with a named function (or builtin) | the preset: that call only |
//!
//! Tools together with a non-text `response_format` are refused
//! ([`RequestError::ToolsWithResponseFormat`]): the presets write free text between calls,
//! and a JSON answer *or* calls is a language no family's tag describes.
//!
//! ```
//! use grammask::tool_calling::{chat_constraint, tools_from_json, ChatConstraint, Family, PresetOptions, ResponseFormat};
//! use serde_json::json;
//! let tools = tools_from_json(&json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]))?;
//! let c = chat_constraint(Some(Family::Hermes), &tools, &PresetOptions::default(), None)?;
//! assert!(matches!(c, ChatConstraint::Tools { .. }));
//! let rf = ResponseFormat::from_json(&json!({"type": "json_object"}))?;
//! let c = chat_constraint(None, &[], &PresetOptions::default(), Some(&rf))?;
//! assert!(matches!(c, ChatConstraint::Spec(grammask::GrammarSpec::JsonSchema { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::{
    model_structural_tag, normalize_tool_choice, Family, Preset, PresetOptions, Tool, ToolChoice, ToolError,
};
use crate::{GrammarSpec, JsonSchemaOptions};
use serde::Deserialize;
use serde_json::{Map, Value};

/// OpenAI's `response_format`, as sent to `/v1/chat/completions` (plus the structural
/// tag that vLLM and SGLang accept there).
///
/// ```
/// use grammask::tool_calling::ResponseFormat;
/// let f: ResponseFormat = serde_json::from_str(
///     r#"{"type": "json_schema", "json_schema": {"name": "point", "strict": true,
///         "schema": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}}"#,
/// )?;
/// assert!(f.to_spec().is_some());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text: no constraint.
    Text,
    /// Any JSON object.
    JsonObject,
    /// A JSON document valid against a schema.
    JsonSchema {
        /// The schema and its name.
        json_schema: JsonSchemaFormat,
    },
    /// A structural tag: `{"type": "structural_tag", "format": …}` or the older
    /// `structures` + `triggers` form.
    StructuralTag {
        /// The document's members besides `type`.
        #[serde(flatten)]
        tag: Map<String, Value>,
    },
}

/// The `json_schema` member of [`ResponseFormat::JsonSchema`].
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct JsonSchemaFormat {
    /// The schema's name (reported, not enforced).
    pub name: String,
    /// Optional description (not enforced).
    #[serde(default)]
    pub description: Option<String>,
    /// The schema; absent means any JSON value.
    #[serde(default)]
    pub schema: Option<Value>,
    /// OpenAI's strict mode. grammask always enforces the schema exactly; with `strict`
    /// false, members the schema does not declare are allowed where JSON Schema allows them.
    #[serde(default)]
    pub strict: Option<bool>,
}

impl ResponseFormat {
    /// Reads a `response_format` value; errors name what is wrong.
    pub fn from_json(v: &Value) -> Result<ResponseFormat, RequestError> {
        ResponseFormat::deserialize(v).map_err(|e| RequestError::ResponseFormat(e.to_string()))
    }

    /// The grammask spec; `None` for free text.
    pub fn to_spec(&self) -> Option<GrammarSpec> {
        match self {
            ResponseFormat::Text => None,
            // Any JSON object: the schema says exactly that, and object-ness is enforced.
            ResponseFormat::JsonObject => Some(GrammarSpec::json_schema(r#"{"type":"object"}"#)),
            ResponseFormat::JsonSchema { json_schema } => Some(match &json_schema.schema {
                None => GrammarSpec::BuiltinJson,
                Some(schema) => GrammarSpec::JsonSchema {
                    schema: schema.to_string(),
                    options: JsonSchemaOptions {
                        strict: json_schema.strict != Some(false),
                        ..JsonSchemaOptions::default()
                    },
                },
            }),
            ResponseFormat::StructuralTag { tag } => {
                let mut doc = Map::new();
                doc.insert("type".into(), Value::String("structural_tag".into()));
                doc.extend(tag.iter().map(|(k, v)| (k.clone(), v.clone())));
                Some(GrammarSpec::StructuralTag(Value::Object(doc).to_string()))
            }
        }
    }

    fn name(&self) -> &'static str {
        match self {
            ResponseFormat::Text => "text",
            ResponseFormat::JsonObject => "json_object",
            ResponseFormat::JsonSchema { .. } => "json_schema",
            ResponseFormat::StructuralTag { .. } => "structural_tag",
        }
    }
}

/// Why a request's fields cannot become a constraint.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// `tools` / `tool_choice` are not valid (see [`ToolError`]).
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// `response_format` is malformed (serde's message says where).
    #[error("response_format: {0}")]
    ResponseFormat(String),
    /// Tools are enabled and `response_format` asks for structured content too.
    #[error(
        "`tools` (with tool_choice other than \"none\") cannot be combined with a `{0}` response_format"
    )]
    ToolsWithResponseFormat(&'static str),
    /// Tools are enabled but the model's tool-calling family is unknown.
    #[error("the request has tools but the model's tool-calling family is unknown (configure it, or use a chat template grammask recognises)")]
    UnknownFamily,
}

/// The constraint for a chat request.
#[derive(Debug, Clone)]
pub enum ChatConstraint {
    /// Generate freely.
    None,
    /// A `response_format` constraint.
    Spec(GrammarSpec),
    /// Tool calling: the preset's structural tag, and the preset to read the output back
    /// with ([`super::OutputParser`]).
    Tools {
        /// `GrammarSpec::StructuralTag` of the preset.
        spec: GrammarSpec,
        /// The preset.
        preset: Preset,
    },
}

/// The constraint enforcing a chat request's tools and response format; `family` is the
/// model's tool-calling family (needed only when tools are enabled).
pub fn chat_constraint(
    family: Option<Family>,
    tools: &[Tool],
    options: &PresetOptions,
    response_format: Option<&ResponseFormat>,
) -> Result<ChatConstraint, RequestError> {
    let tools_on = !tools.is_empty() && options.tool_choice != ToolChoice::None;
    if tools_on {
        if let Some(rf) = response_format.filter(|rf| **rf != ResponseFormat::Text) {
            return Err(RequestError::ToolsWithResponseFormat(rf.name()));
        }
        let family = family.ok_or(RequestError::UnknownFamily)?;
        let preset = model_structural_tag(family, tools, options)?;
        return Ok(ChatConstraint::Tools {
            spec: GrammarSpec::StructuralTag(preset.structural_tag.to_string()),
            preset,
        });
    }
    // `required` or a named choice with no tools is an error even though nothing is
    // enabled: the client asked for a call that cannot happen.
    normalize_tool_choice(tools, &options.tool_choice)?;
    Ok(match response_format.and_then(ResponseFormat::to_spec) {
        None => ChatConstraint::None,
        Some(spec) => ChatConstraint::Spec(spec),
    })
}
