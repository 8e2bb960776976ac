//! What the HTTP handlers share: the tokenizer, the compile service, the chat template
//! and the engine.
//!
//! Grammars compile here, on tokio's blocking pool (never on the step thread), through
//! one [`GrammarCompiler`] whose cache every request shares, under a size limit (the
//! spec's text) and a time limit: a request whose compile overruns gets an error, and
//! the compile goes on in the background so that its result still lands in the cache.

use crate::engine::{EngineHandle, Event, Job, Request};
use crate::metrics::Metrics;
use grammask::tool_calling::Family;
use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// Limits on what a request may ask for.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most prompt tokens.
    pub max_input_tokens: usize,
    /// Most tokens a request may generate (`max_new_tokens` above it is refused).
    pub max_new_tokens: usize,
    /// Default `max_new_tokens` when a request gives none.
    pub default_max_new_tokens: usize,
    /// Most bytes of a grammar, schema, regex or structural tag.
    pub max_grammar_bytes: usize,
    /// Longest a compile may take for its request.
    pub compile_timeout: Duration,
    /// Most stop sequences.
    pub max_stop_sequences: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_input_tokens: 4096,
            max_new_tokens: 4096,
            default_max_new_tokens: 100,
            max_grammar_bytes: 1 << 20,
            compile_timeout: Duration::from_secs(10),
            max_stop_sequences: 4,
        }
    }
}

/// Why a request was refused before it ran: maps to an HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Bad parameters or an invalid grammar (422).
    #[error("{0}")]
    Validation(String),
    /// The queue is full (429).
    #[error("{0}")]
    Overloaded(String),
    /// The generation failed (424 in TGI's terms).
    #[error("{0}")]
    Generation(String),
}

/// The state every handler shares.
pub struct Service {
    /// The model's tokenizer (encoding prompts, jump-forward).
    pub hf: Arc<tokenizers::Tokenizer>,
    /// grammask's view of it.
    pub info: Arc<TokenizerInfo>,
    /// The shared compiler (and its cache).
    pub compiler: Arc<GrammarCompiler>,
    /// The scheduler.
    pub engine: EngineHandle,
    /// Limits.
    pub limits: Limits,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The chat template and its special tokens.
    pub chat: Option<crate::chat::ChatTemplate>,
    /// The tool-calling family of the model's chat template, when detected.
    pub family: Option<Family>,
    /// The model's name (`/info`, OpenAI's `model`).
    pub model_id: String,
    /// What the model is (`/info`).
    pub model_description: String,
    /// Most sequences in a step (`/info`).
    pub max_batch_size: usize,
    /// Most requests waiting (`/info`).
    pub max_queue: usize,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service").field("model_id", &self.model_id).field("limits", &self.limits).finish()
    }
}

/// A validated generation, ready to submit.
#[derive(Debug)]
pub struct Generation {
    /// What to generate.
    pub job: Job,
    /// The constraint, if any (compiled on submit).
    pub spec: Option<GrammarSpec>,
}

impl Service {
    /// Tokenizes `text` (adding no special tokens: chat templates write their own).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ServiceError> {
        let ids = self
            .hf
            .encode(text, false)
            .map_err(|e| ServiceError::Validation(format!("cannot tokenize the input: {e}")))?
            .get_ids()
            .to_vec();
        if ids.is_empty() {
            return Err(ServiceError::Validation("the input is empty".into()));
        }
        if ids.len() > self.limits.max_input_tokens {
            return Err(ServiceError::Validation(format!(
                "the input has {} tokens; the limit is {}",
                ids.len(),
                self.limits.max_input_tokens
            )));
        }
        Ok(ids)
    }

    /// Checks `max_new_tokens` against the limit; the default when `None`.
    pub fn max_new_tokens(&self, asked: Option<u64>) -> Result<usize, ServiceError> {
        let default = self.limits.default_max_new_tokens.min(self.limits.max_new_tokens);
        let n = asked.unwrap_or(default as u64);
        if n == 0 || n > self.limits.max_new_tokens as u64 {
            return Err(ServiceError::Validation(format!(
                "`max_new_tokens` must be between 1 and {} (got {n})",
                self.limits.max_new_tokens
            )));
        }
        Ok(n as usize)
    }

    /// Compiles `spec` off the async threads, within the size and time limits.
    pub async fn compile(&self, spec: GrammarSpec) -> Result<GrammarMatcher, ServiceError> {
        let size = spec_len(&spec);
        if size > self.limits.max_grammar_bytes {
            self.metrics.errors.with_label_values(&["validation"]).inc();
            return Err(ServiceError::Validation(format!(
                "the grammar has {size} bytes; the limit is {}",
                self.limits.max_grammar_bytes
            )));
        }
        let compiler = self.compiler.clone();
        let (_, hits_before, _) = compiler.cache_stats();
        let t0 = Instant::now();
        let span = tracing::debug_span!("compile", bytes = size);
        let job = tokio::task::spawn_blocking(move || span.in_scope(|| compiler.compile(&spec)));
        let compiled = match tokio::time::timeout(self.limits.compile_timeout, job).await {
            Err(_) => {
                self.metrics.errors.with_label_values(&["compile_timeout"]).inc();
                return Err(ServiceError::Validation(format!(
                    "the grammar did not compile within {:?}",
                    self.limits.compile_timeout
                )));
            }
            Ok(Err(e)) => return Err(ServiceError::Generation(format!("the compile task failed: {e}"))),
            Ok(Ok(Err(e))) => {
                self.metrics.errors.with_label_values(&["grammar"]).inc();
                return Err(ServiceError::Validation(format!("invalid grammar: {e}")));
            }
            Ok(Ok(Ok(c))) => c,
        };
        let (_, hits_after, _) = self.compiler.cache_stats();
        if hits_after > hits_before {
            self.metrics.cache_hits.inc();
        } else {
            self.metrics.compile_seconds.observe(t0.elapsed().as_secs_f64());
        }
        Ok(GrammarMatcher::new(compiled))
    }

    /// Compiles the constraint and queues the generation; the events follow.
    pub async fn submit(&self, g: Generation) -> Result<UnboundedReceiver<Event>, ServiceError> {
        if g.job.stop.len() > self.limits.max_stop_sequences {
            return Err(ServiceError::Validation(format!(
                "{} stop sequences; the limit is {}",
                g.job.stop.len(),
                self.limits.max_stop_sequences
            )));
        }
        let constraint = match g.spec {
            Some(spec) => Some(self.compile(spec).await?),
            None => None,
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let request = Request { job: g.job, constraint, events: tx };
        self.engine.submit(request).map_err(|e| {
            self.metrics.errors.with_label_values(&["overloaded"]).inc();
            ServiceError::Overloaded(e.to_string())
        })?;
        Ok(rx)
    }
}

fn spec_len(spec: &GrammarSpec) -> usize {
    match spec {
        GrammarSpec::JsonSchema { schema, .. } => schema.len(),
        GrammarSpec::Regex(t) | GrammarSpec::Lark(t) | GrammarSpec::StructuralTag(t) => t.len(),
        GrammarSpec::Ebnf { text, .. } => text.len(),
        _ => 0,
    }
}
