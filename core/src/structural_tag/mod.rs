//! Structural tags (XGrammar's format) → grammar IR: free text with tagged regions, the
//! constraint behind tool calling.
//!
//! ```text
//! JSON text ──parse──▶ Node tree (formats, each with its JSON pointer; every field checked)
//!           ──lower──▶ Grammar: one root expression (free text, markers, constants)
//!                      + the rules of embedded JSON schemas / EBNF grammars
//! ```
//!
//! A structural tag is `{"type": "structural_tag", "format": F}` where `F` is one of the
//! formats of XGrammar 0.2.8 (`xgrammar/structural_tag.py`), with the same meaning:
//!
//! | format | fields | language |
//! |---|---|---|
//! | `const_string` | `value` | the string |
//! | `json_schema` | `json_schema`, `style`, `any_order`, `max_whitespace_cnt` | `json`: a JSON instance, any whitespace between tokens, members in schema order (any order with `any_order`); an XML style (`qwen_xml`, `minimax_xml`, `minimax_m3_xml`, `deepseek_xml`, `deepseek_v4_1_xml`, `glm_xml`, `kimi_k3_xml`): the object's members as that style's parameters, string values raw ([`XmlStyle`], module `xml`) |
//! | `qwen_xml_parameter` | `json_schema` | deprecated: `json_schema` with `style: "qwen_xml"` |
//! | `regex` | `pattern` | a full match of the ECMA-262 pattern |
//! | `grammar` | `grammar` | the EBNF grammar's `root` |
//! | `any_text` | `excludes` | any text containing no exclude (inside a `tag`: nor the tag's `end`) |
//! | `sequence` / `or` | `elements` | concatenation / alternatives |
//! | `optional` / `star` / `plus` | `content` | 0–1 / 0+ / 1+ times |
//! | `repeat` | `min`, `max` (-1: unbounded), `content` | `min..=max` times |
//! | `tag` | `begin`, `content`, `end` (string or list) | `begin content end` |
//! | `triggered_tags` | `triggers`, `tags`, `at_least_one`, `stop_after_first`, `excludes` | free text; at the first trigger, the rest of a tag whose `begin` starts with it; repeat |
//! | `tags_with_separator` | `tags`, `separator`, `at_least_one`, `stop_after_first` | tags separated by `separator`, nothing else |
//! | `dispatch` | `rules` (`[pattern, format]` pairs), `loop`, `excludes` | free text; at the first pattern, its format; repeat while `loop` |
//!
//! The older form `{"type": "structural_tag", "structures": [{"begin", "schema", "end"}],
//! "triggers": […]}` is a `triggered_tags` format of JSON-schema tags.
//!
//! # Free text is regular, so masks stay cached
//! Free text is built as a regular expression from an Aho–Corasick automaton over the
//! triggers, excludes and end strings ([`text`](self) module): "text up to the first
//! trigger" is exact — a text that contains a trigger must go on with a tag — and it is
//! part of the same DFA as the trigger and the tag's `begin`, so the mask cache classifies
//! nearly every token at a free-text position wholesale, including tokens that straddle a
//! trigger (`<tool` then `_call>`).
//!
//! # Not supported (typed errors, never silent acceptance)
//! - Token-level formats: `any_tokens`, `token`, `exclude_token`, `token_triggered_tags`,
//!   `token_dispatch`, and a `token` object as a tag's `begin`/`end`. Write the marker as
//!   a string instead: a special token whose text occurs in a tag's literal strings
//!   (`<|python_tag|>` on Llama 3.1, `<|tool_calls_section_begin|>` on Kimi) is produced
//!   as that one token wherever the tag allows its text ([`Grammar::markers`]); stop
//!   tokens stay stop tokens.
//! - `json_schema` with the XML style `cohere_xml`, or with `excludes`; under the other XML
//!   styles, top-level object keywords the layout does not carry (`minProperties`,
//!   `patternProperties`, …) and `allOf`/`not`/`if` on a value that may be a string.
//! - `any_text`'s `max_tokens` and `max_chars`.
//!
//! # Deliberate differences from XGrammar
//! - A field a format does not define is an error ([`StructuralTagErrorKind::UnknownField`]);
//!   pydantic ignores it.
//! - `any_order: true` accepts members in any order, each declared member at most once and
//!   required ones present (JSON Schema's meaning, [`PropertyOrder::Any`]); XGrammar's
//!   looser form also accepts repeated members and missing required ones.
//! - A trigger that begins no tag is an error (XGrammar fails an internal check).
//! - In the XML styles too, `any_order` keeps each argument at most once and the required
//!   ones present.
//!
//! The XML styles are checked against XGrammar 0.2.8 text by text
//! (`tests/integration/structural_tag_xml.rs`, fixture written by
//! `benches/structural_tag/xml_styles_fixture.py`); [`read_xml_arguments`] reads their
//! arguments back for a tool-call parser.
//!
//! [`PropertyOrder::Any`]: crate::json_schema::PropertyOrder::Any
//!
//! ```
//! use std::sync::Arc;
//! use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo, TokenizerOptions};
//! let tag = r#"{"type": "structural_tag", "format": {
//!     "type": "triggered_tags", "triggers": ["<tool_call>"],
//!     "tags": [{"begin": "<tool_call>", "end": "</tool_call>",
//!               "content": {"type": "json_schema", "json_schema": {
//!                   "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}]}}"#;
//! let bytes: Vec<Vec<u8>> = (1u8..128).map(|b| vec![b]).collect();
//! let tok = TokenizerInfo::from_byte_tokens(bytes, &TokenizerOptions::default())?;
//! let compiled = GrammarCompiler::new(Arc::new(tok)).compile(&GrammarSpec::StructuralTag(tag.into()))?;
//! let mut m = GrammarMatcher::new(compiled.clone());
//! m.accept_string(r#"Let me check. <tool_call>{"n": 7}</tool_call> Done."#)?;
//! assert!(m.can_terminate());
//! // After the trigger, only the tag's content may follow.
//! assert!(GrammarMatcher::new(compiled).accept_string(r#"<tool_call>oops"#).is_err());
//! // Errors point into the document.
//! let err = grammask::structural_tag::structural_tag_to_grammar(
//!     r#"{"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": [], "tags": []}}"#,
//! ).unwrap_err();
//! assert_eq!(err.pointer, "/format/triggers");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod lower;
pub(crate) mod parse;
mod text;
mod xml;

