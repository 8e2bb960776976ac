//! A complete constrained decode loop through the engine-agnostic `LogitsConstraint` trait:
//! fill the mask, apply it to (random) logits, sample, accept, use jump-forward for forced
//! text, and roll back a speculative token.
//!
//! `cargo run --release --example decode_loop -- path/to/tokenizer.json [grammar.gbnf]`
//! (defaults: `../shared/data/tokenizers/llama3_1`, the builtin JSON grammar).

use grammask::{
    GrammarCompiler, GrammarMatcher, GrammarSpec, LogitsConstraint, TokenBitmask, TokenizerInfo,
    TokenizerOptions,
};
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let tokenizer = args.get(1).map_or("../shared/data/tokenizers/llama3_1", String::as_str);
    let spec = match args.get(2) {
        Some(path) => GrammarSpec::ebnf(std::fs::read_to_string(path)?),
        None => GrammarSpec::BuiltinJson,
    };
    let info = Arc::new(TokenizerInfo::from_path(tokenizer, &TokenizerOptions::default())?);
    let compiler = GrammarCompiler::new(info.clone());
    let mut constraint = GrammarMatcher::compile(&compiler, &spec)?;

    let vocab = constraint.vocab_size();
    let mut mask = TokenBitmask::new(1, vocab);
    let mut logits = vec![0f32; vocab];
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut out = Vec::new();
    let mut steps = 0;
    while !constraint.is_terminated() && steps < 400 {
        steps += 1;
        // Forced bytes need no forward pass.
        let forced = constraint.find_jump_forward_string();
        if !forced.is_empty() {
            constraint.accept_bytes(&forced)?;
            out.extend_from_slice(&forced);
            continue;
        }
        constraint.fill_next_token_bitmask(mask.row_mut(0))?;
        for (i, l) in logits.iter_mut().enumerate() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // Prefer stopping once the output is long enough.
            let stop_bias = if steps > 40 && info.stop_tokens().contains(&(i as u32)) { 100.0 } else { 0.0 };
            let b = info.token_bytes(i as u32);
            let short_bias = if b.len() <= 3 && !b.iter().any(u8::is_ascii_whitespace) { 1.0 } else { 0.0 };
            *l = (seed >> 40) as f32 / (1u64 << 24) as f32 + stop_bias + short_bias;
        }
        mask.apply(&mut logits, vocab, None)?;
        let token = (0..vocab).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap_or(0) as u32;

        // Speculation: accept, roll back, accept again — the state is the same.
        constraint.accept_token(token)?;
        constraint.rollback(1)?;
        constraint.accept_token(token)?;
        if !info.stop_tokens().contains(&token) {
            out.extend_from_slice(constraint.token_bytes(token));
        }
    }
    println!("{}", String::from_utf8_lossy(&out));
    println!("terminated: {} after {steps} steps", constraint.is_terminated());
    Ok(())
}
