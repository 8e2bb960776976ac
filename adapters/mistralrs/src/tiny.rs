//! Tiny random-weight Llama models for validity testing: a model whose only reason to
//! write a valid document is the grammar.
//!
//! [`write_tiny_llama`] writes `config.json`, `model.safetensors` and the tokenizer files
//! mistral.rs's loader reads (`TextModelBuilder::new(dir)`), with deterministic random
//! weights; [`Recorder`] is a processor to put before grammask's that records the contexts
//! mistral.rs hands processors (so a test sees the generated ids) and can push chosen
//! tokens up, which makes a random model finish its documents (and close structures
//! everywhere, were it not for the mask). The adapter's tests and the conformance suite
//! use both.

use candle_core::{Device, Tensor};
use mistralrs::CustomLogitsProcessor;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A failure writing a model.
pub type TinyError = Box<dyn std::error::Error + Send + Sync>;

/// A small deterministic generator (the weights are the same on every run).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits (xorshift64).
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [-scale, scale).
    pub fn f32(&mut self, scale: f32) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }
}

/// The shape of a tiny Llama.
#[derive(Debug, Clone)]
pub struct TinyLlama {
    /// Hidden size.
    pub hidden: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// MLP width.
    pub intermediate: usize,
    /// lm_head rows; may exceed the tokenizer (padding).
    pub vocab: usize,
    /// Seed of the weights.
    pub seed: u64,
}

/// Writes `config.json`, `model.safetensors`, and the given `tokenizer.json` and
/// `tokenizer_config.json` bytes into `dir` (created if needed); returns `dir`.
///
/// ```no_run
/// use grammask_mistralrs::tiny::{write_tiny_llama, TinyLlama};
/// let shape = TinyLlama { hidden: 32, layers: 2, heads: 2, kv_heads: 1, intermediate: 64, vocab: 151_936, seed: 7 };
/// let tok = std::fs::read("tokenizer.json")?;
/// let cfg = std::fs::read("tokenizer_config.json")?;
/// let dir = write_tiny_llama(std::path::Path::new("/tmp/tiny"), &tok, &cfg, &shape)?;
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
pub fn write_tiny_llama(
    dir: &Path,
    tokenizer_json: &[u8],
    tokenizer_config: &[u8],
    m: &TinyLlama,
) -> Result<PathBuf, TinyError> {
    if m.heads == 0 || m.kv_heads == 0 || m.hidden % m.heads != 0 || m.heads % m.kv_heads != 0 {
        return Err(
            format!("bad shape: hidden {} / heads {} / kv heads {}", m.hidden, m.heads, m.kv_heads).into()
        );
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("tokenizer.json"), tokenizer_json)?;
    std::fs::write(dir.join("tokenizer_config.json"), tokenizer_config)?;
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
    std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&config)?)?;
    let mut rng = Rng(m.seed | 1);
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    let dev = Device::Cpu;
    let mut put = |name: String, shape: (usize, usize), scale: f32| -> Result<(), TinyError> {
        let data: Vec<f32> = (0..shape.0 * shape.1).map(|_| rng.f32(scale)).collect();
        tensors.insert(name, Tensor::from_vec(data, shape, &dev)?);
        Ok(())
    };
    // Large enough that the logits are peaked (a random model that prefers some tokens
    // strongly is harsher than a uniform one), small enough to stay finite.
    put("model.embed_tokens.weight".into(), (m.vocab, m.hidden), 1.0)?;
    put("lm_head.weight".into(), (m.vocab, m.hidden), 1.0)?;
    for i in 0..m.layers {
        let p = format!("model.layers.{i}");
        put(format!("{p}.self_attn.q_proj.weight"), (m.heads * head_dim, m.hidden), 0.2)?;
        put(format!("{p}.self_attn.k_proj.weight"), (m.kv_heads * head_dim, m.hidden), 0.2)?;
        put(format!("{p}.self_attn.v_proj.weight"), (m.kv_heads * head_dim, m.hidden), 0.2)?;
        put(format!("{p}.self_attn.o_proj.weight"), (m.hidden, m.heads * head_dim), 0.2)?;
        put(format!("{p}.mlp.gate_proj.weight"), (m.intermediate, m.hidden), 0.2)?;
        put(format!("{p}.mlp.up_proj.weight"), (m.intermediate, m.hidden), 0.2)?;
        put(format!("{p}.mlp.down_proj.weight"), (m.hidden, m.intermediate), 0.2)?;
    }
    let ones = |n: usize| Tensor::from_vec(vec![1f32; n], n, &dev);
    for i in 0..m.layers {
        tensors.insert(format!("model.layers.{i}.input_layernorm.weight"), ones(m.hidden)?);
        tensors.insert(format!("model.layers.{i}.post_attention_layernorm.weight"), ones(m.hidden)?);
    }
    tensors.insert("model.norm.weight".into(), ones(m.hidden)?);
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors"))?;
    Ok(dir.to_path_buf())
}

/// A processor placed before grammask's that records every context it sees and adds
/// `bias` to the logits of `boosted` tokens — and, with a ramp, more for each step past
/// the first ones (see the [module docs](self)).
#[derive(Default)]
pub struct Recorder {
    contexts: Mutex<Vec<Vec<u32>>>,
    boosted: Vec<u32>,
    bias: f32,
    ramp: Option<Ramp>,
    /// Tokens pushed up by an amount of their own (a tool format's tags), ramped as the
    /// closers are.
    tags: (Vec<u32>, f32),
    /// Further tokens moved by their own amount per step past the ramp's start (negative:
    /// sunk), with no boost before it.
    ramps: Vec<(Vec<u32>, f32)>,
}

