//! The step engine against the matchers themselves: the rows it masks are exactly the
//! matchers' own masks, the other rows are untouched, jump-forward tokens are the
//! tokenizer's and accepted, and misuse is a typed error.

use grammask::matcher::TextEncoder;
use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenBitmask};
use grammask_gpu::LogitsLayout;
use grammask_router::server::LoadedTokenizer;
use grammask_router::step::{Accepted, BatchOptions, RowError, StepError, StructuredBatch};
use std::sync::Arc;

struct Enc(Arc<tokenizers::Tokenizer>);
impl TextEncoder for Enc {
    fn encode_text(&self, text: &str) -> grammask::Result<Vec<u32>> {
        self.0.encode_text(text)
    }
}

#[test]
fn masked_rows_are_the_matchers_masks_and_the_rest_is_untouched() {
    let tok = LoadedTokenizer::embedded().unwrap();
    let vocab = tok.info.vocab_size();
    let compiler = GrammarCompiler::new(tok.info.clone());
    let specs = [
        GrammarSpec::json_schema(
            r#"{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}"#,
        ),
        GrammarSpec::Regex("[0-9]+(\\.[0-9]+)?".into()),
        GrammarSpec::BuiltinJson,
        GrammarSpec::Regex("(.|\\n)*".into()), // any text (special tokens are still masked)
    ];
    // Accepts at once: jump-forward's tokens come back from `accept` (deferred, the
    // default, they come in the next step's report: see the test after the next).
    let opts = BatchOptions {
        fill_threads: 2,
        encoder: Some(Arc::new(Enc(tok.hf.clone()))),
        defer_accepts: false,
        ..Default::default()
    };
    let mut batch = StructuredBatch::new(vocab, opts).unwrap();
    let mut refs = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let m = GrammarMatcher::new(compiler.compile(s).unwrap());
        refs.push(m.fork());
        batch.add(10 + i as u64, m).unwrap();
    }
    assert!(matches!(batch.add(10, refs[0].fork()), Err(StepError::Duplicate(10))));
    // Six rows: the four constrained ones interleaved with two unconstrained ids.
    let step = [13u64, 99, 10, 12, 98, 11];
    for round in 0..6 {
        batch.begin_step(&step).unwrap();
        assert!(matches!(batch.begin_step(&step), Err(StepError::Busy)));
        assert!(matches!(batch.remove(10), Err(StepError::Busy)));
        let mut logits = vec![0.5f32; step.len() * vocab];
        // Odd rounds end the step without writing (the host sampler reads the masks).
        let fused = round % 2 == 1;
        let report = if fused {
            batch.finish_masks().unwrap()
        } else {
            batch
                .apply_masks(logits.as_mut_slice().into(), LogitsLayout::contiguous(step.len(), vocab))
                .unwrap()
        };
        if fused {
            assert!(logits.iter().all(|&x| x == 0.5), "finish_masks wrote to the logits");
        }
        assert!(report.failed.is_empty());
        assert_eq!(report.constrained, 4);
        let mut masked = 0;
        let mut picks = Vec::new();
        for (r, &id) in step.iter().enumerate() {
            let row = &logits[r * vocab..(r + 1) * vocab];
            let written: Vec<u32> = (0..vocab as u32).filter(|&t| row[t as usize].is_finite()).collect();
            let read: Vec<u32> = match batch.step_mask(r) {
                Some(m) => (0..vocab as u32).filter(|&t| m[t as usize / 32] >> (t % 32) & 1 == 1).collect(),
                None => (0..vocab as u32).collect(),
            };
            let allowed = if fused {
                read
            } else {
                assert_eq!(read, written, "step_mask({r}) is not the mask applied");
                written
            };
            if !(10..=13).contains(&id) {
                assert_eq!(allowed.len(), vocab, "row {r} (sequence {id}) was touched");
                continue;
            }
            let m = &mut refs[(id - 10) as usize];
            let mut want = TokenBitmask::new(1, vocab);
            masked += usize::from(!m.fill_next_token_bitmask(want.row_mut(0)).unwrap());
            assert_eq!(allowed, want.allowed_ids(0), "sequence {id}, round {round}");
            // A non-stop token the grammar allows, the same for both.
            let pick = *allowed.iter().find(|&&t| !tok.info.stop_tokens().contains(&t)).unwrap();
            picks.push((id, pick));
        }
        assert_eq!(report.masked, masked, "round {round}");
        for (id, t) in picks {
            let m = &mut refs[(id - 10) as usize];
            m.accept_token(t).unwrap();
            match batch.accept(id, t).unwrap() {
                Accepted::Continue { forced } => {
                    assert_eq!(forced.rollback, 0);
                    if !forced.ids.is_empty() {
                        // The forced ids spell the forced text and the grammar takes them.
                        let text = m.find_jump_forward_string();
                        let bytes: Vec<u8> =
                            forced.ids.iter().flat_map(|&i| tok.info.token_bytes(i).to_vec()).collect();
                        assert_eq!(bytes, text);
                        m.accept_tokens(&forced.ids).unwrap();
                    }
                }
                Accepted::Finished => panic!("no stop token was sampled"),
            }
        }
    }
    // The forced `{"a": ` of the schema row was appended by jump-forward at some point.
    assert!(batch.matcher(10).unwrap().num_steps() > 6);
    // A row leaves; the others keep their positions right.
    batch.remove(11).unwrap();
    assert!(matches!(batch.accept(11, 0), Err(RowError::Unknown(11))));
    assert!(matches!(batch.begin_step(&[10, 10]), Err(StepError::TwiceInStep(10))));
    batch.begin_step(&[12, 10]).unwrap();
    let mut logits = vec![0.0f32; 2 * vocab];
    let report = batch.apply_masks(logits.as_mut_slice().into(), LogitsLayout::contiguous(2, vocab)).unwrap();
    assert_eq!(report.masked, 2);
    // Wrong logits shape: a typed error, and the batch is usable afterwards.
    batch.begin_step(&[12]).unwrap();
    let mut short = vec![0.0f32; 3];
    assert!(matches!(
        batch.apply_masks(short.as_mut_slice().into(), LogitsLayout::contiguous(1, vocab)),
        Err(StepError::Apply(_))
    ));
    batch.begin_step(&[12]).unwrap();
    let mut one = vec![0.0f32; vocab];
    batch.apply_masks(one.as_mut_slice().into(), LogitsLayout::contiguous(1, vocab)).unwrap();
    // A stop token ends a row that may end, and it leaves the batch.
    let eos = tok.info.stop_tokens()[0];
    let mut sealed = GrammarMatcher::new(compiler.compile(&GrammarSpec::Regex("x".into())).unwrap());
    sealed.accept_string("x").unwrap();
    batch.add(50, sealed).unwrap();
    assert_eq!(batch.accept(50, eos).unwrap(), Accepted::Finished);
    assert!(!batch.contains(50));
}

