//! [`SliceInterner`]: the subset constructions' table of state sets.

use rustc_hash::FxHashMap;

/// No id (the end of a hash chain).
const NONE: u32 = u32::MAX;

/// Interns `u32` slices: ids in insertion order, all slices in one arena (one allocation
/// for all DFA states' NFA sets instead of two per state).
#[derive(Default)]
pub(crate) struct SliceInterner {
    arena: Vec<u32>,
    /// `arena[ranges[id].0..ranges[id].1]`.
    ranges: Vec<(u32, u32)>,
    /// Hash of a slice → the last id with that hash; earlier ones via `next_same_hash`.
    by_hash: FxHashMap<u64, u32>,
    next_same_hash: Vec<u32>,
}

impl SliceInterner {
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Empties the interner, keeping its allocations.
    pub(crate) fn clear(&mut self) {
        self.arena.clear();
        self.ranges.clear();
        self.by_hash.clear();
        self.next_same_hash.clear();
    }

    pub(crate) fn get(&self, id: u32) -> &[u32] {
        let (a, b) = self.ranges[id as usize];
        &self.arena[a as usize..b as usize]
    }

    /// The id of `key`, and whether it is new.
    pub(crate) fn intern(&mut self, key: &[u32]) -> (u32, bool) {
        let h = {
            use std::hash::{Hash, Hasher};
            let mut h = rustc_hash::FxHasher::default();
            key.hash(&mut h);
            h.finish()
        };
        let mut id = self.by_hash.get(&h).copied().unwrap_or(NONE);
        while id != NONE {
            if self.get(id) == key {
                return (id, false);
            }
            id = self.next_same_hash[id as usize];
        }
        let id = self.ranges.len() as u32;
        self.ranges.push((self.arena.len() as u32, (self.arena.len() + key.len()) as u32));
        self.arena.extend_from_slice(key);
        self.next_same_hash.push(self.by_hash.insert(h, id).unwrap_or(NONE));
        (id, true)
    }
}
