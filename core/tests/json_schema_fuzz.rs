//! Sampling fuzz: random walks under the token mask for MaskBench dev schemas; every
//! completed output must parse and validate with the `jsonschema` crate (0 violations).
//!
//! By default 25 schemas from each dev split (sorted by file name), 2 samples each;
//! `GRAMMASK_FUZZ_ALL=1` runs every file. Schemas that do not convert (typed errors) are
//! counted and skipped. After a token budget the walk prefers short tokens and stops as
//! soon as the grammar can end, so outputs stay small.
//!
//! With `GRAMMASK_FUZZ_ALL=1` (3,919 schemas, 7,566 samples, ~5 minutes) the run reports
//! 19 violations (2026-11-23, second run of the day), none a wrong mask: the `jsonschema`
//! crate checks `multipleOf: 0.01` in floating point (`-53`, `-6.1e19` fail: 11); its
//! translation of ECMA patterns to the `regex` crate's dialect narrows `\s` to a few
//! spaces (U+1680, U+205F, U+3000 are ECMA whitespace: 3), reads `[[a-z]*` as a nested
//! class where ECMA has a class holding `[` (1) and `"--X` in a class as set difference
//! where ECMA has the range `"`–`-` (2); and a free-form map (`additionalProperties:
//! true`, no declared members) with `minProperties` can repeat a key (2), which no
//! grammar can rule out for arbitrary keys (the validator keeps the last value, so the
//! object counts fewer members). Declared members are never repeated (member sets). The
//! first run of the day also found outputs that did not parse: a `\u` escape of a lone
//! UTF-16 surrogate, which the JSON grammar admits and `serde_json` rejects; strings now
//! take surrogate escapes only in pairs. (Which schemas are sampled how shifts with every
//! change to what converts, so the counts move between runs.)

mod common;

use common::Rng;
use grammask::json_schema::{json_schema_to_grammar, JsonSchemaOptions};
use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenBitmask};
use serde_json::Value;

const BUDGET: usize = 60;
const HARD_CAP: usize = 600;

#[test]
fn sampled_outputs_validate() {
    let all = std::env::var_os("GRAMMASK_FUZZ_ALL").is_some();
    let tok = common::tokenizer("llama3_1");
    let compiler = GrammarCompiler::new(tok.clone());
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut schemas, mut not_converted, mut samples, mut unfinished, mut violations) =
        (0, 0, 0, 0, Vec::new());
    for split in ["Github_easy", "Github_medium"] {
        let dir = common::data_dir().join("jsonschemabench/dev").join(split);
        let mut files: Vec<_> =
            std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        if !all {
            files.truncate(25);
        }
        for f in files {
            let doc: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            let schema = &doc["schema"];
            let Ok(validator) = jsonschema::options().should_validate_formats(true).build(schema) else {
                continue;
            };
            schemas += 1;
            let g = match json_schema_to_grammar(schema, &JsonSchemaOptions::default()) {
                Ok(g) => g,
                Err(_) => {
                    not_converted += 1;
                    continue;
                }
            };
            let Ok(compiled) = compiler.compile(&GrammarSpec::Grammar(g)) else {
                not_converted += 1;
                continue;
            };
            for _ in 0..2 {
                samples += 1;
                let mut m = GrammarMatcher::new(compiled.clone());
                let mut mask = TokenBitmask::new(1, m.vocab_size());
                let mut out = Vec::new();
                let mut done = false;
                for step in 0..HARD_CAP {
                    if m.can_terminate() && (step >= BUDGET || rng.below(8) == 0) {
                        done = true;
                        break;
                    }
                    m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
                    let allowed: Vec<u32> = common::allowed(mask.row_mut(0))
                        .into_iter()
                        .filter(|&t| !tok.is_special(t) && !tok.token_bytes(t).is_empty())
                        .collect();
                    assert!(
                        !allowed.is_empty() || m.can_terminate(),
                        "{}: dead end after {:?}",
                        f.display(),
                        String::from_utf8_lossy(&out)
                    );
                    if allowed.is_empty() {
                        done = true;
                        break;
                    }
                    let t = if step >= BUDGET {
                        // Prefer the shortest tokens, which close structures soonest.
                        let min_len = allowed.iter().map(|&t| tok.token_bytes(t).len()).min().unwrap();
                        let short: Vec<u32> = allowed
                            .iter()
                            .copied()
                            .filter(|&t| tok.token_bytes(t).len() == min_len)
                            .collect();
                        let closing: Vec<u32> = short
                            .iter()
                            .copied()
                            .filter(|&t| tok.token_bytes(t).iter().any(|b| b"\"]}".contains(b)))
                            .collect();
                        let pool = if !closing.is_empty() && rng.below(4) != 0 { closing } else { short };
                        pool[rng.below(pool.len())]
                    } else {
                        allowed[rng.below(allowed.len())]
                    };
                    out.extend_from_slice(tok.token_bytes(t));
                    m.accept_token(t).unwrap();
                }
                if !done {
                    unfinished += 1;
                    continue;
                }
                let text = String::from_utf8_lossy(&out).to_string();
                match serde_json::from_str::<Value>(&text) {
                    Ok(v) if validator.is_valid(&v) => {}
                    Ok(v) => violations.push(format!(
                        "{}: {text}\n  {:?}",
                        f.display(),
                        validator.iter_errors(&v).map(|e| e.to_string()).collect::<Vec<_>>()
                    )),
                    Err(e) => violations.push(format!("{}: not JSON ({e}): {text}", f.display())),
                }
            }
        }
    }
    eprintln!("fuzz: {schemas} schemas, {not_converted} not converted, {samples} samples, {unfinished} unfinished, {} violations", violations.len());
    assert!(violations.is_empty(), "{} violations:\n{}", violations.len(), violations.join("\n"));
}
