//! Model presets: a family's reasoning and tool-call syntax as a structural tag, built from
//! OpenAI `tools` and a `tool_choice`.
//!
//! ```text
//! tools, PresetOptions ──normalize_tool_choice──▶ function tools, builtin tools,
//!                                                 auto | required | forced
//!                      ──family builder──▶ format JSON (+ the role of each tag it wrote)
//!                      ──▶ Preset { structural_tag, roles }
//! ```
//!
//! For every family XGrammar 0.2.8 has, the structural tag is the same JSON document as
//! `get_model_structural_tag(...).model_dump(mode="json")` for the same arguments (pinned
//! by `tests/integration/tool_presets.rs` against `tests/data/xgrammar_presets.json`), so the language
//! is the same and a server can switch engines without its outputs changing. That
//! includes XGrammar's quirks: Llama, Hermes and Mistral ignore `reasoning`; builtin
//! tools are written only by Harmony, refused by MiMo and MiniMax M3 and ignored by the
//! rest. Gemma 4 is built from XGrammar's builder, which XGrammar itself leaves out of its
//! registry because its `<|"|>`-quoted strings are not plain JSON.
//!
//! One exception, on purpose: Harmony under `required` or a named tool. XGrammar's tag
//! lets such a turn end with analysis messages only (or nothing), which breaks OpenAI's
//! promise of at least one call; grammask's requires the call (see `harmony.rs`).
//!
//! # Hermes and Mistral (grammask's own)
//! - **Hermes** (2 Pro / 3): `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>`,
//!   the block the Hermes chat templates render, name first. Built like Qwen 3 (one tag
//!   per tool behind the `<tool_call>` trigger) with no reasoning block.
//! - **Mistral** (tokenizer v3: 7B v0.3, Nemo): `[TOOL_CALLS][{"name": "NAME", "arguments":
//!   ARGS}, …]`, one array holding every call, no ids, no space after `[TOOL_CALLS]`.
//!   Under `auto` free text may come before `[TOOL_CALLS]`, and the array ends the output;
//!   under `required` or a forced tool the output is the array alone. No reasoning block.
//!
//! Both honour `tool_choice` and `parallel_tool_calls` as the XGrammar families do, and
//! with `exclude_special_tokens` keep their control tokens out of free text. The
//! `hermes.rs` and `mistral.rs` module docs give the reasons for each choice.
//!
//! A builder records the role of each tag it writes ([`Role::Call`] for a tool call,
//! [`Role::Reasoning`] for a reasoning block, [`Role::Content`] for a text block that is
//! not free text); [`model_structural_tag`] keeps those that occur in the final tag.

mod deepseek;
mod format;
mod harmony;
mod hermes;
mod json_calls;
mod kimi;
mod minimax;
mod mistral;
mod xml_calls;

use super::openai::{normalize_tool_choice, BuiltinTool, ChoiceMode, FunctionDefinition, Tool, ToolChoice};
use super::{Family, Preset, Role, ToolError};
use format::{any_text, const_string, optional, sequence, tag, tags_with_separator, triggered_tags};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Whether the model reasons before answering (for families with a reasoning block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningMode {
    /// A reasoning block comes first. Most families assume the prompt already opened it
    /// (the output starts inside it); see each family.
    #[default]
    Enabled,
    /// No reasoning block.
    Disabled,
    /// A complete reasoning block, or none.
    Auto,
}

/// What [`model_structural_tag`] builds, with XGrammar's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresetOptions {
    /// Which tools may or must be called (default `auto`).
    pub tool_choice: ToolChoice,
    /// The reasoning block (default enabled).
    pub reasoning: ReasoningMode,
    /// Object members of tool arguments in any order (default false: schema order).
    pub any_order: bool,
    /// Keep the family's special tokens (`<think>`, …) out of free text (default true).
    pub exclude_special_tokens: bool,
    /// At most this many consecutive whitespace characters inside tool arguments
    /// (default: no limit).
    pub max_whitespace_cnt: Option<u32>,
    /// More than one call per response (default true). When false, the output ends
    /// after its one call.
    pub parallel_tool_calls: bool,
}

impl Default for PresetOptions {
    fn default() -> Self {
        PresetOptions {
            tool_choice: ToolChoice::Auto,
            reasoning: ReasoningMode::Enabled,
            any_order: false,
            exclude_special_tokens: true,
            max_whitespace_cnt: None,
            parallel_tool_calls: true,
        }
    }
}

