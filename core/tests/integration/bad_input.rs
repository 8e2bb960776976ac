//! Bad input gets a typed error with a precise position — never a panic or a hang.

use crate::common;

use grammask::grammar::{parse_ebnf, parse_ebnf_bytes, ParseLimits};
use grammask::{Error, GrammarCompiler, GrammarErrorKind, GrammarMatcher, TokenizerInfo, TokenizerOptions};
use proptest::prelude::*;
use std::sync::Arc;

fn parse(text: &str) -> Result<grammask::Grammar, grammask::GrammarError> {
    parse_ebnf(text, "root", &ParseLimits::default())
}

fn toy_compiler() -> GrammarCompiler {
    let vocab: Vec<Vec<u8>> = ["a", "b", "ab", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
    let opts = TokenizerOptions { stop_tokens: Some(vec![3]), ..Default::default() };
    GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap()))
}

#[test]
fn syntax_error_points_at_line_and_column() {
    let e = parse("root ::= \"a\" x\nx ::= \"b\" | (\"c\"\n").unwrap_err();
    assert_eq!(e.to_string(), "3:1: expected `)`, found end of input");
    let e = parse("root ::= \"a\"\nfoo ::= [z-a]").unwrap_err();
    assert_eq!(e.to_string(), "2:10: invalid character range z-a\n  foo ::= [z-a]\n           ^");
    let e = parse("root ::= \"\\q\"").unwrap_err();
    assert_eq!((e.line, e.column), (1, 11));
    assert!(matches!(e.kind, GrammarErrorKind::BadEscape(_)));
    let e = parse("root = \"a\"").unwrap_err();
    assert_eq!((e.line, e.column), (1, 6));
    let e = parse("root ::= \"a\"{3,1}").unwrap_err();
    assert!(matches!(e.kind, GrammarErrorKind::BadRepetition(_)));
    let e = parse("root ::= \"unterminated").unwrap_err();
    assert!(e.to_string().contains("closing"));
}

#[test]
fn empty_undefined_duplicate_and_missing_root() {
    assert!(matches!(parse("").unwrap_err().kind, GrammarErrorKind::NoRootRule(_)));
    assert!(matches!(parse("  # only a comment\n").unwrap_err().kind, GrammarErrorKind::NoRootRule(_)));
    let e = parse("root ::= a b\na ::= \"x\"").unwrap_err();
    assert_eq!(e.kind, GrammarErrorKind::UndefinedRule("b".into()));
    assert_eq!((e.line, e.column), (1, 12));
    let e = parse("root ::= \"a\"\nroot ::= \"b\"").unwrap_err();
    assert_eq!(e.kind, GrammarErrorKind::DuplicateRule("root".into()));
    assert_eq!(e.line, 2);
    assert!(matches!(parse("main ::= \"a\"").unwrap_err().kind, GrammarErrorKind::NoRootRule(_)));
    // A root that can never finish is an error, not a matcher that allows nothing.
    let c = toy_compiler();
    assert!(matches!(c.compile_ebnf("root ::= \"a\" root"), Err(Error::Grammar(_))));
}

