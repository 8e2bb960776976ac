//! The router over HTTP on loopback, through TGI's API (`/generate`, `/generate_stream`)
//! or OpenAI's (`/v1/chat/completions` and `/v1/completions`, streamed or not), exactly
//! as a client sees it.
//! The router runs in process on the simulated model (seeded random logits over the
//! embedded Qwen3 tokenizer); a batch of requests is sent at once, so the router batches
//! them.

use crate::case::Constraint;
use crate::engine::{Engine, EngineError, Finish, Generation, Request, StepTimes};
use futures::StreamExt;
use grammask::tool_calling::Family;
use grammask_router::engine::EngineOptions;
use grammask_router::server::{LoadedTokenizer, Router, RouterConfig};
use grammask_router::service::Limits;
use grammask_router::step::BatchOptions;
use serde_json::{json, Value};
use std::time::Duration;

/// Which API the requests go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// TGI's `/generate`.
    Tgi,
    /// TGI's `/generate_stream` (SSE).
    TgiStream,
    /// OpenAI's `/v1/chat/completions`.
    OpenAi,
    /// OpenAI's `/v1/chat/completions` with `stream: true` (SSE deltas).
    OpenAiStream,
    /// OpenAI's `/v1/completions` (a raw prompt; regexes, grammars and tool calls as
    /// structural tags in `response_format`).
    Completions,
    /// `/v1/completions` with `stream: true`.
    CompletionsStream,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::Tgi => "router-tgi",
            Api::TgiStream => "router-tgi-stream",
            Api::OpenAi => "router-openai",
            Api::OpenAiStream => "router-openai-stream",
            Api::Completions => "router-completions",
            Api::CompletionsStream => "router-completions-stream",
        }
    }
}

/// Settings of the router under test.
#[derive(Debug, Clone)]
pub struct RouterSetup {
    /// The simulated model's forward time.
    pub forward: Duration,
    /// The simulated model's seed.
    pub seed: u64,
    /// Most sequences per step.
    pub max_batch_size: usize,
    /// Threads filling masks.
    pub fill_threads: usize,
    /// A real model (Llama-family GGUF, the router's own forward on the CPU) instead of the simulated one;
    /// its own tokenizer then replaces the one given to [`RouterEngine::start`].
    pub gguf: Option<std::path::PathBuf>,
    /// The tool-calling format (`None`: the router's detection).
    pub tool_call_format: Option<Family>,
    /// The simulated model's push towards ending outputs.
    pub bias: super::Bias,
    /// Jump-forward (the router's default: on).
    pub jump_forward: bool,
    /// Draw each masked row twice, under its mask and without, timing both
    /// (`EngineOptions::pair_masked_draws`: a measurement, off by default).
    pub pair_masked_draws: bool,
    /// The simulated model's logits on this CUDA device (the router's device path: masks
    /// uploaded, applied and sampled on the GPU); `None`: on the host.
    pub cuda_device: Option<usize>,
}

impl Default for RouterSetup {
    fn default() -> Self {
        Self {
            forward: Duration::from_millis(1),
            seed: 11,
            max_batch_size: 32,
            fill_threads: 1,
            gguf: None,
            tool_call_format: None,
            bias: super::Bias::Closing,
            jump_forward: true,
            pair_masked_draws: false,
            cuda_device: None,
        }
    }
}

/// See the [module docs](self).
pub struct RouterEngine {
    api: Api,
    rt: tokio::runtime::Runtime,
    router: Router,
    base: String,
    client: reqwest::Client,
    family: Option<Family>,
    forbidden: Vec<String>,
    /// The metrics' totals at the last `take_step_times`.
    last_sums: Sums,
}

impl Drop for RouterEngine {
    fn drop(&mut self) {
        self.router.engine.shutdown();
    }
}

