//! OpenAI's API: `POST /v1/chat/completions` (with `response_format`, `tools`,
//! `tool_choice`, `parallel_tool_calls`; streamed or not), `POST /v1/completions`,
//! `GET /v1/models`.

use super::{collect, parse_body, sse, unix_now, ApiError, Flavor};
use crate::engine::{Event, FinishReason, Job, TokenEvent};
use crate::sampling::SamplingParams;
use crate::service::{Generation, Prompt, Service};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use grammask::tool_calling::{
    chat_constraint, tools_from_json, ChatConstraint, Delta, OutputParser, PresetOptions, ResponseFormat,
    ToolChoice,
};
use grammask::TokenizerInfo;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn new_id(prefix: &str) -> String {
    format!("{prefix}-{:x}{:06x}", unix_now(), NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

/// A string or a list of strings (`stop`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// The stop sequences of `stop`.
fn stops(stop: &Option<OneOrMany>) -> Vec<String> {
    match stop {
        None => Vec::new(),
        Some(OneOrMany::One(s)) => vec![s.clone()],
        Some(OneOrMany::Many(v)) => v.clone(),
    }
}

/// The sampling fields both endpoints share.
#[derive(Debug, Default, Deserialize)]
struct Common {
    #[allow(dead_code)]
    model: Option<String>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    n: Option<u32>,
    #[serde(default)]
    stream: bool,
    stop: Option<OneOrMany>,
    seed: Option<u64>,
    frequency_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    /// Chat: `true` for each token's log-probability; completions: how many of the most
    /// likely tokens to list with it (0 to 5).
    logprobs: Option<Value>,
    /// Chat: the most likely tokens to list at each position (0 to 20; with `logprobs`).
    top_logprobs: Option<u32>,
    #[allow(dead_code)]
    user: Option<String>,
    stream_options: Option<Value>,
    /// vLLM's extra: the `k` most likely tokens only (`-1` or `0`: all).
    top_k: Option<i64>,
    /// Token id (as a string) → bias in [−100, 100].
    logit_bias: Option<std::collections::HashMap<String, f32>>,
}

/// Most choices one request may ask for (`n`, and prompts × `best_of`): each is a row of
/// the batch (`/info`'s `max_client_batch_size`).
pub(super) const MAX_N: u32 = 16;

/// OpenAI's `system_fingerprint` (TGI requires it): the server and its version, which
/// decide how the answer was made.
const FINGERPRINT: &str = concat!("grammask-router-", env!("CARGO_PKG_VERSION"));

/// `n` copies of a generation, choice `k` drawn with the seed + `k` (the same seed, the
/// same choices).
fn choices(g: Generation, n: u32) -> Vec<Generation> {
    (0..u64::from(n.max(1)))
        .map(|k| {
            let mut c = g.clone();
            c.job.sampling.seed = g.job.sampling.seed.wrapping_add(k);
            c
        })
        .collect()
}

/// Submits every generation; the receivers in order, or the first refusal.
async fn submit_all(
    s: &Service,
    gens: Vec<Generation>,
) -> Result<Vec<tokio::sync::mpsc::UnboundedReceiver<Event>>, ApiError> {
    // Queued together: the choices of one prompt share its prefill.
    s.submit_many(gens).await.map_err(|e| ApiError::from_service(Flavor::OpenAi, e))
}

/// The fields OpenAI's chat and completions requests may carry that this server honors
/// (with vLLM's `top_k`), by endpoint; [`check_fields`] refuses the others by name.
const COMMON_FIELDS: &[&str] = &[
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "stream",
    "stop",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "logprobs",
    "user",
    "stream_options",
    "response_format",
    "top_k",
    "logit_bias",
];
const CHAT_FIELDS: &[&str] =
    &["messages", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls", "top_logprobs"];
const COMPLETION_FIELDS: &[&str] = &["prompt", "echo", "best_of"];

/// Refuses, by name, every top-level field of `body` this server does not honor — unless
/// it holds the value that asks for nothing (`logit_bias: {}`, `echo: false`, `best_of: 1`,
/// `min_p: 0`, `repetition_penalty: 1`, null …), so that a client sending defaults works
/// and none is ever silently ignored.
fn check_fields(body: &[u8], endpoint: &[&str]) -> Result<(), ApiError> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return Ok(()); // (the typed parse names what is wrong)
    };
    for (name, value) in &fields {
        if COMMON_FIELDS.contains(&name.as_str()) || endpoint.contains(&name.as_str()) {
            continue;
        }
        let neutral = match (name.as_str(), value) {
            (_, Value::Null) => true,
            ("metadata", Value::Object(o)) => o.is_empty(),
            ("echo" | "store", Value::Bool(b)) => !b,
            ("best_of", v) | ("top_logprobs", v) => v.as_u64() == Some(u64::from(name == "best_of")),
            ("min_p", v) => v.as_f64() == Some(0.0),
            ("repetition_penalty", v) => v.as_f64() == Some(1.0),
            ("suffix", Value::String(t)) => t.is_empty(),
            _ => false,
        };
        if !neutral {
            return Err(ApiError::validation(
                Flavor::OpenAi,
                format!("`{name}` is not supported by this server (only its default is accepted)"),
            ));
        }
    }
    Ok(())
}

impl Common {
    /// `stream_options.include_usage`: a last chunk with the usage.
    fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// `logprobs` / `top_logprobs` as (report log-probabilities, how many of the most
    /// likely tokens to list): chat's boolean and count, or completions' count.
    fn logprobs(&self, chat: bool) -> Result<(bool, usize), String> {
        let top = self.top_logprobs.unwrap_or(0);
        if chat {
            let on = match &self.logprobs {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err("`logprobs` must be a boolean".into()),
            };
            if top > 20 {
                return Err("`top_logprobs` must be between 0 and 20".into());
            }
            if top > 0 && !on {
                return Err("`top_logprobs` requires `logprobs` to be true".into());
            }
            return Ok((on, top as usize));
        }
        match &self.logprobs {
            None | Some(Value::Null) => Ok((false, 0)),
            Some(v) => match v.as_u64() {
                Some(n) if n <= 5 => Ok((true, n as usize)),
                _ => Err("`logprobs` must be an integer between 0 and 5".into()),
            },
        }
    }

    /// The sampling parameters, checked (`vocab`: the model's vocabulary size, which
    /// `logit_bias`'s ids must be under; `chat`: the endpoint, which reads `logprobs` its
    /// own way).
    fn check(&self, vocab: usize, chat: bool) -> Result<SamplingParams, String> {
        if self.n.is_some_and(|n| !(1..=MAX_N).contains(&n)) {
            return Err(format!("`n` must be between 1 and {MAX_N} on this server"));
        }
        let (logprobs, top_logprobs) = self.logprobs(chat)?;
        let t = self.temperature.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&t) {
            return Err("`temperature` must be between 0 and 2".into());
        }
        if self.top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
            return Err("`top_p` must be > 0 and <= 1".into());
        }
        if self.frequency_penalty.is_some_and(|x| !(-2.0..=2.0).contains(&x)) {
            return Err("`frequency_penalty` must be between -2 and 2".into());
        }
        if self.presence_penalty.is_some_and(|x| !(-2.0..=2.0).contains(&x)) {
            return Err("`presence_penalty` must be between -2 and 2".into());
        }
        let mut logit_bias = Vec::new();
        for (k, &v) in self.logit_bias.iter().flatten() {
            let id = k.parse::<u32>().ok().filter(|&id| (id as usize) < vocab).ok_or_else(|| {
                format!(
                    "`logit_bias`: `{k}` is not a token id of this model (0 to {})",
                    vocab.saturating_sub(1)
                )
            })?;
            if !(-100.0..=100.0).contains(&v) {
                return Err(format!("`logit_bias`: the bias of token {id} must be between -100 and 100"));
            }
            logit_bias.push((id, v));
        }
        logit_bias.sort_unstable_by_key(|b| b.0);
        // OpenAI samples at temperature 1 by default; 0 is greedy.
        if self.top_k.is_some_and(|k| k < -1) {
            return Err("`top_k` must be -1 (all), 0 (all) or a positive count".into());
        }
        Ok(SamplingParams {
            do_sample: t > 0.0,
            temperature: if t > 0.0 { t } else { 1.0 },
            top_k: self.top_k.filter(|&k| k > 0).map(|k| k as usize),
            top_p: self.top_p.filter(|&p| p < 1.0),
            repetition_penalty: None,
            typical_p: None,
            frequency_penalty: self.frequency_penalty.filter(|&f| f != 0.0),
            presence_penalty: self.presence_penalty.filter(|&f| f != 0.0),
            logit_bias,
            seed: self.seed.unwrap_or_else(rand::random),
            logprobs,
            top_logprobs,
        })
    }
}

