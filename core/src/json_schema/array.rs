//! `type: array`: `prefixItems` / array-form `items` (Draft 07), `items` /
//! `additionalItems`, `minItems`, `maxItems`, `contains` and `minContains`.
//!
//! Positions below the prefix length use their own schema; later ones use the rest
//! schema. The list is built front to back with exact counts: position `i` is required
//! when `i < minItems`, and the tail after the prefix is a bounded repetition.
//! `contains` (without a prefix or item-count bounds) is `(R ,)* C ((, R)* , C){n-1}
//! (, R)*` where `C` is the merge of the item schema and the `contains` schema and
//! `n = minContains`.

use super::combine;
use super::string::get_count;
use super::types::Builder;
use super::whitespace::{alt, is_nothing, nothing, seq};
use super::SchemaError;
use crate::grammar::Expr;
use serde_json::{Map, Value};

fn opt(e: Expr) -> Expr {
    Expr::Repeat { expr: Box::new(e), min: 0, max: Some(1) }
}

fn clamp(n: u64) -> u32 {
    n.min(u32::MAX as u64) as u32
}

pub(crate) fn build(
    b: &mut Builder,
    m: &Map<String, Value>,
    ptr: &str,
    level: u32,
) -> Result<Expr, SchemaError> {
    b.check_level(level + 1, ptr)?;
    let l = b.layout;
    let (prefix, prefix_kw, rest, rest_kw): (Vec<Value>, &str, Option<&Value>, &str) =
        match (m.get("prefixItems"), m.get("items")) {
            (Some(Value::Array(p)), items) => (p.clone(), "prefixItems", items, "items"),
            (Some(_), _) => return Err(b.not_schema("`prefixItems` must be an array", ptr)),
            (None, Some(Value::Array(p))) => {
                (p.clone(), "items", m.get("additionalItems"), "additionalItems")
            }
            (None, items) => (vec![], "prefixItems", items, "items"),
        };
    let mut min = get_count(b, m, "minItems", ptr)?.unwrap_or(0);
    let mut max = get_count(b, m, "maxItems", ptr)?;
    if let Some(c) = m.get("contains") {
        let n = get_count(b, m, "minContains", ptr)?.unwrap_or(1);
        if n > 0 {
            if !prefix.is_empty() || max.is_some() || min > n || n > 64 {
                b.unsupported(
                    "contains",
                    "together with prefixItems, maxItems or minItems > minContains",
                    "contains ignored",
                    ptr,
                )?;
            } else {
                let item_schema = rest.cloned().unwrap_or(Value::Bool(true));
                let merged = combine::merge_schema(
                    b,
                    &[("allOf".to_string(), Value::Array(vec![item_schema, c.clone()]))]
                        .into_iter()
                        .collect(),
                    &format!("{ptr}/contains"),
                )?;
                let ce = b.schema(&merged, &format!("{ptr}/contains"), level + 1)?;
                let re = match rest {
                    Some(r) => b.schema(r, &format!("{ptr}/{rest_kw}"), level + 1)?,
                    None => b.any_value(level + 1)?,
                };
                let (re, ce) = (b.shared(re, "item", ptr)?, b.shared(ce, "contains", ptr)?);
                let comma = l.comma(level);
                let star = |e: Expr| Expr::Repeat { expr: Box::new(e), min: 0, max: None };
                let mut parts =
                    vec![l.open('[', level), star(seq(vec![re.clone(), comma.clone()])), ce.clone()];
                for _ in 1..n {
                    parts.push(star(seq(vec![comma.clone(), re.clone()])));
                    parts.push(comma.clone());
                    parts.push(ce.clone());
                }
                parts.push(star(seq(vec![comma, re])));
                parts.push(l.close(']', level));
                return Ok(if is_nothing(&ce) { nothing() } else { seq(parts) });
            }
        }
    }
    let mut elems = Vec::new();
    for (i, s) in prefix.iter().enumerate() {
        let e = b.schema(s, &format!("{ptr}/{prefix_kw}/{i}"), level + 1)?;
        if is_nothing(&e) {
            max = Some(max.map_or(i as u64, |x| x.min(i as u64)));
            break;
        }
        elems.push(e);
    }
    let rest_e = match rest {
        Some(r) => b.schema(r, &format!("{ptr}/{rest_kw}"), level + 1)?,
        None => b.any_value(level + 1)?,
    };
    let rest_e = b.shared(rest_e, "item", ptr)?;
    if is_nothing(&rest_e) {
        max = Some(max.map_or(elems.len() as u64, |x| x.min(elems.len() as u64)));
    }
    if let Some(x) = max {
        if x < min {
            return Ok(nothing());
        }
        elems.truncate(x as usize);
    }
    if min > elems.len() as u64 && is_nothing(&rest_e) {
        return Ok(nothing());
    }
    min = min.min(u32::MAX as u64);
    let comma = l.comma(level);
    let p = elems.len();
    // Tail after the prefix.
    let tail_min = min.saturating_sub(p as u64);
    let tail_max = max.map(|x| x.saturating_sub(p as u64));
    let mut list = if tail_max == Some(0) || is_nothing(&rest_e) {
        Expr::Empty
    } else if p == 0 {
        let more = Expr::Repeat {
            expr: Box::new(seq(vec![comma.clone(), rest_e.clone()])),
            min: clamp(tail_min.saturating_sub(1)),
            max: tail_max.map(|x| clamp(x - 1)),
        };
        let one = seq(vec![rest_e.clone(), more]);
        if tail_min == 0 {
            opt(one)
        } else {
            one
        }
    } else {
        Expr::Repeat {
            expr: Box::new(seq(vec![comma.clone(), rest_e.clone()])),
            min: clamp(tail_min),
            max: tail_max.map(clamp),
        }
    };
    for i in (0..p).rev() {
        let item = if i == 0 { elems[i].clone() } else { seq(vec![comma.clone(), elems[i].clone()]) };
        let s = seq(vec![item, list]);
        list = if (i as u64) < min { s } else { opt(s) };
    }
    let full = seq(vec![l.open('[', level), list, l.close(']', level)]);
    Ok(if min == 0 { alt(vec![l.empty('[', ']'), full]) } else { full })
}
