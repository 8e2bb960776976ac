//! Reading a model's output back: text content, reasoning and tool calls, by walking the
//! same structural tag that constrained it.
//!
//! # Why walk the tag instead of writing a parser per family
//! The structural tag already says where free text ends (the first trigger), where a
//! call's arguments start (after its tag's `begin`) and end (a JSON value, then the tag's
//! `end`). Walking it with the text gives every family — and any hand-written tag whose
//! tags carry [`Role`]s — one reader that cannot disagree with the constraint. The walk is
//! a backtracking descent: alternatives (`or`, the tags of a `triggered_tags`) are tried
//! in order and the first complete reading wins; under the constraint the reading is
//! unique, so backtracking only happens inside a tag's `begin`.
//!
//! # Streaming
//! [`StreamParser`] reads the text so far as a prefix of an output (any part may still be
//! incomplete) and sends what changed: content and reasoning text, each call once its
//! arguments have started (its name is then certain), and the arguments' text as it
//! grows. Text that could still turn out to be the start of a trigger or a tag's `end`
//! (`<tool` before `_call>`) is held back until it is decided, so the deltas always add up
//! to the final reading.
//!
//! ```
//! use grammask::tool_calling::{OutputParser, Preset, Role};
//! use serde_json::json;
//! let call = json!({"type": "tag", "begin": "<tool_call>\n{\"name\": \"add\", \"arguments\": ",
//!     "content": {"type": "json_schema", "json_schema": {"type": "object"}}, "end": "}\n</tool_call>"});
//! let preset = Preset {
//!     structural_tag: json!({"type": "structural_tag", "format": {
//!         "type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [call.clone()]}}),
//!     roles: vec![(call, Role::Call { name: "add".into() })],
//! };
//! let parser = OutputParser::new(&preset)?;
//! let out = parser.parse("Adding. <tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>")?;
//! assert_eq!(out.content, "Adding. ");
//! assert_eq!(out.tool_calls[0].name, "add");
//! assert_eq!(out.tool_calls[0].arguments, "{\"a\": 1}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::{Preset, Role};
use crate::structural_tag::parse::{parse_document, Format, Node, Tag};
use crate::structural_tag::{read_xml_arguments, StructuralTagError, XmlStyle};
use crate::{CompiledGrammar, GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo, TokenizerOptions};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// One tool call read from an output, as OpenAI's `tool_calls` items hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// `call_<n>` (or the parser's id prefix and the call's index).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as JSON text, as the model wrote them (XML-style arguments are
    /// converted to a JSON object).
    pub arguments: String,
}

/// An output split into what the user sees, what the model thought, and its calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedOutput {
    /// Free text outside reasoning blocks and calls.
    pub content: String,
    /// The text of reasoning blocks (empty without one).
    pub reasoning: String,
    /// The calls, in order.
    pub tool_calls: Vec<ToolCall>,
}

/// A piece of a streamed reading, in the order it was decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    /// More content text.
    Content(String),
    /// More reasoning text.
    Reasoning(String),
    /// A call began; its name is certain.
    ToolCallStart {
        /// The call's index among the output's calls.
        index: usize,
        /// Its id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More of a call's arguments text.
    ToolCallArguments {
        /// The call's index.
        index: usize,
        /// The text to append.
        arguments: String,
    },
}

/// Why an output could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The preset's structural tag is not valid.
    #[error("the structural tag is not valid: {0}")]
    Tag(#[from] StructuralTagError),
    /// A `regex` or `grammar` format of the tag could not be compiled.
    #[error("a format at {pointer} could not be compiled: {message}")]
    Compile {
        /// JSON pointer of the format.
        pointer: String,
        /// The compiler's message.
        message: String,
    },
    /// The text does not follow the tag (it was not produced under it).
    #[error("the output does not follow the tool-calling format: no reading gets past byte {offset}")]
    Format {
        /// The furthest byte offset any reading reached.
        offset: usize,
    },
    /// A call's arguments do not satisfy its tool's schema.
    #[error("the arguments of call {index} (`{name}`) do not match the tool's schema: {message}")]
    Arguments {
        /// The call's index.
        index: usize,
        /// The tool's name.
        name: String,
        /// The validator's first message.
        message: String,
    },
    /// The text has too many readings to try (a hand-written tag with deeply ambiguous
    /// free text).
    #[error("the output has too many possible readings (more than {limit} steps)")]
    TooAmbiguous {
        /// The step limit.
        limit: usize,
    },
}

