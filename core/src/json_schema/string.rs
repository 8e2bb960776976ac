//! `type: string`: `minLength`, `maxLength`, `pattern` and `format`.
//!
//! Lengths count Unicode scalar values of the decoded string; each one is generated in
//! its JSON-encoded form ([`json_string_char`]). A `pattern` (or a `format`, which is a
//! pattern from [`super::format`]) is combined with the length bounds exactly by
//! [`regex_to_json_string_expr`] when it can be; otherwise the error names `pattern`.

use super::types::Builder;
use super::whitespace::{alt, lit, nothing, seq};
use super::{SchemaError, SchemaErrorKind};
use crate::grammar::Expr;
use crate::regex::{json_string_char, regex_to_json_string_expr, RegexErrorKind, RegexLimits};
use serde_json::{Map, Value};

const ANY_CHAR: &[(u32, u32)] = &[(0, 0x10FFFF)];

/// Any JSON string, with every escape JSON allows (`\/`, `\uXXXX`, …) that decodes to
/// a character: a `\u` escape of a UTF-16 surrogate only as the first half of a pair
/// followed by the second. The JSON grammar admits lone surrogate escapes, but no string
/// holds them: `serde_json` rejects such a document, and the output must parse.
pub(crate) fn any_string() -> Expr {
    let ch = json_string_char(ANY_CHAR);
    seq(vec![lit("\""), Expr::Repeat { expr: Box::new(ch), min: 0, max: None }, lit("\"")])
}

/// Reads a non-negative integer keyword.
pub(crate) fn get_count(
    b: &Builder,
    m: &Map<String, Value>,
    key: &str,
    ptr: &str,
) -> Result<Option<u64>, SchemaError> {
    match m.get(key) {
        None => Ok(None),
        Some(v) => {
            let n = v.as_u64().or_else(|| {
                v.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0).map(|f| f.min(u64::MAX as f64) as u64)
            });
            n.map(Some).ok_or_else(|| b.not_schema(format!("`{key}` must be a non-negative integer"), ptr))
        }
    }
}

/// Characters per block in [`long_chars`].
const BLOCK: u64 = 256;

/// Longest plain string written as one chain of characters (a DFA of ~14 states per
/// character, built by splicing); longer ones are [`long_chars`] blocks. A chain's
/// positions share one mask, while a block's last positions each check the tokens that
/// may cross into the next block.
const CHAIN_MAX: u64 = 1024;

/// `min..=max` JSON string characters for a `maxLength` beyond [`CHAIN_MAX`]
/// (65,535 is common): `min` characters, then `M = max - min` more written as blocks of
/// [`BLOCK`] characters — `block{0,q-1} chars(BLOCK-1) | block{q-1} last chars(r)` with
/// `M = q·BLOCK + r` — which is exactly "at most M" and unambiguous (the number of whole
/// blocks is fixed by the length), so the automaton stays a chain of `q` block calls
/// instead of `M` unrolled characters. The `min` characters, the blocks and the runs are
/// rules of their own, one per distinct body (shared by every long string of the
/// schema): each is a counted repetition at the top of its rule, which the automata
/// builder splices from copies of one character's DFA, where written inside the
/// alternation the runs were ~7,000 states for the subset construction.
///
/// Why the `q`-th block is a rule apart (`last`, the same characters written
/// `C C{BLOCK-1}`, whose repetition ends the rule so that it is spliced too): then
/// wherever `block` or the `min` characters end, another block or a run of `BLOCK - 1`
/// may follow in every context, so a token running past their end is still known to be
/// legal (`automata::cont`) instead of being checked against the
/// live parse at every fill — ~100k tokens at each of a block's last positions.
fn long_chars(b: &mut Builder, min: u32, max: u64) -> Result<Expr, SchemaError> {
    let ch = || json_string_char(ANY_CHAR);
    let rep = |e: Expr, lo: u32, hi: u32| Expr::Repeat { expr: Box::new(e), min: lo, max: Some(hi) };
    // (Leaf rules: one per body, kept, their masks shared between grammars.)
    let run = |b: &mut Builder, lo: u32, hi: u32, hint: &str| {
        if hi == 0 {
            Ok(Expr::Empty)
        } else {
            b.leaf_rule(rep(ch(), lo, hi), hint)
        }
    };
    let head = run(b, min, min, "chars")?;
    let extra = max - min as u64;
    let (q, r) = ((extra / BLOCK) as u32, (extra % BLOCK) as u32);
    let size = BLOCK as u32;
    let tail = if q == 0 {
        run(b, 0, r, "chars")?
    } else {
        let block = run(b, size, size, "block")?;
        let last = b.leaf_rule(seq(vec![ch(), rep(ch(), size - 1, size - 1)]), "block")?;
        let short = run(b, 0, size - 1, "chars")?;
        alt(vec![
            seq(vec![rep(block.clone(), 0, q - 1), short]),
            seq(vec![rep(block, q - 1, q - 1), last, run(b, 0, r, "chars")?]),
        ])
    };
    Ok(seq(vec![head, tail]))
}

