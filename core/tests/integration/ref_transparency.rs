//! `$ref` transparency (metamorphic): moving a subschema into `$defs` and leaving a `$ref`
//! to it in its place must not change what the schema means. For every schema that
//! grammask compiles, each variant — one subschema moved at a time, and every subschema
//! moved at once — must give the same token masks along every test instance (Llama-3.1
//! tokenizer), and a schema that does not compile must fail the same way.
//!
//! This is the test that would have caught issue 27's silent acceptance (`propertyNames`
//! behind a `$ref` beside `patternProperties`): any keyword that the converter reads
//! keyword by keyword instead of converting shows up here as a mask difference.
//!
//! Corpus: the JSON-Schema-Test-Suite (Draft 2020-12 and Draft 7, required tests) and the
//! dev MaskBench splits. By default a fixed sample (every 7th suite group, 12 files per
//! split, at most 4 single moves per schema); `GRAMMASK_REF_ALL=1` runs everything.

use crate::common;

use common::refs::{movable, move_all, move_one, subschemas};
use common::Rng;
use grammask::json_schema::{to_python_json, Whitespace};
use grammask::{Error, GrammarCompiler, GrammarMatcher, GrammarSpec, TokenBitmask};
use serde_json::Value;
use std::path::Path;

/// How a compile ended: the masks along each instance, or the error's kind.
#[derive(Debug, PartialEq)]
enum Outcome {
    Masks(Vec<Vec<u64>>),
    Failed(String),
}

fn error_kind(e: &Error) -> String {
    match e {
        Error::Schema(s) => format!("{:?}", std::mem::discriminant(&s.kind)),
        other => format!("{:?}", std::mem::discriminant(other)),
    }
}

/// Hashes of each mask along each instance's tokens (stopping where the grammar rejects).
fn outcome(
    compiler: &GrammarCompiler,
    tok: &tokenizers::Tokenizer,
    schema: &Value,
    instances: &[Value],
) -> Outcome {
    let spec = GrammarSpec::json_schema(schema.to_string());
    let compiled = match compiler.compile(&spec) {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(error_kind(&e)),
    };
    let mut all = Vec::new();
    let mut mask = TokenBitmask::new(1, compiled.tokenizer().vocab_size());
    for inst in instances {
        let text = to_python_json(inst, Whitespace::Compact);
        let ids = tok.encode(text.as_str(), false).unwrap().get_ids().to_vec();
        let mut m = GrammarMatcher::new(compiled.clone());
        let mut hashes = Vec::new();
        for &id in &ids {
            m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
            hashes.push(fxhash(mask.row(0)));
            if m.accept_token(id).is_err() {
                break;
            }
        }
        hashes.push(m.can_terminate() as u64);
        all.push(hashes);
    }
    Outcome::Masks(all)
}

fn fxhash(row: &[u32]) -> u64 {
    row.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &w| (h ^ w as u64).wrapping_mul(0x0100_0000_01b3))
}

/// (name, schema, instances) of the corpus.
fn corpus(all: bool) -> Vec<(String, Value, Vec<Value>)> {
    let mut out = Vec::new();
    let suite = common::data_dir().join("json-schema-test-suite/tests");
    let mut g = 0usize;
    for draft in ["draft2020-12", "draft7"] {
        let dir = suite.join(draft);
        let mut files: Vec<_> =
            std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "json")) {
            let groups: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
            for (i, group) in groups.as_array().into_iter().flatten().enumerate() {
                g += 1;
                if !all && g % 7 != 0 {
                    continue;
                }
                let data =
                    group["tests"].as_array().into_iter().flatten().map(|t| t["data"].clone()).collect();
                out.push((format!("{}#{i}", name(f)), group["schema"].clone(), data));
            }
        }
    }
    for split in ["Github_easy", "Github_medium", "Glaiveai2K", "Kubernetes"] {
        let dir = common::data_dir().join("jsonschemabench/dev").join(split);
        let mut files: Vec<_> =
            std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        let step = if all { 1 } else { files.len() / 12 };
        for f in files.iter().step_by(step.max(1)) {
            let doc: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
            let data = doc["tests"].as_array().into_iter().flatten().map(|t| t["data"].clone()).collect();
            out.push((name(f), doc["schema"].clone(), data));
        }
    }
    out
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn moving_subschemas_behind_refs_changes_no_mask() {
    let all = std::env::var_os("GRAMMASK_REF_ALL").is_some();
    let info = common::tokenizer("llama3_1");
    let tok = tokenizers::Tokenizer::from_file(common::data_dir().join("tokenizers/llama3_1/tokenizer.json"))
        .unwrap();
    let compiler = GrammarCompiler::new(info);
    let mut rng = Rng(0x5EED_2711);
    let (mut schemas, mut variants, mut compiled) = (0, 0, 0);
    let mut failures = Vec::new();
    for (name, schema, instances) in corpus(all) {
        if !movable(&schema) {
            continue;
        }
        let mut ptrs = Vec::new();
        subschemas(&schema, "", &mut ptrs);
        if ptrs.is_empty() {
            continue;
        }
        schemas += 1;
        let base = outcome(&compiler, &tok, &schema, &instances);
        compiled += matches!(base, Outcome::Masks(_)) as usize;
        let mut picks: Vec<&String> = ptrs.iter().collect();
        if !all {
            while picks.len() > 4 {
                picks.swap_remove(rng.below(picks.len()));
            }
        }
        let mut moved: Vec<(String, Value)> =
            picks.iter().map(|p| (format!("move {p}"), move_one(&schema, p, 0))).collect();
        if ptrs.len() > 1 {
            moved.push(("move all".into(), move_all(&schema)));
        }
        for (how, variant) in moved {
            variants += 1;
            let got = outcome(&compiler, &tok, &variant, &instances);
            if got != base {
                let short = |o: &Outcome| match o {
                    Outcome::Masks(_) => "masks".to_string(),
                    Outcome::Failed(k) => format!("error {k}"),
                };
                failures.push(format!("{name}: {how}: {} vs {}", short(&base), short(&got)));
            }
        }
    }
    eprintln!("{schemas} schemas ({compiled} compile), {variants} variants, {} differ", failures.len());
    assert!(failures.is_empty(), "{} variants differ:\n{}", failures.len(), failures.join("\n"));
    assert!(schemas >= 60 && compiled >= 40, "corpus too small: {schemas} schemas, {compiled} compile");
}
