//! Masks of *leaf rules* shared across grammars compiled for one tokenizer.
//!
//! A leaf rule calls no other rule (a JSON string, a number, a key literal). The walk
//! that classifies the vocabulary at one of its states (see [`super::mask`]) reads only
//! the rule's own automaton and the bytes that may follow it (`FOLLOW`, for the
//! uncertain/rejected split): nothing else of the grammar. So two grammars whose leaf
//! rules have the same byte-level automaton and the same `FOLLOW` get the same mask at
//! the same state, and the second can take it from the first. JSON-Schema grammars all
//! hold the same string and number rules, whose string-body states cost a walk of most of
//! the vocabulary (about 250 µs each on a 128k vocabulary); with this cache each server
//! pays that once per tokenizer instead of once per schema.
//!
//! The key is the rule's automaton written over bytes (not the grammar's byte classes,
//! which depend on the whole grammar), the state's position in it, and `FOLLOW`; equal
//! keys mean equal walks, so sharing is exact. The cache is bounded by bytes and stops
//! taking new entries when full.

use super::mask::StateMask;
use super::store::Accepted;
use crate::automata::{Automata, DEAD};
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Most states of a rule whose masks are shared (bigger rules are rarely repeated).
const MAX_LEAF_STATES: usize = 1024;

/// A leaf rule's automaton over bytes: per state, its final flag and its byte ranges
/// `(lo, hi, target - rule start)`; `None` for rules that call others or are large.
pub(crate) fn signature(a: &Automata, rule: u32) -> Option<Arc<[u32]>> {
    let start = a.rule_start[rule as usize] as usize;
    let end = a.rule_start.get(rule as usize + 1).map_or(a.nodes.len(), |&e| e as usize);
    if end - start > MAX_LEAF_STATES || (start..end).any(|s| !a.edges(s as u32).is_empty()) {
        return None;
    }
    let mut sig = vec![(end - start) as u32];
    for s in start..end {
        sig.push(a.nodes[s].is_final as u32);
        let row = a.row(s as u32);
        let at = sig.len();
        sig.push(0);
        let mut run: Option<(u32, u32, u32)> = None;
        // Byte classes are contiguous byte ranges in byte order (`automata::byte_classes`),
        // so a pass over the classes visits the bytes in order, a range at a time.
        for (c, bytes) in a.class_bytes.iter().enumerate() {
            let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else { continue };
            let (first, last) = (first as u32, last as u32);
            let t = row.get(c);
            let t = if t == DEAD { DEAD } else { t - start as u32 };
            match run {
                Some((lo, _, rt)) if rt == t => run = Some((lo, last, t)),
                _ => {
                    if let Some((lo, hi, rt)) = run.filter(|r| r.2 != DEAD) {
                        sig.extend([lo, hi, rt]);
                    }
                    run = Some((first, last, t));
                }
            }
        }
        if let Some((lo, hi, rt)) = run.filter(|r| r.2 != DEAD) {
            sig.extend([lo, hi, rt]);
        }
        sig[at] = ((sig.len() - at - 1) / 3) as u32;
    }
    Some(sig.into())
}

/// `(signature, state - rule start, FOLLOW bits)`.
pub(crate) type LeafKey = (Arc<[u32]>, u32, [u64; 4]);

/// Leaf-rule masks of one tokenizer, shared by every grammar its compiler builds.
#[derive(Debug)]
pub(crate) struct LeafMasks {
    map: Mutex<FxHashMap<LeafKey, StateMask>>,
    bytes: AtomicUsize,
    hits: AtomicUsize,
    limit: usize,
}

impl LeafMasks {
    /// An empty cache holding at most about `limit` bytes of masks.
    pub fn new(limit: usize) -> Self {
        Self { map: Mutex::default(), bytes: AtomicUsize::new(0), hits: AtomicUsize::new(0), limit }
    }

    pub fn get(&self, key: &LeafKey) -> Option<StateMask> {
        let m = self.map.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned();
        if m.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        m
    }

