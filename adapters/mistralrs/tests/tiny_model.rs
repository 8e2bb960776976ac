//! A tiny Llama with random weights, written by the test and loaded by mistral.rs's own
//! loader on the CPU: only the grammar keeps its output valid. Every output is checked by
//! an oracle that shares nothing with grammask's matcher — the `jsonschema` crate for JSON,
//! the `regex` crate for regexes, a brute-force Earley recognizer for EBNF — and must end
//! with a stop token, hold no special token, and use no id past the tokenizer (the lm_head
//! is padded past it, as Qwen's is).

mod common;
#[path = "../../../core/tests/integration/common/oracle.rs"]
#[allow(dead_code)]
mod oracle;

use common::{maskbench_sample, scratch, write_tiny_llama, Recorder, TinyLlama};
use grammask::{Grammar, GrammarSpec};
use grammask_mistralrs::{Grammask, ModelVocab, Outcome};
use mistralrs::{
    Constraint, Model, ModelDType, RequestBuilder, TextMessageRole, TextModelBuilder, TokenSource,
};
use std::sync::Arc;

const TOKENIZER: &str = "qwen3";
/// Qwen3's config pads the lm_head past the tokenizer's 151,669 tokens.
const LM_HEAD: usize = 151_936;

async fn tiny_model(name: &str) -> (Model, Grammask) {
    let dir = write_tiny_llama(
        &scratch(name),
        TOKENIZER,
        &TinyLlama {
            hidden: 32,
            layers: 2,
            heads: 2,
            kv_heads: 1,
            intermediate: 64,
            vocab: LM_HEAD,
            seed: 7,
        },
    );
    let model = TextModelBuilder::new(dir.to_string_lossy())
        .with_force_cpu()
        .with_token_source(TokenSource::None)
        .with_dtype(ModelDType::F32)
        .build()
        .await
        .expect("mistral.rs loads the tiny model");
    let vocab = ModelVocab::from_model_dir(&dir, &[]).expect("vocabulary");
    assert_eq!(vocab.tokenizer().vocab_size(), LM_HEAD, "masks cover the padded lm_head");
    (model, Grammask::new(vocab))
}

