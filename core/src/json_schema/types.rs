//! The conversion walk: one subschema → one [`Expr`], dispatching on `type`.
//!
//! [`Builder::schema`] handles, in order: boolean schemas; `$ref` (a rule per target and
//! indentation level, so recursion terminates); `allOf` and `$ref` with siblings (merged
//! into one schema by [`super::combine`]); `anyOf`/`oneOf` (alternation of the branches,
//! each merged with the sibling keywords); then [`Builder::typed`]: keyword checks,
//! `enum`/`const`, `not`, and one alternative per allowed type, built by the
//! `string`, `number`, `object` and `array` modules.

use super::combine;
use super::one_of::{self, Exclusive};
use super::resolve::{escape_token, Resolver};
use super::whitespace::{alt, is_nothing, lit, nothing, seq, Layout};
use super::{JsonSchemaOptions, SchemaError, SchemaErrorKind, SchemaWarning, Whitespace};
use crate::grammar::{Expr, Grammar, Rule, RuleId};
use rustc_hash::FxHashMap;
use serde_json::{Map, Value};

/// Keywords this converter enforces (handled somewhere in the walk).
const ENFORCED: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "not",
    "contains",
    "minContains",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
];

/// JSON Schema keywords that constrain instances but are not (fully) enforced.
const UNENFORCED: &[&str] = &[
    "uniqueItems",
    "maxContains",
    "unevaluatedProperties",
    "unevaluatedItems",
    "if",
    "then",
    "else",
    "$dynamicRef",
    "$recursiveRef",
];

/// Whether JSON Schema defines `k` as a keyword that constrains instances (enforced
/// here or not); any other key is an annotation or an unknown keyword.
pub(crate) fn is_keyword(k: &str) -> bool {
    ENFORCED.contains(&k) || UNENFORCED.contains(&k)
}

/// The seven JSON types as bits.
pub(crate) const NULL: u8 = 1;
pub(crate) const BOOLEAN: u8 = 2;
pub(crate) const OBJECT: u8 = 4;
pub(crate) const ARRAY: u8 = 8;
pub(crate) const STRING: u8 = 16;
pub(crate) const NUMBER: u8 = 32;
pub(crate) const INTEGER: u8 = 64;
pub(crate) const ALL_TYPES: u8 = 127;

pub(crate) fn type_bit(name: &str) -> Option<u8> {
    Some(match name {
        "null" => NULL,
        "boolean" => BOOLEAN,
        "object" => OBJECT,
        "array" => ARRAY,
        "string" => STRING,
        "number" => NUMBER | INTEGER,
        "integer" => INTEGER,
        _ => return None,
    })
}

/// The type of a JSON value as a bit (integers, including `1.0`, are `INTEGER`).
pub(crate) fn value_type(v: &Value) -> u8 {
    match v {
        Value::Null => NULL,
        Value::Bool(_) => BOOLEAN,
        Value::Object(_) => OBJECT,
        Value::Array(_) => ARRAY,
        Value::String(_) => STRING,
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) {
                INTEGER
            } else {
                NUMBER
            }
        }
    }
}

/// The types a schema map allows by its `type` keyword.
pub(crate) fn declared_types(m: &Map<String, Value>, ptr: &str) -> Result<u8, SchemaError> {
    let bad = || SchemaError {
        kind: SchemaErrorKind::NotASchema("`type` must be a type name or a list of them".into()),
        pointer: ptr.to_string(),
    };
    match m.get("type") {
        None => Ok(ALL_TYPES),
        Some(Value::String(s)) => type_bit(s).ok_or_else(bad),
        Some(Value::Array(a)) => {
            a.iter().try_fold(0u8, |acc, t| Ok(acc | t.as_str().and_then(type_bit).ok_or_else(bad)?))
        }
        Some(_) => Err(bad()),
    }
}

/// Whether the document's `$schema` names a draft before 2019-09 (Draft 3, 4, 6 or 7).
fn legacy_draft(root: &Value) -> bool {
    let Some(uri) = root.get("$schema").and_then(Value::as_str) else { return false };
    ["draft-03", "draft-04", "draft-06", "draft-07"].iter().any(|d| uri.contains(d))
}

/// The conversion state.
pub(crate) struct Builder<'a> {
    pub root: &'a Value,
    pub opts: &'a JsonSchemaOptions,
    pub layout: Layout,
    pub resolver: Resolver,
    pub rules: Vec<Rule>,
    memo: FxHashMap<(String, u32), RuleId>,
    /// Rules of merged `allOf` / `$ref`-with-siblings schemas, by absolutized schema text
    /// and level (see [`Builder::map_schema`]).
    merged: FxHashMap<(String, u32), RuleId>,
    any_memo: FxHashMap<u32, RuleId>,
    number_rule: Option<RuleId>,
    /// Integer ranges already built, by bounds (see [`Builder::int_range`]).
    int_ranges: FxHashMap<(Option<i128>, Option<i128>), Expr>,
    string_rule: Option<RuleId>,
    /// Leaf rules by the hash of their body (the bodies themselves are the rules'; a key
    /// that held a copy cost a clone of every leaf, a large format's included).
    leaves: FxHashMap<u64, Vec<RuleId>>,
    /// The rule of each constrained string built without a warning, by what constrains it
    /// (see [`super::string::StringKey`]): a `format` used alone is one rule per grammar (its
    /// expression, the largest of a tool's arguments, is neither hashed nor copied twice),
    /// and a schema that repeats a `pattern` under lengths builds its automaton once.
    pub(crate) string_rules: FxHashMap<super::string::StringKey, Expr>,
    /// Per character, the call of its escapes' rule ([`Self::spelled`]): keys repeat
    /// their characters, and building the escapes (hex digits in either case) for each
    /// was most of converting a tool list's schemas.
    escapes: FxHashMap<char, Expr>,
    /// Rules by body (see [`Builder::rule_once`]).
    bodies: FxHashMap<Expr, RuleId>,
    pub warnings: Vec<SchemaWarning>,
    depth: usize,
    /// The `not`s being rewritten ([`Builder::not_rewritten`]), by schema text, the text
    /// of what stands beside them and the container level: meeting one again inside its
    /// own rewrite at the same level means the complement reproduces itself, which would
    /// be a rule referring to itself before any character (the empty language), so it is
    /// refused instead.
    rewriting: std::collections::HashSet<String>,
    /// The root's `$schema` names Draft 4, 6 or 7, where `$ref` stands alone: its sibling
    /// keywords are ignored (Draft 7 §8.3). From 2019-09 on they apply alongside it.
    ref_alone: bool,
}