/// Most characters written out for a `not` of strings ([`none_of`] repeats each word's
/// prefixes: the sum of their lengths).
const MAX_NOT_CHARS: usize = 20_000;

/// The characters of a string other than each of `words`, JSON-encoded as
/// [`json_string_char`] spells them (one spelling per character, so a string is excluded
/// by excluding its spelling). Over the trie of the words, every other string either
/// stops at a node where no word ends, or leaves the trie by a character no word
/// continues with there and then goes on freely. Written as one flat alternation over
/// the nodes (`prefix`, `prefix · other character · anything`) rather than nested along
/// the words, so the expression stays shallow however long a word is; the automata
/// builder shares the prefixes again. `None` past [`MAX_NOT_CHARS`].
fn none_of(words: &[&str]) -> Option<Expr> {
    struct Node {
        children: std::collections::BTreeMap<char, usize>,
        end: bool,
        /// Characters from the root.
        path: Vec<char>,
    }
    let mut trie = vec![Node { children: Default::default(), end: false, path: Vec::new() }];
    let mut size = 0;
    for w in words {
        let mut at = 0;
        for c in w.chars() {
            at = match trie[at].children.get(&c) {
                Some(&next) => next,
                None => {
                    let mut path = trie[at].path.clone();
                    path.push(c);
                    size += path.len();
                    if size > MAX_NOT_CHARS {
                        return None;
                    }
                    trie.push(Node { children: Default::default(), end: false, path });
                    let next = trie.len() - 1;
                    trie[at].children.insert(c, next);
                    next
                }
            };
        }
        trie[at].end = true;
    }
    let any = || Expr::Repeat { expr: Box::new(json_string_char(ANY_CHAR)), min: 0, max: None };
    let mut alts = Vec::new();
    for node in &trie {
        let prefix = || node.path.iter().map(|&c| json_string_char(&[(c as u32, c as u32)]));
        if !node.end {
            alts.push(seq(prefix().collect()));
        }
        let taken: Vec<(u32, u32)> = node.children.keys().map(|&c| (c as u32, c as u32)).collect();
        let other = crate::grammar::class::subtract_class(ANY_CHAR, &taken);
        alts.push(seq(prefix().chain([json_string_char(&other), any()]).collect()));
    }
    Some(alt(alts))
}

/// [`regex_to_json_string_expr`] of a `format`'s regex ([`super::format::format_regex`])
/// under the default limits, converted once per process: the formats are the library's
/// own constants, and a date-time's regex takes longer to convert than the rest of a
/// typical tool's schema together. Kept as its automaton ([`Expr::Dfa`]) where it has
/// one of at most [`FORMAT_DFA_STATES`] states: every use shares it, where each copy of
/// the expression (a date-time's, escapes spelled, is hundreds of nodes, each its own
/// allocation) was 14 % of a 512-tool tag's time to first mask.
fn format_expr(pattern: &str) -> Result<Expr, crate::regex::RegexError> {
    static CONVERTED: crate::memo::Memo<String, Result<Expr, crate::regex::RegexError>> =
        crate::memo::Memo::new();
    CONVERTED.get_or(pattern, || {
        let e = regex_to_json_string_expr(pattern, 0, None, &RegexLimits::default())?;
        Ok(match crate::grammar::CharDfa::from_expr(&e, FORMAT_DFA_STATES) {
            Some(d) => Expr::Dfa(std::sync::Arc::new(d)),
            None => e,
        })
    })
}

