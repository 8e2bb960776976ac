//! `grammask-router`: a TGI/OpenAI-compatible server whose batched step masks mixed
//! structured and unstructured rows with grammask.
//!
//! `cargo run --release -p grammask-router` serves the simulated model over the
//! embedded Qwen3 tokenizer on port 3000, with no network and no model download;
//! `--gguf PATH` serves a real Llama-family model (e.g. SmolLM2-135M-Instruct, which
//! `adapters/mistralrs/scripts/fetch-smollm2.sh` fetches) on the CPU.

/// mimalloc, as the `grammask` binary: grammar compiles allocate many small nodes.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use grammask_router::engine::EngineOptions;
use grammask_router::model::{ForwardTime, GgufModel, Model, SimulatedModel};
use grammask_router::server::{LoadedTokenizer, Router, RouterConfig, DEFAULT_MASK_PRECOMPUTE};
use grammask_router::service::Limits;
use grammask_router::step::BatchOptions;
use std::time::Duration;

/// Flags named like TGI's launcher where they mean the same.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Port to listen on.
    #[arg(long, default_value_t = 3000)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    hostname: String,
    /// `tokenizer.json` or a folder with it and `tokenizer_config.json` (default: the
    /// GGUF's own tokenizer with `--gguf`, else the embedded Qwen3 tokenizer).
    #[arg(long)]
    tokenizer: Option<std::path::PathBuf>,
    /// Serve this Llama-family GGUF model (candle, CPU) instead of the simulated model.
    #[arg(long, value_name = "PATH")]
    gguf: Option<std::path::PathBuf>,
    /// Name reported in `/info` and OpenAI answers (default: the GGUF's file name, or
    /// `grammask/simulated`).
    #[arg(long)]
    model_id: Option<String>,
    /// Most sequences per step.
    #[arg(long, default_value_t = 32)]
    max_batch_size: usize,
    /// Most prompt tokens prefilled per step.
    #[arg(long, default_value_t = 4096)]
    max_batch_prefill_tokens: usize,
    /// Most requests in flight, from arrival to the end of the answer (compiling,
    /// queued or generating); more get 429 at once (TGI's flag).
    #[arg(long, default_value_t = 128)]
    max_concurrent_requests: usize,
    /// Require `Authorization: Bearer KEY` on every route but `/health` (401 otherwise);
    /// also read from the `API_KEY` environment variable.
    #[arg(long)]
    api_key: Option<String>,
    /// The tool-calling format (a preset family: `hermes`, `llama`, `qwen_3`, …), whatever
    /// the chat template says; default: detected, or Hermes-style for a ChatML template.
    #[arg(long, value_name = "FAMILY")]
    tool_call_format: Option<String>,
    /// The member order of objects in JSON-schema constraints: `any` (JSON Schema's
    /// meaning) or `schema` (the order of `properties`, as XGrammar and llguidance write).
    #[arg(long, default_value = "any", value_name = "ORDER")]
    json_property_order: String,
    /// Work units one mask fill may spend on a row (0: unbounded); past it that request
    /// ends with an error and the batch goes on.
    #[arg(long, default_value_t = grammask::matcher::DEFAULT_FILL_WORK_LIMIT)]
    fill_work_limit: u64,
    /// Most prompt tokens.
    #[arg(long, default_value_t = 4096)]
    max_input_tokens: usize,
    /// Most tokens a request may generate.
    #[arg(long, default_value_t = 4096)]
    max_new_tokens: usize,
    /// Most bytes of a grammar or schema.
    #[arg(long, default_value_t = 1 << 20)]
    max_grammar_bytes: usize,
    /// Compile time limit per request, milliseconds (waiting for a compile thread
    /// included); the compile is cancelled when it passes.
    #[arg(long, default_value_t = 10_000)]
    compile_timeout_ms: u64,
    /// Work units a compile may spend (deterministic: the same verdict on any machine
    /// under any load); 0: unbounded.
    #[arg(long, default_value_t = grammask_router::service::DEFAULT_COMPILE_WORK_LIMIT)]
    compile_work_limit: u64,
    /// Compiles running at once (default: half the cores).
    #[arg(long)]
    compile_threads: Option<usize>,
    /// Simulated model: forward time per step, milliseconds.
    #[arg(long, default_value_t = 5.0)]
    forward_ms: f64,
    /// Simulated model: busy-wait the forward time (a CPU model) instead of sleeping.
    #[arg(long)]
    spin: bool,
    /// Simulated model: forward time per token beyond one per row (prompt, jump-forward
    /// and draft tokens), milliseconds.
    #[arg(long, default_value_t = 0.0)]
    forward_token_ms: f64,
    /// Speculative decoding: most draft tokens on a path (TGI's flag; 0: off). The model
    /// verifies each decode row's draft tree in the step's forward.
    #[arg(long, default_value_t = 0)]
    speculate: usize,
    /// Speculative decoding: most legal continuations of a grammar state drafted as
    /// siblings.
    #[arg(long, default_value_t = 4)]
    draft_width: usize,
    /// Speculative decoding: who drafts (`grammar`, `ngram` or `both`).
    #[arg(long, default_value = "both")]
    drafter: grammask_router::speculate::DrafterKind,
    /// Speculative decoding: the most other rows' draft nodes may slow a row, as a fraction
    /// of its rate without them (a per-row ledger; `none`: no cap, drafts are kept wherever
    /// they pay for the batch as a whole). See docs/speculative.md.
    #[arg(long, default_value = "0.02", value_parser = grammask_router::speculate::parse_max_slowdown)]
    speculate_max_slowdown: ::std::option::Option<f64>,
    /// Simulated model on CUDA device N: logits made, masked and sampled on the GPU
    /// (the forward's time spent by a kernel).
    #[arg(long, value_name = "N")]
    cuda_device: Option<usize>,
    /// Simulated model: seed of the logits.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Threads filling masks (default: half the cores).
    #[arg(long)]
    fill_threads: Option<usize>,
    /// The longest a step waits for the token masks past the forward, milliseconds: a
    /// row whose mask is not ready by then sits the step out (its logits kept until the
    /// mask is back) instead of stalling every row. With the overlap, never longer than the
    /// forward's time over the step's rows (at least 0.1 ms): past that, waiting costs the
    /// batch more than sitting out costs the late row.
    #[arg(long, default_value_t = grammask_router::engine::DEFAULT_LATE_MASK_GRACE.as_millis() as u64)]
    late_mask_grace_ms: u64,
    /// Time a request's compile may spend computing token masks before the request joins
    /// the batch, milliseconds (the rest are computed during decode steps when first
    /// needed; 0: only the states the first mask needs).
    #[arg(long, default_value_t = DEFAULT_MASK_PRECOMPUTE.as_secs_f64() * 1e3)]
    mask_precompute_ms: f64,
    /// Fill masks after the forward instead of during it (to measure the overlap).
    #[arg(long)]
    no_overlap: bool,
    /// Turn jump-forward (forced tokens without sampling) off.
    #[arg(long)]
    no_jump_forward: bool,
    /// Measurement: draw every masked row a second time without its mask and export both
    /// draws' times (`grammask_paired_draw_seconds_total`), to see what masking costs
    /// sampling on this deployment's rows. Doubles the sampling of masked rows.
    #[arg(long)]
    pair_masked_draws: bool,
    /// Export traces over OTLP/HTTP to this collector (e.g. `http://localhost:4318`;
    /// default: `OTEL_EXPORTER_OTLP_ENDPOINT`, else nothing is exported).
    #[arg(long)]
    otlp_endpoint: Option<String>,
    /// The service name of the exported traces.
    #[arg(long, default_value = "grammask-router")]
    otlp_service_name: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    grammask::alloc::keep_freed_pages();
    let a = Args::parse();
    // Outside the runtime: the OTLP exporter's blocking HTTP client must be made and
    // dropped off tokio's threads.
    let mut telemetry = grammask_router::telemetry::init(a.otlp_endpoint.as_deref(), &a.otlp_service_name)?;
    let result = tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(serve(a));
    telemetry.shutdown();
    result
}