#[derive(Debug, Deserialize)]
struct ChatRequest {
    messages: Vec<Value>,
    #[serde(flatten)]
    common: Common,
    response_format: Option<Value>,
    tools: Option<Value>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    /// A string, a list of strings, a list of token ids, or a list of such lists.
    prompt: Value,
    /// Begin each choice's text with its prompt.
    #[serde(default)]
    echo: bool,
    /// Candidates drawn per prompt, of which the `n` with the highest log-probability per
    /// token are returned.
    best_of: Option<u32>,
    #[serde(flatten)]
    common: Common,
    response_format: Option<Value>,
}

fn finish_name(reason: FinishReason, calls: bool) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        _ if calls => "tool_calls",
        _ => "stop",
    }
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// A chat request made ready: the generation and, for tools, the output reader.
fn prepare_chat(s: &Service, req: &ChatRequest) -> Result<(Generation, Option<OutputParser>), String> {
    let sampling = req.common.check(s.info.vocab_size(), true)?;
    if req.messages.is_empty() {
        return Err("`messages` must not be empty".into());
    }
    check_messages(&req.messages)?;
    let tools = match &req.tools {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => tools_from_json(v).map_err(|e| format!("tools: {e}"))?,
    };
    let tool_choice = match &req.tool_choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(v) => ToolChoice::from_json(v).map_err(|e| format!("tool_choice: {e}"))?,
    };
    let response_format = match &req.response_format {
        None | Some(Value::Null) => None,
        Some(v) => Some(response_format(v)?),
    };
    let options = PresetOptions {
        tool_choice,
        parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
        ..PresetOptions::default()
    };
    let constraint = chat_constraint(s.family, &tools, &options, response_format.as_ref()).map_err(|e| {
        match s.family {
            // (The router's way to configure it.)
            None => format!("{e}: start the router with `--tool-call-format FAMILY`"),
            Some(_) => e.to_string(),
        }
    })?;
    let (spec, parser) = match constraint {
        ChatConstraint::None => (None, None),
        ChatConstraint::Spec(spec) => (Some(spec), None),
        ChatConstraint::Tools { spec, preset } => {
            let parser = OutputParser::new(&preset).map_err(|e| format!("tools: {e}"))?;
            (Some(spec), Some(parser))
        }
    };
    let chat = s.chat.as_ref().ok_or("this model has no chat template; use /v1/completions")?;
    let tool_values: Option<Vec<Value>> = match &req.tools {
        Some(Value::Array(a)) if !a.is_empty() => Some(a.clone()),
        _ => None,
    };
    let prompt = chat.render(&req.messages, tool_values.as_deref()).map_err(|e| e.to_string())?;
    let prompt = s.encode(&prompt, Prompt::Templated).map_err(|e| e.to_string())?;
    let max_new_tokens = s
        .max_new_tokens(req.common.max_completion_tokens.or(req.common.max_tokens), prompt.len())
        .map_err(|e| e.to_string())?;
    let stop = stops(&req.common.stop);
    Ok((
        Generation {
            job: Job { prompt, sampling, max_new_tokens, stop, strip_stop: true, prompt_logprobs: None },
            spec,
        },
        parser,
    ))
}