/// The most states a `format`'s shared automaton may have ([`format_expr`]): `date-time`,
/// `date`, `time`, `duration`, `ipv4`, `uuid`, the JSON pointers and `uri-template`
/// (28–368 states once minimized, each built in at most 3 ms, once per process). The
/// larger ones (`email`, `hostname`, `ipv6`, `uri`, `uri-reference`, `iri`,
/// `iri-reference`: 4,000–37,000 states, up to 220 ms to build) stay expressions; their
/// NFAs pass the limit first, which ends the attempt within 0.3 ms, once.
const FORMAT_DFA_STATES: usize = 1_000;

/// The regex limits of a joint automaton: at most
/// [`max_intersection_size`](super::SchemaLimits::max_intersection_size) states.
fn joint_limits(b: &Builder) -> RegexLimits {
    let limit = usize::try_from(b.opts.limits.max_intersection_size).unwrap_or(usize::MAX);
    RegexLimits { max_size: b.opts.limits.regex.max_size.min(limit), ..b.opts.limits.regex.clone() }
}

/// The strings of `set` whose label `accept`s, JSON-spelled, as one character automaton
/// ([`KeySet::spelled`](crate::regex::keyset::KeySet::spelled)); the empty set when there
/// are none (`(a|aa)a` under `maxLength: 1`), so that an `anyOf` branch is pruned and a
/// required value makes the schema unsatisfiable here rather than an empty automaton at
/// compile time.
fn joint_body(
    b: &mut Builder,
    set: &crate::regex::keyset::KeySet,
    accept: impl Fn(u64) -> bool,
    ptr: &str,
) -> Result<Expr, SchemaError> {
    match set.spelled(accept) {
        Ok(Some(d)) => Ok(Expr::Dfa(std::sync::Arc::new(d))),
        Ok(None) => Ok(nothing()),
        Err(e) => Err(b.err(SchemaErrorKind::Budget(Box::new(e)), ptr)),
    }
}

