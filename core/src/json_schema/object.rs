//! `type: object`: `properties`, `required`, `additionalProperties`,
//! `patternProperties`, `propertyNames`, `minProperties`, `maxProperties`.
//!
//! Each declared member (and each name that is `required` but not declared) is one rule,
//! `"key": value`. By default ([`PropertyOrder::Any`]) the object is one rule carrying a
//! [`MemberSet`]: its members and extra members (pattern and additional properties) in
//! any order, each declared one at most once, every required one present, the count
//! within `minProperties`/`maxProperties` — the parser tracks what an object has written
//! (see [`crate::grammar::MemberSet`]), so this costs one rule, not one per subset of
//! members, whatever their number. With [`PropertyOrder::Schema`] the members come in
//! schema order, then the extra ones;
//! commas are placed exactly by building the list back to front with two families of
//! rules:
//! - `first(i)`: members `i..` when nothing has been written yet (no leading comma);
//! - `rest(i, c)`: members `i..`, each preceded by a comma, after `c` members
//!   (`c` saturates at the largest count that matters for min/maxProperties).
//!
//! Extra member keys exclude the declared names (a trie complement, [`KeySet`]);
//! with `propertyNames` or `patternProperties` keys follow those schemas instead and the
//! exclusion is not applied.
//!
//! [`PropertyOrder::Any`]: super::PropertyOrder::Any
//! [`PropertyOrder::Schema`]: super::PropertyOrder::Schema
//! [`MemberSet`]: crate::grammar::MemberSet

use super::string;
use super::types::Builder;
use super::whitespace::{alt, is_nothing, lit, nothing, seq};
use super::PropertyOrder;
use super::SchemaError;
use crate::grammar::{Expr, MemberSet, RuleId};
use crate::regex::keyset::{Component, KeySet};
use rustc_hash::FxHashMap;
use serde_json::{json, Map, Value};
use std::borrow::Cow;

/// JSON string bodies (no quotes) whose decoded value is not one of `names`.
struct Plan {
    members: Vec<(Expr, bool)>,
    extra: Option<Expr>,
    min: u64,
    max: Option<u64>,
    counting: bool,
    memo: FxHashMap<(usize, u64), crate::grammar::RuleId>,
    level: u32,
}

impl Plan {
    fn cap(&self) -> u64 {
        self.max.map_or(self.min, |m| m + 1)
    }

    fn rest(&mut self, b: &mut Builder, i: usize, c: u64, ptr: &str) -> Result<Expr, SchemaError> {
        let c = c.min(self.cap());
        if self.max.is_some_and(|m| c > m) {
            return Ok(nothing());
        }
        let comma = b.layout.comma(self.level);
        if i == self.members.len() {
            let need = self.min.saturating_sub(c);
            let most = self.max.map(|m| m - c);
            return Ok(match &self.extra {
                Some(x) if most != Some(0) => Expr::Repeat {
                    expr: Box::new(seq(vec![comma, x.clone()])),
                    min: need.min(u32::MAX as u64) as u32,
                    max: most.map(|m| m.min(u32::MAX as u64) as u32),
                },
                _ if need > 0 => nothing(),
                _ => Expr::Empty,
            });
        }
        if !self.counting {
            let next = self.rest_rule(b, i + 1, c, ptr)?;
            let (m, req) = self.members[i].clone();
            let one = seq(vec![comma, m]);
            return Ok(if req {
                seq(vec![one, next])
            } else {
                seq(vec![Expr::Repeat { expr: Box::new(one), min: 0, max: Some(1) }, next])
            });
        }
        let (m, req) = self.members[i].clone();
        let with = seq(vec![comma, m, self.rest_rule(b, i + 1, c + 1, ptr)?]);
        Ok(if req { with } else { alt(vec![with, self.rest_rule(b, i + 1, c, ptr)?]) })
    }

