//! Fast masks equal the brute-force oracle's, bit for bit, at random reachable states of
//! several grammars, on all three real tokenizers.
//!
//! Set `GRAMMASK_ORACLE_CHECKS=N` to check N states per grammar and tokenizer (default 3).

use crate::common;

use common::oracle::{oracle_mask, Bnf, Recognizer, Vocab};
use common::{allowed, grammar_text, tokenizer, Rng};
use grammask::json_schema::{json_schema_str_to_grammar, JsonSchemaOptions};
use grammask::{Grammar, GrammarCompiler, GrammarMatcher, GrammarSpec, TokenBitmask};

const TOKENIZERS: [&str; 3] = ["llama3_1", "llama2", "qwen3"];

fn checks() -> usize {
    std::env::var("GRAMMASK_ORACLE_CHECKS").ok().and_then(|s| s.parse().ok()).unwrap_or(3)
}

/// A fresh matcher for `ebnf` on tokenizer `tname`, a mask row, and the vocabulary as the
/// oracle sees it (`None`: a special token, never produced).
struct Setup {
    tok: std::sync::Arc<grammask::TokenizerInfo>,
    tokens: Vocab,
    m: GrammarMatcher,
    mask: TokenBitmask,
}

fn setup(tok: std::sync::Arc<grammask::TokenizerInfo>, g: Grammar) -> Setup {
    let compiled = GrammarCompiler::new(tok.clone()).compile(&GrammarSpec::Grammar(g)).unwrap();
    let tokens = Vocab::new(
        (0..tok.tokenizer_size() as u32)
            .map(|id| (!tok.is_special(id)).then(|| tok.token_bytes(id).to_vec()))
            .collect(),
    );
    let mask = TokenBitmask::new(1, tok.vocab_size());
    Setup { tok, tokens, m: GrammarMatcher::new(compiled), mask }
}

/// Walks randomly through `ebnf` and compares fast and oracle masks at a few steps.
fn check_grammar(name: &str, ebnf: &str, seed: u64) {
    let grammar = Grammar::from_ebnf(ebnf).unwrap_or_else(|e| panic!("{name}: {e}"));
    let check_at: Vec<usize> = (0..checks()).map(|i| i * i * 4).collect();
    check_walks(name, &grammar, &grammar, seed, &check_at);
}

/// Walks randomly through `fast` (the grammar the matcher runs) and compares its masks
/// with the brute-force oracle's for `slow` (the same language, written out) at the
/// steps in `check_at`.
fn check_walks(name: &str, fast: &Grammar, slow: &Grammar, seed: u64, check_at: &[usize]) {
    let bnf = Bnf::new(slow);
    for (ti, tname) in TOKENIZERS.iter().enumerate() {
        let Setup { tok, tokens, mut m, mut mask } = setup(tokenizer(tname), fast.clone());
        let mut oracle = Recognizer::new(&bnf);
        let mut rng = Rng(seed ^ ((ti as u64 + 1) * 0x9E3779B97F4A7C15));
        let mut text = Vec::new();
        for step in 0..=*check_at.last().unwrap_or(&0) {
            m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
            if check_at.contains(&step) {
                let want = oracle_mask(&mut oracle, &tokens, tok.stop_tokens(), tok.vocab_size());
                if want != mask.row(0) {
                    let got = allowed(mask.row(0));
                    let exp = allowed(&want);
                    let extra: Vec<_> = got
                        .iter()
                        .filter(|i| !exp.contains(i))
                        .take(10)
                        .map(|&i| (i, String::from_utf8_lossy(tok.token_bytes(i)).to_string()))
                        .collect();
                    let missing: Vec<_> = exp
                        .iter()
                        .filter(|i| !got.contains(i))
                        .take(10)
                        .map(|&i| (i, String::from_utf8_lossy(tok.token_bytes(i)).to_string()))
                        .collect();
                    panic!(
                        "{name} on {tname} after {:?}: {} allowed, oracle {}; extra {extra:?}; missing {missing:?}",
                        String::from_utf8_lossy(&text), got.len(), exp.len()
                    );
                }
            }
            // Continue with a random allowed non-stop token.
            let ids: Vec<u32> =
                allowed(mask.row(0)).into_iter().filter(|&i| !tok.stop_tokens().contains(&i)).collect();
            if ids.is_empty() {
                break;
            }
            let id = ids[rng.below(ids.len())];
            m.accept_token(id).unwrap();
            for &b in tok.token_bytes(id) {
                assert!(oracle.push(b), "{name}: oracle rejects token {id} that the matcher accepted");
            }
            text.extend_from_slice(tok.token_bytes(id));
        }
    }
}

