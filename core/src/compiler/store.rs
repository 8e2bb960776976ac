//! Where the compiled grammar keeps its token masks: every distinct id list stored once,
//! and bitsets stored as a few shared bases plus short lists of differing ids.
//!
//! The states of one grammar accept nearly the same tokens in many places: each point
//! where C's grammar expects an expression accepts every identifier-like token, and
//! states differ by a handful of ids (whether `"=="` or `" ("` may follow). On `c.gbnf`
//! with Llama-3.1, 48 distinct bitsets of 16 KiB each sit at Hamming distance 1–15 from
//! their nearest neighbour. Storing a bitset as `base XOR flips` when a base within
//! [`MAX_FLIPS`] ids exists keeps one full bitset per cluster, and filling a mask from it
//! costs one copy plus a few bit toggles, like the bitset itself.

use crate::tokenizer::TokenizerInfo;
use rustc_hash::FxHashSet;
use std::sync::{Arc, Mutex};

/// The accepted part of a [`StateMask`](super::StateMask): the forms a mask is stored in.
#[derive(Debug, Clone)]
pub(crate) enum Accepted {
    /// Exactly these token ids.
    List(Arc<[u32]>),
    /// Every producible token except these ids.
    AllExcept(Arc<[u32]>),
    /// A bitset in mask layout.
    Bitset(Arc<[u32]>),
    /// The bitset `base` with the bits of these ids toggled.
    Delta {
        /// A bitset in mask layout, shared with other states.
        base: Arc<[u32]>,
        /// Ids whose bit differs from `base`, ascending.
        flips: Arc<[u32]>,
    },
}

impl Accepted {
    /// The same set with the membership of each of `flips` (ascending producible ids)
    /// toggled, in the same form; `now` is the resulting set as a bitset. (Lists are in
    /// trie order, not id order: they are filtered, not merged.)
    pub(super) fn patched(&self, flips: &[u32], now: &[u32], store: &MaskStore) -> Accepted {
        let has = |id: &&u32| now[**id as usize / 32] >> (**id % 32) & 1 == 1;
        match self {
            Accepted::List(ids) => {
                Accepted::List(store.intern(ids.iter().chain(flips).filter(has).copied().collect()))
            }
            Accepted::AllExcept(ex) => Accepted::AllExcept(
                store.intern(ex.iter().chain(flips).filter(|id| !has(id)).copied().collect()),
            ),
            Accepted::Bitset(b) if flips.is_empty() => Accepted::Bitset(b.clone()),
            Accepted::Bitset(b) => Accepted::Delta { base: b.clone(), flips: store.intern(flips.to_vec()) },
            Accepted::Delta { base, flips: f } => {
                Accepted::Delta { base: base.clone(), flips: store.intern(toggled(f, flips)) }
            }
        }
    }

    /// The accepted ids as a bitset in mask layout.
    pub(crate) fn to_words(&self, tok: &TokenizerInfo) -> Vec<u32> {
        let words = tok.vocab_size().div_ceil(32);
        match self {
            Accepted::List(ids) => {
                let mut w = vec![0u32; words];
                ids.iter().for_each(|&id| w[id as usize / 32] |= 1 << (id % 32));
                w
            }
            Accepted::AllExcept(ex) => {
                let mut w = tok.normal_words().to_vec();
                ex.iter().for_each(|&id| w[id as usize / 32] &= !(1 << (id % 32)));
                w
            }
            Accepted::Bitset(b) => b.to_vec(),
            Accepted::Delta { base, flips } => {
                let mut w = base.to_vec();
                flips.iter().for_each(|&id| w[id as usize / 32] ^= 1 << (id % 32));
                w
            }
        }
    }
}

