//! The step engine under load: tokens/s of a batch whose rows are all constrained by
//! dev JSON schemas against the same batch unconstrained, with the overlap on and off,
//! on the simulated model (sleeping forward: a GPU's, which leaves the CPU free).
//!
//! ```sh
//! cargo run --release -p grammask-router --bin bench_step -- \
//!     --tokenizer ../shared/data/tokenizers/llama3_1 \
//!     --schemas ../shared/data/jsonschemabench/dev/Github_easy --batch 1,8,32,128
//! ```
//! Prints one JSON object per (batch, setup) and a markdown table. The rate compared is
//! the decode rate at the full batch (rows per second over steps with every slot busy).
//!
//! `--gguf PATH` runs a real model instead (candle on the CPU; SmolLM2-135M-Instruct from
//! `adapters/mistralrs/scripts/fetch-smollm2.sh`): each request is a chat asking for a
//! document of its schema, rendered with the model's own template; with `--requests N`
//! and `--setups` the run can be sized to a slow model:
//!
//! ```sh
//! cargo run --release -p grammask-router --bin bench_step -- --gguf .models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
//!     --schemas ../shared/data/jsonschemabench/dev/Github_easy --batch 1,8 --requests 50 \
//!     --setups unconstrained,constrained --max-new-tokens 256
//! ```
//!
//! Every completed constrained answer is checked against its schema with the
//! `jsonschema` crate (`valid` / `invalid` / `cut_off` in the JSON lines); unconstrained
//! answers are checked the same way, for comparison.
//!
//! `--cuda N` runs the CUDA simulated model on device N instead: the forward is a kernel
//! spinning for `--forward-ms`, the logits stay on the GPU, the masks are uploaded by
//! the pool that filled them and applied by grammask-gpu's kernel, and tokens are drawn
//! on the device.

// The JSON line of a setup has more fields than `json!`'s default recursion allows.
#![recursion_limit = "256"]