/// A hand-built member set that does not fit its rule is a typed error naming the rule,
/// never a panic or a matcher that can reach a dead end.
#[test]
fn malformed_member_sets() {
    use grammask::grammar::{Expr, MemberSet, Rule, RuleId};
    use grammask::{Grammar, GrammarSpec};
    let lit = |s: &str| Expr::Literal(s.into());
    let rules = |set: MemberSet, body: Option<Expr>| {
        let mut obj = Rule::new("obj", Expr::Empty);
        obj.body = body.unwrap_or_else(|| set.body(lit("{")));
        obj.members = Some(Box::new(set));
        Grammar {
            rules: vec![
                obj,
                Rule::new("a", lit("\"a\": 1")),
                Rule::new("b", lit("\"b\": 2")),
                Rule::new("sep", lit(", ")),
                Rule::new("close", lit("}")),
            ],
            root: RuleId(0),
            markers: Vec::new(),
        }
    };
    let good = MemberSet {
        members: vec![(RuleId(1), true), (RuleId(2), false)],
        extra: None,
        sep: RuleId(3),
        close: RuleId(4),
        min: 0,
        max: None,
    };
    let c = toy_compiler();
    assert!(c.compile(&GrammarSpec::Grammar(rules(good.clone(), None))).is_ok());
    let bad = |set: MemberSet, body: Option<Expr>| match c
        .compile(&GrammarSpec::Grammar(rules(set, body)))
        .map(|_| ())
        .unwrap_err()
    {
        Error::Grammar(e) => match e.kind {
            GrammarErrorKind::BadMemberSet { rule, why } => {
                assert_eq!(rule, "obj");
                why
            }
            k => panic!("{k:?}"),
        },
        e => panic!("{e}"),
    };
    // A body that is not the set's.
    assert!(bad(good.clone(), Some(lit("{}"))).contains("body"));
    // A rule that plays two parts.
    assert!(bad(MemberSet { sep: RuleId(1), ..good.clone() }, None).contains("two parts"));
    // A rule the grammar does not have (in the set only, and in the body too).
    let mut g = rules(good.clone(), None);
    g.rules[0].members.as_mut().unwrap().extra = Some(RuleId(9));
    let err = c.compile(&GrammarSpec::Grammar(g)).map(|_| ()).unwrap_err();
    assert!(
        matches!(err, Error::Grammar(ref e) if e.kind == GrammarErrorKind::UndefinedRule("#9".into())),
        "{err}"
    );
    let err = c.compile(&GrammarSpec::Grammar(rules(MemberSet { close: RuleId(9), ..good.clone() }, None)));
    assert!(
        matches!(err.map(|_| ()).unwrap_err(), Error::Grammar(e) if e.kind == GrammarErrorKind::UndefinedRule("#9".into()))
    );
    // An opening that calls a rule: the parser could not gate it.
    let set = good.clone();
    let body = set.body(Expr::Seq(vec![lit("{"), Expr::Rule(RuleId(2))]));
    assert!(bad(set, Some(body)).contains("body"));
    // Two members that the optimizer finds equal (then one rule, told apart by nothing).
    let mut g = rules(good.clone(), None);
    g.rules[2].body = g.rules[1].body.clone();
    let err = c.compile(&GrammarSpec::Grammar(g)).map(|_| ()).unwrap_err();
    assert!(
        matches!(err, Error::Grammar(ref e) if matches!(e.kind, GrammarErrorKind::BadMemberSet { .. })),
        "{err}"
    );
    // An opening that can never be written: nothing can be.
    let mut g = rules(good.clone(), None);
    g.rules[0].body = good.body(Expr::Class(vec![]));
    let err = c.compile(&GrammarSpec::Grammar(g)).map(|_| ()).unwrap_err();
    assert!(matches!(err, Error::Grammar(ref e) if e.kind == GrammarErrorKind::EmptyLanguage), "{err}");
    // A required member that can never be written: no output at all.
    let never = MemberSet { max: Some(0), ..good };
    let err = c.compile(&GrammarSpec::Grammar(rules(never, None))).map(|_| ()).unwrap_err();
    assert!(matches!(err, Error::Grammar(ref e) if e.kind == GrammarErrorKind::EmptyLanguage), "{err}");
}

#[test]
fn intersections_that_call_rules() {
    // A recursive rule stays a rule, so the intersection cannot be built over bytes.
    let c = toy_compiler();
    let err = c.compile_ebnf("root ::= a & \"xx\"\na ::= \"x\" a | \"x\"").map(|_| ()).unwrap_err();
    assert!(
        matches!(err, Error::Grammar(ref e) if e.kind == GrammarErrorKind::IntersectionCallsRule("root".into())),
        "{err}"
    );
    // A small rule is inlined first: then it is an intersection of regular operands.
    let g = c.compile_ebnf("root ::= a & [a-z]{2}\na ::= \"x\"+").unwrap();
    let mut m = grammask::GrammarMatcher::new(g);
    assert!(m.accept_string("xx").is_ok() && m.can_terminate());
    assert!(m.accept_string("x").is_err());
    // An empty intersection is the empty set: what leads into it is pruned, and a root
    // that matches nothing is an error.
    let g = c.compile_ebnf("root ::= \"abc\" (\"x\" & \"y\") | \"b\"").unwrap();
    let mut m = grammask::GrammarMatcher::new(g);
    assert!(m.accept_string("a").is_err());
    assert!(m.accept_string("b").is_ok() && m.can_terminate());
    let err = c.compile_ebnf("root ::= \"a\" ([a-z]+ & [0-9]+)").map(|_| ()).unwrap_err();
    assert!(matches!(err, Error::Grammar(ref e) if e.kind == GrammarErrorKind::EmptyLanguage), "{err}");
}

#[test]
fn non_utf8_grammar() {
    let e = parse_ebnf_bytes(b"root ::= \"a\xff\"", "root", &ParseLimits::default()).unwrap_err();
    assert_eq!(e.kind, GrammarErrorKind::NotUtf8 { offset: 11 });
    assert_eq!((e.line, e.column), (1, 12));
}

