//! Structural tag JSON → [`Node`] tree, every value checked and located by JSON pointer.
//!
//! The field names, defaults and per-format rules follow XGrammar 0.2.8's pydantic models
//! (`xgrammar/structural_tag.py`), with one deliberate difference: a field a format does
//! not define is an error here (pydantic ignores it), because a misspelt `stop_after_frist`
//! would otherwise silently change the language.

use super::error::{child, StructuralTagError as Error, StructuralTagErrorKind as Kind};
use super::xml::XmlStyle;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// Deepest nesting of formats accepted; each level is a stack frame in the parser and in
/// the lowering (serde_json stops at 128 levels of JSON anyway).
pub(crate) const MAX_DEPTH: usize = 64;

/// Largest `repeat` bound (the same as an EBNF `{m,n}`'s default limit).
pub(crate) const MAX_REPEAT: u32 = 10_000;

/// A format and where it was written.
#[derive(Debug, Clone)]
pub(crate) struct Node<'a> {
    pub format: Format<'a>,
    pub pointer: String,
}

/// `begin content end`.
#[derive(Debug, Clone)]
pub(crate) struct Tag<'a> {
    pub begin: String,
    pub content: Box<Node<'a>>,
    /// At least one; any of them ends the tag.
    pub ends: Vec<String>,
    pub pointer: String,
}