/// The symmetric difference of two ascending lists.
fn toggled(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// The token-mask storage of one compiled grammar.
#[derive(Debug, Default)]
pub(crate) struct MaskStore {
    /// Every distinct id list, flip list and bitset, stored once.
    interned: Mutex<FxHashSet<Arc<[u32]>>>,
    /// Bitsets stored in full, with their population counts.
    bases: Mutex<Vec<(u32, Arc<[u32]>)>>,
    /// Heap bytes of `interned` ([`Self::bytes`]): kept as they grow, so that a fill can
    /// hold a grammar to its mask memory cap without walking the set.
    bytes: std::sync::atomic::AtomicUsize,
    /// Where new masks are reported (the compiler's cache, which counts them).
    pub(super) account: std::sync::OnceLock<Arc<super::cache::Account>>,
}

/// A bitset is stored as a delta when it differs from a base in at most `words / 32` ids
/// (125 for a 128k vocabulary): the flip list is then at most 1/32 of the bitset's size,
/// and toggling it costs well under copying the base. (A quarter, the id lists' bound,
/// saved little more memory but made the builtin JSON grammar's fills ~20 % slower:
/// states at distance ~900 from their base.)
const MAX_FLIPS_PER_WORD: usize = 32;

impl MaskStore {
    /// The shared copy of `list`.
    pub fn intern(&self, list: Vec<u32>) -> Arc<[u32]> {
        // A panic inside this short critical section cannot leave the set inconsistent.
        let mut set = self.interned.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = set.get(list.as_slice()) {
            return existing.clone();
        }
        let shared: Arc<[u32]> = list.into();
        let added = list_bytes(&shared);
        self.bytes.fetch_add(added, std::sync::atomic::Ordering::Relaxed);
        set.insert(shared.clone());
        drop(set);
        if let Some(a) = self.account.get() {
            a.grew(added);
        }
        shared
    }

    /// Makes a bitset read back from bytes a base for later deltas (it is interned
    /// already).
    pub fn adopt_base(&self, bits: Arc<[u32]>) {
        let mut bases = self.bases.lock().unwrap_or_else(|p| p.into_inner());
        if !bases.iter().any(|(_, b)| Arc::ptr_eq(b, &bits)) {
            let ones = bits.iter().map(|w| w.count_ones()).sum();
            bases.push((ones, bits));
        }
    }

    /// Stores a bitset (mask layout): as a delta from the nearest base when one is close
    /// enough, otherwise in full (and it becomes a base).
    pub fn bitset(&self, bits: Vec<u32>) -> Accepted {
        let max_flips = bits.len() / MAX_FLIPS_PER_WORD;
        let ones: u32 = bits.iter().map(|w| w.count_ones()).sum();
        let mut bases = self.bases.lock().unwrap_or_else(|p| p.into_inner());
        // (distance, index) of the nearest base within reach.
        let mut best: Option<(usize, usize)> = None;
        for (i, (count, base)) in bases.iter().enumerate() {
            let limit = best.map_or(max_flips, |b| b.0);
            // The popcount difference bounds the distance from below: most bases are
            // ruled out without reading them.
            if count.abs_diff(ones) as usize > limit {
                continue;
            }
            let d = hamming(&bits, base, limit);
            if d <= limit {
                best = Some((d, i));
            }
        }
        if let Some((d, i)) = best {
            let base = bases[i].1.clone();
            drop(bases);
            if d == 0 {
                return Accepted::Bitset(base);
            }
            let flips = crate::bitmask::set_bits(bits.iter().zip(base.iter()).map(|(a, b)| a ^ b)).collect();
            return Accepted::Delta { base, flips: self.intern(flips) };
        }
        let shared = self.intern(bits);
        if !bases.iter().any(|(_, b)| Arc::ptr_eq(b, &shared)) {
            bases.push((ones, shared.clone()));
        }
        Accepted::Bitset(shared)
    }

    /// Heap bytes of the stored lists and bitsets (kept as they are stored: no lock).
    pub fn bytes(&self) -> usize {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Heap bytes of one stored list (its words and the `Arc`'s counts), and its slot among
/// the bases if it becomes one.
fn list_bytes(list: &[u32]) -> usize {
    list.len() * 4 + 16 + 20
}

/// Number of differing bits, or anything above `limit` once it is exceeded.
fn hamming(a: &[u32], b: &[u32], limit: usize) -> usize {
    let mut d = 0usize;
    for (x, y) in a.chunks(64).zip(b.chunks(64)) {
        d += x.iter().zip(y).map(|(p, q)| (p ^ q).count_ones() as usize).sum::<usize>();
        if d > limit {
            return d;
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(a: &Accepted) -> Vec<u32> {
        match a {
            Accepted::Bitset(b) => b.to_vec(),
            Accepted::Delta { base, flips } => {
                let mut w = base.to_vec();
                flips.iter().for_each(|&id| w[id as usize / 32] ^= 1 << (id % 32));
                w
            }
            _ => unreachable!("bitset() stores bitsets or deltas"),
        }
    }

    #[test]
    fn near_bitsets_become_deltas_of_one_base() {
        let store = MaskStore::default();
        let words = 512; // up to 16 flips
        let base: Vec<u32> = (0..words).map(|i| (i as u32).wrapping_mul(0x9E37_79B9)).collect();
        let a = store.bitset(base.clone());
        assert!(matches!(a, Accepted::Bitset(_)));
        // 3 bits changed, in both directions: a delta that rebuilds it exactly.
        let mut near = base.clone();
        near[0] ^= 0b101;
        near[511] ^= 1 << 31;
        let b = store.bitset(near.clone());
        match &b {
            Accepted::Delta { flips, .. } => assert_eq!(&flips[..], &[0, 2, 511 * 32 + 31]),
            other => panic!("expected a delta, got {other:?}"),
        }
        assert_eq!(expand(&b), near);
        // Too far (17 flips > 512 / 32): stored in full, and becomes a second base.
        let mut far = base.clone();
        (0..17).for_each(|i| far[i] ^= 1);
        let c = store.bitset(far.clone());
        assert!(matches!(c, Accepted::Bitset(_)));
        assert_eq!(expand(&c), far);
        // The same bitset again: the very same base, shared.
        match (store.bitset(base.clone()), &a) {
            (Accepted::Bitset(x), Accepted::Bitset(y)) => assert!(Arc::ptr_eq(&x, y)),
            (other, _) => panic!("expected the shared base, got {other:?}"),
        }
    }
}