impl<'a> Builder<'a> {
    /// Converts `root` to a grammar.
    pub fn convert(
        root: &'a Value,
        opts: &'a JsonSchemaOptions,
    ) -> Result<(Grammar, Vec<SchemaWarning>), SchemaError> {
        let mut b = Builder {
            root,
            opts,
            layout: Layout(opts.whitespace),
            resolver: Resolver::new(root, legacy_draft(root)),
            rules: vec![Rule::new("root", Expr::Empty)],
            memo: FxHashMap::default(),
            merged: FxHashMap::default(),
            any_memo: FxHashMap::default(),
            number_rule: None,
            int_ranges: FxHashMap::default(),
            string_rule: None,
            leaves: FxHashMap::default(),
            string_rules: FxHashMap::default(),
            escapes: FxHashMap::default(),
            bodies: FxHashMap::default(),
            warnings: Vec::new(),
            depth: 0,
            rewriting: std::collections::HashSet::new(),
            ref_alone: legacy_draft(root),
        };
        let body = b.schema(root, "", 0)?;
        if is_nothing(&body) {
            return Err(SchemaError {
                kind: SchemaErrorKind::Unsatisfiable("the schema allows no value".into()),
                pointer: String::new(),
            });
        }
        let outer = b.layout.outer();
        b.rules[0].body = seq(vec![outer.clone(), body, outer]);
        let g = Grammar { rules: b.rules, root: RuleId(0), markers: Vec::new() };
        // Catch grammars whose root cannot finish (e.g. a required property that
        // recursively requires itself) as a typed error.
        if let Err(e) = crate::automata::optimize::productive_rules(&g) {
            return Err(SchemaError {
                kind: SchemaErrorKind::Unsatisfiable(e.to_string()),
                pointer: String::new(),
            });
        }
        Ok((g, b.warnings))
    }

    pub fn err(&self, kind: SchemaErrorKind, ptr: &str) -> SchemaError {
        SchemaError { kind, pointer: ptr.to_string() }
    }

    pub fn not_schema(&self, what: impl Into<String>, ptr: &str) -> SchemaError {
        self.err(SchemaErrorKind::NotASchema(what.into()), ptr)
    }

    /// A keyword that is not enforced: an error, or a warning in lenient mode.
    pub fn unsupported(
        &mut self,
        keyword: &str,
        detail: &str,
        approximation: &str,
        ptr: &str,
    ) -> Result<(), SchemaError> {
        if self.opts.lenient {
            self.warnings.push(SchemaWarning {
                keyword: keyword.into(),
                pointer: ptr.into(),
                approximation: approximation.into(),
            });
            Ok(())
        } else {
            Err(self
                .err(SchemaErrorKind::Unsupported { keyword: keyword.into(), detail: detail.into() }, ptr))
        }
    }

    /// `v` with its `$ref`s and `allOf` inlined ([`combine::merge_schema`]), for the
    /// keywords whose subschema is read keyword by keyword instead of converted
    /// (`propertyNames`, `not`): behind a `$ref` a keyword must mean what it means
    /// written in place, never be skipped as unknown. Draft 4–7 documents ignore a
    /// `$ref`'s siblings, as [`Self::schema`] does.
    pub fn plain(&mut self, v: &Value, ptr: &str) -> Result<Value, SchemaError> {
        let Value::Object(m) = v else { return Ok(v.clone()) };
        match m.get("$ref") {
            Some(r) if self.ref_alone => {
                let only: Map<String, Value> = [("$ref".to_string(), r.clone())].into_iter().collect();
                combine::merge_schema(self, &only, ptr)
            }
            _ if m.contains_key("$ref") || m.contains_key("allOf") => combine::merge_schema(self, m, ptr),
            _ => Ok(v.clone()),
        }
    }

