//! Fuzzes `CompiledGrammar::from_bytes`: arbitrary bytes, and — so that the fuzzer gets
//! past the checksum — edits of a valid grammar's payload with the checksum fixed up.
//! No input may panic; a grammar that loads must fill and accept without panicking.
#![no_main]

use grammask::{CompiledGrammar, GrammarCompiler, GrammarMatcher, TokenBitmask, TokenizerInfo, TokenizerOptions};
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

/// A valid grammar's bytes, with masks of several kinds computed.
fn seed() -> &'static [u8] {
    static SEED: OnceLock<Vec<u8>> = OnceLock::new();
    SEED.get_or_init(|| {
        let c = GrammarCompiler::new(tokenizer());
        let g = c
            .compile_ebnf(r#"root ::= "{" ( "\"" [a-c]{1,4} "\":" ws ("true" | [0-9]+) ) "}"  ws ::= [ \n]*"#)
            .expect("seed grammar");
        g.precompute();
        g.to_bytes()
    })
}

/// Where the payload starts (the header is fixed but for the version string).
fn payload_start(b: &[u8]) -> usize {
    let vlen = u32::from_le_bytes([b[12], b[13], b[14], b[15]]) as usize;
    16 + vlen + 28
}

fn exercise(bytes: &[u8]) {
    let Ok(g) = CompiledGrammar::from_bytes(bytes, tokenizer()) else { return };
    let mut m = GrammarMatcher::new(Arc::new(g));
    let mut mask = TokenBitmask::new(1, m.vocab_size());
    for id in [b'{' as u32, 258, b'a' as u32, 259, 260, b'}' as u32, 263] {
        let _ = m.fill_next_token_bitmask(mask.row_mut(0));
        let _ = m.accept_token(id);
    }
}

fuzz_target!(|data: &[u8]| {
    // Arbitrary bytes.
    exercise(data);
    // The seed with `data` XOR-ed into its payload, checksum fixed.
    let mut b = seed().to_vec();
    let p = payload_start(&b);
    for (i, &x) in data.iter().enumerate() {
        let n = b.len() - p;
        b[p + (i * 7919) % n] ^= x;
    }
    let crc = crc32fast::hash(&b[p..]);
    b[p - 4..p].copy_from_slice(&crc.to_le_bytes());
    exercise(&b);
});
