//! Combinators: `allOf` merging, `not` of types and values, dependencies, and the sibling checks
//! that filter `enum` values (`oneOf` disjointness is in [`super::one_of`]).
//!
//! [`merge_schema`] intersects schemas keyword by keyword into one schema: `$ref`s are
//! inlined (after rewriting the references inside the target to absolute ones, so they
//! still resolve from their new place), nested `allOf`s are flattened, then:
//! each part first makes explicit what it says of the names and prefix positions the
//! other declares (`align`: a name the other declares gets this part's pattern or
//! additional schema, a shorter prefix is padded with its `items`), so that merging
//! per keyword is exact; `type` sets intersect; `properties`/`patternProperties` merge per name (both →
//! `allOf` of the two); `required` unites; lower bounds take the max and upper bounds the
//! min; `enum`s intersect; different `const`s make the schema `false`; sub-schema
//! keywords (`items`, `additionalProperties`, …) become `allOf` of both (two different
//! `contains` are unsupported: they may be met by two different items); two
//! `anyOf`/`oneOf` multiply out (at most 64 branches). Two different `pattern`s or
//! `format`s, and other keywords present in both parts with different values, are
//! [`Unsupported`](super::SchemaErrorKind::Unsupported) (lenient: the first one is kept).
//! AFTER THIS: the result holds no `$ref` and no `allOf`.

use super::resolve::DEFAULT_BASE;
use super::types::{declared_types, value_type, Builder, INTEGER, NUMBER, STRING};
use super::SchemaError;
use serde_json::{json, Map, Value};

/// Most `$ref` inlinings in one merge.
const MAX_INLINE: usize = 64;
/// Most branches when two `anyOf`s multiply out.
const MAX_PRODUCT: usize = 64;

/// Rewrites every `$ref` in `v` (located at `ptr`) to an absolute reference.
pub(crate) fn absolutize(b: &Builder, v: &Value, ptr: &str) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                if k == "$ref" {
                    if let Some(r) = x.as_str() {
                        if let Ok(t) = b.resolver.resolve(b.root, r, ptr) {
                            out.insert(k.clone(), Value::String(format!("{DEFAULT_BASE}#{t}")));
                            continue;
                        }
                    }
                }
                if ["const", "enum", "default", "examples"].contains(&k.as_str()) {
                    out.insert(k.clone(), x.clone());
                } else {
                    out.insert(
                        k.clone(),
                        absolutize(b, x, &format!("{ptr}/{}", super::resolve::escape_token(k))),
                    );
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => {
            Value::Array(a.iter().enumerate().map(|(i, x)| absolutize(b, x, &format!("{ptr}/{i}"))).collect())
        }
        v => v.clone(),
    }
}

/// Flattens `m` (with its `$ref` and `allOf`) into a list of plain parts.
fn collect(
    b: &mut Builder,
    m: &Map<String, Value>,
    ptr: &str,
    out: &mut Vec<Value>,
    inlined: &mut Vec<String>,
) -> Result<(), SchemaError> {
    let mut rest = m.clone();
    let r = rest.remove("$ref");
    let all = rest.remove("allOf");
    if !rest.is_empty() {
        out.push(absolutize(b, &Value::Object(rest), ptr));
    }
    if let Some(r) = r {
        let r = r.as_str().ok_or_else(|| b.not_schema("`$ref` must be a string", ptr))?;
        let target = b.resolver.resolve(b.root, r, ptr)?;
        if inlined.contains(&target) || inlined.len() >= MAX_INLINE {
            b.unsupported("$ref", "recursive reference inside allOf", "the recursive part is dropped", ptr)?;
        } else {
            inlined.push(target.clone());
            let root = b.root;
            match root.pointer(&target) {
                Some(Value::Object(t)) => collect(b, t, &target, out, inlined)?,
                Some(v @ Value::Bool(_)) => out.push(v.clone()),
                _ => return Err(b.not_schema("`$ref` target is not a schema", &target)),
            }
            inlined.pop();
        }
    }
    if let Some(all) = all {
        let all = all.as_array().ok_or_else(|| b.not_schema("`allOf` must be an array", ptr))?;
        for (i, s) in all.iter().enumerate() {
            let p = format!("{ptr}/allOf/{i}");
            match s {
                Value::Object(o) => collect(b, o, &p, out, inlined)?,
                Value::Bool(_) => out.push(s.clone()),
                _ => return Err(b.not_schema("`allOf` items must be schemas", &p)),
            }
        }
    }
    Ok(())
}

