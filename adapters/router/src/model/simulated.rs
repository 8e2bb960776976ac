//! A simulated model for scale: seeded random logits over a real tokenizer's
//! vocabulary, with a configurable forward time.
//!
//! The logits of a row depend only on the model's seed and the sequence's tokens so
//! far (a rolling hash: the "cache"), so a request gives the same logits whatever batch
//! it runs in. They are cheap to make at large batches (a copy of one of a few random
//! base rows plus a few spikes) and hostile to a grammar: spikes land anywhere in the
//! vocabulary, so only the mask keeps a structured row valid.
//!
//! Draft trees are verified in one forward ([`Model::max_draft_nodes`]): a node's logits
//! are those of its sequence with the node's path appended, exactly what feeding the
//! path one token at a time gives; [`SimulatedModel::with_token_time`] makes every token
//! beyond one per row cost forward time, so that speculation is not free.
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
/// Most draft nodes a row may carry.
const MAX_DRAFT_NODES: usize = 256;

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
    /// Tokens the sequence has taken after its first forward (its prompt) up to this row:
    /// how far into its output the row is.
    pub generated: u32,
}

/// The sequences' rolling hashes: the part of the simulated model that is the same on
/// the host and on a device.
#[derive(Debug)]
pub(crate) struct SimulatedCache {
    pub vocab: usize,
    pub seed: u64,
    /// Each sequence's context hash and the tokens it took after its first forward.
    seqs: HashMap<SeqId, (u64, u32)>,
    /// The last forward's draft per sequence.
    drafts: HashMap<SeqId, Draft>,
}

/// A forward's draft tree as the cache keeps it until the commit: each node's parent,
/// context hash and output position.
#[derive(Debug)]
struct Draft {
    parents: Vec<Option<usize>>,
    hashes: Vec<u64>,
    generated: Vec<u32>,
}

/// The context hash after one more token.
fn extend(h: u64, t: u32) -> u64 {
    mix(h ^ u64::from(t).wrapping_mul(0x100_0000_01B3))
}

impl SimulatedCache {
    pub fn new(vocab: usize, seed: u64) -> Self {
        Self { vocab, seed, seqs: HashMap::new(), drafts: HashMap::new() }
    }

    fn plan_of(&self, h: u64, generated: u32) -> RowPlan {
        let v = self.vocab.max(1) as u64;
        let mut spikes = [0u32; SPIKES];
        for (i, s) in spikes.iter_mut().enumerate() {
            *s = (mix(h.wrapping_add(i as u64)) % v) as u32;
        }
        RowPlan { base: (h % BASE_ROWS as u64) as u32, spikes, generated }
    }

    /// Appends the row's tokens to its sequence and says how its logits are made.
    pub fn plan(&mut self, row: &ForwardRow<'_>) -> RowPlan {
        self.drafts.remove(&row.id);
        let seed = mix(self.seed);
        // The first forward is the prompt: the output starts after it.
        let generated = self.seqs.contains_key(&row.id);
        let h = self.seqs.entry(row.id).or_insert((seed, 0));
        for &t in row.tokens {
            h.0 = extend(h.0, t);
        }
        if generated {
            h.1 = h.1.saturating_add(row.tokens.len() as u32);
        }
        let (h, g) = *h;
        self.plan_of(h, g)
    }

    /// [`plan`](Self::plan) (with [`ForwardRow::all_logits`], one plan per token), then one
    /// plan per draft node (its path appended), the draft kept aside for
    /// [`commit`](Self::commit).
    pub fn plan_tree(&mut self, row: &ForwardRow<'_>, out: &mut Vec<RowPlan>) {
        if let Some(from) = row.fork_of {
            // A copy of `from`'s context (its row came earlier in this forward).
            self.drafts.remove(&row.id);
            let h = self.seqs.get(&from).copied().unwrap_or((mix(self.seed), 0));
            self.seqs.insert(row.id, h);
            out.push(self.plan_of(h.0, h.1));
            return;
        }
        if row.all_logits && row.tokens.len() > 1 {
            self.drafts.remove(&row.id);
            let known = self.seqs.get(&row.id).copied();
            let (mut h, mut g) = known.unwrap_or((mix(self.seed), 0));
            for &t in row.tokens {
                h = extend(h, t);
                g = g.saturating_add(u32::from(known.is_some()));
                out.push(self.plan_of(h, g));
            }
            self.seqs.insert(row.id, (h, g));
        } else {
            out.push(self.plan(row));
        }
        let Some(tree) = row.draft else { return };
        let (root, root_generated) = self.seqs.get(&row.id).copied().unwrap_or((mix(self.seed), 0));
        let mut hashes = vec![root; tree.len()];
        let mut depths = vec![root_generated; tree.len()];
        let mut parents = vec![None; tree.len()];
        // A node may come before its parent in the tree's numbering: each node's hash is
        // resolved from its nearest known ancestor, once.
        let mut known = vec![false; tree.len()];
        known[0] = true;
        for v in 1..tree.len() {
            let mut path = Vec::new();
            let mut u = v;
            while !known[u] {
                path.push(u);
                u = tree.parent(u).unwrap_or(0);
            }
            for &w in path.iter().rev() {
                let p = tree.parent(w).unwrap_or(0);
                hashes[w] = extend(hashes[p], tree.token(w).unwrap_or(0));
                depths[w] = depths[p].saturating_add(1);
                parents[w] = tree.parent(w);
                known[w] = true;
            }
            out.push(self.plan_of(hashes[v], depths[v]));
        }
        self.drafts.insert(row.id, Draft { parents, hashes, generated: depths });
    }

