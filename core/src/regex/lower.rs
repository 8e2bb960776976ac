//! [`Node`] tree → grammar [`Expr`]: anchors, unanchored sides, length bounds and the
//! JSON-string encoding.
//!
//! Passes, in order (see [`lower`]):
//! 1. [`split_anchors`] — the pattern becomes a list of branches, each with "anchored at
//!    start" / "anchored at end" flags. `^` / `$` are recognized at the start / end of
//!    top-level branches, also through groups (`^(a|b)$`, `(^a|^b)`); an anchor anywhere
//!    else is a typed error. AFTER THIS: no anchors remain.
//! 2. length restriction (optional, for JSON Schema `minLength`/`maxLength` beside a
//!    `pattern`) — bounds are pushed into the one variable-length part of each branch.
//! 3. encoding — each character class becomes either the class itself
//!    ([`Encoding::Raw`]) or the alternatives of its JSON-encoded forms
//!    ([`Encoding::JsonString`]).

use super::parse::Node;
use super::{RegexError, RegexErrorKind, RegexLimits};
use crate::grammar::class::{class_contains, intersect_class, subtract_class};
use crate::grammar::Expr;

/// How generated characters are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// As themselves.
    Raw,
    /// As they appear inside a JSON string literal (without the quotes), in every
    /// spelling JSON has for them ([`json_class`]).
    JsonString,
}

/// One top-level branch after anchor analysis.
#[derive(Debug, Clone)]
pub(crate) struct Branch {
    pub start: bool,
    pub body: Node,
    pub end: bool,
}

fn has_anchor(n: &Node) -> bool {
    match n {
        Node::Start | Node::End => true,
        Node::Empty | Node::Class(_) => false,
        Node::Seq(v) | Node::Alt(v) => v.iter().any(has_anchor),
        Node::Repeat { node, .. } => has_anchor(node),
    }
}

fn seq(items: Vec<Node>) -> Node {
    match items.len() {
        0 => Node::Empty,
        1 => items.into_iter().next().unwrap_or(Node::Empty),
        _ => Node::Seq(items),
    }
}

impl Branch {
    /// The same language with what an unanchored side absorbs removed: with `.*` after
    /// the body, anything nullable at its end adds nothing (`ab?c*` ≡ `a` there), and a
    /// repetition there needs only its minimum (`[a-z]+` ≡ `[a-z]`); likewise at the
    /// start. Unanchored patterns such as a URI regex without `^`/`$` otherwise make
    /// the subset construction track every way of being inside the optional tail, and a
    /// fixed-length body lets length bounds combine ([`restrict_branch_len`]).
    pub(crate) fn trim_free_sides(mut self) -> Branch {
        if !self.end {
            self.body = trim(self.body, true);
        }
        if !self.start {
            self.body = trim(self.body, false);
        }
        self
    }
}

/// `n` with the part a free side (`.*` after it when `at_end`, before it otherwise)
/// absorbs removed.
fn trim(n: Node, at_end: bool) -> Node {
    if nullable(&n) {
        return Node::Empty;
    }
    match n {
        Node::Seq(mut items) => {
            // Work at the vector's end either way (removing from the front is quadratic
            // on `a?a?a?…b`).
            if !at_end {
                items.reverse();
            }
            while let Some(x) = items.pop() {
                let x = trim(x, at_end);
                if !matches!(x, Node::Empty) {
                    items.push(x);
                    break;
                }
            }
            if !at_end {
                items.reverse();
            }
            seq(items)
        }
        Node::Alt(v) => Node::Alt(v.into_iter().map(|x| trim(x, at_end)).collect()),
        Node::Repeat { node, min: 1, .. } => trim(*node, at_end),
        Node::Repeat { node, min, .. } => Node::Repeat { node, min, max: Some(min) },
        other => other,
    }
}

/// Whether `n` matches the empty string.
fn nullable(n: &Node) -> bool {
    match n {
        Node::Empty | Node::Start | Node::End => true,
        Node::Class(_) => false,
        Node::Seq(v) => v.iter().all(nullable),
        Node::Alt(v) => v.iter().any(nullable),
        Node::Repeat { node, min, .. } => *min == 0 || nullable(node),
    }
}

/// Most branches anchor distribution may create (`(^a|b)(c|d$)` multiplies).
const MAX_BRANCHES: usize = 256;

