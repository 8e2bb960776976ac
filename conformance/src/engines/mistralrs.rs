//! mistral.rs in process, through grammask's adapter (`grammask-mistralrs`), on a tiny
//! random-weight Llama the suite writes itself (the embedded Qwen3 tokenizer, lm_head
//! padded as Qwen's is): only the grammar keeps its outputs valid — or on a real model
//! ([`MistralRsEngine::start_gguf`], the real-model part of the suite). A processor before
//! grammask's records the generated ids (special or padding ids must never appear) and,
//! on the random model, pushes up the tokens that close strings, objects and arrays, so
//! that random documents end. Requests of a batch are sent at once, so mistral.rs batches
//! their sequences.
//!
//! mistral.rs's SDK has no seed, so its outputs are not checked for determinism.

use crate::case::Constraint;
use crate::engine::{Engine, EngineError, Finish, Generation, Request, StepTimes};
use grammask_mistralrs::tiny::{write_tiny_llama, Recorder, TinyLlama};
use grammask_mistralrs::{Grammask, ModelVocab, ResponseFormat};
use mistralrs::{
    GgufModelBuilder, Model, ModelDType, RequestBuilder, TextMessageRole, TextModelBuilder, TokenSource,
};
use std::path::PathBuf;
use std::time::Duration;

/// Qwen3's config pads the lm_head past the tokenizer's 151,669 tokens.
const LM_HEAD: usize = 151_936;

/// See the [module docs](self).
pub struct MistralRsEngine {
    rt: tokio::runtime::Runtime,
    model: Model,
    grammask: Grammask,
    dir: PathBuf,
    times: StepTimes,
    forbidden: Vec<String>,
    /// Push up closing tokens (the random model only: a real model is left as it is).
    bias: super::Bias,
    /// The tiny model's scratch folder, removed on drop (none for a GGUF).
    scratch: bool,
}

