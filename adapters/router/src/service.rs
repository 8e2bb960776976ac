//! What the HTTP handlers share: the tokenizer, the compile service, the chat template
//! and the engine.
//!
//! Grammars compile here, on tokio's blocking pool (never on the step thread), through
//! one [`GrammarCompiler`] whose cache every request shares, at most
//! [`Limits::compile_threads`] at once, under a size limit (the spec's text), a work
//! budget ([`Limits::compile_work_limit`]: deterministic, the same verdict under any load)
//! and a time limit. A compile whose request is answered (its deadline passed) or whose
//! client went away is cancelled: no compile outlives its request.

use crate::engine::{EngineHandle, Event, Job, Request};
use crate::metrics::Metrics;
use grammask::budget::{BudgetError, CancelHandle};
use grammask::tool_calling::Family;
use grammask::{CompileControl, GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo};
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
    /// `max_new_tokens` when a request gives none; `None` (the default): the rest of the
    /// context, `max_total_tokens` less the prompt (TGI's and vLLM's default), within
    /// [`Self::max_new_tokens`].
    pub default_max_new_tokens: Option<usize>,
    /// Most bytes of a grammar, schema, regex or structural tag.
    pub max_grammar_bytes: usize,
    /// Longest a compile may take for its request (waiting for a compile thread included).
    pub compile_timeout: Duration,
    /// Work units a compile may spend (`CompileOptions::work_limit`): past it the request
    /// gets a 422 at once, on any machine under any load.
    pub compile_work_limit: Option<u64>,
    /// Compiles running at once (the rest wait, within their timeout).
    pub compile_threads: usize,
    /// Most stop sequences.
    pub max_stop_sequences: usize,
    /// Requests in flight at once, from arrival to the end of the answer (compiles and
    /// queueing included); more get a 429 at once (TGI's `--max-concurrent-requests`).
    pub max_concurrent_requests: usize,
    /// Work units one mask fill may spend on a row
    /// ([`GrammarMatcher::set_fill_work_limit`]): past it that request ends with an error
    /// and the batch goes on.
    pub fill_work_limit: Option<u64>,
    /// Bytes a grammar's token masks may hold (`CompileOptions::mask_memory_limit`).
    pub mask_memory_limit: Option<usize>,
    /// Requests parsed, templated and tokenized at once, on blocking threads (never on
    /// the async workers that carry every open stream).
    pub validation_threads: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_input_tokens: 4096,
            max_new_tokens: 4096,
            default_max_new_tokens: None,
            max_grammar_bytes: 1 << 20,
            compile_timeout: Duration::from_secs(10),
            compile_work_limit: Some(DEFAULT_COMPILE_WORK_LIMIT),
            compile_threads: default_compile_threads(),
            max_stop_sequences: 4,
            max_concurrent_requests: 128,
            fill_work_limit: Some(grammask::matcher::DEFAULT_FILL_WORK_LIMIT),
            mask_memory_limit: Some(DEFAULT_MASK_MEMORY_LIMIT),
            validation_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// The router's default [`Limits::compile_work_limit`]: what the library allows
/// ([`grammask::compiler::DEFAULT_WORK_LIMIT`]) is sized for every schema of the test
/// corpora; a server facing untrusted clients allows a sixteenth of that: 4.4× what the
/// largest dev MaskBench schema spends, and a tenth of what the tests' costly schema would
/// (refused ~0.4 s in; BENCHMARKS). A unit's time varies by phase: the deadline
/// ([`Limits::compile_timeout`]) is what bounds time.
pub const DEFAULT_COMPILE_WORK_LIMIT: u64 = grammask::compiler::DEFAULT_WORK_LIMIT / 16;

/// The router's default [`Limits::mask_memory_limit`]: 64 MiB per grammar, a quarter
/// of the compile cache (the library's default is 1 GiB).
pub const DEFAULT_MASK_MEMORY_LIMIT: usize = 64 << 20;

