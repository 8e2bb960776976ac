//! XGrammar's XML argument styles: a `json_schema` format whose top-level object is
//! written as a run of XML-like parameters (`<parameter=city>Paris</parameter>`), and the
//! reader that turns such text back into a JSON object.
//!
//! ```text
//! object schema ──plan──▶ declared members (in schema order) + extra members
//!               ──split──▶ per value: raw-text string forms + a JSON schema for the rest
//!               ──write──▶ Expr: ws item (ws item)* ws, items wrapped in the style's markers
//! ```
//!
//! # The language (XGrammar 0.2.8, as its grammar printer shows it)
//! Only the top-level object is XML; every value inside it that is not a string is plain
//! JSON (converted by [`crate::json_schema`], any whitespace between tokens). A value that
//! may be a string is written *raw*, without quotes or escapes:
//! - a string with no constraint: any text not containing the style's closing marker;
//! - `enum`/`const` strings: the strings themselves; `pattern` (or a known `format`): the
//!   pattern's matches (lengths are then ignored, as XGrammar does); `minLength`/
//!   `maxLength` alone: that many characters of any kind.
//!
//! Values are wrapped as follows (`KEY` a declared name, or `[a-zA-Z_][a-zA-Z0-9_]*` for
//! additional properties; `ws` is `[ \t\n\r]*`, or at most `max_whitespace_cnt` of them):
//!
//! | style | one argument |
//! |---|---|
//! | `qwen_xml` | `<parameter=KEY>` V `</parameter>` |
//! | `minimax_xml` | `<parameter name="KEY">` V `</parameter>` |
//! | `glm_xml` | `<arg_key>KEY</arg_key>` ws `<arg_value>` V `</arg_value>` |
//! | `kimi_k3_xml` | `<\|open\|>argument key="KEY" type="T"<\|sep\|>` V `<\|close\|>argument<\|sep\|>` |
//! | `deepseek_xml` | `<｜DSML｜parameter name="KEY" string="true">` RAW `</｜DSML｜parameter>`, or `string="false">` ws JSON ws `</…>` |
//! | `deepseek_v4_1_xml` | the same with `<｜DSML｜ parameter` and `</｜DSML｜ parameter>` |
//!
//! where V is the raw text alone for an unconstrained string, else `RAW | ws JSON ws`
//! (in `qwen_xml`, RAW between optional single newlines) — see the deliberate differences
//! below.
//!
//! `minimax_m3_xml` is recursive: `]<]minimax[>[<KEY>` V `]<]minimax[>[</KEY>`, where V
//! is a string as any text without the marker `]<]minimax[>[`, another scalar as bare
//! JSON, an object as nested arguments (`ws item (ws item)* ws`, nothing when empty) and
//! an array as `]<]minimax[>[<item>` V `]<]minimax[>[</item>` elements the same way; as
//! in XGrammar, values without a type, constrained strings (`pattern`, `format`,
//! lengths) and extra properties are refused.
//! Kimi's `T` is the schema's own type (`integer` is written `number`; a `const` or an
//! `enum` of one type gives that type) or, where the schema names none, any of the seven
//! type names. Arguments come in schema order (required ones present, optional ones
//! optional), additional properties after them, whitespace between and around; a schema
//! without `properties` (`true`, `{}`, `{"type": "object"}`) takes any arguments. A
//! top-level `anyOf`/`oneOf` of object schemas, and a top-level `$ref`, are followed.
//!
//! # Deliberate differences from XGrammar
//! - `any_order: true` accepts the arguments in any order, each declared one at most once
//!   and required ones present (the structural tag's meaning of `any_order`, see the
//!   module docs of [`super`]); XGrammar's looser form also accepts repeated and missing
//!   ones.
//! - A constrained string value (`enum`, `const`, `pattern`, `format`, lengths) has no
//!   whitespace around it, except in `qwen_xml`, where it may sit between single newlines
//!   (`<parameter=unit>\ncelsius\n</parameter>`, as Qwen's templates write it): exactly the
//!   texts whose value, one newline stripped per side, is valid. XGrammar writes `ws RAW ws`, but the families' parsers keep that whitespace in
//!   the value (vLLM's `qwen3_coder` strips one newline per side, the GLM and MiniMax
//!   readers nothing), so `<parameter=from> RID </parameter>` gave `" RID "` for a
//!   `^[A-Z]{3}$` parameter: valid by the grammar, invalid to the application.
//! - `cohere_xml` (recursive, with a type attribute per value), and `excludes`, are
//!   refused with a typed error (not written yet).
//! - A recursive `$ref` under `minimax_m3_xml` is unrolled until a nesting limit and then
//!   refused (XGrammar makes it a recursive rule).
//! - Keywords on the top-level object that the layout does not carry (`patternProperties`,
//!   `propertyNames`, `minProperties`, `maxProperties`, `dependentRequired`, …, a `required`
//!   name that is not declared) and `allOf`/`not`/`if` on a value that may be a string are
//!   refused with a typed error rather than ignored.

use super::error::{child, StructuralTagError as Error, StructuralTagErrorKind as Kind};
use super::lower::{alt_all as alt, lit, strip_outer_whitespace, Lower};
use super::text::{free_text, nothing, seq2};
use crate::grammar::{Expr, MemberSet, RuleId};
use crate::json_schema::resolve::percent_decode;
use crate::json_schema::{json_schema_to_grammar, JsonSchemaOptions, PropertyOrder, Whitespace};
use crate::regex::{regex_to_expr, RegexLimits};
use serde_json::{json, Map, Value};

type R<T> = Result<T, Error>;

/// An XML argument style of XGrammar's `json_schema` format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XmlStyle {
    /// `qwen_xml`: `<parameter=KEY>VALUE</parameter>`.
    Qwen,
    /// `minimax_xml`: `<parameter name="KEY">VALUE</parameter>`.
    Minimax,
    /// `minimax_m3_xml`: `]<]minimax[>[<KEY>VALUE]<]minimax[>[</KEY>`, nested values too.
    MinimaxM3,
    /// `deepseek_xml` (DeepSeek-V3.2): `<｜DSML｜parameter name="KEY" string="true|false">`.
    Deepseek,
    /// `glm_xml`: `<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>`.
    Glm,
    /// `cohere_xml`: `<cofl:value name="KEY" type="raw|json|dict|list">`, nested values too.
    Cohere,
    /// `kimi_k3_xml`: `<|open|>argument key="KEY" type="TYPE"<|sep|>VALUE<|close|>argument<|sep|>`.
    KimiK3,
    /// `deepseek_v4_1_xml`: DeepSeek-V4.1's `<｜DSML｜ parameter name="KEY" string="…">`.
    DeepseekV4_1,
}

impl XmlStyle {
    /// The style named `style` in a structural tag (`"qwen_xml"` → [`XmlStyle::Qwen`], …);
    /// `None` for `"json"` and unknown names.
    pub fn from_name(style: &str) -> Option<XmlStyle> {
        Some(match style {
            "qwen_xml" => XmlStyle::Qwen,
            "minimax_xml" => XmlStyle::Minimax,
            "minimax_m3_xml" => XmlStyle::MinimaxM3,
            "deepseek_xml" => XmlStyle::Deepseek,
            "glm_xml" => XmlStyle::Glm,
            "cohere_xml" => XmlStyle::Cohere,
            "kimi_k3_xml" => XmlStyle::KimiK3,
            "deepseek_v4_1_xml" => XmlStyle::DeepseekV4_1,
            _ => return None,
        })
    }

