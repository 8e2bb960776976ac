//! What a request asks for → a grammask [`GrammarSpec`].
//!
//! Two vocabularies of constraints reach a mistral.rs user: mistral.rs's own
//! [`Constraint`] (regex, JSON Schema, Lark, llguidance grammars) and OpenAI's
//! `response_format`. Both map here, before the request is sent, so that anything grammask
//! cannot express is an [`Error`] at build time.

use crate::error::Error;
use grammask::{GrammarSpec, JsonSchemaOptions};
use mistralrs::Constraint;
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
