//! Compiled grammars as bytes: round trips give identical masks on every test grammar; a
//! grammar loaded from bytes serves the states it saved without computing them again;
//! corrupt, truncated and foreign bytes (also beneath a valid checksum) are typed
//! errors, never panics; the compiler's disk cache loads, rejects and rewrites files.

use crate::common;

use common::{grammar_text, tokenizer, Rng};
use grammask::{CompiledGrammar, Error, GrammarCompiler, GrammarMatcher, GrammarSpec, TokenBitmask};
use std::sync::Arc;

fn repo_text(rel: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/texts").join(rel),
    )
    .unwrap()
}

/// (spec, text) pairs: llama.cpp grammars, builtin JSON, JSON schemas (member sets,
/// counted repetitions, intersections).
fn cases() -> Vec<(GrammarSpec, String)> {
    let mut out: Vec<(GrammarSpec, String)> = ["json", "c", "chess", "list", "arithmetic"]
        .iter()
        .map(|g| {
            (GrammarSpec::ebnf(grammar_text(&format!("llama.cpp/{g}.gbnf"))), repo_text(&format!("{g}.txt")))
        })
        .collect();
    out.push((GrammarSpec::BuiltinJson, repo_text("json.txt")));
    out.push((
        GrammarSpec::json_schema(
            r#"{"type":"object","properties":{"id":{"type":"integer","minimum":-5,"maximum":1200},
            "name":{"type":"string","pattern":"^[a-z]+$","maxLength":12},"tags":{"type":"array","items":{"enum":["x","y"]},"maxItems":3}},
            "required":["id"]}"#,
        ),
        r#"{"tags": ["y", "x"], "id": 1003, "name": "abcdefgh"}"#.into(),
    ));
    out.push((GrammarSpec::Regex("[0-9]{3}-[a-z]{2,5}(!|\\?)".into()), "123-abcd?".into()));
    // A format is a character automaton that prints as its expression.
    out.push((
        GrammarSpec::json_schema(
            r#"{"type":"object","properties":{"at":{"type":"string","format":"date-time"}}}"#,
        ),
        r#"{"at": "2024-02-29T10:20:30.5+01:00"}"#.into(),
    ));
    // Free text is a character automaton in the IR (`Expr::Dfa`).
    out.push((GrammarSpec::StructuralTag(TOOL_TAG.into()), TOOL_TEXT.into()));
    out
}

const TOOL_TAG: &str = r#"{"type": "structural_tag", "format": {"type": "triggered_tags",
    "triggers": ["<tool_call>"], "excludes": ["</think>"], "tags": [{"type": "tag", "begin": "<tool_call>",
    "content": {"type": "json_schema", "json_schema": {"type": "object", "properties":
    {"city": {"type": "string"}}, "required": ["city"]}}, "end": "</tool_call>"}]}}"#;
const TOOL_TEXT: &str = r#"Let me check <tool <tool_call>{"city": "Paris"}</tool_call> done."#;

/// Mask hashes along `text` (llama3_1 ids), and whether the whole text was accepted.
fn walk(compiled: &Arc<CompiledGrammar>, ids: &[u32]) -> Vec<Vec<u32>> {
    let mut m = GrammarMatcher::new(compiled.clone());
    let mut mask = TokenBitmask::new(1, m.vocab_size());
    let mut rows = Vec::new();
    for &id in ids {
        m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
        rows.push(mask.row(0).to_vec());
        m.accept_token(id).unwrap();
    }
    m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
    rows.push(mask.row(0).to_vec());
    rows
}