    /// Allocates a rule (body filled in later).
    pub fn new_rule(&mut self, hint: &str, ptr: &str) -> Result<RuleId, SchemaError> {
        if self.rules.len() >= self.opts.limits.max_rules {
            return Err(self.err(
                SchemaErrorKind::Limit {
                    what: "grammar rules",
                    given: self.rules.len() + 1,
                    limit: self.opts.limits.max_rules,
                },
                ptr,
            ));
        }
        let id = RuleId(self.rules.len() as u32);
        // `r<id>_<hint>`, built by hand: a large schema makes thousands of rules, and the
        // formatting machinery was 3 % of its compile.
        let mut name = String::with_capacity(48);
        name.push('r');
        let digits = self.rules.len().to_string();
        name.push_str(&digits);
        name.push('_');
        name.extend(hint.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(40));
        self.rules.push(Rule::new(name, Expr::Empty));
        Ok(id)
    }

    fn memo_level(&self, level: u32) -> u32 {
        if matches!(self.opts.whitespace, Whitespace::Indent(_)) {
            level
        } else {
            0
        }
    }

    pub fn check_level(&self, level: u32, ptr: &str) -> Result<(), SchemaError> {
        let max = self.opts.limits.max_indent_depth;
        if matches!(self.opts.whitespace, Whitespace::Indent(_)) && level > max {
            return Err(self.err(
                SchemaErrorKind::Limit {
                    what: "nesting depth with indentation",
                    given: level as usize,
                    limit: max as usize,
                },
                ptr,
            ));
        }
        Ok(())
    }

    /// Any JSON number, as one rule per grammar: its integer part is a counted
    /// repetition ([`NumberSyntax::max_int_digits`](super::NumberSyntax) states), which,
    /// copied into every member that holds a number, made up most of an object's automaton.
    pub fn any_number(&mut self) -> Result<Expr, SchemaError> {
        if let Some(id) = self.number_rule {
            return Ok(Expr::Rule(id));
        }
        let id = self.new_rule("number", "")?;
        self.rules[id.index()].body = super::number::any_number(self.opts.numbers);
        self.rules[id.index()].keep = true;
        self.number_rule = Some(id);
        Ok(Expr::Rule(id))
    }

    /// `e` as a rule of its own when it is written in more than one place and large
    /// (an array's item schema appears as the first item and in the repetition): copies
    /// would each become automaton states, and each state a mask to compute.
    pub fn shared(&mut self, e: Expr, hint: &str, ptr: &str) -> Result<Expr, SchemaError> {
        const SHARE_ABOVE: u64 = 32;
        if matches!(e, Expr::Rule(_)) || e.expanded_size() <= SHARE_ABOVE {
            return Ok(e);
        }
        let id = self.new_rule(hint, ptr)?;
        self.rules[id.index()].body = e;
        self.rules[id.index()].keep = true;
        Ok(Expr::Rule(id))
    }

    /// A rule with `body`, one per distinct body, that the optimizer may still copy into
    /// its uses. Equal bodies built in different places (the extra members of two string
    /// maps) are one rule from the start, so what references them is equal too (see
    /// [`Builder::shared_value`]).
    pub fn rule_once(&mut self, body: Expr, hint: &str, ptr: &str) -> Result<Expr, SchemaError> {
        self.rule_once_id(body, hint, ptr).map(Expr::Rule)
    }

    /// [`Builder::rule_once`], giving the rule's id.
    pub fn rule_once_id(&mut self, body: Expr, hint: &str, ptr: &str) -> Result<RuleId, SchemaError> {
        if let Some(&id) = self.bodies.get(&body) {
            return Ok(id);
        }
        let id = self.new_rule(hint, ptr)?;
        self.rules[id.index()].body = body.clone();
        self.bodies.insert(body, id);
        Ok(id)
    }

    /// An object member's value as a rule, one per distinct value, that the optimizer
    /// may copy back into its uses. Schemas repeat inline subschemas that differ only in
    /// annotations (every Kubernetes `labels`, `annotations`, `nodeSelector` … is a string
    /// map with its own description): written in place, each copy was one more automaton
    /// to determinize, a tenth of a large workload schema's construction. A value used
    /// once is copied back (it is at most [`INLINE_MAX_SIZE`] nodes); a shared one stays
    /// a rule when its body, with what it inlines, is large.
    ///
    /// [`INLINE_MAX_SIZE`]: crate::automata::optimize::INLINE_MAX_SIZE
    pub fn shared_value(&mut self, e: Expr, ptr: &str) -> Result<Expr, SchemaError> {
        use crate::automata::optimize::INLINE_MAX_SIZE;
        // Tiny values are copied everywhere anyway; large ones would not be copied back.
        if matches!(e, Expr::Rule(_)) || e.expanded_size() <= 8 || e.size() > INLINE_MAX_SIZE {
            return Ok(e);
        }
        self.rule_once(e, "value", ptr)
    }

    /// A constrained scalar — a string (`pattern`, `format`, lengths) or a number with
    /// bounds — as a rule of its own, one per distinct expression: equal scalar schemas in
    /// one grammar share it (every plain `integer` is the same 60-state i64 range), and as
    /// a rule that calls no other it is a leaf, whose masks the compiler shares across
    /// grammars (`date-time` is the same walk in every schema that uses it).
    pub fn leaf_rule(&mut self, e: Expr, hint: &str) -> Result<Expr, SchemaError> {
        if matches!(e, Expr::Rule(_)) || super::whitespace::is_nothing(&e) {
            return Ok(e);
        }
        use std::hash::BuildHasher;
        let key = rustc_hash::FxBuildHasher.hash_one(&e);
        if let Some(&id) =
            self.leaves.get(&key).and_then(|ids| ids.iter().find(|id| self.rules[id.index()].body == e))
        {
            return Ok(Expr::Rule(id));
        }
        let id = self.new_rule(hint, "")?;
        self.rules[id.index()].body = e;
        self.rules[id.index()].keep = true;
        self.leaves.entry(key).or_default().push(id);
        Ok(Expr::Rule(id))
    }

