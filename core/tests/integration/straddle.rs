//! Tokens that straddle the end of a rule: a token that reads part of a rule, then bytes
//! that may follow the rule, is context-dependent, and the mask must still allow it where
//! the context does. The classification depends on every byte where the rule could have
//! ended, not only the last one, which these cases pin down.

use crate::common;
use grammask::{GrammarCompiler, GrammarMatcher, TokenBitmask, TokenizerInfo, TokenizerOptions};
use std::sync::Arc;

const VOCAB: &[&str] = &["a", "b", "c", "d", "!", "(", ")", "ab", "cd", "cd!", "c!", "cd#", "cd)x", "</s>"];

/// `a` is a rule of its own (used twice, too large to copy), so masks of its states
/// classify `cd!` by `a`'s FOLLOW set: `a` may end after `c`, `d` may follow it.
const GRAMMAR: &str = r#"root ::= a [a-z] "!" | "(" a ")"
a ::= [a-z]+ | "0" [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9] [0-9]"#;

fn allowed_after(prefix: &str) -> Vec<&'static str> {
    let vocab: Vec<Vec<u8>> = VOCAB.iter().map(|s| s.as_bytes().to_vec()).collect();
    let opts = TokenizerOptions { stop_tokens: Some(vec![VOCAB.len() as u32 - 1]), ..Default::default() };
    let tok = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap());
    let compiled = GrammarCompiler::new(tok).compile_ebnf(GRAMMAR).unwrap();
    assert!(compiled.automata().grammar().rules.len() >= 2, "`a` must stay a rule");
    let mut m = GrammarMatcher::new(compiled);
    m.accept_string(prefix).unwrap();
    let mut mask = TokenBitmask::new(1, VOCAB.len());
    m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
    common::allowed(mask.row(0)).into_iter().filter_map(|i| VOCAB.get(i as usize).copied()).collect()
}

#[test]
fn tokens_ending_past_an_earlier_possible_end_are_allowed_in_context() {
    // After "ab" (inside `a`): "cd!" is a = "abc", [a-z] = "d", "!"; "c!" is a = "ab",
    // [a-z] = "c", "!"; "!" is a = "a", [a-z] = "b"; "cd#" and "cd)x" have no reading.
    // ("cd!" dies in `a` at "!", but `a` could have ended after "c" and "d" may follow
    // it: "cd!" is context-dependent, not rejected; "cd#" is its dead sibling.)
    let got = allowed_after("ab");
    for t in ["a", "b", "c", "d", "ab", "cd", "cd!", "c!"] {
        assert!(got.contains(&t), "{t:?} must be allowed after \"ab\": {got:?}");
    }
    for t in [")", "cd#", "cd)x", "(", "</s>"] {
        assert!(!got.contains(&t), "{t:?} must not be allowed after \"ab\": {got:?}");
    }
    // In the other context the same rule state allows ")" and "cd)", not "cd!" or "c!".
    let got = allowed_after("(ab");
    for t in [")", "cd"] {
        assert!(got.contains(&t), "{t:?} must be allowed after \"(ab\": {got:?}");
    }
    for t in ["cd!", "c!", "!", "cd)x", "cd#"] {
        assert!(!got.contains(&t), "{t:?} must not be allowed after \"(ab\": {got:?}");
    }
}
