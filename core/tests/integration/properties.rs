//! Property tests of the matcher on a real tokenizer: rollback, fork, jump-forward, and
//! mask/accept agreement.

use crate::common;

use common::{allowed, grammar_text, tokenizer, Rng};
use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenBitmask};
use proptest::prelude::*;
use std::sync::Arc;

fn grammars() -> Vec<GrammarSpec> {
    vec![
        GrammarSpec::ebnf(grammask::grammar::JSON_EBNF),
        GrammarSpec::ebnf(grammar_text("llama.cpp/c.gbnf")),
        GrammarSpec::ebnf(grammar_text("llama.cpp/arithmetic.gbnf")),
        GrammarSpec::ebnf(
            "root ::= expr\nexpr ::= expr \"+\" expr | \"(\" expr \")\" | [a-c]+ | \"ab\" \"c\"?",
        ),
        // Objects whose members come in any order (member sets: progress the parser
        // tracks, which forks and rollbacks must carry).
        GrammarSpec::json_schema(
            r#"{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},
            "name":{"type":"string","maxLength":6},"tags":{"type":"array","items":{"enum":["a","b"]}},
            "n":{"type":"object","properties":{"x":{"type":"boolean"},"y":{"type":"null"}},"required":["y"]}},
            "required":["id","name"]}}"#,
        ),
    ]
}

/// Number of grammars in [`grammars`].
const GRAMMARS: usize = 5;

fn matcher(grammar: usize) -> GrammarMatcher {
    static COMPILED: std::sync::OnceLock<Vec<Arc<grammask::CompiledGrammar>>> = std::sync::OnceLock::new();
    let all = COMPILED.get_or_init(|| {
        let c = GrammarCompiler::new(tokenizer("llama3_1"));
        grammars().iter().map(|g| c.compile(g).unwrap()).collect()
    });
    GrammarMatcher::new(all[grammar].clone())
}

fn fill(m: &mut GrammarMatcher) -> Vec<u32> {
    let mut mask = TokenBitmask::new(1, m.vocab_size());
    m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
    mask.row(0).to_vec()
}

