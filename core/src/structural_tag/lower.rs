//! [`Node`] tree → grammar IR.
//!
//! Formats become inline expressions of one root rule, so free text, triggers, tag
//! markers and constant strings share one DFA (see [`super::text`] for why that matters).
//! Embedded JSON schemas and EBNF grammars keep their own rules, renamed with a prefix
//! and renumbered into the result; their roots are referenced from the root expression.
//!
//! The meaning of each format follows XGrammar 0.2.8 (as its grammar printer shows it):
//! - free text (`any_text`, the text between `triggered_tags`) inside a `tag` avoids the
//!   innermost tag's `end` strings — anywhere in the tag's content, as in XGrammar — and
//!   the tag then writes one of them; at top level free text runs to the end of output;
//! - `triggered_tags`: free text up to the first trigger, then the rest of a tag that
//!   begins with it, repeatedly; `at_least_one` makes the output start with a tag,
//!   `stop_after_first` ends it after one;
//! - `dispatch`: the same with `(pattern, format)` rules, not given the tag's `end`
//!   strings (XGrammar passes it none either).

use super::error::{child, StructuralTagError as Error, StructuralTagErrorKind as Kind};
use super::parse::{Format, Node, Tag};
use super::text::{alt2, free_text, nothing, seq2, FreeText};
use crate::crew::{self, Share};
use crate::grammar::{parse_ebnf, Expr, Grammar, ParseLimits, Rule, RuleId};
use crate::json_schema::{json_schema_to_grammar, JsonSchemaOptions, PropertyOrder, Whitespace};
use crate::regex::{regex_to_expr, RegexLimits};
use rustc_hash::FxHashMap;

type R<T> = Result<T, Error>;

/// Most rules in the result (embedded schemas and grammars together).
pub(crate) const MAX_RULES: usize = 100_000;

pub(crate) struct Lower<'a> {
    pub(super) rules: Vec<Rule>,
    parse_limits: &'a ParseLimits,
    embedded: usize,
    /// The grammars of the tree's JSON-style `json_schema` formats, by node address
    /// ([`node_key`]), converted before lowering starts ([`convert_schemas`]).
    schemas: FxHashMap<usize, R<Grammar>>,
    /// Lowering a shell: stand-ins instead of the schemas' grammars.
    stage: Option<Stage>,
}

/// What lowering a shell ([`lower_shell`]) sets aside.
struct Stage {
    /// Each schema node's place in [`schema_nodes`] order, by node address.
    index: FxHashMap<usize, usize>,
    /// The stand-in rule of each schema node lowered so far, by node address.
    stand_ins: FxHashMap<usize, RuleId>,
    /// The converted grammars, in [`schema_nodes`] order.
    parts: Vec<Option<Grammar>>,
    /// Rules the parts will add.
    part_rules: usize,
    /// False when the finished grammar could differ from the shell in more than the
    /// stand-ins: a schema node lowering did not collect.
    exact: bool,
}

/// Lowers a parsed structural tag to a grammar whose root rule is `root`.
pub(crate) fn lower(node: &Node, parse_limits: &ParseLimits) -> R<Grammar> {
    let nodes = schema_nodes(node);
    let schemas = convert_schemas(&nodes).into_iter().map(|(n, g)| (node_key(n), g)).collect();
    lower_from(node, parse_limits, schemas, None).map(|(g, _)| g)
}

/// Lowers a parsed structural tag whose schemas were converted already: `parts`, in
/// [`schema_nodes`] order, as [`lower_shell`] set them aside (`None`: converted here).
/// The grammar [`lower`] makes.
pub(crate) fn lower_converted(
    node: &Node,
    parse_limits: &ParseLimits,
    parts: Vec<Option<Grammar>>,
) -> R<Grammar> {
    let schemas =
        schema_nodes(node).into_iter().zip(parts).filter_map(|(n, g)| Some((node_key(n), Ok(g?)))).collect();
    lower_from(node, parse_limits, schemas, None).map(|(g, _)| g)
}

