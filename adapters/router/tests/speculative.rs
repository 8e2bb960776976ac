//! Speculative decoding's exactness oracles, through the engine on the simulated model:
//! greedy with speculation gives token for token the output of greedy without it (every
//! drafter, dev schemas, llama.cpp grammars, regexes, a tool-call tag, unconstrained rows,
//! one batch mixing them all, outputs cut by `max_new_tokens` inside an accepted path, a
//! client gone mid-verify); sampling with speculation follows the distribution of sampling
//! without it (chi-square); drafts the grammar refuses are zero rows never taken; and
//! greedy with speculation is greedy on real weights (SmolLM2-135M, a tiny random Llama).

use grammask::matcher::{DraftTree, TextEncoder};
use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo, TokenizerOptions};
use grammask_router::engine::{self, EngineOptions, Event, FinishReason, Job, Request, StepRecord};
use grammask_router::metrics::Metrics;
use grammask_router::model::{ForwardTime, GgufModel, Model, SimulatedModel};
use grammask_router::sampling::SamplingParams;
use grammask_router::server::LoadedTokenizer;
use grammask_router::speculate::{DrafterKind, SpeculationOptions};
use grammask_router::step::{BatchOptions, StructuredBatch};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

struct Enc(Arc<tokenizers::Tokenizer>);
impl TextEncoder for Enc {
    fn encode_text(&self, text: &str) -> grammask::Result<Vec<u32>> {
        self.0.encode_text(text)
    }
}

fn tok() -> &'static LoadedTokenizer {
    static T: OnceLock<LoadedTokenizer> = OnceLock::new();
    T.get_or_init(|| LoadedTokenizer::embedded().unwrap())
}

fn data() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = here.join("../../../shared/data");
    if shared.exists() {
        shared
    } else {
        here.join("../../data")
    }
}

/// Tokens holding a byte that closes a string, object or array, and the stop tokens:
/// pushed up so that random documents end.
fn closers() -> Vec<u32> {
    let info = &tok().info;
    (0..info.tokenizer_size() as u32)
        .filter(|&id| {
            info.stop_tokens().contains(&id)
                || (!info.is_special(id) && info.token_bytes(id).iter().any(|c| b"\"}]".contains(c)))
        })
        .collect()
}

fn model(seed: u64) -> SimulatedModel {
    let info = &tok().info;
    static CLOSERS: OnceLock<Vec<u32>> = OnceLock::new();
    SimulatedModel::new(info.vocab_size(), seed, ForwardTime::Sleep(Duration::ZERO))
        .with_token_time(Duration::from_micros(5))
        .with_boost(CLOSERS.get_or_init(closers).clone(), 6.0)
}

/// One request: its constraint (or none), prompt, sampling, token budget, and whether
/// its client leaves after its first token.
#[derive(Clone)]
struct Req {
    spec: Option<Arc<grammask::CompiledGrammar>>,
    prompt: Vec<u32>,
    sampling: SamplingParams,
    max_new_tokens: usize,
    leaves: bool,
}

/// What a request got: its token ids and why it ended (`None`: its client left).
type Out = (Vec<u32>, Option<FinishReason>);

fn run(reqs: &[Req], batch: usize, spec: Option<SpeculationOptions>, seed: u64) -> (Vec<Out>, Arc<Metrics>) {
    let encoder: Arc<dyn TextEncoder + Send + Sync> = Arc::new(Enc(tok().hf.clone()));
    let (outs, metrics, _) =
        run_on(tok().info.clone(), Box::new(model(seed)), Some(encoder), reqs, batch, spec, true);
    (outs, metrics)
}