/// Merges `m`'s `$ref`, `allOf` and other keywords into one schema.
pub(crate) fn merge_schema(b: &mut Builder, m: &Map<String, Value>, ptr: &str) -> Result<Value, SchemaError> {
    let mut parts = Vec::new();
    collect(b, m, ptr, &mut parts, &mut Vec::new())?;
    let mut acc = Map::new();
    for p in parts {
        match p {
            Value::Bool(true) => {}
            Value::Bool(false) => return Ok(Value::Bool(false)),
            Value::Object(o) => {
                if !merge_two(b, &mut acc, o, ptr)? {
                    return Ok(Value::Bool(false));
                }
            }
            _ => return Err(b.not_schema("`allOf` items must be schemas", ptr)),
        }
    }
    Ok(Value::Object(acc))
}

pub(crate) fn types_value(bits: u8) -> Value {
    let mut names = Vec::new();
    for (bit, name) in [(1u8, "null"), (2, "boolean"), (4, "object"), (8, "array"), (16, "string")] {
        if bits & bit != 0 {
            names.push(Value::String(name.into()));
        }
    }
    if bits & NUMBER != 0 {
        names.push(Value::String("number".into()));
    } else if bits & INTEGER != 0 {
        names.push(Value::String("integer".into()));
    }
    Value::Array(names)
}

fn all_of(x: Value, y: Value) -> Value {
    Value::Object([("allOf".to_string(), Value::Array(vec![x, y]))].into_iter().collect())
}

fn num_pick(x: &Value, y: &Value, larger: bool) -> Value {
    let (a, c) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
    if (a >= c) == larger {
        x.clone()
    } else {
        y.clone()
    }
}

