//! llguidance's `x-guidance` options, read from a schema's root.
//!
//! Several of them change the language (`json_allowed_escapes` narrows strings,
//! `whitespace_flexible: false` with llguidance's separators writes `{"a":1}`), so none is
//! ignored: an option grammask has the same language for is honoured (mapped onto
//! [`JsonSchemaOptions`]), any other value or key is a typed error naming it. Every
//! other keyword is read at the root only, as llguidance does; an `x-guidance` in a
//! subschema is refused (see `types`).
//!
//! | key | honoured | refused |
//! |---|---|---|
//! | `whitespace_flexible` | `true` (any JSON whitespace), `false` with the separators `", "` and `": "` (the compact layout) | `false` with other separators (llguidance's default `,` and `:`) |
//! | `item_separator`, `key_separator` | those of the layout in effect: `,`/`:` up to whitespace when flexible, `", "`/`": "` when compact | others |
//! | `lenient` | both ([`JsonSchemaOptions::lenient`]) | — |
//! | `coerce_one_of` | `false` (grammask's `oneOf` is exact) | `true` |
//! | `json_allowed_escapes` | every escape (`nrbtf"\/u`, any order) | a subset |
//! | `json_allow_general_unicode_escapes` | `true` (grammask's only language) | `false` |
//! | `whitespace_pattern` | `null` | a pattern |

use super::{JsonSchemaOptions, SchemaError, SchemaErrorKind, Whitespace};
use serde_json::Value;

/// `base` with the root's `x-guidance` options applied, or the error naming the first
/// one grammask does not have.
pub(crate) fn apply(schema: &Value, base: &JsonSchemaOptions) -> Result<JsonSchemaOptions, SchemaError> {
    let mut opts = base.clone();
    let Some(g) = schema.get("x-guidance") else { return Ok(opts) };
    let at = |key: &str| format!("/x-guidance/{key}");
    let refuse = |key: &str, why: String| SchemaError {
        kind: SchemaErrorKind::Unsupported { keyword: format!("x-guidance.{key}"), detail: why },
        pointer: at(key),
    };
    let shape = |key: &str, what: &str| SchemaError {
        kind: SchemaErrorKind::NotASchema(format!("`x-guidance.{key}` must be {what}")),
        pointer: at(key),
    };
    let g = g.as_object().ok_or_else(|| SchemaError {
        kind: SchemaErrorKind::NotASchema("`x-guidance` must be an object".into()),
        pointer: "/x-guidance".into(),
    })?;
    let flag = |key: &str| match g.get(key) {
        None => Ok(None),
        Some(v) => v.as_bool().map(Some).ok_or_else(|| shape(key, "a boolean")),
    };
    let text = |key: &str| match g.get(key) {
        None => Ok(None),
        Some(v) => v.as_str().map(Some).ok_or_else(|| shape(key, "a string")),
    };
    for key in g.keys() {
        if !KEYS.contains(&key.as_str()) {
            return Err(refuse(key, "not an option grammask knows".into()));
        }
    }
    if let Some(l) = flag("lenient")? {
        opts.lenient = l;
    }
    if flag("coerce_one_of")? == Some(true) {
        return Err(refuse("coerce_one_of", "grammask builds `oneOf` exactly or refuses it".into()));
    }
    if flag("json_allow_general_unicode_escapes")? == Some(false) {
        return Err(refuse(
            "json_allow_general_unicode_escapes",
            "strings accept every `\\uXXXX` spelling; narrowing them is not supported".into(),
        ));
    }
    if let Some(e) = text("json_allowed_escapes")? {
        if !"nrbtf\"\\/u".chars().all(|c| e.contains(c)) {
            return Err(refuse(
                "json_allowed_escapes",
                format!("{e:?}: strings accept every JSON escape (`nrbtf\"\\/u`); a subset is not supported"),
            ));
        }
    }
    match g.get("whitespace_pattern") {
        None | Some(Value::Null) => {}
        Some(_) => return Err(refuse("whitespace_pattern", "whitespace patterns are not supported".into())),
    }
    let (item, key) = (text("item_separator")?, text("key_separator")?);
    match flag("whitespace_flexible")? {
        Some(true) => opts.whitespace = Whitespace::Any { max: u32::MAX },
        // Fixed separators: llguidance's own are `,` and `:`, which grammask does not
        // write; `", "` and `": "` are its compact layout.
        Some(false) => match (item, key) {
            (Some(", "), Some(": ")) => opts.whitespace = Whitespace::Compact,
            _ => {
                return Err(refuse(
                    "whitespace_flexible",
                    format!(
                        "false with the separators {:?} and {:?}: grammask's fixed layout writes \", \" and \": \"",
                        item.unwrap_or(","),
                        key.unwrap_or(":")
                    ),
                ))
            }
        },
        None => {}
    }
    // Separators must be the ones the layout in effect writes.
    for (k, sep, bare) in [("item_separator", item, ","), ("key_separator", key, ":")] {
        let Some(sep) = sep else { continue };
        let fits = match opts.whitespace {
            Whitespace::Any { .. } => sep.trim() == bare,
            Whitespace::Compact => sep == format!("{bare} "),
            Whitespace::Indent(_) => false,
        };
        if !fits {
            return Err(refuse(k, format!("{sep:?} is not a separator of the layout {:?}", opts.whitespace)));
        }
    }
    Ok(opts)
}

/// Every `x-guidance` key llguidance 1.9 reads.
pub(crate) const KEYS: &[&str] = &[
    "item_separator",
    "key_separator",
    "whitespace_flexible",
    "whitespace_pattern",
    "coerce_one_of",
    "lenient",
    "json_allowed_escapes",
    "json_allow_general_unicode_escapes",
];