    /// Keeps the draft path `path` of the last forward in the sequence's context.
    pub fn commit(&mut self, id: SeqId, path: &[usize]) -> Result<(), ModelError> {
        if path.is_empty() {
            self.drafts.remove(&id);
            return Ok(());
        }
        let Draft { parents, hashes, generated: depths } = self
            .drafts
            .remove(&id)
            .ok_or_else(|| ModelError(format!("sequence {id}: no draft to commit")))?;
        let mut at = 0;
        for &v in path {
            if v == 0 || parents.get(v).copied().flatten() != Some(at) {
                return Err(ModelError(format!("sequence {id}: draft node {v} is not a child of node {at}")));
            }
            at = v;
        }
        self.seqs.insert(id, (hashes[at], depths[at]));
        Ok(())
    }

    pub fn release(&mut self, id: SeqId) {
        self.seqs.remove(&id);
        self.drafts.remove(&id);
    }
}

/// A simulated model for scale: seeded random logits over a real tokenizer's
/// vocabulary, with a configurable forward time.
#[derive(Debug)]
pub struct SimulatedModel {
    cache: SimulatedCache,
    time: ForwardTime,
    /// Forward time per token beyond one per row (prompt tokens, jump-forward tokens,
    /// draft nodes).
    token_time: Duration,
    base: Vec<Vec<f32>>,
    logits: Vec<f32>,
    /// Tokens pushed up, and by how much.
    boosts: Vec<(Vec<u32>, f32)>,
    /// Tokens pushed up more the further a row is into its output: (tokens, after how
    /// many output tokens, bias per token past that).
    ramps: Vec<(Vec<u32>, u32, f32)>,
    plans: Vec<RowPlan>,
}

impl SimulatedModel {
    /// `vocab` columns, logits seeded by `seed`, each forward taking `time`.
    pub fn new(vocab: usize, seed: u64, time: ForwardTime) -> Self {
        let base = (0..BASE_ROWS).map(|k| (0..vocab).map(|j| base_value(seed, k, j)).collect()).collect();
        Self {
            cache: SimulatedCache::new(vocab, seed),
            time,
            token_time: Duration::ZERO,
            base,
            logits: Vec::new(),
            boosts: Vec::new(),
            ramps: Vec::new(),
            plans: Vec::new(),
        }
    }

    /// Each token of a forward beyond one per row adds `per_token` to its time (a real
    /// forward grows with its tokens: prefill, jump-forward tokens, draft nodes).
    pub fn with_token_time(mut self, per_token: Duration) -> Self {
        self.token_time = per_token;
        self
    }

    /// Adds `bias` to the logits of `tokens` in every row (on top of earlier boosts).
    /// Pushing up the tokens that close strings, objects and arrays (and the stop tokens)
    /// makes random documents end within a few hundred tokens — and makes the model
    /// harsher: without the mask it would close structures everywhere.
    pub fn with_boost(mut self, tokens: Vec<u32>, bias: f32) -> Self {
        self.boosts.push((tokens, bias));
        self
    }

