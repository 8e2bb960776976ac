//! The JSON spelling of a character automaton, built as an automaton.
//!
//! # Why
//! A string's joint automaton (a `pattern` under `maxLength`, several patterns, a
//! complement) is a DFA over decoded characters. JSON writes each character in several
//! ways (`é`, `\u00e9`, `\u00E9`; `\/`; surrogate pairs), and every one must be accepted.
//! Written as grammar rules, every state's every class carried its own copy of the escape
//! spellings ([`super::json_string_char`]): the product of `.+@.+\.___` and
//! `maxLength: 200` (5,477 states) became 3,484 rules and 112,000 byte-level states, and
//! a third of a second to compile. Here the spelled automaton is built directly: after
//! `\u` the states read hex digits, and a state is identified by what the remaining
//! digits lead to — so "any three hex digits, then state t" is one state however many
//! characters share it, and a state gains only the few escape states where its classes
//! differ in the digits. (The four digits right after a state's own `\u` are the
//! exception: built for that state alone, [`Speller::hex_state`].)

use crate::grammar::{CharDfa, CharMove};
use crate::interner::SliceInterner;
use rustc_hash::FxHashMap;

/// The characters a JSON string may hold as themselves (not `"`, `\` or controls).
const PLAIN: &[(u32, u32)] = &[(0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, 0x10FFFF)];

/// The two-character escapes: the character, and the letter after `\`.
const SHORT: [(u32, u32); 8] = [
    (0x22, b'"' as u32),
    (0x5C, b'\\' as u32),
    (0x2F, b'/' as u32),
    (0x08, b'b' as u32),
    (0x0C, b'f' as u32),
    (0x0A, b'n' as u32),
    (0x0D, b'r' as u32),
    (0x09, b't' as u32),
];

/// `(lo, hi, target)`: values `lo..=hi` lead to `target`; sorted, disjoint.
type Pieces = Vec<(u32, u32, u32)>;

/// An escape state, by what it does (so that equal ones are one state; the state after
/// `\` names the state after `u`, which only states on cycles look up and share).
#[derive(Hash, PartialEq, Eq)]
enum Key {
    /// After `\`: each short escape's target, and the state after `u`.
    Escape([Option<u32>; 8], Option<u32>),
    /// After a high surrogate's four digits: `\`, then `u`, then the state given.
    Low(u32),
    /// After that `\`.
    LowU(u32),
}

struct Speller {
    moves: Vec<Vec<CharMove>>,
    finals: Vec<bool>,
    index: FxHashMap<Key, u32>,
    /// The digit classes built so far, by digit set (a few dozen in all).
    classes: FxHashMap<u16, Vec<(u32, u32)>>,
    /// Scratch per digit level for [`Speller::hex_state`].
    subs: [Pieces; 5],
    /// The hex-digit states by what they do, `[digits, lo, hi, target, …]` (the value
    /// the digits spell leads by the pieces), looked up from a reused buffer: most
    /// lookups find one, and each had built its key anew.
    hex_keys: SliceInterner,
    /// Per id of `hex_keys`, its state.
    hex_states: Vec<u32>,
    /// Scratch per digit level: the key being looked up.
    key_bufs: [Vec<u32>; 5],
    /// Per digit level and target: the state reading that many digits, whatever they are,
    /// then going to the target (`u32::MAX`: none yet).
    hex_all: [Vec<u32>; 5],
}

impl Speller {
    /// The state for `key`, built by `moves` when new.
    fn intern(&mut self, key: Key, moves: impl FnOnce(&mut Self) -> Vec<CharMove>) -> u32 {
        if let Some(&s) = self.index.get(&key) {
            return s;
        }
        let m = moves(self);
        let s = self.moves.len() as u32;
        self.moves.push(m);
        self.finals.push(false);
        self.index.insert(key, s);
        s
    }

