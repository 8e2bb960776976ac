//! `grammask maskbench`: the MaskBench protocol over JSON-Schema test files.
//!
//! Per file: time to first mask = compile + matcher creation (the first fill is a mask
//! like any other). Per test: a fresh matcher; tokens = the tokenizer's encoding (no
//! special tokens) of the instance written as Python's `json.dumps(data,
//! ensure_ascii=False)`; for each token, fill + accept timed together, stopping at the first
//! rejected token; an instance is accepted when every token is and a stop token is then
//! allowed. Valid instances must be accepted, invalid ones rejected somewhere.

use crate::load_tokenizer;
use crate::stats::summary;
use clap::Args;
use grammask::json_schema::{to_python_json, JsonSchemaOptions, PropertyOrder, Whitespace};
use grammask::{CompileOptions, GrammarCompiler, GrammarMatcher, GrammarSpec, TokenBitmask};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[derive(Args)]
pub struct MaskbenchArgs {
    /// `tokenizer.json` or a folder holding one.
    #[arg(long)]
    tokenizer: PathBuf,
    /// At most this many files (in sorted path order).
    #[arg(long)]
    limit: Option<usize>,
    /// Files processed in parallel (each file single-threaded).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Write one JSON line per file, with the reason for every failure, to stderr (in
    /// strict mode, whether each rejected valid instance is accepted with strict mode off:
    /// rejected for its undeclared properties), then a line of totals.
    #[arg(long)]
    per_file: bool,
    /// Allow properties the schema is silent about (JSON Schema's default; turns off
    /// strict mode).
    #[arg(long)]
    allow_extra_properties: bool,
    /// Approximate keywords that are not enforced (with a warning) instead of failing.
    #[arg(long)]
    lenient: bool,
    /// Object members in the schema's order only (as XGrammar and llguidance generate)
    /// instead of any order.
    #[arg(long)]
    schema_order: bool,
    /// Compile every file as if it were the first: no leaf-rule masks shared between
    /// files (by default one compiler serves all files, as in a server, with its
    /// compile cache off so that every schema is compiled).
    #[arg(long)]
    no_shared_masks: bool,
    /// Microseconds a compile may spend precomputing masks beyond what the first fill
    /// needs (`CompileOptions::eager_budget`; default: the library's).
    #[arg(long)]
    eager_budget_us: Option<u64>,
    /// Work units a compile may spend (`CompileOptions::work_limit`; default: the
    /// library's; 0: unbounded). The totals line gives the most any file spent, and the
    /// most any fill spent (under the library's default fill limit).
    #[arg(long)]
    work_limit: Option<u64>,
    /// MaskBench JSON files or folders of them.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

/// What one file contributed.
#[derive(Default)]
struct FileResult {
    compile_error: bool,
    counts: [usize; 4], // valid_accepted, valid_rejected, invalid_rejected, invalid_accepted
    tokens: usize,
    mask_us: Vec<f64>,
    ttfm_us: Option<f64>,
    /// Work units the compile spent.
    work: u64,
    /// Most work units one fill spent (`GrammarMatcher::last_fill_work`).
    fill_work: u64,
    report: Value,
    /// Valid instances rejected that strict mode off accepts (with `--per-file`).
    strict_only: usize,
}

fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut stack = vec![p.clone()];
            while let Some(d) = stack.pop() {
                let entries = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
                for e in entries {
                    let path = e.map_err(|e| format!("{}: {e}", d.display()))?.path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if path.extension().is_some_and(|x| x == "json") {
                        out.push(path);
                    }
                }
            }
        } else {
            out.push(p.clone());
        }
    }
    out.sort();
    Ok(out)
}

