//! llguidance in process: a second implementation of the same languages, shared with
//! grammask in nothing, judging whole outputs and cut-off prefixes.
//!
//! llguidance compiles a case's JSON schema, regex or Lark grammar over a tokenizer of the
//! 256 single bytes, so an output's bytes are its tokens: an output is valid when every
//! byte is accepted and the grammar may end there; a cut-off prefix is valid when every
//! byte is accepted (llguidance's parser then knows a way to go on). The `jsonschema`
//! crate and the brute-force Earley recognizer stay the first judges; llguidance is the
//! one that can judge prefixes.
//!
//! Where the languages are not the same the case is not given to llguidance, by name:
//! GBNF (llguidance's Rust crate reads Lark only) and tool calling (checked by the suite's
//! own reader, [`crate::tool_reader`]). llguidance writes object members in the schema's
//! order only, so the corpus's schemas are generated in that order
//! ([`crate::case::PROPERTY_ORDER`]). Its JSON strings by default take fewer spellings
//! than JSON has (no `\uXXXX` in keys or constrained strings, and no `\/` at all); JSON's
//! language is every spelling, so llguidance is asked for the `\uXXXX` ones (`x-guidance`:
//! `json_allow_general_unicode_escapes`, unless the schema's own `x-guidance` says
//! otherwise); it still takes declared keys in one spelling and has no `\/` at all
//! (it refuses `/` among its allowed escapes), so a JSON output is given to it with each
//! string's characters spelled canonically (`canonical_json`: the same value, every
//! escape checked on the way). That the other spellings are accepted where JSON allows
//! them is core's `json_exactness` tests' job, against the `jsonschema` crate.

use crate::case::Constraint;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};

/// A case llguidance compiled: its matcher before any byte.
pub struct LlgMatcher {
    matcher: Matcher,
    /// A JSON case, or Lark with `%json` (its outputs are given to llguidance spelled
    /// canonically).
    json: bool,
}

/// llguidance's verdict on a case.
pub enum LlgCase {
    /// llguidance compiled it.
    Compiled(Box<LlgMatcher>),
    /// llguidance refused it (its error).
    Refused(String),
    /// Not llguidance's language (why).
    NotApplicable(&'static str),
}

impl std::fmt::Debug for LlgCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LlgCase::Compiled(_) => f.write_str("Compiled"),
            LlgCase::Refused(e) => write!(f, "Refused({e:?})"),
            LlgCase::NotApplicable(w) => write!(f, "NotApplicable({w:?})"),
        }
    }
}

/// llguidance's parser factory over the single-byte tokenizer.
pub struct Llg {
    factory: ParserFactory,
}

impl Llg {
    /// The factory (llguidance's default limits, its logging off).
    pub fn new() -> Result<Self, String> {
        let env = toktrie::ApproximateTokEnv::single_byte_env();
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| format!("llguidance: {e}"))?;
        factory.quiet();
        Ok(Self { factory })
    }

    /// llguidance's grammar for a constraint, or why there is none.
    pub fn grammar(c: &Constraint) -> Result<TopLevelGrammar, &'static str> {
        match c {
            Constraint::JsonSchema(s) => Ok(TopLevelGrammar::from_json_schema(every_spelling(s))),
            Constraint::JsonObject => {
                Ok(TopLevelGrammar::from_json_schema(every_spelling(&json!({"type": "object"}))))
            }
            Constraint::Regex(r) => Ok(TopLevelGrammar::from_regex(r)),
            Constraint::Lark(t) => Ok(TopLevelGrammar::from_lark(t.clone())),
            Constraint::Ebnf(_) => Err("GBNF: llguidance's Rust crate has no GBNF front-end"),
            Constraint::Tools { .. } => Err("tool calls: the suite's reader per family judges them"),
        }
    }

    /// Compiles `c` with llguidance.
    pub fn compile(&self, c: &Constraint) -> LlgCase {
        let g = match Self::grammar(c) {
            Ok(g) => g,
            Err(why) => return LlgCase::NotApplicable(why),
        };
        // llguidance may panic on input it does not expect; that is its refusal too.
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.factory.create_parser(g)));
        match parser {
            Ok(Ok(p)) => {
                let m = Matcher::new(Ok(p));
                match m.get_error() {
                    Some(e) => LlgCase::Refused(first_line(&e)),
                    None => LlgCase::Compiled(Box::new(LlgMatcher {
                        matcher: m,
                        // Lark with `%json` too: llguidance's `%json` takes one spelling.
                        json: match c {
                            Constraint::JsonSchema(_) | Constraint::JsonObject => true,
                            Constraint::Lark(t) => t.contains("%json"),
                            _ => false,
                        },
                    })),
                }
            }
            Ok(Err(e)) => LlgCase::Refused(first_line(&e.to_string())),
            Err(_) => LlgCase::Refused("llguidance panicked".into()),
        }
    }
}

