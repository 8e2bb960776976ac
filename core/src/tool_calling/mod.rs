//! Tool calling: OpenAI `tools` → a model family's structural tag, and the model's output
//! → text content, reasoning and `tool_calls` again.
//!
//! ```text
//! tools + tool_choice ──preset──▶ Preset { structural_tag JSON, roles of its tags }
//!                                     │                         │
//!                       GrammarSpec::StructuralTag        parse / StreamParser
//!                                     ▼                         ▼
//!                             masks while decoding      content, reasoning, tool_calls
//! ```
//!
//! The presets write the same structural tags as XGrammar 0.2.8's
//! `get_model_structural_tag` for the same arguments (so the language is the same), plus
//! Hermes and Mistral. The parser reads an output back by walking that same tag, so every
//! family (and any hand-written tag with roles) is read by one piece of code.
//!
//! - [`openai`]: the OpenAI `tools` / `tool_choice` types and [`normalize_tool_choice`].
//! - [`preset`]: [`model_structural_tag`], one builder per family.
//! - [`ToolError`]: what can go wrong on the way.

mod detect;
mod error;
pub mod openai;
mod output;
pub mod preset;
mod request;

pub use detect::DetectError;
pub use error::ToolError;
pub use openai::{
    normalize_tool_choice, tools_from_json, AllowedMode, BuiltinTool, ChoiceMode, FunctionDefinition,
    NormalizedTools, Tool, ToolChoice, ToolRef,
};
pub use output::{Delta, OutputError, OutputParser, ParsedOutput, StreamParser, ToolCall};
pub use preset::{model_structural_tag, PresetOptions, ReasoningMode};
pub use request::{chat_constraint, ChatConstraint, JsonSchemaFormat, RequestError, ResponseFormat};

use serde_json::Value;
use std::fmt;
use std::str::FromStr;

/// A model family's tool-calling syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Llama 3.x (`{"name": …, "parameters": …}`).
    Llama,
    /// Kimi K2.
    Kimi,
    /// Kimi K3.
    KimiK3,
    /// DeepSeek R1.
    DeepseekR1,
    /// DeepSeek V3.1.
    DeepseekV3_1,
    /// DeepSeek V3.2 (DSML).
    DeepseekV3_2,
    /// DeepSeek V4.
    DeepseekV4,
    /// DeepSeek V4.1.
    DeepseekV4_1,
    /// Qwen 3 (Hermes-style JSON calls after a think block).
    Qwen3,
    /// Qwen 3 Coder (XML parameters).
    Qwen3Coder,
    /// Qwen 3.5.
    Qwen3_5,
    /// Xiaomi MiMo.
    Mimo,
    /// gpt-oss (Harmony channels).
    Harmony,
    /// MiniMax M2.
    Minimax,
    /// MiniMax M3.
    MinimaxM3,
    /// GLM 4.7.
    Glm4_7,
    /// Gemma 4.
    Gemma4,
    /// Cohere Command.
    Cohere,
    /// EXAONE.
    Exaone,
    /// Hermes 2 Pro / 3 (`<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`), not in XGrammar.
    Hermes,
    /// Mistral (`[TOOL_CALLS][{"name": …, "arguments": …}, …]`), not in XGrammar.
    Mistral,
}

/// What a `tag` of a preset's structural tag holds, for reading an output back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// A call of this tool: the tag's JSON-schema content is its arguments.
    Call {
        /// The tool's name as the model writes it.
        name: String,
    },
    /// The model's reasoning (`<think>…</think>`, Harmony's analysis channel).
    Reasoning,
    /// Text shown to the user (Harmony's final channel, Kimi K3's response block).
    Content,
}

/// A structural tag built for a family and a list of tools, with the role of each tag
/// that is not plain free text.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    /// `{"type": "structural_tag", "format": …}`, as XGrammar's `model_dump(mode="json")`.
    pub structural_tag: Value,
    /// `(tag, role)`: a `tag` format value exactly as it appears in `structural_tag`
    /// (several tags may share a role, e.g. Harmony writes one tool's call three ways).
    /// Free text outside every listed tag is content.
    pub roles: Vec<(Value, Role)>,
}

impl Family {
    /// Every family, XGrammar's in its registry order, then Gemma 4 (defined but not
    /// registered by XGrammar), Hermes and Mistral.
    pub const ALL: [Family; 21] = [
        Family::Llama,
        Family::Kimi,
        Family::KimiK3,
        Family::DeepseekR1,
        Family::DeepseekV3_1,
        Family::Qwen3Coder,
        Family::Qwen3_5,
        Family::Mimo,
        Family::Qwen3,
        Family::Harmony,
        Family::DeepseekV3_2,
        Family::Minimax,
        Family::MinimaxM3,
        Family::Glm4_7,
        Family::DeepseekV4,
        Family::DeepseekV4_1,
        Family::Cohere,
        Family::Exaone,
        Family::Gemma4,
        Family::Hermes,
        Family::Mistral,
    ];

    /// The family's name: XGrammar's registry key (`"qwen_3"`), so a `model` argument
    /// of `get_model_structural_tag` names the same family here.
    pub const fn name(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Kimi => "kimi",
            Family::KimiK3 => "kimi_k3",
            Family::DeepseekR1 => "deepseek_r1",
            Family::DeepseekV3_1 => "deepseek_v3_1",
            Family::DeepseekV3_2 => "deepseek_v3_2",
            Family::DeepseekV4 => "deepseek_v4",
            Family::DeepseekV4_1 => "deepseek_v4_1",
            Family::Qwen3 => "qwen_3",
            Family::Qwen3Coder => "qwen_3_coder",
            Family::Qwen3_5 => "qwen_3_5",
            Family::Mimo => "mimo",
            Family::Harmony => "harmony",
            Family::Minimax => "minimax",
            Family::MinimaxM3 => "minimax_m3",
            Family::Glm4_7 => "glm_4_7",
            Family::Gemma4 => "gemma_4",
            Family::Cohere => "cohere",
            Family::Exaone => "exaone",
            Family::Hermes => "hermes",
            Family::Mistral => "mistral",
        }
    }

    /// The family named `name` (exactly as [`Family::name`] writes it).
    pub fn from_name(name: &str) -> Result<Family, ToolError> {
        Family::ALL
            .iter()
            .copied()
            .find(|f| f.name() == name)
            .ok_or_else(|| ToolError::UnknownFamily { name: name.to_string() })
    }

    /// Whether XGrammar 0.2.8's `get_model_structural_tag` knows this family.
    pub const fn in_xgrammar(self) -> bool {
        !matches!(self, Family::Gemma4 | Family::Hermes | Family::Mistral)
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Family {
    type Err = ToolError;
    fn from_str(s: &str) -> Result<Family, ToolError> {
        Family::from_name(s)
    }
}