pub use error::{StructuralTagError, StructuralTagErrorKind};
pub use xml::{read_xml_arguments, XmlReadError, XmlStyle};

use crate::grammar::{Grammar, ParseLimits};

/// Converts a structural tag document (JSON text) to a grammar whose root generates
/// exactly the outputs the tag allows.
pub fn structural_tag_to_grammar(text: &str) -> Result<Grammar, StructuralTagError> {
    structural_tag_to_grammar_with(text, &ParseLimits::default())
}

/// [`structural_tag_to_grammar`] with the limits for embedded EBNF grammars.
pub fn structural_tag_to_grammar_with(
    text: &str,
    limits: &ParseLimits,
) -> Result<Grammar, StructuralTagError> {
    let value = parse::parse_json(text)?;
    let node = parse::parse_document(&value)?;
    Ok(with_markers(lower::lower(&node, limits)?, &node))
}

/// A structural tag lowered for a compile, whole or staged.
pub(crate) enum Lowered {
    /// The grammar.
    Whole(Grammar),
    /// A shell whose argument schemas are stand-ins ([`Grammar`] rules with
    /// [`crate::grammar::Rule::stand_in`]), and what builds the finished grammar.
    Staged(Grammar, Rest),
}

/// The part of a staged tag built after its shell: the document and its converted schemas.
pub(crate) struct Rest {
    value: serde_json::Value,
    parts: Vec<Option<Grammar>>,
}

impl Rest {
    /// The finished grammar: the one [`structural_tag_to_grammar_with`] makes.
    pub(crate) fn finish(self, limits: &ParseLimits) -> Result<Grammar, StructuralTagError> {
        let node = parse::parse_document(&self.value)?;
        let grammar = lower::lower_converted(&node, limits, self.parts)?;
        Ok(with_markers(grammar, &node))
    }
}

/// Lowers a structural tag for a compile: staged when it holds at least `min_schemas`
/// JSON-style schemas (a tool-calling tag's argument schemas) and the finished grammar
/// differs from the shell only in them, whole otherwise.
pub(crate) fn lower_for_compile(
    text: &str,
    limits: &ParseLimits,
    min_schemas: usize,
) -> Result<Lowered, StructuralTagError> {
    let value = parse::parse_json(text)?;
    let shell = {
        let node = parse::parse_document(&value)?;
        if lower::schema_nodes(&node).len() < min_schemas {
            return Ok(Lowered::Whole(with_markers(lower::lower(&node, limits)?, &node)));
        }
        match lower::lower_shell(&node, limits)? {
            (Some(shell), parts) => (with_markers(shell, &node), parts),
            // (The schemas converted for the shell serve the whole grammar.)
            (None, parts) => {
                let whole = lower::lower_converted(&node, limits, parts)?;
                return Ok(Lowered::Whole(with_markers(whole, &node)));
            }
        }
    };
    Ok(Lowered::Staged(shell.0, Rest { value, parts: shell.1 }))
}

fn with_markers(mut grammar: Grammar, node: &parse::Node) -> Grammar {
    collect_markers(node, &mut grammar.markers);
    grammar.markers.sort();
    grammar.markers.dedup();
    grammar
}

/// The literal texts a tag writes — constants, tag `begin`/`end`, triggers, separators,
/// dispatch patterns — whose special tokens the grammar may then produce
/// ([`Grammar::markers`]); excludes are not among them.
fn collect_markers(node: &parse::Node, out: &mut Vec<String>) {
    use parse::Format;
    fn text(out: &mut Vec<String>, s: &str) {
        if !s.is_empty() {
            out.push(s.to_string())
        }
    }
    match &node.format {
        Format::ConstString(s) => text(out, s),
        Format::TriggeredTags { triggers, .. } => triggers.iter().for_each(|t| text(out, t)),
        Format::TagsWithSeparator { separator, .. } => text(out, separator),
        Format::Dispatch { rules, .. } => rules.iter().for_each(|(pattern, _)| text(out, pattern)),
        _ => {}
    }
    let (tags, children) = node.parts();
    for t in tags {
        text(out, &t.begin);
        t.ends.iter().for_each(|e| text(out, e));
        collect_markers(&t.content, out);
    }
    for c in children {
        collect_markers(c, out);
    }
}
