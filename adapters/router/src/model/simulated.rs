//! A simulated model for scale: seeded random logits over a real tokenizer's
//! vocabulary, with a configurable forward time.
//!
//! The logits of a row depend only on the model's seed and the sequence's tokens so
//! far (a rolling hash: the "cache"), so a request gives the same logits whatever batch
//! it runs in. They are cheap to make at large batches (a copy of one of a few random
//! base rows plus a few spikes) and hostile to a grammar: spikes land anywhere in the
//! vocabulary, so only the mask keeps a structured row valid.
//!
//! Every value is a function of integers (a hash of the seed, the base row and the
//! column), computed exactly in `f32`, so the CUDA variant
//! (`CudaSimulatedModel`, feature `cuda`) writes bit-for-bit the same logits on a GPU.

use super::{Forward, ForwardRow, Model, ModelError, StepLogits};
use crate::step::SeqId;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Base rows made at start; each step picks one per row.
pub(crate) const BASE_ROWS: usize = 8;
/// Tokens per row pushed far above the rest, at hashed positions.
pub(crate) const SPIKES: usize = 16;

/// How a forward spends its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardTime {
    /// Sleep out the rest of the time (the thread is free: models a GPU forward).
    Sleep(Duration),
    /// Busy-wait (a CPU forward that holds a core).
    Spin(Duration),
}

impl ForwardTime {
    /// The forward's duration.
    pub fn total(self) -> Duration {
        match self {
            ForwardTime::Sleep(d) | ForwardTime::Spin(d) => d,
        }
    }
}

pub(crate) fn mix(mut x: u64) -> u64 {
    // splitmix64's finalizer: a cheap, well-spread hash step.
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The value of column `j` of base row `k`: uniform in [−4, 4) on a 2⁻²¹ grid, so
/// that the host and the device compute it exactly alike.
pub(crate) fn base_value(seed: u64, k: usize, j: usize) -> f32 {
    let h = mix(mix(seed ^ 0xBA5E) ^ ((k as u64) << 40) ^ j as u64);
    (h >> 40) as f32 * (8.0 / 16_777_216.0) - 4.0
}

/// The value of a row's `i`-th spike.
pub(crate) fn spike_value(i: usize) -> f32 {
    8.0 + i as f32 * 0.25
}

/// What a row's logits are made of: a base row and the spikes written over it, in
/// order (a later spike at the same column wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowPlan {
    pub base: u32,
    pub spikes: [u32; SPIKES],
}

/// The sequences' rolling hashes: the part of the simulated model that is the same on
/// the host and on a device.
#[derive(Debug)]
pub(crate) struct SimulatedCache {
    pub vocab: usize,
    pub seed: u64,
    seqs: HashMap<SeqId, u64>,
}

impl SimulatedCache {
    pub fn new(vocab: usize, seed: u64) -> Self {
        Self { vocab, seed, seqs: HashMap::new() }
    }

    /// Appends the row's tokens to its sequence and says how its logits are made.
    pub fn plan(&mut self, row: &ForwardRow<'_>) -> RowPlan {
        let h = self.seqs.entry(row.id).or_insert(mix(self.seed));
        for &t in row.tokens {
            *h = mix(*h ^ u64::from(t).wrapping_mul(0x100_0000_01B3));
        }
        let h = *h;
        let v = self.vocab.max(1) as u64;
        let mut spikes = [0u32; SPIKES];
        for (i, s) in spikes.iter_mut().enumerate() {
            *s = (mix(h.wrapping_add(i as u64)) % v) as u32;
        }
        RowPlan { base: (h % BASE_ROWS as u64) as u32, spikes }
    }

    pub fn release(&mut self, id: SeqId) {
        self.seqs.remove(&id);
    }
}

/// A simulated model for scale: seeded random logits over a real tokenizer's
/// vocabulary, with a configurable forward time.
#[derive(Debug)]
pub struct SimulatedModel {
    cache: SimulatedCache,
    time: ForwardTime,
    base: Vec<Vec<f32>>,
    logits: Vec<f32>,
    /// Tokens pushed up, and by how much.
    boosts: Vec<(Vec<u32>, f32)>,
}

