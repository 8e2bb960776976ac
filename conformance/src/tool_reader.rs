//! The suite's own reader of tool-calling outputs, written from each model family's
//! *published* tool-call format, not from grammask.
//!
//! grammask reads outputs back with `OutputParser`, which walks the very structural tag
//! its presets built: if a preset wrote the wrong syntax, the parser would read the wrong
//! syntax back just as happily, and a check built on it could not notice. This module
//! shares nothing with grammask's presets or parser (it imports only the [`Family`]
//! enum, to dispatch): every format below is written from the model's public material —
//! its model card or chat template, and the tool parsers of vLLM, SGLang and the model
//! makers — so it judges grammask's outputs the way a server reading a real model's
//! output would.
//!
//! | family | format read | public source |
//! |---|---|---|
//! | `llama` | `{"name": N, "parameters": {…}}` objects in text | Llama 3.1 / 3.2 model cards (JSON tool calling); vLLM `llama3_json` |
//! | `hermes` | `<tool_call>\n{"name": N, "arguments": {…}}\n</tool_call>` | Hermes 2 Pro / 3 model cards and chat templates; vLLM `hermes` |
//! | `qwen_3` | Hermes blocks after `<think>…</think>` | Qwen3 chat template; vLLM `hermes` |
//! | `exaone` | `<tool_call>{"name": N, "arguments": {…}}</tool_call>`, `<think>` | EXAONE 4.0 model card / chat template |
//! | `qwen_3_coder`, `qwen_3_5`, `mimo` | `<tool_call><function=N><parameter=K>V</parameter>…</function></tool_call>` | Qwen3-Coder / Qwen3.5 chat templates; vLLM `qwen3coder`, `mimov2_flash` |
//! | `kimi` | `<\|tool_calls_section_begin\|><\|tool_call_begin\|>functions.N:I<\|tool_call_argument_begin\|>{…}<\|tool_call_end\|>…` | Kimi-K2 `docs/tool_call_guidance.md`; vLLM `kimi_k2` |
//! | `kimi_k3` | XTML blocks `<\|open\|>…<\|sep\|>…<\|close\|>…<\|sep\|>`, typed arguments | vLLM `kimi_k3` (XTML) parser; XGrammar's Kimi-K3 tag documentation |
//! | `deepseek_r1` | `<｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{…}\n```<｜tool▁call▁end｜>` | DeepSeek-R1 chat template; vLLM `deepseek_v3` |
//! | `deepseek_v3_1` | `<｜tool▁call▁begin｜>N<｜tool▁sep｜>{…}<｜tool▁call▁end｜>` | DeepSeek-V3.1 chat template; vLLM `deepseek_v31` |
//! | `deepseek_v3_2`, `deepseek_v4`, `deepseek_v4_1` | DSML `<｜DSML｜invoke name=…><｜DSML｜parameter name=… string="true\|false">` | DeepSeek-V3.2 DSML encoding; vLLM `deepseek_v32` / `deepseek_v4`; SGLang `DeepSeekV41Detector` (spaced names) |
//! | `harmony` | gpt-oss channels, calls `to=functions.N … <\|message\|>{…}<\|call\|>` | OpenAI harmony cookbook; gpt-oss chat template |
//! | `minimax` | `<minimax:tool_call><invoke name=N><parameter name=K>V</parameter></invoke></minimax:tool_call>` | MiniMax-M2 function-call guide; vLLM `minimax_m2` |
//! | `minimax_m3` | `]<]minimax[>[`-prefixed nested XML, `<mm:think>` | vLLM's MiniMax M3 text parser (`M3TextParser`) |
//! | `glm_4_7` | `<tool_call>N<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>` | GLM-4.7 chat template; vLLM `glm47_moe` |
//! | `gemma_4` | `<\|tool_call>call:N{key:<\|"\|>text<\|"\|>,n:1}<tool_call\|>` | Gemma 4 prompt-formatting docs; vLLM `gemma4` |
//! | `cohere` | `<cofl:tool_calls><cofl:tool_call id=… name=…><cofl:value name=… type=raw\|json\|dict\|list>` | Cohere's `melody` parser (cmd5 nested-xml template) |
//! | `mistral` | `[TOOL_CALLS][{"name": N, "arguments": {…}}, …]` | mistral-common tokenizer v3; Mistral-7B-Instruct-v0.3 template; vLLM `mistral` |
//!
//! # Reasoning
//! Reasoning blocks are skipped and are not content. Most templates open the block in the
//! prompt, so an output may start inside it: everything before the first closing marker
//! (`</think>`, …) is reasoning; an output that starts with the opening marker must close
//! it. An output with no closing marker is read as having no reasoning block (the reader
//! is not told the request's reasoning mode); a cut-off output with no closing marker
//! that is not a plausible answer is taken as cut inside a prompt-opened reasoning block.
//!
//! # Argument values
//! JSON arguments must parse and be objects. In XML-style formats a value whose type the
//! format states (DSML's `string="true|false"`, Kimi K3's `type=`, Cohere's `type=`) is
//! read as stated: raw text for strings, JSON otherwise. Qwen, GLM, MiniMax and MiniMax
//! M3 do not state it (their templates write strings raw and everything else as JSON);
//! [`read`] then takes a value that parses as JSON other than a string as that JSON and
//! anything else as the raw string, and [`read_with_tools`] lets the parameter's schema
//! decide, as the published parsers do.
//!
//! # Where grammask's presets differ from the published formats
//! The reader follows the published format; these are refused or read differently from
//! what the preset's grammar allows (each family's function says more):
//! - `gemma_4`: the preset constrains arguments as plain JSON (`{"city": "Lyon"}`);
//!   Gemma 4 writes bare keys and `<|"|>`-quoted strings, so such calls are refused.
//! - `deepseek_v3_2`, `deepseek_v4`: XGrammar's `deepseek_xml` style does not tie
//!   `string="true|false"` to the value's type; the published meaning is applied
//!   (`string="false"` around raw text is refused, `string="true"` is always a string).
//! - `minimax_m3`: the preset allows several tool-call blocks and text after one; the
//!   published parser reads one block that ends the message.
//! - `harmony`: text after `<|return|>` is refused; the preset's
//!   `<|channel|>commentary to=functions.N<|constrain|>json` (no space before
//!   `<|constrain|>`) and messages after a `<|call|>` (parallel calls) are accepted.
//!
//! # Cut-off outputs
//! With `complete == false` the calls closed before the cut are returned and the rest
//! must be a plausible beginning: a prefix of a tag, or a call whose JSON so far is a
//! JSON prefix (checked by a byte state machine of this module, not by serde_json).

use grammask::tool_calling::Family;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// One call read from an output: the tool's name and its arguments as a JSON value
/// (XML-style argument formats converted to a JSON object, values typed as the format says).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadCall {
    /// The tool's name as the model wrote it (Harmony's `functions.` namespace removed).
    pub name: String,
    /// The call's arguments: always a JSON object for a call read from text.
    pub arguments: Value,
}

/// What an output holds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReadOutput {
    /// Calls in order.
    pub calls: Vec<ReadCall>,
    /// Free text outside calls and reasoning blocks (trimmed).
    pub content: String,
    /// True when the text ended inside an unfinished call or block (only possible with `complete == false`).
    pub unfinished: bool,
}

/// Reads `text` as a model of `family` writes it. `complete`: the output ended normally,
/// so every opened block/call must be closed and well formed. `complete == false`: the output
/// was cut off by a token limit: calls closed before the cut are returned, and the unfinished
/// tail must still be a plausible beginning of the format (a tag prefix, a call whose JSON so
/// far is a valid JSON prefix) — otherwise an error.
///
/// Errors say what is wrong and at which byte offset of `text`.
pub fn read(family: Family, text: &str, complete: bool) -> Result<ReadOutput, String> {
    read_family(family, text, complete, None)
}

/// [`read`], with the request's OpenAI `tools` (`{"type": "function", "function": {"name",
/// "parameters"}}`, or the bare function objects) telling the type of each argument in
/// the formats that do not write it (Qwen 3 Coder / 3.5, MiMo, GLM 4.7, MiniMax M2 and
/// M3): a parameter whose schema is a string keeps its raw text even when it looks like
/// a number, and one whose schema is not a string is read as JSON.
pub fn read_with_tools(
    family: Family,
    text: &str,
    complete: bool,
    tools: &[Value],
) -> Result<ReadOutput, String> {
    let mut schemas = HashMap::new();
    for (i, tool) in tools.iter().enumerate() {
        let function = tool.get("function").unwrap_or(tool);
        let name =
            function.get("name").and_then(Value::as_str).ok_or_else(|| format!("tool {i} has no name"))?;
        schemas.insert(name.to_string(), function.get("parameters").cloned().unwrap_or(Value::Bool(true)));
    }
    read_family(family, text, complete, Some(&schemas))
}

// ---------------------------------------------------------------------------------------
// Dispatch
// ---------------------------------------------------------------------------------------

/// A reasoning block's markers.
#[derive(Debug, Clone, Copy)]
struct Think {
    open: &'static str,
    close: &'static str,
    /// Whether the chat template's generation prompt may already have opened the block
    /// (so the output starts inside it and only the closing marker is written).
    prompt_opens: bool,
}

/// `<think>…</think>` (Qwen, DeepSeek, Kimi K2, GLM, MiniMax M2, MiMo, EXAONE).
const THINK: Think = Think { open: "<think>", close: "</think>", prompt_opens: true };

#[allow(unreachable_patterns)] // a family added later is refused, not read as another
fn read_family(
    family: Family,
    text: &str,
    complete: bool,
    tools: Option<&HashMap<String, Value>>,
) -> Result<ReadOutput, String> {
    match family {
        Family::Llama => run(text, complete, tools, None, llama),
        Family::Hermes => run(text, complete, tools, None, tagged_json_calls),
        Family::Qwen3 | Family::Exaone => run(text, complete, tools, Some(THINK), tagged_json_calls),
        Family::Qwen3Coder | Family::Qwen3_5 | Family::Mimo => {
            run(text, complete, tools, Some(THINK), qwen_xml_calls)
        }
        Family::Kimi => run(text, complete, tools, Some(THINK), kimi_k2),
        Family::KimiK3 => run(text, complete, tools, None, kimi_k3),
        Family::DeepseekR1 => run(text, complete, tools, Some(THINK), deepseek_r1),
        Family::DeepseekV3_1 => run(text, complete, tools, Some(THINK), deepseek_v3_1),
        Family::DeepseekV3_2 => run(text, complete, tools, Some(THINK), |r| dsml(r, &DSML_V3_2)),
        Family::DeepseekV4 => run(text, complete, tools, Some(THINK), |r| dsml(r, &DSML_V4)),
        Family::DeepseekV4_1 => run(text, complete, tools, Some(THINK), |r| dsml(r, &DSML_V4_1)),
        Family::Harmony => run(text, complete, tools, None, harmony),
        Family::Minimax => run(text, complete, tools, Some(THINK), minimax_m2),
        Family::MinimaxM3 => {
            let think = Think { open: "<mm:think>", close: "</mm:think>", prompt_opens: true };
            run(text, complete, tools, Some(think), minimax_m3)
        }
        Family::Glm4_7 => run(text, complete, tools, Some(THINK), glm),
        Family::Gemma4 => {
            // Gemma 4's prompt does not open the thought channel: the model writes
            // `<|channel>thought\n…<channel|>` itself.
            let think = Think { open: "<|channel>thought", close: "<channel|>", prompt_opens: false };
            run(text, complete, tools, Some(think), gemma4)
        }
        Family::Cohere => {
            let think = Think { open: "<|START_THINKING|>", close: "<|END_THINKING|>", prompt_opens: true };
            run(text, complete, tools, Some(think), cohere)
        }
        Family::Mistral => run(text, complete, tools, None, mistral),
        _ => Err(format!("no independent reader for family {}", family.name())),
    }
}