    /// The name a structural tag gives the style.
    pub fn name(self) -> &'static str {
        match self {
            XmlStyle::Qwen => "qwen_xml",
            XmlStyle::Minimax => "minimax_xml",
            XmlStyle::MinimaxM3 => "minimax_m3_xml",
            XmlStyle::Deepseek => "deepseek_xml",
            XmlStyle::Glm => "glm_xml",
            XmlStyle::Cohere => "cohere_xml",
            XmlStyle::KimiK3 => "kimi_k3_xml",
            XmlStyle::DeepseekV4_1 => "deepseek_v4_1_xml",
        }
    }

    /// The markers of the style; `None` for `cohere_xml` (not converted).
    fn markers(self) -> Option<Markers> {
        Some(match self {
            XmlStyle::Qwen => Markers {
                open: "<parameter=",
                key_end: ">",
                close: "</parameter>",
                mid: Mid::Fixed(">"),
                newlines: true,
            },
            XmlStyle::Minimax => Markers {
                open: "<parameter name=\"",
                key_end: "\"",
                close: "</parameter>",
                mid: Mid::Fixed("\">"),
                newlines: false,
            },
            XmlStyle::Glm => Markers {
                open: "<arg_key>",
                key_end: "</arg_key>",
                close: "</arg_value>",
                mid: Mid::Glm,
                newlines: false,
            },
            XmlStyle::KimiK3 => Markers {
                open: "<|open|>argument key=\"",
                key_end: "\"",
                close: "<|close|>argument<|sep|>",
                mid: Mid::Kimi,
                newlines: false,
            },
            XmlStyle::Deepseek => Markers {
                open: "<｜DSML｜parameter name=\"",
                key_end: "\"",
                close: "</｜DSML｜parameter>",
                mid: Mid::Deepseek,
                newlines: false,
            },
            XmlStyle::DeepseekV4_1 => Markers {
                open: "<｜DSML｜ parameter name=\"",
                key_end: "\"",
                close: "</｜DSML｜ parameter>",
                mid: Mid::Deepseek,
                newlines: false,
            },
            XmlStyle::MinimaxM3 => {
                Markers { open: "]<]minimax[>[<", key_end: ">", close: M3_NS, mid: Mid::M3, newlines: false }
            }
            XmlStyle::Cohere => return None,
        })
    }
}

/// How a flat style writes one argument: `open KEY mid VALUE close`.
#[derive(Clone, Copy)]
struct Markers {
    open: &'static str,
    /// What ends a key when reading.
    key_end: &'static str,
    close: &'static str,
    mid: Mid,
    /// A raw string value may be written between single newlines (`>\nVALUE\n</parameter>`):
    /// Qwen's templates write it so and the published parsers (vLLM's `qwen3_coder`) strip
    /// at most one newline on each side. The other styles' parsers take the text between
    /// the markers as it is.
    newlines: bool,
}

/// What comes between the key and the value.
#[derive(Clone, Copy)]
enum Mid {
    /// A fixed string (`>`, `">`).
    Fixed(&'static str),
    /// `</arg_key>` ws `<arg_value>`.
    Glm,
    /// `" type="T"<|sep|>`.
    Kimi,
    /// `" string="true">` before a raw string, `" string="false">` before JSON.
    Deepseek,
    /// `>` VALUE `]<]minimax[>[</KEY>`: the closing marker names the key again, and
    /// nested objects and arrays are written the same way.
    M3,
}

/// MiniMax-M3's namespace marker, in front of every tag it writes.
const M3_NS: &str = "]<]minimax[>[";

const KIMI_TYPES: [&str; 7] = ["string", "number", "integer", "boolean", "object", "array", "null"];
const NON_STRING_TYPES: [&str; 6] = ["number", "integer", "boolean", "null", "array", "object"];

// ---------------------------------------------------------------------------------------
// Schema analysis, shared by the writer and the reader
// ---------------------------------------------------------------------------------------

/// A form of string value written raw (no quotes, no escapes).
#[derive(Debug, Clone, PartialEq)]
enum Raw {
    /// Any text without the closing marker.
    Plain,
    /// One of these strings.
    Literals(Vec<String>),
    /// A full match of this ECMA-262 pattern.
    Pattern(String),
    /// `min..=max` characters of any kind.
    Length(u32, Option<u32>),
}

/// A value schema split into its raw string forms and a JSON schema for the other values.
#[derive(Debug, Default)]
struct Split {
    raw: Vec<Raw>,
    json: Vec<Value>,
}

impl Split {
    fn add(&mut self, other: Split) {
        self.raw.extend(other.raw);
        self.json.extend(other.json);
    }

    /// The schema of the non-string values, if any.
    fn json_schema(&self) -> Option<Value> {
        match self.json.len() {
            0 => None,
            1 => Some(self.json[0].clone()),
            _ => Some(json!({ "anyOf": self.json })),
        }
    }

