//! Guessing a model's tool-calling family from its chat template.
//!
//! A chat template writes the model's own tool-call syntax when it renders earlier calls
//! back into the prompt, so the markers it contains name the family. The checks go from
//! the most specific marker to the most generic (`<tool_call>` alone is Hermes, but
//! Qwen 3, Qwen 3 Coder, MiMo, GLM and EXAONE use it too, with more beside it).
//!
//! Some families cannot be told apart by their template text alone: Qwen 3.5 and MiMo
//! write calls like Qwen 3 Coder (`<function=…>` with XML parameters), so a template with
//! `<function=` and a think block is read as Qwen 3.5 and without one as Qwen 3 Coder;
//! pass the family explicitly for MiMo.
//!
//! ```
//! use grammask::tool_calling::Family;
//! let template = "{%- for tool_call in message.tool_calls %}<tool_call>\n{\"name\": \"{{ tool_call.name }}\"}</tool_call>{%- endfor %}<think>\n";
//! assert_eq!(Family::detect(template), Some(Family::Qwen3));
//! assert_eq!(Family::detect("{{ bos_token }}{{ message['content'] }}"), None);
//! ```

use super::Family;
use serde_json::Value;

/// Why a `tokenizer_config.json` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DetectError {
    /// The file is not JSON.
    #[error("tokenizer_config.json is not JSON: {0}")]
    Json(String),
    /// `chat_template` is neither a string nor a list of `{name, template}`.
    #[error("`chat_template` at {0} is neither a string nor a list of {{name, template}} objects")]
    Template(&'static str),
}

impl Family {
    /// The family whose tool-call markers `template` (a Jinja chat template) contains,
    /// or `None` when it shows no tool-call syntax grammask knows.
    pub fn detect(template: &str) -> Option<Family> {
        let has = |s: &str| template.contains(s);
        let think = has("<think>") || has("</think>");
        // Markers unique to one family, most specific first.
        let unique: &[(&str, Family)] = &[
            ("<|channel|>", Family::Harmony),
            ("]<]minimax[>[", Family::MinimaxM3),
            ("<minimax:tool_call>", Family::Minimax),
            ("<|open|>", Family::KimiK3),
            ("<|tool_calls_section_begin|>", Family::Kimi),
            ("｜DSML｜ ", Family::DeepseekV4_1),
            ("｜DSML｜tool_calls", Family::DeepseekV4),
            ("｜DSML｜function_calls", Family::DeepseekV3_2),
            ("<cofl:", Family::Cohere),
            ("<|START_THINKING|>", Family::Cohere),
            ("<|tool_call>", Family::Gemma4),
            ("<arg_key>", Family::Glm4_7),
            ("[TOOL_CALLS]", Family::Mistral),
        ];
        if let Some((_, f)) = unique.iter().find(|(m, _)| has(m)) {
            return Some(*f);
        }
        if has("<｜tool▁calls▁begin｜>") {
            // R1 writes `function<｜tool▁sep｜>name` and a ```json fence; V3.1 neither.
            return Some(if has("```json") { Family::DeepseekR1 } else { Family::DeepseekV3_1 });
        }
        if has("<tool_call>") {
            return Some(if has("<function=") {
                if think {
                    Family::Qwen3_5
                } else {
                    Family::Qwen3Coder
                }
            } else if has("[|assistant|]") || has("[|system|]") {
                Family::Exaone
            } else if think {
                Family::Qwen3
            } else {
                Family::Hermes
            });
        }
        if has("<|start_header_id|>") || has("<|python_tag|>") {
            return Some(Family::Llama);
        }
        None
    }

    /// [`Family::detect`] on a `tokenizer_config.json`'s `chat_template` (a string, or a
    /// list of named templates: `tool_use` is preferred, then `default`, then the first).
    /// `Ok(None)`: no template, or no known tool-call syntax in it.
    pub fn detect_from_tokenizer_config(json: &str) -> Result<Option<Family>, DetectError> {
        let config: Value = serde_json::from_str(json).map_err(|e| DetectError::Json(e.to_string()))?;
        let template = match config.get("chat_template") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(s)) => s.as_str(),
            Some(Value::Array(items)) => {
                let named =
                    |name: &str| items.iter().find(|t| t.get("name").and_then(Value::as_str) == Some(name));
                let chosen = named("tool_use").or_else(|| named("default")).or_else(|| items.first());
                match chosen.map(|t| t.get("template").and_then(Value::as_str)) {
                    None => return Ok(None),
                    Some(Some(s)) => s,
                    Some(None) => return Err(DetectError::Template("/chat_template/*/template")),
                }
            }
            Some(_) => return Err(DetectError::Template("/chat_template")),
        };
        Ok(Family::detect(template))
    }
}
