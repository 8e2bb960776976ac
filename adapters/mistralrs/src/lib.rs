//! grammask for [mistral.rs](https://crates.io/crates/mistralrs): `grammar`, `json_schema`,
//! regex and Lark constraints served by grammask through mistral.rs's public
//! `CustomLogitsProcessor`, with no fork of the engine.
//!
//! - [`ModelVocab`]: the model's vocabulary (from `tokenizer.json` or a GGUF file) and the
//!   stop set mistral.rs stops on.
//! - [`Grammask`]: one per model; compiles constraints (cached) and turns them on for a
//!   request ([`Grammask::constrain`]), from a mistral.rs [`Constraint`](mistralrs::Constraint),
//!   an OpenAI [`ResponseFormat`] or any grammask [`GrammarSpec`](grammask::GrammarSpec).
//! - [`GrammaskProcessor`]: the per-request processor; one parse state per sequence, masks
//!   applied in place on the CPU logits mistral.rs hands it.
//!
//! What the seam cannot give (jump-forward, batched fills, GPU apply) and the upstream
//! change that would: `docs/mistralrs.md`.
#![deny(missing_docs)]

mod constrain;
mod error;
mod processor;
mod spec;
pub mod tiny;
mod vocab;

pub use constrain::{Constrained, Grammask, Outcome};
pub use error::{Error, ProcessorError};
pub use grammask::tool_calling::{JsonSchemaFormat, ResponseFormat};
pub use processor::{GrammaskProcessor, ProcessorStats};
pub use spec::spec_from_constraint;
pub use vocab::ModelVocab;
