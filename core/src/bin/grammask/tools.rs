//! `grammask tools`: a family's tool-calling structural tag, reading an output back into
//! content and calls, and guessing the family from a chat template.

use clap::{Args, Subcommand};
use grammask::tool_calling::{
    model_structural_tag, tools_from_json, Delta, Family, OutputParser, ParsedOutput, Preset, PresetOptions,
    ReasoningMode, ToolChoice,
};
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(Args)]
pub struct ToolsArgs {
    #[command(subcommand)]
    command: ToolsCommand,
}

#[derive(Subcommand)]
enum ToolsCommand {
    /// Print the structural tag of a family for a tools list (one JSON line).
    Preset(PresetArgs),
    /// Read a model output back: content, reasoning and OpenAI `tool_calls` (one JSON line;
    /// with `--stream`, one line per delta first).
    Parse {
        #[command(flatten)]
        preset: PresetArgs,
        /// The output text.
        #[arg(long, group = "input")]
        text: Option<String>,
        /// A file holding the output text.
        #[arg(long, group = "input")]
        text_file: Option<PathBuf>,
        /// Feed the text in pieces of this many characters and print each delta.
        #[arg(long)]
        stream: Option<usize>,
    },
    /// Print the tool-calling family a `tokenizer_config.json`'s chat template uses.
    Detect {
        /// The `tokenizer_config.json` file.
        tokenizer_config: PathBuf,
    },
}

#[derive(Args)]
struct PresetArgs {
    /// The model family (`qwen_3`, `llama`, `harmony`, `hermes`, `mistral`, …).
    #[arg(long)]
    family: String,
    /// A JSON file holding an OpenAI `tools` array.
    #[arg(long)]
    tools: PathBuf,
    /// OpenAI `tool_choice` as JSON (`"auto"`, `"required"`, `"none"`,
    /// `{"type": "function", "function": {"name": …}}`, …).
    #[arg(long, default_value = "\"auto\"")]
    tool_choice: String,
    /// The reasoning block: enabled (the prompt opened it), disabled, auto.
    #[arg(long, default_value = "enabled")]
    reasoning: String,
    /// At most one call (OpenAI `parallel_tool_calls: false`).
    #[arg(long)]
    no_parallel: bool,
    /// Tool arguments' members in any order.
    #[arg(long)]
    any_order: bool,
    /// Let the family's special tokens appear in free text.
    #[arg(long)]
    keep_special_tokens: bool,
    /// Most consecutive whitespace characters inside arguments.
    #[arg(long)]
    max_whitespace: Option<u32>,
}

impl PresetArgs {
    fn build(&self) -> Result<Preset, String> {
        let family = Family::from_name(&self.family).map_err(|e| e.to_string())?;
        let text =
            std::fs::read_to_string(&self.tools).map_err(|e| format!("{}: {e}", self.tools.display()))?;
        let tools: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", self.tools.display()))?;
        let tools = tools_from_json(&tools).map_err(|e| e.to_string())?;
        let choice: Value =
            serde_json::from_str(&self.tool_choice).map_err(|e| format!("--tool-choice is not JSON: {e}"))?;
        let reasoning = match self.reasoning.as_str() {
            "enabled" => ReasoningMode::Enabled,
            "disabled" => ReasoningMode::Disabled,
            "auto" => ReasoningMode::Auto,
            other => return Err(format!("--reasoning {other}: expected enabled, disabled or auto")),
        };
        let options = PresetOptions {
            tool_choice: ToolChoice::from_json(&choice).map_err(|e| e.to_string())?,
            reasoning,
            any_order: self.any_order,
            exclude_special_tokens: !self.keep_special_tokens,
            max_whitespace_cnt: self.max_whitespace,
            parallel_tool_calls: !self.no_parallel,
        };
        model_structural_tag(family, &tools, &options).map_err(|e| e.to_string())
    }
}

/// The OpenAI message shape of a reading.
fn message(out: &ParsedOutput) -> Value {
    let calls: Vec<Value> = out
        .tool_calls
        .iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
        .collect();
    json!({"content": out.content, "reasoning_content": out.reasoning, "tool_calls": calls})
}

fn delta(d: &Delta) -> Value {
    match d {
        Delta::Content(c) => json!({"content": c}),
        Delta::Reasoning(r) => json!({"reasoning_content": r}),
        Delta::ToolCallStart { index, id, name } => {
            json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]})
        }
        Delta::ToolCallArguments { index, arguments } => {
            json!({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
        }
    }
}

pub fn run(a: &ToolsArgs) -> Result<(), String> {
    match &a.command {
        ToolsCommand::Preset(p) => {
            let preset = p.build()?;
            out!("{}", preset.structural_tag);
        }
        ToolsCommand::Parse { preset, text, text_file, stream } => {
            let preset = preset.build()?;
            let text = match (text, text_file) {
                (Some(t), _) => t.clone(),
                (None, Some(p)) => std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
                (None, None) => return Err("give --text or --text-file".into()),
            };
            let parser = OutputParser::new(&preset).map_err(|e| e.to_string())?;
            let out = match stream {
                Some(n) => {
                    let mut s = parser.stream();
                    let chars: Vec<char> = text.chars().collect();
                    for piece in chars.chunks((*n).max(1)) {
                        for d in s.push(&piece.iter().collect::<String>()).map_err(|e| e.to_string())? {
                            out!("{}", delta(&d));
                        }
                    }
                    let (out, last) = s.finish().map_err(|e| e.to_string())?;
                    for d in last {
                        out!("{}", delta(&d));
                    }
                    out
                }
                None => parser.parse(&text).map_err(|e| e.to_string())?,
            };
            out!("{}", message(&out));
        }
        ToolsCommand::Detect { tokenizer_config } => {
            let text = std::fs::read_to_string(tokenizer_config)
                .map_err(|e| format!("{}: {e}", tokenizer_config.display()))?;
            let family = Family::detect_from_tokenizer_config(&text).map_err(|e| e.to_string())?;
            out!("{}", json!({"family": family.map(|f| f.name())}));
        }
    }
    Ok(())
}