/// Lowers a parsed structural tag with a stand-in rule ([`Rule::stand_in`]) in place of
/// each JSON-style schema's grammar: the shell of a staged compile, which answers like
/// the finished grammar up to the point where a parse predicts a stand-in. The schemas
/// are still converted here, so that a bad schema — an unsatisfiable one included (the
/// converter refuses it) — is an error now, not at the finishing stage. Returns the shell — `None`
/// when the finished grammar would have more rules than lowering allows (compile it
/// whole: its error) — and the converted grammars, for [`lower_converted`].
pub(crate) fn lower_shell(
    node: &Node,
    parse_limits: &ParseLimits,
) -> R<(Option<Grammar>, Vec<Option<Grammar>>)> {
    let nodes = schema_nodes(node);
    let stage = Stage {
        index: nodes.iter().enumerate().map(|(i, n)| (node_key(n), i)).collect(),
        stand_ins: FxHashMap::default(),
        parts: vec![None; nodes.len()],
        part_rules: 0,
        exact: true,
    };
    let schemas = convert_schemas(&nodes).into_iter().map(|(n, g)| (node_key(n), g)).collect();
    let (g, stage) = lower_from(node, parse_limits, schemas, Some(stage))?;
    let Some(st) = stage else { return Ok((None, Vec::new())) };
    let exact = st.exact && g.rules.len() + st.part_rules <= MAX_RULES;
    Ok((exact.then_some(g), st.parts))
}

fn lower_from(
    node: &Node,
    parse_limits: &ParseLimits,
    schemas: FxHashMap<usize, R<Grammar>>,
    stage: Option<Stage>,
) -> R<(Grammar, Option<Stage>)> {
    let mut l =
        Lower { rules: vec![Rule::new("root", Expr::Empty)], parse_limits, embedded: 0, schemas, stage };
    let body = l.format(node, None)?;
    l.rules[0].body = body;
    Ok((Grammar { rules: l.rules, root: RuleId(0), markers: Vec::new() }, l.stage))
}

/// A node's identity while the tree is borrowed (JSON pointers need not be unique: the
/// older `structures` form builds its nodes).
fn node_key(node: &Node) -> usize {
    node as *const Node as usize
}

/// The tree's JSON-style `json_schema` nodes, in a fixed order (the same for the same
/// document).
pub(crate) fn schema_nodes<'n, 'a>(node: &'n Node<'a>) -> Vec<&'n Node<'a>> {
    fn collect<'n, 'a>(node: &'n Node<'a>, out: &mut Vec<&'n Node<'a>>) {
        if matches!(node.format, Format::JsonSchema { style: None, .. }) {
            out.push(node);
        }
        let (tags, children) = node.parts();
        for t in tags {
            collect(&t.content, out);
        }
        for c in children {
            collect(c, out);
        }
    }
    let mut nodes = Vec::new();
    collect(node, &mut nodes);
    nodes
}

/// Converts the JSON-style `json_schema` nodes `nodes`, in parallel when there are
/// several: a tool-calling tag holds one schema per tool, and converting them was a
/// third of its compile. Each conversion is independent and lowering then takes the
/// results in its own order, so the grammar is the same however many threads ran; an
/// error is kept until lowering reaches its node, so the error reported is the one a
/// sequential lowering meets first.
fn convert_schemas<'n, 'a>(nodes: &[&'n Node<'a>]) -> Vec<(&'n Node<'a>, R<Grammar>)> {
    let convert = |_: &mut (), &n: &&'n Node<'a>| match &n.format {
        Format::JsonSchema { schema, any_order, max_whitespace, .. } => {
            Some((n, json_grammar(&n.pointer, schema, *any_order, *max_whitespace)))
        }
        _ => None,
    };
    // A schema converts in tens of microseconds: a few are worth waking a helper for,
    // who then stays for the automata's phases.
    let share = if nodes.len() >= 4 { Share::Hire } else { Share::Never };
    crew::map_init(nodes, share, || (), convert).into_iter().flatten().collect()
}

