//! A simulated model for scale: seeded random logits over a real tokenizer's
//! vocabulary, with a configurable forward time.
//!
//! The logits of a row depend only on the model's seed and the sequence's tokens so
//! far (a rolling hash: the "cache"), so a request gives the same logits whatever batch
//! it runs in. They are cheap to make at large batches (a copy of one of a few random
//! base rows plus a few spikes) and hostile to a grammar: spikes land anywhere in the
//! vocabulary, so only the mask keeps a structured row valid.

use super::{ForwardRow, Model, ModelError};
use crate::step::SeqId;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Base rows drawn at start; each step picks one per row.
const BASE_ROWS: usize = 8;
/// Tokens per row pushed far above the rest, at hashed positions.
const SPIKES: u64 = 16;

/// How a forward spends its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardTime {
    /// Sleep out the rest of the time (the thread is free: models a GPU forward).
    Sleep(Duration),
    /// Busy-wait (a CPU forward that holds a core).
    Spin(Duration),
}

impl ForwardTime {
    fn total(self) -> Duration {
        match self {
            ForwardTime::Sleep(d) | ForwardTime::Spin(d) => d,
        }
    }
}

/// See the [module docs](self).
#[derive(Debug)]
pub struct SimulatedModel {
    vocab: usize,
    seed: u64,
    time: ForwardTime,
    base: Vec<Vec<f32>>,
    /// Per sequence, the rolling hash of its tokens.
    seqs: HashMap<SeqId, u64>,
}

fn mix(mut x: u64) -> u64 {
    // splitmix64's finalizer: a cheap, well-spread hash step.
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl SimulatedModel {
    /// `vocab` columns, logits seeded by `seed`, each forward taking `time`.
    pub fn new(vocab: usize, seed: u64, time: ForwardTime) -> Self {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let base =
            (0..BASE_ROWS).map(|_| (0..vocab).map(|_| rng.gen_range(-4.0f32..4.0)).collect()).collect();
        Self { vocab, seed, time, base, seqs: HashMap::new() }
    }
}

impl Model for SimulatedModel {
    fn vocab_size(&self) -> usize {
        self.vocab
    }

    fn forward(&mut self, rows: &[ForwardRow<'_>], logits: &mut Vec<f32>) -> Result<(), ModelError> {
        let t0 = Instant::now();
        let v = self.vocab;
        logits.resize(rows.len() * v, 0.0);
        for (r, row) in rows.iter().enumerate() {
            let h = self.seqs.entry(row.id).or_insert(mix(self.seed));
            for &t in row.tokens {
                *h = mix(*h ^ u64::from(t).wrapping_mul(0x100_0000_01B3));
            }
            let h = *h;
            let out = &mut logits[r * v..(r + 1) * v];
            out.copy_from_slice(&self.base[(h % BASE_ROWS as u64) as usize]);
            for i in 0..SPIKES {
                let t = (mix(h.wrapping_add(i)) % v as u64) as usize;
                out[t] = 8.0 + i as f32 * 0.25;
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
        Ok(())
    }

    fn release(&mut self, id: SeqId) {
        self.seqs.remove(&id);
    }

    fn name(&self) -> String {
        format!("simulated (vocab {}, seed {}, forward {:?})", self.vocab, self.seed, self.time.total())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logits_depend_on_the_tokens_only() {
        let mut m = SimulatedModel::new(1000, 7, ForwardTime::Sleep(Duration::ZERO));
        let (mut a, mut b) = (Vec::new(), Vec::new());
        m.forward(&[ForwardRow { id: 1, tokens: &[5, 6] }, ForwardRow { id: 2, tokens: &[9] }], &mut a)
            .unwrap();
        // The same prefix fed differently (one token at a time, another batch position).
        m.forward(&[ForwardRow { id: 3, tokens: &[5] }], &mut b).unwrap();
        m.forward(&[ForwardRow { id: 4, tokens: &[1] }, ForwardRow { id: 3, tokens: &[6] }], &mut b).unwrap();
        assert_eq!(a[..1000], b[1000..]);
        assert_ne!(a[..1000], a[1000..]);
        // A released sequence starts afresh.
        m.release(3);
        m.forward(&[ForwardRow { id: 3, tokens: &[5, 6] }], &mut b).unwrap();
        assert_eq!(a[..1000], b[..1000]);
    }
}