/// `schema` with llguidance asked for every JSON spelling of a string (where the schema's
/// own `x-guidance` does not say otherwise).
fn every_spelling(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Some(o) = s.as_object_mut() {
        let g = o.entry("x-guidance").or_insert_with(|| json!({}));
        if let Some(g) = g.as_object_mut() {
            g.entry("json_allow_general_unicode_escapes").or_insert(json!(true));
        }
    }
    s
}

fn first_line(e: &str) -> String {
    e.lines().next().unwrap_or_default().chars().take(300).collect()
}

/// A JSON text with every character of its strings spelled the one way llguidance
/// takes everywhere: itself where JSON allows it, else its short escape (`\n`, `\"`, …);
/// `\uXXXX` kept only for control characters without one. The value is the same; the
/// escapes are checked on the way (an invalid one is an error naming its byte). A prefix
/// (`complete == false`) that ends inside an escape loses that escape's beginning.
pub fn canonical_json(text: &[u8], complete: bool) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let (mut in_string, mut i) = (false, 0);
    let hex4 = |at: usize| -> Option<u32> {
        let h = text.get(at..at + 4)?;
        u32::from_str_radix(std::str::from_utf8(h).ok()?, 16)
            .ok()
            .filter(|_| h.iter().all(u8::is_ascii_hexdigit))
    };
    while i < text.len() {
        let b = text[i];
        if !(in_string && b == b'\\') {
            in_string ^= b == b'"';
            out.push(b);
            i += 1;
            continue;
        }
        let Some(&e) = text.get(i + 1) else {
            return if complete { Err(format!("not JSON: an escape cut at byte {i}")) } else { Ok(out) };
        };
        let (c, len) = match e {
            b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => {
                out.extend_from_slice(&[b'\\', e]);
                i += 2;
                continue;
            }
            b'/' => ('/', 2),
            b'u' => {
                let Some(u) = hex4(i + 2) else {
                    let cut = text.len() < i + 6 && text[i + 2..].iter().all(u8::is_ascii_hexdigit);
                    return if cut && !complete {
                        Ok(out)
                    } else {
                        Err(format!("not JSON: a bad \\u escape at byte {i}"))
                    };
                };
                if (0xD800..0xDC00).contains(&u) {
                    // A high surrogate: its low half follows as another escape.
                    match (text.get(i + 6..i + 8), hex4(i + 8)) {
                        (Some(b"\\u"), Some(l)) if (0xDC00..0xE000).contains(&l) => {
                            let c = 0x10000 + ((u - 0xD800) << 10) + (l - 0xDC00);
                            (char::from_u32(c).unwrap_or('\u{FFFD}'), 12)
                        }
                        _ if !complete && text.len() < i + 12 => return Ok(out),
                        _ => {
                            return Err(format!(
                                "not JSON text llguidance can judge: a lone surrogate at byte {i}"
                            ))
                        }
                    }
                } else {
                    match char::from_u32(u) {
                        Some(c) => (c, 6),
                        None => {
                            return Err(format!(
                                "not JSON text llguidance can judge: a lone surrogate at byte {i}"
                            ))
                        }
                    }
                }
            }
            _ => return Err(format!("not JSON: an invalid escape at byte {i}")),
        };
        match c {
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            c if (c as u32) < 0x20 => out.extend_from_slice(&text[i..i + len]),
            c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
        i += len;
    }
    Ok(out)
}