/// The grammar of the JSON-style `json_schema` node at `ptr`, without whitespace around
/// its value.
fn json_grammar(
    ptr: &str,
    schema: &serde_json::Value,
    any_order: bool,
    max_whitespace: Option<u32>,
) -> R<Grammar> {
    // XGrammar's structural tags write JSON with any whitespace between tokens
    // (unbounded unless `max_whitespace_cnt`), members in schema order unless `any_order`.
    let options = JsonSchemaOptions {
        whitespace: Whitespace::Any { max: max_whitespace.unwrap_or(u32::MAX) },
        property_order: if any_order { PropertyOrder::Any } else { PropertyOrder::Schema },
        ..Default::default()
    };
    let mut g = json_schema_to_grammar(schema, &options)
        .map_err(|e| Error::new(&child(ptr, "json_schema"), Kind::Schema(e)))?;
    strip_outer_whitespace(&mut g);
    Ok(g)
}

/// `s` as an expression (the empty string: [`Expr::Empty`]).
pub(super) fn lit(s: &str) -> Expr {
    if s.is_empty() {
        Expr::Empty
    } else {
        Expr::Literal(s.to_string())
    }
}

/// Any one of `items` (none: the empty language).
pub(super) fn alt_all(items: impl IntoIterator<Item = Expr>) -> Expr {
    let mut items = items.into_iter().peekable();
    if items.peek().is_none() {
        return nothing();
    }
    crate::grammar::alts(items)
}

fn star(e: Expr) -> Expr {
    Expr::Repeat { expr: Box::new(e), min: 0, max: None }
}

