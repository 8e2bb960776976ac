//! Moonshot's Kimi K2 (special-token call sections) and Kimi K3 (`<|open|>` / `<|close|>`
//! blocks with one tag per argument).

use super::format::{any_text, const_string, optional, regex, sequence, tag, tags_with_separator};
use super::{assemble, params, Ctx, Knobs, ReasoningMode, Think, JSON};
use crate::tool_calling::openai::ChoiceMode;
use crate::tool_calling::{FunctionDefinition, ToolError};
use serde_json::Value;

const THINK_TOKENS: &[&str] = &["<think>", "</think>"];

/// Kimi K2 / K2.5:
/// `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>ARGS<|tool_call_end|>…<|tool_calls_section_end|>`.
/// The prompt does not prefill `<think>`, so in enabled mode the think block may contain
/// it (as XGrammar).
pub(super) fn kimi_k2(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    const CALL_BEGIN: &str = "<|tool_call_begin|>";
    const SECTION_BEGIN: &str = "<|tool_calls_section_begin|>";
    const SECTION_END: &str = "<|tool_calls_section_end|>";
    let call = |k: &Knobs, f: &FunctionDefinition| {
        tag(
            &format!("{CALL_BEGIN}functions.{}:", f.name),
            sequence(vec![
                regex(r"\d+"),
                const_string("<|tool_call_argument_begin|>"),
                k.args(params(f), JSON),
            ]),
            "<|tool_call_end|>",
        )
    };
    let stop = ctx.k.stop_after_first();
    let suffix = match ctx.choice {
        ChoiceMode::Auto => {
            let calls = ctx.call_tags(call);
            let text = ctx.k.excludes(&["<think>", "</think>", CALL_BEGIN]);
            ctx.section_auto(
                calls,
                SECTION_BEGIN,
                SECTION_BEGIN,
                "",
                SECTION_END,
                text,
                ctx.k.excludes(THINK_TOKENS),
            )
        }
        ChoiceMode::Forced => {
            let f = ctx.forced_function()?;
            let one = ctx.roles.call(&f.name, call(&ctx.k, f));
            sequence(vec![const_string(SECTION_BEGIN), one, const_string(SECTION_END)])
        }
        ChoiceMode::Required => {
            ctx.require_functions()?;
            let calls = ctx.call_tags(call);
            sequence(vec![
                const_string(SECTION_BEGIN),
                tags_with_separator(calls, "", true, stop),
                const_string(SECTION_END),
            ])
        }
    };
    let excludes = if ctx.reasoning == ReasoningMode::Auto { THINK_TOKENS } else { &[][..] };
    let prefix = ctx.reasoning_prefix(Think::angle(excludes));
    Ok(assemble(prefix, suffix))
}

/// Kimi K3: `<|open|>think<|sep|>…<|close|>think<|sep|>`, then a response block
/// (`<|open|>response<|sep|>…<|close|>response<|sep|>`, [`Role::Content`]), then
/// optionally a tools block of `<|open|>call tool="NAME" index="N"<|sep|>ARGS<|close|>call<|sep|>`,
/// then `<|close|>message<|sep|>`. The prompt opens the first block (think, or response
/// when reasoning is disabled), so the output starts inside it.
///
/// [`Role::Content`]: crate::tool_calling::Role::Content
pub(super) fn kimi_k3(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    const OPEN: &str = "<|open|>";
    const CLOSE: &str = "<|close|>";
    const SEP: &str = "<|sep|>";
    const TOOLS_BEGIN: &str = "<|open|>tools<|sep|>";
    const TOOLS_END: &str = "<|close|>tools<|sep|>";
    const SPECIAL: &[&str] = &[OPEN, CLOSE];
    let call = |k: &Knobs, f: &FunctionDefinition| {
        tag(
            &format!("{OPEN}call tool=\"{}\" index=\"", f.name),
            sequence(vec![
                regex(r"\d+"),
                const_string(&format!("\"{SEP}")),
                k.args_excluding(params(f), "kimi_k3_xml", k.excludes(&[OPEN, CLOSE, SEP])),
            ]),
            &format!("{CLOSE}call{SEP}"),
        )
    };
    let stop = ctx.k.stop_after_first();
    let tools_part = match ctx.choice {
        ChoiceMode::Auto => {
            let calls = ctx.call_tags(call);
            (!calls.is_empty())
                .then(|| optional(tag(TOOLS_BEGIN, tags_with_separator(calls, "", true, stop), TOOLS_END)))
        }
        ChoiceMode::Forced => {
            let f = ctx.forced_function()?;
            let one = ctx.roles.call(&f.name, call(&ctx.k, f));
            Some(sequence(vec![const_string(TOOLS_BEGIN), one, const_string(TOOLS_END)]))
        }
        ChoiceMode::Required => {
            ctx.require_functions()?;
            let calls = ctx.call_tags(call);
            Some(sequence(vec![
                const_string(TOOLS_BEGIN),
                tags_with_separator(calls, "", true, stop),
                const_string(TOOLS_END),
            ]))
        }
    };
    let prefix = ctx.reasoning_prefix(Think {
        begin: "<|open|>think<|sep|>",
        end: "<|close|>think<|sep|>",
        excludes: SPECIAL,
        prompt_opens: true,
        suffix: "",
    });
    let response_begin =
        if ctx.reasoning == ReasoningMode::Disabled { "" } else { "<|open|>response<|sep|>" };
    let response =
        ctx.roles.content(tag(response_begin, any_text(ctx.k.excludes(SPECIAL)), "<|close|>response<|sep|>"));
    let mut elements: Vec<Value> = prefix.into_iter().collect();
    elements.push(response);
    elements.extend(tools_part);
    elements.push(const_string("<|close|>message<|sep|>"));
    Ok(sequence(elements))
}
