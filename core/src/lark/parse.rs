//! Tokens → syntax tree: rules, terminals and statements, as llguidance's Lark parser
//! reads them.
//!
//! A definition is `name: alternatives` up to the end of the line; a following line that
//! starts with `|` continues it. Inside, `|` separates alternatives, `&` intersections
//! (terminals only), juxtaposition sequences, and each item may carry one of `?`, `*`,
//! `+`, `{n}`, `{n,}`, `{,m}`, `{n,m}` or `~ n..m`. Recursive descent, bounded by
//! [`LarkLimits::max_nesting`](super::LarkLimits::max_nesting).
//!
//! Syntax llguidance rejects when reading a definition (priorities, templates,
//! `%override`, `%declare`) is rejected here too; syntax grammask cannot express
//! (parametric rules, nested `%lark`) is rejected here with
//! [`LarkErrorKind::Unsupported`]. Everything else that grammask cannot express is kept in
//! the tree and rejected when lowering, and only if it is reachable from `start`, as
//! llguidance compiles only what `start` reaches.

use super::error::{LarkError, LarkErrorKind};
use super::lex::{Tok, Token};
use serde_json::Value as Json;

/// A parsed grammar: its items in order.
#[derive(Debug)]
pub(crate) struct Ast {
    pub items: Vec<Item>,
}

#[derive(Debug)]
pub(crate) enum Item {
    Rule(RuleDef),
    Terminal(TermDef),
    /// `%ignore alternatives`.
    Ignore(Alts),
    /// `%import path[.NAME] [-> alias]` or `%import path (A, B)`, with each imported
    /// `(path.name, local name)`.
    Import {
        at: usize,
        names: Vec<(String, String)>,
    },
    /// `%llguidance {…}`.
    LlGuidance {
        at: usize,
        options: Json,
    },
}

/// `name[attributes]: body`.
#[derive(Debug)]
pub(crate) struct RuleDef {
    pub name: String,
    pub at: usize,
    pub attrs: Attrs,
    pub body: Alts,
}

/// A rule's `[…]` options.
#[derive(Debug, Default)]
pub(crate) struct Attrs {
    pub lazy: bool,
    pub stop: Option<Value>,
    pub suffix: Option<Value>,
    pub max_tokens: Option<usize>,
    pub temperature: bool,
    pub stop_capture: bool,
}

/// `NAME: body`.
#[derive(Debug)]
pub(crate) struct TermDef {
    pub name: String,
    pub at: usize,
    pub body: Alts,
}

/// Alternatives (`a | b`).
#[derive(Debug)]
pub(crate) struct Alts {
    pub at: usize,
    pub alts: Vec<Alt>,
}

/// One alternative: the sequences it intersects (`a b & c`: two), usually one.
#[derive(Debug)]
pub(crate) struct Alt {
    pub at: usize,
    pub conjuncts: Vec<Vec<Item1>>,
}

/// An atom with its repetition.
#[derive(Debug)]
pub(crate) struct Item1 {
    pub at: usize,
    pub atom: Atom,
    /// `min..=max` (`max == None`: unbounded); `(1, Some(1))` when there is none.
    pub repeat: (u32, Option<u32>),
}

#[derive(Debug)]
pub(crate) enum Atom {
    Group(Alts),
    Maybe(Alts),
    /// `~atom` (only its position is kept: negation is not supported).
    Not(usize),
    Value(Value, usize),
}

#[derive(Debug)]
pub(crate) enum Value {
    /// `"a".."z"` (decoded ends).
    Range(String, String),
    /// A rule or terminal name.
    Name(String),
    /// A string literal (decoded) and whether it has the `i` flag.
    Str(String, bool),
    /// A regex (between the slashes) and its flags.
    Regex(String, String),
    /// `<…>` as written.
    SpecialToken(String),
    /// `@name` as written.
    GrammarRef(String),
    /// `%json` and its schema.
    Json(Json),
    /// `%regex` and its description.
    RegexExt(Json),
}

pub(crate) struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token>,
    pos: usize,
    depth: usize,
    max_depth: usize,
    max_repeat: u32,
}