impl Lower<'_> {
    /// `node` as an expression; `ends`: the end strings of the innermost enclosing tag,
    /// which free text must not contain.
    fn format(&mut self, node: &Node, ends: Option<&[String]>) -> R<Expr> {
        let ptr = node.pointer.as_str();
        Ok(match &node.format {
            Format::ConstString(s) => lit(s),
            Format::JsonSchema { schema, any_order, max_whitespace, style: Some(style) } => {
                super::xml::lower_xml(self, *style, schema, *any_order, *max_whitespace, ptr)?
            }
            Format::JsonSchema { schema, any_order, max_whitespace, style: None } => {
                // The first use takes the converted grammar (a copy, then dropping the
                // original, cost a tenth of lowering a tool-calling tag); a tag lowered
                // twice (`at_least_one` writes the tags once more) converts it again.
                let key = node_key(node);
                if let Some(&id) = self.stage.as_ref().and_then(|st| st.stand_ins.get(&key)) {
                    return Ok(Expr::Rule(id));
                }
                let g = match self.schemas.remove(&key) {
                    Some(g) => g?,
                    None => json_grammar(ptr, schema, *any_order, *max_whitespace)?,
                };
                if self.stage.is_some() {
                    self.stand_in(key, g, ptr)?
                } else {
                    self.embed(g, ptr)?
                }
            }
            Format::Regex(p) => regex_to_expr(p, &RegexLimits::default())
                .map_err(|e| Error::new(&child(ptr, "pattern"), Kind::Regex(e)))?,
            Format::Grammar(text) => {
                let g = parse_ebnf(text, "root", self.parse_limits)
                    .map_err(|e| Error::new(&child(ptr, "grammar"), Kind::Grammar(e)))?;
                self.embed(g, ptr)?
            }
            Format::AnyText { excludes } => {
                let dead = with_ends(excludes, ends);
                self.text(&[], &dead, ptr)?.rest
            }
            Format::Sequence(items) => {
                let mut e = Expr::Empty;
                for item in items {
                    e = seq2(e, self.format(item, ends)?);
                }
                e
            }
            Format::Or(items) => {
                let mut alts = Vec::with_capacity(items.len());
                for item in items {
                    alts.push(self.format(item, ends)?);
                }
                alt_all(alts)
            }
            Format::Repeat { content, min, max } => {
                Expr::Repeat { expr: Box::new(self.format(content, ends)?), min: *min, max: *max }
            }
            Format::Tag(tag) => self.tag(tag, None)?,
            Format::TriggeredTags { triggers, tags, at_least_one, stop_after_first, excludes } => {
                let dead = with_ends(excludes, ends);
                let text = self.text(triggers, &dead, ptr)?;
                let mut branches = Vec::with_capacity(triggers.len());
                for (t, until) in triggers.iter().zip(text.until) {
                    let started: Vec<&Tag> =
                        tags.iter().filter(|tag| tag.begin.starts_with(t.as_str())).collect();
                    branches.push(seq2(until, self.any_tag(&started, Some(t.len()))?));
                }
                let branch = alt_all(branches);
                match (at_least_one, stop_after_first) {
                    (false, false) => seq2(star(branch), text.rest),
                    (true, false) => seq2(seq2(self.tags(tags)?, star(branch)), text.rest),
                    (false, true) => alt2(text.rest, branch),
                    (true, true) => self.tags(tags)?,
                }
            }
            Format::TagsWithSeparator { tags, separator, at_least_one, stop_after_first } => {
                let one = self.tags(tags)?;
                let some = if *stop_after_first {
                    one
                } else if separator.is_empty() {
                    // One copy of the tags, not two (`one one*`): the automata builder reads
                    // `x+` with a single copy of `x`, and a copy is every tool's arguments.
                    Expr::Repeat { expr: Box::new(one), min: 1, max: None }
                } else {
                    seq2(one.clone(), star(seq2(lit(separator), one)))
                };
                if *at_least_one {
                    some
                } else {
                    alt2(Expr::Empty, some)
                }
            }
            Format::Dispatch { rules, repeat, excludes } => {
                let patterns: Vec<String> = rules.iter().map(|(p, _)| p.clone()).collect();
                let text = self.text(&patterns, excludes, ptr)?;
                let mut branches = Vec::with_capacity(rules.len());
                for ((_, content), until) in rules.iter().zip(text.until) {
                    branches.push(seq2(until, self.format(content, ends)?));
                }
                let branch = alt_all(branches);
                if *repeat {
                    seq2(star(branch), text.rest)
                } else {
                    alt2(text.rest, branch)
                }
            }
        })
    }

    /// `begin content end`; with `skip`, without the first `skip` bytes of `begin` (the
    /// trigger that free text already wrote).
    fn tag(&mut self, tag: &Tag, skip: Option<usize>) -> R<Expr> {
        let opened = self.opened(tag, skip)?;
        Ok(seq2(opened, ends(tag)))
    }

    /// `begin content` of [`Self::tag`], without the end.
    fn opened(&mut self, tag: &Tag, skip: Option<usize>) -> R<Expr> {
        if tag.ends.iter().all(String::is_empty) && is_unlimited(&tag.content) {
            return Err(Error::new(&child(&tag.pointer, "end"), Kind::UnlimitedContentWithoutEnd));
        }
        let begin = tag.begin.get(skip.unwrap_or(0)..).unwrap_or_default();
        let content = self.format(&tag.content, Some(&tag.ends))?;
        Ok(seq2(lit(begin), content))
    }

    /// Any one of `tags` (each with `skip` as in [`Self::tag`]). Tags that share their
    /// ends (every tool of a preset: `</tool_call>`) end in one copy of them: written per
    /// tag, the 20 copies of a 20-tool tag were 20 chains of DFA states that minimization
    /// merged back into one (a third of the root's states before minimizing).
    fn any_tag(&mut self, tags: &[&Tag], skip: Option<usize>) -> R<Expr> {
        let shared = tags.first().filter(|first| tags.iter().all(|t| t.ends == first.ends));
        let mut v = Vec::with_capacity(tags.len());
        for tag in tags {
            v.push(if shared.is_some() { self.opened(tag, skip)? } else { self.tag(tag, skip)? });
        }
        Ok(match shared {
            Some(first) => seq2(alt_all(v), ends(first)),
            None => alt_all(v),
        })
    }

    /// Any one of `tags`, whole.
    fn tags(&mut self, tags: &[Tag]) -> R<Expr> {
        let tags: Vec<&Tag> = tags.iter().collect();
        self.any_tag(&tags, None)
    }

    fn text(&self, finals: &[String], dead: &[String], ptr: &str) -> R<FreeText> {
        free_text(finals, dead)
            .map_err(|(what, given, limit)| Error::new(ptr, Kind::Limit { what, given, limit }))
    }

    /// Adds a rule named `name` (an XML style's shared pieces).
    pub(super) fn add_rule(&mut self, name: &str, body: Expr, keep: bool, ptr: &str) -> R<RuleId> {
        if self.rules.len() >= MAX_RULES {
            return Err(Error::new(
                ptr,
                Kind::Limit { what: "rules", given: self.rules.len() + 1, limit: MAX_RULES },
            ));
        }
        let id = RuleId(self.rules.len() as u32);
        let mut rule = Rule::new(format!("{name}_{}", self.rules.len()), body);
        rule.keep = keep;
        self.rules.push(rule);
        Ok(id)
    }

    /// The rule `id`, to set its flags.
    pub(super) fn rule_mut(&mut self, id: RuleId) -> &mut Rule {
        &mut self.rules[id.index()]
    }

    /// A shell's stand-in for the converted schema `g` of the node at address `key`
    /// (see [`lower_shell`]), `g` set aside. `g` matches something: it comes from
    /// [`json_grammar`], whose converter refuses a schema whose root cannot finish
    /// (`SchemaErrorKind::Unsatisfiable`, checked by the same
    /// `productive_rules`), so the stand-in never hides an empty language. (Checking
    /// again here was a seventh of a 512-tool tag's time to the first mask.)
    fn stand_in(&mut self, key: usize, g: Grammar, ptr: &str) -> R<Expr> {
        let Some(st) = &mut self.stage else { return self.embed(g, ptr) };
        debug_assert!(crate::automata::optimize::productive_rules(&g).is_ok());
        st.part_rules += g.rules.len();
        match st.index.get(&key) {
            Some(&i) => st.parts[i] = Some(g),
            None => st.exact = false,
        }
        // Any character: the rules that may end right before the part then take any
        // byte after them as possible (FOLLOW), so the shell's masks never reject a
        // token the finished grammar leaves to the run-time check.
        let any = Expr::Class(vec![(0, 0xD7FF), (0xE000, 0x10FFFF)]);
        let id = self.add_rule("part", any, true, ptr)?;
        self.rules[id.index()].stand_in = true;
        if let Some(st) = &mut self.stage {
            st.stand_ins.insert(key, id);
        }
        Ok(Expr::Rule(id))
    }

    /// Adds `g`'s rules (renamed `s<n>_<name>`, renumbered) and returns a reference to its
    /// root.
    pub(super) fn embed(&mut self, g: Grammar, ptr: &str) -> R<Expr> {
        if self.rules.len() + g.rules.len() > MAX_RULES {
            return Err(Error::new(
                ptr,
                Kind::Limit { what: "rules", given: self.rules.len() + g.rules.len(), limit: MAX_RULES },
            ));
        }
        self.embedded += 1;
        Ok(g.append_to(&mut self.rules, &format!("s{}_", self.embedded)))
    }
}