    /// Only unconstrained text: written without the whitespace around it.
    fn plain_only(&self) -> bool {
        self.json.is_empty() && !self.raw.is_empty() && self.raw.iter().all(|r| *r == Raw::Plain)
    }
}

/// The texts `T` whose value, as vLLM's `qwen3_coder` parser reads it (one leading and one
/// trailing newline stripped), is a string of `raw`: `\n X \n`, `\n X`, `X \n` or `X`
/// for `X` in `raw`, where the forms without a newline on a side take only the `X` that do
/// not start (end) with one — else the parser would strip the value's own newline. A
/// `raw` that never holds a newline (nearly every pattern, enum and format) needs no
/// intersection; the rest intersect `raw` with the edge conditions.
fn between_newlines(raw: Expr) -> Expr {
    let nl = || lit("\n");
    let opt_nl = || Expr::Repeat { expr: Box::new(nl()), min: 0, max: Some(1) };
    if !may_hold_newline(&raw) {
        return seq([opt_nl(), raw, opt_nl()]);
    }
    if let Expr::Repeat { expr, min, max } = &raw {
        if let Expr::Class(c) = expr.as_ref() {
            return class_run_between_newlines(c, *min, *max);
        }
    }
    const ANY: &[(u32, u32)] = &[(0, 0x10FFFF)];
    let not_nl = || Expr::Class(vec![(0, 9), (11, 0x10FFFF)]);
    let any = || Expr::Repeat { expr: Box::new(Expr::Class(ANY.to_vec())), min: 0, max: None };
    let not_first = alt([Expr::Empty, seq([not_nl(), any()])]);
    let not_last = alt([Expr::Empty, seq([any(), not_nl()])]);
    let neither = alt([Expr::Empty, not_nl(), seq([not_nl(), any(), not_nl()])]);
    alt([
        seq([nl(), raw.clone(), nl()]),
        seq([nl(), Expr::And(vec![raw.clone(), not_last])]),
        seq([Expr::And(vec![raw.clone(), not_first]), nl()]),
        Expr::And(vec![raw, neither]),
    ])
}

/// [`between_newlines`] of `c{min,max}` (a length-bounded string: `c` is every character),
/// written with the run once: the intersections would copy a long run's automaton three
/// times over and `maxLength: 20000` went past the automaton limit. A value `V` of two
/// characters or more is `v₁ M vₙ`; the text is `(\n c | c') M (c \n | c')` with `c'` the
/// class without a newline (a side without the template's newline must not start or end
/// with one, or the parser would strip the value's own); the values of none or one
/// character are listed.
fn class_run_between_newlines(c: &[(u32, u32)], min: u32, max: Option<u32>) -> Expr {
    let nl = || lit("\n");
    let cls = || Expr::Class(c.to_vec());
    let not_nl = || Expr::Class(crate::grammar::class::subtract_class(c, &[(10, 10)]));
    let fits = |n: u32| min <= n && max.map_or(true, |m| n <= m);
    let mut alts = Vec::new();
    if fits(0) {
        // "", "\n" and "\n\n" all read as "".
        alts.extend([Expr::Empty, nl(), seq([nl(), nl()])]);
    }
    if fits(1) {
        alts.extend([seq([nl(), cls(), nl()]), seq([nl(), not_nl()]), seq([not_nl(), nl()]), not_nl()]);
    }
    if max.map_or(true, |m| m >= 2) {
        let middle =
            Expr::Repeat { expr: Box::new(cls()), min: min.saturating_sub(2), max: max.map(|m| m - 2) };
        alts.push(seq([alt([seq([nl(), cls()]), not_nl()]), middle, alt([seq([cls(), nl()]), not_nl()])]));
    }
    alt(alts)
}

/// Whether `e` may match a string holding a newline (conservative: a rule or an automaton
/// may).
fn may_hold_newline(e: &Expr) -> bool {
    match e {
        Expr::Empty => false,
        Expr::Literal(s) => s.contains('\n'),
        Expr::Class(r) => r.iter().any(|&(a, b)| a <= 10 && 10 <= b),
        Expr::Rule(_) | Expr::Dfa(_) => true,
        Expr::Seq(v) | Expr::Alt(v) => v.iter().any(may_hold_newline),
        Expr::And(v) => v.iter().all(may_hold_newline),
        Expr::Repeat { expr, max, .. } => *max != Some(0) && may_hold_newline(expr),
    }
}

/// Annotations and containers of definitions: keywords that do not constrain a value.
fn is_annotation(k: &str) -> bool {
    matches!(
        k,
        "title"
            | "description"
            | "default"
            | "examples"
            | "$comment"
            | "$schema"
            | "$id"
            | "$anchor"
            | "deprecated"
            | "readOnly"
            | "writeOnly"
            | "$defs"
            | "definitions"
    )
}

/// The schema `$ref` names (a local JSON pointer into `root`).
fn deref<'a>(root: &'a Value, reference: &str, ptr: &str) -> R<&'a Value> {
    let target = match reference.strip_prefix('#') {
        Some("") => Some(root),
        Some(p) => root.pointer(&percent_decode(p)),
        None => None,
    };
    target.ok_or_else(|| {
        Error::new(
            ptr,
            Kind::Unsupported {
                what: format!("`$ref` `{reference}` in an XML style"),
                detail: "only local references (`#/…`) that resolve are followed".into(),
            },
        )
    })
}

/// Follows `$ref`s standing alone (annotations beside them are ignored).
fn resolve<'a>(root: &'a Value, mut s: &'a Value, ptr: &str) -> R<&'a Value> {
    for _ in 0..64 {
        let Some(m) = s.as_object() else { return Ok(s) };
        let Some(r) = m.get("$ref") else { return Ok(s) };
        if let Some(k) = m.keys().find(|k| *k != "$ref" && !is_annotation(k)) {
            return Err(unsupported(
                ptr,
                &format!("`{k}` beside `$ref` in an XML style"),
                "write the keywords in the referenced schema",
            ));
        }
        let r = r.as_str().ok_or_else(|| Error::new(ptr, Kind::WrongType { expected: "a string `$ref`" }))?;
        s = deref(root, r, ptr)?;
    }
    Err(Error::new(ptr, Kind::Limit { what: "`$ref` chain length", given: 64, limit: 63 }))
}

fn unsupported(ptr: &str, what: &str, detail: &str) -> Error {
    Error::new(ptr, Kind::Unsupported { what: what.to_string(), detail: detail.to_string() })
}

/// Splits a value schema into raw string forms and JSON for the rest.
fn split(root: &Value, schema: &Value, ptr: &str, depth: usize) -> R<Split> {
    if depth > 32 {
        return Err(Error::new(
            ptr,
            Kind::Limit { what: "XML value schema nesting", given: depth, limit: 32 },
        ));
    }
    let s = resolve(root, schema, ptr)?;
    let m = match s {
        Value::Bool(false) => return Ok(Split::default()),
        Value::Bool(true) => return Ok(any_value()),
        Value::Object(m) => m,
        _ => return Err(Error::new(ptr, Kind::WrongType { expected: "a JSON schema (object or boolean)" })),
    };
    let types = declared_types(m, ptr)?;
    let may_be_string = !matches!(&types, Some(t) if !t.iter().any(|t| t == "string"));
    if !may_be_string {
        return Ok(Split { raw: Vec::new(), json: vec![s.clone()] });
    }
    let listed = match (m.get("const"), m.get("enum")) {
        (Some(c), _) => Some(vec![c.clone()]),
        (None, Some(Value::Array(v))) => Some(v.clone()),
        (None, Some(_)) => {
            return Err(Error::new(&child(ptr, "enum"), Kind::WrongType { expected: "a list" }))
        }
        (None, None) => None,
    };
    if let Some(values) = listed {
        let allowed = |v: &Value| match &types {
            None => true,
            Some(t) => t.iter().any(|t| type_matches(t, v)),
        };
        let strings: Vec<String> = values.iter().filter_map(|v| v.as_str().map(str::to_string)).collect();
        let others: Vec<Value> = values.iter().filter(|v| !v.is_string() && allowed(v)).cloned().collect();
        let mut out = Split::default();
        if !strings.is_empty() && allowed(&Value::String(String::new())) {
            out.raw.push(Raw::Literals(strings));
        }
        if !others.is_empty() {
            out.json.push(json!({ "enum": others }));
        }
        return Ok(out);
    }
    let branches = m.get("anyOf").or_else(|| m.get("oneOf"));
    if let Some(branches) = branches {
        let list = branches.as_array().ok_or_else(|| {
            Error::new(ptr, Kind::WrongType { expected: "a list of schemas in `anyOf`/`oneOf`" })
        })?;
        if let Some(k) = m.keys().find(|k| !matches!(k.as_str(), "anyOf" | "oneOf") && !is_annotation(k)) {
            return Err(unsupported(
                &child(ptr, k),
                &format!("`{k}` beside `anyOf`/`oneOf` on a value that may be a string"),
                "move the keyword into each branch",
            ));
        }
        let key = if m.contains_key("anyOf") { "anyOf" } else { "oneOf" };
        let mut out = Split::default();
        for (i, b) in list.iter().enumerate() {
            out.add(split(root, b, &child(&child(ptr, key), &i.to_string()), depth + 1)?);
        }
        return Ok(out);
    }
    if let Some(k) = m.keys().find(|k| matches!(k.as_str(), "allOf" | "not" | "if" | "then" | "else")) {
        return Err(unsupported(
            &child(ptr, k),
            &format!("`{k}` on a value that may be a string, in an XML style"),
            "strings are written raw there; describe them with `type`, `enum`, `pattern`, `format` or lengths",
        ));
    }
    let mut out = Split { raw: vec![raw_form(m, ptr)?], json: Vec::new() };
    let rest: Vec<&str> = match &types {
        None => NON_STRING_TYPES.to_vec(),
        Some(t) => t.iter().map(String::as_str).filter(|t| *t != "string").collect(),
    };
    if !rest.is_empty() {
        let mut j = m.clone();
        j.insert("type".into(), json!(rest));
        out.json.push(Value::Object(j));
    }
    Ok(out)
}

