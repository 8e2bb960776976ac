//! Lark text → tokens.
//!
//! The token classes are llguidance's (its `lark/lexer.rs` lists them as regexes), and the
//! choice between them is theirs too: at each position the longest match wins, so
//! `%ignore` is a directive, `"a"i` one case-insensitive string, `?x` a rule name and
//! `+1` a number. Spaces, tabs and comments (`#` or `//` to the end of the line) separate
//! tokens; a newline (with the indentation after it) is a token, since it ends a rule.
//! The JSON after `%json`, `%llguidance` and `%regex` is read here with `serde_json`,
//! as one token, wherever it ends.

use super::error::{LarkError, LarkErrorKind};
use serde_json::Value;

/// One token and the byte offset where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub kind: Tok,
    pub at: usize,
}

/// The token classes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Colon,
    DoubleColon,
    Equals,
    Comma,
    Dot,
    DotDot,
    Arrow,
    LParen,
    RParen,
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Tilde,
    Underscore,
    VBar,
    And,
    /// `+`, `*` or `?`.
    Op(char),
    /// A string literal as written, quotes and `i` flag included.
    Str(String),
    /// A regex as written, slashes and flags included.
    Regexp(String),
    /// A lowercase name (`!`/`?` prefixes included).
    Rule(String),
    /// An uppercase name.
    Terminal(String),
    Number(String),
    HexNumber(String),
    Newline,
    /// `<…>`, as written.
    SpecialToken(String),
    /// `@name`, as written.
    GrammarRef(String),
    Ignore,
    Import,
    Override,
    Declare,
    If,
    Lark,
    /// `%json` and the JSON value after it.
    Json(Value),
    /// `%regex` and the JSON value after it.
    RegexExt(Value),
    /// `%llguidance` and the JSON value after it.
    LlGuidance(Value),
}

impl Tok {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            Tok::Colon => "`:`".into(),
            Tok::DoubleColon => "`::`".into(),
            Tok::Equals => "`=`".into(),
            Tok::Comma => "`,`".into(),
            Tok::Dot => "`.`".into(),
            Tok::DotDot => "`..`".into(),
            Tok::Arrow => "`->`".into(),
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::LBrace => "`{`".into(),
            Tok::RBrace => "`}`".into(),
            Tok::LBracket => "`[`".into(),
            Tok::RBracket => "`]`".into(),
            Tok::Tilde => "`~`".into(),
            Tok::Underscore => "`_`".into(),
            Tok::VBar => "`|`".into(),
            Tok::And => "`&`".into(),
            Tok::Op(c) => format!("`{c}`"),
            Tok::Str(s) => format!("string {s}"),
            Tok::Regexp(s) => format!("regex {s}"),
            Tok::Rule(s) => format!("rule name `{s}`"),
            Tok::Terminal(s) => format!("terminal name `{s}`"),
            Tok::Number(s) | Tok::HexNumber(s) => format!("number {s}"),
            Tok::Newline => "end of line".into(),
            Tok::SpecialToken(s) => format!("special token {s}"),
            Tok::GrammarRef(s) => format!("grammar reference {s}"),
            Tok::Ignore => "`%ignore`".into(),
            Tok::Import => "`%import`".into(),
            Tok::Override => "`%override`".into(),
            Tok::Declare => "`%declare`".into(),
            Tok::If => "`%if`".into(),
            Tok::Lark => "`%lark`".into(),
            Tok::Json(_) => "`%json`".into(),
            Tok::RegexExt(_) => "`%regex`".into(),
            Tok::LlGuidance(_) => "`%llguidance`".into(),
        }
    }
}

/// Fixed-spelling tokens; longer spellings are found by the longest-match rule.
const PUNCT: &[(&str, Tok)] = &[
    ("::", Tok::DoubleColon),
    (":", Tok::Colon),
    ("=", Tok::Equals),
    (",", Tok::Comma),
    ("..", Tok::DotDot),
    (".", Tok::Dot),
    ("->", Tok::Arrow),
    ("(", Tok::LParen),
    (")", Tok::RParen),
    ("{", Tok::LBrace),
    ("}", Tok::RBrace),
    ("[", Tok::LBracket),
    ("]", Tok::RBracket),
    ("~", Tok::Tilde),
    ("_", Tok::Underscore),
    ("|", Tok::VBar),
    ("&", Tok::And),
];