async fn serve(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    let tokenizer = match (&a.tokenizer, &a.gguf) {
        (Some(p), _) => LoadedTokenizer::from_path(p)?,
        (None, Some(g)) => LoadedTokenizer::from_gguf(g)?,
        (None, None) => LoadedTokenizer::embedded()?,
    };
    let time = Duration::from_secs_f64(a.forward_ms.max(0.0) / 1e3);
    let time = if a.spin { ForwardTime::Spin(time) } else { ForwardTime::Sleep(time) };
    let vocab = tokenizer.info.vocab_size();
    let model: Box<dyn Model> = match (&a.gguf, a.cuda_device) {
        (Some(path), _) => Box::new(GgufModel::load(path)?),
        (None, None) => Box::new(
            SimulatedModel::new(vocab, a.seed, time)
                .with_token_time(Duration::from_secs_f64(a.forward_token_ms.max(0.0) / 1e3)),
        ),
        #[cfg(feature = "cuda")]
        (None, Some(n)) => Box::new(grammask_router::model::CudaSimulatedModel::new(vocab, a.seed, time, n)?),
        #[cfg(not(feature = "cuda"))]
        (None, Some(_)) => return Err("built without the `cuda` feature".into()),
    };
    let mut batch = BatchOptions::default();
    if let Some(t) = a.fill_threads {
        batch.fill_threads = t;
    }
    let config = RouterConfig {
        tokenizer,
        model,
        engine: EngineOptions {
            max_batch_size: a.max_batch_size.max(1),
            max_batch_prefill_tokens: a.max_batch_prefill_tokens,
            max_queue: a.max_concurrent_requests,
            overlap: !a.no_overlap,
            sample_under_masks: true,
            batch,
            record_steps: false,
            late_mask_grace: Some(std::time::Duration::from_millis(a.late_mask_grace_ms)),
            speculation: (a.speculate > 0).then(|| grammask_router::speculate::SpeculationOptions {
                max_slowdown: a.speculate_max_slowdown,
                ..grammask_router::speculate::SpeculationOptions::new(a.speculate, a.draft_width, a.drafter)
            }),
            pair_masked_draws: a.pair_masked_draws,
        },
        limits: Limits {
            max_input_tokens: a.max_input_tokens,
            max_new_tokens: a.max_new_tokens,
            max_grammar_bytes: a.max_grammar_bytes,
            compile_timeout: Duration::from_millis(a.compile_timeout_ms),
            compile_work_limit: (a.compile_work_limit > 0).then_some(a.compile_work_limit),
            compile_threads: a
                .compile_threads
                .unwrap_or_else(grammask_router::service::default_compile_threads),
            max_concurrent_requests: a.max_concurrent_requests.max(1),
            fill_work_limit: (a.fill_work_limit > 0).then_some(a.fill_work_limit),
            ..Limits::default()
        },
        jump_forward: !a.no_jump_forward,
        model_id: a.model_id.clone().unwrap_or_else(|| match &a.gguf {
            Some(g) => g.file_stem().map_or("gguf".into(), |s| s.to_string_lossy().into_owned()),
            None => "grammask/simulated".into(),
        }),
        mask_precompute: Duration::from_secs_f64(a.mask_precompute_ms.max(0.0) / 1e3),
        api_key: a.api_key.clone().or_else(|| std::env::var("API_KEY").ok()).filter(|k| !k.is_empty()),
        tool_call_format: match &a.tool_call_format {
            None => None,
            Some(name) => Some(grammask::tool_calling::Family::from_name(name).map_err(|e| e.to_string())?),
        },
        json_property_order: match a.json_property_order.as_str() {
            "any" => grammask::json_schema::PropertyOrder::Any,
            "schema" => grammask::json_schema::PropertyOrder::Schema,
            other => {
                return Err(format!("--json-property-order: `{other}`: expected `any` or `schema`").into())
            }
        },
    };
    let router = Router::start(config)?;
    let addr = format!("{}:{}", a.hostname, a.port);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    tracing::info!(%addr, model = %router.service.model_description, "grammask-router listening");
    let engine = router.engine.clone();
    axum::serve(listener, router.app())
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    tokio::task::spawn_blocking(move || engine.shutdown()).await?;
    Ok(())
}
