//! The router over loopback HTTP with a real client: mixed concurrent requests,
//! clients that go away mid-stream, a flood past the queue, bad input. The model is
//! the simulated one (random logits over the embedded Qwen3 tokenizer): only the
//! grammar keeps the structured answers valid.

use futures::StreamExt;
use grammask_router::engine::EngineOptions;
use grammask_router::model::{Forward, ForwardRow, ForwardTime, Model, ModelError, SimulatedModel};
use grammask_router::server::{LoadedTokenizer, Router, RouterConfig};
use grammask_router::service::Limits;
use serde_json::{json, Value};
use std::sync::OnceLock;
use std::time::Duration;

include!("../../../scripts/test_data_dir.rs");

fn tokenizer() -> LoadedTokenizer {
    static T: OnceLock<LoadedTokenizer> = OnceLock::new();
    T.get_or_init(|| LoadedTokenizer::embedded().unwrap()).clone()
}

struct Server {
    base: String,
    router: Router,
}

/// The simulated model (random logits over the embedded tokenizer), optionally with a
/// context limit, panicking in its `fail_at`-th forward (a bug in a model
/// implementation, a device fault surfacing as a panic), or with a cache of `cache`
/// positions per sequence that it does not advertise (a sequence past it fails that row
/// of the forward, as a model whose real limit is below what it reports).
struct TestModel {
    inner: SimulatedModel,
    forwards: usize,
    fail_at: Option<usize>,
    context: Option<usize>,
    cache: Option<usize>,
    lengths: std::collections::HashMap<grammask_router::step::SeqId, usize>,
}

impl TestModel {
    fn new(time: ForwardTime) -> Self {
        let inner = SimulatedModel::new(tokenizer().info.vocab_size(), 11, time);
        Self { inner, forwards: 0, fail_at: None, context: None, cache: None, lengths: Default::default() }
    }
}