    fn rest_rule(&mut self, b: &mut Builder, i: usize, c: u64, ptr: &str) -> Result<Expr, SchemaError> {
        let c = c.min(self.cap());
        if i == self.members.len() {
            return self.rest(b, i, c, ptr);
        }
        if let Some(&id) = self.memo.get(&(i, c)) {
            return Ok(Expr::Rule(id));
        }
        let id = b.new_rule("obj_rest", ptr)?;
        self.memo.insert((i, c), id);
        let body = self.rest(b, i, c, ptr)?;
        b.rules[id.index()].body = body;
        Ok(Expr::Rule(id))
    }

    /// Members `i..` with nothing written yet.
    fn first(&mut self, b: &mut Builder, i: usize, ptr: &str) -> Result<Expr, SchemaError> {
        if i == self.members.len() {
            let comma = b.layout.comma(self.level);
            return Ok(match &self.extra {
                Some(x) if self.max != Some(0) => {
                    let tail = Expr::Repeat {
                        expr: Box::new(seq(vec![comma, x.clone()])),
                        min: self.min.saturating_sub(1).min(u32::MAX as u64) as u32,
                        max: self.max.map(|m| (m - 1).min(u32::MAX as u64) as u32),
                    };
                    let one = seq(vec![x.clone(), tail]);
                    if self.min == 0 {
                        alt(vec![Expr::Empty, one])
                    } else {
                        one
                    }
                }
                _ if self.min > 0 => nothing(),
                _ => Expr::Empty,
            });
        }
        let (m, req) = self.members[i].clone();
        let with = seq(vec![m, self.rest_rule(b, i + 1, 1, ptr)?]);
        Ok(if req { with } else { alt(vec![with, self.first(b, i + 1, ptr)?]) })
    }
}

/// The value schema of a key: the declared schema (if any) and every matching pattern's,
/// or `additional` when none applies. Borrowed when one schema applies (almost always):
/// copying every member's schema was a tenth of a tool schema's conversion.
fn member_schema<'v>(
    declared: Option<&'v Value>,
    patterns: impl Iterator<Item = (&'v str, &'v Value)>,
    additional: Option<&'v Value>,
) -> Option<Cow<'v, Value>> {
    let mut all: Vec<&Value> = declared.into_iter().chain(patterns.map(|(_, v)| v)).collect();
    match all.len() {
        0 => additional.map(Cow::Borrowed),
        1 => all.pop().map(Cow::Borrowed),
        _ => Some(Cow::Owned(json!({ "allOf": all }))),
    }
}

