//! `oneOf`: when its branches provably exclude each other it is built like `anyOf`, which
//! is then exact; two common overlapping forms are rewritten into exclusive branches.
//!
//! Branch `A` *excludes* branch `B` when no value of `A`'s grammar satisfies `B`:
//! - their types do not meet (integer ⊂ number);
//! - both enumerate their values (`const`/`enum`) and share none;
//! - where they meet only on objects, a *separating property* `p` that every object of
//!   `A` carries (`required` in `A` or beside the `oneOf`) and that `B` rejects: `B`
//!   declares `p` with values disjoint from `A`'s (types or enumerations, recursively), or
//!   `B` is closed (`additionalProperties: false`, no pattern properties) without `p`.
//!
//! Closed objects (`additionalProperties: false`, no pattern properties) that reject each
//! other's members meet on `{}` alone. `{}` is then valid only if exactly one branch
//! accepts it; when several do, each of those takes `minProperties: 1`, and the branches
//! are exclusive (when a branch says more than this can judge about `{}`, no rewrite).
//!
//! Strict mode ([`JsonSchemaOptions::strict`](super::JsonSchemaOptions::strict)) also
//! uses a separating property that `A` declares but does not require: `A`'s grammar then
//! requires it. That grammar generates the objects of `A` that carry `p`, each of which
//! fails every other branch, and leaves out the ones without `p` (which may satisfy
//! several branches: `{}` against `{"properties": {"kind": {"const": "a"}}}` and
//! `{"properties": {"kind": {"const": "b"}}}`). It is the same narrowing strict mode makes
//! for undeclared members — every generated value is valid — and a
//! [`SchemaWarning`](super::SchemaWarning) names it. With JSON semantics such a `oneOf`
//! stays an unsupported keyword.

use super::combine::same_value;
use super::types::{declared_types, value_type, Builder, ALL_TYPES, INTEGER, NUMBER, OBJECT};
use serde_json::{json, Map, Value};

/// How a `oneOf` can be built.
pub(crate) enum Exclusive {
    /// These branches (the originals or a rewrite), as `anyOf`, are exactly the `oneOf`.
    Exact(Vec<Value>),
    /// These branches are exclusive but leave out values of the `oneOf`: the properties
    /// made required, one list per branch.
    Narrowed(Vec<Value>, Vec<Vec<String>>),
    /// No exclusive form found.
    Overlapping,
}

/// Most `$ref` hops followed when looking through a branch.
const MAX_HOPS: usize = 8;
/// How deep property values are compared.
const MAX_DEPTH: u32 = 3;

/// The exclusive form of the `oneOf` `branches`, `rest` being the keywords beside it.
pub(crate) fn exclusive(b: &Builder, rest: &Map<String, Value>, branches: &[Value], ptr: &str) -> Exclusive {
    let rest_types = declared_types(rest, ptr).unwrap_or(ALL_TYPES);
    let views: Vec<View> = branches.iter().map(|s| View::of(b, s, ptr, rest, rest_types)).collect();
    // Per ordered pair: why `a` excludes `c`, and whether the two meet on `{}` only.
    let mut pairs = Vec::new();
    for (i, a) in views.iter().enumerate() {
        for (j, c) in views.iter().enumerate() {
            if i != j {
                let verdict = excludes(b, a, c, 0);
                let empty =
                    !matches!(verdict, Some(None)) && (meet_only_empty(b, a, c) || meet_only_empty(b, c, a));
                pairs.push((i, verdict, empty));
            }
        }
    }
    if pairs.iter().any(|p| p.2) && pairs.iter().all(|p| p.2 || matches!(p.1, Some(None))) {
        if let Some(rewritten) = without_shared_empty(&views, branches) {
            return Exclusive::Exact(rewritten);
        }
    }
    let mut required: Vec<Vec<String>> = vec![Vec::new(); branches.len()];
    let mut exact = true;
    for (i, verdict, _) in pairs {
        match verdict {
            Some(None) => {}
            Some(Some(p)) => {
                exact = false;
                if !required[i].contains(&p) {
                    required[i].push(p);
                }
            }
            None => {
                return exclusive_required(b, rest, branches, ptr)
                    .map_or(Exclusive::Overlapping, Exclusive::Exact)
            }
        }
    }
    if exact {
        return Exclusive::Exact(branches.to_vec());
    }
    if let Some(rewritten) = exclusive_required(b, rest, branches, ptr) {
        return Exclusive::Exact(rewritten);
    }
    let narrowed = branches
        .iter()
        .zip(&required)
        .map(|(s, req)| if req.is_empty() { s.clone() } else { json!({ "allOf": [s, { "required": req }] }) })
        .collect();
    Exclusive::Narrowed(narrowed, required)
}

/// What one branch says, looked through `$ref`s.
struct View<'a> {
    schema: &'a Value,
    /// Where `schema` sits (the base for its own `$ref`s).
    ptr: String,
    types: u8,
    /// Every object of the branch has these (its `required` and the sibling `required`).
    required: Vec<&'a str>,
}

