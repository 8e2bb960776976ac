//! The ECMA-262 regex front-end: unit cases, a property test against the `regex` crate
//! (as an oracle, on generated patterns over ASCII strings), and JSON-string encoding.

use crate::common;

use grammask::regex::{regex_to_grammar, regex_to_json_string_expr, RegexErrorKind, RegexLimits};
use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec};
use proptest::prelude::*;
use std::sync::Arc;

fn compiler() -> &'static GrammarCompiler {
    static C: std::sync::OnceLock<GrammarCompiler> = std::sync::OnceLock::new();
    C.get_or_init(|| GrammarCompiler::new(common::tokenizer("llama3_1")))
}

fn compile(pattern: &str) -> Arc<grammask::CompiledGrammar> {
    let g = regex_to_grammar(pattern, &RegexLimits::default()).unwrap_or_else(|e| panic!("{e}"));
    compiler().compile(&GrammarSpec::Grammar(g)).unwrap()
}

fn full_match(c: &Arc<grammask::CompiledGrammar>, s: &str) -> bool {
    let mut m = GrammarMatcher::new(c.clone());
    m.accept_bytes(s.as_bytes()).is_ok() && m.can_terminate()
}

#[test]
fn ecma_specifics() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        (r"\d+", &["0", "123"], &["", "a", "١"]),
        (r"\w\W", &["a!", "_ "], &["ab", "é!"]),
        (r"a.c", &["abc", "a c"], &["a\nc", "a\rc", "ac"]),
        (r"[^]", &["x", "\n"], &["", "xy"]),
        (r"[]a|b", &["b"], &["a"]),
        (r"\u0041\x42\u{43}", &["ABC"], &["abc"]),
        (r"\uD83D\uDE00", &["😀"], &[]),
        (r"a{2}b{1,}c{0,1}d{,}", &["aabd{,}", "aabbbcd{,}"], &["abd{,}"]),
        (r"(?:ab)+?|(?<n>c)", &["abab", "c"], &["a", "abc"]),
        (r"[\d-z]", &["5", "-", "z"], &["y"]),
        (r"^\s$", &[" ", "\t", "\u{a0}", "\u{feff}"], &["a"]),
        (r"\p{Lu}+", &["ABÉ"], &["a"]),
        (r"[a-c\]]", &["]", "b"], &["d"]),
        (r"\cJ\0", &["\n\0"], &[]),
    ];
    for (p, yes, no) in cases {
        let c = compile(p);
        for s in *yes {
            assert!(full_match(&c, s), "{p} should match {s:?}");
        }
        for s in *no {
            assert!(!full_match(&c, s), "{p} should not match {s:?}");
        }
    }
}

#[test]
fn unsupported_constructs_are_typed_errors_with_offsets() {
    let cases = [
        (r"ab\b", RegexErrorKind::WordBoundary, 2),
        (r"x\B", RegexErrorKind::WordBoundary, 1),
        (r"a(?=b)", RegexErrorKind::Lookaround, 1),
        (r"a(?!b)", RegexErrorKind::Lookaround, 1),
        (r"(?<=a)b", RegexErrorKind::Lookaround, 0),
        (r"(?<!a)b", RegexErrorKind::Lookaround, 0),
        (r"(a)\1", RegexErrorKind::Backreference, 3),
        (r"(?<n>a)\k<n>", RegexErrorKind::Backreference, 7),
    ];
    for (p, kind, offset) in cases {
        let e = regex_to_grammar(p, &RegexLimits::default()).unwrap_err();
        assert_eq!((e.kind.clone(), e.offset), (kind, offset), "{p}: {e}");
    }
    for p in ["(", ")", "[a", "a**", "*", "a{3,1}", r"\x4", r"\u{110000}", "a^b", r"\"] {
        assert!(regex_to_grammar(p, &RegexLimits::default()).is_err(), "{p}");
    }
}