/// The message shapes OpenAI's chat schema allows, each fault named by its place
/// (`messages[0]: expected an object`): templates index messages freely, so a wrong
/// shape must be a 422 here, not an error (or worse) inside the template.
fn check_messages(messages: &[Value]) -> Result<(), String> {
    const ROLES: [&str; 6] = ["system", "developer", "user", "assistant", "tool", "function"];
    for (i, m) in messages.iter().enumerate() {
        let at = |field: &str| format!("messages[{i}]{field}");
        let Some(o) = m.as_object() else { return Err(format!("{}: expected an object", at(""))) };
        match o.get("role") {
            Some(Value::String(r)) if ROLES.contains(&r.as_str()) => {}
            Some(Value::String(r)) => {
                return Err(format!("{}: unknown role `{r}` (one of {})", at(".role"), ROLES.join(", ")))
            }
            Some(_) => return Err(format!("{}: expected a string", at(".role"))),
            None => return Err(format!("{}: missing", at(".role"))),
        }
        match o.get("content") {
            None | Some(Value::Null | Value::String(_)) => {}
            Some(Value::Array(parts)) => {
                for (k, p) in parts.iter().enumerate() {
                    let part = format!(".content[{k}]");
                    let Some(p) = p.as_object() else {
                        return Err(format!("{}: expected an object", at(&part)));
                    };
                    match (p.get("type").and_then(Value::as_str), p.get("text")) {
                        (Some("text"), Some(Value::String(_))) => {}
                        (Some("text"), _) => {
                            return Err(format!("{}: expected a string", at(&format!("{part}.text"))))
                        }
                        (Some(t), _) => {
                            return Err(format!(
                                "{}: content parts of type `{t}` are not supported (text only)",
                                at(&part)
                            ))
                        }
                        (None, _) => return Err(format!("{}: missing", at(&format!("{part}.type")))),
                    }
                }
            }
            Some(_) => {
                return Err(format!("{}: expected a string, an array of parts or null", at(".content")))
            }
        }
        for field in ["name", "tool_call_id"] {
            if o.get(field).is_some_and(|v| !v.is_string() && !v.is_null()) {
                return Err(format!("{}: expected a string", at(&format!(".{field}"))));
            }
        }
        if let Some(calls) = o.get("tool_calls").filter(|v| !v.is_null()) {
            let Some(calls) = calls.as_array() else {
                return Err(format!("{}: expected an array", at(".tool_calls")));
            };
            for (k, c) in calls.iter().enumerate() {
                let f = c.get("function");
                if !f.is_some_and(|f| f.get("name").is_some_and(Value::is_string)) {
                    return Err(format!(
                        "{}: expected an object with `function.name`",
                        at(&format!(".tool_calls[{k}]"))
                    ));
                }
            }
        }
    }
    Ok(())
}

fn tool_calls_json(calls: &[grammask::tool_calling::ToolCall]) -> Value {
    calls
        .iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
        .collect()
}