impl<'a> View<'a> {
    fn of(b: &'a Builder, s: &'a Value, ptr: &str, rest: &'a Map<String, Value>, rest_types: u8) -> Self {
        let (schema, ptr) = follow(b, s, ptr);
        let mut required = required_of(schema);
        required.extend(
            rest.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str),
        );
        View { types: types_of(schema, &ptr) & rest_types, schema, ptr, required }
    }
}

/// `s` with its `$ref` chain followed, and the pointer of the result.
fn follow<'a>(b: &'a Builder, mut s: &'a Value, ptr: &str) -> (&'a Value, String) {
    let mut at = ptr.to_string();
    for _ in 0..MAX_HOPS {
        let Some(r) = s.get("$ref").and_then(Value::as_str) else { break };
        match b.resolver.resolve(b.root, r, &at).ok().and_then(|t| Some((b.root.pointer(&t)?, t))) {
            Some((target, t)) => (s, at) = (target, t),
            None => break,
        }
    }
    (s, at)
}

fn required_of(s: &Value) -> Vec<&str> {
    s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect()
}

/// Types a schema allows, from `type`, `const` and `enum` (`true`/unknown forms: all).
fn types_of(s: &Value, ptr: &str) -> u8 {
    let Some(m) = s.as_object() else {
        return if s == &Value::Bool(false) { 0 } else { ALL_TYPES };
    };
    let mut t = declared_types(m, ptr).unwrap_or(ALL_TYPES);
    if let Some(v) = enumerated(s) {
        t &= v.iter().fold(0, |acc, v| acc | value_type(v));
    }
    // integer ⊂ number: a number type admits the integers.
    if t & NUMBER != 0 {
        t |= INTEGER;
    }
    t
}

/// The values a schema enumerates (`const`, or `enum`).
fn enumerated(s: &Value) -> Option<Vec<&Value>> {
    match (s.get("const"), s.get("enum")) {
        (Some(c), _) => Some(vec![c]),
        (None, Some(Value::Array(e))) => Some(e.iter().collect()),
        _ => None,
    }
}

/// Whether no value satisfies both schemas (a sound, incomplete test).
fn disjoint(b: &Builder, a: &Value, a_ptr: &str, c: &Value, c_ptr: &str, depth: u32) -> bool {
    let (a, a_ptr) = follow(b, a, a_ptr);
    let (c, c_ptr) = follow(b, c, c_ptr);
    let (ta, tc) = (types_of(a, &a_ptr), types_of(c, &c_ptr));
    if ta & tc == 0 {
        return true;
    }
    if let (Some(x), Some(y)) = (enumerated(a), enumerated(c)) {
        if x.iter().all(|p| !y.iter().any(|q| same_value(p, q))) {
            return true;
        }
    }
    if ta & tc == OBJECT && depth < MAX_DEPTH {
        let va = View { schema: a, types: ta, required: required_of(a), ptr: a_ptr.clone() };
        let vc = View { schema: c, types: tc, required: required_of(c), ptr: c_ptr.clone() };
        return matches!(excludes(b, &va, &vc, depth + 1), Some(None));
    }
    false
}

/// Whether branch `a` excludes branch `c`: `Some(None)` as written, `Some(Some(p))` once
/// `a` requires its property `p`, `None` when no reason is found.
fn excludes(b: &Builder, a: &View, c: &View, depth: u32) -> Option<Option<String>> {
    let common = a.types & c.types;
    if common == 0 {
        return Some(None);
    }
    if let (Some(x), Some(y)) = (enumerated(a.schema), enumerated(c.schema)) {
        if x.iter().all(|p| !y.iter().any(|q| same_value(p, q))) {
            return Some(None);
        }
    }
    if common != OBJECT {
        return None;
    }
    let props = a.schema.get("properties").and_then(Value::as_object)?;
    let c_props = c.schema.get("properties").and_then(Value::as_object);
    let c_closed = closed(b, c);
    let mut found: Option<&str> = None;
    for (p, ps) in props {
        let rejected = match c_props.and_then(|m| m.get(p)) {
            Some(cs) => {
                let pa = Builder::child(&a.ptr, "properties", p);
                let pc = Builder::child(&c.ptr, "properties", p);
                disjoint(b, ps, &pa, cs, &pc, depth)
            }
            None => c_closed,
        };
        if !rejected {
            continue;
        }
        if a.required.contains(&p.as_str()) {
            return Some(None);
        }
        found = found.or(Some(p));
    }
    // Only the top level may narrow: a nested narrowing would not be written anywhere.
    found.filter(|_| depth == 0).map(|p| Some(p.to_string()))
}