/// Any value: raw text, or JSON of any other type.
fn any_value() -> Split {
    Split { raw: vec![Raw::Plain], json: vec![json!({ "type": NON_STRING_TYPES })] }
}

fn declared_types(m: &Map<String, Value>, ptr: &str) -> R<Option<Vec<String>>> {
    let bad =
        || Error::new(&child(ptr, "type"), Kind::WrongType { expected: "a type name or a list of them" });
    Ok(match m.get("type") {
        None => None,
        Some(Value::String(t)) => Some(vec![t.clone()]),
        Some(Value::Array(a)) => {
            Some(a.iter().map(|t| t.as_str().map(str::to_string).ok_or_else(bad)).collect::<R<_>>()?)
        }
        Some(_) => return Err(bad()),
    })
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => false,
    }
}

/// The raw form of a string schema's constraints.
fn raw_form(m: &Map<String, Value>, ptr: &str) -> R<Raw> {
    if let Some(p) = m.get("pattern") {
        let p = p
            .as_str()
            .ok_or_else(|| Error::new(&child(ptr, "pattern"), Kind::WrongType { expected: "a string" }))?;
        return Ok(Raw::Pattern(p.to_string()));
    }
    if let Some(f) = m.get("format").and_then(Value::as_str) {
        if let Some(re) = crate::json_schema::format::format_regex(f) {
            return Ok(Raw::Pattern(re));
        }
    }
    let count = |k: &str| -> R<Option<u32>> {
        match m.get(k) {
            None => Ok(None),
            Some(v) => v.as_u64().and_then(|n| u32::try_from(n).ok()).map(Some).ok_or_else(|| {
                Error::new(&child(ptr, k), Kind::WrongType { expected: "a non-negative integer" })
            }),
        }
    };
    let (min, max) = (count("minLength")?, count("maxLength")?);
    Ok(match (min, max) {
        (None | Some(0), None) => Raw::Plain,
        (min, max) => Raw::Length(min.unwrap_or(0), max),
    })
}

/// Kimi's `type="…"` attribute: the schema's own single type, if it names one.
fn kimi_type(schema: &Value) -> Option<&'static str> {
    let name = |v: &Value| -> &'static str {
        match v {
            Value::String(_) => "string",
            Value::Number(_) => "number",
            Value::Bool(_) => "boolean",
            Value::Null => "null",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    };
    let m = schema.as_object()?;
    match m.get("type") {
        Some(Value::String(t)) => {
            return Some(match t.as_str() {
                "string" => "string",
                "integer" | "number" => "number",
                "boolean" => "boolean",
                "null" => "null",
                "array" => "array",
                "object" => "object",
                _ => return None,
            })
        }
        Some(_) => return None,
        None => {}
    }
    if let Some(c) = m.get("const") {
        return Some(name(c));
    }
    let values = m.get("enum")?.as_array()?;
    let first = name(values.first()?);
    values.iter().all(|v| name(v) == first).then_some(first)
}

/// The top-level object as arguments: declared members in order, and what extra
/// arguments (any name) may follow.
struct Plan<'a> {
    members: Vec<(&'a str, &'a Value, bool)>,
    extra: Option<&'a Value>,
    /// `extra` comes from `additionalProperties` itself, not from its absence.
    extra_explicit: bool,
    /// The schema names no type and no members (`true`, `{}`).
    untyped: bool,
    ptr: String,
}

const TRUE: Value = Value::Bool(true);

/// The objects a top-level schema allows (more than one for `anyOf`/`oneOf`).
fn plans<'a>(root: &'a Value, schema: &'a Value, ptr: &str, out: &mut Vec<Plan<'a>>, depth: usize) -> R<()> {
    if depth > 32 {
        return Err(Error::new(
            ptr,
            Kind::Limit { what: "XML object schema nesting", given: depth, limit: 32 },
        ));
    }
    let s = resolve(root, schema, ptr)?;
    let m = match s {
        Value::Bool(true) => {
            out.push(Plan {
                members: Vec::new(),
                extra: Some(&TRUE),
                extra_explicit: false,
                untyped: true,
                ptr: ptr.to_string(),
            });
            return Ok(());
        }
        Value::Bool(false) => return Ok(()),
        Value::Object(m) => m,
        _ => return Err(Error::new(ptr, Kind::WrongType { expected: "a JSON schema (object or boolean)" })),
    };
    if let Some(key) = ["anyOf", "oneOf"].into_iter().find(|k| m.contains_key(*k)) {
        if let Some(k) = m.keys().find(|k| *k != key && !is_annotation(k) && *k != "type") {
            return Err(unsupported(
                &child(ptr, k),
                &format!("`{k}` beside `{key}` on the arguments object"),
                "move the keyword into each branch",
            ));
        }
        let list = m[key]
            .as_array()
            .ok_or_else(|| Error::new(&child(ptr, key), Kind::WrongType { expected: "a list" }))?;
        for (i, b) in list.iter().enumerate() {
            plans(root, b, &child(&child(ptr, key), &i.to_string()), out, depth + 1)?;
        }
        return Ok(());
    }
    let types = declared_types(m, ptr)?;
    if let Some(types) = &types {
        if !types.iter().any(|t| t == "object") {
            return Err(Error::new(
                &child(ptr, "type"),
                Kind::InvalidValue("the arguments of an XML style must be an object schema".into()),
            ));
        }
    }
    for (k, _) in m.iter() {
        let known = is_annotation(k)
            || matches!(k.as_str(), "type" | "properties" | "required" | "additionalProperties");
        if !known {
            return Err(unsupported(
                &child(ptr, k),
                &format!("`{k}` on the arguments object of an XML style"),
                "the XML layout carries `properties`, `required` and `additionalProperties` only",
            ));
        }
    }
    let required: Vec<&str> = match m.get("required") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str().ok_or_else(|| {
                    Error::new(&child(ptr, "required"), Kind::WrongType { expected: "a list of strings" })
                })
            })
            .collect::<R<_>>()?,
        Some(_) => {
            return Err(Error::new(
                &child(ptr, "required"),
                Kind::WrongType { expected: "a list of strings" },
            ))
        }
    };
    let props = match m.get("properties") {
        None => None,
        Some(Value::Object(p)) => Some(p),
        Some(_) => {
            return Err(Error::new(&child(ptr, "properties"), Kind::WrongType { expected: "an object" }))
        }
    };
    let mut members = Vec::new();
    if let Some(p) = props {
        for (k, v) in p {
            members.push((k.as_str(), v, required.contains(&k.as_str())));
        }
    }
    if let Some(r) = required.iter().find(|r| !members.iter().any(|m| m.0 == **r)) {
        return Err(unsupported(
            &child(ptr, "required"),
            &format!("required argument `{r}` that `properties` does not declare"),
            "declare it in `properties`",
        ));
    }
    // XGrammar's structural tags are strict: declared members close the object unless
    // `additionalProperties` says otherwise; no members and no word: any arguments.
    let extra = match m.get("additionalProperties") {
        Some(Value::Bool(false)) => None,
        Some(v) => Some(v),
        None if props.is_none() => Some(&TRUE),
        None => None,
    };
    out.push(Plan {
        members,
        extra,
        extra_explicit: m.contains_key("additionalProperties"),
        untyped: types.is_none() && props.is_none(),
        ptr: ptr.to_string(),
    });
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The writer: arguments → grammar
// ---------------------------------------------------------------------------------------

