//! The reference: a plain decode loop over [`LogitsConstraint`] — fill the mask, apply it
//! to the logits, sample, accept — on the router's simulated model (seeded random logits
//! with spikes anywhere in the vocabulary: only the mask keeps a constrained row valid).
//! It is the baseline every adapter is held to: same corpus, same validators.

use crate::case::Constraint;
use crate::engine::{Engine, EngineError, Finish, Generation, Request, StepTimes};
use grammask::{GrammarCompiler, GrammarMatcher, LogitsConstraint, TokenBitmask};
use grammask_router::model::{Forward, ForwardRow, Model, SimulatedModel, StepLogits};
use grammask_router::sampling::{Sampler, SamplingParams};
use grammask_router::server::LoadedTokenizer;
use std::time::{Duration, Instant};

/// See the [module docs](self).
pub struct ReferenceEngine {
    tok: LoadedTokenizer,
    compiler: GrammarCompiler,
    model: SimulatedModel,
    next_id: u64,
    times: StepTimes,
    name: &'static str,
}

impl ReferenceEngine {
    /// The loop on `tok` with the simulated model of `seed`, pushed towards ending its
    /// outputs ([`super::Bias::Closing`]).
    pub fn new(tok: LoadedTokenizer, seed: u64) -> Self {
        Self::with_bias(tok, seed, super::Bias::Closing)
    }

    /// The loop with the model's `bias` (the unbiased run's outputs reach
    /// `max_new_tokens` and are judged as prefixes).
    pub fn with_bias(tok: LoadedTokenizer, seed: u64, bias: super::Bias) -> Self {
        let compiler = GrammarCompiler::new(tok.info.clone());
        let model = super::simulated(&tok, seed, Duration::ZERO, bias);
        let name = match bias {
            super::Bias::Closing => "reference",
            super::Bias::None => "reference-unbiased",
        };
        Self { tok, compiler, model, next_id: 1, times: StepTimes::default(), name }
    }

    fn run(&mut self, r: &Request<'_>) -> Result<Generation, EngineError> {
        let err = |e: &dyn std::fmt::Display| EngineError(e.to_string());
        let mut constraint = match r.constraint {
            None => None,
            Some(c) => {
                let (spec, _) = c.grammask_spec().map_err(|e| err(&e))?;
                Some(GrammarMatcher::compile(&self.compiler, &spec).map_err(|e| err(&e))?)
            }
        };
        let info = self.tok.info.clone();
        let mut pending = self.tok.hf.encode(r.prompt, false).map_err(|e| err(&e))?.get_ids().to_vec();
        let id = self.next_id;
        self.next_id += 1;
        let mut sampler = Sampler::new(SamplingParams {
            do_sample: r.sampling.temperature > 0.0,
            temperature: if r.sampling.temperature > 0.0 { r.sampling.temperature } else { 1.0 },
            seed: r.sampling.seed,
            logprobs: false,
            ..SamplingParams::default()
        });
        let mut mask = TokenBitmask::new(1, info.vocab_size());
        let mut out = Generation::default();
        let mut bytes = Vec::new();
        let result = loop {
            if out.tokens >= r.max_new_tokens {
                break Ok(Finish::Length);
            }
            let logits = match self.model.forward(&[ForwardRow::new(id, &pending)]) {
                Ok(Forward { logits: StepLogits::Host(l), failed }) if failed.is_empty() => l,
                Ok(Forward { failed, .. }) if !failed.is_empty() => {
                    break Err(err(&failed[0].1));
                }
                Ok(_) => break Err(EngineError("the reference runs on host logits".into())),
                Err(e) => break Err(err(&e)),
            };
            if let Some(m) = constraint.as_mut() {
                let t0 = Instant::now();
                let all = match m.fill_next_token_bitmask(mask.row_mut(0)) {
                    Ok(a) => a,
                    Err(e) => break Err(err(&e)),
                };
                let t1 = Instant::now();
                if !all {
                    let v = logits.len();
                    if let Err(e) = mask.apply(logits, v, None) {
                        break Err(err(&e));
                    }
                }
                self.times.fill += t1 - t0;
                self.times.apply += t1.elapsed();
                self.times.steps += 1;
                self.times.rows += 1;
            }
            let token = match sampler.sample(logits) {
                Ok((t, _)) => t,
                Err(e) => break Err(err(&e)),
            };
            out.tokens += 1;
            let stop = info.stop_tokens().contains(&token);
            match constraint.as_mut() {
                Some(m) => {
                    let t0 = Instant::now();
                    let accepted = m.accept_token(token);
                    self.times.accept += t0.elapsed();
                    if let Err(e) = accepted {
                        break Err(err(&e));
                    }
                    // A special token the grammar took (a tool-call marker such as
                    // `[TOOL_CALLS]`) writes its text; a stop token ends the output.
                    if !stop {
                        bytes.extend_from_slice(info.token_bytes(token));
                    }
                    if m.is_terminated() {
                        break Ok(Finish::Stop);
                    }
                }
                None if stop => break Ok(Finish::Stop),
                None if info.is_special(token) => out.special_ids.push(token),
                None => bytes.extend_from_slice(info.token_bytes(token)),
            }
            pending.clear();
            pending.push(token);
        };
        self.model.release(id);
        out.finish = Some(result?);
        out.text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(out)
    }
}

impl Engine for ReferenceEngine {
    fn name(&self) -> String {
        self.name.into()
    }

    fn supports(&self, _: &Constraint) -> bool {
        true
    }

    fn generate(&mut self, requests: &[Request<'_>]) -> Vec<Result<Generation, EngineError>> {
        requests.iter().map(|r| self.run(r)).collect()
    }

    fn take_step_times(&mut self) -> Option<StepTimes> {
        Some(std::mem::take(&mut self.times))
    }

    fn forbidden_texts(&self) -> Vec<String> {
        super::special_texts(&self.tok.info)
    }
}