/// Runs `reqs` through an engine on `model`, accepting drawn tokens (and jump-forward)
/// on the mask pool (`defer_accepts`) or not: every request's output, the metrics, and the
/// engine's record of every step.
fn run_on(
    info: Arc<TokenizerInfo>,
    model: Box<dyn Model>,
    encoder: Option<Arc<dyn TextEncoder + Send + Sync>>,
    reqs: &[Req],
    batch: usize,
    spec: Option<SpeculationOptions>,
    defer_accepts: bool,
) -> (Vec<Out>, Arc<Metrics>, Vec<StepRecord>) {
    let options = EngineOptions {
        max_batch_size: batch,
        max_queue: reqs.len() + 1,
        batch: BatchOptions { fill_threads: 2, encoder, defer_accepts, ..BatchOptions::default() },
        speculation: spec,
        record_steps: true,
        ..EngineOptions::default()
    };
    let metrics = Arc::new(Metrics::new());
    let engine = engine::start(model, info, options, metrics.clone()).unwrap();
    let mut rx = Vec::new();
    for r in reqs {
        let (tx, out) = tokio::sync::mpsc::unbounded_channel();
        let job = Job {
            prompt: r.prompt.clone(),
            sampling: r.sampling.clone(),
            max_new_tokens: r.max_new_tokens,
            stop: Vec::new(),
            strip_stop: false,
            prompt_logprobs: None,
        };
        let constraint = r.spec.clone().map(GrammarMatcher::new);
        engine.submit(Request { job, constraint, events: tx }).unwrap();
        rx.push((out, r.leaves));
    }
    let mut outs = Vec::new();
    for (mut r, leaves) in rx {
        let mut ids = Vec::new();
        let reason = loop {
            match r.blocking_recv() {
                Some(Event::End(e)) => break Some(e.reason),
                Some(Event::Error(e) | Event::Unavailable(e)) => panic!("request failed: {e}"),
                Some(Event::Token(t)) => {
                    ids.push(t.id);
                    if leaves {
                        drop(r);
                        break None;
                    }
                }
                None => panic!("channel closed"),
            }
        };
        outs.push((ids, reason));
    }
    // The engine keeps going after clients leave: every other request ended above.
    assert!(engine.health().is_ok());
    engine.shutdown();
    let records = engine.take_step_records();
    (outs, metrics, records)
}

fn compile(spec: &GrammarSpec) -> Option<Arc<grammask::CompiledGrammar>> {
    static C: OnceLock<GrammarCompiler> = OnceLock::new();
    C.get_or_init(|| GrammarCompiler::new(tok().info.clone())).compile(spec).ok()
}

