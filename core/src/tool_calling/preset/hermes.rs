//! Hermes 2 Pro / Hermes 3 (NousResearch), not in XGrammar.
//!
//! A call is `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>`: the block
//! the Hermes chat templates render for an assistant's tool calls (`"name"` first, then
//! `"arguments"`, one call per block, newline-delimited inside the block), which is what
//! the model learned to write and what Hermes tool-call parsers read. It is Qwen 3's call
//! syntax, and the tag is built the same way — a tag per tool whose `begin` holds the
//! name, found by the `<tool_call>` trigger in free text — but Hermes models have no
//! reasoning block, so `reasoning` is ignored (as for Llama).
//!
//! - `auto`: free text with any number of call blocks (at most one without parallel
//!   calls, which then ends the output); `required`: the same with at least one block;
//!   a forced tool: exactly its one block.
//! - With `exclude_special_tokens`, free text cannot contain `</tool_call>`,
//!   `<tool_response>` or `</tool_response>` (added tokens of the Hermes tokenizers that
//!   only the template writes); with no tool to call it cannot contain `<tool_call>`
//!   either, so a call the grammar cannot check is never written as text.

use super::format::tag;
use super::{params, Ctx, JSON};
use crate::tool_calling::ToolError;
use serde_json::Value;

/// Kept out of free text next to calls.
const TEXT: &[&str] = &["</tool_call>", "<tool_response>", "</tool_response>"];
/// Kept out of free text when there is no tool to call.
const TEXT_WITHOUT_TOOLS: &[&str] = &["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"];

/// See the module docs.
pub(super) fn hermes(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    ctx.triggered_calls("<tool_call>", TEXT, TEXT_WITHOUT_TOOLS, |k, f| {
        tag(
            &format!("<tool_call>\n{{\"name\": \"{}\", \"arguments\": ", f.name),
            k.args(params(f), JSON),
            "}\n</tool_call>",
        )
    })
}