/// Most node visits one reading may take before it is given up as ambiguous.
const MAX_STEPS: usize = 2_000_000;

/// Reads outputs produced under a [`Preset`] (how the reading works: `docs/tool-calling.md`).
#[derive(Debug)]
pub struct OutputParser {
    root: Node<'static>,
    roles: HashMap<String, Role>,
    /// Byte-level automata for `regex` and `grammar` formats, by JSON pointer.
    machines: HashMap<String, Arc<CompiledGrammar>>,
    id_prefix: String,
}

impl OutputParser {
    /// Prepares a reader for `preset`'s structural tag; its `roles` say which tags are
    /// calls, reasoning or content.
    pub fn new(preset: &Preset) -> Result<Self, OutputError> {
        let root = parse_document(&preset.structural_tag)?.into_owned();
        let mut tags = Vec::new();
        collect_tags(&root, &mut tags);
        let mut roles = HashMap::new();
        for tag in tags {
            let Some(value) = preset.structural_tag.pointer(&tag.pointer) else { continue };
            if let Some((_, role)) = preset.roles.iter().find(|(v, _)| v == value) {
                roles.insert(tag.pointer.clone(), role.clone());
            }
        }
        let mut machines = HashMap::new();
        // One token per byte: a matcher then walks the text byte by byte. One compiler for
        // every node, so its cache compiles a pattern repeated per tool (`\d+`) once.
        let bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        let tok = TokenizerInfo::from_byte_tokens(bytes, &TokenizerOptions::default())
            .map_err(|e| OutputError::Compile { pointer: String::new(), message: e.to_string() })?;
        compile_machines(&root, &GrammarCompiler::new(Arc::new(tok)), &mut machines)?;
        Ok(OutputParser { root, roles, machines, id_prefix: "call_".into() })
    }

    /// Call ids become `<prefix><index>` (default `call_`); a server passes a prefix
    /// unique to the request.
    pub fn with_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.id_prefix = prefix.into();
        self
    }

    /// Reads a whole output; calls' arguments are checked against their schemas.
    pub fn parse(&self, text: &str) -> Result<ParsedOutput, OutputError> {
        let events = self.walk(text, false)?;
        let out = self.assemble(text, &events);
        for (index, (call, schema)) in out.tool_calls.iter().zip(call_schemas(&events)).enumerate() {
            let Some(schema) = schema else { continue };
            check_arguments(index, call, schema)?;
        }
        Ok(out)
    }

    /// Reads an output that may still be incomplete: content and reasoning up to what is
    /// decided, calls whose arguments have started, their arguments so far.
    pub fn parse_prefix(&self, text: &str) -> Result<ParsedOutput, OutputError> {
        let events = self.walk(text, true)?;
        Ok(self.assemble(text, &events))
    }

    /// A streaming reader over this parser.
    pub fn stream(&self) -> StreamParser<'_> {
        StreamParser { parser: self, text: String::new(), sent: ParsedOutput::default() }
    }

    fn walk<'a>(&'a self, text: &'a str, partial: bool) -> Result<Vec<Ev<'a>>, OutputError> {
        let mut w = Walk { p: self, text, partial, events: Vec::new(), steps: 0, furthest: 0 };
        let cx = Cx { ends: &[], role: TextRole::Content };
        let mut done = false;
        let root = &self.root;
        let ok = w.node(root, 0, cx, &mut |w, pos| {
            if pos == w.text.len() {
                done = true;
            }
            done
        });
        if w.steps > MAX_STEPS {
            return Err(OutputError::TooAmbiguous { limit: MAX_STEPS });
        }
        if !ok || !done {
            return Err(OutputError::Format { offset: w.furthest });
        }
        Ok(w.events)
    }

    fn assemble(&self, text: &str, events: &[Ev]) -> ParsedOutput {
        let mut out = ParsedOutput::default();
        // A call is shown once its arguments have started: before that, in a prefix, the
        // tag chosen for it may still be the wrong one of several sharing a `begin`.
        let mut pending: Option<String> = None;
        for ev in events {
            match ev {
                Ev::Text(TextRole::Content, r) => out.content.push_str(&text[r.clone()]),
                Ev::Text(TextRole::Reasoning, r) => out.reasoning.push_str(&text[r.clone()]),
                Ev::Text(TextRole::Markup, _) => {}
                Ev::CallStart(name) => pending = Some(name.clone()),
                Ev::Args { text: args, .. } => {
                    if let Some(name) = pending.take() {
                        let index = out.tool_calls.len();
                        out.tool_calls.push(ToolCall {
                            id: format!("{}{index}", self.id_prefix),
                            name,
                            arguments: args.get(text).to_string(),
                        });
                    }
                }
                Ev::CallEnd => {
                    // A call without a JSON-schema content (a hand-written tag) has no
                    // arguments: `{}`.
                    if let Some(name) = pending.take() {
                        let index = out.tool_calls.len();
                        out.tool_calls.push(ToolCall {
                            id: format!("{}{index}", self.id_prefix),
                            name,
                            arguments: "{}".into(),
                        });
                    }
                }
            }
        }
        out
    }
}