#[test]
fn deferred_accepts_give_the_same_masks_and_fail_late() {
    let tok = LoadedTokenizer::embedded().unwrap();
    let vocab = tok.info.vocab_size();
    let compiler = GrammarCompiler::new(tok.info.clone());
    let spec = GrammarSpec::json_schema(
        r#"{"type": "object", "properties": {"k": {"enum": ["alpha", "beta"]}, "n": {"type": "integer"}},
            "required": ["k", "n"]}"#,
    );
    let compiled = compiler.compile(&spec).unwrap();
    // Without jump-forward, accepts are deferred (the default) in one batch and immediate
    // in the other; masks must agree step by step.
    let mut deferred =
        StructuredBatch::new(vocab, BatchOptions { fill_threads: 1, ..Default::default() }).unwrap();
    let mut immediate = StructuredBatch::new(
        vocab,
        BatchOptions { fill_threads: 1, defer_accepts: false, ..Default::default() },
    )
    .unwrap();
    deferred.add(1, GrammarMatcher::new(compiled.clone())).unwrap();
    immediate.add(1, GrammarMatcher::new(compiled.clone())).unwrap();
    let mut reference = GrammarMatcher::new(compiled.clone());
    let text = r#"{"k": "beta", "n": 42}"#;
    let ids = tok.hf.encode_text(text).unwrap();
    for (i, &t) in ids.iter().enumerate() {
        let mut masks = Vec::new();
        for b in [&mut deferred, &mut immediate] {
            b.begin_step(&[1]).unwrap();
            let mut logits = vec![0.0f32; vocab];
            b.apply_masks(logits.as_mut_slice().into(), LogitsLayout::contiguous(1, vocab)).unwrap();
            masks.push(logits.iter().map(|x| x.is_finite()).collect::<Vec<_>>());
        }
        let mut want = TokenBitmask::new(1, vocab);
        reference.fill_next_token_bitmask(want.row_mut(0)).unwrap();
        let want: Vec<bool> =
            (0..vocab as u32).map(|t| want.allowed_ids(0).binary_search(&t).is_ok()).collect();
        assert_eq!(masks[0], want, "deferred, step {i}");
        assert_eq!(masks[1], want, "immediate, step {i}");
        reference.accept_token(t).unwrap();
        assert_eq!(deferred.accept(1, t).unwrap(), Accepted::Continue { forced: Default::default() });
        assert!(matches!(immediate.accept(1, t).unwrap(), Accepted::Continue { .. }));
    }
    // The deferred token is accepted when the state is looked at.
    assert_eq!(deferred.matcher(1).unwrap().num_steps(), ids.len());
    // A stop token is accepted at once: the row ends now.
    let eos = tok.info.stop_tokens()[0];
    assert_eq!(deferred.accept(1, eos).unwrap(), Accepted::Finished);
    assert!(deferred.is_empty());

    // A deferred token the grammar refuses fails its row at the next step, and only it.
    deferred.add(2, GrammarMatcher::new(compiled.clone())).unwrap();
    deferred.add(3, GrammarMatcher::new(compiled)).unwrap();
    let bad = tok.hf.encode_text("]").unwrap()[0];
    assert!(deferred.accept(2, bad).is_ok());
    deferred.begin_step(&[2, 3]).unwrap();
    let mut logits = vec![0.0f32; 2 * vocab];
    let report =
        deferred.apply_masks(logits.as_mut_slice().into(), LogitsLayout::contiguous(2, vocab)).unwrap();
    assert_eq!(report.failed.len(), 1);
    assert_eq!(report.failed[0].0, 2);
    assert!(matches!(report.failed[0].1, RowError::Grammar(_)));
    assert!(!deferred.contains(2) && deferred.contains(3));
    assert!(logits[..vocab].iter().all(|x| x.is_finite()), "the failed row is not masked");
    assert_eq!(report.masked, 1);
}

