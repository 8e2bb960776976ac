//! Test helper: decides membership in the language of a rule-free [`Expr`] by
//! translating it to a `regex` crate pattern (an oracle independent of the automata).

use super::Expr;

// Where the real tokenizers are (`$GRAMMASK_TEST_DATA`, `../shared/data`, `.test-data/`).
include!("../../../scripts/test_data_dir.rs");

/// Whether `s` is in the language of `e` (which must not call rules, and may intersect
/// only at the top).
pub(crate) fn matches(e: &Expr, s: &str) -> bool {
    match e {
        Expr::And(v) => v.iter().all(|x| matches(x, s)),
        Expr::Dfa(d) => d.matches(s),
        e => recognizer(e).is_match(s),
    }
}

/// A regex matching exactly the language of `e` (for many strings, compile it once).
pub(crate) fn recognizer(e: &Expr) -> regex::Regex {
    regex::Regex::new(&format!("^(?:{})$", to_regex(e))).expect("translated pattern compiles")
}

fn to_regex(e: &Expr) -> String {
    match e {
        Expr::Empty => String::new(),
        Expr::Literal(s) => regex::escape(s),
        Expr::Class(r) if r.is_empty() => "[^\\s\\S]".into(),
        Expr::Class(r) => {
            format!("[{}]", r.iter().map(|&(a, b)| format!("\\x{{{a:x}}}-\\x{{{b:x}}}")).collect::<String>())
        }
        Expr::Seq(v) => v.iter().map(|x| format!("(?:{})", to_regex(x))).collect(),
        Expr::Alt(v) if v.is_empty() => "[^\\s\\S]".into(),
        Expr::Alt(v) => v.iter().map(|x| format!("(?:{})", to_regex(x))).collect::<Vec<_>>().join("|"),
        Expr::Repeat { expr, min, max } => {
            format!("(?:{}){{{min},{}}}", to_regex(expr), max.map_or(String::new(), |m| m.to_string()))
        }
        Expr::Dfa(d) => to_regex(&d.to_expr(1 << 20).expect("automaton small enough to expand")),
        Expr::Rule(_) => panic!("rule calls cannot be matched by a regex"),
        Expr::And(_) => panic!("intersections below the top cannot be matched by a regex"),
    }
}

#[cfg(test)]
mod tests {
    use super::find_test_data;

    /// Without data, tests fail with one message naming the fetch script; each place is
    /// found in its order.
    #[test]
    fn test_data_is_found_in_order_or_the_message_names_the_script() {
        let base = std::env::temp_dir().join(format!("grammask-test-data-{}", std::process::id()));
        let root = base.join("checkout");
        std::fs::create_dir_all(&root).unwrap();
        let e = find_test_data(Some(base.join("nowhere")), &root).unwrap_err();
        assert!(e.contains("scripts/fetch-test-data.sh") && e.contains("nowhere"), "{e}");
        std::fs::create_dir_all(root.join(".test-data")).unwrap();
        assert_eq!(find_test_data(None, &root).unwrap(), root.join(".test-data"));
        std::fs::create_dir_all(base.join("shared/data")).unwrap();
        assert_eq!(find_test_data(None, &root).unwrap(), root.join("../shared/data"));
        assert_eq!(find_test_data(Some(root.clone()), &root).unwrap(), root);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
