//! The corpus: one list of cases, each a constraint, a prompt, and the validator that
//! judges its outputs — never the matcher that produced them.

pub use crate::validate::tool_request;
use crate::validate::Validator;
use grammask::tool_calling::Family;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The member order the corpus's JSON schemas are generated in: the schema's, the one
/// order llguidance knows, so that llguidance can judge every output and cut-off prefix
/// (grammask's default, any order, is checked member order by member order against the
/// `jsonschema` crate by core's `json_exactness` tests).
pub const PROPERTY_ORDER: grammask::json_schema::PropertyOrder = grammask::json_schema::PropertyOrder::Schema;

/// What kind of constraint a case is (a column group of the report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A JSON Schema (MaskBench dev splits, or files given on the command line).
    JsonSchema,
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// An EBNF grammar (llama.cpp GBNF, transformers-CFG).
    Grammar,
    /// A regular expression.
    Regex,
    /// A Lark grammar.
    Lark,
    /// Tool calling with a model family's preset and a `tool_choice`.
    Tools,
}

impl Kind {
    /// The report's name for the kind.
    pub fn name(self) -> &'static str {
        match self {
            Kind::JsonSchema => "json_schema",
            Kind::JsonObject => "json_object",
            Kind::Grammar => "grammar",
            Kind::Regex => "regex",
            Kind::Lark => "lark",
            Kind::Tools => "tools",
        }
    }
}

/// The constraint of a case, in the terms every adapter's API understands.
#[derive(Debug, Clone)]
pub enum Constraint {
    /// A JSON Schema.
    JsonSchema(Value),
    /// Any JSON object.
    JsonObject,
    /// EBNF text (GBNF dialect).
    Ebnf(String),
    /// A regular expression (Rust `regex` syntax, whole-string match).
    Regex(String),
    /// Lark text.
    Lark(String),
    /// OpenAI tools (`{"type": "function", "function": {…}}` objects) with a choice, for a
    /// model family.
    Tools {
        /// The model family whose syntax the calls use.
        family: Family,
        /// The tools as OpenAI sends them.
        tools: Vec<Value>,
        /// OpenAI's `tool_choice`.
        tool_choice: Value,
    },
}

