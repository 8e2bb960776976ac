//! ECMA-262 regular expressions (the dialect of JSON Schema's `pattern`) → grammar IR.
//!
//! ```text
//! pattern text ──parse──▶ Node tree ──split anchors──▶ branches ──(length bounds)──▶
//!              ──encode (raw | JSON string)──▶ Expr ──▶ Grammar / embedded in a schema
//! ```
//!
//! # Why a parser of our own
//! `regex-syntax` parses Rust's dialect, which differs from ECMA-262 exactly where JSON
//! Schema patterns live: `\d`, `\w` and `\b` are Unicode-aware there but ASCII in ECMA;
//! ECMA's `\s` is a fixed list; `.` excludes `\r`, U+2028 and U+2029 as well as `\n`;
//! `[^]` and `[]` are valid ECMA classes; Annex B makes `{`, `}` and `]` literals where
//! they cannot be syntax; `\cX`, `\u{…}` and surrogate-pair escapes exist; `(?<name>…)`
//! uses a different spelling; and lookarounds / backreferences must be reported (with
//! their offset), not silently parsed as something else. The parser here is ~400 lines;
//! `regex-syntax` is still used for the tables behind `\p{…}` Unicode properties.
//!
//! # Supported
//! Literals, escapes (`\d \w \s \D \W \S`, `\t \n \r \f \v \0`, `\xHH`, `\uXXXX`,
//! `\u{…}`, `\cX`, `\p{…}`/`\P{…}`, escaped metacharacters), classes with ranges and
//! negation, `.`, groups (capturing, `(?:…)`, named `(?<n>…)`), alternation, all
//! quantifiers (`* + ? {n} {n,} {n,m}`; lazy forms are treated as greedy, which matches
//! the same strings), and the anchors `^` / `$` at the start / end of a branch.
//!
//! # Rejected with a [`RegexError`] naming the construct and its byte offset
//! Word boundaries (`\b`, `\B`), lookarounds, backreferences (`\1`, `\k<n>`), group
//! modifiers (`(?i:…)`), anchors in the middle of a branch, unknown escapes.
//!
//! # Anchoring
//! - [`regex_to_grammar`] / [`regex_to_expr`] (the standalone `regex` constraint): the
//!   whole output must match; `^` and `$` are accepted and redundant.
//! - [`regex_to_json_string_expr`] (JSON Schema `pattern`): the pattern is a *search*,
//!   as JSON Schema specifies: a branch without `^` may be preceded by any characters and
//!   one without `$` followed by any, so `"abc"` becomes `[\s\S]*abc[\s\S]*`.
//!
//! # Input safety
//! Nesting depth, repetition counts and the expanded size of the result are bounded by
//! [`RegexLimits`]; the automata stage has its own state limits on top, so pathological
//! patterns (`(a|b)*a(a|b){30}`) fail with a limit error instead of hanging.
//!
//! ```
//! use grammask::regex::{regex_to_grammar, RegexLimits};
//! let g = regex_to_grammar(r"^\d{3}-[a-z]+$", &RegexLimits::default())?;
//! assert_eq!(g.rules.len(), 1);
//! let err = regex_to_grammar(r"a(?=b)", &RegexLimits::default()).unwrap_err();
//! assert_eq!(err.offset, 1);
//! # Ok::<(), grammask::regex::RegexError>(())
//! ```

pub(crate) mod keyset;
pub(crate) mod lower;
mod parse;
mod spell;

use crate::grammar::{Expr, Grammar, Rule, RuleId};
use lower::{check_size, node_to_expr, restrict_branch_len, split_anchors, Branch, Encoding};
pub(crate) use parse::class_ranges;
use parse::{Node, Parser};
use std::fmt;

/// Bounds that keep hostile patterns cheap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegexLimits {
    /// Deepest group nesting (default 64).
    pub max_depth: usize,
    /// Largest repetition count in `{n,m}` (default 10,000).
    pub max_repeat: u32,
    /// Largest result in IR nodes with bounded repetitions expanded (default 100,000);
    /// each node costs a few NFA states later.
    pub max_size: usize,
}

impl Default for RegexLimits {
    fn default() -> Self {
        Self { max_depth: 64, max_repeat: 10_000, max_size: 100_000 }
    }
}

/// A pattern that could not be converted, with the byte offset of the fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegexError {
    /// What went wrong.
    pub kind: RegexErrorKind,
    /// The pattern.
    pub pattern: String,
    /// Byte offset of the fault in `pattern`.
    pub offset: usize,
}