/// Compares fast and oracle masks after every byte of `text` (which `ebnf` must accept),
/// on every tokenizer: each state the text passes through is checked, not a random few.
fn check_along(name: &str, ebnf: &str, text: &str, stride: usize) {
    for tname in TOKENIZERS {
        // Every byte on Llama-2 (whose vocabulary has letters around non-ASCII characters,
        // "ación"), every third on the others: the oracle is slow.
        let stride = if tname == "llama2" { stride } else { 3 * stride };
        check_along_on(&format!("{name} on {tname}"), tokenizer(tname), ebnf, text, stride);
    }
}

/// [`check_along`] on one tokenizer.
fn check_along_on(
    name: &str,
    tok: std::sync::Arc<grammask::TokenizerInfo>,
    ebnf: &str,
    text: &str,
    stride: usize,
) {
    let grammar = Grammar::from_ebnf(ebnf).unwrap_or_else(|e| panic!("{name}: {e}"));
    check_grammars_along(name, tok, &grammar, &grammar, text, |i| i % stride == 0);
}

/// [`check_along_on`] with the matcher running `fast` and the oracle `slow` (the same
/// language, written out), checked before the bytes `i` of `text` for which `check(i)`.
fn check_grammars_along(
    name: &str,
    tok: std::sync::Arc<grammask::TokenizerInfo>,
    fast: &Grammar,
    slow: &Grammar,
    text: &str,
    check: impl Fn(usize) -> bool,
) {
    let bnf = Bnf::new(slow);
    let Setup { tok, tokens, mut m, mut mask } = setup(tok, fast.clone());
    let mut oracle = Recognizer::new(&bnf);
    for (i, &b) in text.as_bytes().iter().enumerate() {
        m.fill_next_token_bitmask(mask.row_mut(0)).unwrap();
        if check(i) {
            let want = oracle_mask(&mut oracle, &tokens, tok.stop_tokens(), tok.vocab_size());
            assert!(
                want == mask.row(0),
                "{name} after {:?}: {:?} allowed, oracle {:?}",
                &text[..i],
                allowed(mask.row(0)),
                allowed(&want)
            );
        }
        m.accept_bytes(&[b]).unwrap_or_else(|e| panic!("{name}: {e} at {i} after {:?}", &text[..i]));
        assert!(oracle.push(b), "{name}: oracle rejects {:?}", &text[..=i]);
    }
}

/// Identifiers inside expressions, reached through several rules at once: the mask
/// walk runs in Earley mode there and takes whole identifier subtrees of the vocabulary
/// at once when the Earley set reproduces itself (the loop-byte skip).
#[test]
fn identifiers_in_expressions() {
    check_along(
        "expressions",
        r#"root ::= stmt+
stmt ::= id ws "=" ws expr ";" ws | call ";" ws
expr ::= term (ws ("+" | "-") ws term)*
term ::= id | call | [0-9]+ | "(" expr ")"
call ::= id "(" (expr ("," ws expr)*)? ")"
id ::= [a-zA-Z_] [a-zA-Z_0-9]*
ws ::= [ \t\n]*"#,
        "ab = cd + g(e, 12) - x9;\nf(b_2);\n",
        1,
    );
    // A state predicting two recursive (never inlined) rules keeps two items alive through
    // a non-looping byte ("ó"): a skip table must not outlive the loop ("ación" is a
    // Llama-2 token, which must be rejected after "=").
    check_along(
        "loop exits",
        r#"root ::= "=" [ ]* (a | b) ";"
a ::= [a-zA-Z]+ "\u00f3" [0-9]+ | "(" a ")"
b ::= [a-zA-Z]+ "\u00f3" [0-9]+ "!" | "(" b ")""#,
        "= ac\u{f3}12;",
        1,
    );
}