/// What validates a case's outputs.
enum Oracle {
    Json(jsonschema::Validator),
    Regex(regex::Regex),
    Ebnf(oracle::Bnf),
    /// A fixed prefix, then JSON valid against the schema.
    Prefixed(&'static str, jsonschema::Validator),
}

impl Oracle {
    fn check(&self, text: &str) -> Result<(), String> {
        match self {
            Oracle::Json(v) => {
                let doc: serde_json::Value =
                    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
                v.validate(&doc).map_err(|e| format!("schema: {e}"))
            }
            Oracle::Prefixed(prefix, v) => {
                let rest = text.strip_prefix(prefix).ok_or("prefix missing")?;
                let doc: serde_json::Value =
                    serde_json::from_str(rest).map_err(|e| format!("not JSON: {e}"))?;
                v.validate(&doc).map_err(|e| format!("schema: {e}"))
            }
            Oracle::Regex(r) => r.is_match(text).then_some(()).ok_or_else(|| "regex does not match".into()),
            Oracle::Ebnf(bnf) => {
                let mut r = oracle::Recognizer::new(bnf);
                let viable = text.bytes().all(|b| r.push(b));
                (viable && r.accepts()).then_some(()).ok_or_else(|| "not in the grammar's language".into())
            }
        }
    }
}

struct Case {
    name: String,
    spec: SpecKind,
    oracle: Oracle,
}

enum SpecKind {
    Mistral(Constraint),
    Grammask(GrammarSpec),
}

fn cases(grammask: &Grammask, schemas_wanted: usize) -> Vec<Case> {
    let mut out = Vec::new();
    // JSON schemas from the dev MaskBench splits that grammask compiles and the jsonschema
    // crate accepts as schemas.
    for (name, schema) in maskbench_sample(37) {
        if out.len() >= schemas_wanted {
            break;
        }
        let Ok(validator) = jsonschema::validator_for(&schema) else { continue };
        let c = Constraint::JsonSchema(schema.clone());
        if grammask.compile(&grammask_mistralrs::spec_from_constraint(&c).unwrap().unwrap()).is_err() {
            continue;
        }
        out.push(Case { name, spec: SpecKind::Mistral(c), oracle: Oracle::Json(validator) });
    }
    assert!(out.len() >= schemas_wanted, "only {} schemas compiled", out.len());
    for g in ["arithmetic", "json", "json_arr", "list", "chess"] {
        let text =
            std::fs::read_to_string(common::data_dir().join(format!("grammars/llama.cpp/{g}.gbnf"))).unwrap();
        let grammar = Grammar::from_ebnf(&text).unwrap();
        out.push(Case {
            name: format!("llama.cpp/{g}.gbnf"),
            spec: SpecKind::Grammask(GrammarSpec::ebnf(text)),
            oracle: Oracle::Ebnf(oracle::Bnf::new(&grammar)),
        });
    }
    for r in [
        r"[0-9]{3}-[0-9]{4}",
        r"(yes|no|maybe)",
        r"[a-z]+@[a-z]+\.(com|org)",
        r"\((-?[0-9]+(\.[0-9]+)?, ){2}-?[0-9]+\)",
        r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8}){0,2}",
    ] {
        out.push(Case {
            name: format!("regex {r}"),
            spec: SpecKind::Mistral(Constraint::Regex(r.into())),
            oracle: Oracle::Regex(regex::Regex::new(&format!("^(?:{r})$")).unwrap()),
        });
    }
    // Lark, as mistral.rs users write it for llguidance: directly, and as an llguidance
    // top-level grammar.
    let lark_greeting =
        "start: greeting \" \" name \"!\"\ngreeting: \"hello\" | \"hi\"\nname: /[A-Z][a-z]{1,10}/\n";
    out.push(Case {
        name: "lark greeting".into(),
        spec: SpecKind::Mistral(Constraint::Lark(lark_greeting.into())),
        oracle: Oracle::Regex(regex::Regex::new("^(hello|hi) [A-Z][a-z]{1,10}!$").unwrap()),
    });
    let list =
        "start: \"[\" item (\",\" item)* \"]\"\nitem: INT | WORD\n%import common.INT\n%import common.WORD\n";
    out.push(Case {
        name: "llguidance lark list".into(),
        spec: SpecKind::Mistral(Constraint::Llguidance(mistralrs::LlguidanceGrammar::from_lark(list.into()))),
        oracle: Oracle::Regex(regex::Regex::new("^\\[([0-9]+|[a-zA-Z]+)(,([0-9]+|[a-zA-Z]+))*\\]$").unwrap()),
    });
    let schema =
        serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let tool = format!("start: \"call \" %json {schema}\n");
    out.push(Case {
        name: "lark %json".into(),
        spec: SpecKind::Mistral(Constraint::Lark(tool)),
        oracle: Oracle::Prefixed("call ", jsonschema::validator_for(&schema).unwrap()),
    });
    out
}

#[derive(Default, Debug)]
struct Tally {
    outputs: usize,
    valid: usize,
    cut_off: usize,
    failures: Vec<String>,
}