fn seq(items: impl IntoIterator<Item = Expr>) -> Expr {
    items.into_iter().fold(Expr::Empty, seq2)
}

/// Writes one `json_schema` format in an XML style.
pub(crate) struct Writer<'l, 'p> {
    lower: &'l mut Lower<'p>,
    markers: Markers,
    root: &'l Value,
    any_order: bool,
    max_whitespace: Option<u32>,
    /// `ptr/json_schema`.
    schema_ptr: String,
    /// The rule for unconstrained raw text (built once).
    plain: Option<Expr>,
    /// The rule for an additional argument's name.
    name: Option<Expr>,
}

/// The `json_schema` format at `ptr` (its schema `schema`) written in `style`.
pub(crate) fn lower_xml(
    lower: &mut Lower,
    style: XmlStyle,
    schema: &Value,
    any_order: bool,
    max_whitespace: Option<u32>,
    ptr: &str,
) -> R<Expr> {
    let Some(markers) = style.markers() else {
        return Err(unsupported(
            &child(ptr, "style"),
            &format!("style `{}`", style.name()),
            "recursive XML styles (nested objects and arrays written as XML) are not converted yet",
        ));
    };
    let schema_ptr = child(ptr, "json_schema");
    let mut out = Vec::new();
    plans(schema, schema, &schema_ptr, &mut out, 0)?;
    let mut w = Writer {
        lower,
        markers,
        root: schema,
        any_order,
        max_whitespace,
        schema_ptr,
        plain: None,
        name: None,
    };
    let mut alts = Vec::with_capacity(out.len());
    for plan in &out {
        alts.push(w.object(plan)?);
    }
    Ok(alt(alts))
}

impl Writer<'_, '_> {
    fn ws(&self) -> Expr {
        Expr::Repeat {
            expr: Box::new(Expr::Class(vec![(9, 10), (13, 13), (32, 32)])),
            min: 0,
            max: self.max_whitespace.filter(|&m| m != u32::MAX),
        }
    }

    fn rule(&mut self, name: &str, body: Expr, keep: bool) -> R<RuleId> {
        self.lower.add_rule(name, body, keep, &self.schema_ptr)
    }

    /// `ws item (ws item)* ws`, or `ws` alone when nothing is required.
    fn object(&mut self, plan: &Plan) -> R<Expr> {
        // In any order, the arguments are a member set (see [`MemberSet`]): its rule must
        // begin with text and its separator and end must differ, so the style's opening
        // marker, common to all arguments, is taken out of the members into the set's
        // opening and separator.
        let any_order = self.any_order && !plan.members.is_empty();
        let open = if any_order { Expr::Empty } else { lit(self.markers.open) };
        let mut items = Vec::with_capacity(plan.members.len());
        for (name, schema, required) in &plan.members {
            let ptr = child(&child(&plan.ptr, "properties"), name);
            let item = seq([open.clone(), self.item(lit(name), schema, &ptr)?]);
            let id = self.rule("xml_arg", item, false)?;
            items.push((id, *required));
        }
        let m3 = matches!(self.markers.mid, Mid::M3);
        if m3 && plan.untyped {
            return Err(Error::new(
                &plan.ptr,
                Kind::InvalidValue("`minimax_m3_xml` needs a type for every value".into()),
            ));
        }
        let extra = match plan.extra {
            None => None,
            // MiniMax-M3 objects take their declared members only (`{"type": "object"}`:
            // an empty object), as in XGrammar.
            Some(_) if m3 && !plan.extra_explicit => None,
            Some(_) if m3 => {
                return Err(Error::new(
                    &plan.ptr,
                    Kind::InvalidValue(
                        "`minimax_m3_xml` needs fixed argument names: no `additionalProperties`, and `properties` declared"
                            .into(),
                    ),
                ))
            }
            Some(s) => {
                let name = self.name()?;
                let item =
                    seq([open.clone(), self.item(name, s, &child(&plan.ptr, "additionalProperties"))?]);
                Some(self.rule("xml_extra_arg", item, false)?)
            }
        };
        let nullable = items.iter().all(|i| !i.1);
        let ws = self.ws();
        // An empty object is whitespace, except in MiniMax-M3 where it is nothing.
        let empty = if matches!(self.markers.mid, Mid::M3) { Expr::Empty } else { ws.clone() };
        if items.is_empty() && extra.is_none() {
            return Ok(empty);
        }
        let body = if any_order {
            let sep = self.rule("xml_sep", seq([ws.clone(), lit(self.markers.open)]), false)?;
            let close = self.rule("xml_close", ws.clone(), false)?;
            let set = MemberSet { members: items, extra, sep, close, min: 0, max: None };
            let id = self.rule("xml_args", set.body(lit(self.markers.open)), true)?;
            self.lower.rule_mut(id).members = Some(Box::new(set));
            seq([ws.clone(), Expr::Rule(id)])
        } else {
            // Back to front: `rest` writes members `i..` (each after whitespace) and the
            // extra ones; `first` the same with nothing written yet, and not empty.
            let more_extra = match extra {
                Some(x) => {
                    Expr::Repeat { expr: Box::new(seq([ws.clone(), Expr::Rule(x)])), min: 0, max: None }
                }
                None => Expr::Empty,
            };
            let mut rest = more_extra.clone();
            let mut first = match extra {
                Some(x) => seq([Expr::Rule(x), more_extra]),
                None => nothing(),
            };
            for &(id, required) in items.iter().rev() {
                let rest_id = self.rule("xml_rest", rest, false)?;
                let with = seq([Expr::Rule(id), Expr::Rule(rest_id)]);
                first = if required { with } else { alt([with, first]) };
                let one = seq([ws.clone(), Expr::Rule(id)]);
                rest = seq([
                    if required { one } else { Expr::Repeat { expr: Box::new(one), min: 0, max: Some(1) } },
                    Expr::Rule(rest_id),
                ]);
            }
            seq([ws.clone(), first, ws.clone()])
        };
        Ok(if nullable { alt([body, empty]) } else { body })
    }

