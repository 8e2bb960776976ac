//! `grammask serving`: time the serving primitives on real schemas and texts — draft-tree
//! masks against per-node fills, batch fill against one thread, and compiled-grammar
//! bytes against a fresh compile. Prints Markdown tables (and JSON lines with `--json`).

use crate::load_tokenizer;
use crate::stats::summary;
use clap::Args;
use grammask::batch::BatchFiller;
use grammask::json_schema::{to_python_json, Whitespace};
use grammask::matcher::DraftTree;
use grammask::{CompileOptions, CompiledGrammar, GrammarCompiler, GrammarMatcher, GrammarSpec, TokenBitmask};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Args)]
pub struct ServingArgs {
    /// `tokenizer.json` or a folder holding one.
    #[arg(long)]
    tokenizer: PathBuf,
    /// MaskBench files (schema + instances); the builtin JSON grammar with
    /// `benches/texts/json.txt` is always the first case when `--json-text` is given.
    files: Vec<PathBuf>,
    /// A JSON text for the builtin JSON grammar case.
    #[arg(long)]
    json_text: Option<PathBuf>,
    /// What to time.
    #[arg(long, value_enum, default_value = "all")]
    what: What,
    /// Repeats per measurement (medians are reported).
    #[arg(long, default_value_t = 9)]
    repeats: usize,
    /// Also print one JSON line per measurement.
    #[arg(long)]
    json: bool,
    /// Write each timed draft tree as JSON (`{case, spec, prefix, tokens, parents}`) to
    /// this file, one per line, so that peers can be timed on the very same trees.
    #[arg(long)]
    dump_trees: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum What {
    All,
    Tree,
    Batch,
    Serialize,
}

struct Case {
    name: String,
    spec: GrammarSpec,
    ids: Vec<u32>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// xorshift64*: the trees are the same on every run.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545F4914F6CDD1D) % n.max(1) as u64) as usize
    }
}

pub fn run(a: &ServingArgs) -> Result<(), String> {
    let (tok, info) = load_tokenizer(&a.tokenizer)?;
    let info = Arc::new(info);
    let mut cases = Vec::new();
    if let Some(p) = &a.json_text {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let ids = tok.encode(text.as_str(), false).map_err(|e| e.to_string())?.get_ids().to_vec();
        cases.push(Case { name: "builtin-json".into(), spec: GrammarSpec::BuiltinJson, ids });
    }
    for f in &a.files {
        let doc: Value = std::fs::read(f)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            .map_err(|e| format!("{}: {e}", f.display()))?;
        let text = doc["tests"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["valid"] == true))
            .map(|t| to_python_json(&t["data"], Whitespace::Compact))
            .ok_or_else(|| format!("{}: no valid instance", f.display()))?;
        let ids = tok.encode(text.as_str(), false).map_err(|e| e.to_string())?.get_ids().to_vec();
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        cases.push(Case { name, spec: GrammarSpec::json_schema(doc["schema"].to_string()), ids });
    }
    let compiler = GrammarCompiler::new(info.clone());
    let compiled: Vec<Arc<CompiledGrammar>> = cases
        .iter()
        .map(|c| compiler.compile(&c.spec).map_err(|e| format!("{}: {e}", c.name)))
        .collect::<Result<_, _>>()?;
    for (c, g) in cases.iter().zip(&compiled) {
        let mut m = GrammarMatcher::new(g.clone());
        m.accept_tokens(&c.ids).map_err(|e| format!("{}: the text is rejected: {e}", c.name))?;
    }
    if matches!(a.what, What::All | What::Tree) {
        trees(a, &cases, &compiled)?;
    }
    if matches!(a.what, What::All | What::Batch) {
        batch(a, &cases, &compiled)?;
    }
    if matches!(a.what, What::All | What::Serialize) {
        serialize(a, &cases, &info)?;
    }
    Ok(())
}

/// A 64-node tree of depth ≤ 6 at the matcher's state: the text's next tokens as its
/// spine, and at each node up to 3 other allowed tokens (a draft model's alternatives).
fn grow_tree(m: &mut GrammarMatcher, next: &[u32], rng: &mut Rng) -> DraftTree {
    let vocab = m.vocab_size();
    let mut mask = TokenBitmask::new(1, vocab);
    let (mut tokens, mut parents, mut depth) = (vec![-1i64], vec![-1i64], vec![0usize]);
    let mut path_of: Vec<Vec<u32>> = vec![Vec::new()];
    let mut frontier = 0;
    while tokens.len() < 64 && frontier < tokens.len() {
        let v = frontier;
        frontier += 1;
        if depth[v] >= 6 {
            continue;
        }
        let path = path_of[v].clone();
        let on_spine = path.len() < next.len() && next[..path.len()] == path[..];
        if m.accept_tokens(&path).is_err() {
            continue;
        }
        let _ = m.fill_next_token_bitmask(mask.row_mut(0));
        m.rollback(path.len()).map_err(|e| e.to_string()).ok();
        let allowed = mask.allowed_ids(0);
        let mut kids: Vec<u32> = Vec::new();
        if on_spine {
            kids.push(next[path.len()]);
        }
        for _ in 0..8 {
            if kids.len() >= 3 || allowed.is_empty() {
                break;
            }
            let t = allowed[rng.below(allowed.len())];
            if !kids.contains(&t) {
                kids.push(t);
            }
        }
        for t in kids {
            if tokens.len() >= 64 {
                break;
            }
            tokens.push(t as i64);
            parents.push(v as i64);
            depth.push(depth[v] + 1);
            let mut p = path.clone();
            p.push(t);
            path_of.push(p);
        }
    }
    DraftTree::from_parents(&tokens, &parents).expect("a tree grown from its root is valid")
}

