//! Lark grammars (llguidance's dialect): accepted and rejected texts against
//! llguidance's own answers, masks against the brute-force oracle on the real
//! tokenizers, typed errors with line:column, the CLI, and no panics on garbage.
//!
//! The `LLGUIDANCE` table was produced by running llguidance 1.9.1 (`pip install
//! llguidance`, a byte-level tokenizer, `LLMatcher.consume_token` per byte then
//! `is_accepting`) on each grammar and text; grammask must give the same answer. The
//! `GREEDY` table holds the texts where the answers differ because llguidance's lexer is
//! greedy (documented in `grammask::lark`): there llguidance rejects, grammask accepts.

use crate::common;

use common::check_masks_along;
use grammask::lark::{lark_to_grammar, lark_to_grammar_with, LarkErrorKind as Kind, LarkLimits};
use grammask::{Error, GrammarCompiler, GrammarMatcher, GrammarSpec};
use std::sync::Arc;

// ---------------------------------------------------------------------------------------
// (a) accepted and rejected texts
// ---------------------------------------------------------------------------------------

fn compiler() -> &'static GrammarCompiler {
    common::byte_compiler()
}

/// Whether the grammar accepts `text` as a complete output.
fn accepts(lark: &str, text: &str) -> bool {
    let compiled =
        compiler().compile(&GrammarSpec::Lark(lark.into())).unwrap_or_else(|e| panic!("{lark}\n{e}"));
    let mut m = GrammarMatcher::new(compiled);
    m.accept_string(text).is_ok() && m.can_terminate()
}

