//! ECMA-262 pattern text → [`Node`] syntax tree.
//!
//! A small recursive-descent parser (nesting depth bounded by
//! [`RegexLimits::max_depth`](super::RegexLimits::max_depth), so hostile input cannot
//! overflow the stack). It follows the ECMA-262 grammar with the web-compatibility
//! relaxations of Annex B that JSON Schema validators accept: a `{` that does not start a
//! valid quantifier, and lone `]` / `}`, are literals. Characters are Unicode scalar
//! values; `\uD83D\uDE00` surrogate pairs are joined, lone surrogates match nothing.
//!
//! AFTER THIS: the tree holds only characters (as classes), anchors, sequences,
//! alternations and repetitions; groups are transparent; every unsupported construct has
//! been reported with its byte offset.

use super::{RegexError, RegexErrorKind, RegexLimits};
use crate::grammar::class::{complement_class, normalize_class};

/// A parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    /// The empty string.
    Empty,
    /// One character from a normalized set of scalar ranges.
    Class(Vec<(u32, u32)>),
    /// `^`.
    Start,
    /// `$`.
    End,
    /// Concatenation.
    Seq(Vec<Node>),
    /// Alternation.
    Alt(Vec<Node>),
    /// Repetition (lazy quantifiers are parsed as greedy: same language).
    Repeat { node: Box<Node>, min: u32, max: Option<u32> },
}

/// ECMA `\d`.
pub(crate) const DIGIT: &[(u32, u32)] = &[(0x30, 0x39)];
/// ECMA `\w` (ASCII only, as in ECMA-262 without the `i` flag).
pub(crate) const WORD: &[(u32, u32)] = &[(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)];
/// ECMA `\s`: WhiteSpace and LineTerminator.
pub(crate) const SPACE: &[(u32, u32)] = &[
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
];
/// ECMA `.`: anything but a line terminator.
pub(crate) const DOT: &[(u32, u32)] = &[(0, 0x09), (0x0B, 0x0C), (0x0E, 0x2027), (0x202A, 0x10FFFF)];

pub(crate) struct Parser<'a> {
    pat: &'a str,
    pos: usize,
    depth: usize,
    limits: &'a RegexLimits,
}

/// One item inside `[...]`: a single character (may start a range) or a set escape.
enum ClassAtom {
    Char(u32),
    Set(Vec<(u32, u32)>),
}

impl<'a> Parser<'a> {
    pub fn new(pat: &'a str, limits: &'a RegexLimits) -> Self {
        Parser { pat, pos: 0, depth: 0, limits }
    }

    fn err(&self, kind: RegexErrorKind, offset: usize) -> RegexError {
        RegexError { kind, pattern: self.pat.to_string(), offset }
    }

    fn peek(&self) -> Option<char> {
        self.pat[self.pos..].chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.pat[self.pos..].chars().nth(n)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn eat(&mut self, s: &str) -> bool {
        if self.pat[self.pos..].starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    /// Parses the whole pattern.
    pub fn parse(mut self) -> Result<Node, RegexError> {
        let n = self.alternation()?;
        if self.pos < self.pat.len() {
            // Only an unbalanced `)` stops the top-level alternation early.
            return Err(self.err(RegexErrorKind::Syntax("unmatched `)`".into()), self.pos));
        }
        Ok(n)
    }

    fn alternation(&mut self) -> Result<Node, RegexError> {
        self.depth += 1;
        if self.depth > self.limits.max_depth {
            return Err(self.err(RegexErrorKind::TooDeep { limit: self.limits.max_depth }, self.pos));
        }
        let mut alts = vec![self.sequence()?];
        while self.eat("|") {
            alts.push(self.sequence()?);
        }
        self.depth -= 1;
        Ok(if alts.len() == 1 { alts.pop().unwrap_or(Node::Empty) } else { Node::Alt(alts) })
    }

    fn sequence(&mut self) -> Result<Node, RegexError> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let start = self.pos;
            let atom = self.atom()?;
            let atom = self.quantified(atom, start)?;
            items.push(atom);
        }
        Ok(match items.len() {
            0 => Node::Empty,
            1 => items.pop().unwrap_or(Node::Empty),
            _ => Node::Seq(items),
        })
    }