pub fn run(a: &MaskbenchArgs) -> Result<(), String> {
    let (tok, info) = load_tokenizer(&a.tokenizer)?;
    let info = Arc::new(info);
    let mut files = collect(&a.paths)?;
    if let Some(n) = a.limit {
        files.truncate(n);
    }
    let pool =
        rayon::ThreadPoolBuilder::new().num_threads(a.threads.max(1)).build().map_err(|e| e.to_string())?;
    let results: Vec<FileResult> = pool.install(|| {
        use rayon::prelude::*;
        let options = JsonSchemaOptions {
            strict: !a.allow_extra_properties,
            lenient: a.lenient,
            property_order: if a.schema_order { PropertyOrder::Schema } else { PropertyOrder::Any },
            ..Default::default()
        };
        let compile_options = CompileOptions {
            leaf_cache_bytes: if a.no_shared_masks { 0 } else { CompileOptions::default().leaf_cache_bytes },
            eager_budget: a
                .eager_budget_us
                .map_or(CompileOptions::default().eager_budget, std::time::Duration::from_micros),
            work_limit: match a.work_limit {
                Some(0) => None,
                Some(n) => Some(n),
                None => CompileOptions::default().work_limit,
            },
            ..Default::default()
        };
        let compiler = GrammarCompiler::with_options(info.clone(), compile_options, 0);
        let explain = a.per_file && options.strict;
        files.par_iter().map(|f| run_file(f, &tok, &info, &compiler, &options, explain)).collect()
    });
    let mut totals = [0usize; 4];
    let (mut compile_errors, mut tokens, mut strict_only) = (0, 0, 0);
    let (mut mask_us, mut ttfm_us) = (Vec::new(), Vec::new());
    let most_work = results.iter().zip(&files).max_by_key(|(r, _)| r.work);
    for r in &results {
        if a.per_file {
            eprintln!("{}", r.report);
        }
        compile_errors += r.compile_error as usize;
        for (t, c) in totals.iter_mut().zip(r.counts) {
            *t += c;
        }
        tokens += r.tokens;
        strict_only += r.strict_only;
        mask_us.extend_from_slice(&r.mask_us);
        ttfm_us.extend(r.ttfm_us);
    }
    if a.per_file && options_strict(a) {
        eprintln!(
            "{}",
            json!({ "valid_rejected": totals[1], "of_which_accepted_without_strict_mode": strict_only })
        );
    }
    out!(
        "{}",
        json!({
            "engine": "grammask", "files": files.len(), "compile_errors": compile_errors,
            "valid_accepted": totals[0], "valid_rejected": totals[1],
            "invalid_rejected": totals[2], "invalid_accepted": totals[3],
            "tokens": tokens, "mask_us": summary(&mask_us), "ttfm_us": summary(&ttfm_us),
            "work_units_max": most_work.map(|(r, _)| r.work),
            "work_units_max_file": most_work.map(|(_, f)| f.display().to_string()),
            "fill_units_max": results.iter().map(|r| r.fill_work).max(),
        })
    );
    Ok(())
}

/// Whether the run uses strict mode (the default).
fn options_strict(a: &MaskbenchArgs) -> bool {
    !a.allow_extra_properties
}

/// Whether the schema accepts `ids` in full once strict mode is off (JSON Schema's meaning
/// of a schema silent about `additionalProperties`): tells a valid instance rejected for
/// its undeclared properties from any other rejection. Not timed.
fn accepted_without_strict(
    schema: &str,
    ids: &[u32],
    info: &Arc<grammask::TokenizerInfo>,
    options: &JsonSchemaOptions,
) -> bool {
    let options = JsonSchemaOptions { strict: false, ..options.clone() };
    let spec = GrammarSpec::JsonSchema { schema: schema.to_string(), options };
    let Ok(compiled) = GrammarCompiler::new(info.clone()).compile(&spec) else { return false };
    let mut m = GrammarMatcher::new(compiled);
    ids.iter().all(|&id| m.accept_token(id).is_ok()) && m.can_terminate()
}