/// The format types grammask lowers (the others are refused while parsing).
#[derive(Debug, Clone)]
pub(crate) enum Format<'a> {
    ConstString(String),
    /// `style`: `None` for JSON, else the XML argument style.
    JsonSchema {
        /// Borrowed from the document's JSON (a tag with 20 tools cloned 20 schemas).
        schema: Cow<'a, Value>,
        any_order: bool,
        max_whitespace: Option<u32>,
        style: Option<XmlStyle>,
    },
    Regex(String),
    Grammar(String),
    AnyText {
        excludes: Vec<String>,
    },
    Sequence(Vec<Node<'a>>),
    Or(Vec<Node<'a>>),
    Repeat {
        content: Box<Node<'a>>,
        min: u32,
        max: Option<u32>,
    },
    Tag(Tag<'a>),
    TriggeredTags {
        triggers: Vec<String>,
        tags: Vec<Tag<'a>>,
        at_least_one: bool,
        stop_after_first: bool,
        excludes: Vec<String>,
    },
    TagsWithSeparator {
        tags: Vec<Tag<'a>>,
        separator: String,
        at_least_one: bool,
        stop_after_first: bool,
    },
    /// `(pattern, format)` rules; `repeat`: XGrammar's `loop`.
    Dispatch {
        rules: Vec<(String, Node<'a>)>,
        repeat: bool,
        excludes: Vec<String>,
    },
}

impl<'a> Node<'a> {
    /// The same tree owning its schemas, to outlive the document's JSON (an output
    /// parser keeps it).
    pub(crate) fn into_owned(self) -> Node<'static> {
        fn tag(t: Tag<'_>) -> Tag<'static> {
            Tag {
                begin: t.begin,
                content: Box::new(t.content.into_owned()),
                ends: t.ends,
                pointer: t.pointer,
            }
        }
        fn tags(v: Vec<Tag<'_>>) -> Vec<Tag<'static>> {
            v.into_iter().map(tag).collect()
        }
        fn nodes(v: Vec<Node<'_>>) -> Vec<Node<'static>> {
            v.into_iter().map(Node::into_owned).collect()
        }
        let format = match self.format {
            Format::ConstString(s) => Format::ConstString(s),
            Format::JsonSchema { schema, any_order, max_whitespace, style } => Format::JsonSchema {
                schema: Cow::Owned(schema.into_owned()),
                any_order,
                max_whitespace,
                style,
            },
            Format::Regex(s) => Format::Regex(s),
            Format::Grammar(s) => Format::Grammar(s),
            Format::AnyText { excludes } => Format::AnyText { excludes },
            Format::Sequence(v) => Format::Sequence(nodes(v)),
            Format::Or(v) => Format::Or(nodes(v)),
            Format::Repeat { content, min, max } => {
                Format::Repeat { content: Box::new(content.into_owned()), min, max }
            }
            Format::Tag(t) => Format::Tag(tag(t)),
            Format::TriggeredTags { triggers, tags: t, at_least_one, stop_after_first, excludes } => {
                Format::TriggeredTags { triggers, tags: tags(t), at_least_one, stop_after_first, excludes }
            }
            Format::TagsWithSeparator { tags: t, separator, at_least_one, stop_after_first } => {
                Format::TagsWithSeparator { tags: tags(t), separator, at_least_one, stop_after_first }
            }
            Format::Dispatch { rules, repeat, excludes } => Format::Dispatch {
                rules: rules.into_iter().map(|(p, n)| (p, n.into_owned())).collect(),
                repeat,
                excludes,
            },
        };
        Node { format, pointer: self.pointer }
    }

    /// The node's direct parts: the tags it holds and its other sub-formats (a tag's
    /// content is reached through the tag) — one walk for every pass over the tree.
    pub(crate) fn parts(&self) -> (Vec<&Tag<'a>>, Vec<&Node<'a>>) {
        match &self.format {
            Format::Tag(t) => (vec![t], Vec::new()),
            Format::TriggeredTags { tags, .. } | Format::TagsWithSeparator { tags, .. } => {
                (tags.iter().collect(), Vec::new())
            }
            Format::Sequence(v) | Format::Or(v) => (Vec::new(), v.iter().collect()),
            Format::Repeat { content, .. } => (Vec::new(), vec![content]),
            Format::Dispatch { rules, .. } => (Vec::new(), rules.iter().map(|(_, c)| c).collect()),
            _ => (Vec::new(), Vec::new()),
        }
    }
}

type R<T> = Result<T, Error>;

/// A structural tag document's JSON, for [`parse_document`].
pub(crate) fn parse_json(text: &str) -> R<Value> {
    serde_json::from_str(text).map_err(|e| {
        Error::new("", Kind::InvalidJson { line: e.line(), column: e.column(), message: e.to_string() })
    })
}

/// Parses a structural tag document: `{"type": "structural_tag", "format": …}` or the
/// older `{"type": "structural_tag", "structures": [{begin, schema, end}], "triggers": […]}`.
/// The tree borrows its JSON schemas from `value`.
pub(crate) fn parse_document(value: &Value) -> R<Node<'_>> {
    let mut top = Obj::new(value, "")?;
    if let Some(t) = top.opt("type") {
        if t.as_str() != Some("structural_tag") {
            return Err(Error::new(
                &child("", "type"),
                Kind::InvalidValue("the document's `type` must be \"structural_tag\"".into()),
            ));
        }
    }
    let node = if top.has("format") {
        let (v, p) = top.req("format")?;
        format(v, &p, 0)?
    } else if top.has("structures") {
        legacy(&mut top)?
    } else {
        return Err(Error::new("", Kind::MissingField("format".into())));
    };
    top.finish()?;
    Ok(node)
}

/// The older form: a triggered-tags format whose tags hold JSON schemas.
fn legacy<'a>(top: &mut Obj<'a>) -> R<Node<'a>> {
    let (items, items_ptr) = top.req("structures")?;
    let items = array(items, &items_ptr)?;
    let mut tags = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let ptr = child(&items_ptr, &i.to_string());
        let mut o = Obj::new(item, &ptr)?;
        let begin = o.string("begin")?;
        let end = o.string("end")?;
        let (schema, schema_ptr) = o.req("schema")?;
        // The schema may be written as JSON text, as XGrammar's Python API allows.
        let schema = match schema {
            Value::String(s) => Cow::Owned(serde_json::from_str(s).map_err(|e| {
                Error::new(
                    &schema_ptr,
                    Kind::InvalidJson { line: e.line(), column: e.column(), message: e.to_string() },
                )
            })?),
            v @ (Value::Object(_) | Value::Bool(_)) => Cow::Borrowed(v),
            _ => {
                return Err(Error::new(
                    &schema_ptr,
                    Kind::WrongType { expected: "a JSON schema (object, boolean or JSON text)" },
                ))
            }
        };
        o.finish()?;
        let content = Node {
            format: Format::JsonSchema { schema, any_order: false, max_whitespace: None, style: None },
            pointer: schema_ptr,
        };
        tags.push(Tag { begin, content: Box::new(content), ends: vec![end], pointer: ptr });
    }
    let (triggers, triggers_ptr) = top.req("triggers")?;
    let triggers = strings(triggers, &triggers_ptr)?;
    let format = triggered(triggers, &triggers_ptr, tags, false, false, Vec::new())?;
    Ok(Node { format, pointer: String::new() })
}

/// One format object.
fn format<'a>(v: &'a Value, ptr: &str, depth: usize) -> R<Node<'a>> {
    if depth > MAX_DEPTH {
        return Err(Error::new(
            ptr,
            Kind::Limit { what: "format nesting depth", given: depth, limit: MAX_DEPTH },
        ));
    }
    let mut o = Obj::new(v, ptr)?;
    let ty = o.string("type")?;
    let sub = |o: &mut Obj<'a>, name: &'static str| -> R<Box<Node<'a>>> {
        let (v, p) = o.req(name)?;
        Ok(Box::new(format(v, &p, depth + 1)?))
    };
    let f = match ty.as_str() {
        "const_string" => Format::ConstString(o.string("value")?),
        "json_schema" => json_schema(&mut o)?,
        "regex" => Format::Regex(o.string("pattern")?),
        "grammar" => Format::Grammar(o.string("grammar")?),
        "any_text" => {
            let excludes = o.excludes()?;
            o.refuse_if_set("max_tokens", "a token budget needs the matcher to count tokens per region")?;
            o.refuse_if_set("max_chars", "a character budget on free text is not lowered yet")?;
            Format::AnyText { excludes }
        }
        "sequence" | "or" => {
            let (els, els_ptr) = o.req("elements")?;
            let els = array(els, &els_ptr)?;
            if els.is_empty() {
                return Err(Error::new(
                    &els_ptr,
                    Kind::InvalidValue(format!("a `{ty}` needs at least one element")),
                ));
            }
            let nodes = els
                .iter()
                .enumerate()
                .map(|(i, e)| format(e, &child(&els_ptr, &i.to_string()), depth + 1))
                .collect::<R<Vec<_>>>()?;
            if ty == "sequence" {
                Format::Sequence(nodes)
            } else {
                Format::Or(nodes)
            }
        }
        "optional" => Format::Repeat { content: sub(&mut o, "content")?, min: 0, max: Some(1) },
        "star" => Format::Repeat { content: sub(&mut o, "content")?, min: 0, max: None },
        "plus" => Format::Repeat { content: sub(&mut o, "content")?, min: 1, max: None },
        "repeat" => {
            let (min_v, min_ptr) = o.req("min")?;
            let min = bound(min_v, &min_ptr, false)?.unwrap_or(0);
            let (max_v, max_ptr) = o.req("max")?;
            let max = bound(max_v, &max_ptr, true)?;
            if max.is_some_and(|m| m < min) {
                return Err(Error::new(
                    &max_ptr,
                    Kind::InvalidValue(format!("`max` is below `min` ({min})")),
                ));
            }
            Format::Repeat { content: sub(&mut o, "content")?, min, max }
        }
        "tag" => Format::Tag(tag_fields(&mut o, ptr, depth)?),
        "triggered_tags" => {
            let (t, t_ptr) = o.req("triggers")?;
            let triggers = strings(t, &t_ptr)?;
            // Checked before the tags, so that `"triggers": [], "tags": []` names the
            // triggers (as XGrammar does).
            if triggers.is_empty() {
                return Err(Error::new(&t_ptr, Kind::EmptyTriggers));
            }
            let tags = o.tags(depth)?;
            let at_least_one = o.bool_or("at_least_one", false)?;
            let stop_after_first = o.bool_or("stop_after_first", false)?;
            let excludes = o.excludes()?;
            triggered(triggers, &t_ptr, tags, at_least_one, stop_after_first, excludes)?
        }
        "tags_with_separator" => {
            let tags = o.tags(depth)?;
            Format::TagsWithSeparator {
                tags,
                separator: o.string("separator")?,
                at_least_one: o.bool_or("at_least_one", false)?,
                stop_after_first: o.bool_or("stop_after_first", false)?,
            }
        }
        "dispatch" => dispatch(&mut o, depth)?,
        "any_tokens" | "token" | "exclude_token" | "token_triggered_tags" | "token_dispatch" => {
            return Err(unsupported(
                &child(ptr, "type"),
                &format!("format `{ty}`"),
                "token-level formats need the matcher to accept special tokens by id; use string formats",
            ))
        }
        // Deprecated in XGrammar: `json_schema` with `style: "qwen_xml"`.
        "qwen_xml_parameter" => {
            let (schema, schema_ptr) = o.req("json_schema")?;
            Format::JsonSchema {
                schema: Cow::Borrowed(schema_value(schema, &schema_ptr)?),
                any_order: false,
                max_whitespace: None,
                style: Some(XmlStyle::Qwen),
            }
        }
        _ => return Err(Error::new(&child(ptr, "type"), Kind::UnknownFormat(ty))),
    };
    o.finish()?;
    Ok(Node { format: f, pointer: ptr.to_string() })
}

