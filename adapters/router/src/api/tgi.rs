//! TGI's API: `POST /generate`, `POST /generate_stream` (SSE), `POST /` (either, by
//! its `stream` field) and `GET /info`, with TGI's request and response shapes.

use super::{collect, parse_body, sse, ApiError, Flavor};
use crate::engine::{EndEvent, Event, FinishReason, Job, TokenEvent};
use crate::sampling::SamplingParams;
use crate::service::{Generation, Prompt, Service};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use grammask::{GrammarSpec, JsonSchemaOptions, TokenizerInfo};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// `POST /generate`'s body; unknown fields are refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GenerateRequest {
    inputs: String,
    #[serde(default)]
    parameters: Parameters,
    /// Read by `POST /` to pick the endpoint; here only so that it is not unknown.
    #[serde(default)]
    #[allow(dead_code)]
    stream: bool,
}

/// TGI's `parameters`; unknown fields are refused, as TGI does.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Parameters {
    best_of: Option<u32>,
    temperature: Option<f32>,
    repetition_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    top_k: Option<i64>,
    top_p: Option<f32>,
    typical_p: Option<f32>,
    do_sample: Option<bool>,
    max_new_tokens: Option<u64>,
    return_full_text: Option<bool>,
    stop: Option<Vec<String>>,
    truncate: Option<usize>,
    watermark: Option<bool>,
    details: Option<bool>,
    decoder_input_details: Option<bool>,
    seed: Option<u64>,
    top_n_tokens: Option<u32>,
    grammar: Option<Grammar>,
    adapter_id: Option<String>,
}