/// The characters of a string matching every regex of `regexes` (`pattern`, `format`),
/// with `min..=max` of them, and none of the strings `not_in`. One constraint is written
/// directly: a regex carrying the lengths itself when it can
/// ([`regex_to_json_string_expr`]; a large `pattern` without lengths as an automaton,
/// [`pattern_automaton`]), the lengths alone, the excluded strings alone ([`none_of`]).
/// More are intersected on characters — the joint automaton of every operand, as for
/// object keys — and then spelled: on JSON bytes every escape spelling of every character
/// would multiply the product's states. An intersection larger than
/// [`max_intersection_size`](super::SchemaLimits::max_intersection_size) keeps the first
/// operand only, and the others are unsupported keywords.
fn constrained_body(
    b: &mut Builder,
    regexes: &[(String, &str)],
    min: u32,
    max: Option<u32>,
    not_in: &[&str],
    ptr: &str,
) -> Result<Expr, SchemaError> {
    let limits = b.opts.limits.regex.clone();
    // `None`: the regex cannot carry these lengths itself (never for no lengths).
    let convert = |b: &Builder, p: &str, kw: &str, lo: u32, hi: Option<u32>| match if kw == "format"
        && (lo, hi) == (0, None)
        && limits == RegexLimits::default()
    {
        format_expr(p)
    } else {
        regex_to_json_string_expr(p, lo, hi, &limits)
    } {
        Ok(e) => Ok(Some(e)),
        Err(e) if e.kind == RegexErrorKind::LengthBounds => Ok(None),
        Err(e) => Err(b.err(SchemaErrorKind::Regex(e), &format!("{ptr}/{kw}"))),
    };
    let lengths = min > 0 || max.is_some();
    let any_chars = || Expr::Repeat { expr: Box::new(json_string_char(ANY_CHAR)), min, max };
    match (regexes, lengths, not_in.is_empty()) {
        ([(p, kw)], _, true) => {
            if let Some(e) = convert(b, p, kw, min, max)? {
                // A large pattern without lengths is determinized over characters instead
                // (its JSON spelling in place makes every position a dozen NFA states).
                if *kw == "pattern" && !lengths && e.expanded_size() > PATTERN_EXPR_MAX {
                    if let Some(d) = pattern_automaton(b, p, ptr)? {
                        return Ok(d);
                    }
                }
                return Ok(e);
            }
        }
        ([], true, true) => return Ok(any_chars()),
        ([], false, false) => {
            return match none_of(not_in) {
                Some(e) => Ok(e),
                None => {
                    b.unsupported(
                        "not",
                        &format!("the excluded strings are over {MAX_NOT_CHARS} characters written out"),
                        "those strings are not excluded",
                        &format!("{ptr}/not"),
                    )?;
                    // (Lenient: any string, as the approximation says.)
                    Ok(any_chars())
                }
            };
        }
        ([], false, true) => return Ok(nothing()),
        _ => {}
    }
    use crate::regex::keyset::{Component, KeySet};
    let mut comps: Vec<Component> = regexes.iter().map(|(p, _)| Component::Pattern(p)).collect();
    if lengths {
        comps.push(Component::Length { min, max });
    }
    let all_mine = low_bits(comps.len());
    let words_bit = if not_in.is_empty() {
        0
    } else {
        comps.push(Component::Names(not_in));
        1u64 << (comps.len() - 1)
    };
    // A format with a narrower regex to fall back on is first tried under a quarter of
    // the limit: a `uri` with IP literals under `maxLength: 255` builds the whole limit
    // before failing (~120 ms measured). The fallback is sound (every string it takes is
    // valid) but narrower (no IP literals), and the schema's warnings say so.
    let mut limits = joint_limits(b);
    if regexes.iter().any(|(re, kw)| *kw == "format" && super::format::has_narrower(re)) {
        limits.max_size /= 4;
    }
    let why = match KeySet::build(&comps, &limits) {
        Ok(set) => {
            return joint_body(b, &set, |label| label & all_mine == all_mine && label & words_bit == 0, ptr)
        }
        Err(e) if matches!(e.kind, RegexErrorKind::TooLarge { .. }) => {
            // A format with a narrower regex that may fit: every string it takes is
            // valid, and what it leaves out is said.
            for (i, (re, kw)) in regexes.iter().enumerate() {
                if *kw != "format" {
                    continue;
                }
                if let Some((narrow, left_out)) = super::format::narrower(re) {
                    b.warnings.push(super::SchemaWarning {
                        keyword: "format".into(),
                        pointer: ptr.into(),
                        approximation: left_out.into(),
                    });
                    let mut regexes = regexes.to_vec();
                    regexes[i].0 = narrow;
                    return constrained_body(b, &regexes, min, max, not_in, ptr);
                }
            }
            format!("the intersection has over {} states", b.opts.limits.max_intersection_size)
        }
        Err(e) => return Err(b.err(SchemaErrorKind::Regex(e), ptr)),
    };
    // Too large to intersect: keep the first operand (the pattern, with the lengths if it
    // carries them; else the lengths), drop the rest.
    let mut dropped: Vec<&str> = Vec::new();
    let first = match regexes.split_first() {
        Some(((p, kw), rest)) => {
            dropped.extend(rest.iter().map(|r| r.1));
            match convert(b, p, kw, min, max)? {
                Some(e) => e,
                None => {
                    dropped.push("minLength/maxLength");
                    convert(b, p, kw, 0, None)?.unwrap_or_else(nothing)
                }
            }
        }
        None => any_chars(),
    };
    if !not_in.is_empty() {
        dropped.push("not");
    }
    for kw in dropped {
        let (detail, approximation, at) = match kw {
            "minLength/maxLength" => (
                "cannot be combined with this pattern exactly",
                "length bounds ignored; the pattern applies",
                ptr.into(),
            ),
            "not" => (
                "the excluded strings cannot be combined with the other keywords exactly",
                "those strings are not excluded",
                format!("{ptr}/not"),
            ),
            _ => ("together with `pattern`", "format ignored; the pattern applies", ptr.into()),
        };
        b.unsupported(kw, &format!("{detail}: {why}"), approximation, &at)?;
    }
    Ok(first)
}

