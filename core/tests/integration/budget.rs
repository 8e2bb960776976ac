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

/// A lazy compile (no eager masks, no shared ones) of `spec` under a mask memory cap.
fn lazy(spec: &GrammarSpec, mask_memory_limit: Option<usize>) -> Arc<CompiledGrammar> {
    let options = CompileOptions {
        eager_budget: Duration::ZERO,
        leaf_cache_bytes: 0,
        mask_memory_limit,
        ..CompileOptions::default()
    };
    GrammarCompiler::with_options(tokenizer("llama3_1"), options, 0).compile(spec).expect("compiles")
}

#[test]
fn a_fill_past_its_budget_is_refused_stores_no_partial_mask_and_leaves_the_matcher_usable() {
    let spec = specs().swap_remove(2).1;
    // Two random walks (one may spend its steps inside escape spellings, where few new
    // states are met).
    let (mut refused, mut spent_max) = (0, 0u64);
    for seed in [1, 7] {
        let reference = walk(&lazy(&spec, None), seed, 40);
        let compiled = lazy(&spec, None);
        let mut m = GrammarMatcher::new(compiled.clone());
        let mut mask = TokenBitmask::new(1, m.vocab_size());
        let mut rng = Rng(seed);
        for (step, want) in reference.iter().enumerate() {
            // A budget too small for any new mask's walk: refused with nothing stored, then the
            // same fill unbounded gives the reference mask.
            m.set_fill_work_limit(Some(64));
            match m.fill_next_token_bitmask(mask.row_mut(0)) {
                Err(Error::Budget(BudgetError::Exceeded { phase: Phase::Fill, spent, limit: 64 })) => {
                    refused += 1;
                    spent_max = spent_max.max(spent);
                    // (Masks a refused fill finished before the budget ran out are kept:
                    // each is whole; the one it was computing is not stored. The fill
                    // below must then give the reference mask.)
                    m.set_fill_work_limit(None);
                    m.fill_next_token_bitmask(mask.row_mut(0)).expect("unbounded fill");
                }
                Ok(_) => {}
                Err(e) => panic!("step {step}: {e}"),
            }
            assert_eq!(&allowed(mask.row(0)), want, "step {step}");
            let ids = allowed(mask.row(0));
            let Some(&id) = ids.get(rng.below(ids.len().max(1))) else { break };
            if m.accept_token(id).is_err() || m.is_terminated() {
                break;
            }
        }
        // The default limit refuses none of these fills.
        assert_eq!(walk(&lazy(&spec, None), seed, 40), reference);
    }
    assert!(refused >= 3, "only {refused} fills met a new state");
    // Noticed at the first check past the limit (a walk charges every 4096 nodes).
    assert!(spent_max <= 64 + 4096, "{spent_max}");
}

#[test]
fn a_grammar_at_its_mask_memory_cap_refuses_fills_that_need_a_new_mask() {
    let spec = specs().swap_remove(2).1;
    let reference = walk(&lazy(&spec, None), 11, 30);
    // The start masks (computed by the compile) fit; the next new mask does not.
    let capped = lazy(&spec, Some(1));
    let mut m = GrammarMatcher::new(capped.clone());
    let mut mask = TokenBitmask::new(1, m.vocab_size());
    let mut rng = Rng(11);
    let mut refusal = None;
    for (step, want) in reference.iter().enumerate() {
        match m.fill_next_token_bitmask(mask.row_mut(0)) {
            Ok(_) => assert_eq!(&allowed(mask.row(0)), want, "step {step}"),
            Err(e) => {
                refusal = Some((step, e));
                break;
            }
        }
        let ids = allowed(mask.row(0));
        let Some(&id) = ids.get(rng.below(ids.len().max(1))) else { break };
        if m.accept_token(id).is_err() || m.is_terminated() {
            break;
        }
    }
    match refusal {
        Some((step, Error::Budget(BudgetError::MaskMemory { bytes, limit: 1 }))) => {
            assert!(step > 0 && bytes > 0, "step {step}, {bytes} bytes");
        }
        other => panic!("expected a mask memory refusal, got {other:?}"),
    }
    // Background precompute stops at the cap too: it computes nothing more.
    let before = capped.mask_stats().0;
    if let Some(t) = capped.precompute_in_background() {
        t.join().expect("precompute thread");
    }
    assert_eq!(capped.mask_stats().0, before);
}

/// Compiles `spec` on `n` threads at once (released together), each with its own control.
#[allow(clippy::result_large_err)] // grammask's own error, as `compile` returns it
fn compile_together(
    compiler: &GrammarCompiler,
    spec: &GrammarSpec,
    controls: Vec<CompileControl>,
) -> Vec<Result<Arc<CompiledGrammar>, Error>> {
    let barrier = std::sync::Barrier::new(controls.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = controls
            .into_iter()
            .map(|c| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    compiler.compile_with(spec, &c)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("compile thread")).collect()
    })
}

