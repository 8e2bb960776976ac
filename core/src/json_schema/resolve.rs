//! `$ref` resolution within one document: `$id` base URIs, `$anchor`s (and Draft-07
//! `$id: "#name"`), `$defs` / `definitions` via JSON pointers. Draft-03/04 documents
//! (by `$schema`) spell the identifier `id`.
//!
//! [`Resolver::new`] walks the document once (iteratively, no recursion, one pointer
//! buffer) and records every resource (`$id`), the base URI it sets, and every anchor. [`Resolver::resolve`] turns a reference into an absolute JSON pointer into the
//! root document. Remote documents are never fetched: a reference to one is
//! [`SchemaErrorKind::UnresolvableRef`].

use super::{SchemaError, SchemaErrorKind};
use rustc_hash::FxHashMap as HashMap;
use serde_json::Value;

/// The base URI used when the root has no `$id`.
pub(crate) const DEFAULT_BASE: &str = "urn:grammask:root";

/// Keywords whose values are data, not schemas (not searched for `$id`).
const DATA_KEYWORDS: &[&str] = &["const", "enum", "examples", "default"];

#[derive(Debug)]
pub(crate) struct Resolver {
    /// Base URI at the root and at each object whose `$id` changes it (elsewhere: the
    /// nearest such ancestor's).
    bases: HashMap<String, String>,
    /// Resource URI (no fragment) → pointer of its root.
    resources: HashMap<String, String>,
    /// `uri#anchor` → pointer.
    anchors: HashMap<String, String>,
}

/// Escapes a key for a JSON pointer.
pub(crate) fn escape_token(key: &str) -> std::borrow::Cow<'_, str> {
    if key.contains(['~', '/']) {
        key.replace('~', "~0").replace('/', "~1").into()
    } else {
        key.into()
    }
}

/// The identifier keyword: `id` up to Draft 04 (by the root's `$schema`), `$id` since.
fn id_keyword(root: &Value) -> &'static str {
    match root.get("$schema").and_then(Value::as_str) {
        Some(uri) if uri.contains("draft-03") || uri.contains("draft-04") => "id",
        _ => "$id",
    }
}

fn strip_fragment(uri: &str) -> &str {
    uri.split('#').next().unwrap_or(uri)
}

fn has_scheme(r: &str) -> bool {
    let Some(i) = r.find(':') else { return false };
    let s = &r[..i];
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
}