/// Chains of JSON string characters (a wide set, multi-byte UTF-8 characters one position
/// each): the walk takes whole the subtrees whose tokens fit in the positions left, and
/// sorts the tokens of deeper ones by their characters — checked at every byte through
/// the last positions, where a token of a few multi-byte characters still fits and one of
/// as many ASCII bytes does not; then a chain that ends its rule, whose positions from
/// `min` on may end it (tokens running past the end are then left to the walk).
#[test]
fn character_chains_count_characters() {
    let json = r#"root ::= "\"" ([ -!#-\[\]-\U0010ffff] | "\\" ["\\/bfnrt]){0,12} "\"" [,}]"#;
    check_along("json chain", json, "\"añé中文 x\\\"é€z\"}", 1);
    // A chain that makes its rule, whose last position ends it, followed by the same
    // characters (a long JSON string's blocks of 256): tokens running past the end go on
    // after it (uncertain, not rejected). Checked over the last positions and past them.
    let blocks = "root ::= \"<\" s (s | \"\") \">\"\ns ::= [ -;=?-\\U0010ffff]{60}";
    let text = format!("<{}>", "añé中 bcd文€ xyz".repeat(9).chars().take(120).collect::<String>());
    let end = text.char_indices().nth(61).map_or(0, |(i, _)| i);
    for tname in ["llama3_1", "llama2"] {
        let g = Grammar::from_ebnf(blocks).unwrap();
        let near_end = |i: usize| i + 30 > end && i < end + 6;
        check_grammars_along(&format!("blocks on {tname}"), tokenizer(tname), &g, &g, &text, near_end);
    }
}

/// A JSON string longer than a chain (`maxLength` > 1,024) is written as blocks of 256
/// characters after its `minLength` ones, and a token running past the end of a block
/// or of the `minLength` characters goes on in what every context reads next
/// (`automata::cont`): accepted outright, not checked at run time. Checked at every third
/// byte before the end of the `minLength` characters and of two blocks (the second into
/// the longer last run), with multi-byte characters and escapes, inside an array (so that
/// tokens closing the string, `", `, stay uncertain); then where what follows is shorter
/// than a token (30 characters after 1,000), up to the string's `maxLength`.
#[test]
fn long_strings_run_past_their_blocks() {
    // Byte offsets of the characters of the string opening at byte `open`.
    let chars_at = |text: &str, open: usize| {
        let (bytes, mut at, mut i) = (text.as_bytes(), Vec::new(), open + 1);
        while bytes[i] != b'"' {
            at.push(i);
            i += if bytes[i] == b'\\' { 2 } else { text[i..].chars().next().map_or(1, char::len_utf8) };
        }
        at.push(i);
        at
    };
    let before = |i: usize, at: usize| i % 3 == 0 && i + 21 > at && i < at + 4;
    let schema = r#"{"type":"array","items":{"type":"string","minLength":5,"maxLength":1100}}"#;
    let g = json_schema_str_to_grammar(schema, &JsonSchemaOptions::default()).unwrap();
    let body: String = "añé中 b\\ncd文€ xyz\\\"q".repeat(60).chars().take(902).collect();
    let text = format!(r#"["{body}", "abcdef"]"#);
    let at = chars_at(&text, 1);
    for tname in TOKENIZERS {
        let check = |i: usize| [5, 261, 773].iter().any(|&c| before(i, at[c]));
        check_grammars_along(&format!("long string on {tname}"), tokenizer(tname), &g, &g, &text, check);
    }
    let schema = r#"{"type":"array","items":{"type":"string","minLength":1000,"maxLength":1030}}"#;
    let g = json_schema_str_to_grammar(schema, &JsonSchemaOptions::default()).unwrap();
    let text = format!(r#"["{}"]"#, "ab-- ".repeat(206));
    let at = chars_at(&text, 1);
    let check = |i: usize| before(i, at[1000]) || before(i, at[1030]);
    check_grammars_along("string at its maxLength", tokenizer("llama3_1"), &g, &g, &text, check);
}

/// A member's value after flexible whitespace (`":" [ \t\n\r]* value`, as structural tags
/// write JSON) is a tail call of the value's rule (`automata::tail`): the mask walk reads
/// the state and the callee's start as one DFA state. Checked at every byte from a colon
/// through the start of its value, and every eighth elsewhere, with unbounded whitespace
/// (three tokenizers) and with at most 3 characters per gap (a chain of whitespace
/// positions, each calling the value; Qwen3's), for numbers, integers, strings and a
/// bounded string.
#[test]
fn tail_calls_after_flexible_whitespace() {
    use grammask::json_schema::{PropertyOrder, Whitespace};
    let schema = r#"{"type":"object","properties":{"h":{"type":"number"},"w":{"type":"integer"},
        "s":{"type":"string"},"t":{"type":"string","maxLength":12},"b":{"type":"boolean"},
        "a":{"type":"array","items":{"type":"number"}}},"required":["h","w","s","t","b","a"]}"#;
    let text =
        "{\"h\": \n 10.5e+3 , \"w\":-3,\"s\":\"ab c\" ,  \"t\":\t\"x y\",\"b\": true, \"a\": [ 1, 2.5 ]}";
    let colons: Vec<usize> = text.match_indices(':').map(|(i, _)| i).collect();
    let check = |i: usize| i % 8 == 0 || colons.iter().any(|&c| i >= c && i <= c + 5);
    for (max, tokenizers) in [(u32::MAX, &TOKENIZERS[..]), (3, &["qwen3"][..])] {
        let options = JsonSchemaOptions {
            whitespace: Whitespace::Any { max },
            property_order: PropertyOrder::Schema,
            ..Default::default()
        };
        let g = json_schema_str_to_grammar(schema, &options).unwrap();
        for &tname in tokenizers {
            let name = format!("values after whitespace (max {max}) on {tname}");
            check_grammars_along(&name, tokenizer(tname), &g, &g, text, check);
        }
    }
}

