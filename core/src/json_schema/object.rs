//! `type: object`: `properties`, `required`, `additionalProperties`,
//! `patternProperties`, `propertyNames`, `minProperties`, `maxProperties`.
//!
//! Members are generated in a fixed order: declared `properties` (schema order), then
//! names that are `required` but not declared, then any number of extra members (pattern
//! properties and additional properties). Commas are placed exactly by building the list
//! back to front with two families of rules:
//! - `first(i)`: members `i..` when nothing has been written yet (no leading comma);
//! - `rest(i, c)`: members `i..`, each preceded by a comma, after `c` members
//!   (`c` saturates at the largest count that matters for min/maxProperties).
//!
//! Extra member keys exclude the declared names (a trie complement, [`string_not_in`]);
//! with `propertyNames` or `patternProperties` keys follow those schemas instead and the
//! exclusion is not applied.

use super::string;
use super::types::Builder;
use super::whitespace::{alt, is_nothing, lit, nothing, seq};
use super::SchemaError;
use crate::grammar::class::complement_class;
use crate::grammar::Expr;
use crate::regex::{json_string_char, regex_to_json_string_expr};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};

/// JSON string bodies (no quotes) whose decoded value is not one of `names`.
pub(crate) fn string_not_in(names: &[&str]) -> Expr {
    #[derive(Default)]
    struct Trie {
        end: bool,
        kids: BTreeMap<char, Trie>,
    }
    let mut root = Trie::default();
    for n in names {
        let mut t = &mut root;
        for c in n.chars() {
            t = t.kids.entry(c).or_default();
        }
        t.end = true;
    }
    fn go(t: &Trie) -> Expr {
        let any = Expr::Repeat { expr: Box::new(json_string_char(&[(0, 0x10FFFF)])), min: 0, max: None };
        let mut alts = Vec::new();
        if !t.end {
            alts.push(Expr::Empty);
        }
        let keys: Vec<(u32, u32)> = t.kids.keys().map(|&c| (c as u32, c as u32)).collect();
        let others = complement_class(&keys);
        if !others.is_empty() {
            alts.push(seq(vec![json_string_char(&others), any]));
        }
        for (&c, k) in &t.kids {
            alts.push(seq(vec![json_string_char(&[(c as u32, c as u32)]), go(k)]));
        }
        alt(alts)
    }
    go(&root)
}

struct Plan {
    members: Vec<(Expr, bool)>,
    extra: Option<Expr>,
    min: u64,
    max: Option<u64>,
    counting: bool,
    memo: HashMap<(usize, u64), crate::grammar::RuleId>,
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
    let mut members = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for (name, s) in props {
        let req = required.contains(&name.as_str());
        let v = b.schema(s, &Builder::child(ptr, "properties", name), level + 1)?;
        names.push(name);
        if is_nothing(&v) {
            if req {
                return Ok(nothing());
            }
            continue;
        }
        members.push((seq(vec![Builder::key_literal(name), l.colon(), v]), req));
    }
    // Additional-property value schema.
    let additional: Option<Expr> = match m.get("additionalProperties") {
        Some(Value::Bool(false)) => None,
        Some(Value::Bool(true)) => Some(b.any_value(level + 1)?),
        Some(s @ Value::Object(_)) => Some(b.schema(s, &format!("{ptr}/additionalProperties"), level + 1)?),
        Some(_) => return Err(b.not_schema("`additionalProperties` must be a schema", ptr)),
        None if b.opts.strict => None,
        None => Some(b.any_value(level + 1)?),
    };
    for r in &required {
        if !props.contains_key(*r) && !names.contains(r) {
            let v = match (&additional, patterns) {
                (Some(v), _) => v.clone(),
                (None, Some(_)) => b.any_value(level + 1)?,
                (None, None) => return Ok(nothing()),
            };
            names.push(r);
            members.push((seq(vec![Builder::key_literal(r), l.colon(), v]), true));
        }
    }
    let mut extras = Vec::new();
    if let Some(p) = patterns {
        for (pat, s) in p {
            let pptr = Builder::child(ptr, "patternProperties", pat);
            let key = regex_to_json_string_expr(pat, 0, None, &b.opts.limits.regex)
                .map_err(|e| b.err(super::SchemaErrorKind::Regex(e), &pptr))?;
            let v = b.schema(s, &pptr, level + 1)?;
            extras.push(seq(vec![lit("\""), key, lit("\""), l.colon(), v]));
        }
    }
    if let Some(v) = additional.filter(|v| !is_nothing(v)) {
        let key = match m.get("propertyNames") {
            None | Some(Value::Bool(true)) => seq(vec![lit("\""), string_not_in(&names), lit("\"")]),
            Some(Value::Bool(false)) => nothing(),
            Some(Value::Object(pn)) => {
                let mut pn = pn.clone();
                pn.insert("type".into(), Value::String("string".into()));
                b.schema(&Value::Object(pn), &format!("{ptr}/propertyNames"), level + 1)?
            }
            Some(_) => return Err(b.not_schema("`propertyNames` must be a schema", ptr)),
        };
        if !is_nothing(&key) {
            extras.push(seq(vec![key, l.colon(), v]));
        }
    }
    let extra = if extras.is_empty() { None } else { Some(alt(extras)) };
    let counting = min > 0 || max.is_some();
    let mut plan = Plan { members, extra, min, max, counting, memo: HashMap::new(), level };
    let nreq = plan.members.iter().filter(|m| m.1).count() as u64;
    if max.is_some_and(|x| x < nreq || x < min) {
        return Ok(nothing());
    }
    let body = plan.first(b, 0, ptr)?;
    if is_nothing(&body) {
        return Ok(nothing());
    }
    let nullable = nreq == 0 && min == 0;
    let full = seq(vec![l.open('{', level), body, l.close('}', level)]);
    Ok(if nullable { alt(vec![l.empty('{', '}'), full]) } else { full })
}
