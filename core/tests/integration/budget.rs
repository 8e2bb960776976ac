//! The compile's work budget (`CompileOptions::work_limit`) and its per-call controls
//! (`CompileControl`: cancellation, deadline): a budget stops every phase, promptly and
//! deterministically, and never changes a compile that fits in it.

use crate::common::{allowed, data_dir, tokenizer, Rng};
use grammask::budget::{BudgetError, CancelHandle, Phase, CHECK_EVERY};
use grammask::{
    CompileControl, CompileOptions, CompiledGrammar, Error, GrammarCompiler, GrammarMatcher, GrammarSpec,
    JsonSchemaOptions, TokenBitmask,
};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A 250-byte schema whose eight unanchored `oneOf` patterns each become an intersection
/// with the others' complements: seconds of work before the budget, under every size limit.
pub const COSTLY_SCHEMA: &str = r#"{"type": "object", "properties": {"s": {"type": "string", "oneOf": [
  {"pattern": "ALPHA"}, {"pattern": "BRAVO_ONE"}, {"pattern": "CHARLIE"}, {"pattern": "DELTA"},
  {"pattern": "ECHO_FOUR"}, {"pattern": "FOX"}, {"pattern": "GOLF"}, {"pattern": "HOTEL"}]}}}"#;

fn schema(text: &str) -> GrammarSpec {
    GrammarSpec::JsonSchema { schema: text.to_string(), options: JsonSchemaOptions::default() }
}

/// A fresh compiler (no cache, no shared masks) under `limit`, on Llama 3.1.
fn compiler(limit: Option<u64>) -> GrammarCompiler {
    let options = CompileOptions { work_limit: limit, leaf_cache_bytes: 0, ..CompileOptions::default() };
    GrammarCompiler::with_options(tokenizer("llama3_1"), options, 0)
}

#[allow(clippy::result_large_err)] // grammask's own error, as `compile` returns it
fn compile(spec: &GrammarSpec, limit: Option<u64>) -> Result<Arc<CompiledGrammar>, Error> {
    compiler(limit).compile(spec)
}

/// Specs that between them exercise every phase a budget names.
fn specs() -> Vec<(&'static str, GrammarSpec)> {
    vec![
        ("ebnf c", GrammarSpec::ebnf(crate::common::grammar_text("llama.cpp/c.gbnf"))),
        ("email under a length", schema(r#"{"type": "string", "format": "email", "maxLength": 24}"#)),
        (
            "members and a pattern",
            schema(
                r#"{"type": "object", "properties": {"id": {"type": "integer", "minimum": 3},
                "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$"}},
                "name": {"type": "string", "minLength": 2, "maxLength": 12, "pattern": "^[A-Z]"}},
                "required": ["id"]}"#,
            ),
        ),
        ("not of keys", schema(r#"{"type": "object", "propertyNames": {"not": {"enum": ["a", "bb"]}}}"#)),
    ]
}

/// The masks along a random walk of `steps` tokens (the same seed gives the same walk
/// for the same grammar).
fn walk(compiled: &Arc<CompiledGrammar>, seed: u64, steps: usize) -> Vec<Vec<u32>> {
    let mut m = GrammarMatcher::new(compiled.clone());
    let mut mask = TokenBitmask::new(1, m.vocab_size());
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    for _ in 0..steps {
        if m.fill_next_token_bitmask(mask.row_mut(0)).is_err() {
            break;
        }
        let ids = allowed(mask.row(0));
        out.push(ids.clone());
        let Some(&id) = ids.get(rng.below(ids.len().max(1))) else { break };
        if m.accept_token(id).is_err() || m.is_terminated() {
            break;
        }
    }
    out
}

