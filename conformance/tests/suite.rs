//! The suite's validity part, as CI runs it: a small corpus (every constraint kind, cases
//! grammask refuses included) through the reference loop (pushed towards ending, and
//! unbiased), the router (TGI's and OpenAI's APIs, streamed and not) and mistral.rs, all
//! on random-weight models — no invalid output or cut-off prefix by any oracle, no engine
//! error, refusals only where grammask refuses, at most 10 % of outputs cut off; and
//! engines broken on purpose are reported as such while the suite goes on.

use grammask::tool_calling::Family;
use grammask_conformance::case::{corpus, Case, CorpusOptions, Kind};
use grammask_conformance::engine::Engine;
use grammask_conformance::engines::broken::{BrokenEngine, Fault};
use grammask_conformance::engines::mistralrs::MistralRsEngine;
use grammask_conformance::engines::reference::ReferenceEngine;
use grammask_conformance::engines::router::{Api, RouterEngine, RouterSetup};
use grammask_conformance::engines::Bias;
use grammask_conformance::llg::LlgCase;
use grammask_conformance::report::{CompileVerdicts, Report};
use grammask_conformance::run::{validity, Isolated, Oracles, RunOptions, ValidityReport};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

fn cases() -> Arc<Vec<Case>> {
    static C: OnceLock<Arc<Vec<Case>>> = OnceLock::new();
    C.get_or_init(|| {
        // The families whose markers a random model writes within the token budget (the
        // report runs every family). The whole corpus: cases grammask refuses must be
        // refused by every adapter with its typed error.
        let families = vec![Family::Qwen3, Family::Hermes, Family::Llama, Family::Mistral];
        let all =
            corpus(&CorpusOptions { schemas_per_split: 2, tool_families: families, ..Default::default() })
                .unwrap();
        Arc::new(all)
    })
    .clone()
}

fn oracles() -> &'static Oracles {
    static O: OnceLock<Oracles> = OnceLock::new();
    O.get_or_init(|| {
        let tok = grammask_conformance::engines::tokenizer().unwrap();
        Oracles::new(&cases(), &tok.info).unwrap()
    })
}

fn run(engine: Box<dyn Engine>, seeds: Vec<u64>) -> ValidityReport {
    let cases = cases();
    let mut iso = Isolated::new(engine, cases.clone(), 1.0);
    let opts = RunOptions { seeds, max_new_tokens: 320, ..RunOptions::default() };
    validity(&mut iso, &cases, oracles(), &opts)
}

