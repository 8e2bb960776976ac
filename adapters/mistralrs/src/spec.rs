//! What a request asks for → a grammask [`GrammarSpec`].
//!
//! Two vocabularies of constraints reach a mistral.rs user: mistral.rs's own
//! [`Constraint`] (regex, JSON Schema, Lark, llguidance grammars) and OpenAI's
//! `response_format`. Both map here, before the request is sent, so that anything grammask
//! cannot express is an [`Error`] at build time.

use crate::error::Error;
use grammask::{GrammarSpec, JsonSchemaOptions};
use mistralrs::Constraint;
use serde::Deserialize;
use serde_json::Value;

/// The grammask spec for a mistral.rs constraint; `None` for `Constraint::None`.
///
/// - `Regex(r)`: the whole output matches `r`, in Rust `regex` syntax as llguidance reads
///   it (through grammask's Lark front-end, whose `/…/` terminals use that syntax).
/// - `JsonSchema(s)`: a JSON document valid against `s` (grammask's strict defaults: members
///   a schema does not declare are not generated).
/// - `Lark(text)`: llguidance's Lark dialect (grammask's Lark front-end).
/// - `Llguidance(g)`: a top-level grammar with exactly one grammar, given as a Lark grammar
///   or a JSON schema; several grammars (llguidance's `@sub` references) are refused.
///
/// ```
/// use grammask_mistralrs::spec_from_constraint;
/// use mistralrs::Constraint;
/// let spec = spec_from_constraint(&Constraint::Regex("[0-9]+".into()))?;
/// assert!(spec.is_some());
/// assert!(spec_from_constraint(&Constraint::None)?.is_none());
/// # Ok::<(), grammask_mistralrs::Error>(())
/// ```
pub fn spec_from_constraint(c: &Constraint) -> Result<Option<GrammarSpec>, Error> {
    Ok(Some(match c {
        Constraint::None => return Ok(None),
        Constraint::Regex(r) => regex_spec(r),
        Constraint::JsonSchema(s) => json_schema_spec(s),
        Constraint::Lark(text) => GrammarSpec::Lark(text.clone()),
        Constraint::Llguidance(top) => {
            let [g] = top.grammars.as_slice() else {
                return Err(Error::Unsupported(format!(
                    "an llguidance grammar with {} sub-grammars (grammask takes exactly one)",
                    top.grammars.len()
                )));
            };
            if top.max_tokens.is_some() {
                return Err(Error::Unsupported(
                    "llguidance `max_tokens` (set the request's max_len instead)".into(),
                ));
            }
            match (&g.json_schema, &g.lark_grammar) {
                (Some(s), None) => json_schema_spec(s),
                (None, Some(l)) => GrammarSpec::Lark(l.clone()),
                _ => {
                    return Err(Error::Unsupported(
                        "an llguidance grammar must give exactly one of json_schema and lark_grammar".into(),
                    ))
                }
            }
        }
    }))
}

/// llguidance reads a mistral.rs regex as the Lark grammar `start: /r/`; so does grammask.
fn regex_spec(r: &str) -> GrammarSpec {
    GrammarSpec::Lark(format!("start: /{}/", r.replace('/', "\\/")))
}

fn json_schema_spec(schema: &Value) -> GrammarSpec {
    GrammarSpec::JsonSchema { schema: schema.to_string(), options: JsonSchemaOptions::default() }
}

/// OpenAI's `response_format`, as sent to `/v1/chat/completions`.
///
/// ```
/// use grammask_mistralrs::ResponseFormat;
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
    /// The grammask spec; `None` for free text.
    pub fn to_spec(&self) -> Option<GrammarSpec> {
        match self {
            ResponseFormat::Text => None,
            // Any JSON object: the schema says exactly that, and object-ness is enforced.
            ResponseFormat::JsonObject => Some(json_schema_spec(&serde_json::json!({"type": "object"}))),
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
        }
    }
}
