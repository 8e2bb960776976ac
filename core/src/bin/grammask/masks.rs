//! `grammask masks`: one JSON line per token of a text.

use crate::{load_tokenizer, GrammarArgs};
use clap::Args;
use grammask::matcher::DraftTree;
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
    #[arg(long, conflicts_with_all = ["text_file", "token_ids"])]
    text: Option<String>,
    /// A file holding the text.
    #[arg(long, conflicts_with = "token_ids")]
    text_file: Option<PathBuf>,
    /// A file holding a JSON array of token ids to walk, accepted as given (special
    /// tokens included) instead of a text: the output of a model, exactly.
    #[arg(long)]
    token_ids: Option<PathBuf>,
    /// Also print the allowed token ids.
    #[arg(long)]
    ids: bool,
    /// A draft tree, JSON `{"tokens": [...], "parents": [...]}` (node 0 the root, token
    /// and parent -1): after the text (if any), one line per node with the mask after
    /// the node's path, in node order.
    #[arg(long)]
    draft_tree: Option<PathBuf>,
}

/// The tree in `path`.
fn read_tree(path: &PathBuf) -> Result<DraftTree, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let list = |k: &str| -> Result<Vec<i64>, String> {
        v.get(k)
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| format!("{}: `{k}` must be an array of integers", path.display()))?
            .iter()
            .map(|x| {
                x.as_i64().ok_or_else(|| format!("{}: `{k}` must be an array of integers", path.display()))
            })
            .collect()
    };
    DraftTree::from_parents(&list("tokens")?, &list("parents")?)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// `line` with `"allowed"`, `"sha256"` (and `"ids"`) of mask row `r` appended.
fn with_row(mut line: serde_json::Value, mask: &TokenBitmask, r: usize, ids: bool) -> serde_json::Value {
    let mut h = Sha256::new();
    for w in mask.row(r) {
        h.update(w.to_le_bytes());
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    line["allowed"] = json!(mask.count_allowed(r));
    line["sha256"] = json!(hex);
    if ids {
        line["ids"] = json!(mask.allowed_ids(r));
    }
    line
}

/// The ids in `path`: a JSON array of non-negative integers.
fn read_ids(path: &PathBuf) -> Result<Vec<u32>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |i: usize| format!("{}: /{i}: a token id must be an integer in 0..2^32", path.display());
    v.as_array()
        .ok_or_else(|| format!("{}: must be a JSON array of token ids", path.display()))?
        .iter()
        .enumerate()
        .map(|(i, x)| x.as_u64().and_then(|x| u32::try_from(x).ok()).ok_or_else(|| bad(i)))
        .collect()
}

pub fn run(a: &MasksArgs) -> Result<(), String> {
    let text = match (&a.text, &a.text_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(f)) => Some(std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?),
        (None, None) if a.draft_tree.is_some() || a.token_ids.is_some() => None,
        (None, None) => return Err("give --text, --text-file or --token-ids".into()),
    };
    let tree = a.draft_tree.as_ref().map(read_tree).transpose()?;
    let (tok, info) = load_tokenizer(&a.tokenizer)?;
    let ids = match (&a.token_ids, text) {
        (Some(f), _) => read_ids(f)?,
        (None, Some(t)) => {
            tok.encode(t.as_str(), false).map_err(|e| format!("tokenize: {e}"))?.get_ids().to_vec()
        }
        (None, None) => Vec::new(),
    };
    let compiler = GrammarCompiler::new(Arc::new(info));
    let compiled = compiler.compile(&a.grammar.spec()?).map_err(|e| e.to_string())?;
    let vocab = compiled.tokenizer().vocab_size();
    let mut m = GrammarMatcher::new(compiled);
    let mut mask = TokenBitmask::new(1, vocab);
    let mut accepted = true;
    for (i, &id) in ids.iter().enumerate() {
        let t0 = Instant::now();
        m.fill_next_token_bitmask(mask.row_mut(0)).map_err(|e| e.to_string())?;
        let fill_us = t0.elapsed().as_secs_f64() * 1e6;
        let mut line = with_row(json!({"step": i, "token": id}), &mask, 0, a.ids);
        line["fill_us"] = json!((fill_us * 100.0).round() / 100.0);
        out!("{line}");
        if m.accept_token(id).is_err() {
            accepted = false;
            break;
        }
    }
    if let (Some(tree), true) = (&tree, accepted) {
        let mut rows = TokenBitmask::new(tree.len(), vocab);
        m.fill_draft_tree_bitmasks(tree, &mut rows, 0).map_err(|e| e.to_string())?;
        for v in 0..tree.len() {
            out!("{}", with_row(json!({"node": v}), &rows, v, a.ids));
        }
    }
    out!("{}", json!({"accepted": accepted, "can_terminate": m.can_terminate()}));
    Ok(())
}