/// The structural tag of `family` for `tools` under `options`, and the role of its tags.
///
/// ```
/// use grammask::tool_calling::{model_structural_tag, Family, PresetOptions, Role, tools_from_json};
/// let tools = tools_from_json(&serde_json::json!([{"type": "function", "function": {
///     "name": "get_weather",
///     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]))?;
/// let preset = model_structural_tag(Family::from_name("qwen_3")?, &tools, &PresetOptions::default())?;
/// assert_eq!(preset.structural_tag["type"], "structural_tag");
/// assert!(preset.roles.iter().any(|(_, r)| *r == Role::Call { name: "get_weather".into() }));
/// # Ok::<(), grammask::tool_calling::ToolError>(())
/// ```
pub fn model_structural_tag(
    family: Family,
    tools: &[Tool],
    options: &PresetOptions,
) -> Result<Preset, ToolError> {
    let n = normalize_tool_choice(tools, &options.tool_choice)?;
    let mut ctx = Ctx {
        family,
        functions: n.functions,
        builtins: n.builtins,
        choice: n.choice,
        reasoning: options.reasoning,
        k: Knobs {
            any_order: options.any_order,
            max_whitespace_cnt: options.max_whitespace_cnt,
            exclude_special_tokens: options.exclude_special_tokens,
            parallel_tool_calls: options.parallel_tool_calls,
        },
        roles: Roles(Vec::new()),
    };
    let format = match family {
        Family::Llama => json_calls::llama(&mut ctx)?,
        Family::Kimi => kimi::kimi_k2(&mut ctx)?,
        Family::KimiK3 => kimi::kimi_k3(&mut ctx)?,
        Family::DeepseekR1 => deepseek::r1(&mut ctx)?,
        Family::DeepseekV3_1 => deepseek::v3_1(&mut ctx)?,
        Family::DeepseekV3_2 => deepseek::dsml(&mut ctx, deepseek::Dsml::V3_2)?,
        Family::DeepseekV4 => deepseek::dsml(&mut ctx, deepseek::Dsml::V4)?,
        Family::DeepseekV4_1 => deepseek::dsml(&mut ctx, deepseek::Dsml::V4_1)?,
        Family::Qwen3 => json_calls::qwen_3(&mut ctx)?,
        Family::Qwen3Coder | Family::Qwen3_5 => xml_calls::qwen_3_5(&mut ctx)?,
        Family::Mimo => xml_calls::mimo(&mut ctx)?,
        Family::Harmony => harmony::harmony(&mut ctx)?,
        Family::Minimax => minimax::minimax(&mut ctx)?,
        Family::MinimaxM3 => minimax::minimax_m3(&mut ctx)?,
        Family::Glm4_7 => xml_calls::glm_4_7(&mut ctx)?,
        Family::Gemma4 => json_calls::gemma_4(&mut ctx)?,
        Family::Cohere => xml_calls::cohere(&mut ctx)?,
        Family::Exaone => json_calls::exaone(&mut ctx)?,
        Family::Hermes => hermes::hermes(&mut ctx)?,
        Family::Mistral => mistral::mistral(&mut ctx)?,
    };
    let structural_tag = json!({"type": "structural_tag", "format": format});
    let roles = ctx.roles.occurring_in(&structural_tag);
    Ok(Preset { structural_tag, roles })
}

/// A builder's input: the normalized tools and options, and the roles written so far.
/// (`k` and `roles` are separate fields so that a closure over the tools can record a
/// role while reading the options.)
struct Ctx<'a> {
    family: Family,
    functions: Vec<&'a FunctionDefinition>,
    builtins: Vec<&'a BuiltinTool>,
    choice: ChoiceMode,
    reasoning: ReasoningMode,
    k: Knobs,
    roles: Roles,
}

