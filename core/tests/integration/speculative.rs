//! Speculative-decoding and serving primitives against oracles: every draft-chain and
//! draft-tree row equals the row of a fresh matcher fed that path token by token;
//! `validate_tokens` agrees with accepting one by one; after any of these calls the
//! matcher's next mask is unchanged; batch fill equals sequential fills whatever the
//! thread count; jump-forward ids decode to the forced bytes, equal the tokenizer's own
//! encoding and are accepted. Grammars: llama.cpp's, the builtin JSON grammar and dev
//! JSON schemas; tokenizers: Llama-3.1, Llama-2 and Qwen3; paths: real texts, with
//! random alternatives and invalid tokens mixed in.

use crate::common;

use common::{grammar_text, tokenizer, Rng};
use grammask::batch::BatchFiller;
use grammask::json_schema::{to_python_json, Whitespace};
use grammask::matcher::{DraftTree, TextEncoder, MAX_DRAFT_TREE_NODES};
use grammask::{
    CompiledGrammar, Error, GrammarCompiler, GrammarMatcher, GrammarSpec, LogitsConstraint, TokenBitmask,
};
use proptest::prelude::*;
use serde_json::Value;
use std::sync::Arc;

const TOKENIZERS: [&str; 3] = ["llama3_1", "llama2", "qwen3"];

fn hf(name: &str) -> tokenizers::Tokenizer {
    tokenizers::Tokenizer::from_file(common::data_dir().join("tokenizers").join(name).join("tokenizer.json"))
        .unwrap()
}

fn repo_text(rel: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/texts").join(rel),
    )
    .unwrap()
}

/// A dev MaskBench schema and its first valid instance (compact JSON).
fn schema_case(split: &str, nth: usize) -> (GrammarSpec, String) {
    let dir = common::data_dir().join("jsonschemabench/dev").join(split);
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut found = 0;
    for f in files {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let Some(t) = doc["tests"].as_array().and_then(|t| t.iter().find(|t| t["valid"] == true)) else {
            continue;
        };
        let text = to_python_json(&t["data"], Whitespace::Compact);
        if text.len() < 40 {
            continue;
        }
        if found == nth {
            return (GrammarSpec::json_schema(doc["schema"].to_string()), text);
        }
        found += 1;
    }
    panic!("no schema {nth} in {split}");
}

/// (name, spec, a text the grammar accepts).
fn cases() -> Vec<(String, GrammarSpec, String)> {
    let mut out = vec![
        ("builtin-json".into(), GrammarSpec::BuiltinJson, repo_text("json.txt")),
        ("c".into(), GrammarSpec::ebnf(grammar_text("llama.cpp/c.gbnf")), repo_text("c.txt")),
        (
            "arithmetic".into(),
            GrammarSpec::ebnf(grammar_text("llama.cpp/arithmetic.gbnf")),
            repo_text("arithmetic.txt"),
        ),
    ];
    for (split, n) in [("Github_easy", 3), ("Glaiveai2K", 5), ("Kubernetes", 2)] {
        let (spec, text) = schema_case(split, n);
        out.push((format!("{split}#{n}"), spec, text));
    }
    out
}