    /// `(entries, bytes, hits)`.
    pub fn stats(&self) -> (usize, usize, usize) {
        let n = self.map.lock().unwrap_or_else(|p| p.into_inner()).len();
        (n, self.bytes.load(Ordering::Relaxed), self.hits.load(Ordering::Relaxed))
    }

    pub fn insert(&self, key: LeafKey, m: &StateMask) {
        let size = mask_bytes(m) + key.0.len() * 4;
        if self.bytes.load(Ordering::Relaxed) + size > self.limit {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.insert(key, m.clone()).is_none() {
            self.bytes.fetch_add(size, Ordering::Relaxed);
        }
    }
}

/// Heap bytes a mask's arrays hold.
pub(crate) fn mask_bytes(m: &StateMask) -> usize {
    let accepted = match &m.accepted {
        Accepted::List(v) | Accepted::AllExcept(v) | Accepted::Bitset(v) => v.len(),
        Accepted::Delta { base, flips } => base.len() + flips.len(),
    };
    (accepted + m.uncertain.len()) * 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::automata::AutomataLimits;
    use crate::grammar::Grammar;

    /// The signature written byte by byte, as its definition reads.
    fn by_bytes(a: &Automata, rule: u32) -> Vec<u32> {
        let start = a.rule_start[rule as usize] as usize;
        let end = a.rule_start.get(rule as usize + 1).map_or(a.nodes.len(), |&e| e as usize);
        let mut sig = vec![(end - start) as u32];
        for s in start..end {
            sig.push(a.nodes[s].is_final as u32);
            let mut ranges: Vec<[u32; 3]> = Vec::new();
            for b in 0..=255u32 {
                let t = a.next(s as u32, a.byte_class[b as usize] as usize);
                if t == DEAD {
                    continue;
                }
                let t = t - start as u32;
                match ranges.last_mut() {
                    Some(r) if r[1] + 1 == b && r[2] == t => r[1] = b,
                    _ => ranges.push([b, b, t]),
                }
            }
            sig.push(ranges.len() as u32);
            sig.extend(ranges.into_iter().flatten());
        }
        sig
    }

    fn rule_of(a: &Automata, name: &str) -> u32 {
        a.grammar().rules.iter().position(|r| r.name == name).unwrap() as u32
    }

    #[test]
    fn signatures_name_the_byte_automaton_whatever_the_classes() {
        // Enough alternatives that the optimizer keeps `s` a rule of its own.
        let words: Vec<String> = (0..60).map(|i| format!("\"w{i}\"")).collect();
        let s = format!(r#"s ::= "\"" ({})* "\"""#, words.join(" | "));
        let one = Grammar::from_ebnf(&format!("root ::= s \":\" s\n{s}")).unwrap();
        let two = Grammar::from_ebnf(&format!(
            "root ::= \"[\" s \",\" n \",\" s \",\" n \"]\"\n{s}\nn ::= {}",
            words.iter().map(|w| format!("\"9\" {w}")).collect::<Vec<_>>().join(" | ")
        ))
        .unwrap();
        let (a1, a2) = (
            Automata::build(&one, &AutomataLimits::default()).unwrap(),
            Automata::build(&two, &AutomataLimits::default()).unwrap(),
        );
        assert_ne!(a1.n_classes, a2.n_classes, "the grammars split the bytes differently");
        let (s1, s2, n2) = (rule_of(&a1, "s"), rule_of(&a2, "s"), rule_of(&a2, "n"));
        let sig = |a: &Automata, r: u32| signature(a, r).unwrap().to_vec();
        assert_eq!(sig(&a1, s1), by_bytes(&a1, s1));
        assert_eq!(sig(&a2, n2), by_bytes(&a2, n2));
        assert_eq!(sig(&a1, s1), sig(&a2, s2));
        assert_ne!(sig(&a2, s2), sig(&a2, n2));
    }
}
