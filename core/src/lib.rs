//! grammask: structured generation for LLM inference.
//!
//! A constraint (an EBNF or Lark grammar, a JSON Schema, a regex, a structural tag, or the
//! builtin JSON grammar) is compiled against a
//! model's tokenizer; at every decoding step grammask answers "which token ids are legal
//! next?" as a packed bitmask that the engine applies to the logits before sampling.
//!
//! # The pipeline
//! Data flows one way; each stage is a module with one job:
//!
//! ```text
//! spec ──▶ grammar (IR, EBNF parser/printer) ──▶ automata (byte-level DFA per rule)
//!      ──▶ compiler (CompiledGrammar: lazy per-state token-mask cache)
//!      ──▶ matcher (Earley parse state, fill/accept/rollback/fork/jump-forward)
//!      ──▶ bitmask (packed rows, CPU apply) ──▶ adapters / GPU kernel
//! ```
//!
//! - [`tokenizer`]: token bytes, special/stop tokens, the vocabulary trie.
//! - [`grammar`]: the IR, the EBNF dialect, the builtin JSON grammar.
//! - [`automata`]: optimization passes and per-rule DFAs.
//! - [`compiler`]: [`GrammarCompiler`], [`CompiledGrammar`] and the adaptive mask cache.
//! - [`structural_tag`]: XGrammar's structural tags (free text with tagged regions).
//! - [`lark`]: Lark grammars in llguidance's dialect (what mistral.rs passes as `Constraint::Lark`).
//! - [`matcher`]: the [`GrammarMatcher`] parse state.
//! - [`bitmask`]: [`TokenBitmask`] and applying masks to logits.
//! - [`batch`]: many constraints' rows filled in one parallel call.
//! - [`LogitsConstraint`]: the trait engines program against (with a decode-loop example).
//!
//! # Quick start
//! ```
//! use std::sync::Arc;
//! use grammask::{GrammarCompiler, GrammarMatcher, TokenizerInfo, TokenizerOptions, TokenBitmask};
//! let vocab: Vec<Vec<u8>> = ["true", "false", "tr", "ue", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
//! let tok = TokenizerInfo::from_byte_tokens(vocab, &TokenizerOptions { stop_tokens: Some(vec![4]), ..Default::default() })?;
//! let compiled = GrammarCompiler::new(Arc::new(tok)).compile_ebnf(r#"root ::= "true" | "false""#)?;
//! let mut m = GrammarMatcher::new(compiled);
//! let mut mask = TokenBitmask::new(1, m.vocab_size());
//! m.fill_next_token_bitmask(mask.row_mut(0))?;
//! assert_eq!(mask.allowed_ids(0), vec![0, 1, 2]);
//! m.accept_token(2)?; // "tr"
//! m.fill_next_token_bitmask(mask.row_mut(0))?;
//! assert_eq!(mask.allowed_ids(0), vec![3]);
//! # Ok::<(), grammask::Error>(())
//! ```
#![deny(missing_docs)]

#[cfg(feature = "mimalloc-options")]
pub mod alloc;
pub mod automata;
pub mod batch;
pub mod bitmask;
pub mod budget;
pub mod compiler;
mod constraint;
mod crew;
mod error;
pub mod grammar;
mod interner;
pub mod json_schema;
pub mod lark;
pub mod matcher;
mod memo;
pub mod regex;
pub mod structural_tag;
pub mod tokenizer;
pub mod tool_calling;

pub use bitmask::TokenBitmask;
pub use compiler::{CompileControl, CompileOptions, CompiledGrammar, GrammarCompiler, GrammarSpec};
pub use constraint::LogitsConstraint;
pub use error::{Error, Result};
pub use grammar::{Grammar, GrammarError, GrammarErrorKind};
pub use json_schema::{json_schema_str_to_grammar, json_schema_to_grammar, JsonSchemaOptions, SchemaError};
pub use lark::{lark_to_grammar, LarkError};
pub use matcher::GrammarMatcher;
pub use regex::{regex_to_grammar, RegexError};
pub use structural_tag::{structural_tag_to_grammar, StructuralTagError};
pub use tokenizer::{TokenizerInfo, TokenizerOptions, VocabKind};
