//! Parser for the EBNF dialect (XGrammar's, a superset of llama.cpp's GBNF).
//!
//! ```text
//! grammar     := rule*
//! rule        := NAME "::=" alternation        (a rule ends where the next `NAME ::=` starts)
//! alternation := intersection ("|" intersection)*
//! intersection := sequence ("&" sequence)*   (the strings every operand matches; operands
//!                                             must not call rules: see `Expr::And`)
//! sequence    := postfix*
//! postfix     := primary ("*" | "+" | "?" | "{" m "}" | "{" m ",}" | "{" m "," n "}")*
//! primary     := STRING | CLASS | "." | NAME | "(" alternation ")"
//! ```
//!
//! Strings are `"…"` or `'…'`; classes are `[…]` or `[^…]` with ranges `a-z`; escapes are
//! `\n \r \t \\ \" \' \[ \] \- \^ \/`, `\xHH`, `\uHHHH` and `\UHHHHHHHH`, all naming Unicode
//! scalar values. `.` is any character. `#` starts a comment that runs to the end of the
//! line. Whitespace, newlines included, separates tokens anywhere, which is why a rule ends
//! only where the next definition begins.
//!
//! # Input safety
//! The parser is recursive only in parenthesis nesting, which [`ParseLimits::max_nesting`]
//! bounds; repetition counts are bounded by [`ParseLimits::max_repeat`]. Every error carries
//! the line and column of the fault.

use super::class::{complement_class, normalize_class};
use super::error::{GrammarError, GrammarErrorKind};
use super::{Expr, Grammar, Rule, RuleId};
use rustc_hash::FxHashMap;

/// Bounds that protect the parser from hostile grammar text.
#[derive(Debug, Clone)]
pub struct ParseLimits {
    /// Deepest parenthesis nesting accepted (default 200). Each level costs one stack
    /// frame of the recursive-descent parser, a few hundred bytes.
    pub max_nesting: usize,
    /// Largest repetition bound in `{m,n}` (default 10,000). Bounded repetition is
    /// unrolled by the automata stage, so this bounds that growth too.
    pub max_repeat: u32,
}

impl Default for ParseLimits {
    fn default() -> Self {
        Self { max_nesting: 200, max_repeat: 10_000 }
    }
}

/// Parses EBNF `text` whose start rule is named `root`.
///
/// ```
/// use grammask::grammar::{parse_ebnf, ParseLimits};
/// let g = parse_ebnf("root ::= \"a\" b*\nb ::= [0-9]", "root", &ParseLimits::default())?;
/// assert_eq!(g.rules.len(), 2);
/// assert_eq!(g.to_string(), "root ::= \"a\" b*\nb ::= [0-9]\n");
/// # Ok::<(), grammask::GrammarError>(())
/// ```
pub fn parse_ebnf(text: &str, root: &str, limits: &ParseLimits) -> Result<Grammar, GrammarError> {
    Parser { src: text, pos: 0, depth: 0, limits, names: FxHashMap::default(), rules: Vec::new() }
        .grammar(root)
}

/// Like [`parse_ebnf`], for text that may not be UTF-8 (a typed error if it is not).
pub fn parse_ebnf_bytes(text: &[u8], root: &str, limits: &ParseLimits) -> Result<Grammar, GrammarError> {
    match std::str::from_utf8(text) {
        Ok(s) => parse_ebnf(s, root, limits),
        Err(e) => {
            let offset = e.valid_up_to();
            let prefix = std::str::from_utf8(&text[..offset]).unwrap_or_default();
            let mut err = error_at(prefix, offset, GrammarErrorKind::NotUtf8 { offset });
            err.line_text.clear();
            Err(err)
        }
    }
}

