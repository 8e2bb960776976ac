//! Structural-tag format values, written field for field as XGrammar's pydantic models
//! dump them (`model_dump(mode="json")`: every field, defaults included, in declaration
//! order), so a preset is the same JSON document as XGrammar's, not merely an equivalent
//! one.

use serde_json::{json, Value};

/// `const_string`.
pub(super) fn const_string(value: &str) -> Value {
    json!({"type": "const_string", "value": value})
}

/// `regex`.
pub(super) fn regex(pattern: &str) -> Value {
    json!({"type": "regex", "pattern": pattern})
}

/// `any_text` with no token or character budget.
pub(super) fn any_text(excludes: Vec<String>) -> Value {
    json!({"type": "any_text", "excludes": excludes, "max_tokens": null, "max_chars": null})
}

/// `sequence`.
pub(super) fn sequence(elements: Vec<Value>) -> Value {
    json!({"type": "sequence", "elements": elements})
}

/// `or`.
pub(super) fn or(elements: Vec<Value>) -> Value {
    json!({"type": "or", "elements": elements})
}

/// `optional`.
pub(super) fn optional(content: Value) -> Value {
    json!({"type": "optional", "content": content})
}

/// `tag` with one end string.
pub(super) fn tag(begin: &str, content: Value, end: &str) -> Value {
    json!({"type": "tag", "begin": begin, "content": content, "end": end})
}

/// `tag` that any of several end strings closes.
pub(super) fn tag_ends(begin: &str, content: Value, ends: &[&str]) -> Value {
    json!({"type": "tag", "begin": begin, "content": content, "end": ends})
}

/// `triggered_tags`.
pub(super) fn triggered_tags(
    triggers: &[&str],
    tags: Vec<Value>,
    at_least_one: bool,
    stop_after_first: bool,
    excludes: Vec<String>,
) -> Value {
    json!({
        "type": "triggered_tags",
        "triggers": triggers,
        "tags": tags,
        "at_least_one": at_least_one,
        "stop_after_first": stop_after_first,
        "excludes": excludes,
    })
}

/// `tags_with_separator`.
pub(super) fn tags_with_separator(
    tags: Vec<Value>,
    separator: &str,
    at_least_one: bool,
    stop_after_first: bool,
) -> Value {
    json!({
        "type": "tags_with_separator",
        "tags": tags,
        "separator": separator,
        "at_least_one": at_least_one,
        "stop_after_first": stop_after_first,
    })
}
