//! `not` of structured schemas: the complement written as positive keywords.
//!
//! A schema is a conjunction: its `type`, and per type the keywords that constrain that
//! type (the others hold vacuously for it). So its complement, among the values a sibling
//! allows, is a disjunction: the types it does not allow, and for each type it allows,
//! that type with one of its keywords negated. Most keywords have a negation that is
//! itself a keyword or a small combination of them:
//!
//! | under `not`              | becomes (each line one `anyOf` branch)                     |
//! |--------------------------|------------------------------------------------------------|
//! | `type: T`                | the other types                                            |
//! | `minimum: a`             | `exclusiveMaximum: a` (and the other bounds likewise)      |
//! | `minItems`/`maxItems`    | `maxItems: a-1` / `minItems: b+1`                          |
//! | `items: false`           | `minItems: 1`                                              |
//! | `items: S`               | `contains: {not: S}`                                       |
//! | `contains: C`            | `items: {not: C}`                                          |
//! | `required: [r…]`         | `properties: {r: false}`, one branch per name              |
//! | `properties: {p: S}`     | `required: [p]`, `properties: {p: {not: S}}`, per name     |
//! | `min/maxProperties`      | `maxProperties: a-1` / `minProperties: b+1`                |
//! | `additionalProperties: false` beside `properties` P | per subset T of P: `required: T`, the rest of P absent, `minProperties: \|T\|+1` |
//! | `not: X`                 | `X`                                                        |
//! | `anyOf: [A…]`            | `allOf: [{not: A}…]`                                       |
//! | `enum`/`const`           | the surviving values, left out (`combine::apply_not`)      |
//! | string keywords          | `{type: string, not: {…those keywords}}`, which the string builder writes as the complement of their joint automaton (`string::build`) |
//!
//! Negations of subschemas stay `{not: S}` in the result: they are converted where they
//! land, beside the keywords they meet there, by this same rewrite. Everything here is
//! exact; a keyword whose complement is not regular over the grammar (`uniqueItems`,
//! `patternProperties`, `propertyNames`, `multipleOf`, `minContains` above 1, …) makes
//! [`negate`] answer `None`, and the caller keeps its typed error.
//!
//! Strict mode ([`JsonSchemaOptions::strict`](super::JsonSchemaOptions::strict)) closes an
//! object schema that declares members and is silent about `additionalProperties`; the
//! schema under `not` is read as JSON Schema reads it (a predicate), and the sibling's
//! closure is made explicit before the branches, which may declare members, are merged
//! into it ([`explicit_closure`]).

use super::combine::{same_value, types_value};
use super::types::{declared_types, Builder, ARRAY, INTEGER, NUMBER, OBJECT, STRING};
use super::{SchemaError, ANNOTATIONS};
use serde_json::{json, Map, Value};

/// Keywords that say nothing about instances: the shared list, and the content
/// keywords (annotations in the drafts `not` is lowered for).
fn is_annotation(k: &str) -> bool {
    ANNOTATIONS.contains(&k) || ["contentEncoding", "contentMediaType", "contentSchema"].contains(&k)
}

/// String keywords, negated together as one group by the string builder.
pub(crate) const STRING_KEYWORDS: &[&str] = &["pattern", "format", "minLength", "maxLength"];

/// Most declared names for `not` of `additionalProperties: false` (one branch per subset).
const MAX_CLOSED_NAMES: usize = 4;

