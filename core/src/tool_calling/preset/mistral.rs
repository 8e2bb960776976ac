//! Mistral (tokenizer v3: Mistral 7B Instruct v0.3, Mistral Nemo), not in XGrammar.
//!
//! The calls of a response are one JSON array after the `[TOOL_CALLS]` control token:
//! `[TOOL_CALLS][{"name": "NAME", "arguments": ARGS}, {"name": …}]`. The objects are
//! written as `json.dumps` writes them (`"name"` then `"arguments"`, `", "` between
//! objects), the shape mistral-common encodes and the tokenizer-v3 models produce; no
//! call ids (the v3 templates add ids only when replaying history) and no space after
//! `[TOOL_CALLS]`. Each call is a tag `{"name": "NAME", "arguments": ` … `}`
//! ([`Role::Call`]); the array is a tag `[TOOL_CALLS][` … `]` around them.
//!
//! - `auto`: free text, then optionally the array, which ends the output: the model
//!   stops (`</s>`) after its calls, and one array holds all of them. Free text *before*
//!   `[TOOL_CALLS]` is allowed, as the models sometimes write a sentence first.
//! - `required`: the array alone (at least one call); a forced tool: the array with its
//!   one call.
//! - Without parallel calls the array holds exactly one call.
//! - Mistral 7B v0.3 and Nemo have no reasoning block: `reasoning` is ignored.
//! - With `exclude_special_tokens`, free text cannot contain the other control tokens of
//!   the v3 vocabulary (`[INST]`, `[/INST]`, `[AVAILABLE_TOOLS]`, `[/AVAILABLE_TOOLS]`,
//!   `[TOOL_RESULTS]`, `[/TOOL_RESULTS]`), nor `[TOOL_CALLS]` when there is no tool to
//!   call.
//!
//! [`Role::Call`]: crate::tool_calling::Role::Call

use super::format::{any_text, tag, tags_with_separator, triggered_tags};
use super::{params, Ctx, JSON};
use crate::tool_calling::openai::ChoiceMode;
use crate::tool_calling::ToolError;
use serde_json::Value;

const CALLS: &str = "[TOOL_CALLS]";
const ARRAY_BEGIN: &str = "[TOOL_CALLS][";
const ARRAY_END: &str = "]";
const TEXT: &[&str] =
    &["[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"];

/// See the module docs.
pub(super) fn mistral(ctx: &mut Ctx<'_>) -> Result<Value, ToolError> {
    let call = |k: &super::Knobs, f: &crate::tool_calling::FunctionDefinition| {
        tag(&format!("{{\"name\": \"{}\", \"arguments\": ", f.name), k.args(params(f), JSON), "}")
    };
    let stop = ctx.k.stop_after_first();
    Ok(match ctx.choice {
        ChoiceMode::Forced => {
            let f = ctx.forced_function()?;
            let one = ctx.roles.call(&f.name, call(&ctx.k, f));
            tag(ARRAY_BEGIN, one, ARRAY_END)
        }
        ChoiceMode::Required => {
            ctx.require_functions()?;
            let calls = ctx.call_tags(call);
            tag(ARRAY_BEGIN, tags_with_separator(calls, ", ", true, stop), ARRAY_END)
        }
        ChoiceMode::Auto => {
            let calls = ctx.call_tags(call);
            if calls.is_empty() {
                let mut excludes = vec![CALLS];
                excludes.extend_from_slice(TEXT);
                any_text(ctx.k.excludes(&excludes))
            } else {
                let array = tag(ARRAY_BEGIN, tags_with_separator(calls, ", ", true, stop), ARRAY_END);
                // One array holds every call, and the model stops after it.
                triggered_tags(&[CALLS], vec![array], false, true, ctx.k.excludes(TEXT))
            }
        }
    })
}