/// Splits off the reasoning block (see the module docs), then reads the rest with
/// `body`, which must consume it all.
fn run<'a, F>(
    text: &'a str,
    complete: bool,
    tools: Option<&'a HashMap<String, Value>>,
    think: Option<Think>,
    body: F,
) -> Result<ReadOutput, String>
where
    F: FnOnce(&mut Reader<'a>) -> Result<(), Stop>,
{
    let unfinished = || Ok(ReadOutput { unfinished: true, ..ReadOutput::default() });
    let mut start = 0;
    // Whether the output says where reasoning ends (or that there is none).
    let mut boundary_known = true;
    if let Some(t) = think {
        let lead = text.len() - text.trim_start().len();
        let trimmed = &text[lead..];
        if let Some(after_open) = trimmed.strip_prefix(t.open) {
            match after_open.find(t.close) {
                Some(i) => start = lead + t.open.len() + i + t.close.len(),
                None if complete => {
                    return Err(format!(
                        "byte {lead}: the reasoning block {:?} is never closed by {:?}",
                        t.open, t.close
                    ))
                }
                None => return unfinished(),
            }
        } else if !complete && !trimmed.is_empty() && t.open.starts_with(trimmed) {
            return unfinished(); // cut inside the opening marker
        } else if t.prompt_opens {
            match text.find(t.close) {
                Some(i) => start = i + t.close.len(),
                None => boundary_known = false,
            }
        }
    }
    let mut r = Reader { text, pos: start, tools, calls: Vec::new(), content: String::new(), complete };
    match body(&mut r) {
        Ok(()) if r.pos < text.len() => Err(format!("byte {}: unread text {}", r.pos, snippet(r.rest()))),
        Ok(()) => Ok(r.finish(false)),
        Err(Stop::Cut(_)) if !complete => Ok(r.finish(true)),
        Err(Stop::Cut(what)) => Err(format!("the output ends (byte {}) inside {what}", text.len())),
        // Cut off with no closing reasoning marker: the prompt may have opened the block
        // and the whole text be reasoning, which anything is a plausible beginning of.
        Err(Stop::Bad(_)) if !complete && !boundary_known => unfinished(),
        Err(Stop::Bad(msg)) => Err(msg),
    }
}

// ---------------------------------------------------------------------------------------
// The reader's cursor
// ---------------------------------------------------------------------------------------

/// Why reading stopped early.
#[derive(Debug)]
enum Stop {
    /// The text ended where the format needs more (what was open): fine for a cut-off
    /// output, an error for a complete one.
    Cut(String),
    /// The text is not the format (the message says where and why).
    Bad(String),
}

/// A cursor over the output, collecting what it reads.
struct Reader<'a> {
    /// The whole output: offsets in messages are offsets into it.
    text: &'a str,
    pos: usize,
    tools: Option<&'a HashMap<String, Value>>,
    calls: Vec<ReadCall>,
    content: String,
    complete: bool,
}

/// Nesting deeper than this in XML-style or Gemma arguments is refused (the readers of
/// nested values recurse).
const MAX_DEPTH: usize = 64;

impl<'a> Reader<'a> {
    fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or("")
    }

    fn at_end(&self) -> bool {
        self.pos >= self.text.len()
    }

    fn looking_at(&self, lit: &str) -> bool {
        self.rest().starts_with(lit)
    }

    fn finish(self, unfinished: bool) -> ReadOutput {
        ReadOutput { calls: self.calls, content: self.content.trim().to_string(), unfinished }
    }

    fn bad(&self, msg: impl std::fmt::Display) -> Stop {
        Stop::Bad(format!("byte {}: {msg}", self.pos))
    }

    fn cut(&self, what: impl Into<String>) -> Stop {
        Stop::Cut(what.into())
    }

    /// The text ended (cut) or holds something else than `expected` (bad).
    fn fail(&self, expected: &str) -> Stop {
        if self.at_end() {
            self.cut(expected)
        } else {
            self.bad(format!("expected {expected}, found {}", snippet(self.rest())))
        }
    }

    fn push_call(&mut self, name: &str, arguments: Value) {
        self.calls.push(ReadCall { name: name.to_string(), arguments });
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    /// `lit` must come next (a prefix of it at the end of the text is a cut).
    fn expect(&mut self, lit: &str, what: &str) -> Result<(), Stop> {
        let rest = self.rest();
        if rest.starts_with(lit) {
            self.pos += lit.len();
            Ok(())
        } else if lit.starts_with(rest) {
            Err(self.cut(what))
        } else {
            Err(self.bad(format!("expected {lit:?} ({what}), found {}", snippet(rest))))
        }
    }

    /// Consumes `lit` if it comes next. A non-empty text that ends inside `lit` is a cut.
    fn eat(&mut self, lit: &str, what: &str) -> Result<bool, Stop> {
        let rest = self.rest();
        if rest.starts_with(lit) {
            self.pos += lit.len();
            Ok(true)
        } else if !rest.is_empty() && lit.starts_with(rest) {
            Err(self.cut(what))
        } else {
            Ok(false)
        }
    }

    /// The text up to `lit`, which is consumed too.
    fn take_until(&mut self, lit: &str, what: &str) -> Result<&'a str, Stop> {
        self.body_until(lit).ok_or_else(|| self.cut(what))
    }

    /// The text up to `lit`, which is consumed too; `None` (nothing consumed) when the
    /// text ends first.
    fn body_until(&mut self, lit: &str) -> Option<&'a str> {
        let rest = self.rest();
        let i = rest.find(lit)?;
        self.pos += i + lit.len();
        Some(&rest[..i])
    }

    /// The text up to the first of `ends`, which is consumed and returned too.
    fn until_any(&mut self, ends: &[&'static str], what: &str) -> Result<(&'a str, &'static str), Stop> {
        let rest = self.rest();
        let found = ends.iter().filter_map(|e| rest.find(e).map(|i| (i, *e))).min_by_key(|&(i, _)| i);
        match found {
            Some((i, end)) => {
                self.pos += i + end.len();
                Ok((&rest[..i], end))
            }
            None => Err(self.cut(what)),
        }
    }

    /// A non-empty run of characters for which `ok` holds (a name, a key). The text
    /// ending inside the run is a cut.
    fn run_of(&mut self, ok: fn(char) -> bool, what: &str) -> Result<&'a str, Stop> {
        let rest = self.rest();
        let n = rest.char_indices().find(|&(_, c)| !ok(c)).map_or(rest.len(), |(i, _)| i);
        if n == rest.len() {
            self.pos += n;
            return Err(self.cut(what));
        }
        if n == 0 {
            return Err(self.bad(format!("expected {what}, found {}", snippet(rest))));
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    /// One or more ASCII digits.
    fn digits(&mut self, what: &str) -> Result<&'a str, Stop> {
        let rest = self.rest();
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return Err(self.fail(what));
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    /// Free text up to `trigger` (left unread), added to the content: `Ok(true)` when the
    /// trigger comes next, `Ok(false)` when the text ended without one. A cut-off text
    /// ending in a prefix of the trigger is a cut inside that tag.
    fn free_text(&mut self, trigger: &str) -> Result<bool, Stop> {
        let rest = self.rest();
        if let Some(i) = rest.find(trigger) {
            self.content.push_str(&rest[..i]);
            self.pos += i;
            return Ok(true);
        }
        let keep = if self.complete { 0 } else { partial_suffix_len(rest, trigger) };
        self.content.push_str(&rest[..rest.len() - keep]);
        self.pos += rest.len() - keep;
        if keep > 0 {
            Err(self.cut(format!("a partial {trigger:?}")))
        } else {
            Ok(false)
        }
    }

    /// A JSON object (after optional whitespace), parsed with serde_json; the text
    /// ending inside it is a cut only if what came so far is a JSON prefix.
    fn json_object(&mut self, what: &str) -> Result<Map<String, Value>, Stop> {
        self.skip_ws();
        let start = self.pos;
        let rest = self.rest();
        if rest.is_empty() {
            return Err(self.cut(what));
        }
        if !rest.starts_with('{') {
            return Err(self.bad(format!("expected a JSON object ({what}), found {}", snippet(rest))));
        }
        match scan_json(rest) {
            JsonScan::Complete(end) => {
                let value: Value = serde_json::from_str(&rest[..end])
                    .map_err(|e| Stop::Bad(format!("byte {start}: {what} is not valid JSON: {e}")))?;
                self.pos = start + end;
                match value {
                    Value::Object(map) => Ok(map),
                    _ => Err(Stop::Bad(format!("byte {start}: {what} is not a JSON object"))),
                }
            }
            JsonScan::Prefix => Err(self.cut(what)),
            JsonScan::Invalid(i) => Err(Stop::Bad(format!(
                "byte {}: invalid JSON in {what}: {}",
                start + i,
                snippet(rest.get(i..).unwrap_or(""))
            ))),
        }
    }

    /// The schema of `tool`'s parameters ([`read_with_tools`] only).
    fn tool_schema(&self, tool: &str) -> Option<&'a Value> {
        self.tools?.get(tool)
    }

    /// The schema of `tool`'s parameter `key`.
    fn arg_schema(&self, tool: &str, key: &str) -> Option<&'a Value> {
        member_schema(self.tool_schema(tool), key)
    }

    /// `name="value"` attributes (XML entities in values decoded) up to `end`, which is
    /// consumed.
    fn attributes(&mut self, end: &str, what: &str) -> Result<Vec<(&'a str, String)>, Stop> {
        let mut out = Vec::new();
        loop {
            self.skip_ws();
            if self.eat(end, what)? {
                return Ok(out);
            }
            let name = self.run_of(attr_name_char, what)?;
            self.expect("=\"", what)?;
            let value = self.take_until("\"", what)?;
            out.push((name, decode_entities(value)));
        }
    }

    /// The error for a JSON-typed value cut off inside its body (the rest of the text,
    /// before any prefix of its closing tag `close`): a cut when the body so far is a
    /// JSON prefix.
    fn json_tail(&self, close: &str, what: &str) -> Stop {
        let rest = self.rest();
        let body = &rest[..rest.len() - partial_suffix_len(rest, close)];
        if is_json_prefix(body.trim_start()) {
            self.cut(what)
        } else {
            self.bad(format!("{what} is not the beginning of a JSON value: {}", snippet(body)))
        }
    }

    /// Refuses nesting deeper than [`MAX_DEPTH`] (the readers of nested values recurse).
    fn check_depth(&self, depth: usize) -> Result<(), Stop> {
        if depth > MAX_DEPTH {
            Err(self.bad("arguments nested too deep"))
        } else {
            Ok(())
        }
    }

    /// Only whitespace may follow: `what` ends the message.
    fn nothing_after(&mut self, what: &str) -> Result<(), Stop> {
        self.skip_ws();
        if self.at_end() {
            Ok(())
        } else {
            Err(self.bad(format!("text after {what}: {}", snippet(self.rest()))))
        }
    }

    /// A call's JSON arguments, then (after optional whitespace) `end`, which closes the
    /// call (`what` names what `end` closes).
    fn json_arguments(&mut self, end: &str, what: &str) -> Result<Value, Stop> {
        let args = self.json_object("the call's arguments")?;
        self.skip_ws();
        self.expect(end, what)?;
        Ok(Value::Object(args))
    }

    /// A tag naming a function, `open` NAME `end`: the name. Each literal comes with
    /// what it is, for messages.
    fn function_tag(
        &mut self,
        (open, open_what): (&str, &str),
        (end, end_what): (&str, &str),
    ) -> Result<&'a str, Stop> {
        self.expect(open, open_what)?;
        let name = self.run_of(name_char, "a function name")?;
        self.expect(end, end_what)?;
        Ok(name)
    }

    /// An untyped parameter `open` KEY `key_end` VALUE `</parameter>` (Qwen's
    /// `<parameter=KEY>`, MiniMax M2's `<parameter name="KEY">`): its key and raw value.
    /// Each literal comes with what it is, for messages.
    fn parameter(
        &mut self,
        (open, open_what): (&str, &str),
        (key_end, tag_what): (&str, &str),
    ) -> Result<(&'a str, &'a str), Stop> {
        self.expect(open, open_what)?;
        let key = self.run_of(key_char, "a parameter name")?;
        self.expect(key_end, tag_what)?;
        let body = self.take_until("</parameter>", "a parameter value")?;
        Ok((key, body))
    }

    /// Elements up to `close` (consumed), whitespace between them free, each read by
    /// `element`, which is given the offset it starts at. Returns how many were read.
    /// The calls of a block, the arguments of a call and the members of a nested value
    /// are read this way.
    fn elements(
        &mut self,
        close: &str,
        what: &str,
        mut element: impl FnMut(&mut Self, usize) -> Result<(), Stop>,
    ) -> Result<usize, Stop> {
        let mut count = 0;
        loop {
            self.skip_ws();
            if self.eat(close, what)? {
                return Ok(count);
            }
            let at = self.pos;
            element(&mut *self, at)?;
            count += 1;
        }
    }

    /// An XML-style argument list up to `close` (consumed): `arg` reads one argument,
    /// given its offset, into its key and value. A key given twice is refused as soon as
    /// it is read.
    fn arg_list<K: AsRef<str>>(
        &mut self,
        close: &str,
        what: &str,
        mut arg: impl FnMut(&mut Self, usize) -> Result<(K, Value), Stop>,
    ) -> Result<Map<String, Value>, Stop> {
        let mut args = Map::new();
        self.elements(close, what, |r, at| {
            let (key, value) = arg(r, at)?;
            insert_arg(&mut args, key.as_ref(), value, at)
        })?;
        Ok(args)
    }
}