/// Merges `o` into `acc`; false when the result is unsatisfiable.
fn merge_two(
    b: &mut Builder,
    acc: &mut Map<String, Value>,
    mut o: Map<String, Value>,
    ptr: &str,
) -> Result<bool, SchemaError> {
    align(b, acc, &mut o, ptr)?;
    for (k, v) in o {
        let Some(cur) = acc.get(&k).cloned() else {
            acc.insert(k, v);
            continue;
        };
        if cur == v {
            continue;
        }
        let merged = match k.as_str() {
            "type" => {
                let mut t1 = Map::new();
                t1.insert("type".into(), cur);
                let mut t2 = Map::new();
                t2.insert("type".into(), v);
                types_value(declared_types(&t1, ptr)? & declared_types(&t2, ptr)?)
            }
            "properties" | "patternProperties" | "dependentSchemas" => {
                let (Value::Object(mut a), Value::Object(bb)) = (cur, v) else {
                    return Err(b.not_schema(format!("`{k}` must be an object"), ptr));
                };
                // In place: property order is generation order, so merging must keep it.
                for (name, s) in bb {
                    match a.get_mut(&name) {
                        Some(x) => *x = all_of(x.take(), s),
                        None => {
                            a.insert(name, s);
                        }
                    }
                }
                Value::Object(a)
            }
            "required" => {
                let mut a = cur.as_array().cloned().unwrap_or_default();
                for x in v.as_array().cloned().unwrap_or_default() {
                    if !a.contains(&x) {
                        a.push(x);
                    }
                }
                Value::Array(a)
            }
            // Two `contains` ask for two items, perhaps different ones: `allOf` of them
            // would ask one item to satisfy both (`[1, "a"]` contains an integer and a
            // string, but no item that is both).
            "contains" => {
                b.unsupported("contains", "two different `contains` in allOf", "the first is kept", ptr)?;
                continue;
            }
            "items"
            | "additionalProperties"
            | "additionalItems"
            | "propertyNames"
            | "unevaluatedProperties"
            | "unevaluatedItems"
                if !cur.is_array() && !v.is_array() =>
            {
                all_of(cur, v)
            }
            "prefixItems" | "items" => {
                let (Value::Array(a), Value::Array(c)) = (&cur, &v) else {
                    b.unsupported(&k, "array-form and schema-form items in allOf", "the first is kept", ptr)?;
                    continue;
                };
                let n = a.len().max(c.len());
                Value::Array(
                    (0..n)
                        .map(|i| match (a.get(i), c.get(i)) {
                            (Some(x), Some(y)) => all_of(x.clone(), y.clone()),
                            (Some(x), None) | (None, Some(x)) => x.clone(),
                            (None, None) => Value::Bool(true),
                        })
                        .collect(),
                )
            }
            "minimum" | "exclusiveMinimum" | "minLength" | "minItems" | "minProperties" | "minContains"
                if cur.is_number() && v.is_number() =>
            {
                num_pick(&cur, &v, true)
            }
            "maximum" | "exclusiveMaximum" | "maxLength" | "maxItems" | "maxProperties" | "maxContains"
                if cur.is_number() && v.is_number() =>
            {
                num_pick(&cur, &v, false)
            }
            "uniqueItems" => Value::Bool(cur == Value::Bool(true) || v == Value::Bool(true)),
            "enum" => {
                let a = cur.as_array().cloned().unwrap_or_default();
                let c = v.as_array().cloned().unwrap_or_default();
                Value::Array(a.into_iter().filter(|x| c.contains(x)).collect())
            }
            "const" => return Ok(false),
            "multipleOf" => match (cur.as_u64(), v.as_u64()) {
                (Some(x), Some(y)) => {
                    let g = gcd(x, y);
                    Value::from(x / g * y)
                }
                _ => {
                    b.unsupported(
                        "multipleOf",
                        "two non-integer multipleOf in allOf",
                        "the first is kept",
                        ptr,
                    )?;
                    continue;
                }
            },
            "anyOf" | "oneOf" => {
                let a = cur.as_array().cloned().unwrap_or_default();
                let c = v.as_array().cloned().unwrap_or_default();
                if a.len() * c.len() > MAX_PRODUCT {
                    b.unsupported(&k, "two large anyOf/oneOf in allOf", "the first is kept", ptr)?;
                    continue;
                }
                Value::Array(
                    a.iter().flat_map(|x| c.iter().map(move |y| all_of(x.clone(), y.clone()))).collect(),
                )
            }
            // ¬A ∧ ¬B = ¬(A ∨ B), one flat `anyOf` however many parts say `not`: nested,
            // `{anyOf: [{anyOf: [A, B]}, C]}` is no union of simple sets to the `not`
            // readers, and its rewrite merges back into the same schema (a rule that
            // refers to itself before any character: the empty language).
            "not" => Value::Object(
                [("anyOf".to_string(), Value::Array(union_branches(cur).chain(union_branches(v)).collect()))]
                    .into_iter()
                    .collect(),
            ),
            "$defs" | "definitions" | "title" | "description" | "default" | "examples" | "$comment"
            | "$schema" | "$id" | "$anchor" => continue,
            _ => {
                b.unsupported(
                    &k,
                    "present with different values in several allOf parts",
                    "the first value is kept",
                    ptr,
                )?;
                continue;
            }
        };
        acc.insert(k, merged);
    }
    Ok(true)
}

/// The branches of `v` as a union: those of a bare `anyOf` (nothing else beside it,
/// annotations aside), flattened; else `v` itself.
fn union_branches(v: Value) -> Box<dyn Iterator<Item = Value>> {
    match v {
        Value::Object(mut m)
            if m.get("anyOf").is_some_and(Value::is_array)
                && m.keys().all(|k| k == "anyOf" || super::ANNOTATIONS.contains(&k.as_str())) =>
        {
            match m.remove("anyOf") {
                Some(Value::Array(a)) => Box::new(a.into_iter().flat_map(union_branches)),
                _ => Box::new(std::iter::empty()),
            }
        }
        v => Box::new(std::iter::once(v)),
    }
}