    /// Integers `n` as written where a schema's type is `integer`: as themselves, and with
    /// [`JsonSchemaOptions::integer_zero_fractions`](super::JsonSchemaOptions) also
    /// followed by a zero fraction (`6000.0`, `6000.00`).
    pub fn integral(&self, n: Expr) -> Expr {
        if !self.opts.integer_zero_fractions || is_nothing(&n) {
            return n;
        }
        let zeros = seq(vec![lit("."), Expr::Repeat { expr: Box::new(lit("0")), min: 1, max: None }]);
        seq(vec![n, Expr::Repeat { expr: Box::new(zeros), min: 0, max: Some(1) }])
    }

    /// Integers written with an exponent where a schema's type is `integer` and
    /// [`JsonSchemaOptions::integer_zero_fractions`](super::JsonSchemaOptions) is on: for
    /// an integer without bounds or `multipleOf`, those of at most
    /// [`EXPONENT_INTEGER_DIGITS`](super::number::EXPONENT_INTEGER_DIGITS) digits
    /// ([`exponent_integers`](super::number::exponent_integers)); with bounds, none (a
    /// bound over exponent spellings is not built).
    fn exponent_integral(&mut self, m: &Map<String, Value>) -> Result<Option<Expr>, SchemaError> {
        const BOUNDS: [&str; 5] =
            ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"];
        if !self.opts.integer_zero_fractions || BOUNDS.iter().any(|k| m.contains_key(*k)) {
            return Ok(None);
        }
        match super::number::exponent_integers(self.opts.numbers) {
            Some(e) => self.leaf_rule(e, "integer").map(Some),
            None => Ok(None),
        }
    }

    /// The integers in `lo..=hi`, placed as [`Builder::placed_number`] does. Built once per range: every plain `integer`
    /// is the same ~60-state i64 range, and building it, then hashing it to find its
    /// leaf rule, was a twentieth of a large Kubernetes schema's compile.
    pub fn int_range(&mut self, lo: Option<i128>, hi: Option<i128>) -> Result<Expr, SchemaError> {
        if let Some(e) = self.int_ranges.get(&(lo, hi)) {
            return Ok(e.clone());
        }
        let e = self.placed_number(super::number::signed_range(lo, hi))?;
        self.int_ranges.insert((lo, hi), e.clone());
        Ok(e)
    }

    /// A number expression as a leaf rule, or in place when small (`[1-5]` is cheaper
    /// written in place than called).
    fn placed_number(&mut self, n: Expr) -> Result<Expr, SchemaError> {
        if n.expanded_size() > 32 {
            self.leaf_rule(n, "number")
        } else {
            Ok(n)
        }
    }

    /// Any JSON string (with its quotes), as one rule per grammar.
    pub fn any_string(&mut self) -> Result<Expr, SchemaError> {
        if let Some(id) = self.string_rule {
            return Ok(Expr::Rule(id));
        }
        let id = self.new_rule("string", "")?;
        self.rules[id.index()].body = super::string::any_string();
        self.rules[id.index()].keep = true;
        self.string_rule = Some(id);
        Ok(Expr::Rule(id))
    }

    /// Any JSON value at `level`.
    pub fn any_value(&mut self, level: u32) -> Result<Expr, SchemaError> {
        let lv = self.memo_level(level);
        if let Some(&id) = self.any_memo.get(&lv) {
            return Ok(Expr::Rule(id));
        }
        self.check_level(level, "")?;
        let id = self.new_rule("any", "")?;
        self.any_memo.insert(lv, id);
        let inner = self.any_value(level + 1)?;
        let l = self.layout;
        let member = seq(vec![self.any_string()?, l.colon(), inner.clone()]);
        let list = |item: Expr| {
            seq(vec![
                item.clone(),
                Expr::Repeat { expr: Box::new(seq(vec![l.comma(level), item])), min: 0, max: None },
            ])
        };
        let obj =
            alt(vec![l.empty('{', '}'), seq(vec![l.open('{', level), list(member), l.close('}', level)])]);
        let arr =
            alt(vec![l.empty('[', ']'), seq(vec![l.open('[', level), list(inner), l.close(']', level)])]);
        let body = alt(vec![
            lit("null"),
            lit("true"),
            lit("false"),
            self.any_number()?,
            self.any_string()?,
            obj,
            arr,
        ]);
        self.rules[id.index()].body = body;
        Ok(Expr::Rule(id))
    }

    /// Converts one subschema at JSON pointer `ptr`, nested `level` containers deep.
    pub fn schema(&mut self, s: &Value, ptr: &str, level: u32) -> Result<Expr, SchemaError> {
        // A unit per subschema and per keyword in it: the conversion's own work (the
        // automata it builds for intersections charge theirs).
        let keywords = s.as_object().map_or(0, |o| o.len() as u64);
        crate::budget::charge(crate::budget::Phase::Conversion, 1 + keywords)
            .map_err(|e| self.err(SchemaErrorKind::Budget(Box::new(e)), ptr))?;
        self.depth += 1;
        if self.depth > self.opts.limits.max_depth {
            self.depth -= 1;
            return Err(self.err(
                SchemaErrorKind::Limit {
                    what: "schema nesting depth",
                    given: self.depth + 1,
                    limit: self.opts.limits.max_depth,
                },
                ptr,
            ));
        }
        let r = match s {
            Value::Bool(true) => self.any_value(level),
            Value::Bool(false) => Ok(nothing()),
            Value::Object(m) => self.map_schema(m, ptr, level),
            _ => Err(self.not_schema("a schema must be an object or a boolean", ptr)),
        };
        self.depth -= 1;
        r
    }

