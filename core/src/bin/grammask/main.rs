//! `grammask`: run, benchmark and debug grammars against real tokenizers.
//!
//! With no arguments it runs `demo`: the builtin JSON grammar against an embedded Qwen3
//! tokenizer, sampling random logits under the mask.

/// mimalloc: a compile allocates many small IR nodes and automata buffers, which glibc's
/// allocator serves markedly slower (docs/benchmarks/tool-calling.md, "Allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `println!` for the subcommands: a closed stdout (`grammask masks … | head`) ends the
/// program quietly, as SIGPIPE would for a C tool, instead of panicking; any other write
/// error is returned.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($t)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            return Err(format!("writing to stdout: {e}"));
        }
    }};
}

mod bench;
mod demo;
mod embedded;
mod inspect;
mod maskbench;
mod masks;
mod serving;
mod stats;
mod tools;

use clap::{Args, Parser, Subcommand};
use grammask::json_schema::PropertyOrder;
use grammask::{GrammarSpec, JsonSchemaOptions, TokenizerInfo, TokenizerOptions};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "grammask", version, about = "Structured generation: grammar → per-token bitmask")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a document under a grammar by sampling random logits (default command).
    Demo(demo::DemoArgs),
    /// Print one JSON line per token of a text: allowed count, mask hash and fill time.
    Masks(masks::MasksArgs),
    /// Time per-token mask filling along a text, time to first mask and cache memory.
    Bench(bench::BenchArgs),
    /// Print a grammar's IR, optimized IR and automata.
    Inspect(inspect::InspectArgs),
    /// Run the MaskBench protocol over JSON-Schema test files.
    Maskbench(maskbench::MaskbenchArgs),
    /// Time the serving primitives: draft trees, batch fill, compiled-grammar bytes.
    Serving(serving::ServingArgs),
    /// Tool calling: a family's structural tag, reading outputs back, family detection.
    Tools(tools::ToolsArgs),
}

/// Where the grammar comes from.
#[derive(Args, Clone)]
#[group(skip)]
pub struct GrammarArgs {
    /// EBNF grammar file (root rule `root`).
    #[arg(long, group = "source")]
    grammar: Option<PathBuf>,
    /// The builtin JSON grammar (ECMA-404).
    #[arg(long, group = "source")]
    builtin_json: bool,
    /// A JSON Schema file (compact whitespace, strict).
    #[arg(long, group = "source")]
    json_schema: Option<PathBuf>,
    /// A regular expression the whole output must match.
    #[arg(long, group = "source")]
    regex: Option<String>,
    /// A structural tag file (XGrammar's JSON format: free text with tagged regions).
    #[arg(long, group = "source")]
    structural_tag: Option<PathBuf>,
    /// A Lark grammar file (llguidance's dialect, root rule `start`).
    #[arg(long, group = "source")]
    lark: Option<PathBuf>,
    /// With `--json-schema`: objects that say nothing about `additionalProperties` allow
    /// extra members (JSON Schema's meaning) instead of none (strict, the default).
    #[arg(long, requires = "json_schema", conflicts_with_all = ["grammar", "builtin_json", "regex", "structural_tag", "lark"])]
    allow_extra_properties: bool,
    /// With `--json-schema`: object members in the schema's order only (as XGrammar and
    /// llguidance generate) instead of any order.
    #[arg(long, requires = "json_schema", conflicts_with_all = ["grammar", "builtin_json", "regex", "structural_tag", "lark"])]
    schema_order: bool,
}