impl RouterEngine {
    /// The router's address (`http://127.0.0.1:PORT`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Starts a router on `tok` and a loopback port, spoken to through `api`.
    pub fn start(tok: LoadedTokenizer, api: Api, setup: &RouterSetup) -> Result<Self, EngineError> {
        let err = |e: &dyn std::fmt::Display| EngineError(format!("starting the router: {e}"));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| err(&e))?;
        let (tok, model): (LoadedTokenizer, Box<dyn grammask_router::model::Model>) = match &setup.gguf {
            // The device model has no closing push: its outputs run longer.
            None if setup.cuda_device.is_some() => {
                let time = grammask_router::model::ForwardTime::Sleep(setup.forward);
                let n = setup.cuda_device.unwrap_or(0);
                let model = grammask_router::model::CudaSimulatedModel::new(
                    tok.info.vocab_size(),
                    setup.seed,
                    time,
                    n,
                )
                .map_err(|e| err(&e))?;
                (tok, Box::new(model))
            }
            None => {
                let model = Box::new(super::simulated(&tok, setup.seed, setup.forward, setup.bias));
                (tok, model)
            }
            Some(path) => (
                LoadedTokenizer::from_gguf(path).map_err(|e| err(&e))?,
                Box::new(grammask_router::model::GgufModel::load(path).map_err(|e| err(&e))?),
            ),
        };
        let forbidden = super::special_texts(&tok.info);
        let config = RouterConfig {
            tokenizer: tok,
            model,
            engine: EngineOptions {
                max_batch_size: setup.max_batch_size,
                max_queue: 4096,
                batch: BatchOptions { fill_threads: setup.fill_threads, ..BatchOptions::default() },
                pair_masked_draws: setup.pair_masked_draws,
                ..EngineOptions::default()
            },
            limits: Limits::default(),
            jump_forward: setup.jump_forward,
            model_id: "conformance".into(),
            mask_precompute: grammask_router::server::DEFAULT_MASK_PRECOMPUTE,
            api_key: None,
            tool_call_format: setup.tool_call_format,
            json_property_order: crate::case::PROPERTY_ORDER,
        };
        let router = Router::start(config).map_err(|e| err(&e))?;
        let app = router.app();
        let base = rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| err(&e))?;
            let base = format!("http://{}", l.local_addr().map_err(|e| err(&e))?);
            tokio::spawn(async move { axum::serve(l, app).await });
            Ok::<_, EngineError>(base)
        })?;
        let family = router.service.family;
        Ok(Self {
            api,
            rt,
            router,
            base,
            client: reqwest::Client::new(),
            family,
            forbidden,
            last_sums: Sums::default(),
        })
    }

    /// The metrics' running totals.
    fn metric_sums(&self) -> Option<Sums> {
        let text = self.rt.block_on(async {
            self.client.get(format!("{}/metrics", self.base)).send().await.ok()?.text().await.ok()
        })?;
        let sum = |name: &str| {
            text.lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>()
        };
        Some(Sums {
            fill: sum("grammask_mask_fill_seconds_sum"),
            wait: sum("grammask_mask_wait_seconds_sum"),
            apply: sum("grammask_mask_apply_seconds_sum"),
            sample: sum("grammask_sample_seconds_sum"),
            accept: sum("grammask_accept_seconds_sum"),
            jump_forward: sum("grammask_jump_forward_seconds_sum"),
            steps: sum("grammask_step_seconds_count"),
            step: sum("grammask_step_seconds_sum"),
            rows: sum("grammask_batch_size_sum"),
            forced: sum("grammask_rows_forced_total"),
            paired_rows: sum("grammask_paired_draws_total"),
            paired_masked: sum("grammask_paired_draw_seconds_total{draw=\"masked\"}"),
            paired_unmasked: sum("grammask_paired_draw_seconds_total{draw=\"unmasked\"}"),
        })
    }
}

/// The router's metrics' running totals (seconds, steps, rows).
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    fill: f64,
    wait: f64,
    apply: f64,
    sample: f64,
    accept: f64,
    jump_forward: f64,
    steps: f64,
    /// The steps' wall time.
    step: f64,
    rows: f64,
    /// Rows whose step gave forced text (not sampled).
    forced: f64,
    /// Rows drawn twice (`pair_masked_draws`), and their draws' time under the masks and
    /// without.
    paired_rows: f64,
    paired_masked: f64,
    paired_unmasked: f64,
}

