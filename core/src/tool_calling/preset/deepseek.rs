//! DeepSeek: R1 and V3.1 (special-token call sections, JSON arguments) and the DSML
//! families V3.2, V4 and V4.1 (XML parameters).

use super::format::{const_string, sequence, tag, tags_with_separator};
use super::{assemble, params, Ctx, Knobs, Think, JSON};
use crate::tool_calling::openai::ChoiceMode;
use crate::tool_calling::{FunctionDefinition, ToolError};
use serde_json::Value;

const THINK_TOKENS: &[&str] = &["<think>", "</think>"];
const CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const CALLS_END: &str = "<｜tool▁calls▁end｜>";
const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const CALL_END: &str = "<｜tool▁call▁end｜>";
const SEP: &str = "<｜tool▁sep｜>";

/// DeepSeek R1:
/// `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`,
/// calls split by a newline. A forced call is one tag spanning the whole section.
pub(super) fn r1(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    let call = |k: &Knobs, f: &FunctionDefinition| {
        tag(
            &format!("{CALL_BEGIN}function{SEP}{}\n```json\n", f.name),
            k.args(params(f), JSON),
            &format!("\n```{CALL_END}"),
        )
    };
    let suffix = match ctx.choice {
        ChoiceMode::Auto => {
            let calls = ctx.call_tags(call);
            let text = ctx.k.excludes(THINK_TOKENS);
            ctx.section_auto(calls, CALLS_BEGIN, CALLS_BEGIN, "\n", CALLS_END, text.clone(), text)
        }
        ChoiceMode::Forced => {
            let f = ctx.forced_function()?;
            let whole = tag(
                &format!("{CALLS_BEGIN}{CALL_BEGIN}function{SEP}{}\n```json\n", f.name),
                ctx.k.args(params(f), JSON),
                &format!("\n```{CALL_END}{CALLS_END}"),
            );
            ctx.roles.call(&f.name, whole)
        }
        ChoiceMode::Required => {
            ctx.require_functions()?;
            let calls = ctx.call_tags(call);
            tag(CALLS_BEGIN, tags_with_separator(calls, "\n", true, ctx.k.stop_after_first()), CALLS_END)
        }
    };
    let prefix = ctx.reasoning_prefix(Think::angle(THINK_TOKENS));
    Ok(assemble(prefix, suffix))
}

/// DeepSeek V3.1 (and V3.2-Exp):
/// `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`.
pub(super) fn v3_1(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    let call = |k: &Knobs, f: &FunctionDefinition| {
        tag(&format!("{CALL_BEGIN}{}{SEP}", f.name), k.args(params(f), JSON), CALL_END)
    };
    let suffix = match ctx.choice {
        ChoiceMode::Auto => {
            let calls = ctx.call_tags(call);
            let text = ctx.k.excludes(THINK_TOKENS);
            ctx.section_auto(calls, CALLS_BEGIN, CALLS_BEGIN, "", CALLS_END, text.clone(), text)
        }
        ChoiceMode::Forced => {
            let f = ctx.forced_function()?;
            let whole = tag(
                &format!("{CALLS_BEGIN}{CALL_BEGIN}{}{SEP}", f.name),
                ctx.k.args(params(f), JSON),
                &format!("{CALL_END}{CALLS_END}"),
            );
            ctx.roles.call(&f.name, whole)
        }
        ChoiceMode::Required => {
            ctx.require_functions()?;
            let calls = ctx.call_tags(call);
            tag(CALLS_BEGIN, tags_with_separator(calls, "", true, ctx.k.stop_after_first()), CALLS_END)
        }
    };
    let prefix = ctx.reasoning_prefix(Think::angle(THINK_TOKENS));
    Ok(assemble(prefix, suffix))
}

/// The DSML generations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dsml {
    /// `<｜DSML｜function_calls>` / `<｜DSML｜invoke>`, `deepseek_xml` parameters.
    V3_2,
    /// `<｜DSML｜tool_calls>` / `<｜DSML｜invoke>`, `deepseek_xml` parameters.
    V4,
    /// `<｜DSML｜ calls>` / `<｜DSML｜ invoke>` (space-prefixed), `deepseek_v4_1_xml`.
    V4_1,
}

/// DeepSeek V3.2 / V4 / V4.1:
/// `<｜DSML｜CALLS>\n<｜DSML｜INVOKE name="NAME">\nPARAMETERS</｜DSML｜INVOKE>\n…</｜DSML｜CALLS>`.
/// Each invoke ends with the newline that joins it to the next, so the separator is
/// empty. A required or forced section is preceded by a blank line, as the chat
/// templates write it; with no tools V4.1 also keeps its calls marker out of free text.
pub(super) fn dsml(ctx: &mut Ctx<'_>, generation: Dsml) -> Result<Value, ToolError> {
    let (invoke, calls_name, style) = match generation {
        Dsml::V3_2 => ("invoke", "function_calls", "deepseek_xml"),
        Dsml::V4 => ("invoke", "tool_calls", "deepseek_xml"),
        Dsml::V4_1 => (" invoke", " calls", "deepseek_v4_1_xml"),
    };
    let trigger = format!("<｜DSML｜{calls_name}>");
    let begin = format!("{trigger}\n");
    let end = format!("</｜DSML｜{calls_name}>");
    let call = |k: &Knobs, f: &FunctionDefinition| {
        tag(
            &format!("<｜DSML｜{invoke} name=\"{}\">\n", f.name),
            k.args(params(f), style),
            &format!("</｜DSML｜{invoke}>\n"),
        )
    };
    let stop = ctx.k.stop_after_first();
    let suffix = match ctx.choice {
        ChoiceMode::Auto => {
            let calls = ctx.call_tags(call);
            let text = ctx.k.excludes(THINK_TOKENS);
            let mut empty = text.clone();
            if generation == Dsml::V4_1 {
                // With no tool to call (tool_choice "none" included), a calls block must
                // not slip through as text, whatever `exclude_special_tokens` says.
                empty.push(trigger.clone());
            }
            ctx.section_auto(calls, &trigger, &begin, "", &end, text, empty)
        }
        ChoiceMode::Forced => {
            let f = ctx.forced_function()?;
            let one = ctx.roles.call(&f.name, call(&ctx.k, f));
            sequence(vec![const_string(&format!("\n\n{begin}")), one, const_string(&end)])
        }
        ChoiceMode::Required => {
            ctx.require_functions()?;
            let calls = ctx.call_tags(call);
            sequence(vec![
                const_string(&format!("\n\n{begin}")),
                tags_with_separator(calls, "", true, stop),
                const_string(&end),
            ])
        }
    };
    let prefix = ctx.reasoning_prefix(Think::angle(THINK_TOKENS));
    Ok(assemble(prefix, suffix))
}