/// Reads an output as it is generated (deltas that always add up to the final reading: `docs/tool-calling.md`).
#[derive(Debug)]
pub struct StreamParser<'p> {
    parser: &'p OutputParser,
    text: String,
    sent: ParsedOutput,
}

impl StreamParser<'_> {
    /// Adds generated text; returns what became certain.
    pub fn push(&mut self, text: &str) -> Result<Vec<Delta>, OutputError> {
        self.text.push_str(text);
        let now = self.parser.parse_prefix(&self.text)?;
        Ok(self.deltas(now))
    }

    /// The output is complete: reads it whole (checking arguments) and returns the reading
    /// with the last deltas.
    pub fn finish(mut self) -> Result<(ParsedOutput, Vec<Delta>), OutputError> {
        let out = self.parser.parse(&self.text)?;
        let deltas = self.deltas(out.clone());
        Ok((out, deltas))
    }

    /// The text pushed so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    fn deltas(&mut self, now: ParsedOutput) -> Vec<Delta> {
        let mut d = Vec::new();
        if let Some(more) = grown(&self.sent.reasoning, &now.reasoning) {
            d.push(Delta::Reasoning(more.to_string()));
        }
        if let Some(more) = grown(&self.sent.content, &now.content) {
            d.push(Delta::Content(more.to_string()));
        }
        for (index, call) in now.tool_calls.iter().enumerate() {
            if index >= self.sent.tool_calls.len() {
                d.push(Delta::ToolCallStart { index, id: call.id.clone(), name: call.name.clone() });
                self.sent.tool_calls.push(ToolCall { arguments: String::new(), ..call.clone() });
            }
            let sent = &mut self.sent.tool_calls[index].arguments;
            if let Some(more) = grown(sent, &call.arguments) {
                d.push(Delta::ToolCallArguments { index, arguments: more.to_string() });
                sent.push_str(more);
            }
        }
        self.sent.content = now.content;
        self.sent.reasoning = now.reasoning;
        d
    }
}

/// What `now` adds to `sent`, when it extends it.
fn grown<'a>(sent: &str, now: &'a str) -> Option<&'a str> {
    if now.len() > sent.len() && now.starts_with(sent) {
        now.get(sent.len()..)
    } else {
        None
    }
}

/// Where a piece of free text goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TextRole {
    Content,
    Reasoning,
    /// Inside a call: part of its syntax, not shown.
    Markup,
}

/// A call's arguments text.
#[derive(Debug, Clone)]
enum ArgsText {
    /// A slice of the output (JSON arguments, written as they are).
    Raw(std::ops::Range<usize>),
    /// XML-style arguments converted to a JSON object.
    Json(String),
}

impl ArgsText {
    fn get<'t>(&'t self, text: &'t str) -> &'t str {
        match self {
            ArgsText::Raw(r) => &text[r.clone()],
            ArgsText::Json(s) => s,
        }
    }
}

/// What a reading found, in order; only ever appended to, so a failed alternative is
/// undone by truncating.
#[derive(Debug, Clone)]
enum Ev<'a> {
    Text(TextRole, std::ops::Range<usize>),
    CallStart(String),
    Args {
        text: ArgsText,
        /// The schema the arguments were constrained by; `None` in a prefix reading.
        schema: Option<&'a Value>,
    },
    CallEnd,
}

