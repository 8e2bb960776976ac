//! Fuzzes the EBNF parser and, when a grammar parses, the whole compile pipeline on a toy
//! vocabulary: no input may panic, hang or exhaust memory.
#![no_main]

use grammask::grammar::{parse_ebnf_bytes, ParseLimits};
use grammask::{CompileOptions, CompiledGrammar, GrammarMatcher, TokenizerInfo, TokenizerOptions};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

fn tokenizer() -> Arc<TokenizerInfo> {
    static TOK: OnceLock<Arc<TokenizerInfo>> = OnceLock::new();
    TOK.get_or_init(|| {
        let mut vocab: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
        for s in ["ab", "abc", "{\"", "\":", "true", "  ", "\n", "<eos>"] {
            vocab.push(s.as_bytes().to_vec());
        }
        let stop = vocab.len() as u32 - 1;
        let opts = TokenizerOptions { stop_tokens: Some(vec![stop]), ..Default::default() };
        Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).expect("toy vocabulary"))
    })
    .clone()
}

fuzz_target!(|data: &[u8]| {
    let limits = ParseLimits { max_nesting: 50, max_repeat: 100 };
    let Ok(grammar) = parse_ebnf_bytes(data, "root", &limits) else { return };
    let mut options = CompileOptions::default();
    options.automata.max_nfa_states = 20_000;
    options.automata.max_dfa_states = 5_000;
    let Ok(compiled) = CompiledGrammar::new(&grammar, tokenizer(), &options) else { return };
    let mut m = GrammarMatcher::new(Arc::new(compiled));
    let mut row = vec![0u32; m.vocab_size().div_ceil(32)];
    for step in 0..8 {
        if m.fill_next_token_bitmask(&mut row).is_err() {
            return;
        }
        let Some(id) = (0..m.vocab_size() as u32)
            .find(|&i| row[i as usize / 32] >> (i % 32) & 1 == 1 && (i as usize + step) % 3 == 0)
            .or_else(|| (0..m.vocab_size() as u32).find(|&i| row[i as usize / 32] >> (i % 32) & 1 == 1))
        else {
            return;
        };
        assert!(m.accept_token(id).is_ok(), "an allowed token was rejected");
    }
    let _ = m.find_jump_forward_string();
});