type R<T> = Result<T, LarkError>;

impl<'a> Parser<'a> {
    pub fn new(src: &'a str, toks: Vec<Token>, max_depth: usize, max_repeat: u32) -> Self {
        Parser { src, toks, pos: 0, depth: 0, max_depth, max_repeat }
    }

    pub fn parse(mut self) -> R<Ast> {
        let mut items = Vec::new();
        loop {
            self.skip_newlines();
            if self.pos >= self.toks.len() {
                return Ok(Ast { items });
            }
            items.push(self.item()?);
            // An item ends at a newline.
            if !matches!(self.peek(), Some(Tok::Newline) | None) {
                return Err(self.expected("end of line"));
            }
        }
    }

    // ---- token helpers ----

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.kind)
    }

    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.pos + k).map(|t| &t.kind)
    }

    fn at(&self) -> usize {
        self.toks.get(self.pos).map_or(self.src.len(), |t| t.at)
    }

    fn bump(&mut self) -> Option<Tok> {
        let t = self.toks.get_mut(self.pos)?;
        self.pos += 1;
        // Values are taken, not cloned: `%json` schemas can be large.
        Some(std::mem::replace(&mut t.kind, Tok::Newline))
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == Some(t) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn err(&self, at: usize, kind: LarkErrorKind) -> LarkError {
        LarkError::at(self.src, at, kind)
    }

    fn expected(&self, what: &str) -> LarkError {
        let found = self.peek().map_or_else(|| "end of input".to_string(), Tok::describe);
        self.err(self.at(), LarkErrorKind::Expected { expected: what.into(), found })
    }

    fn expect(&mut self, t: &Tok) -> R<()> {
        if self.eat(t) {
            Ok(())
        } else {
            Err(self.expected(&t.describe()))
        }
    }

    fn unsupported(&self, at: usize, what: &str) -> LarkError {
        self.err(at, LarkErrorKind::Unsupported(what.into()))
    }

    fn skip_newlines(&mut self) {
        while self.peek() == Some(&Tok::Newline) {
            self.pos += 1;
        }
    }

    // ---- items ----

    fn item(&mut self) -> R<Item> {
        let at = self.at();
        match self.peek() {
            Some(Tok::Rule(_)) => self.rule().map(Item::Rule),
            Some(Tok::Terminal(_)) => self.terminal().map(Item::Terminal),
            Some(Tok::Ignore) => {
                self.pos += 1;
                Ok(Item::Ignore(self.alternatives()?))
            }
            Some(Tok::Import) => {
                self.pos += 1;
                self.import(at)
            }
            Some(Tok::LlGuidance(_)) => match self.bump() {
                Some(Tok::LlGuidance(options)) => Ok(Item::LlGuidance { at, options }),
                _ => Err(self.expected("`%llguidance`")),
            },
            Some(Tok::Override) => {
                Err(self.unsupported(at, "`%override` (llguidance does not support it either)"))
            }
            Some(Tok::Declare) => {
                Err(self.unsupported(at, "`%declare` (llguidance does not support it either)"))
            }
            _ => Err(self.expected("a rule, a terminal or a statement")),
        }
    }

    fn rule(&mut self) -> R<RuleDef> {
        let at = self.at();
        let Some(Tok::Rule(raw)) = self.bump() else { return Err(self.expected("a rule name")) };
        if self.peek() == Some(&Tok::DoubleColon) {
            return Err(self.unsupported(self.at(), "parametric rules (`name::_`)"));
        }
        if self.peek() == Some(&Tok::LBrace) {
            return Err(
                self.unsupported(self.at(), "rule templates (llguidance does not support them either)")
            );
        }
        if self.peek() == Some(&Tok::Dot) {
            return Err(
                self.unsupported(self.at(), "rule priorities (llguidance does not support them either)")
            );
        }
        // `!name` (keep tokens) and `?name` (inline if single child) only shape Lark's
        // parse trees; the rule is `name`.
        let name = raw.strip_prefix('!').unwrap_or(&raw);
        let name = name.strip_prefix('?').unwrap_or(name).to_string();
        let attrs = if self.peek() == Some(&Tok::LBracket) { self.attributes()? } else { Attrs::default() };
        self.expect(&Tok::Colon)?;
        let body = self.alternatives()?;
        Ok(RuleDef { name, at, attrs, body })
    }

    fn terminal(&mut self) -> R<TermDef> {
        let at = self.at();
        let Some(Tok::Terminal(name)) = self.bump() else { return Err(self.expected("a terminal name")) };
        if self.peek() == Some(&Tok::LBrace) {
            return Err(
                self.unsupported(self.at(), "terminal templates (llguidance does not support them either)")
            );
        }
        if self.peek() == Some(&Tok::Dot) {
            return Err(
                self.unsupported(self.at(), "terminal priorities (llguidance does not support them either)")
            );
        }
        self.expect(&Tok::Colon)?;
        let body = self.alternatives()?;
        Ok(TermDef { name, at, body })
    }

    /// `[key, key=value, …]` after a rule name.
    fn attributes(&mut self) -> R<Attrs> {
        self.expect(&Tok::LBracket)?;
        let mut a = Attrs::default();
        while self.peek() != Some(&Tok::RBracket) {
            let at = self.at();
            let key = match self.bump() {
                Some(Tok::Rule(k)) => k,
                _ => {
                    self.pos -= 1;
                    return Err(self.expected("an attribute name"));
                }
            };
            match key.as_str() {
                "capture" => {
                    // Captures name parts of the output; they change no language.
                    if self.eat(&Tok::Equals) {
                        self.simple_string()?;
                    }
                }
                "lazy" => a.lazy = true,
                _ => {
                    self.expect(&Tok::Equals)?;
                    match key.as_str() {
                        "stop" | "suffix" => {
                            let v = self.value()?;
                            if a.stop.is_some() || a.suffix.is_some() {
                                let kind = LarkErrorKind::Expected {
                                    expected: "at most one of `stop` and `suffix`".into(),
                                    found: format!("`{key}`"),
                                };
                                return Err(self.err(at, kind));
                            }
                            if key == "stop" {
                                a.stop = Some(v);
                            } else {
                                a.suffix = Some(v);
                            }
                        }
                        "stop_capture" => {
                            self.simple_string()?;
                            a.stop_capture = true;
                        }
                        "max_tokens" => {
                            let n = self.number_text()?;
                            a.max_tokens = Some(n.parse::<usize>().map_err(|_| {
                                self.err(at, LarkErrorKind::BadRepetition(format!("max_tokens={n}")))
                            })?);
                        }
                        "temperature" => {
                            let n = self.number_text()?;
                            n.parse::<f32>().map_err(|_| {
                                let kind =
                                    LarkErrorKind::Expected { expected: "a number".into(), found: n.clone() };
                                self.err(at, kind)
                            })?;
                            a.temperature = true;
                        }
                        _ => {
                            let kind = LarkErrorKind::Expected {
                                expected: "an attribute (capture, lazy, stop, suffix, stop_capture, max_tokens, temperature)".into(),
                                found: format!("`{key}`"),
                            };
                            return Err(self.err(at, kind));
                        }
                    }
                }
            }
            if !self.eat(&Tok::Comma) {
                break;
            }
        }
        self.expect(&Tok::RBracket)?;
        Ok(a)
    }

    fn number_text(&mut self) -> R<String> {
        match self.peek() {
            Some(Tok::Number(n)) => {
                let n = n.clone();
                self.pos += 1;
                Ok(n)
            }
            _ => Err(self.expected("a number")),
        }
    }

    fn simple_string(&mut self) -> R<String> {
        let at = self.at();
        match self.peek() {
            Some(Tok::Str(s)) => {
                let s = s.clone();
                self.pos += 1;
                let (text, flag) = decode_string(&s).map_err(|k| self.err(at, k))?;
                if flag {
                    return Err(
                        self.err(at, LarkErrorKind::BadString(format!("{s} (no flags allowed here)")))
                    );
                }
                Ok(text)
            }
            _ => Err(self.expected("a string")),
        }
    }

    fn import(&mut self, at: usize) -> R<Item> {
        let mut path = String::new();
        if self.eat(&Tok::Dot) {
            path.push('.');
        }
        path.push_str(&self.name()?);
        while self.eat(&Tok::Dot) {
            path.push('.');
            path.push_str(&self.name()?);
        }
        let names = if self.eat(&Tok::Arrow) {
            let alias = self.name()?;
            vec![(path, alias)]
        } else if self.eat(&Tok::LParen) {
            let mut names = vec![self.name()?];
            while self.eat(&Tok::Comma) {
                names.push(self.name()?);
            }
            self.expect(&Tok::RParen)?;
            names.into_iter().map(|n| (format!("{path}.{n}"), n)).collect()
        } else {
            let local = path.rsplit('.').next().unwrap_or_default().to_string();
            vec![(path, local)]
        };
        Ok(Item::Import { at, names })
    }

    fn name(&mut self) -> R<String> {
        match self.peek() {
            Some(Tok::Rule(n) | Tok::Terminal(n)) => {
                let n = n.clone();
                self.pos += 1;
                Ok(n)
            }
            _ => Err(self.expected("a name")),
        }
    }

    // ---- expressions ----

    fn alternatives(&mut self) -> R<Alts> {
        if self.depth >= self.max_depth {
            return Err(self.err(self.at(), LarkErrorKind::TooDeep(self.max_depth)));
        }
        self.depth += 1;
        let r = self.alternatives_inner();
        self.depth -= 1;
        r
    }

    fn alternatives_inner(&mut self) -> R<Alts> {
        let at = self.at();
        let mut alts = vec![self.alternative()?];
        loop {
            if self.eat(&Tok::VBar) {
                alts.push(self.alternative()?);
            } else if self.peek() == Some(&Tok::Newline) && self.peek_at(1) == Some(&Tok::VBar) {
                // A line starting with `|` continues the definition.
                self.pos += 2;
                alts.push(self.alternative()?);
            } else {
                return Ok(Alts { at, alts });
            }
        }
    }

    fn alternative(&mut self) -> R<Alt> {
        let at = self.at();
        let mut conjuncts = vec![self.sequence()?];
        while self.eat(&Tok::And) {
            conjuncts.push(self.sequence()?);
        }
        if self.peek() == Some(&Tok::Arrow) {
            // `-> alias` names the alternative's tree node in Lark; no language meaning.
            self.pos += 1;
            match self.peek() {
                Some(Tok::Rule(_)) => self.pos += 1,
                _ => return Err(self.expected("an alias name")),
            }
        }
        if self.peek() == Some(&Tok::If) {
            return Err(self.unsupported(self.at(), "`%if` conditions of parametric rules"));
        }
        Ok(Alt { at, conjuncts })
    }

    fn sequence(&mut self) -> R<Vec<Item1>> {
        let mut items = Vec::new();
        while !matches!(
            self.peek(),
            None | Some(
                Tok::Newline
                    | Tok::VBar
                    | Tok::Arrow
                    | Tok::RBrace
                    | Tok::RParen
                    | Tok::RBracket
                    | Tok::And
                    | Tok::If
            )
        ) {
            items.push(self.item1()?);
        }
        Ok(items)
    }

    fn item1(&mut self) -> R<Item1> {
        let at = self.at();
        let atom = self.atom()?;
        let rep_at = self.at();
        let repeat = match self.peek() {
            Some(Tok::Op(c)) => {
                let r = match c {
                    '*' => (0, None),
                    '+' => (1, None),
                    _ => (0, Some(1)),
                };
                self.pos += 1;
                r
            }
            Some(Tok::Tilde) if matches!(self.peek_at(1), Some(Tok::Number(_))) => {
                self.pos += 1;
                let lo = self.int()?;
                let hi = if self.eat(&Tok::DotDot) { self.int()? } else { lo };
                self.bounds(rep_at, lo, Some(hi))?
            }
            Some(Tok::LBrace) => {
                self.pos += 1;
                let lo = if self.peek() == Some(&Tok::Comma) { 0 } else { self.int()? };
                let hi = if self.eat(&Tok::Comma) {
                    if self.peek() == Some(&Tok::RBrace) {
                        None
                    } else {
                        Some(self.int()?)
                    }
                } else {
                    Some(lo)
                };
                self.expect(&Tok::RBrace)?;
                if hi == Some(0) {
                    // llguidance's rule: `{0}` and `{,0}` are errors, not empty.
                    return Err(
                        self.err(rep_at, LarkErrorKind::BadRepetition("with an upper bound of 0".into()))
                    );
                }
                self.bounds(rep_at, lo, hi)?
            }
            _ => (1, Some(1)),
        };
        Ok(Item1 { at, atom, repeat })
    }

    /// An integer bound as llguidance reads it (a 32-bit signed number).
    fn int(&mut self) -> R<i64> {
        let at = self.at();
        let n = self.number_text()?;
        n.parse::<i32>()
            .map(i64::from)
            .map_err(|_| self.err(at, LarkErrorKind::BadRepetition(format!("bound {n} (not an integer)"))))
    }

    fn bounds(&self, at: usize, lo: i64, hi: Option<i64>) -> R<(u32, Option<u32>)> {
        let bad = |why: String| self.err(at, LarkErrorKind::BadRepetition(why));
        if lo < 0 {
            return Err(bad(format!("with a negative bound {lo}")));
        }
        if let Some(h) = hi {
            if h < lo {
                return Err(bad(format!("{{{lo},{h}}} (the upper bound is below the lower)")));
            }
        }
        let top = hi.unwrap_or(lo);
        if top > i64::from(self.max_repeat) {
            return Err(self.err(
                at,
                LarkErrorKind::TooLarge {
                    what: "repetition bound",
                    given: top as usize,
                    limit: self.max_repeat as usize,
                },
            ));
        }
        Ok((lo as u32, hi.map(|h| h as u32)))
    }

    fn atom(&mut self) -> R<Atom> {
        let at = self.at();
        if self.eat(&Tok::Tilde) {
            self.atom()?;
            return Ok(Atom::Not(at));
        }
        if self.eat(&Tok::LParen) {
            let a = self.alternatives()?;
            self.expect(&Tok::RParen)?;
            return Ok(Atom::Group(a));
        }
        if self.eat(&Tok::LBracket) {
            let a = self.alternatives()?;
            self.expect(&Tok::RBracket)?;
            return Ok(Atom::Maybe(a));
        }
        Ok(Atom::Value(self.value()?, at))
    }

    fn value(&mut self) -> R<Value> {
        let at = self.at();
        let v = match self.peek() {
            Some(Tok::Str(_)) => {
                let Some(Tok::Str(s)) = self.bump() else { return Err(self.expected("a string")) };
                if self.eat(&Tok::DotDot) {
                    let a = decode_simple(&s).map_err(|k| self.err(at, k))?;
                    let at2 = self.at();
                    let b = self.simple_string().map_err(|e| {
                        if matches!(e.kind, LarkErrorKind::Expected { .. }) {
                            self.err(at2, e.kind.clone())
                        } else {
                            e
                        }
                    })?;
                    Value::Range(a, b)
                } else {
                    let (text, i) = decode_string(&s).map_err(|k| self.err(at, k))?;
                    Value::Str(text, i)
                }
            }
            Some(Tok::Regexp(_)) => {
                let Some(Tok::Regexp(r)) = self.bump() else { return Err(self.expected("a regex")) };
                // The lexer guarantees `/body/flags` with a non-empty body.
                let close = r.rfind('/').unwrap_or(0);
                Value::Regex(r.get(1..close).unwrap_or_default().to_string(), r[close + 1..].to_string())
            }
            Some(Tok::SpecialToken(_)) => match self.bump() {
                Some(Tok::SpecialToken(s)) => Value::SpecialToken(s),
                _ => return Err(self.expected("a special token")),
            },
            Some(Tok::GrammarRef(_)) => match self.bump() {
                Some(Tok::GrammarRef(s)) => Value::GrammarRef(s),
                _ => return Err(self.expected("a grammar reference")),
            },
            Some(Tok::Json(_)) => match self.bump() {
                Some(Tok::Json(v)) => Value::Json(v),
                _ => return Err(self.expected("`%json`")),
            },
            Some(Tok::RegexExt(_)) => match self.bump() {
                Some(Tok::RegexExt(v)) => Value::RegexExt(v),
                _ => return Err(self.expected("`%regex`")),
            },
            Some(Tok::Lark) => return Err(self.unsupported(at, "nested `%lark { … }` grammars")),
            Some(Tok::Rule(_) | Tok::Terminal(_)) => {
                let name = self.name()?;
                match (self.peek(), self.peek_at(1)) {
                    // `name{2}` / `name{,3}` are repetitions, handled by the caller.
                    (Some(Tok::LBrace), Some(Tok::Comma | Tok::Number(_))) => {}
                    (Some(Tok::LBrace), _) => {
                        return Err(self
                            .unsupported(self.at(), "template use (llguidance does not support it either)"))
                    }
                    (Some(Tok::DoubleColon), _) => {
                        return Err(self.unsupported(self.at(), "parametric rule use (`name::param`)"))
                    }
                    _ => {}
                }
                Value::Name(name)
            }
            _ => return Err(self.expected("a value (string, regex, name, `(`, `[`)")),
        };
        Ok(v)
    }
}