#[cfg(test)]
mod tests {
    use super::KEYS;
    use crate::json_schema::{json_schema_str_to_grammar, JsonSchemaOptions, SchemaErrorKind};
    use crate::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo, TokenizerOptions};
    use std::sync::Arc;

    /// Whether the schema (with `g` as its `x-guidance`) accepts `text`; `Err` names the
    /// refused key.
    fn run(g: &str, schema_rest: &str, text: &str) -> Result<bool, String> {
        let schema = format!(r#"{{"x-guidance": {g}, {schema_rest}}}"#);
        let grammar =
            json_schema_str_to_grammar(&schema, &JsonSchemaOptions::default()).map_err(|e| match e.kind {
                SchemaErrorKind::Unsupported { keyword, .. } => keyword,
                other => format!("{other:?}"),
            })?;
        let bytes: Vec<Vec<u8>> = (1u8..128).map(|b| vec![b]).collect();
        let tok = TokenizerInfo::from_byte_tokens(bytes, &TokenizerOptions::default()).unwrap();
        let compiled = GrammarCompiler::new(Arc::new(tok)).compile(&GrammarSpec::Grammar(grammar)).unwrap();
        let mut m = GrammarMatcher::new(compiled);
        Ok(m.accept_string(text).is_ok() && m.can_terminate())
    }

    const OBJ: &str = r#""type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]"#;

    /// Every key llguidance reads is honoured (its language checked) or refused by name.
    #[test]
    fn every_x_guidance_key_is_honoured_or_refused() {
        // (key, x-guidance, schema, text, expected): `Ok(accepts)` or `Err(key refused)`.
        type Case<'a> = (&'a str, &'a str, &'a str, &'a str, Result<bool, &'a str>);
        let cases: &[Case] = &[
            ("whitespace_flexible", r#"{"whitespace_flexible": true}"#, OBJ, "{ \"a\" :\n 1 }", Ok(true)),
            (
                "whitespace_flexible",
                r#"{"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}"#,
                OBJ,
                "{ \"a\": 1}",
                Ok(false),
            ),
            (
                "whitespace_flexible",
                r#"{"whitespace_flexible": false}"#,
                OBJ,
                "",
                Err("x-guidance.whitespace_flexible"),
            ),
            (
                "item_separator",
                r#"{"whitespace_flexible": true, "item_separator": " , "}"#,
                OBJ,
                "{\"a\":1}",
                Ok(true),
            ),
            ("item_separator", r#"{"item_separator": ";"}"#, OBJ, "", Err("x-guidance.item_separator")),
            ("key_separator", r#"{"key_separator": ": "}"#, OBJ, "{\"a\": 1}", Ok(true)),
            ("key_separator", r#"{"key_separator": "="}"#, OBJ, "", Err("x-guidance.key_separator")),
            (
                "lenient",
                r#"{"lenient": true}"#,
                r#""type": "array", "uniqueItems": true"#,
                "[1, 1]",
                Ok(true),
            ),
            (
                "lenient",
                r#"{"lenient": false}"#,
                r#""type": "array", "uniqueItems": true"#,
                "",
                Err("uniqueItems"),
            ),
            ("coerce_one_of", r#"{"coerce_one_of": false}"#, OBJ, "{\"a\": 1}", Ok(true)),
            ("coerce_one_of", r#"{"coerce_one_of": true}"#, OBJ, "", Err("x-guidance.coerce_one_of")),
            (
                "json_allowed_escapes",
                r#"{"json_allowed_escapes": "u/\\\"nrbtf"}"#,
                r#""type": "string""#,
                r#""\b""#,
                Ok(true),
            ),
            // The issue's case: `"\b"` must not be accepted under "nt" — refused instead.
            (
                "json_allowed_escapes",
                r#"{"json_allowed_escapes": "nt"}"#,
                r#""type": "string""#,
                "",
                Err("x-guidance.json_allowed_escapes"),
            ),
            (
                "json_allow_general_unicode_escapes",
                r#"{"json_allow_general_unicode_escapes": true}"#,
                r#""type": "string", "maxLength": 1"#,
                r#""\u00e9""#,
                Ok(true),
            ),
            (
                "json_allow_general_unicode_escapes",
                r#"{"json_allow_general_unicode_escapes": false}"#,
                r#""type": "string""#,
                "",
                Err("x-guidance.json_allow_general_unicode_escapes"),
            ),
            ("whitespace_pattern", r#"{"whitespace_pattern": null}"#, OBJ, "{\"a\": 1}", Ok(true)),
            (
                "whitespace_pattern",
                r#"{"whitespace_pattern": " *"}"#,
                OBJ,
                "",
                Err("x-guidance.whitespace_pattern"),
            ),
        ];
        let mut covered: Vec<&str> = cases.iter().map(|c| c.0).collect();
        covered.sort_unstable();
        covered.dedup();
        let mut keys = KEYS.to_vec();
        keys.sort_unstable();
        assert_eq!(covered, keys, "every key has a case");
        for (key, g, schema, text, want) in cases {
            let got = run(g, schema, text);
            assert_eq!(got, want.map_err(|k| k.to_string()), "{key}: {g}");
        }
        // An unknown key, a nested `x-guidance`, and a malformed value: typed errors.
        assert_eq!(run(r#"{"fast": true}"#, OBJ, ""), Err("x-guidance.fast".into()));
        let nested =
            r#""type": "object", "properties": {"a": {"type": "integer", "x-guidance": {"lenient": true}}}"#;
        assert_eq!(run("{}", nested, ""), Err("x-guidance".into()));
        assert!(run(r#"{"lenient": "yes"}"#, OBJ, "").is_err());
    }
}