    /// One argument after the style's opening marker: the name `key`, the value of
    /// `schema`, the closing marker.
    fn item(&mut self, key: Expr, schema: &Value, ptr: &str) -> R<Expr> {
        if matches!(self.markers.mid, Mid::M3) {
            let value = self.m3_value(schema, ptr, 0)?;
            return Ok(seq([key.clone(), lit(">"), value, lit(M3_NS), lit("</"), key, lit(">")]));
        }
        let sp = split(self.root, schema, ptr, 0)?;
        let m = self.markers;
        let close = lit(m.close);
        let raw = self.raw(&sp, ptr)?;
        let json = match sp.json_schema() {
            Some(j) => Some(self.json(j, ptr)?),
            None => None,
        };
        let ws = self.ws();
        let value = || -> Expr {
            if sp.plain_only() {
                return raw.clone().unwrap_or_else(nothing);
            }
            // A constrained string is written with nothing around it but the template's
            // newlines: the families' parsers keep any other whitespace in the value, so
            // `ws RAW ws` (XGrammar's form) would let through values the schema refuses
            // (`" RID "` for `^[A-Z]{3}$`). Unconstrained text already takes any text.
            let raw = raw.clone().map(|r| {
                if sp.raw.contains(&Raw::Plain) || !m.newlines {
                    r
                } else {
                    between_newlines(r)
                }
            });
            let json = json.clone().map(|j| seq([ws.clone(), j, ws.clone()]));
            alt(raw.into_iter().chain(json))
        };
        Ok(match m.mid {
            Mid::Fixed(mid) => seq([key, lit(mid), value(), close]),
            Mid::Glm => seq([key, lit("</arg_key>"), ws.clone(), lit("<arg_value>"), value(), close]),
            Mid::Kimi => {
                // Read from the schema as written: a `$ref` names no type.
                let ty = match kimi_type(schema) {
                    Some(t) => lit(t),
                    None => alt(KIMI_TYPES.iter().map(|t| lit(t))),
                };
                seq([key, lit("\" type=\""), ty, lit("\"<|sep|>"), value(), close])
            }
            Mid::M3 => unreachable!("written above"),
            Mid::Deepseek => {
                let mut branches = Vec::new();
                if let Some(r) = raw {
                    branches.push(seq([lit("\" string=\"true\">"), r, close.clone()]));
                }
                if let Some(j) = json {
                    branches.push(seq([lit("\" string=\"false\">"), ws.clone(), j, ws.clone(), close]));
                }
                seq([key, alt(branches)])
            }
        })
    }

    /// A value in MiniMax-M3's recursive layout: strings raw (any text without the
    /// namespace marker), other scalars JSON, objects as nested arguments, arrays as
    /// `<item>` elements; no whitespace around scalars. Like XGrammar, unconstrained
    /// values and constrained strings (no layout can combine them with the marker's
    /// exclusion) are errors.
    fn m3_value(&mut self, schema: &Value, ptr: &str, depth: usize) -> R<Expr> {
        if depth > 32 {
            return Err(Error::new(
                ptr,
                Kind::Limit { what: "XML value schema nesting", given: depth, limit: 32 },
            ));
        }
        let root = self.root;
        let s = resolve(root, schema, ptr)?;
        let unconstrained =
            || Error::new(ptr, Kind::InvalidValue("`minimax_m3_xml` needs a type for every value".into()));
        let m = match s {
            Value::Bool(false) => return Ok(nothing()),
            Value::Bool(true) => return Err(unconstrained()),
            Value::Object(m) => m,
            _ => {
                return Err(Error::new(
                    ptr,
                    Kind::WrongType { expected: "a JSON schema (object or boolean)" },
                ))
            }
        };
        if m.contains_key("enum") || m.contains_key("const") {
            let sp = split(root, s, ptr, depth)?;
            let raw = self.raw(&sp, ptr)?;
            let json = match sp.json_schema() {
                Some(j) => Some(self.json(j, ptr)?),
                None => None,
            };
            return Ok(alt(raw.into_iter().chain(json)));
        }
        if let Some(key) = ["anyOf", "oneOf"].into_iter().find(|k| m.contains_key(*k)) {
            let list = m[key]
                .as_array()
                .ok_or_else(|| Error::new(&child(ptr, key), Kind::WrongType { expected: "a list" }))?;
            let mut alts = Vec::with_capacity(list.len());
            for (i, b) in list.iter().enumerate() {
                alts.push(self.m3_value(b, &child(&child(ptr, key), &i.to_string()), depth + 1)?);
            }
            return Ok(alt(alts));
        }
        let types = match declared_types(m, ptr)? {
            Some(t) => t,
            None if m.contains_key("properties") => vec!["object".to_string()],
            None => return Err(unconstrained()),
        };
        let mut alts = Vec::with_capacity(types.len());
        for t in &types {
            alts.push(match t.as_str() {
                "string" => {
                    if let Some(k) = ["pattern", "format", "minLength", "maxLength"].into_iter().find(|k| m.contains_key(*k)) {
                        return Err(Error::new(
                            &child(ptr, k),
                            Kind::InvalidValue(format!(
                                "`minimax_m3_xml` strings cannot be constrained by `{k}` (XGrammar refuses it too)"
                            )),
                        ));
                    }
                    self.plain()?
                }
                "object" => {
                    let mut out = Vec::new();
                    plans(root, s, ptr, &mut out, depth + 1)?;
                    let mut objs = Vec::with_capacity(out.len());
                    for plan in &out {
                        objs.push(self.object(plan)?);
                    }
                    alt(objs)
                }
                "array" => self.m3_array(m, ptr, depth)?,
                _ => {
                    let mut j = m.clone();
                    j.insert("type".into(), json!(t));
                    self.json(Value::Object(j), ptr)?
                }
            });
        }
        Ok(alt(alts))
    }