#[test]
#[allow(clippy::result_large_err)] // grammask's own error, as `compile` returns it
fn the_same_compile_spends_the_same_work_and_a_budget_that_fits_changes_nothing() {
    for (name, spec) in specs() {
        let free = compile(&spec, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        let w = free.work_spent();
        assert!(w > 0, "{name}: no work counted");
        // Deterministic: again, and on a pool with a helper for the compile's crew.
        assert_eq!(compile(&spec, None).unwrap().work_spent(), w, "{name}");
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        assert_eq!(pool.install(|| compile(&spec, None)).unwrap().work_spent(), w, "{name}: with a helper");
        // Exactly enough: the same grammar (the same masks along the same walks).
        let fits = compile(&spec, Some(w)).unwrap_or_else(|e| panic!("{name}: a budget of {w} refused: {e}"));
        assert_eq!(fits.work_spent(), w, "{name}");
        for seed in 1..4 {
            assert_eq!(walk(&fits, seed, 40), walk(&free, seed, 40), "{name}: seed {seed}");
        }
        // One unit less: refused, by the budget, having spent no more than one step past it.
        match compile(&spec, Some(w - 1)) {
            Err(Error::Budget(BudgetError::Exceeded { spent, limit, .. })) => {
                assert_eq!(limit, w - 1, "{name}");
                assert!(spent > limit && spent <= w, "{name}: {spent}");
            }
            other => panic!("{name}: {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn every_phase_stops_at_a_budget_passed_inside_it_and_reports_it_promptly() {
    let mut phases = HashSet::new();
    for (name, spec) in specs() {
        let w = compile(&spec, None).unwrap().work_spent();
        // Budgets at 120 points of the compile: each stops in the phase running there.
        // (The last, one unit short, stops in the last phase: the start states' masks.)
        for limit in (0..120u64).map(|k| w * k / 120).chain([w - 1]) {
            match compile(&spec, Some(limit)) {
                Err(Error::Budget(BudgetError::Exceeded { phase, spent, limit: l })) => {
                    assert_eq!(l, limit);
                    // Promptly: within the largest single charge of these compiles (a start
                    // state's mask charges a vocabulary's worth before its walk).
                    let largest = (w / 10).max(1 + tokenizer("llama3_1").vocab_size() as u64);
                    assert!(spent - limit <= largest + CHECK_EVERY, "{name}: {spent} for {limit}");
                    phases.insert(phase);
                }
                other => panic!("{name} under {limit} of {w}: {:?}", other.map(|_| ())),
            }
        }
    }
    for p in
        [Phase::Conversion, Phase::Intersection, Phase::Nfa, Phase::Dfa, Phase::Minimization, Phase::Masks]
    {
        assert!(phases.contains(&p), "no budget stopped in {p}: {phases:?}");
    }
}

#[test]
fn the_costly_schema_is_refused_by_the_routers_budget_in_a_fraction_of_its_compile() {
    // The library's default budget (sized for every corpus schema) and a server's sixteenth.
    let limit = grammask::compiler::DEFAULT_WORK_LIMIT / 16;
    let t = Instant::now();
    let r = compile(&schema(COSTLY_SCHEMA), Some(limit));
    let took = t.elapsed();
    assert!(matches!(r, Err(Error::Budget(BudgetError::Exceeded { .. }))), "{:?}", r.map(|c| c.work_spent()));
    // (Loose: a loaded CI machine. BENCHMARKS has the measured time.)
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn cancellation_and_deadlines_stop_a_compile_and_are_never_cached() {
    let c = compiler(None);
    let spec = schema(COSTLY_SCHEMA);
    let cancel = CancelHandle::new();
    let other = cancel.clone();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        other.cancel();
        Instant::now()
    });
    let r = c.compile_with(&spec, &CompileControl { cancel: Some(cancel), ..Default::default() });
    let returned = Instant::now();
    let cancelled_at = stopper.join().unwrap();
    assert!(matches!(r, Err(Error::Budget(BudgetError::Cancelled { .. }))), "{:?}", r.map(|_| ()));
    // (Loose, for a loaded machine: a check comes every few hundred microseconds of work.)
    assert!(returned.duration_since(cancelled_at) < Duration::from_millis(500));
    let r = c.compile_with(
        &spec,
        &CompileControl { deadline: Some(Instant::now() + Duration::from_millis(30)), ..Default::default() },
    );
    assert!(matches!(r, Err(Error::Budget(BudgetError::DeadlinePassed { .. }))), "{:?}", r.map(|_| ()));
    // Neither is the grammar's verdict: a small spec through the same compiler compiles,
    // and the cancelled one is not in the cache.
    let (entries, _, _) = c.cache_stats();
    assert_eq!(entries, 0);
    assert!(c.compile(&schema(r#"{"type": "integer"}"#)).is_ok());
}

#[test]
fn the_default_budget_refuses_no_corpus_schema() {
    // Every dev MaskBench schema of a sample that compiles unbounded compiles under the
    // default budget too (the whole corpus: `grammask maskbench`, BENCHMARKS).
    let dev = data_dir().join("jsonschemabench/dev");
    let mut checked = 0;
    for split in ["Github_easy", "Github_medium", "Glaiveai2K", "Kubernetes"] {
        let mut files: Vec<_> =
            std::fs::read_dir(dev.join(split)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files.iter().step_by(97) {
            let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
            let spec = schema(&doc["schema"].to_string());
            let Ok(free) = compile(&spec, None) else { continue };
            let limited = compile(&spec, CompileOptions::default().work_limit);
            assert!(limited.is_ok(), "{}: {} units", f.display(), free.work_spent());
            checked += 1;
        }
    }
    assert!(checked > 50, "{checked}");
}

/// Qwen 3's tool-calling tag with 20 Glaive tools: phases of many items, and staged.
fn qwen_tag_with_20_tools() -> GrammarSpec {
    let tools = crate::tool_calling::glaive_tools(20);
    let options = grammask::tool_calling::PresetOptions::default();
    let preset =
        grammask::tool_calling::model_structural_tag(grammask::tool_calling::Family::Qwen3, &tools, &options)
            .unwrap();
    GrammarSpec::StructuralTag(preset.structural_tag.to_string())
}

#[test]
#[allow(clippy::result_large_err)] // grammask's own error, as `compile` returns it
fn a_compile_shared_with_helpers_spends_what_it_spends_alone() {
    // A 20-tool tag (unstaged: the whole grammar in the compile) has phases of many items,
    // which the crew's helpers share on a two-thread pool: every item's work is counted
    // whoever computes it.
    let spec = qwen_tag_with_20_tools();
    let compile_on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let options = CompileOptions { staged: false, leaf_cache_bytes: 0, ..CompileOptions::default() };
        pool.install(|| GrammarCompiler::with_options(tokenizer("qwen3"), options, 0).compile(&spec))
            .unwrap()
            .work_spent()
    };
    let alone = compile_on(1);
    for round in 0..6 {
        assert_eq!(compile_on(2), alone, "round {round}");
    }
}

#[test]
fn a_staged_compiles_finishing_job_outlives_the_calls_cancellation() {
    // The shell returns (and is cached) before its finished grammar is built: cancelling
    // the call then, as a server does once its request is answered, must not become the
    // cached grammar's verdict.
    let spec = qwen_tag_with_20_tools();
    for _ in 0..5 {
        let compiler = GrammarCompiler::new(tokenizer("qwen3"));
        let cancel = CancelHandle::new();
        let control = CompileControl { cancel: Some(cancel.clone()), ..Default::default() };
        let shell = compiler.compile_with(&spec, &control).unwrap();
        cancel.cancel();
        assert!(shell.is_staged());
        let finished = shell.finished();
        assert!(finished.is_ok(), "{:?}", finished.map(|_| ()));
    }
}
