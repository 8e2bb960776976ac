//! Finite values decide everything: when a schema can only ever be one of a few values
//! (`enum`/`const`, directly or through `allOf`, `$ref`, or an `anyOf`/`oneOf` whose
//! every branch enumerates), every other keyword beside them is decided per value, at
//! compile time, by a full validator (the `jsonschema` crate) — whatever the keyword:
//! `not`, `if`/`then`/`else`, `oneOf`, `uniqueItems`, `dependentSchemas`, formats,
//! `multipleOf` on floats. The grammar is then exactly the values that survive.
//!
//! This runs before any keyword-level conversion, so such schemas are exact and never an
//! "unsupported keyword" error. Schemas whose finite values sit beside nothing the
//! keyword-level path does not already handle exactly (`type`, lengths, bounds,
//! annotations) skip the validator: building one costs far more than that path.

use super::combine::{absolutize, same_value};
use super::resolve::DEFAULT_BASE;
use super::types::Builder;
use serde_json::{Map, Value};

/// Keywords beside finite values that the keyword-level path checks exactly itself
/// ([`super::combine::simple_check`]); with [`super::ANNOTATIONS`], which say nothing
/// about instances.
const SIMPLE: &[&str] = &[
    "enum",
    "const",
    "type",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
];

/// Most candidate values tried (each is one validation).
const MAX_CANDIDATES: usize = 4096;
/// Most `$ref` / `allOf` / `anyOf` levels looked through for candidates.
const MAX_DEPTH: usize = 16;

/// The values `s` (at `ptr`) can be, if finitely many and found by looking through
/// `enum`/`const`, `allOf` (any part that enumerates), `$ref` and `anyOf`/`oneOf` (every
/// branch enumerates); `None` otherwise.
fn candidates(b: &Builder, s: &Value, ptr: &str, depth: usize) -> Option<Vec<Value>> {
    match s {
        Value::Bool(false) => Some(Vec::new()),
        Value::Object(m) => object_candidates(b, m, ptr, depth),
        _ => None,
    }
}

/// [`candidates`] of an object schema.
fn object_candidates(b: &Builder, m: &Map<String, Value>, ptr: &str, depth: usize) -> Option<Vec<Value>> {
    if depth > MAX_DEPTH {
        return None;
    }
    if let Some(r) = m.get("$ref").and_then(Value::as_str) {
        let target = b.resolver.resolve(b.root, r, ptr).ok()?;
        let found = candidates(b, b.root.pointer(&target)?, &target, depth + 1);
        // Draft 4–7: the siblings of a `$ref` are ignored.
        if found.is_some() || b.ref_alone() {
            return found;
        }
    }
    match (m.get("const"), m.get("enum")) {
        (Some(c), _) => return Some(vec![c.clone()]),
        (None, Some(Value::Array(e))) => return Some(e.clone()),
        _ => {}
    }
    if let Some(Value::Array(all)) = m.get("allOf") {
        if let Some(found) =
            all.iter().enumerate().find_map(|(i, x)| candidates(b, x, &format!("{ptr}/allOf/{i}"), depth + 1))
        {
            return Some(found);
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = m.get(key) {
            let mut out: Vec<Value> = Vec::new();
            for (i, x) in branches.iter().enumerate() {
                for v in candidates(b, x, &format!("{ptr}/{key}/{i}"), depth + 1)? {
                    if !out.iter().any(|o| same_value(o, &v)) {
                        out.push(v);
                    }
                }
                if out.len() > MAX_CANDIDATES {
                    return None;
                }
            }
            return Some(out);
        }
    }
    None
}

/// The JSON Schema draft a validator must apply, from the root's `$schema`.
fn draft(root: &Value) -> jsonschema::Draft {
    use jsonschema::Draft;
    match root.get("$schema").and_then(Value::as_str) {
        Some(u) if u.contains("draft-04") || u.contains("draft-03") => Draft::Draft4,
        Some(u) if u.contains("draft-06") => Draft::Draft6,
        Some(u) if u.contains("draft-07") => Draft::Draft7,
        Some(u) if u.contains("2019-09") => Draft::Draft201909,
        _ => Draft::Draft202012,
    }
}

/// When `m` (at `ptr`) can only be finitely many values and says more about them than
/// the keyword-level path decides exactly: the values the whole schema accepts, each
/// checked by the `jsonschema` crate. `None` when the values are not finite, when
/// nothing beside them needs a validator, or when no validator can be built (a remote
/// reference, say); the keyword-level path then runs as usual.
pub(crate) fn values(b: &Builder, m: &Map<String, Value>, ptr: &str) -> Option<Vec<Value>> {
    if m.keys().all(|k| SIMPLE.contains(&k.as_str()) || super::ANNOTATIONS.contains(&k.as_str())) {
        return None;
    }
    // (Most schemas are not finite: the copy waits until they are.)
    let vals = object_candidates(b, m, ptr, 0)?;
    if vals.len() > MAX_CANDIDATES {
        return None;
    }
    let schema = Value::Object(m.clone());
    // References point into the root, registered whole under the base the resolver
    // uses, so that the copy validates exactly as the schema in place.
    let entry = absolutize(b, &schema, ptr);
    let root = jsonschema::Resource::from_contents(b.root.clone()).ok()?;
    let validator = jsonschema::options()
        .with_draft(draft(b.root))
        .should_validate_formats(true)
        .with_resource(DEFAULT_BASE, root)
        .build(&entry)
        .ok()?;
    Some(vals.into_iter().filter(|v| validator.is_valid(v)).collect())
}