impl Drop for MistralRsEngine {
    fn drop(&mut self) {
        if self.scratch {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl MistralRsEngine {
    /// Writes the tiny model into a scratch folder under `scratch` and loads it.
    pub fn start(scratch: &std::path::Path) -> Result<Self, EngineError> {
        let err = |e: &dyn std::fmt::Display| EngineError(format!("mistral.rs: {e}"));
        let (json, config) = grammask_router::server::embedded_qwen3().map_err(|e| err(&e))?;
        let dir = scratch.join(format!("grammask-conformance-tiny-{}", std::process::id()));
        let shape = TinyLlama {
            hidden: 32,
            layers: 2,
            heads: 2,
            kv_heads: 1,
            intermediate: 64,
            vocab: LM_HEAD,
            seed: 7,
        };
        write_tiny_llama(&dir, &json, &config, &shape).map_err(|e| err(&e))?;
        let rt = runtime().map_err(|e| err(&e))?;
        let model = rt
            .block_on(
                TextModelBuilder::new(dir.to_string_lossy())
                    // mistral.rs 0.8.1's prefix cache panics its engine when a restored
                    // cache is batched beside one of another capacity (docs/mistralrs.md).
                    .with_prefix_cache_n(None)
                    .with_force_cpu()
                    .with_token_source(TokenSource::None)
                    .with_dtype(ModelDType::F32)
                    .build(),
            )
            .map_err(|e| err(&e))?;
        let vocab = ModelVocab::from_model_dir(&dir, &[]).map_err(|e| err(&e))?;
        Ok(Self::loaded(rt, model, vocab, dir, true))
    }

    /// The engine over a loaded model; `random`: a random-weight model in a scratch
    /// folder (closers pushed up, the folder removed on drop).
    fn loaded(
        rt: tokio::runtime::Runtime,
        model: Model,
        vocab: ModelVocab,
        dir: PathBuf,
        random: bool,
    ) -> Self {
        let forbidden = super::special_texts(vocab.tokenizer());
        Self {
            rt,
            model,
            grammask: Grammask::new(vocab),
            dir,
            times: StepTimes::default(),
            forbidden,
            bias: if random { super::Bias::Closing } else { super::Bias::None },
            scratch: random,
        }
    }

    /// Loads a real model: a GGUF file mistral.rs reads (e.g. SmolLM2 from
    /// `adapters/mistralrs/scripts/fetch-smollm2.sh`), on the CPU, with its own tokenizer
    /// and chat template.
    pub fn start_gguf(path: &std::path::Path) -> Result<Self, EngineError> {
        let err = |e: &dyn std::fmt::Display| EngineError(format!("mistral.rs: {}: {e}", path.display()));
        let (dir, file) = match (path.parent(), path.file_name()) {
            (Some(d), Some(f)) => (d.to_path_buf(), f.to_string_lossy().into_owned()),
            _ => return Err(err(&"not a file path")),
        };
        let vocab = ModelVocab::from_gguf(path, &[]).map_err(|e| err(&e))?;
        let rt = runtime().map_err(|e| err(&e))?;
        let model = rt
            .block_on(
                GgufModelBuilder::new(dir.to_string_lossy(), vec![file])
                    .with_prefix_cache_n(None)
                    .with_force_cpu()
                    .with_token_source(TokenSource::None)
                    .build(),
            )
            .map_err(|e| err(&e))?;
        Ok(Self::loaded(rt, model, vocab, dir, false))
    }

    async fn send(
        &self,
        r: &Request<'_>,
    ) -> Result<(Generation, Option<grammask_mistralrs::ProcessorStats>), EngineError> {
        let err = |e: &dyn std::fmt::Display| EngineError(e.to_string());
        let tok = self.grammask.vocab().tokenizer();
        let recorder = match self.bias {
            super::Bias::Closing => Recorder::ramping(
                tok,
                super::CLOSING_BYTES,
                4.0,
                super::RAMP_AFTER as usize,
                // Twice the simulated model's ramps: the tiny Llama's logits spread wider.
                2.0 * super::CLOSER_RAMP,
                2.0 * (super::STOP_RAMP - super::CLOSER_RAMP),
                // The tags only where a tool format uses them (in a JSON string they are
                // just text).
                match r.constraint {
                    Some(Constraint::Tools { .. }) => (super::tag_ids(tok), 12.0),
                    _ => (Vec::new(), 0.0),
                },
                vec![
                    (super::opener_ids(tok), 2.0 * super::CLOSER_RAMP),
                    (super::blank_ids(tok), -2.0 * super::BLANK_RAMP),
                ],
            ),
            super::Bias::None => Recorder::new(),
        };
        let request = RequestBuilder::new()
            .add_message(TextMessageRole::User, r.prompt)
            .set_sampler_temperature(f64::from(r.sampling.temperature))
            .set_sampler_topk(0)
            .set_sampler_topp(1.0)
            .set_sampler_max_len(r.max_new_tokens)
            .add_logits_processor(recorder.clone());
        let constrained = match r.constraint {
            None => self.grammask.constrain_with(request, None),
            Some(Constraint::JsonObject) => {
                self.grammask.constrain_response_format(request, &ResponseFormat::JsonObject)
            }
            // The spec itself: mistral.rs's `Constraint::JsonSchema` has no member order, and
            // the corpus's is the schema's (`case::PROPERTY_ORDER`).
            Some(Constraint::JsonSchema(s)) => {
                self.grammask.constrain_with(request, Some(crate::case::json_spec(s)))
            }
            Some(Constraint::Regex(re)) => {
                self.grammask.constrain(request.set_constraint(mistralrs::Constraint::Regex(re.clone())))
            }
            Some(Constraint::Lark(t)) => {
                self.grammask.constrain(request.set_constraint(mistralrs::Constraint::Lark(t.clone())))
            }
            Some(c @ (Constraint::Ebnf(_) | Constraint::Tools { .. })) => {
                let (spec, _) = c.grammask_spec().map_err(|e| err(&e))?;
                self.grammask.constrain_with(request, Some(spec))
            }
        }
        .map_err(|e| err(&e))?;
        let processor = constrained.processor().cloned();
        let response = self.model.send_chat_request(constrained).await.map_err(|e| err(&e))?;
        let choice = response.choices.first().ok_or_else(|| EngineError("no choice in the answer".into()))?;
        let mut g = Generation {
            text: choice.message.content.clone().unwrap_or_default(),
            finish: Some(match choice.finish_reason.as_str() {
                "stop" => Finish::Stop,
                "length" => Finish::Length,
                other => Finish::Other(other.into()),
            }),
            tokens: response.usage.completion_tokens,
            ..Generation::default()
        };
        // The last context the processor saw holds the prompt and every generated token
        // but the last (the prompt's first contexts could be shorter with mistral.rs's
        // prefix cache, which hands over only the uncached tail; it is off here).
        let contexts = recorder.contexts();
        let last = contexts.last().map_or(&[][..], Vec::as_slice);
        let generated = &last[last.len().saturating_sub(g.tokens.saturating_sub(1))..];
        for &id in generated {
            if (tok.is_special(id) && !tok.stop_tokens().contains(&id)) || id as usize >= tok.tokenizer_size()
            {
                g.special_ids.push(id);
            }
        }
        g.special_ids.sort_unstable();
        g.special_ids.dedup();
        // A constrained output is judged on the tokens the grammar took, not on
        // mistral.rs's `content`, which is a view of them (its reasoning parser moves
        // `<think>` blocks to `reasoning_content` and drops tags; a tag a grammar allows
        // inside a JSON string would cut the content there). Stopped, they are all there
        // (the last sampled token is the stop token); cut off, all but the last — still a
        // prefix of the output.
        if r.constraint.is_some() {
            let bytes: Vec<u8> =
                generated.iter().flat_map(|&id| tok.token_bytes(id).iter().copied()).collect();
            g.text = String::from_utf8_lossy(&bytes).into_owned();
        }
        Ok((g, processor.map(|p| p.stats())))
    }
}

impl Engine for MistralRsEngine {
    fn name(&self) -> String {
        "mistralrs".into()
    }

    fn supports(&self, _: &Constraint) -> bool {
        true
    }

    fn deterministic(&self) -> bool {
        false
    }

    fn generate(&mut self, requests: &[Request<'_>]) -> Vec<Result<Generation, EngineError>> {
        let results = self.rt.block_on(futures::future::join_all(requests.iter().map(|r| self.send(r))));
        results
            .into_iter()
            .map(|r| {
                r.map(|(g, stats)| {
                    if let Some(s) = stats {
                        self.times.steps += s.calls;
                        self.times.rows += s.calls;
                        self.times.fill += Duration::from_nanos(s.fill_ns);
                        self.times.apply += Duration::from_nanos(s.apply_ns);
                        self.times.other += Duration::from_nanos(s.table_ns + s.advance_ns);
                    }
                    g
                })
            })
            .collect()
    }

    fn take_step_times(&mut self) -> Option<StepTimes> {
        Some(std::mem::take(&mut self.times))
    }

    fn forbidden_texts(&self) -> Vec<String> {
        self.forbidden.clone()
    }
}

/// The runtime the engine's requests run on (two workers: this machine's cores).
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
}
