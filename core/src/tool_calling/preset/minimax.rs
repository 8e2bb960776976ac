//! MiniMax: M2.5 / M2.7 (`<minimax:tool_call>` with XML parameters) and M3 (recursive
//! namespace-prefixed XML, `<mm:think>` reasoning).

use super::format::{any_text, const_string, or, sequence, tag, tags_with_separator, triggered_tags};
use super::{assemble, params, Ctx, Knobs, ReasoningMode, Think};
use crate::tool_calling::openai::ChoiceMode;
use crate::tool_calling::{FunctionDefinition, ToolError};
use serde_json::Value;

const THINK_TOKENS: &[&str] = &["<think>", "</think>"];

/// MiniMax M2.5 / M2.7:
/// `<minimax:tool_call>\n<invoke name="NAME">\nPARAMETERS</invoke>\n…</minimax:tool_call>`,
/// after `<think>…</think>\n\n`. With reasoning disabled the output starts with the
/// empty think block's remainder the template expects (`\n</think>\n\n`, then `\n\n`).
pub(super) fn minimax(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    const BEGIN: &str = "<minimax:tool_call>\n";
    const END: &str = "</minimax:tool_call>";
    let call = |k: &Knobs, f: &FunctionDefinition| {
        tag(&format!("<invoke name=\"{}\">\n", f.name), k.args(params(f), "minimax_xml"), "</invoke>\n")
    };
    let stop = ctx.k.stop_after_first();
    let suffix = match ctx.choice {
        ChoiceMode::Auto => {
            let calls = ctx.call_tags(call);
            let text = ctx.k.excludes(THINK_TOKENS);
            ctx.section_auto(calls, "<minimax:tool_call>", BEGIN, "", END, text.clone(), text)
        }
        ChoiceMode::Forced => {
            let f = ctx.forced_function()?;
            let one = ctx.roles.call(&f.name, call(&ctx.k, f));
            sequence(vec![const_string(&format!("\n{BEGIN}")), one, const_string(END)])
        }
        ChoiceMode::Required => {
            ctx.require_functions()?;
            let calls = ctx.call_tags(call);
            sequence(vec![
                const_string(&format!("\n{BEGIN}")),
                tags_with_separator(calls, "", true, stop),
                const_string(END),
            ])
        }
    };
    if ctx.reasoning == ReasoningMode::Disabled {
        return Ok(sequence(vec![const_string("\n</think>\n\n"), const_string("\n\n"), suffix]));
    }
    let excludes = if ctx.reasoning == ReasoningMode::Enabled { &[][..] } else { THINK_TOKENS };
    let prefix = ctx.reasoning_prefix(Think { suffix: "\n\n", ..Think::angle(excludes) });
    Ok(assemble(prefix, suffix))
}

/// MiniMax M3: `]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="NAME">ARGS]<]minimax[>[</invoke>\n…]<]minimax[>[</tool_call>`,
/// reasoning in `<mm:think>…</mm:think>` (opened by the prompt when enabled; in auto mode
/// a lone `</mm:think>` also skips it, as the adaptive template writes). Builtin tools
/// are refused.
pub(super) fn minimax_m3(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    const NS: &str = "]<]minimax[>[";
    const THINK_END: &str = "</mm:think>";
    // Not the bare namespace: every M3 element and the trigger start with it.
    const TEXT: &[&str] = &[
        "<mm:think>",
        THINK_END,
        "]<]minimax[>[</tool_call>",
        "]<]minimax[>[<invoke",
        "]<]minimax[>[</invoke>",
    ];
    const REASONING: &[&str] = &[
        "]<]minimax[>[<tool_call>",
        "<mm:think>",
        THINK_END,
        "]<]minimax[>[</tool_call>",
        "]<]minimax[>[<invoke",
        "]<]minimax[>[</invoke>",
    ];
    ctx.refuse_builtins()?;
    let trigger = format!("{NS}<tool_call>");
    let begin = format!("{NS}<tool_call>\n");
    let end = format!("{NS}</tool_call>");
    let call = |k: &Knobs, f: &FunctionDefinition| {
        tag(
            &format!("{NS}<invoke name=\"{}\">", f.name),
            k.args(params(f), "minimax_m3_xml"),
            &format!("{NS}</invoke>\n"),
        )
    };
    let stop = ctx.k.stop_after_first();
    let suffix = match ctx.choice {
        ChoiceMode::Forced => {
            let f = ctx.forced_function()?;
            let one = ctx.roles.call(&f.name, call(&ctx.k, f));
            tag(&begin, one, &end)
        }
        ChoiceMode::Auto | ChoiceMode::Required => {
            let required = ctx.choice == ChoiceMode::Required;
            if required {
                ctx.require_functions()?;
            }
            let calls = ctx.call_tags(call);
            if calls.is_empty() {
                any_text(ctx.k.excludes(REASONING))
            } else {
                let section = tag(&begin, tags_with_separator(calls, "", true, stop), &end);
                triggered_tags(&[&trigger], vec![section], required, stop, ctx.k.excludes(TEXT))
            }
        }
    };
    let mut prefix = ctx.reasoning_prefix(Think {
        begin: "<mm:think>",
        end: THINK_END,
        excludes: REASONING,
        prompt_opens: true,
        suffix: "",
    });
    if ctx.reasoning == ReasoningMode::Auto {
        if let Some(optional) = prefix.as_mut() {
            let block = optional["content"].take();
            optional["content"] = or(vec![block, const_string(THINK_END)]);
        }
    }
    Ok(assemble(prefix, suffix))
}