fn call_schemas<'a>(events: &[Ev<'a>]) -> Vec<Option<&'a Value>> {
    let mut v = Vec::new();
    let mut open = false;
    for ev in events {
        match ev {
            Ev::CallStart(_) => open = true,
            Ev::Args { schema, .. } if open => {
                v.push(*schema);
                open = false;
            }
            Ev::CallEnd if open => {
                v.push(None);
                open = false;
            }
            _ => {}
        }
    }
    v
}

fn check_arguments(index: usize, call: &ToolCall, schema: &Value) -> Result<(), OutputError> {
    let err = |message: String| OutputError::Arguments { index, name: call.name.clone(), message };
    let value: Value = serde_json::from_str(&call.arguments).map_err(|e| err(e.to_string()))?;
    let validator =
        jsonschema::validator_for(schema).map_err(|e| err(format!("the schema is not valid: {e}")))?;
    if let Some(e) = validator.iter_errors(&value).next() {
        return Err(err(format!("{e} (at {})", e.instance_path)));
    }
    Ok(())
}

/// The context a format is read in.
#[derive(Clone, Copy)]
struct Cx<'a> {
    /// The innermost enclosing tag's `end` strings (free text stops at them).
    ends: &'a [String],
    role: TextRole,
}

type K<'k, 'a> = dyn FnMut(&mut Walk<'a>, usize) -> bool + 'k;

struct Walk<'a> {
    p: &'a OutputParser,
    text: &'a str,
    partial: bool,
    events: Vec<Ev<'a>>,
    steps: usize,
    furthest: usize,
}

impl<'a> Walk<'a> {
    fn reach(&mut self, pos: usize) {
        self.furthest = self.furthest.max(pos);
    }

    /// Records how far `s` matched at `pos` before it failed (for the error's offset).
    fn reach_partly(&mut self, s: &str, pos: usize) {
        let common = self.text[pos..].bytes().zip(s.bytes()).take_while(|(a, b)| a == b).count();
        self.reach(pos + common);
    }

    /// In a prefix reading, the text ran out here: everything from now on may still come.
    fn out_of_text(&self, pos: usize) -> bool {
        self.partial && pos >= self.text.len()
    }

    /// Matches `s` at `pos`; in a prefix reading, a text that ends inside `s` matches too.
    fn lit(&mut self, s: &str, pos: usize) -> Option<usize> {
        let rest = &self.text[pos..];
        if rest.starts_with(s) {
            self.reach(pos + s.len());
            Some(pos + s.len())
        } else if self.partial && s.starts_with(rest) {
            self.reach(self.text.len());
            Some(self.text.len())
        } else {
            self.reach_partly(s, pos);
            None
        }
    }

    fn push_text(&mut self, role: TextRole, from: usize, to: usize) {
        if to > from {
            self.events.push(Ev::Text(role, from..to));
        }
    }

    /// Tries `f`; undoes its events when it fails.
    fn attempt(&mut self, f: impl FnOnce(&mut Self) -> bool) -> bool {
        let mark = self.events.len();
        if f(self) {
            return true;
        }
        self.events.truncate(mark);
        false
    }