/// Splits the pattern into branches with their anchors.
pub(crate) fn split_anchors(n: Node, pattern: &str) -> Result<Vec<Branch>, RegexError> {
    let mut out = Vec::new();
    split_into(n, &mut out);
    if out.len() > MAX_BRANCHES {
        return Err(anchor_err(pattern));
    }
    for b in &out {
        if has_anchor(&b.body) {
            return Err(anchor_err(pattern));
        }
    }
    Ok(out)
}

fn anchor_err(pattern: &str) -> RegexError {
    let offset = pattern.char_indices().find(|&(i, c)| (c == '^' || c == '$') && i > 0).map_or(0, |(i, _)| i);
    RegexError {
        kind: RegexErrorKind::Unsupported(
            "`^` or `$` inside the pattern (only at the start or end of a branch)".into(),
        ),
        pattern: pattern.to_string(),
        offset,
    }
}

fn split_into(n: Node, out: &mut Vec<Branch>) {
    if out.len() > MAX_BRANCHES {
        return;
    }
    match n {
        Node::Alt(v) if v.iter().any(has_anchor) => v.into_iter().for_each(|x| split_into(x, out)),
        Node::Start => out.push(Branch { start: true, body: Node::Empty, end: false }),
        Node::End => out.push(Branch { start: false, body: Node::Empty, end: true }),
        Node::Seq(mut items) if items.iter().any(has_anchor) => {
            let mut start = false;
            let mut end = false;
            while matches!(items.first(), Some(Node::Start)) {
                items.remove(0);
                start = true;
            }
            while matches!(items.last(), Some(Node::End)) {
                items.pop();
                end = true;
            }
            // Distribute a leading / trailing group that still holds anchors.
            let first_anch =
                items.first().is_some_and(|f| has_anchor(f) && matches!(f, Node::Alt(_) | Node::Seq(_)));
            let last_anch = items.len() > 1
                && items.last().is_some_and(|f| has_anchor(f) && matches!(f, Node::Alt(_) | Node::Seq(_)));
            if first_anch || last_anch {
                let idx = if first_anch { 0 } else { items.len() - 1 };
                let g = items.remove(idx);
                let alts = match g {
                    Node::Alt(v) => v,
                    other => vec![other],
                };
                for a in alts {
                    let mut s = items.clone();
                    match a {
                        Node::Seq(inner) => {
                            let tail = s.split_off(idx);
                            s.extend(inner);
                            s.extend(tail);
                        }
                        a => s.insert(idx, a),
                    }
                    let mut sub = Vec::new();
                    split_into(Node::Seq(s), &mut sub);
                    for mut b in sub {
                        b.start |= start;
                        b.end |= end;
                        out.push(b);
                    }
                }
                return;
            }
            out.push(Branch { start, body: seq(items), end });
        }
        body => out.push(Branch { start: false, body, end: false }),
    }
}

/// `(min, max)` length in characters (`max == None`: unbounded).
pub(crate) fn len_range(n: &Node) -> (u64, Option<u64>) {
    match n {
        Node::Empty | Node::Start | Node::End => (0, Some(0)),
        Node::Class(_) => (1, Some(1)),
        Node::Seq(v) => v.iter().map(len_range).fold((0, Some(0)), |(a, b), (c, d)| {
            (a.saturating_add(c), b.zip(d).map(|(b, d)| b.saturating_add(d)))
        }),
        Node::Alt(v) => {
            let mut lo = u64::MAX;
            let mut hi = Some(0);
            for (a, b) in v.iter().map(len_range) {
                lo = lo.min(a);
                hi = hi.zip(b).map(|(x, y): (u64, u64)| x.max(y));
            }
            (if v.is_empty() { 0 } else { lo }, hi)
        }
        Node::Repeat { node, min, max } => {
            let (a, b) = len_range(node);
            (
                a.saturating_mul(*min as u64),
                b.and_then(|b| if b == 0 { Some(0) } else { max.map(|m| b.saturating_mul(m as u64)) }),
            )
        }
    }
}

fn nothing() -> Node {
    Node::Class(Vec::new())
}

fn within(r: (u64, Option<u64>), lo: u64, hi: Option<u64>) -> bool {
    r.0 >= lo
        && match (r.1, hi) {
            (_, None) => true,
            (Some(a), Some(b)) => a <= b,
            (None, Some(_)) => false,
        }
}