// ---------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------

/// The start of `s`, quoted, for error messages.
fn snippet(s: &str) -> String {
    if s.is_empty() {
        "the end of the output".to_string()
    } else {
        let head: String = s.chars().take(24).collect();
        format!("{head:?}")
    }
}

/// The length of the longest proper, non-empty prefix of `lit` that `s` ends with.
fn partial_suffix_len(s: &str, lit: &str) -> usize {
    lit.char_indices().skip(1).map(|(i, _)| i).filter(|&n| s.ends_with(&lit[..n])).max().unwrap_or(0)
}

/// A tool or recipient name: letters, digits, `_`, `-`, `.`.
fn name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// A parameter name in an XML-style format.
fn key_char(c: char) -> bool {
    !c.is_control() && !matches!(c, '<' | '>' | '"')
}

/// A Harmony channel or content-type word.
fn word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// An XML attribute name.
fn attr_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':')
}

/// A bare Gemma 4 key.
fn gemma_key_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '$')
}

/// The XML entities the templates escape attribute values with.
fn decode_entities(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn attr<'v>(attrs: &'v [(&str, String)], name: &str) -> Option<&'v str> {
    attrs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
}

/// Attribute `name` of a tag read at byte `at`, which must be there and not empty
/// (`missing` says what the tag is without it).
fn nonempty_attr(attrs: &[(&str, String)], name: &str, at: usize, missing: &str) -> Result<String, Stop> {
    match attr(attrs, name) {
        Some(v) if !v.is_empty() => Ok(v.to_string()),
        _ => Err(Stop::Bad(format!("byte {at}: {missing}"))),
    }
}

/// Qwen's templates write a value between newlines (`<parameter=k>\nVALUE\n</parameter>`).
fn strip_newlines(s: &str) -> &str {
    let s = s.strip_prefix('\n').unwrap_or(s);
    s.strip_suffix('\n').unwrap_or(s)
}

fn insert_arg(args: &mut Map<String, Value>, key: &str, value: Value, at: usize) -> Result<(), Stop> {
    if args.contains_key(key) {
        return Err(Stop::Bad(format!("byte {at}: argument {key:?} given twice")));
    }
    args.insert(key.to_string(), value);
    Ok(())
}

/// The object of `members` (key, value, offset) read before, a key given twice refused.
fn object_of<K: AsRef<str>>(
    members: impl IntoIterator<Item = (K, Value, usize)>,
) -> Result<Map<String, Value>, Stop> {
    let mut map = Map::new();
    for (key, value, at) in members {
        insert_arg(&mut map, key.as_ref(), value, at)?;
    }
    Ok(map)
}

/// One block `open` … `close` holding one or more items, each read by `item` (given
/// its offset). `what` names the block in messages, `item_name` what it holds.
fn block<'a>(
    r: &mut Reader<'a>,
    open: &str,
    close: &str,
    what: &str,
    item_name: &str,
    item: impl FnMut(&mut Reader<'a>, usize) -> Result<(), Stop>,
) -> Result<(), Stop> {
    let block_at = r.pos;
    r.expect(open, &format!("a {what}"))?;
    if r.elements(close, &format!("the {what}"), item)? == 0 {
        return Err(Stop::Bad(format!("byte {block_at}: a {what} with no {item_name}")));
    }
    Ok(())
}

/// Any number of [`block`]s in free text.
fn blocks<'a>(
    r: &mut Reader<'a>,
    open: &str,
    close: &str,
    what: &str,
    item_name: &str,
    mut item: impl FnMut(&mut Reader<'a>, usize) -> Result<(), Stop>,
) -> Result<(), Stop> {
    while r.free_text(open)? {
        block(r, open, close, what, item_name, &mut item)?;
    }
    Ok(())
}

/// A value the format encodes as JSON, closed by its tag.
fn json_body(body: &str, at: usize, what: &str) -> Result<Value, Stop> {
    serde_json::from_str(body.trim())
        .map_err(|e| Stop::Bad(format!("byte {at}: {what} is not valid JSON ({e})")))
}

/// A JSON call envelope: `name` (a non-empty string), `args_key` (an object), and no
/// other member but `optional` ones (strings).
fn envelope(
    mut obj: Map<String, Value>,
    at: usize,
    args_key: &str,
    optional: &[&str],
    what: &str,
) -> Result<ReadCall, Stop> {
    let bad = |msg: String| Stop::Bad(format!("byte {at}: {what}: {msg}"));
    if let Some(k) =
        obj.keys().find(|k| k.as_str() != "name" && k.as_str() != args_key && !optional.contains(&k.as_str()))
    {
        return Err(bad(format!("unexpected member {k:?}")));
    }
    for k in optional {
        if obj.get(*k).is_some_and(|v| !v.is_string()) {
            return Err(bad(format!("`{k}` is not a string")));
        }
    }
    let name = match obj.remove("name") {
        Some(Value::String(s)) if !s.is_empty() => s,
        Some(_) => return Err(bad("`name` is not a non-empty string".to_string())),
        None => return Err(bad("no `name`".to_string())),
    };
    match obj.remove(args_key) {
        Some(arguments @ Value::Object(_)) => Ok(ReadCall { name, arguments }),
        Some(_) => Err(bad(format!("`{args_key}` is not a JSON object"))),
        None => Err(bad(format!("no `{args_key}`"))),
    }
}

// ---------------------------------------------------------------------------------------
// Schemas, for the formats that do not write a value's type
// ---------------------------------------------------------------------------------------

/// The schema of member `key` of an object of schema `schema`.
fn member_schema<'s>(schema: Option<&'s Value>, key: &str) -> Option<&'s Value> {
    let s = schema?;
    s.get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| s.get("additionalProperties").filter(|a| a.is_object()))
}

/// The schema of the items of an array of schema `schema`.
fn items_schema(schema: Option<&Value>) -> Option<&Value> {
    schema?.get("items").filter(|i| i.is_object())
}

/// The JSON types a schema allows, when it says (`type`, `const`, `enum`, or `anyOf` /
/// `oneOf` of such).
fn schema_types(schema: &Value) -> Option<Vec<&'static str>> {
    fn canonical(t: &str) -> Option<&'static str> {
        ["null", "boolean", "integer", "number", "string", "array", "object"].into_iter().find(|c| *c == t)
    }
    fn type_of(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_f64() => "number",
            Value::Number(_) => "integer",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }
    if let Some(t) = schema.get("type") {
        return match t {
            Value::String(s) => Some(vec![canonical(s)?]),
            Value::Array(a) => a.iter().map(|x| x.as_str().and_then(canonical)).collect(),
            _ => None,
        };
    }
    if let Some(c) = schema.get("const") {
        return Some(vec![type_of(c)]);
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        return Some(values.iter().map(type_of).collect());
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(key) {
            let mut all = Vec::new();
            for b in branches {
                all.extend(schema_types(b)?);
            }
            return Some(all);
        }
    }
    None
}

/// Whether `v` is of JSON-schema type `t`.
fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => false,
    }
}

/// A value of a format that does not write its type (the templates write a string raw
/// and anything else as JSON). With the parameter's schema, the schema decides; without
/// one, text that parses as JSON other than a string is that JSON value, anything else
/// the raw string.
fn untyped_scalar(raw: &str, schema: Option<&Value>) -> Value {
    let parsed = serde_json::from_str::<Value>(raw.trim()).ok().filter(|v| !v.is_string());
    match (parsed, schema.and_then(schema_types)) {
        (Some(v), None) => v,
        (None, None) => Value::String(raw.to_string()),
        (Some(v), Some(types)) if types.iter().any(|t| *t != "string" && has_type(&v, t)) => v,
        (_, Some(types)) if types.contains(&"string") => Value::String(raw.to_string()),
        // Not of the schema's type either way: the validator will say so.
        (Some(v), Some(_)) => v,
        (None, Some(_)) => Value::String(raw.to_string()),
    }
}

/// An element with no content: `{}` or `[]` when the schema says so, else `""`.
fn empty_value(schema: Option<&Value>) -> Value {
    match schema.and_then(schema_types) {
        Some(t) if t.contains(&"object") && !t.contains(&"string") => Value::Object(Map::new()),
        Some(t) if t.contains(&"array") && !t.contains(&"string") => Value::Array(Vec::new()),
        _ => Value::String(String::new()),
    }
}

// ---------------------------------------------------------------------------------------
// JSON prefix state machine
// ---------------------------------------------------------------------------------------

/// What [`scan_json`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JsonScan {
    /// A whole JSON value ends at this byte offset (exclusive).
    Complete(usize),
    /// The text is a prefix of some JSON value (it may go on).
    Prefix,
    /// The byte at this offset cannot continue any JSON value.
    Invalid(usize),
}

/// The scanner's state: what the next byte may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Js {
    /// A value (after optional whitespace).
    Value,
    /// A value or `]` (just after `[`).
    ValueOrClose,
    /// A key or `}` (just after `{`).
    KeyOrClose,
    /// A key (after `,` in an object).
    Key,
    /// `:` after a key.
    Colon,
    /// `,` or the container's closing bracket, after a member or item.
    After,
    /// Inside a string (a key or a value).
    Str {
        key: bool,
    },
    /// After `\` in a string.
    Escape {
        key: bool,
    },
    /// In the hex digits of `\u`.
    Hex {
        key: bool,
        left: u8,
    },
    /// Number states: after `-`, a leading `0`, integer digits, `.`, fraction digits,
    /// `e`, the exponent's sign, exponent digits.
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpDigits,
    /// Inside `true`, `false` or `null`.
    Literal {
        word: &'static [u8],
        at: usize,
    },
    /// The top-level value is complete.
    Done,
}

enum Step {
    /// The byte was consumed.
    Take,
    /// A number ended before this byte: read it again in the new state.
    Again,
    /// The byte cannot come here.
    Fail,
}

fn after_value(stack: &[u8]) -> Js {
    if stack.is_empty() {
        Js::Done
    } else {
        Js::After
    }
}

fn end_number(st: &mut Js, stack: &[u8]) -> Step {
    *st = after_value(stack);
    Step::Again
}

