//! The CUDA path against the host path (ignored here: they need a GPU; run with
//! `cargo test --release -p grammask-router --test cuda -- --ignored` on a machine with
//! one, or carry the test binary there, as `gpu/README.md` says for grammask-gpu).
//!
//! The CUDA simulated model makes the host model's logits bit for bit, so on the same
//! requests with greedy decoding the whole GPU pipeline (device logits, masks uploaded
//! by the fill pool and applied by grammask-gpu's kernel, tokens chosen on the device)
//! must give exactly the host pipeline's tokens.
#![cfg(feature = "cuda")]

use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec};
use grammask_gpu::cudarc::driver::{CudaContext, CudaSlice};
use grammask_router::engine::{self, EngineOptions, Event, FinishReason, Job, Request};
use grammask_router::metrics::Metrics;
use grammask_router::model::{
    CudaSimulatedModel, ForwardRow, ForwardTime, Model, SimulatedModel, StepLogits,
};
use grammask_router::sampling::{DeviceSampler, NothingAllowed, Sampler, SamplingParams};
use grammask_router::server::LoadedTokenizer;
use grammask_router::step::BatchOptions;
use std::sync::Arc;
use std::time::Duration;

fn host_logits(m: &mut dyn Model, rows: &[ForwardRow<'_>]) -> Vec<f32> {
    match m.forward(rows).unwrap().logits {
        StepLogits::Host(l) => l.to_vec(),
        StepLogits::Cuda(d) => d.stream.clone_dtoh(&d.logits).unwrap(),
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn cuda_simulated_model_makes_the_host_models_logits() {
    let vocab = 151_669;
    let mut host = SimulatedModel::new(vocab, 9, ForwardTime::Sleep(Duration::ZERO));
    let mut dev =
        CudaSimulatedModel::new(vocab, 9, ForwardTime::Sleep(Duration::from_micros(200)), 0).unwrap();
    let steps: [&[(u64, &[u32])]; 3] =
        [&[(1, &[5, 6, 7]), (2, &[9])], &[(2, &[4]), (1, &[151_000]), (3, &[1, 2])], &[(3, &[8])]];
    for (k, step) in steps.iter().enumerate() {
        let rows: Vec<ForwardRow<'_>> =
            step.iter().map(|&(id, tokens)| ForwardRow::new(id, tokens)).collect();
        let a = host_logits(&mut host, &rows);
        let b = host_logits(&mut dev, &rows);
        assert_eq!(a.len(), b.len());
        let differ = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
        assert_eq!(differ, 0, "step {k}: {differ} logits differ");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn device_sampling_agrees_with_the_host_sampler() {
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let mut ds = DeviceSampler::new(stream.clone()).unwrap();
    let vocab = 50_000;
    let rows = 6;
    let mut logits = vec![0f32; rows * vocab];
    for (i, x) in logits.iter_mut().enumerate() {
        let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        *x = if h.is_multiple_of(3) { f32::NEG_INFINITY } else { (h % 1000) as f32 / 100.0 };
    }
    // Row 4: ties at the maximum (the lowest id wins, as on the host); row 5: nothing allowed.
    for j in 0..vocab {
        logits[4 * vocab + j] = if j % 7 == 3 { 2.0 } else { f32::NEG_INFINITY };
        logits[5 * vocab + j] = f32::NEG_INFINITY;
    }
    let dev: CudaSlice<f32> = stream.clone_htod(&logits).unwrap();
    let greedy = SamplingParams { logprobs: true, ..SamplingParams::default() };
    let mut host: Vec<Sampler> = (0..rows).map(|_| Sampler::new(greedy.clone())).collect();
    let mut on_dev: Vec<Sampler> = (0..rows).map(|_| Sampler::new(greedy.clone())).collect();
    let mut refs: Vec<&mut Sampler> = on_dev.iter_mut().collect();
    let got = ds.sample(&dev.slice(..), vocab, &mut refs).unwrap();
    for r in 0..rows {
        let want = host[r].sample(&mut logits[r * vocab..(r + 1) * vocab].to_vec());
        match (&want, &got[r]) {
            (Ok((a, la)), Ok((b, lb))) => {
                assert_eq!(a, b, "row {r}");
                assert!((la.unwrap() - lb.unwrap()).abs() < 1e-3, "row {r}: {la:?} vs {lb:?}");
            }
            (Err(NothingAllowed), Err(NothingAllowed)) => assert_eq!(r, 5),
            _ => panic!("row {r}: host {want:?}, device {:?}", got[r]),
        }
    }
    assert_eq!(got[4].as_ref().unwrap().0, 3);

    // Sampled rows: a three-token row drawn 4,000 times follows softmax(x / T), never a
    // masked token; the same seed draws the same tokens.
    let row: Vec<f32> =
        (0..vocab).map(|j| [0.0, 1.0, 2.0].get(j).copied().unwrap_or(f32::NEG_INFINITY)).collect();
    let dev_row = stream.clone_htod(&row).unwrap();
    let params = SamplingParams { do_sample: true, temperature: 0.5, seed: 42, ..SamplingParams::default() };
    let draw = |seed: u64| {
        let mut s = Sampler::new(SamplingParams { seed, ..params.clone() });
        let mut ds = DeviceSampler::new(stream.clone()).unwrap();
        (0..4000)
            .map(|_| ds.sample(&dev_row.slice(..), vocab, &mut [&mut s]).unwrap()[0].as_ref().unwrap().0)
            .collect::<Vec<_>>()
    };
    let a = draw(42);
    assert_eq!(a, draw(42));
    assert_ne!(a, draw(43));
    // One algorithm on both sides: the host sampler draws the same tokens from the same
    // seed (issue 46, item 5; on the CPU, `sampling::tests` check it against the kernel's
    // emulation).
    let mut on_host = Sampler::new(SamplingParams { seed: 42, ..params.clone() });
    let host_draws: Vec<u32> = (0..4000).map(|_| on_host.sample(&mut row.clone()).unwrap().0).collect();
    assert_eq!(a, host_draws);
    let z: f64 = [0.0f64, 2.0, 4.0].iter().map(|x| x.exp()).sum();
    for t in 0..3u32 {
        let want = (2.0 * f64::from(t)).exp() / z;
        let got = a.iter().filter(|&&x| x == t).count() as f64 / a.len() as f64;
        assert!((got - want).abs() < 0.03, "token {t}: {got} vs {want}");
    }
    assert!(a.iter().all(|&t| t < 3));

    // A top-k request is drawn on the host from a copy of its row.
    let mut s = Sampler::new(SamplingParams { top_k: Some(1), ..params.clone() });
    assert_eq!(ds.sample(&dev_row.slice(..), vocab, &mut [&mut s]).unwrap()[0].as_ref().unwrap().0, 2);
}

/// Runs `n` greedy requests (constrained by the schemas in turn, or not) through the
/// engine on `model`; returns each request's text.
fn run(
    model: Box<dyn Model>,
    tok: &LoadedTokenizer,
    specs: &[GrammarSpec],
    n: usize,
    batch: usize,
) -> Vec<(String, FinishReason)> {
    let options = EngineOptions {
        max_batch_size: batch,
        max_queue: n + 1,
        batch: BatchOptions { fill_threads: 2, ..BatchOptions::default() },
        ..EngineOptions::default()
    };
    let engine = engine::start(model, tok.info.clone(), options, Arc::new(Metrics::new())).unwrap();
    let compiler = GrammarCompiler::new(tok.info.clone());
    let prompt = tok.hf.encode("Answer with a JSON document:", false).unwrap().get_ids().to_vec();
    let mut rx = Vec::new();
    for i in 0..n {
        let constraint = (!specs.is_empty())
            .then(|| GrammarMatcher::new(compiler.compile(&specs[i % specs.len()]).unwrap()));
        let (tx, r) = tokio::sync::mpsc::unbounded_channel();
        rx.push(r);
        let job = Job {
            prompt: prompt.clone(),
            sampling: SamplingParams { seed: i as u64, ..SamplingParams::default() },
            max_new_tokens: 160,
            stop: Vec::new(),
            strip_stop: false,
            prompt_logprobs: None,
        };
        engine.submit(Request { job, constraint, events: tx }).unwrap();
    }
    let mut out = Vec::new();
    for mut r in rx {
        loop {
            match r.blocking_recv() {
                Some(Event::End(e)) => {
                    out.push((e.text, e.reason));
                    break;
                }
                Some(Event::Error(e) | Event::Unavailable(e)) => panic!("request failed: {e}"),
                Some(Event::Token(_)) => {}
                None => panic!("channel closed"),
            }
        }
    }
    engine.shutdown();
    out
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_gpu_pipeline_gives_the_host_pipelines_tokens() {
    let tok = LoadedTokenizer::embedded().unwrap();
    let vocab = tok.info.vocab_size();
    let specs = [
        GrammarSpec::json_schema(
            r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                "age": {"type": "integer", "minimum": 0}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
                "required": ["name", "age"], "additionalProperties": false}"#,
        ),
        GrammarSpec::Regex("[0-9]{3}-[a-z]+".into()),
        GrammarSpec::BuiltinJson,
    ];
    let forward = ForwardTime::Sleep(Duration::from_millis(1));
    let re = regex::Regex::new("^[0-9]{3}-[a-z]+$").unwrap();
    for batch in [1, 7] {
        let host = run(Box::new(SimulatedModel::new(vocab, 3, forward)), &tok, &specs, 9, batch);
        let dev =
            run(Box::new(CudaSimulatedModel::new(vocab, 3, forward, 0).unwrap()), &tok, &specs, 9, batch);
        assert_eq!(host, dev, "batch {batch}");
        let schema: serde_json::Value = match &specs[0] {
            GrammarSpec::JsonSchema { schema, .. } => serde_json::from_str(schema).unwrap(),
            _ => unreachable!(),
        };
        let validator = jsonschema::validator_for(&schema).unwrap();
        let complete: Vec<_> =
            dev.iter().enumerate().filter(|(_, (_, r))| *r == FinishReason::EosToken).collect();
        assert!(complete.len() >= 3, "{dev:?}");
        for (i, (text, _)) in complete {
            match i % 3 {
                0 => assert!(validator.is_valid(&serde_json::from_str(text).unwrap()), "{text}"),
                1 => assert!(re.is_match(text), "{text}"),
                _ => {
                    serde_json::from_str::<serde_json::Value>(text).unwrap();
                }
            }
        }
        // Unconstrained rows too: the same tokens on both paths.
        let host = run(Box::new(SimulatedModel::new(vocab, 3, forward)), &tok, &[], 4, batch);
        let dev = run(Box::new(CudaSimulatedModel::new(vocab, 3, forward, 0).unwrap()), &tok, &[], 4, batch);
        assert_eq!(host, dev, "unconstrained, batch {batch}");
    }
}