/// The kinds of [`RegexError`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegexErrorKind {
    /// Malformed pattern.
    Syntax(String),
    /// A malformed escape (`\x4`, `\u{110000}`, `\c1`).
    BadEscape,
    /// `\b` or `\B`: word boundaries are context assertions a grammar cannot express.
    WordBoundary,
    /// `(?=…)`, `(?!…)`, `(?<=…)`, `(?<!…)`.
    Lookaround,
    /// `\1`…`\9` or `\k<name>`.
    Backreference,
    /// Valid ECMA-262 that this converter does not support.
    Unsupported(String),
    /// Groups nested deeper than [`RegexLimits::max_depth`].
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// A repetition count over [`RegexLimits::max_repeat`].
    RepeatTooLarge {
        /// The limit.
        limit: u32,
    },
    /// The expanded result is over [`RegexLimits::max_size`].
    TooLarge {
        /// The size reached.
        given: u64,
        /// The limit.
        limit: usize,
    },
    /// `minLength` / `maxLength` could not be combined exactly with this pattern.
    LengthBounds,
    /// The compile's work budget ran out (or it was cancelled) while building the
    /// automaton of a set of keys or a complement.
    Budget(Box<crate::budget::BudgetError>),
}

impl fmt::Display for RegexErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax(s) => write!(f, "syntax error: {s}"),
            Self::BadEscape => write!(f, "invalid escape sequence"),
            Self::WordBoundary => {
                write!(f, "word boundary assertions (\\b, \\B) are not supported")
            }
            Self::Lookaround => write!(f, "lookaround assertions are not supported"),
            Self::Backreference => write!(f, "backreferences are not supported"),
            Self::Unsupported(s) => write!(f, "unsupported: {s}"),
            Self::TooDeep { limit } => write!(f, "groups nested deeper than {limit}"),
            Self::RepeatTooLarge { limit } => {
                write!(f, "repetition count over the limit of {limit}")
            }
            Self::TooLarge { given, limit } => {
                write!(f, "expanded size {given} is over the limit of {limit}")
            }
            Self::LengthBounds => write!(f, "cannot combine minLength/maxLength with this pattern exactly"),
            Self::Budget(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for RegexError {
    /// The message, then the pattern with a caret under the fault.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let col = self.pattern.get(..self.offset).map_or(0, |p| p.chars().count());
        write!(
            f,
            "regex error at offset {}: {}\n  {}\n  {}^",
            self.offset,
            self.kind,
            self.pattern,
            " ".repeat(col)
        )
    }
}

impl std::error::Error for RegexError {}

fn parse(pattern: &str, limits: &RegexLimits) -> Result<Node, RegexError> {
    Parser::new(pattern, limits).parse()
}

/// The pattern as an [`Expr`] matching whole strings (anchored on both sides; `^`/`$`
/// at branch ends are accepted and redundant).
pub fn regex_to_expr(pattern: &str, limits: &RegexLimits) -> Result<Expr, RegexError> {
    let branches = split_anchors(parse(pattern, limits)?, pattern)?;
    let e = alt(branches.iter().map(|b| node_to_expr(&b.body, Encoding::Raw)).collect());
    check_size(&e, pattern, limits)?;
    Ok(e)
}

/// A one-rule grammar (`root`) whose language is exactly the strings the pattern matches
/// in full: the standalone `regex` constraint.
pub fn regex_to_grammar(pattern: &str, limits: &RegexLimits) -> Result<Grammar, RegexError> {
    let body = regex_to_expr(pattern, limits)?;
    Ok(Grammar { rules: vec![Rule::new("root", body)], root: RuleId(0), markers: Vec::new() })
}

/// The body of a JSON string (without the quotes) whose decoded value the pattern matches
/// *somewhere* (JSON Schema semantics: unanchored unless `^` / `$`), and whose length in
/// characters is in `min_len..=max_len`.
///
/// Characters are produced JSON-encoded: `"` and `\` escaped, control characters as
/// `\n`, `\t`, `\b`, `\f`, `\r` or `\u00XX`; everything else as itself (the form
/// `json.dumps(…, ensure_ascii=False)` writes).
///
/// Length bounds are combined exactly when each branch has at most one variable-length
/// part (`^[a-z]{2,}$`, `^\d+-x$`, `abc`); otherwise the error kind is
/// [`RegexErrorKind::LengthBounds`].
pub fn regex_to_json_string_expr(
    pattern: &str,
    min_len: u32,
    max_len: Option<u32>,
    limits: &RegexLimits,
) -> Result<Expr, RegexError> {
    let branches = split_anchors(parse(pattern, limits)?, pattern)?.into_iter().map(Branch::trim_free_sides);
    let any = Node::Class(vec![(0, 0xD7FF), (0xE000, 0x10FFFF)]);
    let any_expr = Expr::Repeat {
        expr: Box::new(lower::json_class(&[(0, 0xD7FF), (0xE000, 0x10FFFF)])),
        min: 0,
        max: None,
    };
    let unbounded = min_len == 0 && max_len.is_none();
    let mut alts = Vec::new();
    for b in branches {
        if unbounded {
            let Branch { start, body, end } = b;
            let mut s = Vec::new();
            if !start {
                s.push(any_expr.clone());
            }
            s.push(node_to_expr(&body, Encoding::JsonString));
            if !end {
                s.push(any_expr.clone());
            }
            alts.push(Expr::Seq(s));
        } else {
            let n =
                restrict_branch_len(b, min_len as u64, max_len.map(u64::from), &any).ok_or_else(|| {
                    RegexError { kind: RegexErrorKind::LengthBounds, pattern: pattern.to_string(), offset: 0 }
                })?;
            alts.push(node_to_expr(&n, Encoding::JsonString));
        }
    }
    let e = alt(alts);
    check_size(&e, pattern, limits)?;
    Ok(e)
}

