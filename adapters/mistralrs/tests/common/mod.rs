//! Shared by the adapter's tests: tiny random-weight Llama models written on the fly, the
//! MaskBench corpus, and a recorder of the contexts mistral.rs hands processors.
#![allow(dead_code)]

use mistralrs::{CustomLogitsProcessor, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data")
}

/// A small deterministic generator (the weights must be the same on every run).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-scale, scale).
    pub fn f32(&mut self, scale: f32) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }
}

/// The shape of a tiny Llama.
pub struct TinyLlama {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub intermediate: usize,
    /// lm_head rows; may exceed the tokenizer (padding).
    pub vocab: usize,
    pub seed: u64,
}

/// Writes config.json, model.safetensors, tokenizer.json, tokenizer_config.json (copied from
/// `../shared/data/tokenizers/<tokenizer>`) into `dir`, and returns `dir`.
pub fn write_tiny_llama(dir: &Path, tokenizer: &str, m: &TinyLlama) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let src = data_dir().join("tokenizers").join(tokenizer);
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let head_dim = m.hidden / m.heads;
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": m.hidden,
        "intermediate_size": m.intermediate,
        "vocab_size": m.vocab,
        "num_hidden_layers": m.layers,
        "num_attention_heads": m.heads,
        "num_key_value_heads": m.kv_heads,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": false,
        "torch_dtype": "float32"
    });
    std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    let mut rng = Rng(m.seed | 1);
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    let dev = mistralrs::Device::Cpu;
    let mut put = |name: String, shape: (usize, usize), scale: f32| {
        let data: Vec<f32> = (0..shape.0 * shape.1).map(|_| rng.f32(scale)).collect();
        tensors.insert(name, Tensor::from_vec(data, shape, &dev).unwrap());
    };
    // Large enough that the logits are peaked (a random model that prefers some tokens
    // strongly is harsher than a uniform one), small enough to stay finite.
    put("model.embed_tokens.weight".into(), (m.vocab, m.hidden), 1.0);
    put("lm_head.weight".into(), (m.vocab, m.hidden), 1.0);
    for i in 0..m.layers {
        let p = format!("model.layers.{i}");
        put(format!("{p}.self_attn.q_proj.weight"), (m.heads * head_dim, m.hidden), 0.2);
        put(format!("{p}.self_attn.k_proj.weight"), (m.kv_heads * head_dim, m.hidden), 0.2);
        put(format!("{p}.self_attn.v_proj.weight"), (m.kv_heads * head_dim, m.hidden), 0.2);
        put(format!("{p}.self_attn.o_proj.weight"), (m.hidden, m.heads * head_dim), 0.2);
        put(format!("{p}.mlp.gate_proj.weight"), (m.intermediate, m.hidden), 0.2);
        put(format!("{p}.mlp.up_proj.weight"), (m.intermediate, m.hidden), 0.2);
        put(format!("{p}.mlp.down_proj.weight"), (m.hidden, m.intermediate), 0.2);
    }
    let ones = |n: usize| Tensor::from_vec(vec![1f32; n], n, &dev).unwrap();
    for i in 0..m.layers {
        tensors.insert(format!("model.layers.{i}.input_layernorm.weight"), ones(m.hidden));
        tensors.insert(format!("model.layers.{i}.post_attention_layernorm.weight"), ones(m.hidden));
    }
    tensors.insert("model.norm.weight".into(), ones(m.hidden));
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
    dir.to_path_buf()
}

/// A scratch directory under the target folder, unique to this test run.
pub fn scratch(name: &str) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let d = base.join(format!("grammask-mistralrs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A processor placed before grammask's that records every context it sees (so the test
/// sees the token ids mistral.rs generated) and adds `bias` to the logits of `boosted`
/// tokens. Boosting the tokens that close strings, objects and arrays makes a random model
/// finish its documents within `max_len`, and makes it harsher: without the mask it would
/// close structures everywhere.
#[derive(Default)]
pub struct Recorder {
    pub contexts: Mutex<Vec<Vec<u32>>>,
    boosted: Vec<u32>,
    bias: f32,
}

impl CustomLogitsProcessor for Recorder {
    fn apply(&self, logits: &Tensor, context: &[u32]) -> candle_core::Result<Tensor> {
        self.contexts.lock().unwrap().push(context.to_vec());
        if self.boosted.is_empty() {
            return Ok(logits.clone());
        }
        let mut v: Vec<f32> = logits.to_vec1()?;
        for &id in &self.boosted {
            if let Some(x) = v.get_mut(id as usize) {
                *x += self.bias;
            }
        }
        let n = v.len();
        Tensor::from_vec(v, n, logits.device())
    }
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A recorder that boosts tokens holding any of `closers`, and the stop tokens.
    pub fn boosting(tok: &grammask::TokenizerInfo, closers: &[u8], bias: f32) -> Arc<Self> {
        let boosted = (0..tok.tokenizer_size() as u32)
            .filter(|&id| {
                tok.stop_tokens().contains(&id)
                    || (!tok.is_special(id) && tok.token_bytes(id).iter().any(|b| closers.contains(b)))
            })
            .collect();
        Arc::new(Self { contexts: Mutex::default(), boosted, bias })
    }

    /// Each context's generated ids (the prompt is the shortest context).
    pub fn generated(&self) -> Vec<Vec<u32>> {
        let c = self.contexts.lock().unwrap();
        let prompt = c.iter().map(Vec::len).min().unwrap_or(0);
        c.iter().map(|x| x[prompt..].to_vec()).collect()
    }
}

/// MaskBench files of the dev splits, every `step`-th one of each split, sorted by name.
pub fn maskbench_sample(step: usize) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    for split in ["Github_easy", "Github_medium", "Glaiveai2K", "Kubernetes"] {
        let dir = data_dir().join("jsonschemabench/dev").join(split);
        let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files.iter().step_by(step) {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            out.push((name, v["schema"].clone()));
        }
    }
    out
}