pub(crate) fn build(
    b: &mut Builder,
    m: &Map<String, Value>,
    ptr: &str,
    level: u32,
) -> Result<Expr, SchemaError> {
    b.check_level(level + 1, ptr)?;
    let empty = Map::new();
    let props = match m.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err(b.not_schema("`properties` must be an object", ptr)),
    };
    let required: Vec<&str> = match m.get("required") {
        None => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().ok_or_else(|| b.not_schema("`required` must be an array of strings", ptr)))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(b.not_schema("`required` must be an array of strings", ptr)),
    };
    let patterns = match m.get("patternProperties") {
        None => None,
        Some(Value::Object(p)) => Some(p),
        Some(_) => return Err(b.not_schema("`patternProperties` must be an object", ptr)),
    };
    let min = string::get_count(b, m, "minProperties", ptr)?.unwrap_or(0);
    let max = string::get_count(b, m, "maxProperties", ptr)?;
    let l = b.layout;
    // Strict mode closes objects that declare their members; an object schema that
    // declares none (`{"type": "object"}`) is a free-form map, not an empty object.
    let additional: Option<Value> = match m.get("additionalProperties") {
        Some(Value::Bool(false)) => None,
        Some(s @ (Value::Bool(true) | Value::Object(_))) => Some(s.clone()),
        Some(_) => return Err(b.not_schema("`additionalProperties` must be a schema", ptr)),
        None if b.opts.strict && (!props.is_empty() || patterns.is_some()) => None,
        None => Some(Value::Bool(true)),
    };
    // A name listed in `required` but not declared is declared by that listing: strict
    // mode (which only closes what the schema is silent about) gives it any value. With an
    // explicit `additionalProperties: false` such a schema is unsatisfiable, as written.
    let implicitly_closed = additional.is_none() && !m.contains_key("additionalProperties");
    let keys = KeyClasses::new(b, m, props, &required, patterns, additional.is_some(), ptr)?;
    // The value schema of a key of class `label`: the declared schema (if any), every
    // matching pattern's schema, and `additionalProperties` when neither applies.
    let value_of = |declared, label| member_schema(declared, keys.patterns_of(label), additional.as_ref());
    let mut members = Vec::new();
    let mut member_names: Vec<&str> = Vec::new();
    let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
    for r in &required {
        if !props.contains_key(*r) && !names.contains(r) {
            names.push(r);
        }
    }
    for name in &names {
        let req = required.contains(name);
        let label = keys.label_of(name);
        let vptr = match props.get(*name) {
            Some(_) => Builder::child(ptr, "properties", name),
            None => Builder::child(ptr, "required", name),
        };
        let value = value_of(props.get(*name), label)
            .or_else(|| (req && implicitly_closed).then_some(Cow::Owned(Value::Bool(true))));
        let v = match value.filter(|_| keys.names_ok(label)) {
            Some(s) => {
                let v = b.schema(&s, &vptr, level + 1)?;
                b.shared_value(v, &vptr)?
            }
            None => nothing(),
        };
        if is_nothing(&v) {
            if req {
                return Ok(nothing());
            }
            continue;
        }
        members.push((seq(vec![b.spelled(name)?, l.colon(), v]), req));
        member_names.push(name);
    }
    // Each member is one rule, not copies: in schema order a member is written after each
    // member that may precede it (the object's first member is any of them, and the
    // optimizer inlines chains of rest rules), and a member set names its members' rules.
    let mut member_rules = Vec::with_capacity(members.len());
    for m in members.iter_mut() {
        let id = b.new_rule("obj_member", ptr)?;
        b.rules[id.index()].keep = true;
        b.rules[id.index()].body = std::mem::replace(&mut m.0, Expr::Rule(id));
        member_rules.push((id, m.1));
    }
    // Extra members: one key class per label outside the declared names.
    let mut extras = Vec::new();
    for label in keys.labels() {
        if label & 1 != 0 || !keys.names_ok(label) {
            continue;
        }
        let Some(schema) = value_of(None, label) else { continue };
        let vptr = match keys.patterns_of(label).next() {
            Some((pat, _)) => Builder::child(ptr, "patternProperties", pat),
            None => format!("{ptr}/additionalProperties"),
        };
        let v = b.schema(&schema, &vptr, level + 1)?;
        if is_nothing(&v) {
            continue;
        }
        let key = match &keys.fallback_names {
            Some(pn) if label >> 1 == 0 => pn.clone(),
            _ => {
                let Some(body) = keys.rules(b, label, ptr)? else { continue };
                seq(vec![lit("\""), body, lit("\"")])
            }
        };
        extras.push(seq(vec![key, l.colon(), v]));
    }
    // One rule, referenced wherever extra members may come: its key automaton is written
    // in place (quotes, colon and value in the same automaton as the key), and the
    // optimizer decides whether it is small enough to copy.
    let extra = if extras.is_empty() { None } else { Some(b.rule_once_id(alt(extras), "obj_extra", ptr)?) };
    let nreq = members.iter().filter(|m| m.1).count() as u64;
    if max.is_some_and(|x| x < nreq || x < min) || (extra.is_none() && min > members.len() as u64) {
        return Ok(nothing());
    }
    let nullable = nreq == 0 && min == 0;
    let any_order = b.opts.property_order == PropertyOrder::Any && !members.is_empty();
    if any_order {
        let set = member_set(b, member_rules, extra, (min, max), level, ptr)?;
        return Ok(if nullable { alt(vec![l.empty('{', '}'), set]) } else { set });
    }
    let counting = min > 0 || max.is_some();
    let extra = extra.map(Expr::Rule);
    let mut plan = Plan { members, extra, min, max, counting, memo: FxHashMap::default(), level };
    let body = plan.first(b, 0, ptr)?;
    if is_nothing(&body) {
        return Ok(nothing());
    }
    let full = seq(vec![l.open('{', level), body, l.close('}', level)]);
    Ok(if nullable { alt(vec![l.empty('{', '}'), full]) } else { full })
}

