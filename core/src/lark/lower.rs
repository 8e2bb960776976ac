//! Syntax tree → grammar IR.
//!
//! - A terminal (an UPPERCASE definition, an `%import`ed name, or a string, range or
//!   regex written in a rule) is a regular expression: an [`Expr`] without rule
//!   references, built by inlining the terminals it names. `&` becomes [`Expr::And`].
//!   Each named terminal also gets a rule of its own (named like it), which rules call.
//! - A rule (a lowercase definition) becomes a rule; every terminal it uses is a lexeme,
//!   preceded by the `%ignore` rule `Ignore` (`skip*`, or `skip?` under
//!   `"ignore_once"`).
//! - `%json {…}` is compiled by [`crate::json_schema`] with llguidance's JSON defaults
//!   and its rules are added renamed `Json<n>_<name>`; nothing is skipped before it.
//! - llguidance skips text only *between* lexemes: never after the last one, and not
//!   before the first unless `"allow_initial_skip"`. "Before every lexeme" is the
//!   allow-initial-skip language; without it, the root is `First_start` (or `start`
//!   also matching the empty string): for every rule that can begin the text, a copy
//!   `First_<rule>` whose first lexeme has no `Ignore` before it ([`Lower::first`]).
//!
//! Only rules and terminals reachable from `start` (and `%ignore`) are lowered, as
//! llguidance compiles them: a fault in an unused definition is not an error. Names
//! made up here mix cases (`Ignore`, `First_…`, `Json1_…`), which no Lark name can.
//!
//! Recursion follows the nesting of one definition (bounded by the parser) and chains
//! of terminal references (bounded by [`LarkLimits::max_nesting`]); rule references are
//! queued, so a long chain of rules costs no stack.

use super::error::{LarkError, LarkErrorKind};
use super::parse::{Alts, Ast, Atom, Attrs, Item, Item1, RuleDef, Value};
use super::rx::regex_expr;
use super::{common, LarkLimits};
use crate::grammar::{Expr, Grammar, Rule, RuleId};
use crate::json_schema::{json_schema_to_grammar, JsonSchemaOptions, PropertyOrder, Whitespace};
use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::Value as Json;

type R<T> = Result<T, LarkError>;

/// Where a terminal's definition comes from.
enum TermSrc {
    Def(Alts),
    /// `%import common.NAME`: the regex, and where the import is.
    Common(&'static str, usize),
}

/// `%llguidance` options that change the language.
#[derive(Default)]
struct Options {
    ignore_once: bool,
    allow_initial_skip: bool,
}

struct Lower<'a> {
    src: &'a str,
    limits: &'a LarkLimits,
    rule_defs: FxHashMap<String, RuleDef>,
    term_defs: FxHashMap<String, TermSrc>,
    /// Every name defined as a rule (kept after its definition is taken).
    rule_names: FxHashSet<String>,
    out: Vec<Rule>,
    rule_ids: FxHashMap<String, RuleId>,
    queue: Vec<(RuleId, RuleDef)>,
    term_exprs: FxHashMap<String, Expr>,
    term_rules: FxHashMap<String, RuleId>,
    in_progress: FxHashSet<String>,
    /// Terminal references being expanded, for the depth bound.
    depth: usize,
    /// The `Ignore` rule, if the grammar has `%ignore`.
    ignore: Option<RuleId>,
    json_count: usize,
    /// Per rule: matches the empty string (filled before [`Lower::first`] runs).
    nullable: Vec<bool>,
    /// Rule → its `First_` copy.
    first_rules: FxHashMap<RuleId, RuleId>,
    /// `(rule, copy)` pairs whose copy's body is still to be built.
    first_queue: Vec<(RuleId, RuleId)>,
    /// Rules made of Lark rules' text (the Lark rules, their `First_`/`Last_` copies
    /// and the pieces split off them).
    lark_rules: FxHashSet<RuleId>,
    /// Rule → its `Last_` copy.
    last_rules: FxHashMap<RuleId, RuleId>,
    /// `(rule, copy)` pairs whose `Last_` copy's body is still to be built.
    last_queue: Vec<(RuleId, RuleId)>,
}