/// The JSON-encoded forms of one character from a class (see
/// [`regex_to_json_string_expr`] for the encoding). An empty class gives an empty set.
pub fn json_string_char(ranges: &[(u32, u32)]) -> Expr {
    lower::json_class(&crate::grammar::class::normalize_class(ranges.to_vec()))
}

/// The escape spellings (`\/`, `\u00e9`, …) of the characters of `ranges`, without their
/// plain form: [`json_string_char`] is the class of the plain ones or these.
pub fn json_string_escapes(ranges: &[(u32, u32)]) -> Option<Expr> {
    lower::json_escapes(&crate::grammar::class::normalize_class(ranges.to_vec()))
}

fn alt(mut v: Vec<Expr>) -> Expr {
    if v.len() == 1 {
        v.pop().unwrap_or(Expr::Empty)
    } else {
        Expr::Alt(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(p: &str) -> String {
        regex_to_grammar(p, &RegexLimits::default())
            .map(|g| g.to_string())
            .unwrap_or_else(|e| format!("ERR {:?}@{}", e.kind, e.offset))
    }

    #[test]
    fn basics() {
        assert_eq!(g("abc"), "root ::= \"abc\"\n");
        assert_eq!(g("^a|b$"), "root ::= \"a\" | \"b\"\n");
        assert!(g(r"\d{2,3}?").starts_with("root ::= [0-9]{2,3}"));
        assert_eq!(g(r"a\b"), "ERR WordBoundary@1");
        assert_eq!(g(r"(a)\1"), "ERR Backreference@3");
        assert_eq!(g(r"(?<=a)b"), "ERR Lookaround@0");
        assert_eq!(g(r"a{2"), "root ::= \"a{2\"\n");
        assert!(g("a**").starts_with("ERR Syntax"));
        assert!(g("(a").starts_with("ERR Syntax"));
        assert!(g("a)").starts_with("ERR Syntax"));
        assert!(g("[z-a]").starts_with("ERR Syntax"));
        assert!(g("a^b").starts_with("ERR Unsupported"));
        assert_eq!(g("^(a|b)$"), "root ::= \"a\" | \"b\"\n");
    }

    #[test]
    fn deep_nesting_is_an_error() {
        let p = "(".repeat(10_000) + &")".repeat(10_000);
        assert!(matches!(
            regex_to_grammar(&p, &RegexLimits::default()).unwrap_err().kind,
            RegexErrorKind::TooDeep { .. }
        ));
        let p = "(a{1000}){1000}";
        assert!(matches!(
            regex_to_grammar(p, &RegexLimits::default()).unwrap_err().kind,
            RegexErrorKind::TooLarge { .. }
        ));
    }

    #[test]
    fn a_json_string_character_is_small() {
        // The unrolling bounds of `automata::optimize` are sized for it.
        let size = json_string_char(&[(0, 0x10FFFF)]).expanded_size();
        assert!(size <= crate::automata::optimize::CHAR_MAX_SIZE as u64, "{size}");
    }

    #[test]
    fn json_string_encoding_takes_every_spelling() {
        let e = crate::grammar::testing::recognizer(
            &regex_to_json_string_expr("^[\"\\\\\\n/é😀]$", 0, None, &RegexLimits::default()).unwrap(),
        );
        let yes = [
            r#"\""#,
            r#"\u0022"#,
            r#"\\"#,
            r#"\u005C"#,
            r#"\u005c"#,
            r#"\n"#,
            r#"\u000A"#,
            "/",
            r#"\/"#,
            r#"\u002f"#,
            "é",
            r#"\u00e9"#,
            r#"\u00E9"#,
            "😀",
            r#"\ud83d\ude00"#,
            r#"\uD83D\uDE00"#,
        ];
        for s in yes {
            assert!(e.is_match(s), "{s}");
        }
        // Not the characters themselves where JSON forbids them, no lone surrogates, no
        // other characters, no unknown escapes.
        for s in ["\"", "\\", "\n", r#"\ud83d"#, r#"\ude00"#, r#"\u0041"#, r#"\a"#, r#"\u00e"#, "a"] {
            assert!(!e.is_match(s), "{s}");
        }
    }

    #[test]
    fn free_sides_absorb_optional_tails() {
        let body = |p: &str| {
            let e = regex_to_json_string_expr(p, 0, None, &RegexLimits::default()).unwrap();
            Grammar { rules: vec![Rule::new("root", e)], root: RuleId(0), markers: Vec::new() }.to_string()
        };
        // `.*` on a side swallows what is optional there, and a repetition's extra copies.
        assert_eq!(body("ab?c*"), body("a"));
        assert_eq!(body("^x[a-z]+"), body("^x[a-z]"));
        assert_eq!(body("(ab)*c$"), body("c$"));
        assert_eq!(body("q{2,5}"), body("q{2}"));
        assert_ne!(body("^ab?c*$"), body("^a$"));
    }

    #[test]
    fn trimmed_patterns_keep_their_language() {
        use crate::grammar::testing::recognizer;
        let patterns = [
            "ab?c*",
            "[a-c]+:",
            "x(y|z)+",
            "(a|b:)*c",
            "^a+b*",
            "c+d$",
            "(a|)b",
            "a{2,4}",
            "(x|y)+z?$",
            "((ab)+|c)d*",
            "^(a|b)c+(d|)",
        ];
        let alphabet = ['a', 'b', 'c', 'd', 'x', 'y', 'z', ':'];
        let mut strings = vec![String::new()];
        for len in 1..=5 {
            let mut next = Vec::new();
            for s in strings.iter().filter(|s| s.chars().count() == len - 1) {
                for c in alphabet {
                    next.push(format!("{s}{c}"));
                }
            }
            strings.extend(next);
        }
        for p in patterns {
            let e = recognizer(&regex_to_json_string_expr(p, 0, None, &RegexLimits::default()).unwrap());
            let oracle = regex::Regex::new(p).unwrap();
            for s in &strings {
                assert_eq!(e.is_match(s), oracle.is_match(s), "{p:?} on {s:?}");
            }
        }
    }

    #[test]
    fn length_bounds_combine_exactly() {
        use crate::grammar::testing::recognizer;
        let cases: [(&str, u32, Option<u32>); 10] = [
            ("[0-9a]", 2, Some(4)),
            ("x", 0, Some(3)),
            ("x", 3, None),
            ("ab", 1, Some(5)),
            ("ab", 4, None),
            ("(ab|ba)", 2, Some(4)),
            ("^a", 2, Some(3)),
            ("c$", 2, None),
            ("^[a-c]+$", 1, Some(3)),
            ("[^x]", 5, Some(5)),
        ];
        let alphabet = ['a', 'b', 'c', 'x', '0'];
        let mut strings = vec![String::new()];
        for len in 1..=6 {
            let mut next = Vec::new();
            for s in strings.iter().filter(|s| s.chars().count() == len - 1) {
                next.extend(alphabet.iter().map(|c| format!("{s}{c}")));
            }
            strings.extend(next);
        }
        for (p, lo, hi) in cases {
            let e = recognizer(&regex_to_json_string_expr(p, lo, hi, &RegexLimits::default()).unwrap());
            let oracle = regex::Regex::new(p).unwrap();
            for s in &strings {
                let n = s.chars().count() as u32;
                let want = oracle.is_match(s) && n >= lo && hi.map_or(true, |h| n <= h);
                assert_eq!(e.is_match(s), want, "{p:?} {lo}..{hi:?} on {s:?}");
            }
        }
    }

    #[test]
    fn bounded_search_determinizes_in_polynomial_states() {
        // "Contains a hex digit, 8 to 32 characters": the first occurrence is tracked
        // alone, so determinization stays polynomial; a union of one branch per start
        // keeps every occurrence alive and needs a state per subset of them.
        use crate::automata::{Automata, AutomataLimits};
        let e = regex_to_json_string_expr("[0-9a-f]", 8, Some(32), &RegexLimits::default()).unwrap();
        let g = Grammar { rules: vec![Rule::new("root", e)], root: RuleId(0), markers: Vec::new() };
        let limits = AutomataLimits { max_dfa_states: 20_000, ..AutomataLimits::default() };
        let a = Automata::build(&g, &limits).unwrap();
        // (Every spelling of a character takes a few states per position: 1,372 here.)
        assert!(a.num_states() < 2_000, "{}", a.num_states());
    }

    #[test]
    fn error_display_has_caret() {
        let e = regex_to_grammar("ab(?!c)", &RegexLimits::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "regex error at offset 2: lookaround assertions are not supported\n  ab(?!c)\n    ^"
        );
    }
}
