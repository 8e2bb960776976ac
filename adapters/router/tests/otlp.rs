//! Traces reach an OTLP collector when one is configured: a fake collector on loopback
//! receives the router's spans (HTTP/protobuf) for a constrained request — the request,
//! its compile, the steps with their forward, mask fill, wait, apply and sample.

use grammask_router::engine::EngineOptions;
use grammask_router::model::{ForwardTime, SimulatedModel};
use grammask_router::server::{LoadedTokenizer, Router, RouterConfig};
use grammask_router::service::Limits;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the collector received: each POST's content type and body.
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

#[test]
fn spans_are_exported_to_the_configured_collector() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let received: Received = Arc::default();
    let collector = {
        let received = received.clone();
        rt.block_on(async move {
            let app = axum::Router::new().route(
                "/v1/traces",
                axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let received = received.clone();
                    async move {
                        let ct = headers
                            .get("content-type")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string();
                        received.lock().unwrap().push((ct, body.to_vec()));
                        axum::http::StatusCode::OK
                    }
                }),
            );
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(l, app).await });
            addr
        })
    };
    // Made outside the runtime, as the binary does (the exporter's client blocks).
    std::env::set_var("RUST_LOG", "warn");
    let mut telemetry =
        grammask_router::telemetry::init(Some(&format!("http://{collector}")), "grammask-test").unwrap();
    let tok = LoadedTokenizer::embedded().unwrap();
    let model =
        Box::new(SimulatedModel::new(tok.info.vocab_size(), 2, ForwardTime::Sleep(Duration::from_millis(1))));
    let config = RouterConfig {
        tokenizer: tok,
        model,
        // Masks written over the logits, so that the apply has its span too (by default
        // the host sampler reads them instead: the same spans less `apply_masks`).
        engine: EngineOptions { sample_under_masks: false, ..EngineOptions::default() },
        limits: Limits::default(),
        jump_forward: true,
        model_id: "test".into(),
        mask_precompute: grammask_router::server::DEFAULT_MASK_PRECOMPUTE,
        api_key: None,
        tool_call_format: None,
        json_property_order: Default::default(),
    };
    let router = Router::start(config).unwrap();
    let app = router.app();
    let status = rt.block_on(async move {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        let body = serde_json::json!({"inputs": "Answer:", "parameters": {"max_new_tokens": 24,
            "grammar": {"type": "regex", "value": "[a-z]{3,8}"}}});
        reqwest::Client::new().post(format!("{base}/generate")).json(&body).send().await.unwrap().status()
    });
    assert_eq!(status, 200);
    router.engine.shutdown();
    telemetry.shutdown();
    let got = received.lock().unwrap();
    assert!(!got.is_empty(), "the collector received nothing");
    assert!(
        got.iter().all(|(ct, _)| ct == "application/x-protobuf"),
        "{:?}",
        got.iter().map(|g| &g.0).collect::<Vec<_>>()
    );
    let all: Vec<u8> = got.iter().flat_map(|(_, b)| b.iter().copied()).collect();
    let has = |name: &str| all.windows(name.len()).any(|w| w == name.as_bytes());
    for name in [
        "grammask-test",
        "request",
        "compile",
        "step",
        "forward",
        "fill",
        "wait_for_masks",
        "apply_masks",
        "sample",
    ] {
        assert!(has(name), "no `{name}` in the exported spans");
    }
}