fn schema_value<'a>(schema: &'a Value, ptr: &str) -> R<&'a Value> {
    if matches!(schema, Value::Object(_) | Value::Bool(_)) {
        Ok(schema)
    } else {
        Err(Error::new(ptr, Kind::WrongType { expected: "a JSON schema (object or boolean)" }))
    }
}

fn json_schema<'a>(o: &mut Obj<'a>) -> R<Format<'a>> {
    let (schema, schema_ptr) = o.req("json_schema")?;
    let schema = schema_value(schema, &schema_ptr)?;
    let style = match o.opt_with_ptr("style") {
        None => None,
        Some((style, style_ptr)) => match style.as_str() {
            Some("json") => None,
            Some(s) => match XmlStyle::from_name(s) {
                Some(x) => Some(x),
                None => {
                    return Err(Error::new(&style_ptr, Kind::InvalidValue(format!("unknown style `{s}`"))))
                }
            },
            None => return Err(Error::new(&style_ptr, Kind::WrongType { expected: "a string" })),
        },
    };
    let any_order = o.bool_or("any_order", false)?;
    let max_whitespace = match o.opt_with_ptr("max_whitespace_cnt") {
        None | Some((Value::Null, _)) => None,
        Some((v, p)) => {
            Some(v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|&n| n < u32::MAX).ok_or_else(
                || Error::new(&p, Kind::WrongType { expected: "a non-negative integer or null" }),
            )?)
        }
    };
    if let Some((v, p)) = o.opt_with_ptr("excludes") {
        if !strings(v, &p)?.is_empty() {
            return Err(unsupported(
                &p,
                "`excludes` in `json_schema`",
                "substrings are not filtered out of JSON strings",
            ));
        }
    }
    Ok(Format::JsonSchema { schema: Cow::Borrowed(schema), any_order, max_whitespace, style })
}