impl Model for TestModel {
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
    fn forward(&mut self, rows: &[ForwardRow<'_>]) -> Result<Forward<'_>, ModelError> {
        self.forwards += 1;
        if self.fail_at.is_some_and(|n| self.forwards >= n) {
            panic!("the test model fails in forward {}", self.forwards);
        }
        let mut failed = Vec::new();
        for (r, row) in rows.iter().enumerate() {
            // A fork starts with its source's context (its source came earlier in `rows`).
            let from = row.fork_of.and_then(|f| self.lengths.get(&f).copied()).unwrap_or(0);
            let len = self.lengths.entry(row.id).or_default();
            *len += from + row.tokens.len();
            if let Some(cache) = self.cache.filter(|&c| *len > c) {
                failed.push((
                    r,
                    ModelError(format!("sequence {}: {} positions exceed the cache of {cache}", row.id, len)),
                ));
            }
        }
        let mut f = self.inner.forward(rows)?;
        f.failed = failed;
        Ok(f)
    }
    fn release(&mut self, id: grammask_router::step::SeqId) {
        self.lengths.remove(&id);
        self.inner.release(id)
    }
    fn name(&self) -> String {
        "test".into()
    }
    fn max_context(&self) -> Option<usize> {
        self.context
    }
    fn can_fork(&self) -> bool {
        self.inner.can_fork()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.router.engine.shutdown();
    }
}

async fn serve(engine: EngineOptions, forward: Duration, limits: Limits) -> Server {
    let model = TestModel::new(ForwardTime::Sleep(forward));
    serve_model(Box::new(model), engine, limits).await
}

async fn serve_model(model: Box<dyn Model>, engine: EngineOptions, limits: Limits) -> Server {
    serve_precomputing(model, engine, limits, grammask_router::server::DEFAULT_MASK_PRECOMPUTE).await
}

async fn serve_precomputing(
    model: Box<dyn Model>,
    engine: EngineOptions,
    limits: Limits,
    mask_precompute: Duration,
) -> Server {
    let config = RouterConfig { engine, limits, mask_precompute, ..test_config(tokenizer(), model) };
    serve_config(config).await
}

/// A router's configuration with the defaults of these tests: `tok`, `model`, the
/// default engine, limits and precompute, jump-forward, no key, the detected tool format.
fn test_config(tok: LoadedTokenizer, model: Box<dyn Model>) -> RouterConfig {
    RouterConfig {
        tokenizer: tok,
        model,
        engine: EngineOptions::default(),
        limits: Limits::default(),
        jump_forward: true,
        model_id: "test".into(),
        mask_precompute: grammask_router::server::DEFAULT_MASK_PRECOMPUTE,
        api_key: None,
        tool_call_format: None,
        json_property_order: Default::default(),
    }
}

async fn serve_config(config: RouterConfig) -> Server {
    let router = Router::start(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = router.app();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server { base, router }
}

/// POSTs `body` as JSON and reads the answer as JSON.
async fn post_json(c: &reqwest::Client, url: &str, body: &Value) -> Value {
    c.post(url).json(body).send().await.unwrap().json().await.unwrap()
}

async fn metric(c: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = c.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

const PERSON: &str = r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120}, "tags": {"type": "array",
    "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}}, "required": ["name", "age"],
    "additionalProperties": false}"#;
const FLAGS: &str = r#"{"type": "object", "properties": {"on": {"type": "boolean"},
    "level": {"enum": [1, 2, 3]}}, "required": ["on", "level"], "additionalProperties": false}"#;
const REGEX: &str = "[0-9]{3}-[a-z]{2,5}";

/// One request of the mixed load and how to check its answer.
#[derive(Debug, Clone)]
enum Case {
    Schema(&'static str, bool),
    Regex(bool),
    Plain(bool),
    Tools(bool),
}

fn check_schema(schema: &str, text: &str) {
    let schema: Value = serde_json::from_str(schema).unwrap();
    let doc: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let v = jsonschema::validator_for(&schema).unwrap();
    assert!(v.is_valid(&doc), "invalid against the schema: {text}");
}

/// Sends `case`; returns `Some(valid)` for a completed structured answer, `None` when
/// cut off or unconstrained. Panics on anything but a complete answer.
async fn run_case(c: &reqwest::Client, base: &str, case: &Case, seed: u64) -> (Option<bool>, String) {
    let stream =
        matches!(case, Case::Schema(_, true) | Case::Regex(true) | Case::Plain(true) | Case::Tools(true));
    match case {
        Case::Schema(..) | Case::Regex(_) | Case::Plain(_) => {
            let grammar = match case {
                Case::Schema(s, _) => {
                    json!({"type": "json", "value": serde_json::from_str::<Value>(s).unwrap()})
                }
                Case::Regex(_) => json!({"type": "regex", "value": REGEX}),
                _ => Value::Null,
            };
            let mut params = json!({"max_new_tokens": 120, "seed": seed, "do_sample": true, "details": true});
            if !grammar.is_null() {
                params["grammar"] = grammar;
            }
            let body = json!({"inputs": "Write it:", "parameters": params});
            let (text, reason) = if stream {
                let r = c.post(format!("{base}/generate_stream")).json(&body).send().await.unwrap();
                assert_eq!(r.status(), 200);
                let mut s = r.bytes_stream();
                let mut buf = String::new();
                while let Some(chunk) = s.next().await {
                    buf.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
                }
                let events: Vec<Value> = buf
                    .split("\n\n")
                    .filter_map(|e| e.strip_prefix("data:"))
                    .map(|d| serde_json::from_str(d.trim()).unwrap())
                    .collect();
                let last = events.last().unwrap_or_else(|| panic!("no events: {buf}"));
                assert!(last.get("error").is_none(), "{last}");
                let text = last["generated_text"].as_str().unwrap().to_string();
                // The streamed tokens' texts add up to the final text.
                let joined: String = events
                    .iter()
                    .filter(|e| e["token"]["special"] == false)
                    .map(|e| e["token"]["text"].as_str().unwrap_or(""))
                    .collect();
                assert_eq!(joined, text);
                (text, last["details"]["finish_reason"].as_str().unwrap().to_string())
            } else {
                let r = c.post(format!("{base}/generate")).json(&body).send().await.unwrap();
                assert_eq!(r.status(), 200);
                let v: Value = r.json().await.unwrap();
                let tokens = v["details"]["tokens"].as_array().unwrap().len();
                assert_eq!(tokens, v["details"]["generated_tokens"].as_u64().unwrap() as usize);
                (
                    v["generated_text"].as_str().unwrap().to_string(),
                    v["details"]["finish_reason"].as_str().unwrap().to_string(),
                )
            };
            let done = reason == "eos_token";
            match case {
                Case::Schema(s, _) if done => check_schema(s, &text),
                Case::Regex(_) if done => {
                    let re = regex::Regex::new(&format!("^(?:{REGEX})$")).unwrap();
                    assert!(re.is_match(&text), "{text:?}");
                }
                _ => {}
            }
            (done.then_some(!matches!(case, Case::Plain(_)) && done).filter(|&s| s), text)
        }
        Case::Tools(_) => {
            let body = json!({"model": "test", "seed": seed, "max_tokens": 200, "stream": stream,
                "messages": [{"role": "user", "content": "Flags?"}],
                "tools": [{"type": "function", "function": {"name": "set_flags",
                    "parameters": serde_json::from_str::<Value>(FLAGS).unwrap()}}],
                "tool_choice": {"type": "function", "function": {"name": "set_flags"}}});
            let r = c.post(format!("{base}/v1/chat/completions")).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200);
            let (finish, calls) = if stream {
                let buf = r.text().await.unwrap();
                assert!(buf.trim_end().ends_with("data: [DONE]"), "{buf}");
                let mut args = String::new();
                let mut names = Vec::new();
                let mut finish = String::new();
                for d in buf.split("\n\n").filter_map(|e| e.strip_prefix("data:")).map(str::trim) {
                    if d == "[DONE]" {
                        continue;
                    }
                    let v: Value = serde_json::from_str(d).unwrap();
                    assert!(v.get("error").is_none(), "{v}");
                    let choice = &v["choices"][0];
                    if let Some(f) = choice["finish_reason"].as_str() {
                        finish = f.to_string();
                    }
                    for tc in choice["delta"]["tool_calls"].as_array().into_iter().flatten() {
                        if let Some(n) = tc["function"]["name"].as_str() {
                            names.push(n.to_string());
                        }
                        args.push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
                    }
                }
                (finish, names.into_iter().map(|n| (n, args.clone())).collect::<Vec<_>>())
            } else {
                let v: Value = r.json().await.unwrap();
                let choice = &v["choices"][0];
                let calls = choice["message"]["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        (
                            c["function"]["name"].as_str().unwrap().to_string(),
                            c["function"]["arguments"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect();
                (choice["finish_reason"].as_str().unwrap().to_string(), calls)
            };
            if finish != "tool_calls" {
                assert_eq!(finish, "length");
                return (None, String::new());
            }
            assert_eq!(calls.len(), 1, "{calls:?}");
            assert_eq!(calls[0].0, "set_flags");
            check_schema(FLAGS, &calls[0].1);
            (Some(true), calls[0].1.clone())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_mixed_requests_all_complete_and_structured_ones_are_valid() {
    let engine = EngineOptions { max_batch_size: 8, ..EngineOptions::default() };
    let server = serve(engine, Duration::from_millis(1), Limits::default()).await;
    let c = reqwest::Client::new();
    let cases = [
        Case::Schema(PERSON, false),
        Case::Schema(FLAGS, true),
        Case::Regex(false),
        Case::Regex(true),
        Case::Plain(false),
        Case::Plain(true),
        Case::Tools(false),
        Case::Tools(true),
    ];
    let jobs = (0..24u64).map(|i| {
        let (c, base, case) = (c.clone(), server.base.clone(), cases[i as usize % cases.len()].clone());
        tokio::spawn(async move { run_case(&c, &base, &case, i).await })
    });
    let results = futures::future::join_all(jobs).await;
    let valid = results.iter().filter(|r| matches!(r.as_ref().unwrap().0, Some(true))).count();
    // Bounded answers (FLAGS, the regex, the forced call) always finish in 120 tokens;
    // PERSON's string may be cut off by a random model.
    assert!(valid >= 12, "only {valid} structured answers completed");
    // Nothing leaks: every row left the batch.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(metric(&c, &server.base, "grammask_running").await, 0.0);
    // The same seed gives the same answer twice.
    let a = run_case(&c, &server.base, &Case::Schema(PERSON, false), 99).await;
    let b = run_case(&c, &server.base, &Case::Schema(PERSON, true), 99).await;
    assert_eq!(a.1, b.1);
}

/// Host rows are sampled under their masks, nothing written over the logits: the same
/// answers, token for token, as a router that writes −∞ over them first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_under_the_masks_answers_as_applying_them_does() {
    let fused = serve(EngineOptions::default(), Duration::ZERO, Limits::default()).await;
    let applied = EngineOptions { sample_under_masks: false, ..EngineOptions::default() };
    let applied = serve(applied, Duration::ZERO, Limits::default()).await;
    let c = reqwest::Client::new();
    for (i, case) in
        [Case::Schema(PERSON, false), Case::Schema(FLAGS, true), Case::Regex(false), Case::Tools(false)]
            .iter()
            .enumerate()
    {
        for seed in 0..3u64 {
            let seed = seed + 10 * i as u64;
            let a = run_case(&c, &fused.base, case, seed).await;
            let b = run_case(&c, &applied.base, case, seed).await;
            assert_eq!(a, b, "case {i}, seed {seed}");
        }
    }
}

/// The measurement mode that draws each masked row a second time without its mask
/// (`EngineOptions::pair_masked_draws`) changes no answer — the second draw works on
/// copies — and exports both draws' times for every masked row it drew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_masked_draws_changes_no_answer_and_times_both_draws() {
    let plain = serve(EngineOptions::default(), Duration::ZERO, Limits::default()).await;
    let paired = EngineOptions { pair_masked_draws: true, ..EngineOptions::default() };
    let paired = serve(paired, Duration::ZERO, Limits::default()).await;
    let c = reqwest::Client::new();
    for (i, case) in [Case::Schema(PERSON, false), Case::Regex(true), Case::Tools(false), Case::Plain(false)]
        .iter()
        .enumerate()
    {
        for seed in 0..2u64 {
            let seed = seed + 10 * i as u64;
            let a = run_case(&c, &plain.base, case, seed).await;
            let b = run_case(&c, &paired.base, case, seed).await;
            assert_eq!(a, b, "case {i}, seed {seed}");
        }
    }
    let rows = metric(&c, &paired.base, "grammask_paired_draws_total").await;
    let seconds = |draw: &'static str| {
        let (c, base) = (&c, &paired.base);
        async move { metric(c, base, &format!("grammask_paired_draw_seconds_total{{draw=\"{draw}\"}}")).await }
    };
    assert!(rows >= 20.0, "{rows} paired rows");
    assert!(seconds("masked").await > 0.0 && seconds("unmasked").await > 0.0);
    // Off by default: nothing drawn twice.
    assert_eq!(metric(&c, &plain.base, "grammask_paired_draws_total").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_frees_its_row() {
    let server = serve(EngineOptions::default(), Duration::from_millis(5), Limits::default()).await;
    let c = reqwest::Client::new();
    let body = json!({"inputs": "x", "parameters": {"max_new_tokens": 4000, "do_sample": true}});
    let r = c.post(format!("{}/generate_stream", server.base)).json(&body).send().await.unwrap();
    let mut s = r.bytes_stream();
    for _ in 0..3 {
        s.next().await.unwrap().unwrap();
    }
    drop(s);
    let mut cancelled = 0.0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancelled = metric(&c, &server.base, "grammask_cancelled").await;
        if cancelled >= 1.0 {
            break;
        }
    }
    assert_eq!(cancelled, 1.0);
    assert_eq!(metric(&c, &server.base, "grammask_running").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_past_the_queue_gets_429_and_the_rest_completes() {
    let engine = EngineOptions { max_batch_size: 1, max_queue: 2, ..EngineOptions::default() };
    let server = serve(engine, Duration::from_millis(10), Limits::default()).await;
    let c = reqwest::Client::new();
    let jobs = (0..12).map(|i| {
        let (c, base) = (c.clone(), server.base.clone());
        tokio::spawn(async move {
            let body = json!({"inputs": "x", "parameters": {"max_new_tokens": 5, "seed": i}});
            let r = c.post(format!("{base}/generate")).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        })
    });
    let results: Vec<_> = futures::future::join_all(jobs).await.into_iter().map(Result::unwrap).collect();
    let refused: Vec<_> = results.iter().filter(|(s, _)| *s == 429).collect();
    assert!(!refused.is_empty(), "{results:?}");
    assert!(refused
        .iter()
        .all(|(_, v)| v["error_type"] == "overloaded" && v["error"].as_str().unwrap().contains("queue")));
    for (status, v) in &results {
        assert!(*status == 200 || *status == 429, "{status} {v}");
        if *status == 200 {
            assert!(v["generated_text"].is_string());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_4xx_with_a_message_and_disturbs_nothing() {
    let limits = Limits { max_new_tokens: 50, max_grammar_bytes: 2000, ..Limits::default() };
    let server = serve(EngineOptions::default(), Duration::ZERO, limits).await;
    let c = reqwest::Client::new();
    let post = |path: &str, body: String| {
        c.post(format!("{}{path}", server.base)).header("content-type", "application/json").body(body).send()
    };
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("/generate", "{not json".into(), 422, "invalid request body"),
        (
            "/generate",
            json!({"inputs": "x", "parameters": {"nope": 1}}).to_string(),
            422,
            "unknown field `nope`",
        ),
        (
            "/generate",
            json!({"inputs": "x", "parameters": {"max_new_tokens": 51}}).to_string(),
            422,
            "max_new_tokens",
        ),
        (
            "/generate",
            json!({"inputs": "x", "parameters": {"temperature": 0}}).to_string(),
            422,
            "temperature",
        ),
        (
            "/generate",
            json!({"inputs": "x", "parameters": {"grammar": {"type": "json", "value": {"type": "object",
                "properties": {"a": {"type": "strng"}}}}}})
            .to_string(),
            422,
            "/properties/a",
        ),
        (
            "/generate",
            json!({"inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "(ab"}}}).to_string(),
            422,
            "invalid grammar",
        ),
        (
            "/generate",
            json!({"inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "a".repeat(3000)}}})
                .to_string(),
            422,
            "limit is 2000",
        ),
        ("/generate", json!({"inputs": "", "parameters": {}}).to_string(), 422, "empty"),
        (
            "/generate",
            json!({"inputs": "x", "parameters": {"typical_p": 1.0}}).to_string(),
            422,
            "`typical_p` must be > 0.0 and < 1.0",
        ),
        (
            "/generate",
            json!({"inputs": "x", "parameters": {"top_n_tokens": 6}}).to_string(),
            422,
            "`top_n_tokens` must be <= 5",
        ),
        (
            "/generate_stream",
            json!({"inputs": "x", "parameters": {"decoder_input_details": true}}).to_string(),
            422,
            "`decoder_input_details` == true is not supported when streaming tokens",
        ),
        (
            "/v1/completions",
            json!({"model": "m", "prompt": "x", "echo": true, "logprobs": 1, "stream": true}).to_string(),
            422,
            "`echo` with `logprobs` cannot be streamed",
        ),
        (
            "/generate",
            json!({"inputs": "x", "parameters": {"best_of": 2, "seed": 1, "do_sample": true}}).to_string(),
            422,
            "`seed` must not be set when `best_of` > 1",
        ),
        (
            "/generate",
            json!({"inputs": "x", "parameters": {"best_of": 2}}).to_string(),
            422,
            "you must use sampling when `best_of` is > 1",
        ),
        (
            "/generate_stream",
            json!({"inputs": "x", "parameters": {"best_of": 2, "do_sample": true}}).to_string(),
            422,
            "`best_of` != 1 is not supported when streaming tokens",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "n": 20}).to_string(),
            422,
            "`n`",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})
                .to_string(),
            422,
            "response_format",
        ),
        // Shapes OpenAI's schema does not allow: a 422 naming the place, never a dropped
        // connection.
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": ["hi"]}).to_string(),
            422,
            "messages[0]: expected an object",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": 5}]})
                .to_string(),
            422,
            "messages[1].content: expected a string",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"content": "x"}]}).to_string(),
            422,
            "messages[0].role: missing",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}).to_string(),
            422,
            "messages[0].content[0].text: expected a string",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]}]})
                .to_string(),
            422,
            "messages[0].tool_calls[0]",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})
                .to_string(),
            422,
            "tools",
        ),
    ];
    for (path, body, status, needle) in cases {
        let r = post(path, body.clone()).await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{body}");
        let text = r.text().await.unwrap();
        assert!(text.contains(needle), "{body} → {text}");
    }
    // An oversized body is refused before it is read: the answer comes after the
    // headers alone. (A client still writing the body when the server closes can see a
    // broken pipe instead of the answer, so the request is written by hand, headers and
    // a first chunk only.)
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = server.base.trim_start_matches("http://");
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /generate HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{{\"inputs\": \"xxxx",
            3 << 20
        );
        s.write_all(head.as_bytes()).await.unwrap();
        let mut answer = vec![0u8; 64];
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), s.read(&mut answer))
            .await
            .unwrap()
            .unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }
    // The server still answers.
    let ok = post("/generate", json!({"inputs": "x", "parameters": {"max_new_tokens": 3}}).to_string())
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let info: Value = c.get(format!("{}/info", server.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(info["tool_calling_family"], "qwen_3");
}

/// A request's compile computes its grammar's masks before the request joins the batch
/// (`RouterConfig::mask_precompute`), so that the decode steps' fills do not walk the
/// vocabulary for them; with no budget they are all left to the fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiles_compute_masks_before_the_request_joins_the_batch() {
    let schema = r#"{"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
        "required": ["ok", "n"]}"#;
    for (budget, all) in [(grammask_router::server::DEFAULT_MASK_PRECOMPUTE, true), (Duration::ZERO, false)] {
        let tok = tokenizer();
        let model = Box::new(SimulatedModel::new(
            tok.info.vocab_size(),
            11,
            ForwardTime::Sleep(Duration::from_millis(1)),
        ));
        let router = Router::start(RouterConfig {
            tokenizer: tok,
            model,
            engine: EngineOptions::default(),
            limits: Limits::default(),
            jump_forward: true,
            model_id: "test".into(),
            mask_precompute: budget,
            api_key: None,
            tool_call_format: None,
            json_property_order: Default::default(),
        })
        .unwrap();
        let spec = grammask::GrammarSpec::JsonSchema { schema: schema.into(), options: Default::default() };
        let matcher = router.service.compile(spec).await.unwrap();
        let (done, total) = matcher.compiled().mask_stats();
        assert!(total > 10, "{total} scannable states");
        if all {
            assert_eq!(done, total, "budget {budget:?}: masks left to the decode steps");
        } else {
            assert_eq!(done, 0, "no budget: masks computed while compiling");
        }
        router.engine.shutdown();
    }
}

