//! mistral.rs + grammask: SmolLM2-135M-Instruct on the CPU answers in JSON that a schema
//! accepts.
//!
//! ```sh
//! adapters/mistralrs/scripts/fetch-smollm2.sh
//! cargo run --release -p grammask-mistralrs --example mistralrs_smollm2
//! cargo run --release -p grammask-mistralrs --example mistralrs_smollm2 -- path/to/model.gguf
//! ```
//!
//! The constraint is the ordinary mistral.rs `Constraint::JsonSchema`; `Grammask::constrain`
//! compiles it against the vocabulary in the GGUF file and serves it through mistral.rs's
//! `CustomLogitsProcessor` instead of llguidance.

use grammask_mistralrs::{Grammask, ModelVocab, Outcome};
use mistralrs::{Constraint, GgufModelBuilder, RequestBuilder, TextMessageRole, TokenSource};
use std::path::PathBuf;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::args().nth(1).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    anyhow::ensure!(
        path.exists(),
        "{} is missing: run adapters/mistralrs/scripts/fetch-smollm2.sh",
        path.display()
    );
    let dir = path.parent().unwrap_or(&path).to_string_lossy().into_owned();
    let file = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let model = GgufModelBuilder::new(dir, vec![file])
        .with_force_cpu()
        .with_token_source(TokenSource::None)
        .build()
        .await?;

    // One per model: the vocabulary and stop set from the same file, a shared compile cache.
    let grammask = Grammask::new(ModelVocab::from_gguf(&path, &[])?);
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "country": {"type": "string", "maxLength": 30},
            "population": {"type": "integer", "minimum": 0}
        },
        "required": ["city", "country", "population"],
        "additionalProperties": false
    });
    let request = RequestBuilder::new()
        .add_message(TextMessageRole::User, "Name a large city, its country and population, as JSON.")
        .set_sampler_temperature(0.7)
        .set_sampler_max_len(128)
        .set_constraint(Constraint::JsonSchema(schema));
    let request = grammask.constrain(request)?;
    let processor = request.processor().cloned().expect("constrained");
    let started = std::time::Instant::now();
    let response = model.send_chat_request(request).await?;
    let choice = &response.choices[0];
    let text = choice.message.content.clone().unwrap_or_default();
    println!("{text}");
    let outcome = grammask.outcome(processor.compiled(), &text, &choice.finish_reason);
    let s = processor.stats();
    eprintln!(
        "{outcome:?}; {} tokens in {:.2} s; per step: fill {:.1} µs, apply {:.1} µs, slot table {:.1} µs",
        response.usage.completion_tokens,
        started.elapsed().as_secs_f64(),
        s.fill_ns as f64 / s.calls.max(1) as f64 / 1e3,
        s.apply_ns as f64 / s.calls.max(1) as f64 / 1e3,
        s.table_ns as f64 / s.calls.max(1) as f64 / 1e3,
    );
    anyhow::ensure!(outcome == Outcome::Complete, "the output is not a complete document");
    Ok(())
}
