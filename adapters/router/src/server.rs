//! Assembling a router: tokenizer, model, engine, service, HTTP app.

use crate::chat::ChatTemplate;
use crate::engine::{self, EngineHandle, EngineOptions};
use crate::metrics::Metrics;
use crate::model::Model;
use crate::service::{Limits, Service};
use grammask::matcher::TextEncoder;
use grammask::tool_calling::Family;
use grammask::{CompileOptions, GrammarCompiler, TokenizerInfo, TokenizerOptions};
use std::io::Read;
use std::sync::Arc;

/// The embedded default tokenizer (Qwen3's, Apache-2.0): `(tokenizer.json, tokenizer_config.json)`.
pub fn embedded_qwen3() -> Result<(Vec<u8>, Vec<u8>), String> {
    const GZ: &[u8] = include_bytes!("../../../core/assets/qwen3-tokenizer.json.gz");
    const CONFIG: &[u8] = include_bytes!("../../../core/assets/qwen3-tokenizer_config.json");
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(GZ)
        .read_to_end(&mut json)
        .map_err(|e| format!("embedded tokenizer: {e}"))?;
    Ok((json, CONFIG.to_vec()))
}

/// A tokenizer as the router needs it: Hugging Face's (encoding) and grammask's view.
#[derive(Clone)]
pub struct LoadedTokenizer {
    /// For encoding prompts and jump-forward text.
    pub hf: Arc<tokenizers::Tokenizer>,
    /// For masks.
    pub info: Arc<TokenizerInfo>,
    /// `tokenizer_config.json`, if any (chat template, family detection).
    pub config: Option<String>,
}

impl LoadedTokenizer {
    /// This tokenizer as the encoder jump-forward writes forced text with
    /// ([`BatchOptions::encoder`](crate::step::BatchOptions::encoder)).
    pub fn encoder(&self) -> Arc<dyn TextEncoder + Send + Sync> {
        Arc::new(HfEncoder { hf: self.hf.clone(), cache: Default::default() })
    }

    /// From the bytes of `tokenizer.json` and `tokenizer_config.json`.
    pub fn from_bytes(json: &[u8], config: Option<&[u8]>) -> Result<Self, String> {
        let hf = tokenizers::Tokenizer::from_bytes(json).map_err(|e| format!("tokenizer.json: {e}"))?;
        let info = TokenizerInfo::from_json_bytes(json, config, &TokenizerOptions::default())
            .map_err(|e| e.to_string())?;
        let config = config.map(|c| String::from_utf8_lossy(c).into_owned());
        Ok(Self { hf: Arc::new(hf), info: Arc::new(info), config })
    }

    /// From a `tokenizer.json` or a folder holding one (and its `tokenizer_config.json`).
    pub fn from_path(path: &std::path::Path) -> Result<Self, String> {
        let file = if path.is_dir() { path.join("tokenizer.json") } else { path.to_path_buf() };
        let json = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let config = file.parent().and_then(|d| std::fs::read(d.join("tokenizer_config.json")).ok());
        Self::from_bytes(&json, config.as_deref())
    }

    /// The tokenizer stored in a GGUF model file (byte-level BPE vocabularies; see
    /// [`hf_tokenizer_from_gguf`](crate::model::hf_tokenizer_from_gguf)).
    pub fn from_gguf(path: &std::path::Path) -> Result<Self, String> {
        let (json, config) = crate::model::hf_tokenizer_from_gguf(path)?;
        Self::from_bytes(&json, Some(&config))
    }

    /// The embedded Qwen3 tokenizer.
    pub fn embedded() -> Result<Self, String> {
        let (json, config) = embedded_qwen3()?;
        Self::from_bytes(&json, Some(&config))
    }
}

/// How long a request's compile may go on computing its grammar's token masks, nearest
/// states first, after the automata are built (`CompileOptions::eager_budget`). The
/// request waits for it in the queue, where it costs that request a few forward steps of
/// latency; a mask left lazy is instead computed by the fill of a running batch the first
/// time a row reaches its state, and a step whose rows meet many new states at once
/// waits for them after the forward (every row of that batch pays). The masks land in
/// the compile cache with the grammar, so a schema seen again costs neither.
pub const DEFAULT_MASK_PRECOMPUTE: std::time::Duration = std::time::Duration::from_millis(50);