fn check_table(table: &[(&str, &[(&str, bool)])], flip: bool) {
    let mut wrong = Vec::new();
    for (lark, cases) in table {
        for &(text, want) in *cases {
            let want = want != flip;
            if accepts(lark, text) != want {
                wrong.push(format!(
                    "{text:?} should be {} by\n{lark}\n",
                    if want { "accepted" } else { "rejected" }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{} differences:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn same_answers_as_llguidance() {
    check_table(LLGUIDANCE, false);
}

#[test]
fn differences_only_ever_accept_more() {
    // Each text parses only by ending a lexeme before its longest match, or ends with a
    // skip after a terminal that can be followed elsewhere but not here: llguidance
    // rejects it, grammask accepts it (`GREEDY` holds llguidance's answers).
    check_table(GREEDY_CFG, false);
    for (lark, cases) in GREEDY {
        let cfg = GREEDY_CFG.iter().find(|(l, _)| l == lark).map(|(_, c)| *c).unwrap_or_default();
        for &(text, llg) in *cases {
            let ours = cfg.iter().find(|(t, _)| *t == text).map(|(_, a)| *a);
            assert!(ours.is_some(), "{text:?}: no grammask answer recorded");
            assert!(!llg || ours == Some(true), "{text:?}: llguidance accepts, so must grammask");
        }
    }
}

/// grammask's answers for the `GREEDY` texts (the context-free reading).
const GREEDY_CFG: &[(&str, &[(&str, bool)])] = &[
    ("start: A A\nA: /a+/", &[("aa", true), ("aaa", true), ("a", false)]),
    ("start: NUMBER \".\" NUMBER\n%import common.NUMBER", &[("1.5", true), ("1 . 5", false)]),
    ("start: \"a\" \"b\" | \"ab\" \"c\"", &[("ab", true), ("abc", true)]),
    ("start: INT INT\n%import common.INT", &[("12", true)]),
    (
        "start: \"<think>\" \"\\n\" /(.|\\n)*/ \"</think>\" address\naddress: %json {\"type\": \"object\", \"properties\": {\"zip\": {\"type\": \"number\"}}, \"required\": [\"zip\"]}",
        &[("<think>\nhm</think>{\"zip\": 1}", true)],
    ),
    ("start: \"a\" \"b\" | \"b\" \"c\"\n%ignore \" \"", &[("a b ", true), ("b c ", false), ("b ", false)]),
];

/// llguidance's answers (llguidance 1.9.1), grammar by grammar. The first grammars are
/// the examples of llguidance's `docs/syntax.md` (with strings where the docs use special
/// tokens, which grammask does not support).
const LLGUIDANCE: &[(&str, &[(&str, bool)])] = &[
    (
        r#"start: TEXT | fun_call
TEXT: /[^{](.|\n)*/
fun_call: %json {
  "type": "object",
  "properties": {
    "name": { "const": "get_weather" },
    "parameters": {
      "type": "object",
      "properties": { "city": { "type": "string" } },
      "required": ["city"]
    }
  },
  "required": ["name", "parameters"]
}"#,
        &[
            ("There is no function I can call", true),
            ("{\"name\":\"get_weather\", \"parameters\": {\"city\":\"Seattle\"}}", true),
            ("{\"name\":\"get_weather\"}", false),
            ("{\"name\":\"other\", \"parameters\": {\"city\":\"Seattle\"}}", false),
            ("", false),
            ("{", false),
            ("x\n{y}", true),
        ],
    ),
    (
        r#"start: normal_text | brave | wolfram
normal_text: /(.|\n)*/
brave: "<|python_tag|>" "brave_search.call(query=" JSON_STRING ")" "<|eom_id|>"
wolfram: "<|python_tag|>" "wolfram_alpha.call(query=" JSON_STRING ")" "<|eom_id|>"
JSON_CHAR: /(\\([\"\\\/bfnrt]|u[a-fA-F0-9]{4})|[^\"\\\x00-\x1F\x7F])/
JSON_STRING: "\"" JSON_CHAR* "\"""#,
        &[
            ("<|python_tag|>brave_search.call(query=\"rust \\\"lang\\\"\")<|eom_id|>", true),
            ("just text", true),
            ("", true),
        ],
    ),
    (
        r#"// INT is -?[0-9]+
start: INT
INT: "-"? UINT
UINT: DIGIT+
DIGIT: /[0-9]/"#,
        &[("-12", true), ("12", true), ("-", false), ("1 2", false), ("", false)],
    ),
    (
        r#"start: IDENTIFIER ("," IDENTIFIER)*
ID_START: /[a-zA-Z_]/
ID_CHAR: /[a-zA-Z0-9_]/
IDENTIFIER: ID_START ID_CHAR*
%ignore " ""#,
        &[("a", true), ("a1,_b2", true), ("a1 , b", true), ("1a", false), ("a b", false), ("a,", false)],
    ),
    (
        r#"start: expr
expr: expr "+" term | term
term: term "*" factor | factor
factor: "(" expr ")" | NUMBER
NUMBER: /[0-9]+/
%ignore " ""#,
        &[
            ("1+2*3", true),
            ("(1 + 2) * 3", true),
            ("1 +", false),
            (" 1", false),
            ("1 ", true),
            ("12 34", false),
            ("((7))", true),
        ],
    ),
    (
        r#"start: many
many: many one | one
one: "x" | "y""#,
        &[("x", true), ("xyx", true), ("", false)],
    ),
    (
        r#"start: digits
digits: /[0-9]/+
%ignore " ""#,
        &[("123", true), ("1 2  3", true), (" 1", false)],
    ),
    (
        r#"start: DIGITS
DIGITS: /[0-9]/+
%ignore " ""#,
        &[("123", true), ("1 2", false)],
    ),
    (
        r#"%llguidance { "ignore_once": true }
%ignore /[ \t]{1,8}/
start: "A" "!""#,
        &[("A!", true), ("A !", true), ("A\t\t!", true), ("A         !", false), ("A    \t    !", false)],
    ),
    (
        r#"%ignore /[ \t]{1,8}/
start: "A" "!""#,
        &[("A         !", true)],
    ),
    (
        r#"start: %regex { "substring_chunks": ["abc", "de", "fg"] }"#,
        &[
            ("", true),
            ("abc", true),
            ("de", true),
            ("abcde", true),
            ("defg", true),
            ("abcdefg", true),
            ("ab", false),
            ("cde", false),
            ("abcfg", false),
        ],
    ),
    (
        r#"start: %regex { "substring_chars": "ab c" }"#,
        &[("", true), ("b c", true), ("ac", false), ("ab c", true)],
    ),
    (
        r#"start: %regex { "substring_words": "foo bar. baz" }"#,
        &[("bar. baz", true), ("foo", true), ("", true), ("ar", false), ("foo bar", true)],
    ),
    (
        r#"start: WS? NUMBER
%import common.WS
%import common.NUMBER"#,
        &[
            ("12", true),
            ("1.5e3", true),
            (".5", true),
            ("1.", true),
            (" \t\n7", true),
            ("1e", false),
            ("e5", false),
        ],
    ),
    (
        r#"start: SIGNED_NUMBER | ESCAPED_STRING
%import common (SIGNED_NUMBER, ESCAPED_STRING)"#,
        &[
            ("-1.5", true),
            ("+3", true),
            ("\"a\\\"b\"", true),
            ("\"a\\qb\"", true),
            ("\"a", false),
            ("--1", false),
        ],
    ),
    (
        r#"start: CNAME ":" INT
%import common.CNAME
%import common.INT"#,
        &[("_a1:42", true), ("1a:42", false), ("a:-1", false)],
    ),
    (
        r#"start: LETTER DIGIT WORD
%import common.LETTER
%import common.DIGIT
%import common.WORD"#,
        &[("a1bc", true), ("a12", false), ("A9Z", true)],
    ),
    (
        r#"start: WORD (NEWLINE WORD)*
%import common.WORD
%import common.NEWLINE"#,
        &[("a\nb", true), ("a\r\n\nb", true), ("a\rb", false)],
    ),
    (
        r#"start: C_COMMENT | SH_COMMENT | CPP_COMMENT
%import common.C_COMMENT
%import common.SH_COMMENT
%import common.CPP_COMMENT"#,
        &[("/* a * b */", true), ("/* a */ */", false), ("# x", true), ("// y", true)],
    ),
    (
        r#"start: H
%import common.HEXDIGIT -> H"#,
        &[("f", true), ("G", false)],
    ),
    (
        r#"start: FLOAT
%import common.FLOAT"#,
        &[("1.5", true), ("1e5", true), ("1", false), (".5e-3", true)],
    ),
    (
        r#"start: "select"i "*" "from"i
%ignore " ""#,
        &[("SELECT * FROM", true), ("SeLeCt *from", true), ("select*", false)],
    ),
    (r#"start: "a".."f"+"#, &[("abc", true), ("afz", false), ("fed", true)]),
    (
        r#"start: X
X: "a".."f"+"#,
        &[("abcf", true), ("g", false)],
    ),
    (
        r#"start: "ab"{2,3} x{2}
x: "c""#,
        &[("ababcc", true), ("abababcc", true), ("abcc", false), ("ababababcc", false)],
    ),
    (
        r#"start: A
A: "a"{2,} "b"{,2}"#,
        &[("aa", true), ("aaab", true), ("abb", false), ("aabbb", false)],
    ),
    (
        r#"start: A
A: "a" ~ 2..3"#,
        &[("aa", true), ("aaa", true), ("a", false)],
    ),
    (
        r#"start: "x" # comment
  | "y" // another
# whole line"#,
        &[("x", true), ("y", true), ("z", false)],
    ),
    (
        r#"start: "a" ["b"] "c"? "d"
%ignore " ""#,
        &[("ad", true), ("a b c d", true), ("abd", true), ("a cd", true)],
    ),
    (
        r#"start: WORD
WORD: /[a-z]+/ & /.{3}/"#,
        &[("abc", true), ("ab", false), ("abcd", false), ("AbC", false)],
    ),
    (
        r#"start: my-rule
my-rule: "a" MY-T
MY-T: "b""#,
        &[("ab", true)],
    ),
    (
        r#"start: "a" "b"
%ignore WS
%ignore COMMENT
COMMENT: /#[^\n]*\n/
%import common.WS"#,
        &[("a b", true), ("a #c\nb", true), ("a#c\n  b", true), ("a b ", false)],
    ),
    (
        r#"%llguidance {"allow_initial_skip": true}
%ignore " "
start: "a" "b""#,
        &[(" a b", true), ("a b ", false), ("ab", true)],
    ),
    (
        r#"start: a
?a: "q"
!b: "r""#,
        &[("q", true)],
    ),
    (
        r#"start: "a" -> first
  | "b" "c" -> second"#,
        &[("a", true), ("bc", true), ("b", false)],
    ),
    (r#"start: "\t\u00e9\x41\"\\/""#, &[("\t\u{e9}A\"\\/", true)]),
    (r#"start: /abc/i /a.b/s"#, &[("ABCa\nb", true), ("abca\nb", true)]),
    (r#"start: /a.b/"#, &[("a\nb", false), ("a\rb", true)]),
    (r#"start: /\d+/ /\w/ /\s/"#, &[("\u{661}\u{662}x ", true), ("12\u{e9}\u{a0}", true)]),
    (r#"start: /^a+$/ | /(^b|c$)/"#, &[("aa", true), ("b", true), ("c", true)]),
    (
        r#"start: a
a: "q"
b: UNDEFINED"#,
        &[("q", true)],
    ),
    (
        r#"start: "x" y
y[temperature=0.5]: "a" "b"
%ignore " ""#,
        &[("xab", true), ("x ab", true), ("xa b", false)],
    ),
    (
        r#"start: "x" y
y[max_tokens=0]: "a" "b""#,
        &[("x", true), ("xab", false)],
    ),
    (
        r#"start: x
x[capture="c"]: "a" | "b""#,
        &[("a", true), ("b", true)],
    ),
    (
        r#"start: A
A: B+ "x" | "y"
B: "a" | "bc""#,
        &[("abcax", true), ("y", true), ("x", false)],
    ),
    (
        r#"start: a
a: "x" |"#,
        &[("", true), ("x", true)],
    ),
    (
        r#"start: "x" %json {"type":"object","properties":{"a":{"type":"integer"}}}"#,
        &[
            ("x{\"a\":1}", true),
            ("x {\"a\":1}", false),
            ("x{\"a\":1} ", false),
            ("x{\"a\":1,\"b\":2}", true),
            ("x{ \"a\" : 1 }", true),
            ("x{\"b\":2,\"a\":1}", false),
            ("x{\"a\":1.5}", false),
        ],
    ),
    (
        r#"start: "x" %json {"type":"object"} "y"
%ignore " ""#,
        &[
            ("x{}y", true),
            ("x {}y", false),
            ("x{} y", true),
            ("x{ }y", true),
            ("x{\"q\": [1, {\"r\": null}]}y", true),
        ],
    ),
    (
        r#"start: %json {"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}"#,
        &[
            ("{\"a\":\"x\"}", true),
            ("{\"a\":\"x\",\"b\":1}", false),
            ("{}", false),
            (" {\"a\":\"x\"}", false),
            ("{\n  \"a\": \"x\"\n}", true),
        ],
    ),
    (
        r#"start: %json {"type": "array", "items": {"type": "integer"}, "maxItems": 2}"#,
        &[("[]", true), ("[1, 2]", true), ("[1,2,3]", false), ("[ 1 ]", true)],
    ),
    (
        r#"start: f_foo* TEXT
TEXT: /[a-z ]*/
f_foo: "<f>" %json {"type": "integer"} "</f>""#,
        &[("<f>1</f>hello", true), ("hello", true), ("<f>1</f><f>2</f>", true)],
    ),
    (
        r#"start: "a" B "c"
B: /b*/"#,
        &[("ac", true), ("abbc", true)],
    ),
    (
        r#"start: A "x" | B "y"
A: "ab"
B: /a[a-z]/"#,
        &[("aby", true), ("abx", true), ("acx", false)],
    ),
    (
        r#"%ignore " "
start: "a"*"#,
        &[("a a", true), ("a  a", true), ("", true), (" ", false), ("a ", true)],
    ),
    (
        r#"start: ("a" | "b")+ "c"
%ignore /[ \n]+/"#,
        &[("ab c", true), ("a\n b\nc", true), ("c", false)],
    ),
    (
        r#"start: x
x: "(" x ")" | """#,
        &[("", true), ("(())", true), ("(()", false)],
    ),
    (
        r#"start: "a"


"#,
        &[("a", true)],
    ),
    (
        r#"start: "a" | "a" "b"
%ignore " ""#,
        &[("a ", true), ("a b ", false), ("a b", true)],
    ),
    (
        r#"start: "a" "b"?
%ignore " ""#,
        &[("a ", true), ("a b ", false)],
    ),
    (
        r#"start: x "c"?
x: "a" "b"?
%ignore " ""#,
        &[("a ", true), ("a b ", true), ("a b c ", false)],
    ),
    (
        r#"start: "a" x
x: ""
%ignore " ""#,
        &[("a ", false)],
    ),
    (
        r#"%llguidance {"ignore_once": true}
%ignore " "
start: "a"+"#,
        &[("a ", true), ("a  ", false), ("a a ", true)],
    ),
    (
        r#"start: "a" %json {"type":"integer"}?
%ignore " ""#,
        &[("a ", false), ("a 1", false), ("a1", true), ("a1 ", false)],
    ),
    (
        r#"start: "a" B?
B: /b*/
%ignore " ""#,
        &[("a ", true), ("a b ", false), ("a b", true), ("a b b", false)],
    ),
    (
        r#"start: item+
item: KEY "=" VALUE ";"
KEY: /[a-z]+/
VALUE: /[0-9]+/
%ignore /[ \n]+/"#,
        &[("a=1;", true), ("a = 1 ;\nb=22;\n", true), ("a=1", false), ("\na=1;", false)],
    ),
];

/// Texts whose answer differs only through greedy lexing; the booleans are llguidance's.
const GREEDY: &[(&str, &[(&str, bool)])] = &[
    (
        r#"start: A A
A: /a+/"#,
        &[("aa", false), ("aaa", false), ("a", false)],
    ),
    (
        r#"start: NUMBER "." NUMBER
%import common.NUMBER"#,
        &[("1.5", false), ("1 . 5", false)],
    ),
    (r#"start: "a" "b" | "ab" "c""#, &[("ab", false), ("abc", true)]),
    (
        r#"start: INT INT
%import common.INT"#,
        &[("12", false)],
    ),
    (
        r#"start: "<think>" "\n" /(.|\n)*/ "</think>" address
address: %json {"type": "object", "properties": {"zip": {"type": "number"}}, "required": ["zip"]}"#,
        &[("<think>\nhm</think>{\"zip\": 1}", false)],
    ),
    // Trailing skip: a `b` can be followed (by `c`), just not after `a b`.
    (
        r#"start: "a" "b" | "b" "c"
%ignore " ""#,
        &[("a b ", false), ("b c ", false), ("b ", false)],
    ),
];

#[test]
fn terminals_and_rules_differ_in_what_is_skipped() {
    let lark = "start: word WORD\nword: \"a\" \"b\"\nWORD: \"c\" \"d\"\n%ignore \" \"";
    assert!(accepts(lark, "a b cd"));
    assert!(accepts(lark, "abcd"));
    assert!(!accepts(lark, "ab c d"));
    assert!(!accepts(lark, " abcd"));
    assert!(!accepts(lark, "abcd "));
}

#[test]
fn long_sequences_keep_the_skip_rules() {
    // Sequences longer than the split threshold, with optional items, at both ends.
    let items: Vec<String> = (0..20).map(|i| format!("\"{}\"?", (b'a' + i) as char)).collect();
    let lark = format!("start: {}\n%ignore \" \"", items.join(" "));
    assert!(accepts(&lark, ""));
    assert!(accepts(&lark, "a b"));
    assert!(accepts(&lark, "t"));
    assert!(accepts(&lark, "c  h s t"));
    assert!(accepts(&lark, "c "), "a letter before `t` may be followed by a skip");
    assert!(!accepts(&lark, " c"));
    assert!(!accepts(&lark, "t "));
}

#[test]
fn a_grammar_prints_and_compiles_through_every_entry_point() {
    let lark = "start: x+\nx: /[0-9]+/ \",\"\n%ignore \" \"";
    let g = lark_to_grammar(lark).unwrap();
    assert!(g.to_string().contains("Ignore ::= \" \"*"), "{g}");
    let a = compiler().compile(&GrammarSpec::Lark(lark.into())).unwrap();
    let b = compiler().compile(&GrammarSpec::Lark(lark.into())).unwrap();
    assert!(Arc::ptr_eq(&a, &b), "the compile cache keys Lark text");
    let c = compiler().compile(&GrammarSpec::Grammar(g)).unwrap();
    let mut m = GrammarMatcher::new(c);
    m.accept_string("1, 22 ,").unwrap();
    assert!(m.can_terminate());
}

// ---------------------------------------------------------------------------------------
// (b) masks against the oracle
// ---------------------------------------------------------------------------------------

/// After every `stride`-th byte of `text`, the matcher's mask equals the oracle's for the
/// same grammar IR (the oracle shares nothing with the automata, the mask cache or the
/// matcher); `text` must be accepted in full.
fn check_along(name: &str, lark: &str, text: &str) {
    let grammar = lark_to_grammar(lark).unwrap_or_else(|e| panic!("{name}: {e}"));
    let spec = GrammarSpec::Lark(lark.into());
    check_masks_along(name, &grammar, &spec, text, |t| if t == "llama2" { 2 } else { 4 });
}

#[test]
fn oracle_arithmetic_with_ignore() {
    let lark = r#"
start: expr
expr: expr ("+" | "-") term | term
term: term ("*" | "/") factor | factor
factor: "(" expr ")" | NUMBER | NAME
NAME: /[a-z_][a-z_0-9]*/
%import common.NUMBER
%import common.WS
%ignore WS
"#;
    check_along("arith", lark, "(x1 + 2.5e3)*  foo\n - 7 ");
}

#[test]
fn oracle_tool_call_with_json() {
    let lark = r#"
start: TEXT | fun_call
TEXT: /[^{](.|\n)*/
fun_call: %json {"type": "object", "properties": {"name": {"const": "get_weather"},
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    "required": ["name", "parameters"]}
"#;
    check_along("fun_call", lark, r#"{"name": "get_weather", "parameters": {"city": "Seattle"}}"#);
    check_along("text", lark, "No call needed.\n{not json}");
}

#[test]
fn oracle_keywords_case_insensitive_and_ignore_once() {
    let lark = r#"
%llguidance {"ignore_once": true}
start: "select"i cols "from"i NAME
cols: NAME ("," NAME)* | "*"
NAME: /[A-Za-z_]+/
%ignore /[ \t]{1,4}/
"#;
    check_along("sql", lark, "SeLect a ,  b from t");
}

// ---------------------------------------------------------------------------------------
// (c) typed errors
// ---------------------------------------------------------------------------------------

/// The error's kind, line and column.
fn error_of(lark: &str) -> (Kind, usize, usize) {
    let e = lark_to_grammar(lark).expect_err(lark);
    (e.kind, e.line, e.column)
}

#[test]
fn syntax_errors_point_at_the_fault() {
    let (k, l, c) = error_of("start: \"a\"\nfoo \"b\"");
    assert!(matches!(k, Kind::Expected { .. }), "{k:?}");
    assert_eq!((l, c), (2, 5));
    let (k, l, c) = error_of("start: (\"a\"\n| \"b\"");
    assert!(matches!(k, Kind::Expected { .. }));
    assert_eq!((l, c), (2, 6));
    // A newline inside parentheses ends the rule, as in llguidance.
    assert!(matches!(error_of("start: (\n\"a\")").0, Kind::Expected { .. }));
    let (k, l, c) = error_of("start: \"a\" $");
    assert!(matches!(k, Kind::BadToken(_)), "{k:?}");
    assert_eq!((l, c), (1, 12));
    assert!(matches!(error_of("start: \"abc").0, Kind::BadToken(_)));
    assert!(matches!(error_of("start: \"a\\q\"").0, Kind::BadToken(_)));
    assert!(matches!(error_of("start: \"\\ud800\"").0, Kind::BadString(_)));
}

#[test]
fn name_errors() {
    assert_eq!(error_of("start: a\na: \"x\" B"), (Kind::UndefinedName("B".into()), 2, 8));
    assert_eq!(error_of("start: ?x\n?x: \"q\""), (Kind::UndefinedName("?x".into()), 1, 8));
    assert_eq!(error_of("start: \"a\"\nstart: \"b\""), (Kind::DuplicateName("start".into()), 2, 1));
    assert_eq!(error_of("start: A\nA: \"a\"\nA: \"b\""), (Kind::DuplicateName("A".into()), 3, 1));
    assert_eq!(error_of("a: \"x\"").0, Kind::NoStartRule);
    assert_eq!(error_of("start: A\nA: \"a\" B\nB: A"), (Kind::RecursiveTerminal("A".into()), 3, 4));
    assert_eq!(error_of("start: A\nA: x\nx: \"a\""), (Kind::NotInTerminal("rule `x`".into()), 2, 4));
    // An unused definition is not compiled, as in llguidance.
    assert!(lark_to_grammar("start: \"a\"\nb: UNDEFINED /(/").is_ok());
}

#[test]
fn directive_and_import_errors() {
    assert_eq!(error_of("start: \"a\"\n%foo bar"), (Kind::UnknownDirective("%foo".into()), 2, 1));
    assert_eq!(
        error_of("%import common.NOPE\nstart: NOPE"),
        (Kind::UnknownImport("common.NOPE".into()), 1, 1)
    );
    assert_eq!(error_of("%import other.WS\nstart: WS").0, Kind::UnknownImport("other.WS".into()));
    assert_eq!(
        error_of("%import common.WS\n%import common.WS\nstart: WS"),
        (Kind::DuplicateName("WS".into()), 2, 1)
    );
    assert!(matches!(error_of("start: \"a\"\n%llguidance {\"ignore_once\": 1}").0, Kind::BadJson(_)));
    let (k, l, c) = error_of("start: %json {\n  \"type\": }");
    assert!(matches!(k, Kind::BadJson(_)), "{k:?}");
    assert_eq!((l, c), (2, 11));
    let (k, l, c) = error_of("start: \"a\" %json {\"type\": \"nope\"}");
    assert!(matches!(k, Kind::Schema(_)), "{k:?}");
    assert_eq!((l, c), (1, 12));
    assert!(matches!(error_of("start: %regex {\"substring_chunks\": [1]}").0, Kind::BadJson(_)));
    assert!(matches!(error_of("%override start: \"a\"").0, Kind::Unsupported(_)));
    assert!(matches!(error_of("%declare FOO\nstart: \"a\"").0, Kind::Unsupported(_)));
}

#[test]
fn regex_and_repetition_errors() {
    let (k, l, c) = error_of("start: \"x\" /a(b/");
    assert!(matches!(k, Kind::BadRegex { ref pattern, .. } if pattern == "a(b"), "{k:?}");
    assert_eq!((l, c), (1, 12));
    assert!(matches!(error_of("start: /a^b/").0, Kind::BadRegex { .. }));
    assert!(matches!(error_of(r"start: /\bx/").0, Kind::BadRegex { .. }));
    assert!(matches!(error_of("start: /a/l").0, Kind::BadRegex { .. }));
    assert!(matches!(error_of("start: \"a\"{0}").0, Kind::BadRepetition(_)));
    assert!(matches!(error_of("start: \"a\"{3,1}").0, Kind::BadRepetition(_)));
    assert!(matches!(error_of("start: \"a\"{-1,2}").0, Kind::BadRepetition(_)));
    assert!(matches!(error_of("start: \"a\"{100000}").0, Kind::TooLarge { .. }));
    assert!(matches!(error_of("start: \"ab\"..\"z\"").0, Kind::BadRange(_)));
    assert!(matches!(error_of("start: \"z\"..\"a\"").0, Kind::BadRange(_)));
    assert_eq!(error_of("start: \"a\" & \"a\"").0, Kind::AndInRule);
}

#[test]
fn unsupported_constructs_are_errors_not_approximations() {
    for (lark, at) in [
        ("start: \"a\" | <|eot_id|>", (1, 14)),
        ("start: <[128010]> \"a\"", (1, 8)),
        ("start: <[*]>", (1, 8)),
        ("start: x\nx[lazy]: /.*<end>/", (2, 1)),
        ("start: x\nx[stop=\"<end>\"]: /.*/", (2, 1)),
        ("start: x\nx[suffix=\"<end>\"]: /.*/", (2, 1)),
        ("start: x\nx[max_tokens=5]: /.*/", (2, 1)),
        ("start: A\nA: /[a-z \\n]*/ & ~/(?s:.*)\\n\\n(?s:.*)/", (2, 18)),
        ("start: @sub", (1, 8)),
        ("start: %lark { start: \"a\" }", (1, 8)),
        ("start: x::_", (1, 9)),
    ] {
        let (k, l, c) = error_of(lark);
        assert!(matches!(k, Kind::Unsupported(_)), "{lark}: {k:?}");
        assert_eq!((l, c), at, "{lark}");
    }
    assert!(matches!(error_of("start: A\nA: <|x|>").0, Kind::NotInTerminal(_)));
    assert!(matches!(error_of("start: A\nA: %json {}").0, Kind::NotInTerminal(_)));
}

#[test]
fn limits_are_errors() {
    let deep = format!("start: {}\"a\"{}", "(".repeat(60), ")".repeat(60));
    assert!(matches!(error_of(&deep).0, Kind::TooDeep(_)));
    // Terminals that double at every step: caught by the size bound, not by memory.
    let mut lark = String::from("start: T30\nT0: \"ab\"\n");
    for i in 1..=30 {
        lark.push_str(&format!("T{i}: T{} T{}\n", i - 1, i - 1));
    }
    assert!(matches!(error_of(&lark).0, Kind::TooLarge { .. }));
    let small = LarkLimits { max_input_bytes: 10, ..Default::default() };
    let e = lark_to_grammar_with("start: \"abcdef\"", &small).unwrap_err();
    assert!(matches!(e.kind, Kind::TooLarge { .. }) && e.line == 0);
    // A long chain of rules is queued, not recursed.
    let mut chain = String::from("start: r0\n");
    for i in 0..5000 {
        chain.push_str(&format!("r{i}: \"x\" r{}?\n", i + 1));
    }
    chain.push_str("r5000: \"y\"\n%ignore \" \"\n");
    assert!(lark_to_grammar(&chain).is_ok());
}

#[test]
fn errors_reach_the_compiler_and_print_a_caret() {
    match compiler().compile(&GrammarSpec::Lark("start: \"a\"\n  | B".into())) {
        Err(Error::Lark(e)) => {
            assert_eq!((e.line, e.column), (2, 5));
            assert_eq!(e.to_string(), "2:5: `B` is used but never defined\n    | B\n      ^");
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// (d) no panics, no hangs
// ---------------------------------------------------------------------------------------

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    const VALID: &[&str] = &[
        "start: expr\nexpr: expr \"+\" term | term\nterm: NUMBER | \"(\" expr \")\"\n%import common.NUMBER\n%ignore \" \"",
        "start: A+ b?\nA: \"a\"..\"z\" /[0-9]{1,3}/ & /.+/\nb: %json {\"type\": \"object\"}",
        "%llguidance {\"ignore_once\": true}\nstart: \"x\"i{2,} [\"y\" | \"z\"]*\n%ignore /[ \\t]+/ | \"#\"",
        "start: %regex {\"substring_words\": \"a b. c\"}\n// c\n# d",
    ];

    fn mutate(text: &str, ops: &[(u8, usize, char)]) -> String {
        let mut chars: Vec<char> = text.chars().collect();
        for &(op, at, c) in ops {
            let at = at % (chars.len() + 1);
            match op % 3 {
                0 => chars.insert(at, c),
                1 if at < chars.len() => {
                    chars.remove(at);
                }
                _ if at < chars.len() => chars[at] = c,
                _ => {}
            }
        }
        chars.into_iter().collect()
    }

    fn piece() -> impl Strategy<Value = char> {
        prop::sample::select(vec![
            '"', '/', '(', ')', '[', ']', '{', '}', '|', '&', '~', '*', '+', '?', ':', ',', '.', '%', '<',
            '>', '\\', '\n', ' ', 'a', 'A', '0', '9', 'i', '-', '#', '_', '@', '^', '$', 'é',
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]
        #[test]
        fn mutated_grammars_never_panic(
            which in 0..VALID.len(),
            ops in prop::collection::vec((any::<u8>(), any::<usize>(), piece()), 0..6),
        ) {
            let text = mutate(VALID[which], &ops);
            if lark_to_grammar(&text).is_ok() {
                let _ = compiler().compile(&GrammarSpec::Lark(text));
            }
        }

        #[test]
        fn garbage_never_panics(text in prop::collection::vec(piece(), 0..60)) {
            let text: String = text.into_iter().collect();
            let _ = lark_to_grammar(&text);
            let _ = lark_to_grammar(&format!("start: {text}"));
        }
    }
}

// ---------------------------------------------------------------------------------------
// CLI
// ---------------------------------------------------------------------------------------

#[test]
fn cli_takes_a_lark_file() {
    let dir = std::env::temp_dir().join(format!("grammask-lark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("g.lark");
    std::fs::write(
        &file,
        "start: \"call \" NAME \"(\" NUMBER? \")\"\nNAME: /[a-z]+/\n%import common.NUMBER\n",
    )
    .unwrap();
    let tok = common::data_dir().join("tokenizers/llama3_1");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_grammask"))
            .args(args)
            .arg("--lark")
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let masks = run(&["masks", "--tokenizer", tok.to_str().unwrap(), "--text", "call f(12)"]);
    assert_eq!(masks.lines().last().unwrap(), r#"{"accepted":true,"can_terminate":true}"#);
    let inspect = run(&["inspect"]);
    assert!(inspect.contains("NAME ::="), "{inspect}");
    std::fs::remove_dir_all(&dir).ok();
}