/// Largest JSON-spelled expression (in [`Expr::expanded_size`] nodes) a `pattern` without
/// lengths is compiled from; a larger one goes through [`pattern_automaton`]. Small
/// patterns stay expressions: their escapes are built once per class and process, and a
/// 512-tool list's small patterns took 17 → 23 ms to the first mask through automata.
const PATTERN_EXPR_MAX: u64 = 2_000;

/// A `pattern` as a character automaton spelled in JSON
/// ([`joint_body`]): the subset construction then runs over characters, not over every
/// escape spelling of each (an unanchored `[a-f0-9]{128}` tracks up to 128 positions at
/// once, and with escapes in place each position was a dozen NFA states). `None` where
/// the automaton is over the intersection limit: the expression stays.
fn pattern_automaton(b: &mut Builder, p: &str, ptr: &str) -> Result<Option<Expr>, SchemaError> {
    use crate::regex::keyset::{Component, KeySet};
    match KeySet::build(&[Component::Pattern(p)], &joint_limits(b)) {
        Ok(set) => joint_body(b, &set, |label| label & 1 == 1, ptr).map(Some),
        Err(e) if matches!(e.kind, RegexErrorKind::Budget(_)) => {
            Err(b.err(SchemaErrorKind::Regex(e), &format!("{ptr}/pattern")))
        }
        Err(_) => Ok(None),
    }
}

/// One language of a string's joint automaton ([`complement_body`]): a regex (a `pattern`,
/// or a `format`'s), or lengths.
enum Part {
    Regex(String),
    Length(u32, Option<u32>),
}

/// The languages whose intersection is the strings of `m`'s string keywords (`pattern`,
/// `format`, `minLength`, `maxLength`) at `ptr`. An unknown format is no language (any
/// string); a format known but not enforced makes it `None` (the caller reports it).
fn parts_of(b: &Builder, m: &Map<String, Value>, ptr: &str) -> Result<Option<Vec<Part>>, SchemaError> {
    let mut out = Vec::new();
    match m.get("pattern") {
        None => {}
        Some(Value::String(p)) => out.push(Part::Regex(p.clone())),
        Some(_) => return Err(b.not_schema("`pattern` must be a string", ptr)),
    }
    if let Some(f) = m.get("format") {
        let f = f.as_str().ok_or_else(|| b.not_schema("`format` must be a string", ptr))?;
        match super::format::format_regex(f) {
            Some(re) => out.push(Part::Regex(re)),
            None if super::format::is_defined_format(f) => return Ok(None),
            None => {}
        }
    }
    let min = get_count(b, m, "minLength", ptr)?.unwrap_or(0);
    let max = get_count(b, m, "maxLength", ptr)?;
    if min > 0 || max.is_some() {
        let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        out.push(Part::Length(clamp(min), max.map(clamp)));
    }
    Ok(Some(out))
}

