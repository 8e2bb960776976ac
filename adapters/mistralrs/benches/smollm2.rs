//! Throughput of mistral.rs with grammask, with its built-in llguidance, and unconstrained,
//! in one sitting: the same prompts, schemas and greedy sampling, at batch 1 (one request at
//! a time) and batch 8 (eight concurrent requests, which mistral.rs batches), rounds
//! interleaved so that machine noise falls on every mode alike.
//!
//! ```sh
//! adapters/mistralrs/scripts/fetch-smollm2.sh
//! cargo bench -p grammask-mistralrs --bench smollm2 -- --rounds 3 --max-len 64
//! cargo bench -p grammask-mistralrs --bench smollm2 -- --model tiny   # random 2-layer model, 152k vocab
//! ```
//!
//! Per mode and batch: decode tokens/s of a sequence (its completion tokens over mistral.rs's
//! decode time for it, prefill excluded), median over rounds; the step time is its inverse;
//! for grammask the per-call split of the processor (slot table, accepting the new token,
//! mask fill, in-place apply — the apply is the only touch of the logits: no copies).

#[path = "../tests/common/mod.rs"]
mod common;

use grammask_mistralrs::{Grammask, ModelVocab, ProcessorStats};
use mistralrs::{
    Constraint, GgufModelBuilder, Model, RequestBuilder, TextMessageRole, TextModelBuilder, TokenSource,
};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Free,
    Grammask,
    Llguidance,
}

fn cases() -> Vec<(&'static str, serde_json::Value)> {
    vec![
        (
            "A person with a name and an age, as JSON.",
            serde_json::json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                "age": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["name", "age"]}),
        ),
        (
            "A list of five fruits as JSON.",
            serde_json::json!({"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 5, "maxItems": 5}),
        ),
        (
            "The status of the build as JSON, with a reason.",
            serde_json::json!({"type": "object", "properties": {"status": {"enum": ["ok", "failed", "pending"]},
                "reason": {"type": "string", "maxLength": 80}}, "required": ["status", "reason"]}),
        ),
        (
            "A point with x and y coordinates as JSON.",
            serde_json::json!({"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"]}),
        ),
    ]
}

struct Run {
    tokens: usize,
    /// Sum over requests of mistral.rs's decode time (prefill excluded: the modes generate
    /// different numbers of tokens, so a prefill share would bias tokens/s).
    decode_seconds: f64,
    stats: ProcessorStats,
    /// The first request error, if any (the mode's row reports it instead of figures).
    error: Option<String>,
}