/// Key patterns and `not` patterns become runs of one character class (`^[a-z_-]{1,70}$`,
/// a string of at most 80 characters of a class): written as counted repetitions, where
/// they were rules of 48 states each tail-calling the next (`regex::keyset`), whose
/// positions count a token's ASCII characters. Checked at every other byte through the end of
/// such a key and such a string (tokens longer than the room left, tokens closing them).
#[test]
fn class_runs_count_to_their_end() {
    let schema = r#"{"type":"object","patternProperties":{"^[a-z_-]{1,70}$":{"type":"string",
        "not":{"pattern":"[^a-z .-]"},"maxLength":80}},"additionalProperties":false}"#;
    let g = json_schema_str_to_grammar(schema, &JsonSchemaOptions::default()).unwrap();
    // The oracle reads the same language written by hand, every JSON spelling of each
    // character included (`\u0061`, either case of the hex digits).
    let slow = Grammar::from_ebnf(concat!(
        r#"root ::= "{}" | "{" pair (", " pair)* "}""#,
        "\n",
        r#"pair ::= "\"" k{1,70} "\": \"" v{0,80} "\"""#,
        "\n",
        r#"k ::= [a-z_\-] | "\\u00" ("6" [1-9a-fA-F] | "7" [0-9aA] | "5" [fF] | "2" [dD])"#,
        "\n",
        r#"v ::= [a-z .\-] | "\\u00" ("6" [1-9a-fA-F] | "7" [0-9aA] | "2" [0dDeE])"#
    ))
    .unwrap();
    let key = "the_quick-brown_fox".repeat(4)[..70].to_string();
    let value = "jumps over the lazy dog. ".repeat(4)[..80].to_string();
    let text = format!(r#"{{"{key}": "{value}"}}"#);
    let (key_end, value_end) = (2 + 70, text.len() - 2);
    for tname in ["llama3_1", "qwen3"] {
        let check = |i: usize| {
            i % 2 == 0 && ((i + 24 > key_end && i < key_end + 4) || (i + 24 > value_end && i < value_end + 2))
        };
        check_grammars_along(&format!("class runs on {tname}"), tokenizer(tname), &g, &slow, &text, check);
    }
}