fn dispatch<'a>(o: &mut Obj<'a>, depth: usize) -> R<Format<'a>> {
    let (rules_v, rules_ptr) = o.req("rules")?;
    let mut rules = Vec::new();
    for (i, r) in array(rules_v, &rules_ptr)?.iter().enumerate() {
        let p = child(&rules_ptr, &i.to_string());
        let pair = match r.as_array() {
            Some(a) if a.len() == 2 => a,
            _ => return Err(Error::new(&p, Kind::WrongType { expected: "a [pattern, format] pair" })),
        };
        let pat_ptr = child(&p, "0");
        let pattern = pair[0]
            .as_str()
            .ok_or_else(|| Error::new(&pat_ptr, Kind::WrongType { expected: "a string" }))?
            .to_string();
        if pattern.is_empty() {
            return Err(Error::new(
                &pat_ptr,
                Kind::InvalidValue("a dispatch pattern must not be empty".into()),
            ));
        }
        rules.push((pattern, format(&pair[1], &child(&p, "1"), depth + 1)?));
    }
    let patterns: Vec<String> = rules.iter().map(|(p, _)| p.clone()).collect();
    check_prefix_free(&patterns, &rules_ptr)?;
    Ok(Format::Dispatch { rules, repeat: o.bool_or("loop", true)?, excludes: o.excludes()? })
}