/// The object as one rule carrying a [`MemberSet`]: `members` (each a rule, and whether
/// it is required) and extra members in any order, with at least one member. The
/// separator and the end are rules (the parser gates them); the optimizer keeps every
/// rule a set names.
fn member_set(
    b: &mut Builder,
    members: Vec<(RuleId, bool)>,
    extra: Option<RuleId>,
    (min, max): (u64, Option<u64>),
    level: u32,
    ptr: &str,
) -> Result<Expr, SchemaError> {
    let l = b.layout;
    let sep = b.rule_once_id(l.comma(level), "obj_sep", ptr)?;
    let close = b.rule_once_id(l.close('}', level), "obj_close", ptr)?;
    let clamp = |n: u64| n.min(u32::MAX as u64) as u32;
    let set = MemberSet { members, extra, sep, close, min: clamp(min), max: max.map(clamp) };
    let id = b.new_rule("obj", ptr)?;
    let rule = &mut b.rules[id.index()];
    rule.keep = true;
    rule.body = set.body(l.open('{', level));
    rule.members = Some(Box::new(set));
    Ok(Expr::Rule(id))
}

/// How the keys of one object schema split into classes (see [`crate::regex::keyset`]):
/// label bit 0 = a declared (or required) name, bits `1..=k` = pattern `i` matches,
/// the bits above = the parts of `propertyNames` every key must satisfy.
struct KeyClasses<'s> {
    /// `None` when every key is a declared name: no patterns, no `propertyNames`, no
    /// additional members (a closed object in strict mode, the common case, needs no
    /// key automaton).
    set: Option<KeySet>,
    patterns: Vec<(&'s str, &'s Value)>,
    /// Mask of the `propertyNames` bits (all must be set for a key to be allowed).
    names_mask: u64,
    /// A `propertyNames` schema too general for the key automaton: it is used as the key
    /// of additional members instead (overlaps with pattern keys are not excluded).
    fallback_names: Option<Expr>,
}

