//! Leaf-rule masks shared between the grammars of one compiler
//! (`CompileOptions::leaf_cache_bytes`): a second grammar with the same leaf rule takes
//! its masks from the first, and only when the bytes that may follow the rule agree too.

use crate::common;
use grammask::{
    CompileOptions, GrammarCompiler, GrammarMatcher, TokenBitmask, TokenizerInfo, TokenizerOptions,
};
use std::sync::Arc;

const VOCAB: &[&str] = &["a", "b", "c", ";", "!", "b;", "b!", "ab", "</s>"];

fn compiler(leaf_cache_bytes: usize) -> GrammarCompiler {
    let vocab: Vec<Vec<u8>> = VOCAB.iter().map(|s| s.as_bytes().to_vec()).collect();
    let opts = TokenizerOptions { stop_tokens: Some(vec![VOCAB.len() as u32 - 1]), ..Default::default() };
    let tok = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap());
    GrammarCompiler::with_options(tok, CompileOptions { leaf_cache_bytes, ..Default::default() }, 0)
}

/// The tokens allowed after `prefix`.
fn allowed(c: &GrammarCompiler, ebnf: &str, prefix: &str) -> Vec<&'static str> {
    let mut m = GrammarMatcher::new(c.compile_ebnf(ebnf).unwrap());
    m.accept_string(prefix).unwrap();
    let mut mask = TokenBitmask::new(1, VOCAB.len());
    m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
    common::allowed(mask.row(0)).into_iter().filter_map(|i| VOCAB.get(i as usize).copied()).collect()
}

// `w` is large and used twice, so it stays a rule: a leaf (it calls no other rule).
const WORD: &str = "w ::= [a-c]{1,60}";

#[test]
fn equal_leaf_rules_share_masks_and_follow_bytes_are_part_of_the_key() {
    let semi = format!("root ::= w \";\" w \";\"\n{WORD}");
    let bang = format!("root ::= w \"!\" w \"!\"\n{WORD}");
    let semi_again = format!("root ::= \"c\" w \";\" w \";\"\n{WORD}");
    let c = compiler(64 << 20);
    assert_eq!(allowed(&c, &semi, "a"), ["a", "b", "c", ";", "b;", "ab"]);
    let (entries, _, hits) = c.shared_mask_stats();
    assert!(entries > 0 && hits == 0, "{:?}", c.shared_mask_stats());
    // Same automaton, other FOLLOW: not shared; `b!` is allowed here, `b;` is not.
    assert_eq!(allowed(&c, &bang, "a"), ["a", "b", "c", "!", "b!", "ab"]);
    assert_eq!(c.shared_mask_stats().2, 0);
    // Same automaton and FOLLOW in another grammar: taken from the cache.
    assert_eq!(allowed(&c, &semi_again, "ca"), ["a", "b", "c", ";", "b;", "ab"]);
    assert!(c.shared_mask_stats().2 > 0, "{:?}", c.shared_mask_stats());
    // Off: nothing is stored.
    let off = compiler(0);
    assert_eq!(allowed(&off, &semi, "a"), ["a", "b", "c", ";", "b;", "ab"]);
    assert_eq!(off.shared_mask_stats(), (0, 0, 0));
}
