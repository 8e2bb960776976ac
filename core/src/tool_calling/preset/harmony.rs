//! gpt-oss's Harmony format: a stream of messages, each a channel (`analysis`
//! reasoning, `final` content, `commentary` tool calls) split by `<|start|>assistant`.

use super::format::{any_text, const_string, optional, or, sequence, tag, tag_ends, tags_with_separator};
use super::{builtin_params, params, Ctx, Knobs, ReasoningMode};
use crate::tool_calling::openai::ChoiceMode;
use crate::tool_calling::{Role, ToolError};
use serde_json::Value;

const CALL_END: &str = "<|call|>";
const MESSAGE_ENDS: &[&str] = &["<|end|>", "<|return|>"];
const SEPARATOR: &str = "<|start|>assistant";

/// Harmony. A function call is written three ways (the recipient before or after the
/// channel, with or without `<|constrain|>`), a builtin tool's call two ways (`code`
/// arguments); each way is its own [`Role::Call`] tag. The `final` message is
/// [`Role::Content`], the `analysis` message (unless reasoning is disabled)
/// [`Role::Reasoning`]. Without parallel calls, any number of other messages may come
/// before the one call, which ends the turn.
pub(super) fn harmony(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    let k = ctx.k;
    // (tag, name) per way of writing each call, in XGrammar's order.
    let mut calls: Vec<(Value, String)> = Vec::new();
    let functions = |calls: &mut Vec<(Value, String)>, ctx: &Ctx<'_>| {
        for f in &ctx.functions {
            calls.extend(function_tags(&k, &f.name, params(f)).into_iter().map(|t| (t, f.name.clone())));
        }
    };
    let builtins = |calls: &mut Vec<(Value, String)>, ctx: &Ctx<'_>| {
        for b in &ctx.builtins {
            let name = b.output_name();
            calls
                .extend(builtin_tags(&k, name, builtin_params(b)).into_iter().map(|t| (t, name.to_string())));
        }
    };
    let mut messages = Vec::new();
    match ctx.choice {
        ChoiceMode::Auto => {
            functions(&mut calls, ctx);
            builtins(&mut calls, ctx);
            let fin = tag_ends("<|channel|>final<|message|>", any_text(Vec::new()), MESSAGE_ENDS);
            messages.push((fin, Role::Content));
        }
        ChoiceMode::Forced => {
            if let Some(b) = ctx.builtins.first() {
                let name = b.output_name();
                calls.extend(
                    builtin_tags(&k, name, builtin_params(b)).into_iter().map(|t| (t, name.to_string())),
                );
            } else {
                let f = ctx.forced_function()?;
                calls.extend(function_tags(&k, &f.name, params(f)).into_iter().map(|t| (t, f.name.clone())));
            }
        }
        ChoiceMode::Required => {
            builtins(&mut calls, ctx);
            functions(&mut calls, ctx);
        }
    }
    if ctx.reasoning != ReasoningMode::Disabled {
        let analysis = tag_ends("<|channel|>analysis<|message|>", any_text(Vec::new()), MESSAGE_ENDS);
        messages.push((analysis, Role::Reasoning));
    }
    let call_tags: Vec<Value> = calls.into_iter().map(|(t, name)| ctx.roles.call(&name, t)).collect();
    let message_tags: Vec<Value> = messages
        .into_iter()
        .map(|(t, role)| match role {
            Role::Content => ctx.roles.content(t),
            _ => ctx.roles.reasoning(t),
        })
        .collect();

    if ctx.choice != ChoiceMode::Auto {
        return Ok(with_a_call(call_tags, message_tags, k.parallel_tool_calls));
    }
    if k.parallel_tool_calls || call_tags.is_empty() {
        // Message order in the list: calls, then final, then analysis (XGrammar's).
        let all: Vec<Value> = call_tags.into_iter().chain(message_tags).collect();
        return Ok(tags_with_separator(all, SEPARATOR, false, false));
    }
    // Capping the whole stream at one message would also forbid an ordinary analysis or
    // final message, so only the calls are capped: other messages, then at most one call.
    let one_call = tags_with_separator(call_tags, SEPARATOR, true, true);
    if message_tags.is_empty() {
        return Ok(optional(one_call));
    }
    let messages_then_call = sequence(vec![
        tags_with_separator(message_tags.clone(), SEPARATOR, true, false),
        const_string(SEPARATOR),
        one_call.clone(),
    ]);
    Ok(or(vec![tags_with_separator(message_tags, SEPARATOR, false, false), one_call, messages_then_call]))
}

/// The stream under `required` or a named tool: messages, then at least one call (exactly
/// one without parallel calls, which ends the turn), then, with parallel calls, any
/// messages and calls.
///
/// # Why this differs from XGrammar
/// XGrammar 0.2.8 builds `required` and forced Harmony tags like `auto`'s, so a turn of
/// analysis messages alone, or nothing at all, satisfies them; OpenAI's `tool_choice`
/// promises at least one call, and the other families' presets keep that promise
/// (`at_least_one`). grammask keeps it here too: a call is required.
fn with_a_call(call_tags: Vec<Value>, message_tags: Vec<Value>, parallel: bool) -> Value {
    let one_call = tags_with_separator(call_tags.clone(), SEPARATOR, true, true);
    let mut elements = Vec::new();
    if !message_tags.is_empty() {
        elements.push(optional(sequence(vec![
            tags_with_separator(message_tags.clone(), SEPARATOR, true, false),
            const_string(SEPARATOR),
        ])));
    }
    elements.push(one_call);
    if parallel {
        let all: Vec<Value> = call_tags.into_iter().chain(message_tags).collect();
        elements.push(optional(sequence(vec![
            const_string(SEPARATOR),
            tags_with_separator(all, SEPARATOR, true, false),
        ])));
    }
    if elements.len() == 1 {
        return elements.remove(0);
    }
    sequence(elements)
}

/// The three ways Harmony writes a function call.
fn function_tags(k: &Knobs, name: &str, schema: Value) -> Vec<Value> {
    let content = k.args(schema, super::JSON);
    vec![
        tag(
            &format!("<|channel|>commentary to=functions.{name}<|constrain|>json<|message|>"),
            content.clone(),
            CALL_END,
        ),
        tag(
            &format!(" to=functions.{name}<|channel|>commentary <|constrain|>json<|message|>"),
            content.clone(),
            CALL_END,
        ),
        tag(&format!(" to=functions.{name}<|channel|>commentary json<|message|>"), content, CALL_END),
    ]
}

/// The two ways Harmony writes a builtin tool's call.
fn builtin_tags(k: &Knobs, name: &str, schema: Value) -> Vec<Value> {
    let content = k.args(schema, super::JSON);
    vec![
        tag(&format!("<|channel|>commentary to={name} code<|message|>"), content.clone(), CALL_END),
        tag(&format!(" to={name}<|channel|>commentary code<|message|>"), content, CALL_END),
    ]
}
