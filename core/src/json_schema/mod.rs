//! JSON Schema (Draft 2020-12, plus Draft-07 spellings) → grammar IR.
//!
//! ```text
//! schema (serde_json::Value) ──resolve──▶ Resolver ($id/$anchor/$defs index, $ref targets)
//!        ──build──▶ Expr per subschema (types → string/number/object/array, combine)
//!        ──▶ Grammar (root rule + one rule per $ref target, recursion through rules)
//! ```
//!
//! The conversion is a single recursive walk (`types`) over the schema. Each subschema
//! becomes an [`Expr`](crate::grammar::Expr) that generates exactly its JSON-encoded
//! instances, in the chosen [`Whitespace`] layout. `$ref` targets become rules (so
//! recursive schemas are recursive grammars); `allOf` is merged into one schema before
//! building (`combine`); `anyOf`/`oneOf` become alternations.
//!
//! # What is exact and what is approximated
//! Every keyword is in one of three classes:
//! - **enforced exactly**: `type`, `enum`, `const`, `properties`, `required`,
//!   `additionalProperties`, `patternProperties` and `propertyNames` (each key is sorted
//!   into exactly one class — declared, matched by a set of patterns, or additional — by
//!   a character-level key automaton, [`crate::regex`]'s `keyset`, so a declared property
//!   that also matches a pattern must satisfy both schemas and additional properties
//!   exclude every pattern match), `minProperties`/`maxProperties`,
//!   `dependentRequired`/`dependentSchemas`/`dependencies` (rewritten as `allOf` of
//!   "absent, or present with its dependency"), `items`, `prefixItems`,
//!   `additionalItems`, `minItems`/`maxItems`, `minLength`/`maxLength`, `pattern`,
//!   `format` (see [`format`](mod@format); a plain string's `maxLength` is exact at any
//!   size: beyond 1,024 characters, or [`SchemaLimits::max_exact_length`] if lower, it is
//!   written in 256-character blocks; beside a `pattern` the lengths are carried by the
//!   pattern, or intersected with it — as is a `format` with a `pattern` — up to
//!   [`SchemaLimits::max_intersection_size`]), integer bounds and `multipleOf` (bounded ranges,
//!   powers of ten), number bounds (no exponent form is generated then), `anyOf`, `oneOf` when
//!   its branches provably exclude each other (types, enumerations, or a separating
//!   property; see `one_of`) or are of the "exactly one of these property sets" form
//!   (every branch a `{"required": [names…]}` on an object), `allOf` (merged), `$ref`/`$defs`/
//!   `definitions`/`$id`/`$anchor`, boolean schemas, `not` of types and of values
//!   (`enum`/`const`, and `anyOf` of these: values leave an enumeration by JSON
//!   equality, `null` and booleans their literal, strings their type as the complement
//!   of the set, numbers as the ranges between them), `not` of string keywords (the
//!   complement of their joint automaton, intersected with the string's other keywords)
//!   and of structured schemas (number bounds, item counts, `items`, `contains`,
//!   `required`, `properties`, property counts, `additionalProperties: false`, `not`,
//!   `anyOf`: rewritten as positive keywords, see `not`), a `oneOf` of overlapping
//!   branches when each branch less the others is such a `not`, `contains`
//!   (without item-count bounds);
//! - **annotations**, ignored: `title`, `description`, `default`, `examples`,
//!   `$comment`, `$schema`, `deprecated`, `readOnly`, `writeOnly`, `content*`, and any
//!   keyword JSON Schema does not define (the spec says to ignore unknown keywords);
//! - **not enforced** (`uniqueItems`, `unevaluated*`, `if`/`then`/`else`,
//!   `$dynamicRef`, `maxContains`, other `not`s (an array or object value outside an
//!   enumeration, "not an integer" among numbers, `patternProperties`, `propertyNames`,
//!   `multipleOf`, `uniqueItems`, …), a `oneOf` whose branches may overlap where that
//!   `not` is not exact, …): a [`SchemaError`] with
//!   [`SchemaErrorKind::Unsupported`] naming the keyword and its JSON pointer — or, with
//!   [`JsonSchemaOptions::lenient`], a [`SchemaWarning`] and the approximation documented
//!   on the warning (usually: the keyword is ignored, so the grammar accepts a superset).
//!
//! Strings, keys and enumerated values accept every JSON spelling of their characters
//! (`\u0061` for `a`, `\/`, surrogate pairs; lengths count characters), and an `enum` or
//! `const` object is any document equal to it. llguidance's `x-guidance` options at the
//! root are honoured where the language is the same and refused by name otherwise
//! (`guidance`).
//!
//! A `format` this module does not know is an annotation (Draft 2020-12 §7.2.3: unknown
//! formats must not fail validation): any string, exactly as a validator decides, with a
//! [`SchemaWarning`] naming it so that a misspelt format (`url`) does not go unnoticed.
//!
//! Object members are accepted in any order, each declared one at most once and extra
//! ones anywhere among them ([`PropertyOrder::Any`]: a member set the parser tracks, see
//! [`crate::grammar::MemberSet`]); [`PropertyOrder::Schema`] fixes the schema's order, as
//! XGrammar and llguidance do.
//!
//! Known deliberate differences from a validator:
//! - a repeated member is never accepted (a parser would keep one of the values) — except
//!   when a `propertyNames` too general for the key automaton stands for the extra keys,
//!   which are then not told apart from the declared names;
//! - with [`JsonSchemaOptions::strict`] (the default) an object schema that declares
//!   `properties` or `patternProperties` and is silent about `additionalProperties`
//!   allows no extra properties (one that declares no members, `{"type": "object"}`,
//!   stays a free-form map);
//! - `oneOf` is built like `anyOf` once it is exact (see above); in lenient mode an
//!   overlapping `oneOf` is built as `anyOf` with a [`SchemaWarning`];
//! - a `maxLength` above [`SchemaLimits::max_exact_length`] on a string with a `pattern`
//!   or `format` is an unsupported keyword (in lenient mode it is dropped, with a warning).
//!
//! # Input safety
//! [`SchemaLimits`] bounds nesting depth, the number of rules, enum sizes and pattern
//! sizes; every failure is a typed [`SchemaError`] with the JSON pointer of the fault.
//!
//! ```
//! use std::sync::Arc;
//! use grammask::json_schema::{json_schema_str_to_grammar, JsonSchemaOptions};
//! use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo, TokenizerOptions};
//! let g = json_schema_str_to_grammar(
//!     r#"{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}"#,
//!     &JsonSchemaOptions::default(),
//! )?;
//! let bytes: Vec<Vec<u8>> = (1u8..128).map(|b| vec![b]).collect();
//! let tok = TokenizerInfo::from_byte_tokens(bytes, &TokenizerOptions::default())?;
//! let compiled = GrammarCompiler::new(Arc::new(tok)).compile(&GrammarSpec::Grammar(g))?;
//! let mut m = GrammarMatcher::new(compiled.clone());
//! m.accept_string(r#"{"n": 42}"#)?;
//! assert!(m.can_terminate());
//! assert!(GrammarMatcher::new(compiled).accept_string(r#"{"n": 0}"#).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod array;
mod combine;
mod finite;
pub mod format;
mod guidance;
mod not;
mod number;
mod object;
mod one_of;
pub(crate) mod resolve;
mod string;
mod types;
mod whitespace;