/// `parameters.grammar`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", content = "value", deny_unknown_fields)]
enum Grammar {
    /// A JSON schema (an object, or its JSON text).
    #[serde(rename = "json", alias = "json_object")]
    Json(Value),
    /// A regular expression the whole output must match.
    #[serde(rename = "regex")]
    Regex(String),
    /// `{name, schema}` (TGI 3).
    #[serde(rename = "json_schema")]
    JsonSchema(JsonSchemaConfig),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonSchemaConfig {
    #[allow(dead_code)]
    name: Option<String>,
    schema: Value,
}

fn schema_spec(v: &Value) -> Result<GrammarSpec, String> {
    // TGI accepts the schema as an object or as its JSON text.
    let text = match v {
        Value::String(s) => {
            serde_json::from_str::<Value>(s)
                .map_err(|e| format!("grammar: the JSON schema text is not JSON: {e}"))?;
            s.clone()
        }
        other => other.to_string(),
    };
    Ok(GrammarSpec::JsonSchema { schema: text, options: JsonSchemaOptions::default() })
}

/// TGI's validation, then the generation.
fn validate(s: &Service, inputs: &str, p: &Parameters) -> Result<Generation, String> {
    let positive = |name: &str, v: Option<f32>| match v {
        Some(x) if x.is_nan() || x <= 0.0 => Err(format!("`{name}` must be strictly positive")),
        _ => Ok(()),
    };
    positive("temperature", p.temperature)?;
    positive("repetition_penalty", p.repetition_penalty)?;
    if p.top_p.is_some_and(|x| !(x > 0.0 && x < 1.0)) {
        return Err("`top_p` must be > 0.0 and < 1.0".into());
    }
    if p.top_k.is_some_and(|k| k <= 0) {
        return Err("`top_k` must be strictly positive".into());
    }
    if p.frequency_penalty.is_some_and(|x| !(-2.0..=2.0).contains(&x)) {
        return Err("`frequency_penalty` must be >= -2.0 and <= 2.0".into());
    }
    if p.typical_p.is_some_and(|x| !(x > 0.0 && x < 1.0)) {
        return Err("`typical_p` must be > 0.0 and < 1.0".into());
    }
    if let Some(b) = p.best_of {
        if b == 0 || b > MAX_BEST_OF {
            return Err(format!("`best_of` must be > 0 and <= {MAX_BEST_OF}. Given: {b}"));
        }
        if b > 1 && p.seed.is_some() {
            return Err("`seed` must not be set when `best_of` > 1".into());
        }
    }
    if let Some(n) = p.top_n_tokens.filter(|&n| n > MAX_TOP_N_TOKENS) {
        return Err(format!("`top_n_tokens` must be <= {MAX_TOP_N_TOKENS}. Given: {n}"));
    }
    if p.watermark == Some(true) {
        return Err("`watermark` is not supported by this server".into());
    }
    if p.decoder_input_details == Some(true) && s.model_device_type != "cpu" {
        return Err("`decoder_input_details`: the prompt's log-probabilities are computed on host logits only; this model's logits are on a device".into());
    }
    if p.adapter_id.is_some() {
        return Err("`adapter_id`: this server has no adapters".into());
    }
    // TGI truncates first, then checks the input against its limit.
    let mut prompt = s.tokenize(inputs, Prompt::Raw).map_err(|e| e.to_string())?;
    if let Some(t) = p.truncate.filter(|&t| t > 0 && t < prompt.len()) {
        prompt.drain(..prompt.len() - t);
    }
    s.check_input(&prompt).map_err(|e| e.to_string())?;
    let max_new_tokens = s.max_new_tokens(p.max_new_tokens, prompt.len()).map_err(|e| e.to_string())?;
    let temperature = p.temperature.unwrap_or(1.0);
    // TGI samples when asked to, or when any warper is set.
    let do_sample = p.do_sample.unwrap_or(false)
        || temperature != 1.0
        || p.top_k.is_some()
        || p.top_p.is_some()
        || p.typical_p.is_some();
    if p.best_of.is_some_and(|b| b > 1) && !do_sample {
        return Err("you must use sampling when `best_of` is > 1".into());
    }
    let sampling = SamplingParams {
        do_sample,
        temperature,
        top_k: p.top_k.map(|k| k as usize),
        top_p: p.top_p,
        repetition_penalty: p.repetition_penalty,
        typical_p: p.typical_p,
        frequency_penalty: p.frequency_penalty,
        presence_penalty: None,
        logit_bias: Vec::new(),
        seed: p.seed.unwrap_or_else(rand::random),
        logprobs: true,
        top_logprobs: p.top_n_tokens.unwrap_or(0) as usize,
    };
    let spec = match &p.grammar {
        None => None,
        Some(Grammar::Json(v)) => Some(schema_spec(v)?),
        Some(Grammar::JsonSchema(c)) => Some(schema_spec(&c.schema)?),
        Some(Grammar::Regex(r)) => Some(GrammarSpec::Regex(r.clone())),
    };
    let stop = p.stop.clone().unwrap_or_default();
    // The prompt's log-probabilities (`details.prefill`), TGI's `decoder_input_details`.
    let prompt_logprobs = (p.decoder_input_details == Some(true)).then_some(0);
    Ok(Generation {
        job: Job { prompt, sampling, max_new_tokens, stop, strip_stop: false, prompt_logprobs },
        spec,
    })
}

/// TGI's default `--max-top-n-tokens`.
const MAX_TOP_N_TOKENS: u32 = 5;

/// Most candidates `best_of` may ask for (TGI's `--max-best-of` defaults to 2): each is a
/// row of the batch.
const MAX_BEST_OF: u32 = 4;

fn token_json(t: &TokenEvent) -> Value {
    json!({"id": t.id, "text": t.text, "logprob": t.logprob, "special": t.special})
}

/// A token's `top_tokens` (TGI's `Token`s: id, its own text, log-probability, special),
/// `null` when the request did not ask for them.
fn top_tokens_json(info: &TokenizerInfo, t: &TokenEvent, asked: bool) -> Value {
    if !asked {
        return Value::Null;
    }
    let top: Vec<Value> = t
        .top
        .iter()
        .map(|&(id, lp)| {
            json!({"id": id, "text": String::from_utf8_lossy(info.token_bytes(id)), "logprob": lp,
                   "special": info.is_special(id)})
        })
        .collect();
    Value::Array(top)
}

fn finish_json(r: FinishReason) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
}

