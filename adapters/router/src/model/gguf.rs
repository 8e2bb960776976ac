//! A real model: a Llama-family GGUF (SmolLM2-135M-Instruct, Llama 3.x, …) run by
//! grammask's own forward on the CPU ([`super::llama`]): every row of a step — prompts,
//! decode tokens, draft trees to verify — in one forward, each weight block read once for
//! all of them.
//!
//! [`hf_tokenizer_from_gguf`] builds the Hugging Face tokenizer (and a
//! `tokenizer_config.json` with the chat template and special tokens) from the same
//! file's metadata, so `--gguf PATH` alone serves the model.

use super::llama::{Llama, WeightFormat};
use super::{Forward, ForwardRow, Model, ModelError, StepLogits};
use crate::step::SeqId;
use candle_core::quantized::gguf_file;
use serde_json::{json, Map, Value};
use std::path::Path;

fn err(what: &str) -> impl FnOnce(candle_core::Error) -> ModelError + '_ {
    move |e| ModelError(format!("{what}: {e}"))
}

/// Most positions a sequence may hold, whatever the file says (its keys and values take
/// 2 × layers × kv heads × head size × 4 bytes per position: 46 KB for SmolLM2-135M).
pub const MAX_CONTEXT: usize = 8192;

/// Most draft nodes a row may carry.
const MAX_DRAFT_NODES: usize = 64;

/// A real model: a Llama-family GGUF (SmolLM2-135M-Instruct, Llama 3.x, …) run by
/// grammask's own forward on the CPU.
pub struct GgufModel {
    llama: Llama,
    logits: Vec<f32>,
    name: String,
    /// What `/info` says of its numbers ([`Model::dtype`]).
    dtype: String,
}

impl std::fmt::Debug for GgufModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufModel").field("name", &self.name).field("llama", &self.llama).finish()
    }
}

impl GgufModel {
    /// Loads the GGUF file at `path` (architecture `llama`: Llama 1–3, SmolLM, Mistral 7B),
    /// its weights as the file has them.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        Self::load_as(path, WeightFormat::Quantized)
    }

    /// [`load`](Self::load), the weights held as `format` says.
    pub fn load_as(path: &Path, format: WeightFormat) -> Result<Self, ModelError> {
        let mut file =
            std::fs::File::open(path).map_err(|e| ModelError(format!("{}: {e}", path.display())))?;
        let content = gguf_file::Content::read(&mut file)
            .map_err(err(&format!("{}: not a GGUF file", path.display())))?;
        let arch = content
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        if arch != "llama" {
            return Err(ModelError(format!(
                "{}: architecture `{arch}`; this backend runs `llama` GGUFs (Llama, SmolLM, Mistral)",
                path.display()
            )));
        }
        // llama.cpp's `general.file_type`: the weights' type; candle computes in f32.
        let weights = match content.metadata.get("general.file_type").and_then(|v| v.to_u32().ok()) {
            Some(0) => "float32".to_string(),
            Some(1) => "float16".to_string(),
            Some(2) => "Q4_0".to_string(),
            Some(3) => "Q4_1".to_string(),
            Some(7) => "Q8_0".to_string(),
            Some(8) => "Q5_0".to_string(),
            Some(9) => "Q5_1".to_string(),
            Some(10) => "Q2_K".to_string(),
            Some(11..=13) => "Q3_K".to_string(),
            Some(14 | 15) => "Q4_K".to_string(),
            Some(16 | 17) => "Q5_K".to_string(),
            Some(18) => "Q6_K".to_string(),
            Some(n) => format!("GGUF file type {n}"),
            None => "unknown".to_string(),
        };
        let dtype = match format {
            WeightFormat::Quantized => format!("{weights} weights, float32 activations"),
            WeightFormat::F32 => format!("float32 (dequantized from {weights})"),
        };
        let name = content
            .metadata
            .get("general.name")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_else(|| path.display().to_string());
        let llama = Llama::load(&content, &mut file, format, MAX_CONTEXT)?;
        Ok(Self { llama, logits: Vec::new(), name, dtype })
    }

    /// Bytes the weight matrices take as held.
    pub fn weight_bytes(&self) -> usize {
        self.llama.weight_bytes()
    }
}

impl Model for GgufModel {
    fn vocab_size(&self) -> usize {
        self.llama.vocab()
    }