/// Decodes a string token (`"…"` or `"…"i`): its text and whether it has the `i` flag.
/// Escapes are JSON's plus `\xHH`; a surrogate pair written as two `\u` escapes is one
/// character, a lone surrogate is an error.
pub(crate) fn decode_string(tok: &str) -> Result<(String, bool), LarkErrorKind> {
    let (body, flag) = match tok.strip_suffix('i') {
        Some(b) => (b, true),
        None => (tok, false),
    };
    let bad = || LarkErrorKind::BadString(tok.to_string());
    let inner = body.strip_prefix('"').and_then(|b| b.strip_suffix('"')).ok_or_else(bad)?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    let hex = |chars: &mut std::str::Chars<'_>, n: usize| -> Option<u32> {
        let s: String = chars.by_ref().take(n).collect();
        if s.len() == n {
            u32::from_str_radix(&s, 16).ok()
        } else {
            None
        }
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let c = match chars.next().ok_or_else(bad)? {
            '"' => '"',
            '\\' => '\\',
            '/' => '/',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'x' => char::from_u32(hex(&mut chars, 2).ok_or_else(bad)?).ok_or_else(bad)?,
            'u' => {
                let hi = hex(&mut chars, 4).ok_or_else(bad)?;
                if (0xD800..0xDC00).contains(&hi) {
                    // A high surrogate must be followed by `\u` and a low one.
                    let mut look = chars.clone();
                    let lo = match (look.next(), look.next()) {
                        (Some('\\'), Some('u')) => hex(&mut look, 4),
                        _ => None,
                    }
                    .filter(|lo| (0xDC00..0xE000).contains(lo))
                    .ok_or_else(bad)?;
                    chars = look;
                    char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)).ok_or_else(bad)?
                } else {
                    char::from_u32(hi).ok_or_else(bad)?
                }
            }
            _ => return Err(bad()),
        };
        out.push(c);
    }
    Ok((out, flag))
}

/// A string token without flags (range ends, attribute values).
fn decode_simple(tok: &str) -> Result<String, LarkErrorKind> {
    match decode_string(tok)? {
        (s, false) => Ok(s),
        (_, true) => Err(LarkErrorKind::BadString(format!("{tok} (no flags allowed here)"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_decode_json_escapes_and_hex() {
        assert_eq!(decode_string(r#""a\n\x41\u00e9\/""#).unwrap(), ("a\nAé/".into(), false));
        assert_eq!(decode_string(r#""\ud83d\ude00"i"#).unwrap(), ("😀".into(), true));
        assert!(decode_string(r#""\ud83d""#).is_err());
        assert!(decode_string(r#""\ude00""#).is_err());
    }
}