async fn run(model: &Model, g: &Grammask, mode: Mode, batch: usize, max_len: usize) -> Run {
    let cases = cases();
    let request = |i: usize| {
        let (prompt, schema) = &cases[i % cases.len()];
        let r = RequestBuilder::new()
            .add_message(TextMessageRole::User, *prompt)
            .set_deterministic_sampler()
            .set_sampler_max_len(max_len);
        let c = Constraint::JsonSchema(schema.clone());
        match mode {
            Mode::Free => g.constrain_with(r, None),
            Mode::Grammask => g.constrain(r.set_constraint(c)),
            // Left on the request: mistral.rs enforces it with llguidance.
            Mode::Llguidance => g.constrain_with(r.set_constraint(c), None),
        }
        .expect("request")
    };
    let mut tokens = 0;
    let mut decode_seconds = 0.0;
    let mut error = None;
    let mut stats = ProcessorStats::default();
    let mut add = |s: ProcessorStats| {
        stats.calls += s.calls;
        stats.table_ns += s.table_ns;
        stats.advance_ns += s.advance_ns;
        stats.fill_ns += s.fill_ns;
        stats.apply_ns += s.apply_ns;
    };
    // Batch 1: the cases one after another; batch 8: eight requests at once.
    let waves: Vec<Vec<usize>> =
        if batch == 1 { (0..cases.len()).map(|i| vec![i]).collect() } else { vec![(0..batch).collect()] };
    for wave in waves {
        let requests: Vec<_> = wave.into_iter().map(request).collect();
        let processors: Vec<_> = requests.iter().filter_map(|r| r.processor().cloned()).collect();
        let futures: Vec<_> = requests.into_iter().map(|r| model.send_chat_request(r)).collect();
        for r in futures::future::join_all(futures).await {
            match r {
                Ok(r) => {
                    tokens += r.usage.completion_tokens;
                    decode_seconds += r.usage.total_completion_time_sec as f64;
                }
                Err(e) => {
                    let e = e.to_string();
                    error.get_or_insert(e.lines().last().unwrap_or_default().to_string());
                }
            }
        }
        processors.iter().for_each(|p| add(p.stats()));
    }
    Run { tokens, decode_seconds, stats, error }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: &str| {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned()).unwrap_or(default.into())
    };
    let rounds: usize = arg("--rounds", "3").parse()?;
    let max_len: usize = arg("--max-len", "64").parse()?;
    let which = arg("--model", "smollm2");
    let (model, vocab) = if which == "tiny" {
        let dir = common::write_tiny_llama(
            &common::scratch("bench"),
            "qwen3",
            &common::TinyLlama {
                hidden: 32,
                layers: 2,
                heads: 2,
                kv_heads: 1,
                intermediate: 64,
                vocab: 151_936,
                seed: 7,
            },
        );
        let m = TextModelBuilder::new(dir.to_string_lossy())
            .with_force_cpu()
            .with_token_source(TokenSource::None)
            .with_dtype(mistralrs::ModelDType::F32)
            .build()
            .await?;
        (m, ModelVocab::from_model_dir(&dir, &[])?)
    } else {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
        anyhow::ensure!(
            path.exists(),
            "{} missing: run adapters/mistralrs/scripts/fetch-smollm2.sh",
            path.display()
        );
        let dir = path.parent().unwrap().to_string_lossy().into_owned();
        let m = GgufModelBuilder::new(dir, vec![path.file_name().unwrap().to_string_lossy().into_owned()])
            .with_force_cpu()
            .with_token_source(TokenSource::None)
            .build()
            .await?;
        (m, ModelVocab::from_gguf(&path, &[])?)
    };
    let vocab_size = vocab.tokenizer().vocab_size();
    let g = Grammask::new(vocab);
    let modes = [Mode::Free, Mode::Grammask, Mode::Llguidance];
    // Warm-up: compile caches, allocator, mistral.rs's first-step costs.
    for m in modes {
        run(&model, &g, m, 1, 8).await;
    }
    println!("model {which} (vocab {vocab_size}), greedy, max_len {max_len}, {rounds} rounds");
    println!("| batch | mode | decode tokens/s per sequence (median) | vs unconstrained | step ms/token/seq | calls | table µs | accept µs | fill µs | apply µs | adapter µs (table+apply) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for batch in [1usize, 8] {
        let mut tps: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        let mut step: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        let mut stats = ProcessorStats::default();
        let mut errors: Vec<Option<String>> = vec![None; modes.len()];
        for round in 0..rounds {
            for k in 0..modes.len() {
                let mi = (k + round) % modes.len();
                let r = run(&model, &g, modes[mi], batch, max_len).await;
                if let Some(e) = r.error {
                    errors[mi].get_or_insert(e);
                    continue;
                }
                // Per sequence: its tokens over its decode time; a step is one token of it.
                tps[mi].push(r.tokens as f64 / r.decode_seconds);
                step[mi].push(r.decode_seconds * 1e3 / r.tokens as f64);
                if modes[mi] == Mode::Grammask {
                    stats.calls += r.stats.calls;
                    stats.table_ns += r.stats.table_ns;
                    stats.advance_ns += r.stats.advance_ns;
                    stats.fill_ns += r.stats.fill_ns;
                    stats.apply_ns += r.stats.apply_ns;
                }
            }
        }
        let free = median(tps[0].clone());
        for (mi, mode) in modes.iter().enumerate() {
            if let Some(e) = &errors[mi] {
                println!("| {batch} | {mode:?} | requests fail: {e} | | | | | | | | |");
                continue;
            }
            let t = median(tps[mi].clone());
            let per = |ns: u64| if stats.calls == 0 { 0.0 } else { ns as f64 / stats.calls as f64 / 1e3 };
            let split = if *mode == Mode::Grammask {
                format!(
                    "{} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1}",
                    stats.calls,
                    per(stats.table_ns),
                    per(stats.advance_ns),
                    per(stats.fill_ns),
                    per(stats.apply_ns),
                    per(stats.table_ns + stats.apply_ns)
                )
            } else {
                "| | | | |".into()
            };
            println!(
                "| {batch} | {mode:?} | {t:.1} | {:.3} | {:.1} | {split} |",
                t / free,
                median(step[mi].clone())
            );
        }
    }
    Ok(())
}
