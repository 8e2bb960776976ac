//! Cold mask fills, one by one: what a server pays the first time a schema's states are
//! visited (every schema compiled by a fresh compiler, so no mask is computed in advance).
//!
//! Two modes:
//! - `walks TOKENIZER DIR [STEPS]`: a seeded random walk of up to `STEPS` tokens (default
//!   300) under each `{"schema": …}` file of the MaskBench folder `DIR`, timing every fill;
//!   prints the fills over 1 ms (time, allowed tokens, file, the text before) and the
//!   distribution of all of them.
//! - `positions TOKENIZER SCHEMA N [PREFIX]`: after `PREFIX` (default `"`, a string
//!   schema's opening quote), the fill at each of the first `N` positions of a run of `a`s
//!   (a bounded string's chain; `{"` for an object's key).
//!
//! `cargo run --release --example cold_fills -- walks ../shared/data/tokenizers/llama3_1 \
//!     ../shared/data/jsonschemabench/dev/Github_easy`

use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenBitmask, TokenizerInfo, TokenizerOptions};
use std::sync::Arc;
use std::time::Instant;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: cold_fills walks TOKENIZER DIR [STEPS] | positions TOKENIZER SCHEMA N [PREFIX]";
    let (Some(mode), Some(tokenizer), Some(what)) = (args.get(1), args.get(2), args.get(3)) else {
        return Err(usage.into());
    };
    let tok = Arc::new(TokenizerInfo::from_path(tokenizer, &TokenizerOptions::default())?);
    match mode.as_str() {
        "walks" => walks(tok, what, args.get(4).map_or(Ok(300), |s| s.parse())?),
        "positions" => {
            let prefix = args.get(5).map_or("\"", String::as_str);
            positions(tok, what, args.get(4).ok_or(usage)?.parse()?, prefix)
        }
        _ => Err(usage.into()),
    }
}

fn schema_spec(schema: String) -> GrammarSpec {
    GrammarSpec::JsonSchema { schema, options: Default::default() }
}

fn walks(tok: Arc<TokenizerInfo>, dir: &str, steps: usize) -> Result<()> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    let mut fills = Vec::new();
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut mask = TokenBitmask::new(1, tok.vocab_size());
    for file in &files {
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file)?)?;
        let Ok(compiled) = GrammarCompiler::new(tok.clone()).compile(&schema_spec(doc["schema"].to_string()))
        else {
            continue;
        };
        let mut m = GrammarMatcher::new(compiled);
        let mut text = Vec::new();
        for _ in 0..steps {
            let t0 = Instant::now();
            m.fill_next_token_bitmask(mask.row_mut(0))?;
            let us = t0.elapsed().as_secs_f64() * 1e6;
            fills.push(us);
            let row = mask.row(0);
            let ids: Vec<u32> =
                (0..tok.vocab_size() as u32).filter(|&i| row[i as usize / 32] >> (i % 32) & 1 == 1).collect();
            if us > 1000.0 {
                let name = file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
                let tail = String::from_utf8_lossy(&text[text.len().saturating_sub(40)..]).to_string();
                println!("{us:>8.0} µs {:>7} allowed  {name}  after {tail:?}", ids.len());
            }
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let Some(&id) = ids.get((rng % ids.len().max(1) as u64) as usize) else { break };
            if tok.stop_tokens().contains(&id) || m.accept_token(id).is_err() {
                break;
            }
            text.extend_from_slice(tok.token_bytes(id));
        }
    }
    fills.sort_by(f64::total_cmp);
    let at = |q: f64| fills.get(((fills.len().max(1) - 1) as f64 * q) as usize).copied().unwrap_or(0.0);
    let mean = fills.iter().sum::<f64>() / fills.len().max(1) as f64;
    let over = fills.iter().filter(|&&f| f > 1000.0).count();
    println!(
        "fills {} mean {mean:.1} p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.0} µs; over 1 ms: {over}",
        fills.len(),
        at(0.5),
        at(0.99),
        at(0.999),
        at(1.0)
    );
    Ok(())
}

fn positions(tok: Arc<TokenizerInfo>, schema: &str, n: usize, prefix: &str) -> Result<()> {
    let compiled = GrammarCompiler::new(tok.clone()).compile(&schema_spec(schema.to_string()))?;
    let mut m = GrammarMatcher::new(compiled);
    let mut mask = TokenBitmask::new(1, tok.vocab_size());
    m.accept_string(prefix)?;
    let mut line = Vec::new();
    for i in 0..n {
        let t0 = Instant::now();
        m.fill_next_token_bitmask(mask.row_mut(0))?;
        line.push(format!("{i}:{:.0}", t0.elapsed().as_secs_f64() * 1e6));
        if m.accept_string("a").is_err() {
            break;
        }
    }
    println!("µs per position: {}", line.join(" "));
    Ok(())
}
