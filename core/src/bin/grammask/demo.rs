//! `grammask demo`: generate a document by sampling random logits under the mask.

use crate::stats::summary;
use crate::{embedded, GrammarArgs};
use clap::Args;
use grammask::{GrammarCompiler, GrammarMatcher, TokenBitmask, TokenizerInfo, TokenizerOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Args)]
pub struct DemoArgs {
    /// `tokenizer.json` or a folder holding one (default: the embedded Qwen3 tokenizer).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    #[command(flatten)]
    grammar: GrammarArgs,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Tokens to sample freely before steering towards the end.
    #[arg(long, default_value_t = 120)]
    max_tokens: usize,
}

struct Rng(u64);
impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
}

pub fn run(a: &DemoArgs) -> Result<(), String> {
    let t0 = Instant::now();
    let (info, source) = match &a.tokenizer {
        Some(p) => (
            TokenizerInfo::from_path(p, &TokenizerOptions::default()).map_err(|e| e.to_string())?,
            p.display().to_string(),
        ),
        None => {
            let (json, config) = embedded::qwen3()?;
            let info = TokenizerInfo::from_json_bytes(&json, Some(config), &TokenizerOptions::default())
                .map_err(|e| e.to_string())?;
            (info, "embedded Qwen3 tokenizer".to_string())
        }
    };
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let vocab = info.vocab_size();
    let compiler = GrammarCompiler::new(Arc::new(info));
    let t1 = Instant::now();
    let compiled = compiler.compile(&a.grammar.spec()?).map_err(|e| e.to_string())?;
    let compile_us = t1.elapsed().as_secs_f64() * 1e6;
    let tok = compiled.tokenizer().clone();
    let mut m = GrammarMatcher::new(compiled.clone());
    let mut mask = TokenBitmask::new(1, vocab);

    // Readability bias: short printable ASCII tokens; closing bias: tokens that end
    // structures (and the stop tokens) once the free budget is spent.
    let readable: Vec<bool> = (0..vocab as u32)
        .map(|i| {
            let b = tok.token_bytes(i);
            !b.is_empty()
                && b.len() <= 6
                && b.iter().all(|c| c.is_ascii_alphanumeric() || b"{}[]\",:._-".contains(c))
        })
        .collect();
    let closing: Vec<bool> = (0..vocab as u32)
        .map(|i| {
            let b = tok.token_bytes(i);
            tok.stop_tokens().contains(&i) || (!b.is_empty() && b.iter().all(|c| b"\"}]0".contains(c)))
        })
        .collect();

    let mut rng = Rng(a.seed.max(1));
    let mut logits = vec![0f32; vocab];
    let mut out = Vec::new();
    let mut rows = Vec::new();
    let hard_cap = a.max_tokens * 4 + 100;
    while !m.is_terminated() && rows.len() < hard_cap {
        let t = Instant::now();
        m.fill_next_token_bitmask(mask.row_mut(0)).map_err(|e| e.to_string())?;
        let fill_us = t.elapsed().as_secs_f64() * 1e6;
        let steer = rows.len() >= a.max_tokens;
        for (i, l) in logits.iter_mut().enumerate() {
            let mut bias = if readable[i] { 2.0 } else { 0.0 };
            if steer && closing[i] {
                bias += 50.0;
            } else if !steer && tok.stop_tokens().contains(&(i as u32)) {
                bias -= 50.0; // keep going until the budget is spent
            }
            if rows.is_empty() && tok.token_bytes(i as u32).first() == Some(&b'{') {
                bias += 10.0; // start with an object: a more interesting document
            }
            *l = rng.next_f32() + bias;
        }
        mask.apply(&mut logits, vocab, None).map_err(|e| e.to_string())?;
        let id = (0..vocab).max_by(|&x, &y| logits[x].total_cmp(&logits[y])).unwrap_or(0) as u32;
        let t = Instant::now();
        m.accept_token(id).map_err(|e| format!("sampled token {id} was rejected: {e}"))?;
        let accept_us = t.elapsed().as_secs_f64() * 1e6;
        rows.push((id, mask.count_allowed(0), fill_us, accept_us));
        if !tok.stop_tokens().contains(&id) {
            out.extend_from_slice(tok.token_bytes(id));
        }
    }
    out!(
        "grammask demo: {} against the {source} ({vocab} ids; loaded in {load_ms:.0} ms)",
        a.grammar.label()
    );
    out!("compile: {compile_us:.0} µs (automata only; token masks are computed lazily per state)\n");
    out!("{:>5} {:>9} {:>9} {:>8}  token", "step", "fill_µs", "accept_µs", "allowed");
    for (i, (id, allowed, f, acc)) in rows.iter().enumerate() {
        let text = if tok.stop_tokens().contains(id) {
            "<stop>".to_string()
        } else {
            format!("{:?}", String::from_utf8_lossy(tok.token_bytes(*id)))
        };
        out!("{i:>5} {f:>9.1} {acc:>9.1} {allowed:>8}  {text}");
    }
    let fills: Vec<f64> = rows.iter().map(|r| r.2).collect();
    out!(
        "\ngenerated document ({} tokens, terminated: {}):\n{}\n",
        rows.len(),
        m.is_terminated(),
        String::from_utf8_lossy(&out)
    );
    out!(
        "time to first mask: {:.0} µs; fill µs over all steps: {}",
        compile_us + fills.first().copied().unwrap_or(0.0),
        summary(&fills)
    );
    let (done, total) = compiled.mask_stats();
    out!("mask cache: {done} of {total} states computed, {} KiB", compiled.memory_bytes() / 1024);
    out!("\nTry: grammask demo --tokenizer path/to/tokenizer.json --grammar my.gbnf");
    out!("     grammask masks --tokenizer path/to/tokenizer.json --builtin-json --text '{{\"a\": 1}}'");
    if !m.is_terminated() {
        return Err(format!("no stop token within {hard_cap} tokens"));
    }
    Ok(())
}