    /// A rule for the target of `reference`, shared by every use at the same level.
    pub fn ref_rule(&mut self, reference: &str, ptr: &str, level: u32) -> Result<Expr, SchemaError> {
        let target = self.resolver.resolve(self.root, reference, ptr)?;
        let key = (target.clone(), self.memo_level(level));
        if let Some(&id) = self.memo.get(&key) {
            return Ok(Expr::Rule(id));
        }
        let id = self.new_rule(target.rsplit('/').next().unwrap_or("ref"), ptr)?;
        self.memo.insert(key, id);
        let root = self.root;
        let v = root
            .pointer(&target)
            .ok_or_else(|| self.err(SchemaErrorKind::UnresolvableRef(reference.into()), ptr))?;
        let body = self.schema(v, &target, level)?;
        self.rules[id.index()].body = body;
        Ok(Expr::Rule(id))
    }

    /// Draft 4–7 documents, where a `$ref`'s siblings are ignored.
    pub fn ref_alone(&self) -> bool {
        self.ref_alone
    }

    fn map_schema(&mut self, m: &Map<String, Value>, ptr: &str, level: u32) -> Result<Expr, SchemaError> {
        // llguidance reads `x-guidance` at the root only (see `guidance`); elsewhere it
        // would be silently ignored, and several of its options narrow.
        if !ptr.is_empty() && m.contains_key("x-guidance") {
            return Err(self.err(
                SchemaErrorKind::Unsupported {
                    keyword: "x-guidance".into(),
                    detail: "options are read at the schema's root only".into(),
                },
                ptr,
            ));
        }
        // Finitely many values: every keyword is decided per value, before anything else
        // (a lone `$ref` is left to its target, which is converted once as a rule).
        let lone_ref = m.contains_key("$ref") && (self.ref_alone || m.len() == 1);
        if !lone_ref {
            if let Some(values) = super::finite::values(self, m, ptr) {
                return self.enum_values(&values, ALL_TYPES, &Map::new(), ptr, level);
            }
        }
        if let Some(rewritten) = combine::dependencies_as_all_of(self, m, ptr)? {
            return self.map_schema(&rewritten, ptr, level);
        }
        if let Some(r) = m.get("$ref") {
            let r = r.as_str().ok_or_else(|| self.not_schema("`$ref` must be a string", ptr))?;
            let siblings = !self.ref_alone
                && m.keys().any(|k| {
                    k != "$ref" && (ENFORCED.contains(&k.as_str()) || UNENFORCED.contains(&k.as_str()))
                });
            if !siblings {
                return self.ref_rule(r, ptr, level);
            }
        }
        if m.contains_key("$ref") || m.contains_key("allOf") {
            // One rule per distinct merged schema (references made absolute) and level:
            // a recursion through `allOf` (`Foo: {properties: {kids: {allOf: [{$ref:
            // Foo}, …]}}}`) refers back to its rule instead of being inlined until the
            // depth limit — as the same recursion behind a plain `$ref` does.
            let key = (
                combine::absolutize(self, &Value::Object(m.clone()), ptr).to_string(),
                self.memo_level(level),
            );
            if let Some(&id) = self.merged.get(&key) {
                return Ok(Expr::Rule(id));
            }
            let id = self.new_rule("merged", ptr)?;
            self.merged.insert(key, id);
            let body = match combine::merge_schema(self, m, ptr)? {
                Value::Object(mm) if mm.contains_key("allOf") || mm.contains_key("$ref") => {
                    return Err(self.not_schema("internal: allOf left after merging", ptr))
                }
                v => self.schema(&v, ptr, level)?,
            };
            self.rules[id.index()].body = body;
            return Ok(Expr::Rule(id));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = m.get(key) {
                let branches = branches
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| self.not_schema(format!("`{key}` must be a non-empty array"), ptr))?;
                let mut rest = m.clone();
                rest.remove(key);
                if key == "anyOf" {
                    if let Some(o) = rest.get("oneOf").cloned() {
                        // anyOf and oneOf together: apply oneOf inside each branch.
                        rest.remove("oneOf");
                        rest.insert(
                            "allOf".into(),
                            Value::Array(vec![Value::Object(
                                [("oneOf".to_string(), o)].into_iter().collect(),
                            )]),
                        );
                    }
                }
                let mut branches = branches.clone();
                let mut by_complement = false;
                if key == "oneOf" {
                    let exclusive = match one_of::exclusive(self, &rest, &branches, ptr) {
                        Exclusive::Exact(exact) => {
                            branches = exact;
                            None
                        }
                        other => Some(other),
                    };
                    // Overlapping branches: each one less the others, when their
                    // complement is exact (`not`); else as before.
                    let complemented = match exclusive {
                        Some(_) => self.one_of_by_complement(&rest, &branches, ptr)?,
                        None => None,
                    };
                    by_complement = complemented.is_some();
                    match (complemented, exclusive) {
                        (Some(c), _) => branches = c,
                        (None, None) => {}
                        (None, Some(Exclusive::Exact(_))) => {}
                        (None, Some(Exclusive::Narrowed(narrowed, required))) if self.opts.strict => {
                            for (i, req) in required.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
                                self.warnings.push(SchemaWarning {
                                    keyword: "oneOf".into(),
                                    pointer: format!("{ptr}/oneOf/{i}"),
                                    approximation: format!(
                                        "strict mode: objects of this branch carry {} (without, they may match several branches)",
                                        req.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
                                    ),
                                });
                            }
                            branches = narrowed;
                        }
                        (None, Some(_)) => self.unsupported(
                            "oneOf",
                            "the branches may overlap",
                            "built as anyOf (a value matching two branches is accepted)",
                            ptr,
                        )?,
                    }
                }
                let has_rest =
                    rest.keys().any(|k| ENFORCED.contains(&k.as_str()) || UNENFORCED.contains(&k.as_str()));
                let mut alts = Vec::new();
                for (i, b) in branches.iter().enumerate() {
                    let bptr = format!("{ptr}/{key}/{i}");
                    let e = if has_rest {
                        let parts = Value::Array(vec![Value::Object(rest.clone()), b.clone()]);
                        let mut mm = Map::new();
                        mm.insert("allOf".into(), parts);
                        combine::merge_schema(self, &mm, &bptr)
                            .and_then(|merged| self.schema(&merged, &bptr, level))
                    } else {
                        self.schema(b, &bptr, level)
                    };
                    let e = match e {
                        // A complement that turned out not to be exact where it landed:
                        // the `oneOf` stays what it was, an unsupported keyword.
                        Err(SchemaError {
                            kind: SchemaErrorKind::Unsupported { keyword, detail },
                            pointer,
                        }) if by_complement => {
                            return Err(self.err(
                                SchemaErrorKind::Unsupported {
                                    keyword: "oneOf".into(),
                                    detail: format!(
                                        "the branches may overlap, and excluding the others from each needs `{keyword}` at `{pointer}`: {detail}"
                                    ),
                                },
                                ptr,
                            ));
                        }
                        e => e?,
                    };
                    alts.push(e);
                }
                return Ok(alt(alts));
            }
        }
        self.typed(m, ptr, level)
    }

    /// A schema with no `$ref`/`allOf`/`anyOf`/`oneOf` left.
    fn typed(&mut self, m: &Map<String, Value>, ptr: &str, level: u32) -> Result<Expr, SchemaError> {
        for k in m.keys() {
            if UNENFORCED.contains(&k.as_str()) {
                self.unenforced(k, m, ptr)?;
            }
        }
        let mut types = declared_types(m, ptr)?;
        // Values a `not` leaves out (see `combine::apply_not`), and groups of string
        // keywords whose strings it leaves out.
        let mut not = Vec::new();
        let mut not_strings = Vec::new();
        if let Some(n) = m.get("not") {
            let nptr = format!("{ptr}/not");
            match combine::apply_not(self, n, m, types, &nptr)? {
                Some(ex) => (types, not, not_strings) = ex,
                None => return self.not_rewritten(n, m, types, ptr, level),
            }
        }
        let kept = |v: &&Value| !not.iter().any(|x| combine::same_value(v, x));
        if let Some(c) = m.get("const") {
            let vals: Vec<Value> = std::iter::once(c).filter(kept).cloned().collect();
            return self.enum_values(&vals, types, m, ptr, level);
        }
        if let Some(e) = m.get("enum") {
            let e = e.as_array().ok_or_else(|| self.not_schema("`enum` must be an array", ptr))?;
            let vals: Vec<Value> = e.iter().filter(kept).cloned().collect();
            return self.enum_values(&vals, types, m, ptr, level);
        }
        let mut alts = Vec::new();
        if types & NULL != 0 {
            alts.push(lit("null"));
        }
        if types & BOOLEAN != 0 {
            let bools: Vec<Expr> = [true, false]
                .into_iter()
                .filter(|b| !not.contains(&Value::Bool(*b)))
                .map(|b| lit(if b { "true" } else { "false" }))
                .collect();
            alts.push(alt(bools));
        }
        if types & (NUMBER | INTEGER) != 0 {
            let integer = types & NUMBER == 0;
            let n = super::number::build(self, m, integer, ptr)?;
            let n = self.placed_number(n)?;
            alts.push(if integer { self.integral(n) } else { n });
            if integer {
                if let Some(e) = self.exponent_integral(m)? {
                    alts.push(e);
                }
            }
        }
        if types & STRING != 0 {
            let not_in: Vec<&str> = not.iter().filter_map(Value::as_str).collect();
            alts.push(super::string::build(self, m, &not_in, &not_strings, ptr)?);
        }
        if types & ARRAY != 0 {
            alts.push(super::array::build(self, m, ptr, level)?);
        }
        if types & OBJECT != 0 {
            alts.push(super::object::build(self, m, ptr, level)?);
        }
        Ok(alt(alts))
    }

    /// `oneOf` branches that may overlap, each made exclusive by leaving out the others:
    /// `Bᵢ ∧ ¬(⋁ⱼ≠ᵢ Bⱼ)`, when every complement is exact ([`super::not::negate`]); `None`
    /// otherwise. (`rest`, the keywords beside the `oneOf`, narrows the types negated.)
    fn one_of_by_complement(
        &mut self,
        rest: &Map<String, Value>,
        branches: &[Value],
        ptr: &str,
    ) -> Result<Option<Vec<Value>>, SchemaError> {
        let outer = declared_types(rest, ptr)?;
        let mut out = Vec::with_capacity(branches.len());
        for (i, bi) in branches.iter().enumerate() {
            let bptr = format!("{ptr}/oneOf/{i}");
            let types = match bi {
                Value::Object(o) => outer & declared_types(o, &bptr)?,
                _ => outer,
            };
            let others: Vec<Value> =
                branches.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, x)| x.clone()).collect();
            let others = serde_json::json!({ "anyOf": others });
            let neg = match super::not::negate(self, &others, types, &bptr).and_then(|neg| match neg {
                Some(neg) if super::not::nested_exact(self, &neg, &bptr)? => Ok(Some(neg)),
                _ => Ok(None),
            }) {
                Ok(Some(neg)) => neg,
                Ok(None) => return Ok(None),
                Err(SchemaError { kind: SchemaErrorKind::Unsupported { .. }, .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            // The branch with the keywords beside it, its object closure written out: a
            // complement that declares members must not close it (strict mode).
            let both = [("allOf".to_string(), Value::Array(vec![Value::Object(rest.clone()), bi.clone()]))];
            let merged = match combine::merge_schema(self, &both.into_iter().collect(), &bptr) {
                Ok(Value::Object(mm)) if types & OBJECT != 0 => {
                    Value::Object(super::not::explicit_closure(self, &mm))
                }
                Ok(v) => v,
                Err(SchemaError { kind: SchemaErrorKind::Unsupported { .. }, .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            out.push(serde_json::json!({ "allOf": [merged, neg] }));
        }
        Ok(Some(out))
    }

    /// A `not` beyond types and values: the sibling keywords `m` and the complement of
    /// `n` among `types` as positive keywords ([`super::not::negate`]), merged. An
    /// unsupported keyword met while building the complement is reported as the `not`'s.
    fn not_rewritten(
        &mut self,
        n: &Value,
        m: &Map<String, Value>,
        types: u8,
        ptr: &str,
        level: u32,
    ) -> Result<Expr, SchemaError> {
        let nptr = format!("{ptr}/not");
        let unsupported = |b: &mut Self, detail: String| -> Result<Expr, SchemaError> {
            b.unsupported("not", &detail, "ignored", &nptr)?;
            let mut rest = m.clone();
            rest.remove("not");
            b.typed(&rest, ptr, level)
        };
        let Some(neg) = super::not::negate(self, n, types, &nptr)? else {
            return unsupported(
                self,
                "its complement is not exact here (only types, values, string keywords, number \
                 bounds, item counts, `items`, `contains`, `required`, `properties`, property \
                 counts, `additionalProperties: false` and `not`/`anyOf` of these are negated)"
                    .into(),
            );
        };
        let mut rest = if types & OBJECT != 0 { super::not::explicit_closure(self, m) } else { m.clone() };
        rest.remove("not");
        // At the same container level: a recursive schema meets its `not` again one level
        // down, after the characters that open the container.
        let key = format!("{n}\u{0}{}\u{0}{types}\u{0}{level}", Value::Object(rest.clone()));
        if !self.rewriting.insert(key.clone()) {
            return unsupported(self, "its complement rewrites into itself".into());
        }
        let all = serde_json::json!({ "allOf": [Value::Object(rest), neg] });
        let built = self.schema(&all, ptr, level);
        self.rewriting.remove(&key);
        match built {
            Err(SchemaError { kind: SchemaErrorKind::Unsupported { keyword, detail }, pointer }) => {
                unsupported(self, format!("its complement needs `{keyword}` at `{pointer}`: {detail}"))
            }
            r => r,
        }
    }

    fn unenforced(&mut self, k: &str, m: &Map<String, Value>, ptr: &str) -> Result<(), SchemaError> {
        // `true` (the schema that allows everything) may sit behind a `$ref`.
        let allows_all = |b: &mut Self| -> Result<bool, SchemaError> {
            let v = m.get(k).cloned().unwrap_or(Value::Bool(false));
            // (Merged from behind a `$ref`, `true` reads as `{}`.)
            Ok(match b.plain(&v, &format!("{ptr}/{k}"))? {
                Value::Bool(all) => all,
                Value::Object(m) => m.is_empty(),
                _ => false,
            })
        };
        if matches!(k, "unevaluatedProperties" | "unevaluatedItems") && allows_all(self)? {
            return Ok(());
        }
        match k {
            "uniqueItems" if m.get(k) == Some(&Value::Bool(false)) => Ok(()),
            "uniqueItems" if m.get("maxItems").and_then(Value::as_u64).is_some_and(|n| n <= 1) => Ok(()),
            "then" | "else" if !m.contains_key("if") => Ok(()),
            _ => self.unsupported(
                k,
                "not enforced by the grammar",
                "ignored: the grammar accepts values that break it",
                ptr,
            ),
        }
    }

    fn enum_values(
        &mut self,
        vals: &[Value],
        types: u8,
        m: &Map<String, Value>,
        ptr: &str,
        level: u32,
    ) -> Result<Expr, SchemaError> {
        if vals.len() > self.opts.limits.max_enum {
            return Err(self.err(
                SchemaErrorKind::Limit {
                    what: "enum values",
                    given: vals.len(),
                    limit: self.opts.limits.max_enum,
                },
                ptr,
            ));
        }
        let mut alts = Vec::new();
        for v in vals {
            let t = value_type(v);
            let ok = types & t != 0 || (t == INTEGER && types & NUMBER != 0);
            if ok
                && (!m.contains_key("enum") || !m.contains_key("const") || m.get("const") == Some(v))
                && combine::simple_check(m, v)
            {
                alts.push(match v {
                    // An object or array value is every document equal to it: members in
                    // any order, in the layout's whitespace, strings in every spelling —
                    // the schema that admits exactly it.
                    Value::Object(_) | Value::Array(_) => self.schema(&exactly(v), ptr, level)?,
                    Value::String(s) => self.spelled(s)?,
                    Value::Number(_) if types & NUMBER == 0 => {
                        let n = self.layout.literal(v, level, true);
                        self.integral(n)
                    }
                    _ => self.layout.literal(v, level, types & NUMBER == 0),
                });
            }
        }
        Ok(alt(alts))
    }

    /// Every JSON spelling of the string `s`, quotes included (an object key, an
    /// enumerated value): each character as itself where JSON lets it stand, or a call of
    /// the rule of its escapes (`\u006e` for `n`: one kept rule per character, shared by
    /// every key and value). Written in place, the escapes were five more DFA states per
    /// character, which took the largest Kubernetes schema from 30 to 300 ms to compile.
    pub fn spelled(&mut self, s: &str) -> Result<Expr, SchemaError> {
        let mut v = vec![lit("\"")];
        for c in s.chars() {
            let code = c as u32;
            let esc = match self.escapes.get(&c) {
                Some(e) => e.clone(),
                None => {
                    // (Every character has an escape spelling: `\uXXXX` at least.)
                    let e = match crate::regex::json_string_escapes(&[(code, code)]) {
                        Some(e) => self.leaf_rule(e, "esc")?,
                        None => nothing(),
                    };
                    self.escapes.insert(c, e.clone());
                    e
                }
            };
            let bare = !matches!(c, '"' | '\\') && code >= 0x20;
            v.push(if bare { Expr::Alt(vec![Expr::Literal(c.to_string()), esc]) } else { esc });
        }
        v.push(lit("\""));
        Ok(seq(v))
    }

    /// JSON pointer of a child: `ptr/kw/key`.
    pub fn child(ptr: &str, kw: &str, key: &str) -> String {
        format!("{ptr}/{kw}/{}", escape_token(key))
    }
}

/// The schema whose only instance is `v` (up to JSON equality): an object's members
/// required and alone, an array's items fixed, scalars as `const`.
fn exactly(v: &Value) -> Value {
    match v {
        Value::Object(m) => serde_json::json!({
            "type": "object",
            "properties": m.iter().map(|(k, x)| (k.clone(), exactly(x))).collect::<Map<String, Value>>(),
            "required": m.keys().collect::<Vec<_>>(),
            "additionalProperties": false,
        }),
        Value::Array(a) => serde_json::json!({
            "type": "array",
            "prefixItems": a.iter().map(exactly).collect::<Vec<_>>(),
            "items": false,
            "minItems": a.len(),
        }),
        scalar => serde_json::json!({ "const": scalar }),
    }
}

#[cfg(test)]
mod tests {
    use crate::json_schema::{json_schema_str_to_grammar, JsonSchemaOptions};

    /// Values written in many places are one rule each, not copies: plain strings, any
    /// number, and a large array item (first item and repetition).
    #[test]
    fn repeated_values_are_shared_rules() {
        let s = r#"{"type":"object","properties":{
            "a":{"type":"string"},"b":{"type":"string"},"x":{"type":"number"},"y":{"type":"number"},
            "c":{"type":"string","maxLength":20},
            "list":{"type":"array","items":{"enum":["north","v1","v2","v3","v4","v5","v6","v7","v8","v9",
                "v10","v11","v12","v13","v14","v15","v16","v17","v18","v19","v20","v21","v22","v23","v24",
                "v25","v26","v27","v28","v29","v30","v31","v32","v33","v34","v35","v36","v37","v38","v39"]}},
            "obj":{"type":"object","properties":{"c2":{"type":"string","maxLength":20}}},
            "i":{"type":"integer"},"j":{"type":"integer"},"k":{"type":"integer","minimum":1,"maximum":5}}}"#;
        let g = json_schema_str_to_grammar(s, &JsonSchemaOptions::default()).unwrap();
        let named = |suffix: &str| g.rules.iter().filter(|r| r.name.ends_with(suffix)).count();
        // Strings: the plain one, and one for `{"maxLength": 20}` written twice. Numbers:
        // any number, and the i64 range of both plain integers (`[1-5]` stays in place).
        assert_eq!((named("_string"), named("_number"), named("_item")), (2, 2, 1), "{g}");
        // (The i64 range writes `[0-9]{17}` once per sign.)
        assert_eq!(g.to_string().matches("[0-9]{17}").count(), 2, "{g}");
        let text = g.to_string();
        let item = g.rules.iter().find(|r| r.name.ends_with("_item")).unwrap();
        // Its definition and the two references (first item, repetition).
        assert_eq!(text.matches(item.name.as_str()).count(), 3, "{g}");
        // The item's body is written once, in its own rule.
        assert_eq!(text.matches(r#"("n" | r9_esc) ("o" | r10_esc)"#).count(), 1, "{g}");
    }
}