impl GrammarArgs {
    /// The spec; the builtin JSON grammar when nothing was given.
    pub fn spec(&self) -> Result<GrammarSpec, String> {
        if let Some(p) = &self.json_schema {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let options = JsonSchemaOptions {
                strict: !self.allow_extra_properties,
                property_order: if self.schema_order { PropertyOrder::Schema } else { PropertyOrder::Any },
                ..Default::default()
            };
            return Ok(GrammarSpec::JsonSchema { schema: text, options });
        }
        if let Some(r) = &self.regex {
            return Ok(GrammarSpec::Regex(r.clone()));
        }
        if let Some(p) = &self.structural_tag {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            return Ok(GrammarSpec::StructuralTag(text));
        }
        if let Some(p) = &self.lark {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            return Ok(GrammarSpec::Lark(text));
        }
        match &self.grammar {
            Some(p) => {
                let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
                let text = String::from_utf8(bytes).map_err(|e| {
                    format!(
                        "{}: grammar is not valid UTF-8 (byte offset {})",
                        p.display(),
                        e.utf8_error().valid_up_to()
                    )
                })?;
                Ok(GrammarSpec::ebnf(text))
            }
            None => Ok(GrammarSpec::BuiltinJson),
        }
    }

    pub fn label(&self) -> String {
        if let Some(p) = &self.json_schema {
            return p.display().to_string();
        }
        if let Some(r) = &self.regex {
            return format!("regex {r}");
        }
        if let Some(p) = &self.structural_tag {
            return p.display().to_string();
        }
        if let Some(p) = &self.lark {
            return p.display().to_string();
        }
        match &self.grammar {
            Some(p) => p.display().to_string(),
            None => "builtin-json".into(),
        }
    }
}

/// Loads a tokenizer (file or folder) for both encoding text and grammask.
///
/// SentencePiece-style tokenizers (Llama-2) prepend `▁` (a space) to every input they
/// encode; a grammar constrains the text itself, so that normalization step is removed
/// for encoding here (as the peers' benchmark scripts do).
pub fn load_tokenizer(path: &std::path::Path) -> Result<(tokenizers::Tokenizer, TokenizerInfo), String> {
    let file = grammask::tokenizer::resolve_tokenizer_path(path);
    let info = TokenizerInfo::from_path(&file, &TokenizerOptions::default()).map_err(|e| e.to_string())?;
    let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", file.display()))?;
    strip_prefix_space(&mut json);
    let tok = tokenizers::Tokenizer::from_bytes(json.to_string().as_bytes())
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok((tok, info))
}

/// Removes `Prepend("▁")` normalizers and turns off Metaspace's prefix space.
fn strip_prefix_space(tokenizer: &mut serde_json::Value) {
    fn is_prepend(n: &serde_json::Value) -> bool {
        n.get("type").and_then(|t| t.as_str()) == Some("Prepend")
    }
    if let Some(norm) = tokenizer.get_mut("normalizer") {
        if is_prepend(norm) {
            *norm = serde_json::Value::Null;
        } else if let Some(list) = norm.get_mut("normalizers").and_then(|l| l.as_array_mut()) {
            list.retain(|n| !is_prepend(n));
        }
    }
    if let Some(pre) = tokenizer.get_mut("pre_tokenizer").and_then(|p| p.as_object_mut()) {
        if pre.get("type").and_then(|t| t.as_str()) == Some("Metaspace") {
            pre.insert("prepend_scheme".into(), "never".into());
            pre.insert("add_prefix_space".into(), false.into());
        }
    }
}

fn main() -> ExitCode {
    grammask::alloc::keep_freed_pages();
    let mut cli = Cli::parse();
    if cli.command.is_none() {
        // No subcommand: `demo` with its defaults.
        cli = Cli::parse_from(["grammask", "demo"]);
    }
    let result = match cli.command {
        None => Err("no command".into()),
        Some(Command::Demo(a)) => demo::run(&a),
        Some(Command::Masks(a)) => masks::run(&a),
        Some(Command::Bench(a)) => bench::run(&a),
        Some(Command::Inspect(a)) => inspect::run(&a),
        Some(Command::Maskbench(a)) => maskbench::run(&a),
        Some(Command::Serving(a)) => serving::run(&a),
        Some(Command::Tools(a)) => tools::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
