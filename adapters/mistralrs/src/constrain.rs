//! Turning a constraint on for a request: [`Grammask`] (one per model) and
//! [`Constrained`] (one per request).

use crate::error::Error;
use crate::processor::GrammaskProcessor;
use crate::spec::spec_from_constraint;
use crate::vocab::ModelVocab;
use grammask::tool_calling::ResponseFormat;
use grammask::{CompiledGrammar, GrammarCompiler, GrammarMatcher, GrammarSpec};
use indexmap::IndexMap;
use mistralrs::{
    Constraint, CustomLogitsProcessor, MessageContent, ModelCategory, RequestLike, RequestMessage,
    SamplingParams, StopTokens, Tool, ToolChoice, WebSearchOptions,
};
use std::sync::Arc;

/// grammask for one model: its vocabulary and a compiler whose cache every request shares.
///
/// ```no_run
/// use grammask_mistralrs::{Grammask, ModelVocab};
/// use mistralrs::{Constraint, GgufModelBuilder, RequestBuilder, TextMessageRole};
/// # async fn run() -> anyhow::Result<()> {
/// let gguf = ".models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// let model = GgufModelBuilder::new(".models/smollm2", vec!["SmolLM2-135M-Instruct.Q4_1.gguf"])
///     .with_force_cpu()
///     .build()
///     .await?;
/// let grammask = Grammask::new(ModelVocab::from_gguf(gguf, &[])?);
/// let request = RequestBuilder::new()
///     .add_message(TextMessageRole::User, "A point, as JSON")
///     .set_constraint(Constraint::JsonSchema(serde_json::json!({
///         "type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]})));
/// // The constraint is compiled here: a bad schema is an error before anything is sent.
/// let request = grammask.constrain(request)?;
/// let response = model.send_chat_request(request).await?;
/// println!("{}", response.choices[0].message.content.as_deref().unwrap_or(""));
/// # Ok(()) }
/// ```
pub struct Grammask {
    vocab: ModelVocab,
    compiler: GrammarCompiler,
}

impl Grammask {
    /// grammask with default compile options for this vocabulary.
    pub fn new(vocab: ModelVocab) -> Self {
        let compiler = GrammarCompiler::new(vocab.tokenizer().clone());
        Self { vocab, compiler }
    }

    /// grammask with a compiler of your own (options, cache size, disk cache); its
    /// tokenizer must be `vocab`'s.
    pub fn with_compiler(vocab: ModelVocab, compiler: GrammarCompiler) -> Result<Self, Error> {
        if compiler.tokenizer().fingerprint() != vocab.tokenizer().fingerprint() {
            return Err(Error::Unsupported("the compiler was built for another vocabulary".into()));
        }
        Ok(Self { vocab, compiler })
    }

    /// The model's vocabulary and stop set.
    pub fn vocab(&self) -> &ModelVocab {
        &self.vocab
    }

    /// The shared compiler (its cache serves every request).
    pub fn compiler(&self) -> &GrammarCompiler {
        &self.compiler
    }

    /// Compiles a spec (cached).
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Arc<CompiledGrammar>, Error> {
        Ok(self.compiler.compile(spec)?)
    }

    /// A processor for `sequences` sequences (the request's `n_choices`), to attach with
    /// `RequestBuilder::add_logits_processor` yourself.
    pub fn processor(&self, spec: &GrammarSpec, sequences: usize) -> Result<Arc<GrammaskProcessor>, Error> {
        Ok(Arc::new(GrammaskProcessor::new(self.compile(spec)?, sequences)))
    }

    /// The request with its mistral.rs [`Constraint`] served by grammask instead of
    /// llguidance. The constraint is compiled now, so errors surface here; a request
    /// without a constraint passes through unchanged.
    pub fn constrain<R: RequestLike>(&self, mut request: R) -> Result<Constrained<R>, Error> {
        let constraint = request.take_constraint();
        let spec = spec_from_constraint(&constraint)?;
        self.constrain_with(request, spec)
    }

    /// The request constrained by an OpenAI `response_format`.
    pub fn constrain_response_format<R: RequestLike>(
        &self,
        mut request: R,
        format: &ResponseFormat,
    ) -> Result<Constrained<R>, Error> {
        if !matches!(request.take_constraint(), Constraint::None) {
            return Err(Error::Unsupported("a request with both a constraint and a response_format".into()));
        }
        self.constrain_with(request, format.to_spec())
    }

    /// The request constrained by a grammask spec (EBNF, builtin JSON, structural tag, …);
    /// `None` leaves it unconstrained.
    /// A constraint already set on the request with `set_constraint` is an error beside a
    /// spec; without a spec it is left to mistral.rs (llguidance), untouched.
    pub fn constrain_with<R: RequestLike>(
        &self,
        mut request: R,
        spec: Option<GrammarSpec>,
    ) -> Result<Constrained<R>, Error> {
        let own = request.take_constraint();
        if spec.is_some() && !matches!(own, Constraint::None) {
            return Err(Error::Unsupported(
                "a request with both a mistral.rs constraint and a grammask spec".into(),
            ));
        }
        let sampling = request.take_sampling_params();
        let processor = match spec {
            None => None,
            Some(spec) => {
                let compiled = self.compile(&spec)?;
                let stop_ids = match &sampling.stop_toks {
                    Some(StopTokens::Ids(ids)) => ids.clone(),
                    Some(StopTokens::Seqs(seqs)) => single_token_stops(self.vocab.tokenizer(), seqs),
                    None => Vec::new(),
                };
                Some(Arc::new(GrammaskProcessor::with_stop_ids(compiled, sampling.n_choices, stop_ids)))
            }
        };
        Ok(Constrained { inner: request, sampling: Some(sampling), constraint: Some(own), processor })
    }