/// `--json-property-order`: any order by default; the schema's when configured (both APIs
/// compile through `Service::compile`, where the setting applies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_property_order_is_the_routers_setting() {
    use grammask::json_schema::PropertyOrder;
    let schema = r#"{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}"#;
    for order in [PropertyOrder::Any, PropertyOrder::Schema] {
        let tok = tokenizer();
        let model = Box::new(SimulatedModel::new(
            tok.info.vocab_size(),
            11,
            ForwardTime::Sleep(Duration::from_millis(1)),
        ));
        let router =
            Router::start(RouterConfig { json_property_order: order, ..test_config(tok, model) }).unwrap();
        let spec = grammask::GrammarSpec::JsonSchema { schema: schema.into(), options: Default::default() };
        let matcher = router.service.compile(spec).await.unwrap();
        let mut in_order = matcher.clone();
        assert!(in_order.accept_string(r#"{"a": 1, "b": 2}"#).is_ok(), "{order:?}");
        let mut reversed = matcher.clone();
        let took = reversed.accept_string(r#"{"b": 2, "a": 1}"#).is_ok();
        assert_eq!(took, order == PropertyOrder::Any, "{order:?}");
        router.engine.shutdown();
    }
}

/// A 250-byte schema that takes seconds to compile unbounded (eight unanchored `oneOf`
/// patterns, each intersected with the others' complements).
const COSTLY: &str = r#"{"type": "object", "properties": {"s": {"type": "string", "oneOf": [
  {"pattern": "ALPHA"}, {"pattern": "BRAVO_ONE"}, {"pattern": "CHARLIE"}, {"pattern": "DELTA"},
  {"pattern": "ECHO_FOUR"}, {"pattern": "FOX"}, {"pattern": "GOLF"}, {"pattern": "HOTEL"}]}}}"#;