#[test]
fn round_trips_give_identical_masks_and_serve_saved_states() {
    let tok = tokenizer("llama3_1");
    let enc = tokenizers::Tokenizer::from_file(common::data_dir().join("tokenizers/llama3_1/tokenizer.json"))
        .unwrap();
    for (spec, text) in cases() {
        let compiler = GrammarCompiler::new(tok.clone());
        let compiled = compiler.compile(&spec).unwrap();
        let ids = enc.encode(text.as_str(), false).unwrap().get_ids().to_vec();
        let before = walk(&compiled, &ids);
        let (done, total) = compiled.mask_stats();
        let bytes = compiled.to_bytes();
        let loaded = Arc::new(CompiledGrammar::from_bytes(&bytes, tok.clone()).unwrap());
        assert_eq!(loaded.mask_stats(), (done, total), "{spec:?}: every computed mask is saved");
        let after = walk(&loaded, &ids);
        assert_eq!(after, before, "{spec:?}: masks differ after a round trip");
        // The walk needed no state that was not saved.
        assert_eq!(loaded.mask_stats().0, done, "{spec:?}: states recomputed after loading");
        // Saving the loaded grammar again gives the same bytes (masks shared alike), and
        // it prints the same.
        assert_eq!(loaded.to_bytes().len(), bytes.len(), "{spec:?}");
        assert_eq!(
            loaded.automata().grammar().to_string(),
            compiled.automata().grammar().to_string(),
            "{spec:?}"
        );
        // Fully precomputed grammars round-trip too.
        compiled.precompute();
        let full = CompiledGrammar::from_bytes(&compiled.to_bytes(), tok.clone()).unwrap();
        assert_eq!(full.mask_stats(), compiled.mask_stats());
    }
}

/// Where the payload starts in `bytes` (the header is fixed but for the version string).
fn payload_start(bytes: &[u8]) -> usize {
    let vlen = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    16 + vlen + 8 + 8 + 8 + 4
}

/// `good` with `edits` payload bytes (from `start` on) flipped, set to 0xFF or random.
fn edited(good: &[u8], start: usize, rng: &mut Rng, edits: usize) -> Vec<u8> {
    let mut b = good.to_vec();
    for _ in 0..edits {
        let i = start + rng.below(b.len() - start);
        b[i] = match rng.below(3) {
            0 => b[i] ^ (1 << rng.below(8)),
            1 => 0xFF,
            _ => rng.below(256) as u8,
        };
    }
    b
}

/// `bytes` with a payload edit and its checksum fixed: what the checksum cannot catch.
fn with_valid_crc(mut bytes: Vec<u8>) -> Vec<u8> {
    let p = payload_start(&bytes);
    let crc = crc32fast::hash(&bytes[p..]);
    bytes[p - 4..p].copy_from_slice(&crc.to_le_bytes());
    bytes
}

#[test]
fn corrupt_truncated_and_foreign_bytes_are_typed_errors() {
    let tok = tokenizer("llama3_1");
    let compiler = GrammarCompiler::new(tok.clone());
    let compiled = compiler
        .compile(&GrammarSpec::json_schema(
            r#"{"type":"object","properties":{"a":{"type":"string","maxLength":4},"b":{"enum":[1,2,"x"]}},"required":["a"]}"#,
        ))
        .unwrap();
    let mut m = GrammarMatcher::new(compiled.clone());
    m.accept_string("{\"a\": \"xy").unwrap();
    let mut mask = TokenBitmask::new(1, m.vocab_size());
    m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
    let good = compiled.to_bytes();
    let is_format = |r: grammask::Result<CompiledGrammar>, what: &str| match r {
        Err(Error::Format { .. }) => {}
        Err(e) => panic!("{what}: expected a format error, got {e}"),
        Ok(_) => panic!("{what}: accepted"),
    };
    // Every truncation.
    for n in 0..good.len() {
        is_format(CompiledGrammar::from_bytes(&good[..n], tok.clone()), &format!("truncated to {n}"));
    }
    // A byte flipped anywhere: the header checks or the checksum catch it.
    let mut rng = Rng(0x00C0_FFEE);
    for _ in 0..2000 {
        let mut b = good.clone();
        let i = rng.below(b.len());
        b[i] ^= 1 << rng.below(8);
        is_format(CompiledGrammar::from_bytes(&b, tok.clone()), &format!("flipped byte {i}"));
    }
    // Garbage and trailing bytes.
    is_format(CompiledGrammar::from_bytes(b"{\"not\": \"a grammar\"}", tok.clone()), "json");
    let mut longer = good.clone();
    longer.push(0);
    is_format(CompiledGrammar::from_bytes(&longer, tok.clone()), "trailing byte");
    // Another tokenizer.
    match CompiledGrammar::from_bytes(&good, tokenizer("qwen3")) {
        Err(Error::Format { what, .. }) => assert!(what.contains("tokenizer"), "{what}"),
        other => panic!("{other:?}"),
    }
    // Beneath a valid checksum: edits of the payload never panic; when they load, the
    // grammar still fills and accepts without panicking.
    let start = payload_start(&good);
    let mut loaded_ok = 0;
    for round in 0..3000 {
        let b = edited(&good, start, &mut rng, 1 + round % 4);
        if let Ok(g) = CompiledGrammar::from_bytes(&with_valid_crc(b), tok.clone()) {
            loaded_ok += 1;
            let mut m = GrammarMatcher::new(Arc::new(g));
            let mut mask = TokenBitmask::new(1, m.vocab_size());
            for id in [90u32, 1, 64, 794, 128_009] {
                let _ = m.fill_next_token_bitmask(mask.row_mut(0));
                let _ = m.accept_token(id);
            }
        }
    }
    // Some edits (names, unused counts) are harmless; most are caught.
    assert!(loaded_ok < 3000, "no edit was caught");
}

