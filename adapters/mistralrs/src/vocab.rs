//! The model's vocabulary and stop set, as mistral.rs will see them.
//!
//! A grammar's mask allows the model's stop tokens exactly when the document may end, and
//! only them once it has ended; mistral.rs then ends the sequence when it samples one. The
//! two must agree on what a stop token is: a token the mask allows at the end that mistral.rs
//! does not stop on would leave the sequence running with nothing else allowed until
//! `max_len`. So the stop set is computed the way mistral.rs 0.8.1 computes its own
//! (`calculate_eos_tokens`): the EOS token of `tokenizer_config.json` (or of the GGUF file),
//! chat-template turn enders (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, …) that are in
//! the vocabulary *and* used by the template, and `generation_config.json`'s
//! `eos_token_id`s — plus any ids the user adds.

use crate::error::Error;
use grammask::tokenizer::GgufTokenizer;
use grammask::{TokenizerInfo, TokenizerOptions};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// Turn enders mistral.rs 0.8.1 treats as EOS when the chat template uses them.
const TEMPLATE_STOPS: &[&str] = &[
    "<|im_end|>",
    "<end_of_turn>",
    "<|end_of_text|>",
    "<|end|>",
    "<|eot_id|>",
    "<|message|>",
    "<|start|>",
    "<|channel|>",
];

/// A model's vocabulary with the stop set mistral.rs uses.
#[derive(Debug, Clone)]
pub struct ModelVocab {
    tokenizer: Arc<TokenizerInfo>,
}

/// Where the stop set came from, before ids are resolved.
#[derive(Debug, Default)]
struct StopSources {
    eos: Option<String>,
    templates: Vec<String>,
    generation_ids: Vec<u32>,
}

impl ModelVocab {
    /// From a Hugging Face model folder: `tokenizer.json`, and when present
    /// `tokenizer_config.json` (EOS token, chat template; else `chat_template.jinja` or
    /// `chat_template.json`), `generation_config.json` (`eos_token_id`) and `config.json`
    /// (`vocab_size`, when the lm_head is wider than the tokenizer). A chat template given to
    /// mistral.rs some other way (`with_chat_template`, `with_jinja_explicit`) is not seen
    /// here: pass its turn enders as `extra_stop_ids`.
    pub fn from_model_dir(dir: impl AsRef<Path>, extra_stop_ids: &[u32]) -> Result<Self, Error> {
        let dir = dir.as_ref();
        let tokenizer_path = dir.join("tokenizer.json");
        let tok = tokenizers::Tokenizer::from_file(&tokenizer_path).map_err(|e| Error::ModelFile {
            path: tokenizer_path.display().to_string(),
            what: e.to_string(),
        })?;
        let mut sources = StopSources::default();
        if let Some(config) = read_json(&dir.join("tokenizer_config.json"))? {
            sources.eos = token_string(config.get("eos_token"));
            collect_templates(config.get("chat_template"), &mut sources.templates);
        }
        // One template, as mistral.rs picks it: tokenizer_config.json's, else a separate file.
        if sources.templates.is_empty() {
            if let Ok(t) = std::fs::read_to_string(dir.join("chat_template.jinja")) {
                sources.templates.push(t);
            } else if let Some(t) = read_json(&dir.join("chat_template.json"))? {
                collect_templates(t.get("chat_template"), &mut sources.templates);
            }
        }
        if let Some(g) = read_json(&dir.join("generation_config.json"))? {
            sources.generation_ids = ids_of(g.get("eos_token_id"));
        }
        let vocab_size = read_json(&dir.join("config.json"))?
            .and_then(|c| c.get("vocab_size").and_then(Value::as_u64))
            .map(|v| v as usize);
        let stops = sources.resolve(|s| tok.token_to_id(s), extra_stop_ids);
        let tokenizer_size = tok.get_vocab_size(true);
        let options = TokenizerOptions {
            vocab_size: vocab_size.filter(|&v| v > tokenizer_size),
            stop_tokens: Some(stops),
            ..Default::default()
        };
        let info = TokenizerInfo::from_hf(&tok, None, &options)?;
        Ok(Self { tokenizer: Arc::new(info) })
    }