/// Half the machine's cores (at least one): compiles never take every core from the
/// step's mask fills.
pub fn default_compile_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// Cancels a compile when its request stops waiting for it (the client went away, the
/// deadline passed). Once the compile has returned, cancelling changes nothing: a staged
/// compile's finishing job does not take the call's handle.
struct CancelOnDrop(CancelHandle);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
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
    /// The engine is not running (503).
    #[error("{0}")]
    Unavailable(String),
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
    /// The tool-calling family ([`crate::server::tool_calling_family`]).
    pub family: Option<Family>,
    /// Where it came from.
    pub family_source: Option<crate::server::FamilySource>,
    /// The bearer key every route but `/health` requires; `None`: open.
    pub api_key: Option<String>,
    /// The model's name (`/info`, OpenAI's `model`).
    pub model_id: String,
    /// Most positions (prompt + `max_new_tokens`) a request may take: the model's context
    /// ([`crate::model::Model::max_context`]) or, without one, the input and output
    /// limits together.
    pub max_total_tokens: usize,
    /// `cpu`, or `cuda` for a model whose logits live on a GPU (`/info`).
    pub model_device_type: &'static str,
    /// `/info`'s `model_dtype` ([`crate::model::Model::dtype`]).
    pub model_dtype: String,
    /// Compile slots ([`Limits::compile_threads`]).
    pub compile_slots: Arc<tokio::sync::Semaphore>,
    /// Requests in flight ([`Limits::max_concurrent_requests`]).
    pub request_slots: Arc<tokio::sync::Semaphore>,
    /// Requests being validated ([`Limits::validation_threads`]).
    pub validation_slots: Arc<tokio::sync::Semaphore>,
    /// What the model is (`/info`).
    pub model_description: String,
    /// Most sequences in a step (`/info`).
    pub max_batch_size: usize,
    /// Most requests waiting (`/info`).
    pub max_queue: usize,
    /// The member order of objects in `json_schema` constraints
    /// ([`crate::server::RouterConfig::json_property_order`]).
    pub json_property_order: grammask::json_schema::PropertyOrder,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service").field("model_id", &self.model_id).field("limits", &self.limits).finish()
    }
}

/// What a prompt's text is, for tokenizing ([`Service::tokenize`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prompt {
    /// A raw prompt (`/generate`'s `inputs`, `/v1/completions`' `prompt`): the tokenizer's
    /// special tokens are added (a BOS token where its post-processor says).
    Raw,
    /// A rendered chat template, which writes its own special tokens.
    Templated,
}

/// A validated generation, ready to submit.
#[derive(Debug, Clone)]
pub struct Generation {
    /// What to generate.
    pub job: Job,
    /// The constraint, if any (compiled on submit).
    pub spec: Option<GrammarSpec>,
}

impl Service {
    /// Tokenizes `text` ([`Self::tokenize`]) and checks it against the input limit
    /// ([`Self::check_input`]).
    pub fn encode(&self, text: &str, prompt: Prompt) -> Result<Vec<u32>, ServiceError> {
        let ids = self.tokenize(text, prompt)?;
        self.check_input(&ids)?;
        Ok(ids)
    }

    /// Tokenizes `text` without the input limit (TGI's `truncate` applies first): a raw
    /// prompt with the special tokens the tokenizer's post-processor adds (a BOS token for
    /// Llama-family tokenizers, as TGI and vLLM do), a rendered chat template without
    /// (the template writes its own).
    pub fn tokenize(&self, text: &str, prompt: Prompt) -> Result<Vec<u32>, ServiceError> {
        if text.is_empty() {
            return Err(ServiceError::Validation("the input is empty".into()));
        }
        let ids = self
            .hf
            .encode(text, prompt == Prompt::Raw)
            .map_err(|e| ServiceError::Validation(format!("cannot tokenize the input: {e}")))?
            .get_ids()
            .to_vec();
        if ids.is_empty() {
            return Err(ServiceError::Validation("the input is empty".into()));
        }
        Ok(ids)
    }

    /// The most prompt tokens a request may have: the configured limit, and one less
    /// than the model's whole context.
    pub fn max_input_tokens(&self) -> usize {
        self.limits.max_input_tokens.min(self.max_total_tokens.saturating_sub(1))
    }