/// Accepts up to `n` random allowed non-stop tokens; returns how many were accepted.
fn walk(m: &mut GrammarMatcher, rng: &mut Rng, n: usize) -> usize {
    let stops = m.compiled().tokenizer().stop_tokens().to_vec();
    for i in 0..n {
        let ids: Vec<u32> = allowed(&fill(m)).into_iter().filter(|i| !stops.contains(i)).collect();
        if ids.is_empty() {
            return i;
        }
        m.accept_token(ids[rng.below(ids.len())]).unwrap();
    }
    n
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn rollback_restores_masks(g in 0..GRAMMARS, seed in 1..u64::MAX, pre in 0..12usize, k in 1..8usize) {
        let mut m = matcher(g);
        let mut rng = Rng(seed);
        walk(&mut m, &mut rng, pre);
        let before = fill(&mut m);
        let steps = m.num_steps();
        let done = walk(&mut m, &mut rng, k);
        m.rollback(done).unwrap();
        prop_assert_eq!(m.num_steps(), steps);
        prop_assert_eq!(fill(&mut m), before);
    }

    #[test]
    fn forks_are_independent(g in 0..GRAMMARS, seed in 1..u64::MAX, pre in 0..10usize) {
        let mut m = matcher(g);
        let mut rng = Rng(seed);
        walk(&mut m, &mut rng, pre);
        let before = fill(&mut m);
        let mut f = m.fork();
        let mut rng2 = Rng(seed ^ 0xabcdef);
        walk(&mut f, &mut rng2, 5);
        prop_assert_eq!(fill(&mut m), before.clone());
        // The original can move on its own, and the fork is unaffected by it.
        let fork_mask = fill(&mut f);
        walk(&mut m, &mut rng, 3);
        prop_assert_eq!(fill(&mut f), fork_mask);
    }

    #[test]
    fn jump_forward_is_accepted(g in 0..GRAMMARS, seed in 1..u64::MAX, pre in 0..15usize) {
        let mut m = matcher(g);
        let mut rng = Rng(seed);
        walk(&mut m, &mut rng, pre);
        let before = fill(&mut m);
        let jf = m.find_jump_forward_string();
        prop_assert_eq!(fill(&mut m), before, "find_jump_forward_string changed the state");
        if !jf.is_empty() {
            prop_assert!(m.accept_bytes(&jf).is_ok(), "jump-forward {:?} rejected", String::from_utf8_lossy(&jf));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// Every allowed token is accepted, every forbidden token is rejected.
    #[test]
    fn mask_agrees_with_accept(g in 0..GRAMMARS, seed in 1..u64::MAX, pre in 0..15usize) {
        let mut m = matcher(g);
        let mut rng = Rng(seed);
        walk(&mut m, &mut rng, pre);
        let mask = fill(&mut m);
        for id in 0..m.vocab_size() as u32 {
            let allowed = mask[id as usize / 32] >> (id % 32) & 1 == 1;
            let ok = m.accept_token(id).is_ok();
            prop_assert_eq!(ok, allowed, "token {} allowed={} accepted={}", id, allowed, ok);
            if ok {
                m.rollback(1).unwrap();
            }
        }
    }
}

#[test]
fn padding_and_special_tokens_are_never_allowed() {
    let tok = grammask::TokenizerInfo::from_path(
        common::data_dir().join("tokenizers/llama3_1"),
        &grammask::TokenizerOptions { vocab_size: Some(128_256 + 100), ..Default::default() },
    )
    .unwrap();
    let c = GrammarCompiler::new(Arc::new(tok));
    let mut m = GrammarMatcher::new(c.compile_ebnf("root ::= [^\\x00]*").unwrap());
    let mask = fill(&mut m);
    assert_eq!(mask.len(), (128_256 + 100usize).div_ceil(32));
    let ids = allowed(&mask);
    assert!(ids.iter().all(|&i| i < 128_256), "padding id allowed");
    // <|begin_of_text|> (128000) is special; <|eot_id|> (128009) is the stop token and the
    // empty string is complete, so it is allowed.
    assert!(!ids.contains(&128_000));
    assert!(ids.contains(&128_009));
    assert!(m.accept_token(128_000).is_err());
    assert!(matches!(m.accept_token(128_300), Err(grammask::Error::TokenRejected { .. })));
    assert!(matches!(m.accept_token(128_356), Err(grammask::Error::InvalidTokenId { .. })));
}

/// Histories long enough to be frozen into shared segments: forks and deep rollbacks
/// agree with a fresh matcher replaying the same tokens.
#[test]
fn long_history_fork_and_rollback() {
    let mut rng = Rng(99);
    let mut m = matcher(0);
    // Build a long JSON array of strings so the history spans several segments.
    let tok = m.compiled().tokenizer().clone();
    let text = format!("[{}\"end\"]", (0..300).map(|i| format!("\"item number {i}\", ")).collect::<String>());
    let mut ids = Vec::new();
    for chunk in text.as_bytes().chunks(3) {
        // Byte chunks as tokens: find a token with exactly these bytes, else single bytes.
        match (0..tok.tokenizer_size() as u32).find(|&i| !tok.is_special(i) && tok.token_bytes(i) == chunk) {
            Some(id) => ids.push(id),
            None => ids.extend(chunk.iter().map(|b| {
                (0..tok.tokenizer_size() as u32)
                    .find(|&i| !tok.is_special(i) && tok.token_bytes(i) == [*b])
                    .unwrap()
            })),
        }
    }
    for &id in &ids {
        m.accept_token(id).unwrap();
    }
    assert!(text.len() > 2 * 512, "history too short to freeze");
    let end_mask = fill(&mut m);
    let mut f = m.fork();
    assert_eq!(fill(&mut f), end_mask);
    // Deep rollbacks on the fork, checked against a fresh replay; the original is untouched.
    for _ in 0..6 {
        let back = 1 + rng.below(f.num_steps().min(400));
        f.rollback(back).unwrap();
        let mut fresh = matcher(0);
        for &id in &ids[..f.num_steps()] {
            fresh.accept_token(id).unwrap();
        }
        assert_eq!(fill(&mut f), fill(&mut fresh), "after rolling back to step {}", f.num_steps());
        // Re-advance a little and fork again from the middle.
        let n = f.num_steps();
        for &id in &ids[n..(n + 20).min(ids.len())] {
            f.accept_token(id).unwrap();
        }
        f = f.fork();
    }
    assert_eq!(fill(&mut m), end_mask);
    m.rollback(m.num_steps()).unwrap();
    assert_eq!(fill(&mut m), fill(&mut matcher(0)));
}

/// Replays `tokens` on a fresh matcher of grammar `g` and fills its mask.
fn fresh_mask(g: usize, tokens: &[u32]) -> Vec<u32> {
    let mut fresh = matcher(g);
    for &id in tokens {
        fresh.accept_token(id).unwrap();
    }
    fill(&mut fresh)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// A long-lived matcher (whose last checked mask is remembered across steps,
    /// rollbacks and resets) fills exactly what a fresh matcher fills after the same tokens.
    #[test]
    fn remembered_masks_match_fresh_matchers(g in 0..GRAMMARS, seed in 1..u64::MAX) {
        let mut m = matcher(g);
        let mut rng = Rng(seed);
        let mut tokens: Vec<u32> = Vec::new();
        let stops = m.compiled().tokenizer().stop_tokens().to_vec();
        for _ in 0..40 {
            match rng.below(6) {
                0 if !tokens.is_empty() => {
                    let back = 1 + rng.below(tokens.len().min(5));
                    m.rollback(back).unwrap();
                    tokens.truncate(tokens.len() - back);
                }
                1 if rng.below(4) == 0 => {
                    m.reset();
                    tokens.clear();
                }
                _ => {
                    let ids: Vec<u32> = allowed(&fill(&mut m)).into_iter().filter(|i| !stops.contains(i)).collect();
                    if ids.is_empty() {
                        continue;
                    }
                    let id = ids[rng.below(ids.len())];
                    m.accept_token(id).unwrap();
                    tokens.push(id);
                }
            }
            prop_assert_eq!(fill(&mut m), fresh_mask(g, &tokens), "after {:?}", tokens);
        }
    }
}

/// Inside a string the mask is remembered from the previous step; after a rollback into a
/// different context, the same string state at the same position must not reuse it.
#[test]
fn remembered_masks_follow_the_context_not_the_position() {
    let tok = tokenizer("llama3_1");
    let c = GrammarCompiler::new(tok.clone());
    let g = c
        .compile_ebnf("root ::= \"[\" s \"]!\" | \"{\" s \"}?\"\ns ::= [a-z]* \".\" | \"<\" s \">\"")
        .unwrap();
    let encode = |s: &str| -> Vec<u32> {
        (0..tok.vocab_size() as u32).find(|&id| tok.token_bytes(id) == s.as_bytes()).into_iter().collect()
    };
    let (open_sq, open_br, word) = (encode("["), encode("{"), encode("abc"));
    assert!(open_sq.len() == 1 && open_br.len() == 1 && word.len() == 1);
    let mut m = GrammarMatcher::new(g.clone());
    for id in [open_sq[0], word[0], word[0]] {
        m.accept_token(id).unwrap();
    }
    let square = fill(&mut m);
    m.rollback(3).unwrap();
    for id in [open_br[0], word[0], word[0]] {
        m.accept_token(id).unwrap();
    }
    let brace = fill(&mut m);
    let mut fresh = GrammarMatcher::new(g);
    for id in [open_br[0], word[0], word[0]] {
        fresh.accept_token(id).unwrap();
    }
    assert_eq!(brace, fill(&mut fresh));
    assert_ne!(square, brace, "`]` vs `}}` tokens differ");
}