fn js_step(st: &mut Js, stack: &mut Vec<u8>, b: u8) -> Step {
    let ws = matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    match *st {
        Js::Value | Js::ValueOrClose => {
            if ws {
                return Step::Take;
            }
            if *st == Js::ValueOrClose && b == b']' {
                stack.pop();
                *st = after_value(stack);
                return Step::Take;
            }
            *st = match b {
                b'{' => {
                    stack.push(b'{');
                    Js::KeyOrClose
                }
                b'[' => {
                    stack.push(b'[');
                    Js::ValueOrClose
                }
                b'"' => Js::Str { key: false },
                b'-' => Js::Minus,
                b'0' => Js::Zero,
                b'1'..=b'9' => Js::Int,
                b't' => Js::Literal { word: b"true", at: 1 },
                b'f' => Js::Literal { word: b"false", at: 1 },
                b'n' => Js::Literal { word: b"null", at: 1 },
                _ => return Step::Fail,
            };
            Step::Take
        }
        Js::KeyOrClose | Js::Key => {
            if ws {
                return Step::Take;
            }
            if b == b'"' {
                *st = Js::Str { key: true };
                return Step::Take;
            }
            if *st == Js::KeyOrClose && b == b'}' {
                stack.pop();
                *st = after_value(stack);
                return Step::Take;
            }
            Step::Fail
        }
        Js::Colon => {
            if ws {
                Step::Take
            } else if b == b':' {
                *st = Js::Value;
                Step::Take
            } else {
                Step::Fail
            }
        }
        Js::After => {
            if ws {
                return Step::Take;
            }
            match (b, stack.last().copied()) {
                (b',', Some(b'{')) => *st = Js::Key,
                (b',', Some(b'[')) => *st = Js::Value,
                (b'}', Some(b'{')) | (b']', Some(b'[')) => {
                    stack.pop();
                    *st = after_value(stack);
                }
                _ => return Step::Fail,
            }
            Step::Take
        }
        Js::Str { key } => {
            match b {
                b'"' => *st = if key { Js::Colon } else { after_value(stack) },
                b'\\' => *st = Js::Escape { key },
                0x00..=0x1f => return Step::Fail,
                _ => {}
            }
            Step::Take
        }
        Js::Escape { key } => {
            *st = match b {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Js::Str { key },
                b'u' => Js::Hex { key, left: 4 },
                _ => return Step::Fail,
            };
            Step::Take
        }
        Js::Hex { key, left } => {
            if !b.is_ascii_hexdigit() {
                return Step::Fail;
            }
            *st = if left <= 1 { Js::Str { key } } else { Js::Hex { key, left: left - 1 } };
            Step::Take
        }
        Js::Minus => {
            *st = match b {
                b'0' => Js::Zero,
                b'1'..=b'9' => Js::Int,
                _ => return Step::Fail,
            };
            Step::Take
        }
        Js::Zero => match b {
            b'.' => {
                *st = Js::Dot;
                Step::Take
            }
            b'e' | b'E' => {
                *st = Js::Exp;
                Step::Take
            }
            _ => end_number(st, stack),
        },
        Js::Int => match b {
            b'0'..=b'9' => Step::Take,
            b'.' => {
                *st = Js::Dot;
                Step::Take
            }
            b'e' | b'E' => {
                *st = Js::Exp;
                Step::Take
            }
            _ => end_number(st, stack),
        },
        Js::Dot => {
            if b.is_ascii_digit() {
                *st = Js::Frac;
                Step::Take
            } else {
                Step::Fail
            }
        }
        Js::Frac => match b {
            b'0'..=b'9' => Step::Take,
            b'e' | b'E' => {
                *st = Js::Exp;
                Step::Take
            }
            _ => end_number(st, stack),
        },
        Js::Exp => {
            *st = match b {
                b'+' | b'-' => Js::ExpSign,
                b'0'..=b'9' => Js::ExpDigits,
                _ => return Step::Fail,
            };
            Step::Take
        }
        Js::ExpSign => {
            if b.is_ascii_digit() {
                *st = Js::ExpDigits;
                Step::Take
            } else {
                Step::Fail
            }
        }
        Js::ExpDigits => {
            if b.is_ascii_digit() {
                Step::Take
            } else {
                end_number(st, stack)
            }
        }
        Js::Literal { word, at } => {
            if word.get(at) != Some(&b) {
                return Step::Fail;
            }
            *st = if at + 1 == word.len() { after_value(stack) } else { Js::Literal { word, at: at + 1 } };
            Step::Take
        }
        Js::Done => Step::Fail,
    }
}

/// Scans `s` from its start as one JSON value (RFC 8259 syntax, leading whitespace
/// allowed): where it ends, or that `s` is a prefix of one, or the first byte that
/// cannot belong to one. A top-level number is only complete once a byte after it is
/// seen.
fn scan_json(s: &str) -> JsonScan {
    let bytes = s.as_bytes();
    let mut st = Js::Value;
    let mut stack: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match js_step(&mut st, &mut stack, bytes[i]) {
            Step::Take => i += 1,
            Step::Again => {}
            Step::Fail => return JsonScan::Invalid(i),
        }
        if st == Js::Done {
            return JsonScan::Complete(i);
        }
    }
    JsonScan::Prefix
}

/// Whether `s` is a prefix of some JSON value (a whole value, then whitespace, counts).
fn is_json_prefix(s: &str) -> bool {
    match scan_json(s) {
        JsonScan::Prefix => true,
        JsonScan::Complete(end) => {
            s[end..].trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\r')).is_empty()
        }
        JsonScan::Invalid(_) => false,
    }
}

// ---------------------------------------------------------------------------------------
// JSON-argument families
// ---------------------------------------------------------------------------------------

/// Llama 3.1 / 3.2 (JSON-based tool calling, model card): the model writes
/// `{"name": "NAME", "parameters": {…}}`. Any such object in the text is a call; the rest
/// is content. Only `parameters` is accepted (the model card's key; vLLM also accepts
/// `arguments`, which Llama is not shown to write).
fn llama(r: &mut Reader<'_>) -> Result<(), Stop> {
    while r.free_text("{\"name\"")? {
        let at = r.pos;
        let obj = r.json_object("a Llama call object")?;
        let call = envelope(obj, at, "parameters", &[], "a Llama call")?;
        r.calls.push(call);
    }
    Ok(())
}

/// Hermes 2 Pro / 3, Qwen 3 and EXAONE 4:
/// `<tool_call>\n{"name": "NAME", "arguments": {…}}\n</tool_call>` (EXAONE writes no
/// newlines; whitespace around the object is free), any number of blocks in free text.
fn tagged_json_calls(r: &mut Reader<'_>) -> Result<(), Stop> {
    while r.free_text("<tool_call>")? {
        r.expect("<tool_call>", "a <tool_call> block")?;
        r.skip_ws();
        let at = r.pos;
        let obj = r.json_object("the <tool_call> object")?;
        let call = envelope(obj, at, "arguments", &[], "a <tool_call> object")?;
        r.skip_ws();
        r.expect("</tool_call>", "a <tool_call> block")?;
        r.calls.push(call);
    }
    Ok(())
}

/// Mistral (tokenizer v3: 7B Instruct v0.3, Nemo): text, then `[TOOL_CALLS]` and one JSON
/// array of `{"name": "NAME", "arguments": {…}}` objects (an `id` member allowed, as the
/// v3 template writes one when replaying history), which ends the message. A space after
/// `[TOOL_CALLS]` is allowed (SentencePiece-based v3 tokenizers decode one).
fn mistral(r: &mut Reader<'_>) -> Result<(), Stop> {
    if !r.free_text("[TOOL_CALLS]")? {
        return Ok(());
    }
    r.expect("[TOOL_CALLS]", "[TOOL_CALLS]")?;
    r.skip_ws();
    r.expect("[", "the calls array")?;
    r.skip_ws();
    if r.looking_at("]") {
        return Err(r.bad("an empty [TOOL_CALLS] array"));
    }
    loop {
        r.skip_ws();
        let at = r.pos;
        let obj = r.json_object("a call object")?;
        let call = envelope(obj, at, "arguments", &["id"], "a Mistral call")?;
        r.calls.push(call);
        r.skip_ws();
        if r.eat("]", "the calls array")? {
            break;
        }
        r.expect(",", "`,` or `]` in the calls array")?;
    }
    r.nothing_after("the [TOOL_CALLS] array, which ends the message")
}

/// Kimi K2 / K2.5 (`docs/tool_call_guidance.md`): sections
/// `<|tool_calls_section_begin|>` … `<|tool_calls_section_end|>` in free text, each
/// holding calls `<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{…}<|tool_call_end|>`.
fn kimi_k2(r: &mut Reader<'_>) -> Result<(), Stop> {
    let (open, close) = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>");
    blocks(r, open, close, "tool-calls section", "call", |r, _| {
        r.expect("<|tool_call_begin|>", "a call or the section's end")?;
        r.skip_ws();
        r.expect("functions.", "a call id `functions.NAME:INDEX`")?;
        let name = r.run_of(name_char, "a function name")?;
        r.expect(":", "a call id `functions.NAME:INDEX`")?;
        r.digits("the call's index")?;
        r.expect("<|tool_call_argument_begin|>", "a call")?;
        let args = r.json_arguments("<|tool_call_end|>", "a call")?;
        r.push_call(name, args);
        Ok(())
    })
}

const DS_CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const DS_CALLS_END: &str = "<｜tool▁calls▁end｜>";
const DS_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const DS_CALL_END: &str = "<｜tool▁call▁end｜>";
const DS_SEP: &str = "<｜tool▁sep｜>";

/// DeepSeek R1 (chat template): `<｜tool▁calls▁begin｜>` then calls
/// `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>`
/// joined by `\n`, then `<｜tool▁calls▁end｜>`.
fn deepseek_r1(r: &mut Reader<'_>) -> Result<(), Stop> {
    deepseek_sections(r, |r| {
        r.expect(DS_CALL_BEGIN, "a call or the section's end")?;
        r.expect("function", "the call type `function`")?;
        r.expect(DS_SEP, "a call")?;
        let name = r.run_of(name_char, "a function name")?;
        r.expect("\n", "a newline after the function name")?;
        r.expect("```json", "the arguments' ```json fence")?;
        let args = r.json_arguments("```", "the arguments' closing fence")?;
        r.skip_ws();
        r.expect(DS_CALL_END, "a call")?;
        r.push_call(name, args);
        Ok(())
    })
}

/// DeepSeek V3.1 (chat template): `<｜tool▁calls▁begin｜>` then calls
/// `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>`, then `<｜tool▁calls▁end｜>`.
fn deepseek_v3_1(r: &mut Reader<'_>) -> Result<(), Stop> {
    deepseek_sections(r, |r| {
        r.expect(DS_CALL_BEGIN, "a call or the section's end")?;
        let name = r.run_of(name_char, "a function name")?;
        r.expect(DS_SEP, "a call")?;
        let args = r.json_arguments(DS_CALL_END, "a call")?;
        r.push_call(name, args);
        Ok(())
    })
}

/// DeepSeek R1 / V3.1 sections in free text, each read by `call` one call at a time.
fn deepseek_sections<'a>(
    r: &mut Reader<'a>,
    call: impl Fn(&mut Reader<'a>) -> Result<(), Stop>,
) -> Result<(), Stop> {
    blocks(r, DS_CALLS_BEGIN, DS_CALLS_END, "tool-calls section", "call", |r, _| call(r))
}