#[test]
fn json_string_mode_is_unanchored_and_escaped() {
    let limits = RegexLimits::default();
    let wrap = |p: &str, min: u32, max: Option<u32>| {
        let e = regex_to_json_string_expr(p, min, max, &limits).unwrap();
        let g = grammask::Grammar {
            rules: vec![grammask::grammar::Rule::new(
                "root",
                grammask::grammar::Expr::Seq(vec![
                    grammask::grammar::Expr::Literal("\"".into()),
                    e,
                    grammask::grammar::Expr::Literal("\"".into()),
                ]),
            )],
            root: grammask::grammar::RuleId(0),
            markers: Vec::new(),
        };
        compiler().compile(&GrammarSpec::Grammar(g)).unwrap()
    };
    let c = wrap("b", 0, None);
    assert!(full_match(&c, r#""abc""#) && full_match(&c, r#""b""#) && !full_match(&c, r#""ac""#));
    let c = wrap("^a", 0, None);
    assert!(full_match(&c, r#""abc""#) && !full_match(&c, r#""ba""#));
    let c = wrap(r#"^["\\\n]+$"#, 0, None);
    assert!(full_match(&c, r#""\"\\\n""#));
    assert!(!full_match(&c, "\"\"\""), "raw quote must be escaped");
    let c = wrap("^[a-z]+$", 2, Some(3));
    assert!(
        full_match(&c, r#""ab""#)
            && full_match(&c, r#""abc""#)
            && !full_match(&c, r#""a""#)
            && !full_match(&c, r#""abcd""#)
    );
    let c = wrap("x", 2, Some(3));
    assert!(
        full_match(&c, r#""ax""#)
            && full_match(&c, r#""xab""#)
            && !full_match(&c, r#""x""#)
            && !full_match(&c, r#""abcx""#)
    );
    let c = wrap(".", 0, None);
    assert!(full_match(&c, r#""\u0001""#) && full_match(&c, r#""\u001F""#));
}

#[test]
fn pathological_patterns_are_bounded() {
    let limits = RegexLimits::default();
    for p in ["(a{1000}){1000}", "((((a{100}){100}){100}){100})"] {
        assert!(
            matches!(regex_to_grammar(p, &limits).unwrap_err().kind, RegexErrorKind::TooLarge { .. }),
            "{p}"
        );
    }
    let deep = "(".repeat(5000) + "a" + &")".repeat(5000);
    assert!(matches!(regex_to_grammar(&deep, &limits).unwrap_err().kind, RegexErrorKind::TooDeep { .. }));
    // Exponential DFA blow-up hits the automata limit instead of hanging.
    let g = regex_to_grammar("(a|b)*a(a|b){40}", &limits).unwrap();
    let t = std::time::Instant::now();
    let _ = compiler().compile(&GrammarSpec::Grammar(g));
    assert!(t.elapsed().as_secs() < 60);
}

/// Random patterns over a tiny alphabet, rendered both for ECMA (our parser) and for the
/// `regex` crate; both dialects agree on this subset.
fn pattern() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        Just("c".to_string()),
        Just("[ab]".to_string()),
        Just("[^a]".to_string()),
        Just("\\d".to_string()),
        Just(".".to_string()),
        Just("[a-c0-1]".to_string()),
    ];
    leaf.prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("{x}{y}")),
            (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("(?:{x}|{y})")),
            inner.clone().prop_map(|x| format!("(?:{x})*")),
            inner.clone().prop_map(|x| format!("(?:{x})+?")),
            inner.clone().prop_map(|x| format!("({x})?")),
            (inner, 0u32..3, 0u32..3).prop_map(|(x, a, b)| format!("(?:{x}){{{},{}}}", a.min(b), a.max(b))),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn agrees_with_regex_crate(p in pattern(), inputs in proptest::collection::vec("[abc01\n]{0,6}", 24)) {
        let oracle = regex::Regex::new(&format!("^(?:{p})$")).unwrap();
        let c = compile(&p);
        for s in &inputs {
            // ECMA `.` excludes `\n`, as the regex crate's does by default.
            prop_assert_eq!(full_match(&c, s), oracle.is_match(s), "pattern {} input {:?}", p, s);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// A `pattern` with `minLength`/`maxLength` in a JSON Schema: the pattern carries the
    /// lengths itself, or is intersected with them; either way a string is accepted
    /// exactly when the pattern matches it somewhere and its length is in bounds.
    #[test]
    fn patterns_under_lengths_agree_with_regex_crate(
        p in pattern(),
        min in 0usize..4,
        span in 0usize..4,
        inputs in proptest::collection::vec("[abc01\n]{0,7}", 24),
    ) {
        let schema = serde_json::json!({"type": "string", "pattern": p, "minLength": min, "maxLength": min + span});
        let opts = grammask::json_schema::JsonSchemaOptions::default();
        let oracle = regex::Regex::new(&p).unwrap();
        let want = |s: &str| oracle.is_match(s) && (min..=min + span).contains(&s.chars().count());
        // A pattern no string of these lengths matches is a typed error.
        let c = match grammask::json_schema::json_schema_to_grammar(&schema, &opts) {
            Ok(g) => compiler().compile(&GrammarSpec::Grammar(g)).unwrap(),
            Err(e) => {
                prop_assert!(matches!(e.kind, grammask::json_schema::SchemaErrorKind::Unsatisfiable(_)), "{}", e);
                for s in &inputs {
                    prop_assert!(!want(s), "pattern {} lengths {}..={}: {:?} matches", p, min, min + span, s);
                }
                return Ok(());
            }
        };
        for s in &inputs {
            let text = serde_json::to_string(s).unwrap();
            prop_assert_eq!(full_match(&c, &text), want(s), "pattern {} lengths {}..={} input {:?}", p, min, min + span, s);
        }
    }
}
