//! Moving subschemas behind `$ref`s (the `$ref`-transparency test and the fuzz).

use serde_json::{Map, Value};

/// Keywords whose value is one subschema.
const ONE: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
];
/// Keywords whose value maps names to subschemas.
const MAP: &[&str] =
    &["properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"];
/// Keywords whose value is a list of subschemas.
const LIST: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];

/// Escapes a JSON pointer token.
pub fn esc(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// JSON pointers of every subschema below the root (objects and booleans).
pub fn subschemas(v: &Value, ptr: &str, out: &mut Vec<String>) {
    let Value::Object(m) = v else { return };
    let mut visit = |child: &Value, p: String| {
        if child.is_object() || child.is_boolean() {
            out.push(p.clone());
            subschemas(child, &p, out);
        }
    };
    for (k, x) in m {
        let kp = format!("{ptr}/{}", esc(k));
        if ONE.contains(&k.as_str()) || (k == "items" && !x.is_array()) {
            visit(x, kp);
        } else if MAP.contains(&k.as_str()) {
            for (name, s) in x.as_object().into_iter().flatten() {
                // Draft-07 `dependencies` also maps names to arrays of names: not schemas.
                visit(s, format!("{kp}/{}", esc(name)));
            }
        } else if LIST.contains(&k.as_str()) || k == "items" {
            for (i, s) in x.as_array().into_iter().flatten().enumerate() {
                visit(s, format!("{kp}/{i}"));
            }
        }
    }
}

/// Whether moving subschemas of `doc` keeps every reference meaningful: no base-URI
/// changes (`$id`/`id`), no dynamic references, every `$ref` a pointer into the document
/// (or `#`) that does not pass through a subschema we might replace.
pub fn movable(doc: &Value) -> bool {
    fn walk(v: &Value, ok: &mut bool) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    match k.as_str() {
                        "$id" | "id" | "$anchor" | "$dynamicRef" | "$dynamicAnchor" | "$recursiveRef"
                        | "$recursiveAnchor"
                            if x.is_string() =>
                        {
                            *ok = false;
                        }
                        "$ref" => {
                            let r = x.as_str().unwrap_or("");
                            // A pointer to a definition (whole), or to the root.
                            let simple = r == "#"
                                || ["#/$defs/", "#/definitions/"]
                                    .iter()
                                    .any(|p| r.strip_prefix(p).is_some_and(|rest| !rest.contains('/')));
                            if !simple {
                                *ok = false;
                            }
                        }
                        "enum" | "const" | "examples" | "default" => continue,
                        _ => {}
                    }
                    walk(x, ok);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, ok)),
            _ => {}
        }
    }
    let mut ok = doc.is_object();
    walk(doc, &mut ok);
    ok
}

/// Where moved subschemas go: a `$defs` member of the root no schema uses.
const HOME: &str = "gm_moved";

/// `doc` with the subschema at `ptr` moved to `#/$defs/gm_moved_N` and a `$ref` in its place.
pub fn move_one(doc: &Value, ptr: &str, n: usize) -> Value {
    let mut out = doc.clone();
    let target = out.pointer_mut(ptr).expect("pointer from subschemas()");
    let moved = std::mem::replace(target, Value::Null);
    let name = format!("{HOME}_{n}");
    *target = Value::Object(Map::from_iter([("$ref".to_string(), Value::String(format!("#/$defs/{name}")))]));
    let defs = out.as_object_mut().unwrap().entry("$defs").or_insert_with(|| Value::Object(Map::new()));
    defs.as_object_mut().expect("$defs is an object").insert(name, moved);
    out
}

/// `doc` with every subschema moved (deepest first, so that pointers stay valid).
pub fn move_all(doc: &Value) -> Value {
    let mut ptrs = Vec::new();
    subschemas(doc, "", &mut ptrs);
    // Deepest first: moving a parent first would change its children's pointers.
    ptrs.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
    let mut out = doc.clone();
    for (n, p) in ptrs.iter().enumerate() {
        // A root `$defs` member is already a definition; moving it again is a no-op.
        if p.starts_with("/$defs/") && p.matches('/').count() == 2 {
            continue;
        }
        out = move_one(&out, p, n);
    }
    out
}