fn assert_conforms(v: &ValidityReport, kinds: &[Kind]) {
    let t = v.total();
    eprintln!("{}", v.line());
    for c in &v.cut_offs {
        eprintln!("  cut off (a live prefix): {c}");
    }
    assert!(v.failures.is_empty(), "{}:\n{}", v.name, v.failures.join("\n"));
    assert_eq!(t.invalid + t.errors + t.cut_off_invalid, 0);
    // Every refusal is of a case grammask refuses to compile (none of the others).
    let refused_cases = cases()
        .iter()
        .zip(&oracles().grammask)
        .filter(|(c, r)| r.is_err() && v.by_kind.contains_key(&c.kind()))
        .count();
    assert!(t.refused <= refused_cases * t.outputs.div_ceil(v.cases.max(1)), "{t:?}");
    for k in kinds {
        let kt = v.by_kind.get(k).unwrap_or_else(|| panic!("{}: no {k:?} case ran", v.name));
        assert!(kt.valid > 0, "{}: no valid {k:?} output: {kt:?}", v.name);
    }
    // A random model stops only because the grammar leaves it nothing else and the
    // closers and stop tokens it is pushed towards, more with every token: outputs end —
    // at most 10 % cut off over the whole run (asserted at its end); on one adapter's few
    // dozen outputs, at most 15 % (a binomial's spread around a rate of 5–8 %).
    assert!(
        t.cut_off * 100 <= t.outputs * 15,
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
    // Unbiased, outputs run into max_new_tokens: each cut-off prefix is judged (by
    // llguidance, the Earley recognizer or the tool reader) and none is a dead end.
    let v = run(Box::new(ReferenceEngine::with_bias(tok.clone(), 11, Bias::None)), vec![1]);
    let t = v.total();
    eprintln!("{}: {t:?}", v.name);
    assert!(v.failures.is_empty(), "{}:\n{}", v.name, v.failures.join("\n"));
    assert!(t.cut_off * 4 >= t.outputs, "the unbiased run should mostly be cut off: {t:?}");
    assert_eq!((t.invalid, t.errors, t.cut_off_invalid), (0, 0, 0), "{t:?}");
    assert_eq!(t.cut_off_checked, t.cut_off, "every cut-off prefix judged: {t:?}");
    report.validity.push(v);
    for (api, kinds) in [
        (Api::Tgi, &[Kind::JsonSchema, Kind::JsonObject, Kind::Regex][..]),
        (Api::TgiStream, &[Kind::JsonSchema, Kind::Regex][..]),
        (Api::OpenAi, &[Kind::JsonSchema, Kind::Tools][..]),
        (Api::OpenAiStream, &[Kind::JsonSchema, Kind::JsonObject, Kind::Tools][..]),
        (Api::Completions, &[Kind::JsonSchema, Kind::Regex, Kind::Grammar, Kind::Tools][..]),
        (Api::CompletionsStream, &[Kind::JsonSchema, Kind::Grammar, Kind::Tools][..]),
    ] {
        let e = RouterEngine::start(tok.clone(), api, &RouterSetup::default()).unwrap();
        let v = run(Box::new(e), vec![1]);
        assert_conforms(&v, kinds);
        report.validity.push(v);
    }
    // The router's CUDA path where a GPU is (CI has none: the reason is printed).
    let cuda = RouterSetup { cuda_device: Some(0), ..RouterSetup::default() };
    match RouterEngine::start(tok.clone(), Api::OpenAi, &cuda) {
        Ok(e) => {
            let v = run(Box::new(e), vec![1]);
            let t = v.total();
            eprintln!("router-cuda: {t:?}");
            assert!(v.failures.is_empty(), "router-cuda:\n{}", v.failures.join("\n"));
            assert_eq!((t.invalid, t.errors, t.cut_off_invalid), (0, 0, 0), "{t:?}");
        }
        Err(e) => eprintln!("router-cuda skipped: {}", e.0),
    }
    let scratch = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let v = run(Box::new(MistralRsEngine::start(&scratch).unwrap()), vec![1]);
    assert_conforms(&v, &all);
    report.validity.push(v);
    let (cut, outputs) =
        report.validity.iter().filter(|v| v.name != "reference-unbiased").fold((0, 0), |(c, o), v| {
            let t = v.total();
            (c + t.cut_off, o + t.outputs - t.refused)
        });
    assert!(cut * 10 <= outputs, "{cut} of {outputs} outputs cut off");
    // The summary line names every adapter with its counts and oracles.
    report.compiles = CompileVerdicts::of(&cases(), oracles(), None);
    let s = report.summary();
    assert_eq!(s["adapters"].as_array().unwrap().len(), 9);
    for a in s["adapters"].as_array().unwrap() {
        assert!(a["invalid"] == 0 && a["cut_off_invalid"] == 0 && a["valid"].as_u64() > Some(0), "{a}");
        for key in ["cut_off_checked", "refused", "errors"] {
            assert!(a[key].is_u64(), "{a}");
        }
        assert!(a["oracle"].as_str().unwrap().contains("jsonschema"), "{a}");
    }
    let md = report.markdown();
    assert!(md.contains("| router-openai-stream | tools |"));
    assert!(md.contains("## Compile verdicts"), "{md}");
}

#[test]
fn broken_adapters_are_reported_and_the_suite_goes_on() {
    let cases = cases();
    let opts =
        RunOptions { seeds: vec![1], timeout: Duration::from_secs(2), batch: 4, ..RunOptions::default() };
    // Invalid outputs are counted invalid, each with its reason (`}{` is a fine answer
    // only where free text is: tool calling under `auto` or `none`).
    let mut iso = Isolated::new(Box::new(BrokenEngine(Fault::Invalid)), cases.clone(), 1.0);
    let v = validity(&mut iso, &cases, oracles(), &opts);
    let t = v.total();
    let refused = |i: usize| oracles().grammask[i].is_err();
    let rejected = cases
        .iter()
        .enumerate()
        .filter(|&(i, c)| refused(i) || c.validator.check("}{", None).is_err())
        .count();
    assert!(rejected + 16 >= cases.len());
    assert_eq!(t.invalid, rejected, "{t:?}");
    assert_eq!(v.failures.len(), t.invalid);
    // Cut off, `}{` is a dead end wherever a prefix oracle judges (free text aside).
    let mut iso = Isolated::new(Box::new(BrokenEngine(Fault::InvalidCutOff)), cases.clone(), 1.0);
    let v = validity(&mut iso, &cases, oracles(), &opts);
    let t = v.total();
    let judged = cases
        .iter()
        .enumerate()
        .filter(|&(i, c)| {
            !refused(i)
                && (matches!(oracles().llg[i], LlgCase::Compiled(_))
                    || c.kind() == Kind::Grammar
                    || c.kind() == Kind::Tools)
        })
        .count();
    assert!(t.cut_off_invalid + 16 >= judged, "{t:?}");
    assert!(t.cut_off_invalid >= 20, "{t:?}");
    assert_eq!(t.cut_off_checked, judged, "{t:?}");
    // A panic is an error for its batch; the next batches are tried (and fail the same way).
    let mut iso = Isolated::new(Box::new(BrokenEngine(Fault::Panic)), cases.clone(), 1.0);
    let v = validity(&mut iso, &cases, oracles(), &opts);
    assert_eq!(v.total().errors, cases.len());
    assert!(v.failures[0].contains("panicked"), "{}", v.failures[0]);
    // A hang is reported after the timeout, and the engine's other cases are skipped at once.
    let started = Instant::now();
    let mut iso = Isolated::new(Box::new(BrokenEngine(Fault::Hang)), cases.clone(), 1.0);
    let v = validity(&mut iso, &cases, oracles(), &opts);
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert_eq!(v.total().errors, cases.len());
    assert!(v.failures[0].contains("hung"), "{}", v.failures[0]);
    // And a healthy engine still runs afterwards.
    let tok = grammask_conformance::engines::tokenizer().unwrap();
    let v = run(Box::new(ReferenceEngine::new(tok, 3)), vec![5]);
    assert_eq!(v.total().invalid + v.total().errors + v.total().cut_off_invalid, 0, "{:?}", v.failures);
}