impl SimulatedModel {
    /// `vocab` columns, logits seeded by `seed`, each forward taking `time`.
    pub fn new(vocab: usize, seed: u64, time: ForwardTime) -> Self {
        let base = (0..BASE_ROWS).map(|k| (0..vocab).map(|j| base_value(seed, k, j)).collect()).collect();
        Self { cache: SimulatedCache::new(vocab, seed), time, base, logits: Vec::new(), boosts: Vec::new() }
    }

    /// Adds `bias` to the logits of `tokens` in every row (on top of earlier boosts).
    /// Pushing up the tokens that close strings, objects and arrays (and the stop tokens)
    /// makes random documents end within a few hundred tokens — and makes the model
    /// harsher: without the mask it would close structures everywhere.
    pub fn with_boost(mut self, tokens: Vec<u32>, bias: f32) -> Self {
        self.boosts.push((tokens, bias));
        self
    }
}

impl Model for SimulatedModel {
    fn vocab_size(&self) -> usize {
        self.cache.vocab
    }

    fn forward(&mut self, rows: &[ForwardRow<'_>]) -> Result<Forward<'_>, ModelError> {
        let t0 = Instant::now();
        let v = self.cache.vocab;
        self.logits.resize(rows.len() * v, 0.0);
        for (r, row) in rows.iter().enumerate() {
            let plan = self.cache.plan(row);
            let out = &mut self.logits[r * v..(r + 1) * v];
            out.copy_from_slice(&self.base[plan.base as usize]);
            for (i, &t) in plan.spikes.iter().enumerate() {
                out[t as usize] = spike_value(i);
            }
            for (tokens, bias) in &self.boosts {
                for &t in tokens {
                    if let Some(x) = out.get_mut(t as usize) {
                        *x += bias;
                    }
                }
            }
        }
        match self.time {
            ForwardTime::Sleep(d) => std::thread::sleep(d.saturating_sub(t0.elapsed())),
            ForwardTime::Spin(d) => {
                while t0.elapsed() < d {
                    std::hint::spin_loop();
                }
            }
        }
        Ok(StepLogits::Host(&mut self.logits).into())
    }

    fn release(&mut self, id: SeqId) {
        self.cache.release(id);
    }

    fn name(&self) -> String {
        format!(
            "simulated (vocab {}, seed {}, forward {:?})",
            self.cache.vocab,
            self.cache.seed,
            self.time.total()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(l: Forward<'_>) -> Vec<f32> {
        match l.logits {
            StepLogits::Host(l) => l.to_vec(),
            #[cfg(feature = "cuda")]
            StepLogits::Cuda(_) => panic!("host model gave device logits"),
        }
    }

    #[test]
    fn logits_depend_on_the_tokens_only() {
        let mut m = SimulatedModel::new(1000, 7, ForwardTime::Sleep(Duration::ZERO));
        let a = host(
            m.forward(&[ForwardRow { id: 1, tokens: &[5, 6] }, ForwardRow { id: 2, tokens: &[9] }]).unwrap(),
        );
        // The same prefix fed differently (one token at a time, another batch position).
        m.forward(&[ForwardRow { id: 3, tokens: &[5] }]).unwrap();
        let b = host(
            m.forward(&[ForwardRow { id: 4, tokens: &[1] }, ForwardRow { id: 3, tokens: &[6] }]).unwrap(),
        );
        assert_eq!(a[..1000], b[1000..]);
        assert_ne!(a[..1000], a[1000..]);
        // A released sequence starts afresh.
        m.release(3);
        let c = host(m.forward(&[ForwardRow { id: 3, tokens: &[5, 6] }]).unwrap());
        assert_eq!(a[..1000], c[..1000]);
        // Spikes stand out; base values stay in [-4, 4).
        assert_eq!(
            a[..1000].iter().filter(|&&x| x >= 8.0).count(),
            a[..1000].iter().filter(|&&x| x > 4.0).count()
        );
        assert!(a.iter().all(|&x| (-4.0..4.0).contains(&x) || x >= 8.0));
    }

    #[test]
    fn base_values_are_exact_on_the_grid() {
        for j in 0..2000 {
            let x = base_value(3, j % BASE_ROWS, j);
            // n × 2⁻²¹ − 4 with n < 2²⁴: exact in f32 whatever computes it.
            let n = f64::from(x + 4.0) * f64::from(1u32 << 21);
            assert_eq!(n, n.trunc());
            assert!((0.0..16_777_216.0).contains(&n));
        }
    }
}