    /// The state reading `digits` hex digits whose value leads by `pieces`.
    fn hex(&mut self, digits: u8, pieces: &[(u32, u32, u32)]) -> u32 {
        // Any digits, then one state: the common case (every piece of a class but the few
        // values where classes differ), found by index.
        if let [(0, hi, t)] = *pieces {
            if hi == 16u32.pow(u32::from(digits)) - 1 {
                let at = t as usize;
                let level = usize::from(digits);
                if let Some(&s) = self.hex_all[level].get(at).filter(|&&s| s != u32::MAX) {
                    return s;
                }
                let s = self.hex_state(digits, pieces);
                let all = &mut self.hex_all[level];
                if all.len() <= at {
                    all.resize(at + 1, u32::MAX);
                }
                all[at] = s;
                return s;
            }
        }
        let mut key = std::mem::take(&mut self.key_bufs[usize::from(digits)]);
        key.clear();
        key.push(u32::from(digits));
        key.extend(pieces.iter().flat_map(|&(a, b, t)| [a, b, t]));
        let (id, new) = self.hex_keys.intern(&key);
        self.key_bufs[usize::from(digits)] = key;
        if !new {
            return self.hex_states[id as usize];
        }
        self.hex_states.push(u32::MAX);
        let s = self.hex_state(digits, pieces);
        self.hex_states[id as usize] = s;
        s
    }

    /// A new state reading `digits` hex digits whose value leads by `pieces`, not looked
    /// up: for the four digits after the `\u` of a state on no cycle, which lead by that
    /// state's own moves — states on no cycle moving alike were merged before spelling,
    /// or share one spelling where only their finality differs ([`merge_acyclic`]); a
    /// state on a cycle looks its digits up ([`Speller::spell`]). Their keys are the
    /// longest, and were hashed to be found nowhere: with the two lookups above, spelling
    /// `pattern` + `maxLength: 254` of the dev split's slowest schema (53,884 states)
    /// went from 33–34 to 21–23 ms.
    fn hex_state(&mut self, digits: u8, pieces: &[(u32, u32, u32)]) -> u32 {
        let all = 16u32.pow(u32::from(digits)) - 1;
        let moves = {
            let sp = &mut *self;
            let span = (all + 1) / 16;
            // Per target, the digits leading there (bit d).
            let mut by_target: Vec<(u32, u16)> = Vec::new();
            // One buffer per digit level, reused (a call recurses one level down only).
            let mut sub = std::mem::take(&mut sp.subs[usize::from(digits)]);
            let mut i = 0;
            for d in 0..16u32 {
                let (lo, hi) = (d * span, d * span + span - 1);
                while i < pieces.len() && pieces[i].1 < lo {
                    i += 1;
                }
                sub.clear();
                sub.extend(
                    pieces[i..]
                        .iter()
                        .take_while(|p| p.0 <= hi)
                        .map(|&(a, b, t)| (a.max(lo) - lo, b.min(hi) - lo, t)),
                );
                let target = match (digits, sub.first()) {
                    (_, None) => continue,
                    (1, Some(&(_, _, t))) => t,
                    _ => sp.hex(digits - 1, &sub),
                };
                match by_target.iter_mut().find(|x| x.0 == target) {
                    Some(x) => x.1 |= 1 << d,
                    None => by_target.push((target, 1 << d)),
                }
            }
            sp.subs[usize::from(digits)] = sub;
            by_target.into_iter().map(|(t, ds)| (sp.hex_class(ds), t)).collect()
        };
        let s = self.moves.len() as u32;
        self.moves.push(moves);
        self.finals.push(false);
        s
    }

    /// [`hex_class`], kept.
    fn hex_class(&mut self, ds: u16) -> Vec<(u32, u32)> {
        self.classes.entry(ds).or_insert_with(|| hex_class(ds)).clone()
    }

    /// The state after a high surrogate's digits whose low surrogate leads by `pieces`
    /// (values `0xDC00..=0xDFFF`).
    fn low(&mut self, pieces: Pieces) -> u32 {
        let digits = self.hex(4, &pieces);
        let u = self.intern(Key::LowU(digits), |_| vec![(vec![(b'u' as u32, b'u' as u32)], digits)]);
        self.intern(Key::Low(digits), |_| vec![(vec![(b'\\' as u32, b'\\' as u32)], u)])
    }