    fn node(&mut self, n: &'a Node<'static>, pos: usize, cx: Cx<'a>, k: &mut K<'_, 'a>) -> bool {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return false;
        }
        if self.out_of_text(pos) {
            return k(self, pos);
        }
        match &n.format {
            Format::ConstString(s) => match self.lit(s, pos) {
                Some(p) => k(self, p),
                None => false,
            },
            Format::JsonSchema { schema, style: None, .. } => self.json(schema, pos, cx, k),
            Format::JsonSchema { schema, style: Some(style), .. } => self.xml(*style, schema, pos, cx, k),
            Format::Regex(_) | Format::Grammar(_) => self.machine(&n.pointer, pos, k),
            Format::AnyText { excludes } => self.any_text(excludes, pos, cx, k),
            Format::Sequence(items) => self.seq(items, pos, cx, k),
            Format::Or(items) => {
                for item in items {
                    if self.attempt(|w| w.node(item, pos, cx, k)) {
                        return true;
                    }
                }
                false
            }
            Format::Repeat { content, min, max } => self.repeat(content, *min, *max, 0, pos, cx, k),
            Format::Tag(tag) => self.tag(tag, pos, cx, k),
            Format::TriggeredTags { triggers, tags, at_least_one, stop_after_first, excludes } => {
                let tt = Triggered { triggers, tags, stop_after_first: *stop_after_first, excludes };
                if *at_least_one {
                    self.any_tag(tags, pos, cx, &mut |w, p| {
                        if tt.stop_after_first {
                            k(w, p)
                        } else {
                            w.triggered(&tt, p, cx, k)
                        }
                    })
                } else {
                    self.triggered(&tt, pos, cx, k)
                }
            }
            Format::TagsWithSeparator { tags, separator, at_least_one, stop_after_first } => {
                if self.attempt(|w| w.separated(tags, separator, *stop_after_first, pos, cx, k)) {
                    return true;
                }
                !*at_least_one && k(self, pos)
            }
            Format::Dispatch { rules, repeat, excludes } => {
                self.dispatch(rules, *repeat, excludes, pos, cx, k)
            }
        }
    }

    fn seq(&mut self, items: &'a [Node<'static>], pos: usize, cx: Cx<'a>, k: &mut K<'_, 'a>) -> bool {
        match items.split_first() {
            None => k(self, pos),
            Some((first, rest)) => self.node(first, pos, cx, &mut |w, p| w.seq(rest, p, cx, k)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn repeat(
        &mut self,
        content: &'a Node<'static>,
        min: u32,
        max: Option<u32>,
        done: u32,
        pos: usize,
        cx: Cx<'a>,
        k: &mut K<'_, 'a>,
    ) -> bool {
        // Greedy: one more first, then stop; an empty round ends the loop (it would
        // repeat forever).
        if max.map_or(true, |m| done < m)
            && self.attempt(|w| {
                w.node(content, pos, cx, &mut |w, p| {
                    (p > pos || done < min) && w.repeat(content, min, max, done + 1, p, cx, k)
                })
            })
        {
            return true;
        }
        done >= min && k(self, pos)
    }

    fn json(&mut self, schema: &'a Value, pos: usize, cx: Cx<'a>, k: &mut K<'_, 'a>) -> bool {
        let rest = &self.text[pos..];
        // XGrammar's structural tags start the value right at the tag's `begin`.
        if rest.starts_with(|c: char| c.is_ascii_whitespace()) {
            return false;
        }
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<serde::de::IgnoredAny>();
        let end = match values.next() {
            Some(Ok(_)) => pos + values.byte_offset(),
            // A prefix may also stop inside a number (`-`, `1.`, `2e`): serde calls that an
            // invalid number, not the end of the input; one more digit tells them apart.
            Some(Err(e)) if self.partial && (e.is_eof() || number_in_progress(rest)) => {
                let end = pos + rest.trim_end().len();
                self.reach(self.text.len());
                if cx.role == TextRole::Markup {
                    self.events.push(Ev::Args { text: ArgsText::Raw(pos..end), schema: None });
                }
                return k(self, self.text.len());
            }
            // A bare number or literal right before a marker (`7</x>`): serde's stream
            // reader wants a delimiter after it; read the longest such token instead.
            _ => match bare_scalar(rest) {
                Some(n) => pos + n,
                None => return false,
            },
        };
        self.reach(end);
        if cx.role == TextRole::Markup {
            self.events.push(Ev::Args { text: ArgsText::Raw(pos..end), schema: Some(schema) });
        }
        k(self, end)
    }

    /// XML-style arguments (`<parameter=k>v</parameter>`, …), read back into a JSON object.
    /// In a prefix reading they show only once whole: a parameter still being written
    /// cannot be converted yet.
    fn xml(&mut self, style: XmlStyle, schema: &'a Value, pos: usize, cx: Cx<'a>, k: &mut K<'_, 'a>) -> bool {
        let read = read_xml_arguments(style, schema, &self.text[pos..]);
        // In a prefix, the arguments are whole only once the tag's `end` is there in full
        // (a cut-off `<` may yet open another parameter).
        let read = read.ok().filter(|(_, used)| {
            let rest = self.text[pos + used..].trim_start_matches([' ', '\t', '\n', '\r']);
            !self.partial || cx.ends.iter().any(|e| !e.is_empty() && rest.starts_with(e.trim_start()))
        });
        if let Some((args, used)) = read {
            let json = Value::Object(args).to_string();
            // The styles allow whitespace after the last parameter, before the tag's end.
            let end = pos + used;
            let ws = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r');
            let after_ws = end + (self.text[end..].len() - self.text[end..].trim_start_matches(ws).len());
            // The end string may itself start with whitespace (`\n</function>`): any point
            // of the run can be where the arguments stop; the longest first.
            for end in (end..=after_ws).rev() {
                let whole = self.attempt(|w| {
                    w.reach(end);
                    if cx.role == TextRole::Markup {
                        w.events.push(Ev::Args { text: ArgsText::Json(json.clone()), schema: Some(schema) });
                    }
                    k(w, end)
                });
                if whole {
                    return true;
                }
            }
        }
        if self.partial {
            self.reach(self.text.len());
            return k(self, self.text.len());
        }
        false
    }

    /// A `regex` or `grammar` format: every end its byte automaton accepts, longest first.
    fn machine(&mut self, pointer: &str, pos: usize, k: &mut K<'_, 'a>) -> bool {
        let Some(compiled) = self.p.machines.get(pointer) else { return false };
        let mut m = GrammarMatcher::new(compiled.clone());
        let bytes = self.text.as_bytes();
        let mut ends = Vec::new();
        if m.can_terminate() {
            ends.push(pos);
        }
        let mut q = pos;
        while q < bytes.len() && m.accept_bytes(&bytes[q..q + 1]).is_ok() {
            q += 1;
            if m.can_terminate() && self.text.is_char_boundary(q) {
                ends.push(q);
            }
        }
        if self.partial && q == bytes.len() && ends.last() != Some(&q) {
            ends.push(q);
        }
        for &e in ends.iter().rev() {
            self.reach(e);
            if self.attempt(|w| k(w, e)) {
                return true;
            }
        }
        false
    }

    /// `any_text`: inside a tag, up to the first of its `end` strings; at top level, any
    /// text without an exclude (longest first).
    fn any_text(&mut self, excludes: &[String], pos: usize, cx: Cx<'a>, k: &mut K<'_, 'a>) -> bool {
        let ends: Vec<&str> = cx.ends.iter().filter(|e| !e.is_empty()).map(String::as_str).collect();
        let rest = &self.text[pos..];
        if !ends.is_empty() {
            return match first_occurrence(rest, &ends) {
                Some((at, _)) => {
                    if excludes.iter().any(|x| !x.is_empty() && rest[..at].contains(x.as_str())) {
                        return false;
                    }
                    self.push_text(cx.role, pos, pos + at);
                    self.reach(pos + at);
                    k(self, pos + at)
                }
                None if self.partial => {
                    let keep = rest.len() - held_back(rest, &ends);
                    self.push_text(cx.role, pos, pos + keep);
                    self.reach(self.text.len());
                    k(self, self.text.len())
                }
                None => false,
            };
        }
        let dead: Vec<&str> = excludes.iter().filter(|e| !e.is_empty()).map(String::as_str).collect();
        // The text may not contain an exclude: it ends before the first one is complete.
        let limit = match first_end(rest, &dead) {
            Some(end) => end - 1,
            None => rest.len(),
        };
        let mut q = limit;
        loop {
            if rest.is_char_boundary(q) {
                self.reach(pos + q);
                let end = pos + q;
                if self.attempt(|w| {
                    w.push_text(cx.role, pos, end);
                    k(w, end)
                }) {
                    return true;
                }
            }
            if q == 0 {
                return false;
            }
            q -= 1;
        }
    }

    /// `begin content end`; the tag's role decides where its free text goes.
    fn tag(&mut self, tag: &'a Tag<'static>, pos: usize, cx: Cx<'a>, k: &mut K<'_, 'a>) -> bool {
        let rest = &self.text[pos..];
        let p = if rest.starts_with(tag.begin.as_str()) {
            pos + tag.begin.len()
        } else if self.partial && tag.begin.starts_with(rest) {
            // The text ends inside `begin`: which tag this is is not decided yet.
            self.reach(self.text.len());
            return k(self, self.text.len());
        } else {
            self.reach_partly(&tag.begin, pos);
            return false;
        };
        self.reach(p);
        let role = self.p.roles.get(&tag.pointer);
        let inner = Cx {
            ends: &tag.ends,
            role: match role {
                Some(Role::Call { .. }) => TextRole::Markup,
                Some(Role::Reasoning) => TextRole::Reasoning,
                Some(Role::Content) => TextRole::Content,
                None => cx.role,
            },
        };
        let call = match role {
            Some(Role::Call { name }) => Some(name),
            _ => None,
        };
        self.attempt(|w| {
            if let Some(name) = call {
                w.events.push(Ev::CallStart(name.clone()));
            }
            w.node(&tag.content, p, inner, &mut |w, q| {
                if w.out_of_text(q) {
                    return k(w, q);
                }
                for end in &tag.ends {
                    if let Some(e) = w.lit(end, q) {
                        if w.attempt(|w| {
                            if call.is_some() && e - q == end.len() {
                                w.events.push(Ev::CallEnd);
                            }
                            k(w, e)
                        }) {
                            return true;
                        }
                    }
                }
                false
            })
        })
    }

    /// One whole tag of `tags`.
    fn any_tag(&mut self, tags: &'a [Tag<'static>], pos: usize, cx: Cx<'a>, k: &mut K<'_, 'a>) -> bool {
        for tag in tags {
            if self.attempt(|w| w.tag(tag, pos, cx, k)) {
                return true;
            }
        }
        false
    }

    /// Tags separated by `separator` (one at least).
    fn separated(
        &mut self,
        tags: &'a [Tag<'static>],
        separator: &'a str,
        stop_after_first: bool,
        pos: usize,
        cx: Cx<'a>,
        k: &mut K<'_, 'a>,
    ) -> bool {
        self.any_tag(tags, pos, cx, &mut |w, p| {
            if !stop_after_first && !w.out_of_text(p) {
                let more = w.attempt(|w| match w.lit(separator, p) {
                    Some(q) if q > p || separator.is_empty() => {
                        // An empty separator: the next tag must start right here.
                        (q > p || !w.out_of_text(q)) && w.separated(tags, separator, false, q, cx, k)
                    }
                    _ => false,
                });
                if more {
                    return true;
                }
            }
            k(w, p)
        })
    }

    /// Free text up to the first trigger, then the rest of a tag that begins with it,
    /// repeatedly; the text stops at the enclosing tag's `end` (or the output's end).
    fn triggered(&mut self, tt: &Triggered<'a>, pos: usize, cx: Cx<'a>, k: &mut K<'_, 'a>) -> bool {
        let rest = &self.text[pos..];
        let mut patterns: Vec<&str> = tt.triggers.iter().map(String::as_str).collect();
        let n_triggers = patterns.len();
        patterns.extend(tt.excludes.iter().chain(cx.ends).filter(|e| !e.is_empty()).map(String::as_str));
        match first_occurrence(rest, &patterns) {
            Some((at, j)) if j < n_triggers => {
                // A trigger: the text must go on with a tag that begins with it.
                let start = pos + at;
                self.push_text(cx.role, pos, start);
                self.reach(start);
                let trigger = patterns[j];
                for tag in tt.tags.iter().filter(|t| t.begin.starts_with(trigger)) {
                    let ok = self.attempt(|w| {
                        w.tag(tag, start, cx, &mut |w, p| {
                            if tt.stop_after_first || w.out_of_text(p) {
                                k(w, p)
                            } else {
                                w.triggered(tt, p, cx, k)
                            }
                        })
                    });
                    if ok {
                        return true;
                    }
                }
                false
            }
            Some((at, _)) => {
                // An exclude or the enclosing tag's `end`: the text stops before it.
                self.push_text(cx.role, pos, pos + at);
                self.reach(pos + at);
                k(self, pos + at)
            }
            None if self.partial => {
                let keep = rest.len() - held_back(rest, &patterns);
                self.push_text(cx.role, pos, pos + keep);
                self.reach(self.text.len());
                k(self, self.text.len())
            }
            None => {
                self.push_text(cx.role, pos, self.text.len());
                self.reach(self.text.len());
                k(self, self.text.len())
            }
        }
    }

    /// Free text up to the first pattern (written as text, not shown), then its format.
    fn dispatch(
        &mut self,
        rules: &'a [(String, Node<'static>)],
        repeat: bool,
        excludes: &'a [String],
        pos: usize,
        cx: Cx<'a>,
        k: &mut K<'_, 'a>,
    ) -> bool {
        let rest = &self.text[pos..];
        let mut patterns: Vec<&str> = rules.iter().map(|(p, _)| p.as_str()).collect();
        let n_rules = patterns.len();
        patterns.extend(excludes.iter().filter(|e| !e.is_empty()).map(String::as_str));
        match first_occurrence(rest, &patterns) {
            Some((at, j)) if j < n_rules => {
                let after = pos + at + patterns[j].len();
                self.push_text(cx.role, pos, pos + at);
                self.reach(after.min(self.text.len()));
                let after = after.min(self.text.len());
                self.node(&rules[j].1, after, cx, &mut |w, p| {
                    if repeat && !w.out_of_text(p) {
                        w.dispatch(rules, repeat, excludes, p, cx, k)
                    } else {
                        k(w, p)
                    }
                })
            }
            Some((at, _)) => {
                self.push_text(cx.role, pos, pos + at);
                k(self, pos + at)
            }
            None => {
                let keep = if self.partial { rest.len() - held_back(rest, &patterns) } else { rest.len() };
                self.push_text(cx.role, pos, pos + keep);
                self.reach(self.text.len());
                k(self, self.text.len())
            }
        }
    }
}