/// Splits `src` into tokens. The token list always ends with a [`Tok::Newline`] (the
/// text is read as if it ended with one), so every rule is terminated.
pub(crate) fn lex(src: &str) -> Result<Vec<Token>, LarkError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        // Separators: spaces, tabs, comments.
        match b[i] {
            b' ' | b'\t' => {
                i += 1;
                continue;
            }
            b'#' => {
                i = line_end(b, i);
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = line_end(b, i);
                continue;
            }
            b'%' => {
                let (tok, len) = directive(src, i)?;
                out.push(Token { kind: tok, at: i });
                i += len;
                continue;
            }
            _ => {}
        }
        let (len, kind) = longest(src, i).ok_or_else(|| bad_token(src, i))?;
        out.push(Token { kind, at: i });
        i += len;
    }
    out.push(Token { kind: Tok::Newline, at: src.len() });
    Ok(out)
}

fn line_end(b: &[u8], i: usize) -> usize {
    b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p)
}

fn bad_token(src: &str, i: usize) -> LarkError {
    let rest = &src[i..];
    let shown: String = rest.chars().take_while(|c| !c.is_whitespace()).take(20).collect();
    let what = if rest.starts_with('"') {
        "(an unterminated or malformed string literal)".to_string()
    } else if rest.starts_with('/') {
        "(an unterminated regex)".to_string()
    } else {
        format!("{shown:?}")
    };
    LarkError::at(src, i, LarkErrorKind::BadToken(what))
}

/// The longest token at `i` (ties: the earlier class in llguidance's order — fixed
/// spellings, then operators, names, strings, regexes, numbers, newlines, special tokens).
fn longest(src: &str, i: usize) -> Option<(usize, Tok)> {
    let rest = &src[i..];
    let b = rest.as_bytes();
    let mut best: Option<(usize, Tok)> = None;
    let mut offer = |len: usize, make: &dyn Fn(&str) -> Tok| {
        if len > 0 && !matches!(&best, Some((l, _)) if *l >= len) {
            best = Some((len, make(&rest[..len])));
        }
    };
    for (spelling, tok) in PUNCT {
        if rest.starts_with(spelling) {
            offer(spelling.len(), &|_| tok.clone());
        }
    }
    if let Some(&c @ (b'+' | b'*' | b'?')) = b.first() {
        offer(1, &|_| Tok::Op(c as char));
    }
    offer(rule_name(b), &|s| Tok::Rule(s.to_string()));
    offer(terminal_name(b), &|s| Tok::Terminal(s.to_string()));
    offer(string(b), &|s| Tok::Str(s.to_string()));
    offer(regexp(b), &|s| Tok::Regexp(s.to_string()));
    offer(number(b), &|s| Tok::Number(s.to_string()));
    offer(hex_number(b), &|s| Tok::HexNumber(s.to_string()));
    offer(newline(b), &|_| Tok::Newline);
    offer(special_token(rest), &|s| Tok::SpecialToken(s.to_string()));
    offer(grammar_ref(b), &|s| Tok::GrammarRef(s.to_string()));
    best
}

