//! `grammask masks`: one JSON line per token of a text.

use crate::{load_tokenizer, GrammarArgs};
use clap::Args;
use grammask::{GrammarCompiler, GrammarMatcher, TokenBitmask};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Args)]
pub struct MasksArgs {
    /// `tokenizer.json` or a folder holding one.
    #[arg(long)]
    tokenizer: PathBuf,
    #[command(flatten)]
    grammar: GrammarArgs,
    /// The text to walk (tokenized without special tokens).
    #[arg(long, conflicts_with = "text_file")]
    text: Option<String>,
    /// A file holding the text.
    #[arg(long)]
    text_file: Option<PathBuf>,
    /// Also print the allowed token ids.
    #[arg(long)]
    ids: bool,
}

pub fn run(a: &MasksArgs) -> Result<(), String> {
    let text = match (&a.text, &a.text_file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?,
        (None, None) => return Err("give --text or --text-file".into()),
    };
    let (tok, info) = load_tokenizer(&a.tokenizer)?;
    let enc = tok.encode(text.as_str(), false).map_err(|e| format!("tokenize: {e}"))?;
    let compiler = GrammarCompiler::new(Arc::new(info));
    let compiled = compiler.compile(&a.grammar.spec()?).map_err(|e| e.to_string())?;
    let vocab = compiled.tokenizer().vocab_size();
    let mut m = GrammarMatcher::new(compiled);
    let mut mask = TokenBitmask::new(1, vocab);
    let mut accepted = true;
    for (i, &id) in enc.get_ids().iter().enumerate() {
        let t0 = Instant::now();
        m.fill_next_token_bitmask(mask.row_mut(0)).map_err(|e| e.to_string())?;
        let fill_us = t0.elapsed().as_secs_f64() * 1e6;
        let mut h = Sha256::new();
        for w in mask.row(0) {
            h.update(w.to_le_bytes());
        }
        let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let mut line = json!({
            "step": i, "token": id, "allowed": mask.count_allowed(0), "sha256": hex,
            "fill_us": (fill_us * 100.0).round() / 100.0,
        });
        if a.ids {
            line["ids"] = json!(mask.allowed_ids(0));
        }
        out!("{line}");
        if m.accept_token(id).is_err() {
            accepted = false;
            break;
        }
    }
    out!("{}", json!({"accepted": accepted, "can_terminate": m.can_terminate()}));
    Ok(())
}
