//! Families whose call arguments are XML-like parameter lists (`json_schema` content in
//! an XML `style`): Qwen 3.5 / Qwen 3 Coder, MiMo, GLM 4.7 and Cohere Command.

use super::format::{const_string, regex, sequence, tag, tags_with_separator};
use super::{assemble, params, Ctx, ReasoningMode, Think};
use crate::tool_calling::openai::ChoiceMode;
use crate::tool_calling::ToolError;
use serde_json::Value;

const THINK_TOKENS: &[&str] = &["<think>", "</think>"];

/// Qwen 3.5 and Qwen 3 Coder:
/// `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>…\n</function>\n</tool_call>`.
/// The trigger is `<tool_call>` itself, so free text holds no `<tool_call>` but a call's
/// own: the published parsers (vLLM's `qwen3_coder`, the model card's) start a call at
/// any `<tool_call>`, so one not followed by `\n<function=` would be read as a broken
/// call. XGrammar's preset triggers on `<tool_call>\n<function=` and lets a bare
/// `<tool_call>` through; here the tag deviates from XGrammar's on purpose, in that one
/// string (`tool_presets.rs`).
pub(super) fn qwen_3_5(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    let suffix = ctx.triggered_calls("<tool_call>", THINK_TOKENS, THINK_TOKENS, |k, f| {
        tag(
            &format!("<tool_call>\n<function={}>\n", f.name),
            k.args(params(f), "qwen_xml"),
            "\n</function>\n</tool_call>",
        )
    })?;
    let prefix = ctx.reasoning_prefix(Think { suffix: "\n\n", ..Think::angle(THINK_TOKENS) });
    Ok(assemble(prefix, suffix))
}

/// MiMo V2.6: Qwen's XML calls without the newlines between wrappers; the prompt does not
/// open the think block. Builtin tools are refused.
pub(super) fn mimo(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    const TEXT: &[&str] = &["<think>", "</think>", "</tool_call>", "<function="];
    const REASONING: &[&str] = &["<tool_call>", "<think>", "</think>", "</tool_call>", "<function="];
    ctx.refuse_builtins()?;
    let suffix = ctx.triggered_calls("<tool_call>", TEXT, REASONING, |k, f| {
        tag(
            &format!("<tool_call><function={}>", f.name),
            k.args(params(f), "qwen_xml"),
            "</function></tool_call>",
        )
    })?;
    let prefix = ctx.reasoning_prefix(Think { prompt_opens: false, ..Think::angle(REASONING) });
    Ok(assemble(prefix, suffix))
}

/// GLM 4.7 / GLM 5: `<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>…</tool_call>`.
/// The argument control tokens are kept out of all free text, and `<tool_call>` out of
/// reasoning too (it can only start a call after the think block).
pub(super) fn glm_4_7(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    const TEXT: &[&str] =
        &["<think>", "</think>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"];
    const REASONING: &[&str] = &[
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
    ];
    let suffix = ctx.triggered_calls("<tool_call>", TEXT, REASONING, |k, f| {
        tag(&format!("<tool_call>{}", f.name), k.args(params(f), "glm_xml"), "</tool_call>")
    })?;
    let prefix = ctx.reasoning_prefix(Think::angle(REASONING));
    Ok(assemble(prefix, suffix))
}

/// Cohere Command: `<cofl:tool_calls><cofl:tool_call id="N" name="NAME">ARGS</cofl:tool_call>…</cofl:tool_calls>`,
/// reasoning in `<|START_THINKING|>…<|END_THINKING|>`. The name follows the call id, so
/// it is part of the call tag's content, not of its `begin`.
pub(super) fn cohere(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    const THINKING: &[&str] = &["<|START_THINKING|>", "<|END_THINKING|>"];
    const BEGIN: &str = "<cofl:tool_calls>";
    const END: &str = "</cofl:tool_calls>";
    let call = |k: &super::Knobs, f: &crate::tool_calling::FunctionDefinition| {
        tag(
            "<cofl:tool_call id=\"",
            sequence(vec![
                regex(r"\d+"),
                const_string(&format!("\" name=\"{}\">", f.name)),
                k.args(params(f), "cohere_xml"),
            ]),
            "</cofl:tool_call>",
        )
    };
    let stop = ctx.k.stop_after_first();
    let suffix = match ctx.choice {
        ChoiceMode::Auto => {
            let calls = ctx.call_tags(call);
            ctx.section_auto(calls, BEGIN, BEGIN, "", END, ctx.k.excludes(THINKING), ctx.k.excludes(THINKING))
        }
        ChoiceMode::Forced => {
            let f = ctx.forced_function()?;
            let one = ctx.roles.call(&f.name, call(&ctx.k, f));
            sequence(vec![const_string(BEGIN), one, const_string(END)])
        }
        ChoiceMode::Required => {
            ctx.require_functions()?;
            let calls = ctx.call_tags(call);
            sequence(vec![const_string(BEGIN), tags_with_separator(calls, "", true, stop), const_string(END)])
        }
    };
    let excludes = if ctx.reasoning == ReasoningMode::Enabled { &[][..] } else { THINKING };
    let prefix = ctx.reasoning_prefix(Think {
        begin: "<|START_THINKING|>",
        end: "<|END_THINKING|>",
        excludes,
        prompt_opens: true,
        suffix: "",
    });
    Ok(assemble(prefix, suffix))
}