/// Harmony (gpt-oss; OpenAI's harmony cookbook and the gpt-oss chat template). The prompt
/// ends with `<|start|>assistant`; the output is messages
/// `[ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ [<|constrain|>]TYPE]<|message|>BODY END`
/// joined by `<|start|>assistant`. `analysis` is reasoning; `final` (and `commentary`
/// without a recipient, a preamble) is content; a message to `functions.NAME` (or a
/// builtin recipient) is a call whose body is a JSON object, ended by `<|call|>`.
///
/// Accepted beyond the published examples, for what grammask's preset writes: a call
/// followed by more messages (parallel calls; the published flow stops at `<|call|>`),
/// and `<|constrain|>` with no space before it. Text after `<|return|>`, which ends the
/// answer, is refused (grammask's tag would allow another message there).
fn harmony(r: &mut Reader<'_>) -> Result<(), Stop> {
    const ENDS: &[&str] = &["<|end|>", "<|return|>", "<|call|>"];
    if r.at_end() {
        return Ok(());
    }
    loop {
        let message_at = r.pos;
        let mut recipient: Option<&str> = None;
        if r.eat(" to=", "a recipient")? {
            recipient = Some(r.run_of(name_char, "a recipient")?);
        }
        r.expect("<|channel|>", "a message's channel")?;
        let channel = r.run_of(word_char, "a channel name")?;
        if !matches!(channel, "analysis" | "commentary" | "final") {
            return Err(Stop::Bad(format!("byte {message_at}: unknown channel {channel:?}")));
        }
        loop {
            if r.at_end() {
                return Err(r.cut("a message header"));
            }
            if r.eat("<|message|>", "a message header")? {
                break;
            }
            if r.eat(" ", "a message header")? {
                continue;
            }
            if r.eat("to=", "a recipient")? {
                if recipient.is_some() {
                    return Err(r.bad("a second recipient in one message header"));
                }
                recipient = Some(r.run_of(name_char, "a recipient")?);
            } else if r.eat("<|constrain|>", "a content type")? {
                r.run_of(word_char, "a content type")?;
            } else {
                r.run_of(word_char, "a content type, a recipient or <|message|>")?;
            }
        }
        match recipient {
            Some(to) => {
                let args = r.json_arguments("<|call|>", "the call's end <|call|>")?;
                r.push_call(to.strip_prefix("functions.").unwrap_or(to), args);
            }
            None => {
                let (body, end) = r.until_any(ENDS, "a message")?;
                if end == "<|call|>" {
                    return Err(Stop::Bad(format!(
                        "byte {message_at}: a message with no recipient ends with <|call|>"
                    )));
                }
                if channel != "analysis" {
                    if !r.content.is_empty() {
                        r.content.push('\n');
                    }
                    r.content.push_str(body);
                }
                if end == "<|return|>" {
                    return r.nothing_after("<|return|>");
                }
            }
        }
        if r.at_end() {
            return Ok(());
        }
        r.expect("<|start|>assistant", "the next message's <|start|>assistant")?;
    }
}

/// Gemma 4 (prompt-formatting docs, vLLM `gemma4`): `<|tool_call>call:NAME{ARGS}<tool_call|>`
/// in free text, ARGS in Gemma's own syntax: bare keys, strings between `<|"|>` markers,
/// JSON numbers / `true` / `false` / `null`, nested `{…}` and `[…]`.
///
/// Differs from grammask: grammask's `gemma_4` preset (XGrammar's builder) constrains the
/// arguments as plain JSON (`{"city": "Lyon"}`), which is not this syntax, so its outputs
/// are refused here with a message saying so.
fn gemma4(r: &mut Reader<'_>) -> Result<(), Stop> {
    while r.free_text("<|tool_call>")? {
        r.expect("<|tool_call>", "a <|tool_call> block")?;
        r.expect("call:", "`call:NAME{…}`")?;
        let name = r.run_of(name_char, "a function name")?;
        let args = gemma_object(r, 0)?;
        r.expect("<tool_call|>", "the call's end <tool_call|>")?;
        r.push_call(name, args);
    }
    Ok(())
}

const GEMMA_QUOTE: &str = "<|\"|>";

fn gemma_value(r: &mut Reader<'_>, depth: usize) -> Result<Value, Stop> {
    r.check_depth(depth)?;
    r.skip_ws();
    if r.eat(GEMMA_QUOTE, "a <|\"|> string")? {
        return Ok(Value::String(r.take_until(GEMMA_QUOTE, "a <|\"|> string")?.to_string()));
    }
    let Some(first) = r.rest().bytes().next() else {
        return Err(r.cut("a value"));
    };
    match first {
        b'{' => gemma_object(r, depth + 1),
        b'[' => gemma_array(r, depth + 1),
        b't' => r.expect("true", "`true`").map(|()| Value::Bool(true)),
        b'f' => r.expect("false", "`false`").map(|()| Value::Bool(false)),
        b'n' => r.expect("null", "`null`").map(|()| Value::Null),
        b'-' | b'0'..=b'9' => gemma_number(r),
        b'"' => Err(r.bad("a JSON \"-quoted string: Gemma 4 quotes strings with <|\"|>")),
        _ => Err(r.bad(format!("expected a value, found {}", snippet(r.rest())))),
    }
}

fn gemma_number(r: &mut Reader<'_>) -> Result<Value, Stop> {
    let rest = r.rest();
    let n = rest
        .bytes()
        .take_while(|&b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
        .count();
    let text = &rest[..n];
    if n == rest.len() {
        // The number may go on.
        return Err(if is_json_prefix(text) { r.cut("a number") } else { r.bad("an invalid number") });
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Number(_)) => {
            r.pos += n;
            Ok(v)
        }
        _ => Err(r.bad(format!("an invalid number {text:?}"))),
    }
}

fn gemma_object(r: &mut Reader<'_>, depth: usize) -> Result<Value, Stop> {
    let mut map = Map::new();
    gemma_list(r, "{", "}", |r| {
        r.skip_ws();
        let at = r.pos;
        let key = if r.eat(GEMMA_QUOTE, "a key")? {
            r.take_until(GEMMA_QUOTE, "a key")?
        } else if r.looking_at("\"") {
            return Err(r.bad("a JSON \"-quoted key: Gemma 4 writes keys bare"));
        } else {
            r.run_of(gemma_key_char, "a key")?
        };
        r.skip_ws();
        r.expect(":", "`:` after a key")?;
        let value = gemma_value(r, depth)?;
        insert_arg(&mut map, key, value, at)
    })?;
    Ok(Value::Object(map))
}

fn gemma_array(r: &mut Reader<'_>, depth: usize) -> Result<Value, Stop> {
    let mut items = Vec::new();
    gemma_list(r, "[", "]", |r| {
        items.push(gemma_value(r, depth)?);
        Ok(())
    })?;
    Ok(Value::Array(items))
}

/// `open`, then items read by `item` joined by `,`, then `close` (Gemma's `{…}` and
/// `[…]`; whitespace around the items is free).
fn gemma_list<'a>(
    r: &mut Reader<'a>,
    open: &str,
    close: &str,
    mut item: impl FnMut(&mut Reader<'a>) -> Result<(), Stop>,
) -> Result<(), Stop> {
    let close_what = format!("`{close}`");
    r.expect(open, &format!("`{open}`"))?;
    r.skip_ws();
    if r.eat(close, &close_what)? {
        return Ok(());
    }
    loop {
        item(&mut *r)?;
        r.skip_ws();
        if r.eat(close, &close_what)? {
            return Ok(());
        }
        r.expect(",", &format!("`,` or {close_what}"))?;
    }
}

// ---------------------------------------------------------------------------------------
// XML-argument families
// ---------------------------------------------------------------------------------------

/// Qwen 3 Coder and Qwen 3.5 (chat templates), MiMo (vLLM `mimov2_flash`):
/// `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n…</function>\n</tool_call>`.
/// Whitespace between the tags is free (MiMo writes none); one newline around a value is
/// the template's, not the value's. Values carry no type (see [`untyped_scalar`]).
fn qwen_xml_calls(r: &mut Reader<'_>) -> Result<(), Stop> {
    while r.free_text("<tool_call>")? {
        r.expect("<tool_call>", "a <tool_call> block")?;
        r.skip_ws();
        let name = r.function_tag(("<function=", "a <function=NAME> tag"), (">", "a <function=NAME> tag"))?;
        let args = r.arg_list("</function>", "</function>", |r, _| {
            let tag = ("<parameter=", "a <parameter=KEY> tag or </function>");
            let (key, body) = r.parameter(tag, (">", "a <parameter=KEY> tag"))?;
            Ok((key, untyped_scalar(strip_newlines(body), r.arg_schema(name, key))))
        })?;
        r.skip_ws();
        r.expect("</tool_call>", "a <tool_call> block")?;
        r.push_call(name, Value::Object(args));
    }
    Ok(())
}

/// GLM 4.7 / GLM 5 (chat template):
/// `<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>…</tool_call>`
/// (GLM 4.5 put newlines between them; whitespace there is free). Values carry no type.
fn glm(r: &mut Reader<'_>) -> Result<(), Stop> {
    while r.free_text("<tool_call>")? {
        r.expect("<tool_call>", "a <tool_call> block")?;
        r.skip_ws();
        let name = r.run_of(name_char, "a function name")?;
        let args = r.arg_list("</tool_call>", "</tool_call>", |r, at| {
            r.expect("<arg_key>", "<arg_key> or </tool_call>")?;
            let key = r.take_until("</arg_key>", "an argument name")?;
            if key.is_empty() || key.contains(['<', '>']) {
                return Err(Stop::Bad(format!("byte {at}: an invalid argument name {key:?}")));
            }
            r.skip_ws();
            r.expect("<arg_value>", "<arg_value>")?;
            let body = r.take_until("</arg_value>", "an argument value")?;
            Ok((key, untyped_scalar(body, r.arg_schema(name, key))))
        })?;
        r.push_call(name, Value::Object(args));
    }
    Ok(())
}

/// MiniMax M2 / M2.5 (function-call guide):
/// `<minimax:tool_call>\n<invoke name="NAME">\n<parameter name="KEY">VALUE</parameter>\n</invoke>\n…</minimax:tool_call>`.
/// Values carry no type.
fn minimax_m2(r: &mut Reader<'_>) -> Result<(), Stop> {
    let (open, close) = ("<minimax:tool_call>", "</minimax:tool_call>");
    blocks(r, open, close, "<minimax:tool_call> block", "call", |r, _| {
        let tag = ("<invoke name=\"", "an <invoke> or </minimax:tool_call>");
        let name = r.function_tag(tag, ("\">", "an <invoke name=\"…\"> tag"))?;
        let args = r.arg_list("</invoke>", "</invoke>", |r, _| {
            let tag = ("<parameter name=\"", "a <parameter> or </invoke>");
            let (key, body) = r.parameter(tag, ("\">", "a <parameter name=\"…\"> tag"))?;
            Ok((key, untyped_scalar(body, r.arg_schema(name, key))))
        })?;
        r.push_call(name, Value::Object(args));
        Ok(())
    })
}

/// The DSML tag names of one DeepSeek generation.
struct Dsml {
    calls: &'static str,
    invoke: &'static str,
    parameter: &'static str,
}

/// DeepSeek V3.2: `<｜DSML｜function_calls>`.
const DSML_V3_2: Dsml = Dsml { calls: "function_calls", invoke: "invoke", parameter: "parameter" };
/// DeepSeek V4: `<｜DSML｜tool_calls>`, the V3.2 invoke/parameter grammar.
const DSML_V4: Dsml = Dsml { calls: "tool_calls", invoke: "invoke", parameter: "parameter" };
/// DeepSeek V4.1: every tag name with a leading space (`<｜DSML｜ calls>`).
const DSML_V4_1: Dsml = Dsml { calls: " calls", invoke: " invoke", parameter: " parameter" };

/// DeepSeek V3.2 / V4 / V4.1 DSML:
/// `<｜DSML｜CALLS>\n<｜DSML｜INVOKE name="NAME">\n<｜DSML｜PARAMETER name="KEY" string="true|false">VALUE</｜DSML｜PARAMETER>\n…</｜DSML｜INVOKE>\n</｜DSML｜CALLS>`.
/// `string="true"`: the value is raw text; `string="false"`: it is JSON.
///
/// Differs from XGrammar's `deepseek_xml` style (which grammask's V3.2 / V4 presets name):
/// that style does not tie the `string` attribute to the value's type, so a preset output
/// may carry `string="false"` around a raw string, which this reader refuses.
fn dsml(r: &mut Reader<'_>, names: &Dsml) -> Result<(), Stop> {
    let open = format!("<｜DSML｜{}>", names.calls);
    let close = format!("</｜DSML｜{}>", names.calls);
    let invoke_open = format!("<｜DSML｜{} name=\"", names.invoke);
    let invoke_close = format!("</｜DSML｜{}>", names.invoke);
    let param_open = format!("<｜DSML｜{} name=\"", names.parameter);
    let param_close = format!("</｜DSML｜{}>", names.parameter);
    blocks(r, &open, &close, "DSML calls block", "invoke", |r, _| {
        let name = r.function_tag(
            (invoke_open.as_str(), "an invoke or the calls block's end"),
            ("\">", "an invoke tag"),
        )?;
        let args = r.arg_list(&invoke_close, "the invoke's end", |r, _| {
            r.expect(&param_open, "a parameter or the invoke's end")?;
            let key = r.run_of(key_char, "a parameter name")?;
            r.expect("\" string=\"", "a parameter's string attribute")?;
            let is_string = if r.eat("true\">", "a parameter tag")? {
                true
            } else if r.eat("false\">", "a parameter tag")? {
                false
            } else {
                return Err(r.fail("string=\"true\" or string=\"false\""));
            };
            let body_at = r.pos;
            let value = match r.body_until(&param_close) {
                Some(body) if is_string => Value::String(body.to_string()),
                Some(body) => json_body(body, body_at, "a string=\"false\" parameter")?,
                None if is_string => return Err(r.cut("a parameter value")),
                None => return Err(r.json_tail(&param_close, "a string=\"false\" parameter")),
            };
            Ok((key, value))
        })?;
        r.push_call(name, Value::Object(args));
        Ok(())
    })
}