fn disjoint(r: (u64, Option<u64>), lo: u64, hi: Option<u64>) -> bool {
    r.1.is_some_and(|m| m < lo) || hi.is_some_and(|h| r.0 > h)
}

/// Restricts `n` to strings of length `lo..=hi`, or `None` when the structure is too
/// complex for this exact transformation.
pub(crate) fn restrict_len(n: Node, lo: u64, hi: Option<u64>) -> Option<Node> {
    let r = len_range(&n);
    if within(r, lo, hi) {
        return Some(n);
    }
    if disjoint(r, lo, hi) {
        return Some(nothing());
    }
    match n {
        Node::Alt(v) => {
            v.into_iter().map(|x| restrict_len(x, lo, hi)).collect::<Option<Vec<_>>>().map(Node::Alt)
        }
        Node::Repeat { node, min, max } => {
            let (a, b) = len_range(&node);
            if a != b.unwrap_or(u64::MAX) || a == 0 {
                return None;
            }
            let new_min = (min as u64).max(lo.div_ceil(a));
            let new_max = match (max, hi) {
                (Some(m), Some(h)) => Some((m as u64).min(h / a)),
                (Some(m), None) => Some(m as u64),
                (None, Some(h)) => Some(h / a),
                (None, None) => None,
            };
            if new_max.is_some_and(|m| m < new_min) {
                return Some(nothing());
            }
            let min = u32::try_from(new_min).ok()?;
            let max = new_max.map(u32::try_from).transpose().ok()?;
            Some(Node::Repeat { node, min, max })
        }
        Node::Seq(mut v) => {
            let ranges: Vec<_> = v.iter().map(len_range).collect();
            let var: Vec<usize> = (0..v.len()).filter(|&i| ranges[i].1 != Some(ranges[i].0)).collect();
            if var.len() != 1 {
                return None;
            }
            let fixed: u64 = (0..v.len()).filter(|&i| i != var[0]).map(|i| ranges[i].0).sum();
            let i = var[0];
            let part = std::mem::replace(&mut v[i], Node::Empty);
            v[i] = restrict_len(
                part,
                lo.saturating_sub(fixed),
                match hi {
                    Some(h) if h < fixed => return Some(nothing()),
                    Some(h) => Some(h - fixed),
                    None => None,
                },
            )?;
            Some(Node::Seq(v))
        }
        _ => None,
    }
}

/// Start positions a length-bounded search may have. Each copies the tail after an
/// occurrence, so the automaton before minimization is quadratic in them: 32 starts of a
/// JSON string character compile in about 9 ms, 64 in 37 ms.
const MAX_NESTED_STARTS: u64 = 32;