/// Removes the whitespace the JSON Schema converter allows around the root value:
/// XGrammar's structural tags start the value right after the tag's `begin` and end the
/// tag right after it (a model's newline there is part of `begin`/`end`).
pub(super) fn strip_outer_whitespace(g: &mut Grammar) {
    let is_ws = |e: &Expr| matches!(e, Expr::Repeat { expr, min: 0, .. } if **expr == Expr::Class(vec![(9, 10), (13, 13), (32, 32)]));
    let root = g.root.index();
    if let Some(Rule { body: Expr::Seq(items), .. }) = g.rules.get_mut(root) {
        if items.len() >= 3 && is_ws(&items[0]) && items.last().is_some_and(is_ws) {
            items.pop();
            items.remove(0);
        }
    }
}

/// The alternatives of a tag's `end`.
fn ends(tag: &Tag) -> Expr {
    alt_all(tag.ends.iter().map(|e| lit(e)))
}

/// Free text that only the enclosing tag's `end` can stop (XGrammar's "unlimited"
/// content): `any_text` or `triggered_tags` anywhere in it, outside nested tags.
fn is_unlimited(node: &Node) -> bool {
    match &node.format {
        Format::AnyText { .. } | Format::TriggeredTags { .. } => true,
        Format::Sequence(v) | Format::Or(v) => v.iter().any(is_unlimited),
        Format::Repeat { content, .. } => is_unlimited(content),
        _ => false,
    }
}

/// `excludes` plus the non-empty enclosing `ends`.
fn with_ends(excludes: &[String], ends: Option<&[String]>) -> Vec<String> {
    let mut v = excludes.to_vec();
    v.extend(ends.unwrap_or_default().iter().filter(|e| !e.is_empty()).cloned());
    v
}
