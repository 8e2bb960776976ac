//! Families whose calls are each one tag holding plain JSON arguments, found by a trigger
//! in free text: Llama 3.x, Qwen 3, EXAONE 4 and Gemma 4 (XGrammar's builders of the same
//! names).

use super::format::tag;
use super::{assemble, params, Ctx, Think, JSON};
use crate::tool_calling::ToolError;
use serde_json::Value;

const THINK_TOKENS: &[&str] = &["<think>", "</think>"];

/// Llama 3.x: `{"name": "NAME", "parameters": ARGS}` in free text; no reasoning block
/// (`reasoning` is ignored).
pub(super) fn llama(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    ctx.triggered_calls("{\"name\": ", THINK_TOKENS, THINK_TOKENS, |k, f| {
        tag(&format!("{{\"name\": \"{}\", \"parameters\": ", f.name), k.args(params(f), JSON), "}")
    })
}

/// Qwen 3: `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>` after a
/// `<think>` block and a blank line.
pub(super) fn qwen_3(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    let suffix = ctx.triggered_calls("<tool_call>", THINK_TOKENS, THINK_TOKENS, |k, f| {
        tag(
            &format!("<tool_call>\n{{\"name\": \"{}\", \"arguments\": ", f.name),
            k.args(params(f), JSON),
            "}\n</tool_call>",
        )
    })?;
    let prefix = ctx.reasoning_prefix(Think { suffix: "\n\n", ..Think::angle(THINK_TOKENS) });
    Ok(assemble(prefix, suffix))
}

/// EXAONE 4: `<tool_call>{"name": "NAME", "arguments": ARGS}</tool_call>`. In enabled
/// mode the think block may hold `<think>` (as XGrammar).
pub(super) fn exaone(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    let suffix = ctx.triggered_calls("<tool_call>", THINK_TOKENS, THINK_TOKENS, |k, f| {
        tag(
            &format!("<tool_call>{{\"name\": \"{}\", \"arguments\": ", f.name),
            k.args(params(f), JSON),
            "}</tool_call>",
        )
    })?;
    let excludes = if ctx.reasoning == super::ReasoningMode::Enabled { &[][..] } else { THINK_TOKENS };
    let prefix = ctx.reasoning_prefix(Think { suffix: "\n\n", ..Think::angle(excludes) });
    Ok(assemble(prefix, suffix))
}

/// Gemma 4: `<|tool_call>call:NAME ARGS<tool_call|>`, reasoning in a
/// `<|channel>thought\n…<channel|>` block that the prompt does not open. (XGrammar keeps
/// this builder out of its registry: Gemma quotes strings with `<|"|>`, which plain JSON
/// arguments do not match.)
pub(super) fn gemma_4(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    const CHANNEL_TOKENS: &[&str] = &["<|channel>", "<channel|>"];
    let suffix = ctx.triggered_calls("<|tool_call>", CHANNEL_TOKENS, CHANNEL_TOKENS, |k, f| {
        tag(&format!("<|tool_call>call:{}", f.name), k.args(params(f), JSON), "<tool_call|>")
    })?;
    let prefix = ctx.reasoning_prefix(Think {
        begin: "<|channel>thought\n",
        end: "<channel|>",
        excludes: CHANNEL_TOKENS,
        prompt_opens: false,
        suffix: "",
    });
    Ok(assemble(prefix, suffix))
}
