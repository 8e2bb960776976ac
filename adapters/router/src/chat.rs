//! Chat templates: the model's own Jinja template (from `tokenizer_config.json`),
//! rendered with `minijinja` as Hugging Face's `apply_chat_template` does.

use minijinja::{Environment, Error as JinjaError, ErrorKind};
use serde_json::Value;

/// A compiled chat template and the special tokens it may name.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

/// The template is missing or does not render.
#[derive(Debug, thiserror::Error)]
#[error("chat template: {0}")]
pub struct ChatError(pub String);

fn token_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        // Older configs give `{"content": "<s>", ...}` objects.
        Some(Value::Object(o)) => o.get("content").and_then(Value::as_str).unwrap_or_default().to_string(),
        _ => String::new(),
    }
}

impl ChatTemplate {
    /// The template of a `tokenizer_config.json` (its `chat_template`, or the one named
    /// `default` of a list); `Ok(None)` when it has none.
    pub fn from_tokenizer_config(json: &str) -> Result<Option<Self>, ChatError> {
        let config: Value = serde_json::from_str(json).map_err(|e| ChatError(e.to_string()))?;
        let template = match config.get("chat_template") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(items)) => {
                let named = |n: &str| items.iter().find(|t| t.get("name").and_then(Value::as_str) == Some(n));
                match named("default").or_else(|| items.first()).and_then(|t| t.get("template")) {
                    Some(Value::String(s)) => s.clone(),
                    _ => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        Self::new(template, token_text(config.get("bos_token")), token_text(config.get("eos_token")))
            .map(Some)
    }

    /// A template from its source.
    pub fn new(template: String, bos_token: String, eos_token: String) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, JinjaError> {
            Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_template_owned("chat", template).map_err(|e| ChatError(e.to_string()))?;
        Ok(Self { env, bos_token, eos_token })
    }

    /// The prompt for `messages` (OpenAI's shape; content parts are joined) and
    /// `tools`, ending with the assistant's turn opened.
    pub fn render(&self, messages: &[Value], tools: Option<&[Value]>) -> Result<String, ChatError> {
        let messages: Vec<Value> = messages.iter().map(flatten_content).collect();
        let template = self.env.get_template("chat").map_err(|e| ChatError(e.to_string()))?;
        template
            .render(minijinja::context! {
                messages => messages,
                tools => tools,
                add_generation_prompt => true,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            })
            .map_err(|e| ChatError(e.to_string()))
    }
}

/// `content: [{type: "text", text}, …]` → one string, as templates expect text.
/// (Indexing a `Value` that is not an object panics: anything else is left as it is, for
/// the template to refuse.)
fn flatten_content(m: &Value) -> Value {
    let Value::Object(o) = m else { return m.clone() };
    let mut o = o.clone();
    if let Some(Value::Array(parts)) = o.get("content") {
        let text: String = parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect();
        o.insert("content".into(), Value::String(text));
    }
    if o.get("content").is_none_or(Value::is_null) {
        o.insert("content".into(), Value::String(String::new()));
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen3_template_renders_messages_and_tools() {
        let config = include_str!("../../../core/assets/qwen3-tokenizer_config.json");
        let t = ChatTemplate::from_tokenizer_config(config).unwrap().unwrap();
        let msgs = [serde_json::json!({"role": "user", "content": [{"type": "text", "text": "Hi"}]})];
        let p = t.render(&msgs, None).unwrap();
        assert!(
            p.contains("<|im_start|>user\nHi<|im_end|>") && p.ends_with("<|im_start|>assistant\n"),
            "{p}"
        );
        let tools = [serde_json::json!({"type": "function", "function": {"name": "f", "parameters": {}}})];
        let p = t.render(&msgs, Some(&tools)).unwrap();
        assert!(p.contains("<tools>") && p.contains("\"name\":\"f\""), "{p}");
    }
}