fn finish_of(reason: &str) -> Finish {
    match reason {
        "eos_token" | "stop" | "tool_calls" => Finish::Stop,
        "length" => Finish::Length,
        other => Finish::Other(other.to_string()),
    }
}

fn tgi_body(r: &Request<'_>, stream: bool) -> Result<Value, EngineError> {
    let mut params = json!({"max_new_tokens": r.max_new_tokens, "seed": r.sampling.seed, "details": true});
    if r.sampling.temperature > 0.0 {
        params["do_sample"] = json!(true);
        params["temperature"] = json!(r.sampling.temperature);
    }
    match r.constraint {
        None => {}
        Some(Constraint::JsonSchema(s)) => params["grammar"] = json!({"type": "json", "value": s}),
        Some(Constraint::JsonObject) => {
            params["grammar"] = json!({"type": "json", "value": {"type": "object"}})
        }
        Some(Constraint::Regex(re)) => params["grammar"] = json!({"type": "regex", "value": re}),
        Some(other) => return Err(EngineError(format!("TGI's API has no {:?} grammar", other.kind()))),
    }
    Ok(json!({"inputs": r.prompt, "parameters": params, "stream": stream}))
}

fn openai_body(r: &Request<'_>, stream: bool) -> Result<Value, EngineError> {
    let mut body = json!({"model": "conformance", "messages": [{"role": "user", "content": r.prompt}],
        "max_tokens": r.max_new_tokens, "seed": r.sampling.seed, "temperature": r.sampling.temperature,
        "stream": stream});
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    match r.constraint {
        None => {}
        Some(Constraint::JsonSchema(s)) => {
            body["response_format"] =
                json!({"type": "json_schema", "json_schema": {"name": "case", "schema": s}})
        }
        Some(Constraint::JsonObject) => body["response_format"] = json!({"type": "json_object"}),
        Some(Constraint::Tools { tools, tool_choice, .. }) => {
            body["tools"] = json!(tools);
            body["tool_choice"] = tool_choice.clone();
        }
        Some(other) => return Err(EngineError(format!("OpenAI's API has no {:?} constraint", other.kind()))),
    }
    Ok(body)
}

/// `/v1/completions`: JSON schemas as `json_schema`, regexes, grammars and tool calls
/// (the family preset's tag) as `structural_tag` formats; the text holds the calls.
fn completions_body(r: &Request<'_>, stream: bool) -> Result<Value, EngineError> {
    let mut body = json!({"model": "conformance", "prompt": r.prompt, "max_tokens": r.max_new_tokens,
        "seed": r.sampling.seed, "temperature": r.sampling.temperature, "stream": stream});
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    let tag = |format: Value| json!({"type": "structural_tag", "format": format});
    body["response_format"] = match r.constraint {
        None => return Ok(body),
        Some(Constraint::JsonSchema(s)) => {
            json!({"type": "json_schema", "json_schema": {"name": "case", "schema": s}})
        }
        Some(Constraint::JsonObject) => json!({"type": "json_object"}),
        Some(Constraint::Regex(re)) => tag(json!({"type": "regex", "pattern": re})),
        Some(Constraint::Ebnf(g)) => tag(json!({"type": "grammar", "grammar": g})),
        Some(c @ Constraint::Tools { .. }) => match c.grammask_spec().map_err(EngineError)? {
            (grammask::GrammarSpec::StructuralTag(t), _) => {
                serde_json::from_str(&t).map_err(|e| EngineError(format!("the preset's tag: {e}")))?
            }
            // `tool_choice: none`: free text.
            (grammask::GrammarSpec::Regex(re), _) => tag(json!({"type": "regex", "pattern": re})),
            _ => return Err(EngineError("the preset gives no structural tag".into())),
        },
        Some(other) => {
            return Err(EngineError(format!("/v1/completions has no {:?} constraint", other.kind())))
        }
    };
    Ok(body)
}

/// The `data:` payloads of an SSE body.
fn sse_events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