impl Constraint {
    /// The case's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Constraint::JsonSchema(_) => Kind::JsonSchema,
            Constraint::JsonObject => Kind::JsonObject,
            Constraint::Ebnf(_) => Kind::Grammar,
            Constraint::Regex(_) => Kind::Regex,
            Constraint::Lark(_) => Kind::Lark,
            Constraint::Tools { .. } => Kind::Tools,
        }
    }

    /// grammask's spec for it (tools: the family preset's structural tag) and, for tools,
    /// the preset that reads outputs back.
    pub fn grammask_spec(
        &self,
    ) -> Result<(grammask::GrammarSpec, Option<grammask::tool_calling::Preset>), String> {
        use grammask::GrammarSpec;
        Ok(match self {
            Constraint::JsonSchema(s) => (json_spec(s), None),
            Constraint::JsonObject => (GrammarSpec::json_schema(r#"{"type": "object"}"#), None),
            Constraint::Ebnf(t) => (GrammarSpec::ebnf(t.clone()), None),
            Constraint::Regex(r) => (GrammarSpec::Regex(r.clone()), None),
            Constraint::Lark(t) => (GrammarSpec::Lark(t.clone()), None),
            Constraint::Tools { family, tools, tool_choice } => {
                let (tools, options) = tool_request(tools, tool_choice)?;
                let c = grammask::tool_calling::chat_constraint(Some(*family), &tools, &options, None)
                    .map_err(|e| e.to_string())?;
                match c {
                    grammask::tool_calling::ChatConstraint::Tools { spec, preset } => (spec, Some(preset)),
                    grammask::tool_calling::ChatConstraint::Spec(s) => (s, None),
                    grammask::tool_calling::ChatConstraint::None => {
                        // `tool_choice: none`: free text (the validator checks no call).
                        (GrammarSpec::Regex("(.|\n)*".into()), None)
                    }
                }
            }
        })
    }
}

/// A JSON schema's spec in the corpus's member order ([`PROPERTY_ORDER`]).
pub fn json_spec(schema: &Value) -> grammask::GrammarSpec {
    let options = grammask::JsonSchemaOptions { property_order: PROPERTY_ORDER, ..Default::default() };
    grammask::GrammarSpec::JsonSchema { schema: schema.to_string(), options }
}

/// One case of the corpus.
#[derive(Debug)]
pub struct Case {
    /// A name unique in the corpus (the file or the constraint, shortened).
    pub id: String,
    /// The user prompt (a random model ignores it; a real one follows it).
    pub prompt: String,
    /// The constraint.
    pub constraint: Constraint,
    /// What judges the outputs.
    pub validator: Validator,
}

impl Case {
    /// The case's kind.
    pub fn kind(&self) -> Kind {
        self.constraint.kind()
    }

    /// `{"id", "kind", <language>: <text or schema>}` — the constraint as a peer takes it
    /// (`json_schema`, `ebnf`, `regex`, `lark`, or, for tools, the preset's
    /// `structural_tag`; `error`: grammask could not build the spec), for the peers'
    /// helpers (`benches/peers/xgrammar_oracle.py`).
    pub fn to_json(&self) -> Value {
        use grammask::GrammarSpec;
        let mut o = json!({"id": self.id, "kind": self.kind().name()});
        let (key, value) = match &self.constraint {
            Constraint::JsonSchema(s) => ("json_schema", s.clone()),
            Constraint::JsonObject => ("json_schema", json!({"type": "object"})),
            Constraint::Ebnf(t) => ("ebnf", json!(t)),
            Constraint::Regex(r) => ("regex", json!(r)),
            Constraint::Lark(t) => ("lark", json!(t)),
            Constraint::Tools { .. } => match self.constraint.grammask_spec() {
                Ok((GrammarSpec::StructuralTag(t), _)) => ("structural_tag", json!(t)),
                Ok((GrammarSpec::Regex(r), _)) => ("regex", json!(r)),
                Ok(_) => ("error", json!("not a structural tag")),
                Err(e) => ("error", json!(e)),
            },
        };
        o[key] = value;
        o
    }
}

include!("../../scripts/test_data_dir.rs");

/// Where the corpus's data lives (see [`test_data_dir`]); panics with the way to get it,
/// since a corpus without its data would check nothing.
pub fn data_dir() -> PathBuf {
    test_data_dir().unwrap_or_else(|e| panic!("{e}"))
}

/// How big a corpus to build.
#[derive(Debug, Clone)]
pub struct CorpusOptions {
    /// JSON schemas taken from each dev MaskBench split (every file whose schema
    /// compiles and validates, spread over the split).
    pub schemas_per_split: usize,
    /// Also the larger grammars (C, chess, the Lark grammar of Lark, …).
    pub large_grammars: bool,
    /// Tool-calling families (their presets on the test tokenizer).
    pub tool_families: Vec<Family>,
}

impl Default for CorpusOptions {
    /// Every family whose default preset compiles: all but Cohere (`cohere_xml` is not
    /// lowered) and Kimi K3 (its default `exclude_special_tokens` needs
    /// `json_schema.excludes`), both typed errors in grammask today.
    fn default() -> Self {
        let families =
            Family::ALL.iter().copied().filter(|f| !matches!(f, Family::Cohere | Family::KimiK3)).collect();
        Self { schemas_per_split: 4, large_grammars: false, tool_families: families }
    }
}

/// The built-in corpus: dev MaskBench schemas (including recursive and large ones),
/// `json_object`, llama.cpp and transformers-CFG grammars, regexes, Lark, and tools for
/// each family in `options` with every `tool_choice`. Cases whose files are missing are
/// skipped; cases grammask refuses to compile are kept (an adapter must then report an
/// error, which the suite counts).
pub fn corpus(options: &CorpusOptions) -> Result<Vec<Case>, String> {
    let data = data_dir();
    let mut out = Vec::new();
    for split in ["Github_easy", "Github_medium", "Glaiveai2K", "Kubernetes"] {
        out.extend(maskbench_cases(
            &data.join("jsonschemabench/dev").join(split),
            options.schemas_per_split,
        )?);
    }
    out.push(Case {
        id: "json_object".into(),
        prompt: "Describe a city as a JSON object.".into(),
        constraint: Constraint::JsonObject,
        validator: Validator::json(&json!({"type": "object"}))?,
    });
    let mut grammars: Vec<(&str, &str)> = vec![
        ("llama.cpp", "arithmetic.gbnf"),
        ("llama.cpp", "json.gbnf"),
        ("llama.cpp", "json_arr.gbnf"),
        ("llama.cpp", "list.gbnf"),
        ("transformers-CFG", "balanced_parentheses.ebnf"),
        ("transformers-CFG", "json_minimal.ebnf"),
        ("transformers-CFG", "geo_query.ebnf"),
    ];
    if options.large_grammars {
        grammars.extend([
            ("llama.cpp", "c.gbnf"),
            ("llama.cpp", "chess.gbnf"),
            ("llama.cpp", "english.gbnf"),
            ("transformers-CFG", "calflow.ebnf"),
            ("transformers-CFG", "overnight.ebnf"),
        ]);
    }
    for (dir, file) in grammars {
        let path = data.join("grammars").join(dir).join(file);
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        out.push(Case {
            id: format!("{dir}/{file}"),
            prompt: "Write a sentence of the grammar.".into(),
            validator: Validator::ebnf(&text)?,
            constraint: Constraint::Ebnf(text),
        });
    }
    for r in [
        r"[0-9]{3}-[0-9]{4}",
        r"(yes|no|maybe)",
        r"[a-z]+@[a-z]+\.(com|org)",
        r"\((-?[0-9]+(\.[0-9]+)?, ){2}-?[0-9]+\)",
        r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8}){0,2}",
        r"(0|[1-9][0-9]*)(\.[0-9]{1,3})?",
    ] {
        out.push(Case {
            id: format!("regex {r}"),
            prompt: "Answer.".into(),
            validator: Validator::regex(r)?,
            constraint: Constraint::Regex(r.into()),
        });
    }
    let lark: Vec<(&str, String, Validator)> = vec![
        (
            "lark greeting",
            "start: greeting \" \" name \"!\"\ngreeting: \"hello\" | \"hi\"\nname: /[A-Z][a-z]{1,10}/\n".into(),
            Validator::regex("(hello|hi) [A-Z][a-z]{1,10}!")?,
        ),
        (
            "lark list",
            "start: \"[\" item (\",\" item)* \"]\"\nitem: INT | WORD\n%import common.INT\n%import common.WORD\n".into(),
            Validator::regex(r"\[([0-9]+|[a-zA-Z]+)(,([0-9]+|[a-zA-Z]+))*\]")?,
        ),
        (
            "lark %json",
            format!(
                "start: \"call \" %json {}\n",
                json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
            ),
            Validator::prefixed_json(
                "call ",
                &json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
            )?,
        ),
    ];
    for (id, text, validator) in lark {
        out.push(Case {
            id: id.into(),
            prompt: "Answer.".into(),
            constraint: Constraint::Lark(text),
            validator,
        });
    }
    if options.large_grammars {
        if let Ok(text) = std::fs::read_to_string(data.join("grammars/llguidance/lark.lark")) {
            let validator = Validator::lark(&text)?;
            out.push(Case {
                id: "llguidance/lark.lark".into(),
                prompt: "Write a Lark grammar.".into(),
                constraint: Constraint::Lark(text),
                validator,
            });
        }
    }
    for &family in &options.tool_families {
        out.extend(tool_cases(family)?);
    }
    Ok(out)
}