#[test]
fn oversized_grammars_hit_limits_quickly() {
    let c = toy_compiler();
    let t = std::time::Instant::now();
    // Nested repeats are outlined into rules, so this is a small grammar of a huge language.
    c.compile_ebnf("root ::= (((\"a\" | \"b\"){1000}){1000}){1000}").unwrap();
    // Unrolled copies of a small body, thirty times over: past the NFA size limit.
    let huge = format!("root ::= {}", "(\"ab\" | \"cd\" | \"ef\"){10000} ".repeat(30));
    let e = c.compile_ebnf(&huge).unwrap_err();
    assert!(matches!(e, Error::Limit { .. }), "{e}");
    let e = parse("root ::= \"a\"{100001}").unwrap_err();
    assert!(matches!(e.kind, GrammarErrorKind::BadRepetition(_)));
    let deep = format!("root ::= {}\"a\"{}", "(".repeat(5000), ")".repeat(5000));
    assert!(matches!(parse(&deep).unwrap_err().kind, GrammarErrorKind::TooDeep(_)));
    assert!(t.elapsed().as_secs() < 10, "limits took {:?}", t.elapsed());
}

#[test]
fn matcher_misuse() {
    let c = toy_compiler();
    let mut m = GrammarMatcher::new(c.compile_ebnf("root ::= \"ab\"").unwrap());
    assert!(matches!(m.accept_token(99), Err(Error::InvalidTokenId { id: 99, vocab_size: 4 })));
    assert!(matches!(m.accept_token(1), Err(Error::TokenRejected { id: 1 })));
    assert!(matches!(m.accept_token(3), Err(Error::TokenRejected { id: 3 }))); // stop before the end
    m.accept_token(2).unwrap();
    m.accept_token(3).unwrap();
    assert!(m.is_terminated());
    assert!(matches!(m.accept_token(0), Err(Error::Terminated)));
    assert!(matches!(m.accept_bytes(b"a"), Err(Error::Terminated)));
    assert!(matches!(m.rollback(3), Err(Error::Rollback { requested: 3, available: 2 })));
    m.rollback(1).unwrap();
    assert!(!m.is_terminated() && m.can_terminate());
    let mut short = vec![0u32; 0];
    assert!(matches!(m.fill_next_token_bitmask(&mut short), Err(Error::Shape(_))));
    assert!(matches!(m.accept_bytes(b"zz"), Err(Error::Terminated) | Err(Error::BytesRejected { .. })));
}

#[test]
fn garbage_tokenizer_files() {
    let e =
        TokenizerInfo::from_json_bytes(b"\x00\xffnot json", None, &TokenizerOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Tokenizer(_)));
    let e =
        TokenizerInfo::from_json_bytes(b"{\"model\": 3}", None, &TokenizerOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Tokenizer(_)));
    let e =
        TokenizerInfo::from_path("/nonexistent/tokenizer.json", &TokenizerOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Io { .. }));
    let opts = TokenizerOptions { stop_tokens: Some(vec![10]), ..Default::default() };
    assert!(matches!(
        TokenizerInfo::from_byte_tokens(vec![b"a".to_vec()], &opts),
        Err(Error::InvalidTokenId { .. })
    ));
    let opts = TokenizerOptions { vocab_size: Some(0), ..Default::default() };
    assert!(TokenizerInfo::from_byte_tokens(vec![b"a".to_vec()], &opts).is_err());
}

proptest! {
    /// Arbitrary text never panics the parser; when it parses, the printed IR parses back
    /// to the same printed IR.
    #[test]
    fn parser_never_panics(text in "(root ::= |[a-z]+ ::= |[\"'\\[\\]()|&*+?{},.#\\\\ a-z0-9^\\-\n]|\\\\x[0-9a-f]{2}){0,40}") {
        if let Ok(g) = parse(&text) {
            let printed = g.to_string();
            let again = parse(&printed).unwrap_or_else(|e| panic!("printed grammar does not parse: {e}\n{printed}"));
            prop_assert_eq!(again.to_string(), printed);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_ebnf_bytes(&bytes, "root", &ParseLimits::default());
    }
}

#[test]
fn ebnf_round_trips_public_grammars() {
    for name in ["json", "json_arr", "c", "chess", "list", "arithmetic", "english", "japanese"] {
        let text = common::grammar_text(&format!("llama.cpp/{name}.gbnf"));
        let g = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let printed = g.to_string();
        let again = parse(&printed).unwrap_or_else(|e| panic!("{name} printed: {e}\n{printed}"));
        assert_eq!(again.to_string(), printed, "{name}");
    }
}