/// How a [`Recorder`]'s push grows with the output.
#[derive(Debug, Clone, Copy)]
struct Ramp {
    /// Steps before it starts.
    after: usize,
    /// Added to every boosted token per step past `after`.
    per_token: f32,
    /// The stop tokens' ramp on top (a few stop tokens against thousands of closers).
    stop_per_token: f32,
    /// How many of `boosted`, from the start, are stop tokens.
    stops: usize,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("boosted", &self.boosted.len()).field("bias", &self.bias).finish()
    }
}

impl CustomLogitsProcessor for Recorder {
    fn apply(&self, logits: &Tensor, context: &[u32]) -> candle_core::Result<Tensor> {
        let step = {
            let mut c = self.contexts.lock().unwrap_or_else(|p| p.into_inner());
            c.push(context.to_vec());
            c.len() - 1
        };
        if self.boosted.is_empty() {
            return Ok(logits.clone());
        }
        let past = |r: &Ramp| step.saturating_sub(r.after) as f32;
        let ramp = self.ramp.map_or(0.0, |r| r.per_token * past(&r));
        let stop_ramp = self.ramp.map_or(0.0, |r| r.stop_per_token * past(&r));
        let stops = self.ramp.map_or(0, |r| r.stops);
        let mut v: Vec<f32> = logits.to_vec1()?;
        for (k, &id) in self.boosted.iter().enumerate() {
            if let Some(x) = v.get_mut(id as usize) {
                *x += self.bias + ramp + if k < stops { stop_ramp } else { 0.0 };
            }
        }
        for &id in &self.tags.0 {
            if let Some(x) = v.get_mut(id as usize) {
                *x += self.tags.1 + ramp;
            }
        }
        if let Some(r) = self.ramp {
            for (ids, per_token) in &self.ramps {
                for &id in ids {
                    if let Some(x) = v.get_mut(id as usize) {
                        *x += per_token * past(&r);
                    }
                }
            }
        }
        let n = v.len();
        Tensor::from_vec(v, n, logits.device())
    }
}

impl Recorder {
    /// A recorder that changes nothing.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A recorder that boosts tokens holding any of the bytes `closers`, and the stop
    /// tokens, by `bias`.
    pub fn boosting(tok: &grammask::TokenizerInfo, closers: &[u8], bias: f32) -> Arc<Self> {
        Arc::new(Self {
            contexts: Mutex::default(),
            boosted: closing_ids(tok, closers),
            bias,
            ramp: None,
            tags: (Vec::new(), 0.0),
            ramps: Vec::new(),
        })
    }

    /// [`boosting`](Self::boosting), the boost growing by `per_token` each step past the
    /// first `after` and the stop tokens' by `stop_per_token` more (one recorder per
    /// request: its steps are the output's tokens), so that random outputs end rather than
    /// run into the token limit, free text included; `tags` (a tool format's tags: a
    /// reasoning block's end, a call's begin and end) pushed up by `tags.1`, ramped as the
    /// closers (the stop tokens' steeper ramp overtakes them, so free text ends); `ramps`:
    /// further tokens ramped by their own amount per step (negative: sunk), e.g.
    /// whitespace, which a random model otherwise writes without end where a grammar
    /// allows it beside a tag.
    #[allow(clippy::too_many_arguments)]
    pub fn ramping(
        tok: &grammask::TokenizerInfo,
        closers: &[u8],
        bias: f32,
        after: usize,
        per_token: f32,
        stop_per_token: f32,
        tags: (Vec<u32>, f32),
        ramps: Vec<(Vec<u32>, f32)>,
    ) -> Arc<Self> {
        let stops: Vec<u32> = tok.stop_tokens().to_vec();
        let boosted: Vec<u32> = stops
            .iter()
            .copied()
            .chain(closing_ids(tok, closers).into_iter().filter(|t| !stops.contains(t)))
            .collect();
        let ramp = Ramp { after, per_token, stop_per_token, stops: stops.len() };
        Arc::new(Self { contexts: Mutex::default(), boosted, bias, ramp: Some(ramp), tags, ramps })
    }

    /// Every context seen so far, in call order.
    pub fn contexts(&self) -> Vec<Vec<u32>> {
        self.contexts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Each context's generated ids (the prompt is the shortest context).
    pub fn generated(&self) -> Vec<Vec<u32>> {
        let c = self.contexts.lock().unwrap_or_else(|p| p.into_inner());
        let prompt = c.iter().map(Vec::len).min().unwrap_or(0);
        c.iter().map(|x| x[prompt..].to_vec()).collect()
    }
}

/// The stop tokens and the tokens holding any of the bytes `closers`.
fn closing_ids(tok: &grammask::TokenizerInfo, closers: &[u8]) -> Vec<u32> {
    (0..tok.tokenizer_size() as u32)
        .filter(|&id| {
            tok.stop_tokens().contains(&id)
                || (!tok.is_special(id) && tok.token_bytes(id).iter().any(|b| closers.contains(b)))
        })
        .collect()
}