pub(super) async fn generate(State(s): State<Arc<Service>>, body: Bytes) -> Response {
    s.metrics.requests.with_label_values(&["generate"]).inc();
    match run_generate(s, body).await {
        Ok(r) => Json(r).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn run_generate(s: Arc<Service>, body: Bytes) -> Result<Value, ApiError> {
    let (req, generation) = prepare(&s, body).await?;
    // `best_of`: that many candidates, each with a seed of its own; the answer is the one
    // whose tokens' log-probabilities sum highest, the others its `best_of_sequences`.
    let best_of = req.parameters.best_of.unwrap_or(1).max(1);
    let mut gens = Vec::new();
    for k in 0..best_of {
        let mut g = generation.clone();
        if k > 0 {
            g.job.sampling.seed = rand::random();
        }
        gens.push(g);
    }
    // Queued together: the candidates share the prompt's prefill.
    let rxs = s.submit_many(gens).await.map_err(|e| ApiError::from_service(Flavor::Tgi, e))?;
    let mut answers = Vec::new();
    for c in futures::future::join_all(rxs.into_iter().map(collect)).await {
        let c = c.map_err(|e| ApiError::from_service(Flavor::Tgi, e))?;
        let Some(end) = c.end.clone() else {
            return Err(ApiError::validation(Flavor::Tgi, "no answer"));
        };
        let score: f64 = c.tokens.iter().map(|t| f64::from(t.logprob.unwrap_or(0.0))).sum();
        answers.push((score, c, end));
    }
    let best = (0..answers.len()).max_by(|&a, &b| answers[a].0.total_cmp(&answers[b].0)).unwrap_or(0);
    let (_, c, end) = answers.swap_remove(best);
    let p = &req.parameters;
    let text_of = |end: &EndEvent| {
        if p.return_full_text == Some(true) {
            format!("{}{}", req.inputs, end.text)
        } else {
            end.text.clone()
        }
    };
    let details = |c: &super::Collected, end: &EndEvent| {
        let mut d = json!({
            "finish_reason": finish_json(end.reason),
            "generated_tokens": end.generated_tokens,
            "seed": end.seed,
            "prefill": end.prefill.iter().map(|t| json!({"id": t.id,
                "text": String::from_utf8_lossy(s.info.token_bytes(t.id)), "logprob": t.logprob}))
                .collect::<Vec<_>>(),
            "tokens": c.tokens.iter().map(token_json).collect::<Vec<_>>(),
        });
        if p.top_n_tokens.is_some_and(|n| n > 0) {
            d["top_tokens"] =
                c.tokens.iter().map(|t| top_tokens_json(&s.info, t, true)).collect::<Vec<_>>().into();
        }
        d
    };
    let mut out = json!({"generated_text": text_of(&end)});
    if p.details == Some(true) {
        out["details"] = details(&c, &end);
        if best_of > 1 {
            out["details"]["best_of_sequences"] = answers
                .iter()
                .map(|(_, c, end)| {
                    let mut d = details(c, end);
                    d["generated_text"] = text_of(end).into();
                    d
                })
                .collect::<Vec<_>>()
                .into();
        }
    }
    Ok(out)
}

pub(super) async fn generate_stream(State(s): State<Arc<Service>>, body: Bytes) -> Response {
    s.metrics.requests.with_label_values(&["generate_stream"]).inc();
    match start_stream(s, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// `POST /`: `/generate` or `/generate_stream` by the body's `stream`.
pub(super) async fn compat(state: State<Arc<Service>>, body: Bytes) -> Response {
    let stream =
        serde_json::from_slice::<Value>(&body).ok().and_then(|v| v.get("stream").and_then(Value::as_bool));
    if stream == Some(true) {
        return generate_stream(state, body).await;
    }
    // Not streamed, TGI's `POST /` answers a list of one (what `text_generation`'s
    // client reads).
    let State(s) = state;
    s.metrics.requests.with_label_values(&["generate"]).inc();
    match run_generate(s, body).await {
        Ok(r) => Json(Value::Array(vec![r])).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The request and its generation, parsed, tokenized and checked off the async workers.
async fn prepare(s: &Arc<Service>, body: Bytes) -> Result<(GenerateRequest, Generation), ApiError> {
    s.off_workers(move |s| {
        let req: GenerateRequest = parse_body(Flavor::Tgi, &body)?;
        let generation = validate(s, &req.inputs, &req.parameters).map_err(|e| {
            s.metrics.errors.with_label_values(&["validation"]).inc();
            ApiError::validation(Flavor::Tgi, e)
        })?;
        Ok((req, generation))
    })
    .await
    .map_err(|e| ApiError::from_service(Flavor::Tgi, e))?
}

async fn start_stream(s: Arc<Service>, body: Bytes) -> Result<Response, ApiError> {
    let (req, generation) = prepare(&s, body).await?;
    if req.parameters.best_of.is_some_and(|b| b > 1) {
        return Err(ApiError::validation(
            Flavor::Tgi,
            "`best_of` != 1 is not supported when streaming tokens",
        ));
    }
    if req.parameters.decoder_input_details == Some(true) {
        return Err(ApiError::validation(
            Flavor::Tgi,
            "`decoder_input_details` == true is not supported when streaming tokens",
        ));
    }
    let rx = s.submit(generation).await.map_err(|e| ApiError::from_service(Flavor::Tgi, e))?;
    let full = (req.parameters.return_full_text == Some(true)).then(|| req.inputs.clone());
    let asked_top = req.parameters.top_n_tokens.is_some_and(|n| n > 0);
    let info = s.info.clone();
    // A token is sent when the next event shows whether it was the last (the last one
    // carries the generated text and the details).
    let events = futures::stream::unfold(
        (rx, None::<TokenEvent>, 0usize, false),
        move |(mut rx, held, index, over)| {
            let full = full.clone();
            let info = info.clone();
            async move {
                if over {
                    return None;
                }
                match rx.recv().await {
                    Some(Event::Token(t)) => {
                        let Some(prev) = held else {
                            return Some((vec![], (rx, Some(t), index, false)));
                        };
                        let v = json!({"index": index, "token": token_json(&prev),
                                       "top_tokens": top_tokens_json(&info, &prev, asked_top),
                                       "generated_text": null, "details": null});
                        Some((vec![v], (rx, Some(t), index + 1, false)))
                    }
                    Some(Event::End(end)) => {
                        let mut v = last_event(&end, held.as_ref(), index, full.as_deref());
                        if let Some(t) = held.as_ref() {
                            v["top_tokens"] = top_tokens_json(&info, t, asked_top);
                        }
                        Some((vec![v], (rx, None, index + 1, true)))
                    }
                    Some(Event::Error(e)) => {
                        let v = json!({"error": e, "error_type": "generation"});
                        Some((vec![v], (rx, None, index, true)))
                    }
                    Some(Event::Unavailable(e)) => {
                        let v = json!({"error": e, "error_type": "unavailable"});
                        Some((vec![v], (rx, None, index, true)))
                    }
                    None => None,
                }
            }
        },
    )
    .flat_map(|vs| futures::stream::iter(vs.into_iter().map(|v| sse(&v))));
    Ok(Sse::new(events).into_response())
}

fn last_event(end: &EndEvent, last: Option<&TokenEvent>, index: usize, full: Option<&str>) -> Value {
    let text = match full {
        Some(p) => format!("{p}{}", end.text),
        None => end.text.clone(),
    };
    json!({
        "index": index,
        "token": last.map(token_json),
        "top_tokens": null,
        "generated_text": text,
        "details": {"finish_reason": finish_json(end.reason), "generated_tokens": end.generated_tokens,
                    "seed": end.seed, "input_length": end.input_length},
    })
}

pub(super) async fn info(State(s): State<Arc<Service>>) -> Json<Value> {
    Json(json!({
        "model_id": s.model_id,
        "model_sha": null,
        "model_pipeline_tag": "text-generation",
        "model_device_type": s.model_device_type,
        "model_dtype": s.model_dtype,
        "max_concurrent_requests": s.max_queue,
        "max_best_of": MAX_BEST_OF,
        // Inputs one request may carry: the prompts × choices of a completions request.
        "max_client_batch_size": super::openai::MAX_N,
        "max_stop_sequences": s.limits.max_stop_sequences,
        "max_input_tokens": s.max_input_tokens(),
        "max_total_tokens": s.max_total_tokens,
        "max_batch_size": s.max_batch_size,
        "validation_workers": 1,
        "router": "grammask-router",
        "version": env!("CARGO_PKG_VERSION"),
        "sha": null,
        "docker_label": null,
        "grammar_backend": "grammask",
        "model": s.model_description,
        "tool_calling_family": s.family.map(|f| f.name()),
        "tool_calling_family_source": s.family_source.map(|f| f.name()),
    }))
}
