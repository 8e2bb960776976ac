//! Special tokens as structural-tag markers: a special token whose text a tag writes
//! (`<|marker|>` on Llama 3.1; the Llama 3 tokenizer in ../shared lacks it, so its
//! `<|start_header_id|>` plays the part here) is produced as that one token where the tag allows its
//! text — and nowhere else; other special tokens stay forbidden; the marker set survives
//! `to_bytes`/`from_bytes`.

use crate::common;

use common::tokenizer;
use grammask::bitmask::is_allowed;
use grammask::{CompiledGrammar, GrammarCompiler, GrammarMatcher, GrammarSpec, TokenBitmask};
use std::sync::Arc;

const TAG: &str = r#"{"type": "structural_tag", "format": {"type": "triggered_tags",
    "triggers": ["<|start_header_id|>"],
    "tags": [{"begin": "<|start_header_id|>", "end": ";",
              "content": {"type": "json_schema", "json_schema": {"type": "object",
                  "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]}}"#;

fn id(tok: &grammask::TokenizerInfo, text: &str) -> u32 {
    (0..tok.vocab_size() as u32).find(|&i| tok.token_bytes(i) == text.as_bytes()).unwrap()
}

#[test]
fn a_special_token_marker_is_produced_where_its_text_is_allowed() {
    let tok = tokenizer("llama3_1");
    let marker = id(&tok, "<|start_header_id|>");
    let header = id(&tok, "<|end_header_id|>");
    assert!(tok.is_special(marker) && tok.is_special(header));
    let compiled =
        GrammarCompiler::new(tok.clone()).compile(&GrammarSpec::StructuralTag(TAG.into())).unwrap();
    assert_eq!(compiled.marker_tokens(), [marker]);

    let mut m = GrammarMatcher::new(compiled.clone());
    let mut mask = TokenBitmask::new(1, tok.vocab_size());
    let mut allowed = |m: &mut GrammarMatcher, t: u32| {
        m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
        is_allowed(mask.row(0), t)
    };
    // Free text: the marker token may start the call; other special tokens may not.
    assert!(allowed(&mut m, marker));
    assert!(!allowed(&mut m, header));
    m.accept_string("Let me search. ").unwrap();
    assert!(allowed(&mut m, marker));
    m.accept_token(marker).unwrap();
    // Inside the arguments' object, where `<` cannot go, the marker is not allowed.
    assert!(!allowed(&mut m, marker));
    assert!(m.accept_token(marker).is_err());
    m.accept_string(r#"{"q": "x"};"#).unwrap();
    assert!(m.can_terminate());
    assert!(m.accept_token(header).is_err());

    // The same after a round trip through bytes.
    let loaded = Arc::new(CompiledGrammar::from_bytes(&compiled.to_bytes(), tok.clone()).unwrap());
    assert_eq!(loaded.marker_tokens(), [marker]);
    let mut m = GrammarMatcher::new(loaded);
    m.accept_token(marker).unwrap();

    // A grammar without markers never produces special tokens.
    let plain = GrammarCompiler::new(tok.clone())
        .compile(&GrammarSpec::ebnf(r#"root ::= "<|start_header_id|>""#))
        .unwrap();
    assert!(plain.marker_tokens().is_empty());
    assert!(GrammarMatcher::new(plain).accept_token(marker).is_err());
}

/// The brute-force oracle (which derives the producible special tokens from the grammar's
/// markers itself) agrees with the masks at every byte of a text that writes the markers,
/// on the three real tokenizers: each tokenizer's own special token is produced, the
/// other tokenizers spell the same text with ordinary tokens.
#[test]
fn special_markers_agree_with_the_oracle() {
    let tag = r#"{"type": "structural_tag", "format": {"type": "triggered_tags",
        "triggers": ["<|im_start|>", "<|start_header_id|>"],
        "tags": [{"begin": "<|im_start|>", "end": ";", "content": {"type": "const_string", "value": "q"}},
                 {"begin": "<|start_header_id|>", "end": ";", "content": {"type": "const_string", "value": "h"}}]}}"#;
    let grammar = grammask::structural_tag_to_grammar(tag).unwrap();
    assert_eq!(grammar.markers, [";", "<|im_start|>", "<|start_header_id|>", "h", "q"]);
    common::check_masks_along(
        "special markers",
        &grammar,
        &GrammarSpec::StructuralTag(tag.into()),
        // Free text (both markers allowed), inside a marker, after a tag: each oracle mask
        // walks the whole vocabulary, so the text is short and every 2nd byte is checked.
        "x<|im_start|>q;y",
        |_| 2,
    );
}