/// The compile options of a router whose compiles precompute masks for `mask_precompute`
/// under `limits` ([`Limits::compile_work_limit`], [`Limits::mask_memory_limit`]).
pub fn compile_options(mask_precompute: std::time::Duration, limits: &Limits) -> CompileOptions {
    CompileOptions {
        eager_budget: mask_precompute,
        work_limit: limits.compile_work_limit,
        mask_memory_limit: limits.mask_memory_limit,
        ..CompileOptions::default()
    }
}

/// Everything a router is started from.
pub struct RouterConfig {
    /// The tokenizer.
    pub tokenizer: LoadedTokenizer,
    /// The model.
    pub model: Box<dyn Model>,
    /// Scheduler settings.
    pub engine: EngineOptions,
    /// Request limits.
    pub limits: Limits,
    /// Jump-forward (forced tokens appended without sampling).
    pub jump_forward: bool,
    /// Name for `/info` and OpenAI's `model`.
    pub model_id: String,
    /// Mask precompute per compile ([`DEFAULT_MASK_PRECOMPUTE`]).
    pub mask_precompute: std::time::Duration,
    /// The bearer key every route but `/health` requires (`--api-key`); `None`: open.
    pub api_key: Option<String>,
    /// The tool-calling format, whatever the chat template says (`--tool-call-format`);
    /// `None`: detected from the template ([`tool_calling_family`]).
    pub tool_call_format: Option<Family>,
    /// The member order of objects in `json_schema` constraints (`--json-property-order`):
    /// any order (JSON Schema's meaning, the default) or the schema's (as XGrammar and
    /// llguidance generate; what a conformance oracle that knows only that order needs).
    pub json_property_order: grammask::json_schema::PropertyOrder,
}

/// Where the router's tool-calling format came from (`/info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilySource {
    /// `--tool-call-format`.
    Configured,
    /// Recognised in the chat template.
    Detected,
    /// Not recognised: the ChatML default, Hermes-style `<tool_call>` JSON.
    Default,
}

impl FamilySource {
    /// Its name in `/info`.
    pub fn name(self) -> &'static str {
        match self {
            FamilySource::Configured => "configured",
            FamilySource::Detected => "detected",
            FamilySource::Default => "default (ChatML template)",
        }
    }
}

/// The tool-calling format of a router: `configured` if given; else the family the chat
/// template (`tokenizer_config.json`) shows; else, for a ChatML template (`<|im_start|>`,
/// as SmolLM2's and most instruction-tuned models' are), Hermes-style `<tool_call>` JSON,
/// the format such models are trained on when they call tools at all; else none (requests
/// with `tools` are refused, naming the flag).
pub fn tool_calling_family(
    configured: Option<Family>,
    tokenizer_config: Option<&str>,
) -> Option<(Family, FamilySource)> {
    if let Some(f) = configured {
        return Some((f, FamilySource::Configured));
    }
    let config = tokenizer_config?;
    if let Some(f) = Family::detect_from_tokenizer_config(config).ok().flatten() {
        return Some((f, FamilySource::Detected));
    }
    config.contains("<|im_start|>").then_some((Family::Hermes, FamilySource::Default))
}

/// A running router: its shared state (for the HTTP app) and the engine (to shut down).
pub struct Router {
    /// The handlers' state.
    pub service: Arc<Service>,
    /// The scheduler.
    pub engine: EngineHandle,
}

/// The tokenizer as jump-forward's encoder ([`LoadedTokenizer::encoder`]), remembering
/// what it encoded.
///
/// Jump-forward encodes the forced text in the mask fill (or, where accepts are not
/// deferred, on the step thread between sampling and the next forward), and a Hugging
/// Face encode (normalizer, pre-tokenizer, BPE) took about half of jump-forward's time
/// (perf, the conformance overhead run). The
/// forced texts repeat — the keys and punctuation of a schema, across its requests and
/// the items of its arrays — and an encoding depends on the text alone, so a hit is exact.
/// The memory is bounded: past [`ENCODE_CACHE_BYTES`] of texts and ids the map starts over.
struct HfEncoder {
    hf: Arc<tokenizers::Tokenizer>,
    cache: std::sync::Mutex<EncodeCache>,
}