/// Whether a subschema allows every value (`true`, `{}`): it needs no aligning.
fn allows_all(v: &Value) -> bool {
    matches!(v, Value::Bool(true)) || v.as_object().is_some_and(Map::is_empty)
}

/// Makes explicit, in each of two parts, what it says about what the other one names, so
/// that merging keyword by keyword is exact. Merged as they stand, `properties` would
/// hide a name from the other part's `patternProperties`/`additionalProperties`
/// (`allOf: [{properties: {a: {}}, additionalProperties: false}, {properties: {b: {}}}]`
/// would allow `b`), and `prefixItems` would hide a position from the other part's
/// `items` (`allOf: [{prefixItems: [A]}, {items: B}]` would not check `B` on the first
/// item). So each name the other part declares gets, in this part, the schemas that apply
/// to it here (the matching patterns' schemas, else `additionalProperties`), and each
/// prefix is padded to the longer one with its part's `items`. A pattern of one part
/// where the other part has `additionalProperties` and patterns of its own cannot be
/// made explicit (the additional schema applies to the keys that match none of them):
/// unsupported.
fn align(
    b: &mut Builder,
    x: &mut Map<String, Value>,
    y: &mut Map<String, Value>,
    ptr: &str,
) -> Result<(), SchemaError> {
    let (x0, y0) = (x.clone(), y.clone());
    align_names(b, x, &y0, ptr)?;
    align_names(b, y, &x0, ptr)?;
    align_prefix(x, y);
    Ok(())
}

/// The declared names of `other` (and its patterns, see [`align`]) made explicit in `x`.
fn align_names(
    b: &mut Builder,
    x: &mut Map<String, Value>,
    other: &Map<String, Value>,
    ptr: &str,
) -> Result<(), SchemaError> {
    use crate::regex::keyset::{Component, KeySet};
    let additional = x.get("additionalProperties").filter(|a| !allows_all(a)).cloned();
    let patterns: Vec<(String, Value)> = match x.get("patternProperties") {
        Some(Value::Object(p)) => p.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        _ => Vec::new(),
    };
    if additional.is_none() && patterns.is_empty() {
        return Ok(());
    }
    let declared = |m: &Map<String, Value>| -> Vec<String> {
        m.get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    };
    let mine = declared(x);
    let mut sets = Vec::with_capacity(patterns.len());
    for (p, _) in &patterns {
        let set = KeySet::build(&[Component::Pattern(p)], &b.opts.limits.regex).map_err(|e| {
            b.err(
                super::SchemaErrorKind::Regex(e),
                &super::types::Builder::child(ptr, "patternProperties", p),
            )
        })?;
        sets.push(set);
    }
    let implied = |name: &str| -> Option<Value> {
        let matching: Vec<Value> = patterns
            .iter()
            .zip(&sets)
            .filter(|(_, set)| set.label_of(name) & 1 == 1)
            .map(|((_, s), _)| s.clone())
            .collect();
        match matching.len() {
            0 => additional.clone(),
            1 => matching.into_iter().next(),
            _ => Some(json!({ "allOf": matching })),
        }
    };
    let mut added = Map::new();
    for name in declared(other).into_iter().filter(|n| !mine.contains(n)) {
        if let Some(s) = implied(&name) {
            added.insert(name, s);
        }
    }
    if !added.is_empty() {
        let props = x.entry("properties").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(p) = props {
            p.extend(added);
        }
    }
    // The other part's new patterns: keys they match are additional here.
    let Some(a) = &additional else { return Ok(()) };
    let theirs: Vec<String> = match other.get("patternProperties") {
        Some(Value::Object(p)) => {
            p.keys().filter(|q| !patterns.iter().any(|(p, _)| p == *q)).cloned().collect()
        }
        _ => Vec::new(),
    };
    for q in theirs {
        // Exact only when every key `q` matches is additional here: no patterns here, and
        // no name declared here that `q` matches.
        let set = KeySet::build(&[Component::Pattern(&q)], &b.opts.limits.regex).map_err(|e| {
            b.err(
                super::SchemaErrorKind::Regex(e),
                &super::types::Builder::child(ptr, "patternProperties", &q),
            )
        })?;
        if !patterns.is_empty() || mine.iter().any(|n| set.label_of(n) & 1 == 1) {
            b.unsupported(
                "additionalProperties",
                "in allOf beside another part's patternProperties that overlap this part's own properties or patterns",
                "the other part's pattern keys are not checked against it",
                ptr,
            )?;
            continue;
        }
        // The pattern's keys meet this part's additional schema: carried to this part as
        // a pattern of its own with that schema.
        let pp = x.entry("patternProperties").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(p) = pp {
            p.insert(q, a.clone());
        }
    }
    Ok(())
}