/// Restricts an unanchored branch `any* body any*` (flags say which sides are free) to
/// lengths `lo..=hi`, when `body` has a fixed length.
pub(crate) fn restrict_branch_len(b: Branch, lo: u64, hi: Option<u64>, any: &Node) -> Option<Node> {
    let rep = |n: &Node, min: u64, max: Option<u64>| -> Option<Node> {
        Some(Node::Repeat {
            node: Box::new(n.clone()),
            min: u32::try_from(min).ok()?,
            max: max.map(u32::try_from).transpose().ok()?,
        })
    };
    let any_rep = |min: u64, max: Option<u64>| rep(any, min, max);
    match (b.start, b.end) {
        (true, true) => restrict_len(b.body, lo, hi),
        (true, false) | (false, true) => {
            let (a, bmax) = len_range(&b.body);
            let tail = if bmax == Some(a) {
                any_rep(
                    lo.saturating_sub(a),
                    match hi {
                        Some(h) if h < a => return Some(nothing()),
                        Some(h) => Some(h - a),
                        None => None,
                    },
                )?
            } else {
                return None;
            };
            Some(if b.start { Node::Seq(vec![b.body, tail]) } else { Node::Seq(vec![tail, b.body]) })
        }
        (false, false) => {
            let (k, kmax) = len_range(&b.body);
            if kmax != Some(k) {
                return None;
            }
            if hi.is_some_and(|h| h < k) {
                return Some(nothing());
            }
            // Built nested, `S_i = body tail_i | skip S_{i+1}` (`S_i`: the rest of a string
            // whose first i characters held no occurrence): after i characters only `S_i`
            // and the occurrences already found are alive. A flat union of
            // `any{i} body tail_i` instead keeps every branch still counting its prefix
            // alive, and its subsets of found occurrences make determinization
            // exponential in `maxLength` (`[0-9a-f]` with length 12: 90 ms).
            //
            // For a one-character body, `skip` is every other character: the first
            // occurrence is then the only one tracked, and the automaton deterministic.
            let skip = match (&b.body, any) {
                (Node::Class(c), Node::Class(a)) => Node::Class(subtract_class(a, c)),
                _ => any.clone(),
            };
            // Starts tracked one by one; past them (no `maxLength`) the bound no longer
            // binds what precedes the occurrence.
            let (starts, mut rest) = match hi {
                Some(h) => (h - k + 1, None),
                None => {
                    let top = lo.saturating_sub(k);
                    (top, Some(Node::Seq(vec![rep(&skip, 0, None)?, b.body.clone(), any_rep(0, None)?])))
                }
            };
            if starts > MAX_NESTED_STARTS {
                return None;
            }
            for i in (0..starts).rev() {
                let rest_lo = lo.saturating_sub(k + i);
                let here = match hi {
                    Some(h) if rest_lo > h - k - i => None,
                    Some(h) => Some(Node::Seq(vec![b.body.clone(), any_rep(rest_lo, Some(h - k - i))?])),
                    None => Some(Node::Seq(vec![b.body.clone(), any_rep(rest_lo, None)?])),
                };
                let later = rest.take().map(|r| Node::Seq(vec![skip.clone(), r]));
                rest = match (here, later) {
                    (Some(a), Some(l)) => Some(Node::Alt(vec![a, l])),
                    (a, l) => a.or(l),
                };
            }
            Some(rest.unwrap_or_else(nothing))
        }
    }
}

/// Characters a JSON string writes as-is: everything but `"`, `\` and C0 controls.
const JSON_PLAIN: &[(u32, u32)] = &[(0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, 0x10FFFF)];

/// Every JSON spelling of one character from `ranges` (RFC 8259 §7): the character
/// itself where JSON lets it stand (not `"`, `\\` or a C0 control), its short escape
/// (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`), and `\uXXXX` (hex digits in either
/// case) — a character past the Basic Multilingual Plane as its UTF-16 surrogate pair,
/// a surrogate code point never (no string holds one). A decoder reads each spelling
/// back as exactly one character, so a set of strings spelled this way is spelled
/// exactly: the intersection of two such encodings is the encoding of the intersection,
/// and a length counts characters, however each is written.
pub(crate) fn json_class(ranges: &[(u32, u32)]) -> Expr {
    let plain = intersect_class(ranges, JSON_PLAIN);
    let mut alts = Vec::new();
    if !plain.is_empty() {
        alts.push(Expr::Class(plain));
    }
    alts.extend(json_escapes(ranges));
    if alts.is_empty() {
        return Expr::Class(Vec::new());
    }
    one(alts)
}

/// The escape spellings (`\…`) of the characters of `ranges`, if they have any (every
/// character has: `\uXXXX`).
///
/// Built once per process while the memo holds under 2^18 expression nodes (a few MiB; the
/// escapes of a class take hex digits in either case and surrogate pairs: building them for
/// every class of every pattern, format and key was a third of converting a large tool
/// list's schemas). Past that they are built each time.
pub(crate) fn json_escapes(ranges: &[(u32, u32)]) -> Option<Expr> {
    const MEMO_NODES: usize = 1 << 18;
    type Memo = std::sync::Mutex<(rustc_hash::FxHashMap<Vec<(u32, u32)>, Option<Expr>>, usize)>;
    static MEMO: std::sync::OnceLock<Memo> = std::sync::OnceLock::new();
    let memo = MEMO.get_or_init(Default::default);
    // A poisoned lock only means another thread panicked while holding it: build afresh.
    if let Some(e) = memo.lock().ok().and_then(|m| m.0.get(ranges).cloned()) {
        return e;
    }
    let e = build_json_escapes(ranges);
    if let Ok(mut m) = memo.lock() {
        let nodes = ranges.len() + e.as_ref().map_or(0, Expr::size);
        if m.1 + nodes <= MEMO_NODES {
            m.1 += nodes;
            m.0.insert(ranges.to_vec(), e.clone());
        }
    }
    e
}

