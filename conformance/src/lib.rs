//! grammask's conformance suite: one corpus of constraints run through every adapter, the
//! way the `regex` crate runs one test corpus under every engine.
//!
//! The promise to an engine developer is "turn this on and every output is valid, at no
//! cost". This crate checks it:
//!
//! - [`case`]: the corpus — dev MaskBench JSON schemas, `json_object`, llama.cpp and
//!   transformers-CFG grammars, regexes, Lark, tool calling for model presets under every
//!   `tool_choice` — each case with the [`validate::Validator`] that judges it (never the
//!   matcher that produced the output);
//! - [`engine::Engine`]: "an engine under test", implemented by the [`engines`]: the
//!   reference decode loop over `LogitsConstraint`, the router over HTTP (TGI's and
//!   OpenAI's endpoints, streaming and not), mistral.rs in process — the first and last on
//!   random-weight models, which only the grammar keeps valid;
//! - [`run`]: validity (valid / invalid / cut off / errors, special tokens, same seed
//!   same output) with panics and hangs contained, and overhead (constrained against
//!   unconstrained tokens/s, per-step costs);
//! - [`report`]: the markdown table, the chart, the one-line JSON summary;
//! - [`clients`]: the official Python clients (`text_generation`, `openai`) against the
//!   router, their verdict in the report.
//!
//! `cargo run --release -p grammask-conformance -- report` writes
//! `docs/conformance/report.md`; see the binary's `--help`.
//!
//! ```
//! use grammask_conformance::case::{corpus, CorpusOptions, Kind};
//! let cases = corpus(&CorpusOptions::default()).unwrap();
//! assert!(cases.iter().any(|c| c.kind() == Kind::Tools));
//! // Every case's validator rejects what its constraint cannot produce.
//! assert!(cases.iter().filter(|c| c.kind() == Kind::JsonSchema).all(|c| c.validator.check("}{", None).is_err()));
//! ```
#![deny(missing_docs)]

pub mod case;
pub mod clients;
pub mod engine;
pub mod engines;
pub mod llg;
pub mod report;
pub mod run;
pub mod tool_reader;
pub mod validate;
pub mod xgrammar;