fn remove_dots(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = path.split('/').collect();
    for (i, s) in segs.iter().enumerate() {
        match *s {
            "." => {
                if i + 1 == segs.len() {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if i + 1 == segs.len() {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    out.join("/")
}

/// RFC 3986 reference resolution (the subset schemas use).
pub(crate) fn join(base: &str, r: &str) -> String {
    if has_scheme(r) {
        return r.to_string();
    }
    let base = strip_fragment(base);
    if r.is_empty() {
        return base.to_string();
    }
    if r.starts_with('#') {
        return format!("{base}{r}");
    }
    let (scheme, rest) = match base.find(':') {
        Some(i) => (&base[..=i], &base[i + 1..]),
        None => ("", base),
    };
    if let Some(stripped) = r.strip_prefix("//") {
        return format!("{scheme}//{stripped}");
    }
    let (authority, path) = match rest.strip_prefix("//") {
        Some(a) => match a.find('/') {
            Some(i) => (format!("//{}", &a[..i]), &a[i..]),
            None => (format!("//{a}"), ""),
        },
        None => (String::new(), rest),
    };
    let path = path.split('?').next().unwrap_or(path);
    let (rpath, tail) = match r.find(['?', '#']) {
        Some(i) => (&r[..i], &r[i..]),
        None => (r, ""),
    };
    let merged = if rpath.starts_with('/') {
        rpath.to_string()
    } else if rpath.is_empty() {
        path.to_string()
    } else {
        match path.rfind('/') {
            Some(i) => format!("{}{}", &path[..=i], rpath),
            None if !authority.is_empty() => format!("/{rpath}"),
            None => rpath.to_string(),
        }
    };
    format!("{scheme}{authority}{}{tail}", remove_dots(&merged))
}

/// `%XX` escapes of a JSON pointer in a URI fragment, decoded (a `%` not followed by two
/// hex digits stays as it is).
pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        // `get`: the two bytes after `%` may split a multi-byte character.
        let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Resolver {
    /// Indexes `root`. With `ref_alone` (Draft 4–7 documents) an `$id` beside a `$ref` is
    /// ignored like every other sibling of `$ref`, so it changes no base URI.
    pub fn new(root: &Value, ref_alone: bool) -> Resolver {
        let mut r = Resolver {
            bases: HashMap::default(),
            resources: HashMap::default(),
            anchors: HashMap::default(),
        };
        let id_key = id_keyword(root);
        let root_id = root.get(id_key).filter(|_| !(ref_alone && root.get("$ref").is_some()));
        let root_base = match root_id.and_then(Value::as_str) {
            Some(id) if !id.starts_with('#') => join(DEFAULT_BASE, id),
            _ => DEFAULT_BASE.to_string(),
        };
        r.resources.insert(strip_fragment(&root_base).to_string(), String::new());
        r.resources.insert(DEFAULT_BASE.to_string(), String::new());
        // Bases are recorded only where an `$id` changes them (most documents: the root
        // alone); `base_at` looks up the nearest recorded ancestor.
        r.bases.insert(String::new(), root_base.clone());
        let mut bases = vec![root_base];
        // Depth-first with an explicit stack: when a node is popped, every node handled
        // since its parent was pushed is a descendant of that parent, so the pointer
        // buffer still starts with the parent's pointer.
        enum Seg<'a> {
            Root,
            Key(&'a str),
            Index(usize),
        }
        let mut ptr = String::new();
        let mut stack: Vec<(&Value, usize, Seg, usize)> = vec![(root, 0, Seg::Root, 0)];
        while let Some((v, parent_len, seg, base_ix)) = stack.pop() {
            ptr.truncate(parent_len);
            match seg {
                Seg::Root => {}
                Seg::Key(k) => {
                    ptr.push('/');
                    ptr.push_str(&escape_token(k));
                }
                Seg::Index(i) => {
                    use std::fmt::Write;
                    let _ = write!(ptr, "/{i}");
                }
            }
            let len = ptr.len();
            match v {
                Value::Object(m) => {
                    let mut base_ix = base_ix;
                    let id = m.get(id_key).and_then(Value::as_str);
                    if let Some(id) = id.filter(|_| !(ref_alone && m.contains_key("$ref"))) {
                        let base = &bases[base_ix];
                        if let Some(anchor) = id.strip_prefix('#') {
                            r.anchors.insert(format!("{}#{anchor}", strip_fragment(base)), ptr.clone());
                        } else {
                            let base = join(base, id);
                            r.resources.insert(strip_fragment(&base).to_string(), ptr.clone());
                            if let Some((_, frag)) = id.split_once('#') {
                                if !frag.is_empty() && !frag.starts_with('/') {
                                    r.anchors
                                        .insert(format!("{}#{frag}", strip_fragment(&base)), ptr.clone());
                                }
                            }
                            r.bases.insert(ptr.clone(), base.clone());
                            bases.push(base);
                            base_ix = bases.len() - 1;
                        }
                    }
                    for key in ["$anchor", "$dynamicAnchor"] {
                        if let Some(a) = m.get(key).and_then(Value::as_str) {
                            r.anchors
                                .entry(format!("{}#{a}", strip_fragment(&bases[base_ix])))
                                .or_insert_with(|| ptr.clone());
                        }
                    }
                    let children = m.iter().filter(|(k, _)| !DATA_KEYWORDS.contains(&k.as_str()));
                    stack.extend(
                        children
                            .filter(|(_, c)| c.is_object() || c.is_array())
                            .map(|(k, c)| (c, len, Seg::Key(k), base_ix)),
                    );
                }
                Value::Array(a) => {
                    let children = a.iter().enumerate().filter(|(_, c)| c.is_object() || c.is_array());
                    stack.extend(children.map(|(i, c)| (c, len, Seg::Index(i), base_ix)));
                }
                _ => {}
            }
        }
        r
    }

    /// Base URI in force at `pointer`.
    pub fn base_at(&self, pointer: &str) -> String {
        let mut p = pointer;
        loop {
            if let Some(b) = self.bases.get(p) {
                return b.clone();
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => return DEFAULT_BASE.to_string(),
            }
        }
    }

    /// Resolves `reference` (as written at `pointer`) to a JSON pointer into the root.
    pub fn resolve(&self, root: &Value, reference: &str, pointer: &str) -> Result<String, SchemaError> {
        let err = || SchemaError {
            kind: SchemaErrorKind::UnresolvableRef(reference.to_string()),
            pointer: pointer.to_string(),
        };
        let abs = join(&self.base_at(pointer), reference);
        let (doc, frag) = match abs.split_once('#') {
            Some((d, f)) => (d, f),
            None => (abs.as_str(), ""),
        };
        let frag = percent_decode(frag);
        let target = if frag.is_empty() || frag.starts_with('/') {
            let res = self.resources.get(doc).ok_or_else(err)?;
            format!("{res}{frag}")
        } else {
            self.anchors.get(&format!("{doc}#{frag}")).cloned().ok_or_else(err)?
        };
        if root.pointer(&target).is_none() {
            return Err(err());
        }
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_never_splits_a_character() {
        assert_eq!(percent_decode("/a%20b/%7e"), "/a b/~");
        assert_eq!(percent_decode("/%aé"), "/%aé");
        assert_eq!(percent_decode("/100%"), "/100%");
    }

    #[test]
    fn joins() {
        assert_eq!(join("http://x.com/a/b.json", "c.json"), "http://x.com/a/c.json");
        assert_eq!(join("http://x.com/a/b.json", "#/defs"), "http://x.com/a/b.json#/defs");
        assert_eq!(join("http://x.com/a/b.json", "../c"), "http://x.com/c");
        assert_eq!(join("http://x.com/a/", "/r"), "http://x.com/r");
        assert_eq!(join("urn:grammask:root", "#foo"), "urn:grammask:root#foo");
    }

    #[test]
    fn resolves_ids_and_anchors() {
        let s = serde_json::json!({
            "$id": "http://e.com/root.json",
            "$defs": {
                "a": {"$id": "a.json", "$defs": {"x": {"$anchor": "xx", "type": "integer"}}},
                "b": {"type": "string"}
            }
        });
        let r = Resolver::new(&s, false);
        assert_eq!(r.resolve(&s, "#/$defs/b", "").unwrap(), "/$defs/b");
        assert_eq!(r.resolve(&s, "a.json#xx", "").unwrap(), "/$defs/a/$defs/x");
        assert_eq!(r.resolve(&s, "http://e.com/a.json#/$defs/x", "").unwrap(), "/$defs/a/$defs/x");
        assert_eq!(r.resolve(&s, "#xx", "/$defs/a").unwrap(), "/$defs/a/$defs/x");
        assert!(r.resolve(&s, "#/nope", "").is_err());
    }

    #[test]
    fn draft_04_spells_the_identifier_id() {
        // (Github_easy o35906: `{"$ref": "#solarSystemId"}` names a definition's `id`.)
        let s = serde_json::json!({
            "$schema": "http://json-schema.org/draft-04/schema#",
            "definitions": {"n": {"id": "#nat", "type": "integer"}, "l": {"items": {"$ref": "#nat"}}},
            "properties": {"id": {"type": "string"}}
        });
        let r = Resolver::new(&s, true);
        assert_eq!(r.resolve(&s, "#nat", "/definitions/l/items").unwrap(), "/definitions/n");
        // Since Draft 06 `id` is no keyword: a schema that says so does not resolve it.
        let mut later = s.clone();
        later["$schema"] = "http://json-schema.org/draft-07/schema#".into();
        assert!(Resolver::new(&later, true).resolve(&later, "#nat", "").is_err());
    }
}