use crate::grammar::Grammar;
use crate::regex::{RegexError, RegexLimits};
use serde_json::Value;
use std::fmt;

/// Keywords that say nothing about instances in any draft grammask reads.
pub(crate) const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "$comment",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "$id",
    "$anchor",
    "$defs",
    "definitions",
];

/// How whitespace between JSON tokens is generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whitespace {
    /// No whitespace except XGrammar's default separators `", "` and `": "` (the form
    /// `json.dumps(…)` writes).
    Compact,
    /// Any JSON whitespace (`[ \t\n\r]`), at most `max` characters in each gap.
    Any {
        /// Longest whitespace run allowed in one gap (`u32::MAX`: unbounded, as
        /// XGrammar's structural tags write JSON).
        max: u32,
    },
    /// Pretty-printed like `json.dumps(…, indent=n)`: members on their own lines,
    /// indented by `n` spaces per level, `": "` after keys.
    Indent(u32),
}

/// Which orders of an object's members a grammar accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PropertyOrder {
    /// Any order, as JSON Schema means it: each declared member at most once, extra
    /// members anywhere among them, for any number of declared members.
    #[default]
    Any,
    /// The order of `properties` (then `required` names not declared, then extra
    /// members), as XGrammar and llguidance generate: a schema that lists `reasoning`
    /// before `answer` makes the model write them in that order.
    Schema,
}