/// Positions of a long counted repetition share one mask while a token's length from its
/// end (`Automata::agreement_depth`): checked inside such chains, both for a repetition
/// unrolled into one DFA and for one whose body is outlined into a rule, and through the
/// last positions, where the masks must differ again.
#[test]
fn long_counted_repetitions() {
    let body = "the quick ab red fox";
    check_along("outlined chain", r#"root ::= "<" ("ab" | [c-z ]){0,5000} ">""#, &format!("<{body}>"), 1);
    let near_end = format!("<{}>", "abcdefghij".repeat(14));
    check_along("chain end", r#"root ::= "<" [a-z]{0,140} ">""#, &near_end, 7);
    // Strings longer than any token, through to their end and the next one: the
    // positions share one mask and the matcher's memo of checked tokens (which close the
    // string and go on: `",`, `"]`) until a token's length before the end, where each
    // position differs.
    let full: String = "abc de.fg".repeat(40).chars().take(200).collect();
    let text = format!(r#"["{full}","x y"]"#);
    check_along(
        "long chain",
        "root ::= \"[\" s (\",\" s)* \"]\"\ns ::= \"\\\"\" [a-z .]{0,200} \"\\\"\"",
        &text,
        9,
    );
}

/// Tokens that leave a rule (`cd",`) are decided by the context around it: the same string
/// rule is a key (where `":` may follow) and a value (where it may not), and a bounded one
/// is a chain whose every character is a new state.
#[test]
fn tokens_leaving_a_rule() {
    check_along(
        "rule exits",
        r#"root ::= "{" pair ("," ws pair)* "}"
pair ::= str ":" ws (str | num | "b" bounded)
str ::= "\"" [a-z ]* "\""
bounded ::= "\"" [a-z ]{0,40} "\""
num ::= [0-9]+
ws ::= [ ]?"#,
        r#"{"ab":"cd", "x y":12,"q": b"the red fox is here ok"}"#,
        1,
    );
    // The same value filling its bound: the last positions of the chain take their masks
    // from the previous one plus a walk of the tokens longer than the room left, among
    // them the uncertain ones that close the string and the object (`ok"}`, `",`).
    check_along(
        "bounded exits",
        r#"root ::= "{" pair ("," ws pair)* "}"
pair ::= str ":" ws bounded
str ::= "\"" [a-z ]* "\""
bounded ::= "\"" [a-z ]{0,22} "\""
ws ::= [ ]?"#,
        r#"{"q": "the red fox is here", "ab":"the red fox is here ok"}"#,
        1,
    );
}

/// Near the end of a bounded chain a position's mask is the previous one's with only the
/// tokens longer than the room left walked again (few, on a real vocabulary, and none that
/// leave the rule): a small vocabulary of single bytes and long tokens that close the
/// string and go on past it (`abcdefgh"]`: uncertain, decided by what follows the rule)
/// puts every kind of long token into that merge.
#[test]
fn long_tokens_near_a_chain_end() {
    let mut vocab: Vec<Vec<u8>> = (0x20u8..0x7f).map(|b| vec![b]).collect();
    for t in ["fghij\",\"", "abcdefgh\"]", "klmnopq\",\"ab", "bcdefghijk", "xyz\"]\n", "ghij\"]"] {
        vocab.push(t.as_bytes().to_vec());
    }
    let tok = std::sync::Arc::new(
        grammask::TokenizerInfo::from_byte_tokens(vocab, &Default::default()).expect("small vocabulary"),
    );
    // `items` is recursive, so a rule of its own: its last string ends inside tokens
    // such as `ghij"]`, whose `]` only the context (`root`) can read.
    let ebnf = r#"root ::= "[" items "]"
items ::= s | s "," items
s ::= "\"" [a-z]{0,16} "\""
"#;
    let text = r#"["abcdefghijklmnop","klmnopq","ab","fghij","bcdefghijk","xyz"]"#;
    check_along_on("chain end, small vocabulary", tok, ebnf, text, 1);
}

/// Objects whose members come in any order (a member set the parser tracks) against the
/// same objects written out as a lattice of "members written so far" rules: masks must
/// agree bit for bit along random walks, where keys, separators and the closing brace
/// straddle tokens (`"a":`, `, "`, `"}`) and only unwritten members may follow.
#[test]
fn member_sets_match_their_lattice() {
    let schemas = [
        // Short keys sharing prefixes, two required, a bound on the count, extra keys by
        // pattern (strict: no others), nested objects.
        r#"{"type":"object","properties":{"a":{"type":"integer"},"ab":{"type":"string","maxLength":3},
            "b":{"type":"object","properties":{"a":{"type":"boolean"},"c":{"type":"null"}}},
            "abc":{"enum":["x","y"]}},"required":["a","b"],"maxProperties":4,
            "patternProperties":{"^x[0-9]$":{"type":"integer"}}}"#,
        // Nothing required, at least two members.
        r#"{"type":"object","properties":{"k":{"type":"integer"},"kk":{"type":"integer"},
            "kkk":{"type":"boolean"}},"minProperties":2}"#,
    ];
    for (i, schema) in schemas.iter().enumerate() {
        let fast = json_schema_str_to_grammar(schema, &JsonSchemaOptions::default()).unwrap();
        assert!(fast.rules.iter().any(|r| r.members.is_some()), "{schema}: no member set");
        let slow = Grammar::from_ebnf(&written_out(&fast)).unwrap();
        let check_at: Vec<usize> = (0..4 * checks()).map(|k| 2 * k).collect();
        check_walks(&format!("member set {i}"), &fast, &slow, 11 + i as u64, &check_at);
    }
    // Every state along objects that write all their members, then none, in both orders:
    // once all are in, neither a separator nor a member may follow.
    let schema = r#"{"type":"array","items":{"type":"object","properties":{"p":{"type":"boolean"},
        "q":{"type":"null"}},"required":["q"]}}"#;
    let fast = json_schema_str_to_grammar(schema, &JsonSchemaOptions::default()).unwrap();
    let slow = Grammar::from_ebnf(&written_out(&fast)).unwrap();
    let text = r#"[{"p": true, "q": null}, {"q": null, "p": false}, {"q": null}]"#;
    check_grammars_along("all members written", tokenizer("llama3_1"), &fast, &slow, text, |_| true);
}