    /// The `\u` units of high surrogates for the characters of `pieces` past the BMP: per
    /// block of 1,024 characters, its high surrogate leads to the state reading the low
    /// one. Blocks wholly of one target share that state.
    fn highs(&mut self, pieces: &Pieces) -> Pieces {
        let mut highs: Pieces = Vec::new();
        // Blocks `first..=last` to state `s`, after those before them.
        let push = |highs: &mut Pieces, first: u32, last: u32, s: u32| {
            let (a, b) = (0xD800 + first, 0xD800 + last);
            match highs.last_mut() {
                Some(x) if x.2 == s && x.1 + 1 == a => x.1 = b,
                _ => highs.push((a, b, s)),
            }
        };
        // The block being gathered piece by piece, and its pieces as low-surrogate values.
        let mut partial: Option<(u32, Pieces)> = None;
        for &(a, b, t) in pieces.iter().filter(|p| p.1 >= 0x10000) {
            let (mut pos, b) = (a.max(0x10000) - 0x10000, b - 0x10000);
            while pos <= b {
                let block = pos >> 10;
                let (start, end) = (block << 10, (block << 10) | 0x3FF);
                if let Some((pb, low)) = partial.take_if(|p| p.0 != block) {
                    let s = self.low(low);
                    push(&mut highs, pb, pb, s);
                }
                if pos == start && b >= end {
                    let last = ((b + 1) >> 10) - 1;
                    let s = self.low(vec![(0xDC00, 0xDFFF, t)]);
                    push(&mut highs, block, last, s);
                    pos = (last + 1) << 10;
                } else {
                    let to = b.min(end);
                    let low = &mut partial.get_or_insert_with(|| (block, Vec::new())).1;
                    low.push((pos - start + 0xDC00, to - start + 0xDC00, t));
                    pos = to + 1;
                }
            }
        }
        if let Some((pb, low)) = partial {
            let s = self.low(low);
            push(&mut highs, pb, pb, s);
        }
        highs
    }

    /// The moves of a state whose characters lead by `pieces` (scalar values).
    /// A state on a cycle (`cyclic`) may move as another does (the joint automaton's
    /// minimization keeps states whose labels differ, though `accept` may not tell them
    /// apart): its four digits after `\u` are looked up like the rest.
    fn spell(&mut self, pieces: &Pieces, cyclic: bool) -> Vec<CharMove> {
        let mut out: Vec<CharMove> = Vec::new();
        // Ranges arrive in order, so each target's class stays sorted; touching ranges
        // (a piece's plain part meeting the next piece's) are joined.
        let add =
            |out: &mut Vec<CharMove>, (a, b): (u32, u32), t: u32| match out.iter_mut().find(|m| m.1 == t) {
                Some(m) => match m.0.last_mut() {
                    Some(last) if last.1 + 1 >= a => last.1 = last.1.max(b),
                    _ => m.0.push((a, b)),
                },
                None => out.push((vec![(a, b)], t)),
            };
        // `\u` and four digits: the BMP outside the surrogates as itself; a high
        // surrogate leads to its low one, which picks the character in its block of 1,024.
        let mut units: Pieces = Vec::with_capacity(pieces.len() + 4);
        for &(a, b, t) in pieces {
            for &(lo, hi) in PLAIN {
                if a.max(lo) <= b.min(hi) {
                    add(&mut out, (a.max(lo), b.min(hi)), t);
                }
            }
            for (lo, hi) in [(0, 0xD7FF), (0xE000, 0xFFFF)] {
                if a.max(lo) <= b.min(hi) {
                    units.push((a.max(lo), b.min(hi), t));
                }
            }
        }
        let at = |c: u32| pieces.iter().find(|p| p.0 <= c && c <= p.1).map(|p| p.2);
        let shorts = SHORT.map(|(c, _)| at(c));
        let highs = self.highs(pieces);
        units.extend(highs);
        units.sort_unstable();
        let u = (!units.is_empty()).then(|| match cyclic {
            true => self.hex(4, &units),
            false => self.hex_state(4, &units),
        });
        if u.is_some() || shorts.iter().any(Option::is_some) {
            let esc = self.intern(Key::Escape(shorts, u), |_| {
                let mut m: Vec<CharMove> = Vec::new();
                let letters = SHORT.iter().zip(shorts).filter_map(|(&(_, letter), t)| Some((letter, t?)));
                // In the table's order, not sorted (`add` would need them sorted): sorted after.
                for (letter, t) in letters.chain(u.map(|u| (b'u' as u32, u))) {
                    match m.iter_mut().find(|x| x.1 == t) {
                        Some(x) => x.0.push((letter, letter)),
                        None => m.push((vec![(letter, letter)], t)),
                    }
                }
                for x in &mut m {
                    x.0 = crate::grammar::class::normalize_class(std::mem::take(&mut x.0));
                }
                m
            });
            add(&mut out, (b'\\' as u32, b'\\' as u32), esc);
        }
        out
    }
}

