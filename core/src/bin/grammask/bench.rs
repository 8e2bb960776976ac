//! `grammask bench`: per-token fill + accept time along a text, time to first mask and
//! cache memory, repeated on fresh compiles.

use crate::stats::summary;
use crate::{load_tokenizer, GrammarArgs};
use clap::Args;
use grammask::{CompileOptions, GrammarCompiler, GrammarMatcher, TokenBitmask};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Args)]
pub struct BenchArgs {
    /// `tokenizer.json` or a folder holding one.
    #[arg(long)]
    tokenizer: PathBuf,
    #[command(flatten)]
    grammar: GrammarArgs,
    /// The text to walk (tokenized without special tokens); must be accepted in full.
    #[arg(long)]
    text_file: PathBuf,
    /// Fresh compiles to repeat the walk on.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Also print the first cold walk token by token (`{"i", "id", "token", "us", "fill_us"}` lines,
    /// before the summary): where the first visits of a grammar's states cost.
    #[arg(long)]
    per_token: bool,
    /// Microseconds a compile may spend precomputing masks beyond what the first fill
    /// needs (`CompileOptions::eager_budget`; default: the library's).
    #[arg(long)]
    eager_budget_us: Option<u64>,
    /// Compile with `CompileOptions::background_precompute`: a thread computes the masks
    /// not computed yet while the walk goes on (see `--step-us`).
    #[arg(long)]
    background: bool,
    /// Compile structural tags in one stage (`CompileOptions::staged` off): the first
    /// mask waits for the tools' argument grammars.
    #[arg(long)]
    unstaged: bool,
    /// Microseconds the cold walk waits (spinning) after each token, as a decode thread
    /// waits on the model's forward pass (0: tokens back to back). Not counted in the
    /// per-token times.
    #[arg(long, default_value_t = 0)]
    step_us: u64,
}

pub fn run(a: &BenchArgs) -> Result<(), String> {
    let text =
        std::fs::read_to_string(&a.text_file).map_err(|e| format!("{}: {e}", a.text_file.display()))?;
    let (tok, info) = load_tokenizer(&a.tokenizer)?;
    let ids = tok.encode(text.as_str(), false).map_err(|e| format!("tokenize: {e}"))?.get_ids().to_vec();
    let info = Arc::new(info);
    let spec = a.grammar.spec()?;
    let (mut compile_us, mut ttfm, mut cold, mut warm, mut fill_warm) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut mem_visited, mut mem_full) = (0, 0);
    for repeat in 0..a.repeats.max(1) {
        // A fresh compiler with no cache: every repeat pays compile and lazy masks again.
        let mut options = CompileOptions::default();
        if let Some(us) = a.eager_budget_us {
            options.eager_budget = std::time::Duration::from_micros(us);
        }
        options.background_precompute = a.background;
        options.staged = !a.unstaged;
        let compiler = GrammarCompiler::with_options(info.clone(), options, 0);
        let mut mask = TokenBitmask::new(1, info.vocab_size());
        let t0 = Instant::now();
        let compiled = compiler.compile(&spec).map_err(|e| e.to_string())?;
        compile_us.push(t0.elapsed().as_secs_f64() * 1e6);
        let mut m = GrammarMatcher::new(compiled.clone());
        m.fill_next_token_bitmask(mask.row_mut(0)).map_err(|e| e.to_string())?;
        ttfm.push(t0.elapsed().as_secs_f64() * 1e6);
        m.reset();
        // Cold pass: masks computed lazily as states are first reached.
        let first = cold.len();
        let mut fills = Vec::new();
        let step = std::time::Duration::from_micros(a.step_us);
        walk(&mut m, &mut mask, &ids, &mut cold, Some(&mut fills), step)?;
        if a.per_token && repeat == 0 {
            for (i, ((&id, us), fill)) in ids.iter().zip(&cold[first..]).zip(&fills).enumerate() {
                let token = tok.decode(&[id], false).unwrap_or_default();
                out!("{}", json!({"i": i, "id": id, "token": token, "us": us, "fill_us": fill}));
            }
        }
        mem_visited = compiled.memory_bytes();
        // Warm pass: the same compiled grammar, every visited state cached.
        m.reset();
        walk(&mut m, &mut mask, &ids, &mut warm, Some(&mut fill_warm), std::time::Duration::ZERO)?;
        // Every state's mask, for the memory figure: after the last repeat only, since no
        // request does this and it would evict the caches (and free megabytes) just
        // before the next repeat's compile, adding ~0.5 ms to its time to first mask.
        if repeat + 1 == a.repeats.max(1) {
            compiled.precompute();
            mem_full = compiled.memory_bytes();
        }
    }
    out!(
        "{}",
        json!({
            "engine": "grammask", "grammar": a.grammar.label(), "tokens": ids.len(), "repeats": a.repeats,
            "background": a.background, "step_us": a.step_us,
            "compile_us": summary(&compile_us),
            "ttfm_us": summary(&ttfm),
            "per_token_us_cold": summary(&cold),
            "per_token_us_warm": summary(&warm),
            "fill_us_warm": summary(&fill_warm),
            "memory_bytes_visited": mem_visited,
            "memory_bytes_all_states": mem_full,
        })
    );
    Ok(())
}

/// Fill + accept for every token, waiting `step` after each; pushes per-token µs. Fails
/// if a token is rejected.
fn walk(
    m: &mut GrammarMatcher,
    mask: &mut TokenBitmask,
    ids: &[u32],
    out: &mut Vec<f64>,
    mut fills: Option<&mut Vec<f64>>,
    step: std::time::Duration,
) -> Result<(), String> {
    for (i, &id) in ids.iter().enumerate() {
        let t0 = Instant::now();
        m.fill_next_token_bitmask(mask.row_mut(0)).map_err(|e| e.to_string())?;
        let t1 = Instant::now();
        m.accept_token(id).map_err(|e| format!("token {i} ({id}): {e}"))?;
        let t2 = Instant::now();
        out.push((t2 - t0).as_secs_f64() * 1e6);
        if let Some(f) = fills.as_deref_mut() {
            f.push((t1 - t0).as_secs_f64() * 1e6);
        }
        if !grammask::bitmask::is_allowed(mask.row(0), id) {
            return Err(format!("token {i} ({id}) was accepted but not in the mask"));
        }
        // Spinning, as a decode thread polling its GPU stream does: a sleep would also
        // let the core idle down and its caches go cold, which is not what a step costs.
        let until = Instant::now() + step;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
    Ok(())
}