/// A compiler that leaves masks lazy and shares none between grammars: most fills walk
/// the vocabulary.
fn lazy_compiler(tok: &LoadedTokenizer) -> GrammarCompiler {
    let options = grammask::CompileOptions {
        eager_budget: std::time::Duration::ZERO,
        leaf_cache_bytes: 0,
        ..Default::default()
    };
    GrammarCompiler::with_options(tok.info.clone(), options, 0)
}

/// The lowest token id a mask row allows that is not a stop token.
fn lowest_allowed(mask: Option<&[u32]>, vocab: usize, stops: &[u32]) -> u32 {
    (0..vocab as u32)
        .find(|&t| mask.is_none_or(|m| m[t as usize / 32] >> (t % 32) & 1 == 1) && !stops.contains(&t))
        .unwrap()
}

#[test]
fn late_rows_sit_out_and_take_the_same_tokens_when_their_masks_are_back() {
    let tok = LoadedTokenizer::embedded().unwrap();
    let vocab = tok.info.vocab_size();
    let stops = tok.info.stop_tokens().to_vec();
    // Masks left lazy, none shared: most fills walk the vocabulary.
    let compiler = lazy_compiler(&tok);
    let props: Vec<String> = (0..6)
        .map(|i| format!(r#""f{i}": {{"type": "string", "pattern": "^[a-z]{{2,4}}-{i}[0-9]{{1,3}}$"}}"#))
        .collect();
    let schema = format!(r#"{{"type": "object", "properties": {{{}}}}}"#, props.join(", "));
    let compiled = compiler.compile(&GrammarSpec::json_schema(&schema)).unwrap();
    let mut batch =
        StructuredBatch::new(vocab, BatchOptions { fill_threads: 1, ..Default::default() }).unwrap();
    let mut refs = Vec::new();
    for id in [1u64, 2, 3] {
        batch.add(id, GrammarMatcher::new(compiled.clone())).unwrap();
        refs.push(GrammarMatcher::new(compiled.clone()));
    }
    // Each step waits for no mask at all: a row not back when the step ends sits it out
    // and is stepped again only once its mask is back.
    let mut waiting: Vec<u64> = Vec::new();
    let mut taken: Vec<Vec<u32>> = vec![Vec::new(); 3];
    let (mut late_seen, mut steps) = (0, 0);
    while taken.iter().any(|t| t.len() < 40) && steps < 2_000 {
        steps += 1;
        let rows: Vec<u64> = [1u64, 2, 3].into_iter().filter(|id| !waiting.contains(id)).collect();
        let report = if rows.is_empty() {
            batch.collect_late(std::time::Duration::from_secs(5)).unwrap()
        } else {
            batch.begin_step(&rows).unwrap();
            batch.finish_masks_by(Some(std::time::Instant::now())).unwrap()
        };
        // A late row is in no step and takes no token until its mask is back.
        if let Some(&w) = report.late.first() {
            assert!(matches!(batch.begin_step(&[w]), Err(StepError::Late(id)) if id == w));
            assert!(matches!(batch.accept(w, 0), Err(RowError::Late(id)) if id == w));
        }
        assert!(report.failed.is_empty());
        late_seen += report.late.len();
        let mut picks = Vec::new();
        for (r, &id) in rows.iter().enumerate() {
            if !report.late.contains(&id) {
                picks.push((id, lowest_allowed(batch.step_mask(r), vocab, &stops)));
            }
        }
        for &id in &report.arrived {
            picks.push((id, lowest_allowed(batch.late_mask(id), vocab, &stops)));
        }
        waiting.retain(|id| !report.arrived.contains(id));
        waiting.extend(&report.late);
        for (id, t) in picks {
            let k = (id - 1) as usize;
            if taken[k].len() < 40 {
                taken[k].push(t);
                assert!(matches!(batch.accept(id, t).unwrap(), Accepted::Continue { .. }));
            }
        }
    }
    assert!(late_seen > 0, "no row was late in {steps} steps");
    // Each row took the tokens its own matcher, masked at every step, gives.
    for (k, m) in refs.iter_mut().enumerate() {
        for (i, &t) in taken[k].iter().enumerate() {
            let mut want = TokenBitmask::new(1, vocab);
            let all = m.fill_next_token_bitmask(want.row_mut(0)).unwrap();
            let want_t = lowest_allowed((!all).then(|| want.row(0)), vocab, &stops);
            assert_eq!(t, want_t, "row {}, token {i}", k + 1);
            m.accept_token(t).unwrap();
        }
    }
    // A row taken out while its fill is away is dropped when it comes back.
    let rows: Vec<u64> = [1u64, 2, 3].into_iter().filter(|id| !waiting.contains(id)).collect();
    if !rows.is_empty() {
        batch.begin_step(&rows).unwrap();
        let report = batch.finish_masks_by(Some(std::time::Instant::now())).unwrap();
        waiting.extend(&report.late);
    }
    for &id in &waiting {
        assert!(batch.remove(id).unwrap().is_none());
        assert!(!batch.contains(id));
    }
    let report = batch.collect_late(std::time::Duration::from_millis(500)).unwrap();
    assert!(report.arrived.iter().all(|id| !waiting.contains(id)), "{:?}", report.arrived);
}

/// The allowed token ids of a mask row (`None`: every token).
fn allowed_ids(mask: Option<&[u32]>, vocab: usize) -> Vec<u32> {
    (0..vocab as u32).filter(|&t| mask.is_none_or(|m| m[t as usize / 32] >> (t % 32) & 1 == 1)).collect()
}

#[test]
fn deferred_jump_forward_hands_out_the_forced_tokens_in_the_next_report() {
    let tok = LoadedTokenizer::embedded().unwrap();
    let vocab = tok.info.vocab_size();
    let stops = tok.info.stop_tokens().to_vec();
    // Masks left lazy: fills are slow enough for rows to be late (a late row's forced
    // text comes back with it), and keys forced in order: jump-forward has text to find.
    let compiler = lazy_compiler(&tok);
    let props: Vec<String> =
        (0..5).map(|i| format!(r#""key_{i}": {{"type": "string", "pattern": "^[a-z]{{2,3}}$"}}"#)).collect();
    let names: Vec<String> = (0..5).map(|i| format!(r#""key_{i}""#)).collect();
    let schema = format!(
        r#"{{"type": "object", "properties": {{{}}}, "required": [{}], "additionalProperties": false}}"#,
        props.join(", "),
        names.join(", ")
    );
    let compiled = compiler.compile(&GrammarSpec::json_schema(&schema)).unwrap();
    let enc = Enc(tok.hf.clone());
    let opts =
        BatchOptions { fill_threads: 1, encoder: Some(Arc::new(Enc(tok.hf.clone()))), ..Default::default() };
    assert!(opts.defer_accepts, "deferring is the default");
    let mut batch = StructuredBatch::new(vocab, opts).unwrap();
    // References with jump-forward at once: what each row must be handed out next.
    let mut refs = Vec::new();
    for id in [1u64, 2, 3] {
        batch.add(id, GrammarMatcher::new(compiled.clone())).unwrap();
        let mut m = GrammarMatcher::new(compiled.clone());
        let jf = m.apply_jump_forward(&enc, 0).unwrap();
        refs.push((m, jf.ids));
    }
    // The schema forces `{"key_0": "` from the start: nothing handed it out yet, so the
    // rows begin with it as jump-forward's first text (the caller's prompt would hold it);
    // take it into the batch's rows as drawn tokens.
    for (k, (_, first)) in refs.iter_mut().enumerate() {
        for t in std::mem::take(first) {
            assert!(matches!(batch.accept(k as u64 + 1, t).unwrap(), Accepted::Continue { .. }));
        }
    }
    let mut waiting: Vec<u64> = Vec::new();
    let (mut forced_seen, mut late_forced, mut steps, mut ended) = (0, 0, 0, 0);
    while ended < 3 && steps < 2_000 {
        steps += 1;
        let rows: Vec<u64> =
            [1u64, 2, 3].into_iter().filter(|id| batch.contains(*id) && !waiting.contains(id)).collect();
        let report = if rows.is_empty() {
            batch.collect_late(std::time::Duration::from_secs(5)).unwrap()
        } else {
            batch.begin_step(&rows).unwrap();
            batch.finish_masks_by(Some(std::time::Instant::now())).unwrap()
        };
        assert!(report.failed.is_empty());
        // Forced text comes exactly where, and as, jump-forward at once gives it.
        for (id, jf) in &report.forced {
            let (_, want) = &mut refs[(*id - 1) as usize];
            assert!(!jf.ids.is_empty());
            assert_eq!(jf.rollback, 0);
            assert_eq!(&jf.ids, want, "row {id}");
            want.clear();
            forced_seen += 1;
            if waiting.contains(id) {
                late_forced += 1;
            }
            assert!(!report.arrived.contains(id), "a forced row is not to be sampled");
        }
        waiting.retain(|id| !report.arrived.contains(id) && !report.forced.iter().any(|f| f.0 == *id));
        waiting.extend(&report.late);
        let forced: Vec<u64> = report.forced.iter().map(|f| f.0).collect();
        let mut picks = Vec::new();
        for (r, &id) in rows.iter().enumerate() {
            if report.late.contains(&id) {
                continue;
            }
            if forced.contains(&id) {
                assert!(batch.step_mask(r).is_none(), "a forced row is not masked");
                continue;
            }
            picks.push((id, batch.step_mask(r).map(<[u32]>::to_vec)));
        }
        for &id in &report.arrived {
            picks.push((id, batch.late_mask(id).map(<[u32]>::to_vec)));
        }
        for (id, mask) in picks {
            let (m, want) = &mut refs[(id - 1) as usize];
            assert!(want.is_empty(), "row {id} was sampled where its grammar forced text");
            // The mask is the reference's, past the forced text.
            let mut r = TokenBitmask::new(1, vocab);
            let all = m.fill_next_token_bitmask(r.row_mut(0)).unwrap();
            assert_eq!(allowed_ids(mask.as_deref(), vocab), allowed_ids((!all).then(|| r.row(0)), vocab));
            // Close the string when allowed (the keys come faster), else the lowest token.
            let quote = tok.hf.encode_text("\"").unwrap()[0];
            let t = if allowed_ids(mask.as_deref(), vocab).contains(&quote) {
                quote
            } else if m.can_terminate() {
                stops[0]
            } else {
                lowest_allowed(mask.as_deref(), vocab, &stops)
            };
            m.accept_token(t).unwrap();
            match batch.accept(id, t).unwrap() {
                Accepted::Finished => ended += 1,
                Accepted::Continue { forced } => {
                    assert!(forced.ids.is_empty(), "deferred: nothing comes back from accept");
                    *want = m.apply_jump_forward(&enc, 0).unwrap().ids;
                }
            }
        }
    }
    assert_eq!(ended, 3, "rows unfinished after {steps} steps");
    assert!(forced_seen >= 12, "forced text handed out {forced_seen} times");
    assert!(late_forced > 0, "no late row came back with forced text in {steps} steps");
}