struct Triggered<'a> {
    triggers: &'a [String],
    tags: &'a [Tag<'static>],
    stop_after_first: bool,
    excludes: &'a [String],
}

/// The occurrence of one of `patterns` in `text` that ends first (ties: the longest, i.e.
/// the one starting first), as `(start, pattern index)`.
fn first_occurrence(text: &str, patterns: &[&str]) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize, usize)> = None; // (end, start, index)
    for (j, p) in patterns.iter().enumerate() {
        if p.is_empty() {
            continue;
        }
        if let Some(s) = text.find(p) {
            let e = s + p.len();
            if best.map_or(true, |(be, bs, _)| e < be || (e == be && s < bs)) {
                best = Some((e, s, j));
            }
        }
    }
    best.map(|(_, s, j)| (s, j))
}

/// Whether `rest` ends inside a JSON number that one more digit would continue: then it
/// is a prefix of JSON although serde reports an invalid number at its end.
fn number_in_progress(rest: &str) -> bool {
    if !rest.ends_with(['-', '+', '.', 'e', 'E']) {
        return false;
    }
    let completed = format!("{rest}0");
    match serde_json::Deserializer::from_str(&completed).into_iter::<serde::de::IgnoredAny>().next() {
        Some(Ok(_)) => true,
        Some(Err(e)) => e.is_eof(),
        None => false,
    }
}