/// Up to `n` schemas of a MaskBench folder (or one file), spread evenly over its sorted
/// files, skipping schemas the `jsonschema` crate cannot build a validator for.
pub fn maskbench_cases(path: &Path, n: usize) -> Result<Vec<Case>, String> {
    let mut files: Vec<PathBuf> = if path.is_dir() {
        std::fs::read_dir(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect()
    } else if path.exists() {
        vec![path.to_path_buf()]
    } else {
        return Ok(Vec::new());
    };
    files.sort();
    let step = (files.len() / n.max(1)).max(1);
    let mut picked: Vec<&PathBuf> = files.iter().step_by(step).take(n).collect();
    // The split's largest schema and its first self-recursive one (`"$ref": "#"`), when
    // the spread missed them.
    if n > 0 && files.len() > 1 {
        let size = |f: &PathBuf| std::fs::metadata(f).map_or(0, |m| m.len());
        if let Some(big) = files.iter().max_by_key(|f| size(f)) {
            if !picked.contains(&big) {
                picked.push(big);
            }
        }
        let recursive = files.iter().find(|f| {
            std::fs::read_to_string(f)
                .is_ok_and(|t| t.contains("\"$ref\": \"#\"") || t.contains("\"$ref\":\"#\""))
        });
        if let Some(r) = recursive.filter(|r| !picked.contains(r)) {
            picked.push(r);
        }
    }
    let mut out = Vec::new();
    for f in picked {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        let Ok(doc) = serde_json::from_str::<Value>(&text) else { continue };
        let schema = doc.get("schema").cloned().unwrap_or(doc);
        let Ok(validator) = Validator::json(&schema) else { continue };
        let name = f.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        // The schema in the prompt (a real model follows it), cut so that the prompt fits
        // small models' contexts.
        let mut shown = schema.to_string();
        if shown.len() > 1500 {
            let cut = (0..=1500).rev().find(|&i| shown.is_char_boundary(i)).unwrap_or(0);
            shown.truncate(cut);
            shown.push_str(" …");
        }
        out.push(Case {
            id: name,
            prompt: format!("Reply with a JSON document that follows this JSON schema:\n{shown}"),
            constraint: Constraint::JsonSchema(schema),
            validator,
        });
    }
    Ok(out)
}

/// Two tools (from Glaive's function-calling schemas' shape) under each `tool_choice`.
pub fn tool_cases(family: Family) -> Result<Vec<Case>, String> {
    let tools = vec![
        json!({"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"], "additionalProperties": false}}}),
        json!({"type": "function", "function": {"name": "convert_currency", "description": "Convert an amount",
            "parameters": {"type": "object", "properties": {"amount": {"type": "number"},
                "from": {"type": "string", "pattern": "^[A-Z]{3}$"}, "to": {"type": "string", "pattern": "^[A-Z]{3}$"}},
                "required": ["amount", "from", "to"], "additionalProperties": false}}}),
    ];
    let choices = [
        ("auto", json!("auto")),
        ("required", json!("required")),
        ("named", json!({"type": "function", "function": {"name": "convert_currency"}})),
        ("none", json!("none")),
    ];
    let mut out = Vec::new();
    for (name, choice) in choices {
        let validator = Validator::tools(&family, &tools, &choice)?;
        let constraint = Constraint::Tools { family, tools: tools.clone(), tool_choice: choice.clone() };
        out.push(Case {
            id: format!("tools {} {name}", family.name()),
            prompt: "What is the weather in Lyon, and what are 20 EUR in USD?".into(),
            constraint,
            validator,
        });
    }
    Ok(out)
}