impl LlgMatcher {
    /// Judges `text`: `complete`, the whole output (every byte accepted and the grammar
    /// may end); else a cut-off prefix (every byte accepted).
    pub fn check(&self, text: &[u8], complete: bool) -> Result<(), String> {
        match self.json {
            true => check(&self.matcher, &canonical_json(text, complete)?, complete),
            false => check(&self.matcher, text, complete),
        }
    }
}

fn check(m: &Matcher, text: &[u8], complete: bool) -> Result<(), String> {
    let mut m = m.deep_clone();
    let ids: Vec<u32> = text.iter().map(|&b| u32::from(b)).collect();
    let n = m.try_consume_tokens(&ids).map_err(|e| format!("llguidance: {}", first_line(&e.to_string())))?;
    if n < ids.len() {
        let from = n.saturating_sub(30);
        let to = (n + 10).min(text.len());
        return Err(format!(
            "llguidance rejects byte {n} of {}: …{:?}⟨here⟩{:?}",
            text.len(),
            String::from_utf8_lossy(&text[from..n]),
            String::from_utf8_lossy(&text[n..to])
        ));
    }
    if complete && !m.is_accepting().unwrap_or(false) {
        return Err(format!("llguidance: the output ({} bytes) is unfinished", text.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(c: &Constraint) -> Box<LlgMatcher> {
        match Llg::new().unwrap().compile(c) {
            LlgCase::Compiled(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn judges_outputs_and_prefixes() {
        let m = compiled(&Constraint::JsonSchema(json!({
            "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"], "additionalProperties": false
        })));
        m.check(br#"{"a": 1, "b": "x"}"#, true).unwrap();
        m.check(br#"{"a": 1, "b": "x"#, false).unwrap();
        assert!(m.check(br#"{"a": 1, "b": "x"#, true).unwrap_err().contains("unfinished"));
        assert!(m.check(br#"{"a": "x"#, false).unwrap_err().contains("byte 6"));
        assert!(m.check(br#"{"c": 1}"#, true).is_err());
        // Every JSON spelling, keys included.
        m.check(br#"{"\u0061": 1, "b": "\/\u00e9"}"#, true).unwrap();
        // `\\` then `/` is a backslash and a slash, not a `\/` escape; escapes of
        // characters JSON needs escaped stay short escapes; a cut escape goes.
        let canon = |t: &[u8], complete| String::from_utf8(canonical_json(t, complete).unwrap()).unwrap();
        assert_eq!(canon(br#"{"b": "\\/\/\u00e9\u000a\ud83d\ude00"}"#, true), "{\"b\": \"\\\\//é\\n😀\"}");
        assert_eq!(canon(br#"{"b": "x\u00"#, false), "{\"b\": \"x");
        assert!(canonical_json(br#"{"b": "\x"}"#, true).is_err());
        assert!(m.check(br#"{"\u0061": 1, "b": "\q"}"#, true).unwrap_err().contains("invalid escape"));
        let r = compiled(&Constraint::Regex("[0-9]{3}-[0-9]{4}".into()));
        r.check(b"555-1234", true).unwrap();
        r.check(b"555-1", false).unwrap();
        assert!(r.check(b"555-12345", true).is_err());
    }

    #[test]
    fn other_languages_are_not_given_to_llguidance() {
        let llg = Llg::new().unwrap();
        assert!(matches!(llg.compile(&Constraint::Ebnf("root ::= \"a\"".into())), LlgCase::NotApplicable(_)));
        assert!(matches!(
            llg.compile(&Constraint::JsonSchema(json!({"type": "object", "properties": 3}))),
            LlgCase::Refused(_)
        ));
    }
}