fn costly_request() -> String {
    json!({"inputs": "x", "parameters": {"max_new_tokens": 5, "grammar": {"type": "json",
        "value": serde_json::from_str::<Value>(COSTLY).unwrap()}}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costly_compiles_are_refused_by_the_budget_and_cancelled_with_their_client() {
    // The default work budget refuses the costly schema, promptly, with a 422 that says why.
    let server = serve(EngineOptions::default(), Duration::ZERO, Limits::default()).await;
    let c = reqwest::Client::new();
    let t = std::time::Instant::now();
    let r = c
        .post(format!("{}/generate", server.base))
        .header("content-type", "application/json")
        .body(costly_request())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let text = r.text().await.unwrap();
    assert!(text.contains("work budget"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    drop(server);

    // Without a work limit, a client that goes away while its grammar compiles cancels
    // the compile (counted), and the server answers the next request at once.
    let limits = Limits { compile_work_limit: None, compile_threads: 1, ..Limits::default() };
    let server = serve(EngineOptions::default(), Duration::ZERO, limits).await;
    let c = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let gone = c
        .post(format!("{}/generate", server.base))
        .header("content-type", "application/json")
        .body(costly_request())
        .send()
        .await;
    assert!(gone.is_err(), "the compile finished within 300 ms: {:?}", gone.map(|r| r.status()));
    let c = reqwest::Client::new();
    let mut cancelled = 0.0;
    for _ in 0..100 {
        cancelled = metric(&c, &server.base, "grammask_compiles_cancelled_total").await;
        if cancelled >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cancelled, 1.0);
    // Its compile slot (the only one) is free again: a small constrained request compiles.
    let t = std::time::Instant::now();
    let ok = c
        .post(format!("{}/generate", server.base))
        .header("content-type", "application/json")
        .body(
            json!({"inputs": "x", "parameters": {"max_new_tokens": 3,
            "grammar": {"type": "regex", "value": "[0-9]{3}"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_dies_answers_every_waiting_request_with_503_and_health_says_so() {
    let model =
        TestModel { fail_at: Some(3), ..TestModel::new(ForwardTime::Sleep(Duration::from_millis(20))) };
    let engine = EngineOptions { max_batch_size: 2, ..EngineOptions::default() };
    let server = serve_model(Box::new(model), engine, Limits::default()).await;
    let base = server.base.clone();
    let c = reqwest::Client::new();
    assert_eq!(c.get(format!("{base}/health")).send().await.unwrap().status(), 200);
    // Two running (the batch holds two) and two queued when the forward panics: all four
    // get a 503 at once, none waits.
    let body = json!({"inputs": "x", "parameters": {"max_new_tokens": 200}}).to_string();
    let t = std::time::Instant::now();
    let sends = (0..4).map(|_| {
        c.post(format!("{base}/generate"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
    });
    for r in futures::future::join_all(sends).await {
        let r = r.unwrap();
        assert_eq!(r.status(), 503);
        let text = r.text().await.unwrap();
        assert!(text.contains("the engine failed"), "{text}");
    }
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let h = c.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(h.status(), 503);
    assert!(h.text().await.unwrap().contains("the test model fails"));
    // A request after the failure is refused at once.
    let r = c
        .post(format!("{base}/generate"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_context_bounds_every_request_at_admission() {
    let model =
        TestModel { context: Some(64), ..TestModel::new(ForwardTime::Sleep(Duration::from_millis(1))) };
    let server = serve_model(Box::new(model), EngineOptions::default(), Limits::default()).await;
    let base = server.base.clone();
    let c = reqwest::Client::new();
    let info: Value = c.get(format!("{base}/info")).send().await.unwrap().json().await.unwrap();
    assert_eq!((info["max_total_tokens"].as_u64(), info["max_input_tokens"].as_u64()), (Some(64), Some(63)));
    let post = |body: Value| {
        c.post(format!("{base}/generate"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    // One request that could overflow the context, beside ones that fit: the first is
    // refused naming both numbers, the others finish.
    let over = post(json!({"inputs": "hello there", "parameters": {"max_new_tokens": 100}}));
    let fits = post(json!({"inputs": "hello there", "parameters": {"max_new_tokens": 20}}));
    let fits2 = post(
        json!({"inputs": "hi", "parameters": {"max_new_tokens": 30, "grammar": {"type": "regex", "value": "[a-z]{1,20}"}}}),
    );
    let (over, fits, fits2) = futures::join!(over, fits, fits2);
    let over = over.unwrap();
    assert_eq!(over.status(), 422);
    let text = over.text().await.unwrap();
    assert!(text.contains("`max_new_tokens` is 100") && text.contains("`max_total_tokens` of 64"), "{text}");
    assert_eq!(fits.unwrap().status(), 200);
    assert_eq!(fits2.unwrap().status(), 200);
    // TGI's `truncate` applies before the input limit: a long prompt cut to 20 tokens runs.
    let long = "word ".repeat(200);
    let r = post(json!({"inputs": long, "parameters": {"max_new_tokens": 5}})).await.unwrap();
    assert_eq!(r.status(), 422);
    let r = post(json!({"inputs": long, "parameters": {"max_new_tokens": 5, "truncate": 20}})).await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_the_model_fails_mid_batch_ends_alone_and_the_others_finish() {
    // The model's cache holds 40 positions per sequence but it does not say so: the
    // request that generates past it fails in the middle of a batch (its stream gets an
    // error event), the ones beside it, constrained and not, finish.
    let model = TestModel { cache: Some(40), ..TestModel::new(ForwardTime::Sleep(Duration::from_millis(2))) };
    let server = serve_model(Box::new(model), EngineOptions::default(), Limits::default()).await;
    let base = server.base.clone();
    let c = reqwest::Client::new();
    let post = |path: &str, body: Value| c.post(format!("{base}{path}")).json(&body).send();
    let over = post(
        "/generate_stream",
        json!({"inputs": "x", "parameters": {"max_new_tokens": 100, "seed": 1, "stop": []}}),
    );
    let plain = post(
        "/generate",
        json!({"inputs": "x", "parameters": {"max_new_tokens": 30, "seed": 2, "details": true}}),
    );
    let constrained = post(
        "/generate",
        json!({"inputs": "x", "parameters": {"max_new_tokens": 30, "seed": 3, "details": true,
            "grammar": {"type": "regex", "value": "[a-z]{20,40}"}}}),
    );
    let (over, plain, constrained) = futures::join!(over, plain, constrained);
    let over = over.unwrap();
    assert_eq!(over.status(), 200);
    let text = over.text().await.unwrap();
    assert!(text.contains("exceed the cache of 40"), "{text}");
    assert!(text.contains("\"token\""), "tokens before the error: {text}");
    for r in [plain, constrained] {
        let r = r.unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        let reason = v["details"]["finish_reason"].as_str();
        assert!(matches!(reason, Some("length" | "eos_token")), "{v}");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(metric(&c, &base, "grammask_running").await, 0.0);
    assert_eq!(c.get(format!("{base}/health")).send().await.unwrap().status(), 200);
}

/// A JSON schema of `n` string properties, each its own pattern: a grammar whose masks
/// are many and slow to compute (left lazy, most are computed during decoding).
fn slow_mask_schema(n: usize) -> Value {
    let props: serde_json::Map<String, Value> = (0..n)
        .map(|i| {
            (format!("field_{i}"), json!({"type": "string", "pattern": format!("^[a-z]{{2,8}}-{i}[0-9]+$")}))
        })
        .collect();
    json!({"type": "object", "properties": props, "required": (0..n).map(|i| format!("field_{i}")).collect::<Vec<_>>(),
        "additionalProperties": false})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_whose_masks_are_late_sit_steps_out_with_the_same_outputs() {
    // Masks left lazy and a forward far faster than a fresh mask: with no grace, the
    // constrained rows sit out the steps whose masks are not ready, while the
    // unconstrained row beside them goes on. Waiting for every mask instead gives the
    // same texts: only when a row gets its token changes.
    let run = |grace: Option<Duration>| async move {
        let model = TestModel::new(ForwardTime::Sleep(Duration::from_micros(50)));
        let engine = EngineOptions { late_mask_grace: grace, ..EngineOptions::default() };
        let server = serve_precomputing(Box::new(model), engine, Limits::default(), Duration::ZERO).await;
        let c = reqwest::Client::new();
        let base = server.base.clone();
        let schema = slow_mask_schema(12);
        let bodies: Vec<Value> = (0..3)
            .map(|k| {
                json!({"inputs": "x", "parameters": {"max_new_tokens": 400, "seed": 5 + k,
                "grammar": {"type": "json", "value": schema}}})
            })
            .chain([json!({"inputs": "x", "parameters": {"max_new_tokens": 400, "seed": 9}})])
            .collect();
        let sends = bodies.iter().map(|b| c.post(format!("{base}/generate")).json(b).send());
        let mut texts = Vec::new();
        for r in futures::future::join_all(sends).await {
            let r = r.unwrap();
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            texts.push(v["generated_text"].as_str().unwrap().to_string());
        }
        for t in &texts[..3] {
            check_schema(&schema.to_string(), t);
        }
        (texts, metric(&c, &base, "grammask_rows_late_total").await)
    };
    let (sat_out, late) = run(Some(Duration::ZERO)).await;
    let (waited, none) = run(None).await;
    assert!(late > 0.0, "no row sat a step out");
    assert_eq!(none, 0.0);
    assert_eq!(sat_out, waited);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grammar_that_panics_in_its_fill_ends_its_request_alone() {
    // grammask's test hook: a matcher whose grammar source holds the marker panics when
    // it fills its mask. That request ends with an error; the batch goes on.
    let server = serve(EngineOptions::default(), Duration::from_millis(2), Limits::default()).await;
    let base = server.base.clone();
    let c = reqwest::Client::new();
    let bad = json!({"inputs": "x", "parameters": {"max_new_tokens": 20, "seed": 1,
        "grammar": {"type": "regex", "value": grammask::matcher::FILL_PANIC_MARKER}}});
    let good = json!({"inputs": "x", "parameters": {"max_new_tokens": 20, "seed": 2,
        "grammar": {"type": "regex", "value": "[a-z]{20,30}"}}});
    let (a, b) = futures::join!(
        c.post(format!("{base}/generate")).json(&bad).send(),
        c.post(format!("{base}/generate")).json(&good).send()
    );
    let a = a.unwrap();
    assert!(a.status().is_server_error() || a.status().as_u16() == 424, "{}", a.status());
    let v: Value = a.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("panicked"), "{v}");
    assert_eq!(b.unwrap().status(), 200);
    assert_eq!(c.get(format!("{base}/health")).send().await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_tokens_are_the_grammars_and_asking_for_them_changes_no_token() {
    // Sampled at a temperature under a regex grammar: every listed alternative is one the
    // grammar allows (letters, or the stop token once the word may end), most likely
    // first, the chosen token among them when it is likelier than the last listed; the
    // text is the same with and without them.
    let server = serve(EngineOptions::default(), Duration::from_millis(1), Limits::default()).await;
    let c = reqwest::Client::new();
    let body = |top: Option<u32>| {
        let mut p = json!({"max_new_tokens": 12, "seed": 21, "temperature": 0.8, "details": true,
            "grammar": {"type": "regex", "value": "[a-z]{4,10}"}});
        if let Some(n) = top {
            p["top_n_tokens"] = json!(n);
        }
        json!({"inputs": "x", "parameters": p})
    };
    let with = post_json(&c, &format!("{}/generate", server.base), &body(Some(4))).await;
    let without = post_json(&c, &format!("{}/generate", server.base), &body(None)).await;
    assert_eq!(with["generated_text"], without["generated_text"], "{with}");
    assert!(without["details"].get("top_tokens").is_none(), "{without}");
    let tokens = with["details"]["tokens"].as_array().unwrap();
    let tops = with["details"]["top_tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), tops.len());
    for (t, top) in tokens.iter().zip(tops) {
        let top = top.as_array().unwrap();
        assert!((1..=4).contains(&top.len()), "{top:?}");
        let lps: Vec<f64> = top.iter().map(|x| x["logprob"].as_f64().unwrap()).collect();
        assert!(lps.windows(2).all(|w| w[0] >= w[1]) && lps[0] <= 0.0, "{lps:?}");
        for x in top {
            let text = x["text"].as_str().unwrap();
            assert!(x["special"] == true || text.chars().all(|ch| ch.is_ascii_lowercase()), "{x}");
        }
        // The chosen token is listed when it is likelier than the last listed (ties go to
        // the lower id).
        let lp = t["logprob"].as_f64().unwrap();
        if lp > lps[lps.len() - 1] {
            assert!(top.iter().any(|x| x["id"] == t["id"]), "{t} not in {top:?}");
        }
    }
}

/// The SSE events of a streamed answer, as JSON (`[DONE]` left out).
fn sse_events(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|e| e.trim().strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| *d != "[DONE]" && !d.is_empty())
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_match_the_published_wire_formats() {
    // `tests/fixtures/wire_formats.json`: the response objects as TGI's OpenAPI and
    // OpenAI's reference describe them (required fields, types, enumerations), written
    // for this repository. Every route's answer, streamed or not, with the options that
    // add fields (details, top tokens, best_of, logprobs, n, tools, usage), must fit.
    let fixtures: Value =
        serde_json::from_str(include_str!("fixtures/wire_formats.json")).expect("the fixtures are JSON");
    let check = |def: &str, v: &Value| {
        let schema = json!({"$defs": fixtures["$defs"], "$ref": format!("#/$defs/{def}")});
        let validator = jsonschema::validator_for(&schema).expect("a fixture compiles");
        let errors: Vec<String> =
            validator.iter_errors(v).map(|e| format!("{} at {}", e, e.instance_path)).collect();
        assert!(errors.is_empty(), "{def}: {errors:?}\n{v}");
    };
    let config = RouterConfig {
        tool_call_format: Some(grammask::tool_calling::Family::Hermes),
        json_property_order: Default::default(),
        ..test_config(tokenizer(), Box::new(TestModel::new(ForwardTime::Sleep(Duration::ZERO))))
    };
    let server = serve_config(config).await;
    let c = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", server.base);
    let text = |r: reqwest::Response| async move { r.text().await.unwrap() };
    check("Info", &c.get(url("/info")).send().await.unwrap().json().await.unwrap());
    let tgi = json!({"inputs": "x", "parameters": {"max_new_tokens": 6, "details": true, "top_n_tokens": 2,
        "do_sample": true, "best_of": 2}});
    check("GenerateResponse", &post_json(&c, &url("/generate"), &tgi).await);
    check(
        "CompatResponse",
        &post_json(&c, &url("/"), &json!({"inputs": "x", "parameters": {"max_new_tokens": 3}})).await,
    );
    let stream =
        json!({"inputs": "x", "parameters": {"max_new_tokens": 5, "details": true, "top_n_tokens": 2}});
    let events = sse_events(&text(c.post(url("/generate_stream")).json(&stream).send().await.unwrap()).await);
    assert_eq!(events.len(), 5);
    events.iter().for_each(|e| check("StreamResponse", e));
    let chat = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "n": 2, "logprobs": true,
        "top_logprobs": 2, "seed": 1});
    check("ChatCompletion", &post_json(&c, &url("/v1/chat/completions"), &chat).await);
    let tool = json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"a": {"type": "integer"}}, "required": ["a"]}}});
    let calls = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 40, "tools": [tool],
        "tool_choice": "required", "seed": 2});
    let v = post_json(&c, &url("/v1/chat/completions"), &calls).await;
    check("ChatCompletion", &v);
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let chunks =
        sse_events(&text(c.post(url("/v1/chat/completions")).json(&streamed).send().await.unwrap()).await);
    assert!(chunks.len() > 2);
    chunks.iter().for_each(|e| check("ChatCompletionChunk", e));
    let mut streamed_calls = calls.clone();
    streamed_calls["stream"] = json!(true);
    let chunks = sse_events(
        &text(c.post(url("/v1/chat/completions")).json(&streamed_calls).send().await.unwrap()).await,
    );
    chunks.iter().for_each(|e| check("ChatCompletionChunk", e));
    let completion = json!({"prompt": ["x", "y"], "max_tokens": 4, "n": 2, "logprobs": 2, "seed": 3});
    check("Completion", &post_json(&c, &url("/v1/completions"), &completion).await);
    let mut streamed = completion.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let pieces =
        sse_events(&text(c.post(url("/v1/completions")).json(&streamed).send().await.unwrap()).await);
    assert!(pieces.len() > 4);
    pieces.iter().for_each(|e| check("Completion", e));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_max_concurrent_requests_get_429_from_arrival() {
    // Two slots, taken by two long streams: a third request is refused at once, in its
    // API's error shape, before anything of it is parsed; once the streams end, it runs.
    let limits = Limits { max_concurrent_requests: 2, ..Limits::default() };
    let server = serve(EngineOptions::default(), Duration::from_millis(20), limits).await;
    let c = reqwest::Client::new();
    let long = json!({"inputs": "x", "parameters": {"max_new_tokens": 25, "seed": 1}});
    let mut streams = Vec::new();
    for _ in 0..2 {
        let r = c.post(format!("{}/generate_stream", server.base)).json(&long).send().await.unwrap();
        assert_eq!(r.status(), 200);
        streams.push(r);
    }
    let r = c.post(format!("{}/generate", server.base)).body("not even json").send().await.unwrap();
    assert_eq!(r.status(), 429);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error_type"], "overloaded", "{v}");
    assert!(v["error"].as_str().unwrap().contains("in flight"), "{v}");
    let body = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2});
    let r = c.post(format!("{}/v1/chat/completions", server.base)).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "overloaded", "{v}");
    // Reading a stream to its end frees its slot.
    for r in streams {
        let text = r.text().await.unwrap();
        assert!(text.contains("generated_text"), "{text}");
    }
    let r = c.post(format!("{}/v1/chat/completions", server.base)).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_fill_passes_its_budget_ends_alone_and_the_batch_goes_on() {
    // Masks left lazy and a fill budget of one unit: the first fill that walks for a new
    // mask is refused; that request ends with an error, the unconstrained one beside it
    // finishes.
    let limits = Limits { fill_work_limit: Some(1), ..Limits::default() };
    let model = TestModel::new(ForwardTime::Sleep(Duration::from_millis(2)));
    let server = serve_precomputing(Box::new(model), EngineOptions::default(), limits, Duration::ZERO).await;
    let c = reqwest::Client::new();
    let constrained = json!({"inputs": "x", "parameters": {"max_new_tokens": 40, "seed": 3,
        "grammar": {"type": "json", "value": serde_json::from_str::<Value>(PERSON).unwrap()}}});
    let plain = json!({"inputs": "x", "parameters": {"max_new_tokens": 40, "seed": 4}});
    let (a, b) = tokio::join!(
        c.post(format!("{}/generate", server.base)).json(&constrained).send(),
        c.post(format!("{}/generate", server.base)).json(&plain).send()
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.status(), 424);
    let v: Value = a.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("mask fill"), "{v}");
    assert_eq!(b.status(), 200);
    let v: Value = b.json().await.unwrap();
    assert!(v["generated_text"].is_string(), "{v}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(metric(&c, &server.base, "grammask_running").await, 0.0);
}

/// `n` tools with distinct names and argument schemas, as OpenAI's `tools`.
fn many_tools(n: usize, salt: usize) -> Value {
    let tools: Vec<Value> = (0..n)
        .map(|i| {
            json!({"type": "function", "function": {"name": format!("tool_{salt}_{i}"),
                "description": "a tool", "parameters": {"type": "object",
                "properties": {"a": {"type": "integer"}, format!("b{i}"): {"type": "string", "maxLength": 20}},
                "required": ["a"]}}})
        })
        .collect();
    Value::Array(tools)
}

/// What the hostile mix sends: `(path, body, what it must get)`.
enum Expect {
    /// Any HTTP answer (the attack's own requests: refused or served, never dropped).
    Answer,
    /// A 4xx.
    Refused,
}

fn hostile_requests() -> Vec<(&'static str, String, Expect)> {
    let mut out = Vec::new();
    for i in 0..16 {
        // Eight distinct costly schemas, each sent twice (the second joins the first's
        // compile).
        let schema = COSTLY.replacen("\"s\"", &format!("\"s{}\"", i % 8), 1);
        let body = json!({"inputs": "x", "parameters": {"max_new_tokens": 5, "grammar": {"type": "json",
            "value": serde_json::from_str::<Value>(&schema).unwrap()}}});
        out.push(("/generate", body.to_string(), Expect::Answer));
    }
    for i in 0..4 {
        let body = json!({"messages": [{"role": "user", "content": "call something"}],
            "tools": many_tools(300, i), "max_tokens": 20});
        out.push(("/v1/chat/completions", body.to_string(), Expect::Answer));
    }
    for bad in [
        "{\"inputs\": ".to_string(),
        json!({"inputs": 5}).to_string(),
        json!({"model": "m", "messages": ["hi"]}).to_string(),
        json!({"inputs": "x", "parameters": {"max_new_tokens": 1_000_000_000u64}}).to_string(),
        json!({"inputs": "word ".repeat(100_000)}).to_string(),
    ] {
        let path = if bad.contains("messages") { "/v1/chat/completions" } else { "/generate" };
        out.push((path, bad, Expect::Refused));
    }
    out
}

/// One small constrained request, streamed; its latency, or why it failed.
async fn small_request(c: &reqwest::Client, base: &str, seed: u64) -> Result<Duration, String> {
    let t = std::time::Instant::now();
    let body = json!({"inputs": "x", "parameters": {"max_new_tokens": 24, "seed": seed,
        "grammar": {"type": "json", "value": serde_json::from_str::<Value>(FLAGS).unwrap()}}});
    let r = c.post(format!("{base}/generate_stream")).json(&body).send().await.map_err(|e| e.to_string())?;
    if r.status() != 200 {
        return Err(format!("status {}", r.status()));
    }
    let text = r.text().await.map_err(|e| e.to_string())?;
    if !text.contains("generated_text") || text.contains("\"error\"") {
        return Err(text);
    }
    Ok(t.elapsed())
}

/// Runs the hostile mix against `base` while small constrained requests stream, one after
/// another on each of `lanes` clients; returns the small requests' latencies.
async fn hostile_mix(base: &str, lanes: usize, per_lane: usize) -> Vec<Duration> {
    let c = reqwest::Client::new();
    let attack = hostile_requests().into_iter().map(|(path, body, expect)| {
        let (c, url) = (c.clone(), format!("{base}{path}"));
        tokio::spawn(async move {
            let r = c.post(&url).header("content-type", "application/json").body(body).send().await;
            let r = r.unwrap_or_else(|e| panic!("{url}: no answer: {e}"));
            let status = r.status().as_u16();
            let text = r.text().await.unwrap_or_else(|e| panic!("{url}: body cut: {e}"));
            assert!(serde_json::from_str::<Value>(&text).is_ok(), "{url}: {status} {text}");
            if let Expect::Refused = expect {
                assert!((400..500).contains(&status), "{url}: {status} {text}");
            }
            status
        })
    });
    let small = (0..lanes).map(|lane| {
        let (c, base) = (c.clone(), base.to_string());
        tokio::spawn(async move {
            let mut out = Vec::new();
            for k in 0..per_lane {
                out.push(
                    small_request(&c, &base, (lane * 100 + k) as u64).await.expect("a small request failed"),
                );
            }
            out
        })
    });
    let (attack, small) = tokio::join!(futures::future::join_all(attack), futures::future::join_all(small));
    for a in attack {
        a.expect("an attack request's task");
    }
    small.into_iter().flat_map(|r| r.expect("a small lane")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_mix_gets_answers_and_small_requests_keep_streaming() {
    let engine = EngineOptions { max_batch_size: 16, ..EngineOptions::default() };
    let server = serve(engine, Duration::from_millis(2), Limits::default()).await;
    let latencies = hostile_mix(&server.base, 2, 3).await;
    assert_eq!(latencies.len(), 6);
    // Nothing left running once every request has its answer.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let c = reqwest::Client::new();
    assert_eq!(metric(&c, &server.base, "grammask_running").await, 0.0);
    assert_eq!(c.get(format!("{}/health", server.base)).send().await.unwrap().status(), 200);
}

/// Process CPU seconds (user + system) so far.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    let ticks = 100.0; // USER_HZ on Linux
    (field(11) + field(12)) / ticks
}

/// Peak resident memory of the process (`VmHWM`), MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn percentiles(mut d: Vec<Duration>) -> Value {
    d.sort();
    let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e3;
    json!({"n": d.len(), "p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99)})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark (docs/benchmarks/bounded-work.md): cargo test --release -p grammask-router --test http hostile_mix_benchmark -- --ignored --nocapture"]
async fn hostile_mix_benchmark() {
    let engine = EngineOptions { max_batch_size: 16, ..EngineOptions::default() };
    let server = serve(engine, Duration::from_millis(5), Limits::default()).await;
    let c = reqwest::Client::new();
    // Warm: the small schema compiled and cached, as on a server that has seen it.
    small_request(&c, &server.base, 0).await.expect("warm-up");
    let mut idle = Vec::new();
    for lane in 0..4u64 {
        for k in 0..10 {
            idle.push(small_request(&c, &server.base, lane * 100 + k).await.expect("idle request"));
        }
    }
    let t0 = std::time::Instant::now();
    let attack = hostile_mix(&server.base, 4, 10).await;
    let answered = t0.elapsed();
    let cpu0 = cpu_seconds();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = cpu_seconds() - cpu0;
    println!(
        "{}",
        json!({"idle": percentiles(idle), "under_attack": percentiles(attack),
            "mix_answered_s": answered.as_secs_f64(), "cpu_s_in_5s_after": after,
            "peak_rss_mib": peak_rss_mib()})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_guards_every_route_but_health() {
    let model = TestModel::new(ForwardTime::Sleep(Duration::ZERO));
    let config = RouterConfig { api_key: Some("sesame".into()), ..test_config(tokenizer(), Box::new(model)) };
    let server = serve_config(config).await;
    let c = reqwest::Client::new();
    let generate = json!({"inputs": "x", "parameters": {"max_new_tokens": 2}});
    let chat = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2});
    for key in [None, Some("Bearer wrong"), Some("sesame"), Some("Basic sesame")] {
        let with = |r: reqwest::RequestBuilder| match key {
            Some(k) => r.header("authorization", k),
            None => r,
        };
        let r = with(c.post(format!("{}/generate", server.base)).json(&generate)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{key:?}");
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error_type"], "authentication_error", "{v}");
        let r =
            with(c.post(format!("{}/v1/chat/completions", server.base)).json(&chat)).send().await.unwrap();
        assert_eq!(r.status(), 401);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], "authentication_error", "{v}");
        for path in ["/info", "/metrics", "/v1/models"] {
            let r = with(c.get(format!("{}{path}", server.base))).send().await.unwrap();
            assert_eq!(r.status(), 401, "{path}");
        }
    }
    let auth = |r: reqwest::RequestBuilder| r.bearer_auth("sesame");
    let r = auth(c.post(format!("{}/generate", server.base)).json(&generate)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = auth(c.post(format!("{}/v1/chat/completions", server.base)).json(&chat)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    for path in ["/info", "/metrics", "/v1/models"] {
        assert_eq!(auth(c.get(format!("{}{path}", server.base))).send().await.unwrap().status(), 200);
    }
    assert_eq!(c.get(format!("{}/health", server.base)).send().await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_served_on_a_chatml_template_and_the_format_flag_overrides_detection() {
    // A ChatML template that shows no tool-calling family: Hermes-style calls by default.
    let (json, config) = grammask_router::server::embedded_qwen3().unwrap();
    let mut config: Value = serde_json::from_slice(&config).unwrap();
    config["chat_template"] = json!(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
         {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    );
    let plain = LoadedTokenizer::from_bytes(&json, Some(config.to_string().as_bytes())).unwrap();
    let cases = [
        (plain, None, "hermes", "default (ChatML template)"),
        (tokenizer(), None, "qwen_3", "detected"),
        (tokenizer(), Some(grammask::tool_calling::Family::Hermes), "hermes", "configured"),
    ];
    for (tok, flag, family, source) in cases {
        let model = SimulatedModel::new(tok.info.vocab_size(), 11, ForwardTime::Sleep(Duration::ZERO));
        let config = RouterConfig { tool_call_format: flag, ..test_config(tok, Box::new(model)) };
        let server = serve_config(config).await;
        let c = reqwest::Client::new();
        let info: Value = c.get(format!("{}/info", server.base)).send().await.unwrap().json().await.unwrap();
        assert_eq!(
            (info["tool_calling_family"].as_str(), info["tool_calling_family_source"].as_str()),
            (Some(family), Some(source))
        );
        if family != "hermes" {
            // (Qwen 3's calls come after a think block a random model rarely closes; its
            // calls are checked by `concurrent_mixed_requests_…`.)
            continue;
        }
        let body = json!({"model": "test", "seed": 5, "max_tokens": 200,
            "messages": [{"role": "user", "content": "Flags?"}],
            "tools": [{"type": "function", "function": {"name": "set_flags",
                "parameters": serde_json::from_str::<Value>(FLAGS).unwrap()}}],
            "tool_choice": {"type": "function", "function": {"name": "set_flags"}}});
        let r = c.post(format!("{}/v1/chat/completions", server.base)).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200, "{family}");
        let v: Value = r.json().await.unwrap();
        let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "set_flags", "{family}: {v}");
        // (The random model may fill the arguments' whitespace until `max_tokens`: a
        // complete call is checked against its schema.)
        match v["choices"][0]["finish_reason"].as_str() {
            Some("tool_calls") => check_schema(FLAGS, call["arguments"].as_str().unwrap()),
            Some("length") => assert!(call["arguments"].as_str().unwrap().starts_with('{'), "{v}"),
            other => panic!("{family}: finish {other:?}: {v}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_sequences_are_found_inside_tokens_and_left_out_of_openai_text() {
    let server = serve(EngineOptions::default(), Duration::ZERO, Limits::default()).await;
    let c = reqwest::Client::new();
    // A JSON string may spell each character as an escape (`\u0061`), which a random
    // model picks as readily as the letter: TGI's side uses a regex, whose text is
    // forced; OpenAI's (JSON only) tries seeds until the model writes the letters.
    let schema = json!({"enum": ["alpha beta gamma"]});
    // " beta" ends at a token's end; "bet" inside the token " beta".
    for stop in [" beta", "bet"] {
        // TGI keeps the stop sequence (and the rest of the token it ends in).
        let body = json!({"inputs": "x", "parameters": {"max_new_tokens": 20, "stop": [stop],
            "grammar": {"type": "regex", "value": "\"alpha beta gamma\""}, "details": true}});
        let v = post_json(&c, &format!("{}/generate", server.base), &body).await;
        assert_eq!(v["details"]["finish_reason"], "stop_sequence", "{stop:?}: {v}");
        let text = v["generated_text"].as_str().unwrap();
        assert!(text.starts_with("\"alpha bet") && !text.contains("gamma"), "{stop:?}: {text:?}");
        // OpenAI leaves it out, streamed or not.
        let want = if stop == "bet" { "\"alpha " } else { "\"alpha" };
        let mut found = None;
        for seed in 0..64 {
            let body = json!({"model": "test", "prompt": "x", "max_tokens": 20, "stop": stop, "seed": seed,
                "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}});
            let v = post_json(&c, &format!("{}/v1/completions", server.base), &body).await;
            if v["choices"][0]["text"] == want {
                assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
                found = Some(body);
                break;
            }
            // Spelled otherwise, the stop string is not in the text: it ends at its quote.
            let text = v["choices"][0]["text"].as_str().unwrap();
            assert!(!text.contains(stop) && text.ends_with('"'), "{stop:?}: {v}");
        }
        let mut body = found.unwrap_or_else(|| panic!("{stop:?}: no seed of 64 wrote the letters"));
        body["stream"] = json!(true);
        let sse = c.post(format!("{}/v1/completions", server.base)).json(&body).send().await.unwrap();
        let sse = sse.text().await.unwrap();
        let streamed: String = sse
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data:"))
            .map(str::trim)
            .filter(|d| *d != "[DONE]")
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|v| v["choices"][0]["text"].as_str().map(String::from))
            .collect();
        assert_eq!(streamed, want, "{stop:?}: {sse}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_max_tokens_a_request_may_use_the_rest_of_the_context() {
    // A 64-position model: a request without a length limit is served (the default is
    // what the context leaves), and stays within it.
    let mut model = TestModel::new(ForwardTime::Sleep(Duration::ZERO));
    model.context = Some(64);
    let server = serve_model(Box::new(model), EngineOptions::default(), Limits::default()).await;
    let c = reqwest::Client::new();
    let body = json!({"model": "test", "prompt": "Hello there", "seed": 1});
    let r = c.post(format!("{}/v1/completions", server.base)).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let usage = &v["usage"];
    assert!(usage["total_tokens"].as_u64().unwrap() <= 64, "{v}");
    if v["choices"][0]["finish_reason"] == "length" {
        assert_eq!(usage["total_tokens"], 64, "{v}");
    }
    let body = json!({"inputs": "Hello there", "parameters": {"seed": 1, "details": true}});
    let v: Value =
        c.post(format!("{}/generate", server.base)).json(&body).send().await.unwrap().json().await.unwrap();
    let generated = v["details"]["generated_tokens"].as_u64().unwrap();
    assert!(generated + 2 <= 64 && generated > 0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_prompts_get_the_tokenizers_bos_and_chat_templates_their_own() {
    // Llama 3.1's tokenizer adds `<|begin_of_text|>` to a raw prompt (its post-processor);
    // the embedded Qwen3 tokenizer adds nothing.
    let data = test_data_dir().unwrap_or_else(|e| panic!("{e}"));
    let llama = LoadedTokenizer::from_path(&data.join("tokenizers/llama3_1")).unwrap();
    for (tok, want) in [(llama, 2), (tokenizer(), 1)] {
        let model = SimulatedModel::new(tok.info.vocab_size(), 11, ForwardTime::Sleep(Duration::ZERO));
        let server = serve_config(test_config(tok, Box::new(model))).await;
        let c = reqwest::Client::new();
        let body = json!({"model": "test", "prompt": "Hello", "max_tokens": 1});
        let v = post_json(&c, &format!("{}/v1/completions", server.base), &body).await;
        assert_eq!(v["usage"]["prompt_tokens"], want, "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_fields_are_honored_or_refused_by_name() {
    let server = serve(EngineOptions::default(), Duration::ZERO, Limits::default()).await;
    let c = reqwest::Client::new();
    let post = |body: Value| {
        let (c, url) = (c.clone(), format!("{}/v1/completions", server.base));
        async move { c.post(url).json(&body).send().await.unwrap() }
    };
    let base = json!({"model": "test", "prompt": "x", "max_tokens": 4, "seed": 2});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    for (field, value) in [
        ("logit_bias", json!({"999999999": 10})),
        ("logit_bias", json!({"5": 101})),
        ("presence_penalty", json!(3)),
        ("best_of", json!(17)),
        ("top_logprobs", json!(2)),
        ("min_p", json!(0.1)),
        ("repetition_penalty", json!(1.2)),
        ("suffix", json!("x")),
        ("mystery", json!(1)),
    ] {
        let r = post(with(field, value)).await;
        assert_eq!(r.status(), 422, "{field}");
        let v: Value = r.json().await.unwrap();
        assert!(v["error"]["message"].as_str().unwrap().contains(&format!("`{field}`")), "{v}");
    }
    // The values that ask for nothing are accepted.
    for (field, value) in [
        ("logit_bias", json!({})),
        ("echo", json!(false)),
        ("best_of", json!(1)),
        ("top_logprobs", json!(0)),
        ("min_p", json!(0)),
        ("repetition_penalty", json!(1.0)),
        ("suffix", Value::Null),
    ] {
        assert_eq!(post(with(field, value)).await.status(), 200, "{field}");
    }
    // `logit_bias` before the choice: +100 on one token makes greedy decoding repeat it;
    // `presence_penalty` is accepted in its range.
    let mut body = with("logit_bias", json!({"15": 100}));
    body["temperature"] = json!(0);
    let v: Value = post(body).await.json().await.unwrap();
    let zero = tokenizer().hf.decode(&[15], false).unwrap();
    assert_eq!(v["choices"][0]["text"], zero.repeat(4), "{v}");
    assert_eq!(post(with("presence_penalty", json!(1.5))).await.status(), 200);
    // vLLM's `top_k`: one candidate is greedy decoding.
    let text = |v: Value| v["choices"][0]["text"].as_str().unwrap().to_string();
    let greedy = text(post(with("temperature", json!(0))).await.json().await.unwrap());
    let top1 = text(post(with("top_k", json!(1))).await.json().await.unwrap());
    assert_eq!(top1, greedy);
    // Completions stream their usage when asked.
    let mut body = with("stream", json!(true));
    body["stream_options"] = json!({"include_usage": true});
    let sse = post(body).await.text().await.unwrap();
    let last = sse
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| *d != "[DONE]")
        .last()
        .unwrap();
    let v: Value = serde_json::from_str(last).unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 4, "{sse}");
    // `n` choices, each drawn with the seed + its index: choice k is the single answer of
    // seed + k; a list of prompts (strings or token ids) gives `n` choices each, in order;
    // `echo` begins each with its prompt.
    let texts = |v: &Value| -> Vec<String> {
        v["choices"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap().to_string()).collect()
    };
    let mut body = with("n", json!(3));
    body["temperature"] = json!(0.9);
    let shared = metric(&c, &server.base, "grammask_prefill_shared_total").await;
    let three = texts(&post(body.clone()).await.json().await.unwrap());
    assert_eq!(three.len(), 3);
    // Queued together, the three choices shared one prefill of their prompt.
    assert_eq!(metric(&c, &server.base, "grammask_prefill_shared_total").await - shared, 2.0);
    for (k, t) in three.iter().enumerate() {
        let mut one = body.clone();
        one["n"] = json!(1);
        one["seed"] = json!(2 + k);
        assert_eq!(&texts(&post(one).await.json().await.unwrap())[0], t, "choice {k}");
    }
    let ids: Vec<u32> = tokenizer().hf.encode("x", false).unwrap().get_ids().to_vec();
    let mut body = with("prompt", json!(["x", ids, "y"]));
    body["n"] = json!(2);
    body["echo"] = json!(true);
    let v: Value = post(body).await.json().await.unwrap();
    let six = texts(&v);
    assert_eq!(six.len(), 6, "{v}");
    assert!(
        six[..4].iter().all(|t| t.starts_with('x')) && six[4..].iter().all(|t| t.starts_with('y')),
        "{v}"
    );
    // The same prompt as text or as its ids, the same seeds: the same choices.
    assert_eq!(six[..2], six[2..4], "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], 3 * ids.len(), "{v}");
    let mut streamed = with("prompt", json!(["x", "y"]));
    streamed["n"] = json!(2);
    streamed["stream"] = json!(true);
    let sse = post(streamed.clone()).await.text().await.unwrap();
    let mut per_choice = vec![String::new(); 4];
    for data in
        sse.split("\n\n").filter_map(|e| e.strip_prefix("data:")).map(str::trim).filter(|d| *d != "[DONE]")
    {
        let v: Value = serde_json::from_str(data).unwrap();
        for c in v["choices"].as_array().unwrap() {
            per_choice[c["index"].as_u64().unwrap() as usize] += c["text"].as_str().unwrap();
        }
    }
    streamed["stream"] = json!(false);
    assert_eq!(per_choice, texts(&post(streamed).await.json().await.unwrap()));
    for (prompt, what) in [(json!([]), "empty"), (json!([1, -1]), "token ids"), (json!([[]]), "empty")] {
        let r = post(with("prompt", prompt)).await;
        assert_eq!(r.status(), 422);
        let t = r.text().await.unwrap();
        assert!(t.contains("`prompt`") && t.contains(what), "{t}");
    }
    assert_eq!(post(with("n", json!(17))).await.status(), 422);
    // `best_of`: of the candidates (seed + k), the one with the highest log-probability
    // per token, as the single answers of those seeds say.
    let mut best = with("best_of", json!(3));
    best["temperature"] = json!(0.9);
    best["max_tokens"] = json!(6);
    let chosen = texts(&post(best.clone()).await.json().await.unwrap());
    assert_eq!(chosen.len(), 1);
    let mut candidates = Vec::new();
    for k in 0..3 {
        let mut one = best.clone();
        one.as_object_mut().unwrap().remove("best_of");
        one["seed"] = json!(2 + k);
        one["logprobs"] = json!(0);
        let v: Value = post(one).await.json().await.unwrap();
        let lps: Vec<f64> = v["choices"][0]["logprobs"]["token_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let mean = lps.iter().sum::<f64>() / lps.len().max(1) as f64;
        candidates.push((mean, texts(&v)[0].clone()));
    }
    let top = candidates.iter().max_by(|a, b| a.0.total_cmp(&b.0)).unwrap();
    assert_eq!(chosen[0], top.1, "{candidates:?}");
    let mut fewer = with("best_of", json!(1));
    fewer["n"] = json!(2);
    assert_eq!(post(fewer).await.status(), 422);
    // Echoed candidates: `best_of` ranks by log-probabilities the answer does not carry.
    let mut echoed = with("best_of", json!(2));
    echoed["echo"] = json!(true);
    let v: Value = post(echoed).await.json().await.unwrap();
    assert!(texts(&v)[0].starts_with('x'), "{v}");
    let mut streamed_best = with("best_of", json!(2));
    streamed_best["stream"] = json!(true);
    assert_eq!(post(streamed_best).await.status(), 422);
    // `echo` with `logprobs`: the prompt's tokens and log-probabilities first (the first
    // `null`), then the generated ones; streamed, refused.
    let mut echo_lp = with("echo", json!(true));
    echo_lp["logprobs"] = json!(1);
    let v: Value = post(echo_lp.clone()).await.json().await.unwrap();
    let lp = &v["choices"][0]["logprobs"];
    assert!(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null(), "{v}");
    assert_eq!(lp["tokens"][0], "x", "{v}");
    assert!(
        lp["token_logprobs"].as_array().unwrap()[1..].iter().all(|x| x.as_f64().is_some_and(|x| x <= 0.0)),
        "{v}"
    );
    echo_lp["stream"] = json!(true);
    assert_eq!(post(echo_lp).await.status(), 422);
    // TGI's chat extension of `response_format` (what its clients send to a TGI
    // server's OpenAI route): a regex, a schema given as JSON text, `json_schema` with
    // `value`; a regex that is not a string is refused naming the field.
    let chat = |rf: Value| {
        let (c, url) = (c.clone(), format!("{}/v1/chat/completions", server.base));
        let body = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 40, "seed": 3,
                          "response_format": rf});
        async move { c.post(url).json(&body).send().await.unwrap() }
    };
    let content = |v: &Value| v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    let v: Value = chat(json!({"type": "regex", "value": "[0-9]{3}-[a-z]{2}"})).await.json().await.unwrap();
    assert!(regex::Regex::new("^[0-9]{3}-[a-z]{2}$").unwrap().is_match(&content(&v)), "{v}");
    for rf in [
        json!({"type": "json", "value": "{\"type\": \"integer\", \"minimum\": 10, \"maximum\": 99}"}),
        json!({"type": "json_schema", "value": {"name": "n", "schema": {"type": "integer", "minimum": 10, "maximum": 99}}}),
    ] {
        let v: Value = chat(rf).await.json().await.unwrap();
        let n: i64 = content(&v).parse().unwrap_or_else(|e| panic!("{e}: {v}"));
        assert!((10..=99).contains(&n), "{v}");
    }
    let r = chat(json!({"type": "regex", "value": 5})).await;
    assert_eq!(r.status(), 422);
    assert!(r.text().await.unwrap().contains("response_format"));
}

include!("support/clients.rs");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_clients_work_unchanged() {
    // Hugging Face's `text_generation` and OpenAI's `openai`, pinned, driving the router
    // as their users do (`tests/clients/contract.py` says what is checked).
    let Some(python) = clients_python() else { return };
    // (Hermes-style calls: Qwen 3's come after a think block a random model rarely closes.)
    let model = TestModel::new(ForwardTime::Sleep(Duration::ZERO));
    let config = RouterConfig {
        engine: EngineOptions { max_batch_size: 8, ..EngineOptions::default() },
        tool_call_format: Some(grammask::tool_calling::Family::Hermes),
        json_property_order: Default::default(),
        ..test_config(tokenizer(), Box::new(model))
    };
    let server = serve_config(config).await;
    let stdout = run_client_script(python, "contract.py", server.base.clone()).await;
    assert!(stdout.starts_with("ok: "), "{stdout}");
}