/// The hex digits of the values whose bits are set in `ds` (bit d: digit d), both cases.
fn hex_class(ds: u16) -> Vec<(u32, u32)> {
    let mut class = Vec::new();
    for d in (0..16u32).filter(|d| ds >> d & 1 == 1) {
        if d < 10 {
            class.push((b'0' as u32 + d, b'0' as u32 + d));
        } else {
            class.push((b'A' as u32 + d - 10, b'A' as u32 + d - 10));
            class.push((b'a' as u32 + d - 10, b'a' as u32 + d - 10));
        }
    }
    crate::grammar::class::normalize_class(class)
}

/// The automaton over JSON text (the body of a string, without its quotes) of the strings
/// whose characters a character automaton accepts: per state, its moves `edges` as sorted,
/// disjoint `(lo, hi, target)` scalar ranges, and whether it is final; state 0 starts.
/// Every spelling of each character is taken: itself where JSON allows it, its short
/// escape, `\u` with hex digits in either case, a surrogate pair past the BMP (never a
/// lone surrogate), as [`super::json_string_char`] writes them. `None` for the empty
/// language.
pub(crate) fn spelled(
    edges: &[Pieces],
    finals: &[bool],
) -> Result<Option<CharDfa>, crate::budget::BudgetError> {
    let n = edges.len();
    let Spelling { edges, cyclic, twins } = merge_acyclic(edges, finals);
    let mut sp = Speller {
        moves: vec![Vec::new(); n],
        finals: finals.to_vec(),
        index: FxHashMap::default(),
        classes: FxHashMap::default(),
        subs: Default::default(),
        hex_keys: SliceInterner::default(),
        hex_states: Vec::new(),
        key_bufs: Default::default(),
        hex_all: Default::default(),
    };
    for (s, pieces) in edges.iter().enumerate() {
        let Some(pieces) = pieces.as_ref().filter(|_| twins[s].is_none()) else { continue };
        let before = sp.moves.len();
        sp.moves[s] = sp.spell(pieces, cyclic[s]);
        crate::budget::charge(
            crate::budget::Phase::Intersection,
            (pieces.len() + sp.moves.len() - before + 1) as u64,
        )?;
    }
    for (s, twin) in twins.iter().enumerate() {
        if let Some(t) = *twin {
            sp.moves[s] = sp.moves[t as usize].clone();
            crate::budget::charge(crate::budget::Phase::Intersection, 1 + sp.moves[s].len() as u64)?;
        }
    }
    // `None` is the empty language: the moves built above never overlap.
    Ok(CharDfa::trimmed(sp.moves, sp.finals))
}

