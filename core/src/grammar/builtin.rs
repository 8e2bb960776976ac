//! Builtin grammars.

use super::{parse_ebnf, Grammar, ParseLimits};

/// EBNF of JSON as ECMA-404 defines it: any value, whitespace `[ \t\n\r]*` between tokens,
/// strings of any scalar value except `"`, `\` and controls below U+0020, with the standard
/// escapes.
pub const JSON_EBNF: &str = r#"# JSON (ECMA-404)
root ::= ws value ws
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ws ( "," ws member ws )* )? "}"
member ::= string ws ":" ws value
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [+\-]? [0-9]+ )?
ws ::= [ \t\n\r]*
"#;

/// The builtin JSON grammar ([`JSON_EBNF`]).
///
/// ```
/// let g = grammask::grammar::json_grammar();
/// assert_eq!(g.rule(g.root).name, "root");
/// ```
pub fn json_grammar() -> Grammar {
    match parse_ebnf(JSON_EBNF, "root", &ParseLimits::default()) {
        Ok(g) => g,
        // The text is a constant checked by the unit test below.
        Err(e) => unreachable!("builtin JSON grammar does not parse: {e}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn builtin_json_parses() {
        let g = super::json_grammar();
        assert_eq!(g.rules.len(), 8);
    }
}