/// How much the encoder's memory of texts and their ids may hold (bytes, about).
const ENCODE_CACHE_BYTES: usize = 4 << 20;

#[derive(Default)]
struct EncodeCache {
    map: std::collections::HashMap<Box<str>, Box<[u32]>>,
    bytes: usize,
}

impl TextEncoder for HfEncoder {
    fn encode_text(&self, text: &str) -> grammask::Result<Vec<u32>> {
        // (A poisoned lock only means another thread panicked mid-insert: the map is
        // still a valid map of exact encodings.)
        let cached =
            self.cache.lock().unwrap_or_else(|p| p.into_inner()).map.get(text).map(|ids| ids.to_vec());
        if let Some(ids) = cached {
            return Ok(ids);
        }
        let ids = self.hf.encode_text(text)?;
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let size = text.len() + 4 * ids.len() + 64;
        if c.bytes + size > ENCODE_CACHE_BYTES {
            c.map.clear();
            c.bytes = 0;
        }
        if size <= ENCODE_CACHE_BYTES {
            c.bytes += size;
            c.map.insert(text.into(), ids.clone().into_boxed_slice());
        }
        Ok(ids)
    }
}

impl Router {
    /// Starts the engine and builds the service.
    pub fn start(mut config: RouterConfig) -> Result<Self, String> {
        let metrics = Arc::new(Metrics::new());
        if config.jump_forward {
            config.engine.batch.encoder = Some(config.tokenizer.encoder());
        }
        // Jump-forward never takes back a token already streamed to a client.
        config.engine.batch.rollback_ok = false;
        let max_batch_size = config.engine.max_batch_size;
        let max_queue = config.engine.max_queue;
        let description = config.model.name();
        let limits_total = config.limits.max_input_tokens + config.limits.max_new_tokens;
        let max_total_tokens = config.model.max_context().map_or(limits_total, |c| c.min(limits_total));
        let model_device_type = if config.model.device().is_some() { "cuda" } else { "cpu" };
        let model_dtype = config.model.dtype();
        let engine =
            engine::start(config.model, config.tokenizer.info.clone(), config.engine, metrics.clone())
                .map_err(|e| e.to_string())?;
        // Compiles, their helpers and their staged finishing jobs on a pool of
        // `compile_threads` (never a thread per request), at most four jobs queued per
        // thread (past that a staged compile finishes inside its request's compile).
        let threads = config.limits.compile_threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("grammask-compile-{i}"))
            .build()
            .map_err(|e| format!("cannot start the compile pool: {e}"))?;
        let compiler = GrammarCompiler::with_options(
            config.tokenizer.info.clone(),
            compile_options(config.mask_precompute, &config.limits),
            256 << 20,
        )
        .with_pool(Arc::new(pool), 4 * threads);
        let chat = match &config.tokenizer.config {
            None => None,
            Some(c) => ChatTemplate::from_tokenizer_config(c).map_err(|e| e.to_string())?,
        };
        let family = tool_calling_family(config.tool_call_format, config.tokenizer.config.as_deref());
        let compile_slots = Arc::new(tokio::sync::Semaphore::new(config.limits.compile_threads.max(1)));
        let request_slots =
            Arc::new(tokio::sync::Semaphore::new(config.limits.max_concurrent_requests.max(1)));
        let validation_slots = Arc::new(tokio::sync::Semaphore::new(config.limits.validation_threads.max(1)));
        let service = Arc::new(Service {
            hf: config.tokenizer.hf.clone(),
            info: config.tokenizer.info.clone(),
            compiler: Arc::new(compiler),
            engine: engine.clone(),
            limits: config.limits,
            metrics,
            chat,
            family: family.map(|f| f.0),
            family_source: family.map(|f| f.1),
            api_key: config.api_key,
            model_id: config.model_id,
            compile_slots,
            request_slots,
            validation_slots,
            max_total_tokens,
            model_device_type,
            model_dtype,
            model_description: description,
            max_batch_size,
            max_queue,
            json_property_order: config.json_property_order,
        });
        Ok(Self { service, engine })
    }

    /// The HTTP app.
    pub fn app(&self) -> axum::Router {
        crate::api::app(self.service.clone())
    }
}