/// `%word`, and for `%json`/`%regex`/`%llguidance` the JSON value after it.
fn directive(src: &str, i: usize) -> Result<(Tok, usize), LarkError> {
    let word_len = 1 + src[i + 1..].bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
    let word = &src[i..i + word_len];
    let simple = match word {
        "%ignore" => Some(Tok::Ignore),
        "%import" => Some(Tok::Import),
        "%override" => Some(Tok::Override),
        "%declare" => Some(Tok::Declare),
        "%if" => Some(Tok::If),
        "%lark" => Some(Tok::Lark),
        "%json" | "%regex" | "%llguidance" => None,
        _ => return Err(LarkError::at(src, i, LarkErrorKind::UnknownDirective(word.to_string()))),
    };
    if let Some(t) = simple {
        return Ok((t, word_len));
    }
    let start = i + word_len;
    let mut stream = serde_json::Deserializer::from_str(&src[start..]).into_iter::<Value>();
    let value = match stream.next() {
        Some(Ok(v)) => v,
        Some(Err(e)) => {
            // serde_json's line and column are relative to the JSON's start.
            let at = offset_of(&src[start..], e.line(), e.column()).map_or(start, |o| start + o);
            let msg = format!("after {word}: {e}");
            return Err(LarkError::at(src, at, LarkErrorKind::BadJson(msg)));
        }
        None => {
            let msg = format!("{word} must be followed by a JSON value");
            return Err(LarkError::at(src, start, LarkErrorKind::BadJson(msg)));
        }
    };
    let len = word_len + stream.byte_offset();
    let tok = match word {
        "%json" => Tok::Json(value),
        "%regex" => Tok::RegexExt(value),
        _ => Tok::LlGuidance(value),
    };
    Ok((tok, len))
}

/// The byte offset of 1-based `line` and `column` (serde_json's count, in bytes).
fn offset_of(text: &str, line: usize, column: usize) -> Option<usize> {
    let mut start = 0;
    for _ in 1..line {
        start += text[start..].find('\n')? + 1;
    }
    Some((start + column.saturating_sub(1)).min(text.len()))
}

/// `!?[_?]?[a-z][_a-z0-9\-]*`
fn rule_name(b: &[u8]) -> usize {
    let mut i = 0;
    if b.get(i) == Some(&b'!') {
        i += 1;
    }
    if matches!(b.get(i), Some(b'_' | b'?')) {
        i += 1;
    }
    if !b.get(i).is_some_and(u8::is_ascii_lowercase) {
        return 0;
    }
    i + 1
        + b[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-".contains(c))
            .count()
}

/// `_?[A-Z][_A-Z0-9\-]*`
fn terminal_name(b: &[u8]) -> usize {
    let i = usize::from(b.first() == Some(&b'_'));
    if !b.get(i).is_some_and(u8::is_ascii_uppercase) {
        return 0;
    }
    i + 1
        + b[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || b"_-".contains(c))
            .count()
}

/// JSON-like string: `"(\\(["\\/bfnrt]|u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2})|[^"\\\x00-\x1F\x7F])*"(i|)`
fn string(b: &[u8]) -> usize {
    if b.first() != Some(&b'"') {
        return 0;
    }
    let mut i = 1;
    loop {
        match b.get(i) {
            None => return 0,
            Some(b'"') => break,
            Some(b'\\') => {
                let hex =
                    |n: usize| b.get(i + 2..i + 2 + n).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
                i += match b.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => 2,
                    Some(b'u') if hex(4) => 6,
                    Some(b'x') if hex(2) => 4,
                    _ => return 0,
                };
            }
            Some(&c) if c < 0x20 || c == 0x7F => return 0,
            Some(_) => i += 1,
        }
    }
    i += 1;
    if b.get(i) == Some(&b'i') {
        i += 1;
    }
    i
}

/// `/(\\.|[^/\\])+/[imslux]*` (`.` is any character but a newline).
fn regexp(b: &[u8]) -> usize {
    if b.first() != Some(&b'/') {
        return 0;
    }
    let mut i = 1;
    loop {
        match b.get(i) {
            None => return 0,
            Some(b'/') => break,
            Some(b'\\') => match b.get(i + 1) {
                None | Some(b'\n') => return 0,
                Some(_) => i += 2,
            },
            Some(_) => i += 1,
        }
    }
    if i == 1 {
        return 0;
    }
    i += 1;
    i + b[i..].iter().take_while(|c| b"imslux".contains(c)).count()
}