impl<'a> Ctx<'a> {
    /// The function a forced choice resolved to. Normalization left exactly one tool;
    /// when it is a builtin tool, a family that only writes functions cannot honour it.
    fn forced_function(&self) -> Result<&'a FunctionDefinition, ToolError> {
        self.functions
            .first()
            .copied()
            .ok_or(ToolError::ForcedNotOneTool { count: self.builtins.len(), family: Some(self.family) })
    }

    /// `required` needs a function to call when the family ignores builtin tools
    /// (normalization only checked that *some* tool is left).
    fn require_functions(&self) -> Result<(), ToolError> {
        if self.functions.is_empty() {
            return Err(ToolError::RequiredWithoutFunctionTools { family: self.family });
        }
        Ok(())
    }

    /// MiMo and MiniMax M3 refuse builtin tools rather than ignore them.
    fn refuse_builtins(&self) -> Result<(), ToolError> {
        if !self.builtins.is_empty() {
            return Err(ToolError::BuiltinToolsUnsupported { family: self.family });
        }
        Ok(())
    }

    /// XGrammar's `_build_reasoning_prefix`: `enabled` continues a block the prompt
    /// already opened (unless `think.prompt_opens` is false), `auto` makes a complete
    /// block optional, `disabled` writes none.
    fn reasoning_prefix(&mut self, think: Think<'_>) -> Option<Value> {
        if self.reasoning == ReasoningMode::Disabled {
            return None;
        }
        let begin =
            if self.reasoning == ReasoningMode::Enabled && think.prompt_opens { "" } else { think.begin };
        let block = self.roles.reasoning(tag(begin, any_text(self.k.excludes(think.excludes)), think.end));
        let mut prefix = block;
        if !think.suffix.is_empty() {
            prefix = sequence(vec![prefix, const_string(think.suffix)]);
        }
        if self.reasoning == ReasoningMode::Auto {
            prefix = optional(prefix);
        }
        Some(prefix)
    }

    /// The auto / required / forced shape most families share: each call a tag found by
    /// `trigger` in free text (`excludes` kept out of it); with no tool to call, free text
    /// without `empty_excludes`. `call` writes one function's tag.
    fn triggered_calls(
        &mut self,
        trigger: &str,
        excludes: &[&str],
        empty_excludes: &[&str],
        call: impl Fn(&Knobs, &FunctionDefinition) -> Value,
    ) -> Result<Value, ToolError> {
        let k = self.k;
        if self.choice == ChoiceMode::Forced {
            let f = self.forced_function()?;
            return Ok(self.roles.call(&f.name, call(&k, f)));
        }
        if self.choice == ChoiceMode::Required {
            self.require_functions()?;
        }
        let tags: Vec<Value> = self.functions.iter().map(|f| self.roles.call(&f.name, call(&k, f))).collect();
        if tags.is_empty() {
            return Ok(any_text(k.excludes(empty_excludes)));
        }
        Ok(triggered_tags(
            &[trigger],
            tags,
            self.choice == ChoiceMode::Required,
            k.stop_after_first(),
            k.excludes(excludes),
        ))
    }

    /// The `auto` shape of families that group calls in a section: free text (without
    /// `excludes`) in which `trigger` opens `begin`, one or more `calls` split by
    /// `separator`, `end`; with no call to make, free text without `empty_excludes`.
    /// Both exclude lists are final (already filtered by `exclude_special_tokens`).
    #[allow(clippy::too_many_arguments)] // each is one literal of the family's syntax
    fn section_auto(
        &self,
        calls: Vec<Value>,
        trigger: &str,
        begin: &str,
        separator: &str,
        end: &str,
        excludes: Vec<String>,
        empty_excludes: Vec<String>,
    ) -> Value {
        if calls.is_empty() {
            return any_text(empty_excludes);
        }
        let stop = self.k.stop_after_first();
        let section = tag(begin, tags_with_separator(calls, separator, true, stop), end);
        triggered_tags(&[trigger], vec![section], false, stop, excludes)
    }

    /// One call tag per function tool, in list order.
    fn call_tags(&mut self, call: impl Fn(&Knobs, &FunctionDefinition) -> Value) -> Vec<Value> {
        let k = self.k;
        self.functions.iter().map(|f| self.roles.call(&f.name, call(&k, f))).collect()
    }
}

/// A leading reasoning block.
struct Think<'s> {
    begin: &'s str,
    end: &'s str,
    /// Kept out of the block's text when `exclude_special_tokens`.
    excludes: &'s [&'s str],
    /// Whether the generation prompt already ends with `begin` in enabled mode.
    prompt_opens: bool,
    /// A constant written after the block (`"\n\n"` for Qwen).
    suffix: &'s str,
}