const TOOL_TAG: &str = r#"{"type": "structural_tag", "format": {"type": "triggered_tags",
    "triggers": ["<tool_call>"], "tags": [{"type": "tag", "begin": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",
    "content": {"type": "json_schema", "json_schema": {"type": "object", "properties":
    {"city": {"type": "string", "enum": ["Paris", "Lyon", "Nice"]}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"], "additionalProperties": false}}, "end": "}\n</tool_call>"}]}}"#;

/// ≥ 50 dev schemas, the llama.cpp grammars, regexes, a tool-call tag and unconstrained
/// rows, each with a prompt that repeats part of its constraint (so that the n-gram
/// drafter finds something to propose).
fn corpus() -> Vec<Req> {
    let mut specs: Vec<(GrammarSpec, String)> = Vec::new();
    let dir = data().join("jsonschemabench/dev/Github_easy");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut schemas = 0;
    for f in files {
        if schemas == 52 {
            break;
        }
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let schema = doc.get("schema").cloned().unwrap_or(doc).to_string();
        let spec = GrammarSpec::json_schema(&schema);
        if compile(&spec).is_some() {
            specs.push((spec, schema));
            schemas += 1;
        }
    }
    for g in ["json.gbnf", "arithmetic.gbnf", "list.gbnf", "json_arr.gbnf"] {
        let text = std::fs::read_to_string(data().join("grammars/llama.cpp").join(g)).unwrap();
        specs.push((GrammarSpec::ebnf(&text), text));
    }
    for r in [r"[0-9]{3}-[0-9]{4}", r"(yes|no|maybe)", r"(true|false|null)( (true|false|null)){0,4}"] {
        specs.push((GrammarSpec::Regex(r.into()), r.into()));
    }
    specs.push((GrammarSpec::StructuralTag(TOOL_TAG.into()), TOOL_TAG.into()));
    let mut reqs: Vec<Req> = specs
        .into_iter()
        .map(|(spec, text)| {
            let compiled = compile(&spec);
            assert!(compiled.is_some(), "{text} does not compile");
            let prompt_text = format!("Answer under {}", &text[..text.len().min(400)]);
            Req {
                spec: compiled,
                prompt: tok().hf.encode(prompt_text, false).unwrap().get_ids().to_vec(),
                sampling: SamplingParams::default(),
                max_new_tokens: 96,
                leaves: false,
            }
        })
        .collect();
    // Unconstrained rows among them, one cut very short.
    for k in 0..3 {
        let prompt = tok().hf.encode(format!("{k} plain text, plain text, plain text"), false).unwrap();
        reqs.push(Req {
            spec: None,
            prompt: prompt.get_ids().to_vec(),
            sampling: SamplingParams::default(),
            max_new_tokens: [48, 5, 17][k],
            leaves: false,
        });
    }
    reqs
}

#[test]
fn greedy_speculation_gives_greedy_decodings_tokens() {
    let reqs = corpus();
    assert!(reqs.len() >= 60);
    let (want, _) = run(&reqs, 16, None, 3);
    for drafter in [DrafterKind::Grammar, DrafterKind::Ngram, DrafterKind::Both] {
        // Drafting always (no back-off): as many verify steps as can be had.
        let spec = SpeculationOptions { backoff: false, ..SpeculationOptions::new(4, 4, drafter) };
        let (got, metrics) = run(&reqs, 16, Some(spec), 3);
        for (k, (a, b)) in want.iter().zip(&got).enumerate() {
            assert_eq!(a, b, "{drafter:?}: request {k} differs");
        }
        let text = metrics.render();
        let accepted =
            metric(&text, &format!("grammask_spec_accepted_total{{drafter=\"{}\"}}", drafter.name()));
        let drafted =
            metric(&text, &format!("grammask_spec_drafted_total{{drafter=\"{}\"}}", drafter.name()));
        eprintln!("{drafter:?}: {accepted} of {drafted} draft nodes accepted");
        // Every drafter found something the model took (the grammar's alternatives always
        // hold the token the model picks).
        assert!(accepted > 0.0 && drafted >= accepted, "{drafter:?}: {accepted} / {drafted}");
    }
    // Outputs cut by max_new_tokens inside an accepted path are cut exactly there.
    for (r, (ids, reason)) in reqs.iter().zip(&want) {
        if *reason == Some(FinishReason::Length) {
            assert_eq!(ids.len(), r.max_new_tokens);
        }
    }
}

#[test]
fn deferred_jump_forward_gives_the_tokens_of_jump_forward_at_once() {
    // Jump-forward on the mask pool (the forced tokens a step later, their own forward)
    // against on the step thread (with the drawn token's forward): the same tokens, as
    // the simulated model's logits are a function of the context alone.
    let reqs = corpus();
    let encoder: Arc<dyn TextEncoder + Send + Sync> = Arc::new(Enc(tok().hf.clone()));
    let (at_once, _, _) =
        run_on(tok().info.clone(), Box::new(model(7)), Some(encoder.clone()), &reqs, 16, None, false);
    let (deferred, _, _) =
        run_on(tok().info.clone(), Box::new(model(7)), Some(encoder.clone()), &reqs, 16, None, true);
    for (k, (a, b)) in at_once.iter().zip(&deferred).enumerate() {
        assert_eq!(a, b, "request {k} differs");
    }
    // Without jump-forward the grammar's forced tokens are drawn, masked, one per forward:
    // the outputs differ (a model may write forced text in other tokens), so only check
    // that jump-forward had something to do.
    let (drawn, _, _) = run_on(tok().info.clone(), Box::new(model(7)), None, &reqs, 16, None, true);
    assert!(drawn.iter().zip(&deferred).any(|(a, b)| a != b), "jump-forward forced nothing");
}

#[test]
fn rows_that_do_not_draft_are_held_to_the_slowdown_cap() {
    // Constrained rows beside unconstrained ones, which the grammar drafter cannot draft
    // for: every decode step with an unconstrained row holds a row that gains nothing.
    let corpus = corpus();
    let mut reqs = Vec::new();
    for (k, r) in corpus.iter().filter(|r| r.spec.is_some()).take(8).enumerate() {
        reqs.push(r.clone());
        let prompt = tok().hf.encode(format!("{k} plain text, plain text"), false).unwrap();
        reqs.push(Req { spec: None, prompt: prompt.get_ids().to_vec(), max_new_tokens: 40, ..r.clone() });
    }
    let encoder: Arc<dyn TextEncoder + Send + Sync> = Arc::new(Enc(tok().hf.clone()));
    let go = |max_slowdown| {
        let spec = SpeculationOptions { max_slowdown, ..SpeculationOptions::new(4, 4, DrafterKind::Grammar) };
        run_on(tok().info.clone(), Box::new(model(11)), Some(encoder.clone()), &reqs, 16, Some(spec), true)
    };
    // Nodes verified in decode steps that had an unconstrained row.
    let beside = |records: &[StepRecord]| -> usize {
        records.iter().filter(|r| r.prefill == 0 && r.rows > r.constrained).map(|r| r.draft_nodes).sum()
    };
    let (want, _) = run(&reqs, 16, None, 11);
    // No cap: the constrained rows draft beside the others (hopeful before their
    // acceptance is measured) — what the cap below has to stop.
    let (free, _, records) = go(None);
    assert_eq!(want, free);
    assert!(beside(&records) > 0, "no drafts beside unconstrained rows without the cap");
    // A cap of nothing: no step that has a row which does not draft verifies a node, and
    // the outputs are the same.
    let (capped, metrics, records) = go(Some(0.0));
    assert_eq!(want, capped);
    assert_eq!(beside(&records), 0);
    assert!(metric(&metrics.render(), "grammask_spec_withheld_total") > 0.0);
}

#[test]
fn a_client_gone_mid_verify_leaves_the_others_exact_and_batch_one_is_exact() {
    let mut reqs = corpus();
    reqs.truncate(24);
    let spec = SpeculationOptions { backoff: false, ..SpeculationOptions::new(5, 3, DrafterKind::Both) };
    let (want, _) = run(&reqs, 1, None, 5);
    let (got, _) = run(&reqs, 1, Some(spec.clone()), 5);
    assert_eq!(want, got);
    for k in [2, 7, 11] {
        reqs[k].leaves = true;
    }
    // (`run` checks that the engine is healthy after: a gone client's row is dropped
    // between steps, its draft and cache with it.)
    let (got, _) = run(&reqs, 8, Some(spec), 5);
    for (k, (a, b)) in want.iter().zip(&got).enumerate() {
        if reqs[k].leaves {
            assert_eq!(b.0[..], a.0[..1], "request {k}");
        } else {
            assert_eq!(a, b, "request {k}");
        }
    }
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

/// Writes text as the longest vocabulary entries first (a valid tokenization, all
/// jump-forward needs).
struct Greedy(Arc<TokenizerInfo>);
impl TextEncoder for Greedy {
    fn encode_text(&self, text: &str) -> grammask::Result<Vec<u32>> {
        let (bytes, mut at, mut out) = (text.as_bytes(), 0, Vec::new());
        while at < bytes.len() {
            let best = (0..self.0.vocab_size() as u32)
                .filter(|&t| {
                    !self.0.stop_tokens().contains(&t) && bytes[at..].starts_with(self.0.token_bytes(t))
                })
                .max_by_key(|&t| self.0.token_bytes(t).len())
                .ok_or_else(|| grammask::Error::Shape(format!("no token for {:?}", &text[at..])))?;
            at += self.0.token_bytes(best).len();
            out.push(best);
        }
        Ok(out)
    }
}

#[test]
fn speculative_sampling_follows_the_distribution_of_sampling() {
    // A small language (≤ 30 strings) with shared prefixes, so that the grammar drafts
    // trees, and a repetition penalty, so that each node's draw depends on its path; a
    // small vocabulary (every byte the language needs, some longer pieces), so that
    // 2 × 20,000 samples take seconds.
    let words = ["alpha", "alpine", "alps", "beta", "bet", "better", "gamma", "gam", "game", "delta"];
    let mut vocab: Vec<Vec<u8>> = "abcdefghijklmnopqrstuvwxyz[],\" ".bytes().map(|b| vec![b]).collect();
    for piece in ["al", "alp", "be", "bet", "gam", "del", "ta", "\"alpha\"", "\"gam", "ma\"", "\"]", "\","] {
        vocab.push(piece.as_bytes().to_vec());
    }
    vocab.push(b"<eos>".to_vec());
    let stop = vocab.len() as u32 - 1;
    let opts = TokenizerOptions { stop_tokens: Some(vec![stop]), ..Default::default() };
    let info = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap());
    let schema = serde_json::json!({"type": "array", "items": {"enum": words}, "minItems": 1, "maxItems": 2});
    let spec =
        GrammarCompiler::new(info.clone()).compile(&GrammarSpec::json_schema(schema.to_string())).unwrap();
    let n = 20_000;
    let reqs = |first: u64| -> Vec<Req> {
        (0..n)
            .map(|k| Req {
                spec: Some(spec.clone()),
                prompt: vec![(k % 3) as u32],
                sampling: SamplingParams {
                    do_sample: true,
                    temperature: 3.0,
                    repetition_penalty: Some(1.5),
                    seed: first + k,
                    logprobs: false,
                    ..SamplingParams::default()
                },
                max_new_tokens: 64,
                leaves: false,
            })
            .collect()
    };
    let count = |outs: Vec<Out>| {
        let mut m = std::collections::BTreeMap::<String, u32>::new();
        for (ids, reason) in outs {
            assert_eq!(reason, Some(FinishReason::EosToken));
            let bytes: Vec<u8> =
                ids.iter().filter(|&&t| t != stop).flat_map(|&t| info.token_bytes(t).to_vec()).collect();
            let v: Vec<String> = serde_json::from_slice(&bytes).unwrap();
            *m.entry(v.join(",")).or_default() += 1;
        }
        m
    };
    let model = || Box::new(SimulatedModel::new(info.vocab_size(), 9, ForwardTime::Sleep(Duration::ZERO)));
    // Jump-forward on (forced text written by longest match over the vocabulary), so that
    // drafts carry forced chains too.
    let encoder: Arc<dyn TextEncoder + Send + Sync> = Arc::new(Greedy(info.clone()));
    let plain = count(run_on(info.clone(), model(), Some(encoder.clone()), &reqs(0), 256, None, true).0);
    let spec_opts =
        Some(SpeculationOptions { backoff: false, ..SpeculationOptions::new(4, 6, DrafterKind::Grammar) });
    let (outs, metrics, _) =
        run_on(info.clone(), model(), Some(encoder), &reqs(1 << 32), 256, spec_opts, true);
    let spec_counts = count(outs);
    let accepted = metric(&metrics.render(), "grammask_spec_accepted_total{drafter=\"grammar\"}");
    assert!(accepted > 10_000.0, "{accepted} draft tokens accepted");
    // Two-sample chi-square over the outcomes seen ≥ 10 times in all (the rest pooled).
    let keys: std::collections::BTreeSet<&String> = plain.keys().chain(spec_counts.keys()).collect();
    let (mut chi2, mut df, mut pooled) = (0.0f64, 0usize, (0u32, 0u32));
    for k in keys {
        let (a, b) = (plain.get(k).copied().unwrap_or(0), spec_counts.get(k).copied().unwrap_or(0));
        if a + b < 10 {
            pooled = (pooled.0 + a, pooled.1 + b);
            continue;
        }
        chi2 += f64::from(a.abs_diff(b)).powi(2) / f64::from(a + b);
        df += 1;
    }
    if pooled.0 + pooled.1 > 0 {
        chi2 += f64::from(pooled.0.abs_diff(pooled.1)).powi(2) / f64::from(pooled.0 + pooled.1);
        df += 1;
    }
    let df = df.saturating_sub(1).max(1) as f64;
    // The 0.999 quantile of chi-square with df degrees of freedom (Wilson–Hilferty).
    let z = 3.09;
    let limit = df * (1.0 - 2.0 / (9.0 * df) + z * (2.0 / (9.0 * df)).sqrt()).powi(3);
    eprintln!(
        "chi-square {chi2:.1} on {df} degrees of freedom (limit {limit:.1}); {} outcomes; {accepted} draft tokens accepted",
        plain.len()
    );
    assert!(df >= 10.0, "too few outcomes to compare: {plain:?}");
    assert!(chi2 < limit, "chi-square {chi2:.1} ≥ {limit:.1}\nplain {plain:?}\nspeculative {spec_counts:?}");
}

#[test]
fn drafts_the_grammar_refuses_are_zero_rows_and_never_taken() {
    let info = &tok().info;
    let vocab = info.vocab_size();
    let id = |s: &str| -> u32 {
        let ids = tok().hf.encode(s, false).unwrap().get_ids().to_vec();
        assert_eq!(ids.len(), 1, "{s}");
        ids[0]
    };
    let stop = info.stop_tokens()[0];
    let spec = compile(&GrammarSpec::Regex("(yes|no)".into())).unwrap();
    let mut batch =
        StructuredBatch::new(vocab, BatchOptions { fill_threads: 1, ..BatchOptions::default() }).unwrap();
    batch.add(1, GrammarMatcher::new(spec)).unwrap();
    // root → 1:"yes" → 3:<stop> → 4:"no" (after the end);  root → 2:"maybe" (refused) → 5:"yes".
    let (yes, no, maybe) = (i64::from(id("yes")), i64::from(id("no")), i64::from(id("maybe")));
    let tree =
        DraftTree::from_parents(&[-1, yes, maybe, i64::from(stop), no, yes], &[-1, 0, 0, 1, 3, 2]).unwrap();
    batch.set_draft(1, tree.clone()).unwrap();
    batch.begin_step(&[1]).unwrap();
    let report = batch.finish_masks().unwrap();
    assert!(report.failed.is_empty());
    let (masks, fill) = batch.draft_masks(1).unwrap();
    // "maybe" is refused at the root (its subtree, node 5, skipped), "no" after the end.
    assert_eq!(fill.rejected, [2, 4]);
    assert_eq!(fill.skipped, 1);
    for v in [2, 4, 5] {
        assert_eq!(masks.count_allowed(v), 0, "node {v}");
    }
    assert_eq!(masks.allowed_ids(3), Vec::<u32>::new());
    assert!(masks.allowed_ids(1).contains(&stop));
    // A walk never takes a refused node, whatever the logits say: "maybe" has the largest
    // logit at the root, yet the root's mask refuses it; "no" after the stop is never reached.
    let mut logits = vec![0.0f32; tree.len() * vocab];
    logits[maybe as usize] = 100.0;
    logits[yes as usize] = 50.0;
    logits[vocab + stop as usize] = 10.0;
    logits[3 * vocab + no as usize] = 100.0;
    let mut s = grammask_router::sampling::Sampler::new(SamplingParams::default());
    let walk =
        s.verify_tree(&mut logits, vocab, &tree, &[false; 6], |v| Some(masks.row(v)), info.stop_tokens());
    // The stop token is drawn at node 1 and ends the walk (node 3 is never a cache entry).
    assert_eq!(walk.path, [1]);
    assert_eq!(walk.tokens.iter().map(|t| t.0).collect::<Vec<_>>(), [yes as u32, stop]);
    let (taken, accepted) = batch.accept_path(1, &[yes as u32, stop]).unwrap();
    assert_eq!((taken, accepted), (2, grammask_router::step::Accepted::Finished));
    assert!(batch.is_empty());
}

/// Greedy with speculation gives greedy's tokens on real weights too: SmolLM2-135M (a few
/// schemas × 64 tokens, the schema in the prompt, every drafter) and a tiny random-weight
/// Llama (random token prompts, unconstrained and under a JSON grammar).
#[test]
fn greedy_speculation_is_exact_on_smollm2() {
    let Some(path) = smollm2_path() else { return };
    let tok = LoadedTokenizer::from_gguf(&path).unwrap();
    let compiler = GrammarCompiler::new(tok.info.clone());
    let schemas = [
        r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}, "role": {"enum": ["admin", "user", "guest"]}}, "required": ["name", "age", "role"], "additionalProperties": false}"#,
        r#"{"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 3, "maxItems": 3}"#,
        r#"{"type": "object", "properties": {"enabled": {"type": "boolean"}, "level": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["enabled", "level"], "additionalProperties": false}"#,
    ];
    let mut reqs: Vec<Req> = schemas
        .iter()
        .map(|s| Req {
            spec: Some(compiler.compile(&GrammarSpec::json_schema(*s)).unwrap()),
            prompt: tok
                .hf
                .encode(format!("Reply with JSON for this schema: {s}"), false)
                .unwrap()
                .get_ids()
                .to_vec(),
            sampling: SamplingParams { repetition_penalty: Some(1.2), ..SamplingParams::default() },
            max_new_tokens: 64,
            leaves: false,
        })
        .collect();
    reqs.push(Req {
        spec: None,
        prompt: tok
            .hf
            .encode("The colours are red, green and blue. The colours are", false)
            .unwrap()
            .get_ids()
            .to_vec(),
        sampling: SamplingParams::default(),
        max_new_tokens: 24,
        leaves: false,
    });
    let model = || Box::new(GgufModel::load(&path).unwrap());
    let (want, _, _) = run_on(tok.info.clone(), model(), Some(tok.encoder()), &reqs, 4, None, true);
    for drafter in [DrafterKind::Grammar, DrafterKind::Ngram, DrafterKind::Both] {
        let spec = SpeculationOptions { backoff: false, ..SpeculationOptions::new(4, 3, drafter) };
        let (got, metrics, _) =
            run_on(tok.info.clone(), model(), Some(tok.encoder()), &reqs, 4, Some(spec), true);
        assert_eq!(want, got, "{drafter:?}");
        let text = metrics.render();
        let drafted =
            metric(&text, &format!("grammask_spec_drafted_total{{drafter=\"{}\"}}", drafter.name()));
        let accepted =
            metric(&text, &format!("grammask_spec_accepted_total{{drafter=\"{}\"}}", drafter.name()));
        eprintln!("{drafter:?}: {accepted} of {drafted} draft nodes accepted");
        assert!(drafted > 0.0, "{drafter:?} drafted nothing");
    }
}

include!("support/smollm2.rs");

/// Greedy with speculation gives greedy's tokens on a tiny random-weight Llama (a GGUF this
/// test writes; 96 tokens: the printable ASCII characters and an end token): JSON schemas, a
/// regex and a plain row, every drafter.
#[test]
fn greedy_speculation_is_exact_on_a_tiny_random_llama() {
    let dir = std::env::temp_dir().join(format!("grammask-spec-tiny-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny.gguf");
    tiny_gguf(&path);
    let info = ascii_tokenizer();
    let compiler = GrammarCompiler::new(info.clone());
    let specs = [
        GrammarSpec::json_schema(
            r#"{"type": "object", "properties": {"ok": {"type": "boolean"}, "kind": {"enum": ["alpha", "beta"]}}, "required": ["ok", "kind"], "additionalProperties": false}"#,
        ),
        GrammarSpec::json_schema(
            r#"{"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "maxItems": 4}"#,
        ),
        GrammarSpec::Regex("(yes|no|maybe) [a-z]{2,6}".into()),
    ];
    let text = |s: &str| s.bytes().map(|b| u32::from(b - 0x20)).collect::<Vec<u32>>();
    let mut reqs: Vec<Req> = specs
        .iter()
        .enumerate()
        .map(|(k, spec)| Req {
            spec: Some(compiler.compile(spec).unwrap()),
            prompt: text(&format!("answer {k}: \"ok\": true, \"kind\": \"alpha\" [1, 2, 3] maybe")),
            sampling: SamplingParams { repetition_penalty: Some(1.1), ..SamplingParams::default() },
            max_new_tokens: 48,
            leaves: false,
        })
        .collect();
    reqs.push(Req {
        spec: None,
        prompt: text("abc abc abc abc"),
        sampling: SamplingParams::default(),
        max_new_tokens: 20,
        leaves: false,
    });
    let encoder: Arc<dyn TextEncoder + Send + Sync> = Arc::new(Greedy(info.clone()));
    let model = || Box::new(GgufModel::load(&path).unwrap());
    let (want, _, _) = run_on(info.clone(), model(), Some(encoder.clone()), &reqs, 3, None, true);
    for drafter in [DrafterKind::Grammar, DrafterKind::Ngram, DrafterKind::Both] {
        let spec = SpeculationOptions { backoff: false, ..SpeculationOptions::new(4, 3, drafter) };
        let (got, metrics, _) =
            run_on(info.clone(), model(), Some(encoder.clone()), &reqs, 3, Some(spec), true);
        assert_eq!(want, got, "{drafter:?}");
        let drafted = metric(
            &metrics.render(),
            &format!("grammask_spec_drafted_total{{drafter=\"{}\"}}", drafter.name()),
        );
        assert!(drafted > 0.0, "{drafter:?} drafted nothing");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tiny Llama's vocabulary: the 95 printable ASCII characters, then an end token (96).
fn ascii_tokenizer() -> Arc<TokenizerInfo> {
    let mut vocab: Vec<Vec<u8>> = (0x20u8..0x7F).map(|b| vec![b]).collect();
    vocab.push(b"<eos>".to_vec());
    let opts = TokenizerOptions { stop_tokens: Some(vec![vocab.len() as u32 - 1]), ..Default::default() };
    Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap())
}

include!("support/tiny_llama.rs");

/// Requests of one prompt admitted together (the `n` choices of one request) share its
/// prefill — the model copies the first one's context for the others — and each answers as
/// it would alone: on the simulated model and on a tiny random Llama's real caches.
#[test]
fn choices_of_one_prompt_share_its_prefill_and_answer_as_alone() {
    let dir = std::env::temp_dir().join(format!("grammask-fork-tiny-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny.gguf");
    tiny_gguf(&path);
    let info = ascii_tokenizer();
    let spec = GrammarCompiler::new(info.clone())
        .compile(&GrammarSpec::Regex("(yes|no|maybe) [a-z]{2,8}".into()))
        .unwrap();
    let prompt: Vec<u32> = "the same prompt for every choice".bytes().map(|b| u32::from(b - 0x20)).collect();
    // A first request keeps the engine busy while the choices queue, so that they are
    // admitted together.
    let mut reqs = vec![Req {
        spec: None,
        prompt: (0..200).map(|i| i % 90).collect(),
        sampling: SamplingParams::default(),
        max_new_tokens: 3,
        leaves: false,
    }];
    for k in 0..4u64 {
        reqs.push(Req {
            spec: (k % 2 == 0).then(|| spec.clone()),
            prompt: prompt.clone(),
            sampling: SamplingParams {
                do_sample: true,
                temperature: 1.5,
                seed: 40 + k,
                ..SamplingParams::default()
            },
            max_new_tokens: 12,
            leaves: false,
        });
    }
    type MakeModel<'a> = Box<dyn Fn() -> Box<dyn Model> + 'a>;
    let models: [(&str, MakeModel<'_>); 2] = [
        (
            "simulated",
            Box::new(|| Box::new(SimulatedModel::new(96, 3, ForwardTime::Sleep(Duration::from_millis(30))))),
        ),
        ("tiny llama", Box::new(|| Box::new(GgufModel::load(&path).unwrap()))),
    ];
    for (name, model) in &models {
        let (together, metrics, _) = run_on(info.clone(), model(), None, &reqs, 8, None, true);
        // (How many share depends on how the queue was admitted: all three when they queue
        // behind the first request's step, as they almost always do.)
        let shared = metric(&metrics.render(), "grammask_prefill_shared_total");
        eprintln!("{name}: {shared} of 3 choices shared the first one's prefill");
        assert!(shared >= 1.0, "{name}: no prefill was shared");
        for (k, r) in reqs.iter().enumerate().skip(1) {
            let (alone, _, _) = run_on(info.clone(), model(), None, std::slice::from_ref(r), 8, None, true);
            assert_eq!(together[k], alone[0], "{name}: choice {k}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