    /// `ws <item>V</item> (ws <item>V</item>)* ws` within `minItems`/`maxItems`; an
    /// empty array is nothing at all.
    fn m3_array(&mut self, m: &Map<String, Value>, ptr: &str, depth: usize) -> R<Expr> {
        if let Some(k) = ["prefixItems", "contains", "uniqueItems"].into_iter().find(|k| m.contains_key(*k)) {
            return Err(unsupported(
                &child(ptr, k),
                &format!("`{k}` in `minimax_m3_xml`"),
                "only `items` and item counts are laid out",
            ));
        }
        let count = |k: &str| -> R<Option<u32>> {
            match m.get(k) {
                None => Ok(None),
                Some(v) => v.as_u64().and_then(|n| u32::try_from(n).ok()).map(Some).ok_or_else(|| {
                    Error::new(&child(ptr, k), Kind::WrongType { expected: "a non-negative integer" })
                }),
            }
        };
        let (min, max) = (count("minItems")?.unwrap_or(0), count("maxItems")?);
        if max.is_some_and(|x| x < min) {
            return Ok(nothing());
        }
        let items_ptr = child(ptr, "items");
        let value = match m.get("items") {
            Some(s) => self.m3_value(s, &items_ptr, depth + 1)?,
            None => {
                return Err(Error::new(
                    ptr,
                    Kind::InvalidValue("`minimax_m3_xml` needs the `items` of every array".into()),
                ))
            }
        };
        let item = seq([lit(M3_NS), lit("<item>"), value, lit(M3_NS), lit("</item>")]);
        let id = self.rule("xml_item", item, false)?;
        let ws = self.ws();
        if max == Some(0) {
            return Ok(Expr::Empty);
        }
        let more = Expr::Repeat {
            expr: Box::new(seq([ws.clone(), Expr::Rule(id)])),
            min: min.saturating_sub(1),
            max: max.map(|x| x - 1),
        };
        let some = seq([ws.clone(), Expr::Rule(id), more, ws]);
        Ok(if min == 0 { alt([Expr::Empty, some]) } else { some })
    }

    /// The raw string forms, if any.
    fn raw(&mut self, sp: &Split, ptr: &str) -> R<Option<Expr>> {
        let mut alts = Vec::new();
        for r in &sp.raw {
            alts.push(match r {
                Raw::Plain => self.plain()?,
                Raw::Literals(v) => alt(v.iter().map(|s| lit(s))),
                Raw::Pattern(p) => regex_to_expr(p, &RegexLimits::default())
                    .map_err(|e| Error::new(&child(ptr, "pattern"), Kind::Regex(e)))?,
                Raw::Length(min, max) => {
                    Expr::Repeat { expr: Box::new(Expr::Class(vec![(0, 0x10FFFF)])), min: *min, max: *max }
                }
            });
        }
        Ok(if alts.is_empty() { None } else { Some(alt(alts)) })
    }

    fn plain(&mut self) -> R<Expr> {
        if let Some(e) = &self.plain {
            return Ok(e.clone());
        }
        let text = free_text(&[], &[self.markers.close.to_string()]).map_err(|(what, given, limit)| {
            Error::new(&self.schema_ptr, Kind::Limit { what, given, limit })
        })?;
        let e = Expr::Rule(self.rule("xml_string", text.rest, false)?);
        self.plain = Some(e.clone());
        Ok(e)
    }

    fn name(&mut self) -> R<Expr> {
        if let Some(e) = &self.name {
            return Ok(e.clone());
        }
        let body = seq([
            Expr::Class(vec![(65, 90), (95, 95), (97, 122)]),
            Expr::Repeat {
                expr: Box::new(Expr::Class(vec![(48, 57), (65, 90), (95, 95), (97, 122)])),
                min: 0,
                max: None,
            },
        ]);
        let e = Expr::Rule(self.rule("xml_name", body, false)?);
        self.name = Some(e.clone());
        Ok(e)
    }

    /// A JSON value of `schema` (with the document's definitions, so `$ref`s resolve).
    fn json(&mut self, mut schema: Value, ptr: &str) -> R<Expr> {
        if let (Some(s), Some(root)) = (schema.as_object_mut(), self.root.as_object()) {
            for k in ["$defs", "definitions"] {
                if let (Some(d), false) = (root.get(k), s.contains_key(k)) {
                    s.insert(k.to_string(), d.clone());
                }
            }
        }
        let options = JsonSchemaOptions {
            whitespace: Whitespace::Any { max: self.max_whitespace.unwrap_or(u32::MAX) },
            property_order: if self.any_order { PropertyOrder::Any } else { PropertyOrder::Schema },
            ..Default::default()
        };
        let mut g =
            json_schema_to_grammar(&schema, &options).map_err(|e| Error::new(ptr, Kind::Schema(e)))?;
        strip_outer_whitespace(&mut g);
        self.lower.embed(g, ptr)
    }
}

// ---------------------------------------------------------------------------------------
// The reader: text → arguments
// ---------------------------------------------------------------------------------------

/// Text that is not arguments in the expected style.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("XML arguments at byte {offset}: expected {expected}")]
pub struct XmlReadError {
    /// Byte offset into the text where reading failed.
    pub offset: usize,
    /// What was expected there.
    pub expected: String,
}

fn read_err(offset: usize, expected: impl Into<String>) -> XmlReadError {
    XmlReadError { offset, expected: expected.into() }
}

/// Reads the arguments written in `style` at the start of `text` (the tag content, as the
/// constraint produced it), using `schema` to tell raw-text string values from JSON values.
/// Returns the arguments as a JSON object and how many bytes of `text` they took (the
/// content ends there; what follows is the tag's end string).
///
/// The count ends right after the last argument's closing marker (0 with no argument):
/// the whitespace the constraint allows after the last argument is left to the caller,
/// because many end strings begin with whitespace themselves (`"\n</function>"`).
///
/// A value whose schema allows strings only is the raw text as written — in
/// [`XmlStyle::Qwen`] less one newline on each side, as the published parsers read it. A
/// value that may also be something else is JSON when its text (whitespace trimmed)
/// parses as JSON that is not a string, else that raw text. DeepSeek's `string="…"`
/// attribute decides by itself.
///
/// ```
/// use grammask::structural_tag::{read_xml_arguments, XmlStyle};
/// let schema = serde_json::json!({"type": "object", "properties": {
///     "city": {"type": "string"}, "days": {"type": "integer"}}});
/// let text = "<parameter=city>São Paulo</parameter>\n<parameter=days>\n3\n</parameter>\n</function>";
/// let (args, used) = read_xml_arguments(XmlStyle::Qwen, &schema, text)?;
/// assert_eq!(serde_json::Value::Object(args), serde_json::json!({"city": "São Paulo", "days": 3}));
/// assert_eq!(&text[used..], "\n</function>");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_xml_arguments(
    style: XmlStyle,
    schema: &Value,
    text: &str,
) -> Result<(Map<String, Value>, usize), XmlReadError> {
    let Some(m) = style.markers() else {
        return Err(read_err(
            0,
            format!("a style this reader knows (`{}` is not supported yet)", style.name()),
        ));
    };
    let mut args = Map::new();
    let mut pos = 0;
    let mut end = 0;
    loop {
        let start = skip_ws(text, pos);
        // (A MiniMax-M3 closing tag, `]<]minimax[>[</…`, also starts with its opening.)
        if !text[start..].starts_with(m.open) || text[start + m.open.len()..].starts_with('/') {
            break;
        }
        let key_start = start + m.open.len();
        let key_stop = m.key_end;
        let key_len = text[key_start..]
            .find(key_stop)
            .ok_or_else(|| read_err(key_start, format!("an argument name ended by `{key_stop}`")))?;
        let key = &text[key_start..key_start + key_len];
        let mut p = key_start + key_len;
        let schema_of = value_schema(schema, key);
        let sp = split(schema, schema_of, "", 0).unwrap_or_else(|_| any_value());
        // After the name: what tells the value's form, up to the value's first byte.
        let mut forced: Option<bool> = None; // Some(true): raw string; Some(false): JSON
        match m.mid {
            Mid::Fixed(mid) => p = expect(text, p, mid)?,
            Mid::Glm => {
                p = expect(text, p, "</arg_key>")?;
                p = expect(text, skip_ws(text, p), "<arg_value>")?;
            }
            Mid::M3 => {
                let (value, after) = read_m3_value(schema, schema_of, text, p + 1, 0)?;
                let after = expect(text, after, &format!("{M3_NS}</{key}>"))?;
                args.insert(key.to_string(), value);
                pos = after;
                end = after;
                continue;
            }
            Mid::Kimi => {
                p = expect(text, p, "\" type=\"")?;
                let q = text[p..].find('"').ok_or_else(|| read_err(p, "a type name ended by `\"`"))?;
                p = expect(text, p + q, "\"<|sep|>")?;
            }
            Mid::Deepseek => {
                if text[p..].starts_with("\" string=\"true\">") {
                    forced = Some(true);
                    p += "\" string=\"true\">".len();
                } else {
                    p = expect(text, p, "\" string=\"false\">")?;
                    forced = Some(false);
                }
            }
        }
        let (value, after) = read_value(text, p, &m, &sp, forced)?;
        args.insert(key.to_string(), value);
        pos = after;
        end = after;
    }
    Ok((args, end))
}

