//! Times compiling a grammar and precomputing every state's token mask (the eager,
//! XGrammar-style compile) on the current rayon pool.
//!
//! `RAYON_NUM_THREADS=1 cargo run --release --example precompute -- TOKENIZER GRAMMAR.gbnf`
//! (a `.json` file is read as a structural tag: a tool-calling preset's, say).
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(tok), Some(grammar)) = (args.get(1), args.get(2)) else {
        return Err("usage: precompute TOKENIZER GRAMMAR.gbnf|TAG.json".into());
    };
    let tok = grammask::TokenizerInfo::from_path(tok, &Default::default())?;
    let text = std::fs::read_to_string(grammar)?;
    let spec = if grammar.ends_with(".json") {
        grammask::GrammarSpec::StructuralTag(text)
    } else {
        grammask::GrammarSpec::ebnf(&text)
    };
    let compiler = grammask::GrammarCompiler::with_options(Arc::new(tok), Default::default(), 0);
    let mut times = Vec::new();
    let mut memory = 0;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let g = compiler.compile(&spec)?;
        g.precompute();
        times.push(t.elapsed());
        memory = g.memory_bytes();
    }
    times.sort();
    println!(
        "compile + precompute all states: median {:?} (min {:?}); {} KiB",
        times[2],
        times[0],
        memory / 1024
    );
    Ok(())
}
