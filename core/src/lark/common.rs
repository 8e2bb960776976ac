//! The terminals of Lark's `common.lark` that `%import common.NAME` may name: the set
//! llguidance bundles, each written as a Rust-syntax regular expression with the meaning
//! of the Lark definition (lark-parser's `lark/grammars/common.lark`).

/// `(name, regex)`; the regexes are written here from the Lark definitions.
const COMMON: &[(&str, &str)] = &[
    ("DIGIT", r"[0-9]"),
    ("HEXDIGIT", r"[a-fA-F0-9]"),
    ("INT", r"[0-9]+"),
    ("SIGNED_INT", r"[+-]?[0-9]+"),
    ("DECIMAL", r"[0-9]+\.[0-9]*|\.[0-9]+"),
    ("_EXP", r"[eE][+-]?[0-9]+"),
    ("FLOAT", r"(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"),
    ("SIGNED_FLOAT", r"[+-]?(?:(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"),
    ("NUMBER", r"[0-9]+|(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"),
    (
        "SIGNED_NUMBER",
        r"[+-]?(?:[0-9]+|(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)",
    ),
    // A double-quoted string whose backslash escapes any one character (Lark's
    // `_STRING_ESC_INNER`), not JSON's escape set.
    ("ESCAPED_STRING", r#""(?:[^"\\]|\\.)*""#),
    ("LCASE_LETTER", r"[a-z]"),
    ("UCASE_LETTER", r"[A-Z]"),
    ("LETTER", r"[A-Za-z]"),
    ("WORD", r"[A-Za-z]+"),
    ("CNAME", r"[_A-Za-z][_A-Za-z0-9]*"),
    ("WS_INLINE", r"[ \t]+"),
    ("WS", r"[ \t\f\r\n]+"),
    ("CR", r"\r"),
    ("LF", r"\n"),
    ("NEWLINE", r"(?:\r?\n)+"),
    ("SH_COMMENT", r"#[^\n]*"),
    ("CPP_COMMENT", r"//[^\n]*"),
    ("C_COMMENT", r"/\*[^*]*\*+(?:[^/*][^*]*\*+)*/"),
    ("SQL_COMMENT", r"--[^\n]*"),
];

/// The regex of `common.<name>`, if there is one.
pub(crate) fn lookup(name: &str) -> Option<&'static str> {
    COMMON.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

/// The importable names, for error messages.
pub(crate) fn names() -> Vec<&'static str> {
    COMMON.iter().map(|(n, _)| *n).collect()
}