fn trees(a: &ServingArgs, cases: &[Case], compiled: &[Arc<CompiledGrammar>]) -> Result<(), String> {
    let mut dump = Vec::new();
    out!("\n| case | positions | nodes | tree fill µs (median) | 64 per-node fills µs (median) | ratio |");
    out!("|---|---|---|---|---|---|");
    let mut rng = Rng(0x5EED_7EE5);
    for (c, g) in cases.iter().zip(compiled) {
        let (mut tree_us, mut naive_us, mut nodes) = (Vec::new(), Vec::new(), 0);
        // Per tree: median µs of the tree fill and of the per-node fills.
        let mut per_tree: Vec<(f64, f64)> = Vec::new();
        let positions: Vec<usize> = (1..=4).map(|k| c.ids.len() * k / 5).collect();
        for &p in &positions {
            let mut m = GrammarMatcher::new(g.clone());
            m.accept_tokens(&c.ids[..p]).map_err(|e| e.to_string())?;
            let tree = grow_tree(&mut m, &c.ids[p..], &mut rng);
            nodes = tree.len();
            if a.dump_trees.is_some() {
                let spec = match &c.spec {
                    GrammarSpec::JsonSchema { schema, .. } => json!({"json_schema": schema}),
                    _ => json!("builtin-json"),
                };
                let tokens: Vec<i64> = (0..tree.len()).map(|v| tree.token(v).map_or(-1, i64::from)).collect();
                let parents: Vec<i64> =
                    (0..tree.len()).map(|v| tree.parent(v).map_or(-1, |p| p as i64)).collect();
                dump.push(json!({"case": c.name, "spec": spec, "prefix": &c.ids[..p], "tokens": tokens, "parents": parents}).to_string());
            }
            let mut mask = TokenBitmask::new(tree.len(), m.vocab_size());
            // Warm: every state of the tree has its mask cached (the steady state).
            m.fill_draft_tree_bitmasks(&tree, &mut mask, 0).map_err(|e| e.to_string())?;
            let paths: Vec<Vec<u32>> = (0..tree.len())
                .map(|v| {
                    let mut path = Vec::new();
                    let mut u = v;
                    while let Some(p) = tree.parent(u) {
                        path.push(tree.token(u).unwrap_or(0));
                        u = p;
                    }
                    path.reverse();
                    path
                })
                .collect();
            let (mut this_tree, mut this_naive) = (Vec::new(), Vec::new());
            for _ in 0..a.repeats {
                let t = Instant::now();
                m.fill_draft_tree_bitmasks(&tree, &mut mask, 0).map_err(|e| e.to_string())?;
                this_tree.push(us(t));
                // The same rows one node at a time: a fork fed the node's whole path.
                let t = Instant::now();
                for (v, path) in paths.iter().enumerate() {
                    let mut f = m.fork();
                    if path.iter().all(|&id| f.accept_token(id).is_ok()) {
                        let _ = f.fill_next_token_bitmask(mask.row_mut(v));
                    }
                }
                this_naive.push(us(t));
            }
            tree_us.extend(&this_tree);
            naive_us.extend(&this_naive);
            per_tree.push((median(&mut this_tree), median(&mut this_naive)));
        }
        let (t, n) = (median(&mut tree_us), median(&mut naive_us));
        out!("| {} | {} | {nodes} | {t:.1} | {n:.1} | {:.2} |", c.name, positions.len(), t / n);
        if a.json {
            let trees: Vec<f64> = per_tree.iter().map(|p| (p.0 * 10.0).round() / 10.0).collect();
            let nodes: Vec<f64> = per_tree.iter().map(|p| (p.1 * 10.0).round() / 10.0).collect();
            out!(
                "{}",
                json!({"bench": "tree", "case": c.name, "tree_us": t, "per_node_us": n,
                       "tree_medians_us": trees, "per_node_medians_us": nodes})
            );
        }
    }
    if let Some(p) = &a.dump_trees {
        std::fs::write(p, dump.join("\n") + "\n").map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

fn batch(a: &ServingArgs, cases: &[Case], compiled: &[Arc<CompiledGrammar>]) -> Result<(), String> {
    let vocab = compiled.first().map_or(0, |g| g.tokenizer().vocab_size());
    // Every state along the texts gets its mask first: each configuration is timed warm,
    // whichever runs first.
    for (c, g) in cases.iter().zip(compiled) {
        let mut m = GrammarMatcher::new(g.clone());
        let mut mask = TokenBitmask::new(1, vocab);
        for &id in &c.ids {
            let _ = m.fill_next_token_bitmask(mask.row_mut(0));
            let _ = m.accept_token(id);
        }
    }
    out!("\n| batch | threads | fill per step µs p50 | p90 | p99 | speed-up over 1 thread (p50) |");
    out!("|---|---|---|---|---|---|");
    for b in [1usize, 8, 32, 128] {
        let mut base = 0.0;
        for threads in [1usize, 2] {
            let mut filler = BatchFiller::with_threads(threads).map_err(|e| e.to_string())?;
            let mut rows: Vec<(GrammarMatcher, usize, usize)> = (0..b)
                .map(|i| {
                    let k = i % cases.len();
                    (GrammarMatcher::new(compiled[k].clone()), k, (i * 13) % cases[k].ids.len().max(1))
                })
                .collect();
            for (m, k, at) in rows.iter_mut() {
                let _ = m.accept_tokens(&cases[*k].ids[..*at]);
            }
            let indices: Vec<usize> = (0..b).collect();
            let mut mask = TokenBitmask::new(b, vocab);
            let mut times = Vec::new();
            for step in 0..1000 {
                let mut ms: Vec<&mut GrammarMatcher> = rows.iter_mut().map(|r| &mut r.0).collect();
                let t = Instant::now();
                filler.fill::<GrammarMatcher, _>(&mut ms, &mut mask, &indices).map_err(|e| e.to_string())?;
                // Steady state: timed from step 100.
                if step >= 100 {
                    times.push(us(t));
                }
                for (m, k, at) in rows.iter_mut() {
                    let ids = &cases[*k].ids;
                    if *at >= ids.len() {
                        m.reset();
                        *at = 0;
                    }
                    let _ = m.accept_token(ids[*at]);
                    *at += 1;
                }
            }
            let s = summary(&times);
            let p50 = s["p50"].as_f64().unwrap_or(0.0);
            if threads == 1 {
                base = p50;
            }
            out!(
                "| {b} | {threads} | {p50:.1} | {:.1} | {:.1} | {:.2} |",
                s["p90"].as_f64().unwrap_or(0.0),
                s["p99"].as_f64().unwrap_or(0.0),
                base / p50.max(1e-9)
            );
            if a.json {
                out!("{}", json!({"bench": "batch", "batch": b, "threads": threads, "fill_us": s}));
            }
        }
    }
    Ok(())
}

fn serialize(a: &ServingArgs, cases: &[Case], info: &Arc<grammask::TokenizerInfo>) -> Result<(), String> {
    out!("\n| case | compile µs | bytes after the text | load µs | bytes, all states | load µs, all states | compile + precompute µs |");
    out!("|---|---|---|---|---|---|---|");
    for c in cases {
        let (mut compile, mut load, mut load_full, mut pre) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut walked_bytes, mut full_bytes) = (0, 0);
        for _ in 0..a.repeats {
            let compiler = GrammarCompiler::with_options(info.clone(), CompileOptions::default(), 0);
            let t = Instant::now();
            let g = compiler.compile(&c.spec).map_err(|e| e.to_string())?;
            compile.push(us(t));
            GrammarMatcher::new(g.clone()).accept_tokens(&c.ids).map_err(|e| e.to_string())?;
            let mut m = GrammarMatcher::new(g.clone());
            let mut mask = TokenBitmask::new(1, info.vocab_size());
            for &id in &c.ids {
                let _ = m.fill_next_token_bitmask(mask.row_mut(0));
                let _ = m.accept_token(id);
            }
            let bytes = g.to_bytes();
            walked_bytes = bytes.len();
            let t = Instant::now();
            CompiledGrammar::from_bytes(&bytes, info.clone()).map_err(|e| e.to_string())?;
            load.push(us(t));
            let t = Instant::now();
            g.precompute();
            pre.push(us(t) + compile.last().copied().unwrap_or(0.0));
            let bytes = g.to_bytes();
            full_bytes = bytes.len();
            let t = Instant::now();
            CompiledGrammar::from_bytes(&bytes, info.clone()).map_err(|e| e.to_string())?;
            load_full.push(us(t));
        }
        let (cm, l, lf, p) =
            (median(&mut compile), median(&mut load), median(&mut load_full), median(&mut pre));
        out!("| {} | {cm:.0} | {walked_bytes} | {l:.0} | {full_bytes} | {lf:.0} | {p:.0} |", c.name);
        if a.json {
            out!(
                "{}",
                json!({"bench": "serialize", "case": c.name, "compile_us": cm, "walked_bytes": walked_bytes,
                       "load_us": l, "full_bytes": full_bytes, "load_full_us": lf, "compile_precompute_us": p})
            );
        }
    }
    Ok(())
}