pub(crate) fn lower(src: &str, ast: Ast, limits: &LarkLimits) -> R<Grammar> {
    let mut l = Lower {
        src,
        limits,
        rule_defs: FxHashMap::default(),
        term_defs: FxHashMap::default(),
        rule_names: FxHashSet::default(),
        out: Vec::new(),
        rule_ids: FxHashMap::default(),
        queue: Vec::new(),
        term_exprs: FxHashMap::default(),
        term_rules: FxHashMap::default(),
        in_progress: FxHashSet::default(),
        depth: 0,
        ignore: None,
        json_count: 0,
        nullable: Vec::new(),
        first_rules: FxHashMap::default(),
        first_queue: Vec::new(),
        lark_rules: FxHashSet::default(),
        last_rules: FxHashMap::default(),
        last_queue: Vec::new(),
    };
    let mut ignores = Vec::new();
    let mut options = Options::default();
    for item in ast.items {
        match item {
            Item::Rule(r) => {
                if l.rule_defs.contains_key(&r.name) {
                    return Err(l.err(r.at, LarkErrorKind::DuplicateName(r.name)));
                }
                l.rule_names.insert(r.name.clone());
                l.rule_defs.insert(r.name.clone(), r);
            }
            Item::Terminal(t) => {
                if l.term_defs.contains_key(&t.name) {
                    return Err(l.err(t.at, LarkErrorKind::DuplicateName(t.name)));
                }
                l.term_defs.insert(t.name, TermSrc::Def(t.body));
            }
            Item::Ignore(alts) => ignores.push(alts),
            Item::Import { at, names } => {
                for (path, local) in names {
                    let regex = path
                        .strip_prefix("common.")
                        .and_then(common::lookup)
                        .ok_or_else(|| l.err(at, LarkErrorKind::UnknownImport(path.clone())))?;
                    if l.term_defs.contains_key(&local) {
                        return Err(l.err(at, LarkErrorKind::DuplicateName(local)));
                    }
                    l.term_defs.insert(local, TermSrc::Common(regex, at));
                }
            }
            Item::LlGuidance { at, options: json } => l.options(at, &json, &mut options)?,
        }
    }
    if !l.rule_defs.contains_key("start") {
        return Err(LarkError::global(LarkErrorKind::NoStartRule));
    }
    if !ignores.is_empty() {
        let mut skips = Vec::with_capacity(ignores.len());
        for alts in &ignores {
            skips.push(l.term_alts(alts)?);
        }
        let skip = if skips.len() == 1 { skips.pop().unwrap_or(Expr::Empty) } else { Expr::Alt(skips) };
        l.check_size(&skip, ignores[0].at)?;
        let body = Expr::Repeat {
            expr: Box::new(skip),
            min: 0,
            max: if options.ignore_once { Some(1) } else { None },
        };
        l.ignore = Some(l.push_rule("Ignore".into(), body)?);
    }
    let start = l.rule_ref("start")?.ok_or_else(|| LarkError::global(LarkErrorKind::NoStartRule))?;
    while let Some((id, def)) = l.queue.pop() {
        let body = l.rule_body(def)?;
        l.out[id.index()].body = body;
    }
    let root = match l.ignore {
        Some(ign) => l.skip_root(start, ign, options.allow_initial_skip)?,
        None => start,
    };
    Ok(Grammar { rules: l.out, root, markers: Vec::new() })
}

