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

use serde_json::Value;

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

mod detect;
mod output;

pub use detect::DetectError;
pub use output::{Delta, OutputError, OutputParser, ParsedOutput, StreamParser, ToolCall};