fn build_json_escapes(ranges: &[(u32, u32)]) -> Option<Expr> {
    let mut escaped = Vec::new();
    let shorts: Vec<(u32, u32)> = [
        ('"', '"'),
        ('\\', '\\'),
        ('/', '/'),
        ('\u{8}', 'b'),
        ('\u{c}', 'f'),
        ('\n', 'n'),
        ('\r', 'r'),
        ('\t', 't'),
    ]
    .iter()
    .filter(|(c, _)| class_contains(ranges, *c as u32))
    .map(|&(_, e)| (e as u32, e as u32))
    .collect();
    if !shorts.is_empty() {
        escaped.push(Expr::Class(crate::grammar::class::normalize_class(shorts)));
    }
    let mut units = Vec::new();
    let bmp = intersect_class(ranges, &[(0, 0xD7FF), (0xE000, 0xFFFF)]);
    if !bmp.is_empty() {
        units.push(hex_digits(&bmp, 4));
    }
    if let Some(pairs) = surrogate_pairs(&intersect_class(ranges, &[(0x10000, 0x10FFFF)])) {
        units.push(pairs);
    }
    if !units.is_empty() {
        escaped.push(cat(Expr::Literal("u".into()), one(units)));
    }
    (!escaped.is_empty()).then(|| cat(Expr::Literal("\\".into()), one(escaped)))
}

/// `a` then `b`, adjacent literals merged (`"\\u00" [Ee]` rather than nested sequences).
fn cat(a: Expr, b: Expr) -> Expr {
    let mut v = match a {
        Expr::Seq(v) => v,
        a => vec![a],
    };
    let tail = match b {
        Expr::Seq(w) => w,
        b => vec![b],
    };
    for e in tail {
        match (v.last_mut(), e) {
            (Some(Expr::Literal(l)), Expr::Literal(m)) => l.push_str(&m),
            (_, e) => v.push(e),
        }
    }
    if v.len() == 1 {
        v.pop().unwrap_or(Expr::Empty)
    } else {
        Expr::Seq(v)
    }
}

/// Inclusive integer ranges.
type Ranges = Vec<(u32, u32)>;