async fn send(
    client: &reqwest::Client,
    base: &str,
    api: Api,
    r: &Request<'_>,
) -> Result<Generation, EngineError> {
    let err = |e: &dyn std::fmt::Display| EngineError(e.to_string());
    let (path, body) = match api {
        Api::Tgi => ("/generate", tgi_body(r, false)?),
        Api::TgiStream => ("/generate_stream", tgi_body(r, true)?),
        Api::OpenAi => ("/v1/chat/completions", openai_body(r, false)?),
        Api::OpenAiStream => ("/v1/chat/completions", openai_body(r, true)?),
        Api::Completions => ("/v1/completions", completions_body(r, false)?),
        Api::CompletionsStream => ("/v1/completions", completions_body(r, true)?),
    };
    let resp = client.post(format!("{base}{path}")).json(&body).send().await.map_err(|e| err(&e))?;
    let status = resp.status();
    let mut bytes = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        bytes.extend_from_slice(&chunk.map_err(|e| err(&e))?);
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if !status.is_success() {
        return Err(EngineError(format!("HTTP {status}: {text}")));
    }
    let mut g = Generation::default();
    match api {
        Api::Tgi => {
            let v: Value = serde_json::from_str(&text).map_err(|e| err(&e))?;
            g.text = v["generated_text"].as_str().unwrap_or_default().to_string();
            let d = &v["details"];
            g.finish = Some(finish_of(d["finish_reason"].as_str().unwrap_or_default()));
            g.tokens = d["generated_tokens"].as_u64().unwrap_or(0) as usize;
            for t in d["tokens"].as_array().into_iter().flatten() {
                if t["special"].as_bool() == Some(true) && d["finish_reason"] != "eos_token" {
                    g.special_ids.extend(t["id"].as_u64().map(|i| i as u32));
                }
            }
        }
        Api::TgiStream => {
            let events = sse_events(&text);
            let last = events.last().ok_or_else(|| EngineError(format!("no events: {text}")))?;
            if let Some(e) = last.get("error") {
                return Err(EngineError(format!("stream error: {e}")));
            }
            g.text = last["generated_text"].as_str().unwrap_or_default().to_string();
            let reason = last["details"]["finish_reason"].as_str().unwrap_or_default();
            g.finish = Some(finish_of(reason));
            g.tokens = events.len();
            // Special tokens before the end (the last event's may be the stop token).
            for e in &events[..events.len().saturating_sub(1)] {
                if e["token"]["special"].as_bool() == Some(true) {
                    g.special_ids.extend(e["token"]["id"].as_u64().map(|i| i as u32));
                }
            }
            // The streamed texts of the ordinary tokens add up to the final text.
            let joined: String = events
                .iter()
                .filter(|e| e["token"]["special"].as_bool() != Some(true))
                .filter_map(|e| e["token"]["text"].as_str())
                .collect();
            if joined != g.text {
                return Err(EngineError(format!("streamed tokens {joined:?} do not spell {:?}", g.text)));
            }
        }
        Api::OpenAi => {
            let v: Value = serde_json::from_str(&text).map_err(|e| err(&e))?;
            let c = &v["choices"][0];
            g.text = c["message"]["content"].as_str().unwrap_or_default().to_string();
            g.finish = Some(finish_of(c["finish_reason"].as_str().unwrap_or_default()));
            g.tokens = v["usage"]["completion_tokens"].as_u64().unwrap_or(0) as usize;
            if let Some(calls) = c["message"]["tool_calls"].as_array() {
                g.tool_calls = Some(
                    calls
                        .iter()
                        .map(|t| {
                            let f = &t["function"];
                            (
                                f["name"].as_str().unwrap_or_default().into(),
                                f["arguments"].as_str().unwrap_or_default().into(),
                            )
                        })
                        .collect(),
                );
            } else if r.constraint.is_some_and(|c| matches!(c, Constraint::Tools { .. })) {
                g.tool_calls = Some(Vec::new());
            }
        }
        // Both OpenAI streams: content deltas (chat) or text pieces (completions).
        Api::OpenAiStream | Api::CompletionsStream => {
            let mut calls: Vec<(String, String)> = Vec::new();
            for e in sse_events(&text) {
                if let Some(err) = e.get("error") {
                    return Err(EngineError(format!("stream error: {err}")));
                }
                if let Some(n) = e["usage"]["completion_tokens"].as_u64() {
                    g.tokens = n as usize;
                }
                let Some(c) = e["choices"].get(0) else { continue };
                let d = &c["delta"];
                let piece = if api == Api::OpenAiStream { &d["content"] } else { &c["text"] };
                if let Some(t) = piece.as_str() {
                    g.text.push_str(t);
                }
                for t in d["tool_calls"].as_array().into_iter().flatten() {
                    let i = t["index"].as_u64().unwrap_or(0) as usize;
                    if calls.len() <= i {
                        calls.resize(i + 1, (String::new(), String::new()));
                    }
                    if let Some(n) = t["function"]["name"].as_str() {
                        calls[i].0.push_str(n);
                    }
                    if let Some(a) = t["function"]["arguments"].as_str() {
                        calls[i].1.push_str(a);
                    }
                }
                if let Some(f) = c["finish_reason"].as_str() {
                    g.finish = Some(finish_of(f));
                }
            }
            if api == Api::OpenAiStream && r.constraint.is_some_and(|c| matches!(c, Constraint::Tools { .. }))
            {
                g.tool_calls = Some(calls);
            }
        }
        Api::Completions => {
            let v: Value = serde_json::from_str(&text).map_err(|e| err(&e))?;
            let c = &v["choices"][0];
            g.text = c["text"].as_str().unwrap_or_default().to_string();
            g.finish = Some(finish_of(c["finish_reason"].as_str().unwrap_or_default()));
            g.tokens = v["usage"]["completion_tokens"].as_u64().unwrap_or(0) as usize;
        }
    }
    Ok(g)
}