/// mimalloc, as the `grammask` binary: grammar compiles allocate many small nodes.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use grammask::{GrammarSpec, JsonSchemaOptions};
use grammask_router::engine::{self, EngineOptions, Event, Job, Request, StepRecord};
use grammask_router::metrics::Metrics;
use grammask_router::model::{ForwardTime, Model, SimulatedModel};
use grammask_router::sampling::SamplingParams;
use grammask_router::server::LoadedTokenizer;
use grammask_router::step::BatchOptions;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
struct Args {
    /// Tokenizer folder or `tokenizer.json` (default with `--gguf`: the GGUF's own).
    #[arg(long)]
    tokenizer: Option<std::path::PathBuf>,
    /// A real model (Llama-family GGUF, candle on the CPU) instead of the simulated one.
    #[arg(long, value_name = "PATH")]
    gguf: Option<std::path::PathBuf>,
    /// Requests per setup (default: batch × rounds).
    #[arg(long)]
    requests: Option<usize>,
    /// Setups to run, in the order given, of `unconstrained`, `constrained`, `warm`
    /// (constrained, every mask of the schemas computed before the clock: a compile-cache
    /// hit), `apply` (constrained, the masks written over the host logits before sampling
    /// instead of read by the sampler), `no-overlap` (constrained, the fill after the
    /// forward), `spec-grammar`, `spec-ngram`, `spec-both` (constrained, speculative with
    /// that drafter), `mixed` (half the requests constrained) and `mixed-spec` (the same,
    /// speculative with `both`). "× unconstrained" needs `unconstrained` listed first.
    #[arg(long, value_delimiter = ',', default_value = "unconstrained,constrained,warm,apply,no-overlap")]
    setups: Vec<String>,
    /// A MaskBench folder of schemas (`{"schema": …}` files).
    #[arg(long)]
    schemas: std::path::PathBuf,
    /// Batch sizes.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128")]
    batch: Vec<usize>,
    /// Forward time, milliseconds.
    #[arg(long, default_value_t = 5.0)]
    forward_ms: f64,
    /// Simulated model: forward time per token beyond one per row (prompt, jump-forward
    /// and draft tokens), milliseconds.
    #[arg(long, default_value_t = 0.0)]
    forward_token_ms: f64,
    /// Tokens per request.
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// Requests per batch slot (the batch is refilled as requests end).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Schemas used (the first that compile, in file order).
    #[arg(long, default_value_t = 50)]
    max_schemas: usize,
    /// Run the CUDA simulated model on this device (logits, masks and sampling on the GPU).
    #[arg(long, value_name = "N")]
    cuda: Option<usize>,
    /// Accept sampled tokens on the step thread (default: deferred to the next fill).
    #[arg(long)]
    immediate_accepts: bool,
    /// Mask fill threads.
    #[arg(long, default_value_t = 1)]
    fill_threads: usize,
    /// Time each compile may spend computing token masks before its request joins the
    /// batch, milliseconds (the router's `--mask-precompute-ms`; 0.25: the library's
    /// default, masks almost all computed by the decode steps' fills).
    #[arg(long, default_value_t = grammask_router::server::DEFAULT_MASK_PRECOMPUTE.as_secs_f64() * 1e3)]
    mask_precompute_ms: f64,
    /// Sample every request at this temperature (greedy otherwise).
    #[arg(long)]
    temperature: Option<f32>,
    /// With `--temperature`: a zero `logit_bias` on every request, which sends the draw
    /// down the host's general path (cumulative weights) instead of the Gumbel-max draw
    /// temperature-only requests share with the device sampler (to measure the two).
    #[arg(long)]
    zero_bias: bool,
    /// TGI's `repetition_penalty` for every request (greedy otherwise): a small real
    /// model decoding greedily tends to repeat itself inside free strings until it is
    /// cut off.
    #[arg(long)]
    repetition_penalty: Option<f32>,
    /// Speculative setups (`spec-grammar`, `spec-ngram`, `spec-both`): most draft tokens
    /// on a path.
    #[arg(long, default_value_t = 4)]
    speculate: usize,
    /// Speculative setups: most siblings a grammar node drafts.
    #[arg(long, default_value_t = 4)]
    draft_width: usize,
    /// Speculative setups: never back off (draft every step).
    #[arg(long)]
    no_backoff: bool,
    /// Speculative setups: the router's `--speculate-max-slowdown` (`none`: no cap; with
    /// `--no-backoff` the ledger is off whatever this says).
    #[arg(long, default_value = "0.02", value_parser = grammask_router::speculate::parse_max_slowdown)]
    max_slowdown: ::std::option::Option<f64>,
    /// Turn jump-forward (forced text appended without sampling) off.
    #[arg(long)]
    no_jump_forward: bool,
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// What became of a request: its text, whether it ended on its own, and whether the text
/// is a document of its schema.
#[derive(Debug, Default, Clone, Copy)]
struct Verdicts {
    valid: usize,
    invalid: usize,
    cut_off: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    grammask::alloc::keep_freed_pages();
    let a = Args::parse();
    let tok = match (&a.tokenizer, &a.gguf) {
        (Some(p), _) => LoadedTokenizer::from_path(p)?,
        (None, Some(g)) => LoadedTokenizer::from_gguf(g)?,
        (None, None) => return Err("--tokenizer or --gguf is required".into()),
    };
    let chat = match (&a.gguf, &tok.config) {
        (Some(_), Some(c)) => grammask_router::chat::ChatTemplate::from_tokenizer_config(c)?,
        _ => None,
    };
    let compiler = grammask::GrammarCompiler::new(tok.info.clone());
    let mut files: Vec<_> = std::fs::read_dir(&a.schemas)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    let mut specs = Vec::new();
    let mut schemas = Vec::new();
    for f in files {
        let Ok(doc) = serde_json::from_str::<Value>(&std::fs::read_to_string(&f)?) else { continue };
        let spec = GrammarSpec::JsonSchema {
            schema: doc["schema"].to_string(),
            options: JsonSchemaOptions::default(),
        };
        // Schemas the validator cannot build (remote refs, …) could not be checked.
        let Ok(validator) = jsonschema::validator_for(&doc["schema"]) else { continue };
        if compiler.compile(&spec).is_ok() {
            specs.push(spec);
            let name = f.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
            schemas.push((doc["schema"].clone(), validator, name));
        }
        if specs.len() == a.max_schemas {
            break;
        }
    }
    // One prompt per schema: a chat asking for a document of it (real model), or a
    // fixed text (the simulated model ignores what it reads).
    let mut prompts = Vec::new();
    for (schema, _, _) in &schemas {
        let text = match &chat {
            Some(t) => t.render(
                &[json!({"role": "user", "content": format!(
                    "Reply with only a JSON document that follows this JSON schema:\n{schema}")})],
                None,
            )?,
            None => "Answer with a JSON document:".to_string(),
        };
        prompts.push(tok.hf.encode(text, false).map_err(|e| e.to_string())?.get_ids().to_vec());
    }
    let forward = Duration::from_secs_f64(a.forward_ms / 1e3);
    let mut table = Vec::new();
    for &b in &a.batch {
        let mut base_tps = None;
        use grammask_router::speculate::{DrafterKind, SpeculationOptions};
        let known = [
            ("unconstrained", "unconstrained", false, true, true, false, None),
            ("constrained", "constrained", true, true, true, false, None),
            ("constrained, warm masks", "warm", true, true, true, true, None),
            ("constrained, masks applied", "apply", true, true, false, false, None),
            ("constrained, no overlap", "no-overlap", true, false, true, false, None),
            (
                "constrained, speculative (grammar)",
                "spec-grammar",
                true,
                true,
                true,
                false,
                Some(DrafterKind::Grammar),
            ),
            (
                "constrained, speculative (ngram)",
                "spec-ngram",
                true,
                true,
                true,
                false,
                Some(DrafterKind::Ngram),
            ),
            (
                "constrained, speculative (both)",
                "spec-both",
                true,
                true,
                true,
                false,
                Some(DrafterKind::Both),
            ),
            // Half the requests constrained, half not: the unconstrained rows' own rate with
            // and without speculation beside them.
            ("mixed", "mixed", true, true, true, false, None),
            ("mixed, speculative (both)", "mixed-spec", true, true, true, false, Some(DrafterKind::Both)),
        ];
        // In the order given (to alternate which of two setups runs first).
        let mut chosen = Vec::new();
        for name in &a.setups {
            match known.iter().find(|k| k.1 == name) {
                Some(k) => chosen.push(*k),
                None => {
                    let names: Vec<&str> = known.iter().map(|k| k.1).collect();
                    return Err(format!("unknown setup `{name}` (one of {})", names.join(", ")).into());
                }
            }
        }
        for (setup, key, constrained, overlap, sample_under_masks, warm, drafter) in chosen {
            let vocab = tok.info.vocab_size();
            let model: Box<dyn Model> = match (&a.gguf, a.cuda) {
                (Some(g), _) => Box::new(grammask_router::model::GgufModel::load(g)?),
                (None, None) => Box::new(
                    SimulatedModel::new(vocab, 5, ForwardTime::Sleep(forward))
                        .with_token_time(Duration::from_secs_f64(a.forward_token_ms.max(0.0) / 1e3)),
                ),
                #[cfg(feature = "cuda")]
                (None, Some(n)) => Box::new(grammask_router::model::CudaSimulatedModel::new(
                    vocab,
                    5,
                    ForwardTime::Sleep(forward),
                    n,
                )?),
                #[cfg(not(feature = "cuda"))]
                (None, Some(_)) => return Err("built without the `cuda` feature".into()),
            };
            let model_name = model.name();
            let n_requests = a.requests.unwrap_or(b * a.rounds);
            let options = EngineOptions {
                max_batch_size: b,
                max_queue: n_requests + 1,
                overlap,
                sample_under_masks,
                batch: BatchOptions {
                    fill_threads: a.fill_threads,
                    defer_accepts: !a.immediate_accepts,
                    encoder: (!a.no_jump_forward).then(|| tok.encoder()),
                    ..BatchOptions::default()
                },
                record_steps: true,
                speculation: drafter.map(|d| SpeculationOptions {
                    backoff: !a.no_backoff,
                    max_slowdown: a.max_slowdown,
                    ..SpeculationOptions::new(a.speculate, a.draft_width, d)
                }),
                ..EngineOptions::default()
            };
            let metrics = Arc::new(Metrics::new());
            let engine = engine::start(model, tok.info.clone(), options, metrics.clone())?;
            let mut receivers = Vec::new();
            // Compiled before the clock starts (compiles happen off the step thread, and a
            // request waits for its own in the queue), by a fresh compiler with the
            // router's options: every setup starts with the masks of a server seeing
            // these schemas for the first time (those the precompute budget reached).
            let compile_options = grammask_router::server::compile_options(
                Duration::from_secs_f64(a.mask_precompute_ms.max(0.0) / 1e3),
                &grammask_router::service::Limits::default(),
            );
            let compiler =
                grammask::GrammarCompiler::with_options(tok.info.clone(), compile_options, 256 << 20);
            let mut compile_ms = Vec::new();
            if warm {
                // A server that has seen these schemas before: its compile cache holds
                // them with every mask computed (the steady state when the same response
                // formats and tools come back), so no fill walks the vocabulary.
                for spec in specs.iter().take(n_requests) {
                    compiler.compile(spec)?.precompute();
                }
            }
            let mixed = key.starts_with("mixed");
            let mut requests = Vec::new();
            for i in 0..n_requests {
                let constraint = if constrained && !(mixed && i % 2 == 1) {
                    let t = Instant::now();
                    let compiled = compiler.compile(&specs[i % specs.len()])?;
                    compile_ms.push(t.elapsed().as_secs_f64() * 1e3);
                    Some(grammask::GrammarMatcher::new(compiled))
                } else {
                    None
                };
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                receivers.push(rx);
                let sampling = SamplingParams {
                    seed: i as u64,
                    logprobs: false,
                    repetition_penalty: a.repetition_penalty,
                    do_sample: a.temperature.is_some(),
                    temperature: a.temperature.unwrap_or(1.0),
                    logit_bias: if a.zero_bias { vec![(0, 0.0)] } else { Vec::new() },
                    ..SamplingParams::default()
                };
                let job = Job {
                    prompt: prompts[i % prompts.len()].clone(),
                    sampling,
                    max_new_tokens: a.max_new_tokens,
                    stop: Vec::new(),
                    strip_stop: false,
                    prompt_logprobs: None,
                };
                requests.push(Request { job, constraint, events: tx });
            }
            let t0 = Instant::now();
            for r in requests {
                engine.submit(r)?;
            }
            let mut tokens = 0usize;
            // Tokens of the answers that ended on their own (a looping answer cut off at
            // max_new_tokens would inflate a rate, and its drafts' acceptance).
            let mut completed_tokens = 0usize;
            let mut verdicts = Verdicts::default();
            // Which schemas' answers reached `max_new_tokens` (constrained setups: a rerun
            // with a larger limit can take just these).
            let mut cut_off_files = Vec::new();
            // Every answer's text in request order, hashed: setups that must give the same
            // outputs (speculation against none) give the same digest.
            let mut digest = std::collections::hash_map::DefaultHasher::new();
            // Each request's events read on a thread of its own, timed as they come: a row's
            // own rate is its tokens over the time from its first token to its end.
            let readers: Vec<_> = receivers
                .into_iter()
                .map(|mut rx| {
                    std::thread::spawn(move || {
                        let mut got = Vec::new();
                        while let Some(ev) = rx.blocking_recv() {
                            let last = !matches!(ev, Event::Token(_));
                            got.push((Instant::now(), ev));
                            if last {
                                break;
                            }
                        }
                        got
                    })
                })
                .collect();
            let mut plain_rates = Vec::new();
            // The unconstrained requests' token arrival times (mixed setups).
            let mut plain_times: Vec<Vec<Instant>> = Vec::new();
            for (i, reader) in readers.into_iter().enumerate() {
                let events = reader.join().map_err(|_| "a reader thread panicked")?;
                let first = events.first().map(|e| e.0);
                if mixed && i % 2 == 1 {
                    plain_times.push(
                        events.iter().filter(|e| matches!(e.1, Event::Token(_))).map(|e| e.0).collect(),
                    );
                }
                let mut mine = 0;
                for (at, ev) in events {
                    match ev {
                        Event::Token(_) => {
                            tokens += 1;
                            mine += 1;
                        }
                        Event::End(e) => {
                            std::hash::Hash::hash(&(i, &e.text), &mut digest);
                            if mixed && i % 2 == 1 {
                                let secs = first.map_or(0.0, |f| at.duration_since(f).as_secs_f64());
                                if secs > 0.0 && mine > 1 {
                                    plain_rates.push((mine - 1) as f64 / secs);
                                }
                            }
                            if e.reason == engine::FinishReason::EosToken {
                                completed_tokens += mine;
                            }
                            if e.reason != engine::FinishReason::EosToken {
                                verdicts.cut_off += 1;
                                cut_off_files.push(schemas[i % schemas.len()].2.clone());
                            } else {
                                let ok = serde_json::from_str::<Value>(e.text.trim())
                                    .is_ok_and(|d| schemas[i % schemas.len()].1.is_valid(&d));
                                if ok {
                                    verdicts.valid += 1;
                                } else {
                                    verdicts.invalid += 1;
                                }
                            }
                            break;
                        }
                        Event::Error(e) | Event::Unavailable(e) => return Err(e.into()),
                    }
                }
            }
            let wall = t0.elapsed().as_secs_f64();
            engine.shutdown();
            let records: Vec<StepRecord> = engine.take_step_records();
            // Decode steps with every slot busy (a step that prefills a prompt is not a
            // decode step: on a real model it costs many tokens' time).
            let full: Vec<&StepRecord> = records.iter().filter(|r| r.rows == b && r.prefill == 0).collect();
            let us = |f: fn(&StepRecord) -> Duration| {
                full.iter().map(|r| f(r).as_secs_f64() * 1e6).collect::<Vec<_>>()
            };
            // Decode rate at the full batch: sampled rows per second of full steps (the
            // end-to-end rate also counts the ramp and the tail, where constrained
            // requests, which end when their grammar does, leave the batch emptier).
            let full_time: f64 = full.iter().map(|r| r.step.as_secs_f64()).sum();
            let tps = if full_time > 0.0 { (full.len() * b) as f64 / full_time } else { 0.0 };
            // Every token the full steps made (drawn, accepted from drafts, forced).
            let generated_tps = if full_time > 0.0 {
                full.iter().map(|r| r.tokens).sum::<usize>() as f64 / full_time
            } else {
                0.0
            };
            // An unconstrained request's rate over the decode steps it shared with the batch:
            // its tokens after the first that came in steps without a prefill, over those
            // steps' time. (Its plain rate also counts the steps in which newly admitted
            // requests prefilled their prompts — tens of milliseconds each — and speculation,
            // ending the constrained requests sooner, moves those admissions earlier.)
            let mut steps: Vec<(Instant, Duration, bool)> =
                records.iter().filter_map(|r| r.started.map(|at| (at, r.step, r.prefill == 0))).collect();
            steps.sort_by_key(|s| s.0);
            let step_of = |t: Instant| steps.partition_point(|s| s.0 <= t).checked_sub(1);
            let mut decode_rates = Vec::new();
            for times in &plain_times {
                let (Some(a), Some(b)) =
                    (times.first().and_then(|&t| step_of(t)), times.last().and_then(|&t| step_of(t)))
                else {
                    continue;
                };
                let secs: f64 = steps[a + 1..=b].iter().filter(|s| s.2).map(|s| s.1.as_secs_f64()).sum();
                let n =
                    times[1..].iter().filter(|&&t| step_of(t).is_some_and(|k| k > a && steps[k].2)).count();
                if secs > 0.0 {
                    decode_rates.push(n as f64 / secs);
                }
            }
            let verifies = records.iter().filter(|r| r.draft_nodes > 0).count();
            // The mask work of a verify step (every node's mask) against its forward.
            let verify_us = |f: fn(&StepRecord) -> Duration| {
                records
                    .iter()
                    .filter(|r| r.draft_nodes > 0)
                    .map(|r| f(r).as_secs_f64() * 1e6)
                    .collect::<Vec<_>>()
            };
            let drafted: usize = records.iter().map(|r| r.draft_nodes).sum();
            let accepted: usize = records.iter().map(|r| r.draft_accepted).sum();
            let ratio = base_tps.map(|u| tps / u);
            if !constrained {
                base_tps = Some(tps);
            }
            let row = json!({
                "batch": b, "setup": setup, "model": model_name, "requests": n_requests, "schemas": schemas.len(),
                "valid": verdicts.valid, "invalid": verdicts.invalid, "cut_off": verdicts.cut_off, "tokens": tokens, "wall_s": wall, "end_to_end_tokens_per_s": tokens as f64 / wall,
                "tokens_per_s": tps, "generated_tokens_per_s": generated_tps,
                "outputs_digest": format!("{:016x}", std::hash::Hasher::finish(&digest)),
                "completed_tokens": completed_tokens, "completed_tokens_per_s": completed_tokens as f64 / wall,
                "completion_rate": verdicts.valid as f64 / n_requests.max(1) as f64,
                "verify_steps": verifies, "draft_nodes": drafted, "draft_accepted": accepted,
                "accepted_per_verify": if verifies > 0 { accepted as f64 / verifies as f64 } else { 0.0 },
                "backoffs": metrics.draft_backoffs.get(),
                "unconstrained_row_tokens_per_s_p50": pct(plain_rates.clone(), 0.5),
                "unconstrained_row_tokens_per_s_mean": plain_rates.iter().sum::<f64>() / plain_rates.len().max(1) as f64,
                "unconstrained_row_decode_tokens_per_s_p50": pct(decode_rates.clone(), 0.5),
                "unconstrained_row_decode_tokens_per_s_mean": decode_rates.iter().sum::<f64>() / decode_rates.len().max(1) as f64,
                "verify_fill_us_p50": pct(verify_us(|r| r.fill), 0.5), "verify_forward_us_p50": pct(verify_us(|r| r.forward), 0.5),
                "verify_wait_us_p50": pct(verify_us(|r| r.wait), 0.5),
                "verify_nodes_p50": pct(records.iter().filter(|r| r.draft_nodes > 0).map(|r| r.draft_nodes as f64).collect(), 0.5),
                "ratio_to_unconstrained": ratio, "steps": records.len(), "full_steps": full.len(),
                "wait_us_p50": pct(us(|r| r.wait), 0.5), "wait_us_p99": pct(us(|r| r.wait), 0.99),
                "fill_us_p50": pct(us(|r| r.fill), 0.5), "fill_us_p99": pct(us(|r| r.fill), 0.99),
                "apply_us_p50": pct(us(|r| r.apply), 0.5), "sample_us_p50": pct(us(|r| r.sample), 0.5),
                "step_us_p50": pct(us(|r| r.step), 0.5), "forward_us_p50": pct(us(|r| r.forward), 0.5),
                "mask_precompute_ms": a.mask_precompute_ms,
                "cut_off_schemas": if constrained { cut_off_files } else { Vec::new() },
                "compile_ms_p50": pct(compile_ms.clone(), 0.5), "compile_ms_p99": pct(compile_ms, 0.99),
            });
            println!("{row}");
            table.push(row);
        }
    }
    println!("| batch | setup | decode tokens/s (full batch) | × unconstrained | end-to-end tokens/s | completed-answer tokens/s | accepted per verify | step p50 µs | fill p50 / p99 µs | wait p50 / p99 µs | apply p50 µs | sample p50 µs | compile p50 / p99 ms | valid / invalid / cut off |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &table {
        let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
        let ratio = r["ratio_to_unconstrained"].as_f64().map_or("-".to_string(), |x| format!("{x:.3}"));
        println!(
            "| {} | {} | {:.1} | {} | {:.1} | {:.1} | {:.2} | {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} | {:.0} | {:.1} / {:.1} | {} / {} / {} |",
            r["batch"],
            r["setup"].as_str().unwrap_or(""),
            f("tokens_per_s"),
            ratio,
            f("end_to_end_tokens_per_s"),
            f("completed_tokens_per_s"),
            f("accepted_per_verify"),
            f("step_us_p50"),
            f("fill_us_p50"),
            f("fill_us_p99"),
            f("wait_us_p50"),
            f("wait_us_p99"),
            f("apply_us_p50"),
            f("sample_us_p50"),
            f("compile_ms_p50"),
            f("compile_ms_p99"),
            r["valid"],
            r["invalid"],
            r["cut_off"]
        );
    }
    Ok(())
}