    /// Adds `per_token × (n − after)` to the logits of `tokens` in a row `n` tokens into
    /// its output, once `n > after` (the prompt's forward is not output). Pushing the
    /// closers and stop tokens up harder as an output grows makes nearly every random
    /// output end, however long its free strings, while its first tokens are as random as
    /// without: a suite can then judge complete outputs rather than cut-off ones.
    pub fn with_closing_ramp(mut self, tokens: Vec<u32>, after: u32, per_token: f32) -> Self {
        self.ramps.push((tokens, after, per_token));
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
        let mut plans = std::mem::take(&mut self.plans);
        plans.clear();
        let mut extra = 0usize;
        for row in rows {
            self.cache.plan_tree(row, &mut plans);
            extra += (row.tokens.len() + row.logits_rows()).saturating_sub(2);
        }
        self.logits.resize(plans.len() * v, 0.0);
        for (r, plan) in plans.iter().enumerate() {
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
            for (tokens, after, per_token) in &self.ramps {
                let past = plan.generated.saturating_sub(*after);
                if past == 0 {
                    continue;
                }
                let bias = per_token * past as f32;
                for &t in tokens {
                    if let Some(x) = out.get_mut(t as usize) {
                        *x += bias;
                    }
                }
            }
        }
        self.plans = plans;
        let extra = self.token_time * extra as u32;
        match self.time {
            ForwardTime::Sleep(d) => std::thread::sleep((d + extra).saturating_sub(t0.elapsed())),
            ForwardTime::Spin(d) => {
                let d = d + extra;
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

    fn max_draft_nodes(&self) -> usize {
        MAX_DRAFT_NODES
    }

    fn can_fork(&self) -> bool {
        true
    }

    fn commit(&mut self, id: SeqId, path: &[usize]) -> Result<(), ModelError> {
        self.cache.commit(id, path)
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
        let a = host(m.forward(&[ForwardRow::new(1, &[5, 6]), ForwardRow::new(2, &[9])]).unwrap());
        // The same prefix fed differently (one token at a time, another batch position).
        m.forward(&[ForwardRow::new(3, &[5])]).unwrap();
        let b = host(m.forward(&[ForwardRow::new(4, &[1]), ForwardRow::new(3, &[6])]).unwrap());
        assert_eq!(a[..1000], b[1000..]);
        assert_ne!(a[..1000], a[1000..]);
        // A released sequence starts afresh.
        m.release(3);
        let c = host(m.forward(&[ForwardRow::new(3, &[5, 6])]).unwrap());
        assert_eq!(a[..1000], c[..1000]);
        // Spikes stand out; base values stay in [-4, 4).
        assert_eq!(
            a[..1000].iter().filter(|&&x| x >= 8.0).count(),
            a[..1000].iter().filter(|&&x| x > 4.0).count()
        );
        assert!(a.iter().all(|&x| (-4.0..4.0).contains(&x) || x >= 8.0));
    }

    #[test]
    fn a_draft_tree_gives_each_node_the_logits_of_its_path_and_commits_one_path() {
        use grammask::matcher::DraftTree;
        let v = 500;
        let mut m = SimulatedModel::new(v, 11, ForwardTime::Sleep(Duration::ZERO));
        //   root(after [3, 4]) ─ 1:7 ─ 3:9
        //                     └ 2:8
        let tree = DraftTree::from_parents(&[-1, 7, 8, 9], &[-1, 0, 0, 1]).unwrap();
        let rows =
            [ForwardRow { draft: Some(&tree), ..ForwardRow::new(1, &[3, 4]) }, ForwardRow::new(2, &[3])];
        let a = host(m.forward(&rows).unwrap());
        assert_eq!(a.len(), 5 * v);
        // Each node's logits are those of feeding its path one token at a time.
        let mut seq = SimulatedModel::new(v, 11, ForwardTime::Sleep(Duration::ZERO));
        let mut by_path = |path: &[u32]| {
            seq.release(9);
            host(seq.forward(&[ForwardRow::new(9, path)]).unwrap())
        };
        assert_eq!(a[..v], by_path(&[3, 4])[..]);
        assert_eq!(a[v..2 * v], by_path(&[3, 4, 7])[..]);
        assert_eq!(a[2 * v..3 * v], by_path(&[3, 4, 8])[..]);
        assert_eq!(a[3 * v..4 * v], by_path(&[3, 4, 7, 9])[..]);
        assert_eq!(a[4 * v..], by_path(&[3])[..]);
        // Not a path: refused; then the path 1 → 3 is kept and the next token follows it.
        assert!(m.commit(1, &[3]).is_err());
        let a = host(m.forward(&[ForwardRow { draft: Some(&tree), ..ForwardRow::new(1, &[3, 4]) }]).unwrap());
        assert_eq!(a[..v], by_path(&[3, 4, 3, 4])[..]);
        m.commit(1, &[1, 3]).unwrap();
        let b = host(m.forward(&[ForwardRow::new(1, &[5])]).unwrap());
        assert_eq!(b, by_path(&[3, 4, 3, 4, 7, 9, 5]));
        // A forward without a commit drops the draft.
        m.forward(&[ForwardRow { draft: Some(&tree), ..ForwardRow::new(1, &[6]) }]).unwrap();
        let c = host(m.forward(&[ForwardRow::new(1, &[2])]).unwrap());
        assert_eq!(c, by_path(&[3, 4, 3, 4, 7, 9, 5, 6, 2]));
        assert!(m.commit(1, &[1]).is_err());
        // A fork: the copy's logits are its source's, and it goes on as the source would.
        let f = host(
            m.forward(&[
                ForwardRow::new(6, &[3, 4]),
                ForwardRow { fork_of: Some(6), ..ForwardRow::new(7, &[]) },
            ])
            .unwrap(),
        );
        assert_eq!(f[..v], f[v..]);
        let g = host(m.forward(&[ForwardRow::new(7, &[9])]).unwrap());
        assert_eq!(g, by_path(&[3, 4, 9]));
        // Every token's logits, then a draft's.
        let all = host(
            m.forward(&[ForwardRow {
                all_logits: true,
                draft: Some(&tree),
                ..ForwardRow::new(5, &[3, 4, 5])
            }])
            .unwrap(),
        );
        assert_eq!(all.len(), 6 * v);
        assert_eq!(all[..v], by_path(&[3])[..]);
        assert_eq!(all[v..2 * v], by_path(&[3, 4])[..]);
        assert_eq!(all[2 * v..3 * v], by_path(&[3, 4, 5])[..]);
        assert_eq!(all[3 * v..4 * v], by_path(&[3, 4, 5, 7])[..]);
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