/// Whether every object `a` and `c` both accept is `{}`: `a` is closed (no pattern
/// properties) and `c` rejects each member `a` declares (values disjoint, or `c` closed
/// without it), so an object of `a` with any member fails `c`.
fn meet_only_empty(b: &Builder, a: &View, c: &View) -> bool {
    if a.types & c.types & !OBJECT != 0 || !closed(b, a) {
        return false;
    }
    let Some(props) = a.schema.get("properties").and_then(Value::as_object) else { return false };
    let c_props = c.schema.get("properties").and_then(Value::as_object);
    props.iter().all(|(p, ps)| match c_props.and_then(|m| m.get(p)) {
        Some(cs) => {
            let (pa, pc) = (Builder::child(&a.ptr, "properties", p), Builder::child(&c.ptr, "properties", p));
            disjoint(b, ps, &pa, cs, &pc, 0)
        }
        None => closed(b, c),
    })
}

/// `additionalProperties: false` (behind `$ref`s too) and no pattern properties: only
/// declared members.
fn closed(b: &Builder, v: &View) -> bool {
    let Some(extra) = v.schema.get("additionalProperties") else { return false };
    let (extra, _) = follow(b, extra, &Builder::child(&v.ptr, "additionalProperties", ""));
    extra == &Value::Bool(false)
        && v.schema.get("patternProperties").and_then(Value::as_object).map_or(true, Map::is_empty)
}

/// Whether `{}` satisfies a branch: `None` when the branch says more than this can judge.
fn accepts_empty(v: &View) -> Option<bool> {
    if v.types & OBJECT == 0 || !v.required.is_empty() {
        return Some(false);
    }
    let m = v.schema.as_object()?;
    if m.get("minProperties").and_then(Value::as_u64).is_some_and(|n| n > 0) {
        return Some(false);
    }
    const SAYS_NOTHING_OF_EMPTY: &[&str] = &[
        "type",
        "properties",
        "additionalProperties",
        "patternProperties",
        "propertyNames",
        "required",
        "minProperties",
        "maxProperties",
        "dependentRequired",
        "dependencies",
        "title",
        "description",
        "$comment",
        "default",
        "examples",
        "$schema",
        "$id",
        "$anchor",
        "$defs",
        "definitions",
    ];
    m.keys().all(|k| SAYS_NOTHING_OF_EMPTY.contains(&k.as_str())).then_some(true)
}

/// The branches of a `oneOf` whose only common value is `{}`, made exclusive: `{}` is
/// valid when exactly one branch accepts it, so when several do it leaves them all
/// (`minProperties: 1`). `None` when whether a branch accepts `{}` is unclear.
fn without_shared_empty(views: &[View], branches: &[Value]) -> Option<Vec<Value>> {
    let empty: Vec<bool> = views.iter().map(accepts_empty).collect::<Option<_>>()?;
    if empty.iter().filter(|&&e| e).count() < 2 {
        return Some(branches.to_vec());
    }
    Some(
        branches
            .iter()
            .zip(&empty)
            .map(|(s, &e)| if e { json!({ "allOf": [s, { "minProperties": 1 }] }) } else { s.clone() })
            .collect(),
    )
}

/// `oneOf` branches rewritten to be mutually exclusive, for the common "exactly one of
/// these property sets" form: the instance is an object (`type: "object"` beside the
/// `oneOf`) and every branch is just `{"required": [names…]}`. Branch `j` fails exactly when
/// one of its names is absent, so branch `i` gets, for every other branch `j`,
/// `anyOf: [{properties: {n: false}} for n in names_j]` (one property suffices when `j`
/// names one), and no object matches two branches. `None` when the form does not apply.
fn exclusive_required(
    b: &Builder,
    rest: &Map<String, Value>,
    branches: &[Value],
    ptr: &str,
) -> Option<Vec<Value>> {
    if rest.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    let only_required = |s: &Value| -> Option<Vec<String>> {
        let m = s.as_object()?;
        if !m.keys().all(|k| matches!(k.as_str(), "required" | "title" | "description" | "$comment")) {
            return None;
        }
        let names: Vec<String> = m
            .get("required")?
            .as_array()?
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<_>>()?;
        (!names.is_empty()).then_some(names)
    };
    let names: Vec<Vec<String>> = branches
        .iter()
        .enumerate()
        .map(|(i, s)| only_required(follow(b, s, &format!("{ptr}/oneOf/{i}")).0))
        .collect::<Option<_>>()?;
    let absent = |n: &String| json!({ "properties": { n.clone(): false } });
    let mut out = Vec::with_capacity(names.len());
    for (i, own) in names.iter().enumerate() {
        let mut all = vec![json!({ "required": own })];
        for (j, other) in names.iter().enumerate() {
            if i != j {
                all.push(match other.as_slice() {
                    [one] => absent(one),
                    many => json!({ "anyOf": many.iter().map(absent).collect::<Vec<_>>() }),
                });
            }
        }
        out.push(json!({ "allOf": all }));
    }
    Some(out)
}