    /// From the vocabulary embedded in a GGUF file (what mistral.rs's GGUF loader uses when
    /// no `tokenizer.json` is given): its EOS id and the turn enders its chat template uses.
    /// Only the file's own metadata is read; a tokenizer_config or generation_config given to
    /// mistral.rs beside the GGUF is not: pass their ids as `extra_stop_ids`.
    ///
    /// mistral.rs 0.8.1 registers every GGUF token whose type is not "normal" as a special
    /// token and drops special tokens from the text it returns; grammask treats byte
    /// (`<0x0A>`) and user-defined tokens as text. With a SentencePiece (`llama`) GGUF a
    /// document that needs a byte token (a newline, say) is therefore generated correctly but
    /// returned without it by mistral.rs; byte-level (`gpt2`) vocabularies such as SmolLM2's
    /// have no byte tokens.
    pub fn from_gguf(path: impl AsRef<Path>, extra_stop_ids: &[u32]) -> Result<Self, Error> {
        let gguf = GgufTokenizer::read(path)?;
        let mut sources = StopSources::default();
        sources.templates.extend(gguf.chat_template().map(str::to_string));
        let mut stops = sources.resolve(|s| gguf.token_id(s), extra_stop_ids);
        stops.extend(gguf.eos_token_id());
        let options = TokenizerOptions { stop_tokens: Some(stops), ..Default::default() };
        Ok(Self { tokenizer: Arc::new(gguf.to_tokenizer_info(&options)?) })
    }

    /// An already-built [`TokenizerInfo`], whose stop tokens must be the ones the engine
    /// stops on.
    pub fn from_tokenizer_info(tokenizer: Arc<TokenizerInfo>) -> Self {
        Self { tokenizer }
    }

    /// The vocabulary.
    pub fn tokenizer(&self) -> &Arc<TokenizerInfo> {
        &self.tokenizer
    }

    /// The stop set: allowed exactly when the grammar can end.
    pub fn stop_tokens(&self) -> &[u32] {
        self.tokenizer.stop_tokens()
    }
}

impl StopSources {
    fn resolve(&self, id_of: impl Fn(&str) -> Option<u32>, extra: &[u32]) -> Vec<u32> {
        let mut ids: Vec<u32> = self.eos.as_deref().and_then(&id_of).into_iter().collect();
        for s in TEMPLATE_STOPS {
            if self.templates.iter().any(|t| t.contains(s)) {
                ids.extend(id_of(s));
            }
        }
        ids.extend(&self.generation_ids);
        ids.extend(extra);
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

fn read_json(path: &Path) -> Result<Option<Value>, Error> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::ModelFile { path: path.display().to_string(), what: e.to_string() }),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::ModelFile { path: path.display().to_string(), what: e.to_string() })
}

/// `"</s>"` or `{"content": "</s>", …}`.
fn token_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        obj => obj.get("content")?.as_str().map(str::to_string),
    }
}

/// A template string, or a list of `{name, template}`.
fn collect_templates(v: Option<&Value>, out: &mut Vec<String>) {
    match v {
        Some(Value::String(s)) => out.push(s.clone()),
        Some(Value::Array(items)) => {
            out.extend(items.iter().filter_map(|i| i.get("template")?.as_str().map(str::to_string)))
        }
        _ => {}
    }
}

/// An id or a list of ids.
fn ids_of(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()).into_iter().collect(),
        Some(Value::Array(a)) => {
            a.iter().filter_map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok())).collect()
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_sources_follow_mistralrs() {
        let s = StopSources {
            eos: Some("</s>".into()),
            templates: vec!["{{ '<|im_end|>' }}".into()],
            generation_ids: vec![9],
        };
        let id = |t: &str| match t {
            "</s>" => Some(2),
            "<|im_end|>" => Some(5),
            "<|eot_id|>" => Some(6),
            _ => None,
        };
        // <|eot_id|> is in the vocabulary but not in the template: not a stop.
        assert_eq!(s.resolve(id, &[3]), vec![2, 3, 5, 9]);
        assert_eq!(ids_of(Some(&serde_json::json!([1, 2]))), vec![1, 2]);
        assert_eq!(ids_of(Some(&serde_json::json!(7))), vec![7]);
        assert_eq!(token_string(Some(&serde_json::json!({"content": "<eos>"}))), Some("<eos>".into()));
    }
}