/// Size and depth bounds for schema conversion.
#[derive(Debug, Clone)]
pub struct SchemaLimits {
    /// Deepest subschema nesting walked (default 128).
    pub max_depth: usize,
    /// Most grammar rules generated (default 20,000).
    pub max_rules: usize,
    /// Most `enum` values in one schema (default 10,000).
    pub max_enum: usize,
    /// Longest `maxLength`/`minLength` enforced exactly (default 10,000; a longer
    /// `maxLength` is an unsupported keyword — dropped with a warning in lenient mode —
    /// and a longer `minLength` is an error).
    pub max_exact_length: u32,
    /// Largest integer range enumerated for `multipleOf` (default 4,096 values).
    pub max_enumerated_multiples: u64,
    /// Deepest nesting generated with [`Whitespace::Indent`] (default 32).
    pub max_indent_depth: u32,
    /// Largest intersection built for a string (a `pattern` with lengths it cannot carry
    /// itself, a `pattern` and a `format`, strings excluded by `not`), in states of the
    /// product automaton (default 15,000: up to ~10 ms of compile). When the product of
    /// the operands' [`Expr::expanded_size`](crate::grammar::Expr::expanded_size), a
    /// loose upper bound, is over it, the product is built to measure it, stopping at the
    /// limit; past it the lengths, the format or the `not` are an unsupported keyword.
    pub max_intersection_size: u64,
    /// Limits for `pattern` regexes.
    pub regex: RegexLimits,
}

impl Default for SchemaLimits {
    fn default() -> Self {
        Self {
            max_depth: 128,
            max_rules: 20_000,
            max_enum: 10_000,
            max_exact_length: 10_000,
            max_enumerated_multiples: 4_096,
            max_indent_depth: 32,
            max_intersection_size: 15_000,
            regex: RegexLimits::default(),
        }
    }
}

/// Options for [`json_schema_to_grammar`].
#[derive(Debug, Clone)]
pub struct JsonSchemaOptions {
    /// Whitespace layout (default [`Whitespace::Compact`]).
    pub whitespace: Whitespace,
    /// When an object schema declares its members (`properties`/`patternProperties`) but
    /// says nothing about `additionalProperties`, allow no extra properties (default
    /// true). False follows JSON Schema (extras allowed). Strict mode also builds a
    /// `oneOf` whose object branches are told apart by a property they declare but do not
    /// require (`kind: {"const": …}`, or a member another closed branch forbids) with that
    /// property required, leaving out the objects without it (a [`SchemaWarning`] names
    /// each one).
    pub strict: bool,
    /// Keywords that are not enforced produce a [`SchemaWarning`] and an approximation
    /// instead of an error (default false).
    pub lenient: bool,
    /// Which orders of an object's members are accepted (default
    /// [`PropertyOrder::Any`]).
    pub property_order: PropertyOrder,
    /// Size limits.
    pub limits: SchemaLimits,
    /// How long a number may be written (default: 20 integer digits, 2 exponent digits).
    pub numbers: NumberSyntax,
    /// Where the type is `integer`, also accept integers written with a zero fraction
    /// (`6000.0`: an integer since Draft 6). Default false: an integer is generated as
    /// itself, which every JSON reader takes for an integer (Python's `json` reads
    /// `6000.0` as a float, and a strict integer field refuses it). With it, an integer
    /// without bounds or `multipleOf` also takes exponent forms (`6e3`, `1.5E+1`,
    /// `600e-2`; exponents up to 17) of values up to 18 digits (always inside the i64
    /// range of a plain integer); a bounded integer takes zero fractions only, as does an
    /// `enum` value. The exponent forms cost about 6 ms of time to first mask per grammar
    /// (`docs/usage.md`).
    pub integer_zero_fractions: bool,
}