/// Intersections (`a & b`: the JSON Schema front-end's `pattern` under lengths it cannot
/// carry, or with a `format`) are the product of their operands' automata. Masks equal
/// the oracle's on the same language written out by hand, along random walks and at
/// every byte of a few texts, where tokens straddle the intersection's end (`x"`, `"5`).
#[test]
fn intersections_match_their_written_out_language() {
    // Two or three lowercase letters, one of them an `x`; then a digit.
    let fast = Grammar::from_ebnf(r#"root ::= "\"" ([a-z]* "x" [a-z]* & [a-z]{2,3}) "\"" [0-9]"#).unwrap();
    let slow = Grammar::from_ebnf(
        r#"root ::= "\"" ("x" [a-z] | [a-z] "x" | "x" [a-z] [a-z] | [a-z] "x" [a-z] | [a-z] [a-z] "x") "\"" [0-9]"#,
    )
    .unwrap();
    let check_at: Vec<usize> = (0..6).collect();
    check_walks("intersection", &fast, &slow, 5, &check_at);
    for text in ["\"ax\"5", "\"xyz\"0", "\"abx\"9", "\"xx\"1"] {
        check_grammars_along("intersection", tokenizer("llama3_1"), &fast, &slow, text, |_| true);
    }
    // Three operands, one of them non-ASCII: words of `é` and `a` with an `é`, 1 to 3
    // characters, not starting with `a`.
    let fast = Grammar::from_ebnf(r#"root ::= "<" ([aé]* "é" [aé]* & [aé]{1,3} & "é" [aé]*) ">""#).unwrap();
    let slow = Grammar::from_ebnf(r#"root ::= "<" "é" [aé]{0,2} ">""#).unwrap();
    check_walks("three-way intersection", &fast, &slow, 9, &check_at);
    check_grammars_along("three-way intersection", tokenizer("llama2"), &fast, &slow, "<éaé>", |_| true);
}

/// `g` as EBNF with every member-set rule replaced by its lattice: one rule per set of
/// members written so far (and count of extra members), offering each member not yet
/// written, and the end once the required members are in and the count allows.
fn written_out(g: &Grammar) -> String {
    let mut text = g.to_string();
    for rule in &g.rules {
        let Some(set) = &rule.members else { continue };
        let name = |r: grammask::grammar::RuleId| g.rule(r).name.clone();
        let n = set.members.len();
        let max = set.max.unwrap_or(u32::MAX);
        let cap = if set.extra.is_some() { set.min.max(max.min(n as u32 + 4)) + 1 } else { 1 };
        let required =
            set.members.iter().enumerate().filter(|(_, m)| m.1).fold(0u64, |acc, (i, _)| acc | 1 << i);
        let lat = |w: u64, x: u32, part: &str| format!("{}__{part}_{w}_{x}", rule.name);
        let mut out = String::new();
        // The body's `open` is the text before the first member.
        let open = match &rule.body {
            grammask::grammar::Expr::Seq(v) => match &v[0] {
                grammask::grammar::Expr::Literal(l) => l.clone(),
                e => panic!("open is not a literal: {e:?}"),
            },
            e => panic!("unexpected body {e:?}"),
        };
        out.push_str(&format!("{} ::= {:?} {}\n", rule.name, open, lat(0, 0, "pick")));
        for w in 0..1u64 << n {
            for x in 0..cap {
                let count = w.count_ones() + x;
                let mut pick: Vec<String> = (0..n)
                    .filter(|&i| w >> i & 1 == 0 && count < max)
                    .map(|i| format!("{} {}", name(set.members[i].0), lat(w | 1 << i, x, "after")))
                    .collect();
                if let Some(e) = set.extra.filter(|_| count < max) {
                    pick.push(format!("{} {}", name(e), lat(w, (x + 1).min(cap - 1), "after")));
                }
                let mut after = vec![format!("{} {}", name(set.sep), lat(w, x, "pick"))];
                if w & required == required && count >= set.min {
                    after.push(name(set.close));
                }
                let or_nothing = |v: Vec<String>| if v.is_empty() { "[]".to_string() } else { v.join(" | ") };
                out.push_str(&format!("{} ::= {}\n", lat(w, x, "pick"), or_nothing(pick)));
                out.push_str(&format!("{} ::= {}\n", lat(w, x, "after"), or_nothing(after)));
            }
        }
        let line = text.lines().find(|l| l.starts_with(&format!("{} ::= ", rule.name))).unwrap().to_string();
        text = text.replace(&format!("{line}\n"), &out);
    }
    text
}

#[test]
fn builtin_json() {
    check_grammar("builtin json", grammask::grammar::JSON_EBNF, 1);
}

macro_rules! llama_cpp {
    ($($name:ident),*) => {$(
        #[test]
        fn $name() {
            let text = grammar_text(concat!("llama.cpp/", stringify!($name), ".gbnf"));
            check_grammar(stringify!($name), &text, 7);
        }
    )*};
}
llama_cpp!(json, json_arr, c, chess, list, arithmetic, english, japanese);

#[test]
fn left_recursive() {
    check_grammar(
        "left-recursive",
        r#"root ::= expr
expr ::= expr "+" term | expr "-" term | term
term ::= term "*" factor | factor
factor ::= [0-9]+ | "(" expr ")" | "-" factor"#,
        3,
    );
}

#[test]
fn ambiguous() {
    check_grammar(
        "ambiguous",
        r#"root ::= (x | x x | y)* "!"?
x ::= "ab" | "a" "b" | "a" b
b ::= "b" | "bb"
y ::= [a-c]+ | "abc" y"#,
        4,
    );
}

#[test]
fn nullable_and_root_recursion() {
    check_grammar(
        "nullable",
        r#"root ::= "(" root ")" | a b c
a ::= "" | "a"
b ::= a a
c ::= b "c" | """#,
        5,
    );
}