/// Runs `case` as `n` requests (one choice each, sent together so that mistral.rs batches
/// them) and judges every output on the tokens the grammar took, read from the request's
/// own recorder — not on mistral.rs's `content`, which is a view of them: its reasoning
/// parser moves a `<think>` block to `reasoning_content`, and a `<think>` a grammar allows
/// inside a JSON string cut the content there (an unfinished text judged invalid).
async fn run_case(
    model: &Model,
    grammask: &Grammask,
    case: &Case,
    seed: u64,
    n: usize,
    max_len: usize,
) -> Tally {
    let one = |k: usize| async move {
        let recorder = Recorder::boosting(grammask.vocab().tokenizer(), b"\"}]", 4.0);
        let request = RequestBuilder::new()
            .add_message(TextMessageRole::User, format!("Answer (seed {seed}, choice {k})."))
            .set_sampler_temperature(1.0)
            .set_sampler_topk(0)
            .set_sampler_topp(1.0)
            .set_sampler_max_len(max_len)
            .add_logits_processor(recorder.clone());
        let constrained = match &case.spec {
            SpecKind::Mistral(c) => grammask.constrain(request.set_constraint(c.clone())),
            SpecKind::Grammask(s) => grammask.constrain_with(request, Some(s.clone())),
        }
        .expect("constraint compiles");
        let compiled = constrained.processor().unwrap().compiled().clone();
        (model.send_chat_request(constrained).await, recorder, compiled)
    };
    let mut t = Tally::default();
    let tok = grammask.vocab().tokenizer();
    for (response, recorder, compiled) in futures::future::join_all((0..n).map(one)).await {
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                t.failures.push(format!("{}: request failed: {e}", case.name));
                continue;
            }
        };
        let Some(choice) = response.choices.first() else {
            t.failures.push(format!("{}: no choice in the answer", case.name));
            continue;
        };
        t.outputs += 1;
        // The last context holds the prompt and every generated token but the last, which
        // is the stop token when the output stopped (the first contexts may be shorter:
        // mistral.rs's prefix cache hands over only the uncached tail).
        let contexts = recorder.contexts();
        let mut last = contexts.last().map_or(&[][..], Vec::as_slice);
        // Once in a while mistral.rs runs the processors once more for a sequence whose
        // stop token was just drawn (seen in CI: the judged window then started one token
        // late and ended on the stop token). A context never ends on a stop token
        // otherwise — mistral.rs ends a sequence at one — so that last call is dropped: a
        // mask that let a stop token through too early still ends the output unfinished,
        // which the oracle rejects.
        if last.last().is_some_and(|id| tok.stop_tokens().contains(id)) {
            last = &last[..last.len() - 1];
        }
        let generated =
            &last[last.len().saturating_sub(response.usage.completion_tokens.saturating_sub(1))..];
        if let Some(&bad) =
            generated.iter().find(|&&id| tok.is_special(id) || id as usize >= tok.tokenizer_size())
        {
            t.failures.push(format!("{}: generated special or padding id {bad}", case.name));
        }
        let bytes: Vec<u8> = generated.iter().flat_map(|&id| tok.token_bytes(id).iter().copied()).collect();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        match grammask.outcome(&compiled, &text, &choice.finish_reason) {
            Outcome::CutOff => t.cut_off += 1,
            Outcome::Invalid(why) => t.failures.push(format!("{}: {why}: {text:?}", case.name)),
            Outcome::Complete => match case.oracle.check(&text) {
                Ok(()) if choice.finish_reason == "stop" => t.valid += 1,
                Ok(()) => t.failures.push(format!("{}: finish reason {}", case.name, choice.finish_reason)),
                Err(why) => t.failures.push(format!("{}: oracle: {why}: {text:?}", case.name)),
            },
        }
    }
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_weights_every_output_valid() {
    let (model, grammask) = tiny_model("valid").await;
    let cases = cases(&grammask, 50);
    let seeds = [1u64, 2];
    // (Two requests per case and seed, the outputs judged on their tokens: see run_case.)
    let mut total = Tally::default();
    let started = std::time::Instant::now();
    // Requests go in concurrently, so that mistral.rs batches their sequences.
    for chunk in cases.chunks(8) {
        let mut futures = Vec::new();
        for case in chunk {
            for &seed in &seeds {
                futures.push(run_case(&model, &grammask, case, seed, 2, 512));
            }
        }
        for t in futures::future::join_all(futures).await {
            total.outputs += t.outputs;
            total.valid += t.valid;
            total.cut_off += t.cut_off;
            total.failures.extend(t.failures);
        }
    }
    eprintln!(
        "{} cases x {} seeds x 2 requests: {} outputs, {} valid, {} cut off by max_len, {} failures ({:.1} s)",
        cases.len(),
        seeds.len(),
        total.outputs,
        total.valid,
        total.cut_off,
        total.failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(total.failures.is_empty(), "failures:\n{}", total.failures.join("\n"));
    assert_eq!(total.outputs, cases.len() * seeds.len() * 2);
    // A random model stops only because the grammar leaves it nothing else; a few long
    // documents may still reach max_len, and are reported as cut off, never as valid.
    assert!(total.cut_off * 10 <= total.outputs, "{} of {} outputs cut off", total.cut_off, total.outputs);
}

/// Bad input is an error before the request reaches mistral.rs, never a panic inside it.
#[test]
fn bad_constraints_fail_at_build_time() {
    let vocab = ModelVocab::from_tokenizer_info(Arc::new(
        grammask::TokenizerInfo::from_path(
            common::data_dir().join("tokenizers").join(TOKENIZER),
            &Default::default(),
        )
        .unwrap(),
    ));
    let g = Grammask::new(vocab);
    let bad = [
        Constraint::JsonSchema(
            serde_json::json!({"type": "object", "properties": {"a": {"$ref": "#/nope"}}}),
        ),
        Constraint::JsonSchema(serde_json::json!({"type": 12})),
        Constraint::Regex("(unclosed".into()),
        Constraint::Lark("start: foo\n".into()),
        Constraint::Lark("start: \"a\" |\n  | %%%".into()),
    ];
    for c in bad {
        let err = g.constrain(RequestBuilder::new().set_constraint(c));
        let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(!msg.is_empty(), "a bad constraint was accepted");
    }
    let err = g
        .constrain_with(RequestBuilder::new(), Some(GrammarSpec::ebnf("root ::= \"a\" bogus")))
        .err()
        .expect("undefined rule");
    assert!(err.to_string().contains("1:"), "line:column in {err}");
}

/// A processor that, from its third call on, leaves only `forced` (a token the grammar
/// rejects there) — placed after grammask's, it makes the sequence generate an invalid
/// token, which grammask must report on the next call.
struct Saboteur {
    calls: std::sync::atomic::AtomicUsize,
    forced: u32,
}

impl mistralrs::CustomLogitsProcessor for Saboteur {
    fn apply(&self, logits: &mistralrs::Tensor, _context: &[u32]) -> candle_core::Result<mistralrs::Tensor> {
        if self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 2 {
            return Ok(logits.clone());
        }
        let n = logits.dim(0)?;
        let mut v = vec![f32::NEG_INFINITY; n];
        v[self.forced as usize] = 0.0;
        mistralrs::Tensor::from_vec(v, n, logits.device())
    }
}

/// A processor error on one request is reported for that request; the requests batched
/// with it finish, valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_in_one_sequence_leaves_the_others_running() {
    let (model, grammask) = tiny_model("fault").await;
    let tok = grammask.vocab().tokenizer().clone();
    let hello = (0..tok.tokenizer_size() as u32)
        .find(|&id| tok.token_bytes(id) == b"hello")
        .expect("a `hello` token");
    let spec = GrammarSpec::Regex("[0-9]{12}".into());
    let ours = grammask.processor(&spec, 1).unwrap();
    let sabotaged = RequestBuilder::new()
        .add_message(TextMessageRole::User, "digits")
        .set_sampler_max_len(64)
        .add_logits_processor(ours)
        .add_logits_processor(Arc::new(Saboteur { calls: 0.into(), forced: hello }));
    let healthy: Vec<_> = (0..3)
        .map(|i| {
            let r = RequestBuilder::new()
                .add_message(TextMessageRole::User, format!("digits {i}"))
                .set_sampler_temperature(1.0)
                .set_sampler_max_len(64);
            grammask.constrain_with(r, Some(spec.clone())).unwrap()
        })
        .collect();
    let mut futures = vec![];
    for r in healthy {
        futures.push(model.send_chat_request(r));
    }
    let (bad, good) = tokio::join!(model.send_chat_request(sabotaged), futures::future::join_all(futures));
    let Err(err) = bad else { panic!("the sabotaged request succeeded") };
    let err = err.to_string();
    assert!(err.contains("is rejected by the grammar"), "{err}");
    let digits = regex::Regex::new("^[0-9]{12}$").unwrap();
    for r in good {
        let r = r.expect("the other requests finish");
        let text = r.choices[0].message.content.clone().unwrap_or_default();
        assert!(digits.is_match(&text), "{text:?}");
        assert_eq!(r.choices[0].finish_reason, "stop");
    }
}