#[test]
fn concurrent_compiles_of_one_key_are_one_compile_cancelled_only_when_no_caller_waits() {
    // (A compile long enough for the callers to arrive while it runs.)
    // Five of the costly schema's patterns: ~70 ms.
    let spec = schema(
        r#"{"type": "object", "properties": {"s": {"type": "string", "oneOf": [{"pattern": "ALPHA"},
        {"pattern": "BRAVO_ONE"}, {"pattern": "CHARLIE"}, {"pattern": "DELTA"}, {"pattern": "ECHO_FOUR"}]}}}"#,
    );
    let _ = tokenizer("llama3_1");
    let t0 = Instant::now();
    compile(&spec, None).expect("compiles");
    let alone = t0.elapsed();
    assert!(alone > Duration::from_millis(20), "too quick for callers to meet: {alone:?}");
    let new = || GrammarCompiler::with_options(tokenizer("llama3_1"), CompileOptions::default(), 64 << 20);
    // Four callers, one compile: every one gets the very same grammar.
    let compiler = new();
    let got = compile_together(&compiler, &spec, vec![CompileControl::default(); 4]);
    let first = got[0].as_ref().expect("compiles").clone();
    assert!(got.iter().all(|r| r.as_ref().is_ok_and(|g| Arc::ptr_eq(g, &first))));
    // The first caller gone, the others still waiting: the compile goes on for them.
    let compiler = new();
    let gone = CancelHandle::new();
    let mut controls = vec![CompileControl::default(); 3];
    controls[0].cancel = Some(gone.clone());
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(5));
        gone.cancel();
    });
    let got = compile_together(&compiler, &spec, controls);
    canceller.join().unwrap();
    assert!(matches!(got[0], Err(Error::Budget(BudgetError::Cancelled { .. })) | Ok(_)), "{:?}", got[0]);
    assert!(got[1..].iter().all(Result::is_ok));
    // Every caller gone: the compile stops, and nothing is cached.
    let compiler = new();
    let all = CancelHandle::new();
    let controls = vec![CompileControl { cancel: Some(all.clone()), ..Default::default() }; 3];
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(5));
        all.cancel();
    });
    let t0 = Instant::now();
    let got = compile_together(&compiler, &spec, controls);
    canceller.join().unwrap();
    for r in &got {
        match r.as_ref().map_err(Error::root) {
            Err(Error::Budget(BudgetError::Cancelled { .. })) => {}
            other => panic!(
                "expected a cancellation, got {:?} after {:?} (alone {alone:?})",
                other.map(|_| ()),
                t0.elapsed()
            ),
        }
    }
    assert!(t0.elapsed() < alone / 2 + Duration::from_millis(10), "{:?} against {alone:?}", t0.elapsed());
    assert_eq!(compiler.cache_stats().0, 0);
}

#[test]
fn the_cache_holds_its_byte_budget_while_fills_grow_its_grammars() {
    // Distinct schemas compiled fully lazy, each walked for its masks (which grow the
    // grammars after they were cached): the cache counts them and evicts.
    let budget = 8 << 20;
    let options = CompileOptions { eager_budget: Duration::ZERO, ..CompileOptions::default() };
    let compiler = GrammarCompiler::with_options(tokenizer("llama3_1"), options, budget);
    let mut peak = 0;
    for i in 0..60 {
        let text = format!(
            r#"{{"type": "object", "properties": {{"k{i}": {{"type": "string", "maxLength": {}}},
            "n{i}": {{"type": "integer"}}, "t": {{"enum": ["a{i}", "b", "c"]}}}}, "required": ["k{i}"]}}"#,
            10 + i
        );
        let compiled = compiler.compile(&schema(&text)).expect("compiles");
        walk(&compiled, i, 30);
        peak = peak.max(compiler.cache_bytes());
        // Within the budget, give or take the growth between two counts.
        assert!(
            compiler.cache_bytes() <= budget + budget / 64,
            "schema {i}: {} bytes",
            compiler.cache_bytes()
        );
    }
    assert!(compiler.cache_stats().0 < 60, "nothing was evicted");
    assert!(peak > budget / 2, "the test does not fill the cache: {peak}");
}

#[test]
fn a_compiler_on_its_own_pool_gives_the_same_grammars() {
    // A one-thread pool with no room for background jobs: a staged compile then finishes
    // inside the call, on the pool.
    let spec = qwen_tag_with_20_tools();
    let pool = Arc::new(rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap());
    let pooled = GrammarCompiler::new(tokenizer("qwen3")).with_pool(pool, 0);
    let on_pool = pooled.compile(&spec).expect("compiles");
    let reference = GrammarCompiler::new(tokenizer("qwen3")).compile(&spec).expect("compiles");
    let text = "Let me check.</think>\n\n<tool_call>\n{\"name\": ";
    let masks = |g: &Arc<CompiledGrammar>| {
        let mut m = GrammarMatcher::new(g.clone());
        m.accept_string(text).expect("accepted");
        let mut mask = TokenBitmask::new(1, m.vocab_size());
        m.fill_next_token_bitmask(mask.row_mut(0)).expect("fills");
        allowed(mask.row(0))
    };
    assert_eq!(masks(&on_pool), masks(&reference));
}