pub(super) async fn chat(State(s): State<Arc<Service>>, body: Bytes) -> Response {
    s.metrics.requests.with_label_values(&["chat_completions"]).inc();
    match run_chat(s, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run_chat(s: Arc<Service>, body: Bytes) -> Result<Response, ApiError> {
    // Parsing, templating and tokenizing off the async workers.
    let (req, generation, parser) = s
        .off_workers(move |s| {
            check_fields(&body, CHAT_FIELDS)?;
            let req: ChatRequest = parse_body(Flavor::OpenAi, &body)?;
            let (generation, parser) = prepare_chat(s, &req).map_err(|e| {
                s.metrics.errors.with_label_values(&["validation"]).inc();
                ApiError::validation(Flavor::OpenAi, e)
            })?;
            Ok::<_, ApiError>((req, generation, parser))
        })
        .await
        .map_err(|e| ApiError::from_service(Flavor::OpenAi, e))??;
    let prompt_tokens = generation.job.prompt.len();
    let logprobs = generation.job.sampling.logprobs.then(|| s.info.clone());
    let rxs = submit_all(&s, choices(generation, req.common.n.unwrap_or(1))).await?;
    let id = new_id("chatcmpl");
    let created = unix_now();
    let model = s.model_id.clone();
    if req.common.stream {
        let include_usage = req.common.include_usage();
        let out = Streamed { id, created, model, prompt_tokens, include_usage, logprobs };
        return Ok(chat_stream(rxs, parser, out));
    }
    let answers = futures::future::join_all(rxs.into_iter().map(collect)).await;
    let (mut list, mut generated) = (Vec::new(), 0);
    for (index, c) in answers.into_iter().enumerate() {
        let c = c.map_err(|e| ApiError::from_service(Flavor::OpenAi, e))?;
        let end = c.end.as_ref().ok_or_else(|| ApiError::validation(Flavor::OpenAi, "no answer"))?;
        generated += end.generated_tokens;
        list.push(chat_choice(index, &c, end, parser.as_ref(), logprobs.as_deref())?);
    }
    Ok(Json(json!({
        "id": id, "object": "chat.completion", "system_fingerprint": FINGERPRINT, "created": created, "model": model,
        "choices": list,
        "usage": usage(prompt_tokens, generated),
    }))
    .into_response())
}

/// One choice of a chat answer: the message (tool calls read back), its log-probabilities
/// when asked, the finish reason.
fn chat_choice(
    index: usize,
    c: &super::Collected,
    end: &crate::engine::EndEvent,
    parser: Option<&OutputParser>,
    logprobs: Option<&TokenizerInfo>,
) -> Result<Value, ApiError> {
    let mut message = json!({"role": "assistant", "content": end.text});
    let mut calls = false;
    if let Some(p) = parser {
        // A cut-off output is read as far as it goes.
        let read =
            if end.reason == FinishReason::Length { p.parse_prefix(&end.text) } else { p.parse(&end.text) };
        let out = read.map_err(|e| {
            ApiError::from_service(
                Flavor::OpenAi,
                crate::service::ServiceError::Generation(format!("tool calls: {e}")),
            )
        })?;
        calls = !out.tool_calls.is_empty();
        message["content"] =
            if out.content.is_empty() && calls { Value::Null } else { Value::String(out.content) };
        if !out.reasoning.is_empty() {
            message["reasoning_content"] = Value::String(out.reasoning);
        }
        if calls {
            message["tool_calls"] = tool_calls_json(&out.tool_calls);
        }
    }
    let logprobs = match logprobs {
        Some(info) => {
            json!({"content": c.tokens.iter().filter(|t| !t.special).map(|t| chat_logprob(info, t)).collect::<Vec<_>>(),
                             "refusal": null})
        }
        None => Value::Null,
    };
    Ok(
        json!({"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish_name(end.reason, calls)}),
    )
}

/// `response_format`, OpenAI's (`text`, `json_object`, `json_schema`, `structural_tag`) or
/// TGI's chat extension (`{"type": "json", "value": schema}` — the schema may be JSON text —,
/// `{"type": "regex", "value": pattern}`, `{"type": "json_schema", "value": {"name",
/// "schema"}}`), as TGI's own clients send it to a TGI server's OpenAI routes.
fn response_format(v: &Value) -> Result<ResponseFormat, String> {
    let err = |e: String| format!("response_format: {e}");
    let tgi = v.get("value").filter(|_| v.get("json_schema").is_none());
    let openai = match (v.get("type").and_then(Value::as_str), tgi) {
        (Some("json" | "json_object"), Some(schema)) => {
            let schema = match schema {
                Value::String(text) => serde_json::from_str(text).map_err(|e| err(format!("value: {e}")))?,
                other => other.clone(),
            };
            json!({"type": "json_schema", "json_schema": {"name": "response", "schema": schema}})
        }
        (Some("json_schema"), Some(inner)) => json!({"type": "json_schema", "json_schema": inner}),
        (Some("regex"), Some(Value::String(pattern))) => {
            json!({"type": "structural_tag", "format": {"type": "regex", "pattern": pattern}})
        }
        (Some("regex"), Some(_)) => return Err(err("`value` of a regex must be a string".into())),
        _ => v.clone(),
    };
    ResponseFormat::from_json(&openai).map_err(|e| err(e.to_string()))
}

/// A token as OpenAI's chat `logprobs.content` lists it: its text, log-probability, UTF-8
/// bytes (a token may end inside a character) and the most likely tokens at its position.
fn chat_logprob(info: &TokenizerInfo, t: &TokenEvent) -> Value {
    let entry = |id: u32, lp: f32| {
        let b = info.token_bytes(id);
        json!({"token": String::from_utf8_lossy(b), "logprob": lp, "bytes": b})
    };
    let mut e = entry(t.id, t.logprob.unwrap_or(0.0));
    e["top_logprobs"] = t.top.iter().map(|&(id, lp)| entry(id, lp)).collect::<Vec<_>>().into();
    e
}

/// The tokens of a completions answer (or of one streamed piece) as OpenAI's legacy
/// `logprobs` object; `offset`: characters of text before the first.
fn completion_logprobs(info: &TokenizerInfo, tokens: &[&TokenEvent], offset: usize) -> Value {
    completion_logprobs_echoed(info, &[], tokens, offset)
}

/// [`completion_logprobs`] with the echoed prompt's tokens first (`echo` with `logprobs`):
/// the first prompt token has a `null` log-probability and `null` top tokens, as OpenAI
/// gives them.
fn completion_logprobs_echoed(
    info: &TokenizerInfo,
    prompt: &[crate::engine::PromptToken],
    tokens: &[&TokenEvent],
    offset: usize,
) -> Value {
    let (mut texts, mut lps, mut tops, mut offsets) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut at = offset;
    let text_of = |id: u32| String::from_utf8_lossy(info.token_bytes(id)).into_owned();
    for (k, p) in prompt.iter().enumerate() {
        let text = text_of(p.id);
        offsets.push(at);
        at += text.chars().count();
        texts.push(text);
        lps.push(p.logprob.map_or(Value::Null, |x| json!(x)));
        tops.push(if k == 0 {
            Value::Null
        } else {
            Value::Object(p.top.iter().map(|&(id, lp)| (text_of(id), json!(lp))).collect())
        });
    }
    for t in tokens {
        let text = String::from_utf8_lossy(info.token_bytes(t.id)).into_owned();
        offsets.push(at);
        at += text.chars().count();
        let top: serde_json::Map<String, Value> = t
            .top
            .iter()
            .map(|&(id, lp)| (String::from_utf8_lossy(info.token_bytes(id)).into_owned(), json!(lp)))
            .collect();
        texts.push(text);
        lps.push(json!(t.logprob.unwrap_or(0.0)));
        tops.push(Value::Object(top));
    }
    json!({"tokens": texts, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

fn chunk(id: &str, created: u64, model: &str, index: usize, delta: Value, finish: Option<&str>) -> Value {
    json!({"id": id, "object": "chat.completion.chunk", "system_fingerprint": FINGERPRINT, "created": created, "model": model,
           "choices": [{"index": index, "delta": delta, "logprobs": null, "finish_reason": finish}]})
}

/// What a streamed answer's chunks carry besides their text (chat and completions).
struct Streamed {
    id: String,
    created: u64,
    model: String,
    prompt_tokens: usize,
    include_usage: bool,
    /// The tokenizer, when the request asked for log-probabilities.
    logprobs: Option<Arc<TokenizerInfo>>,
}

fn delta_json(d: Delta) -> Value {
    match d {
        Delta::Content(t) => json!({"content": t}),
        Delta::Reasoning(t) => json!({"reasoning_content": t}),
        Delta::ToolCallStart { index, id, name } => {
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                                             "function": {"name": name, "arguments": ""}}]})
        }
        Delta::ToolCallArguments { index, arguments } => {
            json!({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
        }
    }
}

/// The chunks of a streamed chat answer: for each choice, role first, content or tool-call
/// deltas as the tokens come, its finish reason; then usage if asked, then `[DONE]`.
fn chat_stream(
    rxs: Vec<tokio::sync::mpsc::UnboundedReceiver<Event>>,
    parser: Option<OutputParser>,
    how: Streamed,
) -> Response {
    let (tx, out) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let how = Arc::new(how);
    let parser = parser.map(Arc::new);
    let tasks: Vec<_> = rxs
        .into_iter()
        .enumerate()
        .map(|(index, rx)| {
            let (tx, how, parser) = (tx.clone(), how.clone(), parser.clone());
            tokio::spawn(async move { stream_choice(index, rx, parser, &how, &tx).await })
        })
        .collect();
    sse_answer(tasks, tx, out, how, "chat.completion.chunk")
}

/// The SSE answer of streamed choices: each choice's task sends its chunks to `tx`; once
/// all have ended, the usage (when asked) as a last `object` chunk, then `[DONE]`.
fn sse_answer(
    tasks: Vec<tokio::task::JoinHandle<Option<usize>>>,
    tx: tokio::sync::mpsc::UnboundedSender<Value>,
    out: tokio::sync::mpsc::UnboundedReceiver<Value>,
    how: Arc<Streamed>,
    object: &'static str,
) -> Response {
    tokio::spawn(async move {
        let mut generated = 0;
        for t in tasks {
            match t.await {
                Ok(Some(n)) => generated += n,
                // A choice that failed sent its error; no usage follows.
                _ => return,
            }
        }
        if how.include_usage {
            let _ = tx.send(json!({"id": how.id, "object": object, "system_fingerprint": FINGERPRINT,
                                   "created": how.created, "model": how.model, "choices": [],
                                   "usage": usage(how.prompt_tokens, generated)}));
        }
    });
    let done = futures::stream::once(async { Ok(axum::response::sse::Event::default().data("[DONE]")) });
    Sse::new(tokio_stream_from(out).map(|v| sse(&v)).chain(done)).into_response()
}

/// The chunks of choice `index`; its generated tokens once it ended, `None` if it failed
/// (its error sent) or the client went away.
async fn stream_choice(
    index: usize,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
    parser: Option<Arc<OutputParser>>,
    how: &Streamed,
    tx: &tokio::sync::mpsc::UnboundedSender<Value>,
) -> Option<usize> {
    let (id, created, model) = (&how.id, how.created, &how.model);
    let chunk = |delta: Value, finish: Option<&str>| chunk(id, created, model, index, delta, finish);
    let error = |message: String, kind: &str| json!({"error": {"message": message, "type": kind}});
    tx.send(chunk(json!({"role": "assistant", "content": ""}), None)).ok()?;
    let mut reader = parser.as_ref().map(|p| p.stream());
    let mut calls = false;
    // Log-probabilities of tokens whose text no chunk has carried yet (held back by the
    // tool-call reader): they go with the next chunk.
    let mut owed: Vec<Value> = Vec::new();
    let with_logprobs = |mut c: Value, owed: &mut Vec<Value>| {
        if how.logprobs.is_some() && !owed.is_empty() {
            c["choices"][0]["logprobs"] = json!({"content": std::mem::take(owed), "refusal": null});
        }
        c
    };
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token(t) => {
                if let (Some(info), false) = (&how.logprobs, t.special) {
                    owed.push(chat_logprob(info, &t));
                }
                if t.special || t.text.is_empty() {
                    continue;
                }
                let deltas = match reader.as_mut() {
                    None => vec![Delta::Content(t.text)],
                    Some(r) => match r.push(&t.text) {
                        Ok(d) => d,
                        Err(e) => {
                            let _ = tx.send(error(format!("tool calls: {e}"), "generation"));
                            return None;
                        }
                    },
                };
                for d in deltas {
                    calls |= matches!(d, Delta::ToolCallStart { .. });
                    // A closed channel: the client went away, and dropping `rx` cancels
                    // the generation.
                    tx.send(with_logprobs(chunk(delta_json(d), None), &mut owed)).ok()?;
                }
            }
            Event::End(end) => {
                if let Some(r) = reader.take() {
                    match r.finish() {
                        Ok((_, rest)) => {
                            for d in rest {
                                calls |= matches!(d, Delta::ToolCallStart { .. });
                                let _ = tx.send(with_logprobs(chunk(delta_json(d), None), &mut owed));
                            }
                        }
                        // Cut off by the length limit: `finish_reason: "length"` says so.
                        Err(_) if end.reason == FinishReason::Length => {}
                        // Otherwise a call that does not read back is reported, never
                        // dropped without a word.
                        Err(e) => {
                            let message = format!("tool calls: the output does not read back: {e}");
                            let _ = tx.send(error(message, "generation"));
                            return None;
                        }
                    }
                }
                let last = chunk(json!({}), Some(finish_name(end.reason, calls)));
                let _ = tx.send(with_logprobs(last, &mut owed));
                return Some(end.generated_tokens);
            }
            Event::Error(e) => {
                let _ = tx.send(error(e, "generation"));
                return None;
            }
            Event::Unavailable(e) => {
                let _ = tx.send(error(e, "unavailable"));
                return None;
            }
        }
    }
    None
}

/// An unbounded receiver as a stream.
fn tokio_stream_from(rx: tokio::sync::mpsc::UnboundedReceiver<Value>) -> impl futures::Stream<Item = Value> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

pub(super) async fn completions(State(s): State<Arc<Service>>, body: Bytes) -> Response {
    s.metrics.requests.with_label_values(&["completions"]).inc();
    match run_completions(s, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// The prompts of a completions request, each as token ids and as text (for `echo`): a
/// string, a list of strings, a list of token ids (OpenAI's and vLLM's pre-tokenized
/// prompt, taken as given), or a list of such lists.
fn completion_prompts(s: &Service, prompt: &Value) -> Result<Vec<(Vec<u32>, String)>, String> {
    let ids_of = |items: &[Value]| -> Result<(Vec<u32>, String), String> {
        let vocab = s.info.vocab_size();
        let ids = items
            .iter()
            .map(|v| v.as_u64().filter(|&id| (id as usize) < vocab).map(|id| id as u32))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| {
                format!("`prompt`: token ids must be integers from 0 to {}", vocab.saturating_sub(1))
            })?;
        if ids.is_empty() {
            return Err("`prompt`: a list of token ids must not be empty".into());
        }
        s.check_input(&ids).map_err(|e| e.to_string())?;
        let bytes: Vec<u8> = ids
            .iter()
            .filter(|&&id| !s.info.is_special(id))
            .flat_map(|&id| s.info.token_bytes(id).to_vec())
            .collect();
        Ok((ids, String::from_utf8_lossy(&bytes).into_owned()))
    };
    let text = |t: &str| -> Result<(Vec<u32>, String), String> {
        Ok((s.encode(t, Prompt::Raw).map_err(|e| e.to_string())?, t.to_string()))
    };
    match prompt {
        Value::String(t) => Ok(vec![text(t)?]),
        Value::Array(items) if items.is_empty() => Err("`prompt` must not be an empty list".into()),
        Value::Array(items) if items.iter().all(Value::is_number) => Ok(vec![ids_of(items)?]),
        Value::Array(items) => items
            .iter()
            .map(|p| match p {
                Value::String(t) => text(t),
                Value::Array(ids) => ids_of(ids),
                _ => Err("`prompt`: a list holds strings or lists of token ids".into()),
            })
            .collect(),
        _ => Err("`prompt` must be a string, a list of strings or token ids".into()),
    }
}

/// A completions request made ready: a generation per choice of each prompt (`best_of`
/// candidates when asked), what each choice's text begins with (`echo`), the prompts'
/// tokens, and whether the answer carries log-probabilities.
struct Completions {
    gens: Vec<Generation>,
    echoes: Vec<String>,
    prompt_tokens: usize,
    logprobs: bool,
}

fn prepare_completions(s: &Service, req: &CompletionRequest) -> Result<Completions, String> {
    let mut sampling = req.common.check(s.info.vocab_size(), false)?;
    let n = req.common.n.unwrap_or(1);
    let want_logprobs = sampling.logprobs;
    if let Some(b) = req.best_of {
        if b < n || b > MAX_N {
            return Err(format!("`best_of` must be at least `n` ({n}) and at most {MAX_N}"));
        }
        if b > n && req.common.stream {
            return Err("`best_of` cannot be streamed (the best are known at the end)".into());
        }
        // Ranked by log-probability: computed whether or not they are returned.
        sampling.logprobs |= b > n;
    }
    // `echo` with `logprobs`: the prompt's log-probabilities too (from a prefill that keeps
    // every position's logits); streamed, the prompt goes out before they exist.
    let prompt_logprobs = (req.echo && want_logprobs).then_some(sampling.top_logprobs);
    if prompt_logprobs.is_some() && req.common.stream {
        return Err("`echo` with `logprobs` cannot be streamed (the prompt is sent before its log-probabilities are computed)".into());
    }
    if prompt_logprobs.is_some() && s.model_device_type != "cpu" {
        return Err("`echo` with `logprobs`: the prompt's log-probabilities are computed on host logits only; this model's logits are on a device".into());
    }
    let spec = match &req.response_format {
        None | Some(Value::Null) => None,
        Some(v) => response_format(v)?.to_spec(),
    };
    let stop = stops(&req.common.stop);
    let (mut gens, mut echoes, mut prompt_tokens) = (Vec::new(), Vec::new(), 0);
    let prompts = completion_prompts(s, &req.prompt)?;
    let per = req.best_of.unwrap_or(n);
    if prompts.len() as u64 * u64::from(per) > u64::from(MAX_N) {
        return Err(format!(
            "`prompt`: {} prompts × {per} choices each is over this server's {MAX_N} per request",
            prompts.len()
        ));
    }
    for (prompt, text) in prompts {
        prompt_tokens += prompt.len();
        let max_new_tokens =
            s.max_new_tokens(req.common.max_tokens, prompt.len()).map_err(|e| e.to_string())?;
        let job = Job {
            prompt,
            sampling: sampling.clone(),
            max_new_tokens,
            stop: stop.clone(),
            strip_stop: true,
            prompt_logprobs,
        };
        for g in choices(Generation { job, spec: spec.clone() }, per) {
            gens.push(g);
            echoes.push(if req.echo { text.clone() } else { String::new() });
        }
    }
    Ok(Completions { gens, echoes, prompt_tokens, logprobs: want_logprobs })
}

async fn run_completions(s: Arc<Service>, body: Bytes) -> Result<Response, ApiError> {
    // Parsing and tokenizing off the async workers.
    let (req, prepared) = s
        .off_workers(move |s| {
            check_fields(&body, COMPLETION_FIELDS)?;
            let req: CompletionRequest = parse_body(Flavor::OpenAi, &body)?;
            let prepared =
                prepare_completions(s, &req).map_err(|e| ApiError::validation(Flavor::OpenAi, e))?;
            Ok::<_, ApiError>((req, prepared))
        })
        .await
        .map_err(|e| ApiError::from_service(Flavor::OpenAi, e))??;
    let Completions { gens, echoes, prompt_tokens, logprobs: want_logprobs } = prepared;
    let logprobs = want_logprobs.then(|| s.info.clone());
    let rxs = submit_all(&s, gens).await?;
    let id = new_id("cmpl");
    let created = unix_now();
    let model = s.model_id.clone();
    if req.common.stream {
        let include_usage = req.common.include_usage();
        let (tx, out) = tokio::sync::mpsc::unbounded_channel::<Value>();
        let how = Arc::new(Streamed { id, created, model, prompt_tokens, include_usage, logprobs });
        let tasks: Vec<_> = rxs
            .into_iter()
            .zip(echoes)
            .enumerate()
            .map(|(index, (rx, echo))| {
                let (tx, how) = (tx.clone(), how.clone());
                tokio::spawn(async move { stream_completion(index, rx, echo, &how, &tx).await })
            })
            .collect();
        return Ok(sse_answer(tasks, tx, out, how, "text_completion"));
    }
    let answers = futures::future::join_all(rxs.into_iter().map(collect)).await;
    let mut done = Vec::with_capacity(answers.len());
    let mut generated = 0;
    for c in answers {
        let c = c.map_err(|e| ApiError::from_service(Flavor::OpenAi, e))?;
        let end = c.end.clone().ok_or_else(|| ApiError::validation(Flavor::OpenAi, "no answer"))?;
        // Every candidate drawn counts (OpenAI bills `best_of`'s too).
        generated += end.generated_tokens;
        done.push((c, end));
    }
    // `best_of`: per prompt, its candidates ranked by log-probability per token, the
    // first `n` kept (without it each group is its `n` choices, in order).
    let n = req.common.n.unwrap_or(1).max(1) as usize;
    let per = req.best_of.map_or(n, |b| b as usize);
    let mut kept = Vec::with_capacity(done.len());
    let mut rest = done.into_iter().zip(echoes);
    loop {
        let mut group: Vec<_> = rest.by_ref().take(per).collect();
        if group.is_empty() {
            break;
        }
        if per > n {
            let mean = |c: &super::Collected| {
                let lps: Vec<f64> = c.tokens.iter().filter_map(|t| t.logprob).map(f64::from).collect();
                lps.iter().sum::<f64>() / lps.len().max(1) as f64
            };
            group.sort_by(|a, b| mean(&b.0 .0).total_cmp(&mean(&a.0 .0)));
            group.truncate(n);
        }
        kept.extend(group);
    }
    let mut list = Vec::with_capacity(kept.len());
    for (index, ((c, end), echo)) in kept.into_iter().enumerate() {
        let end = &end;
        let logprobs = match &logprobs {
            // (With `echo`, the prompt's tokens come first: `end.prefill`, empty otherwise.)
            Some(info) => completion_logprobs_echoed(
                info,
                &end.prefill,
                &c.tokens.iter().filter(|t| !t.special).collect::<Vec<_>>(),
                0,
            ),
            None => Value::Null,
        };
        list.push(json!({"index": index, "text": format!("{echo}{}", end.text), "logprobs": logprobs,
                         "finish_reason": finish_name(end.reason, false)}));
    }
    Ok(Json(json!({
        "id": id, "object": "text_completion", "system_fingerprint": FINGERPRINT, "created": created, "model": model,
        "choices": list,
        "usage": usage(prompt_tokens, generated),
    }))
    .into_response())
}

/// The pieces of streamed completion `index` (its prompt first when echoed); its generated
/// tokens once it ended, `None` if it failed (its error sent) or the client went away.
async fn stream_completion(
    index: usize,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
    echo: String,
    how: &Streamed,
    tx: &tokio::sync::mpsc::UnboundedSender<Value>,
) -> Option<usize> {
    let piece = |text: &str, logprobs: Value, finish: Option<&str>| {
        json!({"id": how.id, "object": "text_completion", "system_fingerprint": FINGERPRINT, "created": how.created, "model": how.model,
               "choices": [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}]})
    };
    if !echo.is_empty() {
        tx.send(piece(&echo, Value::Null, None)).ok()?;
    }
    // Characters of text sent so far (each piece's `text_offset` starts there).
    let mut offset = 0;
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token(t) if !t.special => {
                let lp = match &how.logprobs {
                    Some(info) => completion_logprobs(info, &[&t], offset),
                    None => Value::Null,
                };
                offset += t.text.chars().count();
                // A token whose text is held back (inside a character) still sends its
                // log-probability when asked.
                if !(t.text.is_empty() && lp.is_null()) {
                    tx.send(piece(&t.text, lp, None)).ok()?;
                }
            }
            Event::Token(_) => {}
            Event::End(end) => {
                let _ = tx.send(piece("", Value::Null, Some(finish_name(end.reason, false))));
                return Some(end.generated_tokens);
            }
            Event::Error(e) => {
                let _ = tx.send(json!({"error": {"message": e, "type": "generation"}}));
                return None;
            }
            Event::Unavailable(e) => {
                let _ = tx.send(json!({"error": {"message": e, "type": "unavailable"}}));
                return None;
            }
        }
    }
    None
}

pub(super) async fn models(State(s): State<Arc<Service>>) -> Json<Value> {
    Json(
        json!({"object": "list", "data": [{"id": s.model_id, "object": "model", "created": 0, "owned_by": "grammask"}]}),
    )
}