impl Lower<'_> {
    fn err(&self, at: usize, kind: LarkErrorKind) -> LarkError {
        LarkError::at(self.src, at, kind)
    }

    fn push_rule(&mut self, name: String, body: Expr) -> R<RuleId> {
        if self.out.len() >= self.limits.max_rules {
            return Err(LarkError::global(LarkErrorKind::TooLarge {
                what: "rules",
                given: self.out.len() + 1,
                limit: self.limits.max_rules,
            }));
        }
        self.out.push(Rule::new(name, body));
        Ok(RuleId(self.out.len() as u32 - 1))
    }

    /// `%llguidance {…}`: an object whose known options must be booleans (unknown ones
    /// are ignored, as llguidance ignores them); several are merged.
    fn options(&self, at: usize, json: &Json, options: &mut Options) -> R<()> {
        let Some(obj) = json.as_object() else {
            return Err(self.err(at, LarkErrorKind::BadJson("%llguidance takes a JSON object".into())));
        };
        for (k, v) in obj {
            let flag = match k.as_str() {
                "ignore_once" => &mut options.ignore_once,
                "allow_initial_skip" => &mut options.allow_initial_skip,
                // No language meaning here: forcing is a decoding choice, and invalid
                // UTF-8 can only come from `~` negation, which is not supported.
                "no_forcing" | "allow_invalid_utf8" => &mut false,
                _ => continue,
            };
            match v.as_bool() {
                Some(b) => *flag |= b,
                None => {
                    let msg = format!("%llguidance option `{k}` must be true or false");
                    return Err(self.err(at, LarkErrorKind::BadJson(msg)));
                }
            }
        }
        Ok(())
    }

    // ---- rules ----

    /// The rule `name`, allocated (and queued for lowering) on first use; `None` if no
    /// rule has that name.
    fn rule_ref(&mut self, name: &str) -> R<Option<RuleId>> {
        if let Some(&id) = self.rule_ids.get(name) {
            return Ok(Some(id));
        }
        let Some(def) = self.rule_defs.remove(name) else { return Ok(None) };
        let id = self.push_rule(name.to_string(), Expr::Empty)?;
        self.rule_ids.insert(name.to_string(), id);
        self.lark_rules.insert(id);
        self.queue.push((id, def));
        Ok(Some(id))
    }

    fn rule_body(&mut self, def: RuleDef) -> R<Expr> {
        let RuleDef { name, at, attrs, body } = def;
        let Attrs { lazy, stop, suffix, max_tokens, temperature, stop_capture } = attrs;
        if max_tokens == Some(0) {
            // llguidance: at most zero tokens, so only the empty string.
            return Ok(Expr::Empty);
        }
        if lazy || stop.is_some() || suffix.is_some() {
            return Err(self.err(
                at,
                LarkErrorKind::Unsupported(format!(
                    "rule `{name}`: `lazy`, `stop` and `suffix` make a terminal match as little as \
                     possible (or hide text from the model), which grammask's grammars cannot express"
                )),
            ));
        }
        if stop_capture {
            let kind = LarkErrorKind::Expected {
                expected: "`stop=` or `suffix=` with `stop_capture=`".into(),
                found: "neither".into(),
            };
            return Err(self.err(at, kind));
        }
        if max_tokens.is_some() {
            return Err(self.err(
                at,
                LarkErrorKind::Unsupported(format!(
                    "rule `{name}`: `max_tokens` limits LLM tokens, which a grammar over text cannot count"
                )),
            ));
        }
        if temperature {
            // llguidance compiles such a rule as one lexeme (unless it is a lone
            // `%json`): no `%ignore` inside it. Temperature itself is a sampling choice.
            if !matches!(single_value(&body), Some(Value::Json(_))) {
                let e = self.term_alts(&body)?;
                self.check_size(&e, at)?;
                return Ok(self.lexeme(e));
            }
        }
        self.rule_alts(&body)
    }

    fn rule_alts(&mut self, alts: &Alts) -> R<Expr> {
        let mut out = Vec::with_capacity(alts.alts.len());
        for alt in &alts.alts {
            if alt.conjuncts.len() > 1 {
                return Err(self.err(alt.at, LarkErrorKind::AndInRule));
            }
            let mut seq = Vec::new();
            for it in alt.conjuncts.iter().flatten() {
                seq.push(self.rule_item(it)?);
            }
            out.push(seq_of(seq));
        }
        Ok(alt_of(out))
    }

    fn rule_item(&mut self, it: &Item1) -> R<Expr> {
        let e = self.rule_atom(&it.atom)?;
        Ok(repeat(e, it.repeat))
    }

    fn rule_atom(&mut self, atom: &Atom) -> R<Expr> {
        match atom {
            Atom::Group(a) => self.rule_alts(a),
            Atom::Maybe(a) => Ok(repeat(self.rule_alts(a)?, (0, Some(1)))),
            // A negation is a terminal (and rejected there).
            Atom::Not(..) => {
                let e = self.term_atom(atom)?;
                Ok(self.lexeme(e))
            }
            Atom::Value(v, at) => {
                let at = *at;
                match v {
                    Value::Name(n) => {
                        if let Some(id) = self.rule_ref(n)? {
                            return Ok(Expr::Rule(id));
                        }
                        let id = self.term_rule(n, at)?;
                        Ok(self.lexeme(Expr::Rule(id)))
                    }
                    Value::SpecialToken(s) => Err(self.err(
                        at,
                        LarkErrorKind::Unsupported(format!(
                            "special token {s}: grammask's grammars match text, never token ids"
                        )),
                    )),
                    Value::GrammarRef(g) => Err(self.err(
                        at,
                        LarkErrorKind::Unsupported(format!(
                            "grammar reference {g}: a Lark grammar is compiled on its own here"
                        )),
                    )),
                    // A nested grammar: llguidance skips nothing before its first lexeme.
                    Value::Json(schema) => self.json(schema, at),
                    // An empty string is no lexeme at all (llguidance's special case).
                    Value::Str(s, _) if s.is_empty() => Ok(Expr::Empty),
                    Value::Str(..) | Value::Range(..) | Value::Regex(..) | Value::RegexExt(_) => {
                        let e = self.term_value(v, at)?;
                        self.check_size(&e, at)?;
                        Ok(self.lexeme(e))
                    }
                }
            }
        }
    }

    /// A lexeme in a rule: what `%ignore` skips, then the terminal.
    fn lexeme(&self, e: Expr) -> Expr {
        match self.ignore {
            Some(ign) => Expr::Seq(vec![Expr::Rule(ign), e]),
            None => e,
        }
    }

    /// `%json {…}`: a JSON value as llguidance's JSON compiler writes it by default —
    /// any JSON whitespace between its tokens but none before the first (llguidance
    /// skips nothing before a grammar's first lexeme) nor after the last (the enclosing
    /// grammar's `%ignore` applies there), members in the schema's order, undeclared
    /// members allowed unless the schema says otherwise.
    fn json(&mut self, schema: &Json, at: usize) -> R<Expr> {
        let options = JsonSchemaOptions {
            whitespace: Whitespace::Any { max: u32::MAX },
            strict: false,
            property_order: PropertyOrder::Schema,
            ..Default::default()
        };
        let mut g = json_schema_to_grammar(schema, &options)
            .map_err(|e| self.err(at, LarkErrorKind::Schema(Box::new(e))))?;
        strip_outer_whitespace(&mut g);
        if self.out.len() + g.rules.len() > self.limits.max_rules {
            return Err(self.err(
                at,
                LarkErrorKind::TooLarge {
                    what: "rules",
                    given: self.out.len() + g.rules.len(),
                    limit: self.limits.max_rules,
                },
            ));
        }
        self.json_count += 1;
        Ok(g.append_to(&mut self.out, &format!("Json{}_", self.json_count)))
    }

    // ---- no skip before the first lexeme ----

    /// The root of a grammar with `%ignore`, where every lexeme has `Ignore` before it:
    /// - `start`, plus `Last_start` (the same texts and a trailing skip, when the last
    ///   lexeme is one that can be followed by a lexeme — see [`Lower::followable`]);
    /// - unless `allow_initial_skip`, without the skip before the first lexeme
    ///   (`First_…`, and `""` when `start` matches it);
    /// - with `allow_initial_skip`, also a skip alone when `start` matches `""` and can
    ///   begin with a lexeme (llguidance skips wherever a lexeme could follow).
    fn skip_root(&mut self, start: RuleId, ign: RuleId, allow_initial_skip: bool) -> R<RuleId> {
        self.nullable = nullable_rules(&self.out);
        let follow = self.followable(start, ign);
        let mut alts = vec![Expr::Rule(start)];
        if !follow.is_empty() {
            let last = self.last_rule(start)?;
            while let Some((rule, copy)) = self.last_queue.pop() {
                let body = self.out[rule.index()].body.clone();
                let b = self.last(&body, &follow)?;
                self.out[copy.index()].body = b;
            }
            alts.push(Expr::Rule(last));
        }
        let start_nullable = self.nullable[start.index()];
        if allow_initial_skip {
            if start_nullable && self.begins(&Expr::Rule(start), &mut FxHashSet::default()) {
                alts.push(Expr::Rule(ign));
            }
            return self.push_rule("Root".into(), alt_of(alts));
        }
        let mut body = self.first(&alt_of(alts))?;
        while let Some((rule, copy)) = self.first_queue.pop() {
            let b = self.out[rule.index()].body.clone();
            let b = self.first(&b)?;
            self.out[copy.index()].body = b;
        }
        if start_nullable {
            body = Expr::Alt(vec![body, Expr::Empty]);
        }
        self.push_rule("Root".into(), body)
    }

    /// Whether `e` can begin with a lexeme (`visiting` breaks cycles through rules). A
    /// chain of rules deeper than the stack should go answers yes, which only allows more
    /// skips (the direction this front-end errs in).
    fn begins(&self, e: &Expr, visiting: &mut FxHashSet<RuleId>) -> bool {
        self.begins_at(e, visiting, 0)
    }

    fn begins_at(&self, e: &Expr, visiting: &mut FxHashSet<RuleId>, depth: usize) -> bool {
        if depth > MAX_BEGINS_DEPTH {
            return true;
        }
        let ign = self.ignore.map(Expr::Rule);
        match e {
            Expr::Seq(v) if v.len() == 2 && Some(&v[0]) == ign.as_ref() => true,
            Expr::Seq(v) => {
                for x in v {
                    if self.begins_at(x, visiting, depth) {
                        return true;
                    }
                    if !self.is_nullable(x) {
                        return false;
                    }
                }
                false
            }
            Expr::Alt(v) => v.iter().any(|x| self.begins_at(x, visiting, depth)),
            Expr::Repeat { expr, max, .. } => *max != Some(0) && self.begins_at(expr, visiting, depth),
            Expr::Rule(r) if self.lark_rules.contains(r) => {
                visiting.insert(*r) && self.begins_at(&self.out[r.index()].body, visiting, depth + 1)
            }
            _ => false,
        }
    }

    /// The lexemes (by their terminal expression; `%json` values by their rule) that a
    /// lexeme can follow somewhere in the grammar. llguidance allows a trailing skip
    /// when a lexeme could come next *after the text read*; this per-terminal answer is
    /// a superset of that (exact when a terminal can either always or never be
    /// followed), so texts llguidance accepts stay accepted.
    fn followable(&self, start: RuleId, ign: RuleId) -> FxHashSet<Expr> {
        // Per rule: can a lexeme follow it. Monotone; each rule is walked again only
        // when its answer turns true.
        let mut rule_follow: FxHashMap<RuleId, bool> = FxHashMap::default();
        let mut out = FxHashSet::default();
        let mut work: Vec<RuleId> = self.lark_rules.iter().copied().collect();
        rule_follow.insert(start, false);
        let mut begins_cache: FxHashMap<RuleId, bool> = FxHashMap::default();
        while let Some(r) = work.pop() {
            let after = rule_follow.get(&r).copied().unwrap_or(false);
            let mut newly = Vec::new();
            self.follow_walk(
                &self.out[r.index()].body,
                after,
                ign,
                &mut out,
                &mut rule_follow,
                &mut newly,
                &mut begins_cache,
            );
            work.extend(newly);
        }
        out
    }

    /// One body: `after` says whether a lexeme can follow `e`.
    #[allow(clippy::too_many_arguments)]
    fn follow_walk(
        &self,
        e: &Expr,
        after: bool,
        ign: RuleId,
        out: &mut FxHashSet<Expr>,
        rule_follow: &mut FxHashMap<RuleId, bool>,
        newly: &mut Vec<RuleId>,
        cache: &mut FxHashMap<RuleId, bool>,
    ) {
        let begins = |x: &Expr, cache: &mut FxHashMap<RuleId, bool>| match x {
            Expr::Rule(r) if self.lark_rules.contains(r) => {
                *cache.entry(*r).or_insert_with(|| self.begins(x, &mut FxHashSet::default()))
            }
            _ => self.begins(x, &mut FxHashSet::default()),
        };
        if let Expr::Seq(v) = e {
            if v.len() == 2 && v[0] == Expr::Rule(ign) {
                // A lexeme.
                if after {
                    out.insert(v[1].clone());
                }
                return;
            }
        }
        match e {
            Expr::Seq(v) => {
                let mut a = after;
                for x in v.iter().rev() {
                    self.follow_walk(x, a, ign, out, rule_follow, newly, cache);
                    a = begins(x, cache) || (self.is_nullable(x) && a);
                }
            }
            Expr::Alt(v) => {
                v.iter().for_each(|x| self.follow_walk(x, after, ign, out, rule_follow, newly, cache))
            }
            Expr::Repeat { expr, max, .. } => {
                let again = !matches!(max, Some(m) if *m < 2) && begins(expr, cache);
                self.follow_walk(expr, after || again, ign, out, rule_follow, newly, cache);
            }
            Expr::Rule(r) if self.lark_rules.contains(r) => {
                let known = rule_follow.get(r).copied().unwrap_or(false);
                if after && !known {
                    rule_follow.insert(*r, true);
                    newly.push(*r);
                }
            }
            // A `%json` value.
            Expr::Rule(r) if *r != ign && after => {
                out.insert(e.clone());
            }
            _ => {}
        }
    }

    fn last_rule(&mut self, r: RuleId) -> R<RuleId> {
        if let Some(&f) = self.last_rules.get(&r) {
            return Ok(f);
        }
        let name = format!("Last_{}", self.out[r.index()].name);
        let f = self.push_rule(name, nothing())?;
        self.nullable.push(false);
        self.lark_rules.insert(f);
        self.last_rules.insert(r, f);
        self.last_queue.push((r, f));
        Ok(f)
    }

    /// The texts of `e` whose last lexeme is in `follow`, with a skip after it.
    fn last(&mut self, e: &Expr, follow: &FxHashSet<Expr>) -> R<Expr> {
        let ign = self.ignore.map(Expr::Rule);
        let Some(ign) = ign else { return Ok(nothing()) };
        Ok(match e {
            Expr::Seq(v) if v.len() == 2 && v[0] == ign => {
                if follow.contains(&v[1]) {
                    Expr::Seq(vec![e.clone(), ign])
                } else {
                    nothing()
                }
            }
            // Split long sequences so heads are cloned a bounded number of times.
            Expr::Seq(v) if v.len() > MAX_FIRST_SEQ => {
                let split = v.len() - (MAX_FIRST_SEQ - 1);
                let head = Expr::Seq(v[..split].to_vec());
                let head_nullable = self.is_nullable(&head);
                let h = self.push_rule(format!("Head{}", self.out.len()), head)?;
                self.nullable.push(head_nullable);
                self.lark_rules.insert(h);
                let mut s = vec![Expr::Rule(h)];
                s.extend(v[split..].iter().cloned());
                self.last(&Expr::Seq(s), follow)?
            }
            // The last lexeme is in element `i`; all after it matched nothing.
            Expr::Seq(v) => {
                let mut alts = Vec::new();
                for (i, x) in v.iter().enumerate().rev() {
                    let mut s: Vec<Expr> = v[..i].to_vec();
                    s.push(self.last(x, follow)?);
                    alts.push(seq_of(s));
                    if !self.is_nullable(x) {
                        break;
                    }
                }
                alt_of_or_nothing(alts)
            }
            Expr::Alt(v) => {
                let mut alts = Vec::with_capacity(v.len());
                for x in v {
                    alts.push(self.last(x, follow)?);
                }
                alt_of_or_nothing(alts)
            }
            // Rounds, then the last non-empty one.
            Expr::Repeat { expr, min, max } => {
                if *max == Some(0) {
                    return Ok(nothing());
                }
                let lo = if self.is_nullable(expr) { 0 } else { min.saturating_sub(1) };
                let hi = max.map(|m| m - 1);
                let before = if hi == Some(0) { Expr::Empty } else { repeat((**expr).clone(), (lo, hi)) };
                seq_of(vec![before, self.last(expr, follow)?])
            }
            Expr::Rule(r) if self.lark_rules.contains(r) => Expr::Rule(self.last_rule(*r)?),
            // A `%json` value.
            Expr::Rule(r) if Expr::Rule(*r) != ign && follow.contains(e) => Expr::Seq(vec![e.clone(), ign]),
            _ => nothing(),
        })
    }

    fn first_rule(&mut self, r: RuleId) -> R<RuleId> {
        if let Some(&f) = self.first_rules.get(&r) {
            return Ok(f);
        }
        let name = format!("First_{}", self.out[r.index()].name);
        let f = self.push_rule(name, nothing())?;
        self.nullable.push(false);
        self.lark_rules.insert(f);
        self.first_rules.insert(r, f);
        self.first_queue.push((r, f));
        Ok(f)
    }

    fn is_nullable(&self, e: &Expr) -> bool {
        expr_nullable(e, &self.nullable)
    }

    /// The texts of `e` that contain a lexeme, without the `Ignore` before the first.
    /// (Texts without a lexeme are empty: what a rule skips always precedes a lexeme.)
    fn first(&mut self, e: &Expr) -> R<Expr> {
        let ign = self.ignore.map(Expr::Rule);
        Ok(match e {
            // A lexeme.
            Expr::Seq(v) if v.len() == 2 && Some(&v[0]) == ign.as_ref() => v[1].clone(),
            // Long sequences are split so that the tails below are cloned a bounded
            // number of times: `a b c … z` → `a … g Tail`, `Tail ::= h … z`.
            Expr::Seq(v) if v.len() > MAX_FIRST_SEQ => {
                let keep = MAX_FIRST_SEQ - 1;
                let tail = Expr::Seq(v[keep..].to_vec());
                let tail_nullable = self.is_nullable(&tail);
                let name = format!("Tail{}", self.out.len());
                let t = self.push_rule(name, tail)?;
                self.nullable.push(tail_nullable);
                self.lark_rules.insert(t);
                let mut head = v[..keep].to_vec();
                head.push(Expr::Rule(t));
                self.first(&Expr::Seq(head))?
            }
            // The first lexeme is in element `i`, all before it matched nothing.
            Expr::Seq(v) => {
                let mut alts = Vec::new();
                for (i, x) in v.iter().enumerate() {
                    let mut s = vec![self.first(x)?];
                    s.extend(v[i + 1..].iter().cloned());
                    alts.push(seq_of(s));
                    if !self.is_nullable(x) {
                        break;
                    }
                }
                alt_of_or_nothing(alts)
            }
            Expr::Alt(v) => {
                let mut alts = Vec::with_capacity(v.len());
                for x in v {
                    alts.push(self.first(x)?);
                }
                alt_of_or_nothing(alts)
            }
            // The first non-empty round, then the rest of the rounds.
            Expr::Repeat { expr, min, max } => {
                if *max == Some(0) {
                    return Ok(nothing());
                }
                let lo = if self.is_nullable(expr) { 0 } else { min.saturating_sub(1) };
                let hi = max.map(|m| m - 1);
                let rest = if hi == Some(0) { Expr::Empty } else { repeat((**expr).clone(), (lo, hi)) };
                seq_of(vec![self.first(expr)?, rest])
            }
            Expr::Rule(r) if self.lark_rules.contains(r) => Expr::Rule(self.first_rule(*r)?),
            // A trailing skip alone holds no lexeme.
            Expr::Rule(r) if Some(*r) == self.ignore => nothing(),
            // A `%json` value: nothing is skipped before it anyway.
            Expr::Rule(_) => e.clone(),
            Expr::Empty => nothing(),
            Expr::Literal(s) if s.is_empty() => nothing(),
            // (Lark's lowering writes no character automata; one would be a lexeme.)
            Expr::Literal(_) | Expr::Class(_) | Expr::And(_) | Expr::Dfa(_) => e.clone(),
        })
    }

    // ---- terminals ----

    /// The rule holding named terminal `name` (created on first use).
    fn term_rule(&mut self, name: &str, at: usize) -> R<RuleId> {
        if let Some(&id) = self.term_rules.get(name) {
            return Ok(id);
        }
        let e = self.term_named(name, at)?;
        let id = self.push_rule(name.to_string(), e)?;
        self.term_rules.insert(name.to_string(), id);
        Ok(id)
    }

    /// Named terminal `name` as an expression (memoized).
    fn term_named(&mut self, name: &str, at: usize) -> R<Expr> {
        if let Some(e) = self.term_exprs.get(name) {
            return Ok(e.clone());
        }
        if self.in_progress.contains(name) {
            return Err(self.err(at, LarkErrorKind::RecursiveTerminal(name.to_string())));
        }
        let Some(src) = self.term_defs.remove(name) else {
            let kind = if self.rule_names.contains(name) {
                LarkErrorKind::NotInTerminal(format!("rule `{name}`"))
            } else {
                LarkErrorKind::UndefinedName(name.to_string())
            };
            return Err(self.err(at, kind));
        };
        if self.depth >= self.limits.max_nesting {
            return Err(self.err(at, LarkErrorKind::TooDeep(self.limits.max_nesting)));
        }
        self.depth += 1;
        self.in_progress.insert(name.to_string());
        let e = match &src {
            TermSrc::Def(alts) => self.term_alts(alts),
            TermSrc::Common(rx, at) => regex_expr(rx, 64).map_err(|k| self.err(*at, k)),
        };
        self.in_progress.remove(name);
        self.depth -= 1;
        let e = e?;
        let def_at = match &src {
            TermSrc::Def(alts) => alts.at,
            TermSrc::Common(_, at) => *at,
        };
        self.check_size(&e, def_at)?;
        self.term_exprs.insert(name.to_string(), e.clone());
        Ok(e)
    }

    fn check_size(&self, e: &Expr, at: usize) -> R<()> {
        let size = e.expanded_size();
        if size > self.limits.max_terminal_size as u64 {
            return Err(self.err(
                at,
                LarkErrorKind::TooLarge {
                    what: "terminal size (expression nodes, repetitions expanded)",
                    given: usize::try_from(size).unwrap_or(usize::MAX),
                    limit: self.limits.max_terminal_size,
                },
            ));
        }
        Ok(())
    }

    fn term_alts(&mut self, alts: &Alts) -> R<Expr> {
        let mut out = Vec::with_capacity(alts.alts.len());
        let mut size = 0usize;
        for alt in &alts.alts {
            let mut conj = Vec::with_capacity(alt.conjuncts.len());
            for items in &alt.conjuncts {
                let mut seq = Vec::with_capacity(items.len());
                for it in items {
                    let e = repeat(self.term_atom(&it.atom)?, it.repeat);
                    // Checked as the terminal grows, so inlining cannot run away.
                    size = size.saturating_add(usize::try_from(e.expanded_size()).unwrap_or(usize::MAX));
                    if size > self.limits.max_terminal_size {
                        self.check_size(&e, it.at)?;
                        return Err(self.err(
                            it.at,
                            LarkErrorKind::TooLarge {
                                what: "terminal size (expression nodes, repetitions expanded)",
                                given: size,
                                limit: self.limits.max_terminal_size,
                            },
                        ));
                    }
                    seq.push(e);
                }
                conj.push(seq_of(seq));
            }
            out.push(if conj.len() == 1 { conj.pop().unwrap_or(Expr::Empty) } else { Expr::And(conj) });
        }
        Ok(alt_of(out))
    }

    fn term_atom(&mut self, atom: &Atom) -> R<Expr> {
        match atom {
            Atom::Group(a) => self.term_alts(a),
            Atom::Maybe(a) => Ok(repeat(self.term_alts(a)?, (0, Some(1)))),
            Atom::Not(at) => Err(self.err(
                *at,
                LarkErrorKind::Unsupported(
                    "negation `~` (a complement of a terminal; grammask's grammar IR has none)".into(),
                ),
            )),
            Atom::Value(v, at) => self.term_value(v, *at),
        }
    }

    fn term_value(&mut self, v: &Value, at: usize) -> R<Expr> {
        match v {
            Value::Name(n) => self.term_named(n, at),
            Value::Str(s, false) => Ok(Expr::Literal(s.clone())),
            Value::Str(s, true) => {
                regex_expr(&format!("(?i){}", regex_syntax::escape(s)), 64).map_err(|k| self.err(at, k))
            }
            Value::Range(a, b) => {
                let (mut ca, mut cb) = (a.chars(), b.chars());
                match (ca.next(), ca.next(), cb.next(), cb.next()) {
                    (Some(x), None, Some(y), None) if x <= y => Ok(Expr::Class(vec![(x as u32, y as u32)])),
                    (Some(x), None, Some(y), None) => {
                        Err(self.err(at, LarkErrorKind::BadRange(format!("{x:?}..{y:?} (reversed)"))))
                    }
                    _ => Err(self.err(
                        at,
                        LarkErrorKind::BadRange(format!("{a:?}..{b:?} (each end must be one character)")),
                    )),
                }
            }
            Value::Regex(body, flags) => {
                if flags.contains('l') {
                    let kind = LarkErrorKind::BadRegex {
                        pattern: body.clone(),
                        message: "the `l` flag is not supported (nor by llguidance)".into(),
                    };
                    return Err(self.err(at, kind));
                }
                let pattern = if flags.is_empty() { body.clone() } else { format!("(?{flags}){body}") };
                let depth = u32::try_from(self.limits.max_nesting).unwrap_or(u32::MAX);
                regex_expr(&pattern, depth).map_err(|k| {
                    let k = match k {
                        LarkErrorKind::BadRegex { message, .. } => {
                            LarkErrorKind::BadRegex { pattern: body.clone(), message }
                        }
                        k => k,
                    };
                    self.err(at, k)
                })
            }
            Value::RegexExt(json) => self.regex_ext(json, at),
            Value::SpecialToken(s) => {
                Err(self.err(at, LarkErrorKind::NotInTerminal(format!("special token {s}"))))
            }
            Value::GrammarRef(g) => {
                Err(self.err(at, LarkErrorKind::NotInTerminal(format!("grammar reference {g}"))))
            }
            Value::Json(_) => Err(self.err(at, LarkErrorKind::NotInTerminal("%json".into()))),
        }
    }

    /// `%regex {"substring_chunks": [...]}` (or `substring_words` / `substring_chars`):
    /// the concatenation of any contiguous run of the chunks, the empty run included.
    fn regex_ext(&self, json: &Json, at: usize) -> R<Expr> {
        let bad = |m: &str| self.err(at, LarkErrorKind::BadJson(format!("%regex: {m}")));
        let obj = json.as_object().ok_or_else(|| bad("takes a JSON object"))?;
        if obj.len() != 1 {
            return Err(bad("needs exactly one of substring_chunks, substring_words, substring_chars"));
        }
        let chunks: Vec<String> = match obj.iter().next() {
            Some((k, Json::Array(items))) if k == "substring_chunks" => items
                .iter()
                .map(|v| {
                    v.as_str().map(str::to_string).ok_or_else(|| bad("substring_chunks must be strings"))
                })
                .collect::<R<_>>()?,
            Some((k, Json::String(s))) if k == "substring_words" => words(s),
            Some((k, Json::String(s))) if k == "substring_chars" => s.chars().map(String::from).collect(),
            Some((k, _)) => return Err(bad(&format!("unknown or mistyped field `{k}`"))),
            None => return Err(bad("empty object")),
        };
        // Suffix chains: `c_i (c_{i+1} (…)?)?` for every start `i` — quadratic in the
        // number of chunks, hence the size check.
        let k = chunks.len();
        let size = k.saturating_mul(k + 1).saturating_mul(3) / 2;
        if size > self.limits.max_terminal_size {
            return Err(self.err(
                at,
                LarkErrorKind::TooLarge {
                    what: "%regex substring expression",
                    given: size,
                    limit: self.limits.max_terminal_size,
                },
            ));
        }
        let mut alts = vec![Expr::Empty];
        for i in 0..k {
            let mut e = Expr::Empty;
            for c in chunks[i..].iter().rev() {
                e = if e == Expr::Empty {
                    Expr::Literal(c.clone())
                } else {
                    Expr::Seq(vec![Expr::Literal(c.clone()), repeat(e, (0, Some(1)))])
                };
            }
            alts.push(e);
        }
        Ok(alt_of(alts))
    }
}