    /// Checks a finished choice against the grammar that constrained it: whether the text is
    /// a complete document, was cut off by `max_len` (finish reason `length`), or neither.
    /// A text cut off by `max_len` is [`Outcome::CutOff`] even when it happens to be a
    /// whole document: one that could go on (a number, trailing blanks) was still being
    /// written.
    pub fn outcome(&self, compiled: &Arc<CompiledGrammar>, text: &str, finish_reason: &str) -> Outcome {
        let mut m = GrammarMatcher::new(compiled.clone());
        match m.accept_bytes(text.as_bytes()) {
            Err(e) => Outcome::Invalid(e.to_string()),
            Ok(()) if finish_reason == "length" => Outcome::CutOff,
            Ok(()) if m.can_terminate() => Outcome::Complete,
            Ok(()) => Outcome::Invalid(format!(
                "the text is an unfinished document (finish reason `{finish_reason}`)"
            )),
        }
    }
}

/// The stop strings mistral.rs turns into stop ids: those that are one token with no longer
/// token starting with it (`add_request.rs`); the others it matches on the text.
fn single_token_stops(tok: &grammask::TokenizerInfo, seqs: &[String]) -> Vec<u32> {
    let mut out = Vec::new();
    for s in seqs.iter().filter(|s| !s.is_empty()) {
        let s = s.as_bytes();
        let mut exact = None;
        let mut extended = false;
        for id in 0..tok.tokenizer_size() as u32 {
            let b = tok.token_bytes(id);
            if b == s && !tok.is_special(id) {
                exact = Some(id);
            } else if b.len() > s.len() && b.starts_with(s) {
                extended = true;
            }
        }
        out.extend(exact.filter(|_| !extended));
    }
    out
}

/// How a constrained generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A complete document of the grammar.
    Complete,
    /// A prefix of a document (maybe a whole one that could go on), cut off by `max_len`.
    CutOff,
    /// Not a document of the grammar (another processor, a stop string, or a bug).
    Invalid(String),
}

/// A mistral.rs request whose constraint grammask serves: pass it to
/// `Model::send_chat_request` (or any method taking a `RequestLike`) as you would the
/// request itself.
pub struct Constrained<R> {
    inner: R,
    sampling: Option<SamplingParams>,
    /// What mistral.rs itself is asked to enforce: `None` whenever grammask serves the
    /// request, so that llguidance never sees the constraint too.
    constraint: Option<Constraint>,
    processor: Option<Arc<GrammaskProcessor>>,
}

impl<R> Constrained<R> {
    /// The processor (for its [`stats`](GrammaskProcessor::stats) and compiled grammar);
    /// `None` when the request is unconstrained.
    pub fn processor(&self) -> Option<&Arc<GrammaskProcessor>> {
        self.processor.as_ref()
    }
}

impl<R: RequestLike> RequestLike for Constrained<R> {
    fn messages_ref(&self) -> &[IndexMap<String, MessageContent>] {
        self.inner.messages_ref()
    }
    fn images_ref(&self) -> &[image::DynamicImage] {
        self.inner.images_ref()
    }
    fn take_messages(&mut self) -> RequestMessage {
        self.inner.take_messages()
    }
    fn take_logits_processors(&mut self) -> Option<Vec<Arc<dyn CustomLogitsProcessor>>> {
        let mut all = self.inner.take_logits_processors().unwrap_or_default();
        // Last, so that no later processor can lift a logit the mask set to −∞.
        if let Some(p) = &self.processor {
            all.push(p.clone());
        }
        (!all.is_empty()).then_some(all)
    }
    fn take_adapters(&mut self) -> Option<Vec<String>> {
        self.inner.take_adapters()
    }
    fn return_logprobs(&self) -> bool {
        self.inner.return_logprobs()
    }
    fn enable_search(&self) -> Option<bool> {
        self.inner.enable_search()
    }
    fn take_constraint(&mut self) -> Constraint {
        self.constraint.take().unwrap_or(Constraint::None)
    }
    fn take_tools(&mut self) -> Option<(Vec<Tool>, ToolChoice)> {
        self.inner.take_tools()
    }
    fn take_sampling_params(&mut self) -> SamplingParams {
        self.sampling.take().unwrap_or_else(|| self.inner.take_sampling_params())
    }
    fn take_web_search_options(&mut self) -> Option<WebSearchOptions> {
        self.inner.take_web_search_options()
    }
    fn truncate_sequence(&self) -> bool {
        self.inner.truncate_sequence()
    }
    fn resolve_pending_prefixes(&mut self, category: &ModelCategory) {
        self.inner.resolve_pending_prefixes(category)
    }
}