impl<'s> Think<'s> {
    /// `<think>…</think>`, opened by the prompt, nothing after.
    const fn angle(excludes: &'s [&'s str]) -> Self {
        Think { begin: "<think>", end: "</think>", excludes, prompt_opens: true, suffix: "" }
    }
}

/// The options every builder reads.
#[derive(Debug, Clone, Copy)]
struct Knobs {
    any_order: bool,
    max_whitespace_cnt: Option<u32>,
    exclude_special_tokens: bool,
    parallel_tool_calls: bool,
}

/// `style` of a `json_schema` format: plain JSON arguments.
const JSON: &str = "json";

impl Knobs {
    /// `tokens`, or nothing when special tokens may appear in text.
    fn excludes(&self, tokens: &[&str]) -> Vec<String> {
        if self.exclude_special_tokens {
            tokens.iter().map(|t| t.to_string()).collect()
        } else {
            Vec::new()
        }
    }

    /// The arguments of a call: `json_schema` in `style`.
    fn args(&self, schema: Value, style: &str) -> Value {
        self.args_excluding(schema, style, Vec::new())
    }

    /// The arguments of a call, with substrings kept out of its strings.
    fn args_excluding(&self, schema: Value, style: &str, excludes: Vec<String>) -> Value {
        json!({
            "type": "json_schema",
            "json_schema": schema,
            "style": style,
            "any_order": self.any_order,
            "max_whitespace_cnt": self.max_whitespace_cnt,
            "excludes": excludes,
        })
    }

    /// Without parallel calls the output ends after the first call.
    fn stop_after_first(&self) -> bool {
        !self.parallel_tool_calls
    }
}

/// The schema a function's arguments are constrained by: `true` (any JSON) when it has
/// no `parameters` or is `strict: false`.
fn params(f: &FunctionDefinition) -> Value {
    match (&f.parameters, f.strict) {
        (_, Some(false)) | (None, _) => Value::Bool(true),
        (Some(p), _) => Value::Object(p.clone()),
    }
}

/// The schema a builtin tool's arguments are constrained by.
fn builtin_params(b: &BuiltinTool) -> Value {
    b.parameters.clone().map_or(Value::Bool(true), Value::Object)
}

/// An optional reasoning prefix, then the rest.
fn assemble(prefix: Option<Value>, suffix: Value) -> Value {
    match prefix {
        None => suffix,
        Some(p) => sequence(vec![p, suffix]),
    }
}

/// The roles of the tags a builder wrote, in the order written.
struct Roles(Vec<(Value, Role)>);

impl Roles {
    fn record(&mut self, tag: Value, role: Role) -> Value {
        self.0.push((tag.clone(), role));
        tag
    }

    /// Records `tag` as a call of `name` and gives it back.
    fn call(&mut self, name: &str, tag: Value) -> Value {
        self.record(tag, Role::Call { name: name.to_string() })
    }

    /// Records `tag` as a reasoning block and gives it back.
    fn reasoning(&mut self, tag: Value) -> Value {
        self.record(tag, Role::Reasoning)
    }

    /// Records `tag` as a content block and gives it back.
    fn content(&mut self, tag: Value) -> Value {
        self.record(tag, Role::Content)
    }

    /// The recorded roles whose tag occurs in `doc`, each once. A builder may write a tag
    /// it then drops (or uses twice, as Harmony's single-call form does), so the final
    /// document decides.
    fn occurring_in(self, doc: &Value) -> Vec<(Value, Role)> {
        let mut tags: Vec<&Value> = Vec::new();
        // An explicit stack: tool schemas can nest deeply, and recursion depth should not
        // depend on user input.
        let mut stack = vec![doc];
        while let Some(v) = stack.pop() {
            match v {
                Value::Object(o) => {
                    if o.get("type").and_then(Value::as_str) == Some("tag") {
                        tags.push(v);
                    }
                    // A `json_schema` value is user data, not format: a schema property
                    // named `type` holding "tag" must not count as one.
                    stack.extend(o.iter().filter(|(k, _)| k.as_str() != "json_schema").map(|(_, v)| v));
                }
                Value::Array(a) => stack.extend(a.iter()),
                _ => {}
            }
        }
        let mut out: Vec<(Value, Role)> = Vec::new();
        for (tag, role) in self.0 {
            if tags.contains(&&tag) && !out.iter().any(|(t, r)| *t == tag && *r == role) {
                out.push((tag, role));
            }
        }
        out
    }
}