impl Default for JsonSchemaOptions {
    fn default() -> Self {
        Self {
            whitespace: Whitespace::Compact,
            strict: true,
            lenient: false,
            property_order: PropertyOrder::Any,
            limits: SchemaLimits::default(),
            numbers: NumberSyntax::default(),
            integer_zero_fractions: false,
        }
    }
}

/// How long a number may be written where a schema does not bound it. JSON itself has no
/// limit; these are choices for generation: a model does not write a 30-digit number on
/// purpose (a runaway digit loop ends here instead), and every number within them is a
/// finite `f64` that `serde_json` and most validators read back. Integers a schema leaves
/// unbounded stay within `i64` whatever these say.
///
/// ```
/// use grammask::json_schema::{json_schema_str_to_grammar, JsonSchemaOptions, NumberSyntax};
/// let opts = JsonSchemaOptions {
///     numbers: NumberSyntax { max_int_digits: 30, max_exponent_digits: 3 },
///     ..Default::default()
/// };
/// assert!(json_schema_str_to_grammar(r#"{"type": "number"}"#, &opts).is_ok());
/// // Outside 1..=38 integer digits and 0..=9 exponent digits: a typed error.
/// let bad = JsonSchemaOptions { numbers: NumberSyntax { max_int_digits: 0, ..Default::default() }, ..Default::default() };
/// assert!(json_schema_str_to_grammar(r#"{"type": "number"}"#, &bad).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumberSyntax {
    /// Most digits before the decimal point (1..=38; default 20).
    pub max_int_digits: u32,
    /// Most digits of an exponent (0..=9, 0: no exponent; default 2).
    pub max_exponent_digits: u32,
}

impl Default for NumberSyntax {
    fn default() -> Self {
        Self { max_int_digits: 20, max_exponent_digits: 2 }
    }
}

/// A schema that could not be converted, with the JSON pointer of the fault.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaError {
    /// What went wrong.
    pub kind: SchemaErrorKind,
    /// JSON pointer (RFC 6901) to the subschema at fault (`""`: the root).
    pub pointer: String,
}

/// The kinds of [`SchemaError`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SchemaErrorKind {
    /// The text is not JSON.
    InvalidJson {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A value where a schema is required is not an object or boolean, or a keyword has
    /// a value of the wrong shape.
    NotASchema(String),
    /// A keyword (or keyword value) this converter does not enforce.
    Unsupported {
        /// The keyword.
        keyword: String,
        /// Why, or which form is unsupported.
        detail: String,
    },
    /// A `$ref` that names nothing in the document (remote references are not fetched).
    UnresolvableRef(String),
    /// Constraints that no instance can satisfy where an instance is required (for
    /// example `minimum > maximum` on the root).
    Unsatisfiable(String),
    /// A `pattern` (or `patternProperties` key) that cannot be converted.
    Regex(RegexError),
    /// A size limit was exceeded.
    Limit {
        /// What was measured.
        what: &'static str,
        /// The size reached.
        given: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The compile's work budget ran out (or it was cancelled) while converting this
    /// subschema ([`CompileOptions::work_limit`](crate::CompileOptions::work_limit)).
    Budget(Box<crate::budget::BudgetError>),
}

impl fmt::Display for SchemaErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidJson { line, column, message } => {
                write!(f, "invalid JSON at {line}:{column}: {message}")
            }
            Self::NotASchema(s) => write!(f, "not a valid schema: {s}"),
            Self::Unsupported { keyword, detail } => {
                write!(f, "unsupported keyword `{keyword}`: {detail}")
            }
            Self::UnresolvableRef(r) => write!(f, "cannot resolve $ref `{r}`"),
            Self::Unsatisfiable(s) => write!(f, "no instance can satisfy the schema: {s}"),
            Self::Regex(e) => write!(f, "{e}"),
            Self::Limit { what, given, limit } => {
                write!(f, "{what} is {given}, over the limit of {limit}")
            }
            Self::Budget(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "schema at `{}`: {}", if self.pointer.is_empty() { "#" } else { &self.pointer }, self.kind)
    }
}