    /// Tries to read `{n}`, `{n,}` or `{n,m}` at the cursor; `None` (cursor unchanged)
    /// when the text is not a quantifier (Annex B: then `{` is a literal).
    fn braces(&mut self) -> Result<Option<(u32, Option<u32>)>, RegexError> {
        let rest = &self.pat[self.pos..];
        let Some(close) = rest.find('}') else {
            return Ok(None);
        };
        let inner = &rest[1..close];
        let (a, b) = match inner.split_once(',') {
            Some((a, b)) => (a, Some(b)),
            None => (inner, None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(a) || b.is_some_and(|b| !b.is_empty() && !digits(b)) {
            return Ok(None);
        }
        let num = |s: &str| -> Result<u32, RegexError> {
            s.parse::<u32>().ok().filter(|&n| n <= self.limits.max_repeat).ok_or_else(|| {
                self.err(RegexErrorKind::RepeatTooLarge { limit: self.limits.max_repeat }, self.pos)
            })
        };
        let min = num(a)?;
        let max = match b {
            None => Some(min),
            Some("") => None,
            Some(b) => Some(num(b)?),
        };
        if max.is_some_and(|m| m < min) {
            return Err(
                self.err(RegexErrorKind::Syntax(format!("repetition {{{inner}}} has max < min")), self.pos)
            );
        }
        self.pos += close + 1;
        Ok(Some((min, max)))
    }

    fn quantified(&mut self, atom: Node, start: usize) -> Result<Node, RegexError> {
        let mut atom = atom;
        loop {
            let qpos = self.pos;
            let (min, max) = match self.peek() {
                Some('*') => (0, None),
                Some('+') => (1, None),
                Some('?') => (0, Some(1)),
                Some('{') => match self.braces()? {
                    Some(q) => {
                        self.pos = qpos; // re-consumed below
                        q
                    }
                    None => return Ok(atom),
                },
                _ => return Ok(atom),
            };
            if matches!(atom, Node::Start | Node::End) {
                return Err(self.err(RegexErrorKind::Syntax("quantifier after an anchor".into()), qpos));
            }
            if self.peek() == Some('{') {
                self.braces()?;
            } else {
                self.bump();
            }
            self.eat("?"); // lazy: same language as greedy
            if qpos == start {
                return Err(self.err(RegexErrorKind::Syntax("nothing to repeat".into()), qpos));
            }
            atom = Node::Repeat { node: Box::new(atom), min, max };
            // ECMA forbids `a**`; reject it like validators do.
            if matches!(self.peek(), Some('*' | '+' | '?')) {
                return Err(self.err(RegexErrorKind::Syntax("nothing to repeat".into()), self.pos));
            }
        }
    }

    fn atom(&mut self) -> Result<Node, RegexError> {
        let start = self.pos;
        let Some(c) = self.bump() else {
            return Ok(Node::Empty);
        };
        Ok(match c {
            '^' => Node::Start,
            '$' => Node::End,
            '.' => Node::Class(DOT.to_vec()),
            '*' | '+' | '?' => {
                return Err(self.err(RegexErrorKind::Syntax("nothing to repeat".into()), start))
            }
            '{' => {
                self.pos = start;
                if self.braces()?.is_some() {
                    return Err(self.err(RegexErrorKind::Syntax("nothing to repeat".into()), start));
                }
                self.pos = start + 1;
                Node::Class(vec![('{' as u32, '{' as u32)])
            }
            '(' => self.group(start)?,
            '[' => self.class(start)?,
            '\\' => self.escape(start)?,
            c => Node::Class(vec![(c as u32, c as u32)]),
        })
    }

    fn group(&mut self, start: usize) -> Result<Node, RegexError> {
        if self.eat("?") {
            if self.eat(":") {
            } else if self.eat("=") || self.eat("!") || self.eat("<=") || self.eat("<!") {
                return Err(self.err(RegexErrorKind::Lookaround, start));
            } else if self.eat("<") {
                let rest = &self.pat[self.pos..];
                let end = rest.find('>').ok_or_else(|| {
                    self.err(RegexErrorKind::Syntax("unterminated group name".into()), start)
                })?;
                let name = &rest[..end];
                if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                    return Err(
                        self.err(RegexErrorKind::Syntax(format!("invalid group name `{name}`")), start)
                    );
                }
                self.pos += end + 1;
            } else {
                return Err(self.err(RegexErrorKind::Unsupported("group modifier `(?`".into()), start));
            }
        }
        let inner = self.alternation()?;
        if !self.eat(")") {
            return Err(self.err(RegexErrorKind::Syntax("unclosed group".into()), start));
        }
        Ok(inner)
    }

    fn hex(&mut self, n: usize, at: usize) -> Result<u32, RegexError> {
        let s = self.pat.get(self.pos..self.pos + n).filter(|s| s.bytes().all(|b| b.is_ascii_hexdigit()));
        let s = s.ok_or_else(|| self.err(RegexErrorKind::BadEscape, at))?;
        self.pos += n;
        u32::from_str_radix(s, 16).map_err(|_| self.err(RegexErrorKind::BadEscape, at))
    }

    /// `\u` escapes: `\uXXXX` (joining surrogate pairs) or `\u{X…}`.
    fn unicode_escape(&mut self, at: usize) -> Result<u32, RegexError> {
        if self.eat("{") {
            let rest = &self.pat[self.pos..];
            let end = rest.find('}').ok_or_else(|| self.err(RegexErrorKind::BadEscape, at))?;
            let v = u32::from_str_radix(&rest[..end], 16).ok().filter(|&v| v <= 0x10FFFF);
            let v = v.ok_or_else(|| self.err(RegexErrorKind::BadEscape, at))?;
            self.pos += end + 1;
            return Ok(v);
        }
        let hi = self.hex(4, at)?;
        if (0xD800..0xDC00).contains(&hi) && self.pat[self.pos..].starts_with("\\u") {
            let save = self.pos;
            self.pos += 2;
            match self.hex(4, at) {
                Ok(lo) if (0xDC00..0xE000).contains(&lo) => {
                    return Ok(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
                }
                _ => self.pos = save,
            }
        }
        Ok(hi)
    }

    /// An escape that denotes one character or a set; shared by atoms and classes.
    fn char_escape(&mut self, at: usize, in_class: bool) -> Result<ClassAtom, RegexError> {
        let Some(c) = self.bump() else {
            return Err(self.err(RegexErrorKind::Syntax("pattern ends with `\\`".into()), at));
        };
        let set = |s: &[(u32, u32)]| ClassAtom::Set(s.to_vec());
        let neg = |s: &[(u32, u32)]| ClassAtom::Set(complement_class(s));
        Ok(match c {
            'd' => set(DIGIT),
            'D' => neg(DIGIT),
            'w' => set(WORD),
            'W' => neg(WORD),
            's' => set(SPACE),
            'S' => neg(SPACE),
            't' => ClassAtom::Char(9),
            'n' => ClassAtom::Char(10),
            'v' => ClassAtom::Char(11),
            'f' => ClassAtom::Char(12),
            'r' => ClassAtom::Char(13),
            'b' if in_class => ClassAtom::Char(8),
            '-' if in_class => ClassAtom::Char('-' as u32),
            '0' if !self.peek().is_some_and(|d| d.is_ascii_digit()) => ClassAtom::Char(0),
            'x' => ClassAtom::Char(self.hex(2, at)?),
            'u' => ClassAtom::Char(self.unicode_escape(at)?),
            'c' => match self.peek() {
                Some(l) if l.is_ascii_alphabetic() => {
                    self.bump();
                    ClassAtom::Char(l as u32 % 32)
                }
                _ => return Err(self.err(RegexErrorKind::BadEscape, at)),
            },
            'p' | 'P' => {
                let rest = &self.pat[self.pos..];
                if !rest.starts_with('{') {
                    return Err(self.err(RegexErrorKind::BadEscape, at));
                }
                let end = rest.find('}').ok_or_else(|| self.err(RegexErrorKind::BadEscape, at))?;
                let name = &rest[1..end];
                self.pos += end + 1;
                let ranges = unicode_property(name).ok_or_else(|| {
                    self.err(RegexErrorKind::Unsupported(format!("unicode property \\{c}{{{name}}}")), at)
                })?;
                if c == 'p' {
                    ClassAtom::Set(ranges)
                } else {
                    ClassAtom::Set(complement_class(&ranges))
                }
            }
            '1'..='9' => return Err(self.err(RegexErrorKind::Backreference, at)),
            'k' if self.peek() == Some('<') => return Err(self.err(RegexErrorKind::Backreference, at)),
            c if !c.is_alphanumeric() => ClassAtom::Char(c as u32),
            c => return Err(self.err(RegexErrorKind::Unsupported(format!("escape \\{c}")), at)),
        })
    }

    fn escape(&mut self, at: usize) -> Result<Node, RegexError> {
        match self.peek() {
            Some('b') | Some('B') => Err(self.err(RegexErrorKind::WordBoundary, at)),
            _ => Ok(match self.char_escape(at, false)? {
                ClassAtom::Char(c) => Node::Class(normalize_class(vec![(c, c)])),
                ClassAtom::Set(s) => Node::Class(normalize_class(s)),
            }),
        }
    }

    fn class_atom(&mut self, start: usize) -> Result<ClassAtom, RegexError> {
        let at = self.pos;
        match self.bump() {
            None => Err(self.err(RegexErrorKind::Syntax("unclosed character class".into()), start)),
            Some('\\') => self.char_escape(at, true),
            Some(c) => Ok(ClassAtom::Char(c as u32)),
        }
    }

    fn class(&mut self, start: usize) -> Result<Node, RegexError> {
        let negated = self.eat("^");
        let mut ranges = Vec::new();
        loop {
            if self.eat("]") {
                break;
            }
            let lo = self.class_atom(start)?;
            if self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']') {
                let dash = self.pos;
                self.bump();
                let hi = self.class_atom(start)?;
                match (lo, hi) {
                    (ClassAtom::Char(a), ClassAtom::Char(b)) => {
                        if a > b {
                            return Err(
                                self.err(RegexErrorKind::Syntax("class range out of order".into()), dash)
                            );
                        }
                        ranges.push((a, b));
                    }
                    // Annex B: `[\d-z]` is the set, a dash and the other atom.
                    (a, b) => {
                        for x in [a, b] {
                            match x {
                                ClassAtom::Char(c) => ranges.push((c, c)),
                                ClassAtom::Set(s) => ranges.extend(s),
                            }
                        }
                        ranges.push(('-' as u32, '-' as u32));
                    }
                }
            } else {
                match lo {
                    ClassAtom::Char(c) => ranges.push((c, c)),
                    ClassAtom::Set(s) => ranges.extend(s),
                }
            }
        }
        let ranges = normalize_class(ranges);
        Ok(Node::Class(if negated { complement_class(&ranges) } else { ranges }))
    }
}

/// Ranges of a Unicode property (`L`, `Lu`, `Script=Greek`, …) via `regex-syntax`.
fn unicode_property(name: &str) -> Option<Vec<(u32, u32)>> {
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '=') {
        return None;
    }
    class_ranges(&format!("\\p{{{name}}}"))
}

/// Ranges of a class in `regex-syntax`'s own syntax (properties, set difference `--`):
/// the Unicode tables behind `\p{…}`, and classes the library writes for itself.
pub(crate) fn class_ranges(class: &str) -> Option<Vec<(u32, u32)>> {
    let hir = regex_syntax::ParserBuilder::new().build().parse(class).ok()?;
    match hir.kind() {
        regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(c)) => {
            Some(c.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect())
        }
        _ => None,
    }
}