/// The strings of `m`'s string keywords other than the words `not_in` and the strings of
/// each group of `not_strings` (a `not` of string keywords): one joint automaton of every
/// language involved ([`KeySet`](crate::regex::keyset::KeySet), as for object keys), whose
/// states accepting for all of `m`'s languages and not for all of any group's are final.
/// Each state is a character-level DFA state, so the complement is exact; the automaton is
/// bounded by [`max_intersection_size`](super::SchemaLimits::max_intersection_size) states
/// (past it, and for a group with a format that is not enforced, the `not` is an
/// unsupported keyword).
fn complement_body(
    b: &mut Builder,
    m: &Map<String, Value>,
    not_in: &[&str],
    not_strings: &[Map<String, Value>],
    ptr: &str,
) -> Result<Expr, SchemaError> {
    use crate::regex::keyset::{Component, KeySet};
    let nptr = format!("{ptr}/not");
    let mine = match parts_of(b, m, ptr)? {
        Some(parts) => parts,
        None => {
            // A format known but not enforced: `build` has reported it (this is lenient
            // mode), and it is left out as there.
            let mut m = m.clone();
            m.remove("format");
            parts_of(b, &m, ptr)?.unwrap_or_default()
        }
    };
    let mut groups = Vec::new();
    for g in not_strings {
        match parts_of(b, g, &nptr)? {
            // Lengths no string has (`minLength: 1, maxLength: 0`): the group is empty and
            // excludes nothing.
            Some(parts) if parts.iter().any(|p| matches!(p, Part::Length(lo, Some(hi)) if hi < lo)) => {}
            Some(parts) => groups.push(parts),
            None => {
                b.unsupported(
                    "not",
                    "a format that is not enforced under `not`",
                    "those strings are not excluded",
                    &nptr,
                )?;
            }
        }
    }
    fn add<'a>(parts: &'a [Part], comps: &mut Vec<Component<'a>>) {
        for p in parts {
            comps.push(match p {
                Part::Regex(r) => Component::Pattern(r),
                Part::Length(min, max) => Component::Length { min: *min, max: *max },
            });
        }
    }
    let mut comps: Vec<Component> = Vec::new();
    // Component bits: `m`'s first, then the words, then each group's.
    add(&mine, &mut comps);
    let all_mine = low_bits(comps.len());
    let words_bit = if not_in.is_empty() {
        0
    } else {
        comps.push(Component::Names(not_in));
        1u64 << (comps.len() - 1)
    };
    let without_groups = comps.len();
    let mut group_masks = Vec::new();
    for g in &groups {
        let first = comps.len();
        add(g, &mut comps);
        if comps.len() > 64 {
            break;
        }
        group_masks.push(low_bits(comps.len()) & !low_bits(first));
    }
    // Past the limits the groups are an unsupported `not` (an error unless lenient, where
    // the strings are left in, as the message says): the automaton is built without them.
    let drop_groups = |b: &mut Builder, why: String, comps: &mut Vec<Component>, masks: &mut Vec<u64>| {
        b.unsupported("not", &why, "those strings are not excluded", &nptr)?;
        comps.truncate(without_groups);
        masks.clear();
        Ok::<(), SchemaError>(())
    };
    if comps.len() > 64 {
        drop_groups(b, "over 64 string keywords in one complement".into(), &mut comps, &mut group_masks)?;
    }
    let limit = b.opts.limits.max_intersection_size;
    let set = match KeySet::build(&comps, &joint_limits(b)) {
        Ok(set) => set,
        Err(e) if matches!(e.kind, RegexErrorKind::TooLarge { .. }) && comps.len() > without_groups => {
            drop_groups(
                b,
                format!("the complement of these strings beside the other keywords is over {limit} states"),
                &mut comps,
                &mut group_masks,
            )?;
            KeySet::build(&comps, &b.opts.limits.regex).map_err(|e| b.err(SchemaErrorKind::Regex(e), ptr))?
        }
        Err(e) => return Err(b.err(SchemaErrorKind::Regex(e), &nptr)),
    };
    let accept = |label: u64| {
        // A group with no language (only an unknown format) matches every string.
        label & all_mine == all_mine && label & words_bit == 0 && group_masks.iter().all(|&g| label & g != g)
    };
    joint_body(b, &set, accept, ptr)
}