/// The values of the `types` that `n` does not match, as a schema whose `not`s are
/// all either of subschemas (converted where they land) or of the simple forms
/// [`super::combine::apply_not`] enforces; `None` when some keyword of `n` has no exact
/// negation here. `ptr` is `n`'s pointer.
pub(crate) fn negate(b: &mut Builder, n: &Value, types: u8, ptr: &str) -> Result<Option<Value>, SchemaError> {
    let n = b.plain(n, ptr)?;
    let m = match n {
        Value::Bool(x) => return Ok(Some(Value::Bool(!x))),
        Value::Object(m) => m,
        _ => return Err(b.not_schema("a schema must be an object or a boolean", ptr)),
    };
    if m.contains_key("enum") || m.contains_key("const") {
        return Ok(not_values(b, &m, types, ptr));
    }
    let mut branches: Vec<Value> = Vec::new();
    let mut rest = m.clone();
    // `not: X` beside R: ¬(¬X ∧ R) = X ∨ ¬R.
    if let Some(x) = rest.remove("not") {
        branches.push(x);
    }
    // `anyOf: [A…]` beside R: ¬(⋁A ∧ R) = ⋀¬A ∨ ¬R. Each ¬A is negated here, not left
    // as `{not: A}`: merged, those would be `not: {anyOf: [A…]}` again.
    if let Some(any) = rest.remove("anyOf") {
        let any = any.as_array().ok_or_else(|| b.not_schema("`anyOf` must be an array", ptr))?;
        let mut nots = Vec::with_capacity(any.len());
        for (i, a) in any.iter().enumerate() {
            let Some(x) = negate(b, a, types, &format!("{ptr}/anyOf/{i}"))? else { return Ok(None) };
            nots.push(x);
        }
        branches.push(json!({ "allOf": nots }));
    }
    for k in rest.keys() {
        let known = is_annotation(k)
            || STRING_KEYWORDS.contains(&k.as_str())
            || [
                "type",
                "minimum",
                "maximum",
                "exclusiveMinimum",
                "exclusiveMaximum",
                "minItems",
                "maxItems",
                "items",
                "contains",
                "minContains",
                "required",
                "properties",
                "additionalProperties",
                "minProperties",
                "maxProperties",
            ]
            .contains(&k.as_str());
        // A keyword JSON Schema defines but this rewrite does not negate: no exact answer.
        // Any other key is an unknown keyword, which constrains nothing.
        if !known && super::types::is_keyword(k) && !(k == "uniqueItems" && rest[k] == Value::Bool(false)) {
            return Ok(None);
        }
    }
    let of_n = declared_types(&rest, ptr)?;
    // Non-integer numbers alone (a type `number` less `integer`) have no grammar here.
    let number_part = |t: u8| -> Result<Option<&'static str>, ()> {
        match (t & NUMBER != 0, t & INTEGER != 0) {
            (true, true) => Ok(Some("number")),
            (false, true) => Ok(Some("integer")),
            (false, false) => Ok(None),
            (true, false) => Err(()),
        }
    };
    let other = types & !of_n;
    if other != 0 {
        let Ok(_) = number_part(other) else { return Ok(None) };
        branches.push(json!({ "type": types_value(other) }));
    }
    let here = types & of_n;
    if here & STRING != 0 {
        let group: Map<String, Value> = rest
            .iter()
            .filter(|(k, _)| STRING_KEYWORDS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !group.is_empty() {
            let mut inner = group;
            inner.insert("type".into(), json!("string"));
            branches.push(json!({ "type": "string", "not": inner }));
        }
    }
    let Ok(num) = number_part(here & (NUMBER | INTEGER)) else { return Ok(None) };
    if let Some(t) = num {
        // Draft 4 writes exclusive bounds as booleans beside `minimum`/`maximum`.
        let draft4 = |k: &str| rest.get(k) == Some(&Value::Bool(true));
        for (k, negated) in [
            ("minimum", if draft4("exclusiveMinimum") { "maximum" } else { "exclusiveMaximum" }),
            ("maximum", if draft4("exclusiveMaximum") { "minimum" } else { "exclusiveMinimum" }),
            ("exclusiveMinimum", "maximum"),
            ("exclusiveMaximum", "minimum"),
        ] {
            match rest.get(k) {
                Some(Value::Number(x)) => branches.push(json!({ "type": t, negated: x })),
                Some(Value::Bool(_)) | None => {}
                Some(_) => return Err(b.not_schema(format!("`{k}` must be a number"), ptr)),
            }
        }
    }
    if here & ARRAY != 0 {
        let Some(mut more) = negate_array(b, &rest, ptr)? else { return Ok(None) };
        branches.append(&mut more);
    }
    if here & OBJECT != 0 {
        let Some(mut more) = negate_object(b, &rest, ptr)? else { return Ok(None) };
        branches.append(&mut more);
    }
    Ok(Some(match branches.len() {
        0 => Value::Bool(false),
        1 => branches.swap_remove(0),
        _ => json!({ "anyOf": branches }),
    }))
}

/// Reads a count keyword (`minItems`, …) for negation.
fn count(b: &Builder, m: &Map<String, Value>, k: &str, ptr: &str) -> Result<Option<u64>, SchemaError> {
    super::string::get_count(b, m, k, ptr)
}