fn compiled_cases(tok: &str) -> Vec<(String, Arc<CompiledGrammar>, Vec<u32>)> {
    let compiler = GrammarCompiler::new(tokenizer(tok));
    let enc = hf(tok);
    cases()
        .into_iter()
        .map(|(name, spec, text)| {
            let compiled = compiler.compile(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
            // Exactly the text's bytes (Llama-2's tokenizer puts a space before a text).
            let info = compiled.tokenizer().clone();
            let mut ids = own_exact(&enc, &info, &text)
                .unwrap_or_else(|| panic!("{tok} {name}: cannot spell the text"));
            ids.truncate(160);
            (name, compiled, ids)
        })
        .collect()
}

/// The mask of a fresh matcher fed `path` (`None` if it rejects a token of it).
fn fresh_row(compiled: &Arc<CompiledGrammar>, path: &[u32]) -> Option<Vec<u32>> {
    let mut m = GrammarMatcher::new(compiled.clone());
    for &t in path {
        m.accept_token(t).ok()?;
    }
    let mut mask = TokenBitmask::new(1, m.vocab_size());
    m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
    Some(mask.row(0).to_vec())
}

fn current_row(m: &mut GrammarMatcher) -> Vec<u32> {
    let mut mask = TokenBitmask::new(1, m.vocab_size());
    m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
    mask.row(0).to_vec()
}

/// A token to branch with: usually an allowed one (so the tree goes deep), sometimes
/// any id at all (mostly invalid).
fn some_token(rng: &mut Rng, row: &[u32], vocab: usize) -> u32 {
    let ids = common::allowed(row);
    if ids.is_empty() || rng.below(5) == 0 {
        rng.below(vocab) as u32
    } else {
        ids[rng.below(ids.len())]
    }
}

#[test]
fn chain_rows_equal_fresh_matchers_and_leave_the_state_alone() {
    let mut rng = Rng(0xC4A1_2025);
    for tok in TOKENIZERS {
        for (name, compiled, ids) in compiled_cases(tok) {
            let vocab = compiled.tokenizer().vocab_size();
            for _ in 0..6 {
                let p = rng.below(ids.len().saturating_sub(8).max(1));
                let mut chain: Vec<u32> = ids[p..(p + 8).min(ids.len())].to_vec();
                if rng.below(2) == 0 && !chain.is_empty() {
                    let i = rng.below(chain.len());
                    chain[i] = rng.below(vocab) as u32;
                }
                let mut m = GrammarMatcher::new(compiled.clone());
                m.accept_tokens(&ids[..p])
                    .unwrap_or_else(|e| panic!("{tok} {name}: the text is rejected: {e}"));
                let before = current_row(&mut m);
                let steps = m.num_steps();
                let mut mask = TokenBitmask::new(chain.len() + 3, vocab);
                let fill = m.fill_draft_chain_bitmasks(&chain, &mut mask, 2).unwrap();
                assert_eq!(m.validate_tokens(&chain), fill.accepted, "{tok} {name}: validate vs chain");
                let one_by_one = {
                    let mut f = m.fork();
                    chain.iter().take_while(|&&t| f.accept_token(t).is_ok()).count()
                };
                assert_eq!(fill.accepted, one_by_one, "{tok} {name}");
                for i in 0..=chain.len() {
                    let mut path = ids[..p].to_vec();
                    path.extend_from_slice(&chain[..i]);
                    let want = if i <= fill.accepted {
                        fresh_row(&compiled, &path).unwrap()
                    } else {
                        vec![0; mask.row(0).len()]
                    };
                    assert_eq!(mask.row(2 + i), want.as_slice(), "{tok} {name}: chain row {i}");
                }
                assert_eq!(m.num_steps(), steps);
                assert_eq!(current_row(&mut m), before, "{tok} {name}: state changed");
                // All or nothing.
                match m.accept_tokens(&chain) {
                    Ok(()) => assert_eq!(fill.accepted, chain.len()),
                    Err(Error::TokensRejected { index, id }) => {
                        assert_eq!((index, id), (fill.accepted, chain[fill.accepted]));
                        assert_eq!(m.num_steps(), steps);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }
}

/// A random tree grown from a point of a real text: depth ≤ 8, width ≤ 8.
fn random_tree(rng: &mut Rng, m: &mut GrammarMatcher, text: &[u32], nodes: usize) -> (Vec<i64>, Vec<i64>) {
    let vocab = m.vocab_size();
    let (mut tokens, mut parents, mut depth) = (vec![-1i64], vec![-1i64], vec![0usize]);
    let mut kids = vec![0usize];
    while tokens.len() < nodes {
        let p = rng.below(tokens.len());
        if depth[p] >= 8 || kids[p] >= 8 {
            continue;
        }
        // The path to `p`, to pick a plausible next token.
        let mut path = Vec::new();
        let mut u = p;
        while u != 0 {
            path.push(tokens[u] as u32);
            u = parents[u] as usize;
        }
        path.reverse();
        let t = match (m.validate_tokens(&path) == path.len(), rng.below(3)) {
            // Follow the text when the path is its prefix.
            (true, 0) if path.len() < text.len() && text[..path.len()] == path[..] => text[path.len()],
            (true, _) => {
                if let Err(e) = m.accept_tokens(&path) {
                    let v = m.validate_tokens(&path);
                    panic!("{e}: validate said {v} of {path:?}, steps {}", m.num_steps());
                }
                let row = current_row(m);
                m.rollback(path.len()).unwrap();
                some_token(rng, &row, vocab)
            }
            (false, _) => rng.below(vocab) as u32,
        };
        tokens.push(t as i64);
        parents.push(p as i64);
        depth.push(depth[p] + 1);
        kids.push(0);
        kids[p] += 1;
    }
    (tokens, parents)
}

#[test]
fn tree_rows_equal_fresh_matchers_and_leave_the_state_alone() {
    let mut rng = Rng(0x7EE5_0001);
    for tok in TOKENIZERS {
        for (name, compiled, ids) in compiled_cases(tok) {
            let vocab = compiled.tokenizer().vocab_size();
            for round in 0..3 {
                let p = rng.below(ids.len().saturating_sub(4).max(1));
                let mut m = GrammarMatcher::new(compiled.clone());
                m.accept_tokens(&ids[..p])
                    .unwrap_or_else(|e| panic!("{tok} {name}: the text is rejected: {e}"));
                let before = current_row(&mut m);
                let (tokens, parents) = random_tree(&mut rng, &mut m, &ids[p..], 12 + round * 8);
                let tree = DraftTree::from_parents(&tokens, &parents).unwrap();
                let mut mask = TokenBitmask::new(tree.len(), vocab);
                let fill = m.fill_draft_tree_bitmasks(&tree, &mut mask, 0).unwrap();
                let mut zero_rows = 0;
                for v in 0..tree.len() {
                    let mut path = Vec::new();
                    let mut u = v;
                    while let Some(parent) = tree.parent(u) {
                        path.push(tree.token(u).unwrap());
                        u = parent;
                    }
                    path.reverse();
                    let mut full = ids[..p].to_vec();
                    full.extend(&path);
                    let want = fresh_row(&compiled, &full).unwrap_or_else(|| vec![0; mask.row(0).len()]);
                    zero_rows += (mask.count_allowed(v) == 0) as usize;
                    assert_eq!(mask.row(v), want.as_slice(), "{tok} {name}: tree node {v}");
                }
                // Rejected nodes are exactly those whose own token fails after a valid parent path.
                for &v in &fill.rejected {
                    let parent = tree.parent(v).unwrap();
                    assert!(!fill.rejected.contains(&parent));
                }
                assert!(zero_rows >= fill.rejected.len() + fill.skipped);
                assert_eq!(current_row(&mut m), before, "{tok} {name}: state changed");
                assert_eq!(m.num_steps(), p);
                // XGrammar's layout of the same tree gives the same rows.
                let (next_token, next_sibling) = xgrammar_layout(&tree);
                let x = DraftTree::from_xgrammar(&tokens, &next_token, &next_sibling).unwrap();
                let mut mask2 = TokenBitmask::new(tree.len(), vocab);
                assert_eq!(m.fill_draft_tree_bitmasks(&x, &mut mask2, 0).unwrap(), fill);
                assert_eq!(mask2, mask);
            }
        }
    }
}

fn xgrammar_layout(tree: &DraftTree) -> (Vec<i64>, Vec<i64>) {
    let n = tree.len();
    let (mut first, mut next) = (vec![-1i64; n], vec![-1i64; n]);
    for (v, first) in first.iter_mut().enumerate() {
        let kids: Vec<usize> = tree.children(v).collect();
        if let Some(&k) = kids.first() {
            *first = k as i64;
        }
        for w in kids.windows(2) {
            next[w[0]] = w[1] as i64;
        }
    }
    (first, next)
}

#[test]
fn malformed_trees_are_typed_errors() {
    let bad = |r: grammask::Result<DraftTree>| match r {
        Err(Error::DraftTree { .. } | Error::Limit { .. }) => {}
        other => panic!("expected a draft-tree error, got {other:?}"),
    };
    bad(DraftTree::from_parents(&[], &[]));
    bad(DraftTree::from_parents(&[-1, 1], &[-1]));
    bad(DraftTree::from_parents(&[-1, 1, 2], &[-1, 2, 1])); // cycle 1 ↔ 2
    bad(DraftTree::from_parents(&[-1, 1], &[-1, 1])); // self-loop
    bad(DraftTree::from_parents(&[-1, 1], &[-1, 5])); // out of range
    bad(DraftTree::from_parents(&[-1, 1], &[0, 0])); // root with a parent
    bad(DraftTree::from_parents(&[-1, -7], &[-1, 0])); // negative token
    bad(DraftTree::from_parents(&[-1, 1], &[-1, -1])); // second root
    let n = MAX_DRAFT_TREE_NODES + 1;
    bad(DraftTree::from_parents(&vec![0; n], &vec![0; n]));
    bad(DraftTree::from_xgrammar(&[-1, 1, 2], &[1, 2, 1], &[-1, -1, -1])); // cycle
    bad(DraftTree::from_xgrammar(&[-1, 1, 2], &[1, -1, -1], &[-1, 1, -1])); // sibling loop
    bad(DraftTree::from_xgrammar(&[-1, 1, 2], &[1, -1, -1], &[-1, -1, -1])); // node 2 unreachable
    bad(DraftTree::from_xgrammar(&[-1, 1], &[1, 9], &[-1, -1]));
    // Token ids out of the vocabulary: an error before anything is touched.
    let compiler = GrammarCompiler::new(tokenizer("llama3_1"));
    let mut m = GrammarMatcher::new(compiler.compile_builtin_json().unwrap());
    let tree = DraftTree::from_parents(&[-1, 999_999], &[-1, 0]).unwrap();
    let mut mask = TokenBitmask::new(2, m.vocab_size());
    assert!(matches!(m.fill_draft_tree_bitmasks(&tree, &mut mask, 0), Err(Error::InvalidTokenId { .. })));
    assert!(matches!(
        m.fill_draft_chain_bitmasks(&[999_999], &mut mask, 0),
        Err(Error::InvalidTokenId { .. })
    ));
    // Rows that do not fit.
    let mut small = TokenBitmask::new(1, m.vocab_size());
    assert!(matches!(m.fill_draft_tree_bitmasks(&tree, &mut small, 0), Err(Error::Shape(_))));
    assert!(matches!(m.fill_draft_chain_bitmasks(&[1], &mut small, usize::MAX), Err(Error::Shape(_))));
    assert_eq!(m.num_steps(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// Arbitrary links never panic: a tree or a typed error.
    #[test]
    fn arbitrary_links_never_panic(links in proptest::collection::vec((-3i64..12, -3i64..12, -3i64..100), 0..12)) {
        let tokens: Vec<i64> = links.iter().map(|l| l.2).collect();
        let a: Vec<i64> = links.iter().map(|l| l.0).collect();
        let b: Vec<i64> = links.iter().map(|l| l.1).collect();
        for t in [DraftTree::from_parents(&tokens, &a), DraftTree::from_xgrammar(&tokens, &a, &b)].into_iter().flatten() {
            {
                // A valid tree: every node reaches the root.
                for v in 0..t.len() {
                    let (mut u, mut hops) = (v, 0);
                    while let Some(p) = t.parent(u) { u = p; hops += 1; prop_assert!(hops <= t.len()); }
                    prop_assert_eq!(u, 0);
                }
            }
        }
    }
}

#[test]
fn batch_fill_equals_sequential_fills_whatever_the_threads() {
    let tok = tokenizer("llama3_1");
    let compiler = GrammarCompiler::new(tok.clone());
    let enc = hf("llama3_1");
    let cases = cases();
    // 24 matchers at different points of different texts.
    let mut rng = Rng(0x000B_A7C4);
    let mut matchers = Vec::new();
    for i in 0..24 {
        let (_, spec, text) = &cases[i % cases.len()];
        let ids = enc.encode(text.as_str(), false).unwrap().get_ids().to_vec();
        let mut m = GrammarMatcher::new(compiler.compile(spec).unwrap());
        m.accept_tokens(&ids[..rng.below(ids.len().min(80))]).unwrap();
        matchers.push(m);
    }
    let vocab = tok.vocab_size();
    let rows = 40;
    let indices: Vec<usize> = (0..24).map(|i| (i * 7 + 3) % rows).collect();
    let mut want = TokenBitmask::new(rows, vocab);
    let mut want_all = Vec::new();
    for (m, &r) in matchers.iter_mut().zip(&indices) {
        want_all.push(m.fill_next_token_bitmask(want.row_mut(r)).unwrap());
    }
    for threads in [1, 2, 4] {
        let mut filler = BatchFiller::with_threads(threads).unwrap();
        for round in 0..2 {
            let mut got = TokenBitmask::new(rows, vocab);
            let all = filler.fill::<GrammarMatcher, _>(&mut matchers, &mut got, &indices).unwrap().to_vec();
            assert_eq!(got, want, "{threads} threads, round {round}");
            assert_eq!(all, want_all);
        }
    }
    // `&mut` references work too (matchers kept inside the engine's own records).
    let mut refs: Vec<&mut GrammarMatcher> = matchers.iter_mut().collect();
    let mut got = TokenBitmask::new(rows, vocab);
    BatchFiller::new().fill::<GrammarMatcher, _>(&mut refs, &mut got, &indices).unwrap();
    assert_eq!(got, want);
    // Bad indices: typed errors, nothing written.
    let mut f = BatchFiller::new();
    let mut untouched = TokenBitmask::new(rows, vocab);
    let dup: Vec<usize> = vec![1; 24];
    assert!(matches!(f.fill::<GrammarMatcher, _>(&mut matchers, &mut untouched, &dup), Err(Error::Shape(_))));
    assert!(matches!(
        f.fill::<GrammarMatcher, _>(&mut matchers, &mut untouched, &indices[..3]),
        Err(Error::Shape(_))
    ));
    let far: Vec<usize> = (100..124).collect();
    assert!(matches!(f.fill::<GrammarMatcher, _>(&mut matchers, &mut untouched, &far), Err(Error::Shape(_))));
    assert_eq!(untouched, TokenBitmask::new(rows, vocab));
}

/// The trait's defaults serve any constraint: the same rows through `dyn`-free generic code.
#[test]
fn trait_methods_match_the_matcher() {
    fn chain<C: LogitsConstraint>(c: &mut C, ids: &[u32], mask: &mut TokenBitmask) -> usize {
        c.fill_draft_chain_bitmasks(ids, mask, 0).unwrap().accepted
    }
    let compiler = GrammarCompiler::new(tokenizer("qwen3"));
    let mut m = GrammarMatcher::new(compiler.compile_builtin_json().unwrap());
    let ids = hf("qwen3").encode("{\"a\": [1, 2]}", false).unwrap().get_ids().to_vec();
    let mut mask = TokenBitmask::new(ids.len() + 1, m.vocab_size());
    assert_eq!(chain(&mut m, &ids, &mut mask), ids.len());
    assert_eq!(LogitsConstraint::validate_tokens(&mut m, &ids), ids.len());
}

#[test]
fn jump_forward_ids_are_the_tokenizers_own_and_accepted() {
    let mut checked = 0;
    for tok in TOKENIZERS {
        let enc = hf(tok);
        let info = tokenizer(tok);
        for (name, compiled, ids) in compiled_cases(tok) {
            if name == "c" || name == "arithmetic" {
                continue;
            }
            let mut m = GrammarMatcher::new(compiled.clone());
            for (i, &id) in ids.iter().enumerate() {
                let forced = m.find_jump_forward_string();
                let jf = m.jump_forward_tokens(&enc).unwrap();
                let steps = m.num_steps();
                if !forced.is_empty() && !jf.ids.is_empty() {
                    checked += 1;
                    // The bytes taken back plus the forced bytes (up to a character
                    // boundary) are exactly what the new ids spell.
                    let taken: Vec<u8> =
                        ids[i - jf.rollback..i].iter().flat_map(|&t| info.token_bytes(t).to_vec()).collect();
                    let spelled: Vec<u8> =
                        jf.ids.iter().flat_map(|&t| info.token_bytes(t).to_vec()).collect();
                    assert!(spelled.starts_with(&taken), "{tok} {name} step {i}");
                    let new = &spelled[taken.len()..];
                    assert!(
                        !new.is_empty() && forced.starts_with(new),
                        "{tok} {name} step {i}: {new:?} vs {forced:?}"
                    );
                    // The tokenizer's own encoding of that span — or of the span with one
                    // more token before it, that token kept (the split before it is the
                    // tokenizer's own).
                    let span = std::str::from_utf8(&spelled).unwrap();
                    let direct = own_exact(&enc, &info, span) == Some(jf.ids.clone());
                    let with_prev = i > jf.rollback && {
                        let prev = ids[i - jf.rollback - 1];
                        let mut longer = info.token_bytes(prev).to_vec();
                        longer.extend_from_slice(&spelled);
                        let mut want = vec![prev];
                        want.extend(&jf.ids);
                        std::str::from_utf8(&longer).ok().and_then(|t| own_exact(&enc, &info, t))
                            == Some(want)
                    };
                    assert!(
                        direct || with_prev,
                        "{tok} {name} step {i}: {:?} is not the tokenizer's encoding of {span:?}",
                        jf.ids
                    );
                    // Accepted by the grammar, and the state was left alone.
                    let mut f = m.fork();
                    f.rollback(jf.rollback).unwrap();
                    f.accept_tokens(&jf.ids).unwrap();
                    assert_eq!(m.num_steps(), steps);
                    // Applied in place, for every rollback limit: the same answer as
                    // computing it, and the state that applying it gives.
                    for max in 0..=grammask::matcher::MAX_RETOKENIZED {
                        let mut a = m.fork();
                        let want = m.fork().jump_forward_tokens_within(&enc, max).unwrap();
                        let got = a.apply_jump_forward(&enc, max).unwrap();
                        assert_eq!(got, want, "{tok} {name} step {i}, rollback ≤ {max}");
                        let mut b = m.fork();
                        b.rollback(want.rollback).unwrap();
                        b.accept_tokens(&want.ids).unwrap();
                        assert_eq!(a.num_steps(), b.num_steps(), "{tok} {name} step {i}");
                        assert_eq!(a.find_jump_forward_string(), b.find_jump_forward_string());
                        assert_eq!(a.can_terminate(), b.can_terminate());
                    }
                }
                if m.accept_token(id).is_err() {
                    break;
                }
            }
        }
    }
    assert!(checked >= 30, "only {checked} jump-forwards checked");
}

/// The tokenizer's ids for `text` when they spell it exactly (directly, or after a
/// newline or space dropped again, for tokenizers that prepend a space to a text).
fn own_exact(enc: &tokenizers::Tokenizer, info: &grammask::TokenizerInfo, text: &str) -> Option<Vec<u32>> {
    let spell = |ids: &[u32]| ids.iter().flat_map(|&t| info.token_bytes(t).to_vec()).collect::<Vec<u8>>();
    let ids = enc.encode(text, false).unwrap().get_ids().to_vec();
    if spell(&ids) == text.as_bytes() {
        return Some(ids);
    }
    for s in ["\n", " "] {
        let head = enc.encode(s, false).unwrap().get_ids().to_vec();
        let all = enc.encode(format!("{s}{text}"), false).unwrap().get_ids().to_vec();
        if let Some(rest) = all.strip_prefix(head.as_slice()) {
            if spell(rest) == text.as_bytes() {
                return Some(rest.to_vec());
            }
        }
    }
    None
}

/// The classic case from the issue: after `{`, a forced `"name": "` is not glued token by
/// token when the tokenizer has `{"` and `":`.
#[test]
fn forced_member_key_is_retokenized_across_the_brace() {
    let tok = "llama3_1";
    let enc = hf(tok);
    let compiler = GrammarCompiler::new(tokenizer(tok));
    let compiled = compiler
        .compile(&GrammarSpec::json_schema(
            r#"{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}"#,
        ))
        .unwrap();
    let mut m = GrammarMatcher::new(compiled);
    let brace = enc.encode("{", false).unwrap().get_ids().to_vec();
    m.accept_tokens(&brace).unwrap();
    assert_eq!(m.find_jump_forward_string(), b"\"name\": \"");
    let jf = m.jump_forward_tokens(&enc).unwrap();
    let own = enc.encode("{\"name\": \"", false).unwrap().get_ids().to_vec();
    assert_eq!((jf.rollback, &jf.ids), (1, &own));
    assert_ne!(own[0], brace[0], "Llama-3.1 merges `{{\"`");
    let _: &dyn TextEncoder = &enc;
}