impl std::error::Error for SchemaError {}

/// A keyword that was approximated under [`JsonSchemaOptions::lenient`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaWarning {
    /// The keyword.
    pub keyword: String,
    /// JSON pointer of the subschema.
    pub pointer: String,
    /// What the grammar does instead.
    pub approximation: String,
}

/// Converts a JSON Schema to a grammar whose root generates exactly the schema's
/// instances (see the module docs for the exceptions).
pub fn json_schema_to_grammar(schema: &Value, options: &JsonSchemaOptions) -> Result<Grammar, SchemaError> {
    json_schema_to_grammar_with_warnings(schema, options).map(|(g, _)| g)
}

/// Like [`json_schema_to_grammar`], also returning the approximations made (non-empty
/// only with [`JsonSchemaOptions::lenient`], or for unknown formats, formats a regex
/// checks only in part ([`format::format_caveat`]) and `oneOf`/long-string notes).
pub fn json_schema_to_grammar_with_warnings(
    schema: &Value,
    options: &JsonSchemaOptions,
) -> Result<(Grammar, Vec<SchemaWarning>), SchemaError> {
    let options = guidance::apply(schema, options)?;
    let n = options.numbers;
    if !(1..=38).contains(&n.max_int_digits) || n.max_exponent_digits > 9 {
        return Err(SchemaError {
            kind: SchemaErrorKind::NotASchema(format!(
                "number syntax: {} integer digits (1..=38) and {} exponent digits (0..=9)",
                n.max_int_digits, n.max_exponent_digits
            )),
            pointer: String::new(),
        });
    }
    types::Builder::convert(schema, &options)
}

/// Parses `text` as JSON (errors carry line and column) and converts it.
pub fn json_schema_str_to_grammar(text: &str, options: &JsonSchemaOptions) -> Result<Grammar, SchemaError> {
    json_schema_to_grammar(&parse_text(text)?, options)
}

/// Parses schema text as JSON; an error carries line and column.
pub(crate) fn parse_text(text: &str) -> Result<Value, SchemaError> {
    serde_json::from_str(text).map_err(|e| SchemaError {
        kind: SchemaErrorKind::InvalidJson { line: e.line(), column: e.column(), message: e.to_string() },
        pointer: String::new(),
    })
}

/// `value` serialized as `json.dumps(value, ensure_ascii=False)` writes it in
/// [`Whitespace::Compact`] (separators `", "` and `": "`, non-ASCII kept, floats in
/// Python's `repr` form), or with `indent=n` for [`Whitespace::Indent`]; the MaskBench
/// protocol tokenizes instances in this form.
///
/// ```
/// let v = serde_json::json!({"a": [1, 2.5, "é\n"]});
/// assert_eq!(grammask::json_schema::to_python_json(&v, grammask::json_schema::Whitespace::Compact), r#"{"a": [1, 2.5, "é\n"]}"#);
/// ```
pub fn to_python_json(value: &Value, whitespace: Whitespace) -> String {
    whitespace::write_value(value, whitespace, 0)
}