/// `[+-]?[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?`, except that a `..` after the digits is
/// a range (`~ 2..3`), as llguidance reads it.
fn number(b: &[u8]) -> usize {
    let digits = |from: usize| b[from.min(b.len())..].iter().take_while(|c| c.is_ascii_digit()).count();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let n = digits(i);
    if n == 0 {
        return 0;
    }
    i += n;
    if b.get(i) == Some(&b'.') && b.get(i + 1) != Some(&b'.') {
        i += 1 + digits(i + 1);
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
        let n = digits(i + 1 + sign);
        if n > 0 {
            i += 1 + sign + n;
        }
    }
    i
}

/// `0[xX][0-9a-fA-F]+`
fn hex_number(b: &[u8]) -> usize {
    if b.first() != Some(&b'0') || !matches!(b.get(1), Some(b'x' | b'X')) {
        return 0;
    }
    let n = b[2..].iter().take_while(|c| c.is_ascii_hexdigit()).count();
    if n == 0 {
        0
    } else {
        2 + n
    }
}

/// `(\r?\n)+[ \t]*`
fn newline(b: &[u8]) -> usize {
    let mut i = 0;
    loop {
        if b.get(i) == Some(&b'\n') {
            i += 1;
        } else if b.get(i) == Some(&b'\r') && b.get(i + 1) == Some(&b'\n') {
            i += 2;
        } else {
            break;
        }
    }
    if i == 0 {
        return 0;
    }
    i + b[i..].iter().take_while(|c| matches!(c, b' ' | b'\t')).count()
}

/// `<[^<>\s]+>`
fn special_token(s: &str) -> usize {
    let Some(body) = s.strip_prefix('<') else { return 0 };
    let n: usize =
        body.chars().take_while(|c| !matches!(c, '<' | '>') && !c.is_whitespace()).map(char::len_utf8).sum();
    if n > 0 && body[n..].starts_with('>') {
        n + 2
    } else {
        0
    }
}

/// `@[a-zA-Z0-9_\-]+`
fn grammar_ref(b: &[u8]) -> usize {
    if b.first() != Some(&b'@') {
        return 0;
    }
    let n = b[1..].iter().take_while(|c| c.is_ascii_alphanumeric() || b"_-".contains(c)).count();
    if n == 0 {
        0
    } else {
        1 + n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<Tok> {
        lex(src).unwrap().into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn longest_match_decides() {
        assert_eq!(
            kinds(r#"?x: "a"i+ /b\/c/i"#),
            vec![
                Tok::Rule("?x".into()),
                Tok::Colon,
                Tok::Str("\"a\"i".into()),
                Tok::Op('+'),
                Tok::Regexp(r"/b\/c/i".into()),
                Tok::Newline
            ]
        );
        assert_eq!(
            kinds("a{1,2}"),
            vec![
                Tok::Rule("a".into()),
                Tok::LBrace,
                Tok::Number("1".into()),
                Tok::Comma,
                Tok::Number("2".into()),
                Tok::RBrace,
                Tok::Newline
            ]
        );
        // The comment line's own newline is a second token; the text's end adds a third.
        assert_eq!(
            kinds("A // c\n # d\n"),
            vec![Tok::Terminal("A".into()), Tok::Newline, Tok::Newline, Tok::Newline]
        );
    }

    #[test]
    fn json_after_directive_is_one_token() {
        let t = kinds("x: %json {\"type\": \"object\"} y");
        assert_eq!(t[2], Tok::Json(serde_json::json!({"type": "object"})));
        assert_eq!(t[3], Tok::Rule("y".into()));
        let e = lex("x: %json {\n \"a\": }").unwrap_err();
        assert_eq!((e.line, e.column), (2, 7));
    }

    #[test]
    fn unknown_directive_and_stray_text_point_at_themselves() {
        let e = lex("start: \"a\"\n%foo x").unwrap_err();
        assert_eq!(
            (e.line, e.column, e.kind.clone()),
            (2, 1, LarkErrorKind::UnknownDirective("%foo".into()))
        );
        let e = lex("start: $").unwrap_err();
        assert_eq!((e.line, e.column), (1, 8));
        assert!(lex("start: \"abc").is_err());
    }
}