/// The lowest `n` bits set (all 64 for `n` ≥ 64).
fn low_bits(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// What constrains a string: its regexes (`pattern`, a `format`'s) with the keyword of
/// each, its lengths and the strings it excludes.
pub(crate) type StringKey = (Vec<(String, &'static str)>, u32, Option<u32>, Vec<String>);

/// The grammar of a `type: string` schema `m` at `ptr`, for strings other than `not_in`
/// and those of `not_strings` (from a `not`, see [`super::combine::apply_not`]).
pub(crate) fn build(
    b: &mut Builder,
    m: &Map<String, Value>,
    not_in: &[&str],
    not_strings: &[Map<String, Value>],
    ptr: &str,
) -> Result<Expr, SchemaError> {
    let min = get_count(b, m, "minLength", ptr)?.unwrap_or(0);
    let mut max = get_count(b, m, "maxLength", ptr)?;
    if max.is_some_and(|x| x < min) {
        return Ok(nothing());
    }
    let lim = b.opts.limits.max_exact_length as u64;
    if min > lim {
        return Err(b.err(
            SchemaErrorKind::Limit { what: "minLength", given: min as usize, limit: lim as usize },
            ptr,
        ));
    }
    let plain = !m.contains_key("pattern")
        && !m.contains_key("format")
        && not_in.is_empty()
        && not_strings.is_empty();
    if plain && max.is_some_and(|x| x > CHAIN_MAX.min(lim) && (x - min) / BLOCK <= lim) {
        // Long plain strings stay exact through blocks (see `long_chars`).
        let body = long_chars(b, min as u32, max.unwrap_or(0))?;
        return b.leaf_rule(seq(vec![lit("\""), body, lit("\"")]), "string");
    }
    if max.is_some_and(|x| x > lim) {
        b.unsupported(
            "maxLength",
            &format!("over the exact-length limit of {lim}"),
            "not enforced beyond the limit: any length",
            ptr,
        )?;
        max = None;
    }
    let mut regexes: Vec<(String, &str)> = Vec::new();
    match m.get("pattern") {
        None => {}
        Some(Value::String(p)) => regexes.push((p.clone(), "pattern")),
        Some(_) => return Err(b.not_schema("`pattern` must be a string", ptr)),
    }
    if let Some(f) = m.get("format") {
        let f = f.as_str().ok_or_else(|| b.not_schema("`format` must be a string", ptr))?;
        match super::format::format_regex(f) {
            Some(re) => {
                if let Some(caveat) = super::format::format_caveat(f) {
                    b.warnings.push(super::SchemaWarning {
                        keyword: "format".into(),
                        pointer: ptr.into(),
                        approximation: caveat.into(),
                    });
                }
                regexes.push((re, "format"))
            }
            None if super::format::is_defined_format(f) => b.unsupported(
                "format",
                &format!("format `{f}` is not enforced"),
                "not enforced: any string",
                ptr,
            )?,
            // Draft 2020-12 §7.2: an unknown format is an annotation and must not fail
            // validation (the official suite's `optional/format/unknown.json` checks it),
            // so "any string" is the exact semantics, not an approximation.
            None => b.warnings.push(super::SchemaWarning {
                keyword: "format".into(),
                pointer: ptr.into(),
                approximation: format!("unknown format `{f}` is an annotation: any string"),
            }),
        }
    }
    if !not_strings.is_empty() {
        let body = complement_body(b, m, not_in, not_strings, ptr)?;
        return Ok(if super::whitespace::is_nothing(&body) {
            body
        } else {
            seq(vec![lit("\""), body, lit("\"")])
        });
    }
    if regexes.is_empty() && min == 0 && max.is_none() && not_in.is_empty() {
        return b.any_string();
    }
    // One rule per distinct constrained string in the grammar, found by what constrains it.
    let (min, max) = (min as u32, max.map(|x| x as u32));
    let key = (regexes, min, max, not_in.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    if let Some(e) = b.string_rules.get(&key) {
        return Ok(e.clone());
    }
    let warned = b.warnings.len();
    let body = constrained_body(b, &key.0, min, max, not_in, ptr)?;
    let string = seq(vec![lit("\""), body, lit("\"")]);
    let e = if matches!(&key.0[..], [(_, "format")]) && (min, max) == (0, None) && not_in.is_empty() {
        // A format alone, kept without hashing its expression (a date-time's is large).
        let id = b.new_rule("format", ptr)?;
        b.rules[id.index()].body = string;
        b.rules[id.index()].keep = true;
        Expr::Rule(id)
    } else {
        b.leaf_rule(string, "string")?
    };
    // A warning names its place: a string that warned is built again where it recurs.
    if b.warnings.len() == warned {
        b.string_rules.insert(key, e.clone());
    }
    Ok(e)
}