/// The states worth spelling (`None` for the others) with their moves retargeted: states
/// on no cycle that are equivalent (same finality, every character to equivalent states)
/// are merged, bottom-up as for an acyclic automaton. A joint automaton under a length
/// bound is acyclic and keeps states apart that only its construction told apart; each
/// spelled state costs several escape states, so merging first is the cheaper order. (States
/// on cycles keep their identity; the byte automaton's minimization still merges what is
/// left.) Two states on no cycle that differ only in finality are twins: one spelling
/// serves both.
fn merge_acyclic(edges: &[Pieces], finals: &[bool]) -> Spelling {
    let n = edges.len();
    let cyclic = super::keyset::on_cycles(edges);
    // Post-order from the start: a state on no cycle comes after all its successors.
    let mut order = Vec::with_capacity(n);
    let mut seen = vec![false; n];
    seen[0] = true;
    let mut stack = vec![(0usize, 0usize)];
    while let Some((s, i)) = stack.pop() {
        match edges[s].get(i) {
            Some(&(_, _, t)) => {
                stack.push((s, i + 1));
                if !seen[t as usize] {
                    seen[t as usize] = true;
                    stack.push((t as usize, 0));
                }
            }
            None => order.push(s),
        }
    }
    const SELF: u32 = u32::MAX;
    let mut canon: Vec<u32> = (0..n as u32).collect();
    let mut out: Vec<Option<Pieces>> = vec![None; n];
    let mut twins: Vec<Option<u32>> = vec![None; n];
    // Per moves, the state kept with them, not final and final.
    let mut index: FxHashMap<Pieces, [u32; 2]> = FxHashMap::default();
    for s in order {
        let mut pieces: Pieces = Vec::with_capacity(edges[s].len());
        for &(a, b, t) in &edges[s] {
            let t = if t as usize == s { SELF } else { canon[t as usize] };
            match pieces.last_mut() {
                Some(last) if last.2 == t && last.1 + 1 == a => last.1 = b,
                _ => pieces.push((a, b, t)),
            }
        }
        if !cyclic[s] && s != 0 {
            let f = usize::from(finals[s]);
            match index.entry(pieces) {
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    let kept = *e.get();
                    if kept[f] != u32::MAX {
                        canon[s] = kept[f];
                        continue;
                    }
                    e.get_mut()[f] = s as u32;
                    // Moves to itself are not alike once named.
                    if !e.key().iter().any(|p| p.2 == SELF) {
                        twins[s] = Some(kept[1 - f]);
                    }
                    pieces = e.key().clone();
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    pieces = e.key().clone();
                    let mut kept = [u32::MAX; 2];
                    kept[f] = s as u32;
                    e.insert(kept);
                }
            }
        }
        for p in &mut pieces {
            if p.2 == SELF {
                p.2 = s as u32;
            }
        }
        out[s] = Some(pieces);
    }
    Spelling { edges: out, cyclic, twins }
}

/// What [`merge_acyclic`] leaves to spell.
struct Spelling {
    /// Per state, its moves retargeted (`None`: merged into another).
    edges: Vec<Option<Pieces>>,
    /// Per state, whether it is on a cycle.
    cyclic: Vec<bool>,
    /// Per state on no cycle, the state kept earlier with the same moves and the other
    /// finality: its spelled moves are the same, escape states and all.
    twins: Vec<Option<u32>>,
}

#[cfg(test)]
mod tests {
    use crate::regex::keyset::{Component, KeySet};
    use crate::regex::RegexLimits;

    /// Pieces of JSON string bodies: characters as themselves and in every escape
    /// spelling, the characters JSON forbids as themselves, lone surrogates, broken
    /// escapes. A pair of U+103FF / U+10400 sits on each side of a block of 1,024.
    const FRAGMENTS: &[&str] = &[
        "a",
        "b",
        "@",
        ".",
        "_",
        "é",
        "😀",
        "𐏿",
        "𐐀",
        "/",
        "\\\"",
        "\\\\",
        "\\/",
        "\\n",
        "\\t",
        "\\u0061",
        "\\u0040",
        "\\u00e9",
        "\\u00E9",
        "\\u002e",
        "\\u005F",
        "\\u2028",
        "\u{2028}",
        "\\ud83d\\ude00",
        "\\uD83D\\uDE00",
        "\\ud800\\udfff",
        "\\uD801\\uDC00",
        "\\ud83d",
        "\\ude00",
        "\\x",
        "\\u00",
        "\"",
        "\n",
        "\\",
    ];