/// Kimi K3 (XTML; vLLM `kimi_k3`): the prompt opens the first block, so the output is
/// `[<|open|>think<|sep|>]REASONING<|close|>think<|sep|><|open|>response<|sep|>TEXT<|close|>response<|sep|>`
/// (or, without reasoning, `[<|open|>response<|sep|>]TEXT<|close|>response<|sep|>`), then
/// optionally `<|open|>tools<|sep|>` calls `<|close|>tools<|sep|>`, then
/// `<|close|>message<|sep|>`. A call is `<|open|>call tool="NAME" index="N"<|sep|>ARGS<|close|>call<|sep|>`,
/// each argument `<|open|>argument key="KEY" type="TYPE"<|sep|>VALUE<|close|>argument<|sep|>`:
/// `type="string"` raw text, other types JSON of that type. Attribute values are
/// XML-escaped (`&quot;`, `&amp;`).
fn kimi_k3(r: &mut Reader<'_>) -> Result<(), Stop> {
    const THINK_OPEN: &str = "<|open|>think<|sep|>";
    const THINK_CLOSE: &str = "<|close|>think<|sep|>";
    const RESPONSE_OPEN: &str = "<|open|>response<|sep|>";
    const RESPONSE_CLOSE: &str = "<|close|>response<|sep|>";
    const TOOLS_OPEN: &str = "<|open|>tools<|sep|>";
    const TOOLS_CLOSE: &str = "<|close|>tools<|sep|>";
    const CALL_CLOSE: &str = "<|close|>call<|sep|>";
    const ARG_CLOSE: &str = "<|close|>argument<|sep|>";
    const MESSAGE_CLOSE: &str = "<|close|>message<|sep|>";
    let has_marker = |s: &str| s.contains("<|open|>") || s.contains("<|close|>");

    let explicit_think = r.eat(THINK_OPEN, "the think block")?;
    if explicit_think || r.rest().contains(THINK_CLOSE) {
        let at = r.pos;
        let reasoning = r.take_until(THINK_CLOSE, "the think block")?;
        if has_marker(reasoning) {
            return Err(Stop::Bad(format!("byte {at}: a block marker inside the think block")));
        }
        r.skip_ws();
        r.expect(RESPONSE_OPEN, "the response block")?;
    } else {
        r.eat(RESPONSE_OPEN, "the response block")?;
    }
    let response_at = r.pos;
    // A response cut off before its closing marker holds the text up to the cut.
    let (body, closed) = match r.body_until(RESPONSE_CLOSE) {
        Some(body) => (body, true),
        None => {
            let rest = r.rest();
            (&rest[..rest.len() - partial_suffix_len(rest, RESPONSE_CLOSE)], false)
        }
    };
    if has_marker(body) {
        return Err(Stop::Bad(format!("byte {response_at}: a block marker inside the response block")));
    }
    r.content.push_str(body);
    if !closed {
        return Err(r.cut("the response block"));
    }
    r.skip_ws();
    if r.eat(TOOLS_OPEN, "the tools block")? {
        let tools_at = r.pos;
        let count = r.elements(TOOLS_CLOSE, "the tools block", |r, call_at| {
            r.expect("<|open|>call ", "a call block or the tools block's end")?;
            let attrs = r.attributes("<|sep|>", "a call's attributes")?;
            let name = nonempty_attr(&attrs, "tool", call_at, "a call block without a tool name")?;
            if !attr(&attrs, "index").is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            {
                return Err(Stop::Bad(format!("byte {call_at}: a call block without a numeric index")));
            }
            let args = r.arg_list(CALL_CLOSE, "the call block", |r, at| {
                r.expect("<|open|>argument ", "an argument block or the call's end")?;
                let attrs = r.attributes("<|sep|>", "an argument's attributes")?;
                let (Some(key), Some(ty)) = (attr(&attrs, "key"), attr(&attrs, "type")) else {
                    return Err(Stop::Bad(format!("byte {at}: an argument block without key and type")));
                };
                let body_at = r.pos;
                let value = match r.body_until(ARG_CLOSE) {
                    Some(body) => kimi_k3_value(ty, body, body_at)?,
                    None if ty == "string" => return Err(r.cut("an argument value")),
                    None => return Err(r.json_tail(ARG_CLOSE, "a typed argument value")),
                };
                Ok((key.to_string(), value))
            })?;
            r.push_call(&name, Value::Object(args));
            Ok(())
        })?;
        if count == 0 {
            return Err(Stop::Bad(format!("byte {tools_at}: a tools block with no call")));
        }
        r.skip_ws();
    }
    r.expect(MESSAGE_CLOSE, "the message's end <|close|>message<|sep|>")?;
    r.nothing_after("the message's end")
}

/// A Kimi K3 argument value of declared type `ty`.
fn kimi_k3_value(ty: &str, body: &str, at: usize) -> Result<Value, Stop> {
    if ty == "string" {
        return Ok(Value::String(body.to_string()));
    }
    if !matches!(ty, "number" | "integer" | "boolean" | "null" | "object" | "array") {
        return Err(Stop::Bad(format!("byte {at}: unknown argument type {ty:?}")));
    }
    let value = json_body(body, at, "a typed argument value")?;
    if has_type(&value, ty) {
        Ok(value)
    } else {
        Err(Stop::Bad(format!("byte {at}: the value {value} is not of its declared type {ty:?}")))
    }
}

const M3_NS: &str = "]<]minimax[>[";

/// MiniMax M3 (vLLM's `M3TextParser`): every tag prefixed with the namespace marker
/// `]<]minimax[>[`; one block `NS<tool_call>\n` holding calls
/// `NS<invoke name="NAME">` arguments `NS</invoke>\n`, then `NS</tool_call>`, which ends
/// the message. An argument is `NS<KEY>VALUE NS</KEY>`; a value holding elements is an
/// object, or an array of `NS<item>` elements; a scalar carries no type. Reasoning is
/// `<mm:think>…</mm:think>`.
///
/// Stricter than grammask's preset, as the published parser is: a second block, or text
/// after the block, is refused (grammask's tag would allow both).
fn minimax_m3(r: &mut Reader<'_>) -> Result<(), Stop> {
    let open = format!("{M3_NS}<tool_call>");
    let close = format!("{M3_NS}</tool_call>");
    let invoke_open = format!("{M3_NS}<invoke name=\"");
    let invoke_close = format!("{M3_NS}</invoke>");
    if !r.free_text(&open)? {
        return Ok(());
    }
    block(r, &open, &close, "tool-call block", "invoke", |r, _| {
        let name =
            r.function_tag((invoke_open.as_str(), "an invoke or the block's end"), ("\">", "an invoke tag"))?;
        let schema = r.tool_schema(name);
        let args = object_of(m3_members(r, schema, &invoke_close, 0)?)?;
        r.push_call(name, Value::Object(args));
        Ok(())
    })?;
    r.nothing_after("the tool-call block (MiniMax M3 writes one block, which ends the message)")
}

/// Elements `NS<KEY>…NS</KEY>` up to `close` (consumed), with their offsets. `schema` is
/// the schema of the value they make up.
fn m3_members<'a>(
    r: &mut Reader<'a>,
    schema: Option<&'a Value>,
    close: &str,
    depth: usize,
) -> Result<Vec<(&'a str, Value, usize)>, Stop> {
    let in_array =
        schema.and_then(schema_types).is_some_and(|t| t.contains(&"array") && !t.contains(&"object"));
    let open = format!("{M3_NS}<");
    let mut out = Vec::new();
    r.elements(close, "an element's end", |r, at| {
        r.expect(&open, "an element or the enclosing element's end")?;
        if r.looking_at("/") {
            return Err(Stop::Bad(format!("byte {at}: a closing tag that closes no open element")));
        }
        let key = r.run_of(key_char, "an element name")?;
        r.expect(">", "an element tag")?;
        let child = if in_array { items_schema(schema) } else { member_schema(schema, key) };
        let value = m3_value(r, key, child, depth + 1)?;
        out.push((key, value, at));
        Ok(())
    })?;
    Ok(out)
}

/// The value of element `key` (its opening tag read), up to and including its closing
/// tag.
fn m3_value<'a>(
    r: &mut Reader<'a>,
    key: &str,
    schema: Option<&'a Value>,
    depth: usize,
) -> Result<Value, Stop> {
    r.check_depth(depth)?;
    let close = format!("{M3_NS}</{key}>");
    let open_child = format!("{M3_NS}<");
    let start = r.pos;
    r.skip_ws();
    if r.looking_at(&open_child) && !r.looking_at(&close[..open_child.len() + 1]) {
        let members = m3_members(r, schema, &close, depth)?;
        let as_array = match schema.and_then(schema_types) {
            Some(t) if t.contains(&"array") && !t.contains(&"object") => true,
            Some(t) if t.contains(&"object") => false,
            _ => members.iter().all(|(k, _, _)| *k == "item"),
        };
        if as_array {
            return Ok(Value::Array(members.into_iter().map(|(_, v, _)| v).collect()));
        }
        return Ok(Value::Object(object_of(members)?));
    }
    // A scalar: text up to the next namespace marker, which must close this element.
    r.pos = start;
    let rest = r.rest();
    let Some(i) = rest.find(M3_NS) else {
        return Err(r.cut("an argument value"));
    };
    let body = &rest[..i];
    r.pos += i;
    r.expect(&close, "the element's closing tag")?;
    Ok(if body.is_empty() { empty_value(schema) } else { untyped_scalar(body, schema) })
}

/// Cohere Command (the `cofl` nested-xml template, read by Cohere's `melody`):
/// `<cofl:tool_calls><cofl:tool_call id="ID" name="NAME">VALUES</cofl:tool_call>…</cofl:tool_calls>`,
/// each argument `<cofl:value name="KEY" type="raw|json|dict|list">…</cofl:value>`: `raw`
/// text, `json` JSON, `dict` named values, `list` unnamed values. Reasoning is
/// `<|START_THINKING|>…<|END_THINKING|>`. Raw text is taken as written (no XML entity
/// decoding, as grammask's grammar writes none).
fn cohere(r: &mut Reader<'_>) -> Result<(), Stop> {
    let (open, close) = ("<cofl:tool_calls>", "</cofl:tool_calls>");
    blocks(r, open, close, "<cofl:tool_calls> block", "call", |r, call_at| {
        r.expect("<cofl:tool_call ", "a <cofl:tool_call> or </cofl:tool_calls>")?;
        let attrs = r.attributes(">", "a call's attributes")?;
        let name = nonempty_attr(&attrs, "name", call_at, "a <cofl:tool_call> without a name")?;
        if attr(&attrs, "id").is_none() {
            return Err(Stop::Bad(format!("byte {call_at}: a <cofl:tool_call> without an id")));
        }
        let args = cohere_object(r, "</cofl:tool_call>", 0)?;
        r.push_call(&name, Value::Object(args));
        Ok(())
    })
}

/// Named `<cofl:value>` elements up to `close` (consumed) as an object: a call's
/// arguments or a `dict`.
fn cohere_object(r: &mut Reader<'_>, close: &str, depth: usize) -> Result<Map<String, Value>, Stop> {
    let members = cohere_values(r, true, close, depth)?;
    object_of(members.into_iter().map(|(key, value, at)| (key.unwrap_or_default(), value, at)))
}