/// A part's positional items: the prefix and the schema of the positions after it,
/// under their Draft 2020-12 names or their Draft 7 ones (array `items`, `additionalItems`).
fn positional(m: &Map<String, Value>) -> (Option<Vec<Value>>, Option<Value>) {
    match (m.get("prefixItems"), m.get("items")) {
        (Some(Value::Array(p)), items) => (Some(p.clone()), items.cloned()),
        (None, Some(Value::Array(p))) => (Some(p.clone()), m.get("additionalItems").cloned()),
        (_, items) => (None, items.cloned()),
    }
}

/// Pads both parts' prefixes to the longer one (see [`align`]), both written in Draft
/// 2020-12 form (which the array builder reads in any draft).
fn align_prefix(x: &mut Map<String, Value>, y: &mut Map<String, Value>) {
    let (px, rx) = positional(x);
    let (py, ry) = positional(y);
    let len = px.as_ref().map_or(0, Vec::len).max(py.as_ref().map_or(0, Vec::len));
    // Nothing to align when no part has a prefix, or when only one part says anything
    // about items.
    let says =
        |p: &Option<Vec<Value>>, r: &Option<Value>| p.is_some() || r.as_ref().is_some_and(|r| !allows_all(r));
    if len == 0 || !says(&px, &rx) || !says(&py, &ry) {
        return;
    }
    for (m, p, r) in [(x, px, rx), (y, py, ry)] {
        let mut p = p.unwrap_or_default();
        p.resize(len, r.clone().unwrap_or(Value::Bool(true)));
        m.remove("additionalItems");
        m.remove("items");
        m.insert("prefixItems".into(), Value::Array(p));
        if let Some(r) = r {
            m.insert("items".into(), r);
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a.max(1)
    } else {
        gcd(b, a % b)
    }
}

/// `dependentRequired`, `dependentSchemas` and Draft-07 `dependencies` rewritten as
/// `allOf` entries the merger already handles: "if `a` is present then S" becomes
/// `anyOf: [{properties: {a: false}}, {required: [a], …S}]` (a missing `a`, or `a` with
/// S). Exact; each dependency doubles the branches `allOf` multiplies out. `None` when
/// `m` has no dependency keyword; an error when one is malformed.
pub(crate) fn dependencies_as_all_of(
    b: &Builder,
    m: &Map<String, Value>,
    ptr: &str,
) -> Result<Option<Map<String, Value>>, SchemaError> {
    const KEYS: [&str; 3] = ["dependentRequired", "dependentSchemas", "dependencies"];
    if !KEYS.iter().any(|k| m.contains_key(*k)) {
        return Ok(None);
    }
    let mut out = m.clone();
    let mut all = match out.remove("allOf") {
        None => Vec::new(),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(b.not_schema("`allOf` must be an array", ptr)),
    };
    for k in KEYS {
        let Some(deps) = out.remove(k) else { continue };
        let deps = deps.as_object().ok_or_else(|| b.not_schema(format!("`{k}` must be an object"), ptr))?;
        for (name, d) in deps {
            let then = match d {
                Value::Array(names) if k != "dependentSchemas" => {
                    if !names.iter().all(Value::is_string) {
                        return Err(b.not_schema(format!("`{k}/{name}` must be an array of strings"), ptr));
                    }
                    let mut req = vec![Value::String(name.clone())];
                    req.extend(names.iter().cloned());
                    json!({ "required": req })
                }
                s @ (Value::Object(_) | Value::Bool(_)) if k != "dependentRequired" => {
                    json!({ "allOf": [{ "required": [name] }, s] })
                }
                _ => return Err(b.not_schema(format!("`{k}/{name}` has the wrong shape"), ptr)),
            };
            all.push(json!({ "anyOf": [{ "properties": { name.clone(): false } }, then] }));
        }
    }
    out.insert("allOf".into(), Value::Array(all));
    Ok(Some(out))
}

/// What a `not` excludes when the grammar can say so: whole types, single values, and
/// sets of strings given by string keywords.
#[derive(Default)]
struct Excluded {
    types: u8,
    values: Vec<Value>,
    /// Each a conjunction of string keywords (`pattern`, `format`, lengths): the strings
    /// that meet all of them.
    strings: Vec<Map<String, Value>>,
}

/// What `n` (the schema under `not`) matches, if it is a union of types, values and
/// string sets: booleans, `{}`, `{type}`, `{enum}`/`{const}`, string keywords (with
/// `type: string`, or without a type, when they match every other type too), and an
/// `anyOf` of these. `None` otherwise (and for "not integer" over numbers, which no
/// grammar of ours expresses).
fn excluded_by(n: &Value, types: u8, ptr: &str, top: bool) -> Result<Option<Excluded>, SchemaError> {
    let only = |m: &Map<String, Value>, keys: &[&str]| {
        m.keys().all(|k| keys.contains(&k.as_str()) || super::ANNOTATIONS.contains(&k.as_str()))
    };
    let all = super::types::ALL_TYPES;
    let string_keys = super::not::STRING_KEYWORDS;
    Ok(match n {
        Value::Bool(true) => Some(Excluded { types: all, ..Default::default() }),
        Value::Bool(false) => Some(Excluded::default()),
        Value::Object(m) if only(m, &["type"]) => {
            let t = declared_types(m, ptr)?;
            if t & INTEGER != 0 && t & NUMBER == 0 && types & NUMBER != 0 {
                None // "not integer" over numbers: not expressible here
            } else {
                Some(Excluded { types: t, ..Default::default() })
            }
        }
        Value::Object(m)
            if m.keys().any(|k| string_keys.contains(&k.as_str()))
                && m.keys().all(|k| {
                    k == "type"
                        || string_keys.contains(&k.as_str())
                        || super::ANNOTATIONS.contains(&k.as_str())
                }) =>
        {
            let t = declared_types(m, ptr)?;
            if t & STRING == 0 {
                // The keywords do not apply to the types it allows.
                return excluded_by(&json!({ "type": types_value(t) }), types, ptr, top);
            }
            if t & INTEGER != 0 && t & NUMBER == 0 && types & NUMBER != 0 {
                return Ok(None);
            }
            let group = m
                .iter()
                .filter(|(k, _)| string_keys.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Some(Excluded { types: t & !STRING, values: Vec::new(), strings: vec![group] })
        }
        Value::Object(m) if only(m, &["enum", "const"]) => {
            let values = match (m.get("const"), m.get("enum")) {
                (Some(c), None) => vec![c.clone()],
                (None, Some(Value::Array(e))) => e.clone(),
                // Both: the values of the enum equal to the const.
                (Some(c), Some(Value::Array(e))) => e.iter().filter(|v| same_value(v, c)).cloned().collect(),
                _ => return Ok(None),
            };
            Some(Excluded { values, ..Default::default() })
        }
        Value::Object(m) if top && m.len() == 1 => {
            let Some(branches) = m.get("anyOf").and_then(Value::as_array) else { return Ok(None) };
            let mut out = Excluded::default();
            for x in branches {
                // A branch that is itself a bare `anyOf` is read as its branches.
                let nested = x.as_object().is_some_and(|o| o.len() == 1 && o.contains_key("anyOf"));
                let Some(e) = excluded_by(x, types, ptr, nested)? else { return Ok(None) };
                out.types |= e.types;
                out.values.extend(e.values);
                out.strings.extend(e.strings);
            }
            Some(out)
        }
        _ => None,
    })
}

/// What `not` leaves out, for the simple path: the types left, the values to leave out
/// of them, and the string sets to leave out of the strings.
pub(crate) type NotSimple = (u8, Vec<Value>, Vec<Map<String, Value>>);

/// Applies `not` (the schema `n`, at `ptr`) to a schema `m` of the `types`, when `n` is
/// a union of types, values and string sets: returns the types left, the values to
/// leave out and the string sets to leave out ([`super::string::build`] writes the
/// complement of their joint automaton). Types go as a whole; values go from an
/// `enum`/`const` of `m` by JSON equality, or else from the grammar of their type: `null`
/// and booleans by dropping the literal, strings by the complement of a set of strings
/// (see [`super::string`]). `None` for anything else, numbers, arrays and objects as
/// values included (unless `m` enumerates its values): [`super::not::negate`] decides.
pub(crate) fn apply_not(
    b: &mut Builder,
    n: &Value,
    m: &Map<String, Value>,
    types: u8,
    ptr: &str,
) -> Result<Option<NotSimple>, SchemaError> {
    // Read keyword by keyword: `$ref`s and `allOf` (at the top and in each `anyOf`
    // branch) are inlined first.
    let mut n = b.plain(n, ptr)?;
    if let Some(Value::Array(branches)) = n.get_mut("anyOf") {
        for (i, x) in branches.iter_mut().enumerate() {
            *x = b.plain(x, &format!("{ptr}/anyOf/{i}"))?;
        }
    }
    let Some(ex) = excluded_by(&n, types, ptr, true)? else { return Ok(None) };
    let mut types = types & !ex.types;
    if m.contains_key("enum") || m.contains_key("const") {
        if !ex.strings.is_empty() {
            return Ok(None);
        }
        return Ok(Some((types, ex.values, Vec::new())));
    }
    let mut values = Vec::new();
    for v in ex.values {
        match v {
            Value::Null => types &= !super::types::NULL,
            Value::Bool(_) | Value::String(_) => values.push(v),
            _ if types & value_type(&v) == 0 && !(value_type(&v) == INTEGER && types & NUMBER != 0) => {}
            _ => return Ok(None),
        }
    }
    let strings = if types & STRING != 0 { ex.strings } else { Vec::new() };
    Ok(Some((types, values, strings)))
}

/// JSON equality (numbers by value: `1` and `1.0` are the same instance).
pub(crate) fn same_value(a: &Value, c: &Value) -> bool {
    match (a, c) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
            (Some(p), Some(q), _, _) => p == q,
            (_, _, Some(p), Some(q)) => p == q,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_value(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, p)| y.get(k).is_some_and(|q| same_value(p, q)))
        }
        _ => a == c,
    }
}

/// Checks an `enum`/`const` candidate against simple sibling keywords (string lengths and
/// numeric bounds) so that values the schema excludes are not generated.
pub(crate) fn simple_check(m: &Map<String, Value>, v: &Value) -> bool {
    let f = |k: &str| m.get(k).and_then(Value::as_f64);
    match v {
        Value::String(s) if value_type(v) == STRING => {
            let n = s.chars().count() as f64;
            f("minLength").map_or(true, |x| n >= x) && f("maxLength").map_or(true, |x| n <= x)
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            f("minimum").map_or(true, |b| x >= b)
                && f("maximum").map_or(true, |b| x <= b)
                && f("exclusiveMinimum").map_or(true, |b| x > b)
                && f("exclusiveMaximum").map_or(true, |b| x < b)
        }
        _ => true,
    }
}