/// mistral.rs's prefix cache (on by default) prefills a request whose prompt shares a prefix
/// with an earlier sequence from the cache, and the processor's first call then carries only
/// the prompt's uncached tail. Requests sent one after another with a shared system prompt
/// must all come out valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_served_from_the_prefix_cache_stay_valid() {
    let (model, grammask) = tiny_model("prefix").await;
    let system = "You are a careful assistant. Answer with a JSON array of small integers only.";
    let schema = serde_json::json!({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "maxItems": 6});
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut first_contexts = Vec::new();
    for i in 0..4 {
        let recorder = Recorder::boosting(grammask.vocab().tokenizer(), b"]", 4.0);
        let request = RequestBuilder::new()
            .add_message(TextMessageRole::System, system)
            .add_message(TextMessageRole::User, format!("Question {i}"))
            .set_sampler_temperature(1.0)
            .set_sampler_max_len(64)
            .add_logits_processor(recorder.clone())
            .set_constraint(Constraint::JsonSchema(schema.clone()));
        let response = model.send_chat_request(grammask.constrain(request).unwrap()).await.expect("request");
        let text = response.choices[0].message.content.clone().unwrap_or_default();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(validator.is_valid(&doc), "{text:?}");
        let contexts = recorder.contexts();
        first_contexts.push((contexts[0].len(), contexts.get(1).map_or(0, |c| c.len() - 1)));
    }
    // (first call's context length, the prompt's length): shorter when served from the cache.
    eprintln!("first context vs prompt length per request: {first_contexts:?}");
}
