//! The processor's contract with mistral.rs, called the way mistral.rs calls it (one
//! sequence's CPU f32 logits and its prompt + generated ids), without a model: which mask
//! each context gets, sequences sharing one processor, rollback, repeated contexts, padding.

use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenBitmask, TokenizerInfo, TokenizerOptions};
use grammask_mistralrs::{Grammask, GrammaskProcessor, ModelVocab, Outcome, ProcessorError};
use mistralrs::{CustomLogitsProcessor, Device, Tensor};
use std::sync::Arc;

const EOS: u32 = 5;

/// Tokens: 0 "a", 1 "b", 2 "ab", 3 "c", 4 "x", 5 <eos> (stop).
fn compiled(grammar: &str) -> Arc<grammask::CompiledGrammar> {
    let vocab: Vec<Vec<u8>> =
        ["a", "b", "ab", "c", "x", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
    let tok = TokenizerInfo::from_byte_tokens(
        vocab,
        &TokenizerOptions { stop_tokens: Some(vec![EOS]), ..Default::default() },
    )
    .unwrap();
    GrammarCompiler::new(Arc::new(tok)).compile(&GrammarSpec::ebnf(grammar)).unwrap()
}

const G: &str = r#"root ::= ("a" | "b")+ "c""#;

/// Allowed ids after masking `width` zero logits with the processor.
fn allowed(p: &GrammaskProcessor, context: &[u32], width: usize) -> Result<Vec<u32>, String> {
    let logits = Tensor::zeros(width, mistralrs::DType::F32, &Device::Cpu).unwrap();
    let out = p.apply(&logits, context).map_err(|e| e.to_string())?;
    let v: Vec<f32> = out.to_vec1().unwrap();
    Ok((0..width as u32).filter(|&i| v[i as usize].is_finite()).collect())
}

/// The mask a fresh matcher gives after `ids`: the reference for every context.
fn reference(c: &Arc<grammask::CompiledGrammar>, ids: &[u32]) -> Vec<u32> {
    let mut m = GrammarMatcher::new(c.clone());
    ids.iter().for_each(|&id| m.accept_token(id).unwrap());
    let mut mask = TokenBitmask::new(1, m.vocab_size());
    m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
    mask.allowed_ids(0)
}

const PROMPT: [u32; 3] = [4, 4, 3];

fn ctx(generated: &[u32]) -> Vec<u32> {
    PROMPT.iter().chain(generated).copied().collect()
}

#[test]
fn one_sequence_step_by_step() {
    let c = compiled(G);
    let p = GrammaskProcessor::new(c.clone(), 1);
    let path = [0, 2, 1, 3];
    for n in 0..path.len() {
        assert_eq!(allowed(&p, &ctx(&path[..n]), 6).unwrap(), reference(&c, &path[..n]), "after {n} tokens");
    }
    // After "a ab b c" the grammar has ended: only the stop token.
    assert_eq!(allowed(&p, &ctx(&path), 6).unwrap(), vec![EOS]);
    let s = p.stats();
    assert_eq!(s.calls, 5);
    assert!(s.fill_ns > 0);
}

#[test]
fn padding_past_the_vocabulary_is_masked() {
    let p = GrammaskProcessor::new(compiled(G), 1);
    // An lm_head 100 wide: ids 6..100 do not exist and are never allowed.
    assert_eq!(allowed(&p, &ctx(&[]), 100).unwrap(), vec![0, 1, 2]);
    // Several rows at once are not what mistral.rs hands a processor.
    let p2 = GrammaskProcessor::new(compiled(G), 1);
    let two = Tensor::zeros((2, 6), mistralrs::DType::F32, &Device::Cpu).unwrap();
    let err = p2.apply(&two, &ctx(&[])).unwrap_err().to_string();
    assert!(err.contains("expected one row"), "{err}");
    // Narrower than the vocabulary: an error, not a partial mask.
    let p = GrammaskProcessor::new(compiled(G), 1);
    let err = allowed(&p, &ctx(&[]), 4).unwrap_err();
    assert!(err.contains("4 logits for a vocabulary of 6"), "{err}");
}

#[test]
fn sequences_sharing_a_processor_keep_their_own_states() {
    let c = compiled(G);
    let p = GrammaskProcessor::new(c.clone(), 3);
    // Three choices of one request, called in an interleaved order, two with the same
    // history for a while.
    let paths: [&[u32]; 3] = [&[0, 0, 1, 3], &[0, 0, 2, 3], &[1, 2, 3]];
    for step in 0..=4 {
        for path in paths.iter().rev() {
            if step <= path.len() && !(step == path.len() && path.last() == Some(&3)) {
                let got = allowed(&p, &ctx(&path[..step]), 6).unwrap();
                assert_eq!(got, reference(&c, &path[..step]), "{path:?} at {step}");
            }
        }
    }
}

#[test]
fn concurrent_sequences_get_their_masks() {
    // mistral.rs samples every sequence of a batch once per step (concurrently, on rayon
    // threads) before any takes the next step: the threads here meet at a barrier each step.
    let c = compiled(G);
    let n = 8;
    let p = Arc::new(GrammaskProcessor::new(c.clone(), n));
    let step = Arc::new(std::sync::Barrier::new(n));
    // Each thread is one choice: a random walk through the grammar.
    let threads: Vec<_> = (0..n)
        .map(|t| {
            let p = p.clone();
            let c = c.clone();
            let step = step.clone();
            std::thread::spawn(move || {
                let mut seed = 0x9e37_79b9_u64.wrapping_mul(t as u64 + 1);
                let mut ids = Vec::new();
                let mut done = false;
                for _ in 0..40 {
                    if !done {
                        let got = allowed(&p, &ctx(&ids), 6).unwrap();
                        assert_eq!(got, reference(&c, &ids));
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let pick = got[(seed >> 33) as usize % got.len()];
                        if pick == EOS {
                            done = true;
                        } else {
                            ids.push(pick);
                        }
                    }
                    step.wait();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
}

#[test]
fn a_shrinking_context_rolls_back() {
    let c = compiled(G);
    let p = GrammaskProcessor::new(c.clone(), 1);
    for n in 0..=3 {
        allowed(&p, &ctx(&[0, 1, 0][..n]), 6).unwrap();
    }
    // Two tokens were taken back (a rejected draft): the state follows the context.
    assert_eq!(allowed(&p, &ctx(&[0]), 6).unwrap(), reference(&c, &[0]));
    // And a different continuation from there.
    assert_eq!(allowed(&p, &ctx(&[0, 2]), 6).unwrap(), reference(&c, &[0, 2]));
}

#[test]
fn a_repeated_context_is_served_again() {
    // mistral.rs samples a sequence again at the same context when an earlier sequence of
    // its batch failed: the state is the same, so is the mask.
    let c = compiled(G);
    for n in [1, 2] {
        let p = GrammaskProcessor::new(c.clone(), n);
        allowed(&p, &ctx(&[]), 6).unwrap();
        allowed(&p, &ctx(&[0]), 6).unwrap();
        assert_eq!(allowed(&p, &ctx(&[0]), 6).unwrap(), reference(&c, &[0]));
        assert_eq!(allowed(&p, &ctx(&[0]), 6).unwrap(), reference(&c, &[0]));
        assert_eq!(allowed(&p, &ctx(&[0, 1]), 6).unwrap(), reference(&c, &[0, 1]));
    }
}

#[test]
fn a_context_repeated_after_taking_tokens_back_is_refused() {
    // mistral.rs's speculative pipeline: the draft advances, then every verified row comes
    // with the same context. The first such row is the context's own state (served by
    // rolling back); the second cannot be mapped to any state — with one sequence or more.
    let c = compiled(G);
    for n in [1, 2, 4] {
        let p = GrammaskProcessor::new(c.clone(), n);
        allowed(&p, &ctx(&[]), 6).unwrap();
        allowed(&p, &ctx(&[0]), 6).unwrap();
        allowed(&p, &ctx(&[0, 1]), 6).unwrap();
        assert_eq!(allowed(&p, &ctx(&[]), 6).unwrap(), reference(&c, &[]), "n = {n}");
        let err = allowed(&p, &ctx(&[]), 6).unwrap_err();
        assert!(err.contains("came again right after") && err.contains("speculative"), "{err}");
    }
}

#[test]
fn a_prompt_served_from_mistralrs_prefix_cache_is_learned_on_the_next_call() {
    // With a prefix-cache hit the first call carries only the prompt's uncached tail.
    let c = compiled(G);
    let prompt = [4u32, 4, 3, 4, 3];
    let tail = &prompt[3..];
    let full = |g: &[u32]| prompt.iter().chain(g).copied().collect::<Vec<_>>();
    for n in [1, 2] {
        let p = GrammaskProcessor::new(c.clone(), n);
        assert_eq!(allowed(&p, tail, 6).unwrap(), reference(&c, &[]));
        if n == 2 {
            // The second choice's first call: the same tail.
            assert_eq!(allowed(&p, tail, 6).unwrap(), reference(&c, &[]));
        }
        for k in 1..=3 {
            let g = &[0, 1, 0][..k];
            assert_eq!(allowed(&p, &full(g), 6).unwrap(), reference(&c, g), "n = {n}, {k} generated");
        }
    }
    // Without a cache hit the first call is the whole prompt, and the next one extends it.
    let p = GrammaskProcessor::new(c.clone(), 1);
    allowed(&p, &prompt, 6).unwrap();
    assert_eq!(allowed(&p, &full(&[1]), 6).unwrap(), reference(&c, &[1]));
}

#[test]
fn a_panic_while_filling_does_not_leak_the_slot() {
    let c = compiled(G);
    let p = GrammaskProcessor::new(c.clone(), 1);
    allowed(&p, &ctx(&[]), 6).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        p.mask_for(&ctx(&[0]), |_| panic!("the engine's apply panicked")).ok();
    }));
    assert!(panicked.is_err());
    // The sequence's slot went with the panic; the next call rebuilds it instead of
    // finding the processor full.
    assert_eq!(allowed(&p, &ctx(&[0, 1]), 6).unwrap(), reference(&c, &[0, 1]));
}

#[test]
fn bad_contexts_are_typed_errors() {
    let c = compiled(G);
    let p = GrammaskProcessor::new(c.clone(), 1);
    allowed(&p, &ctx(&[]), 6).unwrap();
    // A token the grammar rejects ("c" first), an id outside the vocabulary.
    let err = allowed(&p, &ctx(&[3]), 6).unwrap_err();
    assert!(err.contains("generated token 0 (id 3) is rejected"), "{err}");
    let p = GrammaskProcessor::new(c.clone(), 1);
    allowed(&p, &ctx(&[]), 6).unwrap();
    let err = allowed(&p, &ctx(&[0, 999]), 6).unwrap_err();
    assert!(err.contains("id 999"), "{err}");
    // A processor shared with another request (another prompt).
    let p = GrammaskProcessor::new(c, 1);
    allowed(&p, &ctx(&[]), 6).unwrap();
    let err = allowed(&p, &[4, 3, 3, 0], 6).unwrap_err();
    assert!(err.contains("differs from this request's prompt at token 1"), "{err}");
    // The error is typed underneath candle's.
    let e = ProcessorError::TooManySequences { sequences: 2 };
    assert!(e.to_string().contains("2 sequences"));
}

#[test]
fn request_stop_ids_follow_the_grammar_end() {
    // "x" (4) is a stop id of this request only: allowed exactly where the grammar may end.
    let c = compiled(r#"root ::= "a" "b"?"#);
    let p = GrammaskProcessor::with_stop_ids(c, 1, vec![4, 77]);
    assert_eq!(allowed(&p, &ctx(&[]), 6).unwrap(), vec![0, 2]);
    assert_eq!(allowed(&p, &ctx(&[0]), 6).unwrap(), vec![1, 4, EOS]);
    assert_eq!(allowed(&p, &ctx(&[0, 1]), 6).unwrap(), vec![4, EOS]);
    // A stop id that is also grammar text is forbidden until the grammar can end; here that
    // leaves nothing, which is an error rather than a row of −∞.
    let c = compiled(r#"root ::= "a" "c""#);
    let p = GrammaskProcessor::with_stop_ids(c, 1, vec![0]);
    let err = allowed(&p, &ctx(&[]), 6).unwrap_err();
    assert!(err.contains("no token is allowed"), "{err}");
}

/// mistral.rs 0.8.1's draft-model pipeline (`pipeline/speculative.rs`), call by call: the
/// draft samples γ tokens with the context advancing (`add_tmp_tok`), the tokens are taken
/// back (`remove_tmp_tok`), and the target samples its γ rows, every one with the context
/// as it was before the draft. Row 0 is served (the state rolls back to the context); row 1
/// needs the state after the first draft token, which the context does not say: refused.
/// (The pipeline itself cannot be run here: in 0.8.1 its step locks the draft model twice in
/// one statement and spins forever, already in the engine's startup dummy run.)
#[test]
fn mistralrs_speculative_call_sequence_is_refused() {
    let c = compiled(G);
    let p = GrammaskProcessor::new(c.clone(), 1);
    let gamma = 3;
    let mut accepted: Vec<u32> = vec![];
    // Draft: contexts h, h+d1, h+d1+d2.
    let mut draft = accepted.clone();
    for _ in 0..gamma {
        let allowed_now = allowed(&p, &ctx(&draft), 6).unwrap();
        assert_eq!(allowed_now, reference(&c, &draft));
        draft.push(allowed_now[0]);
    }
    // Target row 0: context h again — the state rolls back and the mask is h's.
    assert_eq!(allowed(&p, &ctx(&accepted), 6).unwrap(), reference(&c, &accepted));
    // The target agrees with the draft's first token; row 1 comes with context h again.
    let err = allowed(&p, &ctx(&accepted), 6).unwrap_err();
    assert!(err.contains("speculative"), "{err}");
    // Had the target disagreed at row 0, decoding would go on from h + its own token.
    accepted.push(1);
    let p = GrammaskProcessor::new(c.clone(), 1);
    allowed(&p, &ctx(&[]), 6).unwrap();
    allowed(&p, &ctx(&[0]), 6).unwrap();
    allowed(&p, &ctx(&[]), 6).unwrap();
    assert_eq!(allowed(&p, &ctx(&accepted), 6).unwrap(), reference(&c, &accepted));
}

#[test]
fn single_token_stop_strings_become_stop_ids() {
    use grammask_mistralrs::{Grammask, ModelVocab};
    use mistralrs::{RequestBuilder, StopTokens};
    let tok = compiled(G).tokenizer().clone();
    let g = Grammask::new(ModelVocab::from_tokenizer_info(tok));
    // "x" is one token that no longer token extends: mistral.rs stops on its id, so the mask
    // allows it only where the grammar may end. "a" is extended by "ab": mistral.rs matches it
    // on the text, and it stays grammar text here.
    let request = RequestBuilder::new().set_sampler_stop_toks(StopTokens::Seqs(vec!["x".into(), "a".into()]));
    let c = g.constrain_with(request, Some(GrammarSpec::ebnf(r#"root ::= "a" "b"?"#))).unwrap();
    let p = c.processor().unwrap();
    assert_eq!(allowed(p, &ctx(&[]), 6).unwrap(), vec![0, 2]);
    assert_eq!(allowed(p, &ctx(&[0]), 6).unwrap(), vec![1, 4, EOS]);
}

#[test]
fn an_output_ended_by_max_len_is_cut_off_even_when_it_is_a_whole_document() {
    // "aa" is a whole document that can go on: ended by `length`, the model was still
    // writing it (a random model filled up to max_len this way in CI).
    let c = compiled(r#"root ::= "a"+"#);
    let g = Grammask::new(ModelVocab::from_tokenizer_info(c.tokenizer().clone()));
    assert_eq!(g.outcome(&c, "aa", "length"), Outcome::CutOff);
    assert_eq!(g.outcome(&c, "aa", "stop"), Outcome::Complete);
    assert_eq!(g.outcome(&c, "", "length"), Outcome::CutOff);
    assert!(matches!(g.outcome(&c, "", "stop"), Outcome::Invalid(_)));
    assert!(matches!(g.outcome(&c, "ab", "length"), Outcome::Invalid(_)));
}