/// Integer ranges sorted and merged where they touch.
fn merge(mut v: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    v.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(v.len());
    for (lo, hi) in v {
        match out.last_mut() {
            Some(last) if lo <= last.1 + 1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// `v` as one expression: its only element, or their alternation.
fn one(mut v: Vec<Expr>) -> Expr {
    if v.len() == 1 {
        v.pop().unwrap_or(Expr::Empty)
    } else {
        Expr::Alt(v)
    }
}

/// The hex digits (either case) whose value is in `digits`; one decimal digit is a
/// literal.
fn hex_digit_class(digits: &[u32]) -> Expr {
    if let [d @ 0..=9] = digits {
        return Expr::Literal(char::from(b'0' + *d as u8).to_string());
    }
    let mut set = Vec::new();
    for &d in digits {
        if d < 10 {
            set.push(('0' as u32 + d, '0' as u32 + d));
        } else {
            set.push(('a' as u32 + d - 10, 'a' as u32 + d - 10));
            set.push(('A' as u32 + d - 10, 'A' as u32 + d - 10));
        }
    }
    Expr::Class(crate::grammar::class::normalize_class(set))
}

/// The `n`-digit hex numerals (either case) of the values in `ranges` (all below
/// `16^n`): split by leading digit, leading digits whose remainders are the same set
/// sharing one branch, so a full range is one class per digit.
fn hex_digits(ranges: &[(u32, u32)], n: u32) -> Expr {
    if n == 0 {
        return Expr::Empty;
    }
    let span = 16u32.pow(n - 1);
    // (remainder set, leading digits) in order of first appearance.
    let mut groups: Vec<(Ranges, Vec<u32>)> = Vec::new();
    for d in 0..16u32 {
        let lo = d * span;
        // (Plain integer ranges: the class functions drop surrogate code points, which
        // are values here.)
        let rest: Vec<(u32, u32)> = ranges
            .iter()
            .filter(|&&(a, b)| a < lo + span && b >= lo)
            .map(|&(a, b)| (a.max(lo) - lo, b.min(lo + span - 1) - lo))
            .collect();
        if rest.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|g| g.0 == rest) {
            Some(g) => g.1.push(d),
            None => groups.push((rest, vec![d])),
        }
    }
    one(groups
        .into_iter()
        .map(|(rest, digits)| {
            let head = hex_digit_class(&digits);
            if n == 1 {
                head
            } else if rest == [(0, span - 1)] {
                Expr::Seq(vec![
                    head,
                    Expr::Repeat {
                        expr: Box::new(hex_digit_class(&(0..16).collect::<Vec<_>>())),
                        min: n - 1,
                        max: Some(n - 1),
                    },
                ])
            } else {
                cat(head, hex_digits(&rest, n - 1))
            }
        })
        .collect())
}

/// The surrogate-pair escapes (`XXXX\uXXXX`, after the first `\u`) of the supplementary
/// characters in `ranges`; `None` when there are none. Each high surrogate's lows are a
/// range; high surrogates with the same lows share one branch.
fn surrogate_pairs(ranges: &[(u32, u32)]) -> Option<Expr> {
    // (lows, highs) in order of first appearance.
    let mut groups: Vec<((u32, u32), Ranges)> = Vec::new();
    let mut add = |hi: (u32, u32), lo: (u32, u32)| match groups.iter_mut().find(|g| g.0 == lo) {
        Some(g) => g.1.push(hi),
        None => groups.push((lo, vec![hi])),
    };
    for &(a, b) in ranges {
        let (a, b) = (a - 0x10000, b - 0x10000);
        let (ha, hb) = (0xD800 + (a >> 10), 0xD800 + (b >> 10));
        let (la, lb) = (0xDC00 + (a & 0x3FF), 0xDC00 + (b & 0x3FF));
        if ha == hb {
            add((ha, ha), (la, lb));
            continue;
        }
        add((ha, ha), (la, 0xDFFF));
        if hb > ha + 1 {
            add((ha + 1, hb - 1), (0xDC00, 0xDFFF));
        }
        add((hb, hb), (0xDC00, lb));
    }
    if groups.is_empty() {
        return None;
    }
    Some(one(groups
        .into_iter()
        .map(|(lo, highs)| {
            cat(cat(hex_digits(&merge(highs), 4), Expr::Literal("\\u".into())), hex_digits(&[lo], 4))
        })
        .collect()))
}

/// Lowers a node, merging runs of single plain characters into literals.
pub(crate) fn node_to_expr(n: &Node, enc: Encoding) -> Expr {
    let single = |n: &Node| -> Option<char> {
        match n {
            Node::Class(r) if r.len() == 1 && r[0].0 == r[0].1 => {
                let c = char::from_u32(r[0].0)?;
                // In a JSON string every character has other spellings (`\\u0061`).
                (enc == Encoding::Raw).then_some(c)
            }
            _ => None,
        }
    };
    match n {
        Node::Empty | Node::Start | Node::End => Expr::Empty,
        Node::Class(r) => match single(n) {
            Some(c) => Expr::Literal(c.to_string()),
            None if enc == Encoding::Raw => Expr::Class(r.clone()),
            None => json_class(r),
        },
        Node::Seq(v) => {
            let mut out = Vec::new();
            let mut lit = String::new();
            for x in v {
                if let Some(c) = single(x) {
                    lit.push(c);
                    continue;
                }
                if !lit.is_empty() {
                    out.push(Expr::Literal(std::mem::take(&mut lit)));
                }
                out.push(node_to_expr(x, enc));
            }
            if !lit.is_empty() {
                out.push(Expr::Literal(lit));
            }
            if out.len() == 1 {
                out.pop().unwrap_or(Expr::Empty)
            } else {
                Expr::Seq(out)
            }
        }
        Node::Alt(v) => Expr::Alt(v.iter().map(|x| node_to_expr(x, enc)).collect()),
        Node::Repeat { node, min, max } => {
            Expr::Repeat { expr: Box::new(node_to_expr(node, enc)), min: *min, max: *max }
        }
    }
}

/// Checks `e` against [`RegexLimits::max_size`].
pub(crate) fn check_size(e: &Expr, pattern: &str, limits: &RegexLimits) -> Result<(), RegexError> {
    let size = e.expanded_size();
    if size > limits.max_size as u64 {
        return Err(RegexError {
            kind: RegexErrorKind::TooLarge { given: size, limit: limits.max_size },
            pattern: pattern.to_string(),
            offset: 0,
        });
    }
    Ok(())
}