fn run_file(
    path: &Path,
    tok: &tokenizers::Tokenizer,
    info: &Arc<grammask::TokenizerInfo>,
    compiler: &GrammarCompiler,
    options: &JsonSchemaOptions,
    explain: bool,
) -> FileResult {
    let mut r = FileResult::default();
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let doc: Value = match std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => {
            r.compile_error = true;
            r.report = json!({"file": name, "compile_error": format!("unreadable file: {e}")});
            return r;
        }
    };
    let schema = doc.get("schema").cloned().unwrap_or(Value::Bool(true)).to_string();
    let t0 = Instant::now();
    let spec = GrammarSpec::JsonSchema { schema: schema.clone(), options: options.clone() };
    let compiled = match compiler.compile(&spec) {
        Ok(c) => c,
        Err(e) => {
            r.compile_error = true;
            r.report = json!({"file": name, "compile_error": e.to_string()});
            return r;
        }
    };
    let first = GrammarMatcher::new(compiled.clone());
    r.ttfm_us = Some(t0.elapsed().as_secs_f64() * 1e6);
    r.work = compiled.work_spent();
    let mut mask = TokenBitmask::new(1, info.vocab_size());
    let mut failures = Vec::new();
    let mut first = Some(first);
    for (i, test) in doc.get("tests").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let valid = test.get("valid").and_then(Value::as_bool).unwrap_or(false);
        let text = to_python_json(test.get("data").unwrap_or(&Value::Null), Whitespace::Compact);
        let ids = match tok.encode(text.as_str(), false) {
            Ok(e) => e.get_ids().to_vec(),
            Err(e) => {
                failures.push(json!({"test": i, "error": format!("tokenize: {e}")}));
                continue;
            }
        };
        let mut m = first.take().unwrap_or_else(|| GrammarMatcher::new(compiled.clone()));
        let mut rejected_at = None;
        for (k, &id) in ids.iter().enumerate() {
            let t = Instant::now();
            let filled = m.fill_next_token_bitmask(mask.row_mut(0));
            r.fill_work = r.fill_work.max(m.last_fill_work());
            let ok = filled.is_ok()
                && grammask::bitmask::is_allowed(mask.row(0), id)
                && m.accept_token(id).is_ok();
            r.mask_us.push(t.elapsed().as_secs_f64() * 1e6);
            r.tokens += 1;
            if !ok {
                rejected_at = Some(k);
                break;
            }
        }
        let accepted = rejected_at.is_none() && m.can_terminate();
        let slot = match (valid, accepted) {
            (true, true) => 0,
            (true, false) => 1,
            (false, false) => 2,
            (false, true) => 3,
        };
        r.counts[slot] += 1;
        if valid != accepted {
            let at = rejected_at.map_or_else(
                || if accepted { "accepted in full" } else { "end (no stop token allowed)" }.to_string(),
                |k| {
                    format!(
                        "token {k} {:?} after {:?}",
                        String::from_utf8_lossy(info.token_bytes(ids[k])),
                        prefix(info, &ids[..k])
                    )
                },
            );
            let mut failure = json!({"test": i, "valid": valid, "accepted": accepted, "at": at});
            if explain && valid {
                let lenient = accepted_without_strict(&schema, &ids, info, options);
                r.strict_only += lenient as usize;
                failure["accepted_without_strict_mode"] = json!(lenient);
            }
            failures.push(failure);
        }
    }
    let slowest = r.mask_us.iter().copied().fold(0.0, f64::max);
    r.report = json!({"file": name, "ttfm_us": r.ttfm_us, "work_units": r.work, "mask_us_max": slowest, "failures": failures});
    r
}

/// The last 40 bytes of the accepted prefix, for failure reports.
fn prefix(info: &grammask::TokenizerInfo, ids: &[u32]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|&i| info.token_bytes(i).to_vec()).collect();
    let tail = &bytes[bytes.len().saturating_sub(40)..];
    String::from_utf8_lossy(tail).to_string()
}