/// The checks of a triggered-tags format: triggers non-empty, none a prefix of another,
/// every tag begun by exactly one trigger and every trigger beginning some tag.
fn triggered<'a>(
    triggers: Vec<String>,
    triggers_ptr: &str,
    tags: Vec<Tag<'a>>,
    at_least_one: bool,
    stop_after_first: bool,
    excludes: Vec<String>,
) -> R<Format<'a>> {
    if triggers.is_empty() {
        return Err(Error::new(triggers_ptr, Kind::EmptyTriggers));
    }
    for (i, t) in triggers.iter().enumerate() {
        if t.is_empty() {
            return Err(Error::new(
                &child(triggers_ptr, &i.to_string()),
                Kind::InvalidValue("a trigger must not be empty".into()),
            ));
        }
    }
    check_prefix_free(&triggers, triggers_ptr)?;
    if tags.is_empty() {
        return Err(Error::new(
            triggers_ptr,
            Kind::InvalidValue("a `triggered_tags` needs at least one tag".into()),
        ));
    }
    for tag in &tags {
        if !triggers.iter().any(|t| tag.begin.starts_with(t.as_str())) {
            return Err(Error::new(
                &child(&tag.pointer, "begin"),
                Kind::TagWithoutTrigger { begin: tag.begin.clone() },
            ));
        }
    }
    for (i, t) in triggers.iter().enumerate() {
        if !tags.iter().any(|tag| tag.begin.starts_with(t.as_str())) {
            return Err(Error::new(
                &child(triggers_ptr, &i.to_string()),
                Kind::TriggerWithoutTag { trigger: t.clone() },
            ));
        }
    }
    Ok(Format::TriggeredTags { triggers, tags, at_least_one, stop_after_first, excludes })
}

/// No string of `list` is a prefix of another (equal strings included).
fn check_prefix_free(list: &[String], ptr: &str) -> R<()> {
    for (i, a) in list.iter().enumerate() {
        for (j, b) in list.iter().enumerate() {
            if i != j && b.starts_with(a.as_str()) && (a.len() < b.len() || i < j) {
                return Err(Error::new(
                    &child(ptr, &i.to_string()),
                    Kind::TriggerIsPrefix { trigger: a.clone(), of: b.clone() },
                ));
            }
        }
    }
    Ok(())
}

/// The fields of a tag (from `o`, an object at `ptr`).
fn tag_fields<'a>(o: &mut Obj<'a>, ptr: &str, depth: usize) -> R<Tag<'a>> {
    let (begin_v, begin_ptr) = o.req("begin")?;
    let begin = match begin_v {
        Value::String(s) => s.clone(),
        Value::Object(_) => {
            return Err(unsupported(
                &begin_ptr,
                "a `token` format as tag begin",
                "special-token markers need matcher support",
            ))
        }
        _ => return Err(Error::new(&begin_ptr, Kind::WrongType { expected: "a string" })),
    };
    let (content_v, content_ptr) = o.req("content")?;
    let content = Box::new(format(content_v, &content_ptr, depth + 1)?);
    let (end_v, end_ptr) = o.req("end")?;
    let ends = match end_v {
        Value::String(s) => vec![s.clone()],
        Value::Array(_) => {
            let ends = strings(end_v, &end_ptr)?;
            if ends.is_empty() {
                return Err(Error::new(
                    &end_ptr,
                    Kind::InvalidValue("the `end` list must not be empty".into()),
                ));
            }
            ends
        }
        Value::Object(_) => {
            return Err(unsupported(
                &end_ptr,
                "a `token` format as tag end",
                "special-token markers need matcher support",
            ))
        }
        _ => return Err(Error::new(&end_ptr, Kind::WrongType { expected: "a string or a list of strings" })),
    };
    Ok(Tag { begin, content, ends, pointer: ptr.to_string() })
}

fn unsupported(ptr: &str, what: &str, detail: &str) -> Error {
    Error::new(ptr, Kind::Unsupported { what: what.to_string(), detail: detail.to_string() })
}

fn array<'a>(v: &'a Value, ptr: &str) -> R<&'a Vec<Value>> {
    v.as_array().ok_or_else(|| Error::new(ptr, Kind::WrongType { expected: "a list" }))
}

fn strings(v: &Value, ptr: &str) -> R<Vec<String>> {
    array(v, ptr)?
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str().map(str::to_string).ok_or_else(|| {
                Error::new(&child(ptr, &i.to_string()), Kind::WrongType { expected: "a string" })
            })
        })
        .collect()
}