/// A MiniMax-M3 value at `p` (right after `<KEY>`) of `schema` (`root`'s definitions):
/// nested arguments, `<item>` elements, or text up to the next marker. Returns the value
/// and the offset of its closing marker.
fn read_m3_value(
    root: &Value,
    schema: &Value,
    text: &str,
    p: usize,
    depth: usize,
) -> Result<(Value, usize), XmlReadError> {
    if depth > 32 {
        return Err(read_err(p, "a value nested at most 32 deep"));
    }
    let s = resolve(root, schema, "").unwrap_or(&TRUE);
    let types: Vec<String> = match s {
        Value::Object(m) => match m.get("type") {
            Some(Value::String(t)) => vec![t.clone()],
            Some(Value::Array(a)) => a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect(),
            _ if m.contains_key("properties") => vec!["object".into()],
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    let next = skip_ws(text, p);
    let opens_element = text[next..].starts_with(M3_NS) && !text[next..].starts_with(&format!("{M3_NS}</"));
    let has = |t: &str| types.iter().any(|x| x == t);
    let item_next = text[next..].starts_with(&format!("{M3_NS}<item>"));
    if has("array") && (item_next || (types.len() == 1 && !opens_element)) {
        let items = s.get("items").unwrap_or(&TRUE);
        let mut out = Vec::new();
        let mut q = p;
        loop {
            let at = skip_ws(text, q);
            let open = format!("{M3_NS}<item>");
            if !text[at..].starts_with(&open) {
                break;
            }
            let (v, after) = read_m3_value(root, items, text, at + open.len(), depth + 1)?;
            q = expect(text, after, &format!("{M3_NS}</item>"))?;
            out.push(v);
        }
        let end = if out.is_empty() { p } else { skip_ws(text, q) };
        return Ok((Value::Array(out), end));
    }
    if has("object") && (opens_element || types.len() == 1) {
        let mut obj = Map::new();
        let mut q = p;
        let mut end = p;
        loop {
            let at = skip_ws(text, q);
            if !text[at..].starts_with(M3_NS) || text[at..].starts_with(&format!("{M3_NS}</")) {
                break;
            }
            let k0 = at + M3_NS.len() + 1;
            let klen = text[k0..].find('>').ok_or_else(|| read_err(k0, "an argument name ended by `>`"))?;
            let key = &text[k0..k0 + klen];
            let (v, after) = read_m3_value(root, value_schema(s, key), text, k0 + klen + 1, depth + 1)?;
            q = expect(text, after, &format!("{M3_NS}</{key}>"))?;
            obj.insert(key.to_string(), v);
            end = skip_ws(text, q);
        }
        return Ok((Value::Object(obj), end));
    }
    let len = text[p..].find(M3_NS).ok_or_else(|| read_err(text.len(), format!("`{M3_NS}`")))?;
    let raw = &text[p..p + len];
    let string_ok = types.is_empty() || has("string");
    let only_string = types.len() == 1 && has("string");
    if !only_string {
        if let Ok(v) = serde_json::from_str::<Value>(raw) {
            if !v.is_string() {
                return Ok((v, p + len));
            }
        }
    }
    if !string_ok {
        return Err(read_err(p, "a JSON scalar"));
    }
    Ok((Value::String(raw.to_string()), p + len))
}

/// The schema of argument `key` in `schema` (declared, additional, or any).
fn value_schema<'a>(schema: &'a Value, key: &str) -> &'a Value {
    let mut out = Vec::new();
    if plans(schema, schema, "", &mut out, 0).is_err() {
        return &TRUE;
    }
    for plan in &out {
        if let Some(m) = plan.members.iter().find(|m| m.0 == key) {
            return m.1;
        }
    }
    out.iter().find_map(|p| p.extra).unwrap_or(&TRUE)
}

fn skip_ws(text: &str, mut p: usize) -> usize {
    while text.as_bytes().get(p).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        p += 1;
    }
    p
}

fn expect(text: &str, p: usize, s: &str) -> Result<usize, XmlReadError> {
    if text[p..].starts_with(s) {
        Ok(p + s.len())
    } else {
        Err(read_err(p, format!("`{s}`")))
    }
}

/// The value starting at `p`, and the offset after its closing marker.
fn read_value(
    text: &str,
    p: usize,
    m: &Markers,
    sp: &Split,
    forced: Option<bool>,
) -> Result<(Value, usize), XmlReadError> {
    let close = m.close;
    let want_json = forced != Some(true) && (forced == Some(false) || !sp.json.is_empty());
    if want_json {
        let start = skip_ws(text, p);
        let mut it = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        if let Some(Ok(v)) = it.next() {
            let after = skip_ws(text, start + it.byte_offset());
            if (!v.is_string() || forced == Some(false)) && text[after..].starts_with(close) {
                return Ok((v, after + close.len()));
            }
        }
        // serde's stream reader wants a delimiter after a bare number or literal
        // (`1</parameter>` fails there): read the text up to the closing marker whole.
        if let Some(len) = text[start..].find(close) {
            if let Ok(v) = serde_json::from_str::<Value>(text[start..start + len].trim_end()) {
                if !v.is_string() || forced == Some(false) {
                    return Ok((v, start + len + close.len()));
                }
            }
        }
        if forced == Some(false) {
            return Err(read_err(start, format!("a JSON value followed by `{close}`")));
        }
    }
    let len = text[p..].find(close).ok_or_else(|| read_err(text.len(), format!("`{close}`")))?;
    let mut raw = &text[p..p + len];
    if m.newlines && forced.is_none() {
        raw = raw.strip_prefix('\n').unwrap_or(raw);
        raw = raw.strip_suffix('\n').unwrap_or(raw);
    }
    Ok((Value::String(raw.to_string()), p + len + close.len()))
}