/// llguidance's word chunks: runs of whitespace, of word characters (alphanumeric or
/// `_`), and of anything else.
fn words(s: &str) -> Vec<String> {
    let class = |c: char| {
        if c.is_whitespace() {
            0
        } else if c.is_alphanumeric() || c == '_' {
            1
        } else {
            2
        }
    };
    let mut out: Vec<String> = Vec::new();
    let mut last = None;
    for c in s.chars() {
        let k = class(c);
        match out.last_mut() {
            Some(w) if last == Some(k) => w.push(c),
            _ => out.push(c.to_string()),
        }
        last = Some(k);
    }
    out
}

/// The body's only value, if it is one value without repetition.
fn single_value(alts: &Alts) -> Option<&Value> {
    match alts.alts.as_slice() {
        [alt] => match alt.conjuncts.as_slice() {
            [items] => match items.as_slice() {
                [Item1 { atom: Atom::Value(v, _), repeat: (1, Some(1)), .. }] => Some(v),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// Rules [`Lower::begins`] follows before it answers yes.
const MAX_BEGINS_DEPTH: usize = 200;

/// Sequences longer than this are split before [`Lower::first`] looks into them.
const MAX_FIRST_SEQ: usize = 8;

/// The empty language.
fn nothing() -> Expr {
    Expr::Class(Vec::new())
}

fn alt_of_or_nothing(v: Vec<Expr>) -> Expr {
    if v.is_empty() {
        nothing()
    } else {
        alt_of(v)
    }
}

fn expr_nullable(e: &Expr, rules: &[bool]) -> bool {
    match e {
        Expr::Empty => true,
        Expr::Literal(s) => s.is_empty(),
        Expr::Class(_) => false,
        Expr::Dfa(d) => d.is_final(0),
        Expr::Rule(r) => rules.get(r.index()).copied().unwrap_or(false),
        Expr::Seq(v) | Expr::And(v) => v.iter().all(|x| expr_nullable(x, rules)),
        Expr::Alt(v) => v.iter().any(|x| expr_nullable(x, rules)),
        Expr::Repeat { expr, min, .. } => *min == 0 || expr_nullable(expr, rules),
    }
}

/// Which rules match the empty string: a worklist over the rules that call each rule,
/// so each body is re-read only when a rule it calls turns out nullable.
fn nullable_rules(rules: &[Rule]) -> Vec<bool> {
    let mut callers: Vec<Vec<usize>> = vec![Vec::new(); rules.len()];
    for (i, r) in rules.iter().enumerate() {
        r.body.for_each_rule(&mut |c| {
            if let Some(v) = callers.get_mut(c.index()) {
                if v.last() != Some(&i) {
                    v.push(i);
                }
            }
        });
    }
    let mut n = vec![false; rules.len()];
    let mut work: Vec<usize> = (0..rules.len()).collect();
    while let Some(i) = work.pop() {
        if !n[i] && expr_nullable(&rules[i].body, &n) {
            n[i] = true;
            work.extend(callers[i].iter().copied().filter(|&c| !n[c]));
        }
    }
    n
}

fn repeat(e: Expr, (min, max): (u32, Option<u32>)) -> Expr {
    if (min, max) == (1, Some(1)) {
        e
    } else {
        Expr::Repeat { expr: Box::new(e), min, max }
    }
}

fn seq_of(mut v: Vec<Expr>) -> Expr {
    match v.len() {
        0 => Expr::Empty,
        1 => v.pop().unwrap_or(Expr::Empty),
        _ => Expr::Seq(v),
    }
}

fn alt_of(mut v: Vec<Expr>) -> Expr {
    match v.len() {
        1 => v.pop().unwrap_or(Expr::Empty),
        _ => Expr::Alt(v),
    }
}

/// Removes the whitespace the JSON Schema converter puts around the root value (see
/// [`Lower::json`] for why).
fn strip_outer_whitespace(g: &mut Grammar) {
    let is_ws = |e: &Expr| matches!(e, Expr::Repeat { expr, min: 0, .. } if **expr == Expr::Class(vec![(9, 10), (13, 13), (32, 32)]));
    let root = g.root.index();
    if let Some(Rule { body: Expr::Seq(items), .. }) = g.rules.get_mut(root) {
        if items.len() >= 3 && is_ws(&items[0]) && items.last().is_some_and(is_ws) {
            items.pop();
            items.remove(0);
        }
    }
}