    /// Refuses a prompt over [`Self::max_input_tokens`].
    pub fn check_input(&self, ids: &[u32]) -> Result<(), ServiceError> {
        if ids.len() > self.max_input_tokens() {
            return Err(ServiceError::Validation(format!(
                "the input has {} tokens; the limit is {}",
                ids.len(),
                self.max_input_tokens()
            )));
        }
        Ok(())
    }

    /// Checks `max_new_tokens` against the limit; when `None`, the default
    /// ([`Limits::default_max_new_tokens`]: the rest of the context after `prompt_len`).
    pub fn max_new_tokens(&self, asked: Option<u64>, prompt_len: usize) -> Result<usize, ServiceError> {
        let rest = self.max_total_tokens.saturating_sub(prompt_len);
        let default = self.limits.default_max_new_tokens.unwrap_or(rest).min(self.limits.max_new_tokens);
        if asked.is_none() && default == 0 {
            return Err(ServiceError::Validation(format!(
                "the input has {prompt_len} tokens: no room is left to generate within `max_total_tokens` \
                 of {}",
                self.max_total_tokens
            )));
        }
        let n = asked.unwrap_or(default as u64);
        if n == 0 || n > self.limits.max_new_tokens as u64 {
            return Err(ServiceError::Validation(format!(
                "`max_new_tokens` must be between 1 and {} (got {n})",
                self.limits.max_new_tokens
            )));
        }
        Ok(n as usize)
    }