/// `<cofl:value>` elements up to `close` (consumed): named ones (`named`: a call's
/// arguments or a `dict`) or unnamed ones (a `list`).
fn cohere_values(
    r: &mut Reader<'_>,
    named: bool,
    close: &str,
    depth: usize,
) -> Result<Vec<(Option<String>, Value, usize)>, Stop> {
    const VALUE_CLOSE: &str = "</cofl:value>";
    r.check_depth(depth)?;
    let mut out = Vec::new();
    r.elements(close, "an element's end", |r, at| {
        r.expect("<cofl:value ", "a <cofl:value> element or the enclosing element's end")?;
        let attrs = r.attributes(">", "a value's attributes")?;
        let key = attr(&attrs, "name").map(str::to_string);
        if named && key.as_deref().unwrap_or_default().is_empty() {
            return Err(Stop::Bad(format!("byte {at}: a named <cofl:value> without a name")));
        }
        let ty = attr(&attrs, "type").unwrap_or("raw").to_string();
        let body_at = r.pos;
        let value = match ty.as_str() {
            "raw" => Value::String(r.take_until(VALUE_CLOSE, "a raw value")?.to_string()),
            "json" => match r.body_until(VALUE_CLOSE) {
                Some(body) => json_body(body, body_at, "a json value")?,
                None => return Err(r.json_tail(VALUE_CLOSE, "a json value")),
            },
            "dict" => Value::Object(cohere_object(r, VALUE_CLOSE, depth + 1)?),
            "list" => {
                let items = cohere_values(r, false, VALUE_CLOSE, depth + 1)?;
                Value::Array(items.into_iter().map(|(_, v, _)| v).collect())
            }
            other => return Err(Stop::Bad(format!("byte {at}: unknown value type {other:?}"))),
        };
        out.push((key, value, at));
        Ok(())
    })?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(family: Family, text: &str) -> ReadOutput {
        let out = read(family, text, true).unwrap_or_else(|e| panic!("{}: {e}\n{text}", family.name()));
        assert!(!out.unfinished);
        out
    }

    fn cut(family: Family, text: &str) -> ReadOutput {
        let out =
            read(family, text, false).unwrap_or_else(|e| panic!("{} (cut off): {e}\n{text}", family.name()));
        assert!(out.unfinished, "{}: expected an unfinished output: {out:?}", family.name());
        out
    }

    fn bad(family: Family, text: &str, complete: bool) -> String {
        match read(family, text, complete) {
            Ok(out) => panic!("{}: accepted {text:?} as {out:?}", family.name()),
            Err(e) => e,
        }
    }

    fn weather() -> Value {
        json!({"city": "Lyon"})
    }

    fn convert() -> Value {
        json!({"amount": 20, "from": "EUR", "to": "USD"})
    }

    /// The two calls every well-formed test output holds.
    fn assert_two(out: &ReadOutput) {
        let calls: Vec<(&str, &Value)> = out.calls.iter().map(|c| (c.name.as_str(), &c.arguments)).collect();
        assert_eq!(calls, vec![("get_weather", &weather()), ("convert_currency", &convert())], "{out:?}");
    }

    /// A complete output holding the two test calls, with `content` beside them.
    fn ok_two(family: Family, text: &str, content: &str) {
        let out = ok(family, text);
        assert_two(&out);
        assert_eq!(out.content, content);
    }

    /// A family's usual checks: `text` holds the two test calls beside "Checking.", each
    /// of `broken` is refused as a complete output, and `cut_off`, cut off, closed the
    /// first call.
    fn check(family: Family, text: &str, broken: &[&str], cut_off: &str) {
        ok_two(family, text, "Checking.");
        for b in broken {
            bad(family, b, true);
        }
        assert_first(&cut(family, cut_off));
    }

    /// The one call every cut-off test output closed.
    fn assert_first(out: &ReadOutput) {
        assert_eq!(out.calls.len(), 1, "{out:?}");
        assert_eq!(out.calls[0].name, "get_weather");
        assert_eq!(out.calls[0].arguments, weather());
    }

    #[test]
    fn every_family_has_a_reader() {
        for family in Family::ALL {
            let out = read(family, "", false);
            assert!(out.is_ok(), "{}: {out:?}", family.name());
        }
    }

    #[test]
    fn json_prefixes() {
        for s in
            ["", "{", "{\"a\"", "{\"a\": [1, 2.5e", "{\"a\": tr", "[{\"b\": \"x\\u00", "-", "  {\"a\": {}} "]
        {
            assert!(is_json_prefix(s), "{s:?}");
        }
        for s in
            ["}", "{a", "{\"a\" 1", "{\"a\": 01", "[1,]", "{\"a\": tx", "\"\u{1}\"", "{} {", "1.e", "[1 2]"]
        {
            assert!(!is_json_prefix(s), "{s:?}");
        }
        assert_eq!(scan_json("{\"a\": [1, {\"b\": null}]}<x>"), JsonScan::Complete(23));
        assert_eq!(scan_json("{\"a\": 1<"), JsonScan::Invalid(7));
        assert_eq!(scan_json("12 "), JsonScan::Complete(2));
        assert_eq!(scan_json("12"), JsonScan::Prefix);
    }

    #[test]
    fn llama() {
        let f = Family::Llama;
        let out = ok(
            f,
            r#"Sure. {"name": "get_weather", "parameters": {"city": "Lyon"}} then {"name": "convert_currency", "parameters": {"amount": 20, "from": "EUR", "to": "USD"}} done"#,
        );
        assert_two(&out);
        assert!(out.content.starts_with("Sure.") && out.content.ends_with("done"), "{:?}", out.content);
        bad(f, r#"{"name": "get_weather", "arguments": {"city": "Lyon"}}"#, true);
        bad(f, r#"{"name": "get_weather", "parameters": {"city": "Lyon"}"#, true);
        let out = cut(
            f,
            r#"{"name": "get_weather", "parameters": {"city": "Lyon"}} {"name": "convert_currency", "parameters": {"amount": 2"#,
        );
        assert_first(&out);
        cut(f, r#"{"name": "get_weather", "parameters": {"city": "Lyon"}} {"na"#);
        bad(f, r#"{"name": "get_weather", "parameters": {"city": Lyon"#, false);
    }

    #[test]
    fn hermes_qwen3_exaone() {
        let two = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"convert_currency\", \"arguments\": {\"amount\": 20, \"from\": \"EUR\", \"to\": \"USD\"}}\n</tool_call>";
        ok_two(Family::Hermes, &format!("Let me check.\n{two}"), "Let me check.");
        ok_two(
            Family::Qwen3,
            &format!("I should call both.</think>\n\nLet me check.\n{two}"),
            "Let me check.",
        );
        ok_two(Family::Qwen3, &format!("<think>\nhmm\n</think>\n\n{two}"), "");
        let exaone = "<think>\nok\n</think>\n\nSure<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}</tool_call><tool_call>{\"name\": \"convert_currency\", \"arguments\": {\"amount\": 20, \"from\": \"EUR\", \"to\": \"USD\"}}</tool_call>";
        assert_two(&ok(Family::Exaone, exaone));

        for f in [Family::Hermes, Family::Qwen3, Family::Exaone] {
            bad(f, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{}\"}\n</tool_call>", true);
            bad(f, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_cal", true);
            let think = if f == Family::Hermes { "" } else { "plan</think>" };
            bad(
                f,
                &format!(
                    "{think}<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{}}}}\n<tool_call>"
                ),
                false,
            );
            let out = cut(f, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}</tool_call>\n<tool_call>\n{\"name\": \"conv");
            assert_first(&out);
        }
        // An unclosed reasoning block.
        bad(Family::Qwen3, "<think>\nstill thinking", true);
        assert!(cut(Family::Qwen3, "<think>\nstill thinking").calls.is_empty());
    }

    #[test]
    fn qwen_xml() {
        let two = "<tool_call>\n<function=get_weather>\n<parameter=city>\nLyon\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=convert_currency>\n<parameter=amount>\n20\n</parameter>\n<parameter=from>\nEUR\n</parameter>\n<parameter=to>\nUSD\n</parameter>\n</function>\n</tool_call>";
        for f in [Family::Qwen3Coder, Family::Qwen3_5] {
            ok_two(f, &format!("reasoning</think>\n\nChecking.\n{two}"), "Checking.");
            bad(
                f,
                "<tool_call>\n<function=get_weather>\n<parameter=city>\nLyon\n</function>\n</tool_call>",
                true,
            );
            bad(f, "plan</think><tool_call>\n<function=get_weather>\n<param=city>Lyon</param>\n</function>\n</tool_call>", false);
            let out = cut(f, &two[..two.len() - 40]);
            assert_first(&out);
        }
        let mimo = "Checking.<tool_call><function=get_weather><parameter=city>Lyon</parameter></function></tool_call><tool_call><function=convert_currency><parameter=amount>20</parameter><parameter=from>EUR</parameter><parameter=to>USD</parameter></function></tool_call>";
        ok_two(Family::Mimo, mimo, "Checking.");
        bad(
            Family::Mimo,
            "<tool_call><function=get_weather><parameter=city>Lyon</parameter></tool_call>",
            true,
        );
        assert_first(&cut(Family::Mimo, "<tool_call><function=get_weather><parameter=city>Lyon</parameter></function></tool_call><tool_call><function=conv"));
    }

    #[test]
    fn untyped_values_follow_the_schema_when_given() {
        let text = "<tool_call>\n<function=get_weather>\n<parameter=city>\n12\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
        let plain = read(Family::Qwen3Coder, text, true).unwrap();
        assert_eq!(plain.calls[0].arguments, json!({"city": 12, "days": 3}));
        let tools = [json!({"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}})];
        let typed = read_with_tools(Family::Qwen3Coder, text, true, &tools).unwrap();
        assert_eq!(typed.calls[0].arguments, json!({"city": "12", "days": 3}));
    }

    #[test]
    fn glm() {
        let text = "thinking</think>Checking.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Lyon</arg_value></tool_call><tool_call>convert_currency<arg_key>amount</arg_key><arg_value>20</arg_value><arg_key>from</arg_key><arg_value>EUR</arg_value><arg_key>to</arg_key><arg_value>USD</arg_value></tool_call>";
        let broken = [
            "<tool_call>get_weather<arg_key>city</arg_key>Lyon</tool_call>",
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Lyon</arg_value>",
        ];
        check(Family::Glm4_7, text, &broken, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Lyon</arg_value></tool_call><tool_call>convert_currency<arg_key>amo");
    }

    #[test]
    fn minimax() {
        let text = "thinking</think>\n\nChecking.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Lyon</parameter>\n</invoke>\n<invoke name=\"convert_currency\">\n<parameter name=\"amount\">20</parameter>\n<parameter name=\"from\">EUR</parameter>\n<parameter name=\"to\">USD</parameter>\n</invoke>\n</minimax:tool_call>";
        let broken = [
            "<minimax:tool_call>\n</minimax:tool_call>",
            "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Lyon</parameter>\n</minimax:tool_call>",
        ];
        check(Family::Minimax, text, &broken, &text[..text.len() - 60]);
    }

    #[test]
    fn minimax_m3() {
        let f = Family::MinimaxM3;
        let ns = M3_NS;
        let text = format!(
            "<mm:think>plan</mm:think>Checking.{ns}<tool_call>\n{ns}<invoke name=\"get_weather\">{ns}<city>Lyon{ns}</city>{ns}</invoke>\n{ns}<invoke name=\"convert_currency\">{ns}<amount>20{ns}</amount>{ns}<from>EUR{ns}</from>{ns}<to>USD{ns}</to>{ns}</invoke>\n{ns}</tool_call>"
        );
        ok_two(f, &text, "Checking.");
        let nested = format!(
            "{ns}<tool_call>\n{ns}<invoke name=\"f\">{ns}<filters>{ns}<tags>{ns}<item>a{ns}</item>{ns}<item>b{ns}</item>{ns}</tags>{ns}<fresh>true{ns}</fresh>{ns}</filters>{ns}</invoke>\n{ns}</tool_call>"
        );
        assert_eq!(
            ok(f, &nested).calls[0].arguments,
            json!({"filters": {"tags": ["a", "b"], "fresh": true}})
        );
        bad(
            f,
            &format!(
                "{ns}<tool_call>\n{ns}<invoke name=\"f\">{ns}<a>1{ns}</b>{ns}</invoke>\n{ns}</tool_call>"
            ),
            true,
        );
        bad(f, &format!("{text}{text}"), true);
        assert_first(&cut(f, &text[..text.len() - 50]));
    }

    #[test]
    fn kimi_k2() {
        let text = "plan</think>Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Lyon\"}<|tool_call_end|><|tool_call_begin|>functions.convert_currency:1<|tool_call_argument_begin|>{\"amount\": 20, \"from\": \"EUR\", \"to\": \"USD\"}<|tool_call_end|><|tool_calls_section_end|>";
        let broken = [
            "<|tool_calls_section_begin|><|tool_call_begin|>get_weather:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
            "<|tool_calls_section_begin|><|tool_calls_section_end|>",
        ];
        check(Family::Kimi, text, &broken, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Lyon\"}<|tool_call_end|><|tool_call_begin|>functions.convert_currency:1<|tool_call_argument_begin|>{\"amount\": 2");
    }

    #[test]
    fn kimi_k3() {
        let f = Family::KimiK3;
        let tools = "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Lyon<|close|>argument<|sep|><|close|>call<|sep|><|open|>call tool=\"convert_currency\" index=\"2\"<|sep|><|open|>argument key=\"amount\" type=\"number\"<|sep|>20<|close|>argument<|sep|><|open|>argument key=\"from\" type=\"string\"<|sep|>EUR<|close|>argument<|sep|><|open|>argument key=\"to\" type=\"string\"<|sep|>USD<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>";
        let text = format!("plan<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>{tools}<|close|>message<|sep|>");
        ok_two(f, &text, "Checking.");
        // Reasoning disabled: the output starts inside the response block.
        let out = ok(f, &format!("Checking.<|close|>response<|sep|>{tools}<|close|>message<|sep|>"));
        assert_two(&out);
        bad(f, &format!("Checking.<|close|>response<|sep|>{tools}"), true);
        bad(f, "x<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"n\" type=\"number\"<|sep|>abc<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>", true);
        let out = cut(f, &text[..text.len() - 120]);
        assert_first(&out);
    }

    fn ds_call_r1(name: &str, args: &str) -> String {
        format!("{DS_CALL_BEGIN}function{DS_SEP}{name}\n```json\n{args}\n```{DS_CALL_END}")
    }

    #[test]
    fn deepseek_r1() {
        let f = Family::DeepseekR1;
        let a = ds_call_r1("get_weather", "{\"city\": \"Lyon\"}");
        let b = ds_call_r1("convert_currency", "{\"amount\": 20, \"from\": \"EUR\", \"to\": \"USD\"}");
        ok_two(f, &format!("plan</think>\n\nChecking.{DS_CALLS_BEGIN}{a}\n{b}{DS_CALLS_END}"), "Checking.");
        bad(f, &format!("{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}get_weather\n{{\"city\": \"Lyon\"}}{DS_CALL_END}{DS_CALLS_END}"), true);
        bad(f, &format!("{DS_CALLS_BEGIN}{a}"), true);
        assert_first(&cut(f, &format!("{DS_CALLS_BEGIN}{a}\n{}", &b[..b.len() - 20])));
    }

    #[test]
    fn deepseek_v3_1() {
        let f = Family::DeepseekV3_1;
        let a = format!("{DS_CALL_BEGIN}get_weather{DS_SEP}{{\"city\": \"Lyon\"}}{DS_CALL_END}");
        let b = format!("{DS_CALL_BEGIN}convert_currency{DS_SEP}{{\"amount\": 20, \"from\": \"EUR\", \"to\": \"USD\"}}{DS_CALL_END}");
        ok_two(f, &format!("plan</think>Checking.{DS_CALLS_BEGIN}{a}{b}{DS_CALLS_END}"), "Checking.");
        bad(
            f,
            &format!("{DS_CALLS_BEGIN}{DS_CALL_BEGIN}get_weather{DS_SEP}[1]{DS_CALL_END}{DS_CALLS_END}"),
            true,
        );
        assert_first(&cut(
            f,
            &format!("{DS_CALLS_BEGIN}{a}{DS_CALL_BEGIN}convert_currency{DS_SEP}{{\"amount\""),
        ));
        bad(
            f,
            &format!("plan</think>{DS_CALLS_BEGIN}{a}{DS_CALL_BEGIN}convert_currency{DS_SEP}{{amount"),
            false,
        );
    }

    fn dsml_text(names: &Dsml) -> String {
        let (c, i, p) = (names.calls, names.invoke, names.parameter);
        format!(
            "plan</think>Checking.\n\n<｜DSML｜{c}>\n<｜DSML｜{i} name=\"get_weather\">\n<｜DSML｜{p} name=\"city\" string=\"true\">Lyon</｜DSML｜{p}>\n</｜DSML｜{i}>\n<｜DSML｜{i} name=\"convert_currency\">\n<｜DSML｜{p} name=\"amount\" string=\"false\">20</｜DSML｜{p}>\n<｜DSML｜{p} name=\"from\" string=\"true\">EUR</｜DSML｜{p}>\n<｜DSML｜{p} name=\"to\" string=\"true\">USD</｜DSML｜{p}>\n</｜DSML｜{i}>\n</｜DSML｜{c}>"
        )
    }

    #[test]
    fn dsml_families() {
        for (f, names) in [
            (Family::DeepseekV3_2, &DSML_V3_2),
            (Family::DeepseekV4, &DSML_V4),
            (Family::DeepseekV4_1, &DSML_V4_1),
        ] {
            let text = dsml_text(names);
            ok_two(f, &text, "Checking.");
            // A raw string marked as JSON.
            bad(f, &text.replace("string=\"true\">Lyon", "string=\"false\">Lyon"), true);
            // Cut inside a JSON-typed value: fine while it is a JSON prefix.
            let amount = text.find("20</").unwrap_or(0);
            let out = cut(f, &text[..amount + 1]);
            assert_first(&out);
            bad(f, &format!("{}x", &text[..amount + 1]), false);
        }
    }

    #[test]
    fn harmony() {
        let f = Family::Harmony;
        let text = "<|channel|>analysis<|message|>Need both.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Lyon\"}<|call|><|start|>assistant to=functions.convert_currency<|channel|>commentary json<|message|>{\"amount\": 20, \"from\": \"EUR\", \"to\": \"USD\"}<|call|><|start|>assistant<|channel|>final<|message|>Done.<|return|>";
        ok_two(f, text, "Done.");
        // grammask's spelling, no space before <|constrain|>.
        let out = ok(f, "<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{\"city\": \"Lyon\"}<|call|>");
        assert_first(&out);
        bad(f, "<|channel|>final<|message|>Done.<|return|><|start|>assistant<|channel|>final<|message|>Again.<|return|>", true);
        bad(f, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Lyon\"}<|end|>", true);
        bad(f, "<|channel|>final<|message|>Done.<|call|>", true);
        let out = cut(f, &text[..260]);
        assert_first(&out);
    }

    #[test]
    fn harmony_builtin_recipient() {
        let text = "<|channel|>analysis to=browser.search code<|message|>{\"query\": \"Lyon\"}<|call|>";
        let out = ok(Family::Harmony, text);
        assert_eq!(
            out.calls,
            vec![ReadCall { name: "browser.search".into(), arguments: json!({"query": "Lyon"}) }]
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        let hermes = format!("<tool_call>{{\"name\": \"f\", \"arguments\": {{\"a\": {deep}}}}}</tool_call>");
        bad(Family::Hermes, &hermes, true);
        let gemma = format!("<|tool_call>call:f{{a:{deep}}}<tool_call|>");
        bad(Family::Gemma4, &gemma, true);
        let ns = M3_NS;
        let m3 = format!(
            "{ns}<tool_call>\n{ns}<invoke name=\"f\">{}{}{ns}</invoke>\n{ns}</tool_call>",
            format!("{ns}<a>").repeat(500),
            format!("{ns}</a>").repeat(500)
        );
        bad(Family::MinimaxM3, &m3, true);
        let cohere = format!(
            "<cofl:tool_calls><cofl:tool_call id=\"0\" name=\"f\">{}{}</cofl:tool_call></cofl:tool_calls>",
            "<cofl:value name=\"a\" type=\"dict\">".repeat(500),
            "</cofl:value>".repeat(500)
        );
        bad(Family::Cohere, &cohere, true);
    }

    #[test]
    fn gemma4() {
        let f = Family::Gemma4;
        let text = "<|channel>thought\nplan<channel|>Checking.<|tool_call>call:get_weather{city:<|\"|>Lyon<|\"|>}<tool_call|><|tool_call>call:convert_currency{amount:20,from:<|\"|>EUR<|\"|>,to:<|\"|>USD<|\"|>}<tool_call|>";
        ok_two(f, text, "Checking.");
        let nested = "<|tool_call>call:f{a:[1,<|\"|>x<|\"|>,{b:null}],c:true}<tool_call|>";
        assert_eq!(ok(f, nested).calls[0].arguments, json!({"a": [1, "x", {"b": null}], "c": true}));
        // Plain JSON arguments (what grammask's preset writes) are not Gemma 4's syntax.
        let e = bad(f, "<|tool_call>call:get_weather{\"city\": \"Lyon\"}<tool_call|>", true);
        assert!(e.contains("Gemma 4"), "{e}");
        bad(f, "<|tool_call>call:get_weather{city:<|\"|>Lyon<|\"|>}", true);
        let out = cut(f, "<|tool_call>call:get_weather{city:<|\"|>Lyon<|\"|>}<tool_call|><|tool_call>call:convert_currency{amount:2");
        assert_first(&out);
    }

    #[test]
    fn cohere() {
        let f = Family::Cohere;
        let text = "plan<|END_THINKING|>Checking.<cofl:tool_calls><cofl:tool_call id=\"0\" name=\"get_weather\"><cofl:value name=\"city\" type=\"raw\">Lyon</cofl:value></cofl:tool_call><cofl:tool_call id=\"1\" name=\"convert_currency\"><cofl:value name=\"amount\" type=\"json\">20</cofl:value><cofl:value name=\"from\" type=\"raw\">EUR</cofl:value><cofl:value name=\"to\" type=\"raw\">USD</cofl:value></cofl:tool_call></cofl:tool_calls>";
        let nested = "<cofl:tool_calls><cofl:tool_call id=\"0\" name=\"f\"><cofl:value name=\"filters\" type=\"dict\"><cofl:value name=\"fresh\" type=\"json\">true</cofl:value><cofl:value name=\"tags\" type=\"list\"><cofl:value type=\"raw\">music</cofl:value></cofl:value></cofl:value></cofl:tool_call></cofl:tool_calls>";
        assert_eq!(ok(f, nested).calls[0].arguments, json!({"filters": {"fresh": true, "tags": ["music"]}}));
        let broken = [
            "<cofl:tool_calls><cofl:tool_call id=\"0\" name=\"f\"><cofl:value name=\"n\" type=\"json\">abc</cofl:value></cofl:tool_call></cofl:tool_calls>",
            "<cofl:tool_calls><cofl:tool_call id=\"0\" name=\"f\"></cofl:tool_call>",
        ];
        check(f, text, &broken, &text[..text.len() - 70]);
    }

    #[test]
    fn mistral() {
        let f = Family::Mistral;
        let text = "Checking.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}, {\"name\": \"convert_currency\", \"arguments\": {\"amount\": 20, \"from\": \"EUR\", \"to\": \"USD\"}}]";
        ok_two(f, text, "Checking.");
        assert_two(&ok(f, &text.replace("[TOOL_CALLS][", "[TOOL_CALLS] [")));
        bad(f, &format!("{text} and more"), true);
        bad(f, "[TOOL_CALLS][{\"name\": \"get_weather\", \"args\": {\"city\": \"Lyon\"}}]", true);
        assert_first(&cut(f, &text[..text.len() - 30]));
        cut(f, "Checking.[TOOL_CA");
    }
}