/// A repetition bound: a non-negative integer, or -1 (unbounded) where `allow_unbounded`.
fn bound(v: &Value, ptr: &str, allow_unbounded: bool) -> R<Option<u32>> {
    match v.as_i64() {
        Some(-1) if allow_unbounded => Ok(None),
        Some(n) if n >= 0 => {
            if n > MAX_REPEAT as i64 {
                let given = usize::try_from(n).unwrap_or(usize::MAX);
                return Err(Error::new(
                    ptr,
                    Kind::Limit { what: "repeat bound", given, limit: MAX_REPEAT as usize },
                ));
            }
            Ok(Some(n as u32))
        }
        _ => Err(Error::new(
            ptr,
            Kind::WrongType {
                expected: if allow_unbounded {
                    "a non-negative integer or -1"
                } else {
                    "a non-negative integer"
                },
            },
        )),
    }
}

/// A JSON object being read: fields taken are remembered, so that [`Obj::finish`] can
/// report the first field nobody asked for.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    ptr: String,
    used: Vec<&'static str>,
}

impl<'a> Obj<'a> {
    fn new(v: &'a Value, ptr: &str) -> R<Self> {
        match v {
            Value::Object(map) => Ok(Self { map, ptr: ptr.to_string(), used: Vec::new() }),
            _ => Err(Error::new(ptr, Kind::WrongType { expected: "an object" })),
        }
    }

    fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    fn opt(&mut self, name: &'static str) -> Option<&'a Value> {
        self.used.push(name);
        self.map.get(name)
    }

    fn opt_with_ptr(&mut self, name: &'static str) -> Option<(&'a Value, String)> {
        let v = self.opt(name)?;
        Some((v, child(&self.ptr, name)))
    }

    fn req(&mut self, name: &'static str) -> R<(&'a Value, String)> {
        match self.opt_with_ptr(name) {
            Some(found) => Ok(found),
            None => Err(Error::new(&self.ptr, Kind::MissingField(name.into()))),
        }
    }

    fn string(&mut self, name: &'static str) -> R<String> {
        let (v, p) = self.req(name)?;
        v.as_str().map(str::to_string).ok_or_else(|| Error::new(&p, Kind::WrongType { expected: "a string" }))
    }

    fn bool_or(&mut self, name: &'static str, default: bool) -> R<bool> {
        match self.opt_with_ptr(name) {
            None => Ok(default),
            Some((v, p)) => {
                v.as_bool().ok_or_else(|| Error::new(&p, Kind::WrongType { expected: "a boolean" }))
            }
        }
    }

    /// `excludes`: a list of non-empty strings (default empty).
    fn excludes(&mut self) -> R<Vec<String>> {
        let Some((v, p)) = self.opt_with_ptr("excludes") else { return Ok(Vec::new()) };
        let list = strings(v, &p)?;
        if let Some(i) = list.iter().position(String::is_empty) {
            return Err(Error::new(
                &child(&p, &i.to_string()),
                Kind::InvalidValue("an exclude must not be empty".into()),
            ));
        }
        Ok(list)
    }

    /// `tags`: a non-empty list of tag objects (their `type` may be left out).
    fn tags(&mut self, depth: usize) -> R<Vec<Tag<'a>>> {
        let (v, p) = self.req("tags")?;
        let items = array(v, &p)?;
        if items.is_empty() {
            return Err(Error::new(&p, Kind::InvalidValue("`tags` must not be empty".into())));
        }
        let mut tags = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let ptr = child(&p, &i.to_string());
            let mut o = Obj::new(item, &ptr)?;
            if let Some((t, tp)) = o.opt_with_ptr("type") {
                if t.as_str() != Some("tag") {
                    return Err(Error::new(
                        &tp,
                        Kind::InvalidValue("an element of `tags` must be a `tag`".into()),
                    ));
                }
            }
            tags.push(tag_fields(&mut o, &ptr, depth + 1)?);
            o.finish()?;
        }
        Ok(tags)
    }

    /// A typed error if an optional field is present and not null.
    fn refuse_if_set(&mut self, name: &'static str, detail: &str) -> R<()> {
        match self.opt_with_ptr(name) {
            None | Some((Value::Null, _)) => Ok(()),
            Some((_, p)) => Err(unsupported(&p, &format!("`{name}`"), detail)),
        }
    }

    /// The first field not read is an error.
    fn finish(self) -> R<()> {
        match self.map.keys().find(|k| !self.used.contains(&k.as_str())) {
            Some(k) => Err(Error::new(&child(&self.ptr, k), Kind::UnknownField(k.clone()))),
            None => Ok(()),
        }
    }
}