    /// Every spelling of `c`: itself where JSON allows, its short escape, `\u` in both
    /// cases, a surrogate pair past the BMP.
    fn spellings(c: char) -> Vec<String> {
        let mut v = Vec::new();
        if !matches!(c, '"' | '\\' | '\0'..='\u{1f}') {
            v.push(c.to_string());
        }
        let short = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            '/' => "\\/",
            '\n' => "\\n",
            '\t' => "\\t",
            _ => "",
        };
        if !short.is_empty() {
            v.push(short.to_string());
        }
        let mut units = [0u16; 2];
        let units = c.encode_utf16(&mut units);
        let lower: String = units.iter().map(|u| format!("\\u{u:04x}")).collect();
        v.push(lower.to_uppercase().replace("\\U", "\\u"));
        v.push(lower);
        v
    }

    /// The spelled automaton of a pattern under length bounds (or, with `complement`, of
    /// the strings under the bounds it does not match) against `serde_json` decoding
    /// bodies and the `regex` crate judging the decoded text. Bodies are near-misses of
    /// `samples` (characters changed, added, dropped), each character spelled at random,
    /// and random soups of fragments (broken escapes, lone surrogates, raw quotes).
    fn check(pattern: &str, min: u32, max: Option<u32>, samples: &[&str], complement: bool, seed: u64) {
        let comps = [Component::Pattern(pattern), Component::Length { min, max }];
        let set = KeySet::build(&comps, &RegexLimits::default()).unwrap();
        let accept = |l: u64| if complement { l & 1 == 0 && l & 2 == 2 } else { l & 3 == 3 };
        let d = set.spelled(accept).unwrap();
        // Built without `CharDfa::new`'s check (`CharDfa::trimmed`): it must pass it.
        if let Some(d) = &d {
            let moves = (0..d.len()).map(|s| d.moves(s).to_vec()).collect();
            let again = crate::grammar::CharDfa::new(moves, (0..d.len()).map(|s| d.is_final(s)).collect());
            assert_eq!(again.map(|a| a.len()), Some(d.len()), "{pattern:?}: malformed moves");
        }
        // ECMA-262's `.` leaves out every line terminator, the `regex` crate's only `\n`.
        let oracle = regex::Regex::new(&pattern.replace(".+", "[^\n\r\u{2028}\u{2029}]+")).unwrap();
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let alphabet: Vec<char> = "ab@._é😀𐏿𐐀/\"\\\n\t\u{2028}".chars().collect();
        let (mut yes, mut no) = (0, 0);
        for _ in 0..6000 {
            let body: String = if next() % 4 == 0 {
                let len = (next() % 9) as usize;
                (0..len).map(|_| FRAGMENTS[(next() % FRAGMENTS.len() as u64) as usize]).collect()
            } else {
                let mut text: Vec<char> = samples[(next() % samples.len() as u64) as usize].chars().collect();
                for _ in 0..next() % 3 {
                    let c = alphabet[(next() % alphabet.len() as u64) as usize];
                    let at = (next() % (text.len() as u64 + 1)) as usize;
                    match next() % 3 {
                        0 => text.insert(at, c),
                        1 if at < text.len() => text[at] = c,
                        _ if at < text.len() => drop(text.remove(at)),
                        _ => {}
                    }
                }
                text.iter()
                    .map(|&c| {
                        let v = spellings(c);
                        v[(next() % v.len() as u64) as usize].clone()
                    })
                    .collect()
            };
            let want = match serde_json::from_str::<String>(&format!("\"{body}\"")) {
                Err(_) => false,
                Ok(text) => {
                    let n = text.chars().count() as u32;
                    oracle.is_match(&text) != complement && n >= min && max.is_none_or(|m| n <= m)
                }
            };
            let got = d.as_ref().is_some_and(|d| d.matches(&body));
            assert_eq!(got, want, "{pattern:?} {min}..{max:?} complement {complement} on {body:?}");
            if want {
                yes += 1;
            } else {
                no += 1;
            }
        }
        assert!(yes > 300 && no > 300, "{pattern:?}: {yes} accepted, {no} rejected: too few to judge");
    }

    #[test]
    fn every_spelling_of_the_joint_language_and_nothing_else() {
        let cases: &[(&str, u32, Option<u32>, &[&str])] = &[
            (".+[@].+[.]_", 2, Some(9), &["a@b._", "@@.._", "ab@.a._", "é@😀.__", "a@\u{2028}._"]),
            ("^[a@.]+$", 1, Some(4), &["a", "a@.", "@@@@", ".a"]),
            ("[é/\"]", 0, Some(5), &["é", "a/b", "\"\"", "x"]),
            ("😀|𐐀", 1, Some(3), &["😀", "a𐐀", "𐏿", "😀😀"]),
            ("^[𐏿-𐐀]*$", 0, Some(4), &["𐏿", "𐐀𐏿", "", "😀"]),
            ("^[^@]*$", 2, None, &["ab", "a@", "\n\t", "é😀/"]),
            ("\\\\|\\n", 0, Some(8), &["\\", "\n", "a\\b", "ab"]),
            ("^(a|b)*(\u{2028}|_)", 1, Some(7), &["_", "ab\u{2028}", "a", "ba_x"]),
        ];
        for (i, &(p, lo, hi, samples)) in cases.iter().enumerate() {
            check(p, lo, hi, samples, false, 0x9E37_79B9 + i as u64);
            check(p, lo, hi, samples, true, 0x85EB_CA6B + i as u64);
        }
    }

    #[test]
    fn equivalent_states_on_no_cycle_are_spelled_once() {
        // `a` or `b`, then `c`: the two middle states and the two ends are alike, so
        // three states are spelled; a state on a cycle keeps its identity.
        let (a, b, c) = ('a' as u32, 'b' as u32, 'c' as u32);
        let edges = vec![vec![(a, a, 1), (b, b, 2)], vec![(c, c, 3)], vec![(c, c, 4)], vec![], vec![]];
        let finals = [false, false, false, true, true];
        let kept = super::merge_acyclic(&edges, &finals).edges;
        assert_eq!(kept.iter().filter(|k| k.is_some()).count(), 3);
        let merged = vec![vec![(a, b, 1)], vec![(c, c, 2)], vec![]];
        let (d, m) = (
            super::spelled(&edges, &finals).unwrap().unwrap(),
            super::spelled(&merged, &[false, false, true]).unwrap().unwrap(),
        );
        assert_eq!(d.len(), m.len());
        assert!(d.matches("a\\u0063") && d.matches("\\u0062c") && !d.matches("ac\\u0063"));
        // Alike but for finality: twins, one spelling for both (one state more than when
        // both are final and merge, not a second set of escape states).
        let finals = [false, true, false, true, true];
        let twins = super::merge_acyclic(&edges, &finals).twins;
        assert_eq!(twins.iter().filter(|t| t.is_some()).count(), 1, "{twins:?}");
        let (d, m) = (
            super::spelled(&edges, &finals).unwrap().unwrap(),
            super::spelled(&edges, &[false, true, true, true, true]).unwrap().unwrap(),
        );
        assert_eq!(d.len(), m.len() + 1);
        assert!(d.matches("a") && !d.matches("b") && d.matches("\\u0062\\u0063") && !d.matches("ab"));
        // 1 and 2 loop through each other: on a cycle, kept apart.
        let cyclic = vec![vec![(a, a, 1), (b, b, 2)], vec![(c, c, 2)], vec![(c, c, 1)]];
        let kept = super::merge_acyclic(&cyclic, &[false, true, true]).edges;
        assert_eq!(kept.iter().filter(|k| k.is_some()).count(), 3);
    }
}