/// The array branches of `not` (see the module table); `None` when a keyword has no
/// exact negation.
fn negate_array(
    b: &mut Builder,
    m: &Map<String, Value>,
    ptr: &str,
) -> Result<Option<Vec<Value>>, SchemaError> {
    let mut out = Vec::new();
    match count(b, m, "minItems", ptr)? {
        Some(a) if a > 0 => out.push(json!({ "type": "array", "maxItems": a - 1 })),
        _ => {}
    }
    if let Some(x) = count(b, m, "maxItems", ptr)? {
        out.push(json!({ "type": "array", "minItems": x.saturating_add(1) }));
    }
    match m.get("items") {
        None => {}
        // Draft 7 array-form items (a prefix): not negated here.
        Some(Value::Array(_)) => return Ok(None),
        Some(s) => match b.plain(s, &format!("{ptr}/items"))? {
            Value::Bool(true) => {}
            Value::Object(o) if o.is_empty() => {}
            Value::Bool(false) => out.push(json!({ "type": "array", "minItems": 1 })),
            s => out.push(json!({ "type": "array", "contains": { "not": s } })),
        },
    }
    if let Some(c) = m.get("contains") {
        match count(b, m, "minContains", ptr)?.unwrap_or(1) {
            0 => {}
            // Fewer than one item matching: every item fails it.
            1 => out.push(json!({ "type": "array", "items": { "not": c } })),
            _ => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// The object branches of `not` (see the module table); `None` when a keyword has no
/// exact negation.
fn negate_object(
    b: &mut Builder,
    m: &Map<String, Value>,
    ptr: &str,
) -> Result<Option<Vec<Value>>, SchemaError> {
    let mut out = Vec::new();
    let empty = Map::new();
    let props = match m.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err(b.not_schema("`properties` must be an object", ptr)),
    };
    match m.get("required") {
        None => {}
        Some(Value::Array(a)) => {
            for r in a {
                let r =
                    r.as_str().ok_or_else(|| b.not_schema("`required` must be an array of strings", ptr))?;
                out.push(json!({ "type": "object", "properties": { r: false } }));
            }
        }
        Some(_) => return Err(b.not_schema("`required` must be an array of strings", ptr)),
    }
    for (name, s) in props {
        let s = b.plain(s, &Builder::child(ptr, "properties", name))?;
        if s == Value::Bool(true) || s.as_object().is_some_and(Map::is_empty) {
            continue;
        }
        out.push(
            json!({ "type": "object", "required": [name], "properties": { name.clone(): { "not": s } } }),
        );
    }
    match count(b, m, "minProperties", ptr)? {
        Some(a) if a > 0 => out.push(json!({ "type": "object", "maxProperties": a - 1 })),
        _ => {}
    }
    if let Some(x) = count(b, m, "maxProperties", ptr)? {
        out.push(json!({ "type": "object", "minProperties": x.saturating_add(1) }));
    }
    match m.get("additionalProperties") {
        None | Some(Value::Bool(true)) => {}
        Some(Value::Object(o)) if o.is_empty() => {}
        // Some key outside P: with the members of P that are present (T) fixed, one more
        // member than |T| is such a key. One branch per subset of P.
        Some(Value::Bool(false)) if props.len() <= MAX_CLOSED_NAMES => {
            let names: Vec<&String> = props.keys().collect();
            for subset in 0u32..(1 << names.len()) {
                let present: Vec<&String> =
                    names.iter().enumerate().filter(|(i, _)| subset >> i & 1 == 1).map(|(_, n)| *n).collect();
                let absent: Map<String, Value> = names
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| subset >> i & 1 == 0)
                    .map(|(_, n)| ((*n).clone(), Value::Bool(false)))
                    .collect();
                out.push(json!({
                    "type": "object",
                    "required": present,
                    "properties": absent,
                    "minProperties": present.len() + 1,
                }));
            }
        }
        Some(_) => return Ok(None),
    }
    Ok(Some(out))
}

/// `not` of finitely many values: the values `m` matches, left out by the simple path of
/// [`super::combine::apply_not`] when it can (values of types that have no grammar-level
/// exclusion and that the sibling allows are `None`); numbers go as the ranges between
/// them.
fn not_values(b: &Builder, m: &Map<String, Value>, types: u8, ptr: &str) -> Option<Value> {
    let only_values = m.keys().all(|k| k == "enum" || k == "const" || is_annotation(k));
    let vals: Vec<Value> = if only_values {
        match (m.get("const"), m.get("enum")) {
            (Some(c), None) => vec![c.clone()],
            (None, Some(Value::Array(e))) => e.clone(),
            (Some(c), Some(Value::Array(e))) => e.iter().filter(|v| same_value(v, c)).cloned().collect(),
            _ => return None,
        }
    } else {
        super::finite::values(b, m, ptr)?
    };
    let mut simple = Vec::new();
    let mut numbers: Vec<serde_json::Number> = Vec::new();
    for v in vals {
        let t = super::types::value_type(&v);
        let allowed = types & t != 0 || (t == INTEGER && types & NUMBER != 0);
        match v {
            _ if !allowed => {}
            Value::Null | Value::Bool(_) | Value::String(_) => simple.push(v),
            Value::Number(x) => numbers.push(x),
            _ => return None,
        }
    }
    let mut branches = Vec::new();
    let mut kept = types;
    if !numbers.is_empty() {
        // The numbers other than these: below the least, between neighbours, above the
        // greatest, as exclusive bounds (exact over integers and reals: the bounds are
        // compared digit by digit, `number::build`). Ordered by `f64`, so two different
        // values with the same `f64` have no known order: not negated here.
        numbers.sort_by(|x, y| x.as_f64().unwrap_or(0.0).total_cmp(&y.as_f64().unwrap_or(0.0)));
        numbers.dedup_by(|x, y| same_value(&Value::Number(x.clone()), &Value::Number(y.clone())));
        if numbers.windows(2).any(|w| w[0].as_f64() == w[1].as_f64()) {
            return None;
        }
        // Non-integer numbers alone have no grammar here (see `negate`).
        let t = match (types & NUMBER != 0, types & INTEGER != 0) {
            (true, true) => "number",
            (false, true) => "integer",
            _ => return None,
        };
        kept &= !(NUMBER | INTEGER);
        branches.push(json!({ "type": t, "exclusiveMaximum": numbers[0] }));
        for w in numbers.windows(2) {
            branches.push(json!({ "type": t, "exclusiveMinimum": w[0], "exclusiveMaximum": w[1] }));
        }
        branches.push(json!({ "type": t, "exclusiveMinimum": numbers[numbers.len() - 1] }));
    }
    if kept != 0 {
        let mut x = json!({ "type": types_value(kept) });
        if !simple.is_empty() {
            x["not"] = json!({ "enum": simple });
        }
        branches.push(x);
    }
    Some(match branches.len() {
        0 => Value::Bool(false),
        1 => branches.swap_remove(0),
        _ => json!({ "anyOf": branches }),
    })
}

/// Whether every `not` left in `v` (an answer of [`negate`]) will be exact where it
/// lands, judged where it stands: its own object's types, no siblings merged yet (which
/// only narrow the types, so a `not` judged exact here stays exact). A caller with a
/// fallback (`oneOf`) asks before building, since a `not` found inexact while building
/// is an error by then.
pub(crate) fn nested_exact(b: &mut Builder, v: &Value, ptr: &str) -> Result<bool, SchemaError> {
    let Value::Object(o) = v else { return Ok(true) };
    if let Some(n) = o.get("not") {
        let types = declared_types(o, ptr)?;
        if super::combine::apply_not(b, n, o, types, ptr)?.is_none() {
            match negate(b, n, types, ptr)? {
                Some(neg) if nested_exact(b, &neg, ptr)? => {}
                _ => return Ok(false),
            }
        }
    }
    for (k, x) in o {
        let exact = match (k.as_str(), x) {
            ("properties", Value::Object(p)) => {
                let mut all = true;
                for s in p.values() {
                    all = all && nested_exact(b, s, ptr)?;
                }
                all
            }
            ("items" | "contains", s) => nested_exact(b, s, ptr)?,
            ("allOf" | "anyOf", Value::Array(a)) => {
                let mut all = true;
                for s in a {
                    all = all && nested_exact(b, s, ptr)?;
                }
                all
            }
            _ => true,
        };
        if !exact {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `m` (a sibling of `not` whose branches will be merged into it) with its object
/// closure written out: in strict mode, a schema that declares members and is silent
/// about `additionalProperties` allows no others, and one that declares none allows any
/// — a branch that declares members must not change which (see the module docs).
pub(crate) fn explicit_closure(b: &Builder, m: &Map<String, Value>) -> Map<String, Value> {
    let mut m = m.clone();
    if m.contains_key("additionalProperties") {
        return m;
    }
    let declares = m.contains_key("properties") || m.contains_key("patternProperties");
    if b.opts.strict && declares {
        // Names `required` but not declared are declared by that listing (any value).
        let required: Vec<String> = m
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default();
        if let Some(Value::Object(p)) = m.get_mut("properties") {
            for r in required {
                p.entry(r).or_insert(Value::Bool(true));
            }
        } else if !required.is_empty() {
            m.insert(
                "properties".into(),
                Value::Object(required.into_iter().map(|r| (r, Value::Bool(true))).collect()),
            );
        }
        m.insert("additionalProperties".into(), Value::Bool(false));
    } else {
        m.insert("additionalProperties".into(), Value::Bool(true));
    }
    m
}