/// Length of the JSON number or literal (`true`, `false`, `null`) at the start of `text`,
/// when there is one.
fn bare_scalar(text: &str) -> Option<usize> {
    let n = text
        .bytes()
        .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'a'..=b'z'))
        .count();
    // The longest prefix that is a whole JSON scalar (`1e` is not, `1` is).
    (1..=n)
        .rev()
        .find(|&i| serde_json::from_str::<Value>(&text[..i]).is_ok_and(|v| !v.is_object() && !v.is_array()))
}

/// Where the first occurrence of one of `patterns` ends.
fn first_end(text: &str, patterns: &[&str]) -> Option<usize> {
    first_occurrence(text, patterns).map(|(s, j)| s + patterns[j].len())
}

/// Length of the longest suffix of `text` that is a proper prefix of a pattern (text
/// that may yet become one).
fn held_back(text: &str, patterns: &[&str]) -> usize {
    let mut best = 0;
    for p in patterns {
        for (i, _) in p.char_indices().skip(1) {
            if i > best && text.ends_with(&p[..i]) {
                best = i;
            }
        }
    }
    best
}

fn collect_tags<'n, 'a>(n: &'n Node<'a>, out: &mut Vec<&'n Tag<'a>>) {
    let (tags, children) = n.parts();
    for t in tags {
        out.push(t);
        collect_tags(&t.content, out);
    }
    children.into_iter().for_each(|c| collect_tags(c, out));
}

fn compile_machines(
    n: &Node,
    compiler: &GrammarCompiler,
    out: &mut HashMap<String, Arc<CompiledGrammar>>,
) -> Result<(), OutputError> {
    let spec = match &n.format {
        Format::Regex(p) => Some(GrammarSpec::Regex(p.clone())),
        Format::Grammar(g) => Some(GrammarSpec::ebnf(g.clone())),
        _ => None,
    };
    if let Some(spec) = spec {
        let compiled = compiler
            .compile(&spec)
            .map_err(|e| OutputError::Compile { pointer: n.pointer.clone(), message: e.to_string() })?;
        out.insert(n.pointer.clone(), compiled);
    }
    let (tags, children) = n.parts();
    tags.iter().map(|t| &*t.content).chain(children).try_for_each(|c| compile_machines(c, compiler, out))
}
