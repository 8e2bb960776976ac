//! grammask's integration tests, as one test binary (`cargo test --test integration`;
//! one file's tests: `cargo test --test integration tool_presets::`). One binary rather
//! than one per file: each linked the library and its dependencies again and compiled
//! their generic code again, a fifth of our crates' share of a cold CI build; one
//! process also loads each real tokenizer once for every file (`common`).

mod common;

mod bad_input;
mod budget;
mod cli;
mod json_exactness;
mod json_schema_bad_input;
mod json_schema_fuzz;
mod json_schema_semantics;
mod json_schema_suite;
mod lark;
mod mask_oracle;
mod properties;
mod ref_transparency;
mod regex_front;
mod serialize;
mod shared_masks;
mod special_markers;
mod speculative;
mod straddle;
mod structural_tag;
mod structural_tag_xml;
mod tool_calling;
mod tool_detect;
mod tool_glaive;
mod tool_output;
mod tool_presets;