/// A rule seen so far: defined (with its body) or only referenced.
struct PendingRule {
    name: String,
    body: Option<Expr>,
    /// Where it was defined (byte offset), for ordering and duplicate errors.
    defined_at: Option<usize>,
    /// Where it was first referenced, for "undefined rule" errors.
    first_use: Option<usize>,
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
    limits: &'a ParseLimits,
    names: FxHashMap<String, RuleId>,
    rules: Vec<PendingRule>,
}

type PResult<T> = Result<T, GrammarError>;

/// Builds an error at byte offset `at` of `src`.
fn error_at(src: &str, at: usize, kind: GrammarErrorKind) -> GrammarError {
    let at = at.min(src.len());
    let before = &src[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = src[line_start..at].chars().count() + 1;
    let line_end = src[line_start..].find('\n').map_or(src.len(), |i| line_start + i);
    GrammarError { kind, line, column, line_text: src[line_start..line_end].to_string() }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl<'a> Parser<'a> {
    fn err(&self, at: usize, kind: GrammarErrorKind) -> GrammarError {
        error_at(self.src, at, kind)
    }

    fn expected(&self, expected: &str) -> GrammarError {
        let found = match self.peek() {
            None => "end of input".to_string(),
            Some(c) => format!("{c:?}"),
        };
        self.err(self.pos, GrammarErrorKind::Expected { expected: expected.into(), found })
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Skips whitespace (newlines included) and `#` comments.
    fn skip_space(&mut self) {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('#') => {
                    while let Some(c) = self.bump() {
                        if c == '\n' {
                            break;
                        }
                    }
                }
                _ => return,
            }
        }
    }

    fn name(&mut self) -> Option<&'a str> {
        let start = self.pos;
        while self.peek().is_some_and(is_name_char) {
            self.bump();
        }
        (self.pos > start).then(|| &self.src[start..self.pos])
    }

    /// True if a rule definition (`NAME ::=`) starts here.
    fn at_definition(&self) -> bool {
        let rest = &self.src[self.pos..];
        let n = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        if n == 0 {
            return false;
        }
        rest[n..].trim_start_matches([' ', '\t', '\r', '\n']).starts_with("::=")
    }

    fn rule_ref(&mut self, name: &str, at: usize) -> RuleId {
        if let Some(&id) = self.names.get(name) {
            let r = &mut self.rules[id.index()];
            r.first_use.get_or_insert(at);
            return id;
        }
        let id = RuleId(self.rules.len() as u32);
        self.names.insert(name.to_string(), id);
        self.rules.push(PendingRule {
            name: name.to_string(),
            body: None,
            defined_at: None,
            first_use: Some(at),
        });
        id
    }

    fn grammar(mut self, root: &str) -> PResult<Grammar> {
        self.skip_space();
        while self.peek().is_some() {
            let at = self.pos;
            let name = self.name().ok_or_else(|| self.expected("a rule name"))?;
            self.skip_space();
            if !self.src[self.pos..].starts_with("::=") {
                return Err(self.expected("`::=`"));
            }
            self.pos += 3;
            self.skip_space();
            let body = self.alternation()?;
            let id = self.rule_ref(name, at);
            let rule = &mut self.rules[id.index()];
            if rule.first_use == Some(at) {
                rule.first_use = None;
            }
            if rule.defined_at.is_some() {
                return Err(self.err(at, GrammarErrorKind::DuplicateRule(name.into())));
            }
            rule.defined_at = Some(at);
            rule.body = Some(body);
            self.skip_space();
        }
        self.finish(root)
    }

    /// Checks every rule is defined and renumbers rules into definition order.
    fn finish(self, root: &str) -> PResult<Grammar> {
        for r in &self.rules {
            if r.body.is_none() {
                let at = r.first_use.unwrap_or(0);
                return Err(self.err(at, GrammarErrorKind::UndefinedRule(r.name.clone())));
            }
        }
        let mut order: Vec<usize> = (0..self.rules.len()).collect();
        order.sort_by_key(|&i| self.rules[i].defined_at);
        let mut new_id = vec![RuleId(0); self.rules.len()];
        for (new, &old) in order.iter().enumerate() {
            new_id[old] = RuleId(new as u32);
        }
        let mut rules: Vec<Rule> = Vec::with_capacity(order.len());
        let mut pending: Vec<Option<PendingRule>> = self.rules.into_iter().map(Some).collect();
        for &old in &order {
            let Some(PendingRule { name, body: Some(mut body), .. }) = pending[old].take() else {
                continue;
            };
            body.map_rules(&mut |r| Expr::Rule(new_id[r.index()]));
            rules.push(Rule::new(name, body));
        }
        let root = rules
            .iter()
            .position(|r| r.name == root)
            .ok_or_else(|| GrammarError::global(GrammarErrorKind::NoRootRule(root.into())))?;
        Ok(Grammar { rules, root: RuleId(root as u32), markers: Vec::new() })
    }

    fn alternation(&mut self) -> PResult<Expr> {
        self.separated('|', Self::intersection, Expr::Alt)
    }

    fn intersection(&mut self) -> PResult<Expr> {
        self.separated('&', Self::sequence, Expr::And)
    }

    /// `item (sep item)*`, joined when there is more than one.
    fn separated(
        &mut self,
        sep: char,
        item: fn(&mut Self) -> PResult<Expr>,
        join: fn(Vec<Expr>) -> Expr,
    ) -> PResult<Expr> {
        let mut items = vec![item(self)?];
        while self.peek() == Some(sep) {
            self.bump();
            self.skip_space();
            items.push(item(self)?);
        }
        Ok(if items.len() == 1 { items.pop().unwrap_or(Expr::Empty) } else { join(items) })
    }

    fn sequence(&mut self) -> PResult<Expr> {
        let mut items = Vec::new();
        loop {
            match self.peek() {
                None | Some('|') | Some('&') | Some(')') => break,
                Some(_) if self.at_definition() => break,
                Some(_) => {
                    items.push(self.postfix()?);
                    self.skip_space();
                }
            }
        }
        Ok(match items.len() {
            0 => Expr::Empty,
            1 => items.pop().unwrap_or(Expr::Empty),
            _ => Expr::Seq(items),
        })
    }

    fn postfix(&mut self) -> PResult<Expr> {
        let mut e = self.primary()?;
        loop {
            let (min, max) = match self.peek() {
                Some('*') => (0, None),
                Some('+') => (1, None),
                Some('?') => (0, Some(1)),
                Some('{') => {
                    e = self.braces(e)?;
                    continue;
                }
                _ => return Ok(e),
            };
            self.bump();
            e = Expr::Repeat { expr: Box::new(e), min, max };
        }
    }

    fn number(&mut self) -> PResult<u32> {
        self.skip_space();
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        if start == self.pos {
            return Err(self.expected("a number"));
        }
        let n: u64 = self.src[start..self.pos].parse().unwrap_or(u64::MAX);
        if n > u64::from(self.limits.max_repeat) {
            return Err(self.err(
                start,
                GrammarErrorKind::BadRepetition(format!(
                    "bound {n} is over the limit of {}",
                    self.limits.max_repeat
                )),
            ));
        }
        self.skip_space();
        Ok(n as u32)
    }

    fn braces(&mut self, e: Expr) -> PResult<Expr> {
        let start = self.pos;
        self.bump();
        let min = self.number()?;
        let max = match self.peek() {
            Some('}') => Some(min),
            Some(',') => {
                self.bump();
                self.skip_space();
                if self.peek() == Some('}') {
                    None
                } else {
                    Some(self.number()?)
                }
            }
            _ => return Err(self.expected("`,` or `}`")),
        };
        if self.peek() != Some('}') {
            return Err(self.expected("`}`"));
        }
        self.bump();
        if let Some(max) = max {
            if max < min {
                let text = self.src[start..self.pos].to_string();
                return Err(self.err(start, GrammarErrorKind::BadRepetition(text)));
            }
        }
        Ok(Expr::Repeat { expr: Box::new(e), min, max })
    }

    fn primary(&mut self) -> PResult<Expr> {
        let at = self.pos;
        match self.peek() {
            Some(q @ ('"' | '\'')) => {
                self.bump();
                let mut s = String::new();
                loop {
                    match self.peek() {
                        None => return Err(self.expected(&format!("closing {q}"))),
                        Some(c) if c == q => {
                            self.bump();
                            break;
                        }
                        Some('\\') => s.push(self.escape()?),
                        Some(c) => {
                            self.bump();
                            s.push(c);
                        }
                    }
                }
                Ok(if s.is_empty() { Expr::Empty } else { Expr::Literal(s) })
            }
            Some('[') => self.class(),
            Some('.') => {
                self.bump();
                Ok(Expr::Class(vec![(0, 0xD7FF), (0xE000, 0x10FFFF)]))
            }
            Some('(') => {
                self.bump();
                self.depth += 1;
                if self.depth > self.limits.max_nesting {
                    return Err(self.err(at, GrammarErrorKind::TooDeep(self.limits.max_nesting)));
                }
                self.skip_space();
                let e = self.alternation()?;
                if self.peek() != Some(')') {
                    return Err(self.expected("`)`"));
                }
                self.bump();
                self.depth -= 1;
                Ok(e)
            }
            Some(c) if is_name_char(c) => {
                let name = self.name().unwrap_or_default();
                Ok(Expr::Rule(self.rule_ref(name, at)))
            }
            _ => Err(self.expected("a string, character class, rule name or `(`")),
        }
    }

    /// Reads one escape sequence (the backslash is next) and returns the character.
    fn escape(&mut self) -> PResult<char> {
        let at = self.pos;
        self.bump();
        let bad = |p: &Self| {
            let end = (p.pos + 1).min(p.src.len());
            let end = (end..=p.src.len()).find(|&i| p.src.is_char_boundary(i)).unwrap_or(end);
            p.err(at, GrammarErrorKind::BadEscape(p.src[at..end].to_string()))
        };
        let c = self.peek().ok_or_else(|| bad(self))?;
        let digits = match c {
            'n' | 'r' | 't' | '\\' | '"' | '\'' | '[' | ']' | '-' | '^' | '/' | '0' => {
                self.bump();
                return Ok(match c {
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    '0' => '\0',
                    c => c,
                });
            }
            'x' => 2,
            'u' => 4,
            'U' => 8,
            _ => return Err(bad(self)),
        };
        self.bump();
        let start = self.pos;
        for _ in 0..digits {
            if !self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                return Err(bad(self));
            }
            self.bump();
        }
        u32::from_str_radix(&self.src[start..self.pos], 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| self.err(at, GrammarErrorKind::BadEscape(self.src[at..self.pos].into())))
    }

    fn class_char(&mut self) -> PResult<char> {
        match self.peek() {
            Some('\\') => self.escape(),
            Some(c) => {
                self.bump();
                Ok(c)
            }
            None => Err(self.expected("`]`")),
        }
    }

    fn class(&mut self) -> PResult<Expr> {
        self.bump();
        let negated = self.peek() == Some('^');
        if negated {
            self.bump();
        }
        let mut ranges = Vec::new();
        while self.peek() != Some(']') {
            let at = self.pos;
            let lo = self.class_char()?;
            let mut hi = lo;
            if self.peek() == Some('-') && !self.src[self.pos + 1..].starts_with(']') {
                self.bump();
                hi = self.class_char()?;
                if hi < lo {
                    let text = self.src[at..self.pos].to_string();
                    return Err(self.err(at, GrammarErrorKind::BadRange(text)));
                }
            }
            ranges.push((lo as u32, hi as u32));
        }
        self.bump();
        let ranges = normalize_class(ranges);
        Ok(Expr::Class(if negated { complement_class(&ranges) } else { ranges }))
    }
}