impl<'s> KeyClasses<'s> {
    fn new(
        b: &mut Builder,
        m: &Map<String, Value>,
        props: &'s Map<String, Value>,
        required: &[&'s str],
        patterns: Option<&'s Map<String, Value>>,
        additional: bool,
        ptr: &str,
    ) -> Result<Self, SchemaError> {
        let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
        names.extend(required);
        let patterns: Vec<(&str, &Value)> =
            patterns.into_iter().flatten().map(|(k, v)| (k.as_str(), v)).collect();
        if patterns.len() > 48 {
            return Err(b.err(
                super::SchemaErrorKind::Limit { what: "patternProperties", given: patterns.len(), limit: 48 },
                ptr,
            ));
        }
        let mut pn_names: Vec<&str> = Vec::new();
        let mut comps: Vec<Component> = vec![Component::Names(&names)];
        comps.extend(patterns.iter().map(|(p, _)| Component::Pattern(p)));
        let first_pn = comps.len();
        let mut fallback_names = None;
        let pn_ptr = format!("{ptr}/propertyNames");
        // Read keyword by keyword: a `$ref` or `allOf` inside is inlined first.
        let pn = m.get("propertyNames").map(|pn| b.plain(pn, &pn_ptr)).transpose()?;
        match &pn {
            None | Some(Value::Bool(true)) => {}
            Some(Value::Bool(false)) => comps.push(Component::Names(&[])),
            Some(Value::Object(pn)) => match key_components(pn, &mut pn_names) {
                Some(cs) => comps.extend(cs),
                None => {
                    // Too general for the key automaton: it becomes the key of the
                    // additional members alone, so keys that a pattern or a declared
                    // name admits would go unchecked.
                    if !patterns.is_empty() || !names.is_empty() {
                        b.unsupported(
                            "propertyNames",
                            "beside `patternProperties` or declared properties, only `pattern`, \
                             lengths and string `enum`/`const` are enforced on keys",
                            "keys of patternProperties and declared properties are not checked against it",
                            &pn_ptr,
                        )?;
                    }
                    let mut pn = pn.clone();
                    pn.insert("type".into(), Value::String("string".into()));
                    fallback_names = Some(b.schema(&Value::Object(pn), &pn_ptr, 0)?);
                }
            },
            Some(_) => return Err(b.not_schema("`propertyNames` must be a schema", ptr)),
        }
        if !pn_names.is_empty() {
            comps.push(Component::Names(&pn_names));
        }
        let names_mask = ((1u64 << comps.len()) - 1) & !((1u64 << first_pn) - 1);
        if comps.len() == 1 && !additional {
            return Ok(KeyClasses { set: None, patterns, names_mask, fallback_names });
        }
        let set = KeySet::build(&comps, &b.opts.limits.regex).map_err(|e| {
            let at = match &e.pattern {
                p if patterns.iter().any(|(q, _)| *q == p.as_str()) => {
                    Builder::child(ptr, "patternProperties", p)
                }
                _ => pn_ptr.clone(),
            };
            b.err(super::SchemaErrorKind::Regex(e), &at)
        })?;
        Ok(KeyClasses { set: Some(set), patterns, names_mask, fallback_names })
    }

    /// The class of a declared (or required) name.
    fn label_of(&self, name: &str) -> u64 {
        self.set.as_ref().map_or(1, |s| s.label_of(name))
    }

    /// Every class some key falls in (see [`KeySet::labels`]).
    fn labels(&self) -> Vec<u64> {
        self.set.as_ref().map_or_else(|| vec![1], KeySet::labels)
    }

    /// Whether keys of class `label` satisfy `propertyNames`.
    fn names_ok(&self, label: u64) -> bool {
        label & self.names_mask == self.names_mask
    }

    /// The patterns (and their schemas) that match keys of class `label`.
    fn patterns_of(&self, label: u64) -> impl Iterator<Item = (&'s str, &'s Value)> + '_ {
        self.patterns.iter().enumerate().filter(move |(i, _)| label >> (i + 1) & 1 == 1).map(|(_, p)| *p)
    }

    /// The keys of class `label` as a JSON string body, or `None` if there are none.
    fn rules(&self, b: &mut Builder, label: u64, ptr: &str) -> Result<Option<Expr>, SchemaError> {
        let Some(set) = &self.set else { return Ok(None) };
        match set.spelled(|l| l == label) {
            Ok(d) => Ok(d.map(|d| Expr::Dfa(std::sync::Arc::new(d)))),
            Err(e) => Err(b.err(super::SchemaErrorKind::Budget(Box::new(e)), ptr)),
        }
    }
}

/// `propertyNames` as key-automaton components, when it only uses `pattern`,
/// `minLength`/`maxLength` and string `enum`/`const` (plus annotations); `None` otherwise.
/// Enumerated names are appended to `names` (one more [`Component::Names`]).
fn key_components<'a>(pn: &'a Map<String, Value>, names: &mut Vec<&'a str>) -> Option<Vec<Component<'a>>> {
    let mut out = Vec::new();
    let (mut min, mut max) = (0u32, None);
    for (k, v) in pn {
        match (k.as_str(), v) {
            ("type", Value::String(t)) if t == "string" => {}
            ("pattern", Value::String(p)) => out.push(Component::Pattern(p)),
            ("minLength", v) => min = u32::try_from(v.as_u64()?).ok()?,
            ("maxLength", v) => max = Some(u32::try_from(v.as_u64()?).ok()?),
            ("enum", Value::Array(a)) => {
                let before = names.len();
                names.extend(a.iter().filter_map(Value::as_str));
                if names.len() == before {
                    out.push(Component::Names(&[]));
                }
            }
            ("const", Value::String(c)) => names.push(c),
            ("title" | "description" | "$comment" | "examples" | "default" | "$schema", _) => {}
            _ => return None,
        }
    }
    if min > 0 || max.is_some() {
        out.push(Component::Length { min, max });
    }
    Some(out)
}