    /// Runs `f` — parsing a body, templating, tokenizing: CPU work that grows with the
    /// request — on tokio's blocking pool, at most [`Limits::validation_threads`] at once,
    /// so that large requests never stall the async workers every open stream shares.
    pub async fn off_workers<R: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Service) -> R + Send + 'static,
    ) -> Result<R, ServiceError> {
        let slot = self
            .validation_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ServiceError::Unavailable("the server is shutting down".into()))?;
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            f(&me)
        })
        .await
        .map_err(|e| ServiceError::Generation(format!("validating the request failed: {e}")))
    }

    /// Compiles `spec` off the async threads, within the size and time limits.
    pub async fn compile(&self, mut spec: GrammarSpec) -> Result<GrammarMatcher, ServiceError> {
        if let GrammarSpec::JsonSchema { options, .. } = &mut spec {
            options.property_order = self.json_property_order;
        }
        let size = spec_len(&spec);
        if size > self.limits.max_grammar_bytes {
            self.metrics.errors.with_label_values(&["validation"]).inc();
            return Err(ServiceError::Validation(format!(
                "the grammar has {size} bytes; the limit is {}",
                self.limits.max_grammar_bytes
            )));
        }
        // A grammar seen before is answered from the cache at once, without waiting for
        // a compile slot behind other requests' compiles.
        if let Some(hit) = self.compiler.cached(&spec) {
            self.metrics.cache_hits.inc();
            return Ok(self.matcher(hit));
        }
        let compiler = self.compiler.clone();
        let (_, hits_before, _) = compiler.cache_stats();
        let t0 = Instant::now();
        let deadline = t0 + self.limits.compile_timeout;
        let timed_out = || {
            self.metrics.errors.with_label_values(&["compile_timeout"]).inc();
            ServiceError::Validation(format!(
                "the grammar did not compile within {:?}",
                self.limits.compile_timeout
            ))
        };
        // A compile slot first: at most `compile_threads` compiles run, however many
        // requests ask (tokio's blocking pool alone would start hundreds of threads).
        let slot = match tokio::time::timeout_at(deadline.into(), self.compile_slots.clone().acquire_owned())
            .await
        {
            Ok(Ok(slot)) => slot,
            Ok(Err(_)) => return Err(ServiceError::Generation("the compile pool is closed".into())),
            Err(_) => return Err(timed_out()),
        };
        let cancel = CancelHandle::new();
        // Dropped with this future: a client that goes away cancels its compile.
        let _guard = CancelOnDrop(cancel.clone());
        let control = CompileControl { cancel: Some(cancel), deadline: Some(deadline) };
        let span = tracing::debug_span!("compile", bytes = size);
        let metrics = self.metrics.clone();
        let job = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let r = span.in_scope(|| compiler.compile_with(&spec, &control));
            if let Err(e) = &r {
                if let grammask::Error::Budget(BudgetError::Cancelled { .. }) = e.root() {
                    metrics.compiles_cancelled.inc();
                }
            }
            r
        });
        // The compile stops itself at the deadline (or, shared with other requests for
        // the same grammar, goes on for them): the timeout here answers this one.
        let joined =
            tokio::time::timeout(self.limits.compile_timeout + Duration::from_millis(100), job).await;
        let compiled = match joined {
            Err(_) => return Err(timed_out()),
            Ok(Err(e)) => return Err(ServiceError::Generation(format!("the compile task failed: {e}"))),
            Ok(Ok(Err(e)))
                if matches!(e.root(), grammask::Error::Budget(BudgetError::DeadlinePassed { .. })) =>
            {
                return Err(timed_out())
            }
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
        Ok(self.matcher(compiled))
    }

    /// A matcher at the start of `compiled`, under the fill limit.
    fn matcher(&self, compiled: Arc<grammask::CompiledGrammar>) -> GrammarMatcher {
        let mut matcher = GrammarMatcher::new(compiled);
        matcher.set_fill_work_limit(self.limits.fill_work_limit);
        matcher
    }

    /// Checks a generation against the limits, compiles its constraint (off this thread,
    /// bounded) and queues it; the events come on the returned channel.
    pub async fn submit(&self, g: Generation) -> Result<UnboundedReceiver<Event>, ServiceError> {
        let (request, rx) = self.ready(g).await?;
        self.engine.submit(request).map_err(|e| self.submit_error(e))?;
        Ok(rx)
    }

    /// [`submit`](Self::submit) for the generations of one request (`n` choices, `best_of`
    /// candidates, a list of prompts): all are checked and compiled first, then queued
    /// together, so that the engine admits them together and the choices of one prompt
    /// share its prefill; none is queued if one is refused.
    pub async fn submit_many(
        &self,
        gens: Vec<Generation>,
    ) -> Result<Vec<UnboundedReceiver<Event>>, ServiceError> {
        let mut requests = Vec::with_capacity(gens.len());
        let mut rxs = Vec::with_capacity(gens.len());
        for g in gens {
            let (request, rx) = self.ready(g).await?;
            requests.push(request);
            rxs.push(rx);
        }
        self.engine.submit_many(requests).map_err(|e| self.submit_error(e))?;
        Ok(rxs)
    }

    fn submit_error(&self, e: crate::engine::SubmitError) -> ServiceError {
        match e {
            crate::engine::SubmitError::QueueFull(_) => {
                self.metrics.errors.with_label_values(&["overloaded"]).inc();
                ServiceError::Overloaded(e.to_string())
            }
            crate::engine::SubmitError::Down(_) => {
                self.metrics.errors.with_label_values(&["unavailable"]).inc();
                ServiceError::Unavailable(e.to_string())
            }
        }
    }

    /// A generation checked against the limits and its constraint compiled: the request
    /// to queue and where its events will come.
    async fn ready(&self, g: Generation) -> Result<(Request, UnboundedReceiver<Event>), ServiceError> {
        // TGI's `max_total_tokens` check: a row must never outgrow the model's context in
        // the middle of a batch (its forward would fail every row of it).
        let total = g.job.prompt.len() + g.job.max_new_tokens;
        if total > self.max_total_tokens {
            return Err(ServiceError::Validation(format!(
                "the input has {} tokens and `max_new_tokens` is {}: {total} tokens, over the model's \
                 `max_total_tokens` of {}",
                g.job.prompt.len(),
                g.job.max_new_tokens,
                self.max_total_tokens
            )));
        }
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
        Ok((Request { job: g.job, constraint, events: tx }, rx))
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
