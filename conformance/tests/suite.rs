//! The suite's validity part, as CI runs it: a small corpus (every constraint kind) through
//! the reference loop, the router (TGI's and OpenAI's APIs, streamed and not) and mistral.rs,
//! all on random-weight models — no invalid output, no engine error, few cut-offs; and
//! engines broken on purpose are reported as such while the suite goes on.

use grammask::tool_calling::Family;
use grammask_conformance::case::{corpus, Case, CorpusOptions, Kind};
use grammask_conformance::engine::Engine;
use grammask_conformance::engines::broken::{BrokenEngine, Fault};
use grammask_conformance::engines::mistralrs::MistralRsEngine;
use grammask_conformance::engines::reference::ReferenceEngine;
use grammask_conformance::engines::router::{Api, RouterEngine, RouterSetup};
use grammask_conformance::report::Report;
use grammask_conformance::run::{validity, Isolated, RunOptions, ValidityReport};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

fn cases() -> Arc<Vec<Case>> {
    static C: OnceLock<Arc<Vec<Case>>> = OnceLock::new();
    C.get_or_init(|| {
        // The families whose markers a random model writes within the token budget (the
        // report runs every family); only cases grammask compiles (its refusals are typed
        // errors, counted as such in the report, not adapter failures).
        let tok = grammask_conformance::engines::tokenizer().unwrap();
        let compiler = grammask::GrammarCompiler::new(tok.info.clone());
        let families = vec![Family::Qwen3, Family::Hermes, Family::Llama, Family::Mistral];
        let all =
            corpus(&CorpusOptions { schemas_per_split: 2, tool_families: families, ..Default::default() })
                .unwrap();
        Arc::new(
            all.into_iter()
                .filter(|c| {
                    c.constraint.grammask_spec().is_ok_and(|(spec, _)| compiler.compile(&spec).is_ok())
                })
                .collect(),
        )
    })
    .clone()
}

fn run(engine: Box<dyn Engine>, seeds: Vec<u64>) -> ValidityReport {
    let cases = cases();
    let mut iso = Isolated::new(engine, cases.clone(), 1.0);
    let opts = RunOptions { seeds, max_new_tokens: 320, ..RunOptions::default() };
    validity(&mut iso, &cases, &opts)
}

fn assert_conforms(v: &ValidityReport, kinds: &[Kind]) {
    let t = v.total();
    eprintln!(
        "{}: {} cases, {} outputs: {} valid, {} invalid, {} cut off, {} errors ({:.1} s)",
        v.name,
        v.cases,
        t.outputs,
        t.valid,
        t.invalid,
        t.cut_off,
        t.errors,
        v.wall.as_secs_f64()
    );
    assert!(v.failures.is_empty(), "{}:\n{}", v.name, v.failures.join("\n"));
    assert_eq!(t.invalid + t.errors, 0);
    for k in kinds {
        let kt = v.by_kind.get(k).unwrap_or_else(|| panic!("{}: no {k:?} case ran", v.name));
        assert!(kt.valid > 0, "{}: no valid {k:?} output: {kt:?}", v.name);
    }
    // A random model stops only because the grammar leaves it nothing else (and the
    // closers it is pushed towards); long documents, free strings and runs of whitespace
    // reach max_new_tokens and are reported as cut off, never as valid.
    assert!(
        t.cut_off * 2 <= t.outputs,
        "{}: {} of {} outputs cut off: {:?}",
        v.name,
        t.cut_off,
        t.outputs,
        v.cut_offs
    );
}

#[test]
fn every_adapter_gives_valid_outputs_on_the_corpus() {
    let all = [Kind::JsonSchema, Kind::JsonObject, Kind::Grammar, Kind::Regex, Kind::Lark, Kind::Tools];
    let tok = grammask_conformance::engines::tokenizer().unwrap();
    let mut report = Report::default();
    let v = run(Box::new(ReferenceEngine::new(tok.clone(), 11)), vec![1, 2]);
    assert_conforms(&v, &all);
    report.validity.push(v);
    for (api, kinds) in [
        (Api::Tgi, &[Kind::JsonSchema, Kind::JsonObject, Kind::Regex][..]),
        (Api::TgiStream, &[Kind::JsonSchema, Kind::Regex][..]),
        (Api::OpenAi, &[Kind::JsonSchema, Kind::Tools][..]),
        (Api::OpenAiStream, &[Kind::JsonSchema, Kind::JsonObject, Kind::Tools][..]),
    ] {
        let e = RouterEngine::start(tok.clone(), api, &RouterSetup::default()).unwrap();
        let v = run(Box::new(e), vec![1]);
        assert_conforms(&v, kinds);
        report.validity.push(v);
    }
    let scratch = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let v = run(Box::new(MistralRsEngine::start(&scratch).unwrap()), vec![1]);
    assert_conforms(&v, &all);
    report.validity.push(v);
    // The summary line names every adapter with its counts.
    let s = report.summary();
    assert_eq!(s["adapters"].as_array().unwrap().len(), 6);
    assert!(s["adapters"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["invalid"] == 0 && a["valid"].as_u64() > Some(0)));
    assert!(report.markdown().contains("| router-openai-stream | tools |"));
}

#[test]
fn broken_adapters_are_reported_and_the_suite_goes_on() {
    let cases = cases();
    let opts =
        RunOptions { seeds: vec![1], timeout: Duration::from_secs(2), batch: 4, ..RunOptions::default() };
    // Invalid outputs are counted invalid, each with its reason (`}{` is a fine answer
    // only where free text is: tool calling under `auto` or `none`).
    let mut iso = Isolated::new(Box::new(BrokenEngine(Fault::Invalid)), cases.clone(), 1.0);
    let v = validity(&mut iso, &cases, &opts);
    let t = v.total();
    let rejected = cases.iter().filter(|c| c.validator.check("}{", None).is_err()).count();
    assert!(rejected + 16 >= cases.len());
    assert_eq!(t.invalid, rejected, "{t:?}");
    assert_eq!(v.failures.len(), t.invalid);
    // A panic is an error for its batch; the next batches are tried (and fail the same way).
    let mut iso = Isolated::new(Box::new(BrokenEngine(Fault::Panic)), cases.clone(), 1.0);
    let v = validity(&mut iso, &cases, &opts);
    assert_eq!(v.total().errors, cases.len());
    assert!(v.failures[0].contains("panicked"), "{}", v.failures[0]);
    // A hang is reported after the timeout, and the engine's other cases are skipped at once.
    let started = Instant::now();
    let mut iso = Isolated::new(Box::new(BrokenEngine(Fault::Hang)), cases.clone(), 1.0);
    let v = validity(&mut iso, &cases, &opts);
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert_eq!(v.total().errors, cases.len());
    assert!(v.failures[0].contains("hung"), "{}", v.failures[0]);
    // And a healthy engine still runs afterwards.
    let tok = grammask_conformance::engines::tokenizer().unwrap();
    let v = run(Box::new(ReferenceEngine::new(tok, 3)), vec![5]);
    assert_eq!(v.total().invalid + v.total().errors, 0, "{:?}", v.failures);
}