impl Engine for RouterEngine {
    fn name(&self) -> String {
        self.api.name().into()
    }

    fn supports(&self, c: &Constraint) -> bool {
        match (self.api, c) {
            (
                Api::Tgi | Api::TgiStream,
                Constraint::JsonSchema(_) | Constraint::JsonObject | Constraint::Regex(_),
            ) => true,
            (Api::OpenAi | Api::OpenAiStream, Constraint::JsonSchema(_) | Constraint::JsonObject) => true,
            (Api::OpenAi | Api::OpenAiStream, Constraint::Tools { family, .. }) => {
                Some(*family) == self.family
            }
            (
                Api::Completions | Api::CompletionsStream,
                Constraint::JsonSchema(_)
                | Constraint::JsonObject
                | Constraint::Regex(_)
                | Constraint::Ebnf(_)
                | Constraint::Tools { .. },
            ) => true,
            _ => false,
        }
    }

    fn generate(&mut self, requests: &[Request<'_>]) -> Vec<Result<Generation, EngineError>> {
        let (client, base, api) = (&self.client, self.base.as_str(), self.api);
        self.rt.block_on(futures::future::join_all(requests.iter().map(|r| send(client, base, api, r))))
    }

    fn take_step_times(&mut self) -> Option<StepTimes> {
        let now = self.metric_sums()?;
        let last = std::mem::replace(&mut self.last_sums, now);
        let d = |a: f64, b: f64| Duration::from_secs_f64((a - b).max(0.0));
        Some(StepTimes {
            steps: (now.steps - last.steps).max(0.0) as u64,
            rows: (now.rows - last.rows).max(0.0) as u64,
            unsampled: (now.forced - last.forced).max(0.0) as u64,
            fill: d(now.fill, last.fill),
            wait: d(now.wait, last.wait),
            apply: d(now.apply, last.apply),
            sample: d(now.sample, last.sample),
            accept: d(now.accept, last.accept),
            jump_forward: d(now.jump_forward, last.jump_forward),
            other: Duration::ZERO,
            wall: d(now.step, last.step),
            paired_rows: (now.paired_rows - last.paired_rows).max(0.0) as u64,
            paired_masked: d(now.paired_masked, last.paired_masked),
            paired_unmasked: d(now.paired_unmasked, last.paired_unmasked),
        })
    }

    fn forbidden_texts(&self) -> Vec<String> {
        self.forbidden.clone()
    }
}