    fn forward(&mut self, rows: &[ForwardRow<'_>]) -> Result<Forward<'_>, ModelError> {
        let failed = self.llama.forward(rows, MAX_DRAFT_NODES, &mut self.logits);
        Ok(Forward { logits: StepLogits::Host(&mut self.logits), failed })
    }

    fn release(&mut self, id: SeqId) {
        self.llama.release(id);
    }

    fn max_draft_nodes(&self) -> usize {
        MAX_DRAFT_NODES
    }

    fn can_fork(&self) -> bool {
        true
    }

    fn commit(&mut self, id: SeqId, path: &[usize]) -> Result<(), ModelError> {
        self.llama.commit(id, path)
    }

    fn max_context(&self) -> Option<usize> {
        Some(self.llama.context())
    }

    fn dtype(&self) -> String {
        self.dtype.clone()
    }

    fn name(&self) -> String {
        format!("{} (GGUF, grammask's Llama forward, CPU)", self.name)
    }
}

/// The pre-tokenizer regex of Llama 3's tokenizer (`tokenizer.ggml.pre = llama-bpe`).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Builds the bytes of a Hugging Face `tokenizer.json` and a `tokenizer_config.json`
/// (chat template, BOS/EOS tokens) from a GGUF file's metadata.
///
/// Byte-level BPE vocabularies (`tokenizer.ggml.model = gpt2`: SmolLM, Llama 3,
/// Qwen, …) are supported; SentencePiece ones (`llama`: Llama 2, Mistral) keep their
/// merges implicit in scores, so for those pass the model's own `tokenizer.json`.
pub fn hf_tokenizer_from_gguf(path: &Path) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let content = gguf_file::Content::read(&mut file).map_err(|e| format!("{}: {e}", path.display()))?;
    let md = &content.metadata;
    let string = |k: &str| md.get(k).and_then(|v| v.to_string().ok()).cloned();
    let strings = |k: &str| -> Result<Vec<String>, String> {
        let v = md.get(k).ok_or_else(|| format!("{}: no `{k}` in the metadata", path.display()))?;
        let items = v.to_vec().map_err(|e| format!("{k}: {e}"))?;
        items.iter().map(|i| i.to_string().cloned().map_err(|e| format!("{k}: {e}"))).collect()
    };
    let model = string("tokenizer.ggml.model").unwrap_or_default();
    if model != "gpt2" {
        return Err(format!(
            "{}: GGUF tokenizer `{model}` (SentencePiece) cannot be rebuilt from its metadata; pass the \
             model's tokenizer.json with --tokenizer",
            path.display()
        ));
    }
    let tokens = strings("tokenizer.ggml.tokens")?;
    let merges = strings("tokenizer.ggml.merges")?;
    let types: Vec<i32> = match md.get("tokenizer.ggml.token_type").map(|v| v.to_vec()) {
        Some(Ok(items)) => items.iter().map(|i| i.to_i32().unwrap_or(1)).collect(),
        _ => Vec::new(),
    };
    let id = |k: &str| md.get(k).and_then(|v| v.to_u32().ok());
    let mut vocab = Map::new();
    let mut added = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        vocab.insert(t.clone(), json!(i));
        // 3: control, 4: user-defined (llama.cpp's token types).
        match types.get(i) {
            Some(3) => added.push(json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true})),
            Some(4) => added.push(json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": false})),
            _ => {}
        }
    }
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let pre_tokenizer = match string("tokenizer.ggml.pre").as_deref() {
        Some("llama-bpe") | Some("llama3") => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": false},
            byte_level(false)]}),
        Some("smollm") => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true}, byte_level(true)]}),
        _ => byte_level(true),
    };
    // A BOS token before a raw prompt where the file says so (`tokenizer.ggml.add_bos_token`,
    // as llama.cpp reads it); none when it says nothing.
    let add_bos = md.get("tokenizer.ggml.add_bos_token").and_then(|v| v.to_bool().ok()).unwrap_or(false);
    let bos = id("tokenizer.ggml.bos_token_id").and_then(|i| Some((i, tokens.get(i as usize)?.clone())));
    let post_processor = match (add_bos, bos) {
        (true, Some((i, t))) => json!({"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": t, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": t, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": t, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {t.clone(): {"id": t, "ids": [i], "tokens": [t]}}}),
        _ => Value::Null,
    };
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": Value::Object(vocab), "merges": merges},
    });
    let text = |i: Option<u32>| i.and_then(|i| tokens.get(i as usize)).cloned();
    let mut config = Map::new();
    if let Some(t) = string("tokenizer.chat_template") {
        config.insert("chat_template".into(), json!(t));
    }
    if let Some(t) = text(id("tokenizer.ggml.bos_token_id")) {
        config.insert("bos_token".into(), json!(t));
    }
    if let Some(t) = text(id("tokenizer.ggml.eos_token_id")) {
        config.insert("eos_token".into(), json!(t));
    }
    let to_bytes = |v: &Value| serde_json::to_vec(v).map_err(|e| e.to_string());
    Ok((to_bytes(&tokenizer)?, to_bytes(&Value::Object(config))?))
}