#[test]
fn edited_character_automata_are_typed_errors_or_load_whole() {
    // Beneath a valid checksum, edits of a structural tag's payload (its free text is a
    // character automaton: states, moves, targets) are typed errors or load a grammar
    // that fills and accepts; never a panic.
    let tok = tokenizer("llama3_1");
    let compiled =
        GrammarCompiler::new(tok.clone()).compile(&GrammarSpec::StructuralTag(TOOL_TAG.into())).unwrap();
    let good = compiled.to_bytes();
    let start = payload_start(&good);
    let mut rng = Rng(0x0BAD_5EED);
    let mut caught = 0;
    for round in 0..2000 {
        let b = edited(&good, start, &mut rng, 1 + round % 3);
        match CompiledGrammar::from_bytes(&with_valid_crc(b), tok.clone()) {
            Ok(g) => {
                let mut m = GrammarMatcher::new(Arc::new(g));
                let mut mask = TokenBitmask::new(1, m.vocab_size());
                for id in [27u32, 1, 64, 794, 128_009] {
                    let _ = m.fill_next_token_bitmask(mask.row_mut(0));
                    let _ = m.accept_token(id);
                }
            }
            // (Besides format errors: a size limit when the automata are rebuilt, an
            // undefined rule from an edited reference.)
            Err(_) => caught += 1,
        }
    }
    assert!(caught > 0, "no edit was caught");
}

#[test]
fn disk_cache_loads_rejects_and_rewrites() {
    let tok = tokenizer("llama3_1");
    let dir = std::env::temp_dir().join(format!("grammask-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let spec = GrammarSpec::ebnf(grammar_text("llama.cpp/arithmetic.gbnf"));
    let enc = tokenizers::Tokenizer::from_file(common::data_dir().join("tokenizers/llama3_1/tokenizer.json"))
        .unwrap();
    let ids = enc.encode(repo_text("arithmetic.txt").as_str(), false).unwrap().get_ids().to_vec();
    let warm = {
        let c = GrammarCompiler::new(tok.clone()).with_disk_cache(&dir).unwrap();
        let g = c.compile(&spec).unwrap();
        assert_eq!(c.disk_stats(), (0, 1, 0));
        walk(&g, &ids);
        assert_eq!(c.persist().unwrap(), 1);
        g.mask_stats()
    };
    // A restart: the grammar and its masks come from the file.
    let c = GrammarCompiler::new(tok.clone()).with_disk_cache(&dir).unwrap();
    let g = c.compile(&spec).unwrap();
    assert_eq!(c.disk_stats(), (1, 0, 0));
    assert_eq!(g.mask_stats(), warm);
    // A second compile is a memory hit.
    assert!(Arc::ptr_eq(&g, &c.compile(&spec).unwrap()));
    // A corrupt file is a miss: compiled afresh and rewritten.
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "gmcg"))
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&file, &bytes).unwrap();
    let c = GrammarCompiler::new(tok.clone()).with_disk_cache(&dir).unwrap();
    c.compile(&spec).unwrap();
    assert_eq!(c.disk_stats(), (0, 1, 1));
    let c = GrammarCompiler::new(tok).with_disk_cache(&dir).unwrap();
    c.compile(&spec).unwrap();
    assert_eq!(c.disk_stats(), (1, 0, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}
